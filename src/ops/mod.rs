//! The operators the interpreter runs and static inference types: one file per operator (or per
//! small family of operators that share one definition), each with its attributes, its
//! type/shape function and its kernel, and tests at the bottom.
//!
//! An operator is an [`OpDef`]: domain, type, the opset versions it covers, its arity, an optional
//! static shape function ([`InferFn`]) and a kernel ([`EvalFn`]). Registration is explicit: each
//! family module has a `DEFS` table with one line per operator, and [`registry`] chains those
//! tables. The same definition serves the interpreter ([`crate::interp`]) and static inference
//! ([`crate::infer`]), so the two cannot disagree about an operator.
//!
//! Kernels see their node (for attributes), the opset version the node runs at, and their inputs
//! as tensors (`None` for an omitted optional input). They return one tensor per output the node
//! names. Errors are plain reasons; the interpreter adds the node's name and op. An operator
//! whose attributes take work to read declares an [`Attributes`] type and [`OpDef::prepare`]:
//! the interpreter parses it once per plan, and the shape function and the kernel read it with
//! [`InferCtx::attrs`] and [`EvalCtx::attrs`].
//!
//! Operators that take or make values other than tensors (the sequence operators, the
//! optionals, and those that pass any value on: `Identity`, `If`, `Loop`) also have a kernel on
//! [`Value`]s ([`OpDef::values`], a [`ValuesFn`]), which the interpreter runs instead of
//! [`OpDef::eval`]; their `eval` serves what only has tensors (constant folding,
//! [`eval_node`]). Every other kernel sees tensors: the interpreter unwraps each input once, and
//! a sequence where a tensor operator expects a tensor is an error naming the input.
//!
//! Design note: `If`, `Loop` and `Scan` are operators like any other; their kernels run their
//! bodies through [`EvalCtx::run_subgraph`] (or [`EvalCtx::run_subgraph_values`], for bodies
//! that take or return sequences and optionals), which the interpreter provides.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::ir::{canonical_domain, display_domain, Dim, Graph, Node, TensorType, Value};
use crate::tensor::Tensor;

pub mod constraints;
pub(crate) mod num;
pub mod util;

mod attrs;
mod contrib;
mod control;
mod fold;
mod gathers;
pub(crate) mod halves;
mod identity;
mod layout;
mod math;
mod minifloat;
mod ml;
mod nn;
mod optional;
mod random;
mod rnn;
mod sequence;
mod signal;
mod strings;
pub(crate) mod vector;

pub(crate) use fold::tensor_bytes as value_bytes;
pub use fold::{foldable, Folder};
pub use gathers::{
    gather_multiaxis_dims, is_multiaxis, logical_indices_dims, multiaxis_attributes,
    GatherAttributes, GatherKind, SchemaError,
};
pub(crate) use math::{
    Activation, ChainOp, Instruction, Operand, Program, ELEMENTWISE_CHAIN, MAX_INSTRUCTIONS,
    PROGRAM,
};
pub(crate) use ml::zipmap_keys;
pub(crate) use nn::{
    CONV_INTEGER_TO_FLOAT, INTEGER_PRODUCT_SCALED, QUANTIZED_ADD, QUANTIZE_ROUND_TRIP,
};
pub use random::is_random;

/// A kernel: runs one node on its inputs and returns one tensor per output.
pub type EvalFn = fn(&EvalCtx<'_>, &[Option<&Tensor>]) -> Result<Vec<Tensor>>;

/// A kernel on values of any kind (tensors, sequences, optionals; `None` for an omitted input):
/// returns one value per output ([`OpDef::values`]).
pub type ValuesFn = fn(&EvalCtx<'_>, &[Option<&Value>]) -> Result<Vec<Value>>;

/// A kernel that may write its output over input 0, which the interpreter hands over (with the
/// other inputs, from input 1 on) when the value dies at this node: returns the outputs, or
/// gives the input back (`Err`) when it cannot (another element type, a buffer shared with
/// another value, an output of another shape), for [`EvalFn`] to run instead.
pub type InPlaceFn = fn(
    &EvalCtx<'_>,
    Tensor,
    &[Option<&Tensor>],
) -> Result<std::result::Result<Vec<Tensor>, Tensor>>;

/// A node's attributes parsed into typed state ([`Attributes`]), once per plan.
pub type Prepared = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// Parses a node's attributes at `opset` into the state its shape function and kernel read
/// ([`OpDef::prepare`]); [`prepare`] makes one from an [`Attributes`] type.
pub type PrepareFn = fn(&Node, i64) -> Result<Prepared>;

/// The typed attributes of one operator: parsed from the node once when the interpreter plans
/// a graph, then read by the shape function and the kernel on every run through
/// [`EvalCtx::attrs`] and [`InferCtx::attrs`] (which parse on the spot when nothing was
/// prepared, as for a node evaluated on its own). What depends on the inputs (an axis
/// normalised by the rank, a default sized by it) is resolved where the inputs are known.
///
/// # Example
/// ```
/// use multigather::ir::{AttrValue, Node};
/// use multigather::ops::Attributes;
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Axis(i64);
/// impl Attributes for Axis {
///     fn parse(node: &Node, _opset: i64) -> multigather::Result<Axis> {
///         Ok(Axis(node.attr_int("axis", -1)?))
///     }
/// }
/// let node = Node::new("Softmax", "s", ["x"], ["y"]).with_attr("axis", AttrValue::Int(1));
/// assert_eq!(Axis::parse(&node, 13)?, Axis(1));
/// # Ok::<(), multigather::Error>(())
/// ```
pub trait Attributes: Sized + Send + Sync + 'static {
    /// The node's attributes at `opset`, or the error that names the bad one.
    fn parse(node: &Node, opset: i64) -> Result<Self>;
}

/// The [`PrepareFn`] of an [`Attributes`] type.
pub fn prepare<A: Attributes>(node: &Node, opset: i64) -> Result<Prepared> {
    Ok(std::sync::Arc::new(A::parse(node, opset)?))
}

/// `A` from the prepared state when it is an `A`, else parsed from `node` now.
fn prepared_or_parsed<'a, A: Attributes + Clone>(
    prepared: Option<&'a (dyn std::any::Any + Send + Sync)>,
    node: &Node,
    opset: i64,
) -> Result<std::borrow::Cow<'a, A>> {
    match prepared.and_then(|p| p.downcast_ref::<A>()) {
        Some(a) => Ok(std::borrow::Cow::Borrowed(a)),
        None => Ok(std::borrow::Cow::Owned(A::parse(node, opset)?)),
    }
}

/// A static shape function: what can be known of each output from what is known of the inputs.
/// Returning fewer types than outputs (or unknown types) is fine; errors mean the node is
/// malformed, not that something is unknown.
pub type InferFn = fn(&InferCtx<'_>) -> Result<Vec<TensorType>>;

/// One operator: what the interpreter and static inference know of it.
#[derive(Clone, Debug)]
pub struct OpDef {
    /// The domain (`""` for the default ONNX domain).
    pub domain: &'static str,
    /// The operator type.
    pub op_type: &'static str,
    /// The opset versions of `domain` this definition covers.
    pub opsets: RangeInclusive<i64>,
    /// How many inputs a node may name (trailing optional inputs may be omitted).
    pub inputs: RangeInclusive<usize>,
    /// How many outputs a node may name.
    pub outputs: RangeInclusive<usize>,
    /// The shape function, where one is written.
    pub infer: Option<InferFn>,
    /// The kernel on tensors.
    pub eval: EvalFn,
    /// The kernel on values of any kind, for operators that take or make sequences or
    /// optionals: the interpreter runs it instead of `eval`, which then serves the callers
    /// that only have tensors (constant folding, [`eval_node`]) or refuses.
    pub values: Option<ValuesFn>,
    /// The kernel that reuses input 0's buffer, for operators whose output can have input 0's
    /// shape and type.
    pub in_place: Option<InPlaceFn>,
    /// Parses the node's attributes once per plan, for the shape function and the kernel
    /// (see [`Attributes`]); a node whose attributes do not parse fails when planned.
    pub prepare: Option<PrepareFn>,
}

impl OpDef {
    /// A definition with no shape function, covering every opset from `since` on.
    pub const fn new(
        op_type: &'static str,
        since: i64,
        inputs: RangeInclusive<usize>,
        outputs: RangeInclusive<usize>,
        eval: EvalFn,
    ) -> OpDef {
        OpDef {
            domain: "",
            op_type,
            opsets: since..=i64::MAX,
            inputs,
            outputs,
            infer: None,
            eval,
            values: None,
            in_place: None,
            prepare: None,
        }
    }

    /// The same definition with a kernel that can reuse its input's buffer.
    pub const fn with_in_place(mut self, in_place: InPlaceFn) -> OpDef {
        self.in_place = Some(in_place);
        self
    }

    /// The same definition with a kernel on values of any kind ([`OpDef::values`]).
    pub const fn with_values(mut self, values: ValuesFn) -> OpDef {
        self.values = Some(values);
        self
    }

    /// The same definition with its attributes parsed once per plan (see [`Attributes`]).
    pub const fn with_prepare(mut self, prepare: PrepareFn) -> OpDef {
        self.prepare = Some(prepare);
        self
    }

    /// The same definition with a shape function.
    pub const fn with_infer(mut self, infer: InferFn) -> OpDef {
        self.infer = Some(infer);
        self
    }

    /// The same definition in another domain.
    pub const fn in_domain(mut self, domain: &'static str) -> OpDef {
        self.domain = domain;
        self
    }

    /// The same definition limited to opsets up to `until`.
    pub const fn until(mut self, until: i64) -> OpDef {
        self.opsets = *self.opsets.start()..=until;
        self
    }

    /// Checks a node's arity against the definition.
    pub fn check_arity(&self, node: &Node) -> Result<()> {
        let (n_in, n_out) = (node.inputs.len(), node.outputs.len());
        if !self.inputs.contains(&n_in) {
            return Err(Error::node(
                &node.name,
                &node.op_type,
                format!("takes {} inputs, found {n_in}", range_text(&self.inputs)),
            ));
        }
        if !self.outputs.contains(&n_out) {
            return Err(Error::node(
                &node.name,
                &node.op_type,
                format!("has {} outputs, found {n_out}", range_text(&self.outputs)),
            ));
        }
        Ok(())
    }
}

fn range_text(r: &RangeInclusive<usize>) -> String {
    match (*r.start(), *r.end()) {
        (a, b) if a == b => a.to_string(),
        (a, usize::MAX) => format!("at least {a}"),
        (a, b) => format!("{a} to {b}"),
    }
}

/// What a kernel sees besides its inputs.
pub struct EvalCtx<'a> {
    /// The node being run.
    pub node: &'a Node,
    /// The opset version of the node's domain.
    pub opset: i64,
    /// Runs subgraphs for control-flow operators.
    pub(crate) runner: &'a dyn SubgraphRunner,
    /// The node's attributes as the plan prepared them ([`OpDef::prepare`]), if it did.
    pub(crate) prepared: Option<&'a (dyn std::any::Any + Send + Sync)>,
    /// What the kernel keeps between runs of this step ([`EvalCtx::remember`]), when the plan
    /// runs it more than once.
    pub(crate) memo: Option<&'a Memo>,
}

/// A kernel's memory across the runs of one plan step: a value derived from inputs the plan
/// proved constant (packed weights), made on the first run that asks for it.
#[derive(Debug, Default)]
pub struct Memo {
    /// Bit `i`: input `i` is a constant no feed overrides (inputs past 63 never are).
    constant: u64,
    slot: std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>,
}

impl Memo {
    /// A memo for a step whose inputs `constant` tells apart.
    pub(crate) fn new(constant: impl IntoIterator<Item = bool>) -> Memo {
        let constant = constant
            .into_iter()
            .take(64)
            .enumerate()
            .fold(0u64, |bits, (i, c)| bits | (u64::from(c) << i));
        Memo {
            constant,
            slot: std::sync::OnceLock::new(),
        }
    }

    /// Whether any input is constant (a step without one needs no memo).
    pub(crate) fn any(&self) -> bool {
        self.constant != 0
    }
}

/// Runs a subgraph of the node being evaluated, with the node's scope visible.
pub(crate) trait SubgraphRunner {
    fn run_subgraph(&self, graph: &Graph, inputs: Vec<Value>) -> Result<Vec<Value>>;
}

impl<'a> EvalCtx<'a> {
    /// Runs `graph` (a graph attribute of this node) with its formal inputs bound to `inputs` in
    /// order; values of the enclosing scopes are visible. Returns the graph's outputs in order,
    /// which must be tensors.
    pub fn run_subgraph(&self, graph: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let outputs = self
            .runner
            .run_subgraph(graph, inputs.into_iter().map(Value::Tensor).collect())?;
        outputs
            .into_iter()
            .zip(&graph.outputs)
            .map(|(v, o)| {
                v.into_tensor().map_err(|v| {
                    Error::Eval(format!(
                        "output '{}' of subgraph '{}' is a {} where a tensor is expected",
                        o.name,
                        graph.name,
                        v.kind()
                    ))
                })
            })
            .collect()
    }

    /// [`EvalCtx::run_subgraph`] for bodies that take or return values of any kind.
    pub fn run_subgraph_values(&self, graph: &Graph, inputs: Vec<Value>) -> Result<Vec<Value>> {
        self.runner.run_subgraph(graph, inputs)
    }

    /// The value `make` derives from the inputs at `inputs`, made once per plan step and kept
    /// when every one of them is a constant of the plan; `None` when one is not (or the step is
    /// run outside a plan): the caller then computes it for this run alone. A value of another
    /// type than the step's first is not kept either.
    pub(crate) fn remember<T: std::any::Any + Send + Sync>(
        &self,
        inputs: &[usize],
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Option<&'a T>> {
        let Some(memo) = self.memo else {
            return Ok(None);
        };
        if !inputs
            .iter()
            .all(|&i| i < 64 && memo.constant & (1 << i) != 0)
        {
            return Ok(None);
        }
        if memo.slot.get().is_none() {
            // Two threads may both make it; one is kept, and both are the same value.
            let _ = memo.slot.set(Box::new(make()?));
        }
        Ok(memo.slot.get().and_then(|v| v.downcast_ref::<T>()))
    }

    /// An error about this node's inputs or attributes (the interpreter adds the node's name).
    pub fn error(&self, reason: impl Into<String>) -> Error {
        Error::Eval(reason.into())
    }

    /// The node's attributes as `A`: as prepared when the plan was built, or parsed now.
    pub fn attrs<A: Attributes + Clone>(&self) -> Result<std::borrow::Cow<'a, A>> {
        prepared_or_parsed(self.prepared, self.node, self.opset)
    }
}

/// What a shape function sees.
pub struct InferCtx<'a> {
    /// The node being typed.
    pub node: &'a Node,
    /// The opset version of the node's domain.
    pub opset: i64,
    /// What is known of each input (`None`: nothing, or the input is omitted).
    pub inputs: &'a [Option<TensorType>],
    /// The values of inputs that are constants (initializers or `Constant` outputs), where known.
    pub constants: &'a [Option<&'a Tensor>],
    /// The node's attributes as a plan prepared them ([`OpDef::prepare`]), if one did.
    pub prepared: Option<&'a (dyn std::any::Any + Send + Sync)>,
}

impl<'a> InferCtx<'a> {
    /// The node's attributes as `A`: as a plan prepared them, or parsed now.
    pub fn attrs<A: Attributes + Clone>(&self) -> Result<std::borrow::Cow<'a, A>> {
        prepared_or_parsed(self.prepared, self.node, self.opset)
    }

    /// What is known of input `i`.
    pub fn input(&self, i: usize) -> Option<&TensorType> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    /// The constant value of input `i`, if it is one.
    pub fn constant(&self, i: usize) -> Option<&Tensor> {
        self.constants.get(i).copied().flatten()
    }
}

/// Runs the value kernel `f` on tensors, for the tensor kernel of an operator whose values
/// kernel also serves tensors (`If`, `Loop`): an output that is not a tensor is an error.
pub(crate) fn on_tensors(
    f: ValuesFn,
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let values: Vec<Option<Value>> = inputs
        .iter()
        .map(|t| t.cloned().map(Value::Tensor))
        .collect();
    let refs: Vec<Option<&Value>> = values.iter().map(Option::as_ref).collect();
    f(ctx, &refs)?
        .into_iter()
        .map(|v| {
            v.into_tensor()
                .map_err(|v| ctx.error(format!("an output is a {}, not a tensor", v.kind())))
        })
        .collect()
}

/// A runner for kernels evaluated outside a graph (tests, constant folding): a subgraph is an
/// error.
pub(crate) struct NoSubgraphs;

impl SubgraphRunner for NoSubgraphs {
    fn run_subgraph(&self, graph: &Graph, _inputs: Vec<Value>) -> Result<Vec<Value>> {
        Err(Error::Unsupported(format!(
            "subgraph '{}' outside a running graph",
            graph.name
        )))
    }
}

/// Runs one node on `inputs` at `opset`, outside any graph (its subgraphs cannot run): for tests
/// and for folding constants.
pub fn eval_node(node: &Node, opset: i64, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let def = registry()
        .lookup(&node.domain, &node.op_type, opset)
        .ok_or_else(|| {
            let domain = display_domain(&node.domain);
            let unnamed = node.name.is_empty() && !node.outputs.is_empty();
            let at = format!(
                "{} {}",
                if unnamed { "the unnamed node" } else { "node" },
                node.quoted_label()
            );
            Error::Unsupported(format!(
                "operator {} ({domain}, opset {opset}) at {at}",
                node.op_type
            ))
        })?;
    def.check_arity(node)?;
    let ctx = EvalCtx {
        node,
        opset,
        runner: &NoSubgraphs,
        prepared: None,
        memo: None,
    };
    (def.eval)(&ctx, inputs)
}

/// Inputs with at most this many elements are shown to shape functions as values (shapes, axes,
/// sizes, repeats), as constants are.
const SHAPE_VALUE_ELEMENTS: usize = 4096;

/// The bytes the outputs of `node` will take when its kernel runs on `inputs`, from the
/// operator's shape function: known before anything is allocated, so that a model asking for a
/// huge tensor is refused before the kernel starts. `None` when the shape function does not
/// determine every output; `usize::MAX` when the size overflows. Strings count their handles.
///
/// # Example
/// ```
/// use multigather::ir::{AttrValue, Node};
/// use multigather::ops::{planned_output_bytes, registry};
/// use multigather::{DataType, Tensor};
/// let node = Node::new("Expand", "e", ["x", "shape"], ["y"]);
/// let def = registry().lookup("", "Expand", 13).unwrap();
/// let x = Tensor::from_vec(DataType::Float, &[1], vec![1.0f32])?;
/// let shape = Tensor::from_vec(DataType::Int64, &[2], vec![1000i64, 1000])?;
/// assert_eq!(planned_output_bytes(def, &node, 13, &[Some(&x), Some(&shape)]), Some(4_000_000));
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn planned_output_bytes(
    def: &OpDef,
    node: &Node,
    opset: i64,
    inputs: &[Option<&Tensor>],
) -> Option<usize> {
    output_bytes(def, node, opset, None, inputs)
}

/// [`planned_output_bytes`] with the node's prepared attributes, if any.
pub(crate) fn output_bytes(
    def: &OpDef,
    node: &Node,
    opset: i64,
    prepared: Option<&(dyn std::any::Any + Send + Sync)>,
    inputs: &[Option<&Tensor>],
) -> Option<usize> {
    let infer = def.infer?;
    let types: Vec<Option<TensorType>> = inputs
        .iter()
        .map(|t| {
            t.map(|t| {
                let dims = t.shape().iter().map(|&d| Dim::Known(d as i64)).collect();
                TensorType::new(t.dtype(), dims)
            })
        })
        .collect();
    let values: Vec<Option<&Tensor>> = inputs
        .iter()
        .map(|t| {
            t.filter(|t| t.len() <= SHAPE_VALUE_ELEMENTS && t.dtype() != crate::DataType::String)
        })
        .collect();
    let ctx = InferCtx {
        node,
        opset,
        inputs: &types,
        constants: &values,
        prepared,
    };
    let outputs = infer(&ctx).ok()?;
    if outputs.len() < node.outputs.len() {
        return None;
    }
    let mut total = 0usize;
    for t in &outputs {
        let elem = t.elem?;
        let mut count = 1usize;
        for d in &t.shape.as_ref()?.dims {
            let d = usize::try_from(d.known()?).ok()?;
            count = count.saturating_mul(d);
        }
        total = total.saturating_add(fold::value_bytes(elem, count));
    }
    Some(total)
}

/// The operator tables of every family, in one list.
const FAMILIES: &[&[OpDef]] = &[
    contrib::DEFS,
    control::DEFS,
    gathers::DEFS,
    identity::DEFS,
    layout::DEFS,
    math::DEFS,
    ml::DEFS,
    nn::DEFS,
    optional::DEFS,
    random::DEFS,
    rnn::DEFS,
    sequence::DEFS,
    signal::DEFS,
    strings::DEFS,
];

/// Static tables of operator versions (definitions, schemas) indexed by (domain, op type): the
/// one index behind [`Registry::lookup`] and [`constraints::lookup`]. Each operator's versions
/// keep their table order.
pub(crate) struct ByOp<T: 'static> {
    /// Domain, then op type (keyed by `&'static str`, looked up by any `&str`).
    versions: HashMap<&'static str, HashMap<&'static str, Vec<&'static T>>>,
}

impl<T> ByOp<T> {
    /// Indexes `items` by their (domain, op type).
    pub(crate) fn new(
        items: impl IntoIterator<Item = &'static T>,
        key: impl Fn(&'static T) -> (&'static str, &'static str),
    ) -> ByOp<T> {
        let mut versions: HashMap<_, HashMap<_, Vec<&'static T>>> = HashMap::new();
        for item in items {
            let (domain, op_type) = key(item);
            versions
                .entry(domain)
                .or_default()
                .entry(op_type)
                .or_default()
                .push(item);
        }
        ByOp { versions }
    }

    /// The versions of `op_type` in `domain` (`ai.onnx` or `""` for the default domain), in
    /// table order; empty when there are none.
    pub(crate) fn versions(&self, domain: &str, op_type: &str) -> &[&'static T] {
        self.versions
            .get(canonical_domain(domain))
            .and_then(|ops| ops.get(op_type))
            .map_or(&[], Vec::as_slice)
    }

    /// Every operator's versions.
    fn all(&self) -> impl Iterator<Item = &Vec<&'static T>> {
        self.versions.values().flat_map(HashMap::values)
    }
}

/// Every operator definition, indexed by (domain, op type).
pub struct Registry {
    by_op: ByOp<OpDef>,
}

/// The registry of every operator this build knows.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry {
        by_op: ByOp::new(FAMILIES.iter().flat_map(|f| f.iter()), |d| {
            (d.domain, d.op_type)
        }),
    })
}

impl Registry {
    /// The definition of `op_type` in `domain` at `opset`, if this build has one.
    pub fn lookup(&self, domain: &str, op_type: &str, opset: i64) -> Option<&'static OpDef> {
        self.by_op
            .versions(domain, op_type)
            .iter()
            .find(|d| d.opsets.contains(&opset))
            .copied()
    }

    /// Whether any opset of `op_type` in `domain` is known.
    pub fn knows(&self, domain: &str, op_type: &str) -> bool {
        !self.by_op.versions(domain, op_type).is_empty()
    }

    /// Every definition, sorted by domain, type and first opset.
    pub fn all(&self) -> Vec<&'static OpDef> {
        let mut defs: Vec<_> = self.by_op.all().flatten().copied().collect();
        defs.sort_by_key(|d| (d.domain, d.op_type, *d.opsets.start()));
        defs
    }
}

/// The static output types of `node` at `opset`, from its registered shape function; empty when
/// the operator or its shape function is unknown, or the node is malformed.
pub fn infer_node(
    node: &Node,
    opset: i64,
    inputs: &[Option<TensorType>],
    constants: &[Option<&Tensor>],
) -> Vec<TensorType> {
    let Some(def) = registry().lookup(&node.domain, &node.op_type, opset) else {
        return Vec::new();
    };
    let Some(infer) = def.infer else {
        return Vec::new();
    };
    let ctx = InferCtx {
        node,
        opset,
        inputs,
        constants,
        prepared: None,
    };
    infer(&ctx).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_definition_is_well_formed() {
        for def in registry().all() {
            assert!(!def.op_type.is_empty());
            assert!(def.inputs.start() <= def.inputs.end(), "{}", def.op_type);
            assert!(def.outputs.start() <= def.outputs.end(), "{}", def.op_type);
        }
    }

    #[test]
    fn opset_ranges_of_one_operator_do_not_overlap() {
        for defs in registry().by_op.all() {
            for (i, a) in defs.iter().enumerate() {
                for b in &defs[i + 1..] {
                    let overlap =
                        a.opsets.start() <= b.opsets.end() && b.opsets.start() <= a.opsets.end();
                    assert!(!overlap, "{} has overlapping opset ranges", a.op_type);
                }
            }
        }
    }
}
