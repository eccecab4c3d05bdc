//! `Identity` (opset 1+) and `Constant` (1+): values that need no computation.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Identity.html>,
//! <https://onnx.ai/onnx/operators/onnx__Constant.html>.
//!
//! `Identity` passes any value on (a tensor, a sequence, an optional: opset 14 on). `Constant`
//! takes its value from exactly one of `value` (a tensor), `value_float(s)`, `value_int(s)` and
//! `value_string(s)`; `sparse_value` is not supported.

use crate::error::Result;
use crate::ir::stored_to_tensor;
use crate::ir::{AttrValue, Dim, Shape, TensorType, Value};
use crate::tensor::Tensor;
use crate::DataType;

use super::util::required;
use super::{EvalCtx, InferCtx, OpDef};

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("Identity", 1, 1..=1, 1..=1, eval_identity)
        .with_infer(infer_identity)
        .with_values(identity_values),
    OpDef::new("Constant", 1, 0..=0, 1..=1, eval_constant).with_infer(infer_constant),
];

fn eval_identity(_: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    Ok(vec![required(inputs, 0)?.clone()])
}

fn identity_values(_: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    match inputs.first().copied().flatten() {
        Some(v) => Ok(vec![v.clone()]),
        None => Err(crate::Error::Eval("required input 0 is missing".into())),
    }
}

pub(super) fn infer_identity(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![ctx.input(0).cloned().unwrap_or_default()])
}

/// The value of a `Constant` node's attribute.
fn constant_value(node: &crate::ir::Node) -> Result<Tensor> {
    let fail = |reason: &str| crate::Error::Eval(reason.to_owned());
    let mut found = node
        .attributes
        .iter()
        .filter(|a| a.name.starts_with("value") || a.name == "sparse_value");
    let (Some(attr), None) = (found.next(), found.next()) else {
        return Err(fail("needs exactly one value attribute"));
    };
    Ok(match (&attr.name[..], &attr.value) {
        ("value", AttrValue::Tensor(t)) => stored_to_tensor(t)?,
        ("value_float", AttrValue::Float(v)) => Tensor::scalar(DataType::Float, *v)?,
        ("value_floats", AttrValue::Floats(v)) => {
            Tensor::from_vec(DataType::Float, &[v.len()], v.clone())?
        }
        ("value_int", AttrValue::Int(v)) => Tensor::scalar(DataType::Int64, *v)?,
        ("value_ints", AttrValue::Ints(v)) => {
            Tensor::from_vec(DataType::Int64, &[v.len()], v.clone())?
        }
        ("value_string", AttrValue::String(v)) => Tensor::from_strings(&[], vec![v.clone()])?,
        ("value_strings", AttrValue::Strings(v)) => Tensor::from_strings(&[v.len()], v.clone())?,
        ("sparse_value", _) => {
            return Err(crate::Error::Unsupported(
                "Constant with a sparse_value".into(),
            ))
        }
        (name, value) => {
            return Err(fail(&format!(
                "attribute '{name}' of type {} is not a constant value",
                value.type_name()
            )))
        }
    })
}

fn eval_constant(ctx: &EvalCtx<'_>, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    Ok(vec![constant_value(ctx.node)?])
}

fn infer_constant(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let t = constant_value(ctx.node)?;
    let dims = t.shape().iter().map(|&d| Dim::Known(d as i64)).collect();
    Ok(vec![TensorType {
        elem: Some(t.dtype()),
        shape: Some(Shape::new(dims)),
    }])
}
