//! AVX2 and AVX-512 element gathers (see [`super::GatherFn`] for the contract).
//!
//! Each function gathers full vectors of lanes and finishes the tail with scalar reads.

use std::arch::x86_64::*;

/// Scalar tail: `out[i] = *(start + t[i] * size_of::<W>())` for `i` in `from..t.len()`.
///
/// # Safety
/// As for [`super::GatherFn`].
#[inline(always)]
unsafe fn tail<W: Copy>(start: *const u8, t: &[u32], out: *mut W, from: usize) {
    for (i, &x) in t.iter().enumerate().skip(from) {
        // SAFETY: forwarded to the caller.
        unsafe {
            let v = start
                .add(x as usize * size_of::<W>())
                .cast::<W>()
                .read_unaligned();
            out.add(i).write(v);
        }
    }
}

/// # Safety
/// AVX2; otherwise as for [`super::GatherFn`].
#[target_feature(enable = "avx2")]
pub(super) unsafe fn gather32_avx2(start: *const u8, t: &[u32], out: *mut u32) {
    let mut i = 0;
    while i + 8 <= t.len() {
        // SAFETY: `i + 8 <= t.len()`; the rest is the caller's contract.
        unsafe {
            let idx = _mm256_loadu_si256(t.as_ptr().add(i).cast());
            let v = _mm256_i32gather_epi32::<4>(start.cast(), idx);
            _mm256_storeu_si256(out.add(i).cast(), v);
        }
        i += 8;
    }
    // SAFETY: the caller's contract.
    unsafe { tail(start, t, out, i) }
}

/// # Safety
/// AVX2; otherwise as for [`super::GatherFn`].
#[target_feature(enable = "avx2")]
pub(super) unsafe fn gather64_avx2(start: *const u8, t: &[u32], out: *mut u64) {
    let mut i = 0;
    while i + 4 <= t.len() {
        // SAFETY: `i + 4 <= t.len()`; the rest is the caller's contract.
        unsafe {
            let idx = _mm_loadu_si128(t.as_ptr().add(i).cast());
            let v = _mm256_i32gather_epi64::<8>(start.cast(), idx);
            _mm256_storeu_si256(out.add(i).cast(), v);
        }
        i += 4;
    }
    // SAFETY: the caller's contract.
    unsafe { tail(start, t, out, i) }
}

/// # Safety
/// AVX2; otherwise as for [`super::GatherFn`] (4 readable bytes at every source).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn gather16_avx2(start: *const u8, t: &[u32], out: *mut u16) {
    // Low two bytes of each dword to the low 8 bytes of each 128-bit lane.
    let pick = _mm256_setr_epi8(
        0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, //
        0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
    );
    let mut i = 0;
    while i + 8 <= t.len() {
        // SAFETY: `i + 8 <= t.len()`; the rest is the caller's contract.
        unsafe {
            let idx = _mm256_loadu_si256(t.as_ptr().add(i).cast());
            let v = _mm256_i32gather_epi32::<2>(start.cast(), idx);
            let packed = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_shuffle_epi8(v, pick));
            _mm_storeu_si128(out.add(i).cast(), _mm256_castsi256_si128(packed));
        }
        i += 8;
    }
    // SAFETY: the caller's contract.
    unsafe { tail(start, t, out, i) }
}

/// # Safety
/// AVX2; otherwise as for [`super::GatherFn`] (4 readable bytes at every source).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn gather8_avx2(start: *const u8, t: &[u32], out: *mut u8) {
    // Low byte of each dword to the low dword of each 128-bit lane.
    let pick = _mm256_setr_epi8(
        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, //
        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    );
    let join = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
    let mut i = 0;
    while i + 8 <= t.len() {
        // SAFETY: `i + 8 <= t.len()`; the rest is the caller's contract.
        unsafe {
            let idx = _mm256_loadu_si256(t.as_ptr().add(i).cast());
            let v = _mm256_i32gather_epi32::<1>(start.cast(), idx);
            let packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, pick), join);
            _mm_storel_epi64(out.add(i).cast(), _mm256_castsi256_si128(packed));
        }
        i += 8;
    }
    // SAFETY: the caller's contract.
    unsafe { tail(start, t, out, i) }
}

/// # Safety
/// AVX-512F; otherwise as for [`super::GatherFn`].
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gather32_avx512(start: *const u8, t: &[u32], out: *mut u32) {
    let mut i = 0;
    while i + 16 <= t.len() {
        // SAFETY: `i + 16 <= t.len()`; the rest is the caller's contract.
        unsafe {
            let idx = _mm512_loadu_si512(t.as_ptr().add(i).cast());
            let v = _mm512_i32gather_epi32::<4>(idx, start.cast());
            _mm512_storeu_si512(out.add(i).cast(), v);
        }
        i += 16;
    }
    // SAFETY: the caller's contract.
    unsafe { tail(start, t, out, i) }
}

/// # Safety
/// AVX-512F; otherwise as for [`super::GatherFn`].
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gather64_avx512(start: *const u8, t: &[u32], out: *mut u64) {
    let mut i = 0;
    while i + 8 <= t.len() {
        // SAFETY: `i + 8 <= t.len()`; the rest is the caller's contract.
        unsafe {
            let idx = _mm256_loadu_si256(t.as_ptr().add(i).cast());
            let v = _mm512_i32gather_epi64::<8>(idx, start.cast());
            _mm512_storeu_si512(out.add(i).cast(), v);
        }
        i += 8;
    }
    // SAFETY: the caller's contract.
    unsafe { tail(start, t, out, i) }
}

/// # Safety
/// AVX-512F; otherwise as for [`super::GatherFn`] (4 readable bytes at every source).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gather16_avx512(start: *const u8, t: &[u32], out: *mut u16) {
    let mut i = 0;
    while i + 16 <= t.len() {
        // SAFETY: `i + 16 <= t.len()`; the rest is the caller's contract.
        unsafe {
            let idx = _mm512_loadu_si512(t.as_ptr().add(i).cast());
            let v = _mm512_i32gather_epi32::<2>(idx, start.cast());
            _mm256_storeu_si256(out.add(i).cast(), _mm512_cvtepi32_epi16(v));
        }
        i += 16;
    }
    // SAFETY: the caller's contract.
    unsafe { tail(start, t, out, i) }
}

/// # Safety
/// AVX-512F; otherwise as for [`super::GatherFn`] (4 readable bytes at every source).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gather8_avx512(start: *const u8, t: &[u32], out: *mut u8) {
    let mut i = 0;
    while i + 16 <= t.len() {
        // SAFETY: `i + 16 <= t.len()`; the rest is the caller's contract.
        unsafe {
            let idx = _mm512_loadu_si512(t.as_ptr().add(i).cast());
            let v = _mm512_i32gather_epi32::<1>(idx, start.cast());
            _mm_storeu_si128(out.add(i).cast(), _mm512_cvtepi32_epi8(v));
        }
        i += 16;
    }
    // SAFETY: the caller's contract.
    unsafe { tail(start, t, out, i) }
}
