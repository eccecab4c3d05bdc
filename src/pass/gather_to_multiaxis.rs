//! The `GatherToMultiaxis` pass: every ONNX `Gather`, `GatherElements` and `GatherND` becomes
//! shape operations around one `multigather.GatherMultiaxis` node.
//!
//! Why one file: the pass is one `Rule` whose three gather rules share the operand plumbing and
//! the report; its node emission is `emit.rs`, its walk over graphs and functions `walk.rs`.
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
//! `GatherND` whose index depth is symbolic gets one static rewrite per possible depth, chosen
//! at run time by an `If` chain (see [`nd_symbolic_depth`]).
//!
//! A node the operator's schema forbids (an attribute out of range or not defined, a wrong
//! arity, ranks that cannot go together, the operator missing from the opset) makes the pass
//! fail naming the node: the model is broken, not merely hard to rewrite. A node that calls a
//! model-local function named like a gather is a call, not the operator, and is not touched.
//!
//! Subgraphs (`If`, `Loop`, `Scan` bodies at any depth) and model-local functions are rewritten
//! too. For a function, the ranks of its inputs come from every call site in the model (callers
//! before callees, whatever the file order), which must agree; when they do not, the body is
//! left alone with the reason.
//! New values get `value_info` entries with their type and shape; new names derive from the
//! rewritten node's name; the original output name is kept.

use std::collections::BTreeMap;

use serde::Serialize;

use super::emit::{all_known, Emitter, Replacement};
use super::walk::{called_function, walk, Change, Rule, Site};
use super::Pass;
use crate::error::{Error, Result};
use crate::gather::map::onnx as rules;
use crate::gather::{GatherPlan, OutOfRange, DOMAIN};
use crate::ir::{
    opset_version, AttrValue, Dim, Graph, Model, Node, OpsetImport, StoredTensor, Type,
    UniqueNames, ValueInfo,
};
use crate::ops::{GatherKind, SchemaError};
use crate::DataType;

/// What the pass rewrites.
#[derive(Clone, Debug)]
pub struct RewriteConfig {
    /// The op kinds to rewrite (ONNX gathers; [`GatherKind::Multiaxis`] is what they become).
    pub kinds: Vec<GatherKind>,
    /// Nodes whose name contains one of these texts are left untouched.
    pub skip: Vec<String>,
}

impl Default for RewriteConfig {
    fn default() -> RewriteConfig {
        RewriteConfig {
            kinds: GatherKind::ONNX.to_vec(),
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
    /// Declarations (`value_info`, graph outputs, formal parameters) that contradict the types
    /// inference proves, each as `scope: sentence`. They are ignored, and reported here.
    pub declarations: Vec<String>,
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
        for d in &self.declarations {
            s.push_str(&format!("\n  note: {d}"));
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

    /// Runs the pass alone through a [`super::PassManager`] (so the result is validated) and
    /// returns its report.
    pub fn rewrite(model: &mut Model, config: RewriteConfig) -> Result<RewriteReport> {
        let mut pass = GatherToMultiaxis::new(config);
        super::run_alone(&mut pass, model)?;
        Ok(pass.report)
    }
}

impl Pass for GatherToMultiaxis {
    fn name(&self) -> &'static str {
        "GatherToMultiaxis"
    }

    fn run(&mut self, model: &mut Model) -> Result<bool> {
        self.report = RewriteReport::default();
        let mut rule = Rewriter {
            config: &self.config,
            report: &mut self.report,
            main_scope: model.graph.name.clone(),
        };
        // On an error the model is broken; what was rewritten so far is dropped with it by the
        // caller.
        let total = walk(model, &mut rule)?;
        for f in &mut model.functions {
            if uses_domain(&f.body) && opset_version(&f.opset_imports, DOMAIN).is_none() {
                f.opset_imports.push(OpsetImport {
                    domain: Some(DOMAIN.to_owned()),
                    version: crate::gather::SINCE_VERSION,
                });
            }
        }
        if total > 0 {
            model.ensure_opset(DOMAIN, crate::gather::SINCE_VERSION);
        }
        Ok(total > 0)
    }
}

/// True if the graph (or one of its subgraphs) has a node of [`DOMAIN`].
pub(crate) fn uses_domain(graph: &Graph) -> bool {
    graph
        .nodes()
        .any(|(_, n)| n.domain == DOMAIN || n.subgraphs().any(uses_domain))
}

/// The per-node rule of the pass.
struct Rewriter<'a> {
    config: &'a RewriteConfig,
    report: &'a mut RewriteReport,
    /// The main graph's name: nodes elsewhere are named with their scope in errors.
    main_scope: String,
}

impl Rule for Rewriter<'_> {
    fn visit(&mut self, site: &Site<'_>) -> Result<Option<Change>> {
        let node = site.node;
        let Some(kind) = GatherKind::of(node).filter(|k| k.is_onnx()) else {
            return Ok(None);
        };
        let label = node.label();
        let outcome = if !self.config.kinds.contains(&kind) {
            Err(Skip("its op kind is not selected".to_owned()))
        } else if let Some(p) = self
            .config
            .skip
            .iter()
            .find(|p| node.name.contains(p.as_str()))
        {
            Err(Skip(format!("its name matches the skip pattern '{p}'")))
        } else {
            rewrite_node(node, kind, &label, site, &mut site.names.borrow_mut()).and_then(
                |replacement| match replacement
                    .nodes
                    .iter()
                    .find(|n| called_function(n, site.functions).is_some())
                {
                    Some(n) => Err(Skip(format!(
                        "the model defines a local function named '{}', which the rewrite's \
                         node would call instead of the operator",
                        n.qualified_op()
                    ))),
                    None => Ok(replacement),
                },
            )
        };
        let (outcome, change) = match outcome {
            Ok(replacement) => {
                let into = replacement.nodes.iter().map(Node::qualified_op).collect();
                (
                    NodeOutcome::Rewritten { into },
                    Some(Change::from_replacement(replacement)),
                )
            }
            Err(Skip(reason)) => (NodeOutcome::Skipped { reason }, None),
            Err(Invalid(reason)) => {
                let reason = if site.scope == self.main_scope {
                    reason
                } else {
                    format!("{reason} (in {})", site.scope)
                };
                return Err(Error::node(&label, kind.name(), reason));
            }
        };
        self.report.add(NodeReport {
            node: label,
            op: kind.name().to_owned(),
            scope: site.scope.to_owned(),
            outcome,
        });
        Ok(change)
    }

    fn contradiction(&mut self, scope: &str, text: &str) {
        self.report.declarations.push(format!("{scope}: {text}"));
    }

    fn skip(&mut self, node: &Node, scope: &str, reason: &str) {
        if let Some(kind) = GatherKind::of(node).filter(|k| k.is_onnx()) {
            self.report.add(NodeReport {
                node: node.label(),
                op: kind.name().to_owned(),
                scope: scope.to_owned(),
                outcome: NodeOutcome::Skipped {
                    reason: reason.to_owned(),
                },
            });
        }
    }
}

/// Why a gather node is not rewritten.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// The node is valid but what the rewrite needs cannot be proved; it stays as it is.
    Skip(String),
    /// The operator's schema forbids the node (an attribute, an arity, a rank): the model is
    /// broken, and the pass fails naming the node.
    Invalid(String),
}

use Refusal::{Invalid, Skip};

/// Builds the replacement of one gather node, or says why it cannot.
fn rewrite_node(
    node: &Node,
    kind: GatherKind,
    label: &str,
    site: &Site,
    names: &mut UniqueNames,
) -> std::result::Result<Replacement, Refusal> {
    let (env, opset) = (site.env, site.opset);
    let attrs = kind.check_schema(node, opset).map_err(|e| match e {
        SchemaError::Invalid(reason) => Invalid(reason),
        SchemaError::BoundByCall(reason) => Skip(reason),
    })?;
    let (data, indices) = (node.inputs[0].as_str(), node.inputs[1].as_str());
    let output = node.outputs[0].as_str();
    let known = |name: &str| -> std::result::Result<(DataType, Vec<Dim>), Refusal> {
        let ty = env.get(name);
        let dims = ty
            .and_then(|t| t.shape.as_ref())
            .map(|s| s.dims.clone())
            .ok_or_else(|| Skip(format!("the rank of '{name}' is unknown")))?;
        let elem = ty
            .and_then(|t| t.elem)
            .ok_or_else(|| Skip(format!("the element type of '{name}' is unknown")))?;
        Ok((elem, dims))
    };
    let (elem, data_dims) = known(data)?;
    let (index_elem, index_dims) = known(indices)?;
    if !index_elem.is_index() {
        return Err(Invalid(format!(
            "indices '{indices}' are {index_elem}, not int32 or int64"
        )));
    }
    let (axis, batch_dims) = (attrs.axis().unwrap_or(0), attrs.batch_dims().unwrap_or(0));
    let (r, q) = (data_dims.len(), index_dims.len());
    let plan = match kind {
        GatherKind::Gather => rules::gather(r, q, axis),
        GatherKind::GatherElements => {
            if r != q {
                return Err(Invalid(format!(
                    "data has rank {r} but indices have rank {q}; they must be equal"
                )));
            }
            rules::gather_elements(r, axis)
        }
        GatherKind::GatherNd => {
            let depth = match index_dims.last() {
                Some(d) => match d.known() {
                    Some(k) => k as usize,
                    None => {
                        return nd_symbolic_depth(
                            batch_dims,
                            label,
                            site,
                            names,
                            (data, elem, data_dims),
                            (indices, index_elem, index_dims),
                            output,
                        )
                    }
                },
                None => {
                    return Err(Invalid(format!(
                        "indices '{indices}' are a scalar; GatherND needs rank 1 or more"
                    )))
                }
            };
            rules::gather_nd(r, q, depth, batch_dims)
        }
        GatherKind::Multiaxis => return Err(Skip("it is already a GatherMultiaxis".into())),
    }
    .map_err(|e| match e {
        crate::gather::GatherError::Unsupported { reason, .. } => Skip(reason),
        e => Invalid(e.to_string()),
    })?;
    plan.ranks(r, q).map_err(|e| Invalid(e.to_string()))?;
    let batch = match kind {
        GatherKind::GatherNd => batch_dims as usize,
        _ => 0,
    };
    check_sizes(plan.crop_input_to_indices, batch, &data_dims, &index_dims)?;

    let mut e = site.emitter(label, names);
    e.know(data, elem, &data_dims);
    e.know(indices, index_elem, &index_dims);
    let (indices, index_dims) = e.check_batch_dims(data, &data_dims, indices, &index_dims, batch);
    emit(
        &mut e,
        &plan,
        (data, elem, data_dims),
        (indices.as_str(), index_elem, index_dims),
        output,
    );
    Ok(e.finish())
}

/// Refuses, as the operator does, a node whose known sizes the schema forbids: `GatherElements`
/// indices larger than the data off the axis, `GatherND` batch dims that differ. The rewrite's
/// broadcasting would otherwise turn the original's error into data where the data's size is 1.
fn check_sizes(
    crop_axis: Option<usize>,
    batch: usize,
    data: &[Dim],
    indices: &[Dim],
) -> std::result::Result<(), Refusal> {
    let known = |j: usize| Some((data.get(j)?.known()?, indices.get(j)?.known()?));
    if let Some(axis) = crop_axis {
        for j in (0..data.len()).filter(|&j| j != axis) {
            if let Some((d, i)) = known(j).filter(|(d, i)| i > d) {
                return Err(Invalid(format!(
                    "indices have size {i} on axis {j}, larger than the data's {d}"
                )));
            }
        }
    }
    for j in 0..batch {
        if let Some((d, i)) = known(j).filter(|(d, i)| i != d) {
            return Err(Invalid(format!(
                "batch dimension {j} is {d} in the data but {i} in the indices"
            )));
        }
    }
    Ok(())
}

/// True when both dims are known and equal: a shared `dim_param` is a declaration that the
/// inputs fed at run time need not keep, not a proof.
fn proven_equal(a: &Dim, b: &Dim) -> bool {
    matches!((a.known(), b.known()), (Some(x), Some(y)) if x == y)
}

/// `GatherND` whose index depth `k` (the last indices dimension) is not known statically. The
/// depth is bounded, `1 <= k <= r - b`, so the rewrite is exact: one static rewrite per depth,
/// chosen at run time.
///
/// ```text
/// GatherND(data, idx, batch_dims=b), k symbolic
///   ==> depth = Slice(Shape(idx), [q-1], [q])
///       If(Equal(depth, [1]), then: B(1), else: If(Equal(depth, [2]), then: B(2), else: ... B(r-b)))
///   B(k) = Rewrite(GatherND(data, Reshape(idx, [0, ..., 0, k]), batch_dims=b))      (k now static)
/// ```
///
/// Each branch's output has rank `q - 1 + r - b - k` (If allows branches to differ in shape).
/// The `Reshape` makes the depth known inside its branch and, in the last branch, refuses any
/// depth outside `[1, r-b]` as GatherND does. With `r - b = 1` there is one branch and no `If`.
fn nd_symbolic_depth(
    b: i64,
    label: &str,
    site: &Site,
    names: &mut UniqueNames,
    data: Operand,
    indices: Operand,
    output: &str,
) -> std::result::Result<Replacement, Refusal> {
    let (r, q) = (data.2.len(), indices.2.len());
    let limit = r.min(q);
    if b < 0 || b as usize >= limit {
        return Err(Invalid(format!(
            "batch_dims = {b} is invalid: must be in [0, {limit}) for data rank {r} and indices rank {q}"
        )));
    }
    let b = b as usize;
    check_sizes(None, b, &data.2, &indices.2)?;
    let mut prefix = site.emitter(label, names);
    prefix.know(data.0, data.1, &data.2);
    prefix.know(indices.0, indices.1, &indices.2);
    let (checked, checked_dims) =
        prefix.check_batch_dims(data.0, &data.2, indices.0, &indices.2, b);
    let prefix = prefix.finish();
    let indices = (checked.as_str(), indices.1, checked_dims);
    let branch = |k: usize, out: &str, names: &mut UniqueNames| {
        let mut e = site.emitter(label, names);
        e.know(indices.0, indices.1, &indices.2);
        let what = format!("indices_depth{k}");
        let idx = e.fresh(&what);
        let mut spec = vec![0; q - 1];
        spec.push(k as i64);
        e.reshape(indices.0, &spec, &idx, &what, false);
        let plan = rules::gather_nd(r, q, k, b as i64).map_err(|e| Invalid(e.to_string()))?;
        let dims = e.dims_of(&idx);
        emit(&mut e, &plan, data.clone(), (&idx, indices.1, dims), out);
        // GatherND's own output rule, which keeps the indices' batch dims where the branch's
        // gather (its indices broadcast against the data) may not know them.
        let out_dims: Vec<Dim> = indices.2[..q - 1]
            .iter()
            .chain(&data.2[b + k..])
            .cloned()
            .collect();
        Ok::<_, Refusal>((e.finish(), out_dims))
    };
    let depths = r - b;
    if depths == 1 {
        return branch(1, output, names).map(|(rep, _)| prefix.then(rep));
    }
    let mut e = site.emitter(label, names);
    e.know(indices.0, indices.1, &indices.2);
    let shape = e.op("Shape", &[indices.0], vec![], "indices_shape");
    let start = e.constant("depth_start", &[q as i64 - 1]);
    let end = e.constant("depth_end", &[q as i64]);
    let depth = e.op("Slice", &[&shape, &start, &end], vec![], "depth");
    let conds: Vec<String> = (1..depths)
        .map(|k| {
            let value = e.constant(&format!("depth{k}"), &[k as i64]);
            e.op("Equal", &[&depth, &value], vec![], &format!("is_depth{k}"))
        })
        .collect();
    // Built from the innermost else branch (the largest depth) outwards.
    let as_graph = |e: &mut Emitter, rep: Replacement, out: &str, dims: Option<Vec<Dim>>| {
        let mut g = Graph::new(e.names.fresh(&format!("{label}_branch")));
        g.value_info = rep.value_info;
        g.initializers = rep.initializers;
        let ty = match dims {
            Some(dims) => Type::tensor(data.1, dims),
            None => unranked(data.1),
        };
        g.outputs.push(ValueInfo::new(out, ty));
        for n in rep.nodes {
            g.add_node(n);
        }
        g
    };
    let out = e.names.fresh(&format!("{label}_depth{depths}"));
    let (rep, dims) = branch(depths, &out, e.names)?;
    let mut otherwise = as_graph(&mut e, rep, &out, Some(dims));
    for k in (1..depths).rev() {
        let out = e.names.fresh(&format!("{label}_depth{k}"));
        let (rep, dims) = branch(k, &out, e.names)?;
        let then = as_graph(&mut e, rep, &out, Some(dims));
        let result = if k == 1 {
            output.to_owned()
        } else {
            e.names.fresh(&format!("{label}_depth{k}_or_more"))
        };
        let name = e.node_name(&format!("If_depth{k}"));
        let choose = Node::new("If", &name, [conds[k - 1].clone()], [result.clone()])
            .with_attr("then_branch", AttrValue::Graph(Box::new(then)))
            .with_attr("else_branch", AttrValue::Graph(Box::new(otherwise)));
        if k == 1 {
            e.nodes.push(choose);
            break;
        }
        let mut wrapper = Graph::new(e.names.fresh(&format!("{label}_branch")));
        wrapper
            .outputs
            .push(ValueInfo::new(result.clone(), unranked(data.1)));
        wrapper.add_node(choose);
        otherwise = wrapper;
    }
    Ok(prefix.then(e.finish()))
}

/// A tensor type of known element type and unknown rank.
fn unranked(elem: DataType) -> Type {
    Type::from(crate::ir::TypeKind::Tensor(crate::ir::TensorType {
        elem: Some(elem),
        shape: None,
    }))
}

type Operand<'a> = (&'a str, DataType, Vec<Dim>);

fn emit(e: &mut Emitter, plan: &GatherPlan, data: Operand, indices: Operand, output: &str) {
    let (data, elem, data_dims) = data;
    let (indices, index_elem, index_dims) = indices;
    let mut x = data.to_owned();
    e.know(data, elem, &data_dims);
    e.know(indices, index_elem, &index_dims);
    if let Some(axis) = plan.crop_input_to_indices {
        if needs_crop(&data_dims, &index_dims, axis) {
            let check = needs_size_check(&data_dims, &index_dims, axis);
            x = e.crop(&x, &data_dims, indices, &index_dims, axis, check);
        }
    }
    let x = e.shape_ops(&plan.input, x, "input", None);
    let i = e.shape_ops(&plan.indices, indices.to_owned(), "indices", None);
    let gathered = if plan.output.is_empty() {
        output.to_owned()
    } else {
        e.fresh("gathered")
    };
    let multiaxis = GatherKind::Multiaxis;
    let mut node = Node::new(
        multiaxis.name(),
        &e.node_name(multiaxis.name()),
        [x, i],
        [gathered.clone()],
    )
    .with_domain(multiaxis.domain())
    .with_attr(
        "axes",
        AttrValue::Ints(plan.spec.axes.iter().map(|&a| a as i64).collect()),
    );
    if plan.spec.mode != OutOfRange::Error {
        node = node.with_attr(
            "mode",
            AttrValue::String(plan.spec.mode.name().as_bytes().to_vec()),
        );
    }
    e.push(node);
    e.shape_ops(&plan.output, gathered, "output", Some(output));
}

/// True unless every non-axis dimension of the data is known to equal the indices' one.
fn needs_crop(data: &[Dim], indices: &[Dim], axis: usize) -> bool {
    data.iter()
        .zip(indices)
        .enumerate()
        .any(|(j, (d, i))| j != axis && !proven_equal(d, i))
}

/// True when the broadcasting of `GatherMultiaxis` could hide indices larger than the data off
/// `axis`: after the crop the data's size there is `min(d, i)`, which broadcasts against `i`
/// without error when it is 1 (or 0 against 1). A known data size of 2 or more, known sizes on
/// both sides (checked statically) or an empty indices dim leave nothing to check at run time.
fn needs_size_check(data: &[Dim], indices: &[Dim], axis: usize) -> bool {
    data.iter().zip(indices).enumerate().any(|(j, (d, i))| {
        j != axis
            && !(d.known().is_some_and(|d| d >= 2)
                || i.known() == Some(0)
                || (d.known().is_some() && i.known().is_some()))
    })
}

/// The rewrite's own emitter step.
impl Emitter<'_> {
    /// `GatherElements` data cropped to the indices' sizes on every axis but `axis`:
    /// `Slice(data, 0, ends)` with constant ends when the sizes are known, else
    /// `ends = Where(mask, Shape(indices), INT64_MAX)`.
    ///
    /// With `check`, the cropped data is then reshaped to the indices' sizes off the axis,
    /// `Reshape(cropped, Where(mask, Shape(indices), Shape(cropped)))`: every cropped size is at
    /// most the indices' one, so the element counts agree only when every size does, and indices
    /// larger than the data fail there as they fail the original operator, instead of
    /// broadcasting against a data size of 1.
    fn crop(
        &mut self,
        data: &str,
        data_dims: &[Dim],
        indices: &str,
        index_dims: &[Dim],
        axis: usize,
        check: bool,
    ) -> String {
        let rank = data_dims.len();
        let starts = self.constant("crop_starts", &vec![0; rank]);
        let mask = || {
            let mask: Vec<u8> = (0..rank).map(|j| u8::from(j != axis)).collect();
            StoredTensor::raw(None, DataType::Bool, &[rank as i64], mask.into())
        };
        let mut shape_and_mask = None;
        let ends = match all_known(index_dims) {
            Some(sizes) => {
                let ends: Vec<i64> = (0..rank)
                    .map(|j| if j == axis { i64::MAX } else { sizes[j] })
                    .collect();
                self.constant("crop_ends", &ends)
            }
            None => {
                let shape = self.op("Shape", &[indices], vec![], "indices_shape");
                let mask_name = self.constant_tensor("crop_mask", mask());
                let max = self.constant("crop_unbounded", &[i64::MAX]);
                let ends = self.op("Where", &[&mask_name, &shape, &max], vec![], "crop_ends");
                shape_and_mask = Some((shape, mask_name));
                ends
            }
        };
        // With ends computed at run time, `Slice`'s shape function knows the rank only: the
        // cropped dims are the indices' on every axis but `axis`, which keeps the data's.
        let mut dims = index_dims.to_vec();
        dims[axis] = data_dims[axis].clone();
        let out = self.fresh("cropped");
        let slice = self.node_name("Slice_crop");
        self.push_knowing(
            Node::new(
                "Slice",
                &slice,
                [data.to_owned(), starts, ends],
                [out.clone()],
            ),
            Some(&dims),
        );
        if !check {
            return out;
        }
        let (shape, mask_name) = match shape_and_mask {
            Some(pair) => pair,
            None => (
                self.op("Shape", &[indices], vec![], "indices_shape"),
                self.constant_tensor("crop_mask", mask()),
            ),
        };
        let cropped = self.op("Shape", &[&out], vec![], "cropped_shape");
        let sizes = self.op(
            "Where",
            &[&mask_name, &shape, &cropped],
            vec![],
            "checked_sizes",
        );
        self.op_knowing("Reshape", &[&out, &sizes], vec![], "checked", Some(&dims))
    }

    /// `GatherND` indices whose batch dims are checked against the data's at run time where
    /// they are not known to be equal: one `Reshape` per such dim `j` to
    /// `Shape(data)[..=j] ++ Shape(indices)[j+1..]`, which keeps the element count only when the
    /// sizes at `j` agree (the dims before `j` being equal already). Without it, indices with a
    /// batch size of 1 would broadcast against the data's, where the original fails.
    fn check_batch_dims(
        &mut self,
        data: &str,
        data_dims: &[Dim],
        indices: &str,
        index_dims: &[Dim],
        batch: usize,
    ) -> (String, Vec<Dim>) {
        let mut dims = index_dims.to_vec();
        let unproven: Vec<usize> = (0..batch.min(data_dims.len()).min(dims.len()))
            .filter(|&j| !proven_equal(&data_dims[j], &index_dims[j]))
            .collect();
        if unproven.is_empty() {
            return (indices.to_owned(), dims);
        }
        let data_shape = self.op("Shape", &[data], vec![], "data_shape");
        let index_shape = self.op("Shape", &[indices], vec![], "indices_shape");
        let zero = self.constant("batch_start", &[0]);
        let end = self.constant("batch_unbounded", &[i64::MAX]);
        let mut checked = indices.to_owned();
        for j in unproven {
            let cut = self.constant(&format!("batch{j}_end"), &[j as i64 + 1]);
            let head = self.op("Slice", &[&data_shape, &zero, &cut], vec![], "data_batch");
            let tail = self.op("Slice", &[&index_shape, &cut, &end], vec![], "indices_rest");
            let sizes = self.op(
                "Concat",
                &[&head, &tail],
                vec![("axis", AttrValue::Int(0))],
                "checked_sizes",
            );
            if !matches!(data_dims[j], Dim::Unknown) {
                dims[j] = data_dims[j].clone();
            }
            checked = self.op_knowing(
                "Reshape",
                &[&checked, &sizes],
                vec![],
                "indices_checked",
                Some(&dims),
            );
        }
        (checked, dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_is_needed_unless_sizes_are_known_equal() {
        let s = |x: &str| Dim::Symbolic(x.into());
        // A shared name is a declaration, not a proof of a size.
        assert!(needs_crop(
            &[s("B"), Dim::Known(5)],
            &[s("B"), Dim::Known(2)],
            1
        ));
        assert!(!needs_crop(
            &[Dim::Known(3), Dim::Known(5)],
            &[Dim::Known(3), Dim::Known(2)],
            1
        ));
        assert!(needs_crop(
            &[Dim::Unknown, Dim::Known(5)],
            &[Dim::Unknown, Dim::Known(2)],
            1
        ));
    }

    #[test]
    fn sizes_are_checked_where_a_data_size_of_one_could_broadcast() {
        let s = |x: &str| Dim::Symbolic(x.into());
        let k = Dim::Known;
        // The data's size could be 1 while the indices' is larger.
        assert!(needs_size_check(&[s("N"), k(5)], &[s("M"), k(2)], 1));
        assert!(needs_size_check(&[k(1), k(5)], &[s("M"), k(2)], 1));
        // A data size of 2 or more cannot broadcast; known sizes are checked statically; empty
        // indices hold nothing to check.
        assert!(!needs_size_check(&[k(3), k(5)], &[s("M"), k(2)], 1));
        assert!(!needs_size_check(&[k(1), k(5)], &[k(1), k(2)], 1));
        assert!(!needs_size_check(&[s("N"), k(5)], &[k(0), k(2)], 1));
    }
}
