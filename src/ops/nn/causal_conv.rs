//! `CausalConvWithState` (opset 27): a depthwise causal 1-D convolution that carries its left
//! context between calls, with an optional fused SiLU.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__CausalConvWithState.html>.
//!
//! `input` is `(B, C, L)`, `weight` `(C, 1, k)`; the input is prefixed by `past_state`
//! `(B, C, k - 1)` (zeros when omitted), each channel is convolved with its own kernel (valid
//! padding, stride 1), `bias` is added, `silu`/`swish` applies `x * sigmoid(x)`, and
//! `present_state` is the last `k - 1` positions of the prefixed input. Computes in `f64`.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_vec, Tensor};

use super::super::util::{optional, required};
use super::super::{EvalCtx, InferCtx};
use super::values::{input_dims, real_f64s, store_f64s, tensor_type};

pub(super) fn eval_causal_conv(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, w) = (required(inputs, 0)?, required(inputs, 1)?);
    let (bias, past) = (optional(inputs, 2), optional(inputs, 3));
    let silu = match ctx.node.attr_string("activation")?.unwrap_or("none") {
        "none" => false,
        "silu" | "swish" => true,
        other => return Err(ctx.error(format!("activation '{other}' is not none, silu or swish"))),
    };
    let &[b, c, l] = x.shape() else {
        return Err(ctx.error(format!("input {:?} is not (B, C, L)", x.shape())));
    };
    let k = match w.shape() {
        &[wc, 1, k] if wc == c && k > 0 => k,
        s => return Err(ctx.error(format!("weight {s:?} is not ({c}, 1, k)"))),
    };
    let ctx_len = k - 1;
    if let Some(p) = past {
        if p.shape() != [b, c, ctx_len] {
            return Err(ctx.error(format!(
                "past_state {:?} is not ({b}, {c}, {ctx_len})",
                p.shape()
            )));
        }
    }
    if let Some(bi) = bias {
        if bi.len() != c {
            return Err(ctx.error(format!("bias holds {} values for {c} channels", bi.len())));
        }
    }
    let (xv, wv) = (
        real_f64s(x, "CausalConvWithState")?,
        real_f64s(w, "CausalConvWithState")?,
    );
    let bv = bias
        .map(|t| real_f64s(t, "CausalConvWithState"))
        .transpose()?;
    let pv = past
        .map(|t| real_f64s(t, "CausalConvWithState"))
        .transpose()?;
    let total = ctx_len + l;
    let mut padded = try_vec(total, 0.0f64)?;
    let mut y = try_vec(b * c * l, 0.0f64)?;
    let mut state = try_vec(b * c * ctx_len, 0.0f64)?;
    for row in 0..b * c {
        let ch = row % c;
        match &pv {
            Some(p) => padded[..ctx_len].copy_from_slice(&p[row * ctx_len..][..ctx_len]),
            None => padded[..ctx_len].fill(0.0),
        }
        padded[ctx_len..].copy_from_slice(&xv[row * l..][..l]);
        let kern = &wv[ch * k..][..k];
        let b0 = bv.as_ref().map_or(0.0, |b| b[ch]);
        for (i, out) in y[row * l..][..l].iter_mut().enumerate() {
            let v = b0
                + kern
                    .iter()
                    .zip(&padded[i..i + k])
                    .map(|(a, b)| a * b)
                    .sum::<f64>();
            *out = if silu { v / (1.0 + (-v).exp()) } else { v };
        }
        state[row * ctx_len..][..ctx_len].copy_from_slice(&padded[total - ctx_len..]);
    }
    let mut outs = vec![store_f64s(x.dtype(), &[b, c, l], &y)?];
    if ctx.node.outputs.len() > 1 {
        outs.push(store_f64s(x.dtype(), &[b, c, ctx_len], &state)?);
    }
    Ok(outs)
}

pub(super) fn infer_causal_conv(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let x = ctx.input(0).cloned().unwrap_or_default();
    let state = input_dims(ctx, 0).filter(|d| d.len() == 3).map(|d| {
        let k = input_dims(ctx, 1)
            .filter(|w| w.len() == 3)
            .and_then(|w| w[2].known())
            .map_or(Dim::Unknown, |k| Dim::Known(k - 1));
        vec![d[0].clone(), d[1].clone(), k]
    });
    let elem = x.elem;
    Ok(vec![x, tensor_type(elem, state)])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn the_state_carries_the_left_context() {
        let x = Tensor::from_vec(DataType::Float, &[1, 1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let w = Tensor::from_vec(DataType::Float, &[1, 1, 2], vec![1.0f32, 10.0]).unwrap();
        let p = Tensor::from_vec(DataType::Float, &[1, 1, 1], vec![5.0f32]).unwrap();
        let node = Node::new("CausalConvWithState", "c", ["x", "w", "", "p"], ["y", "s"]);
        let y = eval_node(&node, 27, &[Some(&x), Some(&w), None, Some(&p)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[15.0, 21.0, 32.0]);
        assert_eq!(y[1].as_slice::<f32>().unwrap(), &[3.0]);
    }
}
