//! Static type inference: the element type and (possibly symbolic) shape of every value of a graph
//! that can be known without running it.
//!
//! Types come from the graph's declarations (inputs, outputs, `value_info`, initializers), from the
//! enclosing scopes for subgraphs, and from the operators' shape functions node by node
//! ([`crate::ops`]). Declared and inferred types are merged, keeping whichever knows more. Nothing
//! is ever guessed: an unknown rank stays unknown, and the rewrite pass skips what it cannot prove.

use std::collections::HashMap;

use crate::interp::stored_to_tensor;
use crate::ir::{opset_version, Dim, Graph, Node, OpsetImport, Shape, StoredTensor, TensorType};
use crate::ops;
use crate::tensor::Tensor;

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
        let mut constants = Constants::default();
        for t in &graph.initializers {
            constants.add_initializer(t);
        }
        for (_, node) in graph.nodes() {
            let opset = opset_version(imports, &node.domain).unwrap_or(0);
            let inputs: Vec<Option<TensorType>> =
                node.inputs.iter().map(|i| env.get(i).cloned()).collect();
            let values: Vec<Option<&Tensor>> =
                node.inputs.iter().map(|i| constants.get(i)).collect();
            let folded = constants.fold(node, opset, &values);
            for (name, ty) in node
                .outputs
                .iter()
                .zip(ops::infer_node(node, opset, &inputs, &values))
            {
                env.insert(name, ty);
            }
            if let Some(outputs) = folded {
                for (name, t) in node.outputs.iter().zip(outputs) {
                    let dims = t.shape().iter().map(|&d| Dim::Known(d as i64)).collect();
                    env.insert(name, TensorType::new(t.dtype(), dims));
                    constants.values.insert(name.clone(), t);
                }
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

/// Values known before running: small initializers, and the outputs of nodes whose inputs are
/// all known, computed with the operators' kernels (constant folding). Shape arithmetic such as
/// `Constant -> Concat -> Reshape` then gives the rewrite pass exact ranks and dims.
#[derive(Default)]
struct Constants {
    values: HashMap<String, Tensor>,
}

impl Constants {
    /// Values larger than this many elements are not kept: shapes and axes are small, weights
    /// are not needed.
    const MAX_ELEMENTS: usize = 4096;

    fn get(&self, name: &str) -> Option<&Tensor> {
        self.values.get(name)
    }

    fn add_initializer(&mut self, t: &StoredTensor) {
        let (Some(name), Ok(count)) = (&t.name, t.element_count()) else {
            return;
        };
        if count <= Self::MAX_ELEMENTS {
            if let Ok(value) = stored_to_tensor(t) {
                self.values.insert(name.clone(), value);
            }
        }
    }

    /// The outputs of `node` when every input it names is known, it has no subgraph, and the
    /// outputs are small; `None` otherwise (including when the kernel fails: folding is an
    /// optimisation of what is known, never a source of errors).
    fn fold(&self, node: &Node, opset: i64, values: &[Option<&Tensor>]) -> Option<Vec<Tensor>> {
        let all_known = node
            .inputs
            .iter()
            .zip(values)
            .all(|(name, v)| name.is_empty() || v.is_some());
        if !all_known || node.subgraphs().next().is_some() || node.domain == crate::gather::DOMAIN {
            return None;
        }
        // Only what is known to be small is computed: a dead `ConstantOfShape([6e9])` beside the
        // graph costs a shape function, not six gigabytes.
        let def = ops::registry().lookup(&node.domain, &node.op_type, opset)?;
        let bytes = ops::planned_output_bytes(def, node, opset, values)?;
        if bytes > Self::MAX_ELEMENTS * 16 {
            return None;
        }
        let outputs = ops::eval_node(node, opset, values).ok()?;
        outputs
            .iter()
            .all(|t| t.len() <= Self::MAX_ELEMENTS)
            .then_some(outputs)
    }
}
