//! The three ONNX gathers, `Gather`, `GatherElements` and `GatherND`, written directly from
//! their ONNX definitions as block copies; they share no code with `GatherMultiaxis` (see the
//! design note of the parent module).

use std::mem::MaybeUninit;

use super::{nonnegative_batch_dims, prepared, GatherAttributes};
use crate::error::{Error, Result};
use crate::ir::{Shape, TensorType};
use crate::ops::num::dispatch_width;
use crate::ops::util::{normalize_axis, required};
use crate::ops::vector::{assume_written, copy};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::{try_with_capacity, Tensor};

/// The `axis` of a `Gather` or `GatherElements` among `rank` axes, made non-negative.
fn axis_of(attrs: &GatherAttributes, rank: usize) -> Result<usize> {
    normalize_axis(prepared(attrs, GatherAttributes::axis)?, rank)
}

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

/// Index `k` of `indices` resolved against a dimension of size `dim`; the error names its
/// position.
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
        Err(out_of_range(v, k, dim))
    }
}

/// The error for index value `v` at position `k` of the indices, out of range for `dim`.
fn out_of_range(v: i64, k: usize, dim: usize) -> Error {
    Error::Eval(format!(
        "index {v} at position {k} of the indices is out of range for a dimension of size {dim}"
    ))
}

/// `out[o, i..., n] = data[o, indices[i...], n]` with `o` over the dims before `axis` and `n`
/// over the dims after it.
pub(super) fn eval_gather(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (data, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let picked = Indices::of(indices)?;
    let shape = data.shape();
    if shape.is_empty() {
        return Err(ctx.error("data must have rank 1 or more"));
    }
    let axis = axis_of(&*ctx.attrs()?, shape.len())?;
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let dim = shape[axis];
    let picks = (0..indices.len())
        .map(|k| index(&picked, k, dim))
        .collect::<Result<Vec<_>>>()?;
    let out_shape: Vec<usize> = shape[..axis]
        .iter()
        .chain(indices.shape())
        .chain(&shape[axis + 1..])
        .copied()
        .collect();
    dispatch_width!(data.dtype(), W => {
        return Ok(vec![gather_rows::<W>(data, &out_shape, dim, inner, &picks)?]);
    }, _ => {});
    let mut starts = try_with_capacity(outer * picks.len())?;
    for o in 0..outer {
        for &p in &picks {
            starts.push((o * dim + p) * inner);
        }
    }
    Ok(vec![data.take_blocks(&out_shape, &starts, inner)?])
}

/// [`eval_gather`] for elements as wide as `T`: each of the `outer` input slabs of `dim` blocks
/// of `inner` elements gives the blocks `picks` (in range) in order, written straight into the
/// output, the slabs split over the threads when there are many. A block copy call per element
/// is what a gather of single elements (`inner = 1`) would otherwise pay.
fn gather_rows<T: bytemuck::Pod + Send + Sync>(
    data: &Tensor,
    out_shape: &[usize],
    dim: usize,
    inner: usize,
    picks: &[usize],
) -> Result<Tensor> {
    let src = data.as_slice::<T>()?;
    let out = Tensor::uninit(data.dtype(), out_shape)?;
    let (slab_in, slab_out) = (dim * inner, picks.len() * inner);
    let slab = |(x, y): (&[T], &mut [MaybeUninit<T>])| {
        if inner == 1 {
            for (d, &p) in y.iter_mut().zip(picks) {
                d.write(x[p]);
            }
        } else {
            for (d, &p) in y.chunks_exact_mut(inner).zip(picks) {
                copy(d, &x[p * inner..][..inner]);
            }
        }
    };
    Ok(out.fill(|dst: &mut [MaybeUninit<T>]| {
        if slab_out > 0 && slab_in > 0 {
            let outer = dst.len() / slab_out;
            let min_len = crate::par::min_len(outer, &[slab_out]);
            if min_len == usize::MAX {
                src.chunks_exact(slab_in)
                    .zip(dst.chunks_exact_mut(slab_out))
                    .for_each(slab);
            } else {
                use rayon::prelude::*;
                src.par_chunks_exact(slab_in)
                    .zip(dst.par_chunks_exact_mut(slab_out))
                    .with_min_len(min_len)
                    .for_each(slab);
            }
        }
        // SAFETY: the output is `outer` slabs of `slab_out` elements, each written whole
        // above (an output with an empty slab has no elements).
        unsafe { assume_written(dst) }
    })?)
}

pub(super) fn infer_gather(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let Some(data) = ctx.input(0) else {
        return Ok(Vec::new());
    };
    let shape = match (&data.shape, ctx.input(1).and_then(|t| t.shape.as_ref())) {
        (Some(d), Some(i)) if d.rank() > 0 => {
            let a = axis_of(&*ctx.attrs()?, d.rank())?;
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
pub(super) fn eval_gather_elements(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (data, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let picked = Indices::of(indices)?;
    let (ds, is) = (data.shape(), indices.shape());
    if ds.len() != is.len() || ds.is_empty() {
        return Err(ctx.error(format!(
            "data {ds:?} and indices {is:?} must have the same rank, at least 1"
        )));
    }
    let axis = axis_of(&*ctx.attrs()?, ds.len())?;
    if let Some(j) = (0..ds.len()).find(|&j| j != axis && is[j] > ds[j]) {
        return Err(ctx.error(format!(
            "indices {is:?} are larger than data {ds:?} on axis {j}"
        )));
    }
    if is[axis + 1..] == ds[axis + 1..] {
        let rows = dispatch_width!(data.dtype(), W => Some(match picked {
            Indices::I32(v) => elements_rows::<W, i32>(data, is, v, axis),
            Indices::I64(v) => elements_rows::<W, i64>(data, is, v, axis),
        }), _ => None);
        if let Some(out) = rows {
            return Ok(vec![out?]);
        }
    }
    let data_strides = crate::ops::util::strides(ds);
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

/// [`eval_gather_elements`] for elements as wide as `T` when the indices have the data's dims
/// after `axis`: the output is a sequence of slabs of `is[axis] * inner` elements, each read from
/// one data slab of `ds[axis] * inner`, written in order straight into the output with every
/// index checked as it is read (the first bad one, in order, is the error).
fn elements_rows<T: bytemuck::Pod, I: Copy + Into<i64>>(
    data: &Tensor,
    is: &[usize],
    picked: &[I],
    axis: usize,
) -> Result<Tensor> {
    let ds = data.shape();
    let src = data.as_slice::<T>()?;
    let inner: usize = ds[axis + 1..].iter().product();
    let (dim, slab_in, slab_out) = (ds[axis], ds[axis] * inner, is[axis] * inner);
    let data_strides = crate::ops::util::strides(ds);
    // The data slab of output slab `o`: consecutive when the outer dims agree.
    let same_outer = is[..axis] == ds[..axis];
    let slab_base = |o: usize| -> usize {
        if same_outer {
            return o * slab_in;
        }
        let mut rest = o;
        let mut base = 0;
        for j in (0..axis).rev() {
            base += (rest % is[j]) * data_strides[j];
            rest /= is[j];
        }
        base
    };
    let mut status = Ok(());
    let out = Tensor::uninit(data.dtype(), is)?.fill(|dst: &mut [MaybeUninit<T>]| {
        // The flat output (and indices) position, which the loops walk in order.
        let mut k = 0;
        let outer = dst.len().checked_div(slab_out).unwrap_or(0);
        'slabs: for o in 0..outer {
            let x = &src[slab_base(o)..][..slab_in];
            for _ in 0..is[axis] {
                for n in 0..inner {
                    // In range after counting a negative index from the end, else the error
                    // `index` words.
                    let v: i64 = picked[k].into();
                    let p = if v < 0 { v + dim as i64 } else { v };
                    if !(0..dim as i64).contains(&p) {
                        status = Err(out_of_range(v, k, dim));
                        break 'slabs;
                    }
                    dst[k].write(x[p as usize * inner + n]);
                    k += 1;
                }
            }
        }
        // SAFETY: the first `k` elements were written above. After a bad index the slice is
        // short, so `fill` fails, and the index's error is returned below.
        unsafe { assume_written(&mut dst[..k]) }
    });
    status?;
    Ok(out?)
}

pub(super) fn infer_gather_elements(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![TensorType {
        elem: ctx.input(0).and_then(|t| t.elem),
        shape: ctx.input(1).and_then(|t| t.shape.clone()),
    }])
}

/// The prepared `batch_dims` of a `GatherND` node, not negative.
fn batch_dims_of(attrs: &GatherAttributes) -> Result<usize> {
    nonnegative_batch_dims(prepared(attrs, GatherAttributes::batch_dims)?)
}

/// `out[batch, i...] = data[batch, indices[batch, i..., :]]`, a block of the data dims after
/// `b + k`.
pub(super) fn eval_gather_nd(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (data, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let picked = Indices::of(indices)?;
    let (ds, is) = (data.shape(), indices.shape());
    let b = batch_dims_of(&*ctx.attrs()?)?;
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
    let data_strides = crate::ops::util::strides(ds);
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

pub(super) fn infer_gather_nd(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let Some(data) = ctx.input(0) else {
        return Ok(Vec::new());
    };
    let shape = (|| {
        let d = data.shape.as_ref()?;
        let i = ctx.input(1)?.shape.as_ref()?;
        let k = usize::try_from(i.dims.last()?.known()?).ok()?;
        let b = batch_dims_of(&*ctx.attrs().ok()?).ok()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::util::normalize_axis;
    use crate::DataType;

    fn run(node: Node, inputs: &[&Tensor]) -> Result<Tensor> {
        let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        Ok(crate::ops::eval_node(&node, 13, &inputs)?.remove(0))
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

    /// `shape`'s elements numbered `0..` as `dtype` (of 1, 2, 4 or 8 bytes).
    fn numbered(dtype: DataType, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<i64> = (0..n as i64).collect();
        let t = Tensor::from_vec(DataType::Int64, shape, v).unwrap();
        let bytes: Vec<u8> = t
            .as_slice::<i64>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes()[..dtype.byte_size().unwrap()].to_vec())
            .collect();
        Tensor::from_bytes(dtype, shape, &bytes).unwrap()
    }

    /// The element of `t` at flat position `k`, as its bytes.
    fn element(t: &Tensor, k: usize) -> Vec<u8> {
        let w = t.dtype().byte_size().unwrap();
        t.as_bytes().unwrap()[k * w..(k + 1) * w].to_vec()
    }

    #[test]
    fn gather_rows_match_the_definition() {
        // Typed slabs against `out[o, i, n] = data[o, idx[i], n]` element by element: single
        // elements (the conv-net's `[1, 6300, 7]` columns) and blocks, negative indices, empty
        // indices and dims, a scalar index, int32 indices, every width, enough slabs to split.
        for (shape, axis, idx_shape, idx) in [
            (vec![1, 6300, 7], 2, vec![3], vec![4, 5, 6]),
            (vec![3, 5, 4], 1, vec![2, 2], vec![0, -1, 4, 2]),
            (vec![4, 3], -2, vec![], vec![-4]),
            (vec![2, 3], 1, vec![0], vec![]),
            (vec![0, 3], 1, vec![2], vec![1, 2]),
            (vec![5], 0, vec![6], vec![4, 3, 2, 1, 0, -5]),
            (vec![30000, 4, 1], 1, vec![3], vec![3, 0, 3]),
        ] {
            for dtype in [
                DataType::Uint8,
                DataType::Float16,
                DataType::Float,
                DataType::Int64,
            ] {
                for idx_type in [DataType::Int64, DataType::Int32] {
                    let data = numbered(dtype, &shape);
                    let i = match idx_type {
                        DataType::Int32 => {
                            let v: Vec<i32> = idx.iter().map(|&v| v as i32).collect();
                            Tensor::from_vec(idx_type, &idx_shape, v).unwrap()
                        }
                        _ => i64s(&idx_shape, &idx),
                    };
                    let node = Node::new("Gather", "g", ["d", "i"], ["y"])
                        .with_attr("axis", AttrValue::Int(axis));
                    let out = run(node, &[&data, &i]).unwrap();
                    let a = normalize_axis(axis, shape.len()).unwrap();
                    let (dim, inner) = (shape[a], shape[a + 1..].iter().product::<usize>());
                    let mut want = Vec::new();
                    for o in 0..shape[..a].iter().product() {
                        for &p in &idx {
                            let p = if p < 0 { p + dim as i64 } else { p } as usize;
                            for n in 0..inner {
                                want.extend(element(&data, (o * dim + p) * inner + n));
                            }
                        }
                    }
                    assert_eq!(out.as_bytes().unwrap(), want, "{shape:?} {axis} {dtype}");
                }
            }
        }
    }

    #[test]
    fn gather_elements_rows_match_the_definition() {
        // The typed slabs (indices with the data's dims after the axis) and the general path
        // (indices smaller there) against `out[i] = data[i with i[axis] = idx[i]]`: the
        // conv-net's `[1, 6300, 3]` with `[1, 6300, 1]`, outer dims smaller than the data's,
        // negative axes and indices, empty indices, every width.
        let mut picks = (0..).map(|k: i64| (k * 7 + k / 3) % 5 - 2);
        for (shape, axis, idx_shape) in [
            (vec![1, 6300, 3], 2, vec![1, 6300, 1]),
            (vec![3, 4, 5], 1, vec![3, 2, 5]),
            (vec![3, 4, 5], -3, vec![2, 4, 5]),
            (vec![3, 4, 5], 1, vec![2, 3, 5]),
            (vec![3, 4, 5], 2, vec![1, 2, 4]),
            (vec![3, 4, 5], 2, vec![3, 4, 3]),
            (vec![3, 4, 5], 1, vec![3, 4, 2]),
            (vec![3, 4, 5], 0, vec![0, 4, 5]),
        ] {
            let a = normalize_axis(axis, shape.len()).unwrap();
            let n: usize = idx_shape.iter().product();
            let idx: Vec<i64> = picks.by_ref().take(n).collect();
            for dtype in [
                DataType::Uint8,
                DataType::Float16,
                DataType::Float,
                DataType::Int64,
            ] {
                let data = numbered(dtype, &shape);
                let i = i64s(&idx_shape, &idx);
                let node = Node::new("GatherElements", "g", ["d", "i"], ["y"])
                    .with_attr("axis", AttrValue::Int(axis));
                let out = run(node, &[&data, &i]).unwrap();
                let st = crate::ops::util::strides(&shape);
                let ist = crate::ops::util::strides(&idx_shape);
                let mut want = Vec::new();
                for (k, &p) in idx.iter().enumerate() {
                    let p = if p < 0 { p + shape[a] as i64 } else { p } as usize;
                    let at: usize = (0..shape.len())
                        .map(|j| if j == a { p } else { k / ist[j] % idx_shape[j] } * st[j])
                        .sum();
                    want.extend(element(&data, at));
                }
                assert_eq!(out.shape(), idx_shape.as_slice());
                assert_eq!(out.as_bytes().unwrap(), want, "{shape:?} {axis} {dtype}");
            }
        }
    }

    #[test]
    fn gather_elements_reports_the_first_bad_index_in_order() {
        // On the typed slabs (the same dims after the axis) and on the general path.
        for (idx_shape, axis, bad_at) in
            [(vec![2, 3], 1, 4), (vec![2, 2], 0, 2), (vec![2, 3], 0, 4)]
        {
            let data = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
            let n: usize = idx_shape.iter().product();
            let mut idx = vec![0i64; n];
            idx[bad_at] = 9;
            idx[n - 1] = -9;
            let node = Node::new("GatherElements", "g", ["d", "i"], ["y"])
                .with_attr("axis", AttrValue::Int(axis));
            let e = run(node, &[&data, &i64s(&idx_shape, &idx)]).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("index 9 at position {bad_at}")),
                "{e}"
            );
        }
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
