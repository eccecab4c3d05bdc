//! The `DefineMultiaxisFunctions` pass: every `GatherMultiaxis` node gets a model-local function
//! definition whose body is its lowering, so a rewritten model runs as it is on runtimes that
//! inline local functions (onnxruntime does), and natively on runtimes that know the operator.
//!
//! ```text
//! GatherMultiaxis(X, I, axes, mode)
//!   ==> GatherMultiaxis:<overload>(X, I, axes, mode)
//!       + function multigather.GatherMultiaxis:<overload> (input, indices) => (output)
//!           { LowerMultiaxis(GatherMultiaxis(input, indices, axes, mode)) }
//! ```
//!
//! Design note: one function cannot serve every node. A `FunctionProto` attribute reference
//! (`ref_attr_name`) substitutes a value into a body node; it cannot choose between `Gather` and
//! `GatherND`, compute a permutation from `axes`, or pick `Pad` for mode `zero`, and the lowering
//! also depends on what the node's static types say (which dimensions are 1, which sizes are
//! known). So there is one function per distinct lowering, told apart by the `overload` field of
//! IR version 10 (the model's IR version is raised to 10 when it is lower): each node names its
//! overload, and nodes whose bodies come out identical (same ops, attributes, declared types and
//! opset) share one. The function declares `axes` and `mode` (default `"error"`) so the node's
//! attributes are legal, but its body does not read them: it was built for the node's values.
//!
//! The bodies are built at the model's default-domain opset and declare it, whatever the opset
//! of the graph holding the node: onnxruntime (1.32) checks the nodes of every inlined function
//! against the model's opset, ignoring the function's own imports, and the ONNX checker wants a
//! function's imports to agree with the model's.
//!
//! Inside a function body onnxruntime also ignores a call's `overload` and resolves
//! `(domain, name)` alone. So when every node of the model comes out with the same lowering, that
//! one function is defined without an overload and the nodes name none (safe only then: every
//! node without an overload calls it); otherwise a node inside a model-local function calls its
//! lowering under a name of its own, `GatherMultiaxis_<overload>`, a plain local function, and
//! the nodes of the main graph and its subgraphs keep naming overloads. A renamed call runs its
//! body even where the library registers the operator.
//!
//! A node that cannot be lowered keeps no function and is reported, as by
//! [`super::LowerMultiaxis`]; a node that already names an overload is left alone, so the pass is
//! idempotent.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::lower::{lower_node, record, Pattern};
use super::walk::{walk, Change, Rule, Site};
use super::{emit::Constants, emit::Replacement, NodeOutcome, NodeReport, Pass};
use crate::error::Result;
use crate::gather::{DOMAIN, OP_TYPE};
use crate::infer::TypeEnv;
use crate::ir::{
    opset_version, AttrValue, Attribute, Function, Graph, Model, Node, OpsetImport, UniqueNames,
    ValueInfo,
};
use crate::ops::is_multiaxis;
use crate::text::graph_to_text;

/// The function inputs and output.
const FORMALS: [&str; 3] = ["input", "indices", "output"];

/// The pass's report: per node, and how many functions were defined.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FunctionReport {
    /// Nodes given a function.
    pub defined: usize,
    pub skipped: usize,
    /// Distinct functions (overloads) added to the model.
    pub functions: usize,
    pub by_pattern: BTreeMap<Pattern, usize>,
    pub nodes: Vec<NodeReport>,
}

impl FunctionReport {
    /// A human summary: counts, then one line per skipped node.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "defined function bodies for {} GatherMultiaxis node(s) ({} distinct), skipped {}",
            self.defined, self.functions, self.skipped
        );
        for n in &self.nodes {
            if let NodeOutcome::Skipped { reason } = &n.outcome {
                s.push_str(&format!(
                    "\n  no function for '{}' in {}: {reason}",
                    n.node, n.scope
                ));
            }
        }
        s
    }
}

/// The pass. See the module documentation.
///
/// # Example
/// ```
/// use multigather::ir::{Graph, Model};
/// use multigather::pass::{DefineMultiaxisFunctions, PassManager};
/// let mut model = Model::new(Graph::new("g"), 13);
/// let mut pass = DefineMultiaxisFunctions::new();
/// assert_eq!(PassManager::new().run(&mut model, &mut [&mut pass])?, [("DefineMultiaxisFunctions", false)]);
/// assert_eq!(pass.report().functions, 0);
/// # Ok::<(), multigather::Error>(())
/// ```
#[derive(Default)]
pub struct DefineMultiaxisFunctions {
    report: FunctionReport,
}

impl DefineMultiaxisFunctions {
    /// The pass.
    pub fn new() -> DefineMultiaxisFunctions {
        DefineMultiaxisFunctions::default()
    }

    /// The report of the last run.
    pub fn report(&self) -> &FunctionReport {
        &self.report
    }

    /// Runs the pass alone through a [`super::PassManager`] (so the result is validated) and
    /// returns its report.
    pub fn define(model: &mut Model) -> Result<FunctionReport> {
        let mut pass = DefineMultiaxisFunctions::new();
        super::run_alone(&mut pass, model)?;
        Ok(pass.report)
    }
}

impl Pass for DefineMultiaxisFunctions {
    fn name(&self) -> &'static str {
        "DefineMultiaxisFunctions"
    }

    fn run(&mut self, model: &mut Model) -> Result<bool> {
        self.report = FunctionReport::default();
        let taken = model
            .functions
            .iter()
            .filter(|f| is_multiaxis(&f.domain, &f.name))
            .filter_map(|f| f.overload.clone());
        let existing_default = model
            .functions
            .iter()
            .find(|f| is_multiaxis(&f.domain, &f.name) && f.overload.is_none())
            .map(|f| (function_opset(f), graph_to_text(&f.body)));
        let first_definition = taken.clone().next().is_none() && existing_default.is_none();
        let mut definer = Definer {
            report: &mut self.report,
            functions: Vec::new(),
            by_body: HashMap::new(),
            overloads: UniqueNames::new(taken),
            existing_default,
            opset: model.opset("").unwrap_or(1),
            called_from_functions: BTreeSet::new(),
            called_from_graphs: BTreeSet::new(),
        };
        walk(model, &mut definer)?;
        let (called_from_functions, called_from_graphs) = (
            std::mem::take(&mut definer.called_from_functions),
            std::mem::take(&mut definer.called_from_graphs),
        );
        let mut functions = definer.functions;
        self.report.functions = functions.len();
        if functions.is_empty() {
            return Ok(false);
        }
        if let ([only], true, 0) = (
            functions.as_mut_slice(),
            first_definition,
            self.report.skipped,
        ) {
            // One lowering for every node: define it without an overload (see the module
            // documentation).
            if let Some(name) = only.overload.take() {
                clear_overload(&mut model.graph, &name);
                for f in &mut model.functions {
                    clear_overload(&mut f.body, &name);
                }
            }
        } else if !called_from_functions.is_empty() {
            rename_calls_in_functions(
                model,
                &mut functions,
                &called_from_functions,
                &called_from_graphs,
            );
        }
        // Overloads arrived with IR version 10.
        let overloads = functions.iter().any(|f| f.overload.is_some());
        if overloads && model.ir_version.is_none_or(|v| v < 10) {
            model.ir_version = Some(10);
        }
        model.functions.extend(functions);
        Ok(true)
    }
}

struct Definer<'a> {
    report: &'a mut FunctionReport,
    functions: Vec<Function>,
    /// Overload names by (opset, body text).
    by_body: HashMap<(i64, String), String>,
    overloads: UniqueNames,
    /// (opset, body text) of a definition without overload the model has already.
    existing_default: Option<(i64, String)>,
    /// The model's default-domain opset: the one every body is built at.
    opset: i64,
    /// The overloads called from inside model-local functions, and from the model's graphs.
    called_from_functions: BTreeSet<String>,
    called_from_graphs: BTreeSet<String>,
}

/// Makes the calls inside model-local functions that name an overload call a function of their
/// own name instead (see the module documentation): `GatherMultiaxis_<overload>`, with the body
/// of that overload. The overloaded definition stays when a node of the model's graphs calls it.
fn rename_calls_in_functions(
    model: &mut Model,
    functions: &mut Vec<Function>,
    called_from_functions: &BTreeSet<String>,
    called_from_graphs: &BTreeSet<String>,
) {
    let mut names = UniqueNames::new(
        model
            .functions
            .iter()
            .chain(functions.iter())
            .filter(|f| f.domain == DOMAIN)
            .map(|f| f.name.clone()),
    );
    let mut renamed: HashMap<String, String> = HashMap::new();
    for overload in called_from_functions {
        let Some(at) = functions
            .iter()
            .position(|f| f.overload.as_deref() == Some(overload.as_str()))
        else {
            continue;
        };
        let name = names.fresh(&format!("{OP_TYPE}_{overload}"));
        let mut own = if called_from_graphs.contains(overload) {
            functions[at].clone()
        } else {
            functions.remove(at)
        };
        own.name = name.clone();
        own.overload = None;
        functions.push(own);
        renamed.insert(overload.clone(), name);
    }
    for f in &mut model.functions {
        rename_calls(&mut f.body, &renamed);
    }
}

/// Renames the `GatherMultiaxis` calls of a graph and its subgraphs by their overload.
fn rename_calls(graph: &mut Graph, renamed: &HashMap<String, String>) {
    for id in graph.node_ids_unordered() {
        let mut node = graph.node_mut(id);
        if is_multiaxis(&node.domain, &node.op_type) {
            if let Some(name) = node.overload.as_ref().and_then(|o| renamed.get(o)) {
                node.op_type = name.clone();
                node.overload = None;
            }
        }
        for g in node.subgraphs_mut() {
            rename_calls(g, renamed);
        }
    }
}

/// The default-domain opset a function imports.
fn function_opset(f: &Function) -> i64 {
    opset_version(&f.opset_imports, "").unwrap_or(1)
}

/// Removes the overload `name` from the `GatherMultiaxis` nodes of a graph and its subgraphs.
fn clear_overload(graph: &mut Graph, name: &str) {
    for id in graph.node_ids() {
        let mut node = graph.node_mut(id);
        if node.domain == DOMAIN && node.overload.as_deref() == Some(name) {
            node.overload = None;
        }
        for g in node.subgraphs_mut() {
            clear_overload(g, name);
        }
    }
}

impl Definer<'_> {
    /// The function for one node: its lowering with the node's operands as the function's
    /// inputs; the node itself is not changed.
    fn body(&self, node: &Node, site: &Site) -> std::result::Result<(Pattern, Graph), String> {
        if node.inputs.len() != 2 || node.outputs.len() != 1 {
            return Err(format!(
                "expected 2 inputs and 1 output, found {} and {}",
                node.inputs.len(),
                node.outputs.len()
            ));
        }
        let mut env = TypeEnv::default();
        for (formal, actual) in FORMALS.iter().zip(&node.inputs) {
            if let Some(t) = site.env.get(actual) {
                env.insert(formal, t.clone());
            }
        }
        let mut call = node.clone();
        call.inputs = vec![FORMALS[0].into(), FORMALS[1].into()];
        call.outputs = vec![FORMALS[2].into()];
        // A function body sees nothing of the graph but its inputs, and has no initializers.
        let empty = Graph::new("");
        let names = std::cell::RefCell::new(UniqueNames::new(FORMALS.map(String::from)));
        let body_site = Site {
            node: &call,
            graph: &empty,
            env: &env,
            scope: site.scope,
            opset: self.opset,
            model_opset: self.opset,
            in_function: true,
            in_subgraph: false,
            constants: Constants::for_graph(self.opset, true, None),
            functions: site.functions,
            names: &names,
        };
        let lowered = lower_node(&call, OP_TYPE, &body_site, &mut names.borrow_mut())?;
        let Replacement {
            nodes, value_info, ..
        } = lowered.replacement;
        let mut body = Graph::new(OP_TYPE);
        body.inputs = FORMALS[..2]
            .iter()
            .map(|&n| ValueInfo::untyped(n))
            .collect();
        body.outputs = vec![ValueInfo::untyped(FORMALS[2])];
        body.value_info = value_info;
        for n in nodes {
            body.add_node(n);
        }
        Ok((lowered.pattern, body))
    }

    /// The overload for this body: an existing one with the same body, or a new function.
    fn overload(&mut self, pattern: Pattern, opset: i64, body: Graph) -> String {
        let key = (opset, graph_to_text(&body));
        if let Some(name) = self.by_body.get(&key) {
            return name.clone();
        }
        let base = format!("{pattern:?}").to_lowercase();
        let name = self.overloads.fresh(&base);
        self.by_body.insert(key, name.clone());
        self.functions.push(Function {
            name: OP_TYPE.to_owned(),
            domain: DOMAIN.to_owned(),
            overload: Some(name.clone()),
            attributes: vec!["axes".to_owned()],
            attribute_defaults: vec![Attribute::new("mode", AttrValue::String(b"error".to_vec()))],
            opset_imports: vec![OpsetImport {
                domain: Some(String::new()),
                version: opset,
            }],
            body,
            doc_string: Some(format!(
                "The {} lowering of a GatherMultiaxis node, for runtimes that inline local \
                 functions.",
                pattern.describe()
            )),
            metadata_props: Vec::new(),
        });
        name
    }
}

impl Rule for Definer<'_> {
    fn visit(&mut self, site: &Site<'_>) -> Result<Option<Change>> {
        let node = site.node;
        if !is_multiaxis(&node.domain, &node.op_type) || node.overload.is_some() {
            return Ok(None);
        }
        let label = node.label();
        let lowered = self.body(node, site).and_then(|(pattern, body)| {
            let key = (self.opset, graph_to_text(&body));
            match &self.existing_default {
                None => Ok(Some((pattern, body))),
                // Already served by the model's definition without overload.
                Some(default) if *default == key => Ok(None),
                Some(_) => Err("the model defines GatherMultiaxis without an overload for another                      lowering, and a node without overload calls that one"
                    .to_owned()),
            }
        });
        let (outcome, change) = match lowered {
            Ok(None) => return Ok(None),
            Ok(Some((pattern, body))) => {
                let overload = self.overload(pattern, self.opset, body);
                if site.in_function {
                    self.called_from_functions.insert(overload.clone());
                } else {
                    self.called_from_graphs.insert(overload.clone());
                }
                self.report.defined += 1;
                *self.report.by_pattern.entry(pattern).or_default() += 1;
                let mut call = node.clone();
                call.overload = Some(overload.clone());
                let change = Change::replace_with(vec![call]);
                let into = vec![format!("{DOMAIN}.{OP_TYPE}:{overload}")];
                (NodeOutcome::Rewritten { into }, Some(change))
            }
            Err(reason) => (NodeOutcome::Skipped { reason }, None),
        };
        let r = &mut *self.report;
        record(&mut r.nodes, &mut r.skipped, label, site.scope, outcome);
        Ok(change)
    }

    fn skip(&mut self, node: &Node, scope: &str, reason: &str) {
        if is_multiaxis(&node.domain, &node.op_type) && node.overload.is_none() {
            let skipped = NodeOutcome::Skipped {
                reason: reason.to_owned(),
            };
            let r = &mut *self.report;
            record(&mut r.nodes, &mut r.skipped, node.label(), scope, skipped);
        }
    }
}
