//! `ArgMax` and `ArgMin` (opset 1+; `select_last_index` from 12): the `int64` index of the
//! largest (smallest) element along `axis` (default 0), the axis kept as size 1 unless
//! `keepdims = 0`. Ties go to the first index, or the last with `select_last_index`; NaN is never
//! selected over a number. Every numeric type is accepted; an empty axis is an error.

use crate::error::Result;
use crate::ir::{Dim, Shape, TensorType};
use crate::ops::attrs::Axis;
use crate::ops::util::{required, tensor};
use crate::ops::{Attributes, EvalCtx, InferCtx};
use crate::tensor::Tensor;
use crate::tensor::{try_vec, try_with_capacity};
use crate::DataType;

use super::work::{bad_type, split_at_axis};
use crate::ops::num::{dispatch_num, Arith, Num};

/// The attributes of an `ArgMax` or `ArgMin` node: `axis`, `keepdims` and `select_last_index`.
#[derive(Clone, Copy, Debug)]
pub(super) struct ArgAttrs {
    axis: Axis<0>,
    keepdims: bool,
    last: bool,
}

impl Attributes for ArgAttrs {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<ArgAttrs> {
        Ok(ArgAttrs {
            axis: Axis::parse(node, opset)?,
            keepdims: node.attr_int("keepdims", 1)? != 0,
            last: node.attr_int("select_last_index", 0)? != 0,
        })
    }
}

impl ArgAttrs {
    /// The axis (normalized for `rank`), keepdims and select_last_index.
    fn at_rank(&self, rank: usize) -> Result<(usize, bool, bool)> {
        Ok((self.axis.of_rank(rank)?, self.keepdims, self.last))
    }
}

/// The output shape: `shape` with `axis` kept as 1 or removed.
fn reduced<D: Clone>(shape: &[D], axis: usize, keepdims: bool, one: D) -> Vec<D> {
    let mut out = shape.to_vec();
    if keepdims {
        out[axis] = one;
    } else {
        out.remove(axis);
    }
    out
}

/// Whether element `c` replaces the best value `b` so far: it is larger (smaller), or equal with
/// `last`, or `b` is NaN and `c` a number (a NaN best is replaced by the first number).
#[inline(always)]
fn replaces<W: Arith>(c: W, b: W, maximum: bool, last: bool) -> bool {
    let wins = if maximum { c > b } else { c < b };
    wins || (last && c == b) || (b.is_nan() && !c.is_nan())
}

/// The index of the largest (`maximum`) or smallest element of each row along the node's axis.
fn arg<T: Num>(ctx: &EvalCtx<'_>, x: &Tensor, maximum: bool) -> Result<Tensor> {
    let (axis, keepdims, last) = ctx.attrs::<ArgAttrs>()?.at_rank(x.rank())?;
    let (outer, size, inner) = split_at_axis(x.shape(), axis);
    if size == 0 {
        return Err(ctx.error(format!("axis {axis} is empty")));
    }
    let v = x.as_slice::<T>()?;
    let mut out = try_vec(outer * inner, 0i64)?;
    if inner == 1 {
        // The axis is innermost: each row is one contiguous scan with its best in a register.
        match (maximum, last) {
            (true, false) => last_axis::<T, true, false>(v, size, &mut out),
            (true, true) => last_axis::<T, true, true>(v, size, &mut out),
            (false, false) => last_axis::<T, false, false>(v, size, &mut out),
            (false, true) => last_axis::<T, false, true>(v, size, &mut out),
        }
    } else if inner > 0 {
        // The best value so far of each position of a slab, which the rows of the axis update
        // in turn (a contiguous pass each, rather than a strided walk per position).
        let mut best = try_with_capacity(inner)?;
        for (slab, picks) in v
            .chunks_exact(size * inner)
            .zip(out.chunks_exact_mut(inner))
        {
            best.clear();
            best.extend(slab[..inner].iter().map(|t| t.widen()));
            for (i, row) in slab.chunks_exact(inner).enumerate().skip(1) {
                for ((b, pick), &t) in best.iter_mut().zip(picks.iter_mut()).zip(row) {
                    let c = t.widen();
                    if replaces(c, *b, maximum, last) {
                        *b = c;
                        *pick = i as i64;
                    }
                }
            }
        }
    }
    let shape = reduced(x.shape(), axis, keepdims, 1);
    tensor(DataType::Int64, &shape, out)
}

/// [`arg`] along the innermost axis (rows of `size > 0` elements), split over the threads when
/// there are many rows. Measured on Zen 5 (`multigather run --repeat 300`, medians), an `ArgMax`
/// over rows of 3 of a `[1, 6300, 3]` tensor: 0.042 -> 0.010 ms at 1 thread (onnxruntime 1.32:
/// 0.017 ms).
fn last_axis<T: Num, const MAXIMUM: bool, const LAST: bool>(v: &[T], size: usize, out: &mut [i64]) {
    let rows = |(rows, picks): (&[T], &mut [i64])| {
        for (row, pick) in rows.chunks_exact(size).zip(picks) {
            let (mut b, mut p) = (row[0].widen(), 0);
            for (i, &t) in row.iter().enumerate().skip(1) {
                let c = t.widen();
                if replaces(c, b, MAXIMUM, LAST) {
                    (b, p) = (c, i);
                }
            }
            *pick = p as i64;
        }
    };
    // Tasks of whole rows: `ROWS` rows at a time, as many at once as make a grain.
    const ROWS: usize = 256;
    let tasks = out.len().div_ceil(ROWS);
    let min_len = crate::par::min_len(tasks, &[ROWS, size]);
    if min_len == usize::MAX {
        rows((v, out));
    } else {
        use rayon::prelude::*;
        v.par_chunks(ROWS * size)
            .zip(out.par_chunks_mut(ROWS))
            .with_min_len(min_len)
            .for_each(rows);
    }
}

fn eval(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>], maximum: bool) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    dispatch_num!(x.dtype(), T => Ok(vec![arg::<T>(ctx, x, maximum)?]),
        _ => Err(bad_type(ctx, x.dtype())))
}

pub(super) fn eval_argmax(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    eval(ctx, inputs, true)
}

pub(super) fn eval_argmin(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    eval(ctx, inputs, false)
}

pub(super) fn infer_arg(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let shape = match ctx.input(0).and_then(|t| t.shape.as_ref()) {
        Some(s) => {
            let (axis, keepdims, _) = ctx.attrs::<ArgAttrs>()?.at_rank(s.rank())?;
            Some(Shape::new(reduced(&s.dims, axis, keepdims, Dim::Known(1))))
        }
        None => None,
    };
    Ok(vec![TensorType {
        elem: Some(DataType::Int64),
        shape,
    }])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn run(op: &str, attrs: &[(&str, i64)], x: &Tensor) -> crate::Result<Tensor> {
        let mut node = Node::new(op, "a", ["x"], ["y"]);
        for (k, v) in attrs {
            node = node.with_attr(k, AttrValue::Int(*v));
        }
        Ok(eval_node(&node, 13, &[Some(x)])?.remove(0))
    }

    fn x() -> Tensor {
        Tensor::from_vec(DataType::Float, &[2, 2], vec![2.0f32, 2.0, 3.0, -1.0]).unwrap()
    }

    #[test]
    fn argmax_follows_the_onnx_example() {
        let y = run("ArgMax", &[("axis", 1)], &x()).unwrap();
        assert_eq!(y.shape(), &[2, 1]);
        assert_eq!(y.to_vec::<i64>().unwrap(), [0, 0]);
        let y = run(
            "ArgMax",
            &[("axis", 1), ("select_last_index", 1), ("keepdims", 0)],
            &x(),
        )
        .unwrap();
        assert_eq!(y.shape(), &[2]);
        assert_eq!(y.to_vec::<i64>().unwrap(), [1, 0]);
    }

    #[test]
    fn inference_gives_int64_of_the_reduced_rank() {
        use crate::ir::{Dim, TensorType};
        let n = Dim::Symbolic("n".into());
        let x = TensorType::new(DataType::Float16, vec![n.clone(), Dim::Known(3)]);
        let node = Node::new("ArgMax", "a", ["x"], ["y"])
            .with_attr("axis", AttrValue::Int(-1))
            .with_attr("keepdims", AttrValue::Int(0));
        let t = crate::ops::infer_node(&node, 13, &[Some(x)], &[None]);
        assert_eq!(t[0], TensorType::new(DataType::Int64, vec![n]));
    }

    #[test]
    fn last_axis_rows_match_the_slab_loop() {
        // An innermost axis takes the row scan; the same rows as the outermost axis of the
        // transpose take the slab loop. Rows of 1, 2, 3 and 7, ties, NaNs first, last and
        // alone, both selections and both extremes, three element types, and enough rows to be
        // split over the threads.
        let values = [
            2.0f32,
            f32::NAN,
            -1.0,
            2.0,
            0.5,
            -1.0,
            f32::NAN,
            3.0,
            3.0,
            -0.0,
            0.0,
        ];
        for (rows, size) in [(5, 1), (7, 2), (6300, 3), (33, 7), (40000, 3)] {
            let v: Vec<f32> = (0..rows * size)
                .map(|i| values[(i * 7 + i / 5) % values.len()])
                .collect();
            let t: Vec<f32> = (0..rows * size)
                .map(|k| v[(k % rows) * size + k / rows])
                .collect();
            let as_dtype = |v: &[f32], shape: &[usize], dtype: DataType| match dtype {
                DataType::Float => Tensor::from_vec(dtype, shape, v.to_vec()).unwrap(),
                DataType::Int32 => {
                    let v: Vec<i32> = v.iter().map(|&x| x as i32).collect();
                    Tensor::from_vec(dtype, shape, v).unwrap()
                }
                _ => {
                    let v: Vec<u8> = v.iter().map(|&x| (x.max(0.0) * 2.0) as u8).collect();
                    Tensor::from_vec(dtype, shape, v).unwrap()
                }
            };
            for dtype in [DataType::Float, DataType::Int32, DataType::Uint8] {
                let x = as_dtype(&v, &[rows, size], dtype);
                let xt = as_dtype(&t, &[size, rows], dtype);
                for op in ["ArgMax", "ArgMin"] {
                    for last in [0, 1] {
                        let rows_scan = run(
                            op,
                            &[("axis", -1), ("keepdims", 0), ("select_last_index", last)],
                            &x,
                        )
                        .unwrap();
                        let slabs = run(
                            op,
                            &[("axis", 0), ("keepdims", 0), ("select_last_index", last)],
                            &xt,
                        )
                        .unwrap();
                        assert_eq!(rows_scan, slabs, "{op} {dtype} {rows}x{size} last={last}");
                    }
                }
            }
        }
    }

    #[test]
    fn argmin_over_the_default_axis() {
        let y = run("ArgMin", &[], &x()).unwrap();
        assert_eq!(y.shape(), &[1, 2]);
        assert_eq!(y.to_vec::<i64>().unwrap(), [0, 1]);
        let empty = Tensor::from_vec(DataType::Int32, &[0, 2], Vec::<i32>::new()).unwrap();
        let err = run("ArgMin", &[], &empty).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
