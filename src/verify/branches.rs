//! Draws that take each branch of the main graph's `If` nodes, and the record of which branches
//! a proof ran.
//!
//! A draw in `[-100, 100)` never makes `sr == 16000` true, so a proof on drawn inputs would only
//! ever run one branch of a voice-activity model's `If`. Where an `If` condition comes from a
//! graph input compared with a constant of the graph (`Equal`, `Less`, `LessOrEqual`, `Greater`,
//! `GreaterOrEqual`, through `Not`, `And`, `Or`, `Xor`, `Cast`, `Identity` and the reshaping
//! operators on either side), the constant names the values that decide it: `c` and `c + 1` for
//! `Equal`, `c - 1` and `c` for `Less`, and so on; a graph input that is itself the condition
//! (or is cast to it) takes 1 and 0. Each such value is one candidate draw: the proof's inputs
//! with that input filled with the value.
//!
//! Which branch a draw takes is not guessed from the trace: the conditions of every `If` of the
//! main graph are computed by running the model cut down to the nodes they need (the
//! *probe*). A candidate draw is run (original and rewritten, compared bit for bit) only when it
//! takes a branch that no earlier draw took, and a branch counts as run only when the original
//! model ran on that draw.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::{compare_fed, Feeds, OutputComparison};
use crate::interp::{RunOptions, Session};
use crate::ir::{is_onnx_domain, stored_to_tensor, Graph, Model, Value, ValueInfo};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

/// The branches of one `If` of the main graph that a proof ran, each with the inputs it ran on
/// (`drawn inputs`, or the value a branch draw gave: `sr = 16000`); `None` for a branch that no
/// draw took.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IfBranches {
    /// The node's name, or `If #k` (its position among the main graph's `If` nodes) unnamed.
    pub node: String,
    pub then_branch: Option<String>,
    pub else_branch: Option<String>,
    /// Why a branch did not run although a draw takes it: the original model fails on that
    /// draw (`else_branch: sr = 16001: node ...`).
    pub failed: Option<String>,
}

impl IfBranches {
    /// `If 'check_sr': then_branch ran (sr = 16000), else_branch ran (drawn inputs)`.
    pub fn line(&self) -> String {
        let part = |branch: &str, on: &Option<String>| match on {
            Some(on) => format!("{branch} ran ({on})"),
            None => format!("{branch} did not run"),
        };
        let mut line = format!(
            "If '{}': {}, {}",
            self.node,
            part("then_branch", &self.then_branch),
            part("else_branch", &self.else_branch)
        );
        if let Some(failed) = &self.failed {
            line += &format!(" (the original model fails on the draw that takes it: {failed})");
        }
        line
    }
}

/// What [`prove_branches`] found: the outputs that differ on the branch draws, and the branches
/// of every `If` of the main graph that ran.
#[derive(Clone, Debug, Default)]
pub struct BranchProof {
    /// The comparisons that are not identical, named `y (sr = 16000)`.
    pub differing: Vec<OutputComparison>,
    pub ifs: Vec<IfBranches>,
}

/// One value for one graph input that may decide an `If` condition.
#[derive(Clone, Debug, PartialEq)]
struct Candidate {
    input: String,
    value: f64,
}

/// The main graph's `If` nodes (named), their conditions, and the candidate draws the constants
/// they are compared with name.
///
/// # Example
/// `If(Equal(sr, 16000))` names the draws `sr = 16000` and `sr = 16001`:
/// ```
/// use multigather::ir::{Graph, Model, Node, StoredTensor, Type, ValueInfo};
/// use multigather::verify::branch_candidates;
/// use multigather::DataType;
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("sr", Type::tensor(DataType::Int64, vec![])));
/// g.initializers.push(StoredTensor::from_i64s(Some("rate"), &[], &[16000]));
/// g.add_node(Node::new("Equal", "is_16k", ["sr", "rate"], ["cond"]));
/// g.add_node(Node::new("If", "check_sr", ["cond"], ["y"]));
/// let found = branch_candidates(&Model::new(g, 13));
/// assert_eq!(found, ["sr = 16000", "sr = 16001"]);
/// ```
pub fn branch_candidates(model: &Model) -> Vec<String> {
    candidates(&model.graph)
        .iter()
        .map(|c| format!("{} = {}", c.input, c.value))
        .collect()
}

/// The candidate draws of every `If` condition of the main graph, without repeats, in node
/// order.
fn candidates(graph: &Graph) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for (_, node) in graph.nodes() {
        if node.op_type != "If" || !is_onnx_domain(&node.domain) {
            continue;
        }
        let Some(cond) = node.inputs.first() else {
            continue;
        };
        let mut found = Vec::new();
        deciders(graph, cond, 0, &mut found);
        for c in found {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// How deep a condition is followed back.
const DEPTH: usize = 32;

/// The candidates that decide the boolean `value`.
fn deciders(graph: &Graph, value: &str, depth: usize, out: &mut Vec<Candidate>) {
    if depth > DEPTH {
        return;
    }
    let Some(id) = graph.producer(value) else {
        // A graph input that is the condition: true and false.
        if is_runtime_input(graph, value) {
            for v in [1.0, 0.0] {
                out.push(Candidate {
                    input: value.to_owned(),
                    value: v,
                });
            }
        }
        return;
    };
    let node = graph.node(id);
    if !is_onnx_domain(&node.domain) {
        return;
    }
    let input = |k: usize| node.inputs.get(k).map(String::as_str).unwrap_or("");
    match node.op_type.as_str() {
        "Not" | "Identity" | "Cast" | "Squeeze" | "Unsqueeze" | "Reshape" | "Flatten" => {
            deciders(graph, input(0), depth + 1, out)
        }
        "And" | "Or" | "Xor" => {
            deciders(graph, input(0), depth + 1, out);
            deciders(graph, input(1), depth + 1, out);
        }
        op @ ("Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual") => {
            let (a, b) = (source(graph, input(0), 0), source(graph, input(1), 0));
            // `x op c`, or `c op x` read as `x op' c` with the comparison mirrored.
            let (x, c, op) = match (a, b) {
                (Some(Source::Input(x)), Some(Source::Constant(c))) => (x, c, op),
                (Some(Source::Constant(c)), Some(Source::Input(x))) => (x, c, mirrored(op)),
                _ => return,
            };
            let (yes, no) = match op {
                "Equal" => (c, c + 1.0),
                "Less" => (c - 1.0, c),
                "LessOrEqual" => (c, c + 1.0),
                "Greater" => (c + 1.0, c),
                _ => (c, c - 1.0),
            };
            for v in [yes, no] {
                out.push(Candidate {
                    input: x.clone(),
                    value: v,
                });
            }
        }
        _ => {}
    }
}

/// `c < x` is `x > c`.
fn mirrored(op: &str) -> &str {
    match op {
        "Less" => "Greater",
        "Greater" => "Less",
        "LessOrEqual" => "GreaterOrEqual",
        "GreaterOrEqual" => "LessOrEqual",
        other => other,
    }
}

/// Where a compared value comes from: a graph input, or a constant with one value.
enum Source {
    Input(String),
    Constant(f64),
}

/// Follows `value` back through operators that keep its values to a graph input or a constant.
fn source(graph: &Graph, value: &str, depth: usize) -> Option<Source> {
    if depth > DEPTH {
        return None;
    }
    if let Some(t) = graph.initializer(value) {
        return single_value(&stored_to_tensor(t).ok()?).map(Source::Constant);
    }
    let Some(id) = graph.producer(value) else {
        return is_runtime_input(graph, value).then(|| Source::Input(value.to_owned()));
    };
    let node = graph.node(id);
    if !is_onnx_domain(&node.domain) {
        return None;
    }
    match node.op_type.as_str() {
        "Constant" => {
            if let Ok(Some(t)) = node.attr_tensor("value") {
                return single_value(&stored_to_tensor(t).ok()?).map(Source::Constant);
            }
            if let Ok(v) = node.attr_int("value_int", i64::MIN) {
                if v != i64::MIN {
                    return Some(Source::Constant(v as f64));
                }
            }
            let v = node.attr_float("value_float", f32::NAN).ok()?;
            (!v.is_nan()).then_some(Source::Constant(f64::from(v)))
        }
        "Identity" | "Cast" | "Squeeze" | "Unsqueeze" | "Reshape" | "Flatten" => {
            source(graph, node.inputs.first()?, depth + 1)
        }
        _ => None,
    }
}

/// Whether `name` is an input of the graph that a run feeds (not an initializer).
fn is_runtime_input(graph: &Graph, name: &str) -> bool {
    graph.initializer(name).is_none() && graph.inputs.iter().any(|i| i.name == name)
}

/// The one value of a small number tensor whose elements are all equal.
fn single_value(t: &Tensor) -> Option<f64> {
    if t.len() > 64 {
        return None;
    }
    let values = numbers(t)?;
    let first = *values.first()?;
    values.iter().all(|&v| v == first).then_some(first)
}

/// The values of a number tensor as `f64`.
fn numbers(t: &Tensor) -> Option<Vec<f64>> {
    macro_rules! widen {
        ($t:ty) => {
            t.as_slice::<$t>().ok()?.iter().map(|&v| v as f64).collect()
        };
    }
    Some(match t.dtype() {
        DataType::Float => widen!(f32),
        DataType::Double => widen!(f64),
        DataType::Int64 => widen!(i64),
        DataType::Int32 => widen!(i32),
        DataType::Int16 => widen!(i16),
        DataType::Int8 => widen!(i8),
        DataType::Uint64 => widen!(u64),
        DataType::Uint32 => widen!(u32),
        DataType::Uint16 => widen!(u16),
        DataType::Uint8 | DataType::Bool => widen!(u8),
        _ => return None,
    })
}

/// A tensor of `like`'s element type and shape with every element `value`; `None` for an
/// element type no candidate is made for, or a value it does not hold.
fn filled(like: &Tensor, value: f64) -> Option<Tensor> {
    let shape = like.shape();
    let count = like.len();
    macro_rules! fill {
        ($t:ty) => {{
            let v = value as $t;
            if v as f64 != value {
                return None;
            }
            Tensor::from_vec(like.dtype(), shape, try_vec(count, v).ok()?).ok()
        }};
    }
    match like.dtype() {
        DataType::Float => fill!(f32),
        DataType::Double => fill!(f64),
        DataType::Int64 => fill!(i64),
        DataType::Int32 => fill!(i32),
        DataType::Int16 => fill!(i16),
        DataType::Int8 => fill!(i8),
        DataType::Uint64 => fill!(u64),
        DataType::Uint32 => fill!(u32),
        DataType::Uint16 => fill!(u16),
        DataType::Uint8 => fill!(u8),
        DataType::Bool if value == 0.0 || value == 1.0 => {
            Tensor::from_vec(DataType::Bool, shape, try_vec(count, value as u8).ok()?).ok()
        }
        _ => None,
    }
}

/// The main graph cut down to what its `If` conditions need, with the conditions as outputs
/// (each once: many `If` nodes may share one condition).
struct Probe {
    model: Model,
    /// Each `If`'s name as reported.
    names: Vec<String>,
    /// Each `If`'s condition, as a position among the probe's outputs.
    which: Vec<usize>,
}

impl Probe {
    /// `None` when the main graph has no `If`.
    fn new(model: &Model) -> Option<Probe> {
        let graph = &model.graph;
        let (mut names, mut which) = (Vec::new(), Vec::new());
        let mut conds: Vec<String> = Vec::new();
        let mut position: HashMap<String, usize> = HashMap::new();
        for (_, node) in graph.nodes() {
            if node.op_type != "If" || !is_onnx_domain(&node.domain) {
                continue;
            }
            let name = if node.name.is_empty() {
                format!("If #{}", names.len())
            } else {
                node.name.clone()
            };
            names.push(name);
            let cond = node.inputs.first().cloned().unwrap_or_default();
            let k = *position.entry(cond.clone()).or_insert_with(|| {
                conds.push(cond);
                conds.len() - 1
            });
            which.push(k);
        }
        if names.is_empty() {
            return None;
        }
        let mut cut = model.clone();
        cut.graph.outputs = conds.into_iter().map(ValueInfo::untyped).collect();
        let ids = cut.graph.node_ids();
        cut.graph.remove_dead(ids);
        Some(Probe {
            model: cut,
            names,
            which,
        })
    }

    /// The condition of each `If` on `feeds` (`None` where it is not one boolean).
    fn conditions(&self, feeds: &Feeds) -> Vec<Option<bool>> {
        let options = RunOptions {
            threads: Some(1),
            ..RunOptions::default()
        };
        let session = Session::with_options(&self.model, options);
        let Ok(outputs) = session.run_values(feeds.clone()) else {
            return vec![None; self.names.len()];
        };
        let values: Vec<Option<bool>> = outputs
            .iter()
            .map(|(_, v)| {
                let t = v.as_tensor()?;
                match (t.dtype(), t.as_slice::<u8>().ok()?) {
                    (DataType::Bool, [b]) => Some(*b != 0),
                    _ => None,
                }
            })
            .collect();
        self.which
            .iter()
            .map(|&k| values.get(k).copied().flatten())
            .collect()
    }
}

/// Runs the draws that take the branches of the main graph's `If` nodes that `drawn` does not
/// take (see the module docs) through `original` and `rewritten`, and says which branch of
/// which `If` ran on which draw. `model` is the original's model.
///
/// # Example
/// ```
/// use multigather::interp::Session;
/// use multigather::ir::{AttrValue, Graph, Model, Node, StoredTensor, Type, ValueInfo};
/// use multigather::verify::prove_branches;
/// use multigather::{DataType, Tensor};
/// // Each branch returns an initializer of the main graph.
/// let branch = |name: &str, value: &str| {
///     let mut b = Graph::new(name);
///     b.add_node(Node::new("Identity", name, [value], [name]));
///     b.outputs.push(ValueInfo::untyped(name));
///     AttrValue::Graph(Box::new(b))
/// };
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("sr", Type::tensor(DataType::Int64, vec![])));
/// for (name, value) in [("rate", 16000), ("one", 1), ("two", 2)] {
///     g.initializers.push(StoredTensor::from_i64s(Some(name), &[], &[value]));
/// }
/// g.add_node(Node::new("Equal", "is_16k", ["sr", "rate"], ["cond"]));
/// g.add_node(
///     Node::new("If", "check_sr", ["cond"], ["y"])
///         .with_attr("then_branch", branch("t", "one"))
///         .with_attr("else_branch", branch("e", "two")),
/// );
/// g.outputs.push(ValueInfo::untyped("y"));
/// let model = Model::new(g, 13);
/// let session = Session::new(&model);
/// let drawn = vec![("sr".to_string(), Tensor::scalar(DataType::Int64, 7i64)?.into())];
/// let proof = prove_branches(&model, &session, &session, &drawn);
/// assert!(proof.differing.is_empty());
/// assert_eq!(proof.ifs[0].then_branch.as_deref(), Some("sr = 16000"));
/// assert_eq!(proof.ifs[0].else_branch.as_deref(), Some("drawn inputs"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn prove_branches(
    model: &Model,
    original: &Session,
    rewritten: &Session,
    drawn: &Feeds,
) -> BranchProof {
    let Some(probe) = Probe::new(model) else {
        return BranchProof::default();
    };
    let mut ifs: Vec<IfBranches> = probe
        .names
        .iter()
        .map(|node| IfBranches {
            node: node.clone(),
            then_branch: None,
            else_branch: None,
            failed: None,
        })
        .collect();
    let credit = |ifs: &mut Vec<IfBranches>, taken: &[Option<bool>], on: &str| {
        for (entry, cond) in ifs.iter_mut().zip(taken) {
            let slot = match cond {
                Some(true) => &mut entry.then_branch,
                Some(false) => &mut entry.else_branch,
                None => continue,
            };
            slot.get_or_insert_with(|| on.to_owned());
        }
    };
    credit(&mut ifs, &probe.conditions(drawn), "drawn inputs");
    let mut differing = Vec::new();
    let mut tried: HashSet<String> = HashSet::new();
    for candidate in candidates(&model.graph) {
        let Some(feeds) = with_value(drawn, &candidate) else {
            continue;
        };
        let taken = probe.conditions(&feeds);
        let new = ifs.iter().zip(&taken).any(|(entry, cond)| match cond {
            Some(true) => entry.then_branch.is_none(),
            Some(false) => entry.else_branch.is_none(),
            None => false,
        });
        let what = format!("{} = {}", candidate.input, candidate.value);
        if !new || !tried.insert(what.clone()) {
            continue;
        }
        // A branch counts as run only when the original ran on the draw.
        match compare_fed(original, rewritten, feeds, &what) {
            Ok(differ) => {
                differing.extend(differ);
                credit(&mut ifs, &taken, &what);
            }
            Err(e) => {
                for (entry, cond) in ifs.iter_mut().zip(&taken) {
                    let branch = match cond {
                        Some(true) if entry.then_branch.is_none() => "then_branch",
                        Some(false) if entry.else_branch.is_none() => "else_branch",
                        _ => continue,
                    };
                    entry
                        .failed
                        .get_or_insert_with(|| format!("{branch}: {what}: {e}"));
                }
            }
        }
    }
    // A failure on one draw is no news when another draw ran that branch.
    for entry in &mut ifs {
        let ran = |branch: &str, on: &Option<String>| {
            on.is_some()
                && entry
                    .failed
                    .as_deref()
                    .is_some_and(|f| f.starts_with(branch))
        };
        if ran("then_branch", &entry.then_branch) || ran("else_branch", &entry.else_branch) {
            entry.failed = None;
        }
    }
    BranchProof { differing, ifs }
}

/// `drawn` with the candidate's input filled with its value; `None` when the input is not a
/// drawn tensor or its element type cannot hold the value.
fn with_value(drawn: &Feeds, candidate: &Candidate) -> Option<Feeds> {
    let mut feeds = drawn.clone();
    let (_, slot) = feeds.iter_mut().find(|(n, _)| *n == candidate.input)?;
    let t = filled(slot.as_tensor()?, candidate.value)?;
    *slot = Value::Tensor(t);
    Some(feeds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node, StoredTensor, Type};

    fn graph_with(nodes: Vec<Node>, inputs: &[(&str, DataType)]) -> Graph {
        let mut g = Graph::new("g");
        for (name, elem) in inputs {
            g.inputs
                .push(ValueInfo::new(*name, Type::tensor(*elem, vec![])));
        }
        for n in nodes {
            g.add_node(n);
        }
        g
    }

    fn found(g: &Graph) -> Vec<(String, f64)> {
        candidates(g)
            .into_iter()
            .map(|c| (c.input, c.value))
            .collect()
    }

    #[test]
    fn comparisons_with_a_constant_name_a_value_on_each_side() {
        let mut g = graph_with(
            vec![
                Node::new("Cast", "c", ["x"], ["xi"]),
                Node::new("Less", "lt", ["limit", "xi"], ["gt"]),
                Node::new("Not", "not", ["gt"], ["cond"]),
                Node::new("If", "branch", ["cond"], ["y"]),
            ],
            &[("x", DataType::Float)],
        );
        g.initializers
            .push(StoredTensor::from_i64s(Some("limit"), &[1], &[3]));
        // `3 < x` is `x > 3`: 4 takes it, 3 does not.
        assert_eq!(found(&g), [("x".into(), 4.0), ("x".into(), 3.0)]);
    }

    #[test]
    fn a_boolean_input_that_is_the_condition_takes_true_and_false() {
        let g = graph_with(
            vec![Node::new("If", "branch", ["flag"], ["y"])],
            &[("flag", DataType::Bool)],
        );
        assert_eq!(found(&g), [("flag".into(), 1.0), ("flag".into(), 0.0)]);
    }

    #[test]
    fn a_comparison_of_two_inputs_names_nothing() {
        let g = graph_with(
            vec![
                Node::new("Equal", "eq", ["a", "b"], ["cond"]),
                Node::new("If", "branch", ["cond"], ["y"]),
            ],
            &[("a", DataType::Int64), ("b", DataType::Int64)],
        );
        assert!(found(&g).is_empty());
    }

    #[test]
    fn if_nodes_that_share_a_condition_are_probed_once_and_both_reported() {
        let branch = |name: &str, value: &str| {
            let mut b = Graph::new(name);
            b.add_node(Node::new("Identity", name, [value], [name]));
            b.outputs.push(ValueInfo::untyped(name));
            AttrValue::Graph(Box::new(b))
        };
        let mut g = graph_with(Vec::new(), &[("flag", DataType::Bool)]);
        for (name, value) in [("one", 1), ("two", 2)] {
            g.initializers
                .push(StoredTensor::from_i64s(Some(name), &[], &[value]));
        }
        for (k, y) in ["y", "z"].into_iter().enumerate() {
            g.add_node(
                Node::new("If", &format!("if{k}"), ["flag"], [y])
                    .with_attr("then_branch", branch(&format!("t{k}"), "one"))
                    .with_attr("else_branch", branch(&format!("e{k}"), "two")),
            );
            g.outputs.push(ValueInfo::untyped(y));
        }
        let model = Model::new(g, 13);
        let probe = Probe::new(&model).unwrap();
        assert_eq!(
            (probe.model.graph.outputs.len(), probe.which.clone()),
            (1, vec![0, 0])
        );
        let session = Session::new(&model);
        let flag = Tensor::from_vec(DataType::Bool, &[], vec![0u8]).unwrap();
        let proof = prove_branches(
            &model,
            &session,
            &session,
            &vec![("flag".into(), flag.into())],
        );
        for entry in &proof.ifs {
            assert_eq!(entry.then_branch.as_deref(), Some("flag = 1"));
            assert_eq!(entry.else_branch.as_deref(), Some("drawn inputs"));
        }
    }

    #[test]
    fn values_an_element_type_cannot_hold_make_no_draw() {
        let like = Tensor::scalar(DataType::Uint8, 3u8).unwrap();
        assert!(filled(&like, -1.0).is_none());
        assert!(filled(&like, 0.5).is_none());
        let t = filled(&like, 7.0).unwrap();
        assert_eq!(t.as_slice::<u8>().unwrap(), [7]);
    }
}
