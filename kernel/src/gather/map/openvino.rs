//! OpenVINO `Gather-8`: TensorFlow's gather with `batch_dims`, negative indices, and zeros for
//! out-of-range indices (mode `zero`).

use super::super::plan::GatherPlan;
use super::super::{GatherError, OutOfRange};
use super::blocks_checked;

/// OpenVINO `Gather-8(data, indices, axis)` with attribute `batch_dims`:
///
/// `out[b.., p.., i.., t..] = data[b.., p.., idx[b.., i..], t..]`, an index outside
/// `[-d, d-1]` gives 0;
///
/// `Gather-8(data, idx, axis=a, batch_dims=b) ==> GatherMultiaxis(Unsqueeze(data, [a+1, a+m)),
/// Unsqueeze(idx, [b, a) + [a+m, r+m-1)), axes=[a], mode="zero")` with `m = rank(idx) - b`
/// index dimensions (see `blocks`, which also covers `m = 0`).
///
/// A negative `batch_dims` counts from the end of the indices' dimensions; a negative `axis`
/// from the end of the data's.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{map::openvino, OutOfRange, ShapeOp};
/// // The specification's layer: data (2, 64, 128), indices (2, 32, 21), axis 1, batch_dims 1.
/// let plan = openvino::gather8(3, 3, 1, 1)?;
/// assert_eq!(plan.shapes(&[2, 64, 128], &[2, 32, 21])?.output, [2, 32, 21, 128]);
/// assert_eq!(plan.spec.mode, OutOfRange::Zero);
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
pub fn gather8(
    data_rank: usize,
    indices_rank: usize,
    axis: i64,
    batch_dims: i64,
) -> Result<GatherPlan, GatherError> {
    blocks_checked(
        "Gather-8",
        data_rank,
        indices_rank,
        axis,
        batch_dims,
        OutOfRange::Zero,
    )
}
