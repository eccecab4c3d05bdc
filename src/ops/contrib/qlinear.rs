//! The quantised element-wise contrib operators of `com.microsoft` (opset 1) that
//! `onnxruntime.quantization` emits: `QLinearSigmoid` and `QLinearLeakyRelu` (`alpha`, 0.01 by
//! default), the broadcasting `QLinearAdd` and `QLinearMul`, `QLinearConcat` and
//! `QLinearGlobalAveragePool`.
//!
//! The binary, concatenating and pooling forms dequantise `(q - zero) * scale` in `f32`, compute,
//! and quantise with the output's scale and zero point (round half to even, saturated). Scales
//! and zero points are per tensor.
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, sections `com.microsoft.QLinearSigmoid` and
//! `com.microsoft.QLinearLeakyRelu`. Inputs: `X` (uint8 or int8), `X_scale` (float scalar),
//! `X_zero_point` (optional, `X`'s type), `Y_scale`, `Y_zero_point` (optional); the output has
//! `X`'s type and shape.
//!
//! An 8-bit input has 256 values, so the kernel tabulates
//! `quantize(f(dequantize(q)))` once per call — dequantise `(q - zx) * sx`, quantise
//! `saturate(round_half_even(y / sy) + zy)` — and then looks every element up.

use crate::error::{Error, Result};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

use std::mem::MaybeUninit;

use multiversion::multiversion;
use rayon::prelude::*;

use crate::par::{self, GRAIN};

use super::super::nn::{quantize_code, Code};
use super::super::util::{
    broadcast_shapes, normalize_axis, optional, required, unsupported_type, BroadcastRuns,
};
use super::super::{vector, EvalCtx};

/// A scalar scale input as `f32`, or an error naming the operator and input.
pub(super) fn scale(t: &Tensor, op: &str, what: &str) -> Result<f32> {
    if t.dtype() != DataType::Float || t.len() != 1 {
        return Err(Error::Eval(format!(
            "{op}: {what} must be one float (per-tensor), got {} of shape {:?}",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(t.as_slice::<f32>()?[0])
}

/// An optional scalar zero point of type `dtype` as `i32` (0 when absent).
pub(super) fn zero_point(t: Option<&Tensor>, dtype: DataType, op: &str, what: &str) -> Result<i32> {
    let Some(t) = t else { return Ok(0) };
    if t.dtype() != dtype || t.len() != 1 {
        return Err(Error::Eval(format!(
            "{op}: {what} must be one {dtype} (per-tensor), got {} of shape {:?}",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(match dtype {
        DataType::Uint8 => i32::from(t.as_slice::<u8>()?[0]),
        _ => i32::from(t.as_slice::<i8>()?[0]),
    })
}

/// `Y = quantize(f(dequantize(X)))` for the five inputs of a `QLinear*` unary operator.
fn lookup(inputs: &[Option<&Tensor>], op: &str, f: impl Fn(f32) -> f32) -> Result<Tensor> {
    let x = required(inputs, 0)?;
    let dtype = x.dtype();
    let (lo, hi) = match dtype {
        DataType::Uint8 => (0i32, 255i32),
        DataType::Int8 => (-128, 127),
        _ => return Err(unsupported_type(op, dtype)),
    };
    let sx = scale(required(inputs, 1)?, op, "X_scale")?;
    let zx = zero_point(optional(inputs, 2), dtype, op, "X_zero_point")?;
    let sy = scale(required(inputs, 3)?, op, "Y_scale")?;
    let zy = zero_point(optional(inputs, 4), dtype, op, "Y_zero_point")?;
    // table[q - lo] is the output code of input code q.
    let mut table = [0u8; 256];
    for (code, slot) in (lo..=hi).zip(table.iter_mut()) {
        let y = f((code - zx) as f32 * sx) / sy;
        let q = (y.round_ties_even() as i64 + i64::from(zy)).clamp(lo.into(), hi.into());
        // Two's complement: an int8 code is stored as its byte.
        *slot = q as i32 as u8;
    }
    let bytes = x.as_bytes()?;
    let offset = (-lo) as u8;
    Ok(Tensor::uninit(dtype, x.shape())?.fill::<u8>(|dst| {
        for (o, &b) in dst.iter_mut().zip(bytes) {
            o.write(table[usize::from(b.wrapping_add(offset))]);
        }
        // SAFETY: `dst` has one byte per element, as `bytes` does; each was written above.
        unsafe { vector::assume_written(dst) }
    })?)
}

/// The range of an 8-bit code type.
fn code_range(dtype: DataType, op: &str) -> Result<(i32, i32)> {
    match dtype {
        DataType::Uint8 => Ok((0, 255)),
        DataType::Int8 => Ok((-128, 127)),
        _ => Err(unsupported_type(op, dtype)),
    }
}

/// The dequantised values of an 8-bit tensor with its scale and zero point inputs.
fn dequantize(
    x: &Tensor,
    scale_in: &Tensor,
    zero_in: Option<&Tensor>,
    op: &str,
    what: &str,
) -> Result<Vec<f32>> {
    code_range(x.dtype(), op)?;
    let s = scale(scale_in, op, &format!("{what}_scale"))?;
    let z = zero_point(zero_in, x.dtype(), op, &format!("{what}_zero_point"))?;
    let bytes = x.as_bytes()?;
    let mut out = try_vec(bytes.len(), 0.0f32)?;
    for (o, &b) in out.iter_mut().zip(bytes) {
        let code = if x.dtype() == DataType::Int8 {
            i32::from(b as i8)
        } else {
            i32::from(b)
        };
        *o = (code - z) as f32 * s;
    }
    Ok(out)
}

/// `values` quantised to `dtype` with a scale and zero point.
fn quantize(
    values: &[f32],
    dtype: DataType,
    shape: &[usize],
    (scale_in, zero_in): (&Tensor, Option<&Tensor>),
    op: &str,
) -> Result<Tensor> {
    let (lo, hi) = code_range(dtype, op)?;
    let s = scale(scale_in, op, "Y_scale")?;
    let z = zero_point(zero_in, dtype, op, "Y_zero_point")?;
    Ok(Tensor::uninit(dtype, shape)?.fill::<u8>(|dst| {
        for (o, &v) in dst.iter_mut().zip(values) {
            let q = ((v / s).round_ties_even() as i64 + i64::from(z)).clamp(lo.into(), hi.into());
            o.write(q as i32 as u8);
        }
        // SAFETY: `values` has one value per element of `dst`; each was written above.
        unsafe { vector::assume_written(dst) }
    })?)
}

/// The scale and zero point of one per-tensor quantised operand, as the `f32`s the loops use
/// (a zero point is a small integer, exact in `f32`).
#[derive(Clone, Copy, Debug)]
struct Affine {
    scale: f32,
    zero: f32,
}

impl Affine {
    fn of(
        t: &Tensor,
        (scale_in, zero_in): (&Tensor, Option<&Tensor>),
        op: &str,
        what: &str,
    ) -> Result<Affine> {
        Ok(Affine {
            scale: scale(scale_in, op, &format!("{what}_scale"))?,
            zero: zero_point(zero_in, t.dtype(), op, &format!("{what}_zero_point"))? as f32,
        })
    }

    /// `(code - zero) * scale`: the difference is exact, the product rounds once, as in
    /// [`dequantize`].
    #[inline(always)]
    fn real<T: Code>(self, code: T) -> f32 {
        (code.to_i32() as f32 - self.zero) * self.scale
    }
}

/// `QLinearAdd` and `QLinearMul`: `A`, `A_scale`, `A_zero_point`, `B`, `B_scale`,
/// `B_zero_point`, `C_scale`, `C_zero_point`, broadcast. Each output code is
/// `quantize(f(dequantize(a), dequantize(b)))` in `f32`, computed in one pass: the runs of
/// the broadcast ([`BroadcastRuns`]) are vector loops, split over threads when large.
fn binary(
    inputs: &[Option<&Tensor>],
    op: &str,
    f: impl Fn(f32, f32) -> f32 + Copy + Send + Sync,
) -> Result<Tensor> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 3)?);
    if a.dtype() != b.dtype() {
        return Err(Error::Eval(format!(
            "{op}: A is {} and B is {}",
            a.dtype(),
            b.dtype()
        )));
    }
    code_range(a.dtype(), op)?;
    let pa = Affine::of(a, (required(inputs, 1)?, optional(inputs, 2)), op, "A")?;
    let pb = Affine::of(b, (required(inputs, 4)?, optional(inputs, 5)), op, "B")?;
    let py = Affine::of(a, (required(inputs, 6)?, optional(inputs, 7)), op, "C")?;
    let out = broadcast_shapes(&[a.shape(), b.shape()])?;
    let operands = Operands { a, b, pa, pb, py };
    let y = Tensor::uninit(a.dtype(), &out)?;
    Ok(match a.dtype() {
        DataType::Uint8 => y.fill::<u8>(|dst| operands.run(&out, dst, f))?,
        _ => y.fill::<i8>(|dst| operands.run(&out, dst, f))?,
    })
}

/// The two operands of a quantised binary operator and the output's quantisation.
struct Operands<'t> {
    a: &'t Tensor,
    b: &'t Tensor,
    pa: Affine,
    pb: Affine,
    py: Affine,
}

impl Operands<'_> {
    /// Writes every code of the output (of shape `out`, the operands' broadcast) into `dst`.
    fn run<'d, T: Code>(
        &self,
        out: &[usize],
        dst: &'d mut [MaybeUninit<T>],
        f: impl Fn(f32, f32) -> f32 + Copy + Send + Sync,
    ) -> &'d mut [T] {
        let (a, b) = (self.a.as_slice::<T>(), self.b.as_slice::<T>());
        let (Ok(a), Ok(b)) = (a, b) else {
            return &mut [];
        };
        let (pa, pb, py) = (self.pa, self.pb, self.py);
        let total = dst.len();
        if self.a.shape() == self.b.shape() {
            dst.par_chunks_mut(GRAIN)
                .zip(a.par_chunks(GRAIN).zip(b.par_chunks(GRAIN)))
                .with_min_len(par::min_len(total.div_ceil(GRAIN), &[GRAIN]))
                .for_each(|(d, (x, y))| qzip(x, y, d, (pa, pb, py), f));
            // SAFETY: `qzip` writes every element of each chunk, and the chunks cover `dst`.
            return unsafe { vector::assume_written(dst) };
        }
        let runs = BroadcastRuns::new(self.a.shape(), self.b.shape(), out);
        let n = runs.run_len();
        if n == 0 || total == 0 || !total.is_multiple_of(n) {
            return &mut [];
        }
        dst.par_chunks_mut(n)
            .enumerate()
            .with_min_len(par::min_len(total / n, &[n]))
            .for_each(|(k, d)| {
                let (ia, ra, ib, rb) = runs.run(k);
                match (ra, rb) {
                    (1, 1) => qzip(&a[ia..ia + n], &b[ib..ib + n], d, (pa, pb, py), f),
                    (1, 0) => {
                        let y = pb.real(b[ib]);
                        qmap(&a[ia..ia + n], d, (pa, py), move |x| f(x, y));
                    }
                    (0, 1) => {
                        let x = pa.real(a[ia]);
                        qmap(&b[ib..ib + n], d, (pb, py), move |y| f(x, y));
                    }
                    _ => {
                        for (j, o) in d.iter_mut().enumerate() {
                            let v = f(pa.real(a[ia + j * ra]), pb.real(b[ib + j * rb]));
                            o.write(quantize_code(v, py.scale, py.zero));
                        }
                    }
                }
            });
        // SAFETY: every run writes each of its `n` elements, and the runs cover `dst`.
        unsafe { vector::assume_written(dst) }
    }
}

/// `dst[i] = quantize(f(real(a[i]), real(b[i])))`.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1",
    "aarch64+neon"
))]
fn qzip<T: Code, F: Fn(f32, f32) -> f32>(
    a: &[T],
    b: &[T],
    dst: &mut [MaybeUninit<T>],
    (pa, pb, py): (Affine, Affine, Affine),
    f: F,
) {
    for ((o, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        o.write(quantize_code(f(pa.real(x), pb.real(y)), py.scale, py.zero));
    }
}

/// `dst[i] = quantize(f(real(a[i])))`.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1",
    "aarch64+neon"
))]
fn qmap<T: Code, F: Fn(f32) -> f32>(
    a: &[T],
    dst: &mut [MaybeUninit<T>],
    (pa, py): (Affine, Affine),
    f: F,
) {
    for (o, &x) in dst.iter_mut().zip(a) {
        o.write(quantize_code(f(pa.real(x)), py.scale, py.zero));
    }
}

pub(in crate::ops) fn eval_qlinear_add(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    Ok(vec![binary(inputs, "QLinearAdd", |x, y| x + y)?])
}

pub(in crate::ops) fn eval_qlinear_mul(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    Ok(vec![binary(inputs, "QLinearMul", |x, y| x * y)?])
}

/// `QLinearConcat`: `Y_scale`, `Y_zero_point`, then `(X, X_scale, X_zero_point)` per input.
pub(in crate::ops) fn eval_qlinear_concat(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    const OP: &str = "QLinearConcat";
    let rest = inputs.get(2..).unwrap_or(&[]);
    if rest.is_empty() || rest.len() % 3 != 0 {
        return Err(ctx.error("inputs after Y's scale and zero point must come in threes"));
    }
    let first = required(rest, 0)?;
    let rank = first.rank();
    let axis = normalize_axis(ctx.node.attr_int("axis", 0)?, rank)?;
    let mut parts = Vec::new();
    let mut shape = first.shape().to_vec();
    shape[axis] = 0;
    for t in rest.chunks(3) {
        let x = required(t, 0)?;
        let same = x.rank() == rank
            && x.dtype() == first.dtype()
            && (0..rank).all(|d| d == axis || x.shape()[d] == first.shape()[d]);
        if !same {
            return Err(ctx.error(format!(
                "input {:?} ({}) does not concatenate with {:?} ({}) on axis {axis}",
                x.shape(),
                x.dtype(),
                first.shape(),
                first.dtype()
            )));
        }
        shape[axis] += x.shape()[axis];
        parts.push((
            dequantize(x, required(t, 1)?, optional(t, 2), OP, "X")?,
            x.shape()[axis],
        ));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut y = try_vec(shape.iter().product(), 0.0f32)?;
    let mut at = 0;
    for o in 0..outer {
        for (values, len) in &parts {
            let run = len * inner;
            y[at..at + run].copy_from_slice(&values[o * run..][..run]);
            at += run;
        }
    }
    Ok(vec![quantize(
        &y,
        first.dtype(),
        &shape,
        (required(inputs, 0)?, optional(inputs, 1)),
        OP,
    )?])
}

/// `QLinearGlobalAveragePool`: `X`, `x_scale`, `x_zero_point`, `y_scale`, `y_zero_point`; the
/// mean over the spatial dims of `(N, C, ...)`, or of `(N, ..., C)` with `channels_last`.
pub(in crate::ops) fn eval_qlinear_global_average_pool(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    const OP: &str = "QLinearGlobalAveragePool";
    let x = required(inputs, 0)?;
    let shape = x.shape();
    if shape.len() < 3 {
        return Err(ctx.error(format!("X {shape:?} has no spatial dims")));
    }
    let v = dequantize(x, required(inputs, 1)?, optional(inputs, 2), OP, "x")?;
    let last = ctx.node.attr_int("channels_last", 0)? != 0;
    let (n, c) = (
        shape[0],
        if last {
            shape[shape.len() - 1]
        } else {
            shape[1]
        },
    );
    let spatial: usize = if last {
        shape[1..shape.len() - 1].iter().product()
    } else {
        shape[2..].iter().product()
    };
    let mut y = try_vec(n * c, 0.0f32)?;
    for (k, o) in y.iter_mut().enumerate() {
        let (b, ch) = (k / c, k % c);
        let sum: f32 = (0..spatial)
            .map(|p| {
                if last {
                    v[(b * spatial + p) * c + ch]
                } else {
                    v[(b * c + ch) * spatial + p]
                }
            })
            .sum();
        *o = sum / spatial.max(1) as f32;
    }
    let mut out_shape = vec![1; shape.len()];
    out_shape[0] = n;
    out_shape[if last { shape.len() - 1 } else { 1 }] = c;
    Ok(vec![quantize(
        &y,
        x.dtype(),
        &out_shape,
        (required(inputs, 3)?, optional(inputs, 4)),
        OP,
    )?])
}

pub(in crate::ops) fn eval_qlinear_sigmoid(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    Ok(vec![lookup(inputs, "QLinearSigmoid", vector::sigmoid)?])
}

pub(in crate::ops) fn eval_qlinear_leaky_relu(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let alpha = ctx.node.attr_float("alpha", 0.01)?;
    Ok(vec![lookup(inputs, "QLinearLeakyRelu", move |v| {
        if v >= 0.0 {
            v
        } else {
            alpha * v
        }
    })?])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    fn scalar_f(v: f32) -> Tensor {
        Tensor::from_vec(DataType::Float, &[], vec![v]).unwrap()
    }

    fn run(
        op: &str,
        inputs: &[Option<&Tensor>],
        attrs: Vec<(&str, AttrValue)>,
    ) -> crate::Result<Tensor> {
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("i{i}")).collect();
        let mut n = Node::new(op, "n", names, ["y"]).with_domain("com.microsoft");
        for (k, v) in attrs {
            n = n.with_attr(k, v);
        }
        Ok(eval_node(&n, 1, inputs)?.remove(0))
    }

    /// uint8: scale 0.5, zero point 128 in; LeakyRelu(alpha 0.5) out with scale 0.25, zero 100.
    #[test]
    fn qlinear_leaky_relu_uint8_saturates_and_rounds_half_even() {
        let x = Tensor::from_vec(DataType::Uint8, &[4], vec![0u8, 127, 128, 255]).unwrap();
        let zx = Tensor::from_vec(DataType::Uint8, &[], vec![128u8]).unwrap();
        let zy = Tensor::from_vec(DataType::Uint8, &[], vec![100u8]).unwrap();
        let y = run(
            "QLinearLeakyRelu",
            &[
                Some(&x),
                Some(&scalar_f(0.5)),
                Some(&zx),
                Some(&scalar_f(0.25)),
                Some(&zy),
            ],
            vec![("alpha", AttrValue::Float(0.5))],
        )
        .unwrap();
        // 0 -> -64 -> -32 -> -128 + 100 = -28 -> 0; 127 -> -0.5 -> -0.25 -> -1 + 100 = 99;
        // 128 -> 0 -> 100; 255 -> 63.5 -> 254 + 100 -> 255.
        assert_eq!(y.as_slice::<u8>().unwrap(), &[0, 99, 100, 255]);
    }

    /// int8 with no zero points: sigmoid(0) = 0.5 -> 0.5 / (1/256) = 128 saturates to 127.
    #[test]
    fn qlinear_sigmoid_int8_without_zero_points() {
        let x = Tensor::from_vec(DataType::Int8, &[3], vec![-128i8, 0, 100]).unwrap();
        let y = run(
            "QLinearSigmoid",
            &[
                Some(&x),
                Some(&scalar_f(0.1)),
                None,
                Some(&scalar_f(1.0 / 256.0)),
            ],
            vec![],
        )
        .unwrap();
        let want: Vec<i8> = [-12.8f32, 0.0, 10.0]
            .iter()
            .map(|&v| {
                let s = 1.0 / (1.0 + (-v).exp());
                (s * 256.0).round_ties_even().clamp(-128.0, 127.0) as i8
            })
            .collect();
        assert_eq!(y.as_slice::<i8>().unwrap(), &want[..]);
    }

    #[test]
    fn qlinear_sigmoid_rejects_float_input_and_per_axis_scales() {
        let f = scalar_f(1.0);
        let err = run(
            "QLinearSigmoid",
            &[Some(&f), Some(&f), None, Some(&f)],
            vec![],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("float"), "{err}");
        let x = Tensor::from_vec(DataType::Uint8, &[2], vec![1u8, 2]).unwrap();
        let two = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 1.0]).unwrap();
        let err = run(
            "QLinearSigmoid",
            &[Some(&x), Some(&two), None, Some(&f)],
            vec![],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("X_scale"), "{err}");
    }

    /// [2, 3] + [1] with unit scales, zero points 0, 1 and 2: (2 + 0) + 2 = 4, 3 + 2 = 5.
    #[test]
    fn qlinear_add_broadcasts_and_requantizes() {
        let a = Tensor::from_vec(DataType::Uint8, &[2], vec![2u8, 3]).unwrap();
        let b = Tensor::from_vec(DataType::Uint8, &[1], vec![1u8]).unwrap();
        let z = |v: u8| Tensor::from_vec(DataType::Uint8, &[], vec![v]).unwrap();
        let one = scalar_f(1.0);
        let y = run(
            "QLinearAdd",
            &[
                Some(&a),
                Some(&one),
                Some(&z(0)),
                Some(&b),
                Some(&one),
                Some(&z(1)),
                Some(&one),
                Some(&z(2)),
            ],
            vec![],
        )
        .unwrap();
        assert_eq!(y.as_slice::<u8>().unwrap(), &[4, 5]);
    }

    #[test]
    fn qlinear_concat_rejects_mismatched_inputs() {
        let x = Tensor::from_vec(DataType::Uint8, &[1, 2], vec![1u8, 2]).unwrap();
        let w = Tensor::from_vec(DataType::Uint8, &[2, 1], vec![1u8, 2]).unwrap();
        let one = scalar_f(1.0);
        let err = run(
            "QLinearConcat",
            &[
                Some(&one),
                None,
                Some(&x),
                Some(&one),
                None,
                Some(&w),
                Some(&one),
                None,
            ],
            vec![("axis", AttrValue::Int(1))],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("does not concatenate"), "{err}");
    }
}
