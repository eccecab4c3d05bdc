//! `NonZero` (opset 9): the coordinates of the non-zero elements, one column per element in
//! row-major order, as an `int64` tensor of shape `[rank, count]`.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__NonZero.html>.
//!
//! A scalar is treated as a one-element vector, as numpy does, giving shape `[1, count]`.
//! What counts as zero is [`super::runs::nonzero_flags`]: `-0.0` is zero, NaN is not.

use std::mem::MaybeUninit;

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{required, strides};
use super::super::vector::assume_written;
use super::super::{EvalCtx, InferCtx};
use super::runs::{in_dims, nonzero_flags, typed};

pub(super) fn eval_nonzero(_: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let shape = if data.rank() == 0 {
        vec![1]
    } else {
        data.shape().to_vec()
    };
    let st = strides(&shape);
    let flags = nonzero_flags(data)?;
    let count = flags.iter().filter(|&&f| f).count();
    // The output is the one buffer sized by the data's values, so it comes from the arena
    // (checked against the budget) and is written in place.
    let out = Tensor::uninit(DataType::Int64, &[shape.len(), count])?;
    let out = out.fill(|slots: &mut [MaybeUninit<i64>]| {
        if count > 0 {
            for (row, (&s, &dim)) in slots.chunks_exact_mut(count).zip(st.iter().zip(&shape)) {
                let hits = flags
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &f)| f.then_some(i));
                for (slot, p) in row.iter_mut().zip(hits) {
                    slot.write(((p / s) % dim) as i64);
                }
            }
        }
        // SAFETY: each of the `rank` rows of `count` slots was written with the `count` hits.
        unsafe { assume_written(slots) }
    })?;
    Ok(vec![out])
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
        let out = crate::ops::layout::runs::infer_dims_for(&node, 13, &[Some(&["N", "3"])], &[]);
        assert_eq!(out.unwrap(), ["2", "?"]);
    }
}
