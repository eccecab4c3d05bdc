//! `Transpose` (opset 1): permutes a tensor's axes (reverses them without `perm`).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Transpose.html>.

use crate::error::Result;
use crate::ir::TensorType;
use crate::tensor::Tensor;

use super::super::util::required;
use super::super::{Attributes, EvalCtx, InferCtx};
use super::runs::{check_permutation, in_dims, in_elem, permute, to_usize, typed};

/// The `perm` attribute of a `Transpose` node (`None`: reverse the axes).
#[derive(Clone, Debug)]
pub(super) struct Perm(Option<Vec<usize>>);

impl Attributes for Perm {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<Perm> {
        let perm = node
            .attr_ints("perm")?
            .map(|p| {
                p.iter()
                    .map(|&a| to_usize(a, "a perm entry"))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        Ok(Perm(perm))
    }
}

impl Perm {
    /// The permutation over `rank` axes.
    fn over(&self, rank: usize) -> Result<Vec<usize>> {
        let perm = match &self.0 {
            Some(p) => p.clone(),
            None => (0..rank).rev().collect(),
        };
        check_permutation(&perm, rank)?;
        Ok(perm)
    }
}

pub(super) fn eval_transpose(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let perm = ctx.attrs::<Perm>()?.over(data.rank())?;
    Ok(vec![permute(data, &perm)?])
}

pub(super) fn infer_transpose(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let perm = ctx.attrs::<Perm>()?;
    let dims = match in_dims(ctx, 0) {
        Some(d) => Some(perm.over(d.len())?.iter().map(|&p| d[p].clone()).collect()),
        None => perm
            .0
            .as_ref()
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
    fn the_kernel_and_the_shape_function_read_the_prepared_perm() {
        use crate::ir::{Dim, TensorType};
        use crate::ops::{prepare, EvalCtx, InferCtx, NoSubgraphs};
        // The node says [1, 0, 2]; a plan's prepared state (here parsed from [2, 0, 1]) is
        // what both read, and without one they parse the node.
        let perm = |p: Vec<i64>| {
            Node::new("Transpose", "t", ["x"], ["y"]).with_attr("perm", AttrValue::Ints(p))
        };
        let node = perm(vec![1, 0, 2]);
        let prepared = prepare::<super::Perm>(&perm(vec![2, 0, 1]), 13).unwrap();
        let x = Tensor::from_vec(DataType::Float, &[2, 3, 4], vec![0.0f32; 24]).unwrap();
        let known = [Some(TensorType::new(
            DataType::Float,
            vec![Dim::Known(2), Dim::Known(3), Dim::Known(4)],
        ))];
        for (state, want) in [(Some(&*prepared), [4, 2, 3]), (None, [3, 2, 4])] {
            let ctx = EvalCtx {
                node: &node,
                opset: 13,
                runner: &NoSubgraphs,
                prepared: state,
                memo: None,
            };
            let y = super::eval_transpose(&ctx, &[Some(&x)]).unwrap().remove(0);
            assert_eq!(y.shape(), &want);
            let ctx = InferCtx {
                node: &node,
                opset: 13,
                inputs: &known,
                constants: &[None],
                prepared: state,
            };
            let t = super::infer_transpose(&ctx).unwrap().remove(0);
            let dims: Vec<Dim> = want.iter().map(|&d| Dim::Known(d as i64)).collect();
            assert_eq!(t.shape.unwrap().dims, dims);
        }
        // A bad perm fails when prepared, before any input is seen.
        assert!(prepare::<super::Perm>(&perm(vec![-1, 0]), 13).is_err());
    }

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
        let out = super::super::runs::infer_dims_for(&node, 13, &[Some(&["N", "3", "4"])], &[]);
        assert_eq!(out.unwrap(), ["4", "N", "3"]);
    }
}
