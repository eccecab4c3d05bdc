//! DirectML `DML_GATHER_OPERATOR_DESC`: `Axis` plus `IndexDimensions`, every tensor of the same
//! rank `N`, sizes right-aligned, reads clamped (mode `clamp`).
//!
//! DirectML's output sizes are `{input[0..axis], indices[N-D..N], input[axis+1..N]}` (`D` =
//! `IndexDimensions`), `N + D - 1` sizes right-aligned into `N` dimensions by cropping the first
//! `D - 1`, which must be 1 (for `D = 0` a leading 1 is added instead). The meaningful indices are
//! the last `D` dimensions; the leading `N - D` must be 1.

use super::super::plan::{GatherPlan, ShapeOp};
use super::super::{GatherError, GatherSpec, OutOfRange};

/// `DML_GATHER(Input, Indices, Axis=a, IndexDimensions=d)` on tensors of rank `N`:
///
/// ```text
/// d >= 1: GatherMultiaxis(Unsqueeze(input, [a+1, a+d)),
///                         indices reshaped from [1]*(N-d) + idx to [1]*a + idx + [1]*(N-1-a),
///                         axes=[a], mode="clamp") -> Squeeze([0, d-1))
/// d = 0:  GatherMultiaxis(input, indices, axes=[a], mode="clamp") -> Squeeze([a]) -> Unsqueeze([0])
/// ```
///
/// The indices' reshape is an `Unsqueeze` (plus a `Squeeze` of leading units when `a < N-d`);
/// nothing in the plan depends on sizes.
///
/// # Example
/// ```
/// use multigather_kernel::gather::map::directml;
/// // DirectML's example 4: input {1,3,3}, indices {1,1,2}, Axis 2, IndexDimensions 2.
/// let plan = directml::gather(3, 2, 2)?;
/// assert_eq!(plan.shapes(&[1, 3, 3], &[1, 1, 2])?.output, [3, 1, 2]);
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
pub fn gather(
    rank: usize,
    axis: usize,
    index_dimensions: usize,
) -> Result<GatherPlan, GatherError> {
    const OP: &str = "DML_GATHER";
    if axis >= rank {
        return Err(GatherError::BadAttribute {
            op: OP,
            attr: "Axis",
            value: axis as i64,
            reason: format!("must be in [0, {rank}) for {rank} dimensions"),
        });
    }
    // DirectML documents [0, DimensionCount), but its own Example 1 (1-D remapping) uses
    // IndexDimensions = DimensionCount = 1: every indices dimension is meaningful then, and the
    // output's size check (the cropped leading sizes must be 1) still applies.
    if index_dimensions > rank {
        return Err(GatherError::BadAttribute {
            op: OP,
            attr: "IndexDimensions",
            value: index_dimensions as i64,
            reason: format!("must be in [0, {rank}] for {rank} dimensions"),
        });
    }
    let (n, d, a) = (rank, index_dimensions, axis);
    let spec = GatherSpec {
        axes: vec![a],
        mode: OutOfRange::Clamp,
    };
    if d == 0 {
        let output = if a == 0 {
            vec![]
        } else {
            vec![ShapeOp::Squeeze(vec![a]), ShapeOp::Unsqueeze(vec![0])]
        };
        return Ok(GatherPlan {
            crop_input_to_indices: None,
            input: vec![],
            indices: vec![],
            spec,
            output,
        });
    }
    let gather_rank = n + d - 1;
    let trailing: Vec<usize> = (a + d..gather_rank).collect();
    let have = n - d;
    let mut indices = vec![];
    if a >= have {
        let units: Vec<usize> = (0..a - have).chain(trailing).collect();
        if !units.is_empty() {
            indices.push(ShapeOp::Unsqueeze(units));
        }
    } else {
        indices.push(ShapeOp::Squeeze((0..have - a).collect()));
        if !trailing.is_empty() {
            indices.push(ShapeOp::Unsqueeze(trailing));
        }
    }
    let input = if d > 1 {
        vec![ShapeOp::Unsqueeze((a + 1..a + d).collect())]
    } else {
        vec![]
    };
    let output = if d > 1 {
        vec![ShapeOp::Squeeze((0..d - 1).collect())]
    } else {
        vec![]
    };
    Ok(GatherPlan {
        crop_input_to_indices: None,
        input,
        indices,
        spec,
        output,
    })
}
