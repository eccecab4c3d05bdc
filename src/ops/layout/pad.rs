//! `Pad` (opset 1 with a `paddings` attribute, 2 with `pads` and `value` attributes, 11 with
//! `pads` and `constant_value` inputs, 18 with an `axes` input, `wrap` mode from 19).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Pad.html>.
//!
//! `pads` lists every begin count, then every end count; negative counts crop. The modes follow
//! numpy's `pad`: `constant` fills, `edge` repeats the border element, `reflect` mirrors without
//! repeating the border (again and again when the padding is longer than the axis), `wrap`
//! continues periodically.

use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::tensor::Tensor;

use super::super::util::{optional, required, strides, to_i64s};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::runs::{
    const_ints, dim_plus, from_f64s, gather_axes, in_dims, in_elem, normalize_axes, typed,
    unknown_dims, AxisRead,
};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// The attributes of a `Pad` node: `mode`, and before opset 11 the pads (`paddings` at opset
/// 1, `pads` from 2) and the fill `value`.
#[derive(Clone, Debug)]
pub(super) struct PadAttrs {
    mode: Mode,
    pads: Option<Vec<i64>>,
    value: f32,
}

impl Attributes for PadAttrs {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<PadAttrs> {
        let (pads, value) = match opset < 11 {
            true => (
                node.attr_ints(pads_name(opset))?.map(<[i64]>::to_vec),
                node.attr_float("value", 0.0)?,
            ),
            false => (None, 0.0),
        };
        let mode = match node.attr_string("mode")?.unwrap_or("constant") {
            "constant" => Mode::Constant,
            "reflect" => Mode::Reflect,
            "edge" => Mode::Edge,
            "wrap" => Mode::Wrap,
            other => return Err(Error::Eval(format!("unknown mode '{other}'"))),
        };
        Ok(PadAttrs { mode, pads, value })
    }
}

/// The name of the pads attribute at `opset` (before 11).
fn pads_name(opset: i64) -> &'static str {
    if opset < 2 {
        "paddings"
    } else {
        "pads"
    }
}

/// The input position output position `i` of a padded axis reads, for an axis of `n` padded by
/// `begin` in front; `None` reads the constant.
fn source(i: usize, begin: i64, n: usize, mode: Mode) -> Option<usize> {
    // In `i128`: `begin` may be any `i64` when the end count makes up for it.
    let j = i as i128 - i128::from(begin);
    let n = n as i128;
    let k = match mode {
        _ if (0..n).contains(&j) => j,
        Mode::Constant => return None,
        Mode::Edge => j.clamp(0, n - 1),
        Mode::Wrap => j.rem_euclid(n),
        Mode::Reflect if n == 1 => 0,
        Mode::Reflect => {
            let period = 2 * (n - 1);
            let m = j.rem_euclid(period);
            if m >= n {
                period - m
            } else {
                m
            }
        }
    };
    Some(k as usize)
}

/// The begin and end counts of every axis of a tensor of `rank`, from `pads` over `axes`.
fn per_axis(pads: &[i64], axes: Option<&[i64]>, rank: usize) -> Result<Vec<(i64, i64)>> {
    let axes = match axes {
        Some(a) => normalize_axes(a, rank)?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(Error::Eval(format!(
            "{} pads for {} axes (need a begin and an end for each)",
            pads.len(),
            axes.len()
        )));
    }
    let mut out = vec![(0, 0); rank];
    for (k, &a) in axes.iter().enumerate() {
        out[a] = (pads[k], pads[k + axes.len()]);
    }
    Ok(out)
}

/// The pads, axes and fill value of a `Pad` node for `data`.
fn pad_args(
    ctx: &EvalCtx<'_>,
    attrs: &PadAttrs,
    inputs: &[Option<&Tensor>],
    data: &Tensor,
) -> Result<(Vec<i64>, Option<Vec<i64>>, Tensor)> {
    let dtype = data.dtype();
    let zero = || Tensor::zeros(dtype, &[1]);
    if ctx.opset < 11 {
        let name = pads_name(ctx.opset);
        let pads = attrs
            .pads
            .clone()
            .ok_or_else(|| ctx.error(format!("needs a '{name}' attribute")))?;
        let value = attrs.value;
        let fill = if value == 0.0 {
            zero()?
        } else {
            from_f64s(dtype, &[1], &[f64::from(value)])?
        };
        return Ok((pads, None, fill));
    }
    let pads = to_i64s(required(inputs, 1)?)?;
    let fill = match optional(inputs, 2) {
        Some(v) if v.is_empty() => return Err(ctx.error("constant_value is empty")),
        Some(v) => v.clone().into_shape(&[v.len()])?,
        None => zero()?,
    };
    let axes = optional(inputs, 3).map(to_i64s).transpose()?;
    Ok((pads, axes, fill))
}

pub(super) fn eval_pad(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let attrs = ctx.attrs::<PadAttrs>()?;
    let (pads, axes, fill) = pad_args(ctx, &attrs, inputs, data)?;
    let mode = attrs.mode;
    let shape = data.shape();
    let counts = per_axis(&pads, axes.as_deref(), shape.len())?;
    let st = strides(shape);
    let reads = (0..shape.len())
        .map(|d| {
            let (b, e) = counts[d];
            let n = shape[d];
            let len = (n as i128) + i128::from(b) + i128::from(e);
            let len = usize::try_from(len)
                .map_err(|_| ctx.error(format!("pads {b}, {e} leave axis {d} of {n} negative")))?;
            if n == 0 && len > 0 && mode != Mode::Constant {
                return Err(ctx.error(format!("cannot pad the empty axis {d} in this mode")));
            }
            Ok(AxisRead::map(len, st[d], move |i| source(i, b, n, mode)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![gather_axes(data, &reads, Some(&fill))?])
}

pub(super) fn infer_pad(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = in_elem(ctx, 0);
    let Some(dims) = in_dims(ctx, 0) else {
        return Ok(vec![typed(elem, None)]);
    };
    let (pads, axes) = if ctx.opset < 11 {
        (ctx.attrs::<PadAttrs>()?.pads.clone(), None)
    } else {
        let axes_named = ctx.node.inputs.get(3).is_some_and(|n| !n.is_empty());
        let axes = const_ints(ctx, 3);
        if axes_named && axes.is_none() {
            return Ok(vec![typed(elem, Some(unknown_dims(dims.len())))]);
        }
        (const_ints(ctx, 1), axes)
    };
    let out = match pads {
        Some(pads) => per_axis(&pads, axes.as_deref(), dims.len())?
            .iter()
            .zip(dims)
            .map(|(&(b, e), d)| dim_plus(d, b.saturating_add(e)))
            .collect(),
        None => unknown_dims(dims.len()),
    };
    Ok(vec![typed(elem, Some(out))])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    fn pad(mode: &str, x: &Tensor, pads: &[i64], value: Option<&Tensor>) -> Result<Tensor> {
        let node = Node::new("Pad", "p", ["x", "p", "v"], ["y"])
            .with_attr("mode", AttrValue::String(mode.into()));
        let p = Tensor::from_vec(DataType::Int64, &[pads.len()], pads.to_vec()).unwrap();
        Ok(eval_node(&node, 19, &[Some(x), Some(&p), value])?.remove(0))
    }

    #[test]
    fn every_mode_follows_the_onnx_examples() {
        let x = Tensor::from_vec(
            DataType::Float,
            &[3, 2],
            vec![1.0f32, 1.2, 2.3, 3.4, 4.5, 5.7],
        )
        .unwrap();
        let pads = [0, 2, 0, 0];
        let zero = Tensor::scalar(DataType::Float, 0.0f32).unwrap();
        let out = pad("constant", &x, &pads, Some(&zero)).unwrap();
        assert_eq!(out.shape(), &[3, 4]);
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            [0.0, 0.0, 1.0, 1.2, 0.0, 0.0, 2.3, 3.4, 0.0, 0.0, 4.5, 5.7]
        );
        let out = pad("reflect", &x, &pads, None).unwrap();
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            [1.0, 1.2, 1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7, 4.5, 5.7]
        );
        let out = pad("edge", &x, &pads, None).unwrap();
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            [1.0, 1.0, 1.0, 1.2, 2.3, 2.3, 2.3, 3.4, 4.5, 4.5, 4.5, 5.7]
        );
        let out = pad("wrap", &x, &[2, 1, 1, 1], None).unwrap();
        assert_eq!(out.shape(), &[6, 4]);
        assert_eq!(&out.to_vec::<f32>().unwrap()[..4], &[3.4, 2.3, 3.4, 2.3]);
    }

    #[test]
    fn reflect_beyond_the_axis_and_negative_pads_crop() {
        let x = Tensor::from_vec(DataType::Int32, &[3], vec![1i32, 2, 3]).unwrap();
        // numpy.pad([1, 2, 3], (5, 0), 'reflect') = [2, 1, 2, 3, 2, 1, 2, 3]
        let out = pad("reflect", &x, &[5, 0], None).unwrap();
        assert_eq!(out.to_vec::<i32>().unwrap(), [2, 1, 2, 3, 2, 1, 2, 3]);
        let out = pad("constant", &x, &[-1, 1], None).unwrap();
        assert_eq!(out.to_vec::<i32>().unwrap(), [2, 3, 0]);
        let e = pad("constant", &x, &[-2, -2], None).unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let e = pad("constant", &x, &[1], None).unwrap_err();
        assert!(e.to_string().contains("1 pads for 1 axes"), "{e}");
        let empty = Tensor::zeros(DataType::Int32, &[0]).unwrap();
        assert!(pad("edge", &empty, &[1, 0], None).is_err());
    }

    #[test]
    fn strings_pad_and_old_opsets_read_attributes() {
        let s = Tensor::from_strings(&[1], vec![b"a".to_vec()]).unwrap();
        let fill = Tensor::from_strings(&[], vec![b"-".to_vec()]).unwrap();
        let out = pad("constant", &s, &[1, 0], Some(&fill)).unwrap();
        assert_eq!(out.as_strings().unwrap(), &[b"-".to_vec(), b"a".to_vec()]);

        let x = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.0]).unwrap();
        let node = Node::new("Pad", "p", ["x"], ["y"])
            .with_attr("pads", AttrValue::Ints(vec![1, 1]))
            .with_attr("value", AttrValue::Float(7.0));
        let out = eval_node(&node, 2, &[Some(&x)]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [7.0, 1.0, 2.0, 7.0]);

        let node = Node::new("Pad", "p", ["x", "p", "", "a"], ["y"]);
        let p = Tensor::from_vec(DataType::Int64, &[2], vec![0i64, 2]).unwrap();
        let a = Tensor::from_vec(DataType::Int64, &[1], vec![-1i64]).unwrap();
        let out = eval_node(&node, 18, &[Some(&x), Some(&p), None, Some(&a)]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [1.0, 2.0, 0.0, 0.0]);
    }

    #[test]
    fn pad_shape_function_adds_constant_pads() {
        let node = Node::new("Pad", "p", ["x", "p"], ["y"]);
        let p = Tensor::from_vec(DataType::Int64, &[4], vec![0i64, 1, 0, 1]).unwrap();
        let x: &[&str] = &["N", "3"];
        let out =
            super::super::runs::infer_dims_for(&node, 13, &[Some(x), None], &[None, Some(&p)]);
        assert_eq!(out.unwrap(), ["N", "5"]);
    }
}
