//! Walking every graph of a model with the static types in scope, for the passes that replace
//! nodes one at a time.
//!
//! [`walk`] visits the main graph, the subgraphs of `If` / `Loop` / `Scan` at any depth (inner
//! graphs before the node that holds them, with the enclosing scope's types visible) and the
//! model-local functions. A function body is typed from its call sites: when every call passes
//! inputs of the same ranks, what the calls agree on is known inside the body; when they
//! disagree, no node of the body is touched and the [`Rule`] hears why. Model-local definitions
//! of `multigather.GatherMultiaxis` itself are not visited.
//!
//! The [`Rule`] decides node by node; the walker applies its [`Change`]s: the replacement takes
//! the node's place, its declarations and initializers join the graph, the types it establishes
//! become known to the nodes after it, and (when asked) producers nothing reads any more are
//! removed with their declarations and initializers.

use std::collections::{HashMap, HashSet};

use super::emit::{Constants, Emitter, Replacement};
use crate::infer::{join, Formals, TypeEnv};
use crate::ir::{
    opset_version, AttrValue, CallGraph, Function, Graph, Model, Node, NodeId, OpsetImport,
    TensorType, UniqueNames,
};

/// A model-local function's [`crate::ir::FunctionKey`], owned: the walk keeps the keys while it
/// edits the model's graphs.
pub(crate) type FunctionKey = (String, String, Option<String>);

/// The owned form of a key.
fn owned((domain, name, overload): crate::ir::FunctionKey<'_>) -> FunctionKey {
    (
        domain.to_owned(),
        name.to_owned(),
        overload.map(str::to_owned),
    )
}

/// The function a node calls, if it names one of `functions`.
pub(crate) fn called_function(
    node: &Node,
    functions: &HashSet<FunctionKey>,
) -> Option<FunctionKey> {
    let key = owned(node.call_key());
    functions.contains(&key).then_some(key)
}

/// Where a visited node lives.
pub(crate) struct Site<'a> {
    /// The graph holding the node, as it is before the node is replaced.
    pub graph: &'a Graph,
    /// The types known at the node.
    pub env: &'a TypeEnv<'a>,
    /// The graph's name for reports: the main graph's name, `graph/node.attribute` for
    /// subgraphs, `function domain.name` for function bodies.
    pub scope: &'a str,
    /// The default-domain opset of the graph.
    pub opset: i64,
    /// The model's default-domain opset (the graph's own may differ in a function body).
    pub model_opset: i64,
    /// Whether the graph is a function body or one of its subgraphs.
    pub in_function: bool,
    /// How constants can be added to the graph.
    pub constants: Constants,
    /// The model-local functions: a node naming one calls it, whatever its op type says, and a
    /// replacement must not name one by accident.
    pub functions: &'a HashSet<FunctionKey>,
}

impl Site<'_> {
    /// An emitter for the replacement of the node labelled `base` here: at the graph's opset,
    /// and valid at the model's too where a function body imports another one.
    pub(crate) fn emitter<'n>(&self, base: &str, names: &'n mut UniqueNames) -> Emitter<'n> {
        let mut e = Emitter::new(base, names, self.opset, self.constants);
        e.also_at = (self.model_opset != self.opset).then_some(self.model_opset);
        e
    }
}

/// Whether `f` is a lowering [`super::DefineMultiaxisFunctions`] defines: the operator itself
/// (`GatherMultiaxis`, with or without an overload) or a renamed call's function
/// (`GatherMultiaxis_<overload>`). Its body is no computation of the model's to rewrite.
pub(crate) fn is_lowering_function(f: &Function) -> bool {
    f.domain == crate::gather::DOMAIN
        && f.name
            .strip_prefix(crate::gather::OP_TYPE)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
}

/// What a rule does to one node.
pub(crate) struct Change {
    pub replacement: Replacement,
    /// Types of the replaced node's outputs, made known to the nodes after it.
    pub output_types: Vec<(String, TensorType)>,
    /// Remove the producers of the replaced node's inputs (and theirs, in turn) once nothing
    /// reads them.
    pub prune_inputs: bool,
}

/// A per-node decision.
pub(crate) trait Rule {
    /// Called for every node in execution order; `None` leaves the node as it is. Nodes that
    /// call a model-local function are not operators and are not visited (except calls of
    /// `multigather.GatherMultiaxis`, whose local definitions are its lowering).
    fn visit(&mut self, node: &Node, site: &Site, names: &mut UniqueNames) -> Option<Change>;

    /// Called for every node of a function body the walk leaves alone, and why.
    fn skip(&mut self, node: &Node, scope: &str, reason: &str);

    /// Called with each declaration of a graph that contradicts the inferred types.
    fn contradiction(&mut self, _scope: &str, _text: &str) {}
}

/// Runs `rule` over every graph of `model`; returns the number of nodes replaced.
///
/// Function bodies are typed from every call site in the model, collected before any graph is
/// changed ([`signatures`]).
pub(crate) fn walk(model: &mut Model, rule: &mut dyn Rule) -> usize {
    let functions: HashSet<FunctionKey> = model.functions.iter().map(|f| owned(f.key())).collect();
    let signatures = signatures(model, &functions);
    let mut walker = Walker {
        rule,
        names: UniqueNames::for_model(model),
        functions,
        ir_version: model.ir_version,
        model_opset: model.opset("").unwrap_or(1),
    };
    let scope = model.graph.name.clone();
    let imports = model.opset_imports.clone();
    let mut total = walker.graph(
        &mut model.graph,
        &scope,
        &imports,
        TypeEnv::empty(),
        Formals::Declared,
        false,
    );
    for f in &mut model.functions {
        if is_lowering_function(f) {
            // A model-local definition of the operator itself (its lowering) is not the model's
            // computation: rewriting its gathers would make it call itself.
            continue;
        }
        let scope = format!("function {}.{}", f.domain, f.name);
        let key = owned(f.key());
        let types = match signatures.get(&key) {
            Some(Signature::Consistent(types)) => types.clone(),
            Some(Signature::Conflicting(reason)) => {
                walker.skip_all(&f.body, &scope, reason);
                continue;
            }
            None => Vec::new(),
        };
        let imports = f.opset_imports.clone();
        total += walker.graph(
            &mut f.body,
            &scope,
            &imports,
            TypeEnv::empty(),
            Formals::Given(&types),
            true,
        );
    }
    total
}

/// The input types seen at a function's call sites.
#[derive(Clone, Debug)]
pub(crate) enum Signature {
    /// What every call site agrees on.
    Consistent(Vec<Option<TensorType>>),
    /// Why the body cannot be typed.
    Conflicting(String),
}

/// The signature of every model-local function, from every call site in the model: the main
/// graph and its subgraphs first, then the function bodies in call order (callers before
/// callees, each body typed by its own callers' agreement), so a call made inside a function
/// counts whatever the order of the functions in the file. Functions that call themselves,
/// directly or not, and every function only they call, get a conflicting signature.
pub(crate) fn signatures(
    model: &Model,
    functions: &HashSet<FunctionKey>,
) -> HashMap<FunctionKey, Signature> {
    let mut calls: HashMap<FunctionKey, Signature> = HashMap::new();
    let record = |node: &Node, env: &TypeEnv, calls: &mut HashMap<_, _>| {
        if let Some(key) = called_function(node, functions) {
            let types: Vec<Option<TensorType>> =
                node.inputs.iter().map(|i| env.get(i).cloned()).collect();
            add_call(calls, key, types);
        }
    };
    each_graph(
        &model.graph,
        &model.opset_imports,
        TypeEnv::empty(),
        Formals::Declared,
        &mut |node, env| record(node, env, &mut calls),
    );
    // Callers before callees: a function's body is read once every function calling it has
    // been, so its signature is complete by then.
    let (order, cyclic) = CallGraph::new(&model.functions).callers_first();
    for i in order {
        let f = &model.functions[i];
        let formals = match calls.get(&owned(f.key())) {
            Some(Signature::Consistent(types)) => types.clone(),
            _ => Vec::new(),
        };
        each_graph(
            &f.body,
            &f.opset_imports,
            TypeEnv::empty(),
            Formals::Given(&formals),
            &mut |node, env| record(node, env, &mut calls),
        );
    }
    for i in cyclic {
        calls.insert(
            owned(model.functions[i].key()),
            Signature::Conflicting("the function is called from a cycle of function calls".into()),
        );
    }
    calls
}

/// Merges one call site's argument types into a function's signature.
fn add_call(
    calls: &mut HashMap<FunctionKey, Signature>,
    key: FunctionKey,
    types: Vec<Option<TensorType>>,
) {
    let next = match calls.remove(&key) {
        None => Signature::Consistent(types),
        Some(Signature::Consistent(old)) => {
            let rank = |t: &Option<TensorType>| t.as_ref().and_then(TensorType::rank);
            let clash = old.iter().zip(&types).enumerate().find_map(|(j, (a, b))| {
                match (rank(a), rank(b)) {
                    (Some(x), Some(y)) if x != y => Some((j, x, y)),
                    _ => None,
                }
            });
            match clash {
                Some((j, x, y)) => Signature::Conflicting(format!(
                    "call sites pass inputs of different ranks (input {j} has rank {x} at one \
                     call and {y} at another)"
                )),
                // Keep only what every call site agrees on.
                None => Signature::Consistent(
                    old.iter()
                        .zip(&types)
                        .map(|(a, b)| join(a.as_ref(), b.as_ref()))
                        .chain(std::iter::repeat_n(None, old.len().abs_diff(types.len())))
                        .collect(),
                ),
            }
        }
        Some(conflicting) => conflicting,
    };
    calls.insert(key, next);
}

/// Calls `f` on every node of `graph` and of its subgraphs at any depth, with the types known
/// in the node's scope.
fn each_graph(
    graph: &Graph,
    imports: &[OpsetImport],
    outer: &TypeEnv,
    formals: Formals,
    f: &mut dyn FnMut(&Node, &TypeEnv),
) {
    let env = TypeEnv::infer_with(graph, imports, outer, formals);
    for (_, node) in graph.nodes() {
        for attr in &node.attributes {
            match &attr.value {
                AttrValue::Graph(g) => {
                    let types = crate::infer::formals(node, &attr.name, imports, &env);
                    each_graph(g, imports, &env, Formals::Given(&types), f);
                }
                AttrValue::Graphs(gs) => {
                    for g in gs {
                        each_graph(g, imports, &env, Formals::Given(&[]), f);
                    }
                }
                _ => {}
            }
        }
        f(node, &env);
    }
}

struct Walker<'r> {
    rule: &'r mut dyn Rule,
    names: UniqueNames,
    functions: HashSet<FunctionKey>,
    ir_version: Option<i64>,
    model_opset: i64,
}

impl Walker<'_> {
    /// Visits the nodes of a graph and its subgraphs; returns how many were replaced.
    fn graph(
        &mut self,
        graph: &mut Graph,
        scope: &str,
        imports: &[OpsetImport],
        outer: &TypeEnv,
        formals: Formals,
        in_function: bool,
    ) -> usize {
        let mut env = TypeEnv::infer_with(graph, imports, outer, formals);
        for text in env.contradictions() {
            self.rule.contradiction(scope, text);
        }
        let opset = opset_version(imports, "").unwrap_or(1);
        let constants = Constants::for_graph(opset, in_function, self.ir_version);
        let mut count = 0;
        // Nodes pruned on the way; the initializers and declarations only they read or wrote
        // are dropped once at the end (per replacement, that scan made a pass quadratic).
        let mut pruned: Vec<Node> = Vec::new();
        for id in graph.node_ids() {
            // A node pruned after an earlier replacement is gone.
            if graph.get(id).is_none() {
                continue;
            }
            count += self.subgraphs(graph, id, scope, imports, &env, in_function);
            let node = graph.node(id);
            let multiaxis = crate::ops::is_multiaxis(&node.domain, &node.op_type);
            if !multiaxis && called_function(node, &self.functions).is_some() {
                continue;
            }
            let site = Site {
                graph,
                env: &env,
                scope,
                opset,
                model_opset: self.model_opset,
                in_function,
                constants,
                functions: &self.functions,
            };
            let Some(change) = self.rule.visit(node, &site, &mut self.names) else {
                continue;
            };
            let inputs = node.inputs.clone();
            let Change {
                replacement,
                output_types,
                prune_inputs,
            } = change;
            graph.replace_node(id, replacement.nodes);
            graph.value_info.extend(replacement.value_info);
            graph.initializers.extend(replacement.initializers);
            for (name, ty) in output_types {
                env.insert(&name, ty);
            }
            if prune_inputs {
                let seeds: Vec<NodeId> = inputs.iter().filter_map(|v| graph.producer(v)).collect();
                pruned.extend(graph.remove_dead_nodes(seeds));
            }
            count += 1;
        }
        prune_values(graph, &pruned);
        count
    }

    fn subgraphs(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        scope: &str,
        imports: &[OpsetImport],
        env: &TypeEnv,
        in_function: bool,
    ) -> usize {
        let node = graph.node(id);
        if node.subgraphs().next().is_none() {
            return 0;
        }
        let name = node.name.clone();
        let formals: HashMap<String, Vec<Option<TensorType>>> = node
            .attributes
            .iter()
            .filter(|a| matches!(a.value, AttrValue::Graph(_)))
            .map(|a| {
                (
                    a.name.clone(),
                    crate::infer::formals(node, &a.name, imports, env),
                )
            })
            .collect();
        let mut node = graph.node_mut(id);
        let mut count = 0;
        for attr in &mut node.attributes {
            let sub_scope = format!("{scope}/{name}.{}", attr.name);
            match &mut attr.value {
                AttrValue::Graph(g) => {
                    let types = formals.get(&attr.name).map(Vec::as_slice).unwrap_or(&[]);
                    count += self.graph(
                        g,
                        &sub_scope,
                        imports,
                        env,
                        Formals::Given(types),
                        in_function,
                    )
                }
                AttrValue::Graphs(gs) => {
                    for (i, g) in gs.iter_mut().enumerate() {
                        let scope = format!("{sub_scope}[{i}]");
                        count +=
                            self.graph(g, &scope, imports, env, Formals::Given(&[]), in_function);
                    }
                }
                _ => {}
            }
        }
        count
    }

    /// Tells the rule about every node of a graph (and its subgraphs) that stays as it is.
    fn skip_all(&mut self, graph: &Graph, scope: &str, reason: &str) {
        for (_, node) in graph.nodes() {
            self.rule.skip(node, scope, reason);
            for g in node.subgraphs() {
                self.skip_all(g, scope, reason);
            }
        }
    }
}

/// After nodes were pruned (producers nothing reads any more), removes the declarations of the
/// values they defined and the initializers only they read.
fn prune_values(graph: &mut Graph, removed: &[Node]) {
    if removed.is_empty() {
        return;
    }
    let read: HashSet<&String> = removed.iter().flat_map(|n| &n.inputs).collect();
    let inputs: HashSet<&str> = graph.inputs.iter().map(|v| v.name.as_str()).collect();
    let unread: HashSet<String> = graph
        .initializers
        .iter()
        .filter_map(|t| t.name.clone())
        .filter(|n| read.contains(n) && !graph.is_used(n))
        .filter(|n| !inputs.contains(n.as_str()))
        .collect();
    graph
        .initializers
        .retain(|t| t.name.as_ref().is_none_or(|n| !unread.contains(n)));
    let gone: HashSet<&String> = removed.iter().flat_map(|n| &n.outputs).collect();
    graph
        .value_info
        .retain(|v| !gone.contains(&v.name) && !unread.contains(&v.name));
}
