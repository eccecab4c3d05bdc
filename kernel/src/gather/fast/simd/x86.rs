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

/// Sixteen index values from `values`, resolved on an axis of `d` elements: negative ones
/// counted from the end, then clamped into `0..d` (mode `clamp`), or flagged when out of range
/// and clamped anyway so the read stays in the row (mode `error`). Returns the 16 coordinates
/// as 32-bit lanes and whether any lane was out of range.
///
/// # Safety
/// AVX-512F; 16 values readable at `values`; `0 < d <= i32::MAX`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn resolve16<I: Copy, const CLAMP: bool>(values: *const I, d: i64) -> (__m512i, bool) {
    let zero = _mm512_setzero_si512();
    if size_of::<I>() == 8 {
        let (dv, top) = (_mm512_set1_epi64(d), _mm512_set1_epi64(d - 1));
        let half = |p: *const I| {
            // SAFETY: 8 of the caller's 16 readable values.
            let v = unsafe { _mm512_loadu_si512(p.cast()) };
            let w = _mm512_mask_add_epi64(v, _mm512_cmplt_epi64_mask(v, zero), v, dv);
            if CLAMP {
                let c = _mm512_min_epi64(_mm512_max_epi64(w, zero), top);
                (_mm512_cvtepi64_epi32(c), 0)
            } else {
                let bad = _mm512_cmpge_epu64_mask(w, dv);
                (_mm512_cvtepi64_epi32(_mm512_min_epu64(w, top)), bad)
            }
        };
        let (lo, bad_lo) = half(values);
        // SAFETY: the second 8 of the 16 values.
        let (hi, bad_hi) = half(unsafe { values.add(8) });
        let c = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        (c, bad_lo | bad_hi != 0)
    } else {
        // `d` fits 32 bits, so a negative value plus `d` cannot overflow.
        let (dv, top) = (_mm512_set1_epi32(d as i32), _mm512_set1_epi32(d as i32 - 1));
        // SAFETY: the caller's 16 readable values.
        let v = unsafe { _mm512_loadu_si512(values.cast()) };
        let w = _mm512_mask_add_epi32(v, _mm512_cmplt_epi32_mask(v, zero), v, dv);
        if CLAMP {
            (_mm512_min_epi32(_mm512_max_epi32(w, zero), top), false)
        } else {
            let bad = _mm512_cmpge_epu32_mask(w, dv);
            (_mm512_min_epu32(w, top), bad != 0)
        }
    }
}

/// A row-wise element gather (`super::RowGatherFn`): `out[e] = row[resolve(values[e])]` for the
/// whole vectors of 16 values; returns how many it wrote and whether any value was out of range.
///
/// # Safety
/// AVX-512F; `I` is `i32` or `i64` and `W` 1, 2, 4 or 8 bytes wide; `0 < d <= i32::MAX`;
/// `values.len()` values readable; `d` elements readable at `row`, plus 3 bytes of slack after
/// them for `W` of 1 and 2 bytes (which are loaded as 4); `out` writable for `values.len()`
/// elements.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row_gather_avx512<W: Copy, I: Copy, const CLAMP: bool>(
    row: *const u8,
    d: usize,
    values: &[I],
    out: *mut W,
) -> (usize, bool) {
    // SAFETY: the caller's contract, with no column term.
    unsafe { resolved_gather_avx512::<W, I, CLAMP, false>(row, d, 0, values, out) }
}

/// A column gather (`super::ColumnGatherFn`): `out[e] = table[resolve(values[e]) * stride + e]`
/// for the whole vectors of 16 values; returns how many it wrote and whether any value was out
/// of range.
///
/// # Safety
/// AVX-512F; `I` is `i32` or `i64` and `W` 1, 2, 4 or 8 bytes wide; `0 < d`;
/// `values.len() <= stride`; `d * stride` elements readable at `table`, which must fit `i32`
/// lanes, plus 3 bytes of slack after them for `W` of 1 and 2 bytes; `out` writable for
/// `values.len()` elements.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn column_gather_avx512<W: Copy, I: Copy, const CLAMP: bool>(
    table: *const u8,
    d: usize,
    stride: usize,
    values: &[I],
    out: *mut W,
) -> (usize, bool) {
    // SAFETY: the caller's contract.
    unsafe { resolved_gather_avx512::<W, I, CLAMP, true>(table, d, stride, values, out) }
}

/// The loop of [`row_gather_avx512`] and, with `COLUMNS`, of [`column_gather_avx512`]: element
/// `e` reads `start[coordinate * stride + e]` instead of `start[coordinate]`.
///
/// # Safety
/// As for the two callers.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn resolved_gather_avx512<W: Copy, I: Copy, const CLAMP: bool, const COLUMNS: bool>(
    start: *const u8,
    d: usize,
    stride: usize,
    values: &[I],
    out: *mut W,
) -> (usize, bool) {
    let mut bad = false;
    let mut i = 0;
    let stride = _mm512_set1_epi32(stride as i32);
    let mut columns = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let sixteen = _mm512_set1_epi32(16);
    while i + 16 <= values.len() {
        // SAFETY: `i + 16 <= values.len()`; every coordinate is below `d` (and every column
        // below `stride`), so every load is inside the table (plus the slack for narrow
        // elements); the rest is the caller's contract.
        unsafe {
            let (mut c, b) = resolve16::<I, CLAMP>(values.as_ptr().add(i), d as i64);
            if COLUMNS {
                c = _mm512_add_epi32(_mm512_mullo_epi32(c, stride), columns);
                columns = _mm512_add_epi32(columns, sixteen);
            }
            bad |= b;
            let o = out.add(i);
            match size_of::<W>() {
                1 => {
                    let v = _mm512_i32gather_epi32::<1>(c, start.cast());
                    _mm_storeu_si128(o.cast(), _mm512_cvtepi32_epi8(v));
                }
                2 => {
                    let v = _mm512_i32gather_epi32::<2>(c, start.cast());
                    _mm256_storeu_si256(o.cast(), _mm512_cvtepi32_epi16(v));
                }
                4 => {
                    let v = _mm512_i32gather_epi32::<4>(c, start.cast());
                    _mm512_storeu_si512(o.cast(), v);
                }
                _ => {
                    let lo = _mm512_i32gather_epi64::<8>(_mm512_castsi512_si256(c), start.cast());
                    let hi = _mm512_extracti64x4_epi64::<1>(c);
                    let hi = _mm512_i32gather_epi64::<8>(hi, start.cast());
                    _mm512_storeu_si512(o.cast(), lo);
                    _mm512_storeu_si512(o.add(8).cast(), hi);
                }
            }
        }
        i += 16;
    }
    (i, bad)
}

/// Copies `n` bytes from `src` to `dst` with non-temporal 32-byte stores (unaligned head and
/// tail copied normally). The caller fences the stores (`_mm_sfence`) before the data is used
/// elsewhere.
///
/// # Safety
/// AVX2; `src` readable and `dst` writable for `n` bytes, without overlap.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn copy_stream_avx2(src: *const u8, dst: *mut u8, n: usize) {
    let head = dst.align_offset(32).min(n);
    // SAFETY: all copies stay inside the caller's `n` bytes; stream stores are 32-byte aligned.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 128 <= n {
            let a = _mm256_loadu_si256(src.add(i).cast());
            let b = _mm256_loadu_si256(src.add(i + 32).cast());
            let c = _mm256_loadu_si256(src.add(i + 64).cast());
            let d = _mm256_loadu_si256(src.add(i + 96).cast());
            _mm256_stream_si256(dst.add(i).cast(), a);
            _mm256_stream_si256(dst.add(i + 32).cast(), b);
            _mm256_stream_si256(dst.add(i + 64).cast(), c);
            _mm256_stream_si256(dst.add(i + 96).cast(), d);
            i += 128;
        }
        while i + 32 <= n {
            let a = _mm256_loadu_si256(src.add(i).cast());
            _mm256_stream_si256(dst.add(i).cast(), a);
            i += 32;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), n - i);
    }
}

/// Copies `n` bytes from `src` to `dst` with ordinary 64-byte loads and stores.
///
/// # Safety
/// AVX-512F; `src` readable and `dst` writable for `n` bytes, without overlap.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn copy_avx512(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: all copies stay inside the caller's `n` bytes.
    unsafe {
        let mut i = 0;
        while i + 256 <= n {
            let a = _mm512_loadu_si512(src.add(i).cast());
            let b = _mm512_loadu_si512(src.add(i + 64).cast());
            let c = _mm512_loadu_si512(src.add(i + 128).cast());
            let d = _mm512_loadu_si512(src.add(i + 192).cast());
            _mm512_storeu_si512(dst.add(i).cast(), a);
            _mm512_storeu_si512(dst.add(i + 64).cast(), b);
            _mm512_storeu_si512(dst.add(i + 128).cast(), c);
            _mm512_storeu_si512(dst.add(i + 192).cast(), d);
            i += 256;
        }
        while i + 64 <= n {
            let a = _mm512_loadu_si512(src.add(i).cast());
            _mm512_storeu_si512(dst.add(i).cast(), a);
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), n - i);
    }
}
