//! `NonZero` (opset 9): the coordinates of the non-zero elements, one column per element in
//! row-major order, as an `int64` tensor of shape `[rank, count]`.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__NonZero.html>.
//!
//! A scalar is treated as a one-element vector, as numpy does, giving shape `[1, count]`.
//! What counts as zero is [`super::common::nonzero_flags`]: `-0.0` is zero, NaN is not.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::try_with_capacity;
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{required, strides};
use super::super::{EvalCtx, InferCtx};
use super::common::{in_dims, nonzero_flags, typed};

pub(super) fn eval_nonzero(_: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let shape = if data.rank() == 0 {
        vec![1]
    } else {
        data.shape().to_vec()
    };
    let st = strides(&shape);
    let hits: Vec<usize> = nonzero_flags(data)?
        .iter()
        .enumerate()
        .filter_map(|(i, &nz)| nz.then_some(i))
        .collect();
    let mut coords = try_with_capacity(shape.len() * hits.len())?;
    for (d, &s) in st.iter().enumerate() {
        coords.extend(hits.iter().map(|&p| ((p / s) % shape[d]) as i64));
    }
    Ok(vec![Tensor::from_vec(
        DataType::Int64,
        &[shape.len(), hits.len()],
        coords,
    )?])
}

pub(super) fn infer_nonzero(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let rank = in_dims(ctx, 0).map_or(Dim::Unknown, |d| Dim::Known(d.len().max(1) as i64));
    Ok(vec![typed(
        Some(DataType::Int64),
        Some(vec![rank, Dim::Unknown]),
    )])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    #[test]
    fn nonzero_follows_the_onnx_example() {
        let x = Tensor::from_vec(DataType::Bool, &[2, 2], vec![1u8, 0, 1, 1]).unwrap();
        let node = Node::new("NonZero", "n", ["x"], ["y"]);
        let out = eval_node(&node, 13, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(out.shape(), &[2, 3]);
        assert_eq!(out.to_vec::<i64>().unwrap(), [0, 1, 1, 0, 0, 1]);
        let s = Tensor::scalar(DataType::Float, 2.0f32).unwrap();
        let out = eval_node(&node, 13, &[Some(&s)]).unwrap().remove(0);
        assert_eq!(out.shape(), &[1, 1]);
    }

    #[test]
    fn nonzero_shape_function_knows_the_rank() {
        let node = Node::new("NonZero", "n", ["x"], ["y"]);
        let out = crate::ops::layout::common::infer_dims_for(&node, 13, &[Some(&["N", "3"])], &[]);
        assert_eq!(out.unwrap(), ["2", "?"]);
    }
}
