//! Rule 2 (the rules are written in `mod.rs`): the range of every integer input that reaches
//! the indices of a gather or a scatter, traced back from each through the operators that keep
//! its values and into the calls of model-local functions.

use std::collections::HashMap;

use super::sizes::resolve;
use crate::infer::TypeEnv;
use crate::ir::{canonical_domain, is_onnx_domain, Dim, Graph, Model, Node};
use crate::ops::{GatherAttributes, GatherKind};

/// The values a graph input may take where it reaches gather indices: one `[low, high)` per
/// coordinate (in the order of the last axis for `GatherND` and `GatherMultiaxis`; a single one
/// otherwise), and the gathers it feeds.
#[derive(Clone, Debug)]
pub(super) struct Bound {
    pub(super) coords: Vec<(i64, i64)>,
    pub(super) reasons: Vec<String>,
}

impl Bound {
    /// Narrows `self` to what `other` also allows; `None` when nothing is left.
    fn intersect(&self, other: &Bound) -> Option<Bound> {
        let (a, b) = (self.collapsed(), other.collapsed());
        let coords = if self.coords.len() == other.coords.len() {
            self.coords
                .iter()
                .zip(&other.coords)
                .map(|(x, y)| (x.0.max(y.0), x.1.min(y.1)))
                .collect()
        } else {
            vec![(a.0.max(b.0), a.1.min(b.1))]
        };
        let coords: Vec<(i64, i64)> = coords;
        if coords.iter().any(|(lo, hi)| lo >= hi) {
            return None;
        }
        let mut reasons = self.reasons.clone();
        reasons.extend(other.reasons.iter().cloned());
        Some(Bound { coords, reasons })
    }

    /// The range every coordinate fits in.
    fn collapsed(&self) -> (i64, i64) {
        let lo = self.coords.iter().map(|c| c.0).max().unwrap_or(0);
        let hi = self.coords.iter().map(|c| c.1).min().unwrap_or(0);
        (lo, hi)
    }

    fn shifted(&self, low: i64, high: i64) -> Bound {
        Bound {
            coords: self
                .coords
                .iter()
                .map(|&(lo, hi)| (lo.saturating_add(low), hi.saturating_add(high)))
                .collect(),
            reasons: self.reasons.clone(),
        }
    }
}

/// Rule 2: for every graph input that reaches gather indices, the range it may take.
pub(super) fn index_bounds(
    model: &Model,
    env: &TypeEnv,
    sizes: &HashMap<String, usize>,
) -> HashMap<String, Bound> {
    let mut found: HashMap<String, Bound> = HashMap::new();
    let opset = model.opset("").unwrap_or(1);
    let mut scopes = vec![&model.graph];
    collect_bounds(model, &mut scopes, env, sizes, opset, 0, &mut found);
    found
}

/// How deep calls of model-local functions are followed (recursive ones end there).
const CALL_DEPTH: usize = 16;

fn collect_bounds(
    model: &Model,
    scopes: &mut Vec<&Graph>,
    env: &TypeEnv,
    sizes: &HashMap<String, usize>,
    opset: i64,
    calls: usize,
    found: &mut HashMap<String, Bound>,
) {
    let Some(&graph) = scopes.last() else { return };
    for (_, node) in graph.nodes() {
        for sub in node.subgraphs() {
            let inner = TypeEnv::infer(sub, &model.opset_imports, env);
            scopes.push(sub);
            collect_bounds(model, scopes, &inner, sizes, opset, calls, found);
            scopes.pop();
        }
        if calls < CALL_DEPTH {
            for (argument, bound) in call_bounds(model, node, env, sizes, calls + 1) {
                trace(&argument, bound, scopes, 0, found);
            }
        }
        let Some(bound) = gather_bound(node, env, sizes, opset) else {
            continue;
        };
        if let Some(indices) = node.inputs.get(1) {
            trace(indices, bound, scopes, 0, found);
        }
    }
}

/// When `node` calls a model-local function: the ranges the gathers of its body want of the
/// call's arguments (the body typed from this call site).
fn call_bounds(
    model: &Model,
    node: &Node,
    env: &TypeEnv,
    sizes: &HashMap<String, usize>,
    calls: usize,
) -> Vec<(String, Bound)> {
    let Some(f) = model.functions.iter().find(|f| f.key() == node.call_key()) else {
        return Vec::new();
    };
    let types: Vec<_> = node.inputs.iter().map(|i| env.get(i).cloned()).collect();
    let body_env = TypeEnv::infer_with(
        &f.body,
        &f.opset_imports,
        TypeEnv::empty(),
        crate::infer::Formals::Given(&types),
    );
    let opset = crate::ir::opset_version(&f.opset_imports, "").unwrap_or(1);
    // The body is the outermost scope of its own walk: what reaches its inputs is recorded.
    let mut formals = HashMap::new();
    collect_bounds(
        model,
        &mut vec![&f.body],
        &body_env,
        sizes,
        opset,
        calls,
        &mut formals,
    );
    formals
        .into_iter()
        .filter_map(|(formal, bound)| {
            let j = f.body.inputs.iter().position(|i| i.name == formal)?;
            let argument = node.inputs.get(j).filter(|a| !a.is_empty())?;
            Some((argument.clone(), bound))
        })
        .collect()
}

/// The range of a gather's (or a scatter's) indices, one per coordinate, if its data's indexed
/// dims are known.
fn gather_bound(
    node: &Node,
    env: &TypeEnv,
    sizes: &HashMap<String, usize>,
    opset: i64,
) -> Option<Bound> {
    let data = env.dims(node.inputs.first()?)?;
    // Negative indices count from the end from opset 11; scatters are drawn non-negative, as
    // some runtimes' `ScatterND` take no negative index.
    let negatives = match node.op_type.as_str() {
        "Gather" => opset >= 11,
        "Scatter" | "ScatterND" => false,
        _ => true,
    };
    let size = |axis: i64| -> Option<(i64, i64)> {
        let r = data.len() as i64;
        let a = if axis < 0 { axis + r } else { axis };
        let d = match data.get(usize::try_from(a).ok()?)? {
            Dim::Unknown => return None,
            Dim::Known(v) if *v < 0 => return None,
            d => resolve(d, sizes) as i64,
        };
        Some((if negatives { -d } else { 0 }, d))
    };
    // The gathers' attributes by their typed parse, the scatters' as the gathers they mirror.
    let attrs = match GatherKind::of(node) {
        Some(kind) => kind.attributes(node).ok()?,
        None => match (canonical_domain(&node.domain), node.op_type.as_str()) {
            ("", "Scatter" | "ScatterElements") => GatherAttributes::GatherElements {
                axis: node.attr_int("axis", 0).ok()?,
            },
            ("", "ScatterND") => GatherAttributes::GatherNd {
                batch_dims: node.attr_int("batch_dims", 0).ok()?,
            },
            _ => return None,
        },
    };
    let (coords, what): (Vec<(i64, i64)>, String) = match attrs {
        GatherAttributes::Gather { axis } | GatherAttributes::GatherElements { axis } => {
            (vec![size(axis)?], format!("axis {axis}"))
        }
        GatherAttributes::GatherNd { batch_dims: batch } => {
            // The depth as the drawn inputs will have it.
            let depth = env.dims(node.inputs.get(1)?)?.last()?;
            let k = match depth {
                Dim::Known(v) if *v >= 0 => *v,
                Dim::Symbolic(_) => resolve(depth, sizes) as i64,
                _ => return None,
            };
            let coords = (0..k.min(64))
                .map(|j| size(batch + j))
                .collect::<Option<_>>()?;
            (coords, format!("batch_dims {batch}"))
        }
        GatherAttributes::Multiaxis(m) => {
            let coords = m.axes.iter().map(|&a| size(a)).collect::<Option<_>>()?;
            (coords, format!("axes {:?}", m.axes))
        }
    };
    if coords.is_empty() {
        return None;
    }
    Some(Bound {
        coords,
        reasons: vec![format!(
            "indices of '{}' ({}, {what})",
            node.name, node.op_type
        )],
    })
}

/// Follows `value` back through operators that keep its values to the graph inputs it comes
/// from, and records `bound` (what the gather accepts) for them.
fn trace(
    value: &str,
    bound: Bound,
    scopes: &[&Graph],
    depth: usize,
    found: &mut HashMap<String, Bound>,
) {
    if depth > 64 {
        return;
    }
    // The innermost scope that defines the name.
    for (level, graph) in scopes.iter().enumerate().rev() {
        if let Some(id) = graph.producer(value) {
            let node = graph.node(id);
            let scope = &scopes[..=level];
            trace_node(node, value, bound, scope, depth, found);
            return;
        }
        if graph.initializer(value).is_some() {
            return;
        }
        if graph.inputs.iter().any(|i| i.name == value) {
            if level == 0 {
                let merged = match found.get(value) {
                    Some(old) => old.intersect(&bound),
                    None => Some(bound),
                };
                match merged {
                    Some(b) => found.insert(value.to_owned(), b),
                    // Gathers that want disjoint ranges: no range serves them all.
                    None => found.remove(value),
                };
            }
            return;
        }
    }
}

fn trace_node(
    node: &Node,
    value: &str,
    bound: Bound,
    scopes: &[&Graph],
    depth: usize,
    found: &mut HashMap<String, Bound>,
) {
    let first_output = node.outputs.first().map(String::as_str) == Some(value);
    // `Split` passes its values on through every output; the others through their first.
    if !is_onnx_domain(&node.domain) || !(first_output || node.op_type == "Split") {
        return;
    }
    let first = |b: Bound, found: &mut HashMap<String, Bound>| {
        if let Some(input) = node.inputs.first() {
            trace(input, b, scopes, depth + 1, found);
        }
    };
    let (lo, hi) = bound.collapsed();
    let flat = Bound {
        coords: vec![(lo, hi)],
        reasons: bound.reasons.clone(),
    };
    match node.op_type.as_str() {
        "Identity" | "Cast" => first(bound, found),
        // Moved, repeated or selected values of the first input (a row of an edge list taken
        // by `Gather` or `Slice`, say).
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Expand" | "Transpose" | "Tile"
        | "Slice" | "Split" | "Gather" | "GatherElements" | "GatherND" => first(flat, found),
        "Where" => {
            for input in node.inputs.iter().skip(1) {
                trace(input, flat.clone(), scopes, depth + 1, found);
            }
        }
        "Concat" => {
            for input in &node.inputs {
                trace(input, flat.clone(), scopes, depth + 1, found);
            }
        }
        "Add" | "Sub" => {
            let (Some(a), Some(b)) = (node.inputs.first(), node.inputs.get(1)) else {
                return;
            };
            let sub = node.op_type == "Sub";
            // value = x + c (or x - c): x takes the bound shifted back by every constant value.
            let shift = |x: &str, c: &str, found: &mut HashMap<String, Bound>| {
                let Some((cmin, cmax)) = constant_range(c, scopes) else {
                    return false;
                };
                let b = if sub {
                    bound.shifted(cmax, cmin)
                } else {
                    bound.shifted(cmin.saturating_neg(), cmax.saturating_neg())
                };
                trace(x, b, scopes, depth + 1, found);
                true
            };
            if !shift(a, b, found) && !sub {
                shift(b, a, found);
            }
        }
        _ => {}
    }
}

/// The smallest and largest value of a small integer constant (an initializer or a `Constant`
/// node's value).
fn constant_range(name: &str, scopes: &[&Graph]) -> Option<(i64, i64)> {
    for graph in scopes.iter().rev() {
        let stored = if let Some(t) = graph.initializer(name) {
            Some(t)
        } else if let Some(id) = graph.producer(name) {
            let node = graph.node(id);
            if node.op_type != "Constant" {
                return None;
            }
            node.attr_tensor("value").ok()?
        } else if graph.inputs.iter().any(|i| i.name == name) {
            return None;
        } else {
            continue;
        };
        let t = stored?;
        if t.element_count().ok()? > 4096 {
            return None;
        }
        let values = t.to_i64s().ok()?;
        let lo = values.iter().copied().min()?;
        let hi = values.iter().copied().max()?;
        return Some((lo, hi));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, StoredTensor, Type, ValueInfo};
    use crate::verify::{draw_inputs, DrawOptions};
    use crate::DataType;

    /// A graph with `x: float[3, 4]`, `w: float[5]`, int64 inputs `i: [2]` and `j: [2]`, the
    /// constant `two = 2`, and `nodes`; returns the range drawn for `i`.
    fn range_of_i(opset: i64, nodes: Vec<Node>) -> Option<String> {
        let mut g = Graph::new("g");
        let t =
            |elem, dims: &[i64]| Type::tensor(elem, dims.iter().map(|&d| Dim::Known(d)).collect());
        g.inputs = vec![
            ValueInfo::new("x", t(DataType::Float, &[3, 4])),
            ValueInfo::new("w", t(DataType::Float, &[5])),
            ValueInfo::new("i", t(DataType::Int64, &[2])),
            ValueInfo::new("j", t(DataType::Int64, &[2])),
        ];
        g.initializers
            .push(StoredTensor::from_i64s(Some("two"), &[], &[2]));
        g.initializers
            .push(StoredTensor::from_i64s(Some("zero"), &[1], &[0]));
        for n in nodes {
            g.add_node(n);
        }
        let drawn = draw_inputs(&Model::new(g, opset), &DrawOptions::default()).unwrap();
        let i = drawn.choices.iter().find(|c| c.name == "i").unwrap();
        let values = drawn.inputs.iter().find(|(n, _)| n == "i").unwrap();
        let values = values.1.as_tensor().unwrap().as_slice::<i64>().unwrap();
        // The values are in the range the report gives.
        if let Some((lo, hi)) = i
            .range
            .as_deref()
            .and_then(|r| r.strip_prefix('[')?.strip_suffix(')')?.split_once(", "))
            .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<i64>().ok()?)))
        {
            assert!(values.iter().all(|v| (lo..hi).contains(v)), "{values:?}");
        }
        i.range.clone()
    }

    fn gather(data: &str, idx: &str, axis: i64) -> Node {
        Node::new("Gather", "", [data, idx], ["y"]).with_attr("axis", AttrValue::Int(axis))
    }

    #[test]
    fn default_dims_leave_no_indexed_dimension_empty() {
        // Symbolic and unknown dims of the data default to 1: the indexed axis is never empty,
        // and the indices are drawn within it.
        let mut g = Graph::new("g");
        let data = vec![Dim::Symbolic("n".into()), Dim::Unknown];
        g.inputs = vec![
            ValueInfo::new("x", Type::tensor(DataType::Float, data)),
            ValueInfo::new("i", Type::tensor(DataType::Int64, vec![Dim::Known(3)])),
            ValueInfo::new("j", Type::tensor(DataType::Int64, vec![Dim::Known(3)])),
        ];
        g.add_node(gather("x", "i", 0));
        g.add_node(Node::new("Gather", "", ["x", "j"], ["z"]).with_attr("axis", AttrValue::Int(1)));
        let drawn = draw_inputs(&Model::new(g, 13), &DrawOptions::default()).unwrap();
        assert_eq!(drawn.choices[0].shape, [1, 1]);
        assert_eq!(drawn.choices[1].range.as_deref(), Some("[-1, 1)"));
    }

    #[test]
    fn index_ranges_follow_the_values_to_the_gather() {
        let cases: Vec<(&str, i64, Vec<Node>, &str)> = vec![
            ("direct", 13, vec![gather("x", "i", 1)], "[-4, 4)"),
            (
                "old_opset_has_no_negative_indices",
                9,
                vec![gather("x", "i", 1)],
                "[0, 4)",
            ),
            (
                "through_sub_of_a_constant",
                13,
                vec![
                    Node::new("Sub", "", ["i", "two"], ["k"]),
                    gather("x", "k", -1),
                ],
                "[-2, 6)",
            ),
            (
                "through_unsqueeze_and_concat",
                13,
                vec![
                    Node::new("Unsqueeze", "", ["i", "zero"], ["u"]),
                    Node::new("Unsqueeze", "", ["j", "zero"], ["v"]),
                    Node::new("Concat", "", ["u", "v"], ["k"]).with_attr("axis", AttrValue::Int(0)),
                    gather("x", "k", 0),
                ],
                "[-3, 3)",
            ),
            (
                "two_gathers_intersect",
                13,
                vec![
                    gather("x", "i", 0),
                    Node::new("Gather", "", ["w", "i"], ["z"]).with_attr("axis", AttrValue::Int(0)),
                ],
                "[-3, 3)",
            ),
            (
                "gathernd_coordinates_in_order",
                13,
                vec![Node::new("GatherND", "", ["x", "i"], ["y"])],
                "[-3, 3) × [-4, 4)",
            ),
            (
                "negated_values_are_not_followed",
                13,
                vec![
                    Node::new("Sub", "", ["two", "i"], ["k"]),
                    gather("x", "k", 0),
                ],
                "[-100, 100)",
            ),
            ("no_gather", 13, vec![], "[-100, 100)"),
        ];
        for (name, opset, nodes, want) in cases {
            assert_eq!(range_of_i(opset, nodes).as_deref(), Some(want), "{name}");
        }
    }
}
