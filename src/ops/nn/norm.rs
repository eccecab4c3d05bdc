//! The normalizations: `BatchNormalization` (opsets 1, 6, 7, 9, 14, 15),
//! `InstanceNormalization` (1, 6, 22), `LayerNormalization` (17), `GroupNormalization` (18, 21),
//! `MeanVarianceNormalization` (9, 13), `RMSNormalization` (23) and `LpNormalization` (1, 22).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__BatchNormalization.html>,
//! <https://onnx.ai/onnx/operators/onnx__InstanceNormalization.html>,
//! <https://onnx.ai/onnx/operators/onnx__LayerNormalization.html>,
//! <https://onnx.ai/onnx/operators/onnx__GroupNormalization.html>,
//! <https://onnx.ai/onnx/operators/onnx__MeanVarianceNormalization.html>.
//!
//! Every variance is the population variance, and statistics accumulate in `f64` whatever the
//! element type (at least the precision any `stash_type` asks for), except where
//! `LayerNormalization` computes in `float` as its function body does with a `float` stash: on
//! `float` input, and on `float16` / `bfloat16` rows widened and rounded as the body's `Cast`,
//! `Mul` and `Add` round (without the mean and inverse deviation outputs). `BatchNormalization` runs in
//! inference mode except at opset 14+ with `training_mode` and before opset 7 with `is_test = 0`
//! (that attribute's default), which normalize with the batch statistics; opset 14 also returns
//! the updated running mean and variance. The training outputs of opsets before 14 (mean,
//! variance, saved mean and variance) are unsupported. `consumed_inputs` (opset 1) is a hint with
//! no effect on the result and is ignored. Its parameters may be per channel or, for the `spatial = 0`
//! form of opsets before 9, per element of a sample. `GroupNormalization` takes `scale` and
//! `bias` per group (opset 18) or per channel (21); which one is read from their length.
//!
//! Why one file: the seven normalizations share their statistics (`stats`), parameter checks
//! (`params`, `channel_operands`), the row normalization (`normalize_rows`) and the affine
//! half drivers; split by operator, each file would import most of the others' helpers.

use std::mem::MaybeUninit;

use half::{bf16, f16};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_vec, Tensor, TensorError};
use crate::DataType;

use super::super::attrs::{Axes, Axis, Epsilon5, TrailingNorm};
use super::super::halves::{self, Widen};
use super::super::num::Loaded;
use super::super::util::{
    broadcast_offsets, broadcast_shapes, normalize_axis, required, strides, unsupported_type,
};
use super::super::vector::assume_written;
use super::super::{vector, Attributes, EvalCtx, InferCtx};
use super::values::{input_dims, output, store_f64s, tensor_type};
use crate::ops::num::{dispatch_real, Arith, Float, Real};

/// Mean and population variance of `values`, in `f64`.
fn stats<T: Real>(values: impl Iterator<Item = T> + Clone) -> (f64, f64) {
    let (mut n, mut sum) = (0usize, 0.0f64);
    for v in values.clone() {
        sum += v.to_f64();
        n += 1;
    }
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = sum / n as f64;
    let var = values.map(|v| (v.to_f64() - mean).powi(2)).sum::<f64>() / n as f64;
    (mean, var)
}

/// The values of a per-channel parameter input, checked to hold `len` values.
fn params<R: Real>(t: &Tensor, len: usize, what: &str) -> Result<Vec<R>> {
    if t.len() != len {
        return Err(Error::Eval(format!(
            "{what} holds {} values; expected {len}",
            t.len()
        )));
    }
    Ok(R::load(t)?.into_owned())
}

/// `f(c, x_plane, y_plane)` for every plane of `x` and `y` viewed as `(outer, channels,
/// inner)`, with `c` the plane's channel; the outer blocks on several threads.
fn each_plane<X: Sync, Y: Send>(
    x: &[X],
    y: &mut [Y],
    (channels, inner): (usize, usize),
    f: impl Fn(usize, &[X], &mut [Y]) + Sync,
) {
    let block = channels * inner;
    if block == 0 {
        return;
    }
    y.par_chunks_mut(block)
        .zip(x.par_chunks(block))
        .with_min_len(crate::par::min_len(x.len() / block, &[block]))
        .for_each(|(yb, xb)| {
            for (c, (yc, xc)) in yb.chunks_mut(inner).zip(xb.chunks(inner)).enumerate() {
                f(c, xc, yc);
            }
        });
}

/// `y = x * a[c] + b[c]` over `x` (and `y`) viewed as `(outer, channels, inner)`.
fn affine<R: Real>(x: &[R], a: &[R], b: &[R], inner: usize, y: &mut [R]) {
    each_plane(x, y, (a.len(), inner), |c, xc, yc| {
        let (ac, bc) = (a[c], b[c]);
        for (yv, &xv) in yc.iter_mut().zip(xc) {
            *yv = xv * ac + bc;
        }
    });
}

/// [`affine`] of a `float16` or `bfloat16` tensor `x` into a tensor of its type, in `f32` a
/// block at a time (widened, mapped and rounded in cache, the same bits as the `f32` loop on
/// the widened tensor); `None` for other types. On the float16 ResNet-50 (Intel Xeon family 6
/// model 167, one thread, `run --profile`) its 53 normalisations took 10.0 ms through a widened
/// copy, 4.2 ms by blocks.
fn half_affine<R: Real>(x: &Tensor, a: &[R], b: &[R], inner: usize) -> Result<Option<Tensor>> {
    fn run<T: Widen + bytemuck::Pod>(
        x: &Tensor,
        a: &[f32],
        b: &[f32],
        inner: usize,
    ) -> Result<Tensor> {
        let xs = x.as_slice::<T>()?;
        Ok(Tensor::uninit(x.dtype(), x.shape())?.fill(|d| {
            each_plane(xs, d, (a.len(), inner), |c, xc, yc| {
                let (ac, bc) = (a[c], b[c]);
                halves::map_blocks(xc, yc, |v| v * ac + bc);
            });
            // SAFETY: the planes of `a.len() * inner` elements cover `d` (as long as `x`).
            unsafe { assume_written(d) }
        })?)
    }
    if !matches!(x.dtype(), DataType::Float16 | DataType::Bfloat16) {
        return Ok(None);
    }
    let (a, b): (Vec<f32>, Vec<f32>) = a
        .iter()
        .zip(b)
        .map(|(a, b)| (a.to_f32(), b.to_f32()))
        .unzip();
    Ok(Some(match x.dtype() {
        DataType::Float16 => run::<f16>(x, &a, &b, inner)?,
        _ => run::<bf16>(x, &a, &b, inner)?,
    }))
}

/// The attributes of a `BatchNormalization` node (`training_mode` is read from opset 14 on).
#[derive(Clone, Copy, Debug)]
pub(super) struct BatchNormAttrs {
    training: bool,
    epsilon: Epsilon5,
    momentum: f32,
}

impl Attributes for BatchNormAttrs {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<BatchNormAttrs> {
        Ok(BatchNormAttrs {
            // Before opset 7, `is_test = 0` (the default) is training mode.
            training: match opset {
                ..=6 => node.attr_int("is_test", 0)? == 0,
                7..=13 => false,
                _ => node.attr_int("training_mode", 0)? != 0,
            },
            epsilon: Epsilon5::parse(node, opset)?,
            momentum: node.attr_float("momentum", 0.9)?,
        })
    }
}

pub(super) fn eval_batch_norm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| required(inputs, i));
    let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
    let shape = x.shape();
    if shape.len() < 2 {
        return Err(ctx.error(format!("X {shape:?} needs a batch and a channel dim")));
    }
    let attrs = *ctx.attrs::<BatchNormAttrs>()?;
    let training = attrs.training;
    if ctx.opset < 14 && ctx.node.outputs.len() > 1 {
        return Err(Error::Unsupported(format!(
            "BatchNormalization training outputs at opset {}",
            ctx.opset
        )));
    }
    // Per channel, or per element of a sample (`spatial = 0` before opset 9).
    let per_sample: usize = shape[1..].iter().product();
    let channels = if scale.len() == shape[1] || training {
        shape[1]
    } else {
        per_sample
    };
    let inner = per_sample.checked_div(channels).unwrap_or(0);
    let eps = attrs.epsilon.0 as f64;
    let momentum = attrs.momentum as f64;
    let dtype = x.dtype();
    dispatch_real!(dtype, R => {
        // Halves are widened a block at a time below, unless the batch's statistics need them.
        let xv = match training || !matches!(dtype, DataType::Float16 | DataType::Bfloat16) {
            true => R::load(x)?,
            false => Loaded::Borrowed(&[]),
        };
        let s = params::<R>(scale, channels, "scale")?;
        let b = params::<R>(bias, channels, "B")?;
        let m = params::<R>(mean, channels, "input_mean")?;
        let v = params::<R>(var, channels, "input_var")?;
        let (use_mean, use_var): (Vec<f64>, Vec<f64>) = if training {
            (0..channels)
                .map(|c| {
                    stats(
                        xv.chunks(per_sample.max(1))
                            .flat_map(|sample| &sample[c * inner..(c + 1) * inner])
                            .copied(),
                    )
                })
                .unzip()
        } else {
            (m.iter().map(|v| v.to_f64()).collect(), v.iter().map(|v| v.to_f64()).collect())
        };
        let a: Vec<R> = (0..channels)
            .map(|c| R::from_f64(s[c].to_f64() / (use_var[c] + eps).sqrt()))
            .collect();
        let shift: Vec<R> = (0..channels)
            .map(|c| R::from_f64(b[c].to_f64() - use_mean[c] * a[c].to_f64()))
            .collect();
        let mut outs = vec![match half_affine(x, &a, &shift, inner)? {
            Some(y) => y,
            None => output::<R>(dtype, shape, |y| {
                affine(&xv, &a, &shift, inner, y);
                Ok(())
            })?,
        }];
        if training {
            let running = |input: &[R], batch: &[f64]| -> Vec<f64> {
                input
                    .iter()
                    .zip(batch)
                    .map(|(&i, &b)| i.to_f64() * momentum + b * (1.0 - momentum))
                    .collect()
            };
            outs.push(store_f64s(mean.dtype(), &[channels], &running(&m, &use_mean))?);
            outs.push(store_f64s(var.dtype(), &[channels], &running(&v, &use_var))?);
        }
        outs.truncate(ctx.node.outputs.len().max(1));
        Ok(outs)
    }, _ => Err(unsupported_type("BatchNormalization", dtype)))
}

/// Normalizes each of the `rows` consecutive blocks of `x` by its own mean and variance, then
/// applies `y = norm * scale(row, j) + bias(row, j)` with `j` the position within the block.
/// Returns the values and each row's mean and inverse standard deviation.
fn normalize_rows<R: Real>(
    x: &[R],
    row_len: usize,
    eps: f64,
    scale_bias: impl Fn(usize, usize) -> (R, R) + Sync,
) -> Result<(Vec<R>, Vec<f64>, Vec<f64>)> {
    let mut y = try_vec(x.len(), R::ZERO)?;
    if row_len == 0 {
        return Ok((y, Vec::new(), Vec::new()));
    }
    let row_stats: Vec<(f64, f64)> = y
        .par_chunks_mut(row_len)
        .zip(x.par_chunks(row_len))
        .enumerate()
        .with_min_len(crate::par::min_len(x.len() / row_len, &[2, row_len]))
        .map(|(r, (yr, xr))| {
            let (mean, var) = stats(xr.iter().copied());
            let inv = 1.0 / (var + eps).sqrt();
            let (m, i) = (R::from_f64(mean), R::from_f64(inv));
            for (j, (yv, &xv)) in yr.iter_mut().zip(xr).enumerate() {
                let (s, b) = scale_bias(r, j);
                *yv = (xv - m) * i * s + b;
            }
            (mean, inv)
        })
        .collect();
    let (means, invs) = row_stats.into_iter().unzip();
    Ok((y, means, invs))
}

/// `X`, `scale` and `B` of a per-channel normalization; `X` must have a batch and a channel dim.
fn channel_operands<'t>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&'t Tensor>],
) -> Result<(&'t Tensor, &'t Tensor, &'t Tensor)> {
    let x = required(inputs, 0)?;
    if x.rank() < 2 {
        let shape = x.shape();
        return Err(ctx.error(format!("X {shape:?} needs a batch and a channel dim")));
    }
    Ok((x, required(inputs, 1)?, required(inputs, 2)?))
}

pub(super) fn eval_instance_norm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, scale, bias) = channel_operands(ctx, inputs)?;
    let shape = x.shape();
    let channels = shape[1];
    let plane: usize = shape[2..].iter().product();
    let eps = ctx.attrs::<Epsilon5>()?.0 as f64;
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        let s = params::<R>(scale, channels, "scale")?;
        let b = params::<R>(bias, channels, "B")?;
        let (y, _, _) = normalize_rows(&R::load(x)?, plane, eps, |r, _| (s[r % channels], b[r % channels]))?;
        R::store(dtype, shape, y)?
    }, _ => return Err(unsupported_type("InstanceNormalization", dtype)));
    Ok(vec![y])
}

/// The attributes of a `GroupNormalization` node.
#[derive(Clone, Copy, Debug)]
pub(super) struct GroupNormAttrs {
    num_groups: i64,
    epsilon: Epsilon5,
}

impl Attributes for GroupNormAttrs {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<GroupNormAttrs> {
        Ok(GroupNormAttrs {
            num_groups: node.attr_int("num_groups", 0)?,
            epsilon: Epsilon5::parse(node, opset)?,
        })
    }
}

pub(super) fn eval_group_norm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, scale, bias) = channel_operands(ctx, inputs)?;
    let shape = x.shape();
    let channels = shape[1];
    let attrs = *ctx.attrs::<GroupNormAttrs>()?;
    let groups = usize::try_from(attrs.num_groups)
        .ok()
        .filter(|&g| g > 0 && channels.is_multiple_of(g))
        .ok_or_else(|| {
            ctx.error(format!(
                "num_groups must be a positive divisor of the {channels} channels"
            ))
        })?;
    let plane: usize = shape[2..].iter().product();
    let row_len = channels / groups * plane;
    let eps = attrs.epsilon.0 as f64;
    let per_channel = scale.len() == channels;
    let n_params = if per_channel { channels } else { groups };
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        let s = params::<R>(scale, n_params, "scale")?;
        let b = params::<R>(bias, n_params, "bias")?;
        let at = |r: usize, j: usize| {
            let g = r % groups;
            let p = if per_channel { g * (channels / groups) + j / plane.max(1) } else { g };
            (s[p], b[p])
        };
        let (y, _, _) = normalize_rows(&R::load(x)?, row_len, eps, at)?;
        R::store(dtype, shape, y)?
    }, _ => return Err(unsupported_type("GroupNormalization", dtype)));
    Ok(vec![y])
}

/// The element type of `LayerNormalization`'s Mean and InvStdDev outputs for `stash_type`.
fn stash_dtype(stash: i64) -> Result<DataType> {
    match DataType::from_onnx(stash as i32) {
        Some(d @ (DataType::Float | DataType::Double | DataType::Float16 | DataType::Bfloat16)) => {
            Ok(d)
        }
        _ => Err(Error::Eval(format!(
            "stash_type {stash} is not a floating-point type"
        ))),
    }
}

/// The attributes of a `LayerNormalization` or `RMSNormalization` node: the normalised dims,
/// `epsilon`, and the type of the statistics (`stash_type`, checked to be a float type).
#[derive(Clone, Copy, Debug)]
pub(super) struct LayerNormAttrs {
    norm: TrailingNorm,
    stash: DataType,
}

impl Attributes for LayerNormAttrs {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<LayerNormAttrs> {
        Ok(LayerNormAttrs {
            norm: TrailingNorm::parse(node, opset)?,
            stash: stash_dtype(node.attr_int("stash_type", 1)?)?,
        })
    }
}

pub(super) fn eval_layer_norm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, scale) = (required(inputs, 0)?, required(inputs, 1)?);
    let bias = super::super::util::optional(inputs, 2);
    let shape = x.shape();
    let LayerNormAttrs { norm, stash } = *ctx.attrs::<LayerNormAttrs>()?;
    let axis = norm.axis.of_rank(shape.len())?;
    let eps = norm.epsilon.0 as f64;
    let row_len: usize = shape[axis..].iter().product();
    let offsets = |t: &Tensor| param_offsets(t, shape, axis);
    let scale_at = offsets(scale)?;
    let bias_at = bias.map(offsets).transpose()?.flatten();
    let dtype = x.dtype();
    // The common case: float, scale and bias along the normalised dims, no statistics asked for.
    let trailing = scale_at.is_none() && bias.is_none_or(|_| bias_at.is_none());
    if dtype == DataType::Float && trailing && ctx.node.outputs.len() <= 1 {
        let src = x.as_slice::<f32>()?;
        let s = scale.as_slice::<f32>()?;
        let zeros;
        let b = match bias {
            Some(b) => b.as_slice::<f32>()?,
            None => {
                zeros = vec![0.0f32; row_len];
                &zeros
            }
        };
        let out = Tensor::uninit(dtype, shape)?;
        let y = out.fill(|dst| vector::layer_norm_rows(src, s, b, eps as f32, dst))?;
        return Ok(vec![y]);
    }
    if trailing && ctx.node.outputs.len() <= 1 && stash == DataType::Float {
        let y = match dtype {
            DataType::Float16 => half_layer_norm::<f16>(x, scale, bias, eps as f32)?,
            DataType::Bfloat16 => half_layer_norm::<bf16>(x, scale, bias, eps as f32)?,
            _ => None,
        };
        if let Some(y) = y {
            return Ok(vec![y]);
        }
    }
    let (y, means, invs) = dispatch_real!(dtype, R => {
        let s = R::load(scale)?;
        let b = bias.map(R::load).transpose()?;
        let pick = |v: &[R], at: &Option<Vec<usize>>, r: usize, j: usize| match at {
            None => v[j],
            Some(o) => v[o[r * row_len + j]],
        };
        let (y, m, i) = normalize_rows(&R::load(x)?, row_len, eps, |r, j| {
            (pick(&s, &scale_at, r, j), b.as_ref().map_or(R::ZERO, |b| pick(b, &bias_at, r, j)))
        })?;
        (R::store(dtype, shape, y)?, m, i)
    }, _ => return Err(unsupported_type("LayerNormalization", dtype)));
    let mut stat_shape = shape[..axis].to_vec();
    stat_shape.resize(shape.len(), 1);
    let mut outs = vec![
        y,
        store_f64s(stash, &stat_shape, &means)?,
        store_f64s(stash, &stat_shape, &invs)?,
    ];
    outs.truncate(ctx.node.outputs.len().max(1));
    Ok(outs)
}

/// `LayerNormalization` of a `float16` or `bfloat16` `x` along its trailing dims with `float`
/// statistics, as the operator's function body computes it: each row widened, normalised in
/// `f32` (the bits of the `float` kernel's normalisation) and rounded to `T`, then multiplied by
/// `scale` and added to `bias` as `Mul` and `Add` of `T` do, each result rounded once. `None`
/// when `scale` or `bias` is not of `x`'s type.
fn half_layer_norm<T: Widen + Float>(
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
    eps: f32,
) -> Result<Option<Tensor>> {
    if scale.dtype() != T::DTYPE || bias.is_some_and(|b| b.dtype() != T::DTYPE) {
        return Ok(None);
    }
    let (src, s) = (x.as_slice::<T>()?, scale.as_slice::<T>()?);
    let b = bias.map(|b| b.as_slice::<T>()).transpose()?;
    let row_len = s.len();
    if row_len == 0 || b.is_some_and(|b| b.len() != row_len) || src.len() % row_len != 0 {
        return Ok(None);
    }
    let out = Tensor::uninit(T::DTYPE, x.shape())?;
    let y = out.try_fill(|dst: &mut [MaybeUninit<T>]| -> Result<&mut [T]> {
        // Per task: the widened row, its normalisation, and two rows of `T`.
        let scratch = || {
            let wide = try_vec(2 * row_len, MaybeUninit::<f32>::uninit())?;
            Ok::<_, TensorError>((wide, try_vec(2 * row_len, MaybeUninit::<T>::uninit())?))
        };
        let rows = src.len() / row_len;
        src.par_chunks(row_len)
            .zip(dst.par_chunks_mut(row_len))
            .with_min_len(crate::par::min_len(rows, &[8 * row_len]))
            .try_for_each_init(scratch, |buffers, (xr, yr)| -> Result<()> {
                let (wide, narrow) = buffers.as_mut().map_err(|e| e.clone())?;
                let (w, n) = wide.split_at_mut(row_len);
                let (normalized, scaled) = narrow.split_at_mut(row_len);
                let n = vector::normalize_row(T::widen_slice(xr, w), eps, n);
                let normalized = T::narrow_slice(n, normalized);
                match b {
                    Some(b) => {
                        let scaled = halves::zip_blocks(normalized, s, scaled, |a, b| a * b);
                        halves::zip_blocks(scaled, b, yr, |a, b| a + b);
                    }
                    None => {
                        halves::zip_blocks(normalized, s, yr, |a, b| a * b);
                    }
                }
                Ok(())
            })?;
        // SAFETY: every row of the output was written by `zip_blocks`.
        Ok(unsafe { assume_written(dst) })
    })?;
    Ok(Some(y))
}

/// Where each element of X finds its value of a parameter `t` broadcast to X: `None` for the
/// usual shape, X's normalized dims from `axis` on (indexed by position within a row), else one
/// offset per element of X.
fn param_offsets(t: &Tensor, shape: &[usize], axis: usize) -> Result<Option<Vec<usize>>> {
    let s = t.shape();
    let row_len: usize = shape[axis..].iter().product();
    let trailing = s.iter().skip_while(|&&d| d == 1).count() <= shape.len() - axis
        && t.len() == row_len
        && s.iter().rev().zip(shape.iter().rev()).all(|(a, b)| a == b);
    if trailing {
        return Ok(None);
    }
    if broadcast_shapes(&[s, shape])? != shape {
        return Err(Error::Eval(format!(
            "{s:?} does not broadcast to X {shape:?}"
        )));
    }
    Ok(Some(broadcast_offsets(s, shape)))
}

/// `RMSNormalization` (opset 23): `y = x / sqrt(mean(x²) + epsilon) * scale`, the mean over the
/// dims from `axis` on, accumulated in `f64`.
pub(super) fn eval_rms_norm(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, scale) = (required(inputs, 0)?, required(inputs, 1)?);
    let shape = x.shape();
    let norm = ctx.attrs::<LayerNormAttrs>()?.norm;
    let axis = norm.axis.of_rank(shape.len())?;
    let eps = norm.epsilon.0 as f64;
    let row_len: usize = shape[axis..].iter().product();
    let scale_at = param_offsets(scale, shape, axis)?;
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        let xv = R::load(x)?;
        let s = R::load(scale)?;
        output::<R>(dtype, shape, |y| {
            if row_len == 0 {
                return Ok(());
            }
            y.par_chunks_mut(row_len)
                .zip(xv.par_chunks(row_len))
                .enumerate()
                .with_min_len(crate::par::min_len(xv.len() / row_len, &[2, row_len]))
                .for_each(|(r, (yr, xr))| {
                    let sq: f64 = xr.iter().map(|v| v.to_f64() * v.to_f64()).sum();
                    let inv = R::from_f64(1.0 / (sq / row_len as f64 + eps).sqrt());
                    match &scale_at {
                        None => {
                            for ((yv, &xv), &sv) in yr.iter_mut().zip(xr).zip(s.iter()) {
                                *yv = xv * inv * sv;
                            }
                        }
                        Some(o) => {
                            let o = &o[r * row_len..][..row_len];
                            for ((yv, &xv), &k) in yr.iter_mut().zip(xr).zip(o) {
                                *yv = xv * inv * s[k];
                            }
                        }
                    }
                });
            Ok(())
        })?
    }, _ => return Err(unsupported_type("RMSNormalization", dtype)));
    Ok(vec![y])
}

/// The attributes of an `LpNormalization` node: `axis`, and `p` checked to be 1 or 2.
#[derive(Clone, Copy, Debug)]
pub(super) struct LpNormAttrs {
    axis: Axis<-1>,
    p: i64,
}

impl Attributes for LpNormAttrs {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<LpNormAttrs> {
        let p = node.attr_int("p", 2)?;
        if p != 1 && p != 2 {
            return Err(Error::Eval(format!("p must be 1 or 2, found {p}")));
        }
        Ok(LpNormAttrs {
            axis: Axis::parse(node, opset)?,
            p,
        })
    }
}

/// `LpNormalization` (opsets 1, 22): `x / ||x||_p` along `axis` (`p` 1 or 2); a zero norm gives 0.
pub(super) fn eval_lp_norm(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let shape = x.shape();
    let LpNormAttrs { axis, p } = *ctx.attrs::<LpNormAttrs>()?;
    let axis = axis.of_rank(shape.len())?;
    let size = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        let xv = R::load(x)?;
        output::<R>(dtype, shape, |y| {
            let block = size * inner;
            if block == 0 {
                return Ok(());
            }
            for (yb, xb) in y.chunks_mut(block).zip(xv.chunks(block)) {
                for k in 0..inner {
                    let norm: f64 = (0..size).map(|i| xb[i * inner + k].to_f64()).map(|v| {
                        if p == 1 { v.abs() } else { v * v }
                    }).sum();
                    let norm = if p == 1 { norm } else { norm.sqrt() };
                    for i in 0..size {
                        let v = xb[i * inner + k].to_f64();
                        yb[i * inner + k] = R::from_f64(if norm == 0.0 { 0.0 } else { v / norm });
                    }
                }
            }
            Ok(())
        })?
    }, _ => return Err(unsupported_type("LpNormalization", dtype)));
    Ok(vec![y])
}

pub(super) fn eval_mvn(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let shape = x.shape();
    let axes: Vec<usize> = match &ctx.attrs::<Axes>()?.0 {
        Some(a) => a
            .iter()
            .map(|&a| normalize_axis(a, shape.len()))
            .collect::<Result<_>>()?,
        None => vec![0, 2, 3]
            .into_iter()
            .filter(|&a| a < shape.len())
            .collect(),
    };
    // Each element's group: its index over the dims not reduced.
    let st = strides(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let kept_st = strides(&kept_shape);
    let groups: usize = kept_shape.iter().product();
    let group_of = |i: usize| -> usize {
        kept.iter()
            .zip(&kept_st)
            .map(|(&d, &ks)| (i / st[d]) % shape[d] * ks)
            .sum()
    };
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        let xv = R::load(x)?;
        let membership: Vec<usize> = (0..xv.len()).map(group_of).collect();
        let mut sum = vec![0.0f64; groups];
        let mut count = vec![0usize; groups];
        for (&g, v) in membership.iter().zip(xv.iter()) {
            sum[g] += v.to_f64();
            count[g] += 1;
        }
        let mean: Vec<f64> = sum.iter().zip(&count).map(|(&s, &c)| s / c.max(1) as f64).collect();
        let mut sq = vec![0.0f64; groups];
        for (&g, v) in membership.iter().zip(xv.iter()) {
            sq[g] += (v.to_f64() - mean[g]).powi(2);
        }
        let std: Vec<f64> = sq.iter().zip(&count).map(|(&s, &c)| (s / c.max(1) as f64).sqrt()).collect();
        let y: Vec<R> = membership
            .iter()
            .zip(xv.iter())
            .map(|(&g, v)| R::from_f64((v.to_f64() - mean[g]) / (std[g] + 1e-9)))
            .collect();
        R::store(dtype, shape, y)?
    }, _ => return Err(unsupported_type("MeanVarianceNormalization", dtype)));
    Ok(vec![y])
}

pub(super) fn infer_batch_norm(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let mut outs = vec![ctx.input(0).cloned().unwrap_or_default()];
    for i in [3, 4] {
        if ctx.node.outputs.len() > outs.len() {
            outs.push(ctx.input(i).cloned().unwrap_or_default());
        }
    }
    Ok(outs)
}

pub(super) fn infer_layer_norm(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let x = ctx.input(0).cloned().unwrap_or_default();
    let LayerNormAttrs { norm, stash } = *ctx.attrs::<LayerNormAttrs>()?;
    let stat_dims = input_dims(ctx, 0).and_then(|d| {
        let axis = norm.axis.of_rank(d.len()).ok()?;
        let mut s = d[..axis].to_vec();
        s.resize(d.len(), Dim::Known(1));
        Some(s)
    });
    let stat = tensor_type(Some(stash), stat_dims);
    Ok(vec![x, stat.clone(), stat])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;

    use super::*;

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    fn close(t: &Tensor, want: &[f32]) {
        let v = t.as_slice::<f32>().unwrap();
        assert_eq!(v.len(), want.len());
        for (a, b) in v.iter().zip(want) {
            assert!((a - b).abs() < 1e-4, "{v:?} != {want:?}");
        }
    }

    #[test]
    fn batch_norm_inference_and_training() {
        // The ONNX batchnorm example: x [1, 2, 1, 3].
        let x = f32s(&[1, 2, 1, 3], vec![-1.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
        let s = f32s(&[2], vec![1.0, 1.5]);
        let b = f32s(&[2], vec![0.0, 1.0]);
        let m = f32s(&[2], vec![0.0, 3.0]);
        let v = f32s(&[2], vec![1.0, 1.5]);
        let inputs = [Some(&x), Some(&s), Some(&b), Some(&m), Some(&v)];
        let node = Node::new("BatchNormalization", "bn", ["x", "s", "b", "m", "v"], ["y"]);
        let y = eval_node(&node, 15, &inputs).unwrap();
        close(
            &y[0],
            &[-0.999995, 0.0, 0.999995, -0.22474074, 1.0, 2.2247407],
        );
        let node = Node::new(
            "BatchNormalization",
            "bn",
            ["x", "s", "b", "m", "v"],
            ["y", "rm", "rv"],
        )
        .with_attr("training_mode", AttrValue::Int(1));
        let y = eval_node(&node, 15, &inputs).unwrap();
        // Batch means 0 and 3, variances 2/3; running = 0.9 * input + 0.1 * batch.
        close(&y[1], &[0.0, 3.0]);
        close(&y[2], &[0.9 + 0.2 / 3.0, 1.35 + 0.2 / 3.0]);
        let bad = f32s(&[3], vec![0.0; 3]);
        let err = eval_node(
            &node,
            15,
            &[Some(&x), Some(&bad), Some(&b), Some(&m), Some(&v)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("expected 2"), "{err}");
    }

    /// `t` cast to `to` by the `Cast` kernel.
    fn cast(t: &Tensor, to: DataType) -> Tensor {
        let node = Node::new("Cast", "c", ["x"], ["y"]).with_attr("to", AttrValue::Int(to as i64));
        eval_node(&node, 21, &[Some(t)]).unwrap().remove(0)
    }

    #[test]
    fn batch_norm_of_halves_rounds_the_f32_normalisation_once() {
        // Planes longer than one block of the half loops, values across the half range.
        let shape = [2, 3, 5, 211];
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 1001) as f32 - 500.0) * 0.173)
            .collect();
        let params = |v: [f32; 3]| f32s(&[3], v.to_vec());
        let node = Node::new("BatchNormalization", "n", ["x", "s", "b", "m", "v"], ["y"]);
        let [s, b, m, v] = [
            params([0.5, -1.25, 3.0]),
            params([0.1, 2.0, -7.5]),
            params([1.0, -3.0, 0.25]),
            params([2.0, 0.5, 9.0]),
        ];
        let run = |x: &Tensor| {
            eval_node(
                &node,
                15,
                &[Some(x), Some(&s), Some(&b), Some(&m), Some(&v)],
            )
            .unwrap()
            .remove(0)
        };
        for dtype in [DataType::Float16, DataType::Bfloat16] {
            let half = cast(&f32s(&shape, values.clone()), dtype);
            let want = cast(&run(&cast(&half, DataType::Float)), dtype);
            let got = run(&half);
            assert_eq!(got.dtype(), dtype);
            assert_eq!(
                got.as_bytes().unwrap(),
                want.as_bytes().unwrap(),
                "{dtype:?}"
            );
        }
    }

    #[test]
    fn layer_norm_of_halves_follows_the_function_body() {
        let binary = |op: &str, a: &Tensor, b: &Tensor| {
            let node = Node::new(op, "op", ["a", "b"], ["y"]);
            eval_node(&node, 14, &[Some(a), Some(b)]).unwrap().remove(0)
        };
        let wave = |n: usize, k: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * k % 1009) as f32 - 504.5) * scale)
                .collect()
        };
        // Rows longer than one block of the half loops, on two threads' worth of rows.
        let (shape, row) = ([5, 7, 300], 300);
        let n: usize = shape.iter().product();
        for dtype in [DataType::Float16, DataType::Bfloat16] {
            let x = cast(&f32s(&shape, wave(n, 37, 0.173)), dtype);
            let s = cast(&f32s(&[row], wave(row, 13, 0.01)), dtype);
            let b = cast(&f32s(&[row], wave(row, 29, 0.003)), dtype);
            let node = Node::new("LayerNormalization", "n", ["x", "s", "b"], ["y"]);
            // The function body: normalised in float, rounded, then `Mul` and `Add` of halves.
            let (ones, zeros) = (f32s(&[row], vec![1.0; row]), f32s(&[row], vec![0.0; row]));
            let wide = cast(&x, DataType::Float);
            let normalized = eval_node(&node, 17, &[Some(&wide), Some(&ones), Some(&zeros)])
                .unwrap()
                .remove(0);
            let scaled = binary("Mul", &cast(&normalized, dtype), &s);
            for (bias, want) in [
                (None, scaled.clone()),
                (Some(&b), binary("Add", &scaled, &b)),
            ] {
                let node = match bias {
                    Some(_) => node.clone(),
                    None => Node::new("LayerNormalization", "n", ["x", "s"], ["y"]),
                };
                let got = eval_node(&node, 17, &[Some(&x), Some(&s), bias]).unwrap();
                assert_eq!(got[0].dtype(), dtype);
                let (got, want) = (got[0].as_bytes().unwrap(), want.as_bytes().unwrap());
                assert_eq!(got, want, "{dtype:?}, bias {}", bias.is_some());
            }
        }
    }

    #[test]
    fn instance_and_group_norm() {
        // The ONNX instancenorm example.
        let x = f32s(&[1, 2, 1, 3], vec![-1.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
        let s = f32s(&[2], vec![1.0, 1.5]);
        let b = f32s(&[2], vec![0.0, 1.0]);
        let node = Node::new("InstanceNormalization", "n", ["x", "s", "b"], ["y"]);
        let y = eval_node(&node, 22, &[Some(&x), Some(&s), Some(&b)]).unwrap();
        close(
            &y[0],
            &[-1.2247356, 0.0, 1.2247356, -0.8371035, 1.0, 2.8371034],
        );
        // Two groups of one channel each is the instance norm again.
        let node = Node::new("GroupNormalization", "n", ["x", "s", "b"], ["y"])
            .with_attr("num_groups", AttrValue::Int(2));
        let g = eval_node(&node, 21, &[Some(&x), Some(&s), Some(&b)]).unwrap();
        close(&g[0], y[0].as_slice::<f32>().unwrap());
        let node = Node::new("GroupNormalization", "n", ["x", "s", "b"], ["y"])
            .with_attr("num_groups", AttrValue::Int(3));
        let err = eval_node(&node, 21, &[Some(&x), Some(&s), Some(&b)]).unwrap_err();
        assert!(err.to_string().contains("divisor"), "{err}");
    }

    #[test]
    fn layer_norm_returns_mean_and_inverse_std() {
        let x = f32s(&[2, 2], vec![1.0, 3.0, 2.0, 4.0]);
        let s = f32s(&[2], vec![1.0, 2.0]);
        let node = Node::new("LayerNormalization", "n", ["x", "s"], ["y", "m", "i"])
            .with_attr("epsilon", AttrValue::Float(0.0));
        let y = eval_node(&node, 17, &[Some(&x), Some(&s)]).unwrap();
        close(&y[0], &[-1.0, 2.0, -1.0, 2.0]);
        assert_eq!(y[1], f32s(&[2, 1], vec![2.0, 3.0]));
        assert_eq!(y[2], f32s(&[2, 1], vec![1.0, 1.0]));
    }

    #[test]
    fn mean_variance_normalization_over_default_axes() {
        let x = f32s(&[2, 1, 1, 1], vec![1.0, 3.0]);
        let node = Node::new("MeanVarianceNormalization", "n", ["x"], ["y"]);
        let y = eval_node(&node, 13, &[Some(&x)]).unwrap();
        close(&y[0], &[-1.0, 1.0]);
    }
}
