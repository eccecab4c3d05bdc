//! Vectorised element-wise loops on `f32`: the maps, zips and row operations of the activation,
//! arithmetic and softmax kernels, with the transcendental functions they need written as
//! branch-free polynomials.
//!
//! Each loop is compiled once per SIMD level (AVX-512, AVX2 + FMA, NEON, and the baseline) by
//! `multiversion`, and the best level the CPU has is chosen at run time. The loops are plain Rust
//! over slices, which the compiler vectorises at each level; the functions use no table
//! lookups, and fused multiply-adds only as `mul_add` (one rounding at every level, the
//! baseline's included), so every level computes the **same bits** as the scalar baseline: results do not depend on the CPU, and a rewritten model compared with its original
//! sees identical activations whatever path each tensor's length takes.
//!
//! Accuracy (measured against `f64` references in the tests below, on `f32` values sampled across
//! each function's range, both signs):
//! `exp` within 2 ulp, `tanh` and `sigmoid` within 4 ulp, `erf` within 2e-7 absolute and 1e-6
//! relative — inside the tolerances of the ONNX conformance tests (1e-3 relative) and of the
//! comparisons with onnxruntime (1e-4).
//!
//! Outputs are written into uninitialised buffers: every function here writes each element of
//! `dst` exactly once and returns it as an initialised slice, which is what
//! [`crate::tensor::UninitTensor::fill`] checks before handing out the tensor.
//!
//! Why one file: every loop here follows the one contract above (dispatched per level, the same
//! bits at every level, each output element written once), which the tests at the bottom check
//! for all of them together; the few with explicit AVX code (`clamp_in_place`,
//! `leaky_relu_in_place`) keep it too.

use std::mem::MaybeUninit;

use multiversion::multiversion;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::par::{self, GRAIN};

/// The initialised view of `dst` once every element has been written.
///
/// # Safety
/// Every element of `dst` must have been written.
#[inline(always)]
unsafe fn written(dst: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    // SAFETY: forwarded from the caller.
    unsafe { assume_written(dst) }
}

/// The initialised view of `dst`, for loops outside this module that write every element.
///
/// # Safety
/// Every element of `dst` must have been written.
pub(crate) unsafe fn assume_written<T>(dst: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: `MaybeUninit<T>` and `T` have the same layout; the caller promises that every
    // element is initialised.
    unsafe { &mut *(dst as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// `dst[i] = f(src[i])`; `dst` and `src` have the same length.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn map<'d, F: Fn(f32) -> f32>(
    src: &[f32],
    dst: &'d mut [MaybeUninit<f32>],
    f: F,
) -> &'d mut [f32] {
    let n = src.len().min(dst.len());
    let (src, out) = (&src[..n], &mut dst[..n]);
    for (d, &s) in out.iter_mut().zip(src) {
        d.write(f(s));
    }
    // SAFETY: the loop wrote all `n` elements, and `n == dst.len()` for callers that pass equal
    // lengths; shorter `src` leaves the tail unwritten, so it is excluded from the view.
    unsafe { written(&mut dst[..n]) }
}

/// Writes `v` to every element of `dst` and returns it initialised.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn fill<T: Copy>(dst: &mut [MaybeUninit<T>], v: T) -> &mut [T] {
    for d in dst.iter_mut() {
        d.write(v);
    }
    // SAFETY: the loop wrote every element.
    unsafe { assume_written(dst) }
}

/// `v[i] += b` for every element: a bias added to a row in place.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn add_scalar<T: Copy + std::ops::Add<Output = T>>(v: &mut [T], b: T) {
    for x in v.iter_mut() {
        *x = *x + b;
    }
}

/// Copies `src` into `dst` (as many elements as the shorter holds) and returns that part of
/// `dst` initialised.
pub fn copy<'d, T: Copy>(dst: &'d mut [MaybeUninit<T>], src: &[T]) -> &'d mut [T] {
    let n = dst.len().min(src.len());
    // SAFETY: both slices hold at least `n` elements and cannot overlap (`dst` is borrowed
    // mutably); `MaybeUninit<T>` has the layout of `T`, and the copy writes the `n` elements the
    // returned view covers.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<T>(), n);
        assume_written(&mut dst[..n])
    }
}

/// `v` seen as slots to be written, for kernels that write every element of their output.
///
/// # Safety
/// Only initialised values may be written through the view (as `MaybeUninit::write` does).
pub(crate) unsafe fn as_slots<T>(v: &mut [T]) -> &mut [MaybeUninit<T>] {
    // SAFETY: `MaybeUninit<T>` has the layout of `T`; the caller writes only initialised values,
    // so `v` stays initialised.
    unsafe { &mut *(v as *mut [T] as *mut [MaybeUninit<T>]) }
}

/// Writes `src[2i]` to `even[i]` and `src[2i + 1]` to `odd[i]` for every pair of `src` (compiled
/// per SIMD level, where the loads of a pair become vector shuffles).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub(crate) fn deinterleave<T: Copy>(
    src: &[T],
    even: &mut [MaybeUninit<T>],
    odd: &mut [MaybeUninit<T>],
) {
    let n = (src.len() / 2).min(even.len()).min(odd.len());
    let (src, even, odd) = (&src[..2 * n], &mut even[..n], &mut odd[..n]);
    for i in 0..n {
        even[i].write(src[2 * i]);
        odd[i].write(src[2 * i + 1]);
    }
}

/// `dst[i] = src[i]` where `src[i] > dst[i]`, element by element: the running maximum of a
/// window's taps, in the order they are given, with `>` deciding ties and NaNs as a scalar loop
/// would. Always inlined, so that it vectorises at the SIMD level of the loop that calls it (a
/// caller compiled per level by `multiversion`): its rows are often too short to pay a dispatch
/// each.
#[inline(always)]
pub(crate) fn max_assign<T: Copy + PartialOrd>(dst: &mut [T], src: &[T]) {
    // Each chunk's maxima go to a fresh array, then back: written in place, the loop stores
    // only where `v` wins, which compiles to masked stores (microcoded, slow on AMD Zen 2-3).
    const CHUNK: usize = 16;
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let mut d_chunks = dst.chunks_exact_mut(CHUNK);
    for (d, s) in (&mut d_chunks).zip(src.chunks_exact(CHUNK)) {
        let m: [T; CHUNK] = std::array::from_fn(|i| if s[i] > d[i] { s[i] } else { d[i] });
        d.copy_from_slice(&m);
    }
    let rest = n - n % CHUNK;
    for (d, &v) in d_chunks.into_remainder().iter_mut().zip(&src[rest..]) {
        *d = if v > *d { v } else { *d };
    }
}

/// `v[i] = f(v[i])`: [`map`] in place.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn map_in_place<F: Fn(f32) -> f32>(v: &mut [f32], f: F) {
    for x in v {
        *x = f(*x);
    }
}

/// `f` on pieces of `v`, over the current thread pool in chunks of [`GRAIN`] elements for
/// large slices.
pub fn par_in_place(v: &mut [f32], f: impl Fn(&mut [f32]) + Sync + Send) {
    if par::min_len(v.len(), &[1]) == usize::MAX {
        return f(v);
    }
    v.par_chunks_mut(GRAIN).for_each(f);
}

/// `v[i] = if x < lo { lo } else if x > hi { hi } else { x }`: `Clip`, and `Relu` with `lo = 0`
/// and `hi = inf`. NaN and the sign of a zero at a bound stay as they are.
///
/// Through [`map_in_place`], a function that returns some inputs unchanged compiles to stores
/// of only the changed elements, masked stores under AVX2, which AMD Zen 2 and 3 microcode: a
/// fused Relu over the 1.6 MB output of the conv-net's stem took 0.2 ms there. With AVX, this
/// writes every element with `max` and `min`, whose operand order keeps the scalar semantics.
pub fn clamp_in_place(v: &mut [f32], lo: f32, hi: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: AVX is present.
        return unsafe { x86::clamp(v, lo, hi) };
    }
    map_in_place(v, move |x| clamp(x, lo, hi))
}

/// `v[i] = if x < 0 { alpha * x } else { x }` (`LeakyRelu`), every element stored (see
/// [`clamp_in_place`]).
pub fn leaky_relu_in_place(v: &mut [f32], alpha: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: AVX is present.
        return unsafe { x86::leaky_relu(v, alpha) };
    }
    map_in_place(v, move |x| leaky_relu(x, alpha))
}

#[inline(always)]
fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    if x < lo {
        lo
    } else if x > hi {
        hi
    } else {
        x
    }
}

#[inline(always)]
fn leaky_relu(x: f32, alpha: f32) -> f32 {
    if x < 0.0 {
        alpha * x
    } else {
        x
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// See [`super::clamp_in_place`].
    ///
    /// # Safety
    /// The CPU must have AVX.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn clamp(v: &mut [f32], lo: f32, hi: f32) {
        let (lo_v, hi_v) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
        let mut chunks = v.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds eight elements. `max_ps(a, b)` is `a > b ? a : b` and
            // `min_ps(a, b)` is `a < b ? a : b`: with the bound first, NaN and ties give `x`.
            unsafe {
                let x = _mm256_loadu_ps(c.as_ptr());
                let y = _mm256_min_ps(hi_v, _mm256_max_ps(lo_v, x));
                _mm256_storeu_ps(c.as_mut_ptr(), y);
            }
        }
        for x in chunks.into_remainder() {
            *x = super::clamp(*x, lo, hi);
        }
    }

    /// See [`super::leaky_relu_in_place`].
    ///
    /// # Safety
    /// The CPU must have AVX.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn leaky_relu(v: &mut [f32], alpha: f32) {
        let (a, zero) = (_mm256_set1_ps(alpha), _mm256_setzero_ps());
        let mut chunks = v.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds eight elements.
            unsafe {
                let x = _mm256_loadu_ps(c.as_ptr());
                let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(x, zero);
                let y = _mm256_blendv_ps(x, _mm256_mul_ps(a, x), negative);
                _mm256_storeu_ps(c.as_mut_ptr(), y);
            }
        }
        for x in chunks.into_remainder() {
            *x = super::leaky_relu(*x, alpha);
        }
    }
}

/// [`map_in_place`] split over the current thread pool in chunks of [`GRAIN`] elements.
pub fn par_map_in_place<F: Fn(f32) -> f32 + Sync + Send + Copy>(v: &mut [f32], f: F) {
    if par::min_len(v.len(), &[1]) == usize::MAX {
        return map_in_place(v, f);
    }
    v.par_chunks_mut(GRAIN).for_each(|c| map_in_place(c, f));
}

/// `dst[i] = f(a[i], b[i])` over equally long slices.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn zip<'d, F: Fn(f32, f32) -> f32>(
    a: &[f32],
    b: &[f32],
    dst: &'d mut [MaybeUninit<f32>],
    f: F,
) -> &'d mut [f32] {
    let n = a.len().min(b.len()).min(dst.len());
    let (a, b, out) = (&a[..n], &b[..n], &mut dst[..n]);
    for ((d, &x), &y) in out.iter_mut().zip(a).zip(b) {
        d.write(f(x, y));
    }
    // SAFETY: the loop wrote the first `n` elements.
    unsafe { written(&mut dst[..n]) }
}

/// `dst[i] = f(a[i], y)` for one `y`.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn zip_scalar_right<'d, F: Fn(f32, f32) -> f32>(
    a: &[f32],
    y: f32,
    dst: &'d mut [MaybeUninit<f32>],
    f: F,
) -> &'d mut [f32] {
    let n = a.len().min(dst.len());
    for (d, &x) in dst[..n].iter_mut().zip(&a[..n]) {
        d.write(f(x, y));
    }
    // SAFETY: the loop wrote the first `n` elements.
    unsafe { written(&mut dst[..n]) }
}

/// Lanes of the row reductions: sixteen independent partial results, so the loops vectorise
/// (the summation order is fixed, so results do not depend on the SIMD level).
const LANES: usize = 16;

/// The largest element of `row` (`-inf` for an empty row; NaN elements are skipped).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn max(row: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            m[l] = if c[l] > m[l] { c[l] } else { m[l] };
        }
    }
    let mut best = f32::NEG_INFINITY;
    for &v in m.iter().chain(tail) {
        if v > best {
            best = v;
        }
    }
    best
}

/// `Σ row`, in [`LANES`] partial sums.
#[inline(always)]
fn sum(row: &[f32]) -> f32 {
    let mut sums = [0.0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for l in 0..LANES {
            sums[l] += c[l];
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// `Σ (row - mean)²`, in [`LANES`] partial sums.
#[inline(always)]
fn sum_sq_dev(row: &[f32], mean: f32) -> f32 {
    let mut sums = [0.0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|&v| (v - mean) * (v - mean))
        .sum();
    for c in chunks {
        for l in 0..LANES {
            let d = c[l] - mean;
            sums[l] += d * d;
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// Softmax of one row into `dst`: `exp(x - max) / Σ exp(x - max)`. A row whose maximum is
/// not finite subtracts nothing (infinities and NaN propagate as the definition says).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn softmax_row(row: &[f32], dst: &mut [MaybeUninit<f32>]) {
    let n = row.len().min(dst.len());
    let m = max(&row[..n]);
    let shift = if m.is_finite() { m } else { 0.0 };
    for (d, &x) in dst[..n].iter_mut().zip(&row[..n]) {
        d.write(exp(x - shift));
    }
    // SAFETY: the loop above wrote all `n` elements.
    let out = unsafe { written(&mut dst[..n]) };
    let inv = 1.0 / sum(out);
    for v in out.iter_mut() {
        *v *= inv;
    }
}

/// Layer normalisation of one row into `dst`: `(x - mean) / sqrt(var + eps) * scale + bias`,
/// with the population variance.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn layer_norm_row(
    row: &[f32],
    scale: &[f32],
    bias: &[f32],
    eps: f32,
    dst: &mut [MaybeUninit<f32>],
) {
    let n = row.len().min(dst.len()).min(scale.len()).min(bias.len());
    let (mean, inv) = moments(&row[..n], eps);
    for (((d, &x), &s), &b) in dst[..n]
        .iter_mut()
        .zip(&row[..n])
        .zip(&scale[..n])
        .zip(&bias[..n])
    {
        d.write((x - mean) * inv * s + b);
    }
}

/// The mean of `row` and `1 / sqrt(var + eps)` of its population variance `var`.
#[inline(always)]
fn moments(row: &[f32], eps: f32) -> (f32, f32) {
    let inv_n = 1.0 / row.len().max(1) as f32;
    let mean = sum(row) * inv_n;
    (mean, 1.0 / (sum_sq_dev(row, mean) * inv_n + eps).sqrt())
}

/// `(x - mean) / sqrt(var + eps)` of one row into `dst` (as long): the normalisation of
/// [`layer_norm_rows`] before its scale and bias, the same bits.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn normalize_row<'d>(row: &[f32], eps: f32, dst: &'d mut [MaybeUninit<f32>]) -> &'d mut [f32] {
    let n = row.len().min(dst.len());
    let (mean, inv) = moments(&row[..n], eps);
    for (d, &x) in dst[..n].iter_mut().zip(&row[..n]) {
        d.write((x - mean) * inv);
    }
    // SAFETY: the loop above wrote all `n` elements.
    unsafe { written(&mut dst[..n]) }
}

/// Layer normalisation of each row of `scale.len()` consecutive elements of `src` into `dst`
/// (equally long); `bias` is as long as `scale`.
pub fn layer_norm_rows<'d>(
    src: &[f32],
    scale: &[f32],
    bias: &[f32],
    eps: f32,
    dst: &'d mut [MaybeUninit<f32>],
) -> &'d mut [f32] {
    let size = scale.len();
    let n = src.len().min(dst.len());
    if size == 0 || n == 0 || bias.len() != size {
        return &mut [];
    }
    let n = n - n % size;
    src[..n]
        .par_chunks(size)
        .zip(dst[..n].par_chunks_mut(size))
        .with_min_len(par::min_len(n / size, &[size]))
        .for_each(|(s, d)| layer_norm_row(s, scale, bias, eps, d));
    // SAFETY: `layer_norm_row` writes every element of each row, and the rows cover `dst[..n]`.
    unsafe { written(&mut dst[..n]) }
}

/// Softmax of each row of `size` consecutive elements of `src` into `dst` (equally long).
pub fn softmax_rows<'d>(
    src: &[f32],
    size: usize,
    dst: &'d mut [MaybeUninit<f32>],
) -> &'d mut [f32] {
    let n = src.len().min(dst.len());
    if size == 0 || n == 0 {
        return &mut [];
    }
    let n = n - n % size;
    let rows = src[..n].par_chunks(size).zip(dst[..n].par_chunks_mut(size));
    rows.with_min_len(par::min_len(n / size, &[size]))
        .for_each(|(s, d)| softmax_row(s, d));
    // SAFETY: `softmax_row` writes every element of each row, and the rows cover `dst[..n]`.
    unsafe { written(&mut dst[..n]) }
}

/// [`map`] split over the current thread pool in chunks of [`GRAIN`] elements.
pub fn par_map<'d, F: Fn(f32) -> f32 + Sync + Send + Copy>(
    src: &[f32],
    dst: &'d mut [MaybeUninit<f32>],
    f: F,
) -> &'d mut [f32] {
    let n = src.len().min(dst.len());
    if par::min_len(n, &[1]) == usize::MAX {
        return map(&src[..n], &mut dst[..n], f);
    }
    src[..n]
        .par_chunks(GRAIN)
        .zip(dst[..n].par_chunks_mut(GRAIN))
        .for_each(|(s, d)| {
            map(s, d, f);
        });
    // SAFETY: `map` writes every element of each chunk, and the chunks cover `dst[..n]`.
    unsafe { written(&mut dst[..n]) }
}

/// `dst = f(a, b)` with `a` and `b` broadcast against each other to `out` (numpy rules, shapes
/// already checked), as runs: the output's dims are merged where both operands step through
/// them alike, and each innermost run is one vector loop over contiguous or repeated elements.
/// Runs are split over the current thread pool when the output is large.
pub fn broadcast_zip<'d, F: Fn(f32, f32) -> f32 + Sync + Send + Copy>(
    (a, a_shape): (&[f32], &[usize]),
    (b, b_shape): (&[f32], &[usize]),
    out: &[usize],
    dst: &'d mut [MaybeUninit<f32>],
    f: F,
) -> &'d mut [f32] {
    let total = dst.len();
    if a_shape == b_shape && a.len() == total && b.len() == total {
        if par::min_len(total, &[1]) == usize::MAX {
            return zip(a, b, dst, f);
        }
        a.par_chunks(GRAIN)
            .zip(b.par_chunks(GRAIN))
            .zip(dst.par_chunks_mut(GRAIN))
            .for_each(|((x, y), d)| {
                zip(x, y, d, f);
            });
        // SAFETY: `zip` writes every element of each chunk, and the chunks cover `dst`.
        return unsafe { written(dst) };
    }
    let runs = crate::ops::util::BroadcastRuns::new(a_shape, b_shape, out);
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
                (1, 1) => {
                    zip(&a[ia..ia + n], &b[ib..ib + n], d, f);
                }
                (1, 0) => {
                    zip_scalar_right(&a[ia..ia + n], b[ib], d, f);
                }
                (0, 1) => {
                    let x = a[ia];
                    zip_scalar_right(&b[ib..ib + n], x, d, move |y, x| f(x, y));
                }
                _ => {
                    for (j, v) in d.iter_mut().enumerate() {
                        v.write(f(a[ia + j * ra], b[ib + j * rb]));
                    }
                }
            }
        });
    // SAFETY: every run writes each of its `n` elements, and the runs cover `dst`.
    unsafe { written(dst) }
}

/// `a = f(a, b)` with `b` broadcast to `a`'s shape (numpy rules, shapes already checked): the
/// in-place form of [`broadcast_zip`], by the same runs. Returns `false`, with `a` untouched,
/// when `a` is not cut into whole runs (shapes that do not broadcast into `a`'s).
#[must_use]
pub fn broadcast_zip_in_place<F: Fn(f32, f32) -> f32 + Sync + Send + Copy>(
    (a, a_shape): (&mut [f32], &[usize]),
    (b, b_shape): (&[f32], &[usize]),
    f: F,
) -> bool {
    let total = a.len();
    if a_shape == b_shape && b.len() == total {
        if par::min_len(total, &[1]) == usize::MAX {
            zip_in_place(a, b, f);
        } else {
            a.par_chunks_mut(GRAIN)
                .zip(b.par_chunks(GRAIN))
                .for_each(|(x, y)| zip_in_place(x, y, f));
        }
        return true;
    }
    if total == 0 {
        return true;
    }
    let runs = crate::ops::util::BroadcastRuns::new(a_shape, b_shape, a_shape);
    let n = runs.run_len();
    if n == 0 || !total.is_multiple_of(n) {
        return false;
    }
    a.par_chunks_mut(n)
        .enumerate()
        .with_min_len(par::min_len(total / n, &[n]))
        .for_each(|(k, x)| {
            // `a` has the output's shape, so its run `k` is the chunk `x` itself.
            let (_, _, ib, rb) = runs.run(k);
            match rb {
                1 => zip_in_place(x, &b[ib..ib + n], f),
                0 => {
                    let y = b[ib];
                    map_in_place(x, move |v| f(v, y));
                }
                _ => {
                    for (j, v) in x.iter_mut().enumerate() {
                        *v = f(*v, b[ib + j * rb]);
                    }
                }
            }
        });
    true
}

/// `a[i] = f(a[i], b[i])`: [`zip`] in place.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn zip_in_place<F: Fn(f32, f32) -> f32>(a: &mut [f32], b: &[f32], f: F) {
    for (x, &y) in a.iter_mut().zip(b) {
        *x = f(*x, y);
    }
}

/// `2^n` for an integer-valued `n` in `[-126, 127]`, by building the exponent bits: adding
/// `1.5 · 2^23 + 127` leaves `n + 127` in the low mantissa bits, and the shift moves them into
/// the exponent field (no float-to-int conversion, which would not vectorise).
#[inline(always)]
fn pow2i(n: f32) -> f32 {
    const BIAS: f32 = 12_582_912.0 + 127.0;
    f32::from_bits((n + BIAS).to_bits() << 23)
}

/// Rounds to the nearest integer (ties to even) for `|x| < 2^22`, without a call.
#[inline(always)]
fn round_magic(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    (x + MAGIC) - MAGIC
}

/// `e^x`, within 2 ulp (subnormal results included), `inf` above 88.73, NaN for NaN.
///
/// The argument is reduced to `r = x - n ln 2` with `|r| <= ln2 / 2` (`ln 2` in two parts so
/// the product is exact), `e^r` comes from a degree-6 polynomial, and `2^n` is applied in two
/// halves so that neither leaves the normal range.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_with::<false>(x)
}

/// [`exp`] with its products and sums fused (`FUSED`) or separate: callers compiled only for
/// FMA levels (see [`erf`]) take the fused form, half the instructions.
#[inline(always)]
fn exp_with<const FUSED: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let madd = |a: f32, b: f32, c: f32| if FUSED { a.mul_add(b, c) } else { a * b + c };
    let xc = x.clamp(-104.0, 89.0);
    let n = round_magic(xc * LOG2E);
    let r = if FUSED {
        (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, xc))
    } else {
        (xc - n * LN2_HI) - n * LN2_LO
    };
    let mut p = 1.987_569_1e-4;
    p = madd(p, r, 1.398_199_9e-3);
    p = madd(p, r, 8.333_452e-3);
    p = madd(p, r, 4.166_579_6e-2);
    p = madd(p, r, 1.666_666_5e-1);
    p = madd(p, r, 5e-1);
    let e = madd(p * r, r, r) + 1.0;
    let half = round_magic(n * 0.5 - 0.25);
    let y = e * pow2i(half) * pow2i(n - half);
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_with::<false>(x)
}

/// [`sigmoid`] with the products and sums of its `exp` fused (`FUSED`) or separate: loops
/// compiled only for FMA levels whose speed is bound by the chain of dependent operations (a
/// recurrent cell's gates) take the fused form.
#[inline(always)]
pub fn sigmoid_with<const FUSED: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp_with::<FUSED>(-x))
}

/// `tanh(x)`: an odd polynomial below 0.625, `1 - 2 / (e^2x + 1)` above.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    tanh_with::<false>(x)
}

/// [`tanh`] with its products and sums fused (`FUSED`) or separate (see [`sigmoid_with`]).
#[inline(always)]
pub fn tanh_with<const FUSED: bool>(x: f32) -> f32 {
    let madd = |a: f32, b: f32, c: f32| if FUSED { a.mul_add(b, c) } else { a * b + c };
    let a = x.abs();
    let z = x * x;
    let mut p = -5.704_988_7e-3;
    p = madd(p, z, 2.063_909e-2);
    p = madd(p, z, -5.373_971_6e-2);
    p = madd(p, z, 1.333_144_2e-1);
    p = madd(p, z, -3.333_328e-1);
    let small = madd(x * z, p, x);
    let big = 1.0 - 2.0 / (exp_with::<FUSED>(2.0 * a) + 1.0);
    let big = if x < 0.0 { -big } else { big };
    if a < 0.625 {
        small
    } else {
        big
    }
}

/// The error function, within 1.3e-7 of the exact value (and 1.8e-7 relative).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    // Below 0.921875, `x P(x²)`; above, `1 - e^Q(|x|)` with `Q` fitting `ln erfc` up to 4, past
    // which `erf` rounds to 1. Both are least-squares fits on Chebyshev nodes (`P` of degree 5
    // in relative error, `Q` of degree 8), within 1.3e-7 of `erf` everywhere: no division, one
    // `exp`. The polynomials are fused multiply-adds (the loops calling `erf` are compiled for
    // FMA levels; elsewhere `mul_add` is still exact, only slower), half the instructions of
    // separate products and sums.
    //
    // A vector loop of `erf` is bound by the latency of its longest chain of dependent
    // operations, not by their number: both branches are computed, and only a few vectors'
    // chains fit in the CPU's window at once. So `Q` is evaluated in Estrin's form (four
    // dependent steps where Horner's rule takes eight) and its `exp` by [`exp_negative`]
    // (which skips the clamping and the two-step scaling its bounded argument does not need):
    // measured on Zen 3 (AMD EPYC, AVX2), `multigather run --repeat 50` of one `Erf` over
    // `[4, 128, 1536]` at 1 thread, minima of three alternated runs: 1.35-1.63 -> 1.04-1.19 ms
    // (Horner's rule and the general `exp` before); the quantised encoder's three GELU chains
    // 5.3-6.4 -> 4.4-4.5 ms.
    let a = x.abs();
    let z = x * x;
    let mut p: f32 = -6.024_592e-4;
    p = p.mul_add(z, 5.000_894e-3);
    p = p.mul_add(z, -2.677_295_7e-2);
    p = p.mul_add(z, 1.128_204e-1);
    p = p.mul_add(z, -3.761_252_5e-1);
    p = p.mul_add(z, std::f32::consts::FRAC_2_SQRT_PI);
    let small = x * p;
    let t = a.min(4.0);
    let (t2, q01) = (t * t, t.mul_add(-1.130_163_9, 3.025_380_4e-4));
    let (q23, q45) = (
        t.mul_add(-1.099_740_2e-1, -6.319_417e-1),
        t.mul_add(-4.739_412e-3, 2.636_236_5e-2),
    );
    let (t4, q67) = (t2 * t2, t.mul_add(-4.557_103e-5, 5.926_004_4e-4));
    let q03 = q23.mul_add(t2, q01);
    let q47 = q67.mul_add(t2, q45);
    let q = (1.613_093_8e-6 * t4).mul_add(t4, q47.mul_add(t4, q03));
    let big = 1.0 - exp_negative(q);
    let big = if x < 0.0 { -big } else { big };
    if a < 0.921_875 {
        small
    } else if x.is_nan() {
        x
    } else {
        big
    }
}

/// `e^x` for `|x| <= 87` (where `2^n` is a normal number), by [`exp`]'s reduction and
/// polynomial without what the rest of its range needs (clamping, NaN, scaling by `2^n` in two
/// steps for subnormal results), the polynomial in Estrin's form: a shorter chain of dependent
/// operations for [`erf`], within the same 2e-7 of `erf` (its test), not always [`exp`]'s bits.
#[inline(always)]
fn exp_negative(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let n = round_magic(x * LOG2E);
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let r2 = r * r;
    let c45 = r.mul_add(1.987_569_1e-4, 1.398_199_9e-3);
    let c23 = r.mul_add(8.333_452e-3, 4.166_579_6e-2);
    let c01 = r.mul_add(1.666_666_5e-1, 5e-1);
    let r4 = r2 * r2;
    let p = c45.mul_add(r4, c23.mul_add(r2, c01));
    let e = (p * r).mul_add(r, r) + 1.0;
    e * pow2i(n)
}

/// `x Φ(x) = x (1 + erf(x / √2)) / 2`, the exact GELU.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The tanh approximation of GELU: `x (1 + tanh(√(2/π) (x + 0.044715 x³))) / 2`.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const K: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + tanh(K * (x + 0.044_715 * x * x * x)))
}

/// One row-major matrix (`rows` rows of `ld` elements, possibly not yet written) whose column
/// blocks are written by concurrent tasks, each its own columns: a product over a tile of
/// positions lands straight in its columns of a convolution's output, with no per-tile block to
/// copy in afterwards, and threads split an output by the same parts of every plane.
pub(in crate::ops) struct ColumnBlocks<'c, T> {
    pub(in crate::ops) ptr: *mut T,
    pub(in crate::ops) rows: usize,
    pub(in crate::ops) ld: usize,
    _c: std::marker::PhantomData<&'c mut [T]>,
}

// SAFETY: the blocks are only written through `product` and `slots`, whose callers give each
// concurrent task its own columns, so tasks on other threads never touch the same element.
unsafe impl<T: Send> Sync for ColumnBlocks<'_, T> {}

impl<'c, T> ColumnBlocks<'c, T> {
    /// The `rows x ld` matrix at the start of `c`.
    pub fn new(c: &'c mut [std::mem::MaybeUninit<T>], rows: usize, ld: usize) -> Result<Self> {
        if rows.checked_mul(ld).is_none_or(|n| n > c.len()) {
            return Err(Error::Eval(format!(
                "a {rows}x{ld} matrix does not fit in {} elements",
                c.len()
            )));
        }
        Ok(ColumnBlocks {
            ptr: c.as_mut_ptr().cast::<T>(),
            rows,
            ld,
            _c: std::marker::PhantomData,
        })
    }

    /// Calls `f(i, columns)` on columns `col0..col0 + n` of each row `i` in turn.
    ///
    /// # Safety
    /// No concurrent task may touch these columns, and they must have been written.
    pub unsafe fn for_each_row(&self, col0: usize, n: usize, f: impl Fn(usize, &mut [T])) {
        if col0.checked_add(n).is_none_or(|end| end > self.ld) {
            return;
        }
        for i in 0..self.rows {
            // SAFETY: `new` checked that the `rows x ld` matrix lies in the slice, the columns
            // are inside a row (checked above), written and owned by the caller.
            f(i, unsafe {
                std::slice::from_raw_parts_mut(self.ptr.add(i * self.ld + col0), n)
            });
        }
    }

    /// Columns `col0..col0 + n` of row `i`, possibly not yet written; `None` outside the
    /// matrix.
    ///
    /// # Safety
    /// No concurrent task may touch these columns, and no other slice of them may be alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slots(
        &self,
        i: usize,
        col0: usize,
        n: usize,
    ) -> Option<&mut [std::mem::MaybeUninit<T>]> {
        if i >= self.rows || col0.checked_add(n).is_none_or(|end| end > self.ld) {
            return None;
        }
        // SAFETY: `new` checked that the `rows x ld` matrix lies in the slice, the columns are
        // inside row `i` (checked above) and the caller owns them alone.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(i * self.ld + col0).cast(), n) })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clamp_and_leaky_relu_keep_the_scalar_semantics_on_every_path() {
        let specials = [
            f32::NAN,
            -0.0,
            0.0,
            -1.5,
            2.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-45,
            -1e-45,
            6.0,
            7.0,
        ];
        // Long enough for the vector loop and a remainder.
        let v: Vec<f32> = specials.iter().cycle().take(8 * 5 + 3).copied().collect();
        for (lo, hi) in [(0.0, f32::INFINITY), (0.0, 6.0), (-1.0, 1.0)] {
            let mut got = v.clone();
            super::clamp_in_place(&mut got, lo, hi);
            for (&x, &g) in v.iter().zip(&got) {
                assert_eq!(
                    g.to_bits(),
                    super::clamp(x, lo, hi).to_bits(),
                    "clamp {x} to {lo}..{hi}"
                );
            }
        }
        let mut got = v.clone();
        super::leaky_relu_in_place(&mut got, 0.1);
        for (&x, &g) in v.iter().zip(&got) {
            assert_eq!(
                g.to_bits(),
                super::leaky_relu(x, 0.1).to_bits(),
                "leaky relu {x}"
            );
        }
    }

    use super::*;

    /// Every `step`-th `f32` bit pattern in `[lo, hi]`, both signs.
    fn sample(lo: f32, hi: f32, count: usize) -> Vec<f32> {
        let (a, b) = (lo.to_bits(), hi.to_bits());
        let step = ((b - a) as usize / count).max(1);
        (a..=b)
            .step_by(step)
            .map(f32::from_bits)
            .flat_map(|v| [v, -v])
            .collect()
    }

    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        if got == w || (got.is_nan() && w.is_nan()) {
            return 0.0;
        }
        let spacing = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()) as f64;
        ((got as f64) - want).abs() / spacing.max(f64::MIN_POSITIVE)
    }

    #[test]
    fn exp_is_within_two_ulp_everywhere() {
        for x in sample(1e-8, 104.0, 200_000) {
            let want = (x as f64).exp();
            let got = exp(x);
            if want > f32::MAX as f64 {
                assert_eq!(got, f32::INFINITY, "{x}");
            } else {
                assert!(ulps(got, want) <= 2.0, "exp({x}) = {got}, want {want}");
            }
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_and_sigmoid_are_within_four_ulp() {
        for x in sample(1e-6, 20.0, 100_000) {
            let t = (x as f64).tanh();
            assert!(ulps(tanh(x), t) <= 4.0, "tanh({x}) = {}, want {t}", tanh(x));
            let fused = tanh_with::<true>(x);
            assert!(ulps(fused, t) <= 4.0, "fused tanh({x}) = {fused}, want {t}");
            let s = 1.0 / (1.0 + (-(x as f64)).exp());
            let fused = sigmoid_with::<true>(x);
            assert!(
                ulps(fused, s) <= 4.0,
                "fused sigmoid({x}) = {fused}, want {s}"
            );
            assert!(
                ulps(sigmoid(x), s) <= 4.0,
                "sigmoid({x}) = {}, want {s}",
                sigmoid(x)
            );
        }
        assert_eq!(tanh(100.0), 1.0);
        assert_eq!(tanh(-100.0), -1.0);
        assert!(tanh(f32::NAN).is_nan());
    }

    #[test]
    fn erf_is_within_float_tolerance() {
        for x in sample(1e-7, 10.0, 100_000) {
            let want = crate::ops::math::erf_f64(x as f64);
            let got = erf(x) as f64;
            let err = (got - want).abs();
            assert!(
                err <= 2e-7 && err <= 1e-6 * want.abs(),
                "erf({x}) = {got}, want {want}"
            );
        }
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(erf(f32::INFINITY), 1.0);
    }

    #[test]
    fn every_simd_level_computes_the_same_bits() {
        let xs = sample(1e-3, 30.0, 5000);
        let mut out = vec![MaybeUninit::uninit(); xs.len()];
        let got = map(&xs, &mut out, gelu).to_vec();
        let scalar: Vec<f32> = xs.iter().map(|&x| gelu(x)).collect();
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            scalar.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn softmax_rows_sum_to_one_and_match_the_definition() {
        for n in [0usize, 1, 7, 16, 33, 128] {
            let row: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 5.0).collect();
            let mut out = vec![MaybeUninit::uninit(); n];
            let out = softmax_rows(&row, n, &mut out).to_vec();
            assert_eq!(out.len(), n);
            let m = row
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, |a, b| a.max(b as f64));
            let sum: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
            for (&o, &x) in out.iter().zip(&row) {
                let want = (x as f64 - m).exp() / sum;
                assert!(
                    (o as f64 - want).abs() <= 1e-6 * want.max(1e-3),
                    "{o} vs {want}"
                );
            }
        }
    }
}
