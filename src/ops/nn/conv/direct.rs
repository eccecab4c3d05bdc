//! Direct convolutions of `f32` with several input channels per group: blocks of filters summed
//! over all taps in registers by the kernels of `direct_kernel.rs`, reading the input where it
//! lies in its phase planes ([`PhaseLayout`]).

use std::borrow::Cow;
use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::super::super::vector::{copy, fill, ColumnBlocks};
use super::super::blas::Mat;
use super::super::window::Geometry3;
use super::depthwise::{row_bands, PhaseLayout};
use super::direct_kernel as kernel;
use super::{ConvShape, Post, FEW_POSITIONS};
use crate::error::{Error, Result};
use crate::ops::num::Real;
use crate::tensor::{try_vec, Scratch};

/// Output positions per band of a [`Direct`] convolution: the filter block's sums for a band
/// stay in L1.
const DIRECT_BAND: usize = 256;

impl ConvShape {
    /// The direct kernel's plan for this convolution, if it takes that path: `f32`, not
    /// depthwise, not pointwise, more than a few positions (see [`Direct`]).
    pub(super) fn direct<T: Real>(&self) -> Result<Option<Direct<'_>>> {
        let depthwise = self.cg() == 1 && self.group > 1;
        // The plane of a crafted empty output may not be representable (the caller reports it).
        let plane = self
            .geo
            .output
            .iter()
            .try_fold(1usize, |p, &d| p.checked_mul(d));
        if depthwise || plane.is_none_or(|p| p <= FEW_POSITIONS) || self.is_pointwise() {
            return Ok(None);
        }
        Direct::new::<T>(&self.geo, self.cg())
    }

    /// Each group's weights of `w` packed for the direct kernel, if this convolution takes it.
    pub(super) fn pack_direct<T: Real>(&self, w: &[T]) -> Result<Option<Vec<kernel::Packed>>> {
        let Some(direct) = self.direct::<T>()? else {
            return Ok(None);
        };
        let (mg, kc) = (self.mg(), self.cg() * self.geo.taps());
        if w.len() != self.c_out * kc {
            return Err(Error::Eval("W does not hold its shape".into()));
        }
        // `T` is `f32` (checked by `Direct::new`).
        let w: &[f32] = bytemuck::cast_slice(w);
        w.chunks_exact(mg * kc)
            .map(|wg| direct.pack(mg, |m| Cow::Borrowed(&wg[m * kc..][..kc])))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

/// A convolution of `f32` with several input channels per group (1x1 ones excepted), computed
/// directly: the group's input planes copied once into their padded phases ([`PhaseLayout`]),
/// then each band of output rows (about [`DIRECT_BAND`] positions at the planes' pitch) of each
/// block of filters summed over all taps in registers by [`kernel::Kernel`], from the bias,
/// `post` applied while the band is in cache, and written once. Bands of rows are split over
/// the session's threads.
///
/// Measured on Zen 3 (AMD EPYC, AVX2) at 1 thread against the products over shifted rows and
/// im2col tiles it replaces, minima of `multigather run --repeat 300` on one `Conv`: 64 to 32
/// channels 3x3 over 40x40 0.93 -> 0.87 ms, 16 to 16 channels over 80x80 0.50 -> 0.39 ms, the
/// 3-channel stride-2 stem over 320x320 0.45 -> 0.40 ms (onnxruntime 1.32: 0.64, 0.42 and 0.42
/// ms); the generated conv-net at 1 thread went from 7.49 to 6.92 ms (medians of seven
/// interleaved minima) with six-filter blocks alone. 1x1 convolutions stay plain products: there
/// the `gemm` crate measured faster (0.41 against 0.42-0.45 ms for 24 to 96 channels over 80x80).
/// Where the CPU has AVX-512F the kernel takes blocks of eight filters by 48 positions, and the
/// widths round up to 16 positions ([`kernel::Kernel::lanes`]); its documentation gives the
/// measurements.
pub(super) struct Direct<'a> {
    layout: PhaseLayout<'a>,
    cg: usize,
    taps: kernel::Taps,
    kernel: kernel::Kernel,
}

impl<'a> Direct<'a> {
    /// The plan for geometry `g` with `cg` input channels per group, if `T` is `f32`, the CPU
    /// has the kernel, and [`PhaseLayout`] takes `g`.
    fn new<T: Real>(g: &'a Geometry3, cg: usize) -> Result<Option<Self>> {
        if std::any::TypeId::of::<T>() != std::any::TypeId::of::<f32>() || cg == 0 {
            return Ok(None);
        }
        let Some(kernel) = kernel::Kernel::detect() else {
            return Ok(None);
        };
        let Some(layout) = PhaseLayout::new(g)? else {
            return Ok(None);
        };
        let phases = g.strides[1] * g.strides[2];
        if cg.checked_mul(layout.plane).is_none() {
            return Ok(None);
        }
        let mut offsets = Vec::new();
        offsets
            .try_reserve_exact(cg * layout.taps.len())
            .map_err(|_| Error::Eval("out of memory for the taps of a convolution".into()))?;
        for c in 0..cg {
            for &(which, offset) in &layout.taps {
                offsets.push((c * phases + which) * layout.phase + offset);
            }
        }
        Ok(Some(Direct {
            layout,
            cg,
            taps: kernel::Taps::new(offsets),
            kernel,
        }))
    }

    /// Filters `row(m)` for `m < filters`, each of this plan's taps, packed for its kernel.
    fn pack<'r>(
        &self,
        filters: usize,
        row: impl Fn(usize) -> Cow<'r, [f32]>,
    ) -> Result<kernel::Packed> {
        kernel::Packed::new(self.kernel, filters, self.taps.len(), row)
    }

    /// `y = post(conv(xg, wg) + bias)` for one group of one image, every element written
    /// (`T` is `f32`, checked in [`Direct::new`]), from `packed` when it holds these weights
    /// for this kernel, else from weights packed now. On several threads, each task takes a band
    /// of output rows with a plan of its own ([`Geometry3::rows`]): it loads the input rows it
    /// reads, of every channel, into planes of its own and computes from them, so the rows it
    /// reads are mostly those the operator before wrote on the same thread (split by positions
    /// as well) and its planes stay in its core's cache, with no wait for the other tasks'
    /// loads.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run<T: Real>(
        &self,
        xg: &[T],
        wg: Mat<'_, T>,
        bias: Option<&[T]>,
        post: Post<'_, T>,
        y: &mut [MaybeUninit<T>],
        parallel: bool,
        packed: Option<&kernel::Packed>,
    ) -> Result<()> {
        let g = self.layout.g;
        let ([_, oh, ow], [_, ih, iw]) = (g.output, g.input);
        let mg = wg.rows();
        if xg.len() != self.cg * ih * iw {
            return Err(Error::Eval("X does not hold its channels".into()));
        }
        let own;
        let packed = match packed {
            Some(p) if p.fits(self.kernel, mg, self.taps.len()) => p,
            _ => {
                own = self.pack(mg, |m| wg.row(m).iter().map(|v| v.to_f32()).collect())?;
                &own
            }
        };
        let bias: Option<Vec<f32>> = bias.map(|b| b.iter().map(|v| v.to_f32()).collect());
        let bias = packed.bias(bias.as_deref())?;
        let blocks = ColumnBlocks::new(y, mg, oh * ow)?;
        let min_len = match parallel {
            true => crate::par::min_len(oh, &[self.taps.len(), self.layout.pitch, mg]),
            false => usize::MAX,
        };
        let whole = || self.band(xg, ih * iw, (packed, &bias), post, &blocks, 0);
        if min_len == usize::MAX || oh < 2 {
            return whole();
        }
        let geometries = row_bands(g, min_len);
        let mut plans = Vec::with_capacity(geometries.len());
        for (oy0, (band, rows)) in &geometries {
            // A band the phase planes do not take leaves the plane whole.
            let Some(plan) = Direct::new::<T>(band, self.cg)? else {
                return whole();
            };
            plans.push((*oy0, rows.start * iw, plan));
        }
        plans.par_iter().try_for_each(|(oy0, first, plan)| {
            plan.band(&xg[*first..], ih * iw, (packed, &bias), post, &blocks, *oy0)
        })
    }

    /// Loads this plan's input rows of every channel (channel `c` from `x[c * stride..]`) into
    /// its phase planes, then writes `post(conv + bias)` for its output rows into rows
    /// `oy0..` of `blocks` (the weights packed, the bias laid out by [`kernel::Packed::bias`]).
    fn band<T: Real>(
        &self,
        x: &[T],
        stride: usize,
        (packed, bias): (&kernel::Packed, &[f32]),
        post: Post<'_, T>,
        blocks: &ColumnBlocks<'_, T>,
        oy0: usize,
    ) -> Result<()> {
        let l = &self.layout;
        let ([_, oh, ow], [_, ih, iw]) = (l.g.output, l.g.input);
        let (plane, lanes, pitch) = (l.plane, self.kernel.lanes(), l.pitch);
        let channel = |c: usize| x.get(c * stride..).and_then(|x| x.get(..ih * iw));
        if (0..self.cg).any(|c| channel(c).is_none()) {
            return Err(Error::Eval("X does not hold its channels".into()));
        }
        // The planes, plus one vector of slack the last tile of the last row reads past them;
        // each plane zeroed and loaded while it is in cache.
        // SAFETY: the planes of `plane` elements cover all but the slack, and each is filled
        // (with zeros, then the channel); the slack is filled first.
        let planes = unsafe {
            Scratch::new_with(self.cg * plane + lanes, |slots| {
                let (body, slack) = slots.split_at_mut(self.cg * plane);
                fill(slack, T::ZERO);
                for (c, dst) in body.chunks_exact_mut(plane).enumerate() {
                    // Every channel is in `x`, checked above.
                    l.load_rows(fill(dst, T::ZERO), &x[c * stride..][..ih * iw]);
                }
            })?
        };
        let x: &[f32] = bytemuck::cast_slice(&planes[..]);
        // Bands of output rows computed as one run of positions at `pitch` (the columns past
        // `ow` are computed and dropped), about `DIRECT_BAND` positions each.
        let band = (DIRECT_BAND / pitch).clamp(1, oh.max(1));
        let most = (band * pitch).next_multiple_of(lanes);
        let mut tile = try_vec(self.kernel.rows() * most, 0.0f32)?;
        for b0 in (0..oh).step_by(band) {
            let b1 = (b0 + band).min(oh);
            let width = ((b1 - b0) * pitch).next_multiple_of(lanes);
            for &block in packed.blocks() {
                let tile = &mut tile[..block.rows * width];
                self.kernel
                    .row(x, &self.taps, packed, bias, block, b0 * pitch, tile)?;
                if let Some(post) = post {
                    // Once over the whole tile (the dropped columns too): one call instead of
                    // one per filter and row. `T` is `f32`.
                    post(bytemuck::cast_slice_mut(tile));
                }
                for (i, src) in tile.chunks_exact(width).enumerate() {
                    // SAFETY: this task alone writes output rows `oy0 + b0..oy0 + b1` (of every
                    // filter), and no other slice of these rows is alive. Padding filters have
                    // no row.
                    let m = block.first + i;
                    let Some(dst) = (unsafe { blocks.slots(m, (oy0 + b0) * ow, (b1 - b0) * ow) })
                    else {
                        break;
                    };
                    for (d, s) in dst.chunks_exact_mut(ow).zip(src.chunks(pitch)) {
                        // `T` is `f32`.
                        copy(d, bytemuck::cast_slice(s));
                    }
                }
            }
        }
        Ok(())
    }
}
