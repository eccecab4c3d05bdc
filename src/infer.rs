//! Static type inference: the element type and (possibly symbolic) shape of every value of a graph
//! that can be known without running it.
//!
//! Types come from the graph's declarations (inputs, outputs, `value_info`, initializers), from the
//! enclosing scopes for subgraphs, and from the operators' shape functions node by node
//! ([`crate::ops`]). Declared and inferred types are merged, keeping whichever knows more. Nothing
//! is ever guessed: an unknown rank stays unknown, and the rewrite pass skips what it cannot prove.

use std::collections::HashMap;

use crate::ir::{opset_version, Dim, Graph, Node, OpsetImport, Shape, TensorType};

/// The known type of each value in scope.
#[derive(Clone, Debug, Default)]
pub struct TypeEnv {
    types: HashMap<String, TensorType>,
}

impl TypeEnv {
    /// The known type of `name`, if any.
    pub fn get(&self, name: &str) -> Option<&TensorType> {
        self.types.get(name)
    }

    /// The rank of `name`, if known.
    pub fn rank(&self, name: &str) -> Option<usize> {
        self.get(name).and_then(TensorType::rank)
    }

    /// The shape of `name`, if its rank is known.
    pub fn dims(&self, name: &str) -> Option<&[Dim]> {
        self.get(name)
            .and_then(|t| t.shape.as_ref())
            .map(|s| s.dims.as_slice())
    }

    /// Records what is known of `name`, merged with what was known before.
    pub fn insert(&mut self, name: &str, ty: TensorType) {
        if name.is_empty() {
            return;
        }
        let merged = match self.types.get(name) {
            Some(old) => merge(old, &ty),
            None => ty,
        };
        self.types.insert(name.to_owned(), merged);
    }

    /// Infers the types of a graph's values. `outer` holds the types visible from enclosing
    /// scopes; `imports` the opsets of the model or function the graph belongs to.
    pub fn infer(graph: &Graph, imports: &[OpsetImport], outer: &TypeEnv) -> TypeEnv {
        let mut env = outer.clone();
        for v in graph
            .inputs
            .iter()
            .chain(&graph.value_info)
            .chain(&graph.outputs)
        {
            if let Some(t) = v.tensor_type() {
                env.insert(&v.name, t.clone());
            }
        }
        for t in &graph.initializers {
            if let Some(name) = &t.name {
                env.insert(name, TensorType::new(t.elem, known_dims(&t.dims)));
            }
        }
        for (_, node) in graph.nodes() {
            let opset = opset_version(imports, &node.domain).unwrap_or(0);
            let inputs: Vec<Option<TensorType>> =
                node.inputs.iter().map(|i| env.get(i).cloned()).collect();
            for (name, ty) in node.outputs.iter().zip(infer_node(node, opset, &inputs)) {
                env.insert(name, ty);
            }
        }
        env
    }
}

/// Two dims that are provably the same size: equal known sizes or the same symbol.
///
/// # Example
/// ```
/// use multigather::infer::same_dim;
/// use multigather::ir::Dim;
/// assert!(same_dim(&Dim::Symbolic("n".into()), &Dim::Symbolic("n".into())));
/// assert!(!same_dim(&Dim::Unknown, &Dim::Unknown));
/// ```
pub fn same_dim(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => x == y,
        (Dim::Symbolic(x), Dim::Symbolic(y)) => x == y,
        _ => false,
    }
}

/// What is known of the bidirectional broadcast of two dims (`1` gives way to the other side).
pub fn broadcast_dim(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (a, b) if same_dim(a, b) => b.clone(),
        (Dim::Known(1), b) => b.clone(),
        (a, Dim::Known(1)) => a.clone(),
        (Dim::Known(n), _) | (_, Dim::Known(n)) => Dim::Known(*n),
        _ => Dim::Unknown,
    }
}

/// The output dims of `GatherMultiaxis` over possibly symbolic input and indices dims of equal
/// rank: the dims of `axes` come from the logical indices (the last indices dim divided by the
/// coordinate size `max(len(axes), 1)`), the others broadcast.
///
/// # Example
/// ```
/// use multigather::infer::gather_multiaxis_dims;
/// use multigather::ir::Dim;
/// let b = Dim::Symbolic("B".into());
/// let out = gather_multiaxis_dims(&[b.clone(), Dim::Known(5), Dim::Known(1)], &[Dim::Known(1), Dim::Known(1), Dim::Known(8)], &[1, 2]);
/// assert_eq!(out, vec![b, Dim::Known(1), Dim::Known(4)]);
/// ```
pub fn gather_multiaxis_dims(input: &[Dim], indices: &[Dim], axes: &[usize]) -> Vec<Dim> {
    let logical = logical_indices_dims(indices, axes.len());
    input
        .iter()
        .zip(&logical)
        .enumerate()
        .map(|(j, (x, l))| {
            if axes.contains(&j) {
                l.clone()
            } else {
                broadcast_dim(x, l)
            }
        })
        .collect()
}

/// The logical indices dims of `GatherMultiaxis` with `axis_count` axes: the last dim divided by
/// the coordinate size (unknown unless it is a known size).
pub fn logical_indices_dims(indices: &[Dim], axis_count: usize) -> Vec<Dim> {
    let c = axis_count.max(1) as i64;
    let mut logical = indices.to_vec();
    if let Some(last) = logical.last_mut() {
        *last = match &*last {
            Dim::Known(n) => Dim::Known(*n / c),
            d if c == 1 => d.clone(),
            _ => Dim::Unknown,
        };
    }
    logical
}

fn known_dims(dims: &[i64]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

/// Combines two descriptions of the same value, keeping the more precise part of each.
fn merge(a: &TensorType, b: &TensorType) -> TensorType {
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.rank() == y.rank() => Some(Shape::new(
            x.dims
                .iter()
                .zip(&y.dims)
                .map(|(p, q)| match (p, q) {
                    (Dim::Known(_), _) => p.clone(),
                    (_, Dim::Known(_)) => q.clone(),
                    (Dim::Symbolic(_), _) => p.clone(),
                    _ => q.clone(),
                })
                .collect(),
        )),
        (Some(x), _) => Some(x.clone()),
        (None, y) => y.clone(),
    };
    TensorType {
        elem: a.elem.or(b.elem),
        shape,
    }
}

/// The output types of one node from its input types; entries are unknown types where nothing
/// can be said.
fn infer_node(node: &Node, _opset: i64, inputs: &[Option<TensorType>]) -> Vec<TensorType> {
    let input = |i: usize| inputs.get(i).cloned().flatten();
    let same = || vec![input(0).unwrap_or_default()];
    match (node.domain.as_str(), node.op_type.as_str()) {
        ("", "Identity" | "Relu" | "Neg" | "Abs" | "Sigmoid" | "Tanh" | "Exp" | "Log" | "Sqrt") => {
            same()
        }
        ("", "Constant") => match node.attr_tensor("value") {
            Ok(Some(t)) => vec![TensorType::new(t.elem, known_dims(&t.dims))],
            _ => Vec::new(),
        },
        ("", "Shape") => {
            let rank = input(0).and_then(|t| t.rank());
            vec![TensorType {
                elem: Some(crate::DataType::Int64),
                shape: Some(Shape::new(vec![
                    rank.map_or(Dim::Unknown, |r| Dim::Known(r as i64))
                ])),
            }]
        }
        ("", "Cast") => {
            let elem = node
                .attr_int("to", 0)
                .ok()
                .and_then(|c| crate::DataType::from_onnx(c as i32));
            vec![TensorType {
                elem,
                shape: input(0).and_then(|t| t.shape),
            }]
        }
        ("", "Gather") => {
            let (Some(data), Some(idx)) = (input(0), input(1)) else {
                return Vec::new();
            };
            let (Some(d), Some(i)) = (&data.shape, &idx.shape) else {
                return vec![TensorType {
                    elem: data.elem,
                    shape: None,
                }];
            };
            let Ok(axis) = node.attr_int("axis", 0) else {
                return Vec::new();
            };
            let r = d.rank() as i64;
            let a = if axis < 0 { axis + r } else { axis };
            if !(0..r).contains(&a) {
                return Vec::new();
            }
            let a = a as usize;
            let dims = d.dims[..a]
                .iter()
                .chain(&i.dims)
                .chain(&d.dims[a + 1..])
                .cloned()
                .collect();
            vec![TensorType {
                elem: data.elem,
                shape: Some(Shape::new(dims)),
            }]
        }
        (crate::gather::DOMAIN, crate::gather::OP_TYPE) => {
            let (Some(data), Some(idx)) = (input(0), input(1)) else {
                return Vec::new();
            };
            let (Some(d), Some(i)) = (&data.shape, &idx.shape) else {
                return vec![TensorType {
                    elem: data.elem,
                    shape: None,
                }];
            };
            let rank = d.rank();
            let Ok(Some(axes)) = node.attr_ints("axes") else {
                return vec![TensorType {
                    elem: data.elem,
                    shape: None,
                }];
            };
            let spec = crate::gather::GatherSpec::from_attributes(axes, "error", rank);
            match spec {
                Ok(spec) if i.rank() == rank => {
                    let dims = gather_multiaxis_dims(&d.dims, &i.dims, &spec.axes);
                    vec![TensorType {
                        elem: data.elem,
                        shape: Some(Shape::new(dims)),
                    }]
                }
                _ => vec![TensorType {
                    elem: data.elem,
                    shape: None,
                }],
            }
        }
        ("", "GatherElements") => vec![TensorType {
            elem: input(0).and_then(|t| t.elem),
            shape: input(1).and_then(|t| t.shape),
        }],
        _ => Vec::new(),
    }
}
