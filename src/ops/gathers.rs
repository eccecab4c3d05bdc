//! The four gathers: ONNX `Gather` (opsets 1, 11, 13), `GatherElements` (11, 13), `GatherND`
//! (11, 12, 13) and `multigather.GatherMultiaxis`.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Gather.html>,
//! <https://onnx.ai/onnx/operators/onnx__GatherElements.html>,
//! <https://onnx.ai/onnx/operators/onnx__GatherND.html>, and `docs/gather-multiaxis.md`.
//!
//! Design note: the three ONNX gathers are written here directly from their ONNX definitions, as
//! block copies, and do **not** go through `GatherMultiaxis` or its mappings. Verifying a rewrite
//! compares the original model (these kernels) with the rewritten one (the `GatherMultiaxis`
//! kernel), so the two sides must not share the code under test. Negative indices count from the
//! end in every opset (opset 1 left them undefined; every runtime wraps them).

use crate::error::{Error, Result};
use crate::gather::{self, GatherSpec};
use crate::ir::{broadcast_dim, Dim, Shape, TensorType};
use crate::tensor::try_with_capacity;
use crate::tensor::Tensor;

use super::util::{normalize_axis, required};
use super::{EvalCtx, InferCtx, OpDef};

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("Gather", 1, 2..=2, 1..=1, eval_gather).with_infer(infer_gather),
    OpDef::new("GatherElements", 11, 2..=2, 1..=1, eval_gather_elements)
        .with_infer(infer_gather_elements),
    OpDef::new("GatherND", 11, 2..=2, 1..=1, eval_gather_nd).with_infer(infer_gather_nd),
    OpDef::new(gather::OP_TYPE, 1, 2..=2, 1..=1, eval_multiaxis)
        .with_infer(infer_multiaxis)
        .in_domain(gather::DOMAIN),
];

/// Index `k` of `indices` resolved against a dimension of size `dim`; the error names its
/// position.
/// The elements of an int32 or int64 indices tensor, read without a per-element type check.
enum Indices<'t> {
    I32(&'t [i32]),
    I64(&'t [i64]),
}

impl<'t> Indices<'t> {
    fn of(indices: &'t Tensor) -> Result<Indices<'t>> {
        match indices.dtype() {
            crate::DataType::Int32 => Ok(Indices::I32(indices.as_slice()?)),
            crate::DataType::Int64 => Ok(Indices::I64(indices.as_slice()?)),
            dtype => Err(Error::Eval(format!(
                "indices must be int32 or int64, not {dtype}"
            ))),
        }
    }

    fn len(&self) -> usize {
        match self {
            Indices::I32(v) => v.len(),
            Indices::I64(v) => v.len(),
        }
    }

    fn get(&self, k: usize) -> Option<i64> {
        match self {
            Indices::I32(v) => v.get(k).map(|&i| i64::from(i)),
            Indices::I64(v) => v.get(k).copied(),
        }
    }
}

fn index(indices: &Indices<'_>, k: usize, dim: usize) -> Result<usize> {
    let v = indices.get(k).ok_or_else(|| {
        Error::Eval(format!(
            "position {k} is past the {} indices",
            indices.len()
        ))
    })?;
    let d = dim as i64;
    let r = if v < 0 { v + d } else { v };
    if (0..d).contains(&r) {
        Ok(r as usize)
    } else {
        Err(Error::Eval(format!(
            "index {v} at position {k} of the indices is out of range for a dimension of size {dim}"
        )))
    }
}

/// `out[o, i..., n] = data[o, indices[i...], n]` with `o` over the dims before `axis` and `n`
/// over the dims after it.
fn eval_gather(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (data, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let picked = Indices::of(indices)?;
    let shape = data.shape();
    if shape.is_empty() {
        return Err(ctx.error("data must have rank 1 or more"));
    }
    let axis = normalize_axis(ctx.node.attr_int("axis", 0)?, shape.len())?;
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let dim = shape[axis];
    let picks = (0..indices.len())
        .map(|k| index(&picked, k, dim))
        .collect::<Result<Vec<_>>>()?;
    let mut starts = try_with_capacity(outer * picks.len())?;
    for o in 0..outer {
        for &p in &picks {
            starts.push((o * dim + p) * inner);
        }
    }
    let out_shape: Vec<usize> = shape[..axis]
        .iter()
        .chain(indices.shape())
        .chain(&shape[axis + 1..])
        .copied()
        .collect();
    Ok(vec![data.take_blocks(&out_shape, &starts, inner)?])
}

fn infer_gather(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let Some(data) = ctx.input(0) else {
        return Ok(Vec::new());
    };
    let shape = match (&data.shape, ctx.input(1).and_then(|t| t.shape.as_ref())) {
        (Some(d), Some(i)) if d.rank() > 0 => {
            let a = normalize_axis(ctx.node.attr_int("axis", 0)?, d.rank())?;
            Some(Shape::new(
                d.dims[..a]
                    .iter()
                    .chain(&i.dims)
                    .chain(&d.dims[a + 1..])
                    .cloned()
                    .collect(),
            ))
        }
        _ => None,
    };
    Ok(vec![TensorType {
        elem: data.elem,
        shape,
    }])
}

/// `out[i] = data[i with i[axis] replaced by indices[i]]`; the output has the indices' shape,
/// which may be smaller than the data's on the other axes.
fn eval_gather_elements(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (data, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let picked = Indices::of(indices)?;
    let (ds, is) = (data.shape(), indices.shape());
    if ds.len() != is.len() || ds.is_empty() {
        return Err(ctx.error(format!(
            "data {ds:?} and indices {is:?} must have the same rank, at least 1"
        )));
    }
    let axis = normalize_axis(ctx.node.attr_int("axis", 0)?, ds.len())?;
    if let Some(j) = (0..ds.len()).find(|&j| j != axis && is[j] > ds[j]) {
        return Err(ctx.error(format!(
            "indices {is:?} are larger than data {ds:?} on axis {j}"
        )));
    }
    let data_strides = super::util::strides(ds);
    let mut coord = vec![0usize; is.len()];
    // The data offset of `coord` without its `axis` term, kept as the coordinates count up.
    let mut base = 0usize;
    let mut starts = try_with_capacity(indices.len())?;
    for k in 0..indices.len() {
        let p = index(&picked, k, ds[axis])?;
        starts.push(base + p * data_strides[axis]);
        for j in (0..is.len()).rev() {
            let step = if j == axis { 0 } else { data_strides[j] };
            coord[j] += 1;
            base += step;
            if coord[j] < is[j] {
                break;
            }
            base -= is[j] * step;
            coord[j] = 0;
        }
    }
    Ok(vec![data.take_blocks(is, &starts, 1)?])
}

fn infer_gather_elements(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![TensorType {
        elem: ctx.input(0).and_then(|t| t.elem),
        shape: ctx.input(1).and_then(|t| t.shape.clone()),
    }])
}

/// With `b = batch_dims` and `k` the last indices dim: for each batch position and index tuple,
/// `out[batch, i...] = data[batch, indices[batch, i..., :]]`, a block of the data dims after
/// `b + k`.
fn eval_gather_nd(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (data, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let picked = Indices::of(indices)?;
    let (ds, is) = (data.shape(), indices.shape());
    let b = usize::try_from(ctx.node.attr_int("batch_dims", 0)?)
        .map_err(|_| ctx.error("batch_dims must not be negative"))?;
    let (r, q) = (ds.len(), is.len());
    if r == 0 || q == 0 {
        return Err(ctx.error("data and indices must have rank 1 or more"));
    }
    if b >= q.min(r) {
        return Err(ctx.error(format!(
            "batch_dims {b} must be less than both ranks ({r} and {q})"
        )));
    }
    if ds[..b] != is[..b] {
        return Err(ctx.error(format!(
            "the first {b} dims of data {ds:?} and indices {is:?} must be equal"
        )));
    }
    let k = is[q - 1];
    if k < 1 || b + k > r {
        return Err(ctx.error(format!(
            "the last indices dim ({k}) must be between 1 and rank - batch_dims ({})",
            r - b
        )));
    }
    let batch: usize = ds[..b].iter().product();
    let inner: usize = ds[b + k..].iter().product();
    let per_batch: usize = ds[b..].iter().product();
    let data_strides = super::util::strides(ds);
    let tuples = indices.len() / k;
    let tuples_per_batch = tuples.checked_div(batch).unwrap_or(0);
    let mut starts = try_with_capacity(tuples)?;
    for t in 0..tuples {
        let mut offset = t.checked_div(tuples_per_batch).unwrap_or(0) * per_batch;
        for c in 0..k {
            offset += index(&picked, t * k + c, ds[b + c])? * data_strides[b + c];
        }
        starts.push(offset);
    }
    let out_shape: Vec<usize> = is[..q - 1].iter().chain(&ds[b + k..]).copied().collect();
    Ok(vec![data.take_blocks(&out_shape, &starts, inner)?])
}

fn infer_gather_nd(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let Some(data) = ctx.input(0) else {
        return Ok(Vec::new());
    };
    let shape = (|| {
        let d = data.shape.as_ref()?;
        let i = ctx.input(1)?.shape.as_ref()?;
        let k = usize::try_from(i.dims.last()?.known()?).ok()?;
        let b = usize::try_from(ctx.node.attr_int("batch_dims", 0).ok()?).ok()?;
        let dims = i.dims[..i.rank() - 1]
            .iter()
            .chain(d.dims.get(b + k..)?)
            .cloned()
            .collect();
        Some(Shape::new(dims))
    })();
    Ok(vec![TensorType {
        elem: data.elem,
        shape,
    }])
}

fn multiaxis_spec(ctx: &EvalCtx<'_>, rank: usize) -> Result<GatherSpec> {
    let axes = ctx
        .node
        .attr_ints("axes")?
        .ok_or_else(|| ctx.error("the required attribute 'axes' is missing"))?;
    let mode = ctx.node.attr_string("mode")?.unwrap_or("error");
    Ok(GatherSpec::from_attributes(axes, mode, rank)?)
}

fn eval_multiaxis(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (data, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let spec = multiaxis_spec(ctx, data.rank())?;
    Ok(vec![gather::gather_multiaxis(data, indices, &spec)?])
}

fn infer_multiaxis(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let Some(data) = ctx.input(0) else {
        return Ok(Vec::new());
    };
    let unknown_shape = || {
        Ok(vec![TensorType {
            elem: data.elem,
            shape: None,
        }])
    };
    let (Some(d), Some(i)) = (&data.shape, ctx.input(1).and_then(|t| t.shape.as_ref())) else {
        return unknown_shape();
    };
    let Some(axes) = ctx.node.attr_ints("axes")? else {
        return unknown_shape();
    };
    let mode = ctx.node.attr_string("mode")?.unwrap_or("error");
    let spec = GatherSpec::from_attributes(axes, mode, d.rank())?;
    if i.rank() != d.rank() {
        return unknown_shape();
    }
    let dims: Vec<Dim> = gather_multiaxis_dims(&d.dims, &i.dims, &spec.axes);
    Ok(vec![TensorType {
        elem: data.elem,
        shape: Some(Shape::new(dims)),
    }])
}

/// The output dims of `GatherMultiaxis` over possibly symbolic input and indices dims of equal
/// rank: the dims of `axes` come from the logical indices (the last indices dim divided by the
/// coordinate size `max(len(axes), 1)`), the others broadcast.
///
/// # Example
/// ```
/// use multigather::ops::gather_multiaxis_dims;
/// use multigather::ir::Dim;
/// let b = Dim::Symbolic("B".into());
/// let out = gather_multiaxis_dims(&[b.clone(), Dim::Known(5), Dim::Known(1)], &[Dim::Known(1), Dim::Known(1), Dim::Known(8)], &[1, 2]);
/// assert_eq!(out, vec![b, Dim::Known(1), Dim::Known(4)]);
/// ```
pub fn gather_multiaxis_dims(input: &[Dim], indices: &[Dim], axes: &[usize]) -> Vec<Dim> {
    let logical = logical_indices_dims(indices, axes.len());
    input
        .iter()
        .zip(&logical)
        .enumerate()
        .map(|(j, (x, l))| {
            if axes.contains(&j) {
                l.clone()
            } else {
                broadcast_dim(x, l)
            }
        })
        .collect()
}

/// The logical indices dims of `GatherMultiaxis` with `axis_count` axes: the last dim divided by
/// the coordinate size (unknown unless it is a known size).
pub fn logical_indices_dims(indices: &[Dim], axis_count: usize) -> Vec<Dim> {
    let c = axis_count.max(1) as i64;
    let mut logical = indices.to_vec();
    if let Some(last) = logical.last_mut() {
        *last = match &*last {
            Dim::Known(n) => Dim::Known(*n / c),
            d if c == 1 => d.clone(),
            _ => Dim::Unknown,
        };
    }
    logical
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::DataType;

    fn run(node: Node, inputs: &[&Tensor]) -> Result<Tensor> {
        let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        Ok(super::super::eval_node(&node, 13, &inputs)?.remove(0))
    }

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, shape, v.to_vec()).unwrap()
    }

    #[test]
    fn gather_axis1_follows_the_onnx_example() {
        let data = f32s(&[3, 3], &[1.0, 1.2, 1.9, 2.3, 3.4, 3.9, 4.5, 5.7, 5.9]);
        let idx = i64s(&[1, 2], &[0, 2]);
        let node = Node::new("Gather", "g", ["d", "i"], ["y"]).with_attr("axis", AttrValue::Int(1));
        let out = run(node, &[&data, &idx]).unwrap();
        assert_eq!(out.shape(), &[3, 1, 2]);
        assert_eq!(out.to_vec::<f32>().unwrap(), [1.0, 1.9, 2.3, 3.9, 4.5, 5.9]);
    }

    #[test]
    fn gather_negative_index_wraps_and_out_of_range_fails() {
        let data = f32s(&[3], &[1.0, 2.0, 3.0]);
        let node = || Node::new("Gather", "g", ["d", "i"], ["y"]);
        let out = run(node(), &[&data, &i64s(&[], &[-1])]).unwrap();
        assert_eq!(out.shape(), &[] as &[usize]);
        assert_eq!(out.to_vec::<f32>().unwrap(), [3.0]);
        let err = run(node(), &[&data, &i64s(&[2], &[0, 3])]).unwrap_err();
        assert!(err.to_string().contains("index 3 at position 1"), "{err}");
    }

    #[test]
    fn gather_elements_with_smaller_indices() {
        let data = f32s(&[3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        let idx = i64s(&[2, 2], &[1, -1, 0, 2]);
        let node = Node::new("GatherElements", "g", ["d", "i"], ["y"])
            .with_attr("axis", AttrValue::Int(0));
        let out = run(node, &[&data, &idx]).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), [4.0, 8.0, 1.0, 8.0]);
    }

    #[test]
    fn gather_nd_batch_dims_follows_the_onnx_example() {
        let data = f32s(&[2, 2, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        let idx = i64s(&[2, 1], &[1, 0]);
        let node = Node::new("GatherND", "g", ["d", "i"], ["y"])
            .with_attr("batch_dims", AttrValue::Int(1));
        let out = run(node, &[&data, &idx]).unwrap();
        assert_eq!(out.shape(), &[2, 2]);
        assert_eq!(out.to_vec::<f32>().unwrap(), [2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn gather_nd_points() {
        let data = f32s(&[2, 2], &[0.0, 1.0, 2.0, 3.0]);
        let idx = i64s(&[2, 2], &[0, 0, 1, 1]);
        let node = Node::new("GatherND", "g", ["d", "i"], ["y"]);
        let out = run(node, &[&data, &idx]).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), [0.0, 3.0]);
    }
}
