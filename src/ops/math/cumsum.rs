//! `CumSum` (opset 11+) and `CumProd` (opset 26): running sums or products along the axis given
//! by input 1 (a scalar), optionally `exclusive` (each output leaves its own element out) and
//! `reverse` (running from the end). Every numeric type; `f16`/`bf16` run in `f32`, integers
//! wrap.

use crate::error::Result;
use crate::ops::util::{normalize_axis, required, scalar_i64, tensor};
use crate::ops::EvalCtx;
use crate::tensor::Tensor;

use super::work::{bad_type, split_at_axis};
use crate::ops::num::{dispatch_num, Arith, Num};

fn cumulate<T: Num>(
    x: &Tensor,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    product: bool,
) -> Result<Tensor> {
    let (outer, size, inner) = split_at_axis(x.shape(), axis);
    let v = x.as_slice::<T>()?;
    let mut out = v.to_vec();
    for o in 0..outer {
        for k in 0..inner {
            let mut acc = if product {
                <T::Work as Arith>::ONE
            } else {
                <T::Work as Arith>::ZERO
            };
            for step in 0..size {
                let i = if reverse { size - 1 - step } else { step };
                let at = (o * size + i) * inner + k;
                let next = if product {
                    acc.mul(v[at].widen())
                } else {
                    acc.add(v[at].widen())
                };
                out[at] = T::narrow(if exclusive { acc } else { next });
                acc = next;
            }
        }
    }
    tensor(T::DTYPE, x.shape(), out)
}

pub(super) fn eval_cumsum(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    eval_cumulative(ctx, inputs, false)
}

pub(super) fn eval_cumprod(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    eval_cumulative(ctx, inputs, true)
}

fn eval_cumulative(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
    product: bool,
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let axis = normalize_axis(scalar_i64(required(inputs, 1)?)?, x.rank())?;
    let exclusive = ctx.node.attr_int("exclusive", 0)? != 0;
    let reverse = ctx.node.attr_int("reverse", 0)? != 0;
    dispatch_num!(x.dtype(), T => Ok(vec![cumulate::<T>(x, axis, exclusive, reverse, product)?]),
        _ => Err(bad_type(ctx, x.dtype())))
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn run(attrs: &[(&str, i64)], x: &Tensor, axis: i32) -> crate::Result<Tensor> {
        let mut node = Node::new("CumSum", "c", ["x", "a"], ["y"]);
        for (k, v) in attrs {
            node = node.with_attr(k, AttrValue::Int(*v));
        }
        let a = Tensor::scalar(DataType::Int32, axis)?;
        Ok(eval_node(&node, 14, &[Some(x), Some(&a)])?.remove(0))
    }

    #[test]
    fn follows_the_onnx_examples() {
        let x = Tensor::from_vec(DataType::Float, &[5], vec![1.0f32, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let y = run(&[], &x, 0).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 3.0, 6.0, 10.0, 15.0]);
        let y = run(&[("exclusive", 1), ("reverse", 1)], &x, 0).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [14.0, 12.0, 9.0, 5.0, 0.0]);
    }

    #[test]
    fn runs_along_any_axis() {
        let x = Tensor::from_vec(DataType::Int32, &[2, 3], vec![1i32, 2, 3, 4, 5, 6]).unwrap();
        let y = run(&[], &x, -2).unwrap();
        assert_eq!(y.to_vec::<i32>().unwrap(), [1, 2, 3, 5, 7, 9]);
        let mut node = Node::new("CumProd", "c", ["x", "a"], ["y"]);
        node = node.with_attr("exclusive", AttrValue::Int(1));
        let a = Tensor::scalar(DataType::Int32, 1i32).unwrap();
        let y = eval_node(&node, 26, &[Some(&x), Some(&a)])
            .unwrap()
            .remove(0);
        assert_eq!(y.to_vec::<i32>().unwrap(), [1, 1, 2, 1, 4, 20]);
        let err = run(&[], &x, 2).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
    }
}
