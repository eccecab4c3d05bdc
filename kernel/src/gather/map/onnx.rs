//! ONNX `Gather`, `GatherElements` and `GatherND` (and the CoreML ops that share their
//! semantics: `gather`, `gather_along_axis`, `gather_nd`).
//!
//! Out-of-range indices are errors in ONNX, so every plan here uses mode `error`. Negative
//! indices count from the end, as ONNX allows since opset 11 (all three operators).

use super::super::plan::GatherPlan;
use super::super::{GatherError, OutOfRange};
use super::{axis_attr, blocks, elements, nd};

/// ONNX `Gather` (= `numpy.take` with an axis = TensorFlow `gather` without batch dimensions =
/// CoreML `gather`) on data of rank `r >= 1` and indices of rank `q`:
///
/// `Gather(data, idx, axis=a) ==> GatherMultiaxis(Unsqueeze(data, [a+1, a+q)),
/// Unsqueeze(idx, [0, a) + [a+q, r+q-1)), axes=[a])`; for scalar indices (`q = 0`)
/// `==> Squeeze(GatherMultiaxis(data, Unsqueeze(idx, [0, r)), axes=[a]), [a])`.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{map::onnx, ShapeOp};
/// // data (P, Q, R), indices (S, T), axis 1 -> output (P, S, T, R)
/// let plan = onnx::gather(3, 2, 1)?;
/// assert_eq!(plan.input, [ShapeOp::Unsqueeze(vec![2])]);
/// assert_eq!(plan.indices, [ShapeOp::Unsqueeze(vec![0, 3])]);
/// assert_eq!(plan.spec.axes, [1]);
/// assert!(plan.output.is_empty());
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
pub fn gather(data_rank: usize, indices_rank: usize, axis: i64) -> Result<GatherPlan, GatherError> {
    let axis = axis_attr("Gather", "axis", axis, data_rank)?;
    Ok(blocks(data_rank, indices_rank, axis, 0, OutOfRange::Error))
}

/// ONNX `GatherElements` (= PyTorch `gather` = CoreML `gather_along_axis`) on data and indices
/// of rank `r >= 1`:
///
/// `GatherElements(data, idx, axis=a) ==> GatherMultiaxis(Slice(data, to idx's sizes except on
/// axis a), idx, axes=[a])`.
///
/// The output has the indices' shape; the indices may be smaller than the data on non-axis
/// dimensions but never broadcast, hence the crop. (When the shapes agree statically the rewrite
/// can drop the `Slice`.)
pub fn gather_elements(rank: usize, axis: i64) -> Result<GatherPlan, GatherError> {
    let axis = axis_attr("GatherElements", "axis", axis, rank)?;
    Ok(elements(axis, true, OutOfRange::Error))
}

/// ONNX `GatherND` (= TensorFlow `gather_nd` = CoreML `gather_nd`) on data of rank `r`, indices
/// of rank `q` with static last dimension `index_depth = k`, and `batch_dims = b`:
///
/// `GatherND(data, idx, batch_dims=b) ==> Squeeze?(GatherMultiaxis(Unsqueeze?(data),
/// Unsqueeze?(idx), axes=[b, b+k)))`, see `nd` for the layout.
///
/// `k = 0` (allowed by TensorFlow, not by ONNX) cannot be expressed: the indices would have to
/// lose a dimension of size 0, which no rank-level shape operation does.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{map::onnx, ShapeOp};
/// // Point sampling: data (H, W), indices (N, 2) -> output (N)
/// let plan = onnx::gather_nd(2, 2, 2, 0)?;
/// assert!(plan.input.is_empty() && plan.indices.is_empty());
/// assert_eq!(plan.spec.axes, [0, 1]);
/// assert_eq!(plan.output, [ShapeOp::Squeeze(vec![1])]);
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
pub fn gather_nd(
    data_rank: usize,
    indices_rank: usize,
    index_depth: usize,
    batch_dims: i64,
) -> Result<GatherPlan, GatherError> {
    nd_checked(
        "GatherND",
        data_rank,
        indices_rank,
        index_depth,
        batch_dims,
        OutOfRange::Error,
    )
}

/// Checks GatherND's attribute constraints and builds the plan.
pub(crate) fn nd_checked(
    op: &'static str,
    r: usize,
    q: usize,
    k: usize,
    batch_dims: i64,
    mode: OutOfRange,
) -> Result<GatherPlan, GatherError> {
    let bad = |attr, value: i64, reason: String| GatherError::BadAttribute {
        op,
        attr,
        value,
        reason,
    };
    let limit = r.min(q);
    if batch_dims < 0 || batch_dims as usize >= limit {
        return Err(bad(
            "batch_dims",
            batch_dims,
            format!("must be in [0, {limit}) for data rank {r} and indices rank {q}"),
        ));
    }
    let b = batch_dims as usize;
    if k == 0 {
        return Err(GatherError::Unsupported {
            op,
            reason: "index depth 0 (indices.shape[-1] = 0) is not expressible: the indices would \
                     have to drop a dimension of size 0"
                .to_string(),
        });
    }
    if b + k > r {
        return Err(bad(
            "indices.shape[-1]",
            k as i64,
            format!("batch_dims + index depth must be at most the data rank {r}"),
        ));
    }
    Ok(nd(r, q, k, b, mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_errors_name_the_operator() {
        assert_eq!(
            gather(2, 1, 2).unwrap_err().to_string(),
            "Gather: axis = 2 is invalid: must be in [-2, 2) for rank 2"
        );
        assert_eq!(
            gather(0, 1, 0).unwrap_err().to_string(),
            "Gather: axis = 0 is invalid: must be in [-0, 0) for rank 0"
        );
        assert_eq!(
            gather_nd(2, 2, 2, 2).unwrap_err().to_string(),
            "GatherND: batch_dims = 2 is invalid: must be in [0, 2) for data rank 2 and indices rank 2"
        );
        assert_eq!(
            gather_nd(3, 2, 3, 1).unwrap_err().to_string(),
            "GatherND: indices.shape[-1] = 3 is invalid: batch_dims + index depth must be at most the data rank 3"
        );
        assert!(matches!(
            gather_nd(3, 2, 0, 0),
            Err(GatherError::Unsupported { .. })
        ));
        assert!(gather_elements(3, -3).is_ok());
        assert!(gather_elements(3, 3).is_err());
    }
}
