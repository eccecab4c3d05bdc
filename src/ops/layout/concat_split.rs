//! `Concat` (opset 1, `axis` required from 4, negative from 11) and `Split` (1 with a `split`
//! input or attribute, 2 and 11 with the attribute, 13 with an input, `num_outputs` from 18).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Concat.html>,
//! <https://onnx.ai/onnx/operators/onnx__Split.html>.
//!
//! Without explicit sizes, `Split` cuts the axis into as many chunks as the node has outputs (or
//! `num_outputs`), each `ceil(dim / n)` long but the last, which takes what remains; an evenly
//! divisible axis gets equal chunks, as every opset specifies.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::attrs::Axis;
use super::super::util::{normalize_axis, optional, required, strides, to_i64s};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::runs::{const_ints, gather_axes, in_dims, in_elem, to_usize, typed, AxisRead, Writer};

/// The `axis` attribute of a `Concat` node (required from opset 4, 1 by default before).
#[derive(Clone, Copy, Debug)]
pub(super) struct ConcatAxis(i64);

impl Attributes for ConcatAxis {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<ConcatAxis> {
        let axis = match (node.attr("axis"), opset < 4) {
            (None, true) => 1,
            (None, false) => return Err(Error::Eval("needs an 'axis' attribute".into())),
            _ => node.attr_int("axis", 1)?,
        };
        Ok(ConcatAxis(axis))
    }
}

pub(super) fn eval_concat(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let parts = (0..inputs.len())
        .map(|i| required(inputs, i))
        .collect::<Result<Vec<_>>>()?;
    let first = parts[0];
    let rank = first.rank();
    if rank == 0 {
        return Err(ctx.error("inputs must have rank 1 or more"));
    }
    let axis = normalize_axis(ctx.attrs::<ConcatAxis>()?.0, rank)?;
    Ok(vec![concat(&parts, axis)?])
}

/// `parts` (at least one, of one rank) joined along `axis` (in `[0, rank)`): `Concat`'s kernel,
/// which `ConcatFromSequence` shares.
pub(crate) fn concat(parts: &[&Tensor], axis: usize) -> Result<Tensor> {
    let Some(&first) = parts.first() else {
        return Err(Error::Eval("nothing to concatenate".into()));
    };
    let rank = first.rank();
    let mut total = 0usize;
    for p in parts {
        let same =
            p.rank() == rank && (0..rank).all(|d| d == axis || p.shape()[d] == first.shape()[d]);
        if !same {
            return Err(Error::Eval(format!(
                "shapes {:?} and {:?} differ off axis {axis}",
                first.shape(),
                p.shape()
            )));
        }
        // ONNX dims are int64: a sum past 2^63-1 would come back from `Shape` negative.
        total = total
            .checked_add(p.shape()[axis])
            .filter(|&t| t <= i64::MAX as usize)
            .ok_or_else(|| {
                Error::Eval(format!("the sizes along axis {axis} add up past 2^63-1"))
            })?;
    }
    let mut shape = first.shape().to_vec();
    shape[axis] = total;
    let dtype = first.dtype();
    if let Some(w) = dtype
        .byte_size()
        .filter(|_| dtype != crate::DataType::String)
    {
        if parts.iter().all(|p| p.dtype() == dtype) {
            if let Some(out) = concat_rows(parts, axis, &shape, w)? {
                return Ok(out);
            }
        }
    }
    let mut out = Writer::new(dtype, &shape, parts)?;
    if shape.contains(&0) {
        // Nothing to copy, however many empty rows the other dims make.
        return out.finish();
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    for o in 0..outer {
        for (i, p) in parts.iter().enumerate() {
            let run = p.shape()[axis] * inner;
            out.copy(i, o * run, run)?;
        }
    }
    out.finish()
}

/// `Concat` of elements `w` bytes wide: each row of the output (the elements past `axis`, a
/// plane for the channels of an image) copied from its input into an unfilled buffer. On
/// several threads, rows long enough are cut into one part per thread, thread `t` copying part
/// `t` of every row, as convolutions split a plane's rows: a thread reads the rows the
/// operators before wrote on it and writes what the one after reads there. On a 2-vCPU Intel
/// Xeon (AVX-512) at 2 threads, the conv-net's concatenation of 2 x 32 planes of 40x40 took
/// 0.037 ms copied whole by the calling thread into a zeroed buffer (0.026 at 1 thread) and
/// 0.033 ms in parts (the convolution reading it 0.254 -> 0.245 ms). `None` when the rows are
/// too short or too few to split: then each input's runs are copied whole, a few long copies
/// where rows of a few elements would make many short ones.
fn concat_rows(
    parts: &[&Tensor],
    axis: usize,
    shape: &[usize],
    w: usize,
) -> Result<Option<Tensor>> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let total = shape[axis];
    let (rows, row_bytes) = (outer * total, inner * w);
    let cuts = crate::par::threads();
    if crate::par::min_len(rows, &[inner]) == usize::MAX || row_bytes / cuts < 1024 {
        return Ok(None);
    }
    let sources = parts
        .iter()
        .map(|p| p.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // Output row `r`: row `o * size + k` of the input holding `k` at its offset on the axis.
    let source = |r: usize| -> Option<&[u8]> {
        let (o, mut a) = (r / total, r % total);
        for (p, src) in parts.iter().zip(&sources) {
            let size = p.shape()[axis];
            if a < size {
                return src.get((o * size + a) * row_bytes..)?.get(..row_bytes);
            }
            a -= size;
        }
        None
    };
    let mut out = Tensor::uninit(parts[0].dtype(), shape)?;
    let failed = std::sync::atomic::AtomicBool::new(false);
    let blocks = super::super::vector::ColumnBlocks::new(out.bytes_mut(), rows, row_bytes)?;
    // Task `k` copies cut `k / rows` of row `k % rows`: each thread's stretch of tasks is its
    // cut of every row.
    let task = |k: usize| {
        let (cut, r) = (k / rows, k % rows);
        let (b0, b1) = (row_bytes * cut / cuts, row_bytes * (cut + 1) / cuts);
        // SAFETY: task `k` alone writes bytes `b0..b1` of row `r`.
        match (unsafe { blocks.slots(r, b0, b1 - b0) }, source(r)) {
            (Some(dst), Some(src)) => {
                super::super::vector::copy(dst, &src[b0..b1]);
            }
            _ => failed.store(true, std::sync::atomic::Ordering::Relaxed),
        }
    };
    use crate::par::Workers;
    crate::par::Pool.run(cuts * rows, &task);
    if failed.into_inner() {
        return Err(Error::Eval("an input does not hold its rows".into()));
    }
    // SAFETY: the tasks cover every byte of every row (its cuts), and the rows cover the
    // buffer: `rows * row_bytes` bytes, all the payload of a tensor of `w`-byte elements; none
    // failed.
    Ok(Some(unsafe { out.assume_init() }))
}

pub(super) fn infer_concat(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let n = ctx.node.inputs.len();
    let elem = (0..n).find_map(|i| in_elem(ctx, i));
    let all: Option<Vec<&[Dim]>> = (0..n).map(|i| in_dims(ctx, i)).collect();
    let Some(rank) = (0..n).find_map(|i| in_dims(ctx, i)).map(<[Dim]>::len) else {
        return Ok(vec![typed(elem, None)]);
    };
    let axis = normalize_axis(ctx.attrs::<ConcatAxis>()?.0, rank)?;
    let dims = (0..rank)
        .map(|d| {
            let known = (0..n).filter_map(|i| in_dims(ctx, i)?.get(d));
            if d != axis {
                let mut known: Vec<&Dim> = known.collect();
                known.sort_by_key(|k| match k {
                    Dim::Known(_) => 0,
                    Dim::Symbolic(_) => 1,
                    Dim::Unknown => 2,
                });
                return known.first().map_or(Dim::Unknown, |k| (*k).clone());
            }
            let sum = all.as_ref().and_then(|all| {
                all.iter()
                    .try_fold(0i64, |s, dims| s.checked_add(dims.get(d)?.known()?))
            });
            sum.map_or(Dim::Unknown, Dim::Known)
        })
        .collect();
    Ok(vec![typed(elem, Some(dims))])
}

/// Sizes of `count` chunks of a dim of `len`: `ceil(len / count)` each, the last one smaller
/// when the dim does not divide.
fn even_chunks(len: usize, count: usize) -> Result<Vec<usize>> {
    if count == 0 {
        return Err(Error::Eval("cannot split into 0 outputs".into()));
    }
    let chunk = len.div_ceil(count);
    let last = len.checked_sub(chunk * (count - 1)).ok_or_else(|| {
        Error::Eval(format!(
            "a dim of {len} cannot be split into {count} chunks"
        ))
    })?;
    let mut sizes = vec![chunk; count - 1];
    sizes.push(last);
    Ok(sizes)
}

/// The attributes of a `Split` node: `axis`, the `split` sizes (an attribute before opset 13,
/// read when the node names no sizes input) and `num_outputs` (opset 18).
#[derive(Clone, Debug)]
pub(super) struct SplitAttrs {
    axis: Axis<0>,
    split: Option<Vec<i64>>,
    num_outputs: Option<i64>,
}

impl Attributes for SplitAttrs {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<SplitAttrs> {
        let named_sizes = node.inputs.get(1).is_some_and(|n| !n.is_empty());
        let split = match opset < 13 && !named_sizes {
            true => node.attr_ints("split")?.map(<[i64]>::to_vec),
            false => None,
        };
        let num_outputs = match node.attr("num_outputs") {
            Some(_) => Some(node.attr_int("num_outputs", 0)?),
            None => None,
        };
        Ok(SplitAttrs {
            axis: Axis::parse(node, opset)?,
            split,
            num_outputs,
        })
    }
}

/// The explicit split sizes of a `Split` node, if it has any: input 1, else the attribute.
fn explicit_sizes(attrs: &SplitAttrs, inputs: &[Option<&Tensor>]) -> Result<Option<Vec<i64>>> {
    match optional(inputs, 1) {
        Some(t) => Ok(Some(to_i64s(t)?)),
        None => Ok(attrs.split.clone()),
    }
}

/// The number of chunks of a `Split` node: `num_outputs` (opset 18) or its output count.
fn chunk_count(attrs: &SplitAttrs, node: &crate::ir::Node) -> Result<usize> {
    match attrs.num_outputs {
        Some(n) => {
            let n = to_usize(n, "num_outputs")?;
            if n != node.outputs.len() {
                return Err(Error::Eval(format!(
                    "num_outputs {n} differs from the {} outputs",
                    node.outputs.len()
                )));
            }
            Ok(n)
        }
        None => Ok(node.outputs.len()),
    }
}

pub(super) fn eval_split(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let shape = data.shape();
    if shape.is_empty() {
        return Err(ctx.error("input must have rank 1 or more"));
    }
    let attrs = ctx.attrs::<SplitAttrs>()?;
    let axis = attrs.axis.of_rank(shape.len())?;
    let len = shape[axis];
    let sizes = match explicit_sizes(&attrs, inputs)? {
        Some(s) => s
            .iter()
            .map(|&v| to_usize(v, "a split size"))
            .collect::<Result<Vec<_>>>()?,
        None => even_chunks(len, chunk_count(&attrs, ctx.node)?)?,
    };
    if sizes.len() != ctx.node.outputs.len()
        || sizes.iter().try_fold(0usize, |a, &b| a.checked_add(b)) != Some(len)
    {
        return Err(ctx.error(format!(
            "split sizes {sizes:?} do not cut a dim of {len} into {} outputs",
            ctx.node.outputs.len()
        )));
    }
    split(data, axis, &sizes)
}

/// `data` cut along `axis` (in `[0, rank)`) into pieces of `sizes`, which add up to the dim:
/// `Split`'s kernel, which `SplitToSequence` shares.
pub(crate) fn split(data: &Tensor, axis: usize, sizes: &[usize]) -> Result<Vec<Tensor>> {
    let shape = data.shape();
    let st = strides(shape);
    let mut start = 0;
    let mut outputs = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let axes: Vec<AxisRead> = (0..shape.len())
            .map(|d| match d == axis {
                true => AxisRead::map(size, st[d], move |i| Some(start + i)),
                false => AxisRead::identity(shape[d], st[d]),
            })
            .collect();
        outputs.push(gather_axes(data, &axes, None)?);
        start += size;
    }
    Ok(outputs)
}

pub(super) fn infer_split(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = in_elem(ctx, 0);
    let count = ctx.node.outputs.len();
    let Some(dims) = in_dims(ctx, 0) else {
        return Ok(vec![typed(elem, None); count]);
    };
    let attrs = ctx.attrs::<SplitAttrs>()?;
    let axis = attrs.axis.of_rank(dims.len())?;
    let explicit = match ctx.node.inputs.get(1).is_some_and(|n| !n.is_empty()) {
        true => const_ints(ctx, 1),
        false => attrs.split.clone(),
    };
    let sizes: Option<Vec<Dim>> = match (explicit, dims[axis].known()) {
        (Some(s), _) => Some(s.into_iter().map(Dim::Known).collect()),
        (None, Some(len)) if ctx.node.inputs.len() < 2 || ctx.node.inputs[1].is_empty() => {
            let len = to_usize(len, "a dim")?;
            Some(
                even_chunks(len, chunk_count(&attrs, ctx.node)?)?
                    .into_iter()
                    .map(|s| Dim::Known(s as i64))
                    .collect(),
            )
        }
        _ => None,
    };
    Ok((0..count)
        .map(|k| {
            let mut d = dims.to_vec();
            d[axis] = sizes
                .as_ref()
                .and_then(|s| s.get(k).cloned())
                .unwrap_or(Dim::Unknown);
            typed(elem, Some(d))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn i32s(shape: &[usize], v: &[i32]) -> Tensor {
        Tensor::from_vec(DataType::Int32, shape, v.to_vec()).unwrap()
    }

    #[test]
    fn rows_cut_over_three_threads_join_as_on_one() {
        // Planes long enough to cut into a part a thread (odd lengths, so the cuts differ),
        // along the channels of two images and one, and along the images themselves, in
        // 4-byte and 2-byte elements: the same tensor as copied run by run on one thread.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (a, b, axis, dtype) in [
            ([2, 3, 97, 101], [2, 5, 97, 101], 1, DataType::Float),
            ([1, 4, 301, 71], [1, 2, 301, 71], 1, DataType::Int32),
            ([2, 6, 75, 75], [1, 6, 75, 75], 0, DataType::Float16),
        ] {
            let n = |s: [usize; 4]| s.iter().product::<usize>();
            let tensor = |s: [usize; 4], from: usize| {
                let bytes: Vec<u8> = (0..n(s) * dtype.byte_size().unwrap())
                    .map(|i| ((from + i) * 7 % 251) as u8)
                    .collect();
                Tensor::from_bytes(dtype, &s, &bytes).unwrap()
            };
            let (ta, tb) = (tensor(a, 0), tensor(b, 1));
            let node = Node::new("Concat", "c", ["a", "b", "a"], ["y"])
                .with_attr("axis", AttrValue::Int(axis));
            let inputs = [Some(&ta), Some(&tb), Some(&ta)];
            let split = pool.install(|| eval_node(&node, 13, &inputs)).unwrap();
            let whole = crate::par::serial(|| eval_node(&node, 13, &inputs)).unwrap();
            let mut want = a;
            want[axis as usize] = 2 * a[axis as usize] + b[axis as usize];
            assert_eq!(split[0].shape(), &want[..]);
            assert_eq!(split, whole, "{a:?} {b:?} {axis}");
        }
    }

    #[test]
    fn concat_joins_along_the_axis() {
        let a = i32s(&[2, 2], &[1, 2, 3, 4]);
        let b = i32s(&[2, 1], &[5, 6]);
        let node =
            Node::new("Concat", "c", ["a", "b"], ["y"]).with_attr("axis", AttrValue::Int(-1));
        let out = eval_node(&node, 13, &[Some(&a), Some(&b)])
            .unwrap()
            .remove(0);
        assert_eq!(out.shape(), &[2, 3]);
        assert_eq!(out.to_vec::<i32>().unwrap(), [1, 2, 5, 3, 4, 6]);
        let node = Node::new("Concat", "c", ["a", "b"], ["y"]).with_attr("axis", AttrValue::Int(0));
        let e = eval_node(&node, 13, &[Some(&a), Some(&b)]).unwrap_err();
        assert!(e.to_string().contains("differ off axis 0"), "{e}");
        let node = Node::new("Concat", "c", ["a", "b"], ["y"]);
        assert!(eval_node(&node, 13, &[Some(&a), Some(&b)]).is_err());
        assert_eq!(
            eval_node(&node, 1, &[Some(&a), Some(&b)]).unwrap()[0].shape(),
            &[2, 3]
        );
    }

    #[test]
    fn split_by_sizes_by_count_and_unevenly() {
        let x = i32s(&[6], &[1, 2, 3, 4, 5, 6]);
        let node = Node::new("Split", "s", ["x", "s"], ["a", "b"]);
        let s = Tensor::from_vec(DataType::Int64, &[2], vec![2i64, 4]).unwrap();
        let out = eval_node(&node, 13, &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [1, 2]);
        assert_eq!(out[1].to_vec::<i32>().unwrap(), [3, 4, 5, 6]);

        let node = Node::new("Split", "s", ["x"], ["a", "b", "c", "d"])
            .with_attr("num_outputs", AttrValue::Int(4));
        let out = eval_node(&node, 18, &[Some(&x)]).unwrap();
        let lens: Vec<usize> = out.iter().map(Tensor::len).collect();
        assert_eq!(lens, [2, 2, 2, 0]);

        let node = Node::new("Split", "s", ["x"], ["a", "b"])
            .with_attr("split", AttrValue::Ints(vec![1, 4]));
        let e = eval_node(&node, 11, &[Some(&x)]).unwrap_err();
        assert!(e.to_string().contains("do not cut"), "{e}");

        let m = i32s(&[2, 2], &[1, 2, 3, 4]);
        let node = Node::new("Split", "s", ["x"], ["a", "b"]).with_attr("axis", AttrValue::Int(1));
        let out = eval_node(&node, 11, &[Some(&m)]).unwrap();
        assert_eq!(out[1].to_vec::<i32>().unwrap(), [2, 4]);
    }

    #[test]
    fn concat_and_split_shape_functions() {
        use super::super::runs::infer_dims_for;
        let node = Node::new("Concat", "c", ["a", "b"], ["y"]).with_attr("axis", AttrValue::Int(1));
        let out = infer_dims_for(&node, 13, &[Some(&["N", "3"]), Some(&["?", "5"])], &[]);
        assert_eq!(out.unwrap(), ["N", "8"]);
        let node = Node::new("Split", "s", ["x"], ["a", "b"]).with_attr("axis", AttrValue::Int(1));
        let out = infer_dims_for(&node, 13, &[Some(&["N", "6"])], &[]);
        assert_eq!(out.unwrap(), ["N", "3"]);
    }
}
