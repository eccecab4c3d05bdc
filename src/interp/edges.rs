//! The main graph's edges: binding fed values to the graph's declared inputs, and turning
//! outputs into values as users see them.
//!
//! Sequences of tensors and optionals cross the edges as they are ([`Value::Sequence`],
//! [`Value::Optional`]); [`bind_input`] checks a fed value against its input's declared type
//! (a tensor or a sequence fed to an input declared optional is a present optional). Maps are
//! the exception: inside a run, `ZipMap`'s output is the `[N, C]` float tensor of its map values
//! (see `ops/ml/mod.rs`). [`output_keys`] says which graph outputs are that value, reached from
//! the node directly or through `Identity` nodes, and with which keys, so that
//! `Session::run_values` hands them out as [`SequenceOfMaps`]. It refuses, with a one-line
//! error, what the interpreter cannot hold: a graph input or output declared as a map, or a
//! sequence of anything but tensors, that is not `ZipMap`'s output, and a node other than
//! `Identity` that reads `ZipMap`'s output (such a node would otherwise see a tensor where ONNX
//! has a sequence of maps).

use crate::error::{Error, Result};
use crate::ir::{
    Graph, MapKeys, Model, Node, Sequence, SequenceOfMaps, Type, TypeKind, Value, ValueInfo,
};
use crate::ops::zipmap_keys;
use crate::tensor::Tensor;

/// For each output of the main graph, the keys of the maps it holds when it is `ZipMap`'s
/// output (`None` for a tensor); an error for what the interpreter cannot hold.
pub(super) fn output_keys(model: &Model) -> Result<Vec<Option<MapKeys>>> {
    let graph = &model.graph;
    for input in &graph.inputs {
        if let Some(kind) = unheld(input.ty.as_ref().map(|t| &t.kind)) {
            return Err(Error::Unsupported(format!(
                "graph input '{}' is declared a {kind}; the interpreter holds no {kind} but \
                 ZipMap's output",
                input.name
            )));
        }
    }
    for (_, node) in graph.nodes() {
        if node.op_type == "ZipMap" && node.domain == "ai.onnx.ml" {
            check_readers(graph, node)?;
        }
    }
    graph
        .outputs
        .iter()
        .map(|output| {
            let keys = match zipmap_source(graph, &output.name) {
                Some(node) => Some(zipmap_keys(node)?),
                None => None,
            };
            if let (None, Some(kind)) = (&keys, unheld(output.ty.as_ref().map(|t| &t.kind))) {
                return Err(Error::Unsupported(format!(
                    "graph output '{}' is declared a {kind}; the interpreter holds no {kind} but \
                     ZipMap's output",
                    output.name
                )));
            }
            Ok(keys)
        })
        .collect()
}

/// The outputs of a run as users see them: each output with keys becomes a sequence of maps.
pub(super) fn to_values(
    outputs: Vec<(String, Value)>,
    keys: &[Option<MapKeys>],
) -> Result<Vec<(String, Value)>> {
    outputs
        .into_iter()
        .zip(keys)
        .map(|((name, v), keys)| {
            let value = match (keys, v) {
                (None, v) => v,
                (Some(keys), Value::Tensor(t)) => Value::Maps(
                    SequenceOfMaps::new(keys.clone(), t)
                        .map_err(|e| Error::Eval(format!("output '{name}': {e}")))?,
                ),
                (Some(_), other) => {
                    return Err(Error::Eval(format!(
                        "output '{name}' of ZipMap is a {}",
                        other.kind()
                    )))
                }
            };
            Ok((name, value))
        })
        .collect()
}

/// The type `seq(map)`, of `ZipMap`'s output.
pub(super) fn sequence_of_maps() -> Type {
    let map = Type::from(TypeKind::Map {
        key: None,
        value: None,
    });
    Type::from(TypeKind::Sequence(Some(Box::new(map))))
}

/// What of a declared type the interpreter cannot hold: a map, or a sequence of anything but
/// tensors (an optional of one counts too).
fn unheld(kind: Option<&TypeKind>) -> Option<&'static str> {
    match kind? {
        TypeKind::Map { .. } => Some("map"),
        TypeKind::Sequence(Some(inner)) => match inner.kind {
            TypeKind::Tensor(_) | TypeKind::Unset => None,
            TypeKind::Map { .. } => Some("sequence of maps"),
            _ => Some("sequence of non-tensors"),
        },
        TypeKind::Optional(Some(inner)) => unheld(Some(&inner.kind)),
        _ => None,
    }
}

/// The value `v` fed to the graph input `decl`, checked against its declared type: a tensor's
/// element type, rank and known dims; a sequence's element type (given to an empty sequence that
/// has none); an optional's contents. A tensor or a sequence fed to an input declared optional
/// becomes a present optional.
pub(super) fn bind_input(decl: &ValueInfo, v: Value) -> Result<Value> {
    bind(&decl.name, decl.ty.as_ref(), v)
}

fn bind(name: &str, declared: Option<&Type>, v: Value) -> Result<Value> {
    let Some(declared) = declared else {
        return Ok(v);
    };
    let mismatch = |what: &str, v: &Value| {
        Error::Eval(format!(
            "input '{name}' is declared a {what} but a {} was given",
            v.kind()
        ))
    };
    match (&declared.kind, v) {
        (TypeKind::Tensor(t), Value::Tensor(given)) => {
            check_declared(name, Some(t), &given)?;
            Ok(Value::Tensor(given))
        }
        (TypeKind::Tensor(_), v) => Err(mismatch("tensor", &v)),
        (TypeKind::Sequence(inner), Value::Sequence(s)) => {
            let elem = inner
                .as_deref()
                .and_then(Type::as_tensor)
                .and_then(|t| t.elem);
            match (elem, s.elem()) {
                (Some(want), Some(got)) if want != got => Err(Error::Eval(format!(
                    "input '{name}' is declared a sequence of {want} tensors but a sequence of \
                     {got} tensors was given"
                ))),
                (Some(_), None) => Ok(Value::Sequence(Sequence::new(elem, s.into_tensors())?)),
                _ => Ok(Value::Sequence(s)),
            }
        }
        (TypeKind::Sequence(_), v) => Err(mismatch("sequence", &v)),
        (TypeKind::Optional(_), Value::Optional(None)) => Ok(Value::Optional(None)),
        (TypeKind::Optional(inner), Value::Optional(Some(v))) => Ok(Value::Optional(Some(
            Box::new(bind(name, inner.as_deref(), *v)?),
        ))),
        (TypeKind::Optional(inner), v @ (Value::Tensor(_) | Value::Sequence(_))) => Ok(
            Value::Optional(Some(Box::new(bind(name, inner.as_deref(), v)?))),
        ),
        (_, v) => Ok(v),
    }
}

/// Checks a fed tensor against a graph input's declared type: element type, rank, known dims.
fn check_declared(name: &str, declared: Option<&crate::ir::TensorType>, t: &Tensor) -> Result<()> {
    let Some(declared) = declared else {
        return Ok(());
    };
    if let Some(elem) = declared.elem {
        if elem != t.dtype() {
            return Err(Error::Eval(format!(
                "input '{name}' is declared {elem} but a {} tensor was given",
                t.dtype()
            )));
        }
    }
    if let Some(shape) = &declared.shape {
        let fits = shape.rank() == t.rank()
            && shape
                .dims
                .iter()
                .zip(t.shape())
                .all(|(d, &n)| d.known().is_none_or(|k| k == n as i64));
        if !fits {
            let dims: Vec<String> = shape.dims.iter().map(ToString::to_string).collect();
            return Err(Error::Eval(format!(
                "input '{name}' is declared with shape [{}] but shape {:?} was given",
                dims.join(","),
                t.shape()
            )));
        }
    }
    Ok(())
}

/// The `ZipMap` node whose output `value` is, directly or through `Identity` nodes.
fn zipmap_source<'g>(graph: &'g Graph, value: &str) -> Option<&'g Node> {
    let mut value = value.to_owned();
    // A chain of Identity nodes is at most as long as the graph.
    for _ in 0..=graph.node_count() {
        let node = graph.node(graph.producer(&value)?);
        match (node.domain.as_str(), node.op_type.as_str()) {
            ("ai.onnx.ml", "ZipMap") => return Some(node),
            ("" | "ai.onnx", "Identity") => value = node.inputs.first()?.clone(),
            _ => return None,
        }
    }
    None
}

/// Refuses a node that reads the output of `zipmap` (directly or through `Identity` nodes),
/// unless it is an `Identity` passing it on.
fn check_readers(graph: &Graph, zipmap: &Node) -> Result<()> {
    let mut values: Vec<&str> = zipmap.outputs.iter().map(String::as_str).collect();
    let mut k = 0;
    while let Some(&value) = values.get(k) {
        k += 1;
        for id in graph.users(value) {
            let node = graph.node(id);
            let identity = matches!(node.domain.as_str(), "" | "ai.onnx")
                && node.op_type == "Identity"
                && node.inputs.first().map(String::as_str) == Some(value);
            if !identity {
                return Err(Error::Unsupported(format!(
                    "node {} ({}) reads '{value}', the sequence of maps of ZipMap {}; the \
                     interpreter holds that only to return it as a graph output",
                    node.quoted_label(),
                    node.qualified_op(),
                    zipmap.quoted_label()
                )));
            }
            values.extend(node.outputs.iter().map(String::as_str));
        }
    }
    Ok(())
}
