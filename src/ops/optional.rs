//! The optionals (opset 15+): `Optional`, `OptionalHasElement` and `OptionalGetElement`.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Optional.html>,
//! <https://onnx.ai/onnx/operators/onnx__OptionalHasElement.html>,
//! <https://onnx.ai/onnx/operators/onnx__OptionalGetElement.html>.
//!
//! An optional is a [`Value::Optional`]: empty, or holding a tensor or a sequence. `Optional`
//! wraps its input, or makes the empty optional when it has none (its `type` attribute then
//! names what the optional would hold, which the interpreter has no use for). From opset 18 the
//! accessors also take a plain tensor or sequence, which is a present value:
//! `OptionalHasElement` is true for it and `OptionalGetElement` passes it on; an omitted input
//! is an empty optional. Reading an empty optional is an error.
//!
//! The tensor kernels serve constant folding, where every value is a tensor: `OptionalHasElement`
//! is true for a given tensor and false for an omitted input, and `OptionalGetElement` passes a
//! tensor on.

use crate::error::Result;
use crate::ir::{TensorType, Value};
use crate::tensor::Tensor;
use crate::DataType;

use super::identity::infer_identity;
use super::{EvalCtx, InferCtx, OpDef};

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("Optional", 15, 0..=1, 1..=1, refuse).with_values(eval_optional),
    OpDef::new("OptionalHasElement", 15, 0..=1, 1..=1, has_element_tensor)
        .with_infer(infer_has_element)
        .with_values(eval_has_element),
    OpDef::new("OptionalGetElement", 15, 1..=1, 1..=1, get_element_tensor)
        .with_infer(infer_identity)
        .with_values(eval_get_element),
];

/// `Optional` makes an optional, which only a running graph holds.
fn refuse(ctx: &EvalCtx<'_>, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    Err(ctx.error("makes an optional, which only a running graph holds"))
}

fn eval_optional(ctx: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    match inputs.first().copied().flatten() {
        Some(v @ (Value::Tensor(_) | Value::Sequence(_))) => {
            Ok(vec![Value::Optional(Some(Box::new(v.clone())))])
        }
        Some(other) => Err(ctx.error(format!(
            "an optional holds a tensor or a sequence, not a {}",
            other.kind()
        ))),
        None if ctx.node.attr("type").is_none() => {
            Err(ctx.error("an Optional without an input needs a 'type' attribute"))
        }
        None => Ok(vec![Value::Optional(None)]),
    }
}

fn eval_has_element(_: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let present = match inputs.first().copied().flatten() {
        None | Some(Value::Optional(None)) => false,
        Some(_) => true,
    };
    Ok(vec![Value::Tensor(Tensor::scalar(
        DataType::Bool,
        u8::from(present),
    )?)])
}

fn eval_get_element(ctx: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    match inputs.first().copied().flatten() {
        Some(Value::Optional(Some(v))) => Ok(vec![(**v).clone()]),
        None | Some(Value::Optional(None)) => Err(ctx.error("the optional input is empty")),
        Some(v) => Ok(vec![v.clone()]),
    }
}

fn has_element_tensor(_: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let given = inputs.first().is_some_and(Option::is_some);
    Ok(vec![Tensor::scalar(DataType::Bool, u8::from(given))?])
}

fn get_element_tensor(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    match inputs.first().copied().flatten() {
        Some(t) => Ok(vec![t.clone()]),
        None => Err(ctx.error("the optional input is empty")),
    }
}

fn infer_has_element(_: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![TensorType::new(DataType::Bool, Vec::new())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Node, Sequence};
    use crate::ops::NoSubgraphs;

    fn run(node: &Node, f: super::super::ValuesFn, inputs: &[Option<&Value>]) -> Result<Value> {
        let ctx = EvalCtx {
            node,
            opset: 18,
            runner: &NoSubgraphs,
            prepared: None,
            memo: None,
        };
        Ok(f(&ctx, inputs)?.remove(0))
    }

    fn truth(v: &Value) -> bool {
        v.as_tensor().unwrap().as_bytes().unwrap()[0] != 0
    }

    #[test]
    fn optionals_wrap_report_and_unwrap() {
        let t = Value::Tensor(Tensor::scalar(DataType::Float, 1.5f32).unwrap());
        let seq = Value::Sequence(Sequence::empty(Some(DataType::Float)));
        let node = Node::new("Optional", "o", ["x"], ["y"]);
        let wrapped = run(&node, eval_optional, &[Some(&seq)]).unwrap();
        assert_eq!(wrapped, Value::Optional(Some(Box::new(seq.clone()))));
        let has = Node::new("OptionalHasElement", "h", ["x"], ["y"]);
        let get = Node::new("OptionalGetElement", "g", ["x"], ["y"]);
        assert!(truth(
            &run(&has, eval_has_element, &[Some(&wrapped)]).unwrap()
        ));
        assert!(truth(&run(&has, eval_has_element, &[Some(&t)]).unwrap()));
        assert!(!truth(&run(&has, eval_has_element, &[None]).unwrap()));
        let empty = Value::Optional(None);
        assert!(!truth(
            &run(&has, eval_has_element, &[Some(&empty)]).unwrap()
        ));
        assert_eq!(run(&get, eval_get_element, &[Some(&wrapped)]).unwrap(), seq);
        assert_eq!(run(&get, eval_get_element, &[Some(&t)]).unwrap(), t);
        let err = run(&get, eval_get_element, &[Some(&empty)]).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }

    #[test]
    fn an_optional_without_input_needs_its_type() {
        let node = Node::new("Optional", "o", Vec::<String>::new(), ["y"]);
        assert!(run(&node, eval_optional, &[]).is_err());
    }
}
