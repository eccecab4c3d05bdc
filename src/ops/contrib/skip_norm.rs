//! Residual + normalisation contrib operators of `com.microsoft` (opset 1):
//! `SkipLayerNormalization` (layer normalisation of `input + skip + bias` over the last axis),
//! `SkipSimplifiedLayerNormalization` (the same with RMS normalisation) and
//! `SimplifiedLayerNormalization` (RMS normalisation: `x / sqrt(mean(x^2) + epsilon) * scale`).
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, sections
//! `com.microsoft.SkipLayerNormalization`, `com.microsoft.SkipSimplifiedLayerNormalization`;
//! `SimplifiedLayerNormalization` is onnxruntime's, in the default domain (and registered in
//! `com.microsoft` too).
//!
//! Outputs of the skip forms: the normalised rows, then optionally the mean and the inverse
//! standard deviation of each row (shape `[..., 1]`; the mean is 0 for the RMS form) and the sum
//! `input + skip + bias`. `skip` has the input's shape or its trailing dims (broadcast over the
//! leading ones). `epsilon` defaults to 1e-12 for the skip forms (onnxruntime's default) and
//! 1e-5 for `SimplifiedLayerNormalization`.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

use super::super::attrs::{Epsilon12, TrailingNorm};
use super::super::util::{optional, required};
use super::super::{EvalCtx, InferCtx};
use super::activations::{bias, floats};

/// Output 0 and 3 have the input's type; 1 and 2 its shape with the last dim 1.
pub(super) fn infer_skip_norm(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let Some(x) = ctx.input(0) else {
        return Ok(Vec::new());
    };
    let stats = TensorType {
        elem: Some(DataType::Float),
        shape: x.shape.as_ref().map(|s| {
            let mut s = s.clone();
            if let Some(last) = s.dims.last_mut() {
                *last = Dim::Known(1);
            }
            s
        }),
    };
    Ok(vec![x.clone(), stats.clone(), stats, x.clone()])
}

/// Normalises every row of `width` elements of `sum` into `out`, scaled by `gamma` and shifted
/// by `beta`; returns the mean and inverse standard deviation of each row. `rms` skips the
/// mean (RMS normalisation).
pub(super) fn normalize(
    sum: &[f32],
    width: usize,
    (gamma, beta): (&[f32], Option<&[f32]>),
    eps: f32,
    rms: bool,
    out: &mut [f32],
) -> Result<(Vec<f32>, Vec<f32>)> {
    let rows = sum.len() / width.max(1);
    let (mut means, mut invs) = (try_vec(rows, 0.0f32)?, try_vec(rows, 0.0f32)?);
    for (r, (row, o)) in sum.chunks(width).zip(out.chunks_mut(width)).enumerate() {
        let n = width as f32;
        let mean = if rms {
            0.0
        } else {
            row.iter().sum::<f32>() / n
        };
        let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        for (j, (o, &v)) in o.iter_mut().zip(row).enumerate() {
            *o = (v - mean) * inv * gamma[j] + beta.map_or(0.0, |b| b[j]);
        }
        means[r] = mean;
        invs[r] = inv;
    }
    Ok((means, invs))
}

fn skip_norm(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>], rms: bool) -> Result<Vec<Tensor>> {
    let op = ctx.node.op_type.as_str();
    let (x, skip, gamma) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    // The RMS form has no beta: its fourth input is the bias.
    let (beta, b) = if rms {
        (None, optional(inputs, 3))
    } else {
        (optional(inputs, 3), optional(inputs, 4))
    };
    let eps = ctx.attrs::<Epsilon12>()?.0;
    let shape = x.shape();
    let Some(&width) = shape.last() else {
        return Err(Error::Eval(format!("{op}: the input is a scalar")));
    };
    let s = floats(skip, op)?;
    let skip_dims: Vec<usize> = skip
        .shape()
        .iter()
        .copied()
        .skip_while(|&d| d == 1)
        .collect();
    let trailing = shape.ends_with(&skip_dims) || skip.len() == x.len();
    if !trailing || s.is_empty() && !x.is_empty() {
        return Err(Error::Eval(format!(
            "{op}: skip of shape {:?} does not broadcast to the input {shape:?}",
            skip.shape()
        )));
    }
    let g = bias(x, gamma, op)?;
    let beta = beta.map(|t| bias(x, t, op)).transpose()?;
    let b = b.map(|t| bias(x, t, op)).transpose()?;
    let src = floats(x, op)?;
    let mut sum = try_vec(src.len(), 0.0f32)?;
    for (k, (o, &v)) in sum.iter_mut().zip(src).enumerate() {
        *o = v + s[k % s.len()] + b.map_or(0.0, |b| b[k % width.max(1)]);
    }
    let mut y = try_vec(src.len(), 0.0f32)?;
    let (means, invs) = normalize(&sum, width, (g, beta), eps, rms, &mut y)?;
    let mut stat_shape = shape.to_vec();
    if let Some(last) = stat_shape.last_mut() {
        *last = 1;
    }
    let mut out = vec![Tensor::from_vec(DataType::Float, shape, y)?];
    let n = ctx.node.outputs.len();
    if n > 1 {
        out.push(Tensor::from_vec(DataType::Float, &stat_shape, means)?);
    }
    if n > 2 {
        out.push(Tensor::from_vec(DataType::Float, &stat_shape, invs)?);
    }
    if n > 3 {
        out.push(Tensor::from_vec(DataType::Float, shape, sum)?);
    }
    Ok(out)
}

pub(in crate::ops) fn eval_skip_layer_norm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    skip_norm(ctx, inputs, false)
}

pub(in crate::ops) fn eval_skip_simplified_layer_norm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    skip_norm(ctx, inputs, true)
}

pub(in crate::ops) fn eval_simplified_layer_norm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, scale) = (required(inputs, 0)?, required(inputs, 1)?);
    let shape = x.shape();
    let norm = *ctx.attrs::<TrailingNorm>()?;
    let axis = norm.axis.of_rank(shape.len())?;
    let eps = norm.epsilon.0;
    let width: usize = shape[axis..].iter().product();
    let g = floats(scale, "SimplifiedLayerNormalization")?;
    if g.len() != width {
        return Err(Error::Eval(format!(
            "SimplifiedLayerNormalization: scale of shape {:?} for rows of {width} elements",
            scale.shape()
        )));
    }
    let src = floats(x, "SimplifiedLayerNormalization")?;
    let mut y = try_vec(src.len(), 0.0f32)?;
    let (_, invs) = normalize(src, width, (g, None), eps, true, &mut y)?;
    let mut out = vec![Tensor::from_vec(DataType::Float, shape, y)?];
    if ctx.node.outputs.len() > 1 {
        let mut stat_shape = shape[..axis].to_vec();
        stat_shape.resize(shape.len(), 1);
        out.push(Tensor::from_vec(DataType::Float, &stat_shape, invs)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn close(a: &Tensor, e: &[f32]) {
        let a = a.as_slice::<f32>().unwrap();
        assert_eq!(a.len(), e.len());
        for (x, y) in a.iter().zip(e) {
            assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{a:?} vs {e:?}");
        }
    }

    #[test]
    fn skip_layer_norm_with_bias_and_sum_output() {
        let n = Node::new(
            "SkipLayerNormalization",
            "n",
            ["x", "s", "g", "b", "bias"],
            ["y", "m", "i", "sum"],
        )
        .with_domain("com.microsoft")
        .with_attr("epsilon", AttrValue::Float(0.0));
        let x = f32s(&[1, 2, 2], &[1.0, 3.0, 0.0, 0.0]);
        let skip = f32s(&[2, 2], &[1.0, 1.0, 2.0, 4.0]);
        let g = f32s(&[2], &[1.0, 2.0]);
        let b = f32s(&[2], &[0.5, 0.5]);
        let bias = f32s(&[2], &[0.0, 0.0]);
        let y = eval_node(
            &n,
            1,
            &[Some(&x), Some(&skip), Some(&g), Some(&b), Some(&bias)],
        )
        .unwrap();
        // Rows [2, 4] and [2, 4]: mean 3, std 1 -> [-1, 1].
        close(&y[0], &[-0.5, 2.5, -0.5, 2.5]);
        close(&y[1], &[3.0, 3.0]);
        close(&y[2], &[1.0, 1.0]);
        close(&y[3], &[2.0, 4.0, 2.0, 4.0]);
    }

    #[test]
    fn rms_forms() {
        let x = f32s(&[2, 2], &[3.0, 4.0, 0.0, 2.0]);
        let g = f32s(&[2], &[1.0, 10.0]);
        let n = Node::new(
            "SimplifiedLayerNormalization",
            "n",
            ["x", "g"],
            ["y", "inv"],
        )
        .with_attr("epsilon", AttrValue::Float(0.0));
        let y = eval_node(&n, 1, &[Some(&x), Some(&g)]).unwrap();
        let r0 = (12.5f32).sqrt();
        let r1 = (2.0f32).sqrt();
        close(&y[0], &[3.0 / r0, 40.0 / r0, 0.0, 20.0 / r1]);
        close(&y[1], &[1.0 / r0, 1.0 / r1]);
        let n = Node::new(
            "SkipSimplifiedLayerNormalization",
            "n",
            ["x", "s", "g"],
            ["y"],
        )
        .with_domain("com.microsoft")
        .with_attr("epsilon", AttrValue::Float(0.0));
        let zeros = f32s(&[2, 2], &[0.0; 4]);
        let y2 = eval_node(&n, 1, &[Some(&x), Some(&zeros), Some(&g)]).unwrap();
        assert_eq!(y2[0], y[0]);
    }
}
