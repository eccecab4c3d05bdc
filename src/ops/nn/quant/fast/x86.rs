//! The 8-bit code loops in AVX2 registers, 32 codes per round: the bits of [`super::code`] (the
//! tests compare them on ties, NaNs, infinities and saturating values).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// The codes of the 32 values `y` by scale `ys` and zero point `zy`, `int8` when `signed`
/// (else `uint8`), as 32 bytes in order: `round_half_even(y / ys) + zy` clamped, NaN to 0.
///
/// # Safety
/// The CPU runs AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn codes(y: [__m256; 4], (ys, zy): (f32, f32), signed: bool) -> __m256i {
    let (lo, hi) = if signed {
        (-128.0, 127.0)
    } else {
        (0.0, 255.0)
    };
    let (ysv, zv) = (_mm256_set1_ps(ys), _mm256_set1_ps(zy));
    let (lov, hiv) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
    let code = |y: __m256| {
        let q = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_div_ps(y, ysv),
        );
        let q = _mm256_add_ps(q, zv);
        let ordered = _mm256_cmp_ps::<_CMP_ORD_Q>(q, q);
        // `max` gives `lo` for a NaN; the mask then makes it 0.
        let q = _mm256_min_ps(_mm256_max_ps(q, lov), hiv);
        _mm256_cvttps_epi32(_mm256_and_ps(q, ordered))
    };
    // The codes lie in an 8-bit range, so the packs keep them; they interleave the four
    // vectors by 128-bit lanes, which the permutation undoes.
    let words = (
        _mm256_packs_epi32(code(y[0]), code(y[1])),
        _mm256_packs_epi32(code(y[2]), code(y[3])),
    );
    let bytes = match signed {
        true => _mm256_packs_epi16(words.0, words.1),
        false => _mm256_packus_epi16(words.0, words.1),
    };
    _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// `super::quantize_run` on 32 values per round; returns how many codes it wrote.
///
/// # Safety
/// The CPU runs AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_run(
    x: &[f32],
    params: (f32, f32),
    signed: bool,
    out: &mut [MaybeUninit<u8>],
) -> usize {
    let n = x.len().min(out.len()) / 32 * 32;
    for (o, v) in out[..n].chunks_exact_mut(32).zip(x.chunks_exact(32)) {
        // SAFETY: each chunk holds 32 values and 32 slots.
        unsafe {
            let y = std::array::from_fn(|i| _mm256_loadu_ps(v.as_ptr().add(8 * i)));
            _mm256_storeu_si256(o.as_mut_ptr().cast(), codes(y, params, signed));
        }
    }
    n
}

/// `super::scaled_codes` on 32 sums per round; returns how many codes it wrote.
///
/// # Safety
/// The CPU runs AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn scaled_codes(
    sums: &[i32],
    (s, b): (f32, f32),
    params: (f32, f32),
    signed: bool,
    out: &mut [MaybeUninit<u8>],
) -> usize {
    let (sv, bv) = (_mm256_set1_ps(s), _mm256_set1_ps(b));
    let n = sums.len().min(out.len()) / 32 * 32;
    for (o, v) in out[..n].chunks_exact_mut(32).zip(sums.chunks_exact(32)) {
        // SAFETY: each chunk holds 32 sums and 32 slots.
        unsafe {
            let y = std::array::from_fn(|i| {
                let sum = _mm256_loadu_si256(v.as_ptr().add(8 * i).cast());
                _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum), sv), bv)
            });
            _mm256_storeu_si256(o.as_mut_ptr().cast(), codes(y, params, signed));
        }
    }
    n
}

/// Elsewhere nothing is written by a vector loop.
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn quantize_run(
    _: &[f32],
    _: (f32, f32),
    _: bool,
    _: &mut [MaybeUninit<u8>],
) -> usize {
    0
}

/// Elsewhere nothing is written by a vector loop.
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn scaled_codes(
    _: &[i32],
    _: (f32, f32),
    _: (f32, f32),
    _: bool,
    _: &mut [MaybeUninit<u8>],
) -> usize {
    0
}
