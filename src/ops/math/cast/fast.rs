//! The numeric pairs of `Cast` that models run often, as loops over the slices compiled per SIMD
//! level: integers to integers (low bits kept), integers to `float` and `double` (rounded
//! once), `float` and `double` to each other, to `float16` / `bfloat16` and back, and `float` and
//! `double` to the integers (truncated toward zero, then the low bits kept).
//!
//! Each pair computes the bits of the reference in the parent module, which reads every element
//! exactly as an `i128` or an `f64` first (the tests compare the two): a direct `as` between
//! two Rust types rounds once and wraps like the wider detour; a real below 2^63 in magnitude
//! truncates to the same `i64` whose low bits the `i128` keeps, and a block holding a larger
//! value, an infinity or a NaN goes through the reference's own conversion. `float` to
//! `bfloat16` rounds once to nearest even (`bf16::from_f32`; the reference rounds its `f64`
//! without double rounding, `halves::bf16_from_f64`).
//!
//! Every other pair returns `None` and runs the reference.

use std::mem::MaybeUninit;

use half::{bf16, f16};
use multiversion::multiversion;

use crate::error::Result;
use crate::ops::halves;
use crate::ops::vector::assume_written;
use crate::tensor::Tensor;
use crate::DataType;

/// `dst[i] = f(src[i])` for the common length.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn convert<'d, S: Copy, D: Copy, F: Fn(S) -> D>(
    src: &[S],
    dst: &'d mut [MaybeUninit<D>],
    f: F,
) -> &'d mut [D] {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    for (d, &s) in dst.iter_mut().zip(src) {
        d.write(f(s));
    }
    // SAFETY: the loop wrote every element of `dst`.
    unsafe { assume_written(dst) }
}

/// Elements per block of a real-to-integer cast: each block is checked, then converted.
const BLOCK: usize = 1024;

/// Whether every element of `src` lies below 2^63 in magnitude (no NaN).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn below_2_63(src: &[f64]) -> bool {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    src.iter().fold(true, |ok, &v| ok & (v.abs() < LIMIT))
}

/// A real-to-integer cast by blocks: `fast` (truncation to `i64`, then the low bits) where every
/// element of a block is below 2^63 in magnitude (`fast` is called on no other value),
/// `exact` (the reference's `as i128`) elsewhere.
fn real_to_int<'d, S: Copy + Into<f64>, D: Copy>(
    src: &[S],
    dst: &'d mut [MaybeUninit<D>],
    fast: impl Fn(S) -> D + Copy,
    exact: impl Fn(S) -> D + Copy,
) -> &'d mut [D] {
    let n = src.len().min(dst.len());
    let mut wide = [0.0f64; BLOCK];
    for (s, d) in src[..n].chunks(BLOCK).zip(dst[..n].chunks_mut(BLOCK)) {
        let w = &mut wide[..s.len()];
        for (w, &v) in w.iter_mut().zip(s) {
            *w = v.into();
        }
        if below_2_63(w) {
            convert(s, d, fast);
        } else {
            for (d, &v) in d.iter_mut().zip(s) {
                d.write(exact(v));
            }
        }
    }
    // SAFETY: every block of `dst[..n]` was written.
    unsafe { assume_written(&mut dst[..n]) }
}

/// A tensor of `to` and `x`'s shape filled by `fill`.
fn filled<D: bytemuck::Pod>(
    x: &Tensor,
    to: DataType,
    fill: impl FnOnce(&mut [MaybeUninit<D>]) -> &mut [D],
) -> Result<Option<Tensor>> {
    Ok(Some(Tensor::uninit(to, x.shape())?.fill(fill)?))
}

/// Binds `$D` to the Rust type of a plain integer `$to` (int8 to uint64) and runs `$body`;
/// `None` for another type.
macro_rules! int_target {
    ($to:expr, $D:ident => $body:expr) => {
        crate::ops::num::dispatch_int!($to, $D => $body, _ => Ok(None))
    };
}

/// `x` cast to `to` by one of the loops, or `None` when the pair is not one of theirs.
pub(super) fn cast(x: &Tensor, to: DataType) -> Result<Option<Tensor>> {
    use DataType as D;
    let from = x.dtype();
    match (from, to) {
        (D::Float, D::Float16) => {
            let s = x.as_slice::<f32>()?;
            filled(x, to, |d| halves::f32_to_f16(s, d))
        }
        (D::Float16, D::Float) => {
            let s = x.as_slice::<f16>()?;
            filled(x, to, |d| halves::f16_to_f32(s, d))
        }
        (D::Bfloat16, D::Float) => {
            let s = x.as_slice::<bf16>()?;
            filled(x, to, |d| halves::bf16_to_f32(s, d))
        }
        (D::Float, D::Bfloat16) => {
            let s = x.as_slice::<f32>()?;
            filled(x, to, |d| convert(s, d, bf16::from_f32))
        }
        (D::Float, D::Double) => {
            let s = x.as_slice::<f32>()?;
            filled(x, to, |d| convert(s, d, f64::from))
        }
        (D::Double, D::Float) => {
            let s = x.as_slice::<f64>()?;
            filled(x, to, |d| convert(s, d, |v: f64| v as f32))
        }
        (D::Float, _) => {
            let s = x.as_slice::<f32>()?;
            int_target!(to, T => filled(x, to, |d| real_to_int(
                s,
                d,
                // SAFETY: `real_to_int` calls this only on values below 2^63 in magnitude.
                |v: f32| unsafe { v.to_int_unchecked::<i64>() } as T,
                |v: f32| f64::from(v) as i128 as T,
            )))
        }
        (D::Double, _) => {
            let s = x.as_slice::<f64>()?;
            int_target!(to, T => filled(x, to, |d| real_to_int(
                s,
                d,
                // SAFETY: `real_to_int` calls this only on values below 2^63 in magnitude.
                |v: f64| unsafe { v.to_int_unchecked::<i64>() } as T,
                |v: f64| v as i128 as T,
            )))
        }
        _ => crate::ops::num::dispatch_int!(from, S => {
            let s = x.as_slice::<S>()?;
            match to {
                D::Float => filled(x, to, |d| convert(s, d, |v: S| v as f32)),
                D::Double => filled(x, to, |d| convert(s, d, |v: S| v as f64)),
                _ => int_target!(to, T => filled(x, to, |d| convert(s, d, |v: S| v as T))),
            }
        }, _ => Ok(None)),
    }
}
