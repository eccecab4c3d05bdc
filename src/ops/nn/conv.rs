//! `Conv` (opsets 1, 11, 22), `ConvInteger` (10) and `QLinearConv` (10): grouped, strided,
//! dilated and padded convolutions over 1 to 3 spatial dims.
//!
//! Why one file: the three convolutions share the attributes, the im2col tiles and the group
//! schedule, and differ only in their element arithmetic; a quarter of the file is its tests.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Conv.html>,
//! <https://onnx.ai/onnx/operators/onnx__ConvInteger.html>,
//! <https://onnx.ai/onnx/operators/onnx__QLinearConv.html>.
//!
//! Design note: every group of every image is one matrix product, `W_g (M/g x C/g*taps)` times the
//! im2col matrix of the input (`C/g*taps x out_positions`). The im2col matrix is built a tile of
//! output positions at a time, so its memory stays bounded and tiles run in parallel; with many
//! groups (depthwise convolutions) each group sums its taps directly over the input plane split
//! into stride phases ([`PhasePlanes`]; 3-D planes and crafted pads take a per-row loop), the
//! threads splitting large planes into bands of rows and small ones by groups. Threads split
//! the positions of a plane the same way from one operator to the next (first rows first), so
//! a thread mostly reads what it wrote itself. A 1x1 convolution with unit strides and no padding multiplies the input directly, and
//! a plane of a few output positions (streaming audio) takes dot products instead of a product
//! that would pack the whole weight matrix. `ConvInteger` and `QLinearConv` run in `qconv.rs`
//! on the integer kernel; for contracted dims beyond its exact range they subtract their zero
//! points and run this file's code in `f64`, which is exact for 8-bit operands (padding then
//! contributes zero, which is the zero point before the shift, as the spec asks).

use std::borrow::Cow;
use std::mem::MaybeUninit;

use crate::tensor::{try_vec, Scratch};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{dot, optional, required, unsupported_type};
use super::super::vector::ColumnBlocks;
use super::super::vector::{add_scalar, as_slots, assume_written, copy, deinterleave, fill};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::blas::{gemm, Mat};
use super::common::{checked_product, input_dims, output_written, tensor_type};
use super::direct;
use super::window::{inside, Geometry3, WindowAttrs};
use crate::ops::math::Activation;
use crate::ops::num::{dispatch_real, has_fma, Loaded, Real};
use multiversion::multiversion;

/// Target size (in elements) of one im2col tile.
const TILE_ELEMS: usize = 1 << 17;

/// Planes of at most this many output positions run as dot products ([`ConvShape::few_positions`]).
const FEW_POSITIONS: usize = 8;
/// Output positions per band of a [`Direct`] convolution: the filter block's sums for a band
/// stay in L1.
const DIRECT_BAND: usize = 256;

/// The fewest input and output elements of one channel in a band of a depthwise convolution
/// split by rows ([`ConvShape::depthwise_bands`]). Measured on a 2-vCPU Intel Xeon (AVX-512)
/// at 2 threads in the generated conv-net (`run --repeat 300 --profile`), bands against
/// channels: 48 channels of 80x80 (3,360 elements a band) 0.190 -> 0.136 ms, 96 channels of
/// 80x80 at stride 2 (2,080) 0.150 -> 0.128 ms, 128 channels of 40x40 (840) 0.126 -> 0.135
/// ms, 192 channels of 20x20 (540) 0.061 -> 0.104 ms.
const MIN_BAND: usize = 1024;

/// The fewest output positions in one im2col tile.
const MIN_TILE: usize = 64;

/// Tiles are a whole number of this many positions (the f32 lanes of an AVX-512 vector): the
/// `gemm` crate then reads the im2col tile in place instead of packing a copy of it. Measured
/// on Zen 5 at 1 thread (`multigather run --repeat 500`, medians): a 3x3 convolution of 16 to 16
/// channels on 80x80 0.270 -> 0.193 ms, of 64 to 32 channels on 40x40 0.479 -> 0.388 ms.
const LANES: usize = 16;

/// What a convolution applies to its output as it writes it (a fused activation), on pieces of
/// the output while they are in cache.
pub(super) type Post<'p, T> = Option<&'p (dyn Fn(&mut [T]) + Sync)>;

/// The filters of a convolution: the weights (`c_out x c_in / group x taps`, row-major), the
/// optional bias, and, when the weights are a constant of the plan, each group's weights
/// packed for the direct kernel on an earlier run ([`KeptFilters`]).
#[derive(Clone, Copy)]
pub(super) struct Filters<'f, T> {
    pub w: &'f [T],
    pub bias: Option<&'f [T]>,
    pub packed: Option<&'f [direct::Packed]>,
}

impl<'f, T> Filters<'f, T> {
    /// Weights and a bias with nothing kept.
    pub fn new(w: &'f [T], bias: Option<&'f [T]>) -> Self {
        Filters {
            w,
            bias,
            packed: None,
        }
    }
}

/// What a convolution keeps of constant weights from one run to the next (the step's memo,
/// [`EvalCtx::remember`]): the weights widened to the compute type when they are stored as
/// another (`float16`), and each group's weights packed for the direct kernel when the first
/// run took it. Packing them on every call cost more than the kernel on small planes: a 3x3
/// convolution of 512 to 512 channels over 7x7 (`scripts/bench_qconv.py --float`, one thread,
/// Intel Xeon family 6 model 167) spent 60% of its 3.97 ms packing 9.4 MB of weights and
/// faulting in their pages.
struct KeptFilters<R> {
    widened: Option<Vec<R>>,
    packed: Option<Vec<direct::Packed>>,
}

/// A convolution's weights in the compute type `R`, and their packing when it was kept.
struct Weights<'a, R> {
    w: Loaded<'a, R>,
    packed: Option<&'a [direct::Packed]>,
}

impl<R: bytemuck::Pod> Weights<'_, R> {
    /// These weights with `bias`.
    fn with<'f>(&'f self, bias: Option<&'f [R]>) -> Filters<'f, R> {
        Filters {
            w: &self.w,
            bias,
            packed: self.packed,
        }
    }
}

/// `W` (input `input`, `t`) of a convolution of `shape` in the compute type `R`, with what is
/// kept of it when it is a constant ([`KeptFilters`]; made on the first run).
fn weights<'a, R: Real + 'static>(
    ctx: &EvalCtx<'a>,
    shape: &ConvShape,
    t: &'a Tensor,
    input: usize,
) -> Result<Weights<'a, R>> {
    let kept = ctx.remember(&[input], || {
        let widened = match t.dtype() == R::DTYPE {
            true => None,
            false => Some(R::load(t)?.into_owned()),
        };
        let packed = match &widened {
            Some(w) => shape.pack_direct(w)?,
            None => shape.pack_direct(&R::load(t)?)?,
        };
        Ok(KeptFilters { widened, packed })
    })?;
    Ok(match kept {
        Some(k) => Weights {
            w: match &k.widened {
                Some(w) => Loaded::Borrowed(&w[..]),
                None => R::load(t)?,
            },
            packed: k.packed.as_deref(),
        },
        None => Weights {
            w: R::load(t)?,
            packed: None,
        },
    })
}

/// The layout of one convolution: `x (N, C, in...)`, `w (M, C/group, k...)`, `y (N, M, out...)`.
#[derive(Clone, Debug)]
pub(super) struct ConvShape {
    pub batch: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub group: usize,
    pub geo: Geometry3,
    /// The full output shape.
    pub out_shape: Vec<usize>,
}

/// The `group` attribute of a `Conv`-like node, after checking that `X` and `W` have one rank,
/// of at least 3.
pub(super) fn ranks_and_group(ctx: &EvalCtx<'_>, x: &[usize], w: &[usize]) -> Result<usize> {
    checked_group(ctx, x, w, ctx.node.attr_int("group", 1)?)
}

/// `group` checked to be positive, after the ranks of `x` and `w`.
fn checked_group(ctx: &EvalCtx<'_>, x: &[usize], w: &[usize], group: i64) -> Result<usize> {
    if x.len() < 3 || w.len() != x.len() {
        return Err(ctx.error(format!(
            "X {x:?} needs rank 3 or more and W {w:?} the same rank"
        )));
    }
    usize::try_from(group)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| ctx.error("group must be positive"))
}

/// The attributes of a `Conv`-like node: `group`, the window and, for `FusedConv`, its
/// activation, parsed once per plan.
#[derive(Clone, Debug)]
pub(super) struct ConvAttrs {
    group: i64,
    window: WindowAttrs,
    activation: Option<Activation>,
}

impl Attributes for ConvAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<ConvAttrs> {
        let activation = match node.op_type.as_str() {
            "FusedConv" => Some(fused_activation(node)?),
            _ => None,
        };
        Ok(ConvAttrs {
            group: node.attr_int("group", 1)?,
            window: WindowAttrs::parse(node)?,
            activation,
        })
    }
}

/// `FusedConv`'s `activation` (required) with its `activation_params`.
fn fused_activation(node: &crate::ir::Node) -> Result<Activation> {
    let name = node
        .attr_string("activation")?
        .ok_or_else(|| Error::Eval("the activation attribute is required".into()))?;
    let params = node.attr_floats("activation_params")?.unwrap_or(&[]);
    Activation::named(name, params).map_err(Error::Eval)
}

impl ConvShape {
    /// The layout of a `Conv`-like node over inputs of shapes `x` and `w`.
    pub fn new(ctx: &EvalCtx<'_>, x: &[usize], w: &[usize]) -> Result<ConvShape> {
        let attrs = ctx.attrs::<ConvAttrs>()?;
        let group = checked_group(ctx, x, w, attrs.group)?;
        let (batch, c_in, c_out) = (x[0], x[1], w[0]);
        if w[1].checked_mul(group) != Some(c_in) || !c_out.is_multiple_of(group) {
            return Err(ctx.error(format!("X {x:?} and W {w:?} do not fit {group} groups")));
        }
        let window = attrs.window.window(x.len() - 2, Some(&w[2..]))?;
        let geometry = window.resolve(&x[2..], false)?;
        let mut out_shape = vec![batch, c_out];
        out_shape.extend(&geometry.output);
        checked_product(&out_shape)?;
        Ok(ConvShape {
            batch,
            c_in,
            c_out,
            group,
            geo: geometry.to_3d()?,
            out_shape,
        })
    }

    /// Input channels per group.
    fn cg(&self) -> usize {
        self.c_in / self.group
    }

    /// Output channels per group.
    fn mg(&self) -> usize {
        self.c_out / self.group
    }

    /// Whether the convolution is a plain matrix product over positions (1x1, unit strides, no
    /// padding).
    pub(super) fn is_pointwise(&self) -> bool {
        let g = &self.geo;
        g.taps() == 1 && g.strides == [1; 3] && g.pad_begin == [0; 3] && g.input == g.output
    }

    /// The direct kernel's plan for this convolution, if it takes that path: `f32`, not
    /// depthwise, not pointwise, more than a few positions (see [`Direct`]).
    fn direct<T: Real>(&self) -> Result<Option<Direct<'_>>> {
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
    fn pack_direct<T: Real>(&self, w: &[T]) -> Result<Option<Vec<direct::Packed>>> {
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

    /// Writes `post(conv(x, w) + bias)` into every element of `out`, all in `T`; returns `out`
    /// initialised.
    pub fn run<'o, T: Real>(
        &self,
        x: &[T],
        filters: Filters<'_, T>,
        post: Post<'_, T>,
        out: &'o mut [MaybeUninit<T>],
    ) -> Result<&'o mut [T]> {
        let (w, bias) = (filters.w, filters.bias);
        if out.is_empty() {
            // Nothing to write; the planes of an empty output may multiply past `usize`.
            return Ok(&mut []);
        }
        let (cg, mg) = (self.cg(), self.mg());
        let (in_plane, out_plane, taps) =
            (self.geo.in_plane(), self.geo.out_plane(), self.geo.taps());
        let kc = cg * taps;
        if x.len() != self.batch * self.c_in * in_plane
            || w.len() != self.c_out * kc
            || out.len() != self.batch * self.c_out * out_plane
        {
            return Err(Error::Eval("X, W or Y does not hold its shape".into()));
        }
        if bias.is_some_and(|b| b.len() != self.c_out) {
            return Err(Error::Eval(format!("B must hold {} values", self.c_out)));
        }
        let slab = mg * out_plane;
        if slab == 0 {
            return Ok(&mut []);
        }
        // The padded plane of a unit-stride depthwise convolution, allocated once per thread.
        let depthwise = cg == 1 && self.group > 1;
        let plane = || -> Result<Option<PhasePlanes<'_, T>>> {
            match depthwise {
                true => PhasePlanes::new(&self.geo),
                false => Ok(None),
            }
        };
        let task = |plane: &mut Option<PhasePlanes<'_, T>>,
                    (t, y): (usize, &mut [MaybeUninit<T>]),
                    parallel: bool|
         -> Result<()> {
            let (n, g) = (t / self.group, t % self.group);
            let xg = &x[(n * self.c_in + g * cg) * in_plane..][..cg * in_plane];
            let wg = Mat::row_major(&w[g * mg * kc..(g + 1) * mg * kc], mg, kc)?;
            let bg = bias.map(|b| &b[g * mg..(g + 1) * mg]);
            let packed = filters.packed.and_then(|p| p.get(g));
            self.run_group(xg, wg, bg, post, y, parallel, plane.as_mut(), packed)
        };
        let tasks = self.batch * self.group;
        let threads = crate::par::threads();
        let min_len = crate::par::min_len(tasks, &[slab, kc]);
        let parallel = min_len != usize::MAX;
        if depthwise && parallel && self.depthwise_bands(x, w, bias, post, out)? {
            // SAFETY: `depthwise_bands` wrote every element of `out`.
            return Ok(unsafe { assume_written(out) });
        }
        if tasks >= threads && tasks > 1 && parallel {
            // A plane that cannot be allocated leaves the channels to the general loop, whose
            // own allocation then reports the error.
            out.par_chunks_mut(slab)
                .enumerate()
                .with_min_len(min_len)
                .try_for_each_init(|| plane().ok().flatten(), |p, ty| task(p, ty, false))?;
        } else {
            let mut p = plane()?;
            out.chunks_mut(slab)
                .enumerate()
                .try_for_each(|ty| task(&mut p, ty, parallel))?;
        }
        // SAFETY: the slabs of `slab` elements cover `out` (its length is `batch * c_out *
        // out_plane`, checked above), and `run_group` writes every element of its slab first.
        Ok(unsafe { assume_written(out) })
    }

    /// A depthwise convolution on several threads, split by bands of output rows, each band of
    /// every channel in turn through [`PhasePlanes`] of the band alone; `false` (nothing
    /// written) if the split is not worth it or the phase planes do not take a band. Split by
    /// channels instead, a thread reads the rows of its channels that the operator before
    /// (split by positions, as 1x1 convolutions and most others are) wrote on the other core,
    /// and writes rows the operator after reads there: on a 2-vCPU Intel Xeon (AVX-512), 48
    /// channels of 80x80 between two 1x1 convolutions took 0.165 ms at 2 threads against 0.123
    /// ms alone (0.134 ms in bands). Bands of fewer than [`MIN_BAND`] elements a channel pay
    /// more in per-channel overhead than they save.
    fn depthwise_bands<T: Real>(
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

    /// One group of one image: `y (mg x out_plane) = post(wg * im2col(xg) + bias)`, every
    /// element of `y` written; `parallel` lets tiles of output positions run on several threads.
    #[allow(clippy::too_many_arguments)]
    fn run_group<T: Real>(
        &self,
        xg: &[T],
        wg: Mat<'_, T>,
        bias: Option<&[T]>,
        post: Post<'_, T>,
        y: &mut [MaybeUninit<T>],
        parallel: bool,
        plane: Option<&mut PhasePlanes<'_, T>>,
        packed: Option<&direct::Packed>,
    ) -> Result<()> {
        let p = self.geo.out_plane();
        let depthwise = self.cg() == 1 && self.group > 1;
        let init = |m: usize| bias.map_or(T::ZERO, |b| b[m]);
        if depthwise {
            if let Some(plane) = plane.and_then(|plane| plane.load(xg).then_some(plane)) {
                for (m, ym) in y.chunks_mut(p).enumerate() {
                    plane.convolve(&wg.row(m), init(m), ym);
                    if let Some(post) = post {
                        // SAFETY: `convolve` wrote every element of the plane.
                        post(unsafe { assume_written(ym) });
                    }
                }
                return Ok(());
            }
        }
        if let Some(direct) = self.direct::<T>()? {
            return direct.run(xg, wg, bias, post, y, parallel, packed);
        }
        if !depthwise && p > FEW_POSITIONS {
            if let Some(shifted) = Shifted::new(&self.geo, self.cg())? {
                return shifted.run(xg, wg, bias, post, y, parallel);
            }
            if self.is_pointwise() {
                return self.pointwise(xg, wg, bias, post, y, parallel);
            }
            let x = Phased::new(xg, self.geo.input[2], self.geo.strides[2], parallel)?;
            return self.tiled(&x, wg, bias, post, y, parallel);
        }
        // Every other loop accumulates onto `y`, which starts as the bias (in the one pass that
        // writes it).
        for (m, row) in y.chunks_mut(p).enumerate() {
            fill(row, init(m));
        }
        // SAFETY: the rows of `p` cover `y` (a slab of `mg` rows), and each was written just now.
        let y = unsafe { assume_written(y) };
        self.accumulate(xg, wg, y)?;
        if let Some(post) = post {
            post(y);
        }
        Ok(())
    }

    /// `y = post(wg * xg + bias)` for a 1x1 convolution over more than a few positions, in
    /// column tiles of positions when threads share it: each tile's product lands in its
    /// columns of `y` without reading them, then one pass per row adds the bias and applies
    /// `post`. Filling `y` with the bias first and adding the product onto it wrote and read `y`
    /// once more; on Zen 3 at 1 thread the generated conv-net went from 8.16-8.28 to 7.88-8.04
    /// ms (the lowest five of fifteen interleaved `run --repeat 50` minima, on a busy host).
    /// Smaller tiles, to keep the output in cache for that pass, measured the same.
    fn pointwise<T: Real>(
        &self,
        xg: &[T],
        wg: Mat<'_, T>,
        bias: Option<&[T]>,
        post: Post<'_, T>,
        y: &mut [MaybeUninit<T>],
        parallel: bool,
    ) -> Result<()> {
        let p = self.geo.out_plane();
        let (kc, mg) = (wg.cols(), wg.rows());
        let tiles = match parallel {
            true => column_tiles(p, &[kc, mg]),
            false => vec![(0, p)],
        };
        let blocks = ColumnBlocks::new(y, mg, p)?;
        let tile = |&(p0, t): &(usize, usize)| -> Result<()> {
            let b = Mat::new(&xg[p0..], kc, t, p, 1)?;
            // SAFETY: the tiles are disjoint columns of `y`, one task each; with beta 0 the
            // product does not read them, and the pass after it reads what it wrote.
            unsafe {
                blocks.product(T::ONE, wg, b, T::ZERO, p0)?;
                if bias.is_some() || post.is_some() {
                    blocks.for_each_row(p0, t, |m, row| {
                        if let Some(b) = bias {
                            add_scalar(row, b[m]);
                        }
                        if let Some(post) = post {
                            post(row);
                        }
                    });
                }
            }
            Ok(())
        };
        if parallel && tiles.len() > 1 {
            tiles.par_iter().try_for_each(tile)
        } else {
            tiles.iter().try_for_each(tile)
        }
    }

    /// `y += conv(xg, wg)` by the loops that add onto an output holding the bias: dot products
    /// for a few positions, and taps one at a time for depthwise planes the phase planes do not
    /// take (every other convolution returned from [`ConvShape::run_group`] before).
    fn accumulate<T: Real>(&self, xg: &[T], wg: Mat<'_, T>, y: &mut [T]) -> Result<()> {
        let p = self.geo.out_plane();
        let depthwise = self.cg() == 1 && self.group > 1;
        if !depthwise {
            return self.few_positions(xg, wg, y);
        }
        // One input channel per group (depthwise): a product with one row per filter would
        // waste most of the GEMM kernel, so sum the taps directly. (With one group, as in an
        // STFT by convolution with hundreds of filters and taps over a few output positions,
        // the product is the better loop.)
        let x = Phased::new(xg, self.geo.input[2], self.geo.strides[2], false)?;
        let columns = ColumnTap::all(&self.geo, x.phase_len)?;
        let plane = Depthwise {
            x,
            g: &self.geo,
            columns,
        };
        for (m, ym) in y.chunks_mut(p).enumerate() {
            single_channel(&plane, &wg.row(m), ym);
        }
        Ok(())
    }

    /// `y += wg * im2col(xg)` for a plane of a few positions (streaming audio models convolve a
    /// handful of frames at a time): one dot product per filter and position, over the filter's
    /// row and the position's column of im2col, copied into a row. A matrix product would pack
    /// the whole weight matrix for a few columns of work.
    fn few_positions<T: Real>(&self, xg: &[T], wg: Mat<'_, T>, y: &mut [T]) -> Result<()> {
        let p = self.geo.out_plane();
        let kc = wg.cols();
        if p == 0 || kc == 0 {
            return Ok(());
        }
        let mut columns = try_vec(p * kc, T::ZERO)?;
        if self.is_pointwise() {
            for (r, row) in xg[..kc * p].chunks_exact(p).enumerate() {
                for (j, &v) in row.iter().enumerate() {
                    columns[j * kc + r] = v;
                }
            }
        } else {
            window_columns(xg, &self.geo, self.cg(), &mut columns);
        }
        for (m, ym) in y.chunks_mut(p).enumerate().take(wg.rows()) {
            let w = wg.row(m);
            for (v, c) in ym.iter_mut().zip(columns.chunks_exact(kc)) {
                *v += dot(&w, c);
            }
        }
        Ok(())
    }

    /// `y = wg * im2col(xg) + bias`, every element of `y` written, building im2col a tile of
    /// output positions at a time. The bias enters the product as one more column of the
    /// weights against a row of ones under each tile, so `y` is never filled first. Measured on
    /// Zen 5 (`multigather run --repeat 500`, medians), the 3-channel stride-2 stem of the
    /// generated conv-net (16 filters, 320x320): 0.215 -> 0.19 ms at 1 thread.
    #[allow(clippy::too_many_arguments)]
    fn tiled<T: Real>(
        &self,
        xg: &Phased<'_, T>,
        wg: Mat<'_, T>,
        bias: Option<&[T]>,
        post: Post<'_, T>,
        y: &mut [MaybeUninit<T>],
        parallel: bool,
    ) -> Result<()> {
        let p = self.geo.out_plane();
        let kc = wg.cols();
        let mg = wg.rows();
        // The weights with the bias as their last column.
        let with_bias = match bias {
            Some(b) => {
                let mut wb = Scratch::new(mg * (kc + 1), T::ZERO)?;
                for (m, row) in wb.chunks_exact_mut(kc + 1).enumerate() {
                    row[..kc].copy_from_slice(&wg.row(m));
                    row[kc] = b[m];
                }
                Some(wb)
            }
            None => None,
        };
        let (w, kb) = match &with_bias {
            Some(wb) => (Mat::row_major(wb, mg, kc + 1)?, kc + 1),
            None => (wg, kc),
        };
        let tile = ((TILE_ELEMS / kb).max(MIN_TILE) / LANES * LANES).min(p);
        let tiles: Vec<usize> = (0..p).step_by(tile).collect();
        let width = |p0: usize| (p0 + tile).min(p) - p0;
        // Each tile's product lands straight in its columns of `y`, which it does not read.
        let blocks = ColumnBlocks::new(y, mg, p)?;
        let product = |col: &mut [T], p0: usize| -> Result<()> {
            let t = width(p0);
            let col = &mut col[..kb * t];
            im2col(xg, &self.geo, self.cg(), p0, p0 + t, &mut col[..kc * t]);
            col[kc * t..].fill(T::ONE);
            let b = Mat::row_major(col, kb, t)?;
            // SAFETY: the tiles are disjoint columns of `y`, one task each, and with beta 0 the
            // product does not read them; `post` reads them once the product wrote them.
            unsafe {
                blocks.product(T::ONE, w, b, T::ZERO, p0)?;
                if let Some(post) = post {
                    blocks.for_each_row(p0, t, |_, row| post(row));
                }
            }
            Ok(())
        };
        if !parallel || crate::par::min_len(tiles.len(), &[kc, tile, mg]) == usize::MAX {
            let mut col = Scratch::new(kb * tile, T::ZERO)?;
            return tiles.iter().try_for_each(|&p0| product(&mut col, p0));
        }
        tiles.par_iter().try_for_each(|&p0| -> Result<()> {
            let mut col = Scratch::new(kb * width(p0), T::ZERO)?;
            product(&mut col, p0)
        })
    }
}

/// Column tiles `(first, count)` of a product over `p` positions, two per thread, each a whole
/// number of [`LANES`] but the last, when a tile of work (`cost` per position) is worth a task;
/// else one tile. Measured on Zen 5 (`multigather run --repeat 500`, medians), a 1x1
/// convolution of 24 to 96 channels over 80x80 at 2 threads: 0.166 ms as one product split by
/// the `gemm` crate after a serial bias fill, 0.089 ms in column tiles (0.154 ms at 1 thread).
fn column_tiles(p: usize, cost: &[usize]) -> Vec<(usize, usize)> {
    let threads = crate::par::threads();
    if crate::par::min_len(p, cost) == usize::MAX || threads < 2 {
        return vec![(0, p)];
    }
    let tile = p.div_ceil(2 * threads).next_multiple_of(LANES).max(LANES);
    (0..p)
        .step_by(tile)
        .map(|p0| (p0, tile.min(p - p0)))
        .collect()
}

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
struct Shifted<'g> {
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
    fn new(g: &'g Geometry3, cg: usize) -> Result<Option<Self>> {
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
    fn run<T: Real>(
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

/// The rows of some input planes with each row split into its `stride` phases: phase `p` of a
/// row holds columns `p, p + stride, p + 2 * stride, ...` (zero-padded to a common length).
/// The columns one kernel tap reads at successive output positions are then one contiguous run
/// of one phase, which copies and vectorises like a stride-1 row.
struct Phased<'x, T: bytemuck::Pod> {
    rows: Rows<'x, T>,
    stride: usize,
    /// Elements per phase.
    phase_len: usize,
}

/// The rows of [`Phased`]: the input itself, or its split copy.
enum Rows<'x, T: bytemuck::Pod> {
    Input(&'x [T]),
    Split(Scratch<T>),
}

impl<'x, T: Real> Phased<'x, T> {
    /// `x` (rows of `width` columns) split for `stride`; borrowed as is when the stride is 1.
    /// With `parallel`, bands of rows are split on the session's threads.
    fn new(x: &'x [T], width: usize, stride: usize, parallel: bool) -> Result<Phased<'x, T>> {
        if stride <= 1 || width == 0 {
            return Ok(Phased {
                rows: Rows::Input(x),
                stride: 1,
                phase_len: width,
            });
        }
        let phase_len = width.div_ceil(stride);
        let split_row = |src: &[T], dst: &mut [MaybeUninit<T>]| {
            if stride == 2 {
                // The usual stride, as one vectorised pass that deinterleaves pairs.
                let (even, odd) = dst.split_at_mut(phase_len);
                deinterleave(src, even, odd);
                if width % 2 == 1 {
                    even[phase_len - 1].write(src[width - 1]);
                    odd[phase_len - 1].write(T::ZERO);
                }
                return;
            }
            for (p, phase) in dst.chunks_exact_mut(phase_len).enumerate() {
                // A stride wider than the row leaves its last phases empty (zero).
                let mut columns = src.get(p..).unwrap_or_default().iter().step_by(stride);
                for d in phase {
                    d.write(columns.next().copied().unwrap_or(T::ZERO));
                }
            }
        };
        let n_rows = x.len() / width;
        let row_len = stride * phase_len;
        let min_len = match parallel {
            true => crate::par::min_len(n_rows, &[width]),
            false => usize::MAX,
        };
        let split = |rows: &mut [MaybeUninit<T>]| {
            let pairs = x.chunks_exact(width).zip(rows.chunks_exact_mut(row_len));
            if min_len == usize::MAX {
                pairs.for_each(|(src, dst)| split_row(src, dst));
            } else {
                x.par_chunks_exact(width)
                    .zip(rows.par_chunks_exact_mut(row_len))
                    .with_min_len(min_len)
                    .for_each(|(src, dst)| split_row(src, dst));
            }
        };
        let len = n_rows * row_len;
        // SAFETY: the rows of `stride * phase_len` elements cover the scratch (`len` is a whole
        // number of them), and `split_row` writes every element of its row: both phases of a
        // pair for stride 2 (`deinterleave` writes `width / 2` of each, the odd tail the last),
        // every element of every phase otherwise.
        let rows = unsafe { Scratch::new_with(len, split)? };
        Ok(Phased {
            rows: Rows::Split(rows),
            stride,
            phase_len,
        })
    }

    /// Row `row` with its phases one after another.
    fn row(&self, row: usize) -> &[T] {
        let n = self.stride * self.phase_len;
        match &self.rows {
            Rows::Input(x) => &x[row * n..][..n],
            Rows::Split(split) => &split[row * n..][..n],
        }
    }

    /// For stride 1: `n` elements from column `first` of row `row` on, running into the rows
    /// after it (which follow one another in memory).
    fn flat(&self, row: usize, first: usize, n: usize) -> &[T] {
        let rows = match &self.rows {
            Rows::Input(x) => x,
            Rows::Split(split) => &split[..],
        };
        &rows[row * self.phase_len + first..][..n]
    }

    /// Columns `first, first + stride, ...` (`n` of them) of row `row`; the caller keeps them
    /// inside the row.
    fn run(&self, row: usize, first: usize, n: usize) -> &[T] {
        let (phase, j) = (first % self.stride, first / self.stride);
        let rows = match &self.rows {
            Rows::Input(x) => x,
            Rows::Split(split) => &split[..],
        };
        &rows[row * self.stride * self.phase_len + phase * self.phase_len + j..][..n]
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
fn single_channel<T: Real>(plane: &Depthwise<'_, T>, w: &[T], y: &mut [T]) {
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
struct PhasePlanes<'a, T: bytemuck::Pod> {
    layout: PhaseLayout<'a>,
    /// The phases, one after the other, zero where the padding is.
    x: Scratch<T>,
    /// The output rows at `pitch`, rounded up to whole [`LANES`].
    y: Scratch<T>,
}

/// Where the phases of one padded input plane lie (see [`PhasePlanes`]), shared by the
/// depthwise loop and the [`Direct`] convolution.
struct PhaseLayout<'a> {
    g: &'a Geometry3,
    pitch: usize,
    /// Elements per phase.
    phase: usize,
    /// Elements of all phases of one plane.
    plane: usize,
    /// The output rows at `pitch`, rounded up to whole [`LANES`].
    grid: usize,
    /// Each tap's phase and offset, in the filter's order.
    taps: Vec<(usize, usize)>,
}

/// Output positions a depthwise kernel sums all taps for at once: eight AVX-512 vectors of
/// `f32`, enough independent additions to hide their latency.
const BLOCK: usize = 128;

impl<'a> PhaseLayout<'a> {
    /// The layout for the input planes of `g`, if it has no depth taps and its padded phases
    /// stay within a few times the input and output planes.
    fn new(g: &'a Geometry3) -> Result<Option<Self>> {
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
    fn load_rows<T: Real>(&self, planes: &mut [T], x: &[T]) {
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
    fn new(g: &'a Geometry3) -> Result<Option<Self>> {
        PhaseLayout::new(g)?
            .map(PhasePlanes::with_layout)
            .transpose()
    }

    /// Zeroed phase planes for one input channel laid out by `layout`.
    fn with_layout(layout: PhaseLayout<'a>) -> Result<Self> {
        Ok(PhasePlanes {
            x: Scratch::new(layout.plane, T::ZERO)?,
            y: Scratch::new(layout.grid, T::ZERO)?,
            layout,
        })
    }

    /// Copies the input channel `x` into the phases; `false` if `x` is not one input channel.
    fn load(&mut self, x: &[T]) -> bool {
        self.layout.load(&mut self.x, x)
    }

    /// Writes the convolution by filter `w` plus `init` into every element of the output plane
    /// `y`.
    fn convolve(&mut self, w: &[T], init: T, y: &mut [MaybeUninit<T>]) {
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

/// A convolution of `f32` with several input channels per group (1x1 ones excepted), computed
/// directly: the group's input planes copied once into their padded phases ([`PhaseLayout`]),
/// then each band of output rows (about [`DIRECT_BAND`] positions at the planes' pitch) of each
/// block of filters summed over all taps in registers by [`direct::Kernel`], from the bias,
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
/// widths round up to 16 positions ([`direct::Kernel::lanes`]); its documentation gives the
/// measurements.
struct Direct<'a> {
    layout: PhaseLayout<'a>,
    cg: usize,
    taps: direct::Taps,
    kernel: direct::Kernel,
}

impl<'a> Direct<'a> {
    /// The plan for geometry `g` with `cg` input channels per group, if `T` is `f32`, the CPU
    /// has the kernel, and [`PhaseLayout`] takes `g`.
    fn new<T: Real>(g: &'a Geometry3, cg: usize) -> Result<Option<Self>> {
        if std::any::TypeId::of::<T>() != std::any::TypeId::of::<f32>() || cg == 0 {
            return Ok(None);
        }
        let Some(kernel) = direct::Kernel::detect() else {
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
            taps: direct::Taps::new(offsets),
            kernel,
        }))
    }

    /// Filters `row(m)` for `m < filters`, each of this plan's taps, packed for its kernel.
    fn pack<'r>(
        &self,
        filters: usize,
        row: impl Fn(usize) -> Cow<'r, [f32]>,
    ) -> Result<direct::Packed> {
        direct::Packed::new(self.kernel, filters, self.taps.len(), row)
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
    fn run<T: Real>(
        &self,
        xg: &[T],
        wg: Mat<'_, T>,
        bias: Option<&[T]>,
        post: Post<'_, T>,
        y: &mut [MaybeUninit<T>],
        parallel: bool,
        packed: Option<&direct::Packed>,
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
    /// `oy0..` of `blocks` (the weights packed, the bias laid out by [`direct::Packed::bias`]).
    fn band<T: Real>(
        &self,
        x: &[T],
        stride: usize,
        (packed, bias): (&direct::Packed, &[f32]),
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
fn row_bands(g: &Geometry3, min_rows: usize) -> Vec<(usize, (Geometry3, std::ops::Range<usize>))> {
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
struct Depthwise<'a, T: bytemuck::Pod> {
    x: Phased<'a, T>,
    g: &'a Geometry3,
    columns: Vec<ColumnTap>,
}

/// Where one width tap of a convolution reads: output columns `start..end` fall inside the input
/// row, and output column `c` reads element `c + shift` of the row split by [`Phased`].
#[derive(Clone, Copy, Debug, Default)]
struct ColumnTap {
    start: usize,
    end: usize,
    shift: isize,
}

impl ColumnTap {
    /// The width taps of geometry `g` over rows split with phases of `phase_len` elements.
    fn all(g: &Geometry3, phase_len: usize) -> Result<Vec<ColumnTap>> {
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

/// The input coordinate of output `o` at tap `k` along a dim of `n` (stride `s`, dilation `d`,
/// `pad` in front), if inside.
pub(super) fn coord(o: usize, k: usize, s: usize, d: usize, pad: usize, n: usize) -> Option<usize> {
    (o * s + k * d).checked_sub(pad).filter(|&i| i < n)
}

/// The im2col column of every output position, one after the other (`columns[j * kc + r]` is
/// tap `r` of position `j`, taps in im2col's order: channel, then depth, height and width), for
/// the few positions of [`ConvShape::few_positions`]: a position's taps along the width are one
/// run of the input row when the dilation is 1, where im2col would write every tap's row of a
/// few positions in a loop of its own. Measured on an Intel Xeon (`multigather run --repeat
/// 2000 --threads 1`, medians, two interleaved pairs), silero-vad, whose STFT (256 taps) and
/// encoder (129 channels of 3 taps) convolve four frames: 0.100-0.105 -> 0.083 ms, and its
/// 16 kHz sequence model 0.100-0.103 -> 0.084-0.088 ms.
fn window_columns<T: Real>(xg: &[T], g: &Geometry3, cg: usize, columns: &mut [T]) {
    let [_, oh, ow] = g.output;
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, _] = g.strides;
    let [dd, dh, dw] = g.dilations;
    let [pd, ph, _] = g.pad_begin;
    let kc = cg * kd * kh * kw;
    for (j, column) in columns.chunks_exact_mut(kc.max(1)).enumerate() {
        let (ox, oy, oz) = (j % ow, (j / ow) % oh, j / ow / oh);
        // The taps along the width that fall inside the row, `lo..hi`, the first at `at`.
        let (lo, count, at) = g.taps_inside(2, ox);
        let hi = lo + count;
        let mut runs = column.chunks_exact_mut(kw.max(1));
        for c in 0..cg {
            for kz in 0..kd {
                for ky in 0..kh {
                    let Some(run) = runs.next() else { return };
                    let row = coord(oz, kz, sd, dd, pd, id)
                        .zip(coord(oy, ky, sh, dh, ph, ih))
                        .map(|(iz, iy)| ((c * id + iz) * ih + iy) * iw);
                    let Some(row) = row.filter(|_| lo < hi) else {
                        run.fill(T::ZERO);
                        continue;
                    };
                    run[..lo].fill(T::ZERO);
                    run[hi..].fill(T::ZERO);
                    let x0 = row + at;
                    if dw == 1 {
                        run[lo..hi].copy_from_slice(&xg[x0..x0 + (hi - lo)]);
                    } else {
                        for (k, v) in run[lo..hi].iter_mut().enumerate() {
                            *v = xg[x0 + k * dw];
                        }
                    }
                }
            }
        }
    }
}

/// Fills `col` (row-major, `cg * taps` rows of `p1 - p0` columns) with the input values each
/// kernel tap of each channel sees at output positions `p0..p1` (zero in the padding); `x` holds
/// the `cg` input planes, split for the width stride.
fn im2col<T: Real>(
    x: &Phased<'_, T>,
    g: &Geometry3,
    cg: usize,
    p0: usize,
    p1: usize,
    col: &mut [T],
) {
    let t = p1 - p0;
    let [_, oh, ow] = g.output;
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.strides;
    let [dd, dh, dw] = g.dilations;
    let [pd, ph, pw] = g.pad_begin;
    // With unit strides and rows as wide as the output's, a tap reads the input rows of whole
    // output rows as one run (its columns outside the row then set to zero).
    let whole_rows = sw == 1 && sh == 1 && iw == ow && x.stride == 1;
    let mut rows = col.chunks_mut(t.max(1));
    for c in 0..cg {
        for kz in 0..kd {
            for ky in 0..kh {
                for kx in 0..kw {
                    let Some(row) = rows.next() else { return };
                    let (lo, hi) = inside(ow, iw, sw, kx * dw, pw);
                    let mut p = p0;
                    let mut dst = 0;
                    while p < p1 {
                        let ox0 = p % ow;
                        let (oy, oz) = ((p / ow) % oh, p / ow / oh);
                        if whole_rows && ox0 == 0 && p1 - p >= 2 * ow {
                            let n = ((p1 - p) / ow).min(oh - oy);
                            let seg = &mut row[dst..dst + n * ow];
                            match coord(oz, kz, sd, dd, pd, id) {
                                Some(iz) => {
                                    let (y0, y1) = inside(oh, ih, 1, ky * dh, ph);
                                    let (ra, rb) = (y0.clamp(oy, oy + n), y1.clamp(oy, oy + n));
                                    seg[..(ra - oy) * ow].fill(T::ZERO);
                                    seg[(rb - oy) * ow..].fill(T::ZERO);
                                    if ra < rb && lo < hi {
                                        // `inside` keeps these rows and columns inside.
                                        let iy = ra + ky * dh - ph;
                                        let len = (rb - ra - 1) * ow + hi - lo;
                                        let at = (ra - oy) * ow + lo;
                                        seg[at..at + len].copy_from_slice(x.flat(
                                            (c * id + iz) * ih + iy,
                                            lo + kx * dw - pw,
                                            len,
                                        ));
                                        for r in
                                            seg[(ra - oy) * ow..(rb - oy) * ow].chunks_exact_mut(ow)
                                        {
                                            r[..lo].fill(T::ZERO);
                                            r[hi..].fill(T::ZERO);
                                        }
                                    } else {
                                        seg[(ra - oy) * ow..(rb - oy) * ow].fill(T::ZERO);
                                    }
                                }
                                None => seg.fill(T::ZERO),
                            }
                            p += n * ow;
                            dst += n * ow;
                            continue;
                        }
                        let run = (ow - ox0).min(p1 - p);
                        let seg = &mut row[dst..dst + run];
                        match (coord(oz, kz, sd, dd, pd, id), coord(oy, ky, sh, dh, ph, ih)) {
                            (Some(iz), Some(iy)) => {
                                let (a, b) = (lo.clamp(ox0, ox0 + run), hi.clamp(ox0, ox0 + run));
                                seg[..a - ox0].fill(T::ZERO);
                                seg[b - ox0..].fill(T::ZERO);
                                if a < b {
                                    // `inside` guarantees these positions are inside.
                                    let first = a * sw + kx * dw - pw;
                                    let plane_row = (c * id + iz) * ih + iy;
                                    seg[a - ox0..b - ox0].copy_from_slice(x.run(
                                        plane_row,
                                        first,
                                        b - a,
                                    ));
                                }
                            }
                            _ => seg.fill(T::ZERO),
                        }
                        p += run;
                        dst += run;
                    }
                }
            }
        }
    }
}

pub(super) fn eval_conv(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, w, b, dtype) = conv_operands(ctx, inputs)?;
    let shape = ConvShape::new(ctx, x.shape(), w.shape())?;
    let y = dispatch_real!(dtype, R => {
        let (xv, w) = (R::load(x)?, weights::<R>(ctx, &shape, w, 1)?);
        let bias = b.map(R::load).transpose()?;
        let filters = w.with(bias.as_deref());
        output_written::<R>(dtype, &shape.out_shape, |y| shape.run(&xv, filters, None, y))?
    }, _ => return Err(unsupported_type("Conv", dtype)));
    Ok(vec![y])
}

/// `com.microsoft.FusedConv`: `activation(Conv(X, W, B) + Z)`, `float` only as in onnxruntime.
/// Without `Z` the activation runs on each piece of the output as the convolution writes it
/// (onnxruntime's activations, and `HardSwish`, which the interpreter's planner fuses too).
pub(super) fn eval_fused_conv(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, w, b, dtype) = conv_operands(ctx, inputs)?;
    if dtype != DataType::Float {
        return Err(unsupported_type("FusedConv", dtype));
    }
    let activation = match ctx.attrs::<ConvAttrs>()?.activation {
        Some(a) => a,
        None => fused_activation(ctx.node)?,
    };
    let shape = ConvShape::new(ctx, x.shape(), w.shape())?;
    let (xv, w) = (x.as_slice::<f32>()?, weights::<f32>(ctx, &shape, w, 1)?);
    let bias = b.map(Tensor::as_slice::<f32>).transpose()?;
    let filters = w.with(bias);
    let z = optional(inputs, 3);
    let apply = move |y: &mut [f32]| activation.apply(y);
    let post: Post<'_, f32> = match z {
        None => Some(&apply),
        Some(_) => None,
    };
    let mut y =
        output_written::<f32>(dtype, &shape.out_shape, |y| shape.run(xv, filters, post, y))?;
    if let Some(z) = z {
        if z.dtype() != dtype || z.shape() != y.shape() {
            return Err(ctx.error(format!(
                "Z must be float of the output's shape {:?}, found {} {:?}",
                y.shape(),
                z.dtype(),
                z.shape()
            )));
        }
        let ys = y.as_slice_mut::<f32>()?;
        for (v, &add) in ys.iter_mut().zip(z.as_slice::<f32>()?) {
            *v += add;
        }
        activation.apply(ys);
    }
    Ok(vec![y])
}

/// `X`, `W` and the optional `B` of a convolution, which must share one element type.
pub(super) fn conv_operands<'t>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&'t Tensor>],
) -> Result<(&'t Tensor, &'t Tensor, Option<&'t Tensor>, DataType)> {
    let (x, w, b) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        optional(inputs, 2),
    );
    let dtype = x.dtype();
    if w.dtype() != dtype || b.is_some_and(|b| b.dtype() != dtype) {
        return Err(ctx.error("X, W and B must have one element type"));
    }
    Ok((x, w, b, dtype))
}

/// The output type of a convolution of `x` (input `xi`) by `w` (input `wi`) with element `elem`.
fn infer_conv_like(
    ctx: &InferCtx<'_>,
    xi: usize,
    wi: usize,
    elem: Option<DataType>,
) -> Result<Vec<TensorType>> {
    let attrs = ctx.attrs::<ConvAttrs>().ok();
    let dims = input_dims(ctx, xi).filter(|x| x.len() >= 3).map(|x| {
        let w = input_dims(ctx, wi).filter(|w| w.len() == x.len());
        let c_out = w.map_or(Dim::Unknown, |w| w[0].clone());
        let kernel = w.and_then(|w| super::common::known_sizes(&w[2..]));
        let spatial = attrs
            .as_ref()
            .and_then(|a| a.window.window(x.len() - 2, kernel.as_deref()).ok())
            .map(|win| win.output_dims(&x[2..], false))
            .unwrap_or_else(|| vec![Dim::Unknown; x.len() - 2]);
        let mut dims = vec![x[0].clone(), c_out];
        dims.extend(spatial);
        dims
    });
    Ok(vec![tensor_type(elem, dims)])
}

pub(super) fn infer_conv(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_conv_like(ctx, 0, 1, ctx.input(0).and_then(|t| t.elem))
}

pub(super) fn infer_conv_integer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_conv_like(ctx, 0, 1, Some(DataType::Int32))
}

pub(super) fn infer_qlinear_conv(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_conv_like(ctx, 0, 3, ctx.input(7).and_then(|t| t.elem))
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;

    use super::*;

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    /// A direct (seven-loop) convolution to check the im2col path against.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        x: &[f32],
        xs: [usize; 4],
        w: &[f32],
        ws: [usize; 4],
        group: usize,
        s: [usize; 2],
        d: [usize; 2],
        p: [usize; 2],
        os: [usize; 2],
    ) -> Vec<f32> {
        let [n, c, h, wd] = xs;
        let [m, cg, kh, kw] = ws;
        let mg = m / group;
        let mut y = vec![0.0; n * m * os[0] * os[1]];
        for b in 0..n {
            for oc in 0..m {
                let g = oc / mg;
                for oy in 0..os[0] {
                    for ox in 0..os[1] {
                        let mut acc = 0.0;
                        for ic in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * s[0] + ky * d[0]) as isize - p[0] as isize;
                                    let ix = (ox * s[1] + kx * d[1]) as isize - p[1] as isize;
                                    if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < wd
                                    {
                                        let xi = ((b * c + g * cg + ic) * h + iy as usize) * wd
                                            + ix as usize;
                                        let wi = ((oc * cg + ic) * kh + ky) * kw + kx;
                                        acc += x[xi] * w[wi];
                                    }
                                }
                            }
                        }
                        y[((b * m + oc) * os[0] + oy) * os[1] + ox] = acc;
                    }
                }
            }
        }
        y
    }

    /// An input of shape `xs` and weights of shape `ws` holding small integers, so that every
    /// summation order gives the same bits.
    fn small_ints(xs: [usize; 4], ws: [usize; 4]) -> (Vec<f32>, Vec<f32>) {
        let x = (0..xs.iter().product::<usize>())
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect();
        let w = (0..ws.iter().product::<usize>())
            .map(|i| ((i * 5) % 7) as f32 - 3.0)
            .collect();
        (x, w)
    }

    #[test]
    fn the_onnx_example_with_and_without_padding() {
        let x = f32s(&[1, 1, 5, 5], (0..25).map(|v| v as f32).collect());
        let w = f32s(&[1, 1, 3, 3], vec![1.0; 9]);
        let node = Node::new("Conv", "c", ["x", "w"], ["y"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![3, 3]))
            .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]));
        let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
        let want = [
            12.0, 21.0, 27.0, 33.0, 24.0, 33.0, 54.0, 63.0, 72.0, 51.0, 63.0, 99.0, 108.0, 117.0,
            81.0, 93.0, 144.0, 153.0, 162.0, 111.0, 72.0, 111.0, 117.0, 123.0, 84.0,
        ];
        assert_eq!(y[0], f32s(&[1, 1, 5, 5], want.to_vec()));
        let node = Node::new("Conv", "c", ["x", "w"], ["y"]);
        let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
        let want = [54.0, 63.0, 72.0, 99.0, 108.0, 117.0, 144.0, 153.0, 162.0];
        assert_eq!(y[0], f32s(&[1, 1, 3, 3], want.to_vec()));
    }

    #[test]
    fn fused_conv_adds_z_then_applies_its_activation() {
        let x = f32s(&[1, 1, 5, 5], (0..25).map(|v| v as f32).collect());
        let w = f32s(&[1, 1, 3, 3], vec![1.0; 9]);
        let conv = [
            12.0f32, 21.0, 27.0, 33.0, 24.0, 33.0, 54.0, 63.0, 72.0, 51.0, 63.0, 99.0, 108.0,
            117.0, 81.0, 93.0, 144.0, 153.0, 162.0, 111.0, 72.0, 111.0, 117.0, 123.0, 84.0,
        ];
        let z = f32s(&[1, 1, 5, 5], (0..25).map(|v| -(v as f32)).collect());
        let fused = |activation: &str, params: Vec<f32>| {
            Node::new("FusedConv", "c", ["x", "w", "", "z"], ["y"])
                .with_domain("com.microsoft")
                .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]))
                .with_attr("activation", AttrValue::String(activation.into()))
                .with_attr("activation_params", AttrValue::Floats(params))
        };
        let with_z = [Some(&x), Some(&w), None, Some(&z)];
        let y = eval_node(&fused("Clip", vec![20.0, 100.0]), 1, &with_z).unwrap();
        let want: Vec<f32> = (0..25)
            .map(|i| (conv[i] - i as f32).clamp(20.0, 100.0))
            .collect();
        assert_eq!(y[0], f32s(&[1, 1, 5, 5], want));
        let y = eval_node(&fused("Relu", vec![]), 1, &[Some(&x), Some(&w)]).unwrap();
        assert_eq!(y[0], f32s(&[1, 1, 5, 5], conv.to_vec()));
        let bad = [
            (fused("Gelu", vec![]), "activation 'Gelu' is not one of"),
            (
                Node::new("FusedConv", "c", ["x", "w"], ["y"]).with_domain("com.microsoft"),
                "the activation attribute is required",
            ),
        ];
        for (node, message) in bad {
            let e = eval_node(&node, 1, &[Some(&x), Some(&w)]).unwrap_err();
            assert!(e.to_string().contains(message), "{e}");
        }
        let short_z = f32s(&[1, 1, 5, 1], vec![0.0; 5]);
        let e = eval_node(
            &fused("Relu", vec![]),
            1,
            &[Some(&x), Some(&w), None, Some(&short_z)],
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("Z must be float of the output's shape"),
            "{e}"
        );
    }

    #[test]
    fn grouped_strided_dilated_padded_agrees_with_direct_loops() {
        let xs = [2, 4, 23, 19];
        let ws = [6, 2, 3, 2];
        let (x, w) = small_ints(xs, ws);
        let node = Node::new("Conv", "c", ["x", "w"], ["y"])
            .with_attr("group", AttrValue::Int(2))
            .with_attr("strides", AttrValue::Ints(vec![2, 1]))
            .with_attr("dilations", AttrValue::Ints(vec![1, 3]))
            .with_attr("pads", AttrValue::Ints(vec![1, 2, 0, 2]));
        let y = eval_node(
            &node,
            22,
            &[Some(&f32s(&xs, x.clone())), Some(&f32s(&ws, w.clone()))],
        )
        .unwrap();
        // out h = (23 + 1 - 3) / 2 + 1 = 11; out w = (19 + 4 - 4) / 1 + 1 = 20.
        assert_eq!(y[0].shape(), &[2, 6, 11, 20]);
        let want = reference(&x, xs, &w, ws, 2, [2, 1], [1, 3], [1, 2], [11, 20]);
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &want[..]);
    }

    /// Runs the convolution `node` (inputs `x`, `w` and, when given, `b`) on the small integers
    /// of shapes `xs` and `ws`, without and with a bias, on one thread and on three, against
    /// `want` (the reference without a bias) plus the bias.
    fn agrees_with_and_without_bias(node: Node, xs: [usize; 4], ws: [usize; 4], want: &[f32]) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let (x, w) = small_ints(xs, ws);
        let plane = want.len() / (xs[0] * ws[0]);
        let bias: Vec<f32> = (0..ws[0]).map(|m| m as f32 - 1.5).collect();
        let (xt, wt, bt) = (f32s(&xs, x), f32s(&ws, w), f32s(&[ws[0]], bias.clone()));
        for with_bias in [false, true] {
            let mut node = node.clone();
            let inputs = if with_bias {
                vec![Some(&xt), Some(&wt), Some(&bt)]
            } else {
                node.inputs.truncate(2);
                vec![Some(&xt), Some(&wt)]
            };
            let want: Vec<f32> = want
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    v + if with_bias {
                        bias[i / plane % ws[0]]
                    } else {
                        0.0
                    }
                })
                .collect();
            let serial = crate::par::serial(|| eval_node(&node, 22, &inputs)).unwrap();
            let parallel = pool.install(|| eval_node(&node, 22, &inputs)).unwrap();
            for y in [serial, parallel] {
                assert_eq!(
                    y[0].as_slice::<f32>().unwrap(),
                    want,
                    "{xs:?} {ws:?} {with_bias}"
                );
            }
        }
    }

    #[test]
    fn unit_strides_multiply_shifted_rows_serially_and_in_bands_in_parallel() {
        // Unit-stride convolutions take the products over shifted rows: groups, dilations and
        // uneven pads, a kernel one row high (one product), and a plane large enough to run in
        // several bands.
        for (xs, ws, group, d, pads) in [
            ([2, 6, 30, 17], [4, 3, 3, 2], 2, [2, 1], [1, 0, 2, 1]),
            ([1, 4, 9, 50], [3, 4, 1, 3], 1, [1, 4], [0, 3, 0, 2]),
            ([1, 64, 37, 41], [8, 64, 3, 3], 1, [1, 2], [2, 2, 2, 2]),
        ] {
            let (x, w) = small_ints(xs, ws);
            let [_, _, kh, kw] = ws;
            let out = [
                xs[2] + pads[0] + pads[2] - (kh - 1) * d[0],
                xs[3] + pads[1] + pads[3] - (kw - 1) * d[1],
            ];
            let want = reference(&x, xs, &w, ws, group, [1, 1], d, [pads[0], pads[1]], out);
            let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
                .with_attr("group", AttrValue::Int(group as i64))
                .with_attr("dilations", AttrValue::Ints(vec![d[0] as i64, d[1] as i64]))
                .with_attr(
                    "pads",
                    AttrValue::Ints(pads.iter().map(|&p| p as i64).collect()),
                );
            agrees_with_and_without_bias(node, xs, ws, &want);
        }
    }

    #[test]
    fn direct_and_product_paths_agree_with_the_reference_in_f32_and_f64() {
        // `float` takes each direct kernel the CPU has (AVX-512F, AVX2), `double` the products
        // over shifted rows (unit strides) or im2col tiles: strides 1 to 3, dilations, uneven
        // pads, groups, filter counts around the block heights of both kernels (1, 5, 7, 13 and
        // 25 a group, 24), output widths that are not whole vectors, one-row and one-column
        // planes, and bands of rows split over three threads.
        for level in direct::Level::ALL {
            direct::testing::with_level(level, direct_and_product_paths_agree);
        }
    }

    /// The cases of [`direct_and_product_paths_agree_with_the_reference_in_f32_and_f64`].
    fn direct_and_product_paths_agree() {
        for (xs, ws, group, s, d, pads) in [
            (
                [1, 4, 23, 35],
                [1, 4, 3, 3],
                1,
                [1, 1],
                [1, 1],
                [1, 1, 1, 1],
            ),
            (
                [1, 3, 19, 50],
                [5, 3, 3, 3],
                1,
                [1, 1],
                [1, 1],
                [0, 1, 0, 1],
            ),
            (
                [1, 6, 21, 33],
                [24, 6, 3, 3],
                1,
                [1, 1],
                [1, 1],
                [1, 1, 1, 1],
            ),
            (
                [1, 10, 18, 26],
                [50, 5, 3, 3],
                2,
                [2, 1],
                [1, 1],
                [1, 1, 1, 1],
            ),
            (
                [1, 5, 31, 29],
                [7, 5, 3, 3],
                1,
                [1, 1],
                [1, 1],
                [1, 1, 1, 1],
            ),
            (
                [2, 6, 30, 17],
                [26, 3, 3, 2],
                2,
                [1, 1],
                [2, 1],
                [1, 0, 2, 1],
            ),
            (
                [1, 3, 64, 70],
                [16, 3, 3, 3],
                1,
                [2, 2],
                [1, 1],
                [1, 1, 1, 1],
            ),
            (
                [1, 4, 40, 37],
                [6, 4, 5, 3],
                1,
                [3, 2],
                [1, 2],
                [2, 0, 1, 3],
            ),
            (
                [1, 8, 1, 300],
                [12, 8, 1, 5],
                1,
                [1, 1],
                [1, 1],
                [0, 2, 0, 2],
            ),
            (
                [1, 8, 300, 1],
                [12, 8, 3, 1],
                1,
                [1, 1],
                [1, 1],
                [1, 0, 1, 0],
            ),
            (
                [1, 64, 37, 41],
                [8, 64, 3, 3],
                1,
                [1, 1],
                [1, 2],
                [2, 2, 2, 2],
            ),
            // A few positions (at most `FEW_POSITIONS`), whose columns are built one position
            // at a time: padded on every side, dilated along the width, an STFT-like window
            // with a stride of half its length, and a streaming audio encoder's frames.
            ([1, 3, 4, 4], [5, 3, 3, 3], 1, [2, 2], [1, 1], [1, 1, 1, 1]),
            ([1, 2, 3, 9], [4, 2, 2, 3], 1, [1, 3], [2, 2], [0, 2, 1, 0]),
            (
                [1, 1, 1, 40],
                [6, 1, 1, 16],
                1,
                [1, 8],
                [1, 1],
                [0, 0, 0, 0],
            ),
            ([1, 5, 1, 4], [7, 5, 1, 3], 1, [1, 1], [1, 1], [0, 1, 0, 1]),
            ([1, 4, 1, 3], [6, 2, 1, 5], 2, [1, 1], [1, 1], [0, 3, 0, 2]),
        ] {
            let (x, w) = small_ints(xs, ws);
            let [_, _, kh, kw] = ws;
            let out = [0, 1].map(|i| {
                (xs[2 + i] + pads[i] + pads[i + 2] - (ws[2 + i] - 1) * d[i] - 1) / s[i] + 1
            });
            let want = reference(&x, xs, &w, ws, group, s, d, [pads[0], pads[1]], out);
            let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
                .with_attr("group", AttrValue::Int(group as i64))
                .with_attr("kernel_shape", AttrValue::Ints(vec![kh as i64, kw as i64]))
                .with_attr("strides", AttrValue::Ints(vec![s[0] as i64, s[1] as i64]))
                .with_attr("dilations", AttrValue::Ints(vec![d[0] as i64, d[1] as i64]))
                .with_attr(
                    "pads",
                    AttrValue::Ints(pads.iter().map(|&p| p as i64).collect()),
                );
            agrees_with_and_without_bias(node.clone(), xs, ws, &want);
            let doubles = |v: &[f32], shape: &[usize]| {
                let v: Vec<f64> = v.iter().map(|&v| f64::from(v)).collect();
                Tensor::from_vec(DataType::Double, shape, v).unwrap()
            };
            let (xt, wt) = (doubles(&x, &xs), doubles(&w, &ws));
            let mut node = node;
            node.inputs.truncate(2);
            let y = eval_node(&node, 22, &[Some(&xt), Some(&wt)]).unwrap();
            let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
            assert_eq!(
                y[0].as_slice::<f64>().unwrap(),
                &want[..],
                "{xs:?} {ws:?} double"
            );
        }
    }

    #[test]
    fn column_tiles_of_pointwise_and_strided_products_agree_on_three_threads() {
        // A pointwise convolution large enough to split its positions into column tiles, and a
        // strided one whose im2col tiles run in parallel: each tile's product lands in its own
        // columns of the output.
        for (xs, ws, s, p) in [
            ([1, 16, 40, 50], [24, 16, 1, 1], 1, 0),
            ([1, 8, 200, 200], [16, 8, 3, 3], 2, 1),
        ] {
            let (x, w) = small_ints(xs, ws);
            let out = [0, 1].map(|i| (xs[2 + i] + 2 * p - ws[2 + i]) / s + 1);
            let want = reference(&x, xs, &w, ws, 1, [s, s], [1, 1], [p, p], out);
            let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
                .with_attr("strides", AttrValue::Ints(vec![s as i64; 2]))
                .with_attr("pads", AttrValue::Ints(vec![p as i64; 4]));
            agrees_with_and_without_bias(node, xs, ws, &want);
        }
    }

    #[test]
    fn bands_of_rows_agree_with_whole_planes_on_three_threads() {
        // Depthwise and direct convolutions large enough to split into bands of output rows on
        // three threads: each band loads its own input rows (the top one with the padding
        // above, the bottom one with what the taps read below), for unit and wider strides,
        // dilations, tall kernels and a channel multiplier of 2, two images each.
        for (group, (hw, k, s, d, p)) in [4, 1].into_iter().flat_map(|g| {
            [
                ([60, 70], [3, 3], 1, 1, 1),
                ([100, 90], [3, 3], 2, 1, 1),
                ([64, 66], [5, 5], 1, 1, 2),
                ([70, 64], [3, 3], 1, 2, 2),
                ([96, 80], [5, 1], 2, 1, 0),
            ]
            .map(|case| (g, case))
        }) {
            let (xs, ws) = ([2, 4, hw[0], hw[1]], [8, 4 / group, k[0], k[1]]);
            let (x, w) = small_ints(xs, ws);
            let out = [0, 1].map(|i| (hw[i] + 2 * p - (k[i] - 1) * d - 1) / s + 1);
            let want = reference(&x, xs, &w, ws, group, [s, s], [d, d], [p, p], out);
            let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
                .with_attr("group", AttrValue::Int(group as i64))
                .with_attr("strides", AttrValue::Ints(vec![s as i64; 2]))
                .with_attr("dilations", AttrValue::Ints(vec![d as i64; 2]))
                .with_attr("pads", AttrValue::Ints(vec![p as i64; 4]));
            agrees_with_and_without_bias(node, xs, ws, &want);
        }
    }

    #[test]
    fn pointwise_products_add_the_bias_before_the_activation_serially_and_in_tiles() {
        // A 1x1 FusedConv over 2000 positions: the product is written without reading `y`, and
        // the pass after it adds the bias and then applies Relu, on one thread and in column
        // tiles on three.
        let (xs, ws) = ([1, 16, 40, 50], [24, 16, 1, 1]);
        let (x, w) = small_ints(xs, ws);
        let plain = reference(&x, xs, &w, ws, 1, [1, 1], [1, 1], [0, 0], [40, 50]);
        let bias: Vec<f32> = (0..24).map(|m| 10.0 - m as f32).collect();
        let want: Vec<f32> = plain
            .iter()
            .enumerate()
            .map(|(i, &v)| (v + bias[i / 2000]).max(0.0))
            .collect();
        assert!(want.contains(&0.0) && want.iter().any(|&v| v > 0.0));
        let node = Node::new("FusedConv", "c", ["x", "w", "b"], ["y"])
            .with_domain("com.microsoft")
            .with_attr("activation", AttrValue::String("Relu".into()));
        let (xt, wt, bt) = (f32s(&xs, x), f32s(&ws, w), f32s(&[24], bias));
        let inputs = [Some(&xt), Some(&wt), Some(&bt)];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let serial = crate::par::serial(|| eval_node(&node, 1, &inputs)).unwrap();
        let parallel = pool.install(|| eval_node(&node, 1, &inputs)).unwrap();
        for y in [serial, parallel] {
            assert_eq!(y[0], f32s(&[1, 24, 40, 50], want.clone()));
        }
    }

    #[test]
    fn width_strides_split_rows_into_phases_for_any_width() {
        // Strides 2 (the deinterleaving pass), 3 and 5 (the general split), on rows narrower
        // than, as wide as and wider than the stride; depthwise (2 groups of 1 channel) and
        // dense (1 group); every path must agree with the direct loops.
        for (stride, width) in [(2, 1), (2, 7), (3, 1), (3, 2), (3, 8), (5, 3), (5, 11)] {
            for group in [1, 2] {
                let xs = [1, 2, 12, width];
                let ws = [2, 2 / group, 3, 3];
                let (x, w) = small_ints(xs, ws);
                let node = Node::new("Conv", "c", ["x", "w"], ["y"])
                    .with_attr("group", AttrValue::Int(group as i64))
                    .with_attr("strides", AttrValue::Ints(vec![1, stride as i64]))
                    .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]));
                let inputs = [Some(&f32s(&xs, x.clone())), Some(&f32s(&ws, w.clone()))];
                let y = eval_node(&node, 22, &inputs).unwrap();
                let out = [12, (width + 2 - 3) / stride + 1];
                assert_eq!(
                    y[0].shape(),
                    &[1, 2, out[0], out[1]],
                    "stride {stride}, width {width}"
                );
                let want = reference(&x, xs, &w, ws, group, [1, stride], [1, 1], [1, 1], out);
                assert_eq!(
                    y[0].as_slice::<f32>().unwrap(),
                    &want[..],
                    "stride {stride}, width {width}, group {group}"
                );
            }
        }
    }

    #[test]
    fn depthwise_phases_cover_strides_dilations_and_pads() {
        // Depthwise (3 groups of 1 channel, 2 filters each) takes the phase planes: strides
        // split the plane into phases (odd and even left pads put the first column in either),
        // dilations and uneven pads move the taps, a kernel wider than the padded row leaves
        // columns with no tap, and a bias seeds each plane.
        for (hw, k, s, d, pads) in [
            ([7, 9], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([6, 11], [3, 2], [1, 1], [2, 3], [0, 2, 1, 0]),
            ([5, 3], [1, 5], [1, 1], [1, 1], [0, 1, 0, 3]),
            ([4, 20], [2, 4], [1, 1], [1, 2], [2, 0, 0, 1]),
            ([8, 8], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([9, 11], [3, 3], [2, 2], [1, 1], [0, 0, 0, 0]),
            ([7, 13], [3, 4], [2, 3], [2, 1], [2, 3, 1, 2]),
            ([5, 10], [2, 3], [3, 1], [1, 2], [1, 2, 2, 1]),
            ([6, 7], [3, 3], [1, 2], [1, 1], [1, 0, 1, 1]),
        ] {
            let xs = [2, 3, hw[0], hw[1]];
            let ws = [6, 1, k[0], k[1]];
            let (x, w) = small_ints(xs, ws);
            let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
                .with_attr("group", AttrValue::Int(3))
                .with_attr("strides", AttrValue::Ints(vec![s[0] as i64, s[1] as i64]))
                .with_attr("dilations", AttrValue::Ints(vec![d[0] as i64, d[1] as i64]))
                .with_attr(
                    "pads",
                    AttrValue::Ints(pads.iter().map(|&p| p as i64).collect()),
                );
            let b = f32s(&[6], vec![0.5, -1.0, 2.0, 0.0, 3.0, -2.5]);
            let inputs = [
                Some(&f32s(&xs, x.clone())),
                Some(&f32s(&ws, w.clone())),
                Some(&b),
            ];
            let y = eval_node(&node, 22, &inputs).unwrap();
            let out =
                [0, 1].map(|i| (hw[i] + pads[i] + pads[i + 2] - (k[i] - 1) * d[i] - 1) / s[i] + 1);
            let mut want = reference(&x, xs, &w, ws, 3, s, d, [pads[0], pads[1]], out);
            let plane = out[0] * out[1];
            for (i, v) in want.iter_mut().enumerate() {
                *v += b.as_slice::<f32>().unwrap()[i / plane % 6];
            }
            assert_eq!(y[0].shape(), &[2, 6, out[0], out[1]], "{hw:?} {k:?} {s:?}");
            assert_eq!(
                y[0].as_slice::<f32>().unwrap(),
                &want[..],
                "{hw:?} {k:?} {s:?} {d:?}"
            );
        }
    }

    #[test]
    fn depthwise_pads_far_wider_than_the_row_take_the_general_loop() {
        // A left pad and a dilation of 2^62 columns on a row of one: the padded plane would
        // need 2^62-column rows (its size overflows), so the channel takes the general loop,
        // where only the second tap reaches the input.
        let x = f32s(&[1, 2, 4, 1], (1..=8).map(|v| v as f32).collect());
        let w = f32s(&[2, 1, 1, 2], vec![5.0, 2.0, 7.0, 3.0]);
        let b = f32s(&[2], vec![0.5, -1.0]);
        let huge = 1i64 << 62;
        let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
            .with_attr("group", AttrValue::Int(2))
            .with_attr("dilations", AttrValue::Ints(vec![1, huge]))
            .with_attr("pads", AttrValue::Ints(vec![0, huge, 0, 0]));
        let y = eval_node(&node, 22, &[Some(&x), Some(&w), Some(&b)]).unwrap();
        let want = [2.5, 4.5, 6.5, 8.5, 14.0, 17.0, 20.0, 23.0];
        assert_eq!(y[0], f32s(&[1, 2, 4, 1], want.to_vec()));
    }

    #[test]
    fn large_planes_tile_and_pointwise_skips_im2col() {
        let xs = [1, 3, 40, 50];
        let x: Vec<f32> = (0..6000).map(|i| ((i * 13) % 17) as f32 - 8.0).collect();
        for (ws, pads) in [
            ([5, 3, 3, 3], [1i64, 1, 1, 1]),
            ([5, 3, 1, 1], [0, 0, 0, 0]),
        ] {
            let w: Vec<f32> = (0..ws.iter().product::<usize>())
                .map(|i| ((i * 3) % 5) as f32 - 2.0)
                .collect();
            let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
                .with_attr("pads", AttrValue::Ints(pads.to_vec()));
            let b = f32s(&[5], vec![1.0, 2.0, 3.0, 4.0, 5.0]);
            let y = eval_node(
                &node,
                22,
                &[
                    Some(&f32s(&xs, x.clone())),
                    Some(&f32s(&ws, w.clone())),
                    Some(&b),
                ],
            )
            .unwrap();
            let mut want = reference(
                &x,
                xs,
                &w,
                ws,
                1,
                [1, 1],
                [1, 1],
                [pads[0] as usize, pads[1] as usize],
                [40, 50],
            );
            for (i, v) in want.iter_mut().enumerate() {
                *v += (i / 2000 + 1) as f32;
            }
            assert_eq!(y[0].as_slice::<f32>().unwrap(), &want[..]);
        }
    }

    #[test]
    fn same_size_taps_copy_whole_rows_across_tiles() {
        // 576 im2col rows make tiles of 227 positions, which end inside rows of 41 columns; the
        // dilated taps leave two columns of padding on each side, and whole rows above and below.
        let (xs, ws) = ([1, 64, 37, 41], [4, 64, 3, 3]);
        let (x, w) = small_ints(xs, ws);
        let node = Node::new("Conv", "c", ["x", "w"], ["y"])
            .with_attr("dilations", AttrValue::Ints(vec![2, 2]))
            .with_attr("pads", AttrValue::Ints(vec![2, 2, 2, 2]));
        let y = eval_node(
            &node,
            22,
            &[Some(&f32s(&xs, x.clone())), Some(&f32s(&ws, w.clone()))],
        )
        .unwrap();
        assert_eq!(y[0].shape(), &[1, 4, 37, 41]);
        let want = reference(&x, xs, &w, ws, 1, [1, 1], [2, 2], [2, 2], [37, 41]);
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &want[..]);
    }

    #[test]
    fn auto_pad_same_lower_and_bad_groups() {
        let x = f32s(&[1, 1, 5, 5], (0..25).map(|v| v as f32).collect());
        let w = f32s(&[1, 1, 3, 3], vec![1.0; 9]);
        let node = Node::new("Conv", "c", ["x", "w"], ["y"])
            .with_attr("auto_pad", AttrValue::String(b"SAME_LOWER".to_vec()))
            .with_attr("strides", AttrValue::Ints(vec![2, 2]));
        let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
        let want = [12.0, 27.0, 24.0, 63.0, 108.0, 81.0, 72.0, 117.0, 84.0];
        assert_eq!(y[0], f32s(&[1, 1, 3, 3], want.to_vec()));
        let node = Node::new("Conv", "c", ["x", "w"], ["y"]).with_attr("group", AttrValue::Int(2));
        let err = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap_err();
        assert!(err.to_string().contains("groups"), "{err}");
    }

    #[test]
    fn integer_convolution_pads_with_the_zero_point() {
        // The ONNX ConvInteger example with padding.
        let x = Tensor::from_vec(DataType::Uint8, &[1, 1, 3, 3], (2u8..11).collect()).unwrap();
        let w = Tensor::from_vec(DataType::Uint8, &[1, 1, 2, 2], vec![1u8; 4]).unwrap();
        let z = Tensor::from_vec(DataType::Uint8, &[], vec![1u8]).unwrap();
        let node = Node::new("ConvInteger", "c", ["x", "w", "z"], ["y"])
            .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]));
        let y = eval_node(&node, 10, &[Some(&x), Some(&w), Some(&z)]).unwrap();
        let want = [1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9];
        assert_eq!(y[0].as_slice::<i32>().unwrap(), &want);
    }
}
