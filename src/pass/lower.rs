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
//! `clamp` 9) are left as they are and reported with the reason. When no `GatherMultiaxis` is
//! left anywhere, the `multigather` opset import goes, from the model and from every function.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde::Serialize;

use super::emit::{all_known, reshape_takes, Constants, Emitter, Replacement};
use super::gather_to_multiaxis::uses_domain;
use super::walk::{label, walk, Change, Rule, Site};
use super::{NodeOutcome, NodeReport, Pass};
use crate::error::Result;
use crate::gather::{GatherSpec, OutOfRange, DOMAIN, OP_TYPE};
use crate::infer::TypeEnv;
use crate::ir::{broadcast_dim, is_onnx_domain, same_dim};
use crate::ir::{
    AttrValue, Dim, Graph, Model, Node, Payload, StoredTensor, TensorType, UniqueNames,
};
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
    /// One axis, shared dimensions only: `GatherElements`.
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
    report: LowerReport,
}

impl LowerMultiaxis {
    /// A pass.
    pub fn new() -> LowerMultiaxis {
        LowerMultiaxis::default()
    }

    /// The report of the last run.
    pub fn report(&self) -> &LowerReport {
        &self.report
    }

    /// Runs the pass through a [`super::PassManager`] (so the result is validated) and returns
    /// its report.
    pub fn lower(model: &mut Model) -> Result<LowerReport> {
        let mut pass = LowerMultiaxis::new();
        super::PassManager::new().run(model, &mut [&mut pass])?;
        Ok(pass.report)
    }
}

impl Pass for LowerMultiaxis {
    fn name(&self) -> &'static str {
        "LowerMultiaxis"
    }

    fn run(&mut self, model: &mut Model) -> Result<bool> {
        self.report = LowerReport::default();
        let total = walk(
            model,
            &mut Lowering {
                report: &mut self.report,
            },
        );
        let left =
            uses_domain(&model.graph) || model.functions.iter().any(|f| uses_domain(&f.body));
        if !left {
            // A model-local definition of the operator has no callers any more.
            model
                .functions
                .retain(|f| !(f.domain == DOMAIN && f.name == OP_TYPE));
            let before = model.opset_imports.len();
            model.opset_imports.retain(|o| o.domain() != DOMAIN);
            self.report.removed_import = model.opset_imports.len() != before;
            for f in &mut model.functions {
                f.opset_imports.retain(|o| o.domain() != DOMAIN);
            }
        }
        Ok(total > 0 || self.report.removed_import)
    }
}

/// The per-node rule of the pass.
struct Lowering<'a> {
    report: &'a mut LowerReport,
}

impl Rule for Lowering<'_> {
    fn visit(&mut self, node: &Node, site: &Site, names: &mut UniqueNames) -> Option<Change> {
        if node.domain != DOMAIN || node.op_type != OP_TYPE {
            return None;
        }
        let label = label(node);
        let (outcome, change) = match lower_node(node, &label, site, names) {
            Ok(lowered) => {
                self.report.lowered += 1;
                *self.report.by_pattern.entry(lowered.pattern).or_default() += 1;
                let into = lowered
                    .replacement
                    .nodes
                    .iter()
                    .map(Node::qualified_op)
                    .collect();
                let change = Change {
                    replacement: lowered.replacement,
                    output_types: vec![lowered.output],
                    prune_inputs: true,
                };
                (NodeOutcome::Rewritten { into }, Some(change))
            }
            Err(reason) => {
                self.report.skipped += 1;
                (NodeOutcome::Skipped { reason }, None)
            }
        };
        self.report.nodes.push(NodeReport {
            node: label,
            op: OP_TYPE.to_owned(),
            scope: site.scope.to_owned(),
            outcome,
        });
        change
    }

    fn skip(&mut self, node: &Node, scope: &str, reason: &str) {
        if node.domain == DOMAIN && node.op_type == OP_TYPE {
            self.report.skipped += 1;
            self.report.nodes.push(NodeReport {
                node: label(node),
                op: OP_TYPE.to_owned(),
                scope: scope.to_owned(),
                outcome: NodeOutcome::Skipped {
                    reason: reason.to_owned(),
                },
            });
        }
    }
}

/// What one dimension is to the gather; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Axis,
    Unit,
    Input,
    Index,
    Batch,
}

/// The roles of every dimension.
fn roles(x: &[Dim], logical: &[Dim], axes: &[usize]) -> Vec<Role> {
    let one = |d: &Dim| d.known() == Some(1);
    x.iter()
        .zip(logical)
        .enumerate()
        .map(
            |(d, (xd, ld))| match (axes.contains(&d), one(xd), one(ld)) {
                (true, _, _) => Role::Axis,
                (false, true, true) => Role::Unit,
                (false, false, true) => Role::Input,
                (false, true, false) => Role::Index,
                (false, false, false) => Role::Batch,
            },
        )
        .collect()
}

/// The cheapest pattern for these roles.
fn choose(roles: &[Role], axis_count: usize) -> Pattern {
    let has = |r: Role| roles.contains(&r);
    match axis_count {
        0 => Pattern::Broadcast,
        1 if !has(Role::Batch) => Pattern::Blocks,
        1 if !has(Role::Input) && !has(Role::Index) => Pattern::Elements,
        _ => Pattern::Nd,
    }
}

/// True unless every dimension of the input provably has its output size already (for
/// `axes = []`).
fn grows(x: &[Dim], logical: &[Dim]) -> bool {
    x.iter()
        .zip(logical)
        .any(|(a, b)| !same_dim(a, b) && b.known() != Some(1))
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
    let axes = node
        .attr_ints("axes")
        .map_err(|e| e.to_string())?
        .ok_or("the required attribute 'axes' is missing")?;
    let mode = node
        .attr_string("mode")
        .map_err(|e| e.to_string())?
        .unwrap_or("error");
    let (x, i) = operands(site.env, x, i)?;
    let spec = GatherSpec::from_attributes(axes, mode, x.dims.len()).map_err(|e| e.to_string())?;
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
    let pattern = choose(&roles, k);
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
    let base = label.strip_suffix("/GatherMultiaxis").unwrap_or(label);
    let mut l = Lowerer {
        e: Emitter::new(base, names, site.opset, site.constants),
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
    env: &'a TypeEnv,
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

impl Lowerer<'_, '_> {
    fn rank(&self) -> usize {
        self.roles.len()
    }

    /// The dims of the operands / output that have one of these roles, in order.
    fn dims_with(&self, roles: &[Role]) -> Vec<usize> {
        (0..self.rank())
            .filter(|&d| roles.contains(&self.roles[d]))
            .collect()
    }

    /// True when some batch dimension may differ between `a` and `b` (so `Expand` is needed).
    fn batch_differs(&self, a: &[Dim], b: &[Dim]) -> bool {
        (0..self.rank()).any(|d| self.roles[d] == Role::Batch && !same_dim(&a[d], &b[d]))
    }

    /// `GatherMultiaxis(X, I, axes=[]) ==> Expand(X, Shape(I))`, or `X` itself when no
    /// dimension of `X` can grow.
    fn broadcast(&mut self, x: &Val, i: &Val) -> Val {
        if !grows(&x.dims, self.logical) {
            return x.clone();
        }
        let shape = self.shape_of(i);
        let name = self.e.op(
            "Expand",
            &[&x.name, &shape],
            vec![],
            "expanded",
            x.elem,
            self.out_dims,
        );
        self.val(name, x.elem, self.out_dims.to_vec())
    }

    /// One axis, no batch dimension: `Gather` on the input without its index dimensions, with
    /// the indices without their input and unit dimensions.
    fn blocks(&mut self, x: &Val, i: &Val) -> Val {
        let axis = self.spec.axes[0];
        let (i, mask) = self.single_axis_modes(i);
        let drop_i = self.dims_with(&[Role::Input, Role::Unit]);
        let drop_x = self.dims_with(&[Role::Index]);
        let i_tags: Vec<usize> = (0..self.rank()).filter(|d| !drop_i.contains(d)).collect();
        let x_tags: Vec<usize> = (0..self.rank()).filter(|d| !drop_x.contains(d)).collect();
        let is = self.squeeze(&i, &drop_i, "indices");
        let xs = self.squeeze(x, &drop_x, "input");
        let pos = x_tags.iter().position(|&d| d == axis).unwrap_or_default();
        let tags: Vec<Tag> = x_tags[..pos]
            .iter()
            .chain(&i_tags)
            .chain(&x_tags[pos + 1..])
            .map(|&d| Tag::Dim(d))
            .collect();
        let dims = self.tag_dims(&tags);
        let name = self.e.op(
            "Gather",
            &[&xs.name, &is.name],
            vec![("axis", AttrValue::Int(pos as i64))],
            "gathered",
            x.elem,
            &dims,
        );
        let gathered = self.val(name, x.elem, dims);
        let out = self.in_output_order(gathered, &tags);
        self.mask_output(out, mask)
    }

    /// One axis, shared dimensions only: `GatherElements` on both operands broadcast to each
    /// other's batch sizes.
    fn elements(&mut self, x: &Val, i: &Val) -> Val {
        let axis = self.spec.axes[0];
        let (i, mask) = self.single_axis_modes(i);
        let batch: Vec<Option<usize>> = (0..self.rank())
            .map(|d| (self.roles[d] == Role::Batch).then_some(d))
            .collect();
        let xe = if self.batch_differs(&x.dims, self.logical) {
            self.expand(x, &i, &batch, "input")
        } else {
            x.clone()
        };
        let ie = if self.batch_differs(&i.dims, &x.dims) {
            self.expand(&i, x, &batch, "indices")
        } else {
            i
        };
        let dims = self.out_dims.to_vec();
        let name = self.e.op(
            "GatherElements",
            &[&xe.name, &ie.name],
            vec![("axis", AttrValue::Int(axis as i64))],
            "gathered",
            x.elem,
            &dims,
        );
        let out = self.val(name, x.elem, dims);
        self.mask_output(out, mask)
    }

    /// The general rule: `GatherND` with the batch dimensions first, the axes next and the
    /// input dimensions last in the data, and the batch dimensions first, the index and axis
    /// dimensions next and the coordinates last in the indices.
    fn nd(&mut self, x: &Val, i: &Val) -> Val {
        let rank = self.rank();
        let k = self.spec.axes.len();
        let batch = self.dims_with(&[Role::Batch]);
        let input = self.dims_with(&[Role::Input, Role::Unit]);
        let index_or_axis = self.dims_with(&[Role::Index, Role::Axis]);

        // Indices: int64 tuples with the coordinates last.
        let mut t = self.cast_to_i64(i);
        let mut mask = None;
        if k == 1 {
            (t, mask) = self.modes(t);
        }
        let fold_free = self.roles[rank - 1] == Role::Input || self.roles[rank - 1] == Role::Unit;
        let mut t_tags: Vec<Tag> = (0..rank).map(Tag::Dim).collect();
        if fold_free {
            // The last dimension holds exactly one tuple: it is the coordinate dimension.
            t_tags[rank - 1] = Tag::Coord;
        } else {
            t = self.split(&t, k);
            t_tags.push(Tag::Coord);
        }
        let split = t.clone();
        if k > 1 {
            let (adjusted, ok) = self.modes(t);
            t = adjusted;
            mask = ok.map(|ok| self.all_coordinates(ok, fold_free));
        }

        // Data: without index dimensions; [batch, axes, input] with the axes in ascending
        // order if that needs no transpose, else in coordinate order.
        let drop_x = self.dims_with(&[Role::Index]);
        let x_tags: Vec<usize> = (0..rank).filter(|d| !drop_x.contains(d)).collect();
        let mut xd = self.squeeze(x, &drop_x, "input");
        let mut sorted_axes = self.spec.axes.clone();
        sorted_axes.sort_unstable();
        let natural: Vec<usize> = batch
            .iter()
            .chain(&sorted_axes)
            .chain(&input)
            .copied()
            .collect();
        let data_axes = if natural == x_tags {
            sorted_axes
        } else {
            self.spec.axes.clone()
        };
        if self.batch_differs(&x.dims, self.logical) {
            // The batch sizes of the logical indices are dims [0, rank) of the split tuples.
            let pick: Vec<Option<usize>> = x_tags
                .iter()
                .map(|&d| (self.roles[d] == Role::Batch).then_some(d))
                .collect();
            xd = self.expand(&xd, &split, &pick, "input");
        }
        let target: Vec<usize> = batch
            .iter()
            .chain(&data_axes)
            .chain(&input)
            .copied()
            .collect();
        let perm: Vec<usize> = target
            .iter()
            .map(|d| x_tags.iter().position(|t| t == d).unwrap_or_default())
            .collect();
        xd = self.transpose(xd, &perm, "input");

        // Coordinates in the data's axis order.
        if data_axes != self.spec.axes {
            let order: Vec<i64> = data_axes
                .iter()
                .map(|a| {
                    self.spec
                        .axes
                        .iter()
                        .position(|b| b == a)
                        .unwrap_or_default() as i64
                })
                .collect();
            let order = self.e.constant("coordinate_order", &order);
            let last = t.dims.len() as i64 - 1;
            let dims = t.dims.clone();
            let name = self.e.op(
                "Gather",
                &[&t.name, &order],
                vec![("axis", AttrValue::Int(last))],
                "coordinates",
                DataType::Int64,
                &dims,
            );
            t = self.val(name, DataType::Int64, dims);
        }
        // Without input dimensions, broadcast over the batch, [batch, index|axis, coordinates].
        let drop_t: Vec<usize> = (0..t_tags.len())
            .filter(|&j| matches!(t_tags[j], Tag::Dim(d) if input.contains(&d)))
            .collect();
        t = self.squeeze(&t, &drop_t, "indices");
        t_tags = t_tags
            .iter()
            .enumerate()
            .filter(|(j, _)| !drop_t.contains(j))
            .map(|(_, &tag)| tag)
            .collect();
        if self.batch_differs(self.logical, &x.dims) {
            let pick: Vec<Option<usize>> = t_tags
                .iter()
                .map(|tag| match tag {
                    Tag::Dim(d) if self.roles[*d] == Role::Batch => Some(*d),
                    _ => None,
                })
                .collect();
            t = self.expand(&t, x, &pick, "indices");
        }
        let t_target: Vec<Tag> = batch
            .iter()
            .chain(&index_or_axis)
            .map(|&d| Tag::Dim(d))
            .chain([Tag::Coord])
            .collect();
        let perm: Vec<usize> = t_target
            .iter()
            .map(|tag| t_tags.iter().position(|t| t == tag).unwrap_or_default())
            .collect();
        t = self.transpose(t, &perm, "indices");

        // The gather, then the output's own dimension order.
        let tags: Vec<Tag> = batch
            .iter()
            .chain(&index_or_axis)
            .chain(&input)
            .map(|&d| Tag::Dim(d))
            .collect();
        let dims = self.tag_dims(&tags);
        let mut attrs = Vec::new();
        if !batch.is_empty() {
            attrs.push(("batch_dims", AttrValue::Int(batch.len() as i64)));
        }
        let name = self.e.op(
            "GatherND",
            &[&xd.name, &t.name],
            attrs,
            "gathered",
            x.elem,
            &dims,
        );
        let gathered = self.val(name, x.elem, dims);
        let out = self.in_output_order(gathered, &tags);
        self.mask_output(out, mask)
    }

    /// Mode adjustments of single-axis indices (every element is a coordinate): returns the
    /// indices to gather with and, in mode `zero`, the in-range mask (the logical indices'
    /// shape).
    fn single_axis_modes(&mut self, i: &Val) -> (Val, Option<Val>) {
        if self.spec.mode == OutOfRange::Error {
            return (i.clone(), None);
        }
        let t = self.cast_to_i64(i);
        self.modes(t)
    }

    /// Mode adjustments of int64 indices whose last dimension holds the coordinates, or whose
    /// every element is a coordinate of the one axis: `clamp` clamps into `[-d, d-1]`,
    /// `zero` replaces what is out of range by 0 and returns the per-element in-range mask.
    fn modes(&mut self, t: Val) -> (Val, Option<Val>) {
        let x = self.x.clone();
        let x = &x;
        let mode = self.spec.mode;
        if mode == OutOfRange::Error {
            return (t, None);
        }
        let axes: Vec<Option<usize>> = self.spec.axes.iter().map(|&a| Some(a)).collect();
        let sizes: Option<Vec<i64>> = self.spec.axes.iter().map(|&a| x.dims[a].known()).collect();
        let k = Dim::Known(axes.len() as i64);
        let (d, hi, lo) = match sizes {
            Some(s) => {
                let hi: Vec<i64> = s.iter().map(|n| n - 1).collect();
                let lo: Vec<i64> = s.iter().map(|n| -n).collect();
                (
                    self.e.constant("axis_sizes", &s),
                    self.e.constant("axis_max", &hi),
                    self.e.constant("axis_min", &lo),
                )
            }
            None => {
                let d = self.dims_vector(x, &axes, "axis_sizes");
                let one = self.one();
                let hi = self.e.op(
                    "Sub",
                    &[&d, &one],
                    vec![],
                    "axis_max",
                    DataType::Int64,
                    std::slice::from_ref(&k),
                );
                let lo = self
                    .e
                    .op("Neg", &[&d], vec![], "axis_min", DataType::Int64, &[k]);
                (d, hi, lo)
            }
        };
        let dims = t.dims.clone();
        let bool_op = |l: &mut Self, op: &str, ins: &[&str], what: &str| {
            l.e.op(op, ins, vec![], what, DataType::Bool, &dims)
        };
        match mode {
            OutOfRange::Clamp => {
                let name = if self.e.opset >= 12 {
                    let upper = self.e.op(
                        "Min",
                        &[&t.name, &hi],
                        vec![],
                        "clamped_above",
                        DataType::Int64,
                        &dims,
                    );
                    self.e.op(
                        "Max",
                        &[&upper, &lo],
                        vec![],
                        "clamped",
                        DataType::Int64,
                        &dims,
                    )
                } else {
                    let above = bool_op(self, "Less", &[&hi, &t.name], "above");
                    let upper = self.e.op(
                        "Where",
                        &[&above, &hi, &t.name],
                        vec![],
                        "clamped_above",
                        DataType::Int64,
                        &dims,
                    );
                    let below = bool_op(self, "Less", &[&upper, &lo], "below");
                    self.e.op(
                        "Where",
                        &[&below, &lo, &upper],
                        vec![],
                        "clamped",
                        DataType::Int64,
                        &dims,
                    )
                };
                (self.val(name, DataType::Int64, dims), None)
            }
            _ => {
                let below = bool_op(self, "Less", &[&t.name, &lo], "below");
                let not_below = bool_op(self, "Not", &[&below], "not_below");
                let under = bool_op(self, "Less", &[&t.name, &d], "under");
                let ok = bool_op(self, "And", &[&not_below, &under], "in_range");
                let zero = self
                    .e
                    .constant_tensor("index_zero", StoredTensor::from_i64s(None, &[], &[0]));
                if self.pad_zero {
                    // Out of range reads the zero slot at coordinate d of the padded input;
                    // negative indices must count from the end explicitly, the padded axis being
                    // one longer.
                    let safe = self.e.op(
                        "Where",
                        &[&ok, &t.name, &d],
                        vec![],
                        "padded_index",
                        DataType::Int64,
                        &dims,
                    );
                    let negative = bool_op(self, "Less", &[&safe, &zero], "negative");
                    let wrapped = self.e.op(
                        "Add",
                        &[&safe, &d],
                        vec![],
                        "wrapped",
                        DataType::Int64,
                        &dims,
                    );
                    let name = self.e.op(
                        "Where",
                        &[&negative, &wrapped, &safe],
                        vec![],
                        "safe",
                        DataType::Int64,
                        &dims,
                    );
                    return (self.val(name, DataType::Int64, dims), None);
                }
                let name = self.e.op(
                    "Where",
                    &[&ok, &t.name, &zero],
                    vec![],
                    "safe",
                    DataType::Int64,
                    &dims,
                );
                let ok = self.val(ok, DataType::Bool, dims.clone());
                (self.val(name, DataType::Int64, dims), Some(ok))
            }
        }
    }

    /// The per-tuple mask from the per-coordinate one: true where every coordinate of the tuple
    /// is in range. Without `keep`, the coordinate dimension goes.
    fn all_coordinates(&mut self, ok: Val, keep: bool) -> Val {
        let last = ok.dims.len() - 1;
        let mut dims = ok.dims.clone();
        if keep {
            dims[last] = Dim::Known(1);
        } else {
            dims.pop();
        }
        let as_int = self.e.op(
            "Cast",
            &[&ok.name],
            vec![("to", AttrValue::Int(DataType::Int64.onnx() as i64))],
            "in_range_int",
            DataType::Int64,
            &ok.dims,
        );
        let keepdims = AttrValue::Int(i64::from(keep));
        let reduced = if self.e.opset >= 18 {
            let axes = self.e.constant("coordinate_axis", &[last as i64]);
            self.e.op(
                "ReduceMin",
                &[&as_int, &axes],
                vec![("keepdims", keepdims)],
                "tuple_in_range_int",
                DataType::Int64,
                &dims,
            )
        } else {
            self.e.op(
                "ReduceMin",
                &[&as_int],
                vec![
                    ("axes", AttrValue::Ints(vec![last as i64])),
                    ("keepdims", keepdims),
                ],
                "tuple_in_range_int",
                DataType::Int64,
                &dims,
            )
        };
        let name = self.e.op(
            "Cast",
            &[&reduced],
            vec![("to", AttrValue::Int(DataType::Bool.onnx() as i64))],
            "tuple_in_range",
            DataType::Bool,
            &dims,
        );
        self.val(name, DataType::Bool, dims)
    }

    /// The input with a zero slot appended to every axis (`Pad`), read by out-of-range indices
    /// in mode `zero` (see the module's design note).
    fn pad_axes(&mut self, x: &Val) -> Val {
        let rank = self.rank();
        let mut pads = vec![0i64; 2 * rank];
        let mut dims = x.dims.clone();
        for &a in &self.spec.axes {
            pads[rank + a] = 1;
            dims[a] = match dims[a] {
                Dim::Known(n) => Dim::Known(n + 1),
                _ => Dim::Unknown,
            };
        }
        let name = if self.e.opset >= 11 {
            let pads = self.e.constant("pads", &pads);
            self.e
                .op("Pad", &[&x.name, &pads], vec![], "padded", x.elem, &dims)
        } else {
            let attrs = vec![("pads", AttrValue::Ints(pads))];
            self.e.op("Pad", &[&x.name], attrs, "padded", x.elem, &dims)
        };
        self.val(name, x.elem, dims)
    }

    /// Mode `zero`: the output where the indices were in range, zero elsewhere (`And` for
    /// booleans).
    fn mask_output(&mut self, out: Val, mask: Option<Val>) -> Val {
        let Some(mask) = mask else {
            return out;
        };
        let name = if out.elem == DataType::Bool {
            self.e.op(
                "And",
                &[&mask.name, &out.name],
                vec![],
                "masked",
                out.elem,
                &out.dims,
            )
        } else {
            let zero = self.e.constant_tensor("zero", zero_scalar(out.elem));
            self.e.op(
                "Where",
                &[&mask.name, &out.name, &zero],
                vec![],
                "masked",
                out.elem,
                &out.dims,
            )
        };
        self.val(name, out.elem, out.dims)
    }

    /// The tuples unfolded from the last dimension: `[..., n*k] -> [..., n, k]`.
    fn split(&mut self, t: &Val, k: usize) -> Val {
        let mut dims = self.logical.to_vec();
        dims.push(Dim::Known(k as i64));
        let rank = t.dims.len();
        if k == 1 {
            return self.unsqueeze(t, &[rank], "tuples");
        }
        let out = self.e.value("tuples", DataType::Int64, &dims);
        let known = |d: &Dim| d.known();
        let mut input = t.name.clone();
        let shape = match (
            dims.iter().map(known).collect::<Option<Vec<i64>>>(),
            t.dims[rank - 1].known(),
        ) {
            (Some(sizes), _) => {
                // A reshape of a reshape reads the first one's input.
                if let Some(y) = self.reshape_source(t) {
                    input = y.name;
                }
                self.e.constant("tuples_shape", &sizes)
            }
            (None, Some(last)) => {
                // `0` copies a dimension; the last two are known.
                let mut spec = vec![0; rank - 1];
                spec.extend([last / k as i64, k as i64]);
                self.e.constant("tuples_shape", &spec)
            }
            (None, None) => {
                // Shape(t) / [1, .., 1, k] ++ [k]: exact even when a dimension is 0, where a
                // `-1` could not be inferred.
                let shape = self.shape_of(t);
                let mut divisor = vec![1; rank];
                divisor[rank - 1] = k as i64;
                let divisor = self.e.constant("tuple_divisor", &divisor);
                let r = Dim::Known(rank as i64);
                let outer = self.e.op(
                    "Div",
                    &[&shape, &divisor],
                    vec![],
                    "tuple_counts",
                    DataType::Int64,
                    &[r],
                );
                let coord = self.e.constant("coordinate_size", &[k as i64]);
                self.e.op(
                    "Concat",
                    &[&outer, &coord],
                    vec![("axis", AttrValue::Int(0))],
                    "tuples_shape",
                    DataType::Int64,
                    &[Dim::Known(rank as i64 + 1)],
                )
            }
        };
        let name = self.e.node_name("Reshape_tuples");
        self.e.nodes.push(Node::new(
            "Reshape",
            &name,
            [input.clone(), shape],
            [out.clone()],
        ));
        let source = if input == t.name {
            t.clone()
        } else {
            self.reshape_source(t).unwrap_or_else(|| t.clone())
        };
        self.reshapes.insert(out.clone(), source);
        self.val(out, DataType::Int64, dims)
    }

    /// `Expand(v, s)` with `s[j]` = dim `pick[j]` of `source` (1 for `None`), broadcasting
    /// `v` over those dims.
    fn expand(&mut self, v: &Val, source: &Val, pick: &[Option<usize>], what: &str) -> Val {
        let shape = self.dims_vector(source, pick, &format!("{what}_expand_shape"));
        let dims: Vec<Dim> = v
            .dims
            .iter()
            .zip(pick)
            .map(|(d, p)| match p {
                Some(j) => broadcast_dim(d, &source.dims[*j]),
                None => d.clone(),
            })
            .collect();
        let name = self.e.op(
            "Expand",
            &[&v.name, &shape],
            vec![],
            &format!("{what}_expanded"),
            v.elem,
            &dims,
        );
        self.val(name, v.elem, dims)
    }

    /// An int64 vector whose entry `j` is dim `pick[j]` of `source`, or 1 for `None`: a
    /// constant when those sizes are known, else gathered from `Shape(source)`.
    fn dims_vector(&mut self, source: &Val, pick: &[Option<usize>], what: &str) -> String {
        let known: Option<Vec<i64>> = pick
            .iter()
            .map(|p| match p {
                None => Some(1),
                Some(d) => source.dims[*d].known(),
            })
            .collect();
        if let Some(values) = known {
            return self.e.constant(what, &values);
        }
        let rank = source.dims.len();
        let mut shape = self.shape_of(source);
        if pick.contains(&None) {
            let one = self.one();
            shape = self.e.op(
                "Concat",
                &[&shape, &one],
                vec![("axis", AttrValue::Int(0))],
                &format!("{what}_source"),
                DataType::Int64,
                &[Dim::Known(rank as i64 + 1)],
            );
        }
        let positions: Vec<i64> = pick.iter().map(|p| p.unwrap_or(rank) as i64).collect();
        let positions = self.e.constant(&format!("{what}_positions"), &positions);
        self.e.op(
            "Gather",
            &[&shape, &positions],
            vec![("axis", AttrValue::Int(0))],
            what,
            DataType::Int64,
            &[Dim::Known(pick.len() as i64)],
        )
    }

    /// The constant `[1]`, emitted once.
    fn one(&mut self) -> String {
        if let Some(one) = &self.one {
            return one.clone();
        }
        let one = self.e.constant("one", &[1]);
        self.one = Some(one.clone());
        one
    }

    /// `Shape(v)`, emitted once per value.
    fn shape_of(&mut self, v: &Val) -> String {
        if let Some(s) = self.shapes.get(&v.name) {
            return s.clone();
        }
        let dims = [Dim::Known(v.dims.len() as i64)];
        let s = self
            .e
            .op("Shape", &[&v.name], vec![], "shape", DataType::Int64, &dims);
        self.shapes.insert(v.name.clone(), s.clone());
        s
    }

    /// `Cast(v, int64)` unless it is int64 already.
    fn cast_to_i64(&mut self, v: &Val) -> Val {
        if v.elem == DataType::Int64 {
            return v.clone();
        }
        let to = AttrValue::Int(DataType::Int64.onnx() as i64);
        let name = self.e.op(
            "Cast",
            &[&v.name],
            vec![("to", to)],
            "indices_int64",
            DataType::Int64,
            &v.dims,
        );
        self.val(name, DataType::Int64, v.dims.clone())
    }

    /// `Squeeze(v, axes)` (nothing for no axes). When `v` comes from a reshape of a value that
    /// already has the squeezed shape, that value is used instead.
    fn squeeze(&mut self, v: &Val, axes: &[usize], what: &str) -> Val {
        if axes.is_empty() {
            return v.clone();
        }
        let dims: Vec<Dim> = v
            .dims
            .iter()
            .enumerate()
            .filter(|(j, _)| !axes.contains(j))
            .map(|(_, d)| d.clone())
            .collect();
        self.reshaped(v, "Squeeze", axes, dims, what)
    }

    /// `Unsqueeze(v, axes)`, reusing a value of that shape like [`Lowerer::squeeze`].
    fn unsqueeze(&mut self, v: &Val, axes: &[usize], what: &str) -> Val {
        let mut dims = v.dims.clone();
        for &a in axes {
            dims.insert(a.min(dims.len()), Dim::Known(1));
        }
        self.reshaped(v, "Unsqueeze", axes, dims, what)
    }

    /// `op(v, axes)` giving `dims`, where `op` only reshapes. When `v` is itself a reshape of
    /// some `y` in the graph, `y` is used: as it is if it has `dims` already
    /// (`Squeeze(Unsqueeze(y)) = y`), else reshaped to `dims` when they are known
    /// (`Squeeze(Reshape(y)) = Reshape(y)`).
    fn reshaped(&mut self, v: &Val, op: &str, axes: &[usize], dims: Vec<Dim>, what: &str) -> Val {
        let source = self.reshape_source(v);
        if let Some(y) = &source {
            if y.dims.len() == dims.len() && y.dims.iter().zip(&dims).all(|(a, b)| same_dim(a, b)) {
                return y.clone();
            }
        }
        let out = self.e.value(what, v.elem, &dims);
        // A constant shape needs somewhere to live (not an old-opset function body).
        // A constant shape is cheap unless it must be cast (old opsets without initializers),
        // and `Reshape` takes only floats before opset 5.
        let can_reshape = reshape_takes(self.e.opset, v.elem)
            && (self.e.constants != Constants::CastDoubles || self.e.opset < 5);
        let read = match (source.filter(|_| can_reshape), all_known(&dims)) {
            (Some(y), Some(sizes)) if self.e.can_reshape_to(&y.dims, &sizes) => {
                self.e
                    .reshape_to_sizes(&y.name, &y.dims, &sizes, &out, what);
                y
            }
            _ => {
                self.e.axes_op(op, &v.name, axes, &out, what);
                v.clone()
            }
        };
        self.reshapes.insert(out.clone(), read);
        self.val(out, v.elem, dims)
    }

    /// What `v` reshapes, if it was built here by a reshape, or if the graph node producing it
    /// only reshapes (so `v` holds the input's elements in the same order) and the input's dims
    /// are known.
    fn reshape_source(&self, v: &Val) -> Option<Val> {
        if let Some(source) = self.reshapes.get(&v.name) {
            return Some(source.clone());
        }
        let node = self.graph.node(self.graph.producer(&v.name)?);
        let reshapes = is_onnx_domain(&node.domain)
            && matches!(
                node.op_type.as_str(),
                "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" | "Identity"
            );
        let source = node.inputs.first().filter(|_| reshapes)?;
        let dims = self.env.dims(source)?;
        Some(Val {
            name: source.clone(),
            elem: v.elem,
            dims: dims.to_vec(),
        })
    }

    /// `Transpose(v, perm)` (nothing for the identity).
    fn transpose(&mut self, v: Val, perm: &[usize], what: &str) -> Val {
        if perm.iter().enumerate().all(|(j, &p)| j == p) {
            return v;
        }
        let dims: Vec<Dim> = perm.iter().map(|&p| v.dims[p].clone()).collect();
        let perm_attr = AttrValue::Ints(perm.iter().map(|&p| p as i64).collect());
        let name = self.e.op(
            "Transpose",
            &[&v.name],
            vec![("perm", perm_attr)],
            &format!("{what}_transposed"),
            v.elem,
            &dims,
        );
        self.val(name, v.elem, dims)
    }

    /// A gather result whose dimensions stand for `tags`, transposed to the output's order.
    fn in_output_order(&mut self, v: Val, tags: &[Tag]) -> Val {
        let perm: Vec<usize> = (0..self.rank())
            .map(|d| {
                tags.iter()
                    .position(|t| *t == Tag::Dim(d))
                    .unwrap_or_default()
            })
            .collect();
        self.transpose(v, &perm, "output")
    }

    /// The output dims standing for `tags`.
    fn tag_dims(&self, tags: &[Tag]) -> Vec<Dim> {
        tags.iter()
            .map(|t| match t {
                Tag::Dim(d) => self.out_dims[*d].clone(),
                Tag::Coord => Dim::Unknown,
            })
            .collect()
    }

    fn val(&self, name: String, elem: DataType, dims: Vec<Dim>) -> Val {
        Val { name, elem, dims }
    }
}

/// A scalar zero of `elem`: all bits clear, or the empty string.
fn zero_scalar(elem: DataType) -> StoredTensor {
    if elem == DataType::String {
        let mut t = StoredTensor::raw(None, elem, &[], Bytes::new());
        t.payload = Payload::String(vec![Vec::new()]);
        return t;
    }
    let bytes = vec![0u8; elem.byte_size().unwrap_or(1)];
    StoredTensor::raw(None, elem, &[], Bytes::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_patterns() {
        let k = |v: &[i64]| v.iter().map(|&n| Dim::Known(n)).collect::<Vec<_>>();
        let n = Dim::Symbolic("n".into());
        use Role::*;
        // The rewrite of Gather(data[4,3], idx[2,5], axis=0): input [4,1,3], indices [2,5,1].
        let r = roles(&k(&[4, 1, 3]), &k(&[2, 5, 1]), &[0]);
        assert_eq!(r, [Axis, Index, Input]);
        assert_eq!(choose(&r, 1), Pattern::Blocks);
        // GatherElements with symbolic batch.
        let r = roles(
            &[n.clone(), Dim::Known(5)],
            &[n.clone(), Dim::Known(2)],
            &[1],
        );
        assert_eq!(r, [Batch, Axis]);
        assert_eq!(choose(&r, 1), Pattern::Elements);
        // GatherND with a batch dim and a trailing block.
        let r = roles(
            &[n.clone(), Dim::Known(10), Dim::Known(4)],
            &[n, Dim::Unknown, Dim::Known(1)],
            &[1],
        );
        assert_eq!(r, [Batch, Axis, Input]);
        assert_eq!(choose(&r, 1), Pattern::Nd);
        // Both known 1.
        assert_eq!(roles(&k(&[1, 3]), &k(&[1, 2]), &[1]), [Unit, Axis]);
        assert_eq!(choose(&[Unit, Unit], 0), Pattern::Broadcast);
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
