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
//! The [`Rule`] (`rule.rs`) decides node by node; the walker applies its [`Change`]s: the
//! replacement takes the node's place, its declarations and initializers join the graph, renamed
//! values' readers read their new names, the types it establishes become known to the nodes
//! after it, and (when asked) producers nothing reads any more are
//! removed with their declarations and initializers.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use super::emit::Constants;
use super::rule::owned;
pub(crate) use super::rule::{called_function, Change, FunctionKey, Rule, Site};
use crate::error::Result;
use crate::infer::{join, Formals, TypeEnv};
use crate::ir::{
    opset_version, AttrValue, CallGraph, Function, Graph, Model, Node, NodeId, OpsetImport,
    TensorType, UniqueNames,
};

/// Whether `f` is a lowering [`super::DefineMultiaxisFunctions`] defines: the operator itself
/// (`GatherMultiaxis`, with or without an overload) or a renamed call's function
/// (`GatherMultiaxis_<overload>`). Its body is no computation of the model's to rewrite.
pub(crate) fn is_lowering_function(f: &Function) -> bool {
    f.domain == crate::gather::DOMAIN
        && f.name
            .strip_prefix(crate::gather::OP_TYPE)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
}

/// Runs `rule` over every graph of `model`; returns the number of nodes replaced.
///
/// Each graph is typed once for the walk. Function bodies are typed from every call site in the
/// model: the main graph's (and its subgraphs') are recorded as the walk passes them, then
/// [`signatures`] adds the calls made in function bodies before any body is changed.
pub(crate) fn walk(model: &mut Model, rule: &mut dyn Rule) -> Result<usize> {
    let functions: HashSet<FunctionKey> = model.functions.iter().map(|f| owned(f.key())).collect();
    let mut walker = Walker {
        calls: Some(HashMap::new()),
        rule,
        names: RefCell::new(UniqueNames::for_model(model)),
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
        Place::main(),
    )?;
    let calls = walker.calls.take().unwrap_or_default();
    let signatures = signatures(model, &walker.functions, calls);
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
            Place::function(),
        )?;
    }
    Ok(total)
}

/// Where a graph is: in a function body or not, a subgraph or not.
#[derive(Clone, Copy)]
struct Place {
    in_function: bool,
    in_subgraph: bool,
}

impl Place {
    fn main() -> Place {
        Place {
            in_function: false,
            in_subgraph: false,
        }
    }

    fn function() -> Place {
        Place {
            in_function: true,
            in_subgraph: false,
        }
    }

    fn subgraph(self) -> Place {
        Place {
            in_subgraph: true,
            ..self
        }
    }
}

/// The input types seen at a function's call sites.
#[derive(Clone, Debug)]
pub(crate) enum Signature {
    /// What every call site agrees on.
    Consistent(Vec<Option<TensorType>>),
    /// Why the body cannot be typed.
    Conflicting(String),
}

/// The signature of every model-local function, from every call site in the model: `calls`,
/// those of the main graph and its subgraphs, then the function bodies' in call order (callers
/// before callees, each body typed by its own callers' agreement), so a call made inside a
/// function counts whatever the order of the functions in the file. Functions that call
/// themselves, directly or not, and every function only they call, get a conflicting signature.
fn signatures(
    model: &Model,
    functions: &HashSet<FunctionKey>,
    mut calls: HashMap<FunctionKey, Signature>,
) -> HashMap<FunctionKey, Signature> {
    let record = |node: &Node, env: &TypeEnv, calls: &mut HashMap<_, _>| {
        if let Some(key) = called_function(node, functions) {
            add_call(calls, key, call_types(node, env));
        }
    };
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

/// The types of a call's arguments.
fn call_types(node: &Node, env: &TypeEnv) -> Vec<Option<TensorType>> {
    node.inputs.iter().map(|i| env.get(i).cloned()).collect()
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
    /// The calls of model-local functions seen so far, while the main graph is walked.
    calls: Option<HashMap<FunctionKey, Signature>>,
    names: RefCell<UniqueNames>,
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
        place: Place,
    ) -> Result<usize> {
        let mut env = TypeEnv::infer_with(graph, imports, outer, formals);
        for text in env.contradictions() {
            self.rule.contradiction(scope, text);
        }
        let opset = opset_version(imports, "").unwrap_or(1);
        let constants = Constants::for_graph(opset, place.in_function, self.ir_version);
        let mut count = 0;
        // Nodes pruned on the way; the initializers and declarations only they read or wrote
        // are dropped once at the end (per replacement, that scan made a pass quadratic).
        let mut pruned: Vec<Node> = Vec::new();
        for id in graph.node_ids() {
            // A node pruned after an earlier replacement is gone.
            if graph.get(id).is_none() {
                continue;
            }
            count += self.subgraphs(graph, id, scope, imports, &env, place)?;
            let node = graph.node(id);
            let multiaxis = crate::ops::is_multiaxis(&node.domain, &node.op_type);
            if let Some(key) = called_function(node, &self.functions) {
                if let Some(calls) = &mut self.calls {
                    add_call(calls, key, call_types(node, &env));
                }
                if !multiaxis {
                    continue;
                }
            }
            let site = Site {
                node,
                graph,
                env: &env,
                scope,
                opset,
                model_opset: self.model_opset,
                in_function: place.in_function,
                in_subgraph: place.in_subgraph,
                constants,
                functions: &self.functions,
                names: &self.names,
            };
            let Some(change) = self.rule.visit(&site)? else {
                continue;
            };
            let inputs = node.inputs.clone();
            let Change {
                replacement,
                output_types,
                prune_inputs,
                renames,
            } = change;
            graph.replace_node(id, replacement.nodes);
            graph.value_info.extend(replacement.value_info);
            graph.initializers.extend(replacement.initializers);
            for (old, new) in &renames {
                graph.replace_uses(old, new);
                graph.value_info.retain(|v| v.name != *old);
            }
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
        Ok(count)
    }

    fn subgraphs(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        scope: &str,
        imports: &[OpsetImport],
        env: &TypeEnv,
        place: Place,
    ) -> Result<usize> {
        let node = graph.node(id);
        if node.subgraphs().next().is_none() {
            return Ok(0);
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
                        place.subgraph(),
                    )?
                }
                AttrValue::Graphs(gs) => {
                    for (i, g) in gs.iter_mut().enumerate() {
                        let scope = format!("{sub_scope}[{i}]");
                        count += self.graph(
                            g,
                            &scope,
                            imports,
                            env,
                            Formals::Given(&[]),
                            place.subgraph(),
                        )?;
                    }
                }
                _ => {}
            }
        }
        Ok(count)
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

/// A pass made of a [`Rule`]: walks the main graph, the subgraphs of `If` / `Loop` / `Scan` at
/// any depth and the model-local functions, types each graph once, and applies the rule's
/// [`Change`]s.
///
/// # Example
/// A rule replacing every `Neg` of integers by `Mul` by minus one, run on a one-node model:
/// ```
/// use multigather::ir::{Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
/// use multigather::pass::{Change, PassManager, Rule, RulePass, Site};
/// use multigather::DataType;
///
/// struct NegAsMul;
/// impl Rule for NegAsMul {
///     fn visit(&mut self, site: &Site<'_>) -> multigather::Result<Option<Change>> {
///         let node = site.node();
///         let (Some(x), Some(y)) = (node.inputs.first(), node.outputs.first()) else {
///             return Ok(None);
///         };
///         if node.op_type != "Neg" || site.type_of(x).and_then(|t| t.elem) != Some(DataType::Int64) {
///             return Ok(None);
///         }
///         let minus_one = site.fresh_name("minus_one");
///         let mul = Node::new("Mul", &site.fresh_name(&node.name), [x.as_str(), &minus_one], [y.as_str()]);
///         let constant = StoredTensor::from_i64s(Some(&minus_one), &[], &[-1]);
///         Ok(Some(Change::replace_with(vec![mul]).with_initializer(constant)))
///     }
/// }
///
/// let mut g = Graph::new("main");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Int64, vec![Dim::Known(3)])));
/// g.outputs.push(ValueInfo::untyped("y"));
/// g.add_node(Node::new("Neg", "neg", ["x"], ["y"]));
/// let mut model = Model::new(g, 13);
///
/// let mut pass = RulePass::new("NegAsMul", NegAsMul);
/// PassManager::new().run(&mut model, &mut [&mut pass])?;
/// assert_eq!(pass.replaced(), 1);
/// assert_eq!(model.op_histogram().get("Mul"), Some(&1));
/// # Ok::<(), multigather::Error>(())
/// ```
pub struct RulePass<R> {
    name: &'static str,
    rule: R,
    replaced: usize,
}

impl<R: Rule> RulePass<R> {
    /// A pass named `name` (in errors and dumps) applying `rule`.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::{Graph, Model};
    /// use multigather::pass::{Change, Pass, Rule, RulePass, Site};
    ///
    /// struct Nothing;
    /// impl Rule for Nothing {
    ///     fn visit(&mut self, _: &Site<'_>) -> multigather::Result<Option<Change>> {
    ///         Ok(None)
    ///     }
    /// }
    /// let mut pass = RulePass::new("Nothing", Nothing);
    /// assert!(!pass.run(&mut Model::new(Graph::new("g"), 13))?);
    /// # Ok::<(), multigather::Error>(())
    /// ```
    pub fn new(name: &'static str, rule: R) -> RulePass<R> {
        RulePass {
            name,
            rule,
            replaced: 0,
        }
    }

    /// The rule (and whatever it recorded).
    pub fn rule(&self) -> &R {
        &self.rule
    }

    /// The rule, giving the pass up.
    pub fn into_rule(self) -> R {
        self.rule
    }

    /// How many nodes the last run replaced.
    pub fn replaced(&self) -> usize {
        self.replaced
    }
}

impl<R: Rule> super::Pass for RulePass<R> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn run(&mut self, model: &mut Model) -> Result<bool> {
        self.replaced = walk(model, &mut self.rule)?;
        Ok(self.replaced > 0)
    }
}
