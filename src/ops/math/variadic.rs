//! Elementwise operators over several broadcast inputs: `Sum`, `Mean`, `Max` and `Min` (one or
//! more inputs), `Where` (a condition choosing between two tensors of any type) and `Clip`.
//!
//! `Max` and `Min` propagate NaN, like numpy and onnxruntime. `Sum` and `Mean` accumulate in the
//! work type (`f32` for `f16`/`bf16`) and round once at the end. `Clip` takes its bounds from
//! the `min`/`max` attributes up to opset 10 (floats only) and from optional scalar inputs from
//! opset 11 (every numeric type); a missing bound does not clip, and when `min > max` every
//! element becomes `max`, as in onnxruntime.

use crate::error::Result;
use crate::ir::TensorType;
use crate::ops::util::{broadcast_binary, broadcast_offsets, broadcast_shapes, optional, required};
use crate::ops::{Attributes, EvalCtx, InferCtx};
use crate::tensor::try_with_capacity;
use crate::tensor::Tensor;
use crate::DataType;

use super::work::{
    bad_type, broadcast_type, from_work, map_num, max_nan, min_nan, same_types, work_values,
};
use crate::ops::num::{dispatch_num, Arith, Num};

/// How a variadic operator combines its inputs.
pub(super) trait Fold {
    /// True for `Mean`: the result is divided by the number of inputs.
    const MEAN: bool = false;
    fn apply<A: Arith>(a: A, b: A) -> A;
}

pub(super) struct Sum;
pub(super) struct Mean;
pub(super) struct Max;
pub(super) struct Min;

impl Fold for Sum {
    fn apply<A: Arith>(a: A, b: A) -> A {
        a.add(b)
    }
}

impl Fold for Mean {
    const MEAN: bool = true;
    fn apply<A: Arith>(a: A, b: A) -> A {
        a.add(b)
    }
}

impl Fold for Max {
    fn apply<A: Arith>(a: A, b: A) -> A {
        max_nan(a, b)
    }
}

impl Fold for Min {
    fn apply<A: Arith>(a: A, b: A) -> A {
        min_nan(a, b)
    }
}

/// The kernel of a [`Fold`] over every input.
pub(super) fn eval_fold<Op: Fold>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let all = (0..inputs.len())
        .map(|i| required(inputs, i))
        .collect::<Result<Vec<_>>>()?;
    let dtype = same_types(ctx, &all)?;
    dispatch_num!(dtype, T => {
        let mut acc = work_values::<T>(all[0])?;
        let mut shape = all[0].shape().to_vec();
        for t in &all[1..] {
            let next = work_values::<T>(t)?;
            (acc, shape) = broadcast_binary(&acc, &shape, &next, t.shape(), Op::apply)?;
        }
        if Op::MEAN {
            let n = Arith::from_real(all.len() as f64);
            acc.iter_mut().for_each(|v| *v = v.div(n));
        }
        Ok(vec![from_work::<T>(&shape, acc)?])
    }, _ => Err(bad_type(ctx, dtype)))
}

pub(super) fn eval_where(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (cond, x, y) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    if cond.dtype() != DataType::Bool {
        return Err(ctx.error(format!("condition must be bool, found {}", cond.dtype())));
    }
    let dtype = same_types(ctx, &[x, y])?;
    let shape = broadcast_shapes(&[cond.shape(), x.shape(), y.shape()])?;
    let c = cond.as_slice::<u8>()?;
    let co = broadcast_offsets(cond.shape(), &shape);
    let xo = broadcast_offsets(x.shape(), &shape);
    let yo = broadcast_offsets(y.shape(), &shape);
    // Whether output element `k` comes from `x`, and which element of its source it is.
    let pick = |k: usize| {
        if c[co[k]] != 0 {
            (true, xo[k])
        } else {
            (false, yo[k])
        }
    };
    let out = match dtype.byte_size() {
        Some(w) => {
            let (xb, yb) = (x.as_bytes()?, y.as_bytes()?);
            let mut bytes = try_with_capacity(co.len() * w)?;
            for k in 0..co.len() {
                let (from_x, i) = pick(k);
                let src = if from_x { xb } else { yb };
                bytes.extend_from_slice(&src[i * w..(i + 1) * w]);
            }
            Tensor::from_bytes(dtype, &shape, &bytes)?
        }
        // Strings and packed types, element by element.
        None => {
            let mut out = Tensor::zeros(dtype, &shape)?;
            for k in 0..co.len() {
                let (from_x, i) = pick(k);
                out.copy_element_from(k, if from_x { x } else { y }, i)?;
            }
            out
        }
    };
    Ok(vec![out])
}

pub(super) fn infer_where(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(1).or(ctx.input(2)).and_then(|t| t.elem);
    Ok(vec![broadcast_type(ctx, 0..3, elem)])
}

/// `x` limited to `[lo, hi]`; `hi` wins when `lo > hi`, NaN stays NaN.
fn clip<A: Arith>(x: A, lo: A, hi: A) -> A {
    let t = if x < lo { lo } else { x };
    if t > hi {
        hi
    } else {
        t
    }
}

/// The `min` and `max` attributes of a `Clip` node up to opset 10 (infinite when absent).
#[derive(Clone, Copy, Debug)]
pub(super) struct ClipBounds {
    min: f32,
    max: f32,
}

impl Attributes for ClipBounds {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<ClipBounds> {
        Ok(ClipBounds {
            min: node.attr_float("min", f32::NEG_INFINITY)?,
            max: node.attr_float("max", f32::INFINITY)?,
        })
    }
}

/// `Clip` up to opset 10: bounds from the `min` and `max` attributes.
pub(super) fn eval_clip_attrs(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let ClipBounds { min, max } = *ctx.attrs::<ClipBounds>()?;
    let (lo, hi) = (f64::from(min), f64::from(max));
    crate::ops::num::dispatch_float!(x.dtype(), T => {
        let (lo, hi) = (Arith::from_real(lo), Arith::from_real(hi));
        Ok(vec![map_num::<T>(x, |v| clip(v, lo, hi))?])
    }, _ => Err(bad_type(ctx, x.dtype())))
}

/// The single value of an optional bound input, in the work type of `T`.
fn bound<T: Num>(ctx: &EvalCtx<'_>, t: Option<&Tensor>, x: &Tensor) -> Result<Option<T::Work>> {
    let Some(t) = t else { return Ok(None) };
    if t.dtype() != x.dtype() {
        return Err(ctx.error(format!(
            "bounds must have the input's type {}, found {}",
            x.dtype(),
            t.dtype()
        )));
    }
    match t.as_slice::<T>()? {
        [v] => Ok(Some(v.widen())),
        _ => Err(ctx.error(format!(
            "bounds must be single values, found shape {:?}",
            t.shape()
        ))),
    }
}

/// `Clip` from opset 11: bounds from optional inputs 1 and 2.
pub(super) fn eval_clip(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    dispatch_num!(x.dtype(), T => {
        let lo = bound::<T>(ctx, optional(inputs, 1), x)?.unwrap_or(Arith::LOWEST);
        let hi = bound::<T>(ctx, optional(inputs, 2), x)?.unwrap_or(Arith::HIGHEST);
        Ok(vec![map_num::<T>(x, |v| clip(v, lo, hi))?])
    }, _ => Err(bad_type(ctx, x.dtype())))
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn run(op: &str, opset: i64, inputs: &[Option<&Tensor>]) -> crate::Result<Tensor> {
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("x{i}")).collect();
        Ok(eval_node(&Node::new(op, "n", names, ["y"]), opset, inputs)?.remove(0))
    }

    #[test]
    fn max_broadcasts_many_inputs_and_propagates_nan() {
        let a = f32s(&[3], &[1.0, f32::NAN, 3.0]);
        let b = f32s(&[2, 1], &[2.0, 0.0]);
        let c = f32s(&[], &[2.5]);
        let y = run("Max", 13, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        let v = y.to_vec::<f32>().unwrap();
        assert_eq!(v[0], 2.5);
        assert!(v[1].is_nan() && v[4].is_nan());
        assert_eq!(v[2], 3.0);
        let y = run("Min", 13, &[Some(&a)]).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap()[2], 3.0);
    }

    #[test]
    fn mean_and_sum_follow_the_onnx_example() {
        let a = f32s(&[3], &[3.0, 0.0, 2.0]);
        let b = f32s(&[3], &[1.0, 3.0, 4.0]);
        let c = f32s(&[3], &[2.0, 6.0, 6.0]);
        let y = run("Mean", 13, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [2.0, 3.0, 4.0]);
        let y = run("Sum", 13, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [6.0, 9.0, 12.0]);
    }

    #[test]
    fn where_chooses_per_element_for_any_type() {
        let c = Tensor::from_vec(DataType::Bool, &[2, 1], vec![1u8, 0]).unwrap();
        let x = f32s(&[2], &[1.0, 2.0]);
        let y = f32s(&[], &[9.0]);
        let out = run("Where", 16, &[Some(&c), Some(&x), Some(&y)]).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), [1.0, 2.0, 9.0, 9.0]);
        let s = |v: &str| Tensor::from_strings(&[1], vec![v.as_bytes().to_vec()]).unwrap();
        let out = run("Where", 16, &[Some(&c), Some(&s("a")), Some(&s("b"))]).unwrap();
        assert_eq!(out.as_strings().unwrap(), [b"a".to_vec(), b"b".to_vec()]);
        let err = run("Where", 16, &[Some(&x), Some(&x), Some(&y)]).unwrap_err();
        assert!(err.to_string().contains("condition must be bool"), "{err}");
    }

    #[test]
    fn clip_takes_inputs_or_attributes() {
        let x = Tensor::from_vec(DataType::Int8, &[3], vec![-100i8, 5, 100]).unwrap();
        let lo = Tensor::from_vec(DataType::Int8, &[], vec![0i8]).unwrap();
        let y = run("Clip", 13, &[Some(&x), Some(&lo), None]).unwrap();
        assert_eq!(y.to_vec::<i8>().unwrap(), [0, 5, 100]);
        let hi = Tensor::from_vec(DataType::Int8, &[], vec![-1i8]).unwrap();
        let y = run("Clip", 13, &[Some(&x), Some(&lo), Some(&hi)]).unwrap();
        assert_eq!(y.to_vec::<i8>().unwrap(), [-1, -1, -1]);
        let node = Node::new("Clip", "n", ["x"], ["y"]).with_attr("max", AttrValue::Float(0.5));
        let x = f32s(&[2], &[-1.0, 1.0]);
        let y = eval_node(&node, 6, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.to_vec::<f32>().unwrap(), [-1.0, 0.5]);
    }
}
