//! Tensors made from a shape and a value: `ConstantOfShape` (opset 9) and `EyeLike` (9).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__ConstantOfShape.html>,
//! <https://onnx.ai/onnx/operators/onnx__EyeLike.html>.
//!
//! `ConstantOfShape` repeats its one-element `value` attribute (a float 0 by default), so it
//! works for every element type, packed ones included. `EyeLike` puts ones on diagonal `k` of a
//! 2-D tensor of its input's shape, in the `dtype` attribute's type or the input's.

use crate::error::{Error, Result};
use crate::ir::stored_to_tensor;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{required, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::runs::{
    const_ints, from_f64s, in_dims, in_elem, in_len, to_usize, two_valued, typed, unknown_dims,
    Writer,
};

/// The value a `ConstantOfShape` node repeats.
fn fill_value(node: &crate::ir::Node) -> Result<Tensor> {
    match node.attr_tensor("value")? {
        None => Ok(Tensor::scalar(DataType::Float, 0.0f32)?),
        Some(v) => {
            let t = stored_to_tensor(v)?;
            if t.len() != 1 {
                return Err(Error::Eval(format!(
                    "value must hold one element, found {}",
                    t.len()
                )));
            }
            Ok(t)
        }
    }
}

pub(super) fn eval_constant_of_shape(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let shape = to_i64s(required(inputs, 0)?)?
        .into_iter()
        .map(|d| to_usize(d, "a dim"))
        .collect::<Result<Vec<_>>>()?;
    let value = fill_value(ctx.node)?;
    let sources = [&value];
    let mut out = Writer::new(value.dtype(), &shape, &sources)?;
    let n: usize = shape.iter().product();
    out.repeat(0, 0, n)?;
    Ok(vec![out.finish()?])
}

pub(super) fn infer_constant_of_shape(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = fill_value(ctx.node)?.dtype();
    let dims = match const_ints(ctx, 0) {
        Some(v) => Some(v.into_iter().map(Dim::Known).collect()),
        None => in_len(ctx, 0).map(unknown_dims),
    };
    Ok(vec![typed(Some(elem), dims)])
}

/// The output type of an `EyeLike` node whose input is `input`.
fn eye_type(node: &crate::ir::Node, input: Option<DataType>) -> Result<Option<DataType>> {
    match node.attr("dtype") {
        None => Ok(input),
        Some(_) => {
            let code = node.attr_int("dtype", 0)?;
            i32::try_from(code)
                .ok()
                .and_then(DataType::from_onnx)
                .map(Some)
                .ok_or_else(|| Error::Eval(format!("unknown dtype {code}")))
        }
    }
}

pub(super) fn eval_eye_like(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let input = required(inputs, 0)?;
    let &[rows, cols] = input.shape() else {
        return Err(ctx.error(format!("input must be 2-D, found {:?}", input.shape())));
    };
    let dtype = eye_type(ctx.node, Some(input.dtype()))?.unwrap_or(input.dtype());
    let k = ctx.node.attr_int("k", 0)?;
    let values = from_f64s(dtype, &[2], &[0.0, 1.0])?;
    let on_diagonal = |p: usize| (p % cols) as i64 - (p / cols) as i64 == k;
    Ok(vec![two_valued(&values, &[rows, cols], on_diagonal)?])
}

pub(super) fn infer_eye_like(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = eye_type(ctx.node, in_elem(ctx, 0))?;
    Ok(vec![typed(elem, in_dims(ctx, 0).map(<[Dim]>::to_vec))])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node, StoredTensor};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    #[test]
    fn constant_of_shape_repeats_any_value() {
        let shape = Tensor::from_vec(DataType::Int64, &[2], vec![2i64, 3]).unwrap();
        let node = Node::new("ConstantOfShape", "c", ["s"], ["y"]);
        let out = eval_node(&node, 9, &[Some(&shape)]).unwrap().remove(0);
        assert_eq!(out, Tensor::zeros(DataType::Float, &[2, 3]).unwrap());

        let value = StoredTensor::raw(None, DataType::Int4, &[1], vec![0x07u8].into());
        let node = Node::new("ConstantOfShape", "c", ["s"], ["y"])
            .with_attr("value", AttrValue::Tensor(Box::new(value)));
        let out = eval_node(&node, 21, &[Some(&shape)]).unwrap().remove(0);
        assert_eq!(out.as_bytes().unwrap(), &[0x77, 0x77, 0x77]);

        let empty = Tensor::from_vec(DataType::Int64, &[0], Vec::<i64>::new()).unwrap();
        let node = Node::new("ConstantOfShape", "c", ["s"], ["y"]);
        let out = eval_node(&node, 9, &[Some(&empty)]).unwrap().remove(0);
        assert_eq!(out.shape(), &[] as &[usize]);
        let bad = Tensor::from_vec(DataType::Int64, &[1], vec![-1i64]).unwrap();
        assert!(eval_node(&node, 9, &[Some(&bad)])
            .unwrap_err()
            .to_string()
            .contains("negative"));
    }

    #[test]
    fn eye_like_fills_a_diagonal_in_the_requested_type() {
        let x = Tensor::zeros(DataType::Float, &[3, 4]).unwrap();
        let node = Node::new("EyeLike", "e", ["x"], ["y"])
            .with_attr("k", AttrValue::Int(1))
            .with_attr("dtype", AttrValue::Int(DataType::Int32.onnx().into()));
        let out = eval_node(&node, 9, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(out.dtype(), DataType::Int32);
        assert_eq!(
            out.to_vec::<i32>().unwrap(),
            [0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]
        );
        let v = Tensor::zeros(DataType::Float, &[3]).unwrap();
        assert!(eval_node(&node, 9, &[Some(&v)])
            .unwrap_err()
            .to_string()
            .contains("2-D"));
    }

    #[test]
    fn constant_of_shape_shape_function() {
        let node = Node::new("ConstantOfShape", "c", ["s"], ["y"]);
        let out = crate::ops::layout::runs::infer_dims_for(&node, 9, &[Some(&["3"])], &[]);
        assert_eq!(out.unwrap(), ["?", "?", "?"]);
    }
}
