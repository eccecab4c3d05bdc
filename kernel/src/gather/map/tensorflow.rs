//! TensorFlow `gather` (with `batch_dims`) and `gather_nd`.
//!
//! TensorFlow on CPU rejects out-of-range indices (on GPU it writes zeros); the plans use mode
//! `error`. TensorFlow rejects negative indices; mode `error` also accepts `-d..-1`, so the plans
//! agree with TensorFlow on every input it accepts.

use super::super::plan::GatherPlan;
use super::super::{GatherError, OutOfRange};
use super::blocks_checked;
use crate::gather::map::onnx::nd_checked;

/// `tf.gather(params, indices, axis, batch_dims)`:
///
/// `out[b.., p.., i.., t..] = params[b.., p.., idx[b.., i..], t..]` with `b = batch_dims`
/// (negative counts from the end of `indices`' dimensions) and `b <= axis`; with `b = 0` it is
/// ONNX `Gather`. The plan is `blocks`'s: index dimensions after the batch
/// dimensions are unsqueezed to line up with the data, axis-first.
pub fn gather(
    params_rank: usize,
    indices_rank: usize,
    axis: i64,
    batch_dims: i64,
) -> Result<GatherPlan, GatherError> {
    blocks_checked(
        "tf.gather",
        params_rank,
        indices_rank,
        axis,
        batch_dims,
        OutOfRange::Error,
    )
}

/// `tf.gather_nd(params, indices, batch_dims)` = ONNX `GatherND`, see
/// [`super::onnx::gather_nd`]. `index_depth` is `indices.shape[-1]`, which must be static.
pub fn gather_nd(
    params_rank: usize,
    indices_rank: usize,
    index_depth: usize,
    batch_dims: i64,
) -> Result<GatherPlan, GatherError> {
    nd_checked(
        "tf.gather_nd",
        params_rank,
        indices_rank,
        index_depth,
        batch_dims,
        OutOfRange::Error,
    )
}
