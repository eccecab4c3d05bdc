//! `ReverseSequence` (opset 10): reverses the first `sequence_lens[b]` time steps of every batch
//! entry `b`, leaving the rest in place.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__ReverseSequence.html>.
//!
//! `time_axis` and `batch_axis` are 0 and 1 in either order; the dims after them move as
//! blocks. A length of 0 leaves its entry unchanged.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::util::{required, strides, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::runs::{in_dims, in_elem, typed, Writer};

pub(super) fn eval_reverse_sequence(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (data, lens) = (required(inputs, 0)?, to_i64s(required(inputs, 1)?)?);
    let time_axis = ctx.node.attr_int("time_axis", 0)?;
    let batch_axis = ctx.node.attr_int("batch_axis", 1)?;
    let (t_ax, b_ax) = match (time_axis, batch_axis) {
        (0, 1) => (0, 1),
        (1, 0) => (1, 0),
        _ => return Err(ctx.error("time_axis and batch_axis must be 0 and 1 in some order")),
    };
    let shape = data.shape();
    if shape.len() < 2 {
        return Err(ctx.error("input must have rank 2 or more"));
    }
    let (steps, batch) = (shape[t_ax], shape[b_ax]);
    if lens.len() != batch {
        return Err(ctx.error(format!(
            "{} sequence lengths for a batch of {batch}",
            lens.len()
        )));
    }
    let lens = lens
        .iter()
        .map(|&l| {
            usize::try_from(l)
                .ok()
                .filter(|&l| l <= steps)
                .ok_or_else(|| ctx.error(format!("sequence length {l} is outside [0, {steps}]")))
        })
        .collect::<Result<Vec<_>>>()?;
    let st = strides(shape);
    let block = st[1];
    let sources = [data];
    let mut out = Writer::new(data.dtype(), shape, &sources)?;
    if data.is_empty() {
        // Nothing to move, however many (empty) blocks the first two dims make.
        return Ok(vec![out.finish()?]);
    }
    for a0 in 0..shape[0] {
        for a1 in 0..shape[1] {
            let (t, b) = if t_ax == 0 { (a0, a1) } else { (a1, a0) };
            let src_t = if t < lens[b] { lens[b] - 1 - t } else { t };
            out.copy(0, src_t * st[t_ax] + b * st[b_ax], block)?;
        }
    }
    Ok(vec![out.finish()?])
}

pub(super) fn infer_reverse_sequence(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![typed(
        in_elem(ctx, 0),
        in_dims(ctx, 0).map(<[Dim]>::to_vec),
    )])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    #[test]
    fn reverse_sequence_follows_the_onnx_examples() {
        let x = Tensor::from_vec(DataType::Int32, &[4, 4], (0..16).collect::<Vec<i32>>()).unwrap();
        let lens = Tensor::from_vec(DataType::Int64, &[4], vec![4i64, 3, 2, 1]).unwrap();
        let node = Node::new("ReverseSequence", "r", ["x", "l"], ["y"])
            .with_attr("time_axis", AttrValue::Int(0))
            .with_attr("batch_axis", AttrValue::Int(1));
        let out = eval_node(&node, 10, &[Some(&x), Some(&lens)]).unwrap();
        assert_eq!(
            out[0].to_vec::<i32>().unwrap(),
            [12, 9, 6, 3, 8, 5, 2, 7, 4, 1, 10, 11, 0, 13, 14, 15]
        );
        let lens = Tensor::from_vec(DataType::Int64, &[4], vec![1i64, 2, 3, 4]).unwrap();
        let node = Node::new("ReverseSequence", "r", ["x", "l"], ["y"])
            .with_attr("time_axis", AttrValue::Int(1))
            .with_attr("batch_axis", AttrValue::Int(0));
        let out = eval_node(&node, 10, &[Some(&x), Some(&lens)]).unwrap();
        assert_eq!(
            out[0].to_vec::<i32>().unwrap(),
            [0, 1, 2, 3, 5, 4, 6, 7, 10, 9, 8, 11, 15, 14, 13, 12]
        );
        let long = Tensor::from_vec(DataType::Int64, &[4], vec![5i64, 1, 1, 1]).unwrap();
        let e = eval_node(&node, 10, &[Some(&x), Some(&long)]).unwrap_err();
        assert!(e.to_string().contains("outside [0, 4]"), "{e}");
    }
}
