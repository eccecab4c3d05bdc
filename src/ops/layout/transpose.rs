//! `Transpose` (opset 1): permutes a tensor's axes (reverses them without `perm`).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Transpose.html>.

use crate::error::Result;
use crate::ir::TensorType;
use crate::tensor::Tensor;

use super::super::util::required;
use super::super::{EvalCtx, InferCtx};
use super::common::{check_permutation, in_dims, in_elem, permute, to_usize, typed};

/// The permutation of a `Transpose` node over `rank` axes.
fn perm(node: &crate::ir::Node, rank: usize) -> Result<Vec<usize>> {
    let perm = match node.attr_ints("perm")? {
        Some(p) => p
            .iter()
            .map(|&a| to_usize(a, "a perm entry"))
            .collect::<Result<Vec<_>>>()?,
        None => (0..rank).rev().collect(),
    };
    check_permutation(&perm, rank)?;
    Ok(perm)
}

pub(super) fn eval_transpose(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let perm = perm(ctx.node, data.rank())?;
    Ok(vec![permute(data, &perm)?])
}

pub(super) fn infer_transpose(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = match in_dims(ctx, 0) {
        Some(d) => Some(
            perm(ctx.node, d.len())?
                .iter()
                .map(|&p| d[p].clone())
                .collect(),
        ),
        None => ctx
            .node
            .attr_ints("perm")?
            .map(|p| vec![crate::ir::Dim::Unknown; p.len()]),
    };
    Ok(vec![typed(in_elem(ctx, 0), dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    #[test]
    fn transpose_permutes_axes_of_every_type() {
        let x =
            Tensor::from_vec(DataType::Int32, &[2, 3, 2], (0..12).collect::<Vec<i32>>()).unwrap();
        let node = Node::new("Transpose", "t", ["x"], ["y"])
            .with_attr("perm", AttrValue::Ints(vec![1, 0, 2]));
        let out = eval_node(&node, 13, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(out.shape(), &[3, 2, 2]);
        assert_eq!(
            out.to_vec::<i32>().unwrap(),
            [0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11]
        );

        let s = Tensor::from_strings(
            &[2, 2],
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()],
        )
        .unwrap();
        let node = Node::new("Transpose", "t", ["x"], ["y"]);
        let out = eval_node(&node, 13, &[Some(&s)]).unwrap().remove(0);
        assert_eq!(
            out.as_strings().unwrap(),
            &[b"a".to_vec(), b"c".to_vec(), b"b".to_vec(), b"d".to_vec()]
        );

        let node = Node::new("Transpose", "t", ["x"], ["y"])
            .with_attr("perm", AttrValue::Ints(vec![0, 0]));
        let e = eval_node(&node, 13, &[Some(&s)]).unwrap_err();
        assert!(e.to_string().contains("not a permutation"), "{e}");
    }

    #[test]
    fn transpose_permutes_symbolic_dims() {
        let node = Node::new("Transpose", "t", ["x"], ["y"])
            .with_attr("perm", AttrValue::Ints(vec![2, 0, 1]));
        let out = super::super::common::infer_dims_for(&node, 13, &[Some(&["N", "3", "4"])], &[]);
        assert_eq!(out.unwrap(), ["4", "N", "3"]);
    }
}
