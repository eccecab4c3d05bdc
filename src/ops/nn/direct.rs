//! The `f32` kernel of direct convolutions on x86-64 with AVX2 and FMA: a block of [`MR`] output
//! channels by one output row, every tap of every input channel summed in registers, reading the
//! input where it lies in a padded, phase-split copy (see `conv::PhaseLayout`).
//!
//! A convolution by matrix product (im2col, or the shifted copies of a unit-stride one) writes
//! and reads a copy of the input per width tap and adds each height tap's product onto the
//! output in memory; here the input is copied once and each output element is written once.
//! The kernel holds `MR x 8V` sums (`V` vectors of eight `f32`) and, per tap, loads `V` vectors
//! of input and broadcasts `MR` weights: twelve independent fused multiply-adds per tap at
//! `V = 3`, enough to cover their latency on both FMA pipes.

use crate::error::{Error, Result};
use crate::tensor::Scratch;

/// Output channels per block.
pub(super) const MR: usize = 6;
/// Output positions per vector.
pub(super) const LANES: usize = 8;
/// Vectors per tile of positions: tiles of 24 positions, then one of 8 or 16 for the rest.
const V: usize = 2;

/// The input offset each tap of a filter reads (relative to the output position's), with their
/// maximum, so the kernel checks its reads once per call.
pub(super) struct Taps {
    offsets: Vec<usize>,
    reach: usize,
}

impl Taps {
    /// The taps at `offsets`, in the filter's order.
    pub fn new(offsets: Vec<usize>) -> Taps {
        let reach = offsets.iter().copied().max().unwrap_or(0);
        Taps { offsets, reach }
    }

    /// The number of taps.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }
}

/// Weights in blocks of [`MR`] filters, tap by tap (`w[(b * taps + t) * MR + i]` is tap `t` of
/// filter `b * MR + i`, zero past the last filter), and the bias likewise.
pub(super) struct Packed {
    w: Scratch<f32>,
    bias: Scratch<f32>,
    taps: usize,
}

impl Packed {
    /// `rows` filters of `taps` weights each (filter `m` is `row(m)`) and their bias.
    pub fn new(
        rows: usize,
        taps: usize,
        row: impl Fn(usize) -> Vec<f32>,
        bias: Option<&[f32]>,
    ) -> Result<Packed> {
        let blocks = rows.div_ceil(MR);
        let len = blocks
            .checked_mul(taps * MR)
            .ok_or_else(|| Error::Eval("the packed weights of a convolution overflow".into()))?;
        let mut w = Scratch::new(len, 0.0)?;
        let mut b = Scratch::new(blocks * MR, 0.0)?;
        for m in 0..rows {
            let (blk, i) = (m / MR, m % MR);
            for (t, &v) in row(m).iter().enumerate().take(taps) {
                w[(blk * taps + t) * MR + i] = v;
            }
            b[m] = bias.map_or(0.0, |b| b[m]);
        }
        Ok(Packed { w, bias: b, taps })
    }

    /// The number of blocks of [`MR`] filters.
    pub fn blocks(&self) -> usize {
        self.bias.len() / MR
    }
}

/// The CPU features the kernel needs, detected once: the proof that calling it is sound.
#[derive(Clone, Copy)]
pub(super) struct Kernel(());

impl Kernel {
    /// The kernel, if this CPU has AVX2 and FMA.
    pub fn detect() -> Option<Kernel> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Some(Kernel(()));
        }
        None
    }

    /// Output positions `q0 .. q0 + width` (`width` a whole number of vectors) of filter block
    /// `block` into `out` (`MR` rows of `width`): position `q` sums `w[t] * x[q + offsets[t]]`
    /// over the taps, from the bias.
    pub fn row(
        self,
        x: &[f32],
        taps: &Taps,
        packed: &Packed,
        block: usize,
        q0: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let width = out.len() / MR;
        let fits = q0
            .checked_add(taps.reach)
            .and_then(|end| end.checked_add(width))
            .is_some_and(|end| end <= x.len());
        if !width.is_multiple_of(LANES)
            || out.len() != MR * width
            || !fits
            || taps.len() != packed.taps
            || block >= packed.blocks()
        {
            return Err(Error::Eval(
                "a direct convolution tile out of its buffers".into(),
            ));
        }
        let w = &packed.w[block * packed.taps * MR..][..packed.taps * MR];
        let bias: [f32; MR] = std::array::from_fn(|i| packed.bias[block * MR + i]);
        #[cfg(target_arch = "x86_64")]
        {
            let _ = self;
            // SAFETY: `Kernel` exists only where AVX2 and FMA were detected; every read is at
            // most `q0 + reach + width - 1`, inside `x` (checked above), every write inside
            // `out` (`MR` rows of `width`), and `w` holds `MR` weights per tap.
            unsafe {
                x86::row(
                    x.as_ptr().add(q0),
                    &taps.offsets,
                    w.as_ptr(),
                    bias,
                    out,
                    width,
                )
            };
            Ok(())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (self, w, bias);
            Err(Error::Eval(
                "no direct convolution kernel on this CPU".into(),
            ))
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{LANES, MR, V};
    use std::arch::x86_64::*;

    /// See [`super::Kernel::row`]; `x` points at position `q0`.
    ///
    /// # Safety
    /// AVX2 and FMA; `x` readable up to `max(offsets) + width` elements, `w` for `MR` per tap,
    /// `out` holding `MR` rows of `width` (a whole number of [`LANES`]).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn row(
        x: *const f32,
        offsets: &[usize],
        w: *const f32,
        bias: [f32; MR],
        out: &mut [f32],
        width: usize,
    ) {
        let mut j = 0;
        while j + V * LANES <= width {
            unsafe { tile::<V>(x.add(j), offsets, w, bias, out, width, j) };
            j += V * LANES;
        }
        if j < width {
            unsafe { tile::<1>(x.add(j), offsets, w, bias, out, width, j) };
        }
    }

    /// `N` vectors of positions from `x`, written at column `j` of the rows of `out`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile<const N: usize>(
        x: *const f32,
        offsets: &[usize],
        w: *const f32,
        bias: [f32; MR],
        out: &mut [f32],
        width: usize,
        j: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); N]; MR];
        for (row, &b) in acc.iter_mut().zip(&bias) {
            *row = [_mm256_set1_ps(b); N];
        }
        let mut wt = w;
        for &off in offsets {
            // SAFETY (whole loop): the caller's bounds; `wt` advances `MR` per tap.
            let xp = unsafe { x.add(off) };
            let xs: [__m256; N] =
                std::array::from_fn(|v| unsafe { _mm256_loadu_ps(xp.add(v * LANES)) });
            for (i, row) in acc.iter_mut().enumerate() {
                let wb = unsafe { _mm256_broadcast_ss(&*wt.add(i)) };
                for (a, &xv) in row.iter_mut().zip(&xs) {
                    *a = _mm256_fmadd_ps(wb, xv, *a);
                }
            }
            wt = unsafe { wt.add(MR) };
        }
        for (i, row) in acc.iter().enumerate() {
            let dst = &mut out[i * width + j..][..N * LANES];
            for (v, a) in row.iter().enumerate() {
                // SAFETY: `dst` holds `N` vectors.
                unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(v * LANES), *a) };
            }
        }
    }
}
