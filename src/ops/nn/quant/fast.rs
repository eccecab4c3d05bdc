//! The common cases of linear quantization as vectorised loops over contiguous runs: `float`
//! (or `float16` / `bfloat16`, widened once) quantized to `uint8`, `int8`, `uint16` or `int16`,
//! and those dequantized to `float`, `float16` or `bfloat16`, with per-tensor, per-axis and
//! blocked scales and no `precision`.
//!
//! Each loop computes the bits of the reference kernels of the parent module, which stay the
//! oracle (the tests compare the two on random data with ties, NaNs, infinities, saturating
//! values and negative zeros):
//! - quantizing: `x / scale` in `f32`, rounded half to even, plus the zero point in `f32` (exact
//!   below 2^24; beyond it both sums saturate alike), clamped to the type, NaN to 0;
//! - dequantizing: `(x - zero) * scale` in `f32`. The reference multiplies in `f64`, where the
//!   product of a difference of at most 17 bits and a 24-bit scale is exact, and rounds it once
//!   to `f32` (and then to a half type), which is what the `f32` product is.
//!
//! Everything else (the packed and 32-bit integer types, float8 and float4, `precision`, and
//! blocked scales along an inner axis) returns `None` and runs the reference kernels.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use half::{bf16, f16};
use multiversion::multiversion;
use rayon::prelude::*;

use crate::error::Result;
use crate::ops::halves::{self, Widen};
use crate::ops::util::{optional, required};
use crate::ops::vector::{as_slots, assume_written};
use crate::ops::EvalCtx;
use crate::par::{self, GRAIN};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

use super::{check_zero, output_dtype, read_quantized, scale_values, Granularity, Quantized};

/// An integer code type of the fast loops.
pub(in crate::ops) trait Code: bytemuck::Pod + Send + Sync {
    /// The smallest and largest code.
    const RANGE: (f32, f32);
    /// An in-range code (the loops clamp first).
    fn from_i32(v: i32) -> Self;
    fn to_i32(self) -> i32;
}

macro_rules! impl_code {
    ($($t:ty),*) => {$(
        impl Code for $t {
            const RANGE: (f32, f32) = (<$t>::MIN as f32, <$t>::MAX as f32);
            #[inline(always)]
            fn from_i32(v: i32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_i32(self) -> i32 {
                i32::from(self)
            }
        }
    )*};
}

impl_code!(u8, i8, u16, i16);

/// One code: `round_half_even(x / s) + z` clamped to `lo..=hi`, NaN to 0.
#[inline(always)]
pub(in crate::ops) fn code<T: Code>(x: f32, s: f32, z: f32) -> T {
    let (lo, hi) = T::RANGE;
    let v = (x / s).round_ties_even() + z;
    let c = if v.is_nan() { 0.0 } else { v.max(lo).min(hi) };
    // SAFETY: `c` is finite and within `lo..=hi`, which `i32` holds (a saturating `as` would
    // keep the loop from vectorising).
    T::from_i32(unsafe { c.to_int_unchecked::<i32>() })
}

/// Quantizes `x` by one scale and zero point into `out` (of the same length).
fn quantize_run<T: Code>(x: &[f32], s: f32, z: f32, out: &mut [MaybeUninit<T>]) {
    let n = x.len().min(out.len());
    let (x, out) = (&x[..n], &mut out[..n]);
    // SAFETY: `avx2_bytes` gives the bytes of 8-bit codes on a CPU with AVX2.
    let done = avx2_bytes(out).map_or(0, |(bytes, signed)| unsafe {
        x86::quantize_run(x, (s, z), signed, bytes)
    });
    quantize_tail(&x[done..], s, z, &mut out[done..]);
}

/// [`quantize_run`] one code at a time: what the vector loop leaves, and every run elsewhere.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1",
    "aarch64+neon"
))]
fn quantize_tail<T: Code>(x: &[f32], s: f32, z: f32, out: &mut [MaybeUninit<T>]) {
    for (o, &v) in out.iter_mut().zip(x) {
        o.write(code(v, s, z));
    }
}

/// `QuantizeLinear(f32(sum) * s + b, ys, zy)` for each sum: the codes of a `Conv` of
/// dequantized codes whose output only a `QuantizeLinear` reads (the product and the sum
/// rounded apart, as the graph computes them).
pub(in crate::ops) fn scaled_codes<T: Code>(
    sums: &[i32],
    (s, b): (f32, f32),
    (ys, zy): (f32, f32),
    out: &mut [MaybeUninit<T>],
) {
    let n = sums.len().min(out.len());
    let (sums, out) = (&sums[..n], &mut out[..n]);
    // SAFETY: `avx2_bytes` gives the bytes of 8-bit codes on a CPU with AVX2.
    let done = avx2_bytes(out).map_or(0, |(bytes, signed)| unsafe {
        x86::scaled_codes(sums, (s, b), (ys, zy), signed, bytes)
    });
    scaled_codes_tail(&sums[done..], (s, b), (ys, zy), &mut out[done..]);
}

/// [`scaled_codes`] one code at a time.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1",
    "aarch64+neon"
))]
fn scaled_codes_tail<T: Code>(
    sums: &[i32],
    (s, b): (f32, f32),
    (ys, zy): (f32, f32),
    out: &mut [MaybeUninit<T>],
) {
    for (o, &v) in out.iter_mut().zip(sums) {
        o.write(code(v as f32 * s + b, ys, zy));
    }
}

/// `out` as bytes, and whether they are `int8`, when `T` is an 8-bit code and the CPU takes the
/// hand-written AVX2 loops of [`x86`]: AVX2 without AVX-512, where the compiled loops convert
/// eight codes per round and shuffle each store into place; with AVX-512 the compiled loops
/// stay (not measured against these).
fn avx2_bytes<T: Code>(out: &mut [MaybeUninit<T>]) -> Option<(&mut [MaybeUninit<u8>], bool)> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static AVX2_ONLY: OnceLock<bool> = OnceLock::new();
        let avx2_only = *AVX2_ONLY.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx2")
                && !std::arch::is_x86_feature_detected!("avx512f")
        });
        if avx2_only && std::mem::size_of::<T>() == 1 {
            let len = out.len();
            // SAFETY: `T` is one byte (`u8` or `i8`, the 8-bit codes), so the slots are bytes.
            let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), len) };
            return Some((bytes, T::RANGE.0 < 0.0));
        }
    }
    let _ = out;
    None
}

mod x86;

/// Quantizes `x` by a scale and zero point per element into `out` (all of one length).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1",
    "aarch64+neon"
))]
fn quantize_row<T: Code>(x: &[f32], s: &[f32], z: &[f32], out: &mut [MaybeUninit<T>]) {
    for (((o, &v), &s), &z) in out.iter_mut().zip(x).zip(s).zip(z) {
        o.write(code(v, s, z));
    }
}

/// `DynamicQuantizeLinear`'s codes: `x` quantized to `uint8` by one scale and zero point.
pub(super) fn quantize_u8(x: &[f32], scale: f32, zero: u8, out: &mut [MaybeUninit<u8>]) {
    quantize_run(x, scale, f32::from(zero), out);
}

/// The minimum and maximum of `values` and 0, NaNs ignored (as `f32::min` and `f32::max` fold
/// them): sixteen lanes folded separately, then together (the same extremes in any order).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub(super) fn range(values: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = ([0.0f32; 16], [0.0f32; 16]);
    let chunks = values.chunks_exact(16);
    let tail = chunks.remainder();
    // A comparison that is false for NaN keeps the lane's extreme, as `f32::min` and `f32::max`
    // do, and compiles to one `vminps` / `vmaxps` (their NaN fix-ups kept the loop scalar).
    // Signed zeros may land either way; both give the same scale and zero point.
    for c in chunks {
        for j in 0..16 {
            lo[j] = if c[j] < lo[j] { c[j] } else { lo[j] };
            hi[j] = if c[j] > hi[j] { c[j] } else { hi[j] };
        }
    }
    let (mut min, mut max) = (0.0f32, 0.0f32);
    for j in 0..16 {
        min = min.min(lo[j]);
        max = max.max(hi[j]);
    }
    for &v in tail {
        min = min.min(v);
        max = max.max(v);
    }
    (min, max)
}

/// `(x - z) * s` for every element of `x`, one scale and zero point.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn dequantize_run<T: Code>(x: &[T], s: f32, z: i32, out: &mut [MaybeUninit<f32>]) {
    for (o, &v) in out.iter_mut().zip(x) {
        o.write((v.to_i32() - z) as f32 * s);
    }
}

/// `(x - z) * s` for every element, a scale and zero point per element.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn dequantize_row<T: Code>(x: &[T], s: &[f32], z: &[i32], out: &mut [MaybeUninit<f32>]) {
    for (((o, &v), &s), &z) in out.iter_mut().zip(x).zip(s).zip(z) {
        o.write((v.to_i32() - z) as f32 * s);
    }
}

/// How the scales of a granularity lie along the elements, for the loops.
enum Layout {
    /// One scale for runs of `run` elements, the scale index going `0, 1, …` and wrapping at
    /// `count` (per tensor: one run; per axis with `inner` of at least a vector).
    Runs { run: usize, count: usize },
    /// Rows of `row` elements with a scale per element; row `r` starts at scale index
    /// `r * stride` (taken modulo the scale count when `wrap`), or scales expanded per row.
    Rows { row: usize, index: Vec<usize> },
}

/// The layout of `gran` over `len` elements, or `None` for blocks along an inner axis with few
/// elements per block row (left to the reference).
fn layout(gran: Granularity, len: usize) -> Option<Layout> {
    Some(match gran {
        Granularity::Tensor => Layout::Runs {
            run: len.max(1),
            count: 1,
        },
        Granularity::Axis { dim, inner } if inner >= 16 => Layout::Runs {
            run: inner,
            count: dim,
        },
        Granularity::Axis { dim, inner } => {
            // A row of `dim * inner` elements; element `(a, n)` takes scale `a`.
            let row = dim * inner;
            let index = (0..row).map(|i| i / inner).collect();
            Layout::Rows { row, index }
        }
        Granularity::Block {
            dim,
            inner: 1,
            blocks,
            block,
        } => {
            // A row of `dim` elements per outer index; the scale row shifts by `blocks` per
            // row, which `Rows` handles by offsetting with the row number below.
            let _ = blocks;
            let index = (0..dim).map(|a| a / block).collect();
            Layout::Rows { row: dim, index }
        }
        Granularity::Block { .. } => return None,
    })
}

/// The scale offset of row `r` of a `Rows` layout: `r * blocks` for blocks (each row has its own
/// scale row), 0 for per-axis rows (every row shares the scales).
fn row_offset(gran: Granularity, r: usize) -> usize {
    match gran {
        Granularity::Block { blocks, .. } => r * blocks,
        _ => 0,
    }
}

/// `x` as `f32` values: borrowed for `float`, widened once for the half types.
fn floats(x: &Tensor) -> Result<Option<Cow<'_, [f32]>>> {
    Ok(Some(match x.dtype() {
        DataType::Float => Cow::Borrowed(x.as_slice::<f32>()?),
        DataType::Float16 => Cow::Owned(halves::widened(x.as_slice::<f16>()?)?),
        DataType::Bfloat16 => Cow::Owned(halves::widened(x.as_slice::<bf16>()?)?),
        _ => return Ok(None),
    }))
}

/// Runs `f(start, len, scale_index)` for every run, or `g(start, len, index_row, offset)` for
/// every row of `lay` over `n` elements.
fn each(lay: &Layout, gran: Granularity, n: usize, mut piece: impl FnMut(Piece<'_>)) {
    match lay {
        Layout::Runs { run: len, count } => {
            for (k, start) in (0..n).step_by(*len).enumerate() {
                let end = (start + len).min(n);
                piece(Piece::Run(start..end, k % count));
            }
        }
        Layout::Rows { row: len, index } if *len > 0 => {
            for (r, start) in (0..n).step_by(*len).enumerate() {
                let end = (start + len).min(n);
                piece(Piece::Row(start..end, index, row_offset(gran, r)));
            }
        }
        Layout::Rows { .. } => {}
    }
}

/// A piece of the elements: a run under one scale index, or a row with the scale indices of
/// its elements (plus an offset).
enum Piece<'a> {
    Run(std::ops::Range<usize>, usize),
    Row(std::ops::Range<usize>, &'a [usize], usize),
}

/// The values of `v` at `offset + index` for each index (clamped into `v`, which the
/// granularity check makes long enough).
fn expand<T: Copy + Default>(row: &mut Vec<T>, v: &[T], index: &[usize], offset: usize) {
    row.clear();
    let last = v.len().saturating_sub(1);
    row.extend(
        index
            .iter()
            .map(|&i| v.get((offset + i).min(last)).copied().unwrap_or_default()),
    );
}

/// `QuantizeLinear` by the loops above, or `None` when the node is not one of their cases.
pub(super) fn quantize(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Option<Tensor>> {
    let (x, scale, zero) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        optional(inputs, 2),
    );
    let out = match (zero.map(Tensor::dtype), output_dtype(ctx)?) {
        (Some(z), Some(o)) if z != o => return Ok(None),
        (Some(z), _) => z,
        (None, Some(o)) => o,
        (None, None) => DataType::Uint8,
    };
    let simple = matches!(
        out,
        DataType::Uint8 | DataType::Int8 | DataType::Uint16 | DataType::Int16
    );
    if !simple || ctx.node.attr_int("precision", 0)? != 0 {
        return Ok(None);
    }
    check_zero(ctx, zero, scale)?;
    let gran = Granularity::new(ctx, x.shape(), scale.shape())?;
    let Some(lay) = layout(gran, x.len()) else {
        return Ok(None);
    };
    let Some(xv) = floats(x)? else {
        return Ok(None);
    };
    let sv = scale_values(scale)?;
    if sv.is_empty() {
        return Ok(None);
    }
    let zv: Vec<f32> = match zero.map(read_quantized).transpose()? {
        Some(Quantized::Ints(z)) => z.iter().map(|&v| v as f32).collect(),
        Some(Quantized::Floats(_)) => return Ok(None),
        None => vec![0.0; sv.len()],
    };
    if zv.len() != sv.len() {
        return Ok(None);
    }
    let y = Tensor::uninit(out, x.shape())?;
    Ok(Some(match out {
        DataType::Uint8 => y.fill(|d| codes::<u8>(&xv, &sv, &zv, &lay, gran, d))?,
        DataType::Int8 => y.fill(|d| codes::<i8>(&xv, &sv, &zv, &lay, gran, d))?,
        DataType::Uint16 => y.fill(|d| codes::<u16>(&xv, &sv, &zv, &lay, gran, d))?,
        _ => y.fill(|d| codes::<i16>(&xv, &sv, &zv, &lay, gran, d))?,
    }))
}

/// `DequantizeLinear(QuantizeLinear(x, s, z), s, z)` of a `float` `x` by one scale and one
/// 8-bit zero point: each element rounded to its code and back in one pass, with the two
/// operators' own arithmetic (the round trip a QDQ model makes between two float operators,
/// which the interpreter plans as one step when nothing else reads the codes).
pub(in crate::ops) fn eval_round_trip(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, scale, zero) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let one_of = |t: &Tensor, dtypes: &[DataType]| t.len() == 1 && dtypes.contains(&t.dtype());
    if x.dtype() != DataType::Float
        || !one_of(scale, &[DataType::Float])
        || !one_of(zero, &[DataType::Uint8, DataType::Int8])
    {
        // Another element type: the two operators one after the other.
        let codes = super::eval_quantize(ctx, inputs)?;
        return super::eval_dequantize(ctx, &[codes.first(), Some(scale), Some(zero)]);
    }
    let xv = x.as_slice::<f32>()?;
    let s = scale.as_slice::<f32>()?[0];
    let y = Tensor::uninit(DataType::Float, x.shape())?;
    let y = if zero.dtype() == DataType::Int8 {
        let z = i32::from(zero.as_slice::<i8>()?[0]);
        y.fill(|d| round_trips::<i8>(xv, s, z, d))?
    } else {
        let z = i32::from(zero.as_slice::<u8>()?[0]);
        y.fill(|d| round_trips::<u8>(xv, s, z, d))?
    };
    Ok(vec![y])
}

fn round_trips<'d, T: Code>(
    x: &[f32],
    s: f32,
    z: i32,
    dst: &'d mut [MaybeUninit<f32>],
) -> &'d mut [f32] {
    let n = x.len().min(dst.len());
    par_run(&x[..n], &mut dst[..n], |x, d| {
        round_trip_run::<T>(x, s, z, d)
    });
    // SAFETY: `par_run` hands every element of `dst[..n]` to one run.
    unsafe { assume_written(&mut dst[..n]) }
}

#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1",
    "aarch64+neon"
))]
fn round_trip_run<T: Code>(x: &[f32], s: f32, z: i32, out: &mut [MaybeUninit<f32>]) {
    let zf = z as f32;
    for (o, &v) in out.iter_mut().zip(x) {
        let c: T = code(v, s, zf);
        o.write((c.to_i32() - z) as f32 * s);
    }
}

/// `QuantizeLinear(DequantizeLinear(a, sa, za) + DequantizeLinear(b, sb, zb), sy, zy)`, inputs
/// `a, sa, za, b, sb, zb, sy, zy` (the order of `com.microsoft.QLinearAdd`): the residual sum of
/// a QDQ network, which the interpreter plans as one step when the float values are read by
/// nothing else (`interp::fuse`). Each element takes the three operators' own arithmetic, so
/// the codes are those of the unfused graph; one pass over bytes replaces five over floats.
pub(in crate::ops) fn eval_quantized_add(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let [a, sa, za, b, sb, zb, sy, zy] = std::array::from_fn(|i| inputs.get(i).copied().flatten());
    let (a, sa, za, b, sb, zb) = (
        required(&[a], 0)?,
        required(&[sa], 0)?,
        required(&[za], 0)?,
        required(&[b], 0)?,
        required(&[sb], 0)?,
        required(&[zb], 0)?,
    );
    let (sy, zy) = (required(&[sy], 0)?, required(&[zy], 0)?);
    let codes = |t: &Tensor| matches!(t.dtype(), DataType::Uint8 | DataType::Int8);
    let per_tensor = |x: &Tensor, s: &Tensor, z: &Tensor| {
        codes(z) && z.dtype() == x.dtype() && s.dtype() == DataType::Float && s.len() == 1
    };
    let fast = a.shape() == b.shape()
        && per_tensor(a, sa, za)
        && per_tensor(b, sb, zb)
        && codes(zy)
        && zy.len() == 1
        && sy.dtype() == DataType::Float
        && sy.len() == 1;
    if !fast {
        // Broadcasting or other types: the three operators one after the other.
        let da = super::eval_dequantize(ctx, &[Some(a), Some(sa), Some(za)])?;
        let db = super::eval_dequantize(ctx, &[Some(b), Some(sb), Some(zb)])?;
        let add = crate::ir::Node::new("Add", &ctx.node.name, ["a", "b"], ["y"]);
        let sum = crate::ops::eval_node(&add, 14, &[da.first(), db.first()])?;
        return super::eval_quantize(ctx, &[sum.first(), Some(sy), Some(zy)]);
    }
    let one = |s: &Tensor, z: &Tensor| -> Result<(f32, i32)> {
        let z = match z.dtype() {
            DataType::Int8 => i32::from(z.as_slice::<i8>()?[0]),
            _ => i32::from(z.as_slice::<u8>()?[0]),
        };
        Ok((s.as_slice::<f32>()?[0], z))
    };
    let (qa, qb, qy) = (one(sa, za)?, one(sb, zb)?, one(sy, zy)?);
    let y = Tensor::uninit(zy.dtype(), a.shape())?;
    macro_rules! add_as {
        ($ta:ty, $tb:ty) => {{
            let (av, bv) = (a.as_slice::<$ta>()?, b.as_slice::<$tb>()?);
            match zy.dtype() {
                DataType::Int8 => y.fill(|d| add_codes::<$ta, $tb, i8>(av, qa, bv, qb, qy, d))?,
                _ => y.fill(|d| add_codes::<$ta, $tb, u8>(av, qa, bv, qb, qy, d))?,
            }
        }};
    }
    let y = match (a.dtype(), b.dtype()) {
        (DataType::Uint8, DataType::Uint8) => add_as!(u8, u8),
        (DataType::Uint8, _) => add_as!(u8, i8),
        (_, DataType::Uint8) => add_as!(i8, u8),
        _ => add_as!(i8, i8),
    };
    Ok(vec![y])
}

/// The codes of [`eval_quantized_add`], split over the pool like every other loop here.
fn add_codes<'d, A: Code, B: Code, Y: Code>(
    a: &[A],
    qa: (f32, i32),
    b: &[B],
    qb: (f32, i32),
    qy: (f32, i32),
    dst: &'d mut [MaybeUninit<Y>],
) -> &'d mut [Y] {
    let n = a.len().min(b.len()).min(dst.len());
    let (a, b) = (&a[..n], &b[..n]);
    if par::min_len(n, &[1]) == usize::MAX {
        add_codes_run(a, qa, b, qb, qy, &mut dst[..n]);
    } else {
        a.par_chunks(GRAIN)
            .zip(b.par_chunks(GRAIN))
            .zip(dst[..n].par_chunks_mut(GRAIN))
            .for_each(|((a, b), d)| add_codes_run(a, qa, b, qb, qy, d));
    }
    // SAFETY: every element of `dst[..n]` was written by one run.
    unsafe { assume_written(&mut dst[..n]) }
}

#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1",
    "aarch64+neon"
))]
fn add_codes_run<A: Code, B: Code, Y: Code>(
    a: &[A],
    (sa, za): (f32, i32),
    b: &[B],
    (sb, zb): (f32, i32),
    (sy, zy): (f32, i32),
    out: &mut [MaybeUninit<Y>],
) {
    let zy = zy as f32;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        let sum = (x.to_i32() - za) as f32 * sa + (y.to_i32() - zb) as f32 * sb;
        o.write(code(sum, sy, zy));
    }
}

/// `f` over `x` and `dst` (of one length), split into grains over the current pool's threads
/// when the run is long enough to pay for it; each element is computed alone, so the split
/// changes no bit.
fn par_run<S: Sync, D: Send>(x: &[S], dst: &mut [D], f: impl Fn(&[S], &mut [D]) + Sync) {
    if par::min_len(x.len(), &[1]) == usize::MAX {
        return f(x, dst);
    }
    x.par_chunks(GRAIN)
        .zip(dst.par_chunks_mut(GRAIN))
        .for_each(|(x, d)| f(x, d));
}

/// The codes of every element of `x` into `dst`.
fn codes<'d, T: Code>(
    x: &[f32],
    s: &[f32],
    z: &[f32],
    lay: &Layout,
    gran: Granularity,
    dst: &'d mut [MaybeUninit<T>],
) -> &'d mut [T] {
    let n = x.len().min(dst.len());
    let mut srow = Vec::new();
    let mut zrow = Vec::new();
    let (x, dst) = (&x[..n], &mut dst[..n]);
    each(lay, gran, n, |piece| match piece {
        Piece::Run(r, k) => par_run(&x[r.clone()], &mut dst[r], |x, d| {
            quantize_run(x, s[k], z[k], d)
        }),
        Piece::Row(r, index, offset) => {
            expand(&mut srow, s, index, offset);
            expand(&mut zrow, z, index, offset);
            quantize_row(&x[r.clone()], &srow, &zrow, &mut dst[r]);
        }
    });
    // SAFETY: the runs or rows cover `0..n`, each written by its loop.
    unsafe { assume_written(&mut dst[..n]) }
}

/// `DequantizeLinear` by the loops above, or `None` when the node is not one of their cases.
pub(super) fn dequantize(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Option<Tensor>> {
    let (x, scale, zero) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        optional(inputs, 2),
    );
    let simple = matches!(
        x.dtype(),
        DataType::Uint8 | DataType::Int8 | DataType::Uint16 | DataType::Int16
    );
    if !simple || zero.is_some_and(|z| z.dtype() != x.dtype()) {
        return Ok(None);
    }
    let out = match output_dtype(ctx)? {
        Some(o) => o,
        None if scale.dtype() == DataType::Float8E8M0 => DataType::Float,
        None => scale.dtype(),
    };
    if !matches!(
        out,
        DataType::Float | DataType::Float16 | DataType::Bfloat16
    ) {
        return Ok(None);
    }
    check_zero(ctx, zero, scale)?;
    let gran = Granularity::new(ctx, x.shape(), scale.shape())?;
    let Some(lay) = layout(gran, x.len()) else {
        return Ok(None);
    };
    let sv = scale_values(scale)?;
    if sv.is_empty() {
        return Ok(None);
    }
    let zv: Vec<i32> = match zero.map(read_quantized).transpose()? {
        Some(Quantized::Ints(z)) => z.iter().map(|&v| v as i32).collect(),
        Some(Quantized::Floats(_)) => return Ok(None),
        None => vec![0; sv.len()],
    };
    if zv.len() != sv.len() {
        return Ok(None);
    }
    match x.dtype() {
        DataType::Uint8 => dequantize_as(x.as_slice::<u8>()?, x.shape(), out, &sv, &zv, &lay, gran),
        DataType::Int8 => dequantize_as(x.as_slice::<i8>()?, x.shape(), out, &sv, &zv, &lay, gran),
        DataType::Uint16 => {
            dequantize_as(x.as_slice::<u16>()?, x.shape(), out, &sv, &zv, &lay, gran)
        }
        _ => dequantize_as(x.as_slice::<i16>()?, x.shape(), out, &sv, &zv, &lay, gran),
    }
    .map(Some)
}

/// The `out` tensor (float, float16 or bfloat16) of codes `x` of shape `shape`.
fn dequantize_as<T: Code>(
    x: &[T],
    shape: &[usize],
    out: DataType,
    s: &[f32],
    z: &[i32],
    lay: &Layout,
    gran: Granularity,
) -> Result<Tensor> {
    let y = Tensor::uninit(out, shape)?;
    if out == DataType::Float {
        return Ok(y.fill(|d| reals(x, s, z, lay, gran, d))?);
    }
    // The `f32` values, then each rounded once to the half type, as the reference rounds them.
    let mut wide = try_vec(x.len(), 0.0f32)?;
    // SAFETY: only initialised values are written through the view.
    let wide = reals(x, s, z, lay, gran, unsafe { as_slots(&mut wide) });
    Ok(match out {
        DataType::Float16 => y.fill(|d| f16::narrow_slice(wide, d))?,
        _ => y.fill(|d| bf16::narrow_slice(wide, d))?,
    })
}

/// The values of every element of `x` into `dst`.
fn reals<'d, T: Code>(
    x: &[T],
    s: &[f32],
    z: &[i32],
    lay: &Layout,
    gran: Granularity,
    dst: &'d mut [MaybeUninit<f32>],
) -> &'d mut [f32] {
    let n = x.len().min(dst.len());
    let mut srow = Vec::new();
    let mut zrow = Vec::new();
    let (x, dst) = (&x[..n], &mut dst[..n]);
    each(lay, gran, n, |piece| match piece {
        Piece::Run(r, k) => par_run(&x[r.clone()], &mut dst[r], |x, d| {
            dequantize_run(x, s[k], z[k], d)
        }),
        Piece::Row(r, index, offset) => {
            expand(&mut srow, s, index, offset);
            expand(&mut zrow, z, index, offset);
            dequantize_row(&x[r.clone()], &srow, &zrow, &mut dst[r]);
        }
    });
    // SAFETY: the runs or rows cover `0..n`, each written by its loop.
    unsafe { assume_written(dst) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values around every kind of boundary: ties after scaling, the code range's ends and
    /// beyond, NaN, infinities, negative zero, and a spread of ordinary values.
    fn values() -> Vec<f32> {
        let mut v: Vec<f32> = (-700..700).map(|k| k as f32 * 0.25).collect();
        v.extend((-300..300).map(|k| k as f32 + 0.5));
        v.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            1e30,
            -3e38,
            1e-40,
        ]);
        v.extend((0..997u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))));
        v
    }

    fn check<T: Code + PartialEq + std::fmt::Debug>() {
        let x = values();
        for (s, z) in [
            (1.0, 0.0),
            (0.5, 3.0),
            (0.37, 128.0),
            (3.0, -5.0),
            (1e-3, 0.0),
        ] {
            let mut got = vec![MaybeUninit::<T>::uninit(); x.len()];
            quantize_run(&x, s, z, &mut got);
            for (i, (g, &v)) in got.iter().zip(&x).enumerate() {
                // SAFETY: `quantize_run` wrote every slot.
                let g = unsafe { g.assume_init() };
                assert_eq!(g, code::<T>(v, s, z), "x[{i}] = {v}, scale {s}, zero {z}");
            }
        }
        let sums: Vec<i32> = (-2000..2000)
            .map(|k| k * 37)
            .chain([i32::MIN, i32::MAX, 0, -1, 1])
            .collect();
        for (s, b, ys, zy) in [
            (0.01, 0.5, 0.5, 7.0),
            (1.0, 0.0, 2.0, 0.0),
            (0.25, -3.0, 0.125, 100.0),
        ] {
            let mut got = vec![MaybeUninit::<T>::uninit(); sums.len()];
            scaled_codes(&sums, (s, b), (ys, zy), &mut got);
            for (i, (g, &v)) in got.iter().zip(&sums).enumerate() {
                // SAFETY: `scaled_codes` wrote every slot.
                let g = unsafe { g.assume_init() };
                assert_eq!(g, code::<T>(v as f32 * s + b, ys, zy), "sum[{i}] = {v}");
            }
        }
    }

    /// The 8-bit loops (32 codes per round where the CPU takes them, the rest one at a time)
    /// give the bits of `code`, and so do the 16-bit ones.
    #[test]
    fn code_loops_give_the_bits_of_code() {
        check::<u8>();
        check::<i8>();
        check::<u16>();
        check::<i16>();
    }
}
