//! Depthwise convolutions (one input channel per group): every tap summed over the input plane
//! split into its stride phases ([`PhasePlanes`]), in bands of rows when threads share a plane,
//! and a per-row loop ([`single_channel`]) for 3-D planes and crafted pads.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::super::super::vector::{as_slots, assume_written, copy, deinterleave, ColumnBlocks};
use super::super::window::{inside, Geometry3};
use super::{ConvShape, Phased, Post, LANES};
use crate::error::{Error, Result};
use crate::ops::num::{has_fma, Real};
use crate::tensor::{try_vec, Scratch};
use multiversion::multiversion;

/// The fewest input and output elements of one channel in a band of a depthwise convolution
/// split by rows ([`ConvShape::depthwise_bands`]). Measured on a 2-vCPU Intel Xeon (AVX-512)
/// at 2 threads in the generated conv-net (`run --repeat 300 --profile`), bands against
/// channels: 48 channels of 80x80 (3,360 elements a band) 0.190 -> 0.136 ms, 96 channels of
/// 80x80 at stride 2 (2,080) 0.150 -> 0.128 ms, 128 channels of 40x40 (840) 0.126 -> 0.135
/// ms, 192 channels of 20x20 (540) 0.061 -> 0.104 ms.
const MIN_BAND: usize = 1024;

impl ConvShape {
    /// A depthwise convolution on several threads, split by bands of output rows, each band of
    /// every channel in turn through [`PhasePlanes`] of the band alone; `false` (nothing
    /// written) if the split is not worth it or the phase planes do not take a band. Split by
    /// channels instead, a thread reads the rows of its channels that the operator before
    /// (split by positions, as 1x1 convolutions and most others are) wrote on the other core,
    /// and writes rows the operator after reads there: on a 2-vCPU Intel Xeon (AVX-512), 48
    /// channels of 80x80 between two 1x1 convolutions took 0.165 ms at 2 threads against 0.123
    /// ms alone (0.134 ms in bands). Bands of fewer than [`MIN_BAND`] elements a channel pay
    /// more in per-channel overhead than they save.
    pub(super) fn depthwise_bands<T: Real>(
        &self,
        x: &[T],
        w: &[T],
        bias: Option<&[T]>,
        post: Post<'_, T>,
        out: &mut [MaybeUninit<T>],
    ) -> Result<bool> {
        let g = &self.geo;
        let ([_, oh, ow], [_, _, iw]) = (g.output, g.input);
        let (taps, mg, in_plane, p) = (g.taps(), self.mg(), g.in_plane(), g.out_plane());
        let channels = self.batch * self.c_out;
        let min_len = crate::par::min_len(oh, &[ow, taps, channels]);
        if min_len == usize::MAX || oh < 2 {
            return Ok(false);
        }
        let geometries = row_bands(g, min_len);
        let mut layouts = Vec::with_capacity(geometries.len());
        for (oy0, (band, rows)) in &geometries {
            if rows.len() * iw + band.out_plane() < MIN_BAND {
                return Ok(false);
            }
            let Some(layout) = PhaseLayout::new(band)? else {
                return Ok(false);
            };
            layouts.push((*oy0, rows.clone(), layout));
        }
        let blocks = ColumnBlocks::new(out, channels, p)?;
        let band = |(oy0, rows, layout): (usize, std::ops::Range<usize>, PhaseLayout<'_>)| {
            let oy1 = oy0 + layout.g.output[1];
            let mut planes = PhasePlanes::with_layout(layout)?;
            for t in 0..self.batch * self.group {
                let xc = &x[t * in_plane..][rows.start * iw..rows.end * iw];
                if !planes.load(xc) {
                    return Err(Error::Eval("an input band does not fit its phases".into()));
                }
                for m in t * mg..(t + 1) * mg {
                    // SAFETY: this task alone writes rows `oy0..oy1` of every output plane,
                    // and this slice of them is the only one alive.
                    let y = unsafe { blocks.slots(m, oy0 * ow, (oy1 - oy0) * ow) }
                        .ok_or_else(|| Error::Eval("Y does not hold its shape".into()))?;
                    let f = m % self.c_out;
                    planes.convolve(&w[f * taps..][..taps], bias.map_or(T::ZERO, |b| b[f]), y);
                    if let Some(post) = post {
                        // SAFETY: `convolve` wrote every element of the band.
                        post(unsafe { assume_written(y) });
                    }
                }
            }
            Ok(())
        };
        layouts.into_par_iter().try_for_each(band)?;
        Ok(true)
    }
}

/// Adds the convolution of one input channel by one filter to the output plane `y` (which holds
/// the bias), one tap at a time over whole output rows (compiled per SIMD level, like the
/// loops of `ops::vector`, without fused multiply-adds, so every level gives the same bits).
///
/// Measured on an AMD EPYC (Zen 5) against a loop that holds blocks of a row in registers across
/// all taps: the row at a time is faster, as its multiply-adds are independent while a block's
/// form one dependency chain per tap.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub(super) fn single_channel<T: Real>(plane: &Depthwise<'_, T>, w: &[T], y: &mut [T]) {
    let g = plane.g;
    let [od, oh, ow] = g.output;
    let [id, ih, _] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, _] = g.strides;
    let [dd, dh, _] = g.dilations;
    let [pd, ph, _] = g.pad_begin;
    if w.len() != kd * kh * kw || y.len() != od * oh * ow {
        return;
    }
    let mut taps = w.iter();
    for kz in 0..kd {
        let (z0, z1) = inside(od, id, sd, kz * dd, pd);
        for ky in 0..kh {
            let (y0, y1) = inside(oh, ih, sh, ky * dh, ph);
            for col in &plane.columns {
                let Some(&wv) = taps.next() else { return };
                let (x0, x1) = (col.start, col.end);
                if x0 == x1 {
                    continue;
                }
                let first = x0.wrapping_add_signed(col.shift);
                for oz in z0..z1 {
                    let iz = oz * sd + kz * dd - pd;
                    for oy in y0..y1 {
                        let iy = oy * sh + ky * dh - ph;
                        let src = &plane.x.row(iz * ih + iy)[first..][..x1 - x0];
                        let dst = &mut y[(oz * oh + oy) * ow..][x0..x1];
                        for (d, &v) in dst.iter_mut().zip(src) {
                            *d += wv * v;
                        }
                    }
                }
            }
        }
    }
}

/// One input plane of a depthwise convolution (1-D or 2-D, any strides and dilations), split
/// into its `sh x sw` stride phases and padded with zeros, so that every tap reads one phase as
/// a run at a fixed offset: phase `(py, px)` holds padded input row `r * sh + py`, column
/// `c * sw + px` at `r * pitch + c`, and output `(oy, ox)`, laid out at the same pitch, reads tap
/// `(ky, kx)` from phase `(ky * dh % sh, kx * dw % sw)` at `oy * pitch + ox + offset`, with
/// `offset = ky * dh / sh * pitch + kx * dw / sw`. Columns past the output width are computed
/// and dropped; a tap in the padding adds `w * 0`.
///
/// The output is computed [`BLOCK`] positions at a time, summing all taps in registers
/// ([`taps_block`]). Measured on Zen 5 at 1 thread (`multigather run --repeat 500`, medians of
/// one 3x3 depthwise convolution) against one multiply-add pass over the plane per tap for unit
/// strides and the per-row loop of [`single_channel`] for strides: 48 channels of 80x80
/// 0.146 -> 0.104 ms, 128 channels of 40x40 0.103 -> 0.080 ms, 96 channels of 80x80 at stride 2
/// 0.155 -> 0.102 ms (onnxruntime 1.32: 0.101, 0.067 and 0.092 ms).
pub(super) struct PhasePlanes<'a, T: bytemuck::Pod> {
    layout: PhaseLayout<'a>,
    /// The phases, one after the other, zero where the padding is.
    x: Scratch<T>,
    /// The output rows at `pitch`, rounded up to whole [`LANES`].
    y: Scratch<T>,
}

/// Where the phases of one padded input plane lie (see [`PhasePlanes`]), shared by the
/// depthwise loop and the [`Direct`](super::direct::Direct) convolution.
pub(super) struct PhaseLayout<'a> {
    pub(super) g: &'a Geometry3,
    pub(super) pitch: usize,
    /// Elements per phase.
    pub(super) phase: usize,
    /// Elements of all phases of one plane.
    pub(super) plane: usize,
    /// The output rows at `pitch`, rounded up to whole [`LANES`].
    pub(super) grid: usize,
    /// Each tap's phase and offset, in the filter's order.
    pub(super) taps: Vec<(usize, usize)>,
}

/// Output positions a depthwise kernel sums all taps for at once: eight AVX-512 vectors of
/// `f32`, enough independent additions to hide their latency.
const BLOCK: usize = 128;

impl<'a> PhaseLayout<'a> {
    /// The layout for the input planes of `g`, if it has no depth taps and its padded phases
    /// stay within a few times the input and output planes.
    pub(super) fn new(g: &'a Geometry3) -> Result<Option<Self>> {
        let ([od, oh, ow], [id, ih, iw], [kd, kh, kw]) = (g.output, g.input, g.kernel);
        let ([_, sh, sw], [_, dh, dw]) = (g.strides, g.dilations);
        if kd != 1 || id != 1 || od != 1 {
            return Ok(None);
        }
        // Pads and dilations far larger than the plane (a crafted model) leave it to the
        // general loop, which never materialises the padding.
        let sizes = || {
            let (reach_y, reach_x) = ((kh - 1).checked_mul(dh)?, (kw - 1).checked_mul(dw)?);
            let pitch = ow.checked_add(reach_x / sw)?;
            let rows = oh.checked_add(reach_y / sh)?;
            let grid = oh.checked_mul(pitch)?.checked_next_multiple_of(LANES)?;
            // The last block reads up to `grid + offset` of its phase.
            let phase = grid.checked_add((reach_y / sh).checked_mul(pitch)? + reach_x / sw)?;
            let phase = phase.max(rows.checked_mul(pitch)?);
            let all = phase.checked_mul(sh.checked_mul(sw)?)?;
            let limit = 4 * (ih * iw + oh * ow) + 4 * BLOCK;
            (all <= limit).then_some((pitch, phase, all, grid))
        };
        let Some((pitch, phase, all, grid)) = sizes() else {
            return Ok(None);
        };
        let mut taps = Vec::new();
        taps.try_reserve_exact(kh * kw)
            .map_err(|_| Error::Eval("out of memory for the taps of a convolution".into()))?;
        for ky in 0..kh {
            for kx in 0..kw {
                let (ry, rx) = (ky * dh, kx * dw);
                let which = ry % sh * sw + rx % sw;
                taps.push((which, ry / sh * pitch + rx / sw));
            }
        }
        Ok(Some(PhaseLayout {
            g,
            pitch,
            phase,
            plane: all,
            grid,
            taps,
        }))
    }

    /// Copies the input channel `x` into the phases `planes` (one plane of them, whose padding
    /// is zero and stays so); `false` if `x` is not one input channel.
    fn load<T: Real>(&self, planes: &mut [T], x: &[T]) -> bool {
        let [_, ih, iw] = self.g.input;
        if x.len() != ih * iw || planes.len() != self.plane {
            return false;
        }
        self.load_rows(planes, x);
        true
    }

    /// [`PhaseLayout::load`] of a channel `x` and planes of the right lengths.
    pub(super) fn load_rows<T: Real>(&self, planes: &mut [T], x: &[T]) {
        let mut at = self.phase_row(0);
        for src in x.chunks_exact(self.g.input[2].max(1)) {
            self.load_row(planes, at, src);
            at = self.next_row(at);
        }
    }

    /// Where input row `iy` lands: row `r` of the phases `(py, _)`, as `(r, py)`.
    fn phase_row(&self, iy: usize) -> (usize, usize) {
        let ([_, sh, _], [_, ph, _]) = (self.g.strides, self.g.pad_begin);
        ((iy + ph) / sh, (iy + ph) % sh)
    }

    /// Where the input row after the one at `(r, py)` lands (with no division, which costs
    /// more than copying a short row).
    fn next_row(&self, (r, py): (usize, usize)) -> (usize, usize) {
        match py + 1 == self.g.strides[1] {
            true => (r + 1, 0),
            false => (r, py + 1),
        }
    }

    /// Copies an input row `src` of the channel whose phases are `planes` into the phase rows
    /// it lands in, row `r` of the phases `(py, _)` (see [`PhaseLayout::phase_row`]).
    fn load_row<T: Real>(&self, planes: &mut [T], (r, py): (usize, usize), src: &[T]) {
        let g = self.g;
        let ([_, _, iw], [_, _, sw], [_, _, pw]) = (g.input, g.strides, g.pad_begin);
        let (pitch, phase) = (self.pitch, self.phase);
        let Some(room) = phase.checked_sub(r * pitch).filter(|&n| n > 0) else {
            return;
        };
        let len = pitch.min(room);
        let row = |px: usize| -> std::ops::Range<usize> {
            let base = (py * sw + px) * phase + r * pitch;
            base..base + len
        };
        // Input column `ix` is column `(ix + pw) / sw` of phase `(ix + pw) % sw`.
        if sw == 1 {
            let dst = &mut planes[row(0)][pw.min(len)..];
            let n = dst.len().min(iw);
            dst[..n].copy_from_slice(&src[..n]);
            return;
        }
        if sw == 2 {
            // Even input columns go to phase `pw % 2`, odd ones to the other.
            let (a, b) = (row(0), row(1));
            let (lo, hi) = planes.split_at_mut(b.start);
            let (p0, p1) = (&mut lo[a], &mut hi[..len]);
            let (even, odd, ce, co) = match pw % 2 {
                0 => (p0, p1, pw / 2, pw / 2),
                _ => (p1, p0, pw / 2, pw / 2 + 1),
            };
            let (even, odd) = (&mut even[ce.min(len)..], &mut odd[co.min(len)..]);
            // SAFETY: `deinterleave` writes only initialised values.
            let (e, o) = unsafe { (as_slots(even), as_slots(odd)) };
            deinterleave(src, e, o);
            let pairs = (iw / 2).min(e.len()).min(o.len());
            if iw % 2 == 1 && pairs == iw / 2 && pairs < e.len() {
                even[pairs] = src[iw - 1];
            }
            return;
        }
        for px in 0..sw {
            let first = (px + sw - pw % sw) % sw;
            if first >= iw {
                continue;
            }
            let dst = &mut planes[row(px)];
            for (d, &v) in dst
                .iter_mut()
                .skip((first + pw) / sw)
                .zip(src[first..].iter().step_by(sw))
            {
                *d = v;
            }
        }
    }
}

impl<'a, T: Real> PhasePlanes<'a, T> {
    /// Phase planes for one input channel of `g`, if [`PhaseLayout`] takes `g`.
    pub(super) fn new(g: &'a Geometry3) -> Result<Option<Self>> {
        PhaseLayout::new(g)?
            .map(PhasePlanes::with_layout)
            .transpose()
    }

    /// Zeroed phase planes for one input channel laid out by `layout`.
    pub(super) fn with_layout(layout: PhaseLayout<'a>) -> Result<Self> {
        Ok(PhasePlanes {
            x: Scratch::new(layout.plane, T::ZERO)?,
            y: Scratch::new(layout.grid, T::ZERO)?,
            layout,
        })
    }

    /// Copies the input channel `x` into the phases; `false` if `x` is not one input channel.
    pub(super) fn load(&mut self, x: &[T]) -> bool {
        self.layout.load(&mut self.x, x)
    }

    /// Writes the convolution by filter `w` plus `init` into every element of the output plane
    /// `y`.
    pub(super) fn convolve(&mut self, w: &[T], init: T, y: &mut [MaybeUninit<T>]) {
        let l = &self.layout;
        let ow = l.g.output[2];
        let whole = self.y.len() / BLOCK * BLOCK;
        let (blocks, tail) = self.y.split_at_mut(whole);
        let (x, fused) = (&self.x[..], has_fma());
        for (b, block) in blocks.chunks_exact_mut(BLOCK).enumerate() {
            taps_block::<T, BLOCK>(x, l.phase, &l.taps, w, init, b * BLOCK, block, fused);
        }
        let q = blocks.len();
        for (b, block) in tail.chunks_exact_mut(LANES).enumerate() {
            taps_block::<T, LANES>(x, l.phase, &l.taps, w, init, q + b * LANES, block, fused);
        }
        for (dst, src) in y.chunks_exact_mut(ow).zip(self.y.chunks(l.pitch)) {
            copy(dst, &src[..ow]);
        }
    }
}

/// `out[i] = init + w[0] * x[at(0) + i] + w[1] * x[at(1) + i] + ...` for the `N` outputs
/// from position `q` ([`BLOCK`], or [`LANES`] at the end of a plane), where tap `t` reads phase
/// `taps[t].0` (of `phase` elements) at offset `taps[t].1`, compiled per SIMD level. With
/// `fused` (the CPU has FMA, [`has_fma`]) each tap is one fused multiply-add, as in the direct
/// kernel: on a 2-vCPU Intel Xeon (AVX-512), 3x3 depthwise convolutions at 1 thread took 7-12%
/// less time than with a multiply and an add (48 channels of 80x80 0.230-0.253 -> 0.210-0.224
/// ms, 128 channels of 40x40 0.142-0.145 -> 0.125-0.132 ms).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
#[allow(clippy::too_many_arguments)]
fn taps_block<T: Real, const N: usize>(
    x: &[T],
    phase: usize,
    taps: &[(usize, usize)],
    w: &[T],
    init: T,
    q: usize,
    out: &mut [T],
    fused: bool,
) {
    let mut acc = [init; N];
    for (&(which, offset), &wv) in taps.iter().zip(w) {
        let at = which * phase + offset + q;
        let Some(src) = x.get(at..at + N) else {
            continue;
        };
        if fused {
            for (a, &v) in acc.iter_mut().zip(src) {
                *a = wv.mul_add(v, *a);
            }
        } else {
            for (a, &v) in acc.iter_mut().zip(src) {
                *a += wv * v;
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = a;
    }
}

/// The output rows of `g` in bands for the session's threads, two a thread (so that one that
/// finishes early takes over another's second) and of at least `min_rows` rows, each as its
/// first output row and [`Geometry3::rows`].
pub(super) fn row_bands(
    g: &Geometry3,
    min_rows: usize,
) -> Vec<(usize, (Geometry3, std::ops::Range<usize>))> {
    let oh = g.output[1];
    let rows = oh
        .div_ceil(2 * crate::par::threads())
        .max(min_rows.min(oh))
        .max(1);
    (0..oh)
        .step_by(rows)
        .map(|oy0| (oy0, g.rows(oy0, (oy0 + rows).min(oh))))
        .collect()
}

/// One input channel of a depthwise convolution, split for the width stride, with where its
/// width taps read.
pub(super) struct Depthwise<'a, T: bytemuck::Pod> {
    pub(super) x: Phased<'a, T>,
    pub(super) g: &'a Geometry3,
    pub(super) columns: Vec<ColumnTap>,
}

/// Where one width tap of a convolution reads: output columns `start..end` fall inside the input
/// row, and output column `c` reads element `c + shift` of the row split by [`Phased`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ColumnTap {
    start: usize,
    end: usize,
    shift: isize,
}

impl ColumnTap {
    /// The width taps of geometry `g` over rows split with phases of `phase_len` elements.
    pub(super) fn all(g: &Geometry3, phase_len: usize) -> Result<Vec<ColumnTap>> {
        let (ow, iw, kw) = (g.output[2], g.input[2], g.kernel[2]);
        let (sw, dw, pw) = (g.strides[2], g.dilations[2], g.pad_begin[2]);
        let mut taps = try_vec(kw, ColumnTap::default())?;
        for (kx, tap) in taps.iter_mut().enumerate() {
            let (start, end) = inside(ow, iw, sw, kx * dw, pw);
            if start < end {
                // `inside` keeps `first` in the row.
                let first = start * sw + kx * dw - pw;
                let index = first % sw * phase_len + first / sw;
                *tap = ColumnTap {
                    start,
                    end,
                    shift: index as isize - start as isize,
                };
            }
        }
        Ok(taps)
    }
}
