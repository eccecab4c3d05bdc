//! Static type inference: the element type and (possibly symbolic) shape of every value of a graph
//! that can be known without running it.
//!
//! Types come from the graph's declarations (inputs, outputs, `value_info`, initializers), from the
//! enclosing scopes for subgraphs, and from the operators' shape functions node by node
//! ([`crate::ops`]). Declared and inferred types are merged, keeping whichever knows more. Nothing
//! is ever guessed: an unknown rank stays unknown, and the rewrite pass skips what it cannot prove.

use crate::ir::stored_to_tensor;
use crate::ir::{
    is_onnx_domain, opset_version, same_dim, Dim, Graph, Node, OpsetImport, Shape, StoredTensor,
    TensorType,
};
use crate::ops::{self, Folder};
use crate::tensor::Tensor;

/// The known type of each value in scope, and the declarations that contradict what was
/// inferred.
///
/// A subgraph's environment reads its enclosing scopes' through a reference instead of a copy,
/// so typing a graph with many subgraphs stays linear in its size.
#[derive(Clone, Debug, Default)]
pub struct TypeEnv<'o> {
    types: crate::ir::NameMap<TensorType>,
    /// Names this scope defines: what an enclosing scope knows of them does not apply here.
    own: std::collections::HashSet<String, foldhash::fast::RandomState>,
    outer: Option<&'o TypeEnv<'o>>,
    contradictions: Vec<String>,
}

/// What the inputs of a graph are known to be when [`TypeEnv::infer_with`] types it.
#[derive(Clone, Copy, Debug)]
pub enum Formals<'a> {
    /// A model's main graph: a runtime checks what is fed against the declared input types, so
    /// they are facts (an input that is also an initializer takes its declaration, not the
    /// initializer's shape: a feed overrides the initializer).
    Declared,
    /// A subgraph or a function body: the types its caller passes, by position (the graph's own
    /// declarations of its inputs are not proof and only checked against these).
    Given(&'a [Option<TensorType>]),
}

impl TypeEnv<'static> {
    /// The scope outside a model's main graph and its function bodies: nothing is known there.
    pub fn empty() -> &'static TypeEnv<'static> {
        static EMPTY: std::sync::OnceLock<TypeEnv<'static>> = std::sync::OnceLock::new();
        EMPTY.get_or_init(TypeEnv::default)
    }
}

impl<'o> TypeEnv<'o> {
    /// The known type of `name`, if any.
    pub fn get(&self, name: &str) -> Option<&TensorType> {
        match self.types.get(name) {
            Some(t) => Some(t),
            None if self.own.contains(name) => None,
            None => self.outer?.get(name),
        }
    }

    /// The rank of `name`, if known.
    pub fn rank(&self, name: &str) -> Option<usize> {
        self.get(name).and_then(TensorType::rank)
    }

    /// The shape of `name`, if its rank is known.
    pub fn dims(&self, name: &str) -> Option<&[Dim]> {
        self.get(name)
            .and_then(|t| t.shape.as_ref())
            .map(|s| s.dims.as_slice())
    }

    /// Records what is known of `name`, merged with what was known before.
    pub fn insert(&mut self, name: &str, ty: TensorType) {
        if name.is_empty() {
            return;
        }
        let ty = normalized(&ty);
        let merged = match self.get(name) {
            Some(old) => merge(old, &ty),
            None => ty,
        };
        self.types.insert(name.to_owned(), merged);
    }

    /// Makes `name` a value of this scope: what an enclosing scope knew of a value of the same
    /// name no longer applies (ONNX scoping: a graph's inputs, initializers and node outputs
    /// shadow outer names).
    fn shadow(&mut self, name: &str) {
        self.types.remove(name);
        if self.outer.is_some() {
            self.own.insert(name.to_owned());
        }
    }

    /// Declarations of the graph just inferred (`value_info`, outputs, formal parameters) that
    /// contradict what the operators' shape functions give, one sentence each. They are
    /// reported, never used.
    pub fn contradictions(&self) -> &[String] {
        &self.contradictions
    }

    /// Infers the types of a model's main graph (or any graph whose declared inputs are facts);
    /// see [`TypeEnv::infer_with`].
    ///
    /// # Example
    /// A `value_info` that claims another rank than `Reshape` gives is reported, not believed:
    /// ```
    /// use multigather::infer::TypeEnv;
    /// use multigather::ir::{Dim, Graph, Node, OpsetImport, StoredTensor, Type, ValueInfo};
    /// use multigather::DataType;
    /// let known = |d: &[i64]| d.iter().map(|&n| Dim::Known(n)).collect::<Vec<_>>();
    /// let mut g = Graph::new("g");
    /// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, known(&[2, 6]))));
    /// g.initializers.push(StoredTensor::from_i64s(Some("s"), &[2], &[3, 4]));
    /// g.value_info.push(ValueInfo::new("r", Type::tensor(DataType::Float, known(&[3, 2, 2]))));
    /// g.add_node(Node::new("Reshape", "r", ["x", "s"], ["r"]));
    /// let imports = [OpsetImport { domain: None, version: 13 }];
    /// let env = TypeEnv::infer(&g, &imports, TypeEnv::empty());
    /// assert_eq!(env.dims("r"), Some(known(&[3, 4]).as_slice()));
    /// assert_eq!(env.contradictions().len(), 1);
    /// ```
    pub fn infer(graph: &Graph, imports: &[OpsetImport], outer: &'o TypeEnv<'o>) -> TypeEnv<'o> {
        TypeEnv::infer_with(graph, imports, outer, Formals::Declared)
    }

    /// Infers the types of a graph's values. `outer` holds the types visible from enclosing
    /// scopes (names this graph defines shadow them); `imports` the opsets of the model or
    /// function the graph belongs to; `formals` what its inputs are known to be.
    ///
    /// Only facts count: the inputs as `formals` says, initializers that no feed can override,
    /// and what the operators' shape functions give from them (including the bodies of `If`,
    /// `Loop` and `Scan`). `value_info` and output declarations are not proof; where they
    /// contradict the inferred type, [`TypeEnv::contradictions`] says so.
    pub fn infer_with(
        graph: &Graph,
        imports: &[OpsetImport],
        outer: &'o TypeEnv<'o>,
        formals: Formals,
    ) -> TypeEnv<'o> {
        let nothing_outside = outer.types.is_empty() && outer.outer.is_none();
        let mut env = TypeEnv {
            outer: (!nothing_outside).then_some(outer),
            ..TypeEnv::default()
        };
        for v in &graph.inputs {
            env.shadow(&v.name);
        }
        for name in graph.initializers.iter().filter_map(|t| t.name.as_ref()) {
            env.shadow(name);
        }
        for s in &graph.sparse_initializers {
            env.shadow(&s.name);
        }
        for (_, node) in graph.nodes() {
            for o in &node.outputs {
                env.shadow(o);
            }
        }
        let inputs: std::collections::HashSet<&str> =
            graph.inputs.iter().map(|v| v.name.as_str()).collect();
        match formals {
            Formals::Declared => {
                for v in &graph.inputs {
                    if let Some(t) = v.tensor_type() {
                        env.insert(&v.name, t.clone());
                    }
                }
            }
            Formals::Given(types) => {
                for (v, t) in graph.inputs.iter().zip(types) {
                    if let Some(t) = t {
                        env.insert(&v.name, t.clone());
                    }
                }
            }
        }
        let mut constants = Constants::default();
        for t in &graph.initializers {
            let Some(name) = &t.name else { continue };
            if inputs.contains(name.as_str()) {
                // A default value a feed may replace: neither its shape nor its value is a fact.
                continue;
            }
            env.insert(name, TensorType::new(t.elem, known_dims(&t.dims)));
            constants.add_initializer(t);
        }
        for s in &graph.sparse_initializers {
            // The element type is the values'; the interpreter densifies, inference needs only
            // the type.
            if let (false, Ok((values, _))) = (
                inputs.contains(s.name.as_str()),
                crate::proto::decode_sparse(&s.encoded),
            ) {
                env.insert(&s.name, TensorType::new(values.elem, known_dims(&s.dims)));
            }
        }
        for (_, node) in graph.nodes() {
            let opset = opset_version(imports, &node.domain).unwrap_or(0);
            let inputs: Vec<Option<TensorType>> =
                node.inputs.iter().map(|i| env.get(i).cloned()).collect();
            let mut folded = None;
            let inferred: Vec<Option<TensorType>> = if node.subgraphs().next().is_some() {
                control_outputs(node, opset, imports, &env)
            } else {
                let values: Vec<Option<&Tensor>> =
                    node.inputs.iter().map(|i| constants.get(i)).collect();
                folded = constants.fold(node, opset, &values);
                ops::infer_node(node, opset, &inputs, &values)
                    .into_iter()
                    .map(Some)
                    .collect()
            };
            if let Some(outputs) = folded {
                for (name, t) in node.outputs.iter().zip(outputs) {
                    let dims = t.shape().iter().map(|&d| Dim::Known(d as i64)).collect();
                    env.insert(name, TensorType::new(t.dtype(), dims));
                    constants.values.insert(name.clone(), t);
                }
            }
            for (name, ty) in node.outputs.iter().zip(inferred) {
                if let Some(ty) = ty {
                    env.insert(name, ty);
                }
            }
        }
        let declared = graph.value_info.iter().chain(&graph.outputs).chain(
            graph
                .inputs
                .iter()
                .filter(|_| matches!(formals, Formals::Given(_))),
        );
        for v in declared {
            if let (Some(claim), Some(known)) = (v.tensor_type(), env.get(&v.name)) {
                if let Some(why) = contradiction(&normalized(claim), known) {
                    env.contradictions.push(format!(
                        "'{}' is declared {} but {why}; the declaration is ignored",
                        v.name,
                        type_text(claim)
                    ));
                }
            }
        }
        env
    }
}

/// The types a graph attribute's inputs take from the node that runs it: `If` branches take
/// none, a `Loop` body takes the iteration count, the condition and the loop-carried values, a
/// `Scan` body (opset 9 and later) its state variables and one slice of each scan input.
/// Loop-carried values and states keep what every iteration provably agrees on (see
/// `carried_invariant`). Anything else (a graph attribute of another operator, `Scan` 8) gets
/// unknown inputs.
pub fn formals(
    node: &Node,
    attr: &str,
    imports: &[OpsetImport],
    env: &TypeEnv,
) -> Vec<Option<TensorType>> {
    let opset = opset_version(imports, &node.domain).unwrap_or(0);
    let Ok(graph) = node.attr_graph(attr) else {
        return Vec::new();
    };
    let unknown = || vec![None; graph.inputs.len()];
    if !is_onnx_domain(&node.domain) {
        return unknown();
    }
    match (node.op_type.as_str(), attr) {
        ("If", _) => Vec::new(),
        ("Loop", "body") => loop_formals(node, graph, imports, env).0,
        ("Scan", "body") if opset >= 9 => scan_formals(node, graph, imports, env).0,
        _ => unknown(),
    }
}

/// The output types of a node holding subgraphs, inferred from its bodies.
fn control_outputs(
    node: &Node,
    opset: i64,
    imports: &[OpsetImport],
    env: &TypeEnv,
) -> Vec<Option<TensorType>> {
    if !is_onnx_domain(&node.domain) {
        return Vec::new();
    }
    let outputs = |g: &Graph, benv: &TypeEnv| -> Vec<Option<TensorType>> {
        g.outputs
            .iter()
            .map(|o| benv.get(&o.name).cloned())
            .collect()
    };
    match node.op_type.as_str() {
        "If" => {
            let (Ok(then), Ok(other)) = (
                node.attr_graph("then_branch"),
                node.attr_graph("else_branch"),
            ) else {
                return Vec::new();
            };
            let a = TypeEnv::infer_with(then, imports, env, Formals::Given(&[]));
            let b = TypeEnv::infer_with(other, imports, env, Formals::Given(&[]));
            outputs(then, &a)
                .into_iter()
                .zip(outputs(other, &b))
                .map(|(x, y)| join(x.as_ref(), y.as_ref()))
                .collect()
        }
        "Loop" => {
            let Ok(body) = node.attr_graph("body") else {
                return Vec::new();
            };
            let (formals, benv) = loop_formals(node, body, imports, env);
            let carried = node.inputs.len().saturating_sub(2);
            let mut out: Vec<Option<TensorType>> = formals.into_iter().skip(2).collect();
            out.extend(
                outputs(body, &benv)
                    .into_iter()
                    .skip(1 + carried)
                    .map(|t| t.map(|t| stacked(&t, 0))),
            );
            out
        }
        "Scan" if opset >= 9 => {
            let Ok(body) = node.attr_graph("body") else {
                return Vec::new();
            };
            let (formals, benv) = scan_formals(node, body, imports, env);
            let (states, axes) = scan_layout(node, "scan_output_axes");
            let mut out: Vec<Option<TensorType>> = formals.into_iter().take(states).collect();
            for (j, t) in outputs(body, &benv).into_iter().skip(states).enumerate() {
                let axis = axes.get(j).copied().unwrap_or(0);
                out.push(t.and_then(|t| {
                    let r = t.rank()? as i64 + 1;
                    let a = if axis < 0 { axis + r } else { axis };
                    (0..r).contains(&a).then(|| stacked(&t, a as usize))
                }));
            }
            out
        }
        _ => Vec::new(),
    }
}

/// `t` with a new dimension of unknown size at `axis` (a scan output's iterations).
fn stacked(t: &TensorType, axis: usize) -> TensorType {
    let mut t = t.clone();
    if let Some(s) = &mut t.shape {
        s.dims.insert(axis.min(s.dims.len()), Dim::Unknown);
        s.denotations.clear();
    }
    t
}

/// A `Scan` node's number of state variables, and its axes attribute `attr` (empty when absent).
fn scan_layout<'n>(node: &'n Node, attr: &str) -> (usize, &'n [i64]) {
    let n_scan = node.attr_int("num_scan_inputs", 0).unwrap_or(0).max(0) as usize;
    let states = node.inputs.len().saturating_sub(n_scan);
    (states, node.attr_ints(attr).ok().flatten().unwrap_or(&[]))
}

/// A `Loop` body's formal parameters, and the body's types under them.
fn loop_formals<'o>(
    node: &Node,
    body: &Graph,
    imports: &[OpsetImport],
    env: &'o TypeEnv<'o>,
) -> (Vec<Option<TensorType>>, TypeEnv<'o>) {
    let scalar = |elem| Some(TensorType::new(elem, Vec::new()));
    let fixed = vec![
        scalar(crate::DataType::Int64),
        scalar(crate::DataType::Bool),
    ];
    let initial: Vec<Option<TensorType>> = node
        .inputs
        .iter()
        .skip(2)
        .map(|i| env.get(i).cloned())
        .collect();
    // Body outputs: the condition, then the carried values.
    carried_invariant(body, imports, env, &fixed, &[], initial, 1)
}

/// A `Scan` body's formal parameters (states, then scan input slices), and the body's types
/// under them.
fn scan_formals<'o>(
    node: &Node,
    body: &Graph,
    imports: &[OpsetImport],
    env: &'o TypeEnv<'o>,
) -> (Vec<Option<TensorType>>, TypeEnv<'o>) {
    let (states, axes) = scan_layout(node, "scan_input_axes");
    let initial: Vec<Option<TensorType>> = node.inputs[..states]
        .iter()
        .map(|i| env.get(i).cloned())
        .collect();
    let slices: Vec<Option<TensorType>> = node.inputs[states..]
        .iter()
        .enumerate()
        .map(|(j, i)| {
            let t = env.get(i)?;
            let dims = t.shape.as_ref()?.dims.clone();
            let r = dims.len() as i64;
            let axis = axes.get(j).copied().unwrap_or(0);
            let a = if axis < 0 { axis + r } else { axis };
            let a = usize::try_from(a).ok().filter(|&a| a < dims.len())?;
            let mut dims = dims;
            dims.remove(a);
            Some(TensorType {
                elem: t.elem,
                shape: Some(Shape::new(dims)),
            })
        })
        .collect();
    // Body outputs: the states first.
    carried_invariant(body, imports, env, &[], &slices, initial, 0)
}

/// The types of a body's carried values (loop-carried dependencies, scan states) that hold on
/// every iteration: starting from the initial values' types, the body is inferred and each
/// carried value keeps only what its body output (at `first_output + k`) provably shares with
/// it, until nothing changes. Formals are `before ++ carried ++ after`. Returns the formals and
/// the body's types under them.
fn carried_invariant<'o>(
    body: &Graph,
    imports: &[OpsetImport],
    env: &'o TypeEnv<'o>,
    before: &[Option<TensorType>],
    after: &[Option<TensorType>],
    mut carried: Vec<Option<TensorType>>,
    first_output: usize,
) -> (Vec<Option<TensorType>>, TypeEnv<'o>) {
    // Each round that changes something removes a dim, a rank or an element type, so the
    // bound is never reached on a well-formed body; past it nothing is assumed.
    for _ in 0..32 {
        let formals: Vec<Option<TensorType>> = before
            .iter()
            .chain(&carried)
            .chain(after)
            .cloned()
            .collect();
        let benv = TypeEnv::infer_with(body, imports, env, Formals::Given(&formals));
        let next: Vec<Option<TensorType>> = carried
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let out = body
                    .outputs
                    .get(first_output + k)
                    .and_then(|o| benv.get(&o.name));
                join(c.as_ref(), out)
            })
            .collect();
        if next == carried {
            return (formals, benv);
        }
        carried = next;
    }
    let formals: Vec<Option<TensorType>> = before
        .iter()
        .cloned()
        .chain(std::iter::repeat_n(None, carried.len()))
        .chain(after.iter().cloned())
        .collect();
    let benv = TypeEnv::infer_with(body, imports, env, Formals::Given(&formals));
    (formals, benv)
}

/// What two values (the branches of an `If`, successive iterations) provably share: the rank
/// when both have the same, each dim where it is provably the same, the element type when equal.
pub(crate) fn join(a: Option<&TensorType>, b: Option<&TensorType>) -> Option<TensorType> {
    let (a, b) = (a?, b?);
    if a == b {
        return Some(a.clone());
    }
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.rank() == y.rank() => Some(Shape::new(
            x.dims
                .iter()
                .zip(&y.dims)
                .map(|(p, q)| {
                    if same_dim(p, q) {
                        p.clone()
                    } else {
                        Dim::Unknown
                    }
                })
                .collect(),
        )),
        _ => None,
    };
    Some(TensorType {
        elem: a.elem.filter(|e| b.elem == Some(*e)),
        shape,
    })
}

/// A declared type with negative `dim_value`s (unknown sizes, as PaddlePaddle writes them) read
/// as unknown.
fn normalized(t: &TensorType) -> TensorType {
    let mut t = t.clone();
    if let Some(s) = &mut t.shape {
        if s.dims.iter().any(Dim::is_unknown_value) {
            s.dims = s.dims.iter().map(Dim::normalized).collect();
        }
    }
    t
}

/// Why the declared type `claim` cannot describe a value of the inferred type `known`.
fn contradiction(claim: &TensorType, known: &TensorType) -> Option<String> {
    if let (Some(c), Some(k)) = (claim.elem, known.elem) {
        if c != k {
            return Some(format!("its element type is {k}"));
        }
    }
    let (Some(c), Some(k)) = (&claim.shape, &known.shape) else {
        return None;
    };
    if c.rank() != k.rank() {
        return Some(format!("it has rank {}", k.rank()));
    }
    for (j, (p, q)) in c.dims.iter().zip(&k.dims).enumerate() {
        if let (Some(p), Some(q)) = (p.known(), q.known()) {
            if p != q {
                return Some(format!("its dimension {j} is {q}"));
            }
        }
    }
    None
}

/// A type in the text form's notation, e.g. `float[3,?,n]`.
fn type_text(t: &TensorType) -> String {
    let elem = t.elem.map(|e| e.to_string()).unwrap_or_else(|| "?".into());
    match &t.shape {
        Some(s) => {
            let dims: Vec<String> = s.dims.iter().map(ToString::to_string).collect();
            format!("{elem}[{}]", dims.join(","))
        }
        None => elem,
    }
}

fn known_dims(dims: &[i64]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

/// Combines two descriptions of the same value, keeping the more precise part of each.
fn merge(a: &TensorType, b: &TensorType) -> TensorType {
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.rank() == y.rank() => Some(Shape::new(
            x.dims
                .iter()
                .zip(&y.dims)
                .map(|(p, q)| match (p, q) {
                    (Dim::Known(_), _) => p.clone(),
                    (_, Dim::Known(_)) => q.clone(),
                    (Dim::Symbolic(_), _) => p.clone(),
                    _ => q.clone(),
                })
                .collect(),
        )),
        (Some(x), _) => Some(x.clone()),
        (None, y) => y.clone(),
    };
    TensorType {
        elem: a.elem.or(b.elem),
        shape,
    }
}

/// Values known before running: small initializers, and the outputs of nodes whose inputs are
/// all known, computed with the operators' kernels (constant folding, [`Folder::INFERENCE`]).
/// Shape arithmetic such as `Constant -> Concat -> Reshape` then gives the rewrite pass exact
/// ranks and dims.
#[derive(Default)]
struct Constants {
    values: crate::ir::NameMap<Tensor>,
}

impl Constants {
    fn get(&self, name: &str) -> Option<&Tensor> {
        self.values.get(name)
    }

    /// Keeps an initializer small enough to fold with; weights are not needed.
    fn add_initializer(&mut self, t: &StoredTensor) {
        let Some(name) = &t.name else { return };
        if Folder::INFERENCE.fits_stored(t) {
            if let Ok(value) = stored_to_tensor(t) {
                self.values.insert(name.clone(), value);
            }
        }
    }

    /// The outputs of `node` when every input it names is known and the folder folds it.
    fn fold(&self, node: &Node, opset: i64, values: &[Option<&Tensor>]) -> Option<Vec<Tensor>> {
        let all_known = node
            .inputs
            .iter()
            .zip(values)
            .all(|(name, v)| name.is_empty() || v.is_some());
        if !all_known {
            return None;
        }
        let def = ops::registry().lookup(&node.domain, &node.op_type, opset)?;
        Folder::INFERENCE.fold(def, node, opset, values)
    }
}
