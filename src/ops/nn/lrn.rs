//! `LRN` (opsets 1, 13): local response normalization across channels.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__LRN.html>.
//!
//! `y = x / (bias + alpha / size * square_sum) ^ beta`, where `square_sum` adds the squares of the
//! channels `c - floor((size - 1) / 2) ..= c + ceil((size - 1) / 2)` that exist.

use rayon::prelude::*;

use crate::error::Result;
use crate::tensor::Tensor;

use super::super::util::{required, unsupported_type};
use super::super::EvalCtx;
use crate::ops::num::{dispatch_real, Real};

fn lrn<R: Real>(
    x: &[R],
    channels: usize,
    plane: usize,
    size: usize,
    alpha: f64,
    beta: f64,
    bias: f64,
) -> Vec<R> {
    let mut y = vec![R::ZERO; x.len()];
    let block = channels * plane;
    if block == 0 {
        return y;
    }
    let (before, after) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let scale = alpha / size as f64;
    y.par_chunks_mut(block)
        .zip(x.par_chunks(block))
        .with_min_len(crate::par::min_len(x.len() / block, &[block, size]))
        .for_each(|(yb, xb)| {
            for c in 0..channels {
                let (lo, hi) = (c.saturating_sub(before), (c + after).min(channels - 1));
                for p in 0..plane {
                    let sq: f64 = (lo..=hi).map(|k| xb[k * plane + p].to_f64().powi(2)).sum();
                    let v = xb[c * plane + p].to_f64();
                    yb[c * plane + p] = R::from_f64(v / (bias + scale * sq).powf(beta));
                }
            }
        });
    y
}

pub(super) fn eval_lrn(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let shape = x.shape();
    if shape.len() < 2 {
        return Err(ctx.error(format!("X {shape:?} needs a batch and a channel dim")));
    }
    let size = usize::try_from(ctx.node.attr_int("size", 0)?)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| ctx.error("size must be positive"))?;
    let alpha = ctx.node.attr_float("alpha", 1e-4)? as f64;
    let beta = ctx.node.attr_float("beta", 0.75)? as f64;
    let bias = ctx.node.attr_float("bias", 1.0)? as f64;
    let plane: usize = shape[2..].iter().product();
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        R::store(dtype, shape, lrn(&R::load(x)?, shape[1], plane, size, alpha, beta, bias))?
    }, _ => return Err(unsupported_type("LRN", dtype)));
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn normalizes_across_neighbouring_channels() {
        let x = Tensor::from_vec(DataType::Float, &[1, 3, 1, 1], vec![1.0f32, 2.0, 3.0]).unwrap();
        let node = Node::new("LRN", "l", ["x"], ["y"])
            .with_attr("size", AttrValue::Int(2))
            .with_attr("alpha", AttrValue::Float(2.0))
            .with_attr("beta", AttrValue::Float(1.0));
        let y = eval_node(&node, 13, &[Some(&x)]).unwrap();
        // size 2: channels c..=c+1; y = x / (1 + sq).
        let want = [1.0 / 6.0, 2.0 / 14.0, 3.0 / 10.0];
        for (a, b) in y[0].as_slice::<f32>().unwrap().iter().zip(want) {
            assert!((a - b).abs() < 1e-6);
        }
        let node = Node::new("LRN", "l", ["x"], ["y"]);
        let err = eval_node(&node, 13, &[Some(&x)]).unwrap_err();
        assert!(err.to_string().contains("size"), "{err}");
    }
}
