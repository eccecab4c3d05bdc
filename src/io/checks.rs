//! Structural checks the loader runs on every model before handing it out.
//!
//! Models come from strangers, so what the rest of the crate assumes about a loaded model is
//! checked once, here, with errors that name the graph, node or function at fault:
//!
//! - the graph invariants of [`Model::validate`] (every value defined once and before use, no
//!   cycle, every node's domain imported, function names unique);
//! - no model-local function calls itself, directly or through others (a runtime that inlines
//!   functions would never finish);
//! - every node of an operator this build knows names as many inputs and outputs as the operator
//!   takes, gives no attribute twice, and gives the attributes the passes read the type they must
//!   have (a `Gather` whose `axis` is a string is an invalid model, not a node to skip).
//!
//! Checking at load means a pass never sees such a model, so an invalid input is reported as the
//! input's fault rather than as a pass that "left an invalid model".

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::ir::{canonical_domain, opset_version, Function, Graph, Model, Node, OpsetImport};
use crate::ops::registry;

/// Runs every check on a decoded model.
pub(super) fn check_model(model: &Model) -> Result<()> {
    model.validate()?;
    check_recursion(&model.functions)?;
    // Built once for every graph: rebuilding it per function made loading quadratic in the
    // number of functions.
    let local: HashSet<FunctionKey> = model.functions.iter().map(key).collect();
    check_nodes(&model.graph, &model.opset_imports, &local)?;
    for f in &model.functions {
        let imports = if f.opset_imports.is_empty() {
            &model.opset_imports
        } else {
            &f.opset_imports
        };
        check_nodes(&f.body, imports, &local).map_err(|e| {
            Error::InvalidModel(format!("function '{}': {e}", qualified(&f.domain, &f.name)))
        })?;
    }
    Ok(())
}

/// How a function is called: domain, name and overload, as the interpreter resolves calls.
type FunctionKey<'a> = (&'a str, &'a str, Option<&'a str>);

fn key(f: &Function) -> FunctionKey<'_> {
    (&f.domain, &f.name, f.overload.as_deref())
}

fn call_key(node: &Node) -> FunctionKey<'_> {
    (&node.domain, &node.op_type, node.overload.as_deref())
}

fn qualified(domain: &str, name: &str) -> String {
    if domain.is_empty() {
        name.to_owned()
    } else {
        format!("{domain}.{name}")
    }
}

/// Refuses call cycles among model-local functions, naming the cycle.
fn check_recursion(functions: &[Function]) -> Result<()> {
    let index: HashMap<FunctionKey, usize> = functions
        .iter()
        .enumerate()
        .map(|(i, f)| (key(f), i))
        .collect();
    let callees: Vec<Vec<usize>> = functions
        .iter()
        .map(|f| {
            let mut out = Vec::new();
            calls(&f.body, &index, &mut out);
            out
        })
        .collect();
    // Depth-first search with an explicit stack (a hostile model may chain many functions):
    // a callee still on the stack closes a cycle.
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        OnStack,
        Done,
    }
    let mut state = vec![State::New; functions.len()];
    for start in 0..functions.len() {
        if state[start] != State::New {
            continue;
        }
        state[start] = State::OnStack;
        let mut stack = vec![(start, 0usize)];
        while let Some(top) = stack.last_mut() {
            let (f, next) = *top;
            let Some(&callee) = callees[f].get(next) else {
                state[f] = State::Done;
                stack.pop();
                continue;
            };
            top.1 += 1;
            match state[callee] {
                State::New => {
                    state[callee] = State::OnStack;
                    stack.push((callee, 0));
                }
                State::OnStack => {
                    let from = stack.iter().position(|&(g, _)| g == callee).unwrap_or(0);
                    let name = |i: usize| qualified(&functions[i].domain, &functions[i].name);
                    let path: Vec<String> = stack[from..]
                        .iter()
                        .map(|&(g, _)| name(g))
                        .chain(std::iter::once(name(callee)))
                        .collect();
                    return Err(Error::InvalidModel(format!(
                        "function '{}' is recursive: {}",
                        name(callee),
                        path.join(" calls ")
                    )));
                }
                State::Done => {}
            }
        }
    }
    Ok(())
}

/// The functions (by index) that nodes of `graph` and its subgraphs call.
fn calls(graph: &Graph, index: &HashMap<FunctionKey, usize>, out: &mut Vec<usize>) {
    for node in graph.nodes_unordered() {
        if let Some(&i) = index.get(&call_key(node)) {
            out.push(i);
        }
        for g in node.subgraphs() {
            calls(g, index, out);
        }
    }
}

/// Attributes whose type is checked at load: the ones the passes and the interpreter's control
/// flow read. `(domain, op_type, attribute, type name)`. `GatherMultiaxis`'s attributes go
/// through the parse every engine of the operator shares (`ops::multiaxis_attributes`).
const TYPED_ATTRIBUTES: &[(&str, &str, &str, &str)] = &[
    ("", "Gather", "axis", "int"),
    ("", "GatherElements", "axis", "int"),
    ("", "GatherND", "batch_dims", "int"),
    ("", "If", "then_branch", "graph"),
    ("", "If", "else_branch", "graph"),
    ("", "Loop", "body", "graph"),
    ("", "Scan", "body", "graph"),
];

/// Checks every node of `graph` and its subgraphs against what this build knows of its operator.
fn check_nodes(graph: &Graph, imports: &[OpsetImport], local: &HashSet<FunctionKey>) -> Result<()> {
    let mut work = vec![graph];
    while let Some(g) = work.pop() {
        for node in g.nodes_unordered() {
            check_node(node, imports, local).map_err(|e| Error::InvalidGraph {
                graph: g.name.clone(),
                reason: e.to_string(),
            })?;
            work.extend(node.subgraphs());
        }
    }
    Ok(())
}

fn check_node(node: &Node, imports: &[OpsetImport], local: &HashSet<FunctionKey>) -> Result<()> {
    let fail = |reason: String| Err(Error::node(&node.name, &node.qualified_op(), reason));
    let mut names = HashSet::new();
    for a in &node.attributes {
        if !names.insert(a.name.as_str()) {
            return fail(format!("attribute '{}' is given twice", a.name));
        }
    }
    if local.contains(&call_key(node)) {
        return Ok(());
    }
    let domain = canonical_domain(&node.domain);
    for &(d, op, attr, expected) in TYPED_ATTRIBUTES {
        if d != domain || op != node.op_type {
            continue;
        }
        match node.attr(attr) {
            Some(crate::ir::AttrValue::Ref { .. }) | None => {}
            Some(v) if v.type_name() == expected => {}
            Some(v) => {
                return fail(format!(
                    "attribute '{attr}': expected {expected}, found {}",
                    v.type_name()
                ))
            }
        }
    }
    let refers = node
        .attributes
        .iter()
        .any(|a| matches!(a.value, crate::ir::AttrValue::Ref { .. }));
    if domain == crate::gather::DOMAIN && node.op_type == crate::gather::OP_TYPE && !refers {
        if let Err(e) = crate::ops::multiaxis_attributes(node) {
            return fail(e.to_string());
        }
    }
    let Some(opset) = opset_version(imports, &node.domain) else {
        return Ok(());
    };
    match registry().lookup(&node.domain, &node.op_type, opset) {
        Some(def) => def.check_arity(node),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, ValueInfo};

    /// A function `local.<name>` whose body calls `local.<callee>`.
    fn function(name: &str, callee: &str) -> Function {
        let mut body = Graph::new(name);
        body.inputs.push(ValueInfo::untyped("x"));
        body.outputs.push(ValueInfo::untyped("y"));
        body.add_node(Node::new(callee, "call", ["x"], ["y"]).with_domain("local"));
        Function {
            name: name.into(),
            domain: "local".into(),
            overload: None,
            attributes: Vec::new(),
            attribute_defaults: Vec::new(),
            opset_imports: Vec::new(),
            body,
            doc_string: None,
            metadata_props: Vec::new(),
        }
    }

    #[test]
    fn call_cycles_are_named_from_where_they_close() {
        let functions = [function("f", "g"), function("g", "h"), function("h", "g")];
        let err = check_recursion(&functions).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid model: function 'local.g' is recursive: local.g calls local.h calls local.g"
        );
        let chain = [
            function("f", "g"),
            function("g", "h"),
            function("h", "Relu"),
        ];
        check_recursion(&chain).unwrap();
    }

    #[test]
    fn known_attributes_must_have_their_type() {
        let imports = [OpsetImport {
            domain: None,
            version: 13,
        }];
        let local = HashSet::new();
        let gather =
            |axis: AttrValue| Node::new("Gather", "g", ["d", "i"], ["o"]).with_attr("axis", axis);
        check_node(&gather(AttrValue::Int(1)), &imports, &local).unwrap();
        let reference = AttrValue::Ref {
            name: "a".into(),
            kind: 2,
        };
        check_node(&gather(reference), &imports, &local).unwrap();
        let err = check_node(&gather(AttrValue::Ints(vec![1])), &imports, &local).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node 'g' (Gather): attribute 'axis': expected int, found ints"
        );
        let twice = gather(AttrValue::Int(0)).with_attr("axis", AttrValue::Int(1));
        let err = check_node(&twice, &imports, &local).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node 'g' (Gather): attribute 'axis' is given twice"
        );
    }
}
