//! The reference interpreter: runs a model's graph on tensors, node by node, in execution order.
//!
//! A [`Session`] holds a model and, per graph it has run, a [`Plan`]: the nodes in execution order
//! with their operator definitions resolved (an unknown operator is reported before anything
//! runs), the initializers converted to tensors once, and for each node the values whose last use
//! it is, so they are freed as soon as possible.
//!
//! Values live in frames. A subgraph (`If` / `Loop` / `Scan` body) runs in a frame whose parent is
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

pub mod files;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::ir::{
    opset_version, AttrValue, Attribute, Function, Graph, Model, Node, OpsetImport, StoredTensor,
};
use crate::ops::{registry, EvalCtx, OpDef, SubgraphRunner};
use crate::tensor::Tensor;

/// How a session runs.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Worker threads for the kernels (`None`: every core).
    pub threads: Option<usize>,
}

/// A model ready to run, with the plans of the graphs it has run cached.
pub struct Session<'m> {
    model: &'m Model,
    options: RunOptions,
    plans: Mutex<HashMap<PlanKey, Arc<Plan<'m>>>>,
    pool: Option<rayon::ThreadPool>,
}

/// A graph (by address), for a function body the call node whose attributes it binds, and for
/// a subgraph the plan of its enclosing graph (whose constants it folds with its own).
type PlanKey = (usize, usize, usize);

/// One graph, ready to run.
struct Plan<'m> {
    steps: Vec<Step<'m>>,
    /// Initializers as tensors, by name.
    constants: HashMap<String, Tensor>,
    /// Values to drop before the first step: inputs nothing reads.
    unused_inputs: Vec<String>,
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
    /// Values of this frame whose last use is this step.
    frees: Vec<String>,
}

enum StepKind<'m> {
    Op(&'static OpDef),
    Call(&'m Function),
}

/// The values of one running graph; `parent` is the enclosing scope of a subgraph.
struct Frame<'f, 'm> {
    values: HashMap<String, Tensor>,
    plan: Arc<Plan<'m>>,
    parent: Option<&'f Frame<'f, 'm>>,
}

impl<'f, 'm> Frame<'f, 'm> {
    fn get(&self, name: &str) -> Option<&Tensor> {
        self.values
            .get(name)
            .or_else(|| self.plan.constants.get(name))
            .or_else(|| self.parent.and_then(|p| p.get(name)))
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
        let pool = options.threads.and_then(|n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n.max(1))
                .build()
                .ok()
        });
        Session {
            model,
            options,
            plans: Mutex::new(HashMap::new()),
            pool,
        }
    }

    /// The options the session runs with.
    pub fn options(&self) -> &RunOptions {
        &self.options
    }

    /// Checks that every operator of the main graph (and of the subgraphs and functions it
    /// reaches) is known, without running anything.
    pub fn check(&self) -> Result<()> {
        self.check_graph(&self.model.graph, &self.model.opset_imports, 0)
    }

    fn check_graph(
        &self,
        graph: &'m Graph,
        imports: &'m [OpsetImport],
        depth: usize,
    ) -> Result<()> {
        if depth > MAX_CALL_DEPTH {
            return Err(Error::Limit(format!(
                "subgraphs and function calls nest deeper than {MAX_CALL_DEPTH}"
            )));
        }
        for (_, node) in graph.nodes() {
            match self.resolve(node, imports)? {
                (StepKind::Call(f), _) => {
                    self.check_graph(&f.body, function_imports(f, imports), depth + 1)?
                }
                (StepKind::Op(_), _) => {
                    for g in node.subgraphs() {
                        self.check_graph(g, imports, depth + 1)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs the main graph. `inputs` bind graph inputs by name (initializers may be overridden);
    /// returns every graph output, by name, in order.
    pub fn run(&self, inputs: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
        let graph = &self.model.graph;
        let mut values = HashMap::new();
        for (name, t) in inputs {
            let Some(decl) = graph.inputs.iter().find(|v| v.name == name) else {
                return Err(Error::Eval(format!(
                    "the model has no input named '{name}'"
                )));
            };
            check_declared(&name, decl.tensor_type(), &t)?;
            values.insert(name, t);
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
        match &self.pool {
            Some(pool) => pool.install(work),
            None => work(),
        }
    }

    fn plan(
        &self,
        graph: &'m Graph,
        imports: &'m [OpsetImport],
        call: Option<(&'m Node, &'m Function)>,
        parent: Option<&Frame<'_, 'm>>,
    ) -> Result<Arc<Plan<'m>>> {
        let key = (
            graph as *const Graph as usize,
            call.map_or(0, |(n, _)| n as *const Node as usize),
            parent.map_or(0, |f| Arc::as_ptr(&f.plan) as usize),
        );
        if let Some(plan) = lock(&self.plans).get(&key) {
            return Ok(plan.clone());
        }
        let plan = Arc::new(self.build_plan(graph, imports, call, parent)?);
        lock(&self.plans).insert(key, plan.clone());
        Ok(plan)
    }

    fn build_plan(
        &self,
        graph: &'m Graph,
        imports: &'m [OpsetImport],
        call: Option<(&'m Node, &'m Function)>,
        parent: Option<&Frame<'_, 'm>>,
    ) -> Result<Plan<'m>> {
        let mut constants = HashMap::new();
        for t in &graph.initializers {
            if let Some(name) = &t.name {
                constants.insert(name.clone(), stored_to_tensor(t)?);
            }
        }
        let mut steps = Vec::with_capacity(graph.node_count());
        for (_, node) in graph.nodes() {
            let node = match call {
                Some((site, f)) if has_refs(node) => Cow::Owned(bind_refs(node, site, f)?),
                _ => Cow::Borrowed(node),
            };
            let (kind, opset) = self.resolve(&node, imports)?;
            if let StepKind::Op(def) = kind {
                def.check_arity(&node)?;
            }
            steps.push(Step {
                node,
                kind,
                opset,
                frees: Vec::new(),
            });
        }
        if steps.len() != graph.node_count() {
            return Err(Error::InvalidGraph {
                graph: graph.name.clone(),
                reason: "the nodes form a cycle".into(),
            });
        }
        let (mut steps, fixed) = fold_constants(graph, steps, &mut constants, parent);
        // Values defined in this frame, freed after their last use unless they are outputs.
        let mut local: HashSet<&str> = graph
            .inputs
            .iter()
            .map(|v| v.name.as_str())
            .chain(
                steps
                    .iter()
                    .flat_map(|s| s.node.outputs.iter().map(String::as_str)),
            )
            .collect();
        for o in &graph.outputs {
            local.remove(o.name.as_str());
        }
        let mut last_use: HashMap<String, usize> = HashMap::new();
        for (i, step) in steps.iter().enumerate() {
            for name in step.node.uses() {
                if local.contains(name.as_str()) {
                    last_use.insert(name, i);
                }
            }
            // Outputs nothing reads are freed right after the step that makes them.
            for o in &step.node.outputs {
                if local.contains(o.as_str()) {
                    last_use.entry(o.clone()).or_insert(i);
                }
            }
        }
        let unused_inputs = graph
            .inputs
            .iter()
            .filter(|v| local.contains(v.name.as_str()) && !last_use.contains_key(&v.name))
            .map(|v| v.name.clone())
            .collect();
        for (name, i) in last_use {
            steps[i].frees.push(name);
        }
        let variables = graph
            .inputs
            .iter()
            .map(|v| &v.name)
            .chain(steps.iter().flat_map(|s| &s.node.outputs))
            .chain(constants.keys().filter(|name| !fixed.contains(*name)))
            .cloned()
            .collect();
        Ok(Plan {
            steps,
            constants,
            unused_inputs,
            fixed,
            variables,
        })
    }

    /// What runs a node: a model-local function or a registered operator, with the opset
    /// version of the node's domain.
    fn resolve(&self, node: &Node, imports: &[OpsetImport]) -> Result<(StepKind<'m>, i64)> {
        let opset = opset_version(imports, &node.domain)
            .or_else(|| opset_version(&self.model.opset_imports, &node.domain));
        let is_multiaxis =
            node.domain == crate::gather::DOMAIN && node.op_type == crate::gather::OP_TYPE;
        if !is_multiaxis {
            if let Some(f) = self.model.functions.iter().find(|f| {
                f.domain == node.domain && f.name == node.op_type && f.overload == node.overload
            }) {
                return Ok((StepKind::Call(f), opset.unwrap_or(0)));
            }
        }
        let Some(opset) = opset else {
            return Err(Error::node(
                &node.name,
                &node.op_type,
                format!("no opset is imported for domain '{}'", node.domain),
            ));
        };
        match registry().lookup(&node.domain, &node.op_type, opset) {
            Some(def) => Ok((StepKind::Op(def), opset)),
            None => {
                let domain = if node.domain.is_empty() {
                    "ai.onnx"
                } else {
                    &node.domain
                };
                Err(Error::Unsupported(format!(
                    "operator {} ({domain}, opset {opset}) at node '{}'",
                    node.op_type, node.name
                )))
            }
        }
    }

    /// Runs `graph` with `values` bound (its inputs) and returns its outputs in order.
    fn run_graph(
        &self,
        graph: &'m Graph,
        imports: &'m [OpsetImport],
        values: HashMap<String, Tensor>,
        parent: Option<&Frame<'_, 'm>>,
        call: Option<(&'m Node, &'m Function)>,
        depth: usize,
    ) -> Result<Vec<Tensor>> {
        if depth > MAX_CALL_DEPTH {
            return Err(Error::Limit(format!(
                "subgraphs and function calls nest deeper than {MAX_CALL_DEPTH}"
            )));
        }
        let plan = self.plan(graph, imports, call, parent)?;
        let mut frame = Frame {
            values,
            plan: plan.clone(),
            parent,
        };
        for v in &graph.inputs {
            if frame.get(&v.name).is_none() {
                return Err(Error::Eval(format!(
                    "graph '{}': input '{}' is not given",
                    graph.name, v.name
                )));
            }
        }
        for name in &plan.unused_inputs {
            frame.values.remove(name);
        }
        for step in &plan.steps {
            let outputs = self
                .run_step(step, imports, &frame, depth)
                .map_err(|e| at_node(&step.node, e))?;
            for (name, t) in step.node.outputs.iter().zip(outputs) {
                if !name.is_empty() {
                    frame.values.insert(name.clone(), t);
                }
            }
            for name in &step.frees {
                frame.values.remove(name);
            }
        }
        graph
            .outputs
            .iter()
            .map(|o| {
                frame.values.remove(&o.name).map_or_else(
                    || {
                        frame.get(&o.name).cloned().ok_or_else(|| {
                            Error::Eval(format!(
                                "graph '{}': output '{}' was not computed",
                                graph.name, o.name
                            ))
                        })
                    },
                    Ok,
                )
            })
            .collect()
    }

    fn run_step(
        &self,
        step: &Step<'m>,
        imports: &'m [OpsetImport],
        frame: &Frame<'_, 'm>,
        depth: usize,
    ) -> Result<Vec<Tensor>> {
        let node: &Node = &step.node;
        let inputs: Vec<Option<&Tensor>> = node
            .inputs
            .iter()
            .map(|name| {
                if name.is_empty() {
                    return Ok(None);
                }
                frame
                    .get(name)
                    .map(Some)
                    .ok_or_else(|| Error::Eval(format!("input '{name}' is not defined")))
            })
            .collect::<Result<_>>()?;
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
                };
                (def.eval)(&ctx, &inputs)?
            }
            StepKind::Call(f) => {
                let mut bound = HashMap::new();
                for (formal, actual) in f.body.inputs.iter().zip(&inputs) {
                    if let Some(t) = actual {
                        bound.insert(formal.name.clone(), (*t).clone());
                    }
                }
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
                self.run_graph(
                    &f.body,
                    function_imports(f, imports),
                    bound,
                    None,
                    Some((site, f)),
                    depth + 1,
                )?
            }
        };
        let want = node.outputs.len();
        if outputs.len() < want {
            return Err(Error::Eval(format!(
                "produced {} outputs, the node names {want}",
                outputs.len()
            )));
        }
        Ok(outputs.into_iter().take(want).collect())
    }
}

/// Operators whose outputs are not a function of their inputs and attributes: never folded.
const NOT_FOLDED: &[&str] = &[
    "Bernoulli",
    "Dropout",
    "Multinomial",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
];

/// Outputs larger than this are computed on every run rather than kept by the plan.
const MAX_FOLDED_BYTES: usize = 64 << 20;

/// Runs, once, the steps whose inputs are all constants (initializers of the graph that no input
/// can override, constants of the same kind in the enclosing scopes that nothing hides, and the
/// outputs of steps folded before), as a runtime folds constants: their outputs join `constants`
/// and the steps leave the plan. Weights stored as `Constant` nodes, and the shape arithmetic and
/// weight slicing on them, then cost nothing per run. The same kernels compute the same values,
/// only earlier, so results do not change. A step that fails stays in the plan, to report its
/// error when the graph runs. Returns the remaining steps and the names of the constants that
/// are fixed.
fn fold_constants<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &mut HashMap<String, Tensor>,
    parent: Option<&Frame<'_, 'm>>,
) -> (Vec<Step<'m>>, HashSet<String>) {
    // Names bound at run time, or bound twice, are not constants.
    let mut produced: HashMap<String, usize> = HashMap::new();
    for step in &steps {
        for o in &step.node.outputs {
            *produced.entry(o.clone()).or_default() += 1;
        }
    }
    let variable = |name: &str| {
        graph.inputs.iter().any(|v| v.name == name) || produced.get(name).is_some_and(|&n| n > 1)
    };
    let mut fixed: HashSet<String> = constants
        .keys()
        .filter(|name| !variable(name) && !produced.contains_key(*name))
        .cloned()
        .collect();
    // Names this graph defines hide those of the enclosing scopes.
    let local: HashSet<String> = graph
        .inputs
        .iter()
        .map(|v| v.name.clone())
        .chain(constants.keys().cloned())
        .chain(produced.keys().cloned())
        .collect();
    let mut kept = Vec::with_capacity(steps.len());
    for step in steps {
        let def = match step.kind {
            StepKind::Op(def) => def,
            StepKind::Call(_) => {
                kept.push(step);
                continue;
            }
        };
        let node: &Node = &step.node;
        let eligible = !(node.domain.is_empty() && NOT_FOLDED.contains(&node.op_type.as_str()))
            && node.subgraphs().next().is_none()
            && node
                .outputs
                .iter()
                .all(|o| !o.is_empty() && !variable(o) && !constants.contains_key(o));
        let resolve = |name: &String| -> Option<Option<&Tensor>> {
            if name.is_empty() {
                Some(None)
            } else if fixed.contains(name) {
                constants.get(name).map(Some)
            } else if local.contains(name) {
                None
            } else {
                outer_constant(parent, name).map(Some)
            }
        };
        let inputs: Option<Vec<Option<&Tensor>>> = if eligible {
            node.inputs.iter().map(resolve).collect()
        } else {
            None
        };
        let Some(inputs) = inputs else {
            kept.push(step);
            continue;
        };
        let ctx = EvalCtx {
            node,
            opset: step.opset,
            runner: &crate::ops::NoSubgraphs,
        };
        let folded = match (def.eval)(&ctx, &inputs) {
            Ok(outputs)
                if outputs.len() >= node.outputs.len()
                    && outputs
                        .iter()
                        .all(|t| t.as_bytes().map_or(0, <[u8]>::len) <= MAX_FOLDED_BYTES) =>
            {
                outputs
            }
            _ => {
                kept.push(step);
                continue;
            }
        };
        for (name, t) in node.outputs.iter().zip(folded) {
            fixed.insert(name.clone());
            constants.insert(name.clone(), t);
        }
    }
    (kept, fixed)
}

/// The fixed constant `name` of the nearest enclosing scope that defines it, if that scope
/// holds it as a fixed constant.
fn outer_constant<'a>(mut frame: Option<&'a Frame<'_, '_>>, name: &str) -> Option<&'a Tensor> {
    while let Some(f) = frame {
        if f.plan.fixed.contains(name) {
            return f.plan.constants.get(name);
        }
        if f.plan.variables.contains(name) {
            return None;
        }
        frame = f.parent;
    }
    None
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
    fn run_subgraph(&self, graph: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
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
        let values = graph
            .inputs
            .iter()
            .map(|v| v.name.clone())
            .zip(inputs)
            .collect();
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
            node: match (node.name.as_str(), node.outputs.first()) {
                ("", Some(out)) => format!("producing '{out}'"),
                (name, _) => format!("'{name}'"),
            },
            op: node.qualified_op(),
            cause: Box::new(other),
        },
    }
}

fn has_refs(node: &Node) -> bool {
    node.attributes
        .iter()
        .any(|a| matches!(a.value, AttrValue::Ref { .. }))
}

/// A copy of a function-body node with its attribute references replaced by the call site's
/// attributes, or the function's defaults; references to attributes neither gives are dropped
/// (the attribute is then absent, as ONNX specifies).
fn bind_refs(node: &Node, site: &Node, f: &Function) -> Result<Node> {
    let mut bound = node.clone();
    let mut attributes = Vec::with_capacity(node.attributes.len());
    for a in &node.attributes {
        match &a.value {
            AttrValue::Ref { name, .. } => {
                let value = site
                    .attributes
                    .iter()
                    .chain(&f.attribute_defaults)
                    .find(|b| &b.name == name)
                    .map(|b| b.value.clone());
                if let Some(value) = value {
                    attributes.push(Attribute {
                        name: a.name.clone(),
                        value,
                        doc_string: a.doc_string.clone(),
                    });
                }
            }
            _ => attributes.push(a.clone()),
        }
    }
    bound.attributes = attributes;
    Ok(bound)
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

/// A stored tensor (initializer, attribute, `.pb` file) as a runtime tensor.
///
/// # Example
/// ```
/// use multigather::interp::stored_to_tensor;
/// use multigather::ir::StoredTensor;
/// let t = stored_to_tensor(&StoredTensor::from_i64s(Some("s"), &[2], &[3, -1]))?;
/// assert_eq!(t.as_slice::<i64>()?, &[3, -1]);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn stored_to_tensor(t: &StoredTensor) -> Result<Tensor> {
    t.check_size()?;
    let dims: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::tensor(t.display_name(), format!("negative dims {:?}", t.dims)))?;
    let tensor = match &t.payload {
        crate::ir::Payload::String(v) => Tensor::from_strings(&dims, v.clone()),
        _ => Tensor::from_bytes(t.elem, &dims, &t.le_bytes()?),
    };
    tensor.map_err(|e| Error::tensor(t.display_name(), e.to_string()))
}

/// A runtime tensor as a stored tensor named `name` (raw little-endian data, or strings).
pub fn tensor_to_stored(name: &str, t: &Tensor) -> Result<StoredTensor> {
    let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    Ok(match t.as_strings() {
        Ok(strings) => {
            let mut s = StoredTensor::raw(Some(name), t.dtype(), &dims, bytes::Bytes::new());
            s.payload = crate::ir::Payload::String(strings.to_vec());
            s
        }
        Err(_) => StoredTensor::raw(
            Some(name),
            t.dtype(),
            &dims,
            bytes::Bytes::copy_from_slice(t.as_bytes()?),
        ),
    })
}
