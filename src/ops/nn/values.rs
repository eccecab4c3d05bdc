//! What the nn kernels share: output buffers written in a compute type ([`Real`], from
//! `ops/num.rs`), parameters read as `f32`, `f64` or `i64`, zero points, the rounding of
//! requantisation, and small shape-function helpers.
//!
//! Design note: `float16` and `bfloat16` tensors are widened to `f32` once on load and rounded once
//! on store, so every kernel is written for `f32` and `f64` only.

use crate::tensor::Scratch;
use std::mem::MaybeUninit;

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::ir::{Dim, Shape, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::num::{dispatch_int, dispatch_real, narrowed, Float, Loaded, Real};
use super::super::util::{to_i64s, unsupported_type};
use super::super::{EvalCtx, InferCtx};

/// A zeroed output tensor of `dtype` and `shape` that `fill` writes in the compute type `R`:
/// in place when `R` is the element type, through one buffer rounded once otherwise.
pub(super) fn output<R: Real>(
    dtype: DataType,
    shape: &[usize],
    fill: impl FnOnce(&mut [R]) -> Result<()>,
) -> Result<Tensor> {
    if dtype == R::DTYPE {
        let mut t = Tensor::zeros(dtype, shape)?;
        fill(t.as_slice_mut::<R>()?)?;
        Ok(t)
    } else {
        let mut v = Scratch::new(checked_product(shape)?, R::ZERO)?;
        fill(&mut v)?;
        narrowed(dtype, shape, &v)
    }
}

/// A `dtype` tensor of `shape` whose every element `fill` writes, returning the initialised
/// view of the slice it was given: [`output`] without the zero fill.
pub(super) fn output_written<R: Real>(
    dtype: DataType,
    shape: &[usize],
    fill: impl FnOnce(&mut [MaybeUninit<R>]) -> Result<&mut [R]>,
) -> Result<Tensor> {
    if dtype == R::DTYPE {
        let mut failure = None;
        let t = Tensor::uninit(dtype, shape)?.fill::<R>(|slots| {
            fill(slots).unwrap_or_else(|e| {
                failure = Some(e);
                &mut []
            })
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(t?),
        }
    } else {
        // In pooled scratch: a fresh buffer per call faulted its pages in again.
        let mut v = Scratch::new(checked_product(shape)?, R::ZERO)?;
        // SAFETY: the kernels behind `fill` write only initialised values.
        fill(unsafe { super::super::vector::as_slots(&mut v) })?;
        narrowed(dtype, shape, &v)
    }
}

/// Whether `dtype` is one of the eight integer types (int8 to uint64).
pub(super) fn is_int(dtype: DataType) -> bool {
    use DataType::*;
    matches!(
        dtype,
        Int8 | Int16 | Int32 | Int64 | Uint8 | Uint16 | Uint32 | Uint64
    )
}

/// The values of any float or integer tensor as `f32` (scales, zero points, small parameters).
pub(super) fn to_f32s(t: &Tensor) -> Result<Vec<f32>> {
    Ok(match t.dtype() {
        DataType::Float => t.as_slice::<f32>()?.to_vec(),
        DataType::Double => t.as_slice::<f64>()?.iter().map(|&v| v as f32).collect(),
        DataType::Float16 => t.as_slice::<f16>()?.iter().map(|v| v.to_f32()).collect(),
        DataType::Bfloat16 => t.as_slice::<bf16>()?.iter().map(|v| v.to_f32()).collect(),
        _ => to_i64s(t)?.into_iter().map(|v| v as f32).collect(),
    })
}

/// The values of an integer tensor as `f64`, minus a zero point per element: `zero(i)` gives the
/// zero point of element `i`. Exact for every 8-, 16- and 32-bit value.
pub(super) fn shifted_f64s(t: &Tensor, zero: impl Fn(usize) -> i64) -> Result<Vec<f64>> {
    Ok(to_i64s(t)?
        .into_iter()
        .enumerate()
        .map(|(i, v)| (v - zero(i)) as f64)
        .collect())
}

/// The values of an optional zero-point input as `i64` (empty when omitted).
pub(super) fn zero_points(t: Option<&Tensor>) -> Result<Vec<i64>> {
    t.map_or(Ok(Vec::new()), to_i64s)
}

/// A zero point that applies per tensor (one value, or none) or per index along one axis
/// (`len` values).
pub(super) fn zero_at<'z>(
    zeros: &'z [i64],
    len: usize,
    what: &str,
) -> Result<impl Fn(usize) -> i64 + 'z> {
    match zeros.len() {
        0 | 1 => {}
        n if n == len => {}
        n => {
            return Err(Error::Eval(format!(
                "{what} has {n} values; expected 1 or {len}"
            )))
        }
    }
    Ok(move |i: usize| match zeros.len() {
        0 => 0,
        1 => zeros[0],
        _ => zeros[i],
    })
}

/// A tensor of any floating-point `dtype` holding `values`, rounded once (small outputs such as
/// statistics, whose type need not match the kernel's compute type).
pub(super) fn store_f64s(dtype: DataType, shape: &[usize], values: &[f64]) -> Result<Tensor> {
    match dtype {
        DataType::Double => f64::store(dtype, shape, values.to_vec()),
        _ => f32::store(dtype, shape, values.iter().map(|&v| v as f32).collect()),
    }
}

/// The values of a floating-point tensor as `f64` (for kernels that compute in double
/// whatever the element type); `what` names the operator in the error for another type.
pub(super) fn real_f64s(t: &Tensor, what: &str) -> Result<Vec<f64>> {
    dispatch_real!(t.dtype(), R => Ok(R::load(t)?.iter().map(|v| v.to_f64()).collect()),
        _ => Err(unsupported_type(what, t.dtype())))
}

/// An integer tensor of `dtype` holding `values` narrowed (wrapping) to its width.
pub(super) fn store_ints(dtype: DataType, shape: &[usize], values: &[i64]) -> Result<Tensor> {
    dispatch_int!(dtype, T => {
        let v: Vec<T> = values.iter().map(|&x| x as T).collect();
        Ok(Tensor::from_vec(dtype, shape, v)?)
    }, _ => Err(unsupported_type("this kernel", dtype)))
}

/// `v` rounded to the precision of the floating-point `dtype` (kept as `f32`), so arithmetic on
/// float16 or bfloat16 parameters can follow their precision step by step.
pub(super) fn round_to(dtype: DataType, v: f32) -> f32 {
    match dtype {
        DataType::Float16 => f16::from_f32(v).to_f32(),
        DataType::Bfloat16 => bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

/// The product of `dims`, failing on overflow.
pub(super) fn checked_product(dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::Eval(format!("shape {dims:?} is too large")))
}

/// A shape function for operators whose first output has the first input's type.
pub(super) fn infer_same_as_input(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![ctx.input(0).cloned().unwrap_or_default()])
}

/// The dims of input `i`, when its rank is known.
pub(super) fn input_dims<'a>(ctx: &'a InferCtx<'_>, i: usize) -> Option<&'a [Dim]> {
    ctx.input(i)
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dims.as_slice())
}

/// A tensor type of element `elem` (unknown when `None`) and `dims` (rank unknown when `None`).
pub(super) fn tensor_type(elem: Option<DataType>, dims: Option<Vec<Dim>>) -> TensorType {
    TensorType {
        elem,
        shape: dims.map(Shape::new),
    }
}

/// The sizes of `dims` when all are known and non-negative.
pub(super) fn known_sizes(dims: &[Dim]) -> Option<Vec<usize>> {
    dims.iter()
        .map(|d| d.known().and_then(|v| usize::try_from(v).ok()))
        .collect()
}

/// Input `input` (`t`) in the compute type `R`: borrowed when it is stored as `R`; else widened
/// (from `float16` or `bfloat16`) once per plan when it is a constant (the weights of a half
/// model), kept in the step's memo, and on every call otherwise.
pub(super) fn widened_once<'a, R: Real + 'static>(
    ctx: &EvalCtx<'a>,
    t: &'a Tensor,
    input: usize,
) -> Result<Loaded<'a, R>> {
    if t.dtype() == R::DTYPE {
        return R::load(t);
    }
    match ctx.remember(&[input], || Ok(R::load(t)?.into_owned()))? {
        Some(kept) => Ok(Loaded::Borrowed(&kept[..])),
        None => R::load(t),
    }
}

/// The range of an 8-bit code type as `f64` (`int8`, else `uint8`).
pub(super) fn code_range(dtype: DataType) -> (f64, f64) {
    if dtype == DataType::Int8 {
        (-128.0, 127.0)
    } else {
        (0.0, 255.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_types_widen_on_load_and_round_once_on_store() {
        let t =
            Tensor::from_vec(DataType::Float16, &[2], vec![f16::from_f32(1.5), f16::ONE]).unwrap();
        let v = f32::load(&t).unwrap();
        assert_eq!(&*v, &[1.5, 1.0]);
        let back = f32::store(DataType::Float16, &[2], v.into_owned()).unwrap();
        assert_eq!(back, t);
        let float = Tensor::from_vec(DataType::Float, &[1], vec![1.0f32]).unwrap();
        assert!(f64::load(&float).is_err());
        assert!(f32::store(DataType::Double, &[1], vec![1.0]).is_err());
    }

    #[test]
    fn zero_points_apply_per_tensor_or_per_index() {
        let z = [3i64, 4];
        let f = zero_at(&z, 2, "zero point").unwrap();
        assert_eq!((f(0), f(1)), (3, 4));
        let err = zero_at(&z, 3, "zero point").err().unwrap();
        assert!(err.to_string().contains("expected 1 or 3"), "{err}");
        assert_eq!(zero_at(&[], 3, "z").unwrap()(2), 0);
    }
}
