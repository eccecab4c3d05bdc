//! The main graph's edges where ONNX has values other than tensors: `ZipMap`'s sequence of maps.
//!
//! Inside a run, `ZipMap`'s output is the `[N, C]` float tensor of its map values (see
//! `ops/ml/mod.rs`). [`output_keys`] says which graph outputs are that value, reached from the
//! node directly or through `Identity` nodes, and with which keys, so that
//! `Session::run_values` hands them out as [`SequenceOfMaps`]. It refuses, with a one-line
//! error, what the interpreter cannot hold: a graph input or output declared as a sequence or a
//! map that is not `ZipMap`'s output, and a node other than `Identity` that reads it (such a node
//! would otherwise see a tensor where ONNX has a sequence).

use crate::error::{Error, Result};
use crate::ir::{Graph, MapKeys, Model, Node, SequenceOfMaps, TypeKind, Value};
use crate::ops::zipmap_keys;
use crate::tensor::Tensor;

/// For each output of the main graph, the keys of the maps it holds when it is `ZipMap`'s
/// output (`None` for a tensor); an error for what the interpreter cannot hold.
pub(super) fn output_keys(model: &Model) -> Result<Vec<Option<MapKeys>>> {
    let graph = &model.graph;
    for input in &graph.inputs {
        if let Some(kind) = container(input.ty.as_ref().map(|t| &t.kind)) {
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
            if let (None, Some(kind)) = (&keys, container(output.ty.as_ref().map(|t| &t.kind))) {
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
    outputs: Vec<(String, Tensor)>,
    keys: &[Option<MapKeys>],
) -> Result<Vec<(String, Value)>> {
    outputs
        .into_iter()
        .zip(keys)
        .map(|((name, t), keys)| {
            let value = match keys {
                None => Value::Tensor(t),
                Some(keys) => Value::Maps(
                    SequenceOfMaps::new(keys.clone(), t)
                        .map_err(|e| Error::Eval(format!("output '{name}': {e}")))?,
                ),
            };
            Ok((name, value))
        })
        .collect()
}

/// "sequence" or "map" when a declared type is one (an optional of one counts too).
fn container(kind: Option<&TypeKind>) -> Option<&'static str> {
    match kind? {
        TypeKind::Sequence(_) => Some("sequence"),
        TypeKind::Map { .. } => Some("map"),
        TypeKind::Optional(Some(inner)) => container(Some(&inner.kind)),
        _ => None,
    }
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
                    label(node),
                    node.qualified_op(),
                    label(zipmap)
                )));
            }
            values.extend(node.outputs.iter().map(String::as_str));
        }
    }
    Ok(())
}

/// A node in a message: `'name'`, or `producing 'y'` when unnamed.
fn label(node: &Node) -> String {
    match (node.name.as_str(), node.outputs.first()) {
        ("", Some(out)) => format!("producing '{out}'"),
        (name, _) => format!("'{name}'"),
    }
}
