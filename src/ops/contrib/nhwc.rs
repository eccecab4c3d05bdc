//! `com.microsoft.NhwcMaxPool` (opset 1): `MaxPool` on 8-bit tensors in the channels-last
//! layout `[N, spatial.., C]`, which onnxruntime's NHWC transformer (optimization level
//! ENABLE_ALL) writes around 8-bit convolutions.
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, section `com.microsoft.NhwcMaxPool`: `X`
//! `uint8` or `int8`, attributes `auto_pad`, `ceil_mode`, `dilations`, `kernel_shape`
//! (required), `pads` and `strides`, with `MaxPool`'s meaning.
//!
//! Design note: the kernel moves the channels in front of the spatial dims, runs the
//! interpreter's `MaxPool` (opset 12, the first with 8-bit types) with the node's attributes and
//! moves them back. A maximum is exact, so the result is `MaxPool`'s, bit for bit; the two
//! copies cost what a channels-last kernel would save, which this rarely met operator does not
//! need.

use crate::error::{Error, Result};
use crate::ir::{AttrValue, Node, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{required, unsupported_type};
use super::super::{eval_node, EvalCtx, InferCtx};

/// The opset of the `MaxPool` the kernel runs (the first to take 8-bit tensors).
const MAX_POOL_OPSET: i64 = 12;

/// The attributes `NhwcMaxPool` passes on to `MaxPool`.
const POOL_ATTRIBUTES: &[&str] = &[
    "auto_pad",
    "ceil_mode",
    "dilations",
    "kernel_shape",
    "pads",
    "strides",
];

/// `Transpose` of `x` by `perm`.
fn transpose(x: &Tensor, perm: Vec<i64>) -> Result<Tensor> {
    let node =
        Node::new("Transpose", "layout", ["x"], ["y"]).with_attr("perm", AttrValue::Ints(perm));
    let mut y = eval_node(&node, 13, &[Some(x)])?;
    y.pop()
        .ok_or_else(|| Error::Eval("Transpose gave no output".into()))
}

pub(super) fn eval_nhwc_max_pool(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    if !matches!(x.dtype(), DataType::Uint8 | DataType::Int8) {
        return Err(unsupported_type("NhwcMaxPool", x.dtype()));
    }
    let rank = x.rank() as i64;
    if rank < 3 {
        return Err(ctx.error(format!(
            "X {:?} must be [N, spatial.., C] with one spatial dim or more",
            x.shape()
        )));
    }
    // [N, spatial.., C] -> [N, C, spatial..] and back.
    let to_first: Vec<i64> = [0, rank - 1].into_iter().chain(1..rank - 1).collect();
    let to_last: Vec<i64> = [0].into_iter().chain(2..rank).chain([1]).collect();
    let mut pool = Node::new("MaxPool", &ctx.node.name, ["x"], ["y"]);
    for attr in &ctx.node.attributes {
        if POOL_ATTRIBUTES.contains(&attr.name.as_str()) {
            pool = pool.with_attr(&attr.name, attr.value.clone());
        }
    }
    let pooled = eval_node(&pool, MAX_POOL_OPSET, &[Some(&transpose(x, to_first)?)])?;
    let first = pooled
        .first()
        .ok_or_else(|| Error::Eval("MaxPool gave no output".into()))?;
    Ok(vec![transpose(first, to_last)?])
}

/// The output has the input's element type; its shape is left to the kernel.
pub(super) fn infer_nhwc_max_pool(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    Ok(vec![TensorType { elem, shape: None }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_each_channel_of_a_channels_last_tensor() {
        // [1, 2, 3, 2]: channel 0 holds 0..6, channel 1 holds 10 - (0..6).
        let v: Vec<u8> = (0..6u8).flat_map(|i| [i, 10 - i]).collect();
        let x = Tensor::from_vec(DataType::Uint8, &[1, 2, 3, 2], v).unwrap();
        let mut node = Node::new("NhwcMaxPool", "p", ["x"], ["y"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]));
        node.domain = "com.microsoft".into();
        let y = eval_node(&node, 1, &[Some(&x)]).unwrap();
        // Windows over columns 0-1 and 1-2 of both rows.
        let want = Tensor::from_vec(DataType::Uint8, &[1, 1, 2, 2], vec![4u8, 10, 5, 9]).unwrap();
        assert_eq!(y[0], want);
        let f = Tensor::from_vec(DataType::Float, &[1, 2, 3, 2], vec![0f32; 12]).unwrap();
        let err = eval_node(&node, 1, &[Some(&f)]).unwrap_err();
        assert!(err.to_string().contains("float"), "{err}");
    }
}
