//! Tensors as a model stores them: initializers and tensor attributes.
//!
//! A [`StoredTensor`] keeps its payload in the form the file used (raw bytes, a typed field, or an
//! external file), so saving writes back exactly what was read. Raw and external payloads are
//! [`Bytes`] slices of the memory-mapped file: loading a model copies no weights, and a rewrite
//! that does not touch a tensor never reads it.

use std::borrow::Cow;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::DataType;

/// A tensor stored in a model.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTensor {
    /// `None` for unnamed tensors (allowed in attributes).
    pub name: Option<String>,
    pub elem: DataType,
    /// Dimensions, checked non-negative at load.
    pub dims: Vec<i64>,
    pub payload: Payload,
    pub doc_string: Option<String>,
    pub metadata_props: Vec<(String, String)>,
    /// `segment` (begin, end), kept for a lossless round trip.
    pub segment: Option<(Option<i64>, Option<i64>)>,
}

/// Where and how a tensor's elements are stored.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// `raw_data`: little-endian bytes, sub-byte types packed.
    Raw(Bytes),
    /// `float_data` (float, complex64).
    Float(Vec<f32>),
    /// `int32_data` (int32 and every narrower type, bit patterns for float16/bfloat16/float8).
    Int32(Vec<i32>),
    /// `int64_data`.
    Int64(Vec<i64>),
    /// `double_data` (double, complex128).
    Double(Vec<f64>),
    /// `uint64_data` (uint32, uint64).
    Uint64(Vec<u64>),
    /// `string_data`.
    String(Vec<Vec<u8>>),
    /// `data_location = EXTERNAL`.
    External(ExternalData),
}

/// A tensor payload held in a file beside the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalData {
    /// The `external_data` entries in file order, for a lossless round trip.
    pub entries: Vec<(String, String)>,
    /// The validated relative location.
    pub location: String,
    pub offset: u64,
    /// The bytes, mapped from the file (empty until resolved by the loader).
    pub bytes: Bytes,
}

impl StoredTensor {
    /// A tensor with a raw little-endian payload.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::StoredTensor;
    /// use multigather::DataType;
    /// let t = StoredTensor::from_i64s(Some("shape"), &[2], &[1, -1]);
    /// assert_eq!(t.elem, DataType::Int64);
    /// assert_eq!(t.to_i64s().unwrap(), vec![1, -1]);
    /// ```
    pub fn raw(name: Option<&str>, elem: DataType, dims: &[i64], bytes: Bytes) -> StoredTensor {
        StoredTensor {
            name: name.map(str::to_owned),
            elem,
            dims: dims.to_vec(),
            payload: Payload::Raw(bytes),
            doc_string: None,
            metadata_props: Vec::new(),
            segment: None,
        }
    }

    /// An int64 tensor with the given values.
    pub fn from_i64s(name: Option<&str>, dims: &[i64], values: &[i64]) -> StoredTensor {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        StoredTensor::raw(name, DataType::Int64, dims, Bytes::from(bytes))
    }

    /// The tensor's name, or `<unnamed>` for messages.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or("<unnamed>")
    }

    /// Number of elements, with overflow checked.
    pub fn element_count(&self) -> Result<usize> {
        element_count(&self.dims).ok_or_else(|| {
            Error::tensor(
                self.display_name(),
                format!("element count of dims {:?} overflows", self.dims),
            )
        })
    }

    /// Size of the payload in bytes as stored (for external-data thresholds and elision).
    pub fn stored_len(&self) -> usize {
        match &self.payload {
            Payload::Raw(b) => b.len(),
            Payload::External(e) => e.bytes.len(),
            Payload::Float(v) => v.len() * 4,
            Payload::Int32(v) => v.len() * 4,
            Payload::Int64(v) => v.len() * 8,
            Payload::Double(v) => v.len() * 8,
            Payload::Uint64(v) => v.len() * 8,
            Payload::String(v) => v.iter().map(Vec::len).sum(),
        }
    }

    /// Checks that the payload holds exactly as many elements as the dims say.
    ///
    /// The loader calls this before anything reads the payload.
    pub fn check_size(&self) -> Result<()> {
        let count = self.element_count()?;
        let fail = |reason: String| Err(Error::tensor(self.display_name(), reason));
        let (field, expected, actual) = match &self.payload {
            Payload::Raw(b) | Payload::External(ExternalData { bytes: b, .. }) => {
                if self.elem == DataType::String {
                    return fail("string tensors cannot use raw or external data".into());
                }
                let Some(expected) = self.elem.storage_bytes(count) else {
                    return fail(format!("byte size of dims {:?} overflows", self.dims));
                };
                ("bytes", expected, b.len())
            }
            Payload::String(v) => ("strings", count, v.len()),
            typed => {
                let (field, allowed, len) = typed_field(typed);
                if !allowed.contains(&self.elem) {
                    return fail(format!("{} tensor stored in {field}", self.elem));
                }
                let expected = match self.elem {
                    DataType::Complex64 | DataType::Complex128 => count.checked_mul(2),
                    DataType::Uint4 | DataType::Int4 | DataType::Float4E2M1 => {
                        Some(count.div_ceil(2))
                    }
                    DataType::Uint2 | DataType::Int2 => Some(count.div_ceil(4)),
                    _ => Some(count),
                };
                let Some(expected) = expected else {
                    return fail(format!("element count of dims {:?} overflows", self.dims));
                };
                (field, expected, len)
            }
        };
        if expected == actual {
            Ok(())
        } else {
            fail(format!(
                "dims {:?} ({} {}) need {expected} {field}, found {actual}",
                self.dims, count, self.elem
            ))
        }
    }

    /// The elements as little-endian bytes in `raw_data` layout. Borrows raw and external payloads.
    pub fn le_bytes(&self) -> Result<Cow<'_, [u8]>> {
        self.check_size()?;
        let out: Vec<u8> = match &self.payload {
            Payload::Raw(b) | Payload::External(ExternalData { bytes: b, .. }) => {
                return Ok(Cow::Borrowed(b))
            }
            Payload::String(_) => {
                return Err(Error::tensor(
                    self.display_name(),
                    "string tensors have no byte layout",
                ))
            }
            Payload::Float(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Payload::Double(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Payload::Int64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Payload::Uint64(v) => match self.elem {
                DataType::Uint32 => v.iter().flat_map(|&x| (x as u32).to_le_bytes()).collect(),
                _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            },
            Payload::Int32(v) => int32_field_to_bytes(self.elem, v, self.element_count()?),
        };
        Ok(Cow::Owned(out))
    }

    /// The values of an integer tensor widened to i64 (shape tensors, axes, pads, indices).
    pub fn to_i64s(&self) -> Result<Vec<i64>> {
        let bytes = self.le_bytes()?;
        let values = match self.elem {
            DataType::Int64 => bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect(),
            DataType::Int32 => bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap_or_default()) as i64)
                .collect(),
            other => {
                return Err(Error::tensor(
                    self.display_name(),
                    format!("expected int32 or int64 values, found {other}"),
                ))
            }
        };
        Ok(values)
    }
}

/// Product of dims, `None` on a negative dim or overflow.
pub fn element_count(dims: &[i64]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}

/// The field name of a typed payload, the element types it may hold, and its length.
fn typed_field(payload: &Payload) -> (&'static str, &'static [DataType], usize) {
    use DataType::*;
    match payload {
        Payload::Float(v) => ("float_data", &[Float, Complex64], v.len()),
        Payload::Double(v) => ("double_data", &[Double, Complex128], v.len()),
        Payload::Int64(v) => ("int64_data", &[Int64], v.len()),
        Payload::Uint64(v) => ("uint64_data", &[Uint32, Uint64], v.len()),
        Payload::Int32(v) => (
            "int32_data",
            &[
                Int32,
                Int16,
                Int8,
                Uint16,
                Uint8,
                Bool,
                Float16,
                Bfloat16,
                Float8E4M3FN,
                Float8E4M3FNUZ,
                Float8E5M2,
                Float8E5M2FNUZ,
                Float8E8M0,
                Uint4,
                Int4,
                Float4E2M1,
                Uint2,
                Int2,
                Float6E2M3,
                Float6E3M2,
            ],
            v.len(),
        ),
        Payload::Raw(b) => ("raw_data", &[], b.len()),
        Payload::External(e) => ("external data", &[], e.bytes.len()),
        Payload::String(v) => ("string_data", &[String], v.len()),
    }
}

/// Converts `int32_data` entries to the `raw_data` layout of `elem`.
fn int32_field_to_bytes(elem: DataType, values: &[i32], count: usize) -> Vec<u8> {
    match elem.bits() {
        32 => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        16 => values
            .iter()
            .flat_map(|&x| (x as u16).to_le_bytes())
            .collect(),
        // One element per entry for 8-bit types; one packed byte per entry for 4- and 2-bit types.
        8 | 4 | 2 => values.iter().map(|&x| x as u8).collect(),
        // 6-bit types: one element per entry, packed 4 elements into 3 bytes.
        6 => {
            let mut out = vec![0u8; (count * 6).div_ceil(8)];
            for (i, &v) in values.iter().enumerate() {
                let bit = i * 6;
                let word = ((v as u32) & 0x3f) << (bit % 8);
                out[bit / 8] |= word as u8;
                if let Some(next) = out.get_mut(bit / 8 + 1) {
                    *next |= (word >> 8) as u8;
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

/// A stored tensor (initializer, attribute, `.pb` file) as a runtime tensor.
///
/// # Example
/// ```
/// use multigather::ir::stored_to_tensor;
/// use multigather::ir::StoredTensor;
/// let t = stored_to_tensor(&StoredTensor::from_i64s(Some("s"), &[2], &[3, -1]))?;
/// assert_eq!(t.as_slice::<i64>()?, &[3, -1]);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn stored_to_tensor(t: &StoredTensor) -> Result<Tensor> {
    t.check_size()?;
    let dims: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::tensor(t.display_name(), format!("negative dims {:?}", t.dims)))?;
    let tensor = match &t.payload {
        Payload::String(v) => Tensor::from_strings(&dims, v.clone()),
        _ => Tensor::from_bytes(t.elem, &dims, &t.le_bytes()?),
    };
    tensor.map_err(|e| Error::tensor(t.display_name(), e.to_string()))
}

/// A runtime tensor as a stored tensor named `name` (raw little-endian data, or strings).
///
/// # Example
/// ```
/// use multigather::ir::{stored_to_tensor, tensor_to_stored};
/// use multigather::{DataType, Tensor};
/// let t = Tensor::from_vec(DataType::Int32, &[2], vec![7i32, -2])?;
/// let stored = tensor_to_stored("t", &t)?;
/// assert_eq!((stored.name.as_deref(), stored.dims.as_slice()), (Some("t"), &[2i64][..]));
/// assert_eq!(stored_to_tensor(&stored)?, t);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn tensor_to_stored(name: &str, t: &Tensor) -> Result<StoredTensor> {
    let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    Ok(match t.as_strings() {
        Ok(strings) => {
            let mut s = StoredTensor::raw(Some(name), t.dtype(), &dims, Bytes::new());
            s.payload = Payload::String(strings.to_vec());
            s
        }
        Err(_) => StoredTensor::raw(
            Some(name),
            t.dtype(),
            &dims,
            Bytes::copy_from_slice(t.as_bytes()?),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(elem: DataType, dims: &[i64], payload: Payload) -> StoredTensor {
        StoredTensor {
            name: Some("t".into()),
            elem,
            dims: dims.to_vec(),
            payload,
            doc_string: None,
            metadata_props: vec![],
            segment: None,
        }
    }

    #[test]
    fn size_checks_name_the_mismatch() {
        let t = tensor(
            DataType::Float,
            &[2, 3],
            Payload::Raw(Bytes::from(vec![0u8; 20])),
        );
        let err = t.check_size().unwrap_err().to_string();
        assert_eq!(
            err,
            "tensor 't': dims [2, 3] (6 float) need 24 bytes, found 20"
        );
        let t = tensor(DataType::Int64, &[2], Payload::Float(vec![1.0, 2.0]));
        assert_eq!(
            t.check_size().unwrap_err().to_string(),
            "tensor 't': int64 tensor stored in float_data"
        );
        let t = tensor(DataType::Float, &[-1], Payload::Float(vec![]));
        assert!(t
            .check_size()
            .unwrap_err()
            .to_string()
            .contains("overflows"));
        let t = tensor(
            DataType::Float,
            &[i64::MAX, i64::MAX],
            Payload::Raw(Bytes::new()),
        );
        assert!(t.check_size().is_err());
    }

    #[test]
    fn typed_fields_convert_to_raw_layout() {
        let t = tensor(
            DataType::Float16,
            &[2],
            Payload::Int32(vec![0x3c00, 0xbc00]),
        );
        assert_eq!(t.le_bytes().unwrap().as_ref(), &[0x00, 0x3c, 0x00, 0xbc]);
        let t = tensor(DataType::Int4, &[3], Payload::Int32(vec![0x21, 0x03]));
        assert_eq!(t.le_bytes().unwrap().as_ref(), &[0x21, 0x03]);
        let t = tensor(DataType::Uint32, &[1], Payload::Uint64(vec![7]));
        assert_eq!(t.le_bytes().unwrap().as_ref(), &[7, 0, 0, 0]);
        let t = tensor(DataType::Int32, &[2], Payload::Int32(vec![-1, 5]));
        assert_eq!(t.to_i64s().unwrap(), vec![-1, 5]);
    }
}
