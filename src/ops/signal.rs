//! The signal-processing operators: `DFT` (opsets 17, 20), `STFT` (17), the windows
//! `HannWindow`, `HammingWindow` and `BlackmanWindow` (17) and `MelWeightMatrix` (17).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__DFT.html>,
//! <https://onnx.ai/onnx/operators/onnx__STFT.html>,
//! <https://onnx.ai/onnx/operators/onnx__HannWindow.html> (and its siblings),
//! <https://onnx.ai/onnx/operators/onnx__MelWeightMatrix.html>.
//!
//! Signals carry a last dim of 1 (real) or 2 (real, imaginary). `DFT` transforms along `axis`
//! (an attribute up to opset 19, input 2 from 20), zero-padding or truncating to `dft_length`;
//! `onesided` keeps the `n / 2 + 1` non-negative frequencies, and with `inverse` it reads them as
//! the half spectrum of a real signal (`irfft`, real output). `STFT` windows frames of
//! `frame_length` every `frame_step` samples and transforms each. Transforms are direct sums in
//! `f64` with exact twiddles per `(k * n) mod N`, rounded once to the input's type.

use std::f64::consts::PI;

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::ops::num::Float;
use crate::ops::util::{normalize_axis, optional, required, scalar_i64, tensor_from_iter};
use crate::ops::{EvalCtx, InferCtx, OpDef};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("DFT", 17, 1..=3, 1..=1, eval_dft).with_infer(infer_dft),
    OpDef::new("STFT", 17, 2..=4, 1..=1, eval_stft).with_infer(infer_stft),
    OpDef::new("HannWindow", 17, 1..=1, 1..=1, eval_hann).with_infer(infer_window),
    OpDef::new("HammingWindow", 17, 1..=1, 1..=1, eval_hamming).with_infer(infer_window),
    OpDef::new("BlackmanWindow", 17, 1..=1, 1..=1, eval_blackman).with_infer(infer_window),
    OpDef::new("MelWeightMatrix", 17, 5..=5, 1..=1, eval_mel).with_infer(infer_mel),
];

/// The element count of `dims`, failing on overflow.
fn cells(dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::Eval(format!("an output of {dims:?} is too large")))
}

/// The values of a float tensor as `f64`.
fn f64s(t: &Tensor) -> Result<Vec<f64>> {
    crate::ops::num::dispatch_float!(t.dtype(), T => Ok(t.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect()),
        _ => Err(Error::Eval(format!("a {} signal is not floating point", t.dtype()))))
}

/// A float tensor of `dtype` holding `values`, rounded once.
fn store(dtype: DataType, shape: &[usize], values: &[f64]) -> Result<Tensor> {
    crate::ops::num::dispatch_float!(dtype, T => tensor_from_iter(dtype, shape, values.iter().map(|&v| <T as Float>::from_f64(v))),
        _ => Err(Error::Eval(format!("{dtype} is not a floating-point type"))))
}

/// `X[k] = Σ x[n] e^(∓2πi kn/N)` for `k < bins`, over `n < min(len, N)` of the complex input.
fn dft_line(
    re: &[f64],
    im: &[f64],
    n_fft: usize,
    bins: usize,
    inverse: bool,
    out: &mut [(f64, f64)],
) {
    let sign = if inverse { 1.0 } else { -1.0 };
    let n = re.len().min(n_fft);
    for (k, o) in out.iter_mut().enumerate().take(bins) {
        let (mut sr, mut si) = (0.0, 0.0);
        for j in 0..n {
            let angle = sign * 2.0 * PI * ((k * j) % n_fft) as f64 / n_fft as f64;
            let (s, c) = angle.sin_cos();
            sr += re[j] * c - im[j] * s;
            si += re[j] * s + im[j] * c;
        }
        *o = (sr, si);
    }
}

/// The DFT parameters of a node: axis (of the signal dims), length, inverse, onesided.
fn dft_params(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>], x: &Tensor) -> Result<(usize, usize)> {
    let rank = x.rank();
    let axis = if ctx.opset >= 20 {
        match optional(inputs, 2) {
            Some(a) => scalar_i64(a)?,
            None => -2,
        }
    } else {
        ctx.node.attr_int("axis", 1)?
    };
    let axis = normalize_axis(axis, rank)?;
    if axis + 1 == rank {
        return Err(ctx.error("axis cannot be the real/imaginary dim"));
    }
    let inverse = ctx.node.attr_int("inverse", 0)? != 0;
    let onesided = ctx.node.attr_int("onesided", 0)? != 0;
    let len = match optional(inputs, 1) {
        Some(l) => usize::try_from(scalar_i64(l)?)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| ctx.error("dft_length must be positive"))?,
        None if inverse && onesided => 2 * x.shape()[axis].saturating_sub(1),
        None => x.shape()[axis],
    };
    Ok((axis, len))
}

fn eval_dft(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let shape = x.shape();
    let comps = shape.last().copied().unwrap_or(0);
    if shape.len() < 2 || !(comps == 1 || comps == 2) {
        return Err(ctx.error(format!("input {shape:?} does not end in 1 or 2")));
    }
    let (axis, n_fft) = dft_params(ctx, inputs, x)?;
    let inverse = ctx.node.attr_int("inverse", 0)? != 0;
    let onesided = ctx.node.attr_int("onesided", 0)? != 0;
    let len = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..shape.len() - 1].iter().product();
    let values = f64s(x)?;
    let irfft = inverse && onesided;
    let out_len = match (inverse, onesided) {
        (false, true) => n_fft / 2 + 1,
        _ => n_fft,
    };
    let out_comps = if irfft { 1 } else { 2 };
    let mut out = try_vec(cells(&[outer, out_len, inner, out_comps])?, 0.0f64)?;
    let (mut re, mut im) = (try_vec(n_fft.max(len), 0.0)?, try_vec(n_fft.max(len), 0.0)?);
    let mut line = try_vec(n_fft, (0.0, 0.0))?;
    for o in 0..outer {
        for i in 0..inner {
            re.fill(0.0);
            im.fill(0.0);
            let at = |j: usize| ((o * len + j) * inner + i) * comps;
            if irfft {
                // Rebuild the full spectrum from the half: X[N - k] = conj(X[k]).
                let half = n_fft / 2 + 1;
                for k in 0..half.min(len) {
                    re[k] = values[at(k)];
                    im[k] = if comps == 2 { values[at(k) + 1] } else { 0.0 };
                }
                im[0] = 0.0;
                if n_fft % 2 == 0 && n_fft / 2 < len {
                    im[n_fft / 2] = 0.0;
                }
                for k in half..n_fft {
                    re[k] = re[n_fft - k];
                    im[k] = -im[n_fft - k];
                }
                dft_line(&re[..n_fft], &im[..n_fft], n_fft, n_fft, true, &mut line);
            } else {
                for j in 0..len.min(n_fft) {
                    re[j] = values[at(j)];
                    im[j] = if comps == 2 { values[at(j) + 1] } else { 0.0 };
                }
                dft_line(
                    &re[..n_fft],
                    &im[..n_fft],
                    n_fft,
                    out_len,
                    inverse,
                    &mut line,
                );
            }
            let scale = if inverse { 1.0 / n_fft as f64 } else { 1.0 };
            for (k, &(r, im)) in line.iter().enumerate().take(out_len) {
                let dst = ((o * out_len + k) * inner + i) * out_comps;
                out[dst] = r * scale;
                if out_comps == 2 {
                    out[dst + 1] = im * scale;
                }
            }
        }
    }
    let mut out_shape = shape.to_vec();
    out_shape[axis] = out_len;
    *out_shape.last_mut().unwrap_or(&mut 0) = out_comps;
    Ok(vec![store(x.dtype(), &out_shape, &out)?])
}

fn infer_dft(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    // The output length depends on inputs that may not be constant; the type is the input's.
    let elem = ctx.input(0).and_then(|t| t.elem);
    let rank = ctx
        .input(0)
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dims.len());
    Ok(vec![TensorType {
        elem,
        shape: rank.map(|r| crate::ir::Shape::new(vec![Dim::Unknown; r])),
    }])
}

/// The value of input `i` when it is a constant scalar (or one-element tensor) of an integer type.
fn constant_int(ctx: &InferCtx<'_>, i: usize) -> Option<i64> {
    ctx.constant(i).and_then(|t| scalar_i64(t).ok())
}

/// `[batch, frames, bins, 2]`: frames and bins where `frame_step`, the signal length and the
/// frame length (`frame_length`, else the window's length, else the signal's) are known.
fn infer_stft(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let dims = ctx.input(0).and_then(|t| t.shape.as_ref()).map(|s| &s.dims);
    let (batch, len) = match dims.map(Vec::as_slice) {
        Some([b, l, _]) | Some([b, l]) => (b.clone(), l.known()),
        _ => (Dim::Unknown, None),
    };
    let frame = match (
        constant_int(ctx, 3),
        ctx.input(2).and_then(|t| t.shape.as_ref()),
    ) {
        (Some(f), _) => Some(f),
        (None, Some(w)) if ctx.inputs.get(2).is_some_and(Option::is_some) => {
            w.dims.first().and_then(Dim::known)
        }
        _ if ctx.node.inputs.get(2).is_none_or(String::is_empty)
            && ctx.node.inputs.get(3).is_none_or(String::is_empty) =>
        {
            len
        }
        _ => None,
    };
    let frames = match (len, frame, constant_int(ctx, 1)) {
        (Some(l), Some(f), Some(step)) if f > 0 && f <= l && step > 0 => {
            Dim::Known(1 + (l - f) / step)
        }
        _ => Dim::Unknown,
    };
    let onesided = ctx.node.attr_int("onesided", 1)? != 0;
    let bins = match frame {
        Some(f) if f > 0 => Dim::Known(if onesided { f / 2 + 1 } else { f }),
        _ => Dim::Unknown,
    };
    Ok(vec![TensorType {
        elem,
        shape: Some(crate::ir::Shape::new(vec![
            batch,
            frames,
            bins,
            Dim::Known(2),
        ])),
    }])
}

/// The element type `output_datatype` names (float by default), for static inference.
fn declared_output_type(ctx: &InferCtx<'_>) -> Result<Option<DataType>> {
    let code = ctx.node.attr_int("output_datatype", 1)?;
    Ok(i32::try_from(code).ok().and_then(DataType::from_onnx))
}

/// `[size]` of `output_datatype`.
fn infer_window(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let size = constant_int(ctx, 0)
        .filter(|&s| s >= 0)
        .map_or(Dim::Unknown, Dim::Known);
    Ok(vec![TensorType {
        elem: declared_output_type(ctx)?,
        shape: Some(crate::ir::Shape::new(vec![size])),
    }])
}

/// `[dft_length / 2 + 1, num_mel_bins]` of `output_datatype`.
fn infer_mel(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let known = |i: usize, f: fn(i64) -> i64| {
        constant_int(ctx, i)
            .filter(|&v| v >= 0)
            .map_or(Dim::Unknown, |v| Dim::Known(f(v)))
    };
    Ok(vec![TensorType {
        elem: declared_output_type(ctx)?,
        shape: Some(crate::ir::Shape::new(vec![
            known(1, |d| d / 2 + 1),
            known(0, |m| m),
        ])),
    }])
}

fn eval_stft(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let step = usize::try_from(scalar_i64(required(inputs, 1)?)?)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| ctx.error("frame_step must be positive"))?;
    let shape = x.shape();
    // onnxruntime also takes a real signal without its trailing 1, `(batch, length)`: only one
    // reading exists (docs/conformance.md).
    let (batch, len, comps) = match *shape {
        [batch, len, comps] => (batch, len, comps),
        [batch, len] => (batch, len, 1),
        _ => {
            return Err(ctx.error(format!(
                "signal {shape:?} is not (batch, length, 1 or 2) or (batch, length)"
            )))
        }
    };
    if comps != 1 && comps != 2 {
        return Err(ctx.error(format!("signal {shape:?} does not end in 1 or 2")));
    }
    let window = optional(inputs, 2).map(f64s).transpose()?;
    let frame = match (optional(inputs, 3), &window) {
        (Some(f), _) => {
            usize::try_from(scalar_i64(f)?).map_err(|_| ctx.error("negative frame_length"))?
        }
        (None, Some(w)) => w.len(),
        (None, None) => len,
    };
    if frame == 0 || frame > len || window.as_ref().is_some_and(|w| w.len() != frame) {
        return Err(ctx.error(format!(
            "frame_length {frame} does not fit the signal of {len} and the window"
        )));
    }
    let onesided = ctx.node.attr_int("onesided", 1)? != 0;
    let frames = 1 + (len - frame) / step;
    let bins = if onesided { frame / 2 + 1 } else { frame };
    let values = f64s(x)?;
    let mut out = try_vec(batch * frames * bins * 2, 0.0f64)?;
    let (mut re, mut im) = (try_vec(frame, 0.0)?, try_vec(frame, 0.0)?);
    let mut line = try_vec(bins, (0.0, 0.0))?;
    for b in 0..batch {
        for f in 0..frames {
            for j in 0..frame {
                let w = window.as_ref().map_or(1.0, |w| w[j]);
                let at = (b * len + f * step + j) * comps;
                re[j] = values[at] * w;
                im[j] = if comps == 2 { values[at + 1] * w } else { 0.0 };
            }
            dft_line(&re, &im, frame, bins, false, &mut line);
            for (k, &(r, i)) in line.iter().enumerate() {
                let dst = ((b * frames + f) * bins + k) * 2;
                out[dst] = r;
                out[dst + 1] = i;
            }
        }
    }
    Ok(vec![store(x.dtype(), &[batch, frames, bins, 2], &out)?])
}

/// The element type a window or matrix is written in (`output_datatype`, float by default).
fn output_type(ctx: &EvalCtx<'_>) -> Result<DataType> {
    let code = ctx.node.attr_int("output_datatype", 1)?;
    i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| ctx.error(format!("output_datatype {code} is not an element type")))
}

/// Writes `values` as `dtype`, which may also be an integer type (values truncated).
fn store_any(dtype: DataType, shape: &[usize], values: &[f64]) -> Result<Tensor> {
    if let Ok(t) = store(dtype, shape, values) {
        return Ok(t);
    }
    crate::ops::num::dispatch_int!(dtype, T => tensor_from_iter(dtype, shape, values.iter().map(|&v| v as T)),
        _ => Err(Error::Eval(format!("{dtype} is not a numeric type"))))
}

/// A window of the size input 0 gives: `f(n, N)` with `N` the size (periodic) or size - 1.
fn window(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
    f: fn(f64, f64) -> f64,
) -> Result<Vec<Tensor>> {
    let size = usize::try_from(scalar_i64(required(inputs, 0)?)?)
        .map_err(|_| ctx.error("the window size is negative"))?;
    let periodic = ctx.node.attr_int("periodic", 1)? != 0;
    let n = if periodic {
        size as f64
    } else {
        size as f64 - 1.0
    };
    let mut values = try_vec(size, 0.0f64)?;
    for (i, v) in values.iter_mut().enumerate() {
        *v = f(i as f64, n);
    }
    Ok(vec![store_any(output_type(ctx)?, &[size], &values)?])
}

fn eval_hann(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    window(ctx, inputs, |i, n| (PI * i / n).sin().powi(2))
}

fn eval_hamming(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    window(ctx, inputs, |i, n| {
        let alpha = 25.0 / 46.0;
        alpha - (1.0 - alpha) * (2.0 * PI * i / n).cos()
    })
}

fn eval_blackman(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    window(ctx, inputs, |i, n| {
        0.42 - 0.5 * (2.0 * PI * i / n).cos() + 0.08 * (4.0 * PI * i / n).cos()
    })
}

fn eval_mel(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let int = |i: usize| -> Result<i64> { scalar_i64(required(inputs, i)?) };
    let float = |i: usize| -> Result<f64> {
        let v = f64s(required(inputs, i)?)?;
        v.first()
            .copied()
            .ok_or_else(|| ctx.error("an empty frequency"))
    };
    let (mels, dft, rate) = (int(0)?, int(1)?, int(2)?);
    let (low, high) = (float(3)?, float(4)?);
    let (Ok(mels), Ok(dft)) = (usize::try_from(mels), usize::try_from(dft)) else {
        return Err(ctx.error("num_mel_bins and dft_length must not be negative"));
    };
    if rate <= 0 {
        return Err(ctx.error("sample_rate must be positive"));
    }
    let bins = dft / 2 + 1;
    let to_mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
    let (lm, hm) = (to_mel(low), to_mel(high));
    let step = (hm - lm) / (mels + 2) as f64;
    let points: Vec<i64> = (0..mels + 2)
        .map(|i| {
            let hz = 700.0 * ((i as f64 * step + lm) / 2595.0 * 10f64.ln()).exp_m1();
            (((dft + 1) as f64 * hz) / rate as f64).floor() as i64
        })
        .collect();
    let mut out = try_vec(cells(&[bins, mels])?, 0.0f64)?;
    let mut set = |j: i64, i: usize, v: f64| -> Result<()> {
        let j = usize::try_from(j)
            .ok()
            .filter(|&j| j < bins)
            .ok_or_else(|| {
                Error::Eval(format!("a mel band reaches frequency bin {j} of {bins}"))
            })?;
        out[j * mels + i] = v;
        Ok(())
    };
    for i in 0..mels {
        let (lo, c, hi) = (points[i], points[i + 1], points[i + 2]);
        if c == lo {
            set(c, i, 1.0)?;
        } else {
            for j in lo..=c {
                set(j, i, (j - lo) as f64 / (c - lo) as f64)?;
            }
        }
        for j in c..hi {
            set(j, i, (hi - j) as f64 / (hi - c) as f64)?;
        }
    }
    Ok(vec![store_any(output_type(ctx)?, &[bins, mels], &out)?])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::{eval_node, infer_node};

    use super::*;

    fn known(dims: &[i64]) -> Option<crate::ir::Shape> {
        Some(crate::ir::Shape::new(
            dims.iter().map(|&d| Dim::Known(d)).collect(),
        ))
    }

    fn int64(v: i64) -> Tensor {
        Tensor::from_vec(DataType::Int64, &[], vec![v]).unwrap()
    }

    /// The shape functions agree with the kernels on what they compute.
    #[test]
    fn shape_functions_give_the_kernels_shapes() {
        let signal = Tensor::from_vec(DataType::Float, &[2, 16, 1], vec![0.5f32; 32]).unwrap();
        let (step, frame) = (int64(4), int64(8));
        let stft = Node::new("STFT", "s", ["x", "step", "", "frame"], ["y"]);
        let stft_in: [Option<&Tensor>; 4] = [Some(&signal), Some(&step), None, Some(&frame)];
        let hann = Node::new("HannWindow", "w", ["n"], ["y"])
            .with_attr("output_datatype", AttrValue::Int(11));
        let size = int64(10);
        let mel = Node::new("MelWeightMatrix", "m", ["a", "b", "c", "d", "e"], ["y"]);
        let (bins, dft, rate) = (int64(8), int64(64), int64(16000));
        let (low, high) = (
            Tensor::from_vec(DataType::Float, &[], vec![0.0f32]).unwrap(),
            Tensor::from_vec(DataType::Float, &[], vec![8000.0f32]).unwrap(),
        );
        let mel_in = [
            Some(&bins),
            Some(&dft),
            Some(&rate),
            Some(&low),
            Some(&high),
        ];
        let cases: [(&Node, &[Option<&Tensor>]); 3] =
            [(&stft, &stft_in), (&hann, &[Some(&size)]), (&mel, &mel_in)];
        for (node, inputs) in cases {
            let types: Vec<Option<TensorType>> = inputs
                .iter()
                .map(|t| {
                    t.map(|t| TensorType {
                        elem: Some(t.dtype()),
                        shape: known(&t.shape().iter().map(|&d| d as i64).collect::<Vec<_>>()),
                    })
                })
                .collect();
            let inferred = infer_node(node, 17, &types, inputs);
            let out = eval_node(node, 17, inputs).unwrap();
            let shape: Vec<i64> = out[0].shape().iter().map(|&d| d as i64).collect();
            assert_eq!(inferred[0].shape, known(&shape), "{}", node.op_type);
            assert_eq!(inferred[0].elem, Some(out[0].dtype()), "{}", node.op_type);
        }
    }

    #[test]
    fn dft_of_an_impulse_is_flat_and_inverse_restores_it() {
        let x = Tensor::from_vec(DataType::Float, &[1, 4, 1], vec![1.0f32, 0.0, 0.0, 0.0]).unwrap();
        let node = Node::new("DFT", "d", ["x"], ["y"]).with_attr("axis", AttrValue::Int(1));
        let y = eval_node(&node, 19, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
        );
        let node = node.with_attr("inverse", AttrValue::Int(1));
        let back = eval_node(&node, 19, &[Some(&y)]).unwrap().remove(0);
        let want = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        for (a, b) in back.as_slice::<f32>().unwrap().iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{back:?}");
        }
    }

    #[test]
    fn a_periodic_hann_window_starts_at_zero() {
        let n = Tensor::scalar(DataType::Int64, 4i64).unwrap();
        let node = Node::new("HannWindow", "w", ["n"], ["y"]);
        let y = eval_node(&node, 17, &[Some(&n)]).unwrap().remove(0);
        let v = y.as_slice::<f32>().unwrap();
        assert!(v[0].abs() < 1e-7 && (v[2] - 1.0).abs() < 1e-7, "{v:?}");
    }
}
