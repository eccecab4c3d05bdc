//! Lowering to another opset than the model's (`LowerConfig::target_opset`): which nodes of the
//! model keep their meaning when the default-domain import becomes the target.
//!
//! Changing the import changes which version of every default-domain operator a node is. A node
//! keeps its meaning at the target when the interpreter's registry resolves its operator to the
//! same definition at both opsets (an older version whose semantics differ is a definition of
//! its own: `Squeeze` with `axes` as an attribute or an input, `Softmax` before and after 13),
//! and when the target's schema accepts its input element types. Anything else is the job of a
//! converter (`onnx.version_converter`), not of the lowering: the pass refuses, naming the node.
//! Nodes the lowering emits are built at the target. Model-local functions keep their own
//! imports and are not checked.

use super::super::walk::{Change, Rule, Site};
use crate::ir::{canonical_domain, is_onnx_domain, Node};
use crate::ops::{constraints, registry};

/// The model's nodes that would not mean the same at the target opset, each with why.
pub(super) struct AtTarget {
    pub from: i64,
    pub to: i64,
    /// Each node's first output, its label and op type, and the reason.
    pub blocked: Vec<Blocked>,
}

/// A node that does not keep its meaning at the target opset.
pub(super) struct Blocked {
    /// The node's first output: nodes are told apart by it after the lowering.
    pub output: String,
    pub op: String,
    /// The node and why, as the error says it.
    pub why: String,
}

impl Rule for AtTarget {
    fn visit(&mut self, site: &Site<'_>) -> crate::Result<Option<Change>> {
        let node = site.node;
        if site.in_function || !is_onnx_domain(&node.domain) {
            return Ok(None);
        }
        if let Err(reason) = keeps_meaning(node, site, self.from, self.to) {
            self.blocked.push(Blocked {
                output: node.outputs.first().cloned().unwrap_or_default(),
                op: node.op_type.clone(),
                why: format!(
                    "node '{}' ({}) in {}: {reason}",
                    node.label(),
                    node.op_type,
                    site.scope
                ),
            });
        }
        Ok(None)
    }
}

/// Whether `node` (default domain, typed by `site`) means at opset `to` what it means at `from`.
fn keeps_meaning(node: &Node, site: &Site, from: i64, to: i64) -> std::result::Result<(), String> {
    let domain = canonical_domain(&node.domain);
    let op = node.op_type.as_str();
    let Some(now) = registry().lookup(domain, op, from) else {
        return Err(format!("the operator is not known at opset {from}"));
    };
    match registry().lookup(domain, op, to) {
        None => return Err(format!("the operator does not exist at opset {to}")),
        Some(then) if !std::ptr::eq(now, then) => {
            return Err(format!(
                "its definition at opset {to} differs from the one at opset {from}"
            ))
        }
        Some(_) => {}
    }
    let (Some(now), Some(then)) = (
        constraints::lookup(domain, op, from),
        constraints::lookup(domain, op, to),
    ) else {
        return Ok(());
    };
    if std::ptr::eq(now, then) {
        return Ok(());
    }
    // The schema's types changed between the two versions: the node's must be among the
    // target's.
    let mut types = Vec::with_capacity(node.inputs.len());
    for input in &node.inputs {
        if input.is_empty() {
            types.push(None);
            continue;
        }
        let Some(elem) = site.env.get(input).and_then(|t| t.elem) else {
            return Err(format!(
                "the element type of input '{input}' is unknown, and the operator's types \
                 differ at opset {to}"
            ));
        };
        types.push(Some(elem));
    }
    then.check(&types)
        .map_err(|e| format!("at opset {to}, {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Dim, Graph, Model, Type, ValueInfo};
    use crate::pass::walk::walk;
    use crate::DataType;

    fn blocked(nodes: Vec<Node>, elem: DataType, from: i64, to: i64) -> Vec<String> {
        let mut g = Graph::new("g");
        g.inputs
            .push(ValueInfo::new("x", Type::tensor(elem, vec![Dim::Known(2)])));
        for n in nodes {
            g.add_node(n);
        }
        let mut model = Model::new(g, from);
        let mut rule = AtTarget {
            from,
            to,
            blocked: Vec::new(),
        };
        walk(&mut model, &mut rule).unwrap();
        rule.blocked.into_iter().map(|b| b.why).collect()
    }

    #[test]
    fn a_float_relu_means_the_same_at_opset_11_and_13() {
        let relu = || vec![Node::new("Relu", "relu", ["x"], ["y"])];
        assert!(blocked(relu(), DataType::Float, 13, 11).is_empty());
        // bfloat16 Relu exists from opset 13 only.
        let why = blocked(relu(), DataType::Bfloat16, 13, 11);
        assert_eq!(why.len(), 1);
        assert!(
            why[0].starts_with("node 'relu' (Relu) in g: at opset 11,"),
            "{why:?}"
        );
    }

    #[test]
    fn definitions_that_differ_or_do_not_exist_at_the_target_block_the_node() {
        let cases = [
            // A Squeeze with its axes as an input (opset 13) is another definition at 11.
            (
                "Squeeze",
                13,
                11,
                "node 'n' (Squeeze) in g: its definition at opset 11 differs from the one at opset 13",
            ),
            (
                "Gelu",
                20,
                13,
                "node 'n' (Gelu) in g: the operator does not exist at opset 13",
            ),
        ];
        for (op, from, to, why) in cases {
            let node = Node::new(op, "n", ["x"], ["y"]);
            assert_eq!(blocked(vec![node], DataType::Float, from, to), [why]);
        }
    }
}
