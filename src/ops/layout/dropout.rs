//! `Dropout` (opsets 1 to 22) in inference: the output is the input and the optional mask is
//! all ones.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Dropout.html>.
//!
//! Before opset 7 the attribute `is_test` chooses: 0, its default, is training mode (with the
//! attribute `ratio`); from opset 7 to 11 there is no training mode.
//! From opset 12 `training_mode` is an input; a true value with a non-zero `ratio` drops each
//! element with probability `ratio` and scales the rest by `1 / (1 - ratio)`, drawing from the
//! seeded stream of the random operators (`ops::random`): the same on every run, not numpy's
//! draw.
//! The mask is `bool` from opset 10 and has the data's type before, as those opsets declare.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::try_with_capacity;
use crate::tensor::Tensor;
use crate::DataType;

use super::super::random::Stream;
use super::super::util::{optional, required};
use super::super::{EvalCtx, InferCtx};
use super::runs::{from_f64s, in_dims, in_elem, nonzero_flags, two_valued, typed};
use crate::ops::num::real_values;

/// The element type of the mask at `opset`, for data of type `data`.
fn mask_type(opset: i64, data: Option<DataType>) -> Option<DataType> {
    if opset >= 10 {
        Some(DataType::Bool)
    } else {
        data
    }
}

pub(super) fn eval_dropout(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let ratio = match optional(inputs, 1) {
        Some(r) => real_values(r)?.first().copied().unwrap_or(0.5),
        None if ctx.opset < 12 => f64::from(ctx.node.attr_float("ratio", 0.5)?),
        None => 0.5,
    };
    let training = match optional(inputs, 2) {
        Some(t) => nonzero_flags(t)?.first() == Some(&true),
        None => ctx.opset < 7 && ctx.node.attr_int("is_test", 0)? == 0,
    };
    if training && ratio != 0.0 {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(ctx.error(format!("ratio {ratio} is not in [0, 1]")));
        }
        // Keep each element with probability 1 - ratio, scaled by 1 / (1 - ratio).
        let mut stream = Stream::of(ctx.node)?;
        let x = real_values(data)?;
        let mut keep = try_with_capacity::<bool>(x.len())?;
        keep.extend((0..x.len()).map(|_| stream.unit() >= ratio));
        let scale = if ratio < 1.0 {
            1.0 / (1.0 - ratio)
        } else {
            0.0
        };
        let y: Vec<f64> = x
            .iter()
            .zip(&keep)
            .map(|(&v, &k)| if k { v * scale } else { 0.0 })
            .collect();
        let mut outputs = vec![from_f64s(data.dtype(), data.shape(), &y)?];
        if ctx.node.outputs.len() > 1 {
            let values = from_f64s(DataType::Bool, &[2], &[0.0, 1.0])?;
            outputs.push(two_valued(&values, data.shape(), |i| keep[i])?);
        }
        return Ok(outputs);
    }
    let mut outputs = vec![data.clone()];
    if ctx.node.outputs.len() > 1 {
        let dtype = mask_type(ctx.opset, Some(data.dtype())).unwrap_or(DataType::Bool);
        let values = from_f64s(dtype, &[2], &[0.0, 1.0])?;
        outputs.push(two_valued(&values, data.shape(), |_| true)?);
    }
    Ok(outputs)
}

pub(super) fn infer_dropout(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = in_dims(ctx, 0).map(<[Dim]>::to_vec);
    let mut out = vec![typed(in_elem(ctx, 0), dims.clone())];
    if ctx.node.outputs.len() > 1 {
        out.push(typed(mask_type(ctx.opset, in_elem(ctx, 0)), dims));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    #[test]
    fn inference_copies_and_masks_ones_training_drops_and_scales() {
        let x = Tensor::from_vec(DataType::Float, &[3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let node = Node::new("Dropout", "d", ["x"], ["y", "m"]);
        let out = eval_node(&node, 13, &[Some(&x)]).unwrap();
        assert_eq!(out[0], x);
        assert_eq!(out[1].dtype(), DataType::Bool);
        assert_eq!(out[1].to_vec::<u8>().unwrap(), [1, 1, 1]);
        let out = eval_node(&node, 7, &[Some(&x)]).unwrap();
        assert_eq!(out[1].to_vec::<f32>().unwrap(), [1.0, 1.0, 1.0]);

        let node = Node::new("Dropout", "d", ["x", "r", "t"], ["y"]);
        let r = Tensor::scalar(DataType::Float, 0.5f32).unwrap();
        let t = Tensor::scalar(DataType::Bool, 1u8).unwrap();
        let y = eval_node(&node, 13, &[Some(&x), Some(&r), Some(&t)]).unwrap();
        for (&v, &orig) in y[0]
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .zip(&[1.0f32, 2.0, 3.0])
        {
            assert!(v == 0.0 || v == 2.0 * orig, "{v} from {orig}");
        }
        assert_eq!(
            y[0],
            eval_node(&node, 13, &[Some(&x), Some(&r), Some(&t)]).unwrap()[0]
        );
        let zero = Tensor::scalar(DataType::Float, 0.0f32).unwrap();
        assert_eq!(
            eval_node(&node, 13, &[Some(&x), Some(&zero), Some(&t)]).unwrap()[0],
            x
        );
    }

    #[test]
    fn dropout_shape_function_copies_the_input() {
        let node = Node::new("Dropout", "d", ["x"], ["y", "m"]);
        let out = crate::ops::layout::runs::infer_dims_for(&node, 13, &[Some(&["N", "3"])], &[]);
        assert_eq!(out.unwrap(), ["N", "3"]);
    }
}
