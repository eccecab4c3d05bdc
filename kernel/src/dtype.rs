//! Element types of ONNX tensors.
//!
//! [`DataType`] mirrors `TensorProto.DataType` of the ONNX schema without exposing the generated
//! protobuf types. Everything that reasons about element widths (the gather kernels, the loader's
//! size checks, the text form) goes through it.

use std::fmt;

/// The element type of a tensor, one variant per defined `TensorProto.DataType` value.
///
/// `UNDEFINED` (0) is not a variant: a tensor or type without an element type is represented by
/// `Option<DataType>` where the schema allows it, and is an error elsewhere.
///
/// # Example
/// ```
/// use multigather_kernel::DataType;
/// assert_eq!(DataType::from_onnx(1), Some(DataType::Float));
/// assert_eq!(DataType::Float16.bits(), 16);
/// assert_eq!(DataType::Int4.to_string(), "int4");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum DataType {
    Float = 1,
    Uint8 = 2,
    Int8 = 3,
    Uint16 = 4,
    Int16 = 5,
    Int32 = 6,
    Int64 = 7,
    String = 8,
    Bool = 9,
    Float16 = 10,
    Double = 11,
    Uint32 = 12,
    Uint64 = 13,
    Complex64 = 14,
    Complex128 = 15,
    Bfloat16 = 16,
    Float8E4M3FN = 17,
    Float8E4M3FNUZ = 18,
    Float8E5M2 = 19,
    Float8E5M2FNUZ = 20,
    Uint4 = 21,
    Int4 = 22,
    Float4E2M1 = 23,
    Float8E8M0 = 24,
    Uint2 = 25,
    Int2 = 26,
    Float6E2M3 = 27,
    Float6E3M2 = 28,
}

/// Every element type, in schema order.
pub const ALL_DATA_TYPES: [DataType; 28] = {
    use DataType::*;
    [
        Float,
        Uint8,
        Int8,
        Uint16,
        Int16,
        Int32,
        Int64,
        String,
        Bool,
        Float16,
        Double,
        Uint32,
        Uint64,
        Complex64,
        Complex128,
        Bfloat16,
        Float8E4M3FN,
        Float8E4M3FNUZ,
        Float8E5M2,
        Float8E5M2FNUZ,
        Uint4,
        Int4,
        Float4E2M1,
        Float8E8M0,
        Uint2,
        Int2,
        Float6E2M3,
        Float6E3M2,
    ]
};

impl DataType {
    /// The type for a `TensorProto.DataType` number; `None` for `UNDEFINED` and unknown numbers.
    pub fn from_onnx(code: i32) -> Option<DataType> {
        ALL_DATA_TYPES.iter().copied().find(|t| *t as i32 == code)
    }

    /// The `TensorProto.DataType` number.
    pub fn onnx(self) -> i32 {
        self as i32
    }

    /// Storage width of one element in bits. Strings report 0: they have no fixed width.
    ///
    /// Sub-byte types (2, 4 and 6 bits) are packed little-endian into bytes, first element in
    /// the low bits, as in ONNX `raw_data`.
    pub fn bits(self) -> usize {
        use DataType::*;
        match self {
            String => 0,
            Uint2 | Int2 => 2,
            Uint4 | Int4 | Float4E2M1 => 4,
            Float6E2M3 | Float6E3M2 => 6,
            Bool | Uint8 | Int8 | Float8E4M3FN | Float8E4M3FNUZ | Float8E5M2 | Float8E5M2FNUZ
            | Float8E8M0 => 8,
            Uint16 | Int16 | Float16 | Bfloat16 => 16,
            Float | Int32 | Uint32 => 32,
            Int64 | Uint64 | Double | Complex64 => 64,
            Complex128 => 128,
        }
    }

    /// Size of one element in bytes for whole-byte types; `None` for strings and packed sub-byte
    /// types.
    pub fn byte_size(self) -> Option<usize> {
        let bits = self.bits();
        (bits != 0 && bits.is_multiple_of(8)).then_some(bits / 8)
    }

    /// Bytes needed to store `count` elements (packed for sub-byte types); `None` for strings or
    /// on overflow.
    pub fn storage_bytes(self, count: usize) -> Option<usize> {
        match self.bits() {
            0 => None,
            bits => count.checked_mul(bits)?.checked_add(7).map(|b| b / 8),
        }
    }

    /// The lower-case name used by the ONNX text syntax (`float`, `int64`, `bfloat16`, ...).
    pub fn name(self) -> &'static str {
        use DataType::*;
        match self {
            Float => "float",
            Uint8 => "uint8",
            Int8 => "int8",
            Uint16 => "uint16",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            String => "string",
            Bool => "bool",
            Float16 => "float16",
            Double => "double",
            Uint32 => "uint32",
            Uint64 => "uint64",
            Complex64 => "complex64",
            Complex128 => "complex128",
            Bfloat16 => "bfloat16",
            Float8E4M3FN => "float8e4m3fn",
            Float8E4M3FNUZ => "float8e4m3fnuz",
            Float8E5M2 => "float8e5m2",
            Float8E5M2FNUZ => "float8e5m2fnuz",
            Uint4 => "uint4",
            Int4 => "int4",
            Float4E2M1 => "float4e2m1",
            Float8E8M0 => "float8e8m0",
            Uint2 => "uint2",
            Int2 => "int2",
            Float6E2M3 => "float6e2m3",
            Float6E3M2 => "float6e3m2",
        }
    }

    /// The type named `name` in the ONNX text syntax.
    pub fn from_name(name: &str) -> Option<DataType> {
        ALL_DATA_TYPES.iter().copied().find(|t| t.name() == name)
    }

    /// True for the integer types that may hold gather indices (`int32`, `int64`).
    pub fn is_index(self) -> bool {
        matches!(self, DataType::Int32 | DataType::Int64)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for (i, t) in ALL_DATA_TYPES.iter().enumerate() {
            assert_eq!(t.onnx(), i as i32 + 1);
            assert_eq!(DataType::from_onnx(t.onnx()), Some(*t));
            assert_eq!(DataType::from_name(t.name()), Some(*t));
        }
        assert_eq!(DataType::from_onnx(0), None);
        assert_eq!(DataType::from_onnx(29), None);
    }

    #[test]
    fn packed_sizes_round_up() {
        assert_eq!(DataType::Int4.storage_bytes(3), Some(2));
        assert_eq!(DataType::Uint2.storage_bytes(5), Some(2));
        assert_eq!(DataType::Float6E2M3.storage_bytes(4), Some(3));
        assert_eq!(DataType::Float.storage_bytes(3), Some(12));
        assert_eq!(DataType::String.storage_bytes(3), None);
        assert_eq!(DataType::Double.storage_bytes(usize::MAX), None);
    }
}
