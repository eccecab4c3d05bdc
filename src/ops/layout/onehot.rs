//! `OneHot` (opset 9, negative axes from 11): a one-hot encoding of index values along a new
//! axis of length `depth`.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__OneHot.html>.
//!
//! Indices and depth may be of any numeric type (floats are truncated toward zero). A negative
//! index counts from the end of the depth; an index outside `[-depth, depth - 1]` gives a row of
//! off values. `values` is `[off, on]` of any element type.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::util::{normalize_axis, required};
use super::super::{EvalCtx, InferCtx};
use super::runs::{in_dims, in_elem, to_i64s_truncating, to_usize, two_valued, typed};

/// The depth of a `OneHot` node from its single-value `depth` input.
fn depth_of(t: &Tensor) -> Result<usize> {
    match to_i64s_truncating(t)?.as_slice() {
        [d] => to_usize(*d, "depth"),
        _ => Err(crate::Error::Eval(format!(
            "depth must hold one value, found shape {:?}",
            t.shape()
        ))),
    }
}

pub(super) fn eval_one_hot(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let indices = required(inputs, 0)?;
    let depth = depth_of(required(inputs, 1)?)?;
    let values = required(inputs, 2)?;
    if values.len() != 2 {
        return Err(ctx.error(format!(
            "values must hold [off, on], found shape {:?}",
            values.shape()
        )));
    }
    let values = values.clone().into_shape(&[2])?;
    let axis = normalize_axis(ctx.node.attr_int("axis", -1)?, indices.rank() + 1)?;
    let ishape = indices.shape();
    let mut shape = ishape.to_vec();
    shape.insert(axis, depth);
    let inner: usize = ishape[axis..].iter().product();
    let d = depth as i64;
    let picks: Vec<Option<usize>> = to_i64s_truncating(indices)?
        .into_iter()
        .map(|v| {
            let v = if v < 0 { v.checked_add(d) } else { Some(v) };
            v.filter(|v| (0..d).contains(v)).map(|v| v as usize)
        })
        .collect();
    // Only evaluated for a non-empty output, whose size was checked: no overflow.
    let block = depth.saturating_mul(inner);
    let hot = |p: usize| picks[(p / block) * inner + p % inner] == Some(p % block / inner);
    Ok(vec![two_valued(&values, &shape, hot)?])
}

pub(super) fn infer_one_hot(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = match in_dims(ctx, 0) {
        Some(d) => {
            let axis = normalize_axis(ctx.node.attr_int("axis", -1)?, d.len() + 1)?;
            let depth = ctx.constant(1).and_then(|t| depth_of(t).ok());
            let mut dims = d.to_vec();
            dims.insert(axis, depth.map_or(Dim::Unknown, |n| Dim::Known(n as i64)));
            Some(dims)
        }
        None => None,
    };
    Ok(vec![typed(in_elem(ctx, 2), dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    #[test]
    fn one_hot_with_axis_negative_and_out_of_range_indices() {
        let idx = Tensor::from_vec(DataType::Float, &[3], vec![1.0f32, -1.0, 7.0]).unwrap();
        let depth = Tensor::scalar(DataType::Int64, 3i64).unwrap();
        let values = Tensor::from_vec(DataType::Int32, &[2], vec![0i32, 5]).unwrap();
        let node = Node::new("OneHot", "o", ["i", "d", "v"], ["y"]);
        let out = eval_node(&node, 11, &[Some(&idx), Some(&depth), Some(&values)]).unwrap();
        assert_eq!(out[0].shape(), &[3, 3]);
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [0, 5, 0, 0, 0, 5, 0, 0, 0]);

        let node = node.with_attr("axis", AttrValue::Int(0));
        let out = eval_node(&node, 11, &[Some(&idx), Some(&depth), Some(&values)]).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [0, 0, 0, 5, 0, 0, 0, 5, 0]);

        let bad = Tensor::from_vec(DataType::Int32, &[3], vec![0i32, 1, 2]).unwrap();
        let e = eval_node(&node, 11, &[Some(&idx), Some(&depth), Some(&bad)]).unwrap_err();
        assert!(e.to_string().contains("[off, on]"), "{e}");
    }
}
