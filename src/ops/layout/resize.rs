//! `Resize` (opsets 10, 11, 13, 18, 19) and its predecessor `Upsample` (1, 7, 9): sampling a
//! tensor on a scaled grid.
//!
//! Why one file: `Resize` and `Upsample` are one resampling loop with one set of modes; a fifth of
//! the file is its tests.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Resize.html>,
//! <https://onnx.ai/onnx/operators/onnx__Upsample.html>.
//!
//! Every axis is resampled on its own, one after another (in the order of `axes`), as the spec
//! defines the modes and as its reference implementation computes them:
//!
//! - each output position `y` maps to an input coordinate `x` by the
//!   `coordinate_transformation_mode`;
//! - `nearest` reads one input position (rounded by `nearest_mode`, clamped to the axis), so it
//!   moves elements of any type unchanged;
//! - `linear` and `cubic` weigh the input positions around `x` (positions past the ends read the
//!   edge, or weigh nothing with `exclude_outside`); with `antialias` the filter is stretched by
//!   `1 / scale` when downsampling and its weights renormalised. They compute in `f64` and round
//!   once to the element type (integers half to even, saturating);
//! - with `tf_crop_and_resize`, a coordinate outside the input gives `extrapolation_value`.
//!
//! Scales give output dims `floor(dim * scale)`; sizes give them directly, or through
//! `keep_aspect_ratio_policy` one common scale with dims rounded half up. The spec's text also
//! multiplies by the ROI extent for `tf_crop_and_resize`, but its shape inference, its reference
//! implementation and onnxruntime do not, so neither does this.
//!
//! Where the spec's formulas and the ONNX reference implementation differ, this follows the
//! reference, whose outputs the conformance tests record: `align_corners`, `pytorch_half_pixel`
//! and `tf_crop_and_resize` use the fractional output length `dim * scale`, which differs from
//! the output dim when a scale does not divide evenly. At a fractional length of exactly 1,
//! `pytorch_half_pixel` maps to 0 as the spec and onnxruntime say (the reference uses -0.5).
//!
//! Opset 10 `Resize` and `Upsample` have neither coordinate modes nor `nearest_mode`: they use
//! `asymmetric` coordinates and round nearest positions down when upsampling and up when
//! downsampling, as onnxruntime does for them.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::tensor::{element_count, try_vec, try_with_capacity};

use super::super::util::{optional, required, strides, to_i64s};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::runs::{
    advance, checked_len, const_ints, from_f64s, gather_axes, in_dims, in_elem, normalize_axes,
    typed, unknown_dims, AxisRead, MAX_ELEMENTS,
};
use crate::ops::num::{dispatch_width, real_values};
use crate::ops::vector::{self, assume_written, copy};
use std::mem::MaybeUninit;

/// How nearest positions round.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Opset 10 and `Upsample`: down when upsampling, up when downsampling.
    Legacy,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Nearest(Nearest),
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// The attributes that shape the sampling.
#[derive(Clone, Copy, Debug)]
struct Params {
    mode: Mode,
    coord: Coord,
    cubic_a: f64,
    exclude_outside: bool,
    extrapolation: f64,
    antialias: bool,
}

impl Params {
    /// The attributes of a `Resize` node at opset 11 or later.
    fn resize(node: &crate::ir::Node) -> Result<Params> {
        let nearest = match node
            .attr_string("nearest_mode")?
            .unwrap_or("round_prefer_floor")
        {
            "round_prefer_floor" => Nearest::RoundPreferFloor,
            "round_prefer_ceil" => Nearest::RoundPreferCeil,
            "floor" => Nearest::Floor,
            "ceil" => Nearest::Ceil,
            other => return Err(Error::Eval(format!("unknown nearest_mode '{other}'"))),
        };
        let coord = match node
            .attr_string("coordinate_transformation_mode")?
            .unwrap_or("half_pixel")
        {
            "half_pixel" => Coord::HalfPixel,
            "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
            "pytorch_half_pixel" => Coord::PytorchHalfPixel,
            "align_corners" => Coord::AlignCorners,
            "asymmetric" => Coord::Asymmetric,
            "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
            "tf_crop_and_resize" => Coord::TfCropAndResize,
            other => {
                return Err(Error::Eval(format!(
                    "unknown coordinate_transformation_mode '{other}'"
                )))
            }
        };
        let mode = mode(node, nearest)?;
        let antialias = node.attr_int("antialias", 0)? != 0;
        if antialias && matches!(mode, Mode::Nearest(_)) {
            return Err(Error::Eval(
                "antialias does not apply to nearest mode".into(),
            ));
        }
        Ok(Params {
            mode,
            coord,
            cubic_a: f64::from(node.attr_float("cubic_coeff_a", -0.75)?),
            exclude_outside: node.attr_int("exclude_outside", 0)? != 0,
            extrapolation: f64::from(node.attr_float("extrapolation_value", 0.0)?),
            antialias,
        })
    }

    /// The attributes of an opset 10 `Resize` or an `Upsample` node.
    fn legacy(node: &crate::ir::Node) -> Result<Params> {
        let mode = mode(node, Nearest::Legacy)?;
        if mode == Mode::Cubic {
            return Err(Error::Eval("cubic mode needs Resize from opset 11".into()));
        }
        Ok(Params {
            mode,
            coord: Coord::Asymmetric,
            cubic_a: -0.75,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
        })
    }
}

/// The attributes of a `Resize` node from opset 11: the sampling, `axes` and
/// `keep_aspect_ratio_policy`.
#[derive(Clone, Debug)]
pub(super) struct ResizeAttrs {
    params: Params,
    axes: Option<Vec<i64>>,
    policy: String,
}

impl Attributes for ResizeAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<ResizeAttrs> {
        let axes = node.attr_ints("axes")?.map(<[i64]>::to_vec);
        let policy = node.attr_string("keep_aspect_ratio_policy")?;
        Ok(ResizeAttrs {
            params: Params::resize(node)?,
            axes,
            policy: policy.unwrap_or("stretch").to_owned(),
        })
    }
}

/// The sampling of an opset 10 `Resize` or an `Upsample` node.
#[derive(Clone, Copy, Debug)]
pub(super) struct LegacyParams(Params);

impl Attributes for LegacyParams {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<LegacyParams> {
        Ok(LegacyParams(Params::legacy(node)?))
    }
}

/// The `mode` attribute (`bilinear` is `Upsample`'s old name for `linear`).
fn mode(node: &crate::ir::Node, nearest: Nearest) -> Result<Mode> {
    Ok(match node.attr_string("mode")?.unwrap_or("nearest") {
        "nearest" => Mode::Nearest(nearest),
        "linear" | "bilinear" => Mode::Linear,
        "cubic" => Mode::Cubic,
        other => return Err(Error::Eval(format!("unknown mode '{other}'"))),
    })
}

/// How one axis is resized.
#[derive(Clone, Copy, Debug, PartialEq)]
struct AxisPlan {
    axis: usize,
    in_len: usize,
    out_len: usize,
    scale: f64,
    roi: (f64, f64),
}

impl AxisPlan {
    /// Whether the axis comes out exactly as it went in.
    fn is_identity(&self) -> bool {
        self.out_len == self.in_len
            && (self.scale - 1.0).abs() <= 1e-9 * self.scale.abs().max(1.0)
            && self.roi == (0.0, 1.0)
    }
}

/// What determines the output dims: scales or sizes over `axes`, and how sizes keep the aspect
/// ratio.
struct Target {
    scales: Option<Vec<f64>>,
    sizes: Option<Vec<i64>>,
    roi: Option<Vec<f64>>,
    axes: Option<Vec<i64>>,
    policy: String,
}

/// The resized axes of a tensor of `shape`, in processing order.
fn plan(shape: &[usize], target: &Target, coord: Coord) -> Result<Vec<AxisPlan>> {
    let rank = shape.len();
    let axes = match &target.axes {
        Some(a) => normalize_axes(a, rank)?,
        None => (0..rank).collect(),
    };
    let n = axes.len();
    let roi: Vec<(f64, f64)> = match (&target.roi, coord) {
        (Some(r), Coord::TfCropAndResize) if r.len() == 2 * n => {
            (0..n).map(|i| (r[i], r[n + i])).collect()
        }
        (Some(r), Coord::TfCropAndResize) if !r.is_empty() => {
            return Err(Error::Eval(format!(
                "roi has {} values for {n} axes",
                r.len()
            )))
        }
        _ => vec![(0.0, 1.0); n],
    };
    let mut plans: Vec<AxisPlan> = axes
        .iter()
        .zip(&roi)
        .map(|(&axis, &roi)| AxisPlan {
            axis,
            in_len: shape[axis],
            out_len: shape[axis],
            scale: 1.0,
            roi,
        })
        .collect();
    match (&target.scales, &target.sizes) {
        (Some(scales), None) => {
            if scales.len() != n {
                return Err(Error::Eval(format!("{} scales for {n} axes", scales.len())));
            }
            for (p, &s) in plans.iter_mut().zip(scales) {
                if !(s > 0.0 && s.is_finite()) {
                    return Err(Error::Eval(format!("scale {s} is not positive")));
                }
                p.scale = s;
                p.out_len = output_len((p.in_len as f64 * s).floor())?;
            }
        }
        (None, Some(sizes)) => {
            if sizes.len() != n {
                return Err(Error::Eval(format!("{} sizes for {n} axes", sizes.len())));
            }
            let ratios: Vec<f64> = plans
                .iter()
                .zip(sizes)
                .map(|(p, &s)| s as f64 / p.in_len as f64)
                .collect();
            let common = match target.policy.as_str() {
                "stretch" => None,
                "not_larger" => ratios.iter().copied().reduce(f64::min),
                "not_smaller" => ratios.iter().copied().reduce(f64::max),
                other => {
                    return Err(Error::Eval(format!(
                        "unknown keep_aspect_ratio_policy '{other}'"
                    )))
                }
            };
            for (k, p) in plans.iter_mut().enumerate() {
                match common {
                    None => {
                        p.out_len = output_len(sizes[k] as f64)?;
                        p.scale = ratios[k];
                    }
                    Some(s) => {
                        p.scale = s;
                        p.out_len = output_len((s * p.in_len as f64 + 0.5).floor())?;
                    }
                }
            }
        }
        _ => return Err(Error::Eval("needs exactly one of scales and sizes".into())),
    }
    if let Some(p) = plans.iter().find(|p| p.in_len == 0 && p.out_len > 0) {
        return Err(Error::Eval(format!(
            "cannot resize the empty axis {}",
            p.axis
        )));
    }
    Ok(plans)
}

/// An output length from a computed value, which must be a non-negative count.
fn output_len(v: f64) -> Result<usize> {
    if (0.0..=MAX_ELEMENTS as f64).contains(&v) {
        Ok(v as usize)
    } else {
        Err(Error::Eval(format!("output dim {v} is invalid")))
    }
}

/// The input coordinate output position `y` of an axis maps to.
fn source_coord(coord: Coord, y: usize, p: &AxisPlan) -> f64 {
    let (y, s, n) = (y as f64, p.scale, p.in_len as f64);
    // The output length before flooring, which the reference divides by.
    let out = s * n;
    match coord {
        Coord::HalfPixel => (y + 0.5) / s - 0.5,
        Coord::HalfPixelSymmetric => {
            let adjustment = p.out_len as f64 / out;
            let offset = n / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / s - 0.5
        }
        Coord::PytorchHalfPixel if out > 1.0 => (y + 0.5) / s - 0.5,
        Coord::PytorchHalfPixel => 0.0,
        Coord::AlignCorners if out == 1.0 => 0.0,
        Coord::AlignCorners => y * (n - 1.0) / (out - 1.0),
        Coord::Asymmetric => y / s,
        Coord::TfHalfPixelForNn => (y + 0.5) / s,
        Coord::TfCropAndResize => {
            // The ROI extent and start offset are rounded to `f32`, as the reference computes
            // them from a float ROI (and onnxruntime computes everything): whether a border
            // position extrapolates depends on it.
            let (a, b) = (p.roi.0 as f32, p.roi.1 as f32);
            let extent = f64::from(b - a);
            let start = f64::from(a * (p.in_len as f32 - 1.0));
            let x = if out == 1.0 {
                extent * (n - 1.0) / 2.0
            } else {
                y * extent * (n - 1.0) / (out - 1.0)
            };
            x + start
        }
    }
}

/// What one output position of an axis reads: weighted input positions, or the extrapolation
/// value.
enum Sample {
    Extrapolate,
    Taps(Vec<(usize, f64)>),
}

/// The cubic convolution kernel with coefficient `a` at distance `x`.
fn cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// The nearest input position to `x` on an axis of `n` (`n > 0`).
fn nearest_index(x: f64, rule: Nearest, scale: f64, n: usize) -> usize {
    let base = x.floor();
    let r = x - base;
    let up = match rule {
        _ if r == 0.0 => false,
        Nearest::RoundPreferFloor => r > 0.5,
        Nearest::RoundPreferCeil => r >= 0.5,
        Nearest::Floor => false,
        Nearest::Ceil => true,
        Nearest::Legacy => scale < 1.0,
    };
    let i = if up { base + 1.0 } else { base };
    i.clamp(0.0, (n - 1) as f64) as usize
}

/// The taps of a linear or cubic filter at `x` on an axis of `n` (`n > 0`).
fn filter_taps(x: f64, p: &AxisPlan, params: &Params) -> Result<Vec<(usize, f64)>> {
    // `x = base + ratio` with `ratio` in (0, 1], so an exact position is the second tap.
    let mut base = x.floor();
    let mut ratio = x - base;
    if ratio == 0.0 {
        ratio = 1.0;
        base -= 1.0;
    }
    let stretch = if params.antialias {
        p.scale.min(1.0)
    } else {
        1.0
    };
    let support = if params.mode == Mode::Cubic { 2.0 } else { 1.0 };
    let n = p.in_len as i64;
    // An antialiased filter reaches `support / scale` positions each way. Downsampling to one
    // position needs about `support * n`; a filter much wider than the axis (an ROI far larger
    // than the input) is refused rather than built.
    let reach = (support / stretch).ceil();
    if reach.is_nan() || reach > (2 * p.in_len + 4) as f64 {
        return Err(Error::Eval(format!(
            "a resampling filter reaching {reach} positions is too wide for an axis of {n}"
        )));
    }
    let first = 1 - reach as i64;
    let count = 2 - 2 * first;
    let mut taps: Vec<(i64, f64)> = (first..first + count)
        .map(|i| {
            let d = (i as f64 - ratio) * stretch;
            let w = match params.mode {
                Mode::Cubic => cubic(d, params.cubic_a),
                _ => (1.0 - d.abs()).max(0.0),
            };
            ((base as i64).saturating_add(i), w)
        })
        .collect();
    if params.antialias {
        normalize(&mut taps);
    }
    if params.exclude_outside {
        for t in taps.iter_mut().filter(|t| !(0..n).contains(&t.0)) {
            t.1 = 0.0;
        }
        normalize(&mut taps);
    }
    Ok(taps
        .into_iter()
        .map(|(i, w)| (i.clamp(0, n - 1) as usize, w))
        .collect())
}

/// Scales weights to sum to 1 (left alone when they sum to 0).
fn normalize(taps: &mut [(i64, f64)]) {
    let sum: f64 = taps.iter().map(|t| t.1).sum();
    if sum != 0.0 {
        taps.iter_mut().for_each(|t| t.1 /= sum);
    }
}

/// The samples of every output position of an axis.
fn samples(p: &AxisPlan, params: &Params) -> Result<Vec<Sample>> {
    // Asked for fallibly: the length comes from scales or sizes that need not be constants,
    // so no shape function has checked the output against the budget yet.
    let mut out = try_with_capacity(p.out_len)?;
    for y in 0..p.out_len {
        out.push(sample(y, p, params)?);
    }
    Ok(out)
}

/// The input coordinate output position `y` of an axis reads, `None` where it extrapolates.
fn source(y: usize, p: &AxisPlan, params: &Params) -> Option<f64> {
    let x = source_coord(params.coord, y, p);
    let outside = x < 0.0 || x > p.in_len as f64 - 1.0;
    (params.coord != Coord::TfCropAndResize || !outside).then_some(x)
}

/// The sample of output position `y` of an axis.
fn sample(y: usize, p: &AxisPlan, params: &Params) -> Result<Sample> {
    let Some(x) = source(y, p, params) else {
        return Ok(Sample::Extrapolate);
    };
    Ok(match params.mode {
        Mode::Nearest(rule) => Sample::Taps(vec![(nearest_index(x, rule, p.scale, p.in_len), 1.0)]),
        _ => Sample::Taps(filter_taps(x, p, params)?),
    })
}

/// The input position output position `y` of an axis reads in nearest mode, `None` where it
/// extrapolates.
fn nearest_position(y: usize, p: &AxisPlan, params: &Params, rule: Nearest) -> Option<usize> {
    source(y, p, params).map(|x| nearest_index(x, rule, p.scale, p.in_len))
}

/// Per axis, the input position of every output position in nearest mode (`None` where it
/// extrapolates), or `None` for an axis read as it is.
type NearestMaps = Vec<Option<Vec<Option<usize>>>>;

/// The [`NearestMaps`] of a resize of `shape`.
fn nearest_maps(
    shape: &[usize],
    plans: &[AxisPlan],
    params: &Params,
    rule: Nearest,
) -> Result<NearestMaps> {
    let mut maps: NearestMaps = vec![None; shape.len()];
    for p in plans.iter().filter(|p| !p.is_identity()) {
        let mut index: Vec<Option<usize>> = try_with_capacity(p.out_len)?;
        index.extend((0..p.out_len).map(|y| nearest_position(y, p, params, rule)));
        maps[p.axis] = Some(index);
    }
    Ok(maps)
}

/// Nearest resize: a gather of input positions, exact for every element type.
fn resize_nearest(
    data: &Tensor,
    plans: &[AxisPlan],
    params: &Params,
    rule: Nearest,
    out_shape: &[usize],
) -> Result<Tensor> {
    let maps = nearest_maps(data.shape(), plans, params, rule)?;
    match nearest_rows(data, &maps, out_shape) {
        Some(out) => out,
        None => nearest_gather(data, &maps, params),
    }
}

/// The nearest resize through [`gather_axes`], for every element type and extrapolation.
fn nearest_gather(data: &Tensor, maps: &NearestMaps, params: &Params) -> Result<Tensor> {
    let shape = data.shape();
    let st = strides(shape);
    let reads: Vec<AxisRead> = maps
        .iter()
        .enumerate()
        .map(|(d, m)| match m {
            None => AxisRead::identity(shape[d], st[d]),
            Some(m) => AxisRead::map(m.len(), st[d], move |i| m.get(i).copied().flatten()),
        })
        .collect();
    let extrapolates = maps.iter().flatten().any(|m| m.contains(&None));
    let fill = match extrapolates {
        true => Some(from_f64s(data.dtype(), &[1], &[params.extrapolation])?),
        false => None,
    };
    gather_axes(data, &reads, fill.as_ref())
}

/// The nearest resize by [`NearestRows`] to the non-empty `out_shape`, when it applies: elements
/// of 1, 2, 4 or 8 bytes, rank 1 or more, no extrapolation.
fn nearest_rows(data: &Tensor, maps: &NearestMaps, out_shape: &[usize]) -> Option<Result<Tensor>> {
    if out_shape.is_empty() || maps.iter().flatten().any(|m| m.contains(&None)) {
        return None;
    }
    let mut positions: Vec<Option<Vec<usize>>> = Vec::with_capacity(maps.len());
    for m in maps {
        positions.push(match m {
            Some(m) => match try_with_capacity(m.len()) {
                Ok(mut v) => {
                    v.extend(m.iter().flatten());
                    Some(v)
                }
                Err(e) => return Some(Err(e.into())),
            },
            None => None,
        });
    }
    let st = strides(data.shape());
    let in_width = data.shape()[out_shape.len() - 1];
    let repeat = match &positions[out_shape.len() - 1] {
        Some(m) if in_width > 0 && m.len() % in_width == 0 => {
            let k = m.len() / in_width;
            let repeats = m.iter().enumerate().all(|(j, &i)| i == j / k);
            if repeats {
                k
            } else {
                0
            }
        }
        _ => 0,
    };
    let rows = NearestRows {
        shape: out_shape,
        strides: &st,
        maps: &positions,
        repeat,
    };
    dispatch_width!(data.dtype(), W => Some(rows.resize::<W>(data)), _ => None)
}

/// A nearest resize that reads the input everywhere (no extrapolation), as rows along the last
/// axis: each output row is a copy of the one before it when both read the same input row (an
/// upsampled row repeats), else its elements read through the last axis's positions (a plain
/// copy when that axis is not resized). Measured on Zen 5 (`multigather run --repeat 300`,
/// medians), the two 2x upsamplings of the conv-net, `[1, 32, 10, 10]` and `[1, 32, 20, 20]`:
/// 0.057 -> 0.014 ms at 1 thread (onnxruntime 1.32: 0.006 ms).
struct NearestRows<'a> {
    /// The output shape (rank 1 or more, no empty dim).
    shape: &'a [usize],
    /// The input strides.
    strides: &'a [usize],
    /// Per axis, the input position of each output position (`None`: the same position).
    maps: &'a [Option<Vec<usize>>],
    /// `k` when the last axis repeats each input element `k` times in order (an integer
    /// upsampling: position `j` reads `j / k`), else 0.
    repeat: usize,
}

/// `dst` = each element of `src` `K` times in order (`dst` is `K` times as long): unrolled, so
/// that the stores vectorise.
#[inline]
fn repeat_each<T: Copy, const K: usize>(dst: &mut [MaybeUninit<T>], src: &[T]) {
    for (d, &v) in dst.chunks_exact_mut(K).zip(src) {
        for slot in d {
            slot.write(v);
        }
    }
}

impl NearestRows<'_> {
    /// The resize of elements as wide as `T`, the rows split over the threads when many.
    fn resize<T: bytemuck::Pod + Send + Sync>(&self, data: &Tensor) -> Result<Tensor> {
        let src = data.as_slice::<T>()?;
        let last = self.shape.len() - 1;
        let width = self.shape[last];
        let out = Tensor::uninit(data.dtype(), self.shape)?;
        let rows = out.len() / width.max(1);
        Ok(out.fill(|dst: &mut [MaybeUninit<T>]| {
            if width > 0 {
                let min_len = crate::par::min_len(rows, &[width]);
                if min_len == usize::MAX {
                    self.rows(src, 0, dst);
                } else {
                    use rayon::prelude::*;
                    dst.par_chunks_mut(width * min_len)
                        .enumerate()
                        .for_each(|(t, d)| self.rows(src, t * min_len, d));
                }
            }
            // SAFETY: `rows` writes every row it is given, and the rows cover the output.
            unsafe { assume_written(dst) }
        })?)
    }

    /// Writes output rows `first..` into `dst` (whole rows).
    fn rows<T: Copy>(&self, src: &[T], first: usize, dst: &mut [MaybeUninit<T>]) {
        let last = self.shape.len() - 1;
        let width = self.shape[last];
        let rows = dst.len() / width;
        // The coordinates of the row on every axis but the last; the axis before the last is
        // walked in runs, the others stepped by an odometer after each run.
        let mut coord = vec![0; last];
        let mut rest = first;
        for d in (0..last).rev() {
            coord[d] = rest % self.shape[d];
            rest /= self.shape[d];
        }
        let (count, map, stride) = match last.checked_sub(1) {
            Some(h) => (self.shape[h], self.maps[h].as_deref(), self.strides[h]),
            None => (1, None, 0),
        };
        let mut previous: Option<usize> = None;
        let mut k = 0;
        while k < rows {
            let outer = last.saturating_sub(1);
            let base: usize = (0..outer)
                .map(|d| self.maps[d].as_ref().map_or(coord[d], |m| m[coord[d]]) * self.strides[d])
                .sum();
            let c0 = coord.last().copied().unwrap_or(0);
            let run = (count - c0).min(rows - k);
            for c in c0..c0 + run {
                let at = base + map.map_or(c, |m| m[c]) * stride;
                let (before, row) = dst.split_at_mut(k * width);
                let row = &mut row[..width];
                match (previous, &self.maps[last]) {
                    (Some(p), _) if p == at => row.copy_from_slice(&before[before.len() - width..]),
                    (_, None) => {
                        copy(row, &src[at..][..width]);
                    }
                    (_, Some(_)) if self.repeat > 0 => {
                        let from = &src[at..][..width / self.repeat];
                        match self.repeat {
                            2 => repeat_each::<T, 2>(row, from),
                            3 => repeat_each::<T, 3>(row, from),
                            4 => repeat_each::<T, 4>(row, from),
                            k => {
                                for (d, &v) in row.chunks_exact_mut(k).zip(from) {
                                    vector::fill(d, v);
                                }
                            }
                        }
                    }
                    (_, Some(m)) => {
                        for (d, &i) in row.iter_mut().zip(m) {
                            d.write(src[at + i]);
                        }
                    }
                }
                previous = Some(at);
                k += 1;
            }
            // The odometer, `run` rows on.
            if let Some((h, outer)) = coord.split_last_mut() {
                *h += run;
                if *h == count {
                    *h = 0;
                    advance(outer, &self.shape[..last - 1]);
                }
            }
        }
    }
}

/// Linear or cubic resize of the values of a numeric tensor, one axis after another.
fn resize_filtered(data: &Tensor, plans: &[AxisPlan], params: &Params) -> Result<Tensor> {
    let mut shape = data.shape().to_vec();
    let mut values = real_values(data)?;
    for p in plans.iter().filter(|p| !p.is_identity()) {
        // The axes are resized one at a time, so the intermediate shape mixes resized and
        // original dims: it may be larger than both the input and the output.
        let too_large = || Error::Eval(format!("resizing axis {} is too large", p.axis));
        let outer = element_count(&shape[..p.axis]).ok_or_else(too_large)?;
        let inner = element_count(&shape[p.axis + 1..]).ok_or_else(too_large)?;
        let samples = samples(p, params)?;
        let len = outer
            .checked_mul(p.out_len)
            .and_then(|v| v.checked_mul(inner))
            .ok_or_else(too_large)?;
        let mut out = try_vec(len, 0.0f64)?;
        if inner > 0 {
            let src_rows = values.chunks_exact(p.in_len * inner);
            for (src, dst) in src_rows.zip(out.chunks_exact_mut(p.out_len * inner)) {
                for (row, sample) in dst.chunks_exact_mut(inner).zip(&samples) {
                    match sample {
                        Sample::Extrapolate => row.fill(params.extrapolation),
                        Sample::Taps(taps) => {
                            for &(i, w) in taps {
                                let from = &src[i * inner..(i + 1) * inner];
                                row.iter_mut().zip(from).for_each(|(r, v)| *r += w * v);
                            }
                        }
                    }
                }
            }
        }
        values = out;
        shape[p.axis] = p.out_len;
    }
    from_f64s(data.dtype(), &shape, &values)
}

/// Runs a resize of `data` to `target`.
fn resize(data: &Tensor, target: &Target, params: &Params) -> Result<Tensor> {
    let plans = plan(data.shape(), target, params.coord)?;
    let mut out_shape = data.shape().to_vec();
    for p in &plans {
        out_shape[p.axis] = p.out_len;
    }
    // Checked before any per-position work, which is then bounded by the output size.
    if checked_len(&out_shape)? == 0 {
        return Ok(Tensor::zeros(data.dtype(), &out_shape)?);
    }
    match params.mode {
        Mode::Nearest(rule) => resize_nearest(data, &plans, params, rule, &out_shape),
        _ => resize_filtered(data, &plans, params),
    }
}

/// Float values of an optional input, `None` when omitted or empty.
fn floats(t: Option<&Tensor>) -> Result<Option<Vec<f64>>> {
    t.filter(|t| !t.is_empty()).map(real_values).transpose()
}

/// The resize target of a `Resize` node at opset 11 or later.
fn resize_target(attrs: &ResizeAttrs, inputs: &[Option<&Tensor>]) -> Result<Target> {
    Ok(Target {
        roi: floats(optional(inputs, 1))?,
        scales: floats(optional(inputs, 2))?,
        sizes: optional(inputs, 3)
            .filter(|t| !t.is_empty())
            .map(to_i64s)
            .transpose()?,
        axes: attrs.axes.clone(),
        policy: attrs.policy.clone(),
    })
}

/// A target of scales over every axis.
fn scales_target(scales: Vec<f64>) -> Target {
    Target {
        scales: Some(scales),
        sizes: None,
        roi: None,
        axes: None,
        policy: "stretch".into(),
    }
}

pub(super) fn eval_resize(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let attrs = ctx.attrs::<ResizeAttrs>()?;
    Ok(vec![resize(
        data,
        &resize_target(&attrs, inputs)?,
        &attrs.params,
    )?])
}

/// `Resize` at opset 10: `scales` is the second input.
pub(super) fn eval_resize_10(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let scales = real_values(required(inputs, 1)?)?;
    Ok(vec![resize(
        data,
        &scales_target(scales),
        &ctx.attrs::<LegacyParams>()?.0,
    )?])
}

/// The scales of an `Upsample` node: `height_scale`/`width_scale` attributes at opset 1, a
/// `scales` attribute at 7, the second input from 9.
fn upsample_scales(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>], rank: usize) -> Result<Vec<f64>> {
    if ctx.opset >= 9 {
        return real_values(required(inputs, 1)?);
    }
    if ctx.opset >= 7 {
        return match ctx.node.attr("scales") {
            Some(crate::ir::AttrValue::Floats(v)) => Ok(v.iter().map(|&s| f64::from(s)).collect()),
            Some(_) => Err(ctx.error("'scales' must be floats")),
            None => Err(ctx.error("needs a 'scales' attribute")),
        };
    }
    if rank != 4 {
        return Err(ctx.error("input must be 4-D"));
    }
    let h = f64::from(ctx.node.attr_float("height_scale", 1.0)?);
    let w = f64::from(ctx.node.attr_float("width_scale", 1.0)?);
    Ok(vec![1.0, 1.0, h, w])
}

pub(super) fn eval_upsample(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let scales = upsample_scales(ctx, inputs, data.rank())?;
    Ok(vec![resize(
        data,
        &scales_target(scales),
        &ctx.attrs::<LegacyParams>()?.0,
    )?])
}

/// The output dims of a resize of `axes` (all when `None`) with `policy`, as far as constants
/// tell: `scales`/`sizes` are the values of inputs `scales_at`/`sizes_at` when those are
/// constants.
fn infer_dims(
    ctx: &InferCtx<'_>,
    (scales_at, sizes_at): (usize, Option<usize>),
    axes: Option<&[i64]>,
    policy: &str,
) -> Option<Vec<Dim>> {
    let dims = in_dims(ctx, 0)?;
    let rank = dims.len();
    let axes = match axes {
        Some(a) => normalize_axes(a, rank).ok()?,
        None => (0..rank).collect(),
    };
    let mut out = dims.to_vec();
    let scales = ctx
        .constant(scales_at)
        .filter(|t| !t.is_empty())
        .and_then(|t| real_values(t).ok());
    let sizes = sizes_at
        .and_then(|i| const_ints(ctx, i))
        .filter(|s| !s.is_empty());
    match (scales, sizes) {
        (_, Some(sizes)) if policy == "stretch" && sizes.len() == axes.len() => {
            for (&a, s) in axes.iter().zip(sizes) {
                out[a] = Dim::Known(s);
            }
        }
        (Some(scales), None) if scales.len() == axes.len() => {
            for (&a, s) in axes.iter().zip(scales) {
                out[a] = match &dims[a] {
                    _ if s == 1.0 => dims[a].clone(),
                    Dim::Known(n) => Dim::Known((*n as f64 * s).floor() as i64),
                    _ => Dim::Unknown,
                };
            }
        }
        _ => axes.iter().for_each(|&a| out[a] = Dim::Unknown),
    }
    Some(out)
}

pub(super) fn infer_resize(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = if ctx.opset < 11 {
        infer_dims(ctx, (1, None), None, "stretch")
    } else {
        let attrs = ctx.attrs::<ResizeAttrs>().ok();
        attrs.and_then(|a| infer_dims(ctx, (2, Some(3)), a.axes.as_deref(), &a.policy))
    };
    let dims = dims.or_else(|| in_dims(ctx, 0).map(|d| unknown_dims(d.len())));
    Ok(vec![typed(in_elem(ctx, 0), dims)])
}

pub(super) fn infer_upsample(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = in_dims(ctx, 0).map(|d| match ctx.opset >= 9 {
        true => {
            infer_dims(ctx, (1, None), None, "stretch").unwrap_or_else(|| unknown_dims(d.len()))
        }
        false => unknown_dims(d.len()),
    });
    Ok(vec![typed(in_elem(ctx, 0), dims)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn node(attrs: &[(&str, &str)]) -> Node {
        attrs.iter().fold(
            Node::new("Resize", "r", ["x", "roi", "s", "z"], ["y"]),
            |n, (k, v)| n.with_attr(k, AttrValue::String(v.as_bytes().to_vec())),
        )
    }

    fn run(
        node: &Node,
        x: &Tensor,
        scales: Option<&[f32]>,
        sizes: Option<&[i64]>,
    ) -> Result<Tensor> {
        let s = scales.map(|s| f32s(&[s.len()], s));
        let z = sizes.map(|z| Tensor::from_vec(DataType::Int64, &[z.len()], z.to_vec()).unwrap());
        Ok(eval_node(node, 19, &[Some(x), None, s.as_ref(), z.as_ref()])?.remove(0))
    }

    fn assert_close(t: &Tensor, want: &[f32]) {
        let got = t.to_vec::<f32>().unwrap();
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{got:?} != {want:?}");
        }
    }

    #[test]
    fn nearest_upsampling_follows_the_onnx_example() {
        let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let out = run(&node(&[]), &x, Some(&[1.0, 1.0, 2.0, 3.0]), None).unwrap();
        assert_eq!(out.shape(), &[1, 1, 4, 6]);
        let row = |a: f32, b: f32| [a, a, a, b, b, b];
        let want: Vec<f32> = [row(1.0, 2.0), row(1.0, 2.0), row(3.0, 4.0), row(3.0, 4.0)].concat();
        assert_close(&out, &want);
    }

    /// The nearest resize of `x` by `scales` through [`NearestRows`] (`None` where it does not
    /// apply) and through [`gather_axes`].
    fn nearest_both_ways(
        x: &Tensor,
        scales: &[f64],
        attrs: &[(&str, &str)],
    ) -> (Option<Tensor>, Tensor) {
        let params = Params::resize(&node(attrs)).unwrap();
        let Mode::Nearest(rule) = params.mode else {
            unreachable!("a nearest node")
        };
        let plans = plan(x.shape(), &scales_target(scales.to_vec()), params.coord).unwrap();
        let mut out_shape = x.shape().to_vec();
        for p in &plans {
            out_shape[p.axis] = p.out_len;
        }
        let maps = nearest_maps(x.shape(), &plans, &params, rule).unwrap();
        let rows = nearest_rows(x, &maps, &out_shape).map(|r| r.unwrap());
        (rows, nearest_gather(x, &maps, &params).unwrap())
    }

    #[test]
    fn nearest_rows_match_the_gather() {
        // The conv-net's 2x upsampling with `asymmetric` / `floor`, odd sizes, downsampling and
        // fractional scales, only an inner axis or only the last axis resized, rank 1, every
        // element width, and an output large enough to be split over the threads.
        let asymmetric = [
            ("coordinate_transformation_mode", "asymmetric"),
            ("nearest_mode", "floor"),
        ];
        let half_pixel = [("nearest_mode", "round_prefer_ceil")];
        type Case<'a> = (&'a [usize], &'a [f64], &'a [(&'a str, &'a str)]);
        let cases: [Case; 8] = [
            (&[1, 3, 10, 10], &[1.0, 1.0, 2.0, 2.0], &asymmetric),
            (&[1, 2, 5, 7], &[1.0, 1.0, 2.0, 3.0], &asymmetric),
            (&[2, 3, 9, 11], &[1.0, 1.0, 0.5, 1.7], &half_pixel),
            (&[2, 4, 3], &[1.0, 2.5, 1.0], &half_pixel),
            (&[3, 4, 5], &[1.0, 1.0, 0.4], &asymmetric),
            (&[7], &[2.5], &[]),
            (&[2, 1, 3], &[3.0, 1.0, 1.0], &[]),
            (&[1, 4, 64, 64], &[1.0, 1.0, 2.0, 2.0], &asymmetric),
        ];
        for (shape, scales, attrs) in cases {
            let n: usize = shape.iter().product();
            let values: Vec<i64> = (0..n as i64).map(|v| v * 0x0101_0101).collect();
            for dtype in [
                DataType::Uint8,
                DataType::Float16,
                DataType::Int32,
                DataType::Int64,
            ] {
                let w = dtype.byte_size().unwrap();
                let bytes: Vec<u8> = values
                    .iter()
                    .flat_map(|v| v.to_le_bytes()[..w].to_vec())
                    .collect();
                let x = Tensor::from_bytes(dtype, shape, &bytes).unwrap();
                let (rows, gather) = nearest_both_ways(&x, scales, attrs);
                assert_eq!(rows, Some(gather), "{shape:?} {scales:?} {dtype}");
            }
        }
    }

    #[test]
    fn nearest_rows_leave_extrapolation_and_strings_to_the_gather() {
        let crop = [("coordinate_transformation_mode", "tf_crop_and_resize")];
        let x = f32s(&[1, 4], &[1.0, 2.0, 3.0, 4.0]);
        let params = Params::resize(&node(&crop)).unwrap();
        let target = Target {
            roi: Some(vec![0.0, -0.5, 1.0, 1.0]),
            ..scales_target(vec![1.0, 2.0])
        };
        let plans = plan(x.shape(), &target, params.coord).unwrap();
        let maps = nearest_maps(x.shape(), &plans, &params, Nearest::RoundPreferFloor).unwrap();
        assert!(nearest_rows(&x, &maps, &[1, 8]).is_none());
        let s = Tensor::from_strings(&[2], vec![b"a".to_vec(), b"b".to_vec()]).unwrap();
        let (rows, gather) = nearest_both_ways(&s, &[2.0], &[]);
        assert!(rows.is_none());
        assert_eq!(gather.shape(), &[4]);
    }

    #[test]
    fn linear_downsampling_follows_the_onnx_examples() {
        let x = f32s(&[1, 1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let linear = node(&[("mode", "linear")]);
        let out = run(&linear, &x, Some(&[1.0, 1.0, 0.6, 0.6]), None).unwrap();
        assert_eq!(out.shape(), &[1, 1, 1, 2]);
        assert_close(&out, &[2.6666665, 4.3333335]);
        let aligned = node(&[
            ("mode", "linear"),
            ("coordinate_transformation_mode", "align_corners"),
        ]);
        let out = run(&aligned, &x, Some(&[1.0, 1.0, 0.6, 0.6]), None).unwrap();
        assert_close(&out, &[1.0, 3.142857]);
    }

    #[test]
    fn sizes_keep_the_aspect_ratio() {
        let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let n = node(&[("keep_aspect_ratio_policy", "not_larger")])
            .with_attr("axes", AttrValue::Ints(vec![2, 3]));
        let out = run(&n, &x, None, Some(&[7, 8])).unwrap();
        assert_eq!(out.shape(), &[1, 1, 7, 7]);
        let n = node(&[("keep_aspect_ratio_policy", "not_smaller")])
            .with_attr("axes", AttrValue::Ints(vec![2, 3]));
        assert_eq!(
            run(&n, &x, None, Some(&[7, 8])).unwrap().shape(),
            &[1, 1, 8, 8]
        );
    }

    #[test]
    fn nearest_moves_any_type_and_extrapolates() {
        let s = Tensor::from_strings(&[2], vec![b"a".to_vec(), b"b".to_vec()]).unwrap();
        let out = run(&node(&[]), &s, Some(&[2.0]), None).unwrap();
        let want: Vec<Vec<u8>> = ["a", "a", "b", "b"]
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect();
        assert_eq!(out.as_strings().unwrap(), want.as_slice());

        let x = Tensor::from_vec(DataType::Int64, &[3], vec![1i64 << 60, 2, 3]).unwrap();
        let crop = node(&[("coordinate_transformation_mode", "tf_crop_and_resize")])
            .with_attr("extrapolation_value", AttrValue::Float(-1.0));
        let roi = f32s(&[2], &[-0.5, 1.0]);
        let z = Tensor::from_vec(DataType::Int64, &[1], vec![4i64]).unwrap();
        let out = eval_node(&crop, 19, &[Some(&x), Some(&roi), None, Some(&z)]).unwrap();
        assert_eq!(out[0].to_vec::<i64>().unwrap(), [-1, 1 << 60, 2, 3]);
    }

    #[test]
    fn invalid_targets_fail() {
        let x = f32s(&[2], &[1.0, 2.0]);
        let e = run(&node(&[]), &x, Some(&[2.0]), Some(&[4])).unwrap_err();
        assert!(
            e.to_string().contains("exactly one of scales and sizes"),
            "{e}"
        );
        let e = run(&node(&[]), &x, Some(&[2.0, 2.0]), None).unwrap_err();
        assert!(e.to_string().contains("2 scales for 1 axes"), "{e}");
        let e = run(&node(&[]), &x, Some(&[-1.0]), None).unwrap_err();
        assert!(e.to_string().contains("not positive"), "{e}");
        let e = run(&node(&[("mode", "area")]), &x, Some(&[2.0]), None).unwrap_err();
        assert!(e.to_string().contains("unknown mode"), "{e}");
    }

    #[test]
    fn upsample_uses_legacy_nearest_rounding() {
        let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let n = Node::new("Upsample", "u", ["x"], ["y"])
            .with_attr("scales", AttrValue::Floats(vec![1.0, 1.0, 2.0, 2.0]));
        let out = eval_node(&n, 7, &[Some(&x)]).unwrap().remove(0);
        assert_close(
            &out,
            &[
                1., 1., 2., 2., 1., 1., 2., 2., 3., 3., 4., 4., 3., 3., 4., 4.,
            ],
        );
        let p = AxisPlan {
            axis: 0,
            in_len: 4,
            out_len: 2,
            scale: 0.5,
            roi: (0.0, 1.0),
        };
        assert_eq!(nearest_index(0.5, Nearest::Legacy, p.scale, 4), 1);
        assert_eq!(nearest_index(0.5, Nearest::RoundPreferFloor, 1.0, 4), 0);
        assert_eq!(nearest_index(-0.7, Nearest::Floor, 1.0, 4), 0);
    }

    #[test]
    fn resize_shape_function_scales_known_dims_and_keeps_the_rank() {
        use super::super::runs::infer_dims_for;
        let n = Node::new("Resize", "r", ["x", "", "s"], ["y"]);
        let s = f32s(&[4], &[1.0, 1.0, 2.0, 0.5]);
        let x: &[&str] = &["N", "3", "H", "10"];
        let out = infer_dims_for(&n, 19, &[Some(x), None, None], &[None, None, Some(&s)]);
        assert_eq!(out.unwrap(), ["N", "3", "?", "5"]);
        let out = infer_dims_for(&n, 19, &[Some(x), None, None], &[]);
        assert_eq!(out.unwrap(), ["?", "?", "?", "?"]);
    }
}
