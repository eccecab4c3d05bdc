//! The epilogues of the direct 8-bit convolution (`qdirect.rs`) in AVX-512 registers: a tile
//! row's 32 exact sums made into 8-bit codes without leaving the registers, and stored into
//! the output runs of the row by masked byte stores; and the same codes in AVX2 registers
//! (`_avx2`) for the kernel's AVX2 level, stored by the caller.
//!
//! Each function computes the bits of its scalar counterpart, which stays the oracle (the tests
//! compare them on sums across the `i32` range, ties and saturating values):
//! - [`requantize`] is `qmatmul::code_byte` (`QLinearConv`): `(sum + b) * m` in `f64`, clamped to
//!   the code range less the zero point (whose bounds are integers, so clamping before rounding
//!   rounds alike), rounded half to even by the conversion's embedded rounding, plus the zero
//!   point. It needs a finite `m`, where no sum makes a NaN;
//! - [`quantize`] is `quant::code` of `f32(sum) * s + b` (a `Conv` between `DequantizeLinear`
//!   and `QuantizeLinear`): multiplied and added in two roundings, divided by the output scale,
//!   rounded half to even, plus the zero point in `f32`, clamped, NaN to 0.
//!
//! The scalar loops stored 32 codes to the stack in two halves and read them back whole to
//! copy out, a store-forwarding stall per row of a tile that took a sixth of a 1x1
//! convolution's time.

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use super::super::qdirect::Segment;
    pub(in crate::ops::nn) use super::super::qdirect::COLS;

    /// Whether the CPU runs AVX-512F, BW, VL and DQ, which these functions need.
    pub(in crate::ops::nn) fn avx512() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq")
    }

    /// The codes `clamp(round_half_even((sum + b) * m) + zy, lo, hi)` of 32 sums, as bytes.
    ///
    /// # Safety
    /// The CPU runs AVX-512F, BW, VL and DQ; `m` is finite.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    #[inline]
    pub(in crate::ops::nn) unsafe fn requantize(
        sums: &[i32; COLS],
        (m, b, zy): (f64, f64, f64),
        (lo, hi): (f64, f64),
    ) -> __m256i {
        let (mv, bv) = (_mm512_set1_pd(m), _mm512_set1_pd(b));
        let (lov, hiv) = (_mm512_set1_pd(lo - zy), _mm512_set1_pd(hi - zy));
        let eight = |at: usize| {
            // SAFETY: `at + 8 <= COLS`.
            let v = unsafe { _mm256_loadu_si256(sums.as_ptr().add(at).cast()) };
            let x = _mm512_mul_pd(_mm512_add_pd(_mm512_cvtepi32_pd(v), bv), mv);
            let x = _mm512_min_pd(_mm512_max_pd(x, lov), hiv);
            _mm512_cvt_roundpd_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x)
        };
        let z = _mm512_set1_epi32(zy as i32);
        let sixteen = |at: usize| {
            let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(eight(at)), eight(at + 8));
            _mm512_cvtepi32_epi8(_mm512_add_epi32(v, z))
        };
        _mm256_set_m128i(sixteen(16), sixteen(0))
    }

    /// [`requantize`] where every `sum + b` fits `i32` and every `(sum + b) * m` lies within
    /// `±2^30`: the bias is added in `i32`, the products convert to `i32` exactly (rounded half
    /// to even), and the codes saturate in the narrowing, with fewer instructions than the
    /// clamps in `f64`. `signed` codes are `int8`, others `uint8`.
    ///
    /// # Safety
    /// The CPU runs AVX-512F, BW, VL and DQ.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    #[inline]
    pub(in crate::ops::nn) unsafe fn requantize_bounded(
        sums: &[i32; COLS],
        (m, b, zy): (f64, i32, i32),
        signed: bool,
    ) -> __m256i {
        let (mv, bv, z) = (
            _mm512_set1_pd(m),
            _mm512_set1_epi32(b),
            _mm512_set1_epi32(zy),
        );
        let convert = |t: __m256i| {
            let x = _mm512_mul_pd(_mm512_cvtepi32_pd(t), mv);
            _mm512_cvt_roundpd_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x)
        };
        let sixteen = |at: usize| {
            // SAFETY: `at + 16 <= COLS`.
            let t = unsafe { _mm512_loadu_si512(sums.as_ptr().add(at).cast()) };
            let t = _mm512_add_epi32(t, bv);
            let low = convert(_mm512_castsi512_si256(t));
            let high = convert(_mm512_extracti64x4_epi64::<1>(t));
            let q = _mm512_add_epi32(
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high),
                z,
            );
            if signed {
                _mm512_cvtsepi32_epi8(q)
            } else {
                _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, _mm512_setzero_si512()))
            }
        };
        _mm256_set_m128i(sixteen(16), sixteen(0))
    }

    /// The codes of `f32(sum) * s + b` quantized by scale `ys` and zero point `zy` into the
    /// range `lo..=hi` (NaN to 0), as bytes.
    ///
    /// # Safety
    /// The CPU runs AVX-512F, BW, VL and DQ.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    #[inline]
    pub(in crate::ops::nn) unsafe fn quantize(
        sums: &[i32; COLS],
        (s, b): (f32, f32),
        (ys, zy): (f32, f32),
        (lo, hi): (f32, f32),
    ) -> __m256i {
        let (sv, bv, ysv, zv) = (
            _mm512_set1_ps(s),
            _mm512_set1_ps(b),
            _mm512_set1_ps(ys),
            _mm512_set1_ps(zy),
        );
        let (lov, hiv) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let sixteen = |at: usize| {
            // SAFETY: `at + 16 <= COLS`.
            let v = unsafe { _mm512_loadu_si512(sums.as_ptr().add(at).cast()) };
            let y = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(v), sv), bv);
            let q = _mm512_div_ps(y, ysv);
            let q = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(q);
            let q = _mm512_add_ps(q, zv);
            let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(q, q);
            let q = _mm512_min_ps(_mm512_max_ps(q, lov), hiv);
            _mm512_cvtepi32_epi8(_mm512_maskz_cvttps_epi32(ordered, q))
        };
        _mm256_set_m128i(sixteen(16), sixteen(0))
    }

    /// [`requantize_bounded`] in AVX2 registers, four `f64` lanes at a time, the codes
    /// saturated by the narrowing packs.
    ///
    /// # Safety
    /// The CPU runs AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(in crate::ops::nn) unsafe fn requantize_bounded_avx2(
        sums: &[i32; COLS],
        (m, b, zy): (f64, i32, i32),
        signed: bool,
    ) -> __m256i {
        let (mv, bv, z) = (
            _mm256_set1_pd(m),
            _mm256_set1_epi32(b),
            _mm256_set1_epi32(zy),
        );
        let convert = |t: __m128i| {
            let x = _mm256_mul_pd(_mm256_cvtepi32_pd(t), mv);
            let x = _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
            _mm256_cvtpd_epi32(x)
        };
        let eight = |at: usize| {
            // SAFETY: `at + 8 <= COLS`.
            let t = unsafe { _mm256_loadu_si256(sums.as_ptr().add(at).cast()) };
            let t = _mm256_add_epi32(t, bv);
            let low = convert(_mm256_castsi256_si128(t));
            let high = convert(_mm256_extracti128_si256::<1>(t));
            _mm256_add_epi32(_mm256_set_m128i(high, low), z)
        };
        narrow(eight, signed)
    }

    /// [`quantize`] in AVX2 registers (the same operations in the same order; NaN lanes are
    /// cleared before the conversion).
    ///
    /// # Safety
    /// The CPU runs AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(in crate::ops::nn) unsafe fn quantize_avx2(
        sums: &[i32; COLS],
        (s, b): (f32, f32),
        (ys, zy): (f32, f32),
        (lo, hi): (f32, f32),
    ) -> __m256i {
        let (sv, bv, ysv, zv) = (
            _mm256_set1_ps(s),
            _mm256_set1_ps(b),
            _mm256_set1_ps(ys),
            _mm256_set1_ps(zy),
        );
        let (lov, hiv) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
        let eight = |at: usize| {
            // SAFETY: `at + 8 <= COLS`.
            let v = unsafe { _mm256_loadu_si256(sums.as_ptr().add(at).cast()) };
            let y = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), sv), bv);
            let q = _mm256_div_ps(y, ysv);
            let q = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(q);
            let q = _mm256_add_ps(q, zv);
            let ordered = _mm256_cmp_ps::<_CMP_ORD_Q>(q, q);
            let q = _mm256_min_ps(_mm256_max_ps(q, lov), hiv);
            _mm256_cvttps_epi32(_mm256_and_ps(q, ordered))
        };
        narrow(eight, lo < 0.0)
    }

    /// The 32 codes `eight(0)`, `eight(8)`, ... (`i32` lanes within the 8-bit range of
    /// `signed` codes, or saturated to it) as bytes in order.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn narrow(eight: impl Fn(usize) -> __m256i, signed: bool) -> __m256i {
        // The packs work within 128-bit lanes: the bytes come as four codes of each register
        // per lane, which the permutation puts back in order.
        let (w0, w1) = (
            _mm256_packs_epi32(eight(0), eight(8)),
            _mm256_packs_epi32(eight(16), eight(24)),
        );
        let bytes = if signed {
            _mm256_packs_epi16(w0, w1)
        } else {
            _mm256_packus_epi16(w0, w1)
        };
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    /// Stores the bytes `from..from + len` of `codes` at `base + to` for each segment.
    ///
    /// # Safety
    /// The CPU runs AVX-512BW and VL; each segment's bytes `base + to..base + to + len` lie in
    /// one buffer that no one else uses, and `from + len <= COLS`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    pub(in crate::ops::nn) unsafe fn store(base: *mut u8, codes: __m256i, at: &[Segment]) {
        for s in at {
            let mask = (((1u64 << s.len) - 1) << s.from) as u32;
            // Bytes outside the mask are neither read nor written, so the store's start may lie
            // before the buffer: it is computed without claiming to stay inside.
            let start = base.wrapping_add(s.to).wrapping_sub(s.from);
            // SAFETY: the stored bytes are the segment's (the caller's promise).
            unsafe { _mm256_mask_storeu_epi8(start.cast(), mask, codes) };
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::ops::nn::qmatmul::code_byte;
        use crate::ops::nn::quant::code;

        /// Sums of every magnitude, with ties of the multipliers below.
        fn sums() -> Vec<[i32; COLS]> {
            let mut s = 0x2545_f491_4f6c_dd1du64;
            let mut out = vec![
                std::array::from_fn(|i| i as i32 - 16),
                std::array::from_fn(|i| [i32::MIN, i32::MAX, 0, -1][i % 4]),
            ];
            for _ in 0..2000 {
                out.push(std::array::from_fn(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s as i64 as i32) >> (s % 31)
                }));
            }
            out
        }

        fn avx2() -> bool {
            std::arch::is_x86_feature_detected!("avx2")
        }

        fn bytes(v: __m256i) -> [u8; COLS] {
            // SAFETY: both are 32 bytes.
            unsafe { std::mem::transmute(v) }
        }

        #[test]
        fn requantized_codes_are_code_byte() {
            if !avx512() {
                return;
            }
            for (m, b, zy) in [
                (0.5f64, 0.0f64, 0.0f64),
                (0.25, 3.0, 128.0),
                (1.5, -7.0, -3.0),
                (0.0031, 1234.0, 17.0),
                (1e-9, 0.0, 0.0),
                (1e9, 0.0, 255.0),
                (-0.75, 0.0, 0.0),
            ] {
                for range in [(0.0, 255.0), (-128.0, 127.0)] {
                    for sums in sums() {
                        // SAFETY: the features were detected; `m` is finite.
                        let got = bytes(unsafe { requantize(&sums, (m, b, zy), range) });
                        let want = sums.map(|v| code_byte(v, (m, b, zy), range));
                        assert_eq!(got, want, "m {m} b {b} zy {zy} range {range:?} {sums:?}");
                    }
                }
            }
        }

        #[test]
        fn bounded_requantized_codes_are_code_byte() {
            for (m, b, zy) in [
                (0.5f64, 0i32, 0i32),
                (0.25, 3, 128),
                (1.5, -7, -3),
                (0.0031, 1234, 17),
                (-0.75, 0, 0),
                (2.5e-7, -40000, 5),
            ] {
                for signed in [false, true] {
                    let range = if signed {
                        (-128.0, 127.0)
                    } else {
                        (0.0, 255.0)
                    };
                    for sums in sums() {
                        // Sums within the bound: `|sum + b| * |m| < 2^30`.
                        let limit = (2f64.powi(30) / m.abs()).min(2f64.powi(31)) as i64;
                        let sums = sums
                            .map(|v| (i64::from(v) % (limit - i64::from(b).abs()).max(1)) as i32);
                        let params = (m, f64::from(b), f64::from(zy));
                        let want = sums.map(|v| code_byte(v, params, range));
                        let what = format!("m {m} b {b} zy {zy} {sums:?}");
                        if avx512() {
                            // SAFETY: the features were detected; the sums are bounded.
                            let got = unsafe { requantize_bounded(&sums, (m, b, zy), signed) };
                            assert_eq!(bytes(got), want, "AVX-512 {what}");
                        }
                        if avx2() {
                            // SAFETY: as above.
                            let got = unsafe { requantize_bounded_avx2(&sums, (m, b, zy), signed) };
                            assert_eq!(bytes(got), want, "AVX2 {what}");
                        }
                    }
                }
            }
        }

        #[test]
        fn quantized_codes_are_code() {
            for (s, b, ys, zy) in [
                (0.5f32, 0.0f32, 1.0f32, 0.0f32),
                (0.01, 0.25, 0.02, 128.0),
                (0.003, -1.5, 0.5, 0.0),
                (1.0, 0.0, 0.0, 3.0),
                (f32::NAN, 0.0, 1.0, 5.0),
                (1e-30, 0.0, 1e30, 0.0),
            ] {
                for sums in sums() {
                    let y = sums.map(|v| v as f32 * s + b);
                    let want_u = y.map(|y| code::<u8>(y, ys, zy));
                    let want_i = y.map(|y| code::<i8>(y, ys, zy) as u8);
                    let what = format!("s {s} b {b} ys {ys}");
                    type Quantize =
                        unsafe fn(&[i32; COLS], (f32, f32), (f32, f32), (f32, f32)) -> __m256i;
                    let levels: [(bool, Quantize, &str); 2] = [
                        (avx512(), quantize, "AVX-512"),
                        (avx2(), quantize_avx2, "AVX2"),
                    ];
                    for (_, f, level) in levels.into_iter().filter(|l| l.0) {
                        // SAFETY: the features were detected.
                        let u = bytes(unsafe { f(&sums, (s, b), (ys, zy), (0.0, 255.0)) });
                        let i = bytes(unsafe { f(&sums, (s, b), (ys, zy), (-128.0, 127.0)) });
                        assert_eq!(u, want_u, "{level} {what}");
                        assert_eq!(i, want_i, "{level} {what}");
                    }
                }
            }
        }

        #[test]
        fn stores_write_the_segments_only() {
            if !avx512() {
                return;
            }
            let codes: [u8; COLS] = std::array::from_fn(|i| i as u8 + 1);
            // SAFETY: 32 bytes.
            let v: __m256i = unsafe { std::mem::transmute(codes) };
            let mut out = [0u8; 40];
            let at = [
                Segment {
                    from: 0,
                    to: 0,
                    len: 3,
                },
                Segment {
                    from: 5,
                    to: 10,
                    len: 20,
                },
                Segment {
                    from: 30,
                    to: 38,
                    len: 2,
                },
            ];
            // SAFETY: the features were detected; the segments lie in `out`.
            unsafe { store(out.as_mut_ptr(), v, &at) };
            let mut want = [0u8; 40];
            for s in &at {
                want[s.to..s.to + s.len].copy_from_slice(&codes[s.from..s.from + s.len]);
            }
            assert_eq!(out, want);
        }
    }
}
