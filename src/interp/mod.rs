//! The reference interpreter: runs a model's graph node by node, in execution order, on values:
//! tensors, sequences of tensors and optionals ([`Value`]).
//!
//! A [`Session`] holds a model and, per graph it has run, a `Plan`: the nodes in execution order
//! with their operator definitions resolved (an unknown operator is reported before anything
//! runs), the initializers converted to tensors once, and for each node the values whose last use
//! it is, so they are freed as soon as possible. `plan.rs` builds plans, `fuse.rs` rewrites their
//! steps, `edges.rs` is where values enter and leave a run, `threads.rs` is the thread pool.
//!
//! Why one file: what is left here is the session and its run loop, one piece: `Session` keeps
//! the plans, `run_graph` runs their steps in `Frame`s, and a subgraph's `Scope` runs back
//! through `run_graph`. The types a plan is made of (`Plan`, `Step`, `Source`, `StepKind`) are
//! declared here, beside the loop that reads them, so that `plan.rs`, which builds them, and
//! `fuse.rs`, which rewrites steps, both take them from here and not from each other.
//!
//! Values live in frames, as [`Value`]s: a step of a tensor operator unwraps each input to its
//! tensor (a sequence there is an error naming the input) and its outputs are stored as they
//! come, so the tensor path costs one match per input; operators with a kernel on values
//! ([`OpDef::values`]: the sequence operators, the optionals, `Identity`, `If`, `Loop`) see
//! them as they are. A subgraph (`If` / `Loop` / `Scan` body) runs in a frame whose parent is
//! the frame of the node that holds it, so outer-scope values are visible; a model-local function
//! runs in a fresh frame that sees only its inputs, with the attribute references of its body
//! bound from the call site (or the function's defaults). `multigather.GatherMultiaxis` always
//! runs through the fast kernel, even where the model also defines it as a local function.
//!
//! # Example
//! ```
//! use multigather::interp::Session;
//! use multigather::ir::{Dim, Graph, Model, Node, Type, ValueInfo};
//! use multigather::{DataType, Tensor};
//!
//! let mut g = Graph::new("g");
//! g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(2)])));
//! g.outputs.push(ValueInfo::new("y", Type::tensor(DataType::Float, vec![Dim::Known(2)])));
//! g.add_node(Node::new("Identity", "copy", ["x"], ["y"]));
//! let model = Model::new(g, 13);
//! let x = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.0])?;
//! let outputs = Session::new(&model).run(vec![("x".into(), x.clone())])?;
//! assert_eq!(outputs[0].0, "y");
//! assert_eq!(outputs[0].1, x);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod edges;
mod fuse;
mod plan;
mod threads;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::infer::{self, Formals, TypeEnv};
use crate::ir::{
    is_onnx_domain, AttrValue, Function, Graph, MapKeys, Model, Node, OpsetImport, TensorType,
    Value,
};
use crate::ops::constraints::{self, Schema};
use crate::ops::{output_bytes, EvalCtx, OpDef, Prepared, SubgraphRunner};
use crate::tensor::{default_budget, Arena, Tensor};

pub use plan::sparse_to_tensor;

/// How a session runs.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Worker threads for the kernels (`None`: every core).
    pub threads: Option<usize>,
    /// The memory budget in bytes for the tensors of a run (`None`: the machine's physical
    /// memory, [`crate::tensor::default_budget`]). A node whose tensors would take the memory in
    /// use past it fails with an error naming the node and the size.
    pub max_memory: Option<usize>,
    /// Time every step of the main graph, for [`Session::profile`]. Off by default: timing costs
    /// two clock reads per step.
    pub profile: bool,
    /// Run every node as a step of its own: no planning-time fusion (see `interp/fuse.rs`: a
    /// `BatchNormalization` after a `Conv` folds into its weights, as in onnxruntime). Off by
    /// default; fusion changes results only in the last bits, and alike for every model a
    /// session plans.
    pub unfused: bool,
}

impl RunOptions {
    /// The most worker threads a session takes per core of the machine: more only queue on
    /// the cores, and a count from a typo would otherwise spawn threads until the address space
    /// runs out.
    pub const THREADS_PER_CORE: usize = 8;

    /// The most worker threads a session takes on this machine.
    ///
    /// # Example
    /// ```
    /// use multigather::interp::RunOptions;
    /// assert!(RunOptions::max_threads() >= RunOptions::THREADS_PER_CORE);
    /// let too_many = RunOptions { threads: Some(RunOptions::max_threads() + 1), ..Default::default() };
    /// assert!(too_many.check().is_err());
    /// ```
    pub fn max_threads() -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        cores.saturating_mul(Self::THREADS_PER_CORE)
    }

    /// Checks the options: a thread count of at least 1 and at most [`RunOptions::max_threads`].
    pub fn check(&self) -> Result<()> {
        match self.threads {
            Some(0) => Err(Error::Limit("the thread count must be at least 1".into())),
            Some(n) if n > Self::max_threads() => Err(Error::Limit(format!(
                "{n} threads is more than this machine takes: at most {} ({} per core)",
                Self::max_threads(),
                Self::THREADS_PER_CORE
            ))),
            _ => Ok(()),
        }
    }
}

/// Where the time of a session's runs went: one entry per step of the main graph that ran (steps
/// folded at planning are absent), in graph order, accumulated over every run so far. A step
/// that runs a subgraph or a function counts the whole call.
///
/// ```
/// use multigather::interp::{RunOptions, Session};
/// use multigather::ir::{Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::{DataType, Tensor};
///
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(2)])));
/// g.outputs.push(ValueInfo::new("y", Type::tensor(DataType::Float, vec![Dim::Known(2)])));
/// g.add_node(Node::new("Relu", "act", ["x"], ["y"]));
/// let model = Model::new(g, 13);
/// let session = Session::with_options(&model, RunOptions { profile: true, ..Default::default() });
/// let x = Tensor::from_vec(DataType::Float, &[2], vec![-1.0f32, 2.0])?;
/// session.run(vec![("x".into(), x)])?;
/// let profile = session.profile();
/// assert_eq!(profile.runs, 1);
/// assert_eq!((profile.steps[0].node.as_str(), profile.steps[0].op_type.as_str()), ("act", "Relu"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Runs of the main graph timed.
    pub runs: usize,
    /// The main graph's steps, in order.
    pub steps: Vec<StepTime>,
    /// Values computed once at planning, in every graph planned so far (see
    /// [`Session::folding_budget`]): how many, and their bytes.
    pub folded: (usize, usize),
}

/// The accumulated time of one step, see [`Profile`].
#[derive(Clone, Debug)]
pub struct StepTime {
    /// The node's name (empty when the model leaves it unnamed).
    pub node: String,
    /// The node's operator, with its domain when not the default one (`multigather.GatherMultiaxis`).
    pub op_type: String,
    /// Total time spent in the step over all runs.
    pub total: Duration,
}

/// A model ready to run, with the plans of the graphs it has run cached.
pub struct Session<'m> {
    model: &'m Model,
    options: RunOptions,
    plans: Mutex<HashMap<PlanKey, Arc<Plan<'m>>>>,
    /// The pool runs are handed to when their thread cannot run them in a pool of its own
    /// ([`pool`]), built at the first such run (`None` inside: it could not be built).
    pool: std::sync::OnceLock<Option<rayon::ThreadPool>>,
    /// Where the tensors of every run come from: buffers freed by one step or run are reused by
    /// the next, within the memory budget.
    arena: Arc<Arena>,
    /// Per-step times of the main graph when [`RunOptions::profile`] is set.
    profile: Mutex<Profile>,
    /// The maps' keys of the main graph's outputs ([`Session::output_keys`]), found once.
    output_keys: std::sync::OnceLock<Vec<Option<MapKeys>>>,
    /// Values folded at planning so far: how many, and their bytes (at most
    /// [`Session::folding_budget`]).
    folded: Mutex<(usize, usize)>,
}

/// A graph (by address), for a function body the call node whose attributes it binds, and for
/// a subgraph the plan of its enclosing graph (whose constants it folds with its own).
type PlanKey = (usize, usize, usize);

/// One graph, ready to run: every value of the graph numbered into a slot of its frame, so the
/// run loop indexes vectors and never hashes a name.
struct Plan<'m> {
    steps: Vec<Step<'m>>,
    /// Initializers (and values folded at planning), by name: always tensors.
    constants: HashMap<String, Value>,
    /// The slot of each name the graph defines at run time (its inputs and its steps' outputs).
    slots: HashMap<String, usize>,
    /// The slot of each graph input, in order.
    input_slots: Vec<usize>,
    /// Slots to free before the first step: inputs nothing reads.
    unused_inputs: Vec<usize>,
    /// The names of `constants` no input can override: what subgraphs may fold with.
    fixed: HashSet<String>,
    /// The other names the graph defines (inputs and outputs of its steps), which hide the
    /// enclosing scopes' names.
    variables: HashSet<String>,
}

/// One node of a plan.
struct Step<'m> {
    /// The node, with function attribute references bound.
    node: Cow<'m, Node>,
    kind: StepKind<'m>,
    opset: i64,
    /// The operator schema's input type constraints, resolved once here and checked on the
    /// tensors of every run (`None`: a function call, or an operator the table lacks).
    schema: Option<&'static Schema>,
    /// Where each input comes from, in the node's order.
    inputs: Vec<Source>,
    /// The slot of each output (`None` for an omitted one).
    outputs: Vec<Option<usize>>,
    /// Slots of this frame whose last use is this step.
    frees: Vec<usize>,
    /// The slot of input 0 when the kernel may write its output over it: the operator has an
    /// in-place kernel and the value dies here.
    donates: Option<usize>,
    /// The node's attributes, parsed once ([`OpDef::prepare`]).
    prepared: Option<Prepared>,
    /// What the kernel keeps across runs, for a step with constant inputs.
    memo: Option<crate::ops::Memo>,
}

impl<'m> Step<'m> {
    /// A step of `node`, not yet placed in a plan: no slots, frees, prepared attributes or memo.
    fn new(
        node: Cow<'m, Node>,
        kind: StepKind<'m>,
        opset: i64,
        schema: Option<&'static Schema>,
    ) -> Step<'m> {
        Step {
            node,
            kind,
            opset,
            schema,
            inputs: Vec::new(),
            outputs: Vec::new(),
            frees: Vec::new(),
            donates: None,
            prepared: None,
            memo: None,
        }
    }

    /// Checks the element types of the step's inputs against its schema (a few bit tests per
    /// input; no name is looked up).
    fn check_types(&self, inputs: &[Option<&Tensor>]) -> Result<()> {
        let Some(schema) = self.schema else {
            return Ok(());
        };
        schema
            .check_with(&self.node.inputs, inputs.len(), |i| {
                inputs[i].map(Tensor::dtype)
            })
            .map_err(Error::Eval)
    }

    /// [`Step::check_types`] on values: a tensor's element type, or a present optional's
    /// tensor's; sequences and empty optionals are not checked (their formal inputs are not).
    fn check_value_types(&self, inputs: &[Option<&Value>]) -> Result<()> {
        let Some(schema) = self.schema else {
            return Ok(());
        };
        schema
            .check_with(&self.node.inputs, inputs.len(), |i| {
                inputs[i].and_then(Value::elem_type)
            })
            .map_err(Error::Eval)
    }
}

/// What a step computed: tensors from a tensor kernel, values from the others. Kept apart so
/// the tensor path stores its outputs without building another vector.
enum Outputs {
    Tensors(Vec<Tensor>),
    Values(Vec<Value>),
}

/// Where a step's input is found.
#[derive(Clone, Debug)]
enum Source {
    /// An omitted optional input.
    Omitted,
    /// A value of this frame.
    Slot(usize),
    /// A constant of this plan (a tensor sharing the plan's payload).
    Constant(Value),
    /// A value of an enclosing scope, by name.
    Outer(String),
}

#[derive(Clone, Copy)]
enum StepKind<'m> {
    Op(&'static OpDef),
    Call(&'m Function),
}

/// The values of one running graph, by slot; `parent` is the enclosing scope of a subgraph.
struct Frame<'f, 'm> {
    values: Vec<Option<Value>>,
    plan: Arc<Plan<'m>>,
    parent: Option<&'f Frame<'f, 'm>>,
}

impl<'f, 'm> Frame<'f, 'm> {
    /// The value `name` as this scope sees it: its own values, its constants, then the
    /// enclosing scopes'.
    fn get(&self, name: &str) -> Option<&Value> {
        match self.plan.slots.get(name) {
            Some(&slot) => self.values[slot].as_ref(),
            None => self
                .plan
                .constants
                .get(name)
                .or_else(|| self.parent.and_then(|p| p.get(name))),
        }
    }

    /// The inputs of `step` from position `from` on, which must be tensors.
    fn inputs<'a>(&'a self, step: &'a Step<'_>, from: usize) -> Result<Vec<Option<&'a Tensor>>> {
        let names = step.node.inputs.iter().skip(from);
        step.inputs[from.min(step.inputs.len())..]
            .iter()
            .zip(names)
            .map(|(source, name)| match self.source(source) {
                Some(None) => Ok(None),
                Some(Some(Value::Tensor(t))) => Ok(Some(t)),
                Some(Some(other)) => Err(Error::Eval(format!(
                    "input '{name}' is a {}, where {} takes a tensor",
                    other.kind(),
                    step.node.op_type
                ))),
                None => Err(Error::Eval(format!("input '{name}' is not defined"))),
            })
            .collect()
    }

    /// The inputs of `step`, of any kind.
    fn values<'a>(&'a self, step: &'a Step<'_>) -> Result<Vec<Option<&'a Value>>> {
        step.inputs
            .iter()
            .zip(&step.node.inputs)
            .map(|(source, name)| {
                self.source(source)
                    .ok_or_else(|| Error::Eval(format!("input '{name}' is not defined")))
            })
            .collect()
    }

    fn source<'a>(&'a self, source: &'a Source) -> Option<Option<&'a Value>> {
        match source {
            Source::Omitted => Some(None),
            Source::Slot(slot) => self.values[*slot].as_ref().map(Some),
            Source::Constant(t) => Some(Some(t)),
            Source::Outer(name) => self.parent.and_then(|p| p.get(name)).map(Some),
        }
    }
}

impl<'m> Session<'m> {
    /// A session on `model` with default options.
    pub fn new(model: &'m Model) -> Session<'m> {
        Session::with_options(model, RunOptions::default())
    }

    /// A session on `model` with `options`. A thread count that cannot be honoured falls back to
    /// the global pool.
    pub fn with_options(model: &'m Model, options: RunOptions) -> Session<'m> {
        let arena = Arena::new(options.max_memory.unwrap_or_else(default_budget), true);
        Session {
            model,
            options,
            plans: Mutex::new(HashMap::new()),
            pool: std::sync::OnceLock::new(),
            arena,
            profile: Mutex::new(Profile::default()),
            output_keys: std::sync::OnceLock::new(),
            folded: Mutex::new((0, 0)),
        }
    }

    /// Where the time of the runs so far went, when the session was built with
    /// [`RunOptions::profile`] (empty otherwise).
    pub fn profile(&self) -> Profile {
        let mut profile = lock(&self.profile).clone();
        profile.folded = *lock(&self.folded);
        profile
    }

    /// Returns the profile so far and starts a new one (to leave out a warm-up run).
    pub fn take_profile(&self) -> Profile {
        let mut profile = std::mem::take(&mut *lock(&self.profile));
        profile.folded = *lock(&self.folded);
        profile
    }

    /// The most bytes of values the session computes once at planning instead of on every run
    /// (input-independent values: weights stored as `Constant` nodes or computed in the graph,
    /// and what is sliced and reshaped from them): a quarter of its memory budget, so folding
    /// never takes the room a run needs.
    pub fn folding_budget(&self) -> usize {
        self.arena.limit() / 4
    }

    /// The arena the session's tensors come from (its budget, and the buffers it keeps).
    pub fn arena(&self) -> &Arc<Arena> {
        &self.arena
    }

    /// The options the session runs with.
    pub fn options(&self) -> &RunOptions {
        &self.options
    }

    /// Checks, without running anything, that every operator of the main graph (and of the
    /// subgraphs and functions it reaches) is known, and that the element types static
    /// inference knows for each node's inputs meet the operator schema's type constraints
    /// ([`constraints`]); what only a run can tell is checked when the step runs.
    ///
    /// It also refuses what the interpreter cannot hold at the graph's edges: a graph input or
    /// output declared as a map, or a sequence of anything but tensors, other than `ZipMap`'s
    /// output, and a node other than `Identity` that reads `ZipMap`'s output (see
    /// [`Session::run_values`]).
    pub fn check(&self) -> Result<()> {
        self.output_keys()?;
        let imports = &self.model.opset_imports;
        let env = TypeEnv::infer(&self.model.graph, imports, TypeEnv::empty());
        let mut seen = HashSet::new();
        self.check_graph(&self.model.graph, imports, &env, &mut seen, 0)
    }

    /// [`Session::check`] on one graph whose types are `env`. `seen` holds the function bodies
    /// already checked, with the element types of their inputs, so that each is typed once per
    /// signature however many calls reach it.
    fn check_graph(
        &self,
        graph: &'m Graph,
        imports: &'m [OpsetImport],
        env: &TypeEnv,
        seen: &mut HashSet<(usize, Vec<Option<DataType>>)>,
        depth: usize,
    ) -> Result<()> {
        if depth > MAX_CALL_DEPTH {
            return Err(Error::Limit(format!(
                "subgraphs and function calls nest deeper than {MAX_CALL_DEPTH}"
            )));
        }
        let elem = |name: &String| env.get(name).and_then(|t| t.elem);
        for (position, (_, node)) in graph.nodes().enumerate() {
            match self.resolve(node, imports, (graph, position))? {
                (StepKind::Call(f), _) => {
                    let types: Vec<Option<DataType>> = node.inputs.iter().map(elem).collect();
                    if !seen.insert((f as *const Function as usize, types.clone())) {
                        continue;
                    }
                    let formals: Vec<Option<TensorType>> = types
                        .into_iter()
                        .map(|t| {
                            t.map(|t| TensorType {
                                elem: Some(t),
                                shape: None,
                            })
                        })
                        .collect();
                    let imports = function_imports(f, imports);
                    let body = TypeEnv::infer_with(
                        &f.body,
                        imports,
                        TypeEnv::empty(),
                        Formals::Given(&formals),
                    );
                    self.check_graph(&f.body, imports, &body, seen, depth + 1)?
                }
                (StepKind::Op(_), opset) => {
                    if let Some(schema) = constraints::lookup(&node.domain, &node.op_type, opset) {
                        schema
                            .check_with(&node.inputs, node.inputs.len(), |i| elem(&node.inputs[i]))
                            .map_err(|reason| at_node(node, Error::Eval(reason)))?;
                    }
                    for attr in &node.attributes {
                        match &attr.value {
                            AttrValue::Graph(g) => {
                                let formals = infer::formals(node, &attr.name, imports, env);
                                let inner =
                                    TypeEnv::infer_with(g, imports, env, Formals::Given(&formals));
                                self.check_graph(g, imports, &inner, seen, depth + 1)?;
                            }
                            AttrValue::Graphs(gs) => {
                                for g in gs {
                                    let inner =
                                        TypeEnv::infer_with(g, imports, env, Formals::Given(&[]));
                                    self.check_graph(g, imports, &inner, seen, depth + 1)?;
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs the main graph. `inputs` bind graph inputs by name (initializers may be overridden);
    /// returns every graph output, by name, in order. Every output must be a tensor: a model
    /// that returns sequences or optionals runs with [`Session::run_values`].
    pub fn run(&self, inputs: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
        let inputs = inputs
            .into_iter()
            .map(|(n, t)| (n, Value::Tensor(t)))
            .collect();
        self.run_main(inputs)?
            .into_iter()
            .map(|(name, v)| match v {
                Value::Tensor(t) => Ok((name, t)),
                other => Err(Error::Eval(format!(
                    "output '{name}' is a {}; Session::run_values returns it",
                    other.kind()
                ))),
            })
            .collect()
    }

    /// Runs the main graph on `inputs` of any kind, by name; returns its outputs in order.
    fn run_main(&self, inputs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>> {
        let graph = &self.model.graph;
        let mut values: Vec<Option<Value>> = Vec::new();
        values.resize_with(graph.inputs.len(), || None);
        for (name, v) in inputs {
            let Some(position) = graph.inputs.iter().position(|v| v.name == name) else {
                return Err(Error::Eval(format!(
                    "the model has no input named '{name}'"
                )));
            };
            values[position] = Some(edges::bind_input(&graph.inputs[position], v)?);
        }
        let work = || {
            let outputs =
                self.run_graph(graph, &self.model.opset_imports, values, None, None, 0)?;
            Ok(graph
                .outputs
                .iter()
                .map(|o| o.name.clone())
                .zip(outputs)
                .collect())
        };
        let work = || self.arena.enter(work);
        // Workers that sleep between operators pay a wake-up at every split one, and at the
        // start of every run: they are kept awake (see `par::with_workers_awake`).
        self.options.check()?;
        let threads = match self.options.threads {
            Some(1) => return crate::par::serial(work),
            threads => threads.unwrap_or(0),
        };
        let awake = || crate::par::with_workers_awake(work);
        if let Some(caller) = threads::Caller::get(threads) {
            return caller.run(&self.arena, awake);
        }
        match self.pool.get_or_init(|| threads::own(threads, &self.arena)) {
            Some(pool) => pool.install(awake),
            None => awake(),
        }
    }

    /// Runs the main graph like [`Session::run`], on inputs of any kind (tensors, or
    /// [`Value`]s: sequences and optionals; a tensor or a sequence given for an input declared
    /// optional is a present optional), and returns its outputs as users see them: a tensor, a
    /// sequence, an optional, or for `ZipMap`'s output (held as the `[N, C]` tensor of its
    /// values inside the run) the [`crate::ir::SequenceOfMaps`] with the node's class labels as
    /// keys.
    ///
    /// # Example
    /// ```
    /// use multigather::interp::Session;
    /// use multigather::ir::{AttrValue, Dim, Graph, MapKeys, Model, Node, OpsetImport, Type, Value, ValueInfo};
    /// use multigather::{DataType, Tensor};
    ///
    /// let mut g = Graph::new("g");
    /// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(1), Dim::Known(2)])));
    /// g.outputs.push(ValueInfo::untyped("y"));
    /// g.add_node(Node::new("ZipMap", "z", ["x"], ["y"])
    ///     .with_domain("ai.onnx.ml")
    ///     .with_attr("classlabels_int64s", AttrValue::Ints(vec![4, 7])));
    /// let mut model = Model::new(g, 13);
    /// model.opset_imports.push(OpsetImport { domain: Some("ai.onnx.ml".into()), version: 1 });
    /// let x = Tensor::from_vec(DataType::Float, &[1, 2], vec![0.25f32, 0.75])?;
    /// let outputs = Session::new(&model).run_values(vec![("x".into(), x)])?;
    /// let Value::Maps(maps) = &outputs[0].1 else { panic!("not maps") };
    /// assert_eq!(maps.keys(), &MapKeys::Int64(vec![4, 7]));
    /// assert_eq!(maps.row(0), Some(&[0.25f32, 0.75][..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_values<V: Into<Value>>(
        &self,
        inputs: Vec<(String, V)>,
    ) -> Result<Vec<(String, Value)>> {
        let keys = self.output_keys()?;
        let inputs = inputs.into_iter().map(|(n, v)| (n, v.into())).collect();
        edges::to_values(self.run_main(inputs)?, keys)
    }

    /// For each output of the main graph, the keys of the maps [`Session::run_values`] returns
    /// for it when it is `ZipMap`'s sequence of maps, `None` for a tensor. An error for what
    /// the interpreter cannot hold (see [`Session::check`]). Found on the first call and
    /// kept for the session's later runs.
    pub fn output_keys(&self) -> Result<&[Option<MapKeys>]> {
        if let Some(keys) = self.output_keys.get() {
            return Ok(keys);
        }
        let keys = edges::output_keys(self.model)?;
        Ok(self.output_keys.get_or_init(|| keys))
    }

    /// The type each output of the main graph is read and written as in files (see
    /// [`crate::io::files::read_output_values`]): its declared type, and for `ZipMap`'s
    /// sequence of maps (which may be undeclared) `seq(map)`. An error for what the interpreter
    /// cannot hold (see [`Session::check`]).
    pub fn output_types(&self) -> Result<Vec<Option<crate::ir::Type>>> {
        let keys = self.output_keys()?;
        Ok(self
            .model
            .graph
            .outputs
            .iter()
            .zip(keys)
            .map(|(o, keys)| match keys {
                Some(_) => Some(edges::sequence_of_maps()),
                None => o.ty.clone(),
            })
            .collect())
    }

    /// Runs `graph` with `inputs` bound to its inputs in order (`None`: not given, so an
    /// initializer of the same name or an error) and returns its outputs in order.
    fn run_graph(
        &self,
        graph: &'m Graph,
        imports: &'m [OpsetImport],
        inputs: Vec<Option<Value>>,
        parent: Option<&Frame<'_, 'm>>,
        call: Option<(&'m Node, &'m Function)>,
        depth: usize,
    ) -> Result<Vec<Value>> {
        if depth > MAX_CALL_DEPTH {
            return Err(Error::Limit(format!(
                "subgraphs and function calls nest deeper than {MAX_CALL_DEPTH}"
            )));
        }
        let plan = self.plan(graph, imports, call, parent)?;
        let mut values: Vec<Option<Value>> = Vec::new();
        values.resize_with(plan.slots.len(), || None);
        let mut given = inputs.into_iter();
        for (v, &slot) in graph.inputs.iter().zip(&plan.input_slots) {
            let value = given
                .next()
                .flatten()
                .or_else(|| plan.constants.get(&v.name).cloned());
            match value {
                Some(t) => values[slot] = Some(t),
                None if values[slot].is_some() => {}
                None => {
                    return Err(Error::Eval(format!(
                        "graph '{}': input '{}' is not given",
                        graph.name, v.name
                    )))
                }
            }
        }
        let mut frame = Frame {
            values,
            plan: plan.clone(),
            parent,
        };
        for &slot in &plan.unused_inputs {
            frame.values[slot] = None;
        }
        let timed = self.options.profile && depth == 0 && parent.is_none() && call.is_none();
        let mut times = Vec::with_capacity(if timed { plan.steps.len() } else { 0 });
        for step in &plan.steps {
            let start = timed.then(Instant::now);
            let donated = match step.donates {
                Some(slot) => match frame.values[slot].take() {
                    Some(Value::Tensor(t)) => Some(t),
                    // Not a tensor: put back, for the step to name it.
                    other => {
                        frame.values[slot] = other;
                        None
                    }
                },
                None => None,
            };
            let outputs = self
                .run_step(step, imports, &frame, depth, donated)
                .map_err(|e| at_node(&step.node, e))?;
            if let Some(start) = start {
                times.push(start.elapsed());
            }
            match outputs {
                Outputs::Tensors(tensors) => {
                    for (&slot, t) in step.outputs.iter().zip(tensors) {
                        if let Some(slot) = slot {
                            frame.values[slot] = Some(Value::Tensor(t));
                        }
                    }
                }
                Outputs::Values(values) => {
                    for (&slot, v) in step.outputs.iter().zip(values) {
                        if let Some(slot) = slot {
                            frame.values[slot] = Some(v);
                        }
                    }
                }
            }
            for &slot in &step.frees {
                frame.values[slot] = None;
            }
        }
        if timed {
            self.record(&plan, times);
        }
        graph
            .outputs
            .iter()
            .map(|o| {
                let own = plan
                    .slots
                    .get(&o.name)
                    .and_then(|&slot| frame.values[slot].take());
                own.or_else(|| frame.get(&o.name).cloned()).ok_or_else(|| {
                    Error::Eval(format!(
                        "graph '{}': output '{}' was not computed",
                        graph.name, o.name
                    ))
                })
            })
            .collect()
    }

    /// Adds one run's step times to the profile.
    fn record(&self, plan: &Plan<'m>, times: Vec<Duration>) {
        let mut profile = lock(&self.profile);
        if profile.steps.is_empty() {
            profile.steps = plan
                .steps
                .iter()
                .map(|step| StepTime {
                    node: step.node.name.clone(),
                    op_type: match step.node.domain.as_str() {
                        domain if is_onnx_domain(domain) => step.node.op_type.clone(),
                        domain => format!("{domain}.{}", step.node.op_type),
                    },
                    total: Duration::ZERO,
                })
                .collect();
        }
        profile.runs += 1;
        for (entry, time) in profile.steps.iter_mut().zip(times) {
            entry.total += time;
        }
    }

    /// Runs an operator step's kernel on `inputs` after checking their types and the memory
    /// its outputs will take.
    fn eval_op(
        &self,
        def: &OpDef,
        ctx: &EvalCtx<'_>,
        step: &Step<'m>,
        inputs: &[Option<&Tensor>],
    ) -> Result<Vec<Tensor>> {
        step.check_types(inputs)?;
        if let Some(bytes) = output_bytes(def, ctx.node, step.opset, ctx.prepared, inputs) {
            self.arena.check(bytes)?;
        }
        (def.eval)(ctx, inputs)
    }

    /// Runs one step; `donated` is its input 0, taken out of the frame, when the step
    /// [`donates`](Step::donates) it.
    fn run_step(
        &self,
        step: &Step<'m>,
        imports: &'m [OpsetImport],
        frame: &Frame<'_, 'm>,
        depth: usize,
        donated: Option<Tensor>,
    ) -> Result<Outputs> {
        let node: &Node = &step.node;
        let outputs = match step.kind {
            StepKind::Op(def) => {
                let runner = Scope {
                    session: self,
                    imports,
                    frame,
                    step,
                    depth,
                };
                let ctx = EvalCtx {
                    node,
                    opset: step.opset,
                    runner: &runner,
                    prepared: step.prepared.as_deref(),
                    memo: step.memo.as_ref(),
                };
                if let Some(values) = def.values {
                    let inputs = frame.values(step)?;
                    step.check_value_types(&inputs)?;
                    let outputs = values(&ctx, &inputs)?;
                    return Ok(Outputs::Values(check_outputs(node, outputs)?));
                }
                match (donated, def.in_place) {
                    (Some(x), Some(in_place)) => {
                        let rest = frame.inputs(step, 1)?;
                        step.check_types(&with_first(&x, &rest))?;
                        match in_place(&ctx, x, &rest)? {
                            Ok(outputs) => outputs,
                            Err(x) => self.eval_op(def, &ctx, step, &with_first(&x, &rest))?,
                        }
                    }
                    (Some(_), None) => {
                        return Err(Error::Eval("an input was handed over to no kernel".into()))
                    }
                    (None, _) => self.eval_op(def, &ctx, step, &frame.inputs(step, 0)?)?,
                }
            }
            StepKind::Call(f) => {
                let inputs = frame.values(step)?;
                let bound = (0..f.body.inputs.len())
                    .map(|i| inputs.get(i).copied().flatten().cloned())
                    .collect();
                let site = match &step.node {
                    Cow::Borrowed(n) => *n,
                    // A call inside a function body whose own attributes were bound: bind the
                    // callee's references from the call as written.
                    Cow::Owned(_) => {
                        return Err(Error::Unsupported(
                            "a function call whose attributes refer to the caller's attributes"
                                .into(),
                        ))
                    }
                };
                let outputs = self.run_graph(
                    &f.body,
                    function_imports(f, imports),
                    bound,
                    None,
                    Some((site, f)),
                    depth + 1,
                )?;
                return Ok(Outputs::Values(check_outputs(node, outputs)?));
            }
        };
        Ok(Outputs::Tensors(check_outputs(node, outputs)?))
    }
}

/// The inputs of a step whose input 0 was handed over: `first`, then `rest`.
fn with_first<'a>(first: &'a Tensor, rest: &[Option<&'a Tensor>]) -> Vec<Option<&'a Tensor>> {
    std::iter::once(Some(first))
        .chain(rest.iter().copied())
        .collect()
}

/// The first outputs of a kernel, as many as `node` names; an error if it made fewer.
fn check_outputs<T>(node: &Node, outputs: Vec<T>) -> Result<Vec<T>> {
    let want = node.outputs.len();
    if outputs.len() < want {
        return Err(Error::Eval(format!(
            "produced {} outputs, the node names {want}",
            outputs.len()
        )));
    }
    Ok(outputs.into_iter().take(want).collect())
}

/// How deeply subgraphs and function calls may nest while running.
const MAX_CALL_DEPTH: usize = 64;

/// The subgraph runner a node's kernel sees.
struct Scope<'s, 'f, 'm> {
    session: &'s Session<'m>,
    imports: &'m [OpsetImport],
    frame: &'s Frame<'f, 'm>,
    step: &'s Step<'m>,
    depth: usize,
}

impl SubgraphRunner for Scope<'_, '_, '_> {
    fn run_subgraph(&self, graph: &Graph, inputs: Vec<Value>) -> Result<Vec<Value>> {
        // The graph is an attribute of a node of the session's model (kernels only pass their
        // own node's graphs), so it lives as long as the model; find it there to get that
        // lifetime rather than trusting the caller.
        let graph = self.find_subgraph(graph)?;
        if inputs.len() != graph.inputs.len() {
            return Err(Error::Eval(format!(
                "subgraph '{}' takes {} inputs, {} were given",
                graph.name,
                graph.inputs.len(),
                inputs.len()
            )));
        }
        let values = inputs.into_iter().map(Some).collect();
        self.session.run_graph(
            graph,
            self.imports,
            values,
            Some(self.frame),
            None,
            self.depth + 1,
        )
    }
}

impl<'m> Scope<'_, '_, 'm> {
    /// The model's copy of `graph`, which must be an attribute of the running node: found by
    /// address, so its lifetime is the model's and its plan can be cached.
    fn find_subgraph(&self, graph: &Graph) -> Result<&'m Graph> {
        let found = match &self.step.node {
            Cow::Borrowed(n) => n.subgraphs().find(|g| std::ptr::eq(*g, graph)),
            // A function-body node with bound attribute references owns a copy of its graphs.
            Cow::Owned(_) => None,
        };
        found.ok_or_else(|| {
            Error::Unsupported(format!(
                "subgraph '{}' of a function-body node whose attributes refer to the function's",
                graph.name
            ))
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn function_imports<'m>(f: &'m Function, outer: &'m [OpsetImport]) -> &'m [OpsetImport] {
    if f.opset_imports.is_empty() {
        outer
    } else {
        &f.opset_imports
    }
}

fn at_node(node: &Node, e: Error) -> Error {
    match e {
        // Errors that already name a node (a nested graph's, or the loader's) pass through.
        Error::AtNode { .. } | Error::InvalidNode { .. } | Error::Unsupported(_) => e,
        other => Error::AtNode {
            node: node.quoted_label(),
            op: node.qualified_op(),
            cause: Box::new(other),
        },
    }
}
