//! `Range` (opset 11, `stash_type` for float16/bfloat16 from 27): `start, start + delta, ...`
//! up to `limit`, exclusive.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Range.html>.
//!
//! The count is `max(ceil((limit - start) / delta), 0)` and element `i` is `start + i * delta`,
//! as the spec writes it (not an accumulated sum). Integers are computed exactly; floats in
//! `f64`, rounded once to the output type, which is at least as precise as either `stash_type`.

use std::mem::MaybeUninit;

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{required, to_i64s};

use super::super::vector::assume_written;
use super::super::{EvalCtx, InferCtx};
use super::runs::{in_elem, typed, MAX_ELEMENTS};
use crate::ops::num::{real_values, Float};

/// The scalar inputs of a `Range` node, exact for integers.
enum Bounds {
    Int(i64, i64, i64),
    Float(f64, f64, f64),
}

/// The single value of a scalar input.
fn single<T: Copy>(values: Vec<T>) -> Result<T> {
    match values.as_slice() {
        [v] => Ok(*v),
        _ => Err(Error::Eval("start, limit and delta must be scalars".into())),
    }
}

fn bounds(start: &Tensor, limit: &Tensor, delta: &Tensor) -> Result<Bounds> {
    let dtype = start.dtype();
    if limit.dtype() != dtype || delta.dtype() != dtype {
        return Err(Error::Eval(
            "start, limit and delta must have the same type".into(),
        ));
    }
    let b = match dtype {
        DataType::Float | DataType::Double | DataType::Float16 | DataType::Bfloat16 => {
            let f = |t| single(real_values(t)?);
            Bounds::Float(f(start)?, f(limit)?, f(delta)?)
        }
        _ => {
            let i = |t| single(to_i64s(t)?);
            Bounds::Int(i(start)?, i(limit)?, i(delta)?)
        }
    };
    Ok(b)
}

/// The number of elements of the range.
fn count(b: &Bounds) -> Result<usize> {
    let too_long = || Error::Eval("the range is too long".into());
    match *b {
        Bounds::Int(_, _, 0) => Err(Error::Eval("delta must not be 0".into())),
        Bounds::Float(_, _, 0.0) => Err(Error::Eval("delta must not be 0".into())),
        Bounds::Int(s, l, d) => {
            let (span, step) = (i128::from(l) - i128::from(s), i128::from(d));
            let n = if span != 0 && (span > 0) == (step > 0) {
                (span.abs() + step.abs() - 1) / step.abs()
            } else {
                0
            };
            usize::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_ELEMENTS)
                .ok_or_else(too_long)
        }
        Bounds::Float(s, l, d) => {
            let n = ((l - s) / d).ceil().max(0.0);
            if n.is_finite() && n <= MAX_ELEMENTS as f64 {
                Ok(n as usize)
            } else {
                Err(too_long())
            }
        }
    }
}

pub(super) fn eval_range(_: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let start = required(inputs, 0)?;
    let dtype = start.dtype();
    let b = bounds(start, required(inputs, 1)?, required(inputs, 2)?)?;
    let n = count(&b)?;
    // The elements are written straight into the output buffer, which comes from the arena
    // (checked against the budget): `n` comes from values that need not be constants, so no
    // shape function has checked it yet.
    let out = match b {
        Bounds::Float(s, _, d) => crate::ops::num::dispatch_float!(dtype, T => {
            Tensor::uninit(dtype, &[n])?.fill(|slots: &mut [MaybeUninit<T>]| {
                for (i, v) in slots.iter_mut().enumerate() {
                    v.write(<T as Float>::from_f64(s + i as f64 * d));
                }
                // SAFETY: every slot was written just now.
                unsafe { assume_written(slots) }
            })?
        }, _ => return Err(Error::Eval(format!("Range does not take {dtype} values")))),
        Bounds::Int(s, _, d) => crate::ops::num::dispatch_int!(dtype, T => {
            Tensor::uninit(dtype, &[n])?.fill(|slots: &mut [MaybeUninit<T>]| {
                // Every element lies between start and limit, so it fits the type.
                for (i, v) in slots.iter_mut().enumerate() {
                    v.write((i128::from(s) + i as i128 * i128::from(d)) as T);
                }
                // SAFETY: every slot was written just now.
                unsafe { assume_written(slots) }
            })?
        }, _ => return Err(Error::Eval(format!("Range does not take {dtype} values")))),
    };
    Ok(vec![out])
}

pub(super) fn infer_range(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let len = match (ctx.constant(0), ctx.constant(1), ctx.constant(2)) {
        (Some(s), Some(l), Some(d)) => Dim::Known(count(&bounds(s, l, d)?)? as i64),
        _ => Dim::Unknown,
    };
    Ok(vec![typed(in_elem(ctx, 0), Some(vec![len]))])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn range<T: bytemuck::Pod>(dtype: DataType, s: T, l: T, d: T) -> crate::Result<Tensor> {
        let t = |v| Tensor::scalar(dtype, v).unwrap();
        let node = Node::new("Range", "r", ["s", "l", "d"], ["y"]);
        Ok(eval_node(&node, 11, &[Some(&t(s)), Some(&t(l)), Some(&t(d))])?.remove(0))
    }

    #[test]
    fn ranges_follow_the_onnx_examples() {
        let v = |t: Tensor| t.to_vec::<i64>().unwrap();
        assert_eq!(
            range(DataType::Int32, 3i32, 9, 3)
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            [3, 6]
        );
        assert_eq!(v(range(DataType::Int64, 10i64, 4, -2).unwrap()), [10, 8, 6]);
        assert_eq!(range(DataType::Int16, 1i16, 1, 1).unwrap().len(), 0);
        let f = range(DataType::Float, 1.0f32, 5.0, 1.5).unwrap();
        assert_eq!(f.to_vec::<f32>().unwrap(), [1.0, 2.5, 4.0]);
        let e = range(DataType::Int64, 0i64, 5, 0).unwrap_err();
        assert!(e.to_string().contains("must not be 0"), "{e}");
        let e = range(DataType::Float, 0.0f32, f32::INFINITY, 1.0).unwrap_err();
        assert!(e.to_string().contains("too long"), "{e}");
        let e = range(DataType::Int64, i64::MIN, i64::MAX, 1).unwrap_err();
        assert!(e.to_string().contains("too long"), "{e}");
    }

    #[test]
    fn range_shape_function_counts_constants() {
        let node = Node::new("Range", "r", ["s", "l", "d"], ["y"]);
        let t = |v: i64| Tensor::scalar(DataType::Int64, v).unwrap();
        let (s, l, d) = (t(0), t(10), t(3));
        let out = crate::ops::layout::runs::infer_dims_for(
            &node,
            11,
            &[None, None, None],
            &[Some(&s), Some(&l), Some(&d)],
        );
        assert_eq!(out.unwrap(), ["4"]);
    }
}
