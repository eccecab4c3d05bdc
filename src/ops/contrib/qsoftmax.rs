//! `com.microsoft.QLinearSoftmax` (opset 1), which `onnxruntime.quantization` emits for a
//! `Softmax` in the QOperator format: the softmax of uint8 or int8 codes, quantised.
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, section `com.microsoft.QLinearSoftmax`. Inputs:
//! `X` (uint8 or int8), `X_scale` (float scalar), `x_zero_point` (optional; a softmax does not
//! depend on it), `y_scale`, `y_zero_point` (required, as in onnxruntime's schema, which takes
//! exactly five inputs); the output has `X`'s type and shape.
//! Attributes: `opset` (required: the opset of the `Softmax` it replaces) and `axis` (1 below
//! opset 13, else -1). Below opset 13 a row is everything from `axis` on, as in `Softmax`-11;
//! from 13 it is the one dim `axis`.
//!
//! The operator has no specification beyond onnxruntime's CPU kernel, so its integer arithmetic
//! is the meaning, reproduced here step for step. With `D` the row length, `d = max(row) - x`
//! the distance of a code below its row's maximum (0 to 255) and
//! `q = min(u32::MAX / D, 0x7fffff)`:
//!
//! ```text
//! t[d]  = round_half_even(q * exp(-d * x_scale))          (in f64, then u32)
//! s     = sum of t[d] over the row                          (u32, cannot overflow)
//! code  = (t[d] * trunc(1 / y_scale) + s / 2) / s + y_zero  (the quotient in u32, wrapping)
//! ```
//!
//! saturated to the output type (uint8 `0..=255`, int8 `-128..=127`). onnxruntime 1.32 was
//! probed on random rows of 5 to 40 codes of both types and several zero points
//! (`scripts/check_contrib.py` keeps the cases): these are its bits. Older sources of its
//! kernel wrapped an int8 code above 127 instead; the shipped kernel saturates.

use crate::error::{Error, Result};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

use super::super::util::{normalize_axis, optional, required, unsupported_type};
use super::super::{vector, EvalCtx};
use super::qlinear::{scale, zero_point};

const OP: &str = "QLinearSoftmax";

/// The rows of a softmax: `outer` blocks of `len` codes `inner` apart.
#[derive(Clone, Copy, Debug)]
struct Rows {
    outer: usize,
    len: usize,
    inner: usize,
}

impl Rows {
    /// The rows of `shape` for `axis` (normalised) under the semantics of `opset`.
    fn of(shape: &[usize], axis: usize, opset: i64) -> Rows {
        let outer = shape[..axis].iter().product();
        if opset < 13 {
            Rows {
                outer,
                len: shape[axis..].iter().product(),
                inner: 1,
            }
        } else {
            Rows {
                outer,
                len: shape[axis],
                inner: shape[axis + 1..].iter().product(),
            }
        }
    }
}

/// `t[d]` for the 256 distances below a row's maximum, for rows of `len` codes.
fn table(x_scale: f32, len: usize) -> [u32; 256] {
    let q = (f64::from(u32::MAX) / len as f64).min(f64::from(0x7f_ffffu32));
    let mut t = [0u32; 256];
    for (d, slot) in t.iter_mut().enumerate() {
        // onnxruntime's table is indexed by `i = 255 - d`, with exponent `(i - 255) * x_scale`.
        let i = 255 - d as i32;
        let v = q * (f64::from(i - 255) * f64::from(x_scale)).exp();
        *slot = v.round_ties_even() as u32;
    }
    t
}

pub(in crate::ops) fn eval_qlinear_softmax(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let dtype = x.dtype();
    if !matches!(dtype, DataType::Uint8 | DataType::Int8) {
        return Err(unsupported_type(OP, dtype));
    }
    let opset = match ctx.node.attr("opset") {
        Some(_) => ctx.node.attr_int("opset", 0)?,
        None => return Err(ctx.error("the attribute 'opset' is required")),
    };
    let axis = ctx.node.attr_int("axis", if opset < 13 { 1 } else { -1 })?;
    let x_scale = scale(required(inputs, 1)?, OP, "X_scale")?;
    zero_point(optional(inputs, 2), dtype, OP, "x_zero_point")?;
    let y_scale = scale(required(inputs, 3)?, OP, "y_scale")?;
    let y_zero = zero_point(Some(required(inputs, 4)?), dtype, OP, "y_zero_point")?;
    let shape = x.shape();
    let bytes = x.as_bytes()?;
    let out = Tensor::uninit(dtype, shape)?;
    if bytes.is_empty() {
        return Ok(vec![out.fill::<u8>(dst_zero)?]);
    }
    let axis = normalize_axis(axis, shape.len())?;
    let rows = Rows::of(shape, axis, opset);
    let t = table(x_scale, rows.len);
    // onnxruntime's `narrow_cast<uint32_t>(1.0f / y_scale)`.
    let y_mult = (1.0f32 / y_scale) as u32;
    let signed = dtype == DataType::Int8;
    // A code as its distance from the top of its type's range (255 - x for uint8).
    let flip = if signed { 0x80 } else { 0 };
    // The output's range; two's complement stores an int8 code as its byte.
    let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
    let (mut row, mut codes) = (try_vec(rows.len, 0u8)?, try_vec(rows.len, 0u8)?);
    let mut failed = false;
    let y = out.fill::<u8>(|dst| {
        for o in 0..rows.outer {
            for j in 0..rows.inner {
                let base = o * rows.len * rows.inner + j;
                if rows.inner == 1 {
                    for (r, &b) in row.iter_mut().zip(&bytes[base..base + rows.len]) {
                        *r = b ^ flip;
                    }
                } else {
                    for (k, r) in row.iter_mut().enumerate() {
                        *r = bytes[base + k * rows.inner] ^ flip;
                    }
                }
                let top = row.iter().copied().max().unwrap_or(0);
                let t = |v: u8| t[usize::from(top - v)];
                let sum = row.iter().fold(0u32, |s, &v| s.wrapping_add(t(v)));
                if sum == 0 {
                    failed = true;
                    return dst_zero(dst);
                }
                let (half, by_sum) = (sum >> 1, Divisor::new(sum));
                for (c, &v) in codes.iter_mut().zip(&row) {
                    let quotient = by_sum.quotient(t(v).wrapping_mul(y_mult).wrapping_add(half));
                    *c = (i64::from(quotient) + i64::from(y_zero)).clamp(lo, hi) as u8;
                }
                if rows.inner == 1 {
                    for (d, &c) in dst[base..base + rows.len].iter_mut().zip(&codes) {
                        d.write(c);
                    }
                } else {
                    for (k, &c) in codes.iter().enumerate() {
                        dst[base + k * rows.inner].write(c);
                    }
                }
            }
        }
        // SAFETY: the rows cover every element once: `outer * len * inner` is the tensor's size.
        unsafe { vector::assume_written(dst) }
    })?;
    if failed {
        return Err(Error::Unsupported(format!(
            "{OP}: rows of {} codes, too long for its 32-bit sums",
            rows.len
        )));
    }
    Ok(vec![y])
}

/// Division of `u32`s by one nonzero divisor `d` as a multiplication (a row's codes share their
/// sum): with `m = ceil(2^64 / d)`, `n m / 2^64` exceeds `n / d` by less than `n / 2^64 <
/// 2^-32 <= 1 / d`, too little to carry `n / d` past the next integer, whose distance is at
/// least `1 / d`; so `floor(n m / 2^64) = floor(n / d)` for every `u32` `n`. A `div` per code was
/// a tenth of a quantised encoder's run.
#[derive(Clone, Copy, Debug)]
struct Divisor {
    /// `m` for `d >= 2` (at most `2^63`); 0 for `d = 1`.
    m: u64,
}

impl Divisor {
    fn new(d: u32) -> Divisor {
        let m = match d {
            0 | 1 => 0,
            d => u64::MAX / u64::from(d) + 1,
        };
        Divisor { m }
    }

    #[inline(always)]
    fn quotient(self, n: u32) -> u32 {
        match self.m {
            0 => n,
            m => ((u128::from(n) * u128::from(m)) >> 64) as u32,
        }
    }
}

/// `dst` filled with zeros.
fn dst_zero(dst: &mut [std::mem::MaybeUninit<u8>]) -> &mut [u8] {
    for d in dst.iter_mut() {
        d.write(0);
    }
    // SAFETY: every element was written above.
    unsafe { vector::assume_written(dst) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;

    fn run(x: Tensor, opset: i64, axis: Option<i64>, zy: Option<Tensor>) -> Result<Tensor> {
        let mut node = Node::new("QLinearSoftmax", "s", ["x", "sx", "zx", "sy", "zy"], ["y"])
            .with_attr("opset", AttrValue::Int(opset));
        node.domain = "com.microsoft".into();
        if let Some(a) = axis {
            node = node.with_attr("axis", AttrValue::Int(a));
        }
        let sx = Tensor::from_vec(DataType::Float, &[], vec![0.1f32])?;
        let sy = Tensor::from_vec(DataType::Float, &[], vec![1.0f32 / 256.0])?;
        let zy = match zy {
            Some(z) => z,
            None => Tensor::from_bytes(x.dtype(), &[], &[0])?,
        };
        eval_node(&node, 1, &[Some(&x), Some(&sx), None, Some(&sy), Some(&zy)])
            .map(|mut v| v.remove(0))
    }

    #[test]
    fn divisors_give_the_quotients_of_division() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u32
        };
        let mut divisors = vec![1, 2, 3, 7, 255, 256, 1 << 31, u32::MAX - 1, u32::MAX];
        divisors.extend((0..200).map(|_| next().max(1)));
        divisors.extend((0..200).map(|_| (next() >> (next() % 32)).max(1)));
        for d in divisors {
            let by = Divisor::new(d);
            let mut ns = vec![0, 1, d - 1, d, d.saturating_add(1), u32::MAX, u32::MAX - 1];
            ns.extend((1..=4).map(|k| d.saturating_mul(k)));
            ns.extend((1..=4).map(|k| d.saturating_mul(k) - 1));
            ns.extend((0..500).map(|_| next()));
            for n in ns {
                assert_eq!(by.quotient(n), n / d, "{n} / {d}");
            }
        }
    }

    #[test]
    fn uint8_rows_follow_the_integer_recipe() {
        let x = Tensor::from_bytes(DataType::Uint8, &[1, 3], &[10, 20, 30]).unwrap();
        let y = run(x, 13, None, None).unwrap();
        // By hand: t = q * exp(-d * 0.1) for d = 20, 10, 0 with q = 0x7fffff.
        let q = f64::from(0x7f_ffffu32);
        let t: Vec<u32> = [20.0f64, 10.0, 0.0]
            .iter()
            .map(|d| (q * (-d * f64::from(0.1f32)).exp()).round_ties_even() as u32)
            .collect();
        let s: u32 = t.iter().sum();
        let want: Vec<u8> = t
            .iter()
            .map(|&v| ((v.wrapping_mul(256) + s / 2) / s).min(255) as u8)
            .collect();
        assert_eq!(y.as_bytes().unwrap(), &want[..]);
    }

    #[test]
    fn int8_certainty_saturates_as_onnxruntime_does() {
        // One code far above the rest: probability 1, code 256 - 128 = 128, saturated to 127.
        let x = Tensor::from_bytes(DataType::Int8, &[2], &[0x80, 0x7f]).unwrap();
        let zy = Tensor::from_bytes(DataType::Int8, &[], &[0x80]).unwrap();
        let y = run(x, 13, None, Some(zy)).unwrap();
        assert_eq!(y.as_bytes().unwrap(), &[0x80, 0x7f]);
    }

    #[test]
    fn opset_12_rows_span_the_trailing_dims_and_13_one_axis() {
        let v: Vec<u8> = (0..12).map(|i| (i * 7) as u8).collect();
        let x = Tensor::from_bytes(DataType::Uint8, &[2, 2, 3], &v).unwrap();
        let old = run(x.clone(), 12, Some(1), None).unwrap();
        let flat = Tensor::from_bytes(DataType::Uint8, &[2, 6], &v).unwrap();
        let want = run(flat, 13, Some(1), None).unwrap();
        assert_eq!(old.as_bytes().unwrap(), want.as_bytes().unwrap());
        // Axis 1 of opset 13: pairs (k, k + 3) within each image.
        let new = run(x, 13, Some(1), None).unwrap();
        let mut pairs = Vec::new();
        for img in v.chunks(6) {
            for j in 0..3 {
                let p = Tensor::from_bytes(DataType::Uint8, &[2], &[img[j], img[j + 3]]).unwrap();
                pairs.push(run(p, 13, None, None).unwrap().as_bytes().unwrap().to_vec());
            }
        }
        let got = new.as_bytes().unwrap();
        for (n, pair) in pairs.iter().enumerate() {
            let (img, j) = (n / 3, n % 3);
            assert_eq!([got[img * 6 + j], got[img * 6 + j + 3]], [pair[0], pair[1]]);
        }
    }

    #[test]
    fn a_missing_opset_is_an_error() {
        let mut node = Node::new("QLinearSoftmax", "s", ["x", "sx", "zx", "sy", "zy"], ["y"]);
        node.domain = "com.microsoft".into();
        let x = Tensor::from_bytes(DataType::Uint8, &[2], &[1, 2]).unwrap();
        let s = Tensor::from_vec(DataType::Float, &[], vec![0.1f32]).unwrap();
        let zy = Tensor::from_bytes(DataType::Uint8, &[], &[0]).unwrap();
        let err =
            eval_node(&node, 1, &[Some(&x), Some(&s), None, Some(&s), Some(&zy)]).unwrap_err();
        assert!(err.to_string().contains("opset"), "{err}");
    }
}
