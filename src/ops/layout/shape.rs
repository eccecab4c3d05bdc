//! `Shape` (opset 1, with `start`/`end` from 15) and `Size` (1): a tensor's dims and element
//! count as `int64` values.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Shape.html>,
//! <https://onnx.ai/onnx/operators/onnx__Size.html>.
//!
//! `start` and `end` are clamped to `[0, rank]` after adding the rank to negative values; a start
//! past the end gives an empty shape. Older opsets have no such attributes, so reading them at
//! every opset changes nothing for valid models.

use crate::error::Result;
use crate::ir::Dim;
use crate::ir::TensorType;
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::required;
use super::super::{EvalCtx, InferCtx};
use super::runs::{in_dims, typed};

/// The range of axes `Shape` reports for a tensor of `rank`.
fn axis_range(node: &crate::ir::Node, rank: usize) -> Result<std::ops::Range<usize>> {
    let r = rank as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(node.attr_int("start", 0)?);
    let end = clamp(node.attr_int("end", r)?);
    Ok(start..end.max(start))
}

pub(super) fn eval_shape(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let range = axis_range(ctx.node, data.rank())?;
    let dims: Vec<i64> = data.shape()[range].iter().map(|&d| d as i64).collect();
    Ok(vec![Tensor::from_vec(
        DataType::Int64,
        &[dims.len()],
        dims,
    )?])
}

pub(super) fn infer_shape(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = match in_dims(ctx, 0) {
        Some(d) => Some(vec![
            Dim::Known(axis_range(ctx.node, d.len())?.len() as i64),
        ]),
        None => Some(vec![Dim::Unknown]),
    };
    Ok(vec![typed(Some(DataType::Int64), dims)])
}

pub(super) fn eval_size(_: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let n = required(inputs, 0)?.len() as i64;
    Ok(vec![Tensor::scalar(DataType::Int64, n)?])
}

pub(super) fn infer_size(_: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![typed(Some(DataType::Int64), Some(Vec::new()))])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn shape_of(start: Option<i64>, end: Option<i64>) -> Vec<i64> {
        let mut node = Node::new("Shape", "s", ["x"], ["y"]);
        if let Some(s) = start {
            node = node.with_attr("start", AttrValue::Int(s));
        }
        if let Some(e) = end {
            node = node.with_attr("end", AttrValue::Int(e));
        }
        let x = Tensor::zeros(DataType::Float, &[2, 3, 4]).unwrap();
        let out = eval_node(&node, 15, &[Some(&x)]).unwrap().remove(0);
        out.to_vec::<i64>().unwrap()
    }

    #[test]
    fn shape_slices_follow_the_onnx_examples() {
        assert_eq!(shape_of(None, None), [2, 3, 4]);
        assert_eq!(shape_of(Some(-1), None), [4]);
        assert_eq!(shape_of(None, Some(-1)), [2, 3]);
        assert_eq!(shape_of(Some(1), Some(2)), [3]);
        assert_eq!(shape_of(Some(-10), Some(10)), [2, 3, 4]);
        assert_eq!(shape_of(Some(2), Some(1)), Vec::<i64>::new());
    }

    #[test]
    fn size_counts_elements_of_any_type() {
        let node = Node::new("Size", "s", ["x"], ["y"]);
        let x = Tensor::from_strings(&[2, 3], vec![Vec::new(); 6]).unwrap();
        let out = eval_node(&node, 13, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(out.shape(), &[] as &[usize]);
        assert_eq!(out.to_vec::<i64>().unwrap(), [6]);
    }

    #[test]
    fn shape_functions_give_lengths_and_scalars() {
        use crate::ops::layout::runs::infer_dims_for;
        let node = Node::new("Shape", "s", ["x"], ["y"]).with_attr("start", AttrValue::Int(1));
        let out = infer_dims_for(&node, 15, &[Some(&["N", "3", "4"])], &[]);
        assert_eq!(out.unwrap(), ["2"]);
        let node = Node::new("Size", "s", ["x"], ["y"]);
        assert_eq!(
            infer_dims_for(&node, 13, &[None], &[]).unwrap(),
            Vec::<String>::new()
        );
    }
}
