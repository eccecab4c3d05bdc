//! Every gather family of every system, as a [`GatherPlan`] around one `GatherMultiaxis`.
//!
//! One file per system; each public function documents its identity and computes its plan from
//! ranks and static attributes only (GatherND also needs the static index depth). The systems
//! share three recipes, defined here:
//!
//! - `blocks`: single-axis block gather with optional batch dimensions (ONNX `Gather`,
//!   `numpy.take`, TensorFlow `gather`, OpenVINO `Gather-8`, CoreML `gather`, DirectML
//!   `DML_GATHER`);
//! - `elements`: single-axis element gather (ONNX `GatherElements`, `numpy.take_along_axis`,
//!   PyTorch `gather` / `take_along_dim`, CoreML `gather_along_axis`);
//! - `nd`: multi-axis block gather (ONNX `GatherND`, TensorFlow `gather_nd`, CoreML
//!   `gather_nd`);
//!
//! plus `flat` for gathers from the flattened input (PyTorch `take`).
//!
//! Design note: the layouts put the index dimensions where the output needs them, so that the
//! output usually needs no reshape at all ("axis first": the gathered axis holds the first index
//! dimension and the other index dimensions follow it). `Reshape` appears only to flatten.

pub mod directml;
pub mod numpy;
pub mod onnx;
pub mod openvino;
pub mod tensorflow;
pub mod torch;

use super::plan::{GatherPlan, ShapeOp};
use super::{GatherError, GatherSpec, OutOfRange};

/// Normalises attribute `attr` of operator `op`, which counts dimensions of a rank-`rank` tensor
/// and may be negative.
pub(crate) fn axis_attr(
    op: &'static str,
    attr: &'static str,
    value: i64,
    rank: usize,
) -> Result<usize, GatherError> {
    let r = rank as i64;
    if (-r..r).contains(&value) {
        Ok(if value < 0 { value + r } else { value } as usize)
    } else {
        Err(GatherError::BadAttribute {
            op,
            attr,
            value,
            reason: format!("must be in [-{rank}, {rank}) for rank {rank}"),
        })
    }
}

fn unsqueeze(axes: Vec<usize>) -> Option<ShapeOp> {
    (!axes.is_empty()).then_some(ShapeOp::Unsqueeze(axes))
}

/// Single-axis block gather with `batch` leading batch dimensions shared by data and indices:
///
/// `out[b.., p.., i.., t..] = data[b.., p.., idx[b.., i..], t..]`, output shape
/// `data[:axis] + indices[batch:] + data[axis+1:]`.
///
/// With `m = q - batch >= 1` index dimensions, the gathered axis keeps its place and receives the
/// first index dimension; the other `m - 1` follow it:
///
/// ```text
/// input   data[:axis+1] + [1]*(m-1) + data[axis+1:]       Unsqueeze [axis+1, axis+m)
/// indices idx[:batch] + [1]*(axis-batch) + idx[batch:] + [1]*(r-axis-1)
/// axes    [axis]; the output already has its final shape
/// ```
///
/// With `m = 0` (scalar indices, or indices that are only batch dimensions) the indices get unit
/// dimensions up to rank `r` and the gathered axis (now of size 1) is squeezed away.
///
/// `axis` and `batch` are normalised; the caller checked `batch <= axis < r` and `batch <= q`.
pub(crate) fn blocks(
    r: usize,
    q: usize,
    axis: usize,
    batch: usize,
    mode: OutOfRange,
) -> GatherPlan {
    let m = q - batch;
    let spec = GatherSpec {
        axes: vec![axis],
        mode,
    };
    if m == 0 {
        return GatherPlan {
            crop_input_to_indices: None,
            input: vec![],
            indices: unsqueeze((batch..r).collect()).into_iter().collect(),
            spec,
            output: vec![ShapeOp::Squeeze(vec![axis])],
        };
    }
    let rank = r + m - 1;
    let index_units: Vec<usize> = (batch..axis).chain(axis + m..rank).collect();
    GatherPlan {
        crop_input_to_indices: None,
        input: unsqueeze((axis + 1..axis + m).collect())
            .into_iter()
            .collect(),
        indices: unsqueeze(index_units).into_iter().collect(),
        spec,
        output: vec![],
    }
}

/// Single-axis element gather: `out[.., i, ..] = data[.., idx[.., i, ..], ..]` with all tensors
/// of rank `r`. GatherMultiaxis with `axes = [axis]` *is* this operator when the non-axis
/// dimensions agree; `crop` selects the ONNX `GatherElements` rule (the output has exactly the
/// indices' shape, indices may be smaller than the data, nothing broadcasts) over the numpy
/// `take_along_axis` rule (non-axis dimensions broadcast).
pub(crate) fn elements(axis: usize, crop: bool, mode: OutOfRange) -> GatherPlan {
    GatherPlan {
        crop_input_to_indices: crop.then_some(axis),
        input: vec![],
        indices: vec![],
        spec: GatherSpec {
            axes: vec![axis],
            mode,
        },
        output: vec![],
    }
}

/// Multi-axis block gather (GatherND): data of rank `r`, indices of rank `q` whose last dimension
/// holds `k >= 1` coordinates for data axes `[batch, batch + k)`:
///
/// `out[b.., i..] = data[b.., idx[b.., i.., 0], .., idx[b.., i.., k-1], t..]`, output shape
/// `idx[:-1] + data[batch+k:]`.
///
/// With `m = q - 1 - batch` index dimensions, `t = r - batch - k` trailing data dimensions and
/// `x = max(k, m)`, the gather has rank `batch + x + t`: the index dimensions sit on the axis
/// positions (so no output reshape is needed when `m >= k`), the coordinate dimension is the last
/// dimension of the indices and the logical last dimension is a unit dimension:
///
/// ```text
/// input   data[:batch+k] + [1]*(x-k) + data[batch+k:]          Unsqueeze [batch+k, batch+m)
/// indices idx[:-1] + [1]*(x-m+t-1) + [k]                      Unsqueeze [q-1, q-1+x-m+t-1)
/// axes    [batch, batch+k)
/// output  Squeeze [batch+m, batch+k) when m < k
/// ```
///
/// When `x - m + t = 0` (no trailing data dimension and `m >= k`) there is no unit dimension to
/// fold the coordinates into, so the gather gets one more dimension: a trailing unit dimension of
/// the input (squeezed from the output), against which the indices, unchanged, put their
/// coordinate dimension. (Merging the last two index dimensions with `Reshape[0,..,0,-1]`
/// would also work, but ONNX cannot infer that `-1` when another index dimension is 0.)
///
/// The caller checked `k >= 1`, `batch < min(r, q)` and `batch + k <= r`.
pub(crate) fn nd(r: usize, q: usize, k: usize, batch: usize, mode: OutOfRange) -> GatherPlan {
    let m = q - 1 - batch;
    let t = r - batch - k;
    let x = k.max(m);
    let rank = batch + x + t;
    let fill = x - m + t;
    let spec = GatherSpec {
        axes: (batch..batch + k).collect(),
        mode,
    };
    let mut input_units: Vec<usize> = (batch + k..batch + m).collect();
    let mut output = vec![];
    let indices_units: Vec<usize> = if fill == 0 {
        // One more dimension: the indices keep their shape (the logical last dimension is the
        // new unit dimension), the input gets it last and the output loses it again.
        input_units.push(rank);
        output.push(ShapeOp::Squeeze(vec![rank]));
        vec![]
    } else {
        (q - 1..q - 1 + fill - 1).collect()
    };
    if m < k {
        output.insert(0, ShapeOp::Squeeze((batch + m..batch + k).collect()));
    }
    GatherPlan {
        crop_input_to_indices: None,
        input: unsqueeze(input_units).into_iter().collect(),
        indices: unsqueeze(indices_units).into_iter().collect(),
        spec,
        output,
    }
}

/// Gather from the flattened input: `out[i..] = flatten(data)[idx[i..]]`, output shape
/// `indices.shape` (rank `q`).
///
/// ```text
/// input   Reshape[-1, 1, .., 1]  (rank q; rank 1 when q = 0)
/// indices as is (Unsqueeze[0] when q = 0)
/// axes    [0]
/// output  as is (Squeeze[0] when q = 0)
/// ```
pub(crate) fn flat(q: usize, mode: OutOfRange) -> GatherPlan {
    let spec = GatherSpec {
        axes: vec![0],
        mode,
    };
    if q == 0 {
        return GatherPlan {
            crop_input_to_indices: None,
            input: vec![ShapeOp::Reshape(vec![-1])],
            indices: vec![ShapeOp::Unsqueeze(vec![0])],
            spec,
            output: vec![ShapeOp::Squeeze(vec![0])],
        };
    }
    let mut shape = vec![1i64; q];
    shape[0] = -1;
    GatherPlan {
        crop_input_to_indices: None,
        input: vec![ShapeOp::Reshape(shape)],
        indices: vec![],
        spec,
        output: vec![],
    }
}

/// Checks the attributes of a batched single-axis gather (TensorFlow `gather`, OpenVINO
/// `Gather-8`) and builds the [`blocks`] plan: `axis` counts data dimensions, a negative
/// `batch_dims` counts from the end of the indices' dimensions, and `batch_dims <= axis`.
pub(crate) fn blocks_checked(
    op: &'static str,
    r: usize,
    q: usize,
    axis: i64,
    batch_dims: i64,
    mode: OutOfRange,
) -> Result<GatherPlan, GatherError> {
    let axis = axis_attr(op, "axis", axis, r)?;
    let qi = q as i64;
    let b = if batch_dims < 0 {
        batch_dims + qi
    } else {
        batch_dims
    };
    if !(0..=qi).contains(&b) || b as usize > axis {
        return Err(GatherError::BadAttribute {
            op,
            attr: "batch_dims",
            value: batch_dims,
            reason: format!(
                "must be in [-{q}, {q}] for indices rank {q} and, normalised, at most axis {axis}"
            ),
        });
    }
    Ok(blocks(r, q, axis, b as usize, mode))
}
