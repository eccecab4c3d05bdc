//! What many kernels share: input access, axis normalisation, multidirectional broadcasting, and
//! dispatch over element types.

use bytemuck::Pod;
use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::DataType;

/// Input `i`, which the operator requires.
pub fn required<'t>(inputs: &[Option<&'t Tensor>], i: usize) -> Result<&'t Tensor> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| Error::Eval(format!("required input {i} is missing")))
}

/// Input `i`, or `None` when omitted.
pub fn optional<'t>(inputs: &[Option<&'t Tensor>], i: usize) -> Option<&'t Tensor> {
    inputs.get(i).copied().flatten()
}

/// An axis attribute or input value in `[-rank, rank)`, made non-negative.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(Error::Eval(format!(
            "axis {axis} is out of range for rank {rank}"
        )))
    }
}

/// The values of an integer tensor (int8 to int64, uint8 to uint64), widened to `i64`.
pub fn to_i64s(t: &Tensor) -> Result<Vec<i64>> {
    Ok(match t.dtype() {
        DataType::Int64 => t.as_slice::<i64>()?.to_vec(),
        DataType::Int32 => t.as_slice::<i32>()?.iter().map(|&v| v as i64).collect(),
        DataType::Int16 => t.as_slice::<i16>()?.iter().map(|&v| v as i64).collect(),
        DataType::Int8 => t.as_slice::<i8>()?.iter().map(|&v| v as i64).collect(),
        DataType::Uint8 => t.as_slice::<u8>()?.iter().map(|&v| v as i64).collect(),
        DataType::Uint16 => t.as_slice::<u16>()?.iter().map(|&v| v as i64).collect(),
        DataType::Uint32 => t.as_slice::<u32>()?.iter().map(|&v| v as i64).collect(),
        DataType::Uint64 => t.as_slice::<u64>()?.iter().map(|&v| v as i64).collect(),
        other => {
            return Err(Error::Eval(format!(
                "expected an integer tensor, found {other}"
            )))
        }
    })
}

/// The single value of a one-element integer tensor (scalar or shape `[1]`).
pub fn scalar_i64(t: &Tensor) -> Result<i64> {
    let v = to_i64s(t)?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(Error::Eval(format!(
            "expected a single value, found shape {:?}",
            t.shape()
        ))),
    }
}

/// A shape read from a tensor of dims (negative entries rejected).
pub fn to_dims(t: &Tensor) -> Result<Vec<usize>> {
    to_i64s(t)?
        .into_iter()
        .map(|d| usize::try_from(d).map_err(|_| Error::Eval(format!("negative dimension {d}"))))
        .collect()
}

/// The multidirectional (numpy) broadcast of shapes: right-aligned, each dim equal or 1.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let offset = rank - s.len();
        for (j, &d) in s.iter().enumerate() {
            let o = &mut out[offset + j];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(Error::Eval(format!(
                    "shapes {:?} do not broadcast",
                    shapes.iter().map(|s| s.to_vec()).collect::<Vec<_>>()
                )));
            }
        }
    }
    Ok(out)
}

/// Row-major strides (in elements) of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for j in (0..shape.len().saturating_sub(1)).rev() {
        s[j] = s[j + 1] * shape[j + 1];
    }
    s
}

/// Strides (in elements) that read a tensor of `shape` broadcast to `out` (right-aligned): 0 on
/// broadcast dims.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let offset = out.len() - shape.len();
    (0..out.len())
        .map(|j| {
            if j < offset || shape[j - offset] == 1 {
                0
            } else {
                own[j - offset]
            }
        })
        .collect()
}

/// For each element of a tensor of shape `out` in row-major order, the offset of the element it
/// reads in a tensor of shape `shape` broadcast to `out`.
pub fn broadcast_offsets(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let st = broadcast_strides(shape, out);
    let n: usize = out.iter().product();
    let mut offsets = Vec::with_capacity(n);
    if n == 0 {
        return offsets;
    }
    let mut idx = vec![0usize; out.len()];
    let mut off = 0usize;
    for _ in 0..n {
        offsets.push(off);
        for j in (0..out.len()).rev() {
            idx[j] += 1;
            off += st[j];
            if idx[j] < out[j] {
                break;
            }
            off -= st[j] * out[j];
            idx[j] = 0;
        }
    }
    offsets
}

/// Applies `f` elementwise to two broadcast operands, returning the values and the output shape.
pub fn broadcast_binary<A: Copy, B: Copy, O>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    mut f: impl FnMut(A, B) -> O,
) -> Result<(Vec<O>, Vec<usize>)> {
    let out = broadcast_shapes(&[a_shape, b_shape])?;
    let values = if a_shape == b_shape {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    } else if b.len() == 1 && out == a_shape {
        a.iter().map(|&x| f(x, b[0])).collect()
    } else if a.len() == 1 && out == b_shape {
        b.iter().map(|&y| f(a[0], y)).collect()
    } else {
        let oa = broadcast_offsets(a_shape, &out);
        let ob = broadcast_offsets(b_shape, &out);
        oa.iter().zip(&ob).map(|(&i, &j)| f(a[i], b[j])).collect()
    };
    Ok((values, out))
}

/// Floating-point element types, computed through `f32` (`f16`, `bf16`) or natively.
pub trait Float: Pod + Copy + PartialOrd + Send + Sync + 'static {
    /// The element type.
    const DTYPE: DataType;
    /// Widens to `f64`.
    fn to_f64(self) -> f64;
    /// Narrows from `f64` (round to nearest).
    fn from_f64(v: f64) -> Self;
    /// Widens to `f32`.
    fn to_f32(self) -> f32;
    /// Narrows from `f32` (round to nearest).
    fn from_f32(v: f32) -> Self;
}

impl Float for f32 {
    const DTYPE: DataType = DataType::Float;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Float for f64 {
    const DTYPE: DataType = DataType::Double;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn from_f32(v: f32) -> Self {
        v as f64
    }
}

impl Float for f16 {
    const DTYPE: DataType = DataType::Float16;
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Float for bf16 {
    const DTYPE: DataType = DataType::Bfloat16;
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Runs `$body` with `$T` bound to the Rust type of a floating-point `$dtype`
/// (float, double, float16, bfloat16); evaluates `$other` for any other type.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::DataType::Float => {
                type $T = f32;
                $body
            }
            $crate::DataType::Double => {
                type $T = f64;
                $body
            }
            $crate::DataType::Float16 => {
                type $T = half::f16;
                $body
            }
            $crate::DataType::Bfloat16 => {
                type $T = half::bf16;
                $body
            }
            _ => $other,
        }
    };
}

/// Runs `$body` with `$T` bound to the Rust type of an integer `$dtype` (int8 to uint64);
/// evaluates `$other` for any other type.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_int {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::DataType::Int8 => {
                type $T = i8;
                $body
            }
            $crate::DataType::Int16 => {
                type $T = i16;
                $body
            }
            $crate::DataType::Int32 => {
                type $T = i32;
                $body
            }
            $crate::DataType::Int64 => {
                type $T = i64;
                $body
            }
            $crate::DataType::Uint8 => {
                type $T = u8;
                $body
            }
            $crate::DataType::Uint16 => {
                type $T = u16;
                $body
            }
            $crate::DataType::Uint32 => {
                type $T = u32;
                $body
            }
            $crate::DataType::Uint64 => {
                type $T = u64;
                $body
            }
            _ => $other,
        }
    };
}

/// An error for an element type an operator does not take.
pub fn unsupported_type(what: &str, dtype: DataType) -> Error {
    Error::Eval(format!("{what} does not take {dtype} tensors"))
}

/// A tensor built from values whose count matches `shape` by construction.
pub fn tensor<T: Pod>(dtype: DataType, shape: &[usize], values: Vec<T>) -> Result<Tensor> {
    Ok(Tensor::from_vec(dtype, shape, values)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_right_aligns_and_stretches_ones() {
        assert_eq!(
            broadcast_shapes(&[&[2, 1, 3], &[4, 1]]).unwrap(),
            vec![2, 4, 3]
        );
        assert!(broadcast_shapes(&[&[2, 3], &[4]]).is_err());
        assert_eq!(broadcast_offsets(&[3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(broadcast_offsets(&[2, 1], &[2, 3]), vec![0, 0, 0, 1, 1, 1]);
    }

    #[test]
    fn binary_broadcast_matches_numpy() {
        let (v, s) = broadcast_binary(&[1, 2], &[2, 1], &[10, 20, 30], &[3], |a, b| a + b).unwrap();
        assert_eq!(s, vec![2, 3]);
        assert_eq!(v, vec![11, 21, 31, 12, 22, 32]);
    }

    #[test]
    fn axes_normalise_or_fail() {
        assert_eq!(normalize_axis(-1, 3).unwrap(), 2);
        assert!(normalize_axis(3, 3).is_err());
        assert!(normalize_axis(-4, 3).is_err());
    }
}
