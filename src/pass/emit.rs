//! Building the nodes that replace one node: fresh names derived from the replaced node's,
//! constants in the form the opset allows, opset-dependent `Unsqueeze` / `Squeeze` / `Reshape`
//! forms, and a `value_info` declaration for every new value.
//!
//! Both node-replacing passes ([`super::GatherToMultiaxis`] and [`super::LowerMultiaxis`]) build
//! their replacements through an [`Emitter`], so the naming and declaration conventions are the
//! same on the way in and on the way out.

use crate::gather::ShapeOp;
use crate::ir::{AttrValue, Dim, Node, StoredTensor, Type, UniqueNames, ValueInfo};
use crate::DataType;

/// How a replacement materialises constant shapes and axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Constants {
    /// `Constant` nodes (opset 9 and later, where `Constant` takes int64).
    Nodes,
    /// Graph initializers (older opsets, in graphs of IR version 4 and later, where an
    /// initializer need not be a graph input).
    Initializers,
    /// A `Constant` of doubles (the types `Constant` takes before opset 9) cast to the wanted
    /// type: older opsets in function bodies, which have no initializers, and in IR versions
    /// before 4, where every initializer must be an input a feed could override.
    CastDoubles,
}

impl Constants {
    /// The form available in a graph importing default-domain opset `opset`, in a model of IR
    /// version `ir_version` (unset: the current one).
    pub(crate) fn for_graph(opset: i64, in_function: bool, ir_version: Option<i64>) -> Constants {
        if opset >= 9 {
            Constants::Nodes
        } else if in_function || ir_version.is_some_and(|v| v < 4) {
            Constants::CastDoubles
        } else {
            Constants::Initializers
        }
    }
}

/// Whether `Reshape` at `opset` takes tensors of `elem`: before opset 5 only float types.
pub(crate) fn reshape_takes(opset: i64, elem: DataType) -> bool {
    opset >= 5 || matches!(elem, DataType::Float16 | DataType::Float | DataType::Double)
}

/// The nodes that replace one node, declarations of the values they introduce, and the
/// initializers they need (constants in graphs of opset < 9, whose `Constant` takes floats only).
#[derive(Debug, Default)]
pub(crate) struct Replacement {
    pub nodes: Vec<Node>,
    pub value_info: Vec<ValueInfo>,
    pub initializers: Vec<StoredTensor>,
}

/// Builds the nodes of one replacement, naming everything after the original node.
pub(crate) struct Emitter<'a> {
    pub base: String,
    pub names: &'a mut UniqueNames,
    pub opset: i64,
    pub constants: Constants,
    pub nodes: Vec<Node>,
    pub value_info: Vec<ValueInfo>,
    pub initializers: Vec<StoredTensor>,
}

impl<'a> Emitter<'a> {
    /// An emitter for the replacement of the node labelled `base`.
    pub(crate) fn new(
        base: &str,
        names: &'a mut UniqueNames,
        opset: i64,
        constants: Constants,
    ) -> Emitter<'a> {
        Emitter {
            base: base.to_owned(),
            names,
            opset,
            constants,
            nodes: Vec::new(),
            value_info: Vec::new(),
            initializers: Vec::new(),
        }
    }

    /// What was built.
    pub(crate) fn finish(self) -> Replacement {
        Replacement {
            nodes: self.nodes,
            value_info: self.value_info,
            initializers: self.initializers,
        }
    }

    /// A fresh node name.
    pub(crate) fn node_name(&mut self, what: &str) -> String {
        self.names.fresh(&format!("{}/{what}", self.base))
    }

    /// A fresh value declared with the given type.
    pub(crate) fn value(&mut self, what: &str, elem: DataType, dims: &[Dim]) -> String {
        let name = self.names.fresh(&format!("{}_{what}", self.base));
        self.value_info.push(ValueInfo::new(
            name.clone(),
            Type::tensor(elem, dims.to_vec()),
        ));
        name
    }

    /// A 1-D int64 constant: a `Constant` node, or an initializer in old opsets.
    pub(crate) fn constant(&mut self, what: &str, values: &[i64]) -> String {
        let tensor = StoredTensor::from_i64s(None, &[values.len() as i64], values);
        self.constant_tensor(what, tensor)
    }

    /// Any constant tensor: a `Constant` node, an initializer, or a cast `Constant` of doubles
    /// (see [`Constants`]).
    pub(crate) fn constant_tensor(&mut self, what: &str, mut tensor: StoredTensor) -> String {
        let dims: Vec<Dim> = tensor.dims.iter().map(|&d| Dim::Known(d)).collect();
        match self.constants {
            Constants::Initializers => {
                let name = self.names.fresh(&format!("{}_{what}", self.base));
                tensor.name = Some(name.clone());
                self.initializers.push(tensor);
                return name;
            }
            Constants::CastDoubles if tensor.elem != DataType::Double => {
                if let Ok(values) = tensor.to_i64s() {
                    // Shapes and axes: exact in a double (below 2^53).
                    let doubles: Vec<u8> = values
                        .iter()
                        .flat_map(|&v| (v as f64).to_le_bytes())
                        .collect();
                    let elem = tensor.elem;
                    let t = StoredTensor::raw(None, DataType::Double, &tensor.dims, doubles.into());
                    let double = self.constant_node(&format!("{what}_double"), t, &dims);
                    let to = if self.opset >= 6 {
                        AttrValue::Int(elem.onnx() as i64)
                    } else {
                        AttrValue::String(elem.name().to_uppercase().into_bytes())
                    };
                    return self.op("Cast", &[&double], vec![("to", to)], what, elem, &dims);
                }
            }
            _ => {}
        }
        self.constant_node(what, tensor, &dims)
    }

    fn constant_node(&mut self, what: &str, tensor: StoredTensor, dims: &[Dim]) -> String {
        let name = self.value(what, tensor.elem, dims);
        let node_name = self.node_name(what);
        self.nodes.push(
            Node::new("Constant", &node_name, Vec::<String>::new(), [name.clone()])
                .with_attr("value", AttrValue::Tensor(Box::new(tensor))),
        );
        name
    }

    /// One node `op(inputs) <attrs>` with one new output value of the given type, named after
    /// `what`; returns the output's name.
    pub(crate) fn op(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: Vec<(&str, AttrValue)>,
        what: &str,
        elem: DataType,
        dims: &[Dim],
    ) -> String {
        let out = self.value(what, elem, dims);
        let name = self.node_name(&format!("{op}_{what}"));
        let mut node = Node::new(op, &name, inputs.iter().copied(), [out.clone()]);
        for (attr, value) in attrs {
            node = node.with_attr(attr, value);
        }
        self.nodes.push(node);
        out
    }

    /// Makes the value `value`, built by this emitter, appear under the name `output` instead:
    /// the node producing it is renamed (and its declaration dropped, `output` being declared
    /// where it was already), or an `Identity` is added when no node of this emitter produces it.
    pub(crate) fn rename_result(&mut self, value: &str, output: &str) {
        if let Some(node) = self
            .nodes
            .iter_mut()
            .find(|n| n.outputs.iter().any(|o| o == value))
        {
            for o in node.outputs.iter_mut().filter(|o| *o == value) {
                *o = output.to_owned();
            }
            self.value_info.retain(|v| v.name != value);
            return;
        }
        let name = self.node_name("Identity");
        self.nodes
            .push(Node::new("Identity", &name, [value], [output]));
    }

    /// Drops the nodes built so far whose outputs nothing reads (no other node built here, and
    /// not one of `keep`), with their declarations; returns how many went.
    pub(crate) fn prune(&mut self, keep: &[&str]) -> usize {
        let before = self.nodes.len();
        loop {
            let read: std::collections::HashSet<&str> = self
                .nodes
                .iter()
                .flat_map(|n| n.inputs.iter().map(String::as_str))
                .chain(keep.iter().copied())
                .collect();
            let dead: Vec<String> = self
                .nodes
                .iter()
                .filter(|n| !n.outputs.iter().any(|o| read.contains(o.as_str())))
                .flat_map(|n| n.outputs.clone())
                .collect();
            if dead.is_empty() {
                break;
            }
            self.nodes
                .retain(|n| !n.outputs.iter().any(|o| dead.contains(o)));
            self.value_info.retain(|v| !dead.contains(&v.name));
        }
        before - self.nodes.len()
    }

    /// Applies shape operations, collapsing them into one `Reshape` to a constant shape when all
    /// sizes are known. The last result is named `last` if given.
    pub(crate) fn shape_ops(
        &mut self,
        ops: &[ShapeOp],
        mut value: String,
        elem: DataType,
        mut dims: Vec<Dim>,
        what: &str,
        last: Option<&str>,
    ) -> (String, Vec<Dim>) {
        if ops.is_empty() {
            return (value, dims);
        }
        let final_dims = ops.iter().fold(dims.clone(), |d, op| apply_dims(op, &d));
        // One `Reshape` to a constant shape, unless the constant would have to be cast (old
        // opsets without initializers) where `Unsqueeze` / `Squeeze` with attributes need none.
        let cheap_constant = self.constants != Constants::CastDoubles
            || ops.iter().any(|op| matches!(op, ShapeOp::Reshape(_)));
        if let (Some(_), Some(sizes), true) =
            (all_known(&dims), all_known(&final_dims), cheap_constant)
        {
            if self.can_reshape_to(&dims, &sizes) && reshape_takes(self.opset, elem) {
                let out = self.output_name(last, what, elem, &final_dims);
                self.reshape_to_sizes(&value, &dims, &sizes, &out, what);
                return (out, final_dims);
            }
        }
        for (n, op) in ops.iter().enumerate() {
            let next_dims = apply_dims(op, &dims);
            let out = if n + 1 == ops.len() {
                self.output_name(last, what, elem, &next_dims)
            } else {
                self.value(what, elem, &next_dims)
            };
            match op {
                ShapeOp::Unsqueeze(axes) => self.axes_op("Unsqueeze", &value, axes, &out, what),
                ShapeOp::Squeeze(axes) => self.axes_op("Squeeze", &value, axes, &out, what),
                ShapeOp::Reshape(spec) => self.reshape(&value, spec, &out, what, false),
            }
            value = out;
            dims = next_dims;
        }
        (value, dims)
    }

    fn output_name(
        &mut self,
        last: Option<&str>,
        what: &str,
        elem: DataType,
        dims: &[Dim],
    ) -> String {
        match last {
            Some(name) => name.to_owned(),
            None => self.value(what, elem, dims),
        }
    }

    /// `Unsqueeze` / `Squeeze`, with axes as an input from opset 13 and as an attribute before.
    pub(crate) fn axes_op(&mut self, op: &str, input: &str, axes: &[usize], out: &str, what: &str) {
        let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let name = self.node_name(&format!("{op}_{what}"));
        let node = if self.opset >= 13 {
            let axes = self.constant(&format!("{what}_axes"), &axes);
            Node::new(op, &name, [input.to_owned(), axes], [out])
        } else {
            Node::new(op, &name, [input], [out]).with_attr("axes", AttrValue::Ints(axes))
        };
        self.nodes.push(node);
    }

    /// Whether [`Emitter::reshape_to_sizes`] can take a value of `dims` to the known `sizes`. A 0
    /// in `Reshape`'s shape copies the input dim at its position, so a zero-sized output dim
    /// needs a zero-sized input dim there, or `allowzero` (opset 14).
    pub(crate) fn can_reshape_to(&self, dims: &[Dim], sizes: &[i64]) -> bool {
        self.opset >= 14 || zeros_are_copies(dims, sizes)
    }

    /// `Reshape` of a value of `dims` to the known `sizes`, with `allowzero` where a 0 in `sizes`
    /// would otherwise copy a non-zero dim. Check [`Emitter::can_reshape_to`] first.
    pub(crate) fn reshape_to_sizes(
        &mut self,
        input: &str,
        dims: &[Dim],
        sizes: &[i64],
        out: &str,
        what: &str,
    ) {
        let allowzero = !zeros_are_copies(dims, sizes);
        self.reshape(input, sizes, out, what, allowzero);
    }

    /// `Reshape`, with the shape as an input from opset 5 and as an attribute before; `allowzero`
    /// (opset 14) makes a 0 in `shape` a zero-sized dim instead of a copy.
    pub(crate) fn reshape(
        &mut self,
        input: &str,
        shape: &[i64],
        out: &str,
        what: &str,
        allowzero: bool,
    ) {
        debug_assert!(!allowzero || self.opset >= 14, "allowzero needs opset 14");
        let name = self.node_name(&format!("Reshape_{what}"));
        let mut node = if self.opset >= 5 {
            let shape = self.constant(&format!("{what}_shape"), shape);
            Node::new("Reshape", &name, [input.to_owned(), shape], [out])
        } else {
            Node::new("Reshape", &name, [input], [out])
                .with_attr("shape", AttrValue::Ints(shape.to_vec()))
        };
        if allowzero {
            node = node.with_attr("allowzero", AttrValue::Int(1));
        }
        self.nodes.push(node);
    }
}

/// The dims after one shape operation; sizes that cannot be worked out become unknown.
pub(crate) fn apply_dims(op: &ShapeOp, dims: &[Dim]) -> Vec<Dim> {
    match op {
        ShapeOp::Unsqueeze(axes) => {
            let mut rest = dims.iter();
            (0..dims.len() + axes.len())
                .map(|j| {
                    if axes.contains(&j) {
                        Dim::Known(1)
                    } else {
                        rest.next().cloned().unwrap_or(Dim::Unknown)
                    }
                })
                .collect()
        }
        ShapeOp::Squeeze(axes) => dims
            .iter()
            .enumerate()
            .filter(|(j, _)| !axes.contains(j))
            .map(|(_, d)| d.clone())
            .collect(),
        ShapeOp::Reshape(spec) => {
            let total: Option<i64> = dims.iter().map(Dim::known).product();
            let mut out: Vec<Dim> = spec
                .iter()
                .enumerate()
                .map(|(j, &s)| match s {
                    0 => dims.get(j).cloned().unwrap_or(Dim::Unknown),
                    -1 => Dim::Unknown,
                    n => Dim::Known(n),
                })
                .collect();
            if let Some(hole) = spec.iter().position(|&s| s == -1) {
                let rest: Option<i64> = out
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != hole)
                    .map(|(_, d)| d.known())
                    .product();
                if let (Some(total), Some(rest)) = (total, rest) {
                    if rest > 0 {
                        out[hole] = Dim::Known(total / rest);
                    }
                }
            }
            out
        }
    }
}

/// Whether every 0 in the `Reshape` shape `sizes` stands where `dims` has a known 0, so copying
/// the input dim (what a 0 means without `allowzero`) gives the zero-sized dim wanted.
fn zeros_are_copies(dims: &[Dim], sizes: &[i64]) -> bool {
    sizes
        .iter()
        .enumerate()
        .all(|(j, &s)| s != 0 || dims.get(j).and_then(Dim::known) == Some(0))
}

/// All sizes, if every dim is known.
pub(crate) fn all_known(dims: &[Dim]) -> Option<Vec<i64>> {
    dims.iter().map(Dim::known).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_dims_follow_shape_ops() {
        let n = || Dim::Symbolic("N".into());
        let dims = vec![n(), Dim::Known(3)];
        assert_eq!(
            apply_dims(&ShapeOp::Unsqueeze(vec![0, 3]), &dims),
            vec![Dim::Known(1), n(), Dim::Known(3), Dim::Known(1)]
        );
        assert_eq!(apply_dims(&ShapeOp::Squeeze(vec![1]), &dims), vec![n()]);
        assert_eq!(
            apply_dims(
                &ShapeOp::Reshape(vec![0, -1]),
                &[n(), Dim::Known(2), Dim::Known(3)]
            ),
            vec![n(), Dim::Unknown]
        );
        assert_eq!(
            apply_dims(
                &ShapeOp::Reshape(vec![0, -1]),
                &[Dim::Known(4), Dim::Known(2), Dim::Known(3)]
            ),
            vec![Dim::Known(4), Dim::Known(6)]
        );
    }

    #[test]
    fn unread_nodes_are_pruned_with_their_producers() {
        let mut names = UniqueNames::default();
        let mut e = Emitter::new("n", &mut names, 13, Constants::Nodes);
        let unused = e.constant("unused", &[1]);
        let _dead = e.op(
            "Neg",
            &[&unused],
            vec![],
            "dead",
            DataType::Int64,
            &[Dim::Known(1)],
        );
        let kept = e.op("Neg", &["x"], vec![], "kept", DataType::Float, &[]);
        assert_eq!(e.prune(&[&kept]), 2);
        assert_eq!(e.nodes.len(), 1);
        assert_eq!(e.value_info.len(), 1);
        assert_eq!(e.value_info[0].name, kept);
    }

    #[test]
    fn a_result_is_renamed_or_forwarded() {
        let mut names = UniqueNames::default();
        let mut e = Emitter::new("n", &mut names, 13, Constants::Nodes);
        let v = e.op(
            "Neg",
            &["x"],
            vec![],
            "neg",
            DataType::Float,
            &[Dim::Known(2)],
        );
        e.rename_result(&v, "y");
        assert_eq!(e.nodes[0].outputs, ["y"]);
        assert!(e.value_info.is_empty());
        e.rename_result("x", "z");
        assert_eq!(e.nodes[1].op_type, "Identity");
        assert_eq!(
            (e.nodes[1].inputs.clone(), e.nodes[1].outputs.clone()),
            (vec!["x".to_string()], vec!["z".to_string()])
        );
    }
}
