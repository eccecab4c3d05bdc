//! `com.microsoft.RotaryEmbedding` (opset 1): the default domain's rotary embedding with
//! onnxruntime's input order (`input`, `position_ids`, `cos_cache`, `sin_cache`).
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, section `com.microsoft.RotaryEmbedding`.
//!
//! `position_ids` is `(B, S)`, or one value: the position of the first token, the others
//! following it. A 3-D input without `num_heads` has heads of `rotary_embedding_dim` features
//! (twice the caches' width when that is 0 too). The kernel is the default domain's
//! (`nn::rotate`); packed batching is not supported.

use crate::error::Result;
use crate::tensor::Tensor;

use super::super::nn::{rotate, Rotation};
use super::super::util::{required, to_i64s};
use super::super::EvalCtx;

pub(in crate::ops) fn eval_rotary_embedding(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, ids, cos, sin) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
        required(inputs, 3)?,
    );
    if ctx.node.attr_int("is_packed_batching", 0)? != 0 {
        return Err(ctx.error("packed batching is not supported"));
    }
    let ids = to_i64s(ids)?;
    let (b, s) = match *x.shape() {
        [b, s, _] => (b, s),
        [b, _, s, _] => (b, s),
        _ => return Err(ctx.error(format!("input {:?} is not 3-D or 4-D", x.shape()))),
    };
    let positions = match ids[..] {
        [first] if b * s != 1 => (0..b)
            .flat_map(|_| (0..s).map(move |i| first + i as i64))
            .collect(),
        _ => ids,
    };
    let dim = ctx.node.attr_int("rotary_embedding_dim", 0)?;
    let mut num_heads = ctx.node.attr_int("num_heads", 0)?;
    if let ([_, _, hidden], 0) = (x.shape(), num_heads) {
        let head = if dim > 0 {
            dim
        } else {
            2 * cos.shape().get(1).copied().unwrap_or(0) as i64
        };
        num_heads = if head > 0 { *hidden as i64 / head } else { 0 };
    }
    let rotation = Rotation {
        num_heads,
        dim,
        interleaved: ctx.node.attr_int("interleaved", 0)? != 0,
    };
    Ok(vec![rotate(ctx, x, (cos, sin), Some(positions), rotation)?])
}
