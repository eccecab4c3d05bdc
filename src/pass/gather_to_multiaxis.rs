//! The `GatherToMultiaxis` pass: every ONNX `Gather`, `GatherElements` and `GatherND` becomes
//! shape operations around one `multigather.GatherMultiaxis` node.
//!
//! Each rule is the rank-level recipe of [`crate::gather::map::onnx`], the same one the library
//! mappings execute on tensors, turned into nodes:
//!
//! ```text
//! Gather(data, idx, axis=a)           ==> Unsqueeze?(data), Unsqueeze?(idx) -> GatherMultiaxis(axes=[a]) -> Squeeze?
//! GatherElements(data, idx, axis=a)   ==> Slice?(data to idx's sizes off axis a) -> GatherMultiaxis(axes=[a])
//! GatherND(data, idx, batch_dims=b)   ==> Unsqueeze?/Reshape?(idx) -> GatherMultiaxis(axes=[b..b+k)) -> Squeeze?
//! ```
//!
//! The rules need ranks, not sizes. When every dimension of an operand is known, its shape
//! operations collapse into one `Reshape` to a constant shape; otherwise `Unsqueeze` / `Squeeze`
//! (or `Reshape` with `0` / `-1` entries) keep symbolic dimensions symbolic. A node whose ranks
//! cannot be inferred is left as it is and reported with the reason — never guessed.
//!
//! Subgraphs (`If`, `Loop`, `Scan` bodies at any depth) and model-local functions are rewritten
//! too. For a function, the ranks of its inputs come from its call sites, which must agree.
//! New values get `value_info` entries with their type and shape; new names derive from the
//! rewritten node's name; the original output name is kept.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::Pass;
use crate::error::Result;
use crate::gather::map::onnx as rules;
use crate::gather::{GatherPlan, OutOfRange, ShapeOp};
use crate::infer::TypeEnv;
use crate::ir::{
    opset_version, AttrValue, Dim, Graph, Model, Node, NodeId, OpsetImport, StoredTensor,
    TensorType, Type, UniqueNames, ValueInfo,
};
use crate::DataType;

/// The domain of `GatherMultiaxis`.
pub const DOMAIN: &str = crate::gather::DOMAIN;

/// The three ONNX gathers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum GatherKind {
    Gather,
    GatherElements,
    #[serde(rename = "GatherND")]
    GatherNd,
}

impl GatherKind {
    /// Every kind.
    pub const ALL: [GatherKind; 3] = [
        GatherKind::Gather,
        GatherKind::GatherElements,
        GatherKind::GatherNd,
    ];

    /// The kind of a node of the default domain, if it is a gather.
    pub fn of(node: &Node) -> Option<GatherKind> {
        if !matches!(node.domain.as_str(), "" | "ai.onnx") {
            return None;
        }
        GatherKind::from_name(&node.op_type)
    }

    /// The kind named by an ONNX op type (`Gather`, `GatherElements`, `GatherND`).
    pub fn from_name(name: &str) -> Option<GatherKind> {
        match name {
            "Gather" => Some(GatherKind::Gather),
            "GatherElements" => Some(GatherKind::GatherElements),
            "GatherND" => Some(GatherKind::GatherNd),
            _ => None,
        }
    }

    /// The ONNX op type.
    pub fn name(self) -> &'static str {
        match self {
            GatherKind::Gather => "Gather",
            GatherKind::GatherElements => "GatherElements",
            GatherKind::GatherNd => "GatherND",
        }
    }
}

/// What the pass rewrites.
#[derive(Clone, Debug)]
pub struct RewriteConfig {
    /// The op kinds to rewrite.
    pub kinds: Vec<GatherKind>,
    /// Nodes whose name contains one of these texts are left untouched.
    pub skip: Vec<String>,
}

impl Default for RewriteConfig {
    fn default() -> RewriteConfig {
        RewriteConfig {
            kinds: GatherKind::ALL.to_vec(),
            skip: Vec::new(),
        }
    }
}

/// What happened to one gather node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeReport {
    /// The node's name (or its first output's name when it has none).
    pub node: String,
    pub op: String,
    /// Where the node lives: the main graph's name, `graph/node.attribute` for subgraphs,
    /// `function domain.name` for functions.
    pub scope: String,
    #[serde(flatten)]
    pub outcome: NodeOutcome,
}

/// Rewritten (into which ops) or skipped (and why).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NodeOutcome {
    Rewritten { into: Vec<String> },
    Skipped { reason: String },
}

/// The pass's report: per node, and counts by op kind.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RewriteReport {
    pub rewritten: usize,
    pub skipped: usize,
    /// `op -> (rewritten, skipped)`.
    pub by_op: BTreeMap<String, (usize, usize)>,
    pub nodes: Vec<NodeReport>,
}

impl RewriteReport {
    fn add(&mut self, entry: NodeReport) {
        let counts = self.by_op.entry(entry.op.clone()).or_default();
        match entry.outcome {
            NodeOutcome::Rewritten { .. } => {
                self.rewritten += 1;
                counts.0 += 1;
            }
            NodeOutcome::Skipped { .. } => {
                self.skipped += 1;
                counts.1 += 1;
            }
        }
        self.nodes.push(entry);
    }

    /// A human summary: one line of counts, then one line per skipped node.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "rewrote {} gather node(s), skipped {}",
            self.rewritten, self.skipped
        );
        for (op, (done, skipped)) in &self.by_op {
            s.push_str(&format!("\n  {op}: {done} rewritten, {skipped} skipped"));
        }
        for n in &self.nodes {
            if let NodeOutcome::Skipped { reason } = &n.outcome {
                s.push_str(&format!(
                    "\n  skipped {} '{}' in {}: {reason}",
                    n.op, n.node, n.scope
                ));
            }
        }
        s
    }
}

/// The pass. See the module documentation.
///
/// # Example
/// ```
/// use multigather::ir::{Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::pass::{GatherToMultiaxis, PassManager, RewriteConfig};
/// use multigather::DataType;
///
/// let mut g = Graph::new("main");
/// g.inputs.push(ValueInfo::new("data", Type::tensor(DataType::Float, vec![Dim::Known(4), Dim::Known(3)])));
/// g.inputs.push(ValueInfo::new("idx", Type::tensor(DataType::Int64, vec![Dim::Known(2)])));
/// g.outputs.push(ValueInfo::untyped("out"));
/// g.add_node(Node::new("Gather", "pick", ["data", "idx"], ["out"]));
/// let mut model = Model::new(g, 13);
///
/// let mut pass = GatherToMultiaxis::new(RewriteConfig::default());
/// PassManager::new().run(&mut model, &mut [&mut pass])?;
/// assert_eq!(pass.report().rewritten, 1);
/// assert_eq!(model.op_histogram().get("multigather.GatherMultiaxis"), Some(&1));
/// assert_eq!(model.op_histogram().get("Gather"), None);
/// # Ok::<(), multigather::Error>(())
/// ```
pub struct GatherToMultiaxis {
    config: RewriteConfig,
    report: RewriteReport,
}

impl GatherToMultiaxis {
    /// A pass with the given configuration.
    pub fn new(config: RewriteConfig) -> GatherToMultiaxis {
        GatherToMultiaxis {
            config,
            report: RewriteReport::default(),
        }
    }

    /// The report of the last run.
    pub fn report(&self) -> &RewriteReport {
        &self.report
    }

    /// Runs the pass through a [`super::PassManager`] (so the result is validated) and returns
    /// its report.
    pub fn rewrite(model: &mut Model, config: RewriteConfig) -> Result<RewriteReport> {
        let mut pass = GatherToMultiaxis::new(config);
        super::PassManager::new().run(model, &mut [&mut pass])?;
        Ok(pass.report)
    }
}

impl Pass for GatherToMultiaxis {
    fn name(&self) -> &'static str {
        "GatherToMultiaxis"
    }

    fn run(&mut self, model: &mut Model) -> Result<bool> {
        self.report = RewriteReport::default();
        let mut state = State {
            config: &self.config,
            report: &mut self.report,
            names: UniqueNames::new(model.names()),
            functions: model
                .functions
                .iter()
                .map(|f| (f.domain.clone(), f.name.clone()))
                .collect(),
            calls: HashMap::new(),
        };
        let scope = model.graph.name.clone();
        let imports = model.opset_imports.clone();
        let mut total = state.graph(&mut model.graph, &scope, &imports, &TypeEnv::default(), false);
        for f in &mut model.functions {
            let scope = format!("function {}.{}", f.domain, f.name);
            let mut env = TypeEnv::default();
            match state.calls.get(&(f.domain.clone(), f.name.clone())) {
                Some(Signature::Consistent(types)) => {
                    for (input, ty) in f.body.inputs.iter().zip(types) {
                        if let Some(ty) = ty {
                            env.insert(&input.name, ty.clone());
                        }
                    }
                }
                Some(Signature::Conflicting) => {
                    state.skip_all(&f.body, &scope, "call sites pass inputs of different ranks");
                    continue;
                }
                None => {}
            }
            let imports = f.opset_imports.clone();
            let n = state.graph(&mut f.body, &scope, &imports, &env, true);
            if n > 0 && opset_version(&f.opset_imports, DOMAIN).is_none() {
                f.opset_imports.push(OpsetImport {
                    domain: Some(DOMAIN.to_owned()),
                    version: crate::gather::SINCE_VERSION,
                });
            }
            total += n;
        }
        if total > 0 {
            model.ensure_opset(DOMAIN, crate::gather::SINCE_VERSION);
        }
        Ok(total > 0)
    }
}

/// The input types seen at a function's call sites.
enum Signature {
    Consistent(Vec<Option<TensorType>>),
    Conflicting,
}

struct State<'a> {
    config: &'a RewriteConfig,
    report: &'a mut RewriteReport,
    names: UniqueNames,
    functions: Vec<(String, String)>,
    calls: HashMap<(String, String), Signature>,
}

impl State<'_> {
    /// Rewrites the gathers of a graph and its subgraphs; returns how many were rewritten.
    fn graph(&mut self, graph: &mut Graph, scope: &str, imports: &[OpsetImport], outer: &TypeEnv, in_function: bool) -> usize {
        let env = TypeEnv::infer(graph, imports, outer);
        let opset = opset_version(imports, "").unwrap_or(1);
        let constants = if opset >= 9 {
            Constants::Nodes
        } else if in_function {
            Constants::Unavailable
        } else {
            Constants::Initializers
        };
        let mut count = 0;
        for id in graph.node_ids() {
            count += self.subgraphs(graph, id, scope, imports, &env, in_function);
            let node = graph.node(id);
            self.record_call(node, &env);
            let Some(kind) = GatherKind::of(node) else {
                continue;
            };
            let label = if node.name.is_empty() {
                node.outputs.first().cloned().unwrap_or_default()
            } else {
                node.name.clone()
            };
            let outcome = if !self.config.kinds.contains(&kind) {
                Err("its op kind is not selected".to_owned())
            } else if let Some(p) = self.config.skip.iter().find(|p| node.name.contains(p.as_str())) {
                Err(format!("its name matches the skip pattern '{p}'"))
            } else {
                rewrite_node(node, kind, &label, &env, opset, constants, &mut self.names)
            };
            let outcome = match outcome {
                Ok(rewrite) => {
                    let into = rewrite.nodes.iter().map(Node::qualified_op).collect();
                    graph.replace_node(id, rewrite.nodes);
                    graph.value_info.extend(rewrite.value_info);
                    graph.initializers.extend(rewrite.initializers);
                    count += 1;
                    NodeOutcome::Rewritten { into }
                }
                Err(reason) => NodeOutcome::Skipped { reason },
            };
            self.report.add(NodeReport {
                node: label,
                op: kind.name().to_owned(),
                scope: scope.to_owned(),
                outcome,
            });
        }
        count
    }

    fn subgraphs(&mut self, graph: &mut Graph, id: NodeId, scope: &str, imports: &[OpsetImport], env: &TypeEnv, in_function: bool) -> usize {
        if graph.node(id).subgraphs().next().is_none() {
            return 0;
        }
        let name = graph.node(id).name.clone();
        let mut node = graph.node_mut(id);
        let mut count = 0;
        for attr in &mut node.attributes {
            let sub_scope = format!("{scope}/{name}.{}", attr.name);
            match &mut attr.value {
                AttrValue::Graph(g) => count += self.graph(g, &sub_scope, imports, env, in_function),
                AttrValue::Graphs(gs) => {
                    for (i, g) in gs.iter_mut().enumerate() {
                        count += self.graph(g, &format!("{sub_scope}[{i}]"), imports, env, in_function);
                    }
                }
                _ => {}
            }
        }
        count
    }

    fn record_call(&mut self, node: &Node, env: &TypeEnv) {
        let key = (node.domain.clone(), node.op_type.clone());
        if !self.functions.contains(&key) {
            return;
        }
        let types: Vec<Option<TensorType>> = node.inputs.iter().map(|i| env.get(i).cloned()).collect();
        let ranks = |ts: &[Option<TensorType>]| -> Vec<Option<usize>> {
            ts.iter().map(|t| t.as_ref().and_then(TensorType::rank)).collect()
        };
        let next = match self.calls.remove(&key) {
            None => Signature::Consistent(types),
            Some(Signature::Consistent(old)) if ranks(&old) == ranks(&types) => {
                // Keep only what every call site agrees on: the ranks, with unknown dims.
                let merged = old
                    .into_iter()
                    .zip(types)
                    .map(|(a, b)| match (a, b) {
                        (Some(a), Some(b)) if a == b => Some(a),
                        (Some(a), Some(_)) => Some(TensorType {
                            elem: a.elem,
                            shape: a.shape.map(|s| crate::ir::Shape::new(vec![Dim::Unknown; s.rank()])),
                        }),
                        _ => None,
                    })
                    .collect();
                Signature::Consistent(merged)
            }
            Some(_) => Signature::Conflicting,
        };
        self.calls.insert(key, next);
    }

    fn skip_all(&mut self, graph: &Graph, scope: &str, reason: &str) {
        for (_, node) in graph.nodes() {
            if let Some(kind) = GatherKind::of(node) {
                self.report.add(NodeReport {
                    node: node.name.clone(),
                    op: kind.name().to_owned(),
                    scope: scope.to_owned(),
                    outcome: NodeOutcome::Skipped {
                        reason: reason.to_owned(),
                    },
                });
            }
        }
    }
}

/// The nodes that replace one gather, declarations of the values they introduce, and the
/// initializers they need (constants in graphs of opset < 9, whose `Constant` takes floats only).
struct Rewrite {
    nodes: Vec<Node>,
    value_info: Vec<ValueInfo>,
    initializers: Vec<StoredTensor>,
}

/// Builds the replacement of one gather node, or says why it cannot.
fn rewrite_node(
    node: &Node,
    kind: GatherKind,
    label: &str,
    env: &TypeEnv,
    opset: i64,
    constants: Constants,
    names: &mut UniqueNames,
) -> std::result::Result<Rewrite, String> {
    if constants == Constants::Unavailable {
        return Err(format!("opset {opset} has no int64 Constant and functions have no initializers"));
    }
    let (data, indices) = match node.inputs.as_slice() {
        [d, i] if !d.is_empty() && !i.is_empty() => (d.as_str(), i.as_str()),
        _ => return Err(format!("expected 2 inputs, found {}", node.inputs.len())),
    };
    let output = match node.outputs.as_slice() {
        [o] if !o.is_empty() => o.as_str(),
        _ => return Err(format!("expected 1 output, found {}", node.outputs.len())),
    };
    let known = |name: &str| -> std::result::Result<(DataType, Vec<Dim>), String> {
        let ty = env.get(name);
        let dims = ty
            .and_then(|t| t.shape.as_ref())
            .map(|s| s.dims.clone())
            .ok_or_else(|| format!("the rank of '{name}' is unknown"))?;
        let elem = ty
            .and_then(|t| t.elem)
            .ok_or_else(|| format!("the element type of '{name}' is unknown"))?;
        Ok((elem, dims))
    };
    let (elem, data_dims) = known(data)?;
    let (index_elem, index_dims) = known(indices)?;
    if !index_elem.is_index() {
        return Err(format!("indices '{indices}' are {index_elem}, not int32 or int64"));
    }
    let attr = |name: &str, default: i64| node.attr_int(name, default).map_err(|e| e.to_string());
    let (r, q) = (data_dims.len(), index_dims.len());
    let plan = match kind {
        GatherKind::Gather => rules::gather(r, q, attr("axis", 0)?),
        GatherKind::GatherElements => {
            if r != q {
                return Err(format!("data has rank {r} but indices have rank {q}"));
            }
            rules::gather_elements(r, attr("axis", 0)?)
        }
        GatherKind::GatherNd => {
            let depth = match index_dims.last() {
                Some(Dim::Known(k)) if *k >= 0 => *k as usize,
                Some(_) => return Err(format!("the last dimension of indices '{indices}' (the index depth) is not known statically")),
                None => return Err(format!("indices '{indices}' are a scalar")),
            };
            rules::gather_nd(r, q, depth, attr("batch_dims", 0)?)
        }
    }
    .map_err(|e| e.to_string())?;
    plan.ranks(r, q).map_err(|e| e.to_string())?;

    let mut e = Emitter {
        base: label.to_owned(),
        names,
        opset,
        constants,
        nodes: Vec::new(),
        value_info: Vec::new(),
        initializers: Vec::new(),
    };
    emit(&mut e, &plan, (data, elem, data_dims), (indices, index_elem, index_dims), output)?;
    Ok(Rewrite {
        nodes: e.nodes,
        value_info: e.value_info,
        initializers: e.initializers,
    })
}

type Operand<'a> = (&'a str, DataType, Vec<Dim>);

fn emit(e: &mut Emitter, plan: &GatherPlan, data: Operand, indices: Operand, output: &str) -> std::result::Result<(), String> {
    let (data, elem, mut data_dims) = data;
    let (indices, index_elem, index_dims) = indices;
    let mut x = data.to_owned();
    if let Some(axis) = plan.crop_input_to_indices {
        if needs_crop(&data_dims, &index_dims, axis) {
            (x, data_dims) = e.crop(&x, elem, &data_dims, indices, &index_dims, axis);
        }
    }
    let (x, x_dims) = e.shape_ops(&plan.input, x, elem, data_dims, "input", None);
    let (i, i_dims) = e.shape_ops(&plan.indices, indices.to_owned(), index_elem, index_dims, "indices", None);
    let gathered_dims = gathered_dims(&x_dims, &i_dims, plan.spec.axes.as_slice(), plan.spec.coordinate_size());
    let gathered = if plan.output.is_empty() {
        output.to_owned()
    } else {
        e.value("gathered", elem, &gathered_dims)
    };
    let mut node = Node::new("GatherMultiaxis", &e.node_name("GatherMultiaxis"), [x, i], [gathered.clone()])
        .with_domain(DOMAIN)
        .with_attr(
            "axes",
            AttrValue::Ints(plan.spec.axes.iter().map(|&a| a as i64).collect()),
        );
    if plan.spec.mode != OutOfRange::Error {
        node = node.with_attr("mode", AttrValue::String(plan.spec.mode.name().as_bytes().to_vec()));
    }
    e.nodes.push(node);
    e.shape_ops(&plan.output, gathered, elem, gathered_dims, "output", Some(output));
    Ok(())
}

/// True unless every non-axis dimension of the data provably equals the indices' one.
fn needs_crop(data: &[Dim], indices: &[Dim], axis: usize) -> bool {
    data.iter()
        .zip(indices)
        .enumerate()
        .any(|(j, (d, i))| j != axis && !same_dim(d, i))
}

fn same_dim(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => x == y,
        (Dim::Symbolic(x), Dim::Symbolic(y)) => x == y,
        _ => false,
    }
}

/// The `GatherMultiaxis` output dims: axis dims from the logical indices, others broadcast.
fn gathered_dims(input: &[Dim], indices: &[Dim], axes: &[usize], coordinate_size: usize) -> Vec<Dim> {
    let last = indices.len().saturating_sub(1);
    let logical = |j: usize| -> Dim {
        match (&indices[j], j == last && coordinate_size > 1) {
            (Dim::Known(n), true) => Dim::Known(n / coordinate_size as i64),
            (_, true) => Dim::Unknown,
            (d, false) => d.clone(),
        }
    };
    (0..input.len())
        .map(|j| {
            if axes.contains(&j) {
                return logical(j);
            }
            match (&input[j], logical(j)) {
                (a, b) if same_dim(a, &b) => b,
                (Dim::Known(1), b) => b,
                (a, Dim::Known(1)) => a.clone(),
                (Dim::Known(n), _) => Dim::Known(*n),
                (_, Dim::Known(n)) => Dim::Known(n),
                _ => Dim::Unknown,
            }
        })
        .collect()
}

/// The dims after one shape operation; sizes that cannot be worked out become unknown.
fn apply_dims(op: &ShapeOp, dims: &[Dim]) -> Vec<Dim> {
    match op {
        ShapeOp::Unsqueeze(axes) => {
            let mut rest = dims.iter();
            (0..dims.len() + axes.len())
                .map(|j| {
                    if axes.contains(&j) {
                        Dim::Known(1)
                    } else {
                        rest.next().cloned().unwrap_or(Dim::Unknown)
                    }
                })
                .collect()
        }
        ShapeOp::Squeeze(axes) => dims
            .iter()
            .enumerate()
            .filter(|(j, _)| !axes.contains(j))
            .map(|(_, d)| d.clone())
            .collect(),
        ShapeOp::Reshape(spec) => {
            let total: Option<i64> = dims.iter().map(Dim::known).product();
            let mut out: Vec<Dim> = spec
                .iter()
                .enumerate()
                .map(|(j, &s)| match s {
                    0 => dims.get(j).cloned().unwrap_or(Dim::Unknown),
                    -1 => Dim::Unknown,
                    n => Dim::Known(n),
                })
                .collect();
            if let Some(hole) = spec.iter().position(|&s| s == -1) {
                let rest: Option<i64> = out
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != hole)
                    .map(|(_, d)| d.known())
                    .product();
                if let (Some(total), Some(rest)) = (total, rest) {
                    if rest > 0 {
                        out[hole] = Dim::Known(total / rest);
                    }
                }
            }
            out
        }
    }
}

fn all_known(dims: &[Dim]) -> Option<Vec<i64>> {
    dims.iter().map(Dim::known).collect()
}

/// How a rewrite materialises constant shapes and axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Constants {
    /// `Constant` nodes (opset 9 and later, where `Constant` takes int64).
    Nodes,
    /// Graph initializers (older opsets).
    Initializers,
    /// Neither: an old-opset function body.
    Unavailable,
}

/// Builds the nodes of one rewrite, naming everything after the original node.
struct Emitter<'a> {
    base: String,
    names: &'a mut UniqueNames,
    opset: i64,
    constants: Constants,
    nodes: Vec<Node>,
    value_info: Vec<ValueInfo>,
    initializers: Vec<StoredTensor>,
}

impl Emitter<'_> {
    fn node_name(&mut self, what: &str) -> String {
        self.names.fresh(&format!("{}/{what}", self.base))
    }

    /// A fresh value declared with the given type.
    fn value(&mut self, what: &str, elem: DataType, dims: &[Dim]) -> String {
        let name = self.names.fresh(&format!("{}_{what}", self.base));
        self.value_info
            .push(ValueInfo::new(name.clone(), Type::tensor(elem, dims.to_vec())));
        name
    }

    /// A 1-D int64 constant: a `Constant` node, or an initializer in old opsets.
    fn constant(&mut self, what: &str, values: &[i64]) -> String {
        let tensor = StoredTensor::from_i64s(None, &[values.len() as i64], values);
        self.constant_tensor(what, tensor)
    }

    fn constant_tensor(&mut self, what: &str, mut tensor: StoredTensor) -> String {
        let dims: Vec<Dim> = tensor.dims.iter().map(|&d| Dim::Known(d)).collect();
        if self.constants == Constants::Initializers {
            let name = self.names.fresh(&format!("{}_{what}", self.base));
            tensor.name = Some(name.clone());
            self.initializers.push(tensor);
            return name;
        }
        let name = self.value(what, tensor.elem, &dims);
        let node_name = self.node_name(what);
        self.nodes.push(
            Node::new("Constant", &node_name, Vec::<String>::new(), [name.clone()])
                .with_attr("value", AttrValue::Tensor(Box::new(tensor))),
        );
        name
    }

    /// Applies shape operations, collapsing them into one `Reshape` to a constant shape when all
    /// sizes are known. The last result is named `last` if given.
    fn shape_ops(
        &mut self,
        ops: &[ShapeOp],
        mut value: String,
        elem: DataType,
        mut dims: Vec<Dim>,
        what: &str,
        last: Option<&str>,
    ) -> (String, Vec<Dim>) {
        if ops.is_empty() {
            return (value, dims);
        }
        let final_dims = ops.iter().fold(dims.clone(), |d, op| apply_dims(op, &d));
        if let (Some(_), Some(sizes)) = (all_known(&dims), all_known(&final_dims)) {
            let out = self.output_name(last, what, elem, &final_dims);
            self.reshape(&value, &sizes, &out, what);
            return (out, final_dims);
        }
        for (n, op) in ops.iter().enumerate() {
            let next_dims = apply_dims(op, &dims);
            let out = if n + 1 == ops.len() {
                self.output_name(last, what, elem, &next_dims)
            } else {
                self.value(what, elem, &next_dims)
            };
            match op {
                ShapeOp::Unsqueeze(axes) => self.axes_op("Unsqueeze", &value, axes, &out, what),
                ShapeOp::Squeeze(axes) => self.axes_op("Squeeze", &value, axes, &out, what),
                ShapeOp::Reshape(spec) => self.reshape(&value, spec, &out, what),
            }
            value = out;
            dims = next_dims;
        }
        (value, dims)
    }

    fn output_name(&mut self, last: Option<&str>, what: &str, elem: DataType, dims: &[Dim]) -> String {
        match last {
            Some(name) => name.to_owned(),
            None => self.value(what, elem, dims),
        }
    }

    /// `Unsqueeze` / `Squeeze`, with axes as an input from opset 13 and as an attribute before.
    fn axes_op(&mut self, op: &str, input: &str, axes: &[usize], out: &str, what: &str) {
        let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let name = self.node_name(&format!("{op}_{what}"));
        let node = if self.opset >= 13 {
            let axes = self.constant(&format!("{what}_axes"), &axes);
            Node::new(op, &name, [input.to_owned(), axes], [out])
        } else {
            Node::new(op, &name, [input], [out]).with_attr("axes", AttrValue::Ints(axes))
        };
        self.nodes.push(node);
    }

    /// `Reshape`, with the shape as an input from opset 5 and as an attribute before.
    fn reshape(&mut self, input: &str, shape: &[i64], out: &str, what: &str) {
        let name = self.node_name(&format!("Reshape_{what}"));
        let node = if self.opset >= 5 {
            let shape = self.constant(&format!("{what}_shape"), shape);
            Node::new("Reshape", &name, [input.to_owned(), shape], [out])
        } else {
            Node::new("Reshape", &name, [input], [out]).with_attr("shape", AttrValue::Ints(shape.to_vec()))
        };
        self.nodes.push(node);
    }

    /// `GatherElements` data cropped to the indices' sizes on every axis but `axis`:
    /// `Slice(data, 0, ends)` with constant ends when the sizes are known, else
    /// `ends = Where(mask, Shape(indices), INT64_MAX)`.
    fn crop(&mut self, data: &str, elem: DataType, data_dims: &[Dim], indices: &str, index_dims: &[Dim], axis: usize) -> (String, Vec<Dim>) {
        let rank = data_dims.len();
        let dims: Vec<Dim> = (0..rank)
            .map(|j| if j == axis { data_dims[j].clone() } else { index_dims[j].clone() })
            .collect();
        let starts = self.constant("crop_starts", &vec![0; rank]);
        let ends = match all_known(index_dims) {
            Some(sizes) => {
                let ends: Vec<i64> = (0..rank).map(|j| if j == axis { i64::MAX } else { sizes[j] }).collect();
                self.constant("crop_ends", &ends)
            }
            None => {
                let shape = self.value("indices_shape", DataType::Int64, &[Dim::Known(rank as i64)]);
                let shape_node = self.node_name("Shape_indices");
                self.nodes.push(Node::new("Shape", &shape_node, [indices], [shape.clone()]));
                let mask: Vec<u8> = (0..rank).map(|j| u8::from(j != axis)).collect();
                let tensor = StoredTensor::raw(None, DataType::Bool, &[rank as i64], mask.into());
                let mask_name = self.constant_tensor("crop_mask", tensor);
                let max = self.constant("crop_unbounded", &[i64::MAX]);
                let ends = self.value("crop_ends", DataType::Int64, &[Dim::Known(rank as i64)]);
                let where_node = self.node_name("Where_crop_ends");
                self.nodes.push(Node::new("Where", &where_node, [mask_name, shape, max], [ends.clone()]));
                ends
            }
        };
        let out = self.value("cropped", elem, &dims);
        let slice = self.node_name("Slice_crop");
        self.nodes.push(Node::new("Slice", &slice, [data.to_owned(), starts, ends], [out.clone()]));
        (out, dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_dims_follow_shape_ops() {
        let n = || Dim::Symbolic("N".into());
        let dims = vec![n(), Dim::Known(3)];
        assert_eq!(
            apply_dims(&ShapeOp::Unsqueeze(vec![0, 3]), &dims),
            vec![Dim::Known(1), n(), Dim::Known(3), Dim::Known(1)]
        );
        assert_eq!(apply_dims(&ShapeOp::Squeeze(vec![1]), &dims), vec![n()]);
        assert_eq!(
            apply_dims(&ShapeOp::Reshape(vec![0, -1]), &[n(), Dim::Known(2), Dim::Known(3)]),
            vec![n(), Dim::Unknown]
        );
        assert_eq!(
            apply_dims(&ShapeOp::Reshape(vec![0, -1]), &[Dim::Known(4), Dim::Known(2), Dim::Known(3)]),
            vec![Dim::Known(4), Dim::Known(6)]
        );
    }

    #[test]
    fn gathered_dims_broadcast_and_fold_coordinates() {
        let b = || Dim::Symbolic("B".into());
        // input [B, 5, 1], indices [1, 1, 4*2] with axes [1, 2] -> [B, 1, 4]
        let out = gathered_dims(
            &[b(), Dim::Known(5), Dim::Known(1)],
            &[Dim::Known(1), Dim::Known(1), Dim::Known(8)],
            &[1, 2],
            2,
        );
        assert_eq!(out, vec![b(), Dim::Known(1), Dim::Known(4)]);
    }

    #[test]
    fn crop_is_needed_only_when_sizes_may_differ() {
        let s = |x: &str| Dim::Symbolic(x.into());
        assert!(!needs_crop(&[s("B"), Dim::Known(5)], &[s("B"), Dim::Known(2)], 1));
        assert!(needs_crop(&[s("B"), Dim::Known(5)], &[s("K"), Dim::Known(2)], 1));
        assert!(needs_crop(&[Dim::Unknown, Dim::Known(5)], &[Dim::Unknown, Dim::Known(2)], 1));
    }
}
