//! `MaxUnpool` (opsets 9, 11, 22): places each value of `X` at the position `indices` gives (as
//! `MaxPool` returns them) in a zero tensor, the partial inverse of max pooling.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__MaxUnpool.html>.
//!
//! Indices address the unpooled shape `(in - 1) * stride - pad_begin - pad_end + kernel` per
//! spatial dim; an `output_shape` input (opset 11+) that is larger places that block in its
//! leading corner, as the reference does. Every element type.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::util::{optional, required, strides as row_strides, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::values::{input_dims, tensor_type};

pub(super) fn eval_max_unpool(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let shape = x.shape();
    let r = shape.len().saturating_sub(2);
    let kernel = ctx
        .node
        .attr_ints("kernel_shape")?
        .ok_or_else(|| ctx.error("kernel_shape is required"))?;
    let pads = ctx
        .node
        .attr_ints("pads")?
        .map_or_else(|| vec![0; 2 * r], <[i64]>::to_vec);
    let steps = ctx
        .node
        .attr_ints("strides")?
        .map_or_else(|| vec![1; r], <[i64]>::to_vec);
    if r == 0 || kernel.len() != r || pads.len() != 2 * r || steps.len() != r {
        return Err(ctx.error(format!(
            "kernel_shape, pads and strides do not fit X {shape:?}"
        )));
    }
    let mut unpooled = shape[..2].to_vec();
    for d in 0..r {
        let len = (shape[d + 2] as i64 - 1)
            .checked_mul(steps[d])
            .and_then(|v| {
                v.checked_sub(pads[d])?
                    .checked_sub(pads[d + r])?
                    .checked_add(kernel[d])
            })
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| ctx.error("the unpooled shape is negative or too large"))?;
        unpooled.push(len);
    }
    let out_shape = match optional(inputs, 2) {
        Some(s) => {
            let s: Vec<usize> = to_i64s(s)?
                .into_iter()
                .map(|v| usize::try_from(v).map_err(|_| ctx.error("output_shape is negative")))
                .collect::<Result<_>>()?;
            if s.len() != shape.len() || s.iter().zip(&unpooled).any(|(o, u)| o < u) {
                return Err(ctx.error(format!(
                    "output_shape {s:?} is smaller than the unpooled {unpooled:?}"
                )));
            }
            s
        }
        None => unpooled.clone(),
    };
    let idx = to_i64s(indices)?;
    if idx.len() != x.len() {
        return Err(ctx.error("indices and X differ in size"));
    }
    let (ust, ost) = (row_strides(&unpooled), row_strides(&out_shape));
    let total = super::values::checked_product(&unpooled)?;
    let mut y = Tensor::zeros(x.dtype(), &out_shape)?;
    for (i, &at) in idx.iter().enumerate() {
        let at = usize::try_from(at)
            .ok()
            .filter(|&a| a < total)
            .ok_or_else(|| ctx.error(format!("index {at} is outside the unpooled {unpooled:?}")))?;
        let dst: usize = (0..unpooled.len())
            .map(|d| at / ust[d] % unpooled[d] * ost[d])
            .sum();
        y.copy_element_from(dst, x, i)?;
    }
    Ok(vec![y])
}

/// `output_shape` when it is a constant, else `[N, C]` and the unpooled size of each spatial
/// dim that is known.
pub(super) fn infer_max_unpool(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    if let Some(shape) = ctx.constant(2) {
        let dims = to_i64s(shape)?.into_iter().map(Dim::Known).collect();
        return Ok(vec![tensor_type(elem, Some(dims))]);
    }
    if ctx.node.inputs.get(2).is_some_and(|s| !s.is_empty()) {
        // An output_shape known only at run time: the rank is X's.
        let dims = input_dims(ctx, 0).map(|x| vec![Dim::Unknown; x.len()]);
        return Ok(vec![tensor_type(elem, dims)]);
    }
    let Some(x) = input_dims(ctx, 0).filter(|x| x.len() > 2) else {
        return Ok(vec![tensor_type(elem, None)]);
    };
    let r = x.len() - 2;
    let node = ctx.node;
    let kernel = node.attr_ints("kernel_shape")?.unwrap_or(&[]);
    let pads = node
        .attr_ints("pads")?
        .map_or_else(|| vec![0; 2 * r], <[i64]>::to_vec);
    let steps = node
        .attr_ints("strides")?
        .map_or_else(|| vec![1; r], <[i64]>::to_vec);
    let mut dims = x[..2].to_vec();
    for d in 0..r {
        let len = match (x[d + 2].known(), kernel.get(d), steps.get(d)) {
            (Some(n), Some(&k), Some(&s)) if pads.len() == 2 * r => (n - 1)
                .checked_mul(s)
                .and_then(|v| {
                    v.checked_sub(pads[d])?
                        .checked_sub(pads[d + r])?
                        .checked_add(k)
                })
                .filter(|&v| v >= 0)
                .map_or(Dim::Unknown, Dim::Known),
            _ => Dim::Unknown,
        };
        dims.push(len);
    }
    Ok(vec![tensor_type(elem, Some(dims))])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn values_return_to_their_pooled_positions() {
        let x = Tensor::from_vec(DataType::Float, &[1, 1, 1, 1], vec![5.0f32]).unwrap();
        let i = Tensor::from_vec(DataType::Int64, &[1, 1, 1, 1], vec![3i64]).unwrap();
        let node = Node::new("MaxUnpool", "u", ["x", "i"], ["y"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]));
        let y = eval_node(&node, 11, &[Some(&x), Some(&i)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[0.0, 0.0, 0.0, 5.0]);
    }

    #[test]
    fn the_shape_function_gives_the_unpooled_shape() {
        let node = Node::new("MaxUnpool", "u", ["x", "i"], ["y"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 3]))
            .with_attr("strides", AttrValue::Ints(vec![2, 2]))
            .with_attr("pads", AttrValue::Ints(vec![0, 1, 0, 0]));
        let x = TensorType::new(DataType::Float, [1, 2, 3, 4].map(Dim::Known).to_vec());
        let i = TensorType::new(DataType::Int64, [1, 2, 3, 4].map(Dim::Known).to_vec());
        let y = crate::ops::infer_node(&node, 11, &[Some(x), Some(i)], &[]);
        // (3 - 1) * 2 + 2 = 6 and (4 - 1) * 2 - 1 + 3 = 8
        let want = TensorType::new(DataType::Float, [1, 2, 6, 8].map(Dim::Known).to_vec());
        assert_eq!(y, vec![want]);
    }
}
