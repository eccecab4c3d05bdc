//! The `LowerMultiaxis` pass: every `multigather.GatherMultiaxis` node becomes standard ONNX
//! operators, so a rewritten model runs on any ONNX runtime again.
//!
//! Each dimension `d` of a node's operands (input `X`, logical indices `L`, see
//! [`crate::gather`]) has a *role*, read off the static types:
//!
//! - *axis*: `d` is in `axes`;
//! - *unit*: `X[d]` and `L[d]` are both known to be 1;
//! - *input*: `L[d]` is known to be 1: the output copies the input's extent (a block dimension);
//! - *index*: `X[d]` is known to be 1 and `L[d]` is not: the output takes the indices' extent;
//! - *batch*: neither is known to be 1: input and indices share the dimension, broadcasting
//!   at run time (`Expand`) unless the sizes are provably equal.
//!
//! The cheapest rule that fits the roles is chosen (`A` = axes, `k = len(A)`, `a` = the axis when
//! `k = 1`; `?` marks a step that is left out when it would change nothing):
//!
//! ```text
//! broadcast   k = 0
//!   GatherMultiaxis(X, I, axes=[])  ==>  Expand(X, Shape(I))                  (Identity when X already has the output shape)
//! blocks      k = 1, no batch dim
//!   GatherMultiaxis(X, I, axes=[a]) ==>  Transpose?(Gather(Squeeze?(X, index dims), Squeeze?(I, input and unit dims), axis=a'))
//! elements    k = 1, only batch and unit dims
//!   GatherMultiaxis(X, I, axes=[a]) ==>  GatherElements(Expand?(X, L's batch sizes), Expand?(I, X's batch sizes), axis=a)
//! nd          otherwise
//!   GatherMultiaxis(X, I, axes=A)   ==>  Transpose?(GatherND(
//!                                          Transpose?(Expand?(Squeeze?(X, index dims))),                    to [batch, A, input]
//!                                          Transpose?(Expand?(Squeeze?(Gather?(Split(I), coordinate order), input dims))),  to [batch, index|A, k]
//!                                          batch_dims=#batch))
//! ```
//!
//! where `a'` is `a`'s position once the index dims are squeezed away, and
//! `Split(I) = Reshape(I, L + [k])` unfolds the coordinate tuples from the last indices dimension
//! (left out when the last dimension is an input dimension: then `I`'s last dimension holds exactly
//! one tuple and serves as GatherND's coordinate dimension). GatherND wants the coordinates in the
//! order of the data's dimensions: when the data needs no transpose its axes are in ascending
//! order and the (small) coordinate dimension is permuted instead (`Gather?`); when it does, the
//! transpose puts the axes in coordinate order. A squeeze that undoes an `Unsqueeze` / `Reshape`
//! of the graph reads that node's input instead, so `Lower(Rewrite(Gather))` is the original
//! `Gather` again.
//!
//! Indices in `[-d, d-1]` need nothing: `Gather`, `GatherElements` and `GatherND` count negative
//! indices from the end, which is mode `error`. The other modes adjust the indices first (cast to
//! int64), with `D = Gather(Shape(X), A)` the axis sizes (a constant when they are known) and
//! `ok = And(Not(Less(I, -D)), Less(I, D))` (each coordinate in range):
//!
//! ```text
//! clamp            I ==> Max(Min(I, D-1), -D)                   (opset >= 12; Where(Less) before)
//! zero, float data X ==> Pad(X, one zero slot after each axis)
//!                  I ==> J + D·(J < 0), J = Where(ok, I, D)     (out of range reads the zero slot)
//! zero, other data I ==> Where(ok, I, 0)
//!                  output ==> Where(ok for the whole tuple, output, zero)   (And for bool)
//! ```
//!
//! Design note: floating-point data is padded rather than masked because onnxruntime's `Where`
//! does not keep the sign of a selected `-0.0`; `Pad` copies bits. Padding also serves empty axes
//! (`D = 0`), which masking cannot: there index 0 is out of range too, and the runtime refuses it
//! where the operator gives zeros.
//!
//! Nodes whose operands have unknown ranks, whose element type no standard gather accepts (float8,
//! the packed 2/4/6-bit types; bfloat16 before opset 13), or whose rule needs a newer opset
//! (`GatherElements` and `GatherND` 11, `GatherND` with batch dimensions 12, modes `zero` and
//! `clamp` 9) are left as they are and reported with the reason. Before opset 12, one axis with
//! batch and block dimensions takes the `elements` rule over operands expanded to the output's
//! shape instead of `nd`, so a model that held a standard gather at its opset lowers at it. When no `GatherMultiaxis` is
//! left anywhere, the `multigather` opset import goes, from the model and from every function.
//!
//! The files, by concern: `roles.rs` (each dimension's role and the pattern the roles choose),
//! `patterns.rs` (the four patterns), `modes.rs` (the index adjustments of `clamp` and `zero`),
//! `vals.rs` (the typed builder of the shape operations around them); this file holds the pass,
//! its report, the support checks and `lower_node`, which `DefineMultiaxisFunctions` shares.

mod modes;
mod patterns;
mod roles;
mod target;
mod vals;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use self::roles::{choose, grows, roles, Role};
use super::emit::{Emitter, Replacement};
use super::gather_to_multiaxis::uses_domain;
use super::walk::{walk, Change, Rule, Site};
use super::{NodeOutcome, NodeReport, Pass};
use crate::error::{Error, Result};
use crate::gather::{GatherSpec, OutOfRange, DOMAIN, OP_TYPE};
use crate::infer::TypeEnv;
use crate::ir::{Dim, Graph, Model, Node, TensorType, UniqueNames};
use crate::ops::is_multiaxis;
use crate::ops::{gather_multiaxis_dims, logical_indices_dims};
use crate::DataType;

/// The rule a node was lowered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// No axes: `Expand` (or `Identity`).
    Broadcast,
    /// One axis, block dimensions only: `Gather`.
    Blocks,
    /// One axis, shared dimensions only (or any dimensions before opset 12):
    /// `GatherElements`.
    Elements,
    /// Everything else: `GatherND` with batch dimensions.
    Nd,
}

impl Pattern {
    /// The pattern's name and the standard op it lowers to.
    pub fn describe(self) -> &'static str {
        match self {
            Pattern::Broadcast => "broadcast (Expand)",
            Pattern::Blocks => "block gather (Gather)",
            Pattern::Elements => "element gather (GatherElements)",
            Pattern::Nd => "multi-axis gather (GatherND)",
        }
    }
}

/// The pass's report: per node, and counts by pattern.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LowerReport {
    pub lowered: usize,
    pub skipped: usize,
    pub by_pattern: BTreeMap<Pattern, usize>,
    pub nodes: Vec<NodeReport>,
    /// Whether the `multigather` opset import was removed (nothing of the domain is left).
    pub removed_import: bool,
}

impl LowerReport {
    /// A human summary: one line of counts, one per pattern, then one per skipped node.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "lowered {} GatherMultiaxis node(s), skipped {}",
            self.lowered, self.skipped
        );
        for (pattern, n) in &self.by_pattern {
            s.push_str(&format!("\n  {}: {n}", pattern.describe()));
        }
        for n in &self.nodes {
            if let NodeOutcome::Skipped { reason } = &n.outcome {
                s.push_str(&format!(
                    "\n  skipped '{}' in {}: {reason}",
                    n.node, n.scope
                ));
            }
        }
        if self.skipped > 0 {
            s.push_str("\n  the multigather opset import stays: GatherMultiaxis nodes remain");
        }
        s
    }
}

/// The pass. See the module documentation.
///
/// # Example
/// ```
/// use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::pass::{LowerMultiaxis, PassManager};
/// use multigather::DataType;
///
/// let known = |d: &[i64]| d.iter().map(|&n| Dim::Known(n)).collect::<Vec<_>>();
/// let mut g = Graph::new("main");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, known(&[4, 3]))));
/// g.inputs.push(ValueInfo::new("i", Type::tensor(DataType::Int64, known(&[4, 2]))));
/// g.outputs.push(ValueInfo::untyped("y"));
/// g.add_node(
///     Node::new("GatherMultiaxis", "pick", ["x", "i"], ["y"])
///         .with_domain("multigather")
///         .with_attr("axes", AttrValue::Ints(vec![1])),
/// );
/// let mut model = Model::new(g, 13);
/// model.ensure_opset("multigather", 1);
///
/// let report = LowerMultiaxis::lower(&mut model)?;
/// assert_eq!(report.lowered, 1);
/// assert_eq!(model.op_histogram().get("GatherElements"), Some(&1));
/// assert_eq!(model.opset("multigather"), None);
/// # Ok::<(), multigather::Error>(())
/// ```
#[derive(Default)]
pub struct LowerMultiaxis {
    config: LowerConfig,
    report: LowerReport,
}

/// How [`LowerMultiaxis`] lowers.
#[derive(Clone, Debug, Default)]
pub struct LowerConfig {
    /// The default-domain opset of the lowered model (`None`: the model's own). The lowering
    /// chooses among the gathers that exist there; the pass fails, naming the node, when a
    /// `GatherMultiaxis` cannot be lowered at it or another node of the model's graphs does not
    /// mean the same there (its operator's definition or types change between the two opsets;
    /// converting such nodes is `onnx.version_converter`'s job). Model-local functions keep
    /// their own imports.
    pub target_opset: Option<i64>,
}

impl LowerMultiaxis {
    /// A pass that lowers at the model's own opset.
    pub fn new() -> LowerMultiaxis {
        LowerMultiaxis::with_config(LowerConfig::default())
    }

    /// A pass with the given configuration.
    pub fn with_config(config: LowerConfig) -> LowerMultiaxis {
        LowerMultiaxis {
            config,
            report: LowerReport::default(),
        }
    }

    /// The report of the last run.
    pub fn report(&self) -> &LowerReport {
        &self.report
    }

    /// Runs the pass alone through a [`super::PassManager`] (so the result is validated) and
    /// returns its report.
    pub fn lower(model: &mut Model) -> Result<LowerReport> {
        LowerMultiaxis::lower_with(model, LowerConfig::default())
    }

    /// [`LowerMultiaxis::lower`] with a configuration.
    ///
    /// # Example
    /// A `GatherMultiaxis` of one axis in an opset-13 model, lowered for opset 11:
    /// ```
    /// use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
    /// use multigather::pass::{LowerConfig, LowerMultiaxis};
    /// use multigather::DataType;
    ///
    /// let known = |d: &[i64]| d.iter().map(|&n| Dim::Known(n)).collect::<Vec<_>>();
    /// let mut g = Graph::new("main");
    /// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, known(&[4, 3]))));
    /// g.inputs.push(ValueInfo::new("i", Type::tensor(DataType::Int64, known(&[4, 2]))));
    /// g.outputs.push(ValueInfo::untyped("y"));
    /// g.add_node(
    ///     Node::new("GatherMultiaxis", "pick", ["x", "i"], ["y"])
    ///         .with_domain("multigather")
    ///         .with_attr("axes", AttrValue::Ints(vec![1])),
    /// );
    /// let mut model = Model::new(g, 13);
    /// model.ensure_opset("multigather", 1);
    /// let config = LowerConfig { target_opset: Some(11) };
    /// LowerMultiaxis::lower_with(&mut model, config)?;
    /// assert_eq!(model.opset(""), Some(11));
    /// assert_eq!(model.op_histogram().get("GatherElements"), Some(&1));
    ///
    /// // GatherElements does not exist at opset 10.
    /// let mut again = model.clone();
    /// let config = LowerConfig { target_opset: Some(10) };
    /// let error = LowerMultiaxis::lower_with(&mut again, config).unwrap_err();
    /// assert!(error.to_string().contains("(GatherElements) in main: the operator does not exist at opset 10"), "{error}");
    /// # Ok::<(), multigather::Error>(())
    /// ```
    pub fn lower_with(model: &mut Model, config: LowerConfig) -> Result<LowerReport> {
        let mut pass = LowerMultiaxis::with_config(config);
        super::run_alone(&mut pass, model)?;
        Ok(pass.report)
    }
}

impl Pass for LowerMultiaxis {
    fn name(&self) -> &'static str {
        "LowerMultiaxis"
    }

    fn run(&mut self, model: &mut Model) -> Result<bool> {
        self.report = LowerReport::default();
        let retarget = match self.config.target_opset {
            Some(to) => Some(retarget(model, to)?),
            None => None,
        };
        let total = walk(
            model,
            &mut Lowering {
                report: &mut self.report,
            },
        )?;
        let left =
            uses_domain(&model.graph) || model.functions.iter().any(|f| uses_domain(&f.body));
        if !left {
            // A model-local definition of the operator has no callers any more.
            model
                .functions
                .retain(|f| !is_multiaxis(&f.domain, &f.name));
            let before = model.opset_imports.len();
            model.opset_imports.retain(|o| o.domain() != DOMAIN);
            self.report.removed_import = model.opset_imports.len() != before;
            for f in &mut model.functions {
                f.opset_imports.retain(|o| o.domain() != DOMAIN);
            }
        }
        if let Some(blocked) = retarget {
            check_retargeted(model, &self.report, blocked)?;
        }
        Ok(total > 0 || self.report.removed_import || self.config.target_opset.is_some())
    }
}

/// The newest default-domain opset a lowering may target: the newest schema version known.
fn newest_opset() -> i64 {
    crate::ops::constraints::newest_version("")
}

/// Checks which nodes keep their meaning at opset `to` (see `target.rs`) and makes `to` the
/// model's default-domain import; returns the nodes that do not, for [`check_retargeted`].
fn retarget(model: &mut Model, to: i64) -> Result<Vec<target::Blocked>> {
    let newest = newest_opset();
    if !(1..=newest).contains(&to) {
        return Err(Error::Unsupported(format!(
            "target opset {to}: the default domain has opsets 1 to {newest}"
        )));
    }
    let from = model.opset("").unwrap_or(1);
    let mut check = target::AtTarget {
        from,
        to,
        blocked: Vec::new(),
    };
    walk(model, &mut check)?;
    match model
        .opset_imports
        .iter_mut()
        .find(|o| crate::ir::canonical_domain(o.domain()).is_empty())
    {
        Some(import) => import.version = to,
        None => model.opset_imports.push(crate::ir::OpsetImport {
            domain: None,
            version: to,
        }),
    }
    Ok(check.blocked)
}

/// After a lowering to another opset: an error naming the first node that could not be
/// lowered there, or the first node that was already in the model and does not mean the same
/// there (one the lowering did not remove).
fn check_retargeted(
    model: &Model,
    report: &LowerReport,
    blocked: Vec<target::Blocked>,
) -> Result<()> {
    let to = model.opset("").unwrap_or(1);
    if let Some((node, reason)) = report.nodes.iter().find_map(|n| match &n.outcome {
        NodeOutcome::Skipped { reason } => Some((n, reason)),
        _ => None,
    }) {
        return Err(Error::Unsupported(format!(
            "cannot lower to opset {to}: node '{}' ({}) in {}: {reason}",
            node.node, node.op, node.scope
        )));
    }
    let mut kept = std::collections::HashSet::new();
    collect_outputs(&model.graph, &mut kept);
    match blocked
        .into_iter()
        .find(|b| kept.contains(&(b.output.as_str(), b.op.as_str())))
    {
        Some(b) => Err(Error::Unsupported(format!(
            "cannot lower to opset {to}: {}",
            b.why
        ))),
        None => Ok(()),
    }
}

/// The first output and op type of every node of `graph` and its subgraphs.
fn collect_outputs<'g>(graph: &'g Graph, out: &mut std::collections::HashSet<(&'g str, &'g str)>) {
    for node in graph.nodes_unordered() {
        if let Some(first) = node.outputs.first() {
            out.insert((first.as_str(), node.op_type.as_str()));
        }
        for sub in node.subgraphs() {
            collect_outputs(sub, out);
        }
    }
}

/// The per-node rule of the pass.
struct Lowering<'a> {
    report: &'a mut LowerReport,
}

impl Rule for Lowering<'_> {
    fn visit(&mut self, site: &Site<'_>) -> crate::Result<Option<Change>> {
        let node = site.node;
        if !is_multiaxis(&node.domain, &node.op_type) {
            return Ok(None);
        }
        let label = node.label();
        let lowered = lower_node(node, &label, site, &mut site.names.borrow_mut());
        let (outcome, change) = match lowered {
            Ok(lowered) => {
                self.report.lowered += 1;
                *self.report.by_pattern.entry(lowered.pattern).or_default() += 1;
                let into = lowered
                    .replacement
                    .nodes
                    .iter()
                    .map(Node::qualified_op)
                    .collect();
                let (value, ty) = lowered.output;
                let change = Change::from_replacement(lowered.replacement)
                    .with_output_type(value, ty)
                    .pruning_inputs();
                (NodeOutcome::Rewritten { into }, Some(change))
            }
            Err(reason) => (NodeOutcome::Skipped { reason }, None),
        };
        let r = &mut *self.report;
        record(&mut r.nodes, &mut r.skipped, label, site.scope, outcome);
        Ok(change)
    }

    fn skip(&mut self, node: &Node, scope: &str, reason: &str) {
        if is_multiaxis(&node.domain, &node.op_type) {
            let skipped = NodeOutcome::Skipped {
                reason: reason.to_owned(),
            };
            let r = &mut *self.report;
            record(&mut r.nodes, &mut r.skipped, node.label(), scope, skipped);
        }
    }
}

/// Records what became of a `GatherMultiaxis` node (`label`, in `scope`) in a report's node list,
/// counting it in `skipped` when it was skipped: the lowering and the function definitions
/// report their nodes alike.
pub(super) fn record(
    nodes: &mut Vec<NodeReport>,
    skipped: &mut usize,
    label: String,
    scope: &str,
    outcome: NodeOutcome,
) {
    if matches!(outcome, NodeOutcome::Skipped { .. }) {
        *skipped += 1;
    }
    nodes.push(NodeReport {
        node: label,
        op: OP_TYPE.to_owned(),
        scope: scope.to_owned(),
        outcome,
    });
}

/// A value of the replacement, with its type.
#[derive(Clone, Debug)]
struct Val {
    name: String,
    elem: DataType,
    dims: Vec<Dim>,
}

/// What a dimension of an intermediate tensor stands for: a dimension of the operands / output
/// (by position), or GatherND's coordinate dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    Dim(usize),
    Coord,
}

/// One node's lowering.
pub(super) struct Lowered {
    pub pattern: Pattern,
    pub replacement: Replacement,
    /// The node's output and its type.
    pub output: (String, TensorType),
}

type Reason = std::result::Result<(), String>;

/// Builds the replacement of one `GatherMultiaxis` node, or says why it cannot.
pub(super) fn lower_node(
    node: &Node,
    label: &str,
    site: &Site,
    names: &mut UniqueNames,
) -> std::result::Result<Lowered, String> {
    let (x, i) = match node.inputs.as_slice() {
        [x, i] if !x.is_empty() && !i.is_empty() => (x.as_str(), i.as_str()),
        other => return Err(format!("expected 2 inputs, found {}", other.len())),
    };
    let output = match node.outputs.as_slice() {
        [o] if !o.is_empty() => o.as_str(),
        other => return Err(format!("expected 1 output, found {}", other.len())),
    };
    let attrs = crate::ops::multiaxis_attributes(node).map_err(|e| e.to_string())?;
    let (x, i) = operands(site.env, x, i)?;
    let spec = attrs.spec(x.dims.len()).map_err(|e| e.to_string())?;
    if !i.elem.is_index() {
        return Err(format!(
            "indices '{}' are {}, not int32 or int64",
            i.name, i.elem
        ));
    }
    let k = spec.axes.len();
    if let (Some(Dim::Known(last)), true) = (i.dims.last(), k > 1) {
        if *last % k as i64 != 0 {
            return Err(format!(
                "the last indices dimension {last} is not a multiple of the coordinate size {k}"
            ));
        }
    }
    let logical = logical_indices_dims(&i.dims, k);
    let roles = roles(&x.dims, &logical, &spec.axes);
    for (d, role) in roles.iter().enumerate() {
        if let (Role::Batch, Dim::Known(a), Dim::Known(b)) = (role, &x.dims[d], &logical[d]) {
            if a != b {
                return Err(format!(
                    "dimension {d} does not broadcast: input has {a}, logical indices have {b}"
                ));
            }
        }
    }
    let pattern = choose(&roles, k, site.opset);
    if pattern == Pattern::Broadcast && grows(&x.dims, &logical) && site.opset < 8 {
        return Err(format!(
            "Expand needs opset 8; the graph imports opset {}",
            site.opset
        ));
    }
    check_support(pattern, &roles, &spec, x.elem, site.opset)?;

    let out_dims = gather_multiaxis_dims(&x.dims, &i.dims, &spec.axes);
    let pad_zero = spec.mode == OutOfRange::Zero
        && pattern != Pattern::Broadcast
        && matches!(
            x.elem,
            DataType::Float | DataType::Float16 | DataType::Double | DataType::Bfloat16
        );
    // The rewrite names its node `<gather>/GatherMultiaxis`; the lowering's names derive from
    // `<gather>` again.
    let base = label
        .strip_suffix(OP_TYPE)
        .and_then(|b| b.strip_suffix('/'))
        .unwrap_or(label);
    let mut l = Lowerer {
        e: site.emitter(base, names),
        graph: site.graph,
        env: site.env,
        shapes: HashMap::new(),
        reshapes: HashMap::new(),
        one: None,
        spec: &spec,
        x: x.clone(),
        pad_zero,
        roles: &roles,
        logical: &logical,
        out_dims: &out_dims,
    };
    l.e.know(&x.name, x.elem, &x.dims);
    l.e.know(&i.name, i.elem, &i.dims);
    let data = if pad_zero { l.pad_axes(&x) } else { x.clone() };
    let result = match pattern {
        Pattern::Broadcast => l.broadcast(&data, &i),
        Pattern::Blocks => l.blocks(&data, &i),
        Pattern::Elements => l.elements(&data, &i),
        Pattern::Nd => l.nd(&data, &i),
    };
    let elem = x.elem;
    l.e.rename_result(&result.name, output);
    // What a later step made redundant (a reshape read through, a size not needed).
    l.e.prune(&[output]);
    Ok(Lowered {
        pattern,
        replacement: l.e.finish(),
        output: (output.to_owned(), TensorType::new(elem, out_dims)),
    })
}

/// The typed operands. The ranks are equal by the operator's definition, so one known rank
/// gives the other (with unknown sizes).
fn operands(env: &TypeEnv, x: &str, i: &str) -> std::result::Result<(Val, Val), String> {
    let elem = |name: &str| {
        env.get(name)
            .and_then(|t| t.elem)
            .ok_or_else(|| format!("the element type of '{name}' is unknown"))
    };
    let (x_elem, i_elem) = (elem(x)?, elem(i)?);
    let (x_dims, i_dims) = match (env.dims(x), env.dims(i)) {
        (Some(a), Some(b)) if a.len() != b.len() => {
            return Err(format!(
                "input '{x}' has rank {} but indices '{i}' have rank {}",
                a.len(),
                b.len()
            ))
        }
        (Some(a), Some(b)) => (a.to_vec(), b.to_vec()),
        (Some(a), None) => (a.to_vec(), vec![Dim::Unknown; a.len()]),
        (None, Some(b)) => (vec![Dim::Unknown; b.len()], b.to_vec()),
        (None, None) => return Err(format!("the ranks of '{x}' and '{i}' are unknown")),
    };
    let val = |name: &str, elem, dims| Val {
        name: name.to_owned(),
        elem,
        dims,
    };
    Ok((val(x, x_elem, x_dims), val(i, i_elem, i_dims)))
}

/// Whether the standard ops of `pattern` exist at `opset` for these operands.
fn check_support(
    pattern: Pattern,
    roles: &[Role],
    spec: &GatherSpec,
    elem: DataType,
    opset: i64,
) -> Reason {
    let need = |min: i64, what: &str| -> Reason {
        if opset >= min {
            Ok(())
        } else {
            Err(format!(
                "{what} needs opset {min}; the graph imports opset {opset}"
            ))
        }
    };
    match pattern {
        Pattern::Broadcast | Pattern::Blocks => {}
        Pattern::Elements => need(11, "GatherElements")?,
        Pattern::Nd if roles.contains(&Role::Batch) => need(12, "GatherND with batch dimensions")?,
        Pattern::Nd => need(11, "GatherND")?,
    }
    if spec.mode != OutOfRange::Error && pattern != Pattern::Broadcast {
        need(9, &format!("mode '{}' (Where, Less)", spec.mode.name()))?;
    }
    use DataType::*;
    match elem {
        Float | Uint8 | Int8 | Uint16 | Int16 | Int32 | Int64 | String | Bool | Float16
        | Double | Uint32 | Uint64 | Complex64 | Complex128 => Ok(()),
        Bfloat16 => need(13, "bfloat16 data"),
        other => Err(format!(
            "no standard ONNX gather accepts element type {other}"
        )),
    }
}

/// Builds one lowering: the emitter plus what the rules read.
struct Lowerer<'a, 'e> {
    e: Emitter<'e>,
    graph: &'a Graph,
    env: &'a TypeEnv<'a>,
    /// `Shape` values already emitted, by the value they measure.
    shapes: HashMap<String, String>,
    /// Values built here that only reshape another value, by name.
    reshapes: HashMap<String, Val>,
    /// The constant `[1]`, once built.
    one: Option<String>,
    spec: &'a GatherSpec,
    /// The node's input (before any padding).
    x: Val,
    /// Mode `zero` on floating-point data: gather from the input padded with a zero slot.
    pad_zero: bool,
    roles: &'a [Role],
    logical: &'a [Dim],
    out_dims: &'a [Dim],
}

#[cfg(test)]
mod tests {
    use super::vals::zero_scalar;
    use super::*;
    use crate::ir::Payload;

    #[test]
    fn roles_and_patterns() {
        let k = |v: &[i64]| v.iter().map(|&n| Dim::Known(n)).collect::<Vec<_>>();
        let n = Dim::Symbolic("n".into());
        use Role::*;
        // The rewrite of Gather(data[4,3], idx[2,5], axis=0): input [4,1,3], indices [2,5,1].
        let r = roles(&k(&[4, 1, 3]), &k(&[2, 5, 1]), &[0]);
        assert_eq!(r, [Axis, Index, Input]);
        assert_eq!(choose(&r, 1, 13), Pattern::Blocks);
        // GatherElements with symbolic batch.
        let r = roles(
            &[n.clone(), Dim::Known(5)],
            &[n.clone(), Dim::Known(2)],
            &[1],
        );
        assert_eq!(r, [Batch, Axis]);
        assert_eq!(choose(&r, 1, 13), Pattern::Elements);
        // GatherND with a batch dim and a trailing block.
        let r = roles(
            &[n.clone(), Dim::Known(10), Dim::Known(4)],
            &[n, Dim::Unknown, Dim::Known(1)],
            &[1],
        );
        assert_eq!(r, [Batch, Axis, Input]);
        assert_eq!(choose(&r, 1, 13), Pattern::Nd);
        // The same before GatherND has batch dimensions.
        assert_eq!(choose(&r, 1, 11), Pattern::Elements);
        // Both known 1.
        assert_eq!(roles(&k(&[1, 3]), &k(&[1, 2]), &[1]), [Unit, Axis]);
        assert_eq!(choose(&[Unit, Unit], 0, 13), Pattern::Broadcast);
    }

    #[test]
    fn zero_scalars_have_one_element() {
        assert_eq!(
            zero_scalar(DataType::Float16).le_bytes().unwrap().as_ref(),
            &[0, 0]
        );
        assert_eq!(
            zero_scalar(DataType::String).payload,
            Payload::String(vec![Vec::new()])
        );
        assert_eq!(zero_scalar(DataType::Bool).element_count().unwrap(), 1);
    }
}
