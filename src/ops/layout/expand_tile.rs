//! `Expand` (opset 8) and `Tile` (1 with `tiles`/`axis` inputs, 6 with `repeats`): copies of a
//! tensor stretched by broadcasting or repeated whole.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Expand.html>,
//! <https://onnx.ai/onnx/operators/onnx__Tile.html>.
//!
//! `Expand` broadcasts both ways, numpy style: a `shape` entry of 1 keeps the input's dim, so
//! the output may be larger than `shape`.

use crate::error::Result;
use crate::ir::broadcast_dim;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::util::{
    broadcast_shapes, normalize_axis, required, scalar_i64, strides, to_i64s,
};
use super::super::{EvalCtx, InferCtx};
use super::runs::{
    const_ints, dim_times, gather_axes, in_dims, in_elem, in_len, to_usize, typed, unknown_dims,
    AxisRead,
};

pub(super) fn eval_expand(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let target = to_i64s(required(inputs, 1)?)?
        .into_iter()
        .map(|d| to_usize(d, "a shape entry"))
        .collect::<Result<Vec<_>>>()?;
    let shape = data.shape();
    let out = broadcast_shapes(&[shape, &target]).map_err(|e| ctx.error(e.to_string()))?;
    let lead = out.len() - shape.len();
    let st = strides(shape);
    let axes: Vec<AxisRead> = (0..out.len())
        .map(|d| match d.checked_sub(lead) {
            Some(i) if shape[i] == out[d] => AxisRead::identity(out[d], st[i]),
            _ => AxisRead::map(out[d], 0, |_| Some(0)),
        })
        .collect();
    Ok(vec![gather_axes(data, &axes, None)?])
}

pub(super) fn infer_expand(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = in_elem(ctx, 0);
    let target: Option<Vec<Dim>> = match const_ints(ctx, 1) {
        Some(v) => Some(v.into_iter().map(Dim::Known).collect()),
        None => in_len(ctx, 1).map(unknown_dims),
    };
    let dims = match (in_dims(ctx, 0), target) {
        (Some(a), Some(b)) => {
            let rank = a.len().max(b.len());
            let at = |d: &[Dim], i: usize| {
                (i + d.len())
                    .checked_sub(rank)
                    .map_or(Dim::Known(1), |j| d[j].clone())
            };
            Some(
                (0..rank)
                    .map(|i| broadcast_dim(&at(a, i), &at(&b, i)))
                    .collect(),
            )
        }
        _ => None,
    };
    Ok(vec![typed(elem, dims)])
}

/// The repeat count of every axis: the `repeats` input from opset 6, the `tiles` count along
/// input `axis` before.
fn repeats(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>], rank: usize) -> Result<Vec<usize>> {
    let reps = if ctx.opset < 6 {
        let tiles = scalar_i64(required(inputs, 1)?)?;
        let axis = normalize_axis(scalar_i64(required(inputs, 2)?)?, rank)?;
        (0..rank)
            .map(|d| if d == axis { tiles } else { 1 })
            .collect()
    } else {
        to_i64s(required(inputs, 1)?)?
    };
    if reps.len() != rank {
        return Err(ctx.error(format!(
            "{} repeats for an input of rank {rank}",
            reps.len()
        )));
    }
    reps.into_iter()
        .map(|r| to_usize(r, "a repeat count"))
        .collect()
}

pub(super) fn eval_tile(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let shape = data.shape();
    let reps = repeats(ctx, inputs, shape.len())?;
    let st = strides(shape);
    let axes = (0..shape.len())
        .map(|d| {
            let n = shape[d];
            let len = n
                .checked_mul(reps[d])
                .ok_or_else(|| ctx.error("output is too large"))?;
            Ok(AxisRead::map(len, st[d], move |i| Some(i % n)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![gather_axes(data, &axes, None)?])
}

pub(super) fn infer_tile(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = in_dims(ctx, 0).map(|d| match const_ints(ctx, 1) {
        Some(r) if ctx.opset >= 6 && r.len() == d.len() => {
            d.iter().zip(r).map(|(d, r)| dim_times(d, r)).collect()
        }
        _ => unknown_dims(d.len()),
    });
    Ok(vec![typed(in_elem(ctx, 0), dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn i64s(v: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, &[v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn expand_broadcasts_both_ways() {
        // The spec's example: [3, 1] expanded to [2, 1, 6].
        let x = Tensor::from_vec(DataType::Float, &[3, 1], vec![1.0f32, 2.0, 3.0]).unwrap();
        let node = Node::new("Expand", "e", ["x", "s"], ["y"]);
        let out = eval_node(&node, 13, &[Some(&x), Some(&i64s(&[2, 1, 6]))]).unwrap();
        assert_eq!(out[0].shape(), &[2, 3, 6]);
        let v = out[0].to_vec::<f32>().unwrap();
        assert_eq!(&v[..7], &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0]);
        assert_eq!(v[35], 3.0);
        let out = eval_node(&node, 13, &[Some(&x), Some(&i64s(&[3, 4]))]).unwrap();
        assert_eq!(out[0].shape(), &[3, 4]);
        let e = eval_node(&node, 13, &[Some(&x), Some(&i64s(&[2, 4]))]).unwrap_err();
        assert!(e.to_string().contains("do not broadcast"), "{e}");
    }

    #[test]
    fn tile_repeats_whole_axes() {
        let x = Tensor::from_vec(DataType::Int32, &[2, 2], vec![0i32, 1, 2, 3]).unwrap();
        let node = Node::new("Tile", "t", ["x", "r"], ["y"]);
        let out = eval_node(&node, 13, &[Some(&x), Some(&i64s(&[2, 2]))]).unwrap();
        assert_eq!(out[0].shape(), &[4, 4]);
        assert_eq!(
            out[0].to_vec::<i32>().unwrap(),
            [0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3]
        );
        let e = eval_node(&node, 13, &[Some(&x), Some(&i64s(&[2]))]).unwrap_err();
        assert!(e.to_string().contains("1 repeats"), "{e}");
        let e = eval_node(&node, 13, &[Some(&x), Some(&i64s(&[1, -1]))]).unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");

        let node = Node::new("Tile", "t", ["x", "n", "a"], ["y"]);
        let n = Tensor::scalar(DataType::Int64, 3i64).unwrap();
        let a = Tensor::scalar(DataType::Int64, 0i64).unwrap();
        let out = eval_node(&node, 1, &[Some(&x), Some(&n), Some(&a)]).unwrap();
        assert_eq!(out[0].shape(), &[6, 2]);
    }

    #[test]
    fn expand_and_tile_shape_functions() {
        use crate::ops::layout::runs::infer_dims_for;
        let node = Node::new("Expand", "e", ["x", "s"], ["y"]);
        let s = i64s(&[1, 5]);
        let out = infer_dims_for(&node, 13, &[Some(&["N", "1"]), None], &[None, Some(&s)]);
        assert_eq!(out.unwrap(), ["N", "5"]);
        let node = Node::new("Tile", "t", ["x", "r"], ["y"]);
        let r = i64s(&[1, 3]);
        let out = infer_dims_for(&node, 13, &[Some(&["N", "2"]), None], &[None, Some(&r)]);
        assert_eq!(out.unwrap(), ["N", "6"]);
    }
}
