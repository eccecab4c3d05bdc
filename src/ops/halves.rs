//! Conversions of whole slices between `f32` and the half types (`float16`, `bfloat16`), and the
//! blocked driver that runs an `f32` loop over half tensors.
//!
//! Every conversion here gives the bits of `half`'s scalar one (`f16::to_f32` / `f16::from_f32`,
//! `bf16::to_f32` / `bf16::from_f32`): `float16` through the F16C instructions (`vcvtph2ps`,
//! `vcvtps2ph` with round-to-nearest-even, 16 lanes with AVX-512F, 8 with F16C), which are what
//! `half` itself calls one element at a time when the CPU has them; elsewhere, and for
//! `bfloat16` (whose rounding is a few integer operations), plain loops compiled per SIMD level
//! by `multiversion`. The tests compare every `float16` and `bfloat16` value, and random `f32`s
//! with ties, NaNs and infinities, with the scalar conversions.
//!
//! [`map_checked`] is how element-wise functions compute on half tensors: a block of elements
//! widened into a buffer on the stack, the vectorised `f32` loop run on it, the results rounded
//! once into the output, and the few elements whose `f32` result lies too near a rounding
//! boundary to be sure recomputed exactly.

use std::mem::MaybeUninit;

use half::{bf16, f16};
use multiversion::multiversion;

use super::vector::assume_written;

/// Elements converted per block: a few kilobytes of `f32` on the stack, inside the L1 cache.
pub(crate) const BLOCK: usize = 512;

/// An element type that converts to and from `f32` by slices: `f32` itself and the half types.
pub(crate) trait Widen: Copy + Send + Sync + 'static {
    /// Writes `src` widened into `dst` (as many elements as the shorter holds) and returns them.
    fn widen_slice<'d>(src: &[Self], dst: &'d mut [MaybeUninit<f32>]) -> &'d mut [f32];
    /// Writes `src` rounded once into `dst` (as many elements as the shorter holds) and returns
    /// them.
    fn narrow_slice<'d>(src: &[f32], dst: &'d mut [MaybeUninit<Self>]) -> &'d mut [Self];
    /// Whether a real within [`MARGIN`] `f32` ulps of `y` could round to another value of this
    /// type than `y` does: `y` near a midpoint between two values, outside the normal range, or
    /// not finite.
    fn near_boundary(y: f32) -> bool;
}

/// How far, in `f32` ulps, a fast `f32` function may be from the exact value for
/// [`map_checked`] to trust its rounding.
pub(crate) const MARGIN: i32 = 64;

impl Widen for f32 {
    fn widen_slice<'d>(src: &[f32], dst: &'d mut [MaybeUninit<f32>]) -> &'d mut [f32] {
        super::vector::copy(dst, src)
    }
    fn narrow_slice<'d>(src: &[f32], dst: &'d mut [MaybeUninit<f32>]) -> &'d mut [f32] {
        super::vector::copy(dst, src)
    }
    fn near_boundary(y: f32) -> bool {
        !y.is_finite()
    }
}

impl Widen for f16 {
    fn widen_slice<'d>(src: &[f16], dst: &'d mut [MaybeUninit<f32>]) -> &'d mut [f32] {
        f16_to_f32(src, dst)
    }
    fn narrow_slice<'d>(src: &[f32], dst: &'d mut [MaybeUninit<f16>]) -> &'d mut [f16] {
        f32_to_f16(src, dst)
    }
    fn near_boundary(y: f32) -> bool {
        let b = y.to_bits() & 0x7FFF_FFFF;
        // Below 2^-14 (subnormal halves) or from 65280 up (the rounding to infinity).
        let outside = !(0x3880_0000..0x477F_0000).contains(&b);
        // 13 bits are dropped; their midpoint is 0x1000.
        outside || ((b & 0x1FFF) as i32 - 0x1000).abs() <= MARGIN
    }
}

impl Widen for bf16 {
    fn widen_slice<'d>(src: &[bf16], dst: &'d mut [MaybeUninit<f32>]) -> &'d mut [f32] {
        bf16_to_f32(src, dst)
    }
    fn narrow_slice<'d>(src: &[f32], dst: &'d mut [MaybeUninit<bf16>]) -> &'d mut [bf16] {
        f32_to_bf16(src, dst)
    }
    fn near_boundary(y: f32) -> bool {
        let b = y.to_bits() & 0x7FFF_FFFF;
        // Subnormal, or near the largest values (the rounding to infinity), or not finite.
        let outside = !(0x0080_0000..0x7F7F_0000).contains(&b);
        // 16 bits are dropped; their midpoint is 0x8000.
        outside || ((b & 0xFFFF) as i32 - 0x8000).abs() <= MARGIN
    }
}

/// Which F16C code this CPU runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Level {
    Avx512,
    F16c,
    Scalar,
}

fn level() -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static LEVEL: OnceLock<Level> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            if std::arch::is_x86_feature_detected!("avx512f") {
                Level::Avx512
            } else if std::arch::is_x86_feature_detected!("f16c")
                && std::arch::is_x86_feature_detected!("avx")
            {
                Level::F16c
            } else {
                Level::Scalar
            }
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    Level::Scalar
}

/// `f16::to_f32` of every element of `src` into `dst`.
pub(crate) fn f16_to_f32<'d>(src: &[f16], dst: &'d mut [MaybeUninit<f32>]) -> &'d mut [f32] {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    let done = match level() {
        // SAFETY: the level was detected on this CPU.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { x86::f16_to_f32_avx512(src, dst) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::F16c => unsafe { x86::f16_to_f32_f16c(src, dst) },
        _ => 0,
    };
    for (d, s) in dst[done..].iter_mut().zip(&src[done..]) {
        d.write(s.to_f32());
    }
    // SAFETY: the vector loop wrote `..done` and the scalar loop the rest.
    unsafe { assume_written(dst) }
}

/// `f16::from_f32` of every element of `src` into `dst`.
pub(crate) fn f32_to_f16<'d>(src: &[f32], dst: &'d mut [MaybeUninit<f16>]) -> &'d mut [f16] {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    let done = match level() {
        // SAFETY: the level was detected on this CPU.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { x86::f32_to_f16_avx512(src, dst) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::F16c => unsafe { x86::f32_to_f16_f16c(src, dst) },
        _ => 0,
    };
    for (d, &s) in dst[done..].iter_mut().zip(&src[done..]) {
        d.write(f16::from_f32(s));
    }
    // SAFETY: the vector loop wrote `..done` and the scalar loop the rest.
    unsafe { assume_written(dst) }
}

/// `bf16::to_f32` of every element of `src` into `dst` (a NaN gets its quiet bit, as `half`
/// gives it).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub(crate) fn bf16_to_f32<'d>(src: &[bf16], dst: &'d mut [MaybeUninit<f32>]) -> &'d mut [f32] {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    for (d, s) in dst.iter_mut().zip(src) {
        let i = u32::from(s.to_bits());
        let quiet = if i & 0x7FFF > 0x7F80 { 0x40 } else { 0 };
        d.write(f32::from_bits((i | quiet) << 16));
    }
    // SAFETY: the loop wrote every element of `dst`.
    unsafe { assume_written(dst) }
}

/// `bf16::from_f32` of every element of `src` into `dst`: rounded to nearest even, a NaN kept
/// with its quiet bit set.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub(crate) fn f32_to_bf16<'d>(src: &[f32], dst: &'d mut [MaybeUninit<bf16>]) -> &'d mut [bf16] {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    for (d, s) in dst.iter_mut().zip(src) {
        let x = s.to_bits();
        let up = u32::from(x & 0x8000 != 0 && x & 0x17FFF != 0);
        let rounded = (x >> 16) + up;
        let nan = (x >> 16) | 0x40;
        let bits = if x & 0x7FFF_FFFF > 0x7F80_0000 {
            nan
        } else {
            rounded
        };
        d.write(bf16::from_bits(bits as u16));
    }
    // SAFETY: the loop wrote every element of `dst`.
    unsafe { assume_written(dst) }
}

/// `exact` of every element of `src`, computed by `fast` in `f32` where that gives the same
/// result: each block is widened, mapped by `fast` with the vectorised loop, and rounded once;
/// an element whose `fast` value lies near a rounding boundary of `T` ([`Widen::near_boundary`])
/// is recomputed by `exact`. `fast` must be within [`MARGIN`] `f32` ulps of the exact value
/// wherever that value is a normal number (the callers' tests check every half input).
pub(crate) fn map_checked<'d, T: Widen>(
    src: &[T],
    dst: &'d mut [MaybeUninit<T>],
    fast: impl Fn(f32) -> f32 + Copy,
    exact: impl Fn(f32) -> T,
) -> &'d mut [T] {
    let n = src.len().min(dst.len());
    let mut wide = [MaybeUninit::<f32>::uninit(); BLOCK];
    let mut out = [MaybeUninit::<f32>::uninit(); BLOCK];
    for (s, d) in src[..n].chunks(BLOCK).zip(dst[..n].chunks_mut(BLOCK)) {
        let w = T::widen_slice(s, &mut wide[..s.len()]);
        let o = super::vector::map(w, &mut out[..s.len()], fast);
        T::narrow_slice(o, d);
        for ((d, &y), &x) in d.iter_mut().zip(o.iter()).zip(w.iter()) {
            if T::near_boundary(y) {
                d.write(exact(x));
            }
        }
    }
    // SAFETY: every block of `dst[..n]` was written by `narrow`.
    unsafe { assume_written(&mut dst[..n]) }
}

/// `v` rounded to `f32` by rounding to odd: truncated toward zero, with the last bit set when
/// that was inexact. Rounding the result once more to a type with at most 22 significant bits
/// (`float16`, `bfloat16`) then gives `v` rounded once to that type, nearest even: no double
/// rounding. (`half`'s own `bf16::from_f64` does not: it gives `-4.625` for `-4.6406255`,
/// whose nearest `bfloat16` is `-4.65625`.)
pub(crate) fn f32_round_to_odd(v: f64) -> f32 {
    let f = v as f32;
    if !f.is_finite() || f64::from(f) == v {
        return f;
    }
    // Inexact: `f` is not zero when it is farther from zero than `v`.
    let toward_zero = match f64::from(f).abs() > v.abs() {
        true => f32::from_bits(f.to_bits() - 1),
        false => f,
    };
    f32::from_bits(toward_zero.to_bits() | 1)
}

/// `v` rounded once to `float16`, nearest even ([`f32_round_to_odd`]; `half`'s
/// `f16::from_f64` rounds to `f32` first, and gives `1.0078125` for `exp` of `0x1f79`, whose
/// nearest `float16` is `1.0068359`).
pub(crate) fn f16_from_f64(v: f64) -> f16 {
    f16::from_f32(f32_round_to_odd(v))
}

/// `v` rounded once to `bfloat16`, nearest even ([`f32_round_to_odd`]).
pub(crate) fn bf16_from_f64(v: f64) -> bf16 {
    bf16::from_f32(f32_round_to_odd(v))
}

/// `f` of every element of `src` into `dst` (as many of it), computed in `f32` a block at a
/// time: widened, mapped by the vectorised loop and rounded once, all in cache.
pub(crate) fn map_blocks<'d, T: Widen>(
    src: &[T],
    dst: &'d mut [MaybeUninit<T>],
    f: impl Fn(f32) -> f32 + Copy,
) -> &'d mut [T] {
    let n = src.len().min(dst.len());
    let mut wide = [MaybeUninit::<f32>::uninit(); BLOCK];
    let mut out = [MaybeUninit::<f32>::uninit(); BLOCK];
    for (s, d) in src[..n].chunks(BLOCK).zip(dst[..n].chunks_mut(BLOCK)) {
        let w = T::widen_slice(s, &mut wide[..s.len()]);
        T::narrow_slice(super::vector::map(w, &mut out[..s.len()], f), d);
    }
    // SAFETY: every block of `dst[..n]` was written by `narrow_slice`.
    unsafe { assume_written(&mut dst[..n]) }
}

/// `f(x[i], y[i])` for the elements of two slices of halves (and as many of `dst`), computed
/// in `f32` a block at a time: each block of both widened, zipped by the vectorised loop and
/// rounded once, all in cache (the same bits as widening both whole first).
pub(crate) fn zip_blocks<'d, T: Widen>(
    x: &[T],
    y: &[T],
    dst: &'d mut [MaybeUninit<T>],
    f: impl Fn(f32, f32) -> f32 + Copy,
) -> &'d mut [T] {
    let n = x.len().min(y.len()).min(dst.len());
    let mut wx = [MaybeUninit::<f32>::uninit(); BLOCK];
    let mut wy = [MaybeUninit::<f32>::uninit(); BLOCK];
    let mut out = [MaybeUninit::<f32>::uninit(); BLOCK];
    let blocks = x[..n].chunks(BLOCK).zip(y[..n].chunks(BLOCK));
    for ((a, b), d) in blocks.zip(dst[..n].chunks_mut(BLOCK)) {
        let a = T::widen_slice(a, &mut wx[..a.len()]);
        let b = T::widen_slice(b, &mut wy[..b.len()]);
        let o = super::vector::zip(a, b, &mut out[..a.len()], f);
        T::narrow_slice(o, d);
    }
    // SAFETY: every block of `dst[..n]` was written by `narrow_slice`.
    unsafe { assume_written(&mut dst[..n]) }
}

/// `f` of rows of `row` consecutive elements of `src` into `dst` (as long), computed in `f32`:
/// groups of whole rows (a few thousand elements, at least one row) widened into a buffer of
/// each task's own, `f` run on the group, its results rounded once into `dst`. Groups are
/// split over the current pool's threads. Returns the rows written (all of `dst` when its
/// length is a multiple of `row`).
pub(crate) fn map_rows<'d, T: Widen>(
    src: &[T],
    dst: &'d mut [MaybeUninit<T>],
    row: usize,
    f: impl for<'a> Fn(&[f32], &'a mut [MaybeUninit<f32>]) -> &'a mut [f32] + Sync,
) -> Result<&'d mut [T], crate::tensor::TensorError> {
    use rayon::prelude::*;
    let n = src.len().min(dst.len());
    let n = n - n.checked_rem(row).unwrap_or(n);
    if n == 0 {
        return Ok(&mut []);
    }
    let group = (8 * BLOCK / row).max(1) * row;
    let scratch = || crate::tensor::try_vec(2 * group, MaybeUninit::<f32>::uninit());
    src[..n]
        .par_chunks(group)
        .zip(dst[..n].par_chunks_mut(group))
        .with_min_len(crate::par::min_len(n.div_ceil(group), &[group]))
        .try_for_each_init(scratch, |buffer, (s, d)| {
            let (wide, out) = buffer.as_mut().map_err(|e| e.clone())?.split_at_mut(group);
            let w = T::widen_slice(s, &mut wide[..s.len()]);
            T::narrow_slice(f(w, &mut out[..s.len()]), d);
            Ok(())
        })?;
    // SAFETY: every group of `dst[..n]` was written by `narrow_slice`.
    Ok(unsafe { assume_written(&mut dst[..n]) })
}

/// The values of `src` widened to `f32` in a pooled buffer of the arena (for a kernel's scratch
/// copy: the next step reuses the memory without faulting it in again).
pub(crate) fn widened_scratch<T: Widen>(
    src: &[T],
) -> Result<crate::tensor::Scratch<f32>, crate::tensor::TensorError> {
    // SAFETY: `widen_slice` writes every element of a buffer as long as `src`.
    unsafe {
        crate::tensor::Scratch::new_with(src.len(), |dst| {
            T::widen_slice(src, dst);
        })
    }
}

/// The values of `src` widened to `f32` in a buffer of their own (checked against the arena).
pub(crate) fn widened<T: Widen>(src: &[T]) -> crate::error::Result<Vec<f32>> {
    let mut out = crate::tensor::try_vec(src.len(), 0.0f32)?;
    // SAFETY: only initialised values are written through the view.
    T::widen_slice(src, unsafe { super::vector::as_slots(&mut out) });
    Ok(out)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    use half::f16;

    /// Converts the whole vectors of `src` into `dst` (of the same length); returns how many.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn f16_to_f32_avx512(src: &[f16], dst: &mut [MaybeUninit<f32>]) -> usize {
        let n = src.len() / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: `i + 16 <= n` elements of both slices (the caller gives equal lengths).
            unsafe {
                let h = _mm256_loadu_si256(src.as_ptr().add(i).cast());
                _mm512_storeu_ps(dst.as_mut_ptr().add(i).cast(), _mm512_cvtph_ps(h));
            }
        }
        n
    }

    /// As [`f16_to_f32_avx512`], 8 lanes.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f16_to_f32_f16c(src: &[f16], dst: &mut [MaybeUninit<f32>]) -> usize {
        let n = src.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: `i + 8 <= n` elements of both slices.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
                _mm256_storeu_ps(dst.as_mut_ptr().add(i).cast(), _mm256_cvtph_ps(h));
            }
        }
        n
    }

    /// Rounds the whole vectors of `src` into `dst` (of the same length); returns how many.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn f32_to_f16_avx512(src: &[f32], dst: &mut [MaybeUninit<f16>]) -> usize {
        let n = src.len() / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: `i + 16 <= n` elements of both slices.
            unsafe {
                let v = _mm512_loadu_ps(src.as_ptr().add(i));
                let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm256_storeu_si256(dst.as_mut_ptr().add(i).cast(), h);
            }
        }
        n
    }

    /// As [`f32_to_f16_avx512`], 8 lanes.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f32_to_f16_f16c(src: &[f32], dst: &mut [MaybeUninit<f16>]) -> usize {
        let n = src.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: `i + 8 <= n` elements of both slices.
            unsafe {
                let v = _mm256_loadu_ps(src.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), h);
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn uninit<T>(n: usize) -> Vec<MaybeUninit<T>> {
        (0..n).map(|_| MaybeUninit::uninit()).collect()
    }

    #[test]
    fn every_half_widens_as_half_does() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let h: Vec<f16> = all.iter().map(|&b| f16::from_bits(b)).collect();
        let mut d = uninit(h.len());
        let got = f16_to_f32(&h, &mut d);
        for (g, v) in got.iter().zip(&h) {
            assert_eq!(g.to_bits(), v.to_f32().to_bits(), "{:#x}", v.to_bits());
        }
        let b: Vec<bf16> = all.iter().map(|&b| bf16::from_bits(b)).collect();
        let got = bf16_to_f32(&b, &mut d);
        for (g, v) in got.iter().zip(&b) {
            assert_eq!(g.to_bits(), v.to_f32().to_bits(), "{:#x}", v.to_bits());
        }
    }

    /// Bit patterns near every rounding boundary of the half types, and the special values.
    fn edges() -> Vec<f32> {
        let mut v = Vec::new();
        for hi in (0..=u16::MAX).step_by(7) {
            for lo in [
                0u32, 1, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x7FFF, 0x8000, 0x8001, 0xFFFF,
            ] {
                v.push(f32::from_bits((u32::from(hi) << 16) | lo));
            }
        }
        v.extend([
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            65520.0,
        ]);
        v
    }

    fn check_narrowing(src: &[f32]) {
        let mut d = uninit(src.len());
        let got = f32_to_f16(src, &mut d);
        for (g, &s) in got.iter().zip(src) {
            assert_eq!(
                g.to_bits(),
                f16::from_f32(s).to_bits(),
                "{:#x}",
                s.to_bits()
            );
        }
        let mut d = uninit(src.len());
        let got = f32_to_bf16(src, &mut d);
        for (g, &s) in got.iter().zip(src) {
            assert_eq!(
                g.to_bits(),
                bf16::from_f32(s).to_bits(),
                "{:#x}",
                s.to_bits()
            );
        }
    }

    #[test]
    fn rounding_to_halves_matches_half_at_every_boundary() {
        check_narrowing(&edges());
    }

    proptest! {
        #[test]
        fn rounding_to_halves_matches_half(bits in proptest::collection::vec(any::<u32>(), 0..100)) {
            let v: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
            check_narrowing(&v);
        }
    }
}
