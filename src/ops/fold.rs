//! Constant folding, the one folder of the crate: static inference (`crate::infer`) folds small
//! constants so shape arithmetic gives exact types, and the interpreter's planning
//! (`crate::interp`) folds the steps whose inputs are all constants so they cost nothing per run.
//! Both ask [`Folder::fold`]; they differ only in how large a folded value may be
//! ([`Folder::INFERENCE`] per value; for planning, what is left of the session's folding budget),
//! never in how a size is counted or in which operators are folded.
//!
//! The size rule: a fold is kept when its outputs together take at most the folder's bytes
//! (strings count their handles, as [`super::planned_output_bytes`] counts them). The operator's
//! shape function tells the size before the kernel runs, so a dead `ConstantOfShape([6e9])`
//! costs a shape function, not six gigabytes; where it cannot tell, the kernel runs (its
//! allocations checked by the memory budget) and outputs over the limit are dropped.
//!
//! Never folded ([`foldable`]): nodes with a subgraph, operators whose outputs are not a
//! function of their inputs and attributes ([`super::is_random`]), and `GatherMultiaxis`, the
//! operator under proof: static inference types it by its shape function only, never by running
//! the kernel a rewrite is verified with.
//!
//! Folding is an optimisation of what is known, never a source of errors: a kernel that fails
//! leaves its node unfolded, to report the error when the graph runs.

use crate::ir::{is_onnx_domain, Node, StoredTensor};
use crate::tensor::Tensor;
use crate::DataType;

use super::{planned_output_bytes, EvalCtx, NoSubgraphs, OpDef};

/// How large a folded value may be: the one parameter in which the crate's two uses of constant
/// folding differ.
///
/// # Example
/// ```
/// use multigather::ir::Node;
/// use multigather::ops::{registry, Folder};
/// use multigather::{DataType, Tensor};
/// let node = Node::new("Add", "add", ["a", "b"], ["c"]);
/// let def = registry().lookup("", "Add", 14).unwrap();
/// let a = Tensor::from_vec(DataType::Int64, &[2], vec![1i64, 2])?;
/// let folded = Folder::INFERENCE.fold(def, &node, 14, &[Some(&a), Some(&a)]).unwrap();
/// assert_eq!(folded[0].as_slice::<i64>()?, &[2, 4]);
/// // Nothing is folded over the limit.
/// assert!(Folder { max_bytes: 8 }.fold(def, &node, 14, &[Some(&a), Some(&a)]).is_none());
/// # Ok::<(), multigather::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Folder {
    /// The most bytes the outputs of one fold take together.
    pub max_bytes: usize,
}

impl Folder {
    /// Static inference keeps values of up to 32 KiB (4,096 `int64`s: every shape, axis list
    /// and size list a model computes); weights are not needed to type a graph.
    pub const INFERENCE: Folder = Folder {
        max_bytes: 32 << 10,
    };

    /// A fixed limit of 64 MiB for folding where no memory budget is at hand. A session folds
    /// by its budget instead (`interp::Session::folding_budget`), so weights computed in the
    /// graph cost nothing per run whatever their size.
    pub const PLANNING: Folder = Folder {
        max_bytes: 64 << 20,
    };

    /// Whether a value of `bytes` bytes is within the limit.
    pub fn fits(self, bytes: usize) -> bool {
        bytes <= self.max_bytes
    }

    /// Whether a stored tensor (an initializer) is within the limit.
    pub fn fits_stored(self, t: &StoredTensor) -> bool {
        t.element_count()
            .is_ok_and(|count| self.fits(value_bytes(t.elem, count)))
    }

    /// The outputs of `node` (an operator `def` at `opset`) on `inputs`, every input it names
    /// being known (`None`: omitted), when the node is [`foldable`], its kernel succeeds and
    /// its outputs fit; `None` otherwise.
    pub fn fold(
        self,
        def: &OpDef,
        node: &Node,
        opset: i64,
        inputs: &[Option<&Tensor>],
    ) -> Option<Vec<Tensor>> {
        if !foldable(node) || def.check_arity(node).is_err() {
            return None;
        }
        if planned_output_bytes(def, node, opset, inputs).is_some_and(|b| !self.fits(b)) {
            return None;
        }
        let ctx = EvalCtx {
            node,
            opset,
            runner: &NoSubgraphs,
            prepared: None,
            memo: None,
        };
        let outputs = (def.eval)(&ctx, inputs).ok()?;
        let bytes = outputs
            .iter()
            .fold(0usize, |sum, t| sum.saturating_add(tensor_bytes(t)));
        (outputs.len() >= node.outputs.len() && self.fits(bytes)).then_some(outputs)
    }
}

/// Whether `node` may ever be folded (see the module's documentation).
pub fn foldable(node: &Node) -> bool {
    let random = is_onnx_domain(&node.domain) && super::is_random(&node.op_type);
    !random && node.domain != crate::gather::DOMAIN && node.subgraphs().next().is_none()
}

/// The bytes `count` elements of `elem` take in a tensor; strings count their handles.
pub(crate) fn value_bytes(elem: DataType, count: usize) -> usize {
    if elem == DataType::String {
        count.saturating_mul(std::mem::size_of::<Vec<u8>>())
    } else {
        elem.storage_bytes(count).unwrap_or(usize::MAX)
    }
}

/// The bytes a tensor's values take (strings count their handles).
pub(crate) fn tensor_bytes(t: &Tensor) -> usize {
    value_bytes(t.dtype(), t.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::registry;

    fn int64(values: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, &[values.len()], values.to_vec()).expect("a tensor")
    }

    /// Which nodes are folded, by the one list and the one size rule.
    #[test]
    fn fold_cases() {
        let small = int64(&[3, 4]);
        let big = Tensor::from_vec(DataType::Int64, &[1], vec![1i64 << 20]).expect("a tensor");
        let one = Tensor::from_vec(DataType::Float, &[1], vec![1.0f32]).expect("a tensor");
        let cases = [
            (
                "shape arithmetic",
                Node::new("Mul", "m", ["a", "b"], ["c"]),
                Folder::INFERENCE,
                vec![Some(&small), Some(&small)],
                true,
            ),
            (
                "random (ai.onnx alias too)",
                Node::new("RandomUniformLike", "r", ["a"], ["c"]).with_domain("ai.onnx"),
                Folder::PLANNING,
                vec![Some(&one)],
                false,
            ),
            (
                "planned over the limit: not run",
                Node::new("ConstantOfShape", "c", ["s"], ["c"]),
                Folder::INFERENCE,
                vec![Some(&big)],
                false,
            ),
            (
                "planned within the planning limit",
                Node::new("ConstantOfShape", "c", ["s"], ["c"]),
                Folder::PLANNING,
                vec![Some(&big)],
                true,
            ),
            (
                "a kernel that fails",
                Node::new("Reshape", "r", ["a", "s"], ["c"]),
                Folder::PLANNING,
                vec![Some(&small), Some(&big)],
                false,
            ),
        ];
        for (name, node, folder, inputs, folded) in &cases {
            let def = registry()
                .lookup(&node.domain, &node.op_type, 17)
                .expect("a registered operator");
            assert_eq!(
                folder.fold(def, node, 17, inputs).is_some(),
                *folded,
                "{name}"
            );
        }
    }
}
