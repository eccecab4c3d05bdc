//! The `Val` builder: the shape operations around a pattern (`Shape`, `Cast`, `Squeeze`,
//! `Unsqueeze`, `Reshape`, `Transpose`, `Expand`), each typed as it is emitted, reusing a
//! `Shape` already taken and undoing a reshape where the value before it has the shape wanted.

use bytes::Bytes;

use super::{Lowerer, Tag, Val};
use crate::gather::ShapeOp;
use crate::ir::{
    broadcast_dim, is_onnx_domain, same_dim, AttrValue, Dim, Node, Payload, StoredTensor,
};
use crate::pass::emit::{all_known, reshape_takes, Constants};
use crate::DataType;

impl Lowerer<'_, '_> {
    /// The tuples unfolded from the last dimension: `[..., n*k] -> [..., n, k]`.
    pub(super) fn split(&mut self, t: &Val, k: usize) -> Val {
        let mut dims = self.logical.to_vec();
        dims.push(Dim::Known(k as i64));
        let rank = t.dims.len();
        if k == 1 {
            return self.unsqueeze(t, &[rank], "tuples");
        }
        let out = self.e.fresh("tuples");
        let known = |d: &Dim| d.known();
        let mut input = t.name.clone();
        let shape = match (
            dims.iter().map(known).collect::<Option<Vec<i64>>>(),
            t.dims[rank - 1].known(),
        ) {
            (Some(sizes), _) => {
                // A reshape of a reshape reads the first one's input.
                if let Some(y) = self.reshape_source(t) {
                    self.e.know(&y.name, y.elem, &y.dims);
                    input = y.name;
                }
                self.e.constant("tuples_shape", &sizes)
            }
            (None, Some(last)) => {
                // `0` copies a dimension; the last two are known.
                let mut spec = vec![0; rank - 1];
                spec.extend([last / k as i64, k as i64]);
                self.e.constant("tuples_shape", &spec)
            }
            (None, None) => {
                // Shape(t) / [1, .., 1, k] ++ [k]: exact even when a dimension is 0, where a
                // `-1` could not be inferred.
                let shape = self.shape_of(t);
                let mut divisor = vec![1; rank];
                divisor[rank - 1] = k as i64;
                let divisor = self.e.constant("tuple_divisor", &divisor);
                let outer = self
                    .e
                    .op("Div", &[&shape, &divisor], vec![], "tuple_counts");
                let coord = self.e.constant("coordinate_size", &[k as i64]);
                self.e.op(
                    "Concat",
                    &[&outer, &coord],
                    vec![("axis", AttrValue::Int(0))],
                    "tuples_shape",
                )
            }
        };
        // A shape computed at run time: the logical indices' dims (`GatherMultiaxis`'s own rule)
        // and the coordinates.
        let name = self.e.node_name("Reshape_tuples");
        self.e.push_knowing(
            Node::new("Reshape", &name, [input.clone(), shape], [out.clone()]),
            Some(&dims),
        );
        let source = if input == t.name {
            t.clone()
        } else {
            self.reshape_source(t).unwrap_or_else(|| t.clone())
        };
        self.reshapes.insert(out.clone(), source);
        self.typed(out, DataType::Int64)
    }

    /// `Expand(v, s)` with `s[j]` = dim `pick[j]` of `source` (1 for `None`), broadcasting
    /// `v` over those dims.
    pub(super) fn expand(
        &mut self,
        v: &Val,
        source: &Val,
        pick: &[Option<usize>],
        what: &str,
    ) -> Val {
        let shape = self.dims_vector(source, pick, &format!("{what}_expand_shape"));
        // What the shape computed at run time holds, broadcast as `Expand` does.
        let dims: Vec<Dim> = v
            .dims
            .iter()
            .zip(pick)
            .map(|(d, p)| match p {
                Some(j) => broadcast_dim(d, &source.dims[*j]),
                None => d.clone(),
            })
            .collect();
        let name = self.e.op_knowing(
            "Expand",
            &[&v.name, &shape],
            vec![],
            &format!("{what}_expanded"),
            Some(&dims),
        );
        self.typed(name, v.elem)
    }

    /// An int64 vector whose entry `j` is dim `pick[j]` of `source`, or 1 for `None`: a
    /// constant when those sizes are known, else gathered from `Shape(source)`.
    pub(super) fn dims_vector(
        &mut self,
        source: &Val,
        pick: &[Option<usize>],
        what: &str,
    ) -> String {
        let known: Option<Vec<i64>> = pick
            .iter()
            .map(|p| match p {
                None => Some(1),
                Some(d) => source.dims[*d].known(),
            })
            .collect();
        if let Some(values) = known {
            return self.e.constant(what, &values);
        }
        let rank = source.dims.len();
        let mut shape = self.shape_of(source);
        if pick.contains(&None) {
            let one = self.one();
            shape = self.e.op(
                "Concat",
                &[&shape, &one],
                vec![("axis", AttrValue::Int(0))],
                &format!("{what}_source"),
            );
        }
        let positions: Vec<i64> = pick.iter().map(|p| p.unwrap_or(rank) as i64).collect();
        let positions = self.e.constant(&format!("{what}_positions"), &positions);
        self.e.op(
            "Gather",
            &[&shape, &positions],
            vec![("axis", AttrValue::Int(0))],
            what,
        )
    }

    /// The constant `[1]`, emitted once.
    pub(super) fn one(&mut self) -> String {
        if let Some(one) = &self.one {
            return one.clone();
        }
        let one = self.e.constant("one", &[1]);
        self.one = Some(one.clone());
        one
    }

    /// `Shape(v)`, emitted once per value.
    pub(super) fn shape_of(&mut self, v: &Val) -> String {
        if let Some(s) = self.shapes.get(&v.name) {
            return s.clone();
        }
        let s = self.e.op("Shape", &[&v.name], vec![], "shape");
        self.shapes.insert(v.name.clone(), s.clone());
        s
    }

    /// `Cast(v, int64)` unless it is int64 already.
    pub(super) fn cast_to_i64(&mut self, v: &Val) -> Val {
        if v.elem == DataType::Int64 {
            return v.clone();
        }
        let to = AttrValue::Int(DataType::Int64.onnx() as i64);
        let name = self
            .e
            .op("Cast", &[&v.name], vec![("to", to)], "indices_int64");
        self.typed(name, DataType::Int64)
    }

    /// `Squeeze(v, axes)` (nothing for no axes). When `v` comes from a reshape of a value that
    /// already has the squeezed shape, that value is used instead.
    pub(super) fn squeeze(&mut self, v: &Val, axes: &[usize], what: &str) -> Val {
        if axes.is_empty() {
            return v.clone();
        }
        self.reshaped(v, "Squeeze", axes, what)
    }

    /// `Unsqueeze(v, axes)`, reusing a value of that shape like [`Lowerer::squeeze`].
    pub(super) fn unsqueeze(&mut self, v: &Val, axes: &[usize], what: &str) -> Val {
        self.reshaped(v, "Unsqueeze", axes, what)
    }

    /// `op(v, axes)` giving `dims`, where `op` only reshapes. When `v` is itself a reshape of
    /// some `y` in the graph, `y` is used: as it is if it has `dims` already
    /// (`Squeeze(Unsqueeze(y)) = y`), else reshaped to `dims` when they are known
    /// (`Squeeze(Reshape(y)) = Reshape(y)`).
    pub(super) fn reshaped(&mut self, v: &Val, op: &str, axes: &[usize], what: &str) -> Val {
        let shape_op = if op == "Squeeze" {
            ShapeOp::Squeeze(axes.to_vec())
        } else {
            ShapeOp::Unsqueeze(axes.to_vec())
        };
        self.e.know(&v.name, v.elem, &v.dims);
        let dims = self.e.dims_after(&[shape_op], &v.name).unwrap_or_default();
        let source = self.reshape_source(v);
        if let Some(y) = &source {
            self.e.know(&y.name, y.elem, &y.dims);
            if y.dims.len() == dims.len() && y.dims.iter().zip(&dims).all(|(a, b)| same_dim(a, b)) {
                return y.clone();
            }
        }
        let out = self.e.fresh(what);
        // A constant shape needs somewhere to live (not an old-opset function body).
        // A constant shape is cheap unless it must be cast (old opsets without initializers),
        // and `Reshape` takes only floats before opset 5.
        let can_reshape = reshape_takes(self.e.opset, v.elem)
            && (self.e.constants != Constants::CastDoubles || self.e.opset < 5);
        let read = match (source.filter(|_| can_reshape), all_known(&dims)) {
            (Some(y), Some(sizes)) if self.e.can_reshape_to(&y.dims, &sizes) => {
                self.e
                    .reshape_to_sizes(&y.name, &y.dims, &sizes, &out, what);
                y
            }
            _ => {
                self.e.axes_op(op, &v.name, axes, &out, what);
                v.clone()
            }
        };
        self.reshapes.insert(out.clone(), read);
        self.typed(out, v.elem)
    }

    /// What `v` reshapes, if it was built here by a reshape, or if the graph node producing it
    /// only reshapes (so `v` holds the input's elements in the same order) and the input's dims
    /// are known.
    pub(super) fn reshape_source(&self, v: &Val) -> Option<Val> {
        if let Some(source) = self.reshapes.get(&v.name) {
            return Some(source.clone());
        }
        let node = self.graph.node(self.graph.producer(&v.name)?);
        let reshapes = is_onnx_domain(&node.domain)
            && matches!(
                node.op_type.as_str(),
                "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" | "Identity"
            );
        let source = node.inputs.first().filter(|_| reshapes)?;
        let dims = self.env.dims(source)?;
        Some(Val {
            name: source.clone(),
            elem: v.elem,
            dims: dims.to_vec(),
        })
    }

    /// `Transpose(v, perm)` (nothing for the identity).
    pub(super) fn transpose(&mut self, v: Val, perm: &[usize], what: &str) -> Val {
        if perm.iter().enumerate().all(|(j, &p)| j == p) {
            return v;
        }
        let perm_attr = AttrValue::Ints(perm.iter().map(|&p| p as i64).collect());
        let name = self.e.op(
            "Transpose",
            &[&v.name],
            vec![("perm", perm_attr)],
            &format!("{what}_transposed"),
        );
        self.typed(name, v.elem)
    }

    /// A gather result whose dimensions stand for `tags`, transposed to the output's order.
    pub(super) fn in_output_order(&mut self, v: Val, tags: &[Tag]) -> Val {
        let perm: Vec<usize> = (0..self.rank())
            .map(|d| {
                tags.iter()
                    .position(|t| *t == Tag::Dim(d))
                    .unwrap_or_default()
            })
            .collect();
        self.transpose(v, &perm, "output")
    }

    /// The value `name` built here, with its type as its operator's shape function gave it
    /// (`elem` where the function leaves the element type unknown).
    pub(super) fn typed(&self, name: String, elem: DataType) -> Val {
        let ty = self.e.type_of(&name);
        let elem = ty.and_then(|t| t.elem).unwrap_or(elem);
        let dims = self.e.dims_of(&name);
        Val { name, elem, dims }
    }
}

/// A scalar zero of `elem`: all bits clear, or the empty string.
pub(super) fn zero_scalar(elem: DataType) -> StoredTensor {
    if elem == DataType::String {
        let mut t = StoredTensor::raw(None, elem, &[], Bytes::new());
        t.payload = Payload::String(vec![Vec::new()]);
        return t;
    }
    let bytes = vec![0u8; elem.byte_size().unwrap_or(1)];
    StoredTensor::raw(None, elem, &[], Bytes::from(bytes))
}
