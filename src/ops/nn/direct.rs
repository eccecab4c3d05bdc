//! The `f32` kernel of direct convolutions on x86-64 with AVX2 and FMA: a block of filters by a
//! run of output positions, every tap of every input channel summed in registers, reading the
//! input where it lies in a padded, phase-split copy (see `conv::PhaseLayout`).
//!
//! A convolution by matrix product (im2col, or the shifted copies of a unit-stride one) writes
//! and reads a copy of the input per width tap and adds each height tap's product onto the
//! output in memory; here the input is copied once and each output element is written once.
//! The kernel holds `R x 8V` sums (`R` filters, `V` vectors of eight `f32`) and, per tap, loads
//! `V` vectors of input and broadcasts `R` weights: at six filters and two vectors, twelve
//! independent fused multiply-adds per tap, enough to cover their latency on both FMA pipes.

use crate::error::{Error, Result};
use crate::tensor::Scratch;

/// Filters per block: blocks of six, the last two to eight filters in blocks of four (of which
/// at most one filter is padding), so 16 and 32 filters fill their blocks.
pub(super) const MR: usize = 6;
/// Filters in a short block.
const SHORT: usize = 4;
/// Output positions per vector.
pub(super) const LANES: usize = 8;
/// Vectors per tile of positions: tiles of 16 positions, then one of 8 for the rest. With six
/// filters that is twelve sums in registers, the most the sixteen AVX2 registers hold beside
/// the input vectors and the broadcast weight.
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

/// Weights in blocks of filters, each block tap by tap (`rows` weights per tap, zero for the
/// padding filters), and the bias likewise.
pub(super) struct Packed {
    w: Scratch<f32>,
    bias: Scratch<f32>,
    taps: usize,
    /// Each block's first filter, its height ([`MR`] or [`SHORT`]) and its first row in
    /// `bias` (its weights start `taps` times further into `w`).
    blocks: Vec<Block>,
}

/// One block of filters of [`Packed`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Block {
    /// The first filter.
    pub first: usize,
    /// The number of rows (filters and padding).
    pub rows: usize,
    at: usize,
}

impl Packed {
    /// `filters` filters of `taps` weights each (filter `m` is `row(m)`) and their bias.
    pub fn new(
        filters: usize,
        taps: usize,
        row: impl Fn(usize) -> Vec<f32>,
        bias: Option<&[f32]>,
    ) -> Result<Packed> {
        let mut blocks = Vec::new();
        let (mut first, mut at) = (0, 0);
        while first < filters {
            let rest = filters - first;
            let rows = if rest > 2 * SHORT || (5..=MR).contains(&rest) {
                MR
            } else {
                SHORT
            };
            blocks.push(Block { first, rows, at });
            first += rows;
            at += rows;
        }
        let len = at
            .checked_mul(taps)
            .ok_or_else(|| Error::Eval("the packed weights of a convolution overflow".into()))?;
        let mut w = Scratch::new(len, 0.0)?;
        let mut b = Scratch::new(at, 0.0)?;
        for blk in &blocks {
            for i in 0..blk.rows.min(filters - blk.first) {
                let m = blk.first + i;
                let dst = &mut w[blk.at * taps..][..blk.rows * taps];
                for (t, &v) in row(m).iter().enumerate().take(taps) {
                    dst[t * blk.rows + i] = v;
                }
                b[blk.at + i] = bias.map_or(0.0, |b| b[m]);
            }
        }
        Ok(Packed {
            w,
            bias: b,
            taps,
            blocks,
        })
    }

    /// The blocks of filters.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
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

    /// Output positions `q0 .. q0 + width` (`width` a whole number of vectors) of the filters
    /// of `block` into `out` (`block.rows` rows of `width`): position `q` sums
    /// `w[t] * x[q + offsets[t]]` over the taps, from the bias.
    pub fn row(
        self,
        x: &[f32],
        taps: &Taps,
        packed: &Packed,
        block: Block,
        q0: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let rows = block.rows;
        let width = out.len() / rows.max(1);
        let fits = q0
            .checked_add(taps.reach)
            .and_then(|end| end.checked_add(width))
            .is_some_and(|end| end <= x.len());
        let weights = block
            .at
            .checked_add(rows)
            .and_then(|end| end.checked_mul(packed.taps))
            .is_some_and(|end| end <= packed.w.len());
        if !width.is_multiple_of(LANES)
            || out.len() != rows * width
            || !fits
            || !weights
            || taps.len() != packed.taps
            || !(rows == MR || rows == SHORT)
        {
            return Err(Error::Eval(
                "a direct convolution tile out of its buffers".into(),
            ));
        }
        let w = &packed.w[block.at * packed.taps..][..rows * packed.taps];
        let bias = &packed.bias[block.at..][..rows];
        #[cfg(target_arch = "x86_64")]
        {
            let _ = self;
            let x = &x[q0..];
            // SAFETY: `Kernel` exists only where AVX2 and FMA were detected; every read is at
            // most `reach + width - 1` past `x` (checked above), every write inside `out`
            // (`rows` rows of `width`), and `w` holds `rows` weights per tap.
            unsafe {
                match rows {
                    MR => x86::row::<MR>(x.as_ptr(), &taps.offsets, w.as_ptr(), bias, out, width),
                    _ => x86::row::<SHORT>(x.as_ptr(), &taps.offsets, w.as_ptr(), bias, out, width),
                }
            }
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
    use super::{LANES, V};
    use std::arch::x86_64::*;

    /// See [`super::Kernel::row`] for `R` filters; `x` points at position `q0`.
    ///
    /// # Safety
    /// AVX2 and FMA; `x` readable up to `max(offsets) + width` elements, `w` for `R` per tap,
    /// `bias` holding `R` values, `out` `R` rows of `width` (a whole number of [`LANES`]).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn row<const R: usize>(
        x: *const f32,
        offsets: &[usize],
        w: *const f32,
        bias: &[f32],
        out: &mut [f32],
        width: usize,
    ) {
        let bias: [f32; R] = std::array::from_fn(|i| bias[i]);
        let mut j = 0;
        while j + V * LANES <= width {
            unsafe { tile::<R, V>(x.add(j), offsets, w, bias, out, width, j) };
            j += V * LANES;
        }
        if j < width {
            unsafe { tile::<R, 1>(x.add(j), offsets, w, bias, out, width, j) };
        }
    }

    /// `N` vectors of positions from `x` for `R` filters, written at column `j` of the rows of
    /// `out`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile<const R: usize, const N: usize>(
        x: *const f32,
        offsets: &[usize],
        w: *const f32,
        bias: [f32; R],
        out: &mut [f32],
        width: usize,
        j: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); N]; R];
        for (row, &b) in acc.iter_mut().zip(&bias) {
            *row = [_mm256_set1_ps(b); N];
        }
        let mut wt = w;
        for &off in offsets {
            // SAFETY (whole loop): the caller's bounds; `wt` advances `R` per tap.
            let xp = unsafe { x.add(off) };
            let xs: [__m256; N] =
                std::array::from_fn(|v| unsafe { _mm256_loadu_ps(xp.add(v * LANES)) });
            for (i, row) in acc.iter_mut().enumerate() {
                let wb = unsafe { _mm256_broadcast_ss(&*wt.add(i)) };
                for (a, &xv) in row.iter_mut().zip(&xs) {
                    *a = _mm256_fmadd_ps(wb, xv, *a);
                }
            }
            wt = unsafe { wt.add(R) };
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
