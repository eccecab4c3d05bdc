//! Unit-stride convolutions as one matrix product per height tap over copies of the input
//! shifted by each width tap ([`Shifted`]), with no im2col matrix.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::super::super::vector::{assume_written, copy};
use super::super::blas::{gemm, Mat};
use super::super::window::Geometry3;
use super::im2col::TILE_ELEMS;
use super::{Post, LANES};
use crate::error::{Error, Result};
use crate::ops::num::Real;
use crate::tensor::Scratch;

/// A 1-D or 2-D convolution with unit strides as `kh` matrix products over copies of its
/// input shifted by each width tap, with no im2col matrix: copy `(c, kx)` holds input channel
/// `c`, padded to rows of `pitch` columns and flattened, from column `kx * dw` on, so the
/// values height tap `ky` reads at the output positions (laid out at the same pitch, the
/// columns past the output width computed and dropped) are the copies from offset
/// `ky * dh * pitch` on: `y = sum over ky of W[:, :, ky, :] * shifted[ky * dh * pitch..]`.
/// A row of ones and a bias column in the first product add the bias. The copies hold `kw`
/// times the input where im2col holds `kh * kw` times the output, and the products read them in
/// place (the `gemm` crate packs neither operand when the positions are a whole number of
/// [`LANES`]).
///
/// Measured on Zen 5 at 1 thread (`multigather run --repeat 500`, medians, one convolution
/// with a bias): 3x3 over 80x80, 16 to 16 channels, 0.193 ms with im2col tiles, 0.184 ms
/// shifted; 3x3 over 40x40, 64 to 32 channels, 0.388 -> 0.347 ms (onnxruntime 1.32: 0.172
/// and 0.253 ms).
pub(super) struct Shifted<'g> {
    g: &'g Geometry3,
    cg: usize,
    pitch: usize,
    /// Output rows per band on one thread (the products run a band of rows at a time).
    band: usize,
}

/// The space of one band of [`Shifted`]: the shifted copies and the output grid.
struct Buffers<T> {
    shifted: Scratch<T>,
    grid: Scratch<T>,
}

impl<'g> Shifted<'g> {
    /// The plan for `g` with `cg` input channels per group, if `g` has unit strides, no depth
    /// taps, more than one tap, and pads no wider than a few rows.
    pub(super) fn new(g: &'g Geometry3, cg: usize) -> Result<Option<Self>> {
        let ([od, oh, ow], [id, ih, iw], [kd, kh, kw]) = (g.output, g.input, g.kernel);
        if g.strides != [1; 3] || kd != 1 || id != 1 || od != 1 || kh * kw < 2 || cg == 0 {
            return Ok(None);
        }
        let (pw, pe, dh) = (g.pad_begin[2], g.pad_end[2], g.dilations[1]);
        let pitch = iw.saturating_add(pw).saturating_add(pe);
        let reach = (kh - 1).saturating_mul(dh);
        // Crafted pads and dilations would make the copies far larger than the planes.
        if pitch > 4 * (iw + ow) || reach > 4 * (ih + oh) || pitch != ow + (kw - 1) * g.dilations[2]
        {
            return Ok(None);
        }
        let k = cg.saturating_mul(kw).saturating_add(1);
        let band = (TILE_ELEMS / k.saturating_mul(pitch).max(1))
            .saturating_sub(reach)
            .clamp(1, oh.max(1));
        Ok(Some(Shifted { g, cg, pitch, band }))
    }

    /// `y = post(conv(xg, wg) + bias)` for one group of one image, every element written.
    pub(super) fn run<T: Real>(
        &self,
        xg: &[T],
        wg: Mat<'_, T>,
        bias: Option<&[T]>,
        post: Post<'_, T>,
        y: &mut [MaybeUninit<T>],
        parallel: bool,
    ) -> Result<()> {
        let [_, oh, ow] = self.g.output;
        let [_, kh, kw] = self.g.kernel;
        let (mg, k) = (wg.rows(), self.cg * kw);
        // The weights by height tap: `kh` blocks of `mg x (k + 1)`, the last column the bias
        // in the first block and zero in the others.
        let mut w = Scratch::new(kh * mg * (k + 1), T::ZERO)?;
        for m in 0..mg {
            let row = wg.row(m);
            for c in 0..self.cg {
                for ky in 0..kh {
                    let at = (ky * mg + m) * (k + 1) + c * kw;
                    w[at..at + kw].copy_from_slice(&row[(c * kh + ky) * kw..][..kw]);
                }
            }
            w[m * (k + 1) + k] = bias.map_or(T::ZERO, |b| b[m]);
        }
        let out_plane = oh * ow;
        let threads = crate::par::threads();
        let parallel = parallel
            && crate::par::min_len(oh.div_ceil(self.band), &[k, self.band * self.pitch, mg])
                != usize::MAX;
        // On several threads, the bands come in whole rounds of one per thread.
        let band = match parallel {
            true => oh.div_ceil(oh.div_ceil(self.band).next_multiple_of(threads)),
            false => self.band,
        };
        let bands: Vec<usize> = (0..oh).step_by(band.max(1)).collect();
        if !parallel {
            let mut buffers = None;
            for &oy0 in &bands {
                let rows = self.band_product(xg, &w, mg, oy0, band, &mut buffers)?;
                let Some(Buffers { grid, .. }) = &buffers else {
                    return Err(Error::Eval("a band left no product".into()));
                };
                let cols = (rows * self.pitch).next_multiple_of(LANES);
                for (dst, src) in y.chunks_mut(out_plane).zip(grid.chunks(cols)) {
                    self.compact(&mut dst[oy0 * ow..(oy0 + rows) * ow], src, post);
                }
            }
            return Ok(());
        }
        let grids = bands
            .par_iter()
            .map(|&oy0| {
                let mut buffers = None;
                let rows = self.band_product(xg, &w, mg, oy0, band, &mut buffers)?;
                let grid = buffers.map(|b| b.grid);
                grid.ok_or_else(|| Error::Eval("a band left no product".into()))
                    .map(|g| (g, (rows * self.pitch).next_multiple_of(LANES)))
            })
            .collect::<Result<Vec<_>>>()?;
        y.par_chunks_mut(out_plane)
            .enumerate()
            .for_each(|(m, dst)| {
                for (&oy0, (grid, cols)) in bands.iter().zip(&grids) {
                    let rows = band.min(oh - oy0);
                    let src = &grid[m * cols..][..*cols];
                    self.compact(&mut dst[oy0 * ow..(oy0 + rows) * ow], src, post);
                }
            });
        Ok(())
    }

    /// The products for output rows `oy0..oy0 + band` into `buffers.grid`: `mg` rows of the output
    /// grid at `pitch`, rounded up to whole [`LANES`]; returns the band's number of output rows.
    /// `buffers` carries the space from one band to the next.
    fn band_product<T: Real>(
        &self,
        xg: &[T],
        w: &[T],
        mg: usize,
        oy0: usize,
        band: usize,
        buffers: &mut Option<Buffers<T>>,
    ) -> Result<usize> {
        let g = self.g;
        let ([_, oh, _], [_, ih, iw], [_, kh, kw]) = (g.output, g.input, g.kernel);
        let ([_, ph, pw], [_, dh, dw]) = (g.pad_begin, g.dilations);
        let (pitch, k) = (self.pitch, self.cg * kw);
        let rows = band.min(oh - oy0);
        let cols = (rows * pitch).next_multiple_of(LANES);
        let len = cols + (kh - 1) * dh * pitch;
        if buffers
            .as_ref()
            .is_none_or(|b| b.shifted.len() != (k + 1) * len || b.grid.len() != mg * cols)
        {
            *buffers = Some(Buffers {
                shifted: Scratch::new((k + 1) * len, T::ZERO)?,
                grid: Scratch::new(mg * cols, T::ZERO)?,
            });
        }
        let Some(Buffers { shifted, grid }) = buffers.as_mut() else {
            return Err(Error::Eval("no room for the shifted rows".into()));
        };
        for (r, row) in shifted.chunks_mut(len).enumerate() {
            if r == k {
                row.fill(T::ONE);
                continue;
            }
            let (c, kx) = (r / kw, r % kw);
            // Element `j` of this copy is padded element `first + j` of channel `c`.
            let first = oy0 * pitch + kx * dw;
            let plane = &xg[c * ih * iw..][..ih * iw];
            // The input rows in order, the padding between them zeroed: each element written
            // once.
            let mut written = 0;
            for (iy, src) in plane.chunks_exact(iw).enumerate() {
                let at = (iy + ph) * pitch + pw;
                let (lo, hi) = (at.max(first), (at + iw).min(first + len));
                if lo < hi {
                    row[written..lo - first].fill(T::ZERO);
                    row[lo - first..hi - first].copy_from_slice(&src[lo - at..hi - at]);
                    written = hi - first;
                }
            }
            row[written..].fill(T::ZERO);
        }
        for ky in 0..kh {
            // The first product adds the bias through the row of ones.
            let kk = if ky == 0 { k + 1 } else { k };
            let a = Mat::new(&w[ky * mg * (k + 1)..], mg, kk, k + 1, 1)?;
            let b = Mat::new(&shifted[ky * dh * pitch..], kk, cols, len, 1)?;
            let beta = if ky == 0 { T::ZERO } else { T::ONE };
            gemm(T::ONE, a, b, beta, grid, cols)?;
        }
        Ok(rows)
    }

    /// Copies the output columns of grid rows at `pitch` into the rows of `dst`, then applies
    /// `post` to them.
    fn compact<T: Real>(&self, dst: &mut [MaybeUninit<T>], grid: &[T], post: Post<'_, T>) {
        let ow = self.g.output[2];
        for (d, s) in dst.chunks_exact_mut(ow).zip(grid.chunks(self.pitch)) {
            copy(d, &s[..ow]);
        }
        if let Some(post) = post {
            // SAFETY: the rows of `ow` cover `dst` (a whole number of output rows), each
            // written just now.
            post(unsafe { assume_written(dst) });
        }
    }
}
