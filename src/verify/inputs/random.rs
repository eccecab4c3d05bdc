//! The values drawn: a random tensor of an input's element type and shape, integers within the
//! range rule 2 found for it (the rules are written in `mod.rs`) or else in `[-100, 100)`
//! (unsigned `[0, 200)`), floats in `[-1, 1)`.

use super::bounds::Bound;
use crate::error::Result;
use crate::tensor::Tensor;
use crate::verify::Rng;
use crate::DataType;

/// A random tensor of `elem` and `shape`; integers within `bound` when given. Returns the range
/// its values were drawn from.
pub(super) fn random_tensor(
    elem: DataType,
    shape: &[usize],
    bound: Option<&Bound>,
    rng: &mut Rng,
) -> Result<(Tensor, Option<String>)> {
    Tensor::check_size(elem, shape)?;
    let count: usize = shape.iter().product();
    let (low, high) = match elem {
        DataType::Uint64 | DataType::Uint32 | DataType::Uint16 | DataType::Uint8 => (0, 200),
        DataType::Bool => (0, 2),
        _ => (-100, 100),
    };
    // A bound is cut to what the element type holds (unsigned inputs take its non-negative
    // part).
    let (min, max) = match elem {
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::Uint8 => (0, u8::MAX.into()),
        DataType::Uint16 => (0, u16::MAX.into()),
        DataType::Uint32 => (0, u32::MAX.into()),
        DataType::Uint64 => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    };
    let coords: Option<Vec<(i64, i64)>> = bound.map(|b| {
        b.coords
            .iter()
            .map(|&(lo, hi)| (lo.clamp(min, max), hi.clamp(min, max.saturating_add(1))))
            .collect()
    });
    let range = match (&coords, elem) {
        (Some(c), _) => Some(
            c.iter()
                .map(|(lo, hi)| format!("[{lo}, {hi})"))
                .collect::<Vec<_>>()
                .join(" × "),
        ),
        (None, DataType::Float | DataType::Double | DataType::Float16 | DataType::Bfloat16) => {
            Some("[-1, 1)".to_owned())
        }
        (None, DataType::Bool) => None,
        (None, e) if is_integer(e) => Some(format!("[{low}, {high})")),
        (None, _) => None,
    };
    let mut int = |i: usize| -> i64 {
        match &coords {
            Some(c) if !c.is_empty() => {
                let (lo, hi) = c[i % c.len()];
                rng.range(lo, hi)
            }
            _ => rng.range(low, high),
        }
    };
    macro_rules! ints {
        ($t:ty) => {
            Tensor::from_vec(
                elem,
                shape,
                (0..count).map(|i| int(i) as $t).collect::<Vec<$t>>(),
            )?
        };
    }
    macro_rules! units {
        ($convert:expr) => {
            Tensor::from_vec(
                elem,
                shape,
                (0..count)
                    .map(|_| ($convert)(rng.unit()))
                    .collect::<Vec<_>>(),
            )?
        };
    }
    let t = match elem {
        DataType::Float => units!(|u: f64| u as f32),
        DataType::Double => units!(|u: f64| u),
        DataType::Float16 => units!(half::f16::from_f64),
        DataType::Bfloat16 => units!(half::bf16::from_f64),
        DataType::Int64 => ints!(i64),
        DataType::Int32 => ints!(i32),
        DataType::Int16 => ints!(i16),
        DataType::Int8 => ints!(i8),
        DataType::Uint64 => ints!(u64),
        DataType::Uint32 => ints!(u32),
        DataType::Uint16 => ints!(u16),
        DataType::Uint8 => ints!(u8),
        DataType::Bool => ints!(u8),
        DataType::String => Tensor::from_strings(
            shape,
            (0..count)
                .map(|_| format!("s{}", rng.range(0, 100)).into_bytes())
                .collect(),
        )?,
        other => {
            let bytes = other.storage_bytes(count).unwrap_or(0);
            let data: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
            Tensor::from_bytes(other, shape, &data)?
        }
    };
    Ok((t, range))
}

/// Whether `elem` is an integer type, whose inputs rule 2 may bound.
pub(super) fn is_integer(elem: DataType) -> bool {
    matches!(
        elem,
        DataType::Int64
            | DataType::Int32
            | DataType::Int16
            | DataType::Int8
            | DataType::Uint64
            | DataType::Uint32
            | DataType::Uint16
            | DataType::Uint8
    )
}
