//! `TopK` (opset 1+): the `k` largest (or, with `largest = 0`, smallest) elements along `axis`
//! (default -1) and their `int64` indices. `k` is an attribute in opset 1 and input 1 (a
//! one-element `int64` tensor) from opset 10; `largest` and `sorted` arrived in opset 11.
//!
//! Results are always sorted (allowed when `sorted = 0`), equal values keep the lower index
//! first, as the specification and onnxruntime do, and NaN counts as larger than every number.
//! Every numeric type is accepted.

use crate::tensor::try_vec;
use std::cmp::Ordering;

use crate::error::Result;
use crate::ir::{Dim, Shape, TensorType};
use crate::ops::util::{normalize_axis, required, scalar_i64, tensor};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;
use crate::DataType;

use super::work::{bad_type, split_at_axis};
use crate::ops::num::{dispatch_num, Arith, Num};

/// Orders two values with NaN above every number.
fn order<A: Arith>(a: A, b: A) -> Ordering {
    a.partial_cmp(&b)
        .unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

/// The `k` of a node: input 1 from opset 10, the attribute before.
fn node_k(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<i64> {
    if ctx.opset >= 10 {
        scalar_i64(required(inputs, 1)?)
    } else {
        match ctx.node.attr("k") {
            Some(_) => ctx.node.attr_int("k", 0),
            None => Err(ctx.error("the k attribute is required")),
        }
    }
}

fn top_k<T: Num>(x: &Tensor, axis: usize, k: usize, largest: bool) -> Result<(Tensor, Tensor)> {
    let mut shape = x.shape().to_vec();
    shape[axis] = k;
    if k == 0 || x.is_empty() {
        // No element to select: the loops below would walk every empty row for nothing (2^36
        // rows of [2^36, 0] take minutes).
        return Ok((
            Tensor::zeros(T::DTYPE, &shape)?,
            Tensor::zeros(DataType::Int64, &shape)?,
        ));
    }
    let (outer, size, inner) = split_at_axis(x.shape(), axis);
    let v = x.as_slice::<T>()?;
    let mut values = try_vec(outer * k * inner, <T as bytemuck::Zeroable>::zeroed())?;
    let mut indices = try_vec(outer * k * inner, 0i64)?;
    let mut row: Vec<usize> = Vec::with_capacity(size);
    for o in 0..outer {
        for n in 0..inner {
            let at = |i: usize| (o * size + i) * inner + n;
            row.clear();
            row.extend(0..size);
            // A stable sort keeps equal values in index order.
            row.sort_by(|&i, &j| {
                let ord = order(v[at(i)].widen(), v[at(j)].widen());
                if largest {
                    ord.reverse()
                } else {
                    ord
                }
            });
            for (r, &i) in row.iter().take(k).enumerate() {
                let dst = (o * k + r) * inner + n;
                values[dst] = v[at(i)];
                indices[dst] = i as i64;
            }
        }
    }
    Ok((
        tensor(T::DTYPE, &shape, values)?,
        tensor(DataType::Int64, &shape, indices)?,
    ))
}

pub(super) fn eval_topk(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let axis = normalize_axis(ctx.node.attr_int("axis", -1)?, x.rank())?;
    let largest = ctx.node.attr_int("largest", 1)? != 0;
    let k = node_k(ctx, inputs)?;
    let size = x.shape()[axis];
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= size)
        .ok_or_else(|| ctx.error(format!("k = {k} is outside [0, {size}] for axis {axis}")))?;
    let (values, indices) = dispatch_num!(x.dtype(), T => top_k::<T>(x, axis, k, largest)?,
        _ => return Err(bad_type(ctx, x.dtype())));
    Ok(vec![values, indices])
}

pub(super) fn infer_topk(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let input = ctx.input(0).cloned().unwrap_or_default();
    let k = if ctx.opset >= 10 {
        ctx.constant(1).and_then(|t| scalar_i64(t).ok())
    } else {
        ctx.node
            .attr("k")
            .and_then(|_| ctx.node.attr_int("k", 0).ok())
    };
    let shape = match &input.shape {
        Some(s) => {
            let axis = normalize_axis(ctx.node.attr_int("axis", -1)?, s.rank())?;
            let mut dims = s.dims.clone();
            dims[axis] = k.filter(|&k| k >= 0).map_or(Dim::Unknown, Dim::Known);
            Some(Shape::new(dims))
        }
        None => None,
    };
    Ok(vec![
        TensorType {
            elem: input.elem,
            shape: shape.clone(),
        },
        TensorType {
            elem: Some(DataType::Int64),
            shape,
        },
    ])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn run(largest: i64, x: &Tensor, k: i64) -> crate::Result<(Tensor, Tensor)> {
        let node = Node::new("TopK", "t", ["x", "k"], ["v", "i"])
            .with_attr("largest", AttrValue::Int(largest));
        let k = Tensor::from_vec(DataType::Int64, &[1], vec![k])?;
        let mut out = eval_node(&node, 11, &[Some(x), Some(&k)])?;
        let i = out.remove(1);
        Ok((out.remove(0), i))
    }

    #[test]
    fn largest_and_smallest_with_ties_in_index_order() {
        let x = Tensor::from_vec(
            DataType::Float,
            &[2, 4],
            vec![0.0f32, 1.0, 1.0, 3.0, 5.0, 5.0, f32::NAN, 2.0],
        )
        .unwrap();
        let (v, i) = run(1, &x, 3).unwrap();
        assert_eq!(v.shape(), &[2, 3]);
        let v = v.to_vec::<f32>().unwrap();
        assert_eq!(&v[..3], [3.0, 1.0, 1.0]);
        assert!(v[3].is_nan());
        assert_eq!(&v[4..], [5.0, 5.0]);
        assert_eq!(i.to_vec::<i64>().unwrap(), [3, 1, 2, 2, 0, 1]);
        let (v, i) = run(0, &x, 2).unwrap();
        assert_eq!(v.to_vec::<f32>().unwrap()[..2], [0.0, 1.0]);
        assert_eq!(i.to_vec::<i64>().unwrap()[2..], [3, 0]);
    }

    #[test]
    fn k_must_fit_the_axis() {
        let x = Tensor::from_vec(DataType::Uint64, &[2], vec![1u64, 2]).unwrap();
        let err = run(1, &x, 3).unwrap_err();
        assert!(err.to_string().contains("k = 3"), "{err}");
        let (v, _) = run(1, &x, 0).unwrap();
        assert_eq!(v.shape(), &[0]);
    }

    #[test]
    fn inference_sets_the_axis_to_a_constant_k() {
        use crate::ir::{Dim, TensorType};
        let n = Dim::Symbolic("n".into());
        let x = TensorType::new(DataType::Float, vec![n.clone(), Dim::Known(9)]);
        let k = Tensor::from_vec(DataType::Int64, &[1], vec![4i64]).unwrap();
        let node = Node::new("TopK", "t", ["x", "k"], ["v", "i"]);
        let t = crate::ops::infer_node(&node, 11, &[Some(x.clone()), None], &[None, Some(&k)]);
        assert_eq!(
            t[0],
            TensorType::new(DataType::Float, vec![n.clone(), Dim::Known(4)])
        );
        assert_eq!(t[1].elem, Some(DataType::Int64));
        let t = crate::ops::infer_node(&node, 11, &[Some(x), None], &[None, None]);
        assert_eq!(t[1].shape.as_ref().unwrap().dims, vec![n, Dim::Unknown]);
    }

    #[test]
    fn opset_1_takes_k_as_an_attribute() {
        let x = Tensor::from_vec(DataType::Int32, &[3], vec![1i32, 9, 5]).unwrap();
        let node = Node::new("TopK", "t", ["x"], ["v", "i"]).with_attr("k", AttrValue::Int(2));
        let out = eval_node(&node, 1, &[Some(&x)]).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [9, 5]);
        assert_eq!(out[1].to_vec::<i64>().unwrap(), [1, 2]);
    }
}
