//! `Slice` (opset 1 with `starts`/`ends`/`axes` attributes, 10 with inputs and `steps`) and
//! `Compress` (9, negative axes from 11).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Slice.html>,
//! <https://onnx.ai/onnx/operators/onnx__Compress.html>.
//!
//! `Slice` bounds follow numpy: negative values count from the end, then starts and ends are
//! clamped to `[0, dim]` for positive steps and `[-1, dim - 1]` for negative ones, so any
//! `INT64_MIN`/`INT64_MAX` sentinel works. `Compress` without an axis works on the flattened
//! input; a condition shorter than the axis selects only among its first positions.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::util::{optional, required, strides, to_i64s};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::runs::{
    const_ints, gather_axes, in_dims, in_elem, nonzero_flags, normalize_axes, typed, AxisRead,
};

/// One axis of a slice: the first position, the step and the count.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Range {
    start: i64,
    step: i64,
    len: usize,
}

/// The positions `start:end:step` select in a dim of `dim`, as numpy computes them.
fn axis_range(start: i64, end: i64, step: i64, dim: usize) -> Result<Range> {
    if step == 0 {
        return Err(Error::Eval("slice steps must not be 0".into()));
    }
    let n = dim as i128;
    let resolve = |v: i64| if v < 0 { v as i128 + n } else { v as i128 };
    let (lo, hi) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let s = resolve(start).clamp(lo, hi);
    let e = resolve(end).clamp(lo, hi);
    let (span, stride) = if step > 0 {
        (e - s, step as i128)
    } else {
        (s - e, -(step as i128))
    };
    let len = (span.max(0) as u128).div_ceil(stride as u128);
    Ok(Range {
        start: s as i64,
        step,
        len: len as usize,
    })
}

/// The `starts`, `ends` and `axes` attributes of a `Slice` node before opset 10, as written.
#[derive(Clone, Debug)]
pub(super) struct SliceAttrs {
    starts: Option<Vec<i64>>,
    ends: Option<Vec<i64>>,
    axes: Option<Vec<i64>>,
}

impl Attributes for SliceAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<SliceAttrs> {
        let ints =
            |name| -> Result<Option<Vec<i64>>> { Ok(node.attr_ints(name)?.map(<[i64]>::to_vec)) };
        Ok(SliceAttrs {
            starts: ints("starts")?,
            ends: ints("ends")?,
            axes: ints("axes")?,
        })
    }
}

/// The starts, ends, axes and steps of a `Slice` node (attributes before opset 10).
struct SliceArgs {
    starts: Vec<i64>,
    ends: Vec<i64>,
    axes: Option<Vec<i64>>,
    steps: Option<Vec<i64>>,
}

fn slice_args(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<SliceArgs> {
    if ctx.opset < 10 {
        let attrs = ctx.attrs::<SliceAttrs>()?;
        let need = |v: &Option<Vec<i64>>, name: &str| {
            v.clone()
                .ok_or_else(|| ctx.error(format!("needs '{name}'")))
        };
        return Ok(SliceArgs {
            starts: need(&attrs.starts, "starts")?,
            ends: need(&attrs.ends, "ends")?,
            axes: attrs.axes.clone(),
            steps: None,
        });
    }
    let read = |i| optional(inputs, i).map(to_i64s).transpose();
    Ok(SliceArgs {
        starts: to_i64s(required(inputs, 1)?)?,
        ends: to_i64s(required(inputs, 2)?)?,
        axes: read(3)?,
        steps: read(4)?,
    })
}

/// The `(axis, start, end, step)` of every sliced axis of a tensor of `rank`.
fn sliced_axes(args: &SliceArgs, rank: usize) -> Result<Vec<(usize, i64, i64, i64)>> {
    let k = args.starts.len();
    let axes = match &args.axes {
        Some(a) => normalize_axes(a, rank)?,
        None => (0..k).collect(),
    };
    let steps = args.steps.clone().unwrap_or_else(|| vec![1; k]);
    if args.ends.len() != k || axes.len() != k || steps.len() != k || k > rank {
        return Err(Error::Eval(format!(
            "starts, ends, axes and steps must have the same length, at most the rank {rank}"
        )));
    }
    Ok((0..k)
        .map(|j| (axes[j], args.starts[j], args.ends[j], steps[j]))
        .collect())
}

pub(super) fn eval_slice(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let shape = data.shape();
    let mut ranges: Vec<Range> = shape
        .iter()
        .map(|&d| Range {
            start: 0,
            step: 1,
            len: d,
        })
        .collect();
    for (a, start, end, step) in sliced_axes(&slice_args(ctx, inputs)?, shape.len())? {
        ranges[a] = axis_range(start, end, step, shape[a])?;
    }
    let st = strides(shape);
    let axes: Vec<AxisRead> = ranges
        .iter()
        .zip(&st)
        .map(|(r, &s)| {
            // Every position lies inside the dim: the range was clamped to it.
            AxisRead::map(r.len, s, |i| {
                usize::try_from(r.start + i as i64 * r.step).ok()
            })
        })
        .collect();
    Ok(vec![gather_axes(data, &axes, None)?])
}

/// The constant values of optional input `i`: `Some(None)` when the node omits it, `None` when
/// it is named but not a constant.
fn optional_const(ctx: &InferCtx<'_>, i: usize) -> Option<Option<Vec<i64>>> {
    if ctx.node.inputs.get(i).is_some_and(|n| !n.is_empty()) {
        const_ints(ctx, i).map(Some)
    } else {
        Some(None)
    }
}

/// The slice arguments of a node, when they are all known statically.
fn static_slice_args(ctx: &InferCtx<'_>) -> Option<SliceArgs> {
    if ctx.opset < 10 {
        let attrs = ctx.attrs::<SliceAttrs>().ok()?;
        return Some(SliceArgs {
            starts: attrs.starts.clone()?,
            ends: attrs.ends.clone()?,
            axes: attrs.axes.clone(),
            steps: None,
        });
    }
    Some(SliceArgs {
        starts: const_ints(ctx, 1)?,
        ends: const_ints(ctx, 2)?,
        axes: optional_const(ctx, 3)?,
        steps: optional_const(ctx, 4)?,
    })
}

pub(super) fn infer_slice(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = in_elem(ctx, 0);
    let Some(dims) = in_dims(ctx, 0) else {
        return Ok(vec![typed(elem, None)]);
    };
    let mut out = dims.to_vec();
    if let Some(args) = static_slice_args(ctx) {
        for (a, start, end, step) in sliced_axes(&args, dims.len())? {
            out[a] = match dims[a].known().and_then(|n| usize::try_from(n).ok()) {
                Some(n) => Dim::Known(axis_range(start, end, step, n)?.len as i64),
                None => Dim::Unknown,
            };
        }
    } else {
        // The bounds are unknown: only the sliced dims, where known, keep nothing.
        let axes = if ctx.opset < 10 {
            None
        } else {
            optional_const(ctx, 3)
        };
        match axes {
            Some(Some(a)) => {
                for a in normalize_axes(&a, dims.len())? {
                    out[a] = Dim::Unknown;
                }
            }
            _ => out.iter_mut().for_each(|d| *d = Dim::Unknown),
        }
    }
    Ok(vec![typed(elem, Some(out))])
}

pub(super) fn eval_compress(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (data, condition) = (required(inputs, 0)?, required(inputs, 1)?);
    if condition.rank() != 1 {
        return Err(ctx.error("condition must be 1-D"));
    }
    let (data, axis) = match ctx.node.attr("axis") {
        Some(_) => {
            let axis =
                super::super::util::normalize_axis(ctx.node.attr_int("axis", 0)?, data.rank())?;
            (data.clone(), axis)
        }
        None => (data.clone().into_shape(&[data.len()])?, 0),
    };
    let dim = data.shape()[axis];
    let picks: Vec<usize> = nonzero_flags(condition)?
        .iter()
        .enumerate()
        .filter_map(|(i, &keep)| keep.then_some(i))
        .collect();
    if let Some(&p) = picks.iter().find(|&&p| p >= dim) {
        return Err(ctx.error(format!("condition selects position {p} of a dim of {dim}")));
    }
    let st = strides(data.shape());
    let axes: Vec<AxisRead> = (0..data.rank())
        .map(|d| match d == axis {
            true => AxisRead::map(picks.len(), st[d], |i| Some(picks[i])),
            false => AxisRead::identity(data.shape()[d], st[d]),
        })
        .collect();
    Ok(vec![gather_axes(&data, &axes, None)?])
}

pub(super) fn infer_compress(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = match ctx.node.attr("axis") {
        None => Some(vec![Dim::Unknown]),
        Some(_) => in_dims(ctx, 0).map(|d| {
            let axis = ctx.node.attr_int("axis", 0).unwrap_or(0);
            let r = d.len() as i64;
            let a = if axis < 0 { axis + r } else { axis };
            (0..d.len())
                .map(|i| {
                    if i as i64 == a {
                        Dim::Unknown
                    } else {
                        d[i].clone()
                    }
                })
                .collect()
        }),
    };
    Ok(vec![typed(in_elem(ctx, 0), dims)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    fn i64s(v: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, &[v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn ranges_clamp_like_numpy() {
        let r = |s, e, st| axis_range(s, e, st, 10).unwrap();
        assert_eq!(
            r(0, 3, 1),
            Range {
                start: 0,
                step: 1,
                len: 3
            }
        );
        assert_eq!(
            r(-3, i64::MAX, 1),
            Range {
                start: 7,
                step: 1,
                len: 3
            }
        );
        assert_eq!(r(20, 1000, 1).len, 0);
        assert_eq!(
            r(i64::MAX, i64::MIN, -1),
            Range {
                start: 9,
                step: -1,
                len: 10
            }
        );
        assert_eq!(
            r(-1, -4, -2),
            Range {
                start: 9,
                step: -2,
                len: 2
            }
        );
        assert!(axis_range(0, 1, 0, 10)
            .unwrap_err()
            .to_string()
            .contains("must not be 0"));
    }

    #[test]
    fn slice_with_inputs_and_with_attributes() {
        let x = Tensor::from_vec(DataType::Int32, &[2, 4], (1..=8).collect::<Vec<i32>>()).unwrap();
        // The spec's first example: data[1:2, 0:3:2] = [[5, 7]].
        let node = Node::new("Slice", "s", ["x", "s", "e", "a", "t"], ["y"]);
        let (s, e, a, t) = (i64s(&[1, 0]), i64s(&[2, 3]), i64s(&[0, 1]), i64s(&[1, 2]));
        let out = eval_node(
            &node,
            13,
            &[Some(&x), Some(&s), Some(&e), Some(&a), Some(&t)],
        )
        .unwrap();
        assert_eq!(out[0].shape(), &[1, 2]);
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [5, 7]);
        // The second: data[0:-1, 1:1000] = [[2, 3, 4]].
        let node = Node::new("Slice", "s", ["x"], ["y"])
            .with_attr("starts", AttrValue::Ints(vec![0, 1]))
            .with_attr("ends", AttrValue::Ints(vec![-1, 1000]));
        let out = eval_node(&node, 1, &[Some(&x)]).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [2, 3, 4]);
        // Reversed rows.
        let node = Node::new("Slice", "s", ["x", "s", "e", "a", "t"], ["y"]);
        let (s, e, a, t) = (i64s(&[-1]), i64s(&[i64::MIN]), i64s(&[1]), i64s(&[-1]));
        let out = eval_node(
            &node,
            13,
            &[Some(&x), Some(&s), Some(&e), Some(&a), Some(&t)],
        )
        .unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [4, 3, 2, 1, 8, 7, 6, 5]);
    }

    #[test]
    fn compress_selects_along_an_axis_or_flattened() {
        let x = Tensor::from_vec(DataType::Int32, &[3, 2], (1..=6).collect::<Vec<i32>>()).unwrap();
        let c = Tensor::from_vec(DataType::Bool, &[3], vec![0u8, 1, 1]).unwrap();
        let node =
            Node::new("Compress", "c", ["x", "c"], ["y"]).with_attr("axis", AttrValue::Int(0));
        let out = eval_node(&node, 11, &[Some(&x), Some(&c)]).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [3, 4, 5, 6]);
        let node = Node::new("Compress", "c", ["x", "c"], ["y"]);
        let out = eval_node(&node, 11, &[Some(&x), Some(&c)]).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), [2, 3]);
        let long = Tensor::from_vec(DataType::Bool, &[4], vec![0u8, 0, 0, 1]).unwrap();
        let node =
            Node::new("Compress", "c", ["x", "c"], ["y"]).with_attr("axis", AttrValue::Int(0));
        let e = eval_node(&node, 11, &[Some(&x), Some(&long)]).unwrap_err();
        assert!(e.to_string().contains("position 3"), "{e}");
    }

    #[test]
    fn slice_shape_function_uses_constant_bounds() {
        use super::super::runs::infer_dims_for;
        let node = Node::new("Slice", "s", ["x", "s", "e", "a"], ["y"]);
        let (s, e, a) = (i64s(&[2]), i64s(&[5]), i64s(&[1]));
        let x: &[&str] = &["N", "10"];
        let out = infer_dims_for(
            &node,
            13,
            &[Some(x), None, None, None],
            &[None, Some(&s), Some(&e), Some(&a)],
        );
        assert_eq!(out.unwrap(), ["N", "3"]);
        let out = infer_dims_for(
            &node,
            13,
            &[Some(x), None, None, None],
            &[None, None, None, Some(&a)],
        );
        assert_eq!(out.unwrap(), ["N", "?"]);
    }
}
