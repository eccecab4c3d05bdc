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

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::ir::{
    canonical_domain, opset_version, CallGraph, Function, FunctionKey, Graph, Model, Node,
    OpsetImport,
};
use crate::ops::{registry, GatherKind};

/// Runs every check on a decoded model.
pub(super) fn check_model(model: &Model) -> Result<()> {
    model.validate()?;
    check_recursion(&model.functions)?;
    // Built once for every graph: rebuilding it per function made loading quadratic in the
    // number of functions.
    let local: HashSet<FunctionKey> = model.functions.iter().map(Function::key).collect();
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

fn qualified(domain: &str, name: &str) -> String {
    if domain.is_empty() {
        name.to_owned()
    } else {
        format!("{domain}.{name}")
    }
}

/// Refuses call cycles among model-local functions, naming the cycle.
fn check_recursion(functions: &[Function]) -> Result<()> {
    let Some(cycle) = CallGraph::new(functions).cycle() else {
        return Ok(());
    };
    let name = |i: usize| qualified(&functions[i].domain, &functions[i].name);
    let path: Vec<String> = cycle.iter().map(|&g| name(g)).collect();
    Err(Error::InvalidModel(format!(
        "function '{}' is recursive: {}",
        path.last().map(String::as_str).unwrap_or_default(),
        path.join(" calls ")
    )))
}

/// Attributes whose type is checked at load: the ones the interpreter's control flow reads.
/// `(domain, op_type, attribute, type name)`. The gathers' attributes, which the passes read, go
/// through their typed parse (`ops::GatherKind::attributes`).
const TYPED_ATTRIBUTES: &[(&str, &str, &str, &str)] = &[
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
    if local.contains(&node.call_key()) {
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
    // A node whose attributes refer to a function's is judged at each call, which binds them.
    if let Some(kind) = GatherKind::of(node).filter(|_| !refers) {
        match kind.attributes(node) {
            Ok(_) => {}
            Err(Error::InvalidNode { reason, .. }) => return fail(reason),
            Err(e) => return Err(e),
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
