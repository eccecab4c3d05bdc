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

use super::emit::{Constants, Replacement};
use crate::infer::TypeEnv;
use crate::ir::{
    opset_version, AttrValue, Dim, Graph, Model, Node, NodeId, OpsetImport, Shape, TensorType,
    UniqueNames,
};

/// Where a visited node lives.
pub(crate) struct Site<'a> {
    /// The graph holding the node, as it is before the node is replaced.
    pub graph: &'a Graph,
    /// The types known at the node.
    pub env: &'a TypeEnv,
    /// The graph's name for reports: the main graph's name, `graph/node.attribute` for
    /// subgraphs, `function domain.name` for function bodies.
    pub scope: &'a str,
    /// The default-domain opset of the graph.
    pub opset: i64,
    /// How constants can be added to the graph.
    pub constants: Constants,
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
    /// Called for every node in execution order; `None` leaves the node as it is.
    fn visit(&mut self, node: &Node, site: &Site, names: &mut UniqueNames) -> Option<Change>;

    /// Called for every node of a function body the walk leaves alone, and why.
    fn skip(&mut self, node: &Node, scope: &str, reason: &str);
}

/// How reports name a node: its name, or its first output's when it has none.
pub(crate) fn label(node: &Node) -> String {
    if node.name.is_empty() {
        node.outputs.first().cloned().unwrap_or_default()
    } else {
        node.name.clone()
    }
}

/// Runs `rule` over every graph of `model`; returns the number of nodes replaced.
pub(crate) fn walk(model: &mut Model, rule: &mut dyn Rule) -> usize {
    let mut walker = Walker {
        rule,
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
    let mut total = walker.graph(
        &mut model.graph,
        &scope,
        &imports,
        &TypeEnv::default(),
        false,
    );
    for f in &mut model.functions {
        if f.domain == crate::gather::DOMAIN && f.name == crate::gather::OP_TYPE {
            // A model-local definition of the operator itself (its lowering) is not the model's
            // computation: rewriting its gathers would make it call itself.
            continue;
        }
        let scope = format!("function {}.{}", f.domain, f.name);
        let mut env = TypeEnv::default();
        match walker.calls.get(&(f.domain.clone(), f.name.clone())) {
            Some(Signature::Consistent(types)) => {
                for (input, ty) in f.body.inputs.iter().zip(types) {
                    if let Some(ty) = ty {
                        env.insert(&input.name, ty.clone());
                    }
                }
            }
            Some(Signature::Conflicting) => {
                walker.skip_all(&f.body, &scope, "call sites pass inputs of different ranks");
                continue;
            }
            None => {}
        }
        let imports = f.opset_imports.clone();
        total += walker.graph(&mut f.body, &scope, &imports, &env, true);
    }
    total
}

/// The input types seen at a function's call sites.
enum Signature {
    Consistent(Vec<Option<TensorType>>),
    Conflicting,
}

struct Walker<'r> {
    rule: &'r mut dyn Rule,
    names: UniqueNames,
    functions: Vec<(String, String)>,
    calls: HashMap<(String, String), Signature>,
}

impl Walker<'_> {
    /// Visits the nodes of a graph and its subgraphs; returns how many were replaced.
    fn graph(
        &mut self,
        graph: &mut Graph,
        scope: &str,
        imports: &[OpsetImport],
        outer: &TypeEnv,
        in_function: bool,
    ) -> usize {
        let mut env = TypeEnv::infer(graph, imports, outer);
        let opset = opset_version(imports, "").unwrap_or(1);
        let constants = Constants::for_graph(opset, in_function);
        let mut count = 0;
        for id in graph.node_ids() {
            // A node pruned after an earlier replacement is gone.
            if graph.get(id).is_none() {
                continue;
            }
            count += self.subgraphs(graph, id, scope, imports, &env, in_function);
            let node = graph.node(id);
            self.record_call(node, &env);
            let site = Site {
                graph,
                env: &env,
                scope,
                opset,
                constants,
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
                prune(graph, &inputs);
            }
            count += 1;
        }
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
        if graph.node(id).subgraphs().next().is_none() {
            return 0;
        }
        let name = graph.node(id).name.clone();
        let mut node = graph.node_mut(id);
        let mut count = 0;
        for attr in &mut node.attributes {
            let sub_scope = format!("{scope}/{name}.{}", attr.name);
            match &mut attr.value {
                AttrValue::Graph(g) => {
                    count += self.graph(g, &sub_scope, imports, env, in_function)
                }
                AttrValue::Graphs(gs) => {
                    for (i, g) in gs.iter_mut().enumerate() {
                        let scope = format!("{sub_scope}[{i}]");
                        count += self.graph(g, &scope, imports, env, in_function);
                    }
                }
                _ => {}
            }
        }
        count
    }

    /// Records the input types of a call to a model-local function.
    fn record_call(&mut self, node: &Node, env: &TypeEnv) {
        let key = (node.domain.clone(), node.op_type.clone());
        if !self.functions.contains(&key) {
            return;
        }
        let types: Vec<Option<TensorType>> =
            node.inputs.iter().map(|i| env.get(i).cloned()).collect();
        let ranks = |ts: &[Option<TensorType>]| -> Vec<Option<usize>> {
            ts.iter()
                .map(|t| t.as_ref().and_then(TensorType::rank))
                .collect()
        };
        let next = match self.calls.remove(&key) {
            None => Signature::Consistent(types),
            Some(Signature::Consistent(old)) if ranks(&old) == ranks(&types) => {
                // Keep only what every call site agrees on: the ranks, with unknown dims, and
                // the element type when it is the same everywhere.
                let merged = old
                    .into_iter()
                    .zip(types)
                    .map(|(a, b)| match (a, b) {
                        (Some(a), Some(b)) if a == b => Some(a),
                        (Some(a), Some(b)) => Some(TensorType {
                            elem: a.elem.filter(|e| b.elem == Some(*e)),
                            shape: a.shape.map(|s| Shape::new(vec![Dim::Unknown; s.rank()])),
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

/// Removes the producers of `values` that nothing reads any more (and theirs, in turn), with the
/// declarations of the values they defined and the initializers only they read.
fn prune(graph: &mut Graph, values: &[String]) {
    let seeds: Vec<NodeId> = values.iter().filter_map(|v| graph.producer(v)).collect();
    let removed = graph.remove_dead_nodes(seeds);
    if removed.is_empty() {
        return;
    }
    let read: HashSet<&String> = removed.iter().flat_map(|n| &n.inputs).collect();
    let unread: HashSet<String> = graph
        .initializers
        .iter()
        .filter_map(|t| t.name.clone())
        .filter(|n| read.contains(n) && !graph.is_used(n))
        .filter(|n| !graph.inputs.iter().any(|v| &v.name == n))
        .collect();
    graph
        .initializers
        .retain(|t| t.name.as_ref().is_none_or(|n| !unread.contains(n)));
    let gone: HashSet<&String> = removed.iter().flat_map(|n| &n.outputs).collect();
    graph
        .value_info
        .retain(|v| !gone.contains(&v.name) && !unread.contains(&v.name));
}
