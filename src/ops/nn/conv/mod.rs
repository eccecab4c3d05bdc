//! `Conv` (opsets 1, 11, 22), `ConvInteger` (10) and `QLinearConv` (10): grouped, strided,
//! dilated and padded convolutions over 1 to 3 spatial dims.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Conv.html>,
//! <https://onnx.ai/onnx/operators/onnx__ConvInteger.html>,
//! <https://onnx.ai/onnx/operators/onnx__QLinearConv.html>.
//!
//! Design note: every group of every image is one matrix product, `W_g (M/g x C/g*taps)` times the
//! im2col matrix of the input (`C/g*taps x out_positions`). `ConvShape::run_group` picks one of
//! the algorithms by the shape, one file each, in this order:
//!
//! - `depthwise.rs`: with many groups (depthwise convolutions) each group sums its taps directly
//!   over the input plane split into stride phases (`PhasePlanes`; 3-D planes and crafted pads
//!   take a per-row loop), the threads splitting large planes into bands of rows and small ones
//!   by groups. Threads split the positions of a plane the same way from one operator to the
//!   next (first rows first), so a thread mostly reads what it wrote itself.
//! - `direct.rs`: `f32` with several input channels per group sums every tap in registers
//!   (the kernels in `direct_kernel.rs`).
//! - `shifted.rs`: unit strides multiply shifted copies of the input rows, one product per
//!   height tap.
//! - `pointwise.rs`: a 1x1 convolution with unit strides and no padding multiplies the input
//!   directly.
//! - `im2col.rs`: the rest build the im2col matrix a tile of output positions at a time, so its
//!   memory stays bounded and tiles run in parallel.
//! - `few_positions.rs`: a plane of a few output positions (streaming audio) takes dot products
//!   instead of a product that would pack the whole weight matrix.
//!
//! This file holds the operators, the choice and what the algorithms share: the filters and
//! what is kept of them, the layout, and the input rows split into stride phases (`Phased`).
//! `ConvInteger` and `QLinearConv` run in `qconv.rs` on the integer kernel; for contracted dims
//! beyond its exact range they subtract their zero points and run this code in `f64`, which is
//! exact for 8-bit operands (padding then contributes zero, which is the zero point before the
//! shift, as the spec asks).

use std::mem::MaybeUninit;

use crate::tensor::Scratch;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{optional, required, unsupported_type};
use super::super::vector::{assume_written, deinterleave, fill};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::blas::Mat;
use super::values::{checked_product, input_dims, output_written, tensor_type};
use super::window::{Geometry3, WindowAttrs};
use crate::ops::math::Activation;
use crate::ops::num::{dispatch_real, Loaded, Real};

mod depthwise;
mod direct;
mod direct_kernel;
mod few_positions;
mod im2col;
mod pointwise;
mod shifted;

use depthwise::{single_channel, ColumnTap, Depthwise, PhasePlanes};
use direct_kernel as kernel;
use shifted::Shifted;

/// Planes of at most this many output positions run as dot products ([`ConvShape::few_positions`]).
const FEW_POSITIONS: usize = 8;

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
    packed: Option<&'f [kernel::Packed]>,
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
    packed: Option<Vec<kernel::Packed>>,
}

/// A convolution's weights in the compute type `R`, and their packing when it was kept.
struct Weights<'a, R> {
    w: Loaded<'a, R>,
    packed: Option<&'a [kernel::Packed]>,
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
        packed: Option<&kernel::Packed>,
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

/// The input coordinate of output `o` at tap `k` along a dim of `n` (stride `s`, dilation `d`,
/// `pad` in front), if inside.
pub(super) fn coord(o: usize, k: usize, s: usize, d: usize, pad: usize, n: usize) -> Option<usize> {
    (o * s + k * d).checked_sub(pad).filter(|&i| i < n)
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
        let kernel = w.and_then(|w| super::values::known_sizes(&w[2..]));
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
mod tests;
