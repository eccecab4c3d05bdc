//! numpy `take` and `take_along_axis` (mode `raise`, the default).
//!
//! numpy's other index modes (`wrap`, and `clip`, which clips negative indices to 0 instead of
//! counting from the end) have no `GatherMultiaxis` equivalent and are not mapped.

use super::super::plan::{GatherPlan, ShapeOp};
use super::super::{GatherError, GatherSpec, OutOfRange};
use super::{axis_attr, elements, flat};
use crate::gather::map::onnx;

/// `numpy.take(a, indices, axis)`: with an axis it is ONNX `Gather` ([`onnx::gather`]); with
/// `axis=None` it gathers from the flattened array:
///
/// `take(a, idx) ==> GatherMultiaxis(Reshape(a, [-1, 1, .., 1]), idx, axes=[0])` (rank of
/// `idx`; scalar indices are unsqueezed to rank 1 and the result squeezed back).
pub fn take(
    data_rank: usize,
    indices_rank: usize,
    axis: Option<i64>,
) -> Result<GatherPlan, GatherError> {
    match axis {
        Some(axis) => {
            onnx::gather(data_rank, indices_rank, axis).map_err(|e| rename(e, "numpy.take"))
        }
        None => Ok(flat(indices_rank, OutOfRange::Error)),
    }
}

/// `numpy.take_along_axis(a, indices, axis)`: both of rank `r`; non-axis dimensions broadcast
/// against each other, so it is `GatherMultiaxis` itself:
///
/// `take_along_axis(a, idx, axis=k) ==> GatherMultiaxis(a, idx, axes=[k])`;
/// `take_along_axis(a, idx, axis=None) ==> GatherMultiaxis(Reshape(a, [-1]), idx, axes=[0])`
/// (numpy requires 1-D indices then).
pub fn take_along_axis(
    data_rank: usize,
    indices_rank: usize,
    axis: Option<i64>,
) -> Result<GatherPlan, GatherError> {
    const OP: &str = "numpy.take_along_axis";
    match axis {
        Some(axis) => {
            if data_rank != indices_rank {
                return Err(GatherError::RankMismatch {
                    input: data_rank,
                    indices: indices_rank,
                });
            }
            Ok(elements(
                axis_attr(OP, "axis", axis, data_rank)?,
                false,
                OutOfRange::Error,
            ))
        }
        None if indices_rank == 1 => Ok(GatherPlan {
            crop_input_to_indices: None,
            input: vec![ShapeOp::Reshape(vec![-1])],
            indices: vec![],
            spec: GatherSpec::new(vec![0]),
            output: vec![],
        }),
        None => Err(GatherError::Unsupported {
            op: OP,
            reason: format!("axis=None needs 1-D indices, these have rank {indices_rank}"),
        }),
    }
}

/// The same error reported under another operator's name.
pub(crate) fn rename(e: GatherError, op: &'static str) -> GatherError {
    match e {
        GatherError::BadAttribute {
            attr,
            value,
            reason,
            ..
        } => GatherError::BadAttribute {
            op,
            attr,
            value,
            reason,
        },
        GatherError::Unsupported { reason, .. } => GatherError::Unsupported { op, reason },
        other => other,
    }
}
