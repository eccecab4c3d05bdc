//! PyTorch `gather`, `take` and `take_along_dim`.
//!
//! PyTorch rejects negative indices in `gather` and `take_along_dim`; the plans use mode
//! `error`, which also accepts `-d..-1` (counting from the end), so they agree with PyTorch on
//! every input PyTorch accepts.

use super::super::plan::{GatherPlan, ShapeOp};
use super::super::{GatherError, GatherSpec, OutOfRange};
use super::numpy::{rename, take_along_axis};
use super::{axis_attr, elements, flat};

/// `torch.gather(input, dim, index)`: ONNX `GatherElements` semantics (`index` may be smaller
/// than `input` on dimensions other than `dim`, the output has `index`'s shape):
///
/// `gather(x, dim=d, idx) ==> GatherMultiaxis(Slice(x, to idx's sizes except on d), idx,
/// axes=[d])`.
pub fn gather(rank: usize, dim: i64) -> Result<GatherPlan, GatherError> {
    Ok(elements(
        axis_attr("torch.gather", "dim", dim, rank)?,
        true,
        OutOfRange::Error,
    ))
}

/// `torch.take(input, index)`: gathers from the flattened input, output shaped like `index`:
///
/// `take(x, idx) ==> GatherMultiaxis(Reshape(x, [-1, 1, .., 1]), idx, axes=[0])`.
pub fn take(indices_rank: usize) -> Result<GatherPlan, GatherError> {
    Ok(flat(indices_rank, OutOfRange::Error))
}

/// `torch.take_along_dim(input, indices, dim)`: like `numpy.take_along_axis` (non-`dim`
/// dimensions broadcast); with `dim=None` both tensors are flattened:
///
/// `take_along_dim(x, idx, dim=d) ==> GatherMultiaxis(x, idx, axes=[d])`;
/// `take_along_dim(x, idx) ==> GatherMultiaxis(Reshape(x, [-1]), Reshape(idx, [-1]), axes=[0])`.
pub fn take_along_dim(
    data_rank: usize,
    indices_rank: usize,
    dim: Option<i64>,
) -> Result<GatherPlan, GatherError> {
    match dim {
        Some(_) => take_along_axis(data_rank, indices_rank, dim)
            .map_err(|e| rename(e, "torch.take_along_dim")),
        None => Ok(GatherPlan {
            crop_input_to_indices: None,
            input: vec![ShapeOp::Reshape(vec![-1])],
            indices: vec![ShapeOp::Reshape(vec![-1])],
            spec: GatherSpec::new(vec![0]),
            output: vec![],
        }),
    }
}
