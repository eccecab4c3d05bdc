//! The operators that change a tensor's shape but not its elements: `Reshape` (opset 1 with a
//! `shape` attribute, 5 with a `shape` input, `allowzero` from 14), `Flatten` (1, negative axes
//! from 11), `Squeeze` and `Unsqueeze` (`axes` attribute before 13, input from 13).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Reshape.html>,
//! <https://onnx.ai/onnx/operators/onnx__Flatten.html>,
//! <https://onnx.ai/onnx/operators/onnx__Squeeze.html>,
//! <https://onnx.ai/onnx/operators/onnx__Unsqueeze.html>.
//!
//! A `Reshape` entry of 0 copies the input dim at the same position (unless `allowzero` is set,
//! when it is a real 0), and one entry may be -1, inferred from the element count.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::attrs::{Axes, Axis};
use super::super::util::{optional, required, to_i64s};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::runs::{
    const_ints, dim_product, dim_quotient, in_dims, in_elem, in_len, normalize_axes, typed,
    unknown_dims,
};

/// The attributes of a `Reshape` node: the `shape` attribute (read before opset 5) and
/// `allowzero`.
#[derive(Clone, Debug)]
pub(super) struct ReshapeAttrs {
    shape: Option<Vec<i64>>,
    allowzero: bool,
}

impl Attributes for ReshapeAttrs {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<ReshapeAttrs> {
        let shape = match opset < 5 {
            true => node.attr_ints("shape")?.map(<[i64]>::to_vec),
            false => None,
        };
        Ok(ReshapeAttrs {
            shape,
            allowzero: node.attr_int("allowzero", 0)? != 0,
        })
    }
}

/// The target shape of a `Reshape` node: its `shape` attribute before opset 5, its second input
/// from 5 on.
fn target_shape(
    ctx: &EvalCtx<'_>,
    attrs: &ReshapeAttrs,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<i64>> {
    if ctx.opset < 5 {
        return attrs
            .shape
            .clone()
            .ok_or_else(|| ctx.error("needs a 'shape' attribute"));
    }
    to_i64s(required(inputs, 1)?)
}

/// The output dims of `Reshape` of a tensor of `input` dims to the requested `shape`.
fn reshape_dims(input: &[usize], shape: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    let fail =
        |reason: String| Error::Eval(format!("cannot reshape {input:?} to {shape:?}: {reason}"));
    if shape.iter().filter(|&&v| v == -1).count() > 1 {
        return Err(fail("more than one -1".into()));
    }
    if allowzero && shape.contains(&0) && shape.contains(&-1) {
        return Err(fail("0 and -1 together with allowzero".into()));
    }
    let mut dims = Vec::with_capacity(shape.len());
    for (i, &v) in shape.iter().enumerate() {
        dims.push(match v {
            0 if !allowzero => *input
                .get(i)
                .ok_or_else(|| fail(format!("entry {i} copies a dim the input lacks")))?,
            -1 => 0,
            v => usize::try_from(v).map_err(|_| fail(format!("invalid entry {v}")))?,
        });
    }
    let total: usize = input.iter().product();
    let product = |dims: &[usize]| dims.iter().try_fold(1usize, |p, &d| p.checked_mul(d));
    if let Some(at) = shape.iter().position(|&v| v == -1) {
        let rest = dims
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != at)
            .try_fold(1usize, |p, (_, &d)| p.checked_mul(d))
            .ok_or_else(|| fail("too many elements".into()))?;
        if rest == 0 || !total.is_multiple_of(rest) {
            return Err(fail("the -1 entry cannot be inferred".into()));
        }
        dims[at] = total / rest;
    }
    if product(&dims) != Some(total) {
        return Err(fail("the element counts differ".into()));
    }
    Ok(dims)
}

pub(super) fn eval_reshape(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let attrs = ctx.attrs::<ReshapeAttrs>()?;
    let shape = target_shape(ctx, &attrs, inputs)?;
    let dims = reshape_dims(data.shape(), &shape, attrs.allowzero)?;
    Ok(vec![data.clone().into_shape(&dims)?])
}

pub(super) fn infer_reshape(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = in_elem(ctx, 0);
    let attrs = ctx.attrs::<ReshapeAttrs>()?;
    let shape = if ctx.opset < 5 {
        attrs.shape.clone()
    } else {
        const_ints(ctx, 1)
    };
    let Some(shape) = shape else {
        return Ok(vec![typed(elem, in_len(ctx, 1).map(unknown_dims))]);
    };
    let allowzero = attrs.allowzero;
    let input = in_dims(ctx, 0);
    let mut dims: Vec<Dim> = shape
        .iter()
        .enumerate()
        .map(|(i, &v)| match v {
            0 if !allowzero => input
                .and_then(|d| d.get(i))
                .cloned()
                .unwrap_or(Dim::Unknown),
            v if v >= 0 => Dim::Known(v),
            _ => Dim::Unknown,
        })
        .collect();
    if let (Some(at), Some(input)) = (shape.iter().position(|&v| v == -1), input) {
        let others: Vec<Dim> = dims
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != at)
            .map(|(_, d)| d.clone())
            .collect();
        dims[at] = dim_quotient(input, &others);
    }
    Ok(vec![typed(elem, Some(dims))])
}

/// `Flatten`'s split point in `[0, rank]`.
fn flatten_axis(ctx_axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if ctx_axis < 0 { ctx_axis + r } else { ctx_axis };
    if (0..=r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(Error::Eval(format!(
            "axis {ctx_axis} is out of range for rank {rank}"
        )))
    }
}

pub(super) fn eval_flatten(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let axis = flatten_axis(ctx.attrs::<Axis<1>>()?.0, data.rank())?;
    let outer: usize = data.shape()[..axis].iter().product();
    let inner: usize = data.shape()[axis..].iter().product();
    Ok(vec![data.clone().into_shape(&[outer, inner])?])
}

pub(super) fn infer_flatten(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = match in_dims(ctx, 0) {
        Some(d) => {
            let axis = flatten_axis(ctx.attrs::<Axis<1>>()?.0, d.len())?;
            vec![dim_product(&d[..axis]), dim_product(&d[axis..])]
        }
        None => unknown_dims(2),
    };
    Ok(vec![typed(in_elem(ctx, 0), Some(dims))])
}

/// The `axes` of a `Squeeze` or `Unsqueeze` node: an attribute before opset 13, the second input
/// from 13 on.
fn axes_of(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Option<Vec<i64>>> {
    if ctx.opset < 13 {
        Ok(ctx.attrs::<Axes>()?.0.clone())
    } else {
        optional(inputs, 1).map(to_i64s).transpose()
    }
}

/// The same for shape functions: `None` when the axes are not known statically.
fn static_axes(ctx: &InferCtx<'_>) -> Result<Option<Vec<i64>>> {
    if ctx.opset < 13 {
        Ok(ctx.attrs::<Axes>()?.0.clone())
    } else {
        Ok(const_ints(ctx, 1))
    }
}

/// Whether a `Squeeze`/`Unsqueeze` node at opset 13+ names an `axes` input.
fn names_axes_input(ctx: &InferCtx<'_>) -> bool {
    ctx.node.inputs.get(1).is_some_and(|n| !n.is_empty())
}

/// The dims of `Squeeze` of `shape` at `axes` (every dim of size 1 when `None`).
fn squeeze_dims<T: Clone>(
    shape: &[T],
    axes: Option<&[i64]>,
    is_one: impl Fn(&T) -> bool,
) -> Result<Vec<T>> {
    let drop: Vec<usize> = match axes {
        Some(axes) => {
            let axes = normalize_axes(axes, shape.len())?;
            if let Some(&a) = axes.iter().find(|&&a| !is_one(&shape[a])) {
                return Err(Error::Eval(format!(
                    "cannot squeeze axis {a}, whose dim is not 1"
                )));
            }
            axes
        }
        None => (0..shape.len()).filter(|&a| is_one(&shape[a])).collect(),
    };
    Ok(shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !drop.contains(i))
        .map(|(_, d)| d.clone())
        .collect())
}

pub(super) fn eval_squeeze(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let axes = axes_of(ctx, inputs)?;
    let dims = squeeze_dims(data.shape(), axes.as_deref(), |&d| d == 1)?;
    Ok(vec![data.clone().into_shape(&dims)?])
}

pub(super) fn infer_squeeze(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = in_elem(ctx, 0);
    let axes = static_axes(ctx)?;
    let given = axes.is_some() || (ctx.opset >= 13 && names_axes_input(ctx));
    let dims = match (in_dims(ctx, 0), axes) {
        (Some(d), Some(axes)) => Some(squeeze_dims(
            d,
            Some(&axes),
            |d| !matches!(d, Dim::Known(v) if *v != 1),
        )?),
        // Without axes, every dim of size 1 goes: known only when every size is known.
        (Some(d), None) if !given && d.iter().all(|d| d.known().is_some()) => {
            Some(squeeze_dims(d, None, |d| *d == Dim::Known(1))?)
        }
        (Some(d), None) => in_len(ctx, 1)
            .filter(|_| given)
            .and_then(|k| d.len().checked_sub(k))
            .map(unknown_dims),
        (None, _) => None,
    };
    Ok(vec![typed(elem, dims)])
}

/// The dims of `Unsqueeze` of `shape` with new dims of size `one` at `axes` of the output.
fn unsqueeze_dims<T: Clone>(shape: &[T], axes: &[i64], one: T) -> Result<Vec<T>> {
    let rank = shape.len() + axes.len();
    let axes = normalize_axes(axes, rank)?;
    let mut rest = shape.iter();
    Ok((0..rank)
        .map(|i| {
            if axes.contains(&i) {
                one.clone()
            } else {
                // The output rank is the input rank plus the new axes, so this never runs dry.
                rest.next().cloned().unwrap_or_else(|| one.clone())
            }
        })
        .collect())
}

pub(super) fn eval_unsqueeze(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let axes = axes_of(ctx, inputs)?.ok_or_else(|| ctx.error("needs axes"))?;
    let dims = unsqueeze_dims(data.shape(), &axes, 1)?;
    Ok(vec![data.clone().into_shape(&dims)?])
}

pub(super) fn infer_unsqueeze(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = in_elem(ctx, 0);
    let dims = match (in_dims(ctx, 0), static_axes(ctx)?) {
        (Some(d), Some(axes)) => Some(unsqueeze_dims(d, &axes, Dim::Known(1))?),
        (Some(d), None) => in_len(ctx, 1).map(|k| unknown_dims(d.len() + k)),
        (None, _) => None,
    };
    Ok(vec![typed(elem, dims)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, shape, v.to_vec()).unwrap()
    }

    fn reshape(input: &[usize], shape: &[i64], allowzero: bool) -> Result<Vec<usize>> {
        let x = Tensor::zeros(DataType::Float, input).unwrap();
        let node = Node::new("Reshape", "r", ["x", "s"], ["y"])
            .with_attr("allowzero", AttrValue::Int(allowzero.into()));
        let s = i64s(&[shape.len()], shape);
        Ok(eval_node(&node, 14, &[Some(&x), Some(&s)])?[0]
            .shape()
            .to_vec())
    }

    #[test]
    fn reshape_copies_zeros_and_infers_minus_one() {
        assert_eq!(reshape(&[2, 3, 4], &[4, 2, 3], false).unwrap(), [4, 2, 3]);
        assert_eq!(
            reshape(&[2, 3, 4], &[2, 0, 4, 1], false).unwrap(),
            [2, 3, 4, 1]
        );
        assert_eq!(reshape(&[2, 3, 4], &[0, -1], false).unwrap(), [2, 12]);
        assert_eq!(reshape(&[0, 3, 4], &[3, 4, 0], true).unwrap(), [3, 4, 0]);
        let e = reshape(&[2, 3, 4], &[-1, -1], false).unwrap_err();
        assert!(e.to_string().contains("more than one -1"), "{e}");
        let e = reshape(&[2, 3, 4], &[5, -1], false).unwrap_err();
        assert!(e.to_string().contains("cannot be inferred"), "{e}");
        assert!(reshape(&[2, 3], &[0, 0, 0], false).is_err());
        assert!(reshape(&[0, 3], &[0, -1], true).is_err());
    }

    #[test]
    fn reshape_before_opset_5_reads_the_attribute() {
        let x = Tensor::zeros(DataType::Float, &[2, 3]).unwrap();
        let node = Node::new("Reshape", "r", ["x"], ["y"])
            .with_attr("shape", AttrValue::Ints(vec![3, -1]));
        let out = eval_node(&node, 4, &[Some(&x)]).unwrap();
        assert_eq!(out[0].shape(), &[3, 2]);
    }

    #[test]
    fn flatten_splits_at_the_axis() {
        let x = Tensor::zeros(DataType::Float, &[2, 3, 4, 5]).unwrap();
        for (axis, want) in [(0, [1, 120]), (2, [6, 20]), (-1, [24, 5]), (4, [120, 1])] {
            let node =
                Node::new("Flatten", "f", ["x"], ["y"]).with_attr("axis", AttrValue::Int(axis));
            assert_eq!(eval_node(&node, 13, &[Some(&x)]).unwrap()[0].shape(), &want);
        }
        let node = Node::new("Flatten", "f", ["x"], ["y"]).with_attr("axis", AttrValue::Int(5));
        assert!(eval_node(&node, 13, &[Some(&x)]).is_err());
    }

    #[test]
    fn squeeze_and_unsqueeze_by_attribute_and_input() {
        let x = Tensor::zeros(DataType::Float, &[1, 3, 1, 5]).unwrap();
        let node = Node::new("Squeeze", "s", ["x"], ["y"]);
        assert_eq!(
            eval_node(&node, 13, &[Some(&x)]).unwrap()[0].shape(),
            &[3, 5]
        );
        let node = Node::new("Squeeze", "s", ["x", "a"], ["y"]);
        let a = i64s(&[1], &[-2]);
        assert_eq!(
            eval_node(&node, 13, &[Some(&x), Some(&a)]).unwrap()[0].shape(),
            &[1, 3, 5]
        );
        let bad = i64s(&[1], &[1]);
        let e = eval_node(&node, 13, &[Some(&x), Some(&bad)]).unwrap_err();
        assert!(e.to_string().contains("not 1"), "{e}");
        let node =
            Node::new("Squeeze", "s", ["x"], ["y"]).with_attr("axes", AttrValue::Ints(vec![0]));
        assert_eq!(
            eval_node(&node, 11, &[Some(&x)]).unwrap()[0].shape(),
            &[3, 1, 5]
        );

        let x = Tensor::zeros(DataType::Float, &[3, 4, 5]).unwrap();
        let node = Node::new("Unsqueeze", "u", ["x", "a"], ["y"]);
        let a = i64s(&[3], &[5, 4, 2]);
        let out = eval_node(&node, 13, &[Some(&x), Some(&a)]).unwrap();
        assert_eq!(out[0].shape(), &[3, 4, 1, 5, 1, 1]);
        let node = Node::new("Unsqueeze", "u", ["x"], ["y"])
            .with_attr("axes", AttrValue::Ints(vec![-1, 0]));
        assert_eq!(
            eval_node(&node, 11, &[Some(&x)]).unwrap()[0].shape(),
            &[1, 3, 4, 5, 1]
        );
        let node = Node::new("Unsqueeze", "u", ["x"], ["y"])
            .with_attr("axes", AttrValue::Ints(vec![0, 0]));
        assert!(eval_node(&node, 11, &[Some(&x)])
            .unwrap_err()
            .to_string()
            .contains("repeated"));
    }

    #[test]
    fn reshape_infers_symbolic_dims() {
        let n = Dim::Symbolic("n".into());
        let x = TensorType::new(
            DataType::Float,
            vec![n.clone(), Dim::Known(3), Dim::Known(4)],
        );
        let s = i64s(&[2], &[0, -1]);
        let node = Node::new("Reshape", "r", ["x", "s"], ["y"]);
        let out = crate::ops::infer_node(&node, 14, &[Some(x), None], &[None, Some(&s)]);
        assert_eq!(out[0].shape.as_ref().unwrap().dims, [n, Dim::Known(12)]);
    }

    #[test]
    fn flatten_squeeze_unsqueeze_keep_symbols() {
        use super::super::runs::infer_dims_for;
        let x: &[&str] = &["N", "3", "4"];
        let node = Node::new("Flatten", "f", ["x"], ["y"]);
        assert_eq!(
            infer_dims_for(&node, 13, &[Some(x)], &[]).unwrap(),
            ["N", "12"]
        );
        let node = Node::new("Unsqueeze", "u", ["x", "a"], ["y"]);
        let a = i64s(&[1], &[0]);
        let out = infer_dims_for(&node, 13, &[Some(x), Some(&["1"])], &[None, Some(&a)]);
        assert_eq!(out.unwrap(), ["1", "N", "3", "4"]);
        let out = infer_dims_for(&node, 13, &[Some(x), Some(&["2"])], &[]);
        assert_eq!(out.unwrap(), ["?", "?", "?", "?", "?"]);
        let node =
            Node::new("Squeeze", "s", ["x"], ["y"]).with_attr("axes", AttrValue::Ints(vec![1]));
        let out = infer_dims_for(&node, 11, &[Some(&["N", "1", "4"])], &[]);
        assert_eq!(out.unwrap(), ["N", "4"]);
        let node = Node::new("Reshape", "r", ["x", "s"], ["y"]);
        let out = infer_dims_for(&node, 14, &[Some(x), Some(&["3"])], &[]);
        assert_eq!(out.unwrap(), ["?", "?", "?"]);
    }
}
