//! Building the nodes that replace one node: fresh names derived from the replaced node's,
//! constants in the form the opset allows, opset-dependent `Unsqueeze` / `Squeeze` / `Reshape`
//! forms, and a `value_info` declaration for every new value, typed by the operator's own shape
//! function ([`crate::ops::infer_node`], the one static inference runs).
//!
//! Both node-replacing passes ([`super::GatherToMultiaxis`] and [`super::LowerMultiaxis`], and
//! through the latter [`super::DefineMultiaxisFunctions`]) build their replacements through an
//! [`Emitter`], so the naming, declaration and typing conventions are the same on the way in
//! and on the way out, and no pass computes a new value's dims itself.
//!
//! Design note: the shape functions work on symbolic dims (a `Transpose` or `Squeeze` of
//! `[N, 3]` keeps `N`; a `0` in a constant `Reshape` shape copies it), so what the passes knew
//! symbolically they still know. What no shape function can see is the value of a shape input
//! computed at run time (`Expand(x, Gather(Shape(y), ...))`, a `Reshape` to a shape built from
//! `Shape`, a `Slice` to ends built from `Shape`): there it gives the element type and rank and
//! leaves the dims unknown. The pass knows what that computed shape holds (the dims it read
//! with `Shape`), and says so with [`Emitter::op_knowing`]: those dims fill in only what the
//! function left unknown, never override what it gives.

use std::collections::HashMap;

use crate::gather::ShapeOp;
use crate::ir::{
    is_onnx_domain, stored_to_tensor, AttrValue, Dim, Node, StoredTensor, TensorType, Type,
    TypeKind, UniqueNames, ValueInfo,
};
use crate::ops;
use crate::tensor::Tensor;
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

impl Replacement {
    /// This replacement's nodes followed by `next`'s, with both declarations and initializers.
    pub(crate) fn then(mut self, next: Replacement) -> Replacement {
        self.nodes.extend(next.nodes);
        self.value_info.extend(next.value_info);
        self.initializers.extend(next.initializers);
        self
    }
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
    /// What is known of the values the nodes built here read and write.
    types: HashMap<String, TensorType>,
    /// The values of the constants built here, for the shape functions that read them.
    values: HashMap<String, Tensor>,
    /// Another default-domain opset the nodes must also be valid at: the model's, for a
    /// function body importing another one (onnxruntime checks the nodes of an inlined
    /// function against the model's opset, whatever the function imports).
    pub also_at: Option<i64>,
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
            types: HashMap::new(),
            values: HashMap::new(),
            also_at: None,
        }
    }

    /// Makes the type of `name`, a value from outside this replacement, known to the shape
    /// functions of the nodes that read it.
    pub(crate) fn know(&mut self, name: &str, elem: DataType, dims: &[Dim]) {
        self.types
            .entry(name.to_owned())
            .or_insert_with(|| TensorType::new(elem, dims.to_vec()));
    }

    /// What is known of `name`: its type as the shape function of the node that built it gave
    /// it, or as [`Emitter::know`] made it known.
    pub(crate) fn type_of(&self, name: &str) -> Option<&TensorType> {
        self.types.get(name)
    }

    /// The output types of `node` by its operator's shape function, from what is known of its
    /// inputs and the values of the constants among them.
    fn infer(&self, node: &Node) -> Vec<TensorType> {
        let opset = if is_onnx_domain(&node.domain) {
            self.opset
        } else {
            crate::gather::SINCE_VERSION
        };
        let inputs: Vec<Option<TensorType>> = node
            .inputs
            .iter()
            .map(|i| self.types.get(i).cloned())
            .collect();
        let values: Vec<Option<&Tensor>> = node.inputs.iter().map(|i| self.values.get(i)).collect();
        ops::infer_node(node, opset, &inputs, &values)
    }

    /// Adds `node`, typing its outputs by its operator's shape function; an output declared by
    /// [`Emitter::fresh`] gets its declaration's type here.
    pub(crate) fn push(&mut self, node: Node) {
        self.push_knowing(node, None);
    }

    /// [`Emitter::push`] for a node whose shape input is computed at run time (`Expand`,
    /// `Reshape` to a shape built from `Shape`): the shape function sees no constant there and
    /// leaves those dims unknown, so `known`, what the pass knows the computed shape holds
    /// (possibly symbolic dims), fills in the dims it left unknown, and only those.
    pub(crate) fn push_knowing(&mut self, node: Node, known: Option<&[Dim]>) {
        let mut types = self.infer(&node);
        if let (Some(dims), Some(first)) = (known, types.first_mut()) {
            fill_dims(first, dims);
        }
        for (out, ty) in node.outputs.iter().zip(types) {
            if let Some(v) = self.value_info.iter_mut().rev().find(|v| v.name == *out) {
                v.ty = Some(Type::from(TypeKind::Tensor(ty.clone())));
            }
            self.types.insert(out.clone(), ty);
        }
        self.nodes.push(node);
    }

    /// What was built. A declaration that no shape function typed is dropped rather than kept
    /// without a type, which the ONNX checker refuses in a main graph.
    pub(crate) fn finish(mut self) -> Replacement {
        self.value_info.retain(|v| v.ty.is_some());
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

    /// A fresh value, declared here and typed by the node that will produce it
    /// ([`Emitter::push`]).
    pub(crate) fn fresh(&mut self, what: &str) -> String {
        let name = self.names.fresh(&format!("{}_{what}", self.base));
        self.value_info.push(ValueInfo {
            name: name.clone(),
            ty: None,
            doc_string: None,
            metadata_props: Vec::new(),
        });
        name
    }

    /// A 1-D int64 constant: a `Constant` node, or an initializer in old opsets.
    pub(crate) fn constant(&mut self, what: &str, values: &[i64]) -> String {
        let tensor = StoredTensor::from_i64s(None, &[values.len() as i64], values);
        self.constant_tensor(what, tensor)
    }

    /// Any constant tensor: a `Constant` node, an initializer, or a cast `Constant` of doubles
    /// (see [`Constants`]).
    pub(crate) fn constant_tensor(&mut self, what: &str, tensor: StoredTensor) -> String {
        let dims: Vec<Dim> = tensor.dims.iter().map(|&d| Dim::Known(d)).collect();
        let value = stored_to_tensor(&tensor).ok();
        let name = self.constant_in_form(what, tensor, &dims);
        if let Some(value) = value {
            self.values.insert(name.clone(), value);
        }
        name
    }

    fn constant_in_form(&mut self, what: &str, mut tensor: StoredTensor, dims: &[Dim]) -> String {
        match self.constants {
            Constants::Initializers => {
                let name = self.names.fresh(&format!("{}_{what}", self.base));
                tensor.name = Some(name.clone());
                self.types
                    .insert(name.clone(), TensorType::new(tensor.elem, dims.to_vec()));
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
                    let double = self.constant_node(&format!("{what}_double"), t);
                    let to = if self.opset >= 6 {
                        AttrValue::Int(elem.onnx() as i64)
                    } else {
                        AttrValue::String(elem.name().to_uppercase().into_bytes())
                    };
                    return self.op("Cast", &[&double], vec![("to", to)], what);
                }
            }
            _ => {}
        }
        self.constant_node(what, tensor)
    }

    fn constant_node(&mut self, what: &str, tensor: StoredTensor) -> String {
        let name = self.fresh(what);
        let node_name = self.node_name(what);
        self.push(
            Node::new("Constant", &node_name, Vec::<String>::new(), [name.clone()])
                .with_attr("value", AttrValue::Tensor(Box::new(tensor))),
        );
        name
    }

    /// One node `op(inputs) <attrs>` with one new output value named after `what`, typed by the
    /// operator's shape function; returns the output's name.
    pub(crate) fn op(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: Vec<(&str, AttrValue)>,
        what: &str,
    ) -> String {
        self.op_knowing(op, inputs, attrs, what, None)
    }

    /// [`Emitter::op`] for a node whose shape input is computed at run time; see
    /// [`Emitter::push_knowing`].
    pub(crate) fn op_knowing(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: Vec<(&str, AttrValue)>,
        what: &str,
        known: Option<&[Dim]>,
    ) -> String {
        let out = self.fresh(what);
        let name = self.node_name(&format!("{op}_{what}"));
        let mut node = Node::new(op, &name, inputs.iter().copied(), [out.clone()]);
        for (attr, value) in attrs {
            node = node.with_attr(attr, value);
        }
        self.push_knowing(node, known);
        out
    }

    /// The dims of `name` as far as they are known: its shape, or none for an unknown rank.
    pub(crate) fn dims_of(&self, name: &str) -> Vec<Dim> {
        self.types
            .get(name)
            .and_then(|t| t.shape.as_ref())
            .map(|s| s.dims.clone())
            .unwrap_or_default()
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
        what: &str,
        last: Option<&str>,
    ) -> String {
        if ops.is_empty() {
            return value;
        }
        let elem = self.type_of(&value).and_then(|t| t.elem);
        let dims = self.dims_of(&value);
        let final_dims = self.dims_after(ops, &value);
        // One `Reshape` to a constant shape, unless the constant would have to be cast (old
        // opsets without initializers) where `Unsqueeze` / `Squeeze` with attributes need none.
        let cheap_constant = self.constants != Constants::CastDoubles
            || ops.iter().any(|op| matches!(op, ShapeOp::Reshape(_)));
        if let (Some(_), Some(sizes), true, Some(elem)) = (
            all_known(&dims),
            final_dims.as_deref().and_then(all_known),
            cheap_constant,
            elem,
        ) {
            if self.can_reshape_to(&dims, &sizes) && reshape_takes(self.opset, elem) {
                let out = self.output_name(last, what);
                self.reshape_to_sizes(&value, &dims, &sizes, &out, what);
                return out;
            }
        }
        for (n, op) in ops.iter().enumerate() {
            let out = if n + 1 == ops.len() {
                self.output_name(last, what)
            } else {
                self.fresh(what)
            };
            match op {
                ShapeOp::Unsqueeze(axes) => self.axes_op("Unsqueeze", &value, axes, &out, what),
                ShapeOp::Squeeze(axes) => self.axes_op("Squeeze", &value, axes, &out, what),
                ShapeOp::Reshape(spec) => self.reshape(&value, spec, &out, what, false),
            }
            value = out;
        }
        value
    }

    /// The dims of `value` after `ops`, by the shape functions of `Unsqueeze`, `Squeeze` and
    /// `Reshape` at this opset, without adding anything; `None` where the rank is unknown.
    pub(crate) fn dims_after(&self, ops: &[ShapeOp], value: &str) -> Option<Vec<Dim>> {
        let mut ty = self.type_of(value)?.clone();
        for op in ops {
            let (op_type, attr, values) = match op {
                ShapeOp::Unsqueeze(axes) => ("Unsqueeze", "axes", indices(axes)),
                ShapeOp::Squeeze(axes) => ("Squeeze", "axes", indices(axes)),
                ShapeOp::Reshape(spec) => ("Reshape", "shape", spec.clone()),
            };
            let as_input = if op_type == "Reshape" {
                self.opset >= 5
            } else {
                self.opset >= 13
            };
            let mut node = Node::new(op_type, "", ["x"], ["y"]);
            let constant = if as_input {
                node.inputs.push(attr.to_owned());
                Some(Tensor::from_vec(DataType::Int64, &[values.len()], values).ok()?)
            } else {
                node = node.with_attr(attr, AttrValue::Ints(values));
                None
            };
            let inputs = [
                Some(ty),
                constant.as_ref().map(|c| {
                    TensorType::new(DataType::Int64, vec![Dim::Known(c.shape()[0] as i64)])
                }),
            ];
            ty = ops::infer_node(&node, self.opset, &inputs, &[None, constant.as_ref()])
                .into_iter()
                .next()?;
        }
        ty.shape.map(|s| s.dims)
    }

    fn output_name(&mut self, last: Option<&str>, what: &str) -> String {
        match last {
            Some(name) => name.to_owned(),
            None => self.fresh(what),
        }
    }

    /// `Unsqueeze` / `Squeeze`, with axes as an input from opset 13 and as an attribute before.
    /// Where the nodes must also be valid at an opset on the other side of 13 (`also_at`),
    /// which neither form is, a squeeze is a `Gather` of index 0 per axis and an unsqueeze an
    /// `Expand` adding leading 1s, then a `Transpose` putting them in place (both the same at
    /// every opset from 8; the unsqueeze needs the input's rank).
    pub(crate) fn axes_op(&mut self, op: &str, input: &str, axes: &[usize], out: &str, what: &str) {
        let portable = self
            .also_at
            .is_some_and(|other| (other >= 13) != (self.opset >= 13) && self.opset.min(other) >= 8);
        if portable && self.axes_op_portable(op, input, axes, out, what) {
            return;
        }
        let axes = indices(axes);
        let name = self.node_name(&format!("{op}_{what}"));
        let node = if self.opset >= 13 {
            let axes = self.constant(&format!("{what}_axes"), &axes);
            Node::new(op, &name, [input.to_owned(), axes], [out])
        } else {
            Node::new(op, &name, [input], [out]).with_attr("axes", AttrValue::Ints(axes))
        };
        self.push(node);
    }

    /// The portable forms of [`Emitter::axes_op`]; false (nothing added) for an unsqueeze of a
    /// value of unknown rank.
    fn axes_op_portable(
        &mut self,
        op: &str,
        input: &str,
        axes: &[usize],
        out: &str,
        what: &str,
    ) -> bool {
        let mut axes = axes.to_vec();
        axes.sort_unstable();
        if op == "Squeeze" {
            let zero = StoredTensor::from_i64s(None, &[], &[0]);
            let zero = self.constant_tensor(&format!("{what}_first"), zero);
            let mut value = input.to_owned();
            for (n, &axis) in axes.iter().rev().enumerate() {
                let next = if n + 1 == axes.len() {
                    out.to_owned()
                } else {
                    self.fresh(what)
                };
                let name = self.node_name(&format!("Squeeze_{what}"));
                let node = Node::new("Gather", &name, [value.as_str(), &zero], [next.as_str()])
                    .with_attr("axis", AttrValue::Int(axis as i64));
                self.push(node);
                value = next;
            }
            return true;
        }
        let Some(rank) = self.type_of(input).and_then(|t| t.rank()) else {
            return false;
        };
        let (k, total) = (axes.len(), rank + axes.len());
        let ones = self.constant(&format!("{what}_ones"), &vec![1; total]);
        let leading = axes.iter().copied().eq(0..k);
        let expanded = if leading {
            out.to_owned()
        } else {
            self.fresh(what)
        };
        let name = self.node_name(&format!("Unsqueeze_{what}"));
        self.push(Node::new(
            "Expand",
            &name,
            [input, ones.as_str()],
            [expanded.as_str()],
        ));
        if !leading {
            // Output axis `axes[j]` takes the j-th leading 1; the others take the input's dims
            // in order.
            let (mut next_one, mut next_dim) = (0, k);
            let perm: Vec<i64> = (0..total)
                .map(|a| {
                    let from = if axes.contains(&a) {
                        next_one += 1;
                        next_one - 1
                    } else {
                        next_dim += 1;
                        next_dim - 1
                    };
                    from as i64
                })
                .collect();
            let name = self.node_name(&format!("Unsqueeze_{what}"));
            self.push(
                Node::new("Transpose", &name, [expanded.as_str()], [out])
                    .with_attr("perm", AttrValue::Ints(perm)),
            );
        }
        true
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
        self.push(node);
    }
}

/// Axes or positions as the int64 values of an attribute or a constant.
fn indices(axes: &[usize]) -> Vec<i64> {
    axes.iter().map(|&a| a as i64).collect()
}

/// Fills the dims of `ty` its shape function left unknown with those the pass knows (`dims`),
/// or gives it `dims` when its rank is unknown.
fn fill_dims(ty: &mut TensorType, dims: &[Dim]) {
    match &mut ty.shape {
        Some(shape) if shape.rank() == dims.len() => {
            for (d, k) in shape.dims.iter_mut().zip(dims) {
                if *d == Dim::Unknown {
                    *d = k.clone();
                }
            }
        }
        Some(_) => {}
        None => ty.shape = Some(crate::ir::Shape::new(dims.to_vec())),
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
        let mut names = UniqueNames::default();
        let mut e = Emitter::new("n", &mut names, 13, Constants::Nodes);
        e.know("x", DataType::Float, &[n(), Dim::Known(3)]);
        e.know("w", DataType::Float, &[n(), Dim::Known(1)]);
        e.know("y", DataType::Float, &[n(), Dim::Known(2), Dim::Known(3)]);
        e.know(
            "z",
            DataType::Float,
            &[Dim::Known(4), Dim::Known(2), Dim::Known(3)],
        );
        let after = |e: &Emitter, op: ShapeOp, x: &str| e.dims_after(&[op], x);
        assert_eq!(
            after(&e, ShapeOp::Unsqueeze(vec![0, 3]), "x"),
            Some(vec![Dim::Known(1), n(), Dim::Known(3), Dim::Known(1)])
        );
        assert_eq!(after(&e, ShapeOp::Squeeze(vec![1]), "w"), Some(vec![n()]));
        // `Reshape`'s shape function divides out the copied dim: [N, 2, 3] -> [N, 6].
        assert_eq!(
            after(&e, ShapeOp::Reshape(vec![0, -1]), "y"),
            Some(vec![n(), Dim::Known(6)])
        );
        assert_eq!(
            after(&e, ShapeOp::Reshape(vec![0, -1]), "z"),
            Some(vec![Dim::Known(4), Dim::Known(6)])
        );
        assert_eq!(after(&e, ShapeOp::Squeeze(vec![0]), "unknown"), None);
    }

    #[test]
    fn values_no_shape_function_types_are_not_declared() {
        let mut names = UniqueNames::default();
        let mut e = Emitter::new("n", &mut names, 13, Constants::Nodes);
        e.know("x", DataType::Float, &[Dim::Known(3)]);
        let typed = e.op("Relu", &["x"], vec![], "r");
        let untyped = e.op("NoSuchOperator", &[&typed], vec![], "u");
        let built = e.finish();
        let declared: Vec<&str> = built.value_info.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(declared, [typed.as_str()]);
        assert_eq!(built.nodes.len(), 2);
        assert_eq!(built.nodes[1].outputs, [untyped]);
    }

    #[test]
    fn outputs_are_typed_by_the_shape_function() {
        let mut names = UniqueNames::default();
        let mut e = Emitter::new("n", &mut names, 13, Constants::Nodes);
        e.know(
            "x",
            DataType::Float,
            &[Dim::Symbolic("N".into()), Dim::Known(3)],
        );
        let perm = AttrValue::Ints(vec![1, 0]);
        let t = e.op("Transpose", &["x"], vec![("perm", perm)], "t");
        let s = e.op("Shape", &[&t], vec![], "s");
        let expanded = e.op_knowing(
            "Expand",
            &[&t, &s],
            vec![],
            "e",
            Some(&[Dim::Known(3), Dim::Symbolic("N".into())]),
        );
        let declared = |e: &Emitter, name: &str| {
            e.value_info
                .iter()
                .find(|v| v.name == name)
                .and_then(ValueInfo::tensor_type)
                .cloned()
        };
        let n = Dim::Symbolic("N".into());
        assert_eq!(
            declared(&e, &t),
            Some(TensorType::new(DataType::Float, vec![Dim::Known(3), n]))
        );
        assert_eq!(
            declared(&e, &s),
            Some(TensorType::new(DataType::Int64, vec![Dim::Known(2)]))
        );
        // The shape function cannot read `Shape(t)`; the pass fills in the dims it knows.
        assert_eq!(
            declared(&e, &expanded),
            Some(TensorType::new(
                DataType::Float,
                vec![Dim::Known(3), Dim::Symbolic("N".into())]
            ))
        );
    }

    #[test]
    fn unread_nodes_are_pruned_with_their_producers() {
        let mut names = UniqueNames::default();
        let mut e = Emitter::new("n", &mut names, 13, Constants::Nodes);
        let unused = e.constant("unused", &[1]);
        let _dead = e.op("Neg", &[&unused], vec![], "dead");
        let kept = e.op("Neg", &["x"], vec![], "kept");
        assert_eq!(e.prune(&[&kept]), 2);
        assert_eq!(e.nodes.len(), 1);
        assert_eq!(e.value_info.len(), 1);
        assert_eq!(e.value_info[0].name, kept);
    }

    #[test]
    fn a_result_is_renamed_or_forwarded() {
        let mut names = UniqueNames::default();
        let mut e = Emitter::new("n", &mut names, 13, Constants::Nodes);
        let v = e.op("Neg", &["x"], vec![], "neg");
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
