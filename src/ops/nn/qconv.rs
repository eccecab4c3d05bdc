//! `ConvInteger` (10), `QLinearConv` (10) and the fused QDQ convolution: the 8-bit
//! convolutions, on the integer kernel of `igemm.rs`.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__ConvInteger.html>,
//! <https://onnx.ai/onnx/operators/onnx__QLinearConv.html>.
//!
//! Design note: every group of every image is one integer product, the group's filters
//! (`M/g x C/g*taps`, the kernel's A, zero points per row: per output channel) times the
//! im2col matrix of the group's input planes (`C/g*taps x positions`, the kernel's B, packed
//! once per group). In `NCHW` order, the product's rows are the output planes, so the kernel
//! writes the output in place. im2col pads with the input's zero point itself, so a
//! padded tap contributes zero after the kernel subtracts it, as the spec asks. The sums are
//! exact integers, the same as the `f64` convolution of `conv/` on shifted operands
//! ([`reference_conv`]), which stays for contracted dims beyond [`EXACT_K`] and as the tests'
//! reference.
//!
//! The im2col matrix is never whole in memory: `PackedB::from_rows` makes it four rows at a
//! time ([`im2col_row`]) and packs them at once. The sums never are either: the kernel hands
//! each finished row segment to a [`PlaneSink`], which stores them as `int32` (`ConvInteger`)
//! or through an [`Epilogue`]: `QLinearConv`'s requantisation, or the scaling (and
//! quantization) of the fused QDQ convolution.
//!
//! Why one file: the three operators share every step (zero points, the packed filters, the
//! im2col rows, the sinks), and differ only in the epilogue each names; split, each would
//! re-state the plumbing the others use.

use crate::error::{Error, Result};
use crate::tensor::{try_vec, try_with_capacity, Scratch, Tensor};
use crate::DataType;

use super::super::util::{optional, required, to_i64s, unsupported_type};
use std::mem::MaybeUninit;

use super::super::vector::{as_slots, assume_written, copy};
use super::super::EvalCtx;
use super::conv::{coord, ConvShape};
use super::igemm::{self, Bytes, Level, PackedA, PackedB, EXACT_K};
use super::qcodes;
use super::qdirect::{self, Segment, COLS};
use super::qmatmul::{requantize_offset, requantize_run, scales, single, Sums};
use super::quant::scaled_codes;
use super::values::{checked_product, code_range, shifted_f64s, to_f32s, zero_at, zero_points};
use super::window::{inside, Geometry3};

/// What an integer convolution makes of its exact sums as the kernel finishes them, output
/// channel `c` at a time (a value per channel, or one for all).
enum Epilogue {
    /// `clamp(round_half_even((sum + bias[c]) * mult[c]) + zy)`, the bytes of 8-bit `dtype`
    /// (`QLinearConv`).
    Requantize {
        mult: Vec<f64>,
        bias: Vec<f64>,
        zy: f64,
        dtype: DataType,
        /// The largest `|sum|` the convolution can make: `K x 255 x 255`.
        reach: f64,
    },
    /// `f32(sum) * scale[c] + bias[c]` (a `Conv` of dequantized codes), quantized by
    /// `QuantizeLinear`'s arithmetic when `codes` gives its scale, zero point and 8-bit type.
    Float {
        scale: Vec<f32>,
        bias: Vec<f32>,
        codes: Option<(f32, f32, DataType)>,
    },
}

/// Channel `c`'s value of a per-channel parameter (one value stands for every channel; none
/// is `none`).
fn per_channel<T: Copy>(v: &[T], c: usize, none: T) -> T {
    match v.len() {
        0 => none,
        1 => v[0],
        _ => v[c],
    }
}

/// What an [`Epilogue`] (or none) does to the sums of one output channel.
#[derive(Clone, Copy)]
enum Channel {
    /// Stores them as `int32`.
    Sums,
    /// Requantizes them by `(mult, bias, zy)` into the code range; `bounded` when every
    /// `sum + bias` fits `i32` and every `(sum + bias) * mult` lies within `±2^30`, so the
    /// products convert to `i32` exactly and saturate there.
    Requantize((f64, f64, f64), (f64, f64), bool),
    /// Scales them by `s`, adds `b`, and quantizes by `codes`, if given.
    Float(f32, f32, Option<(f32, f32, DataType)>),
}

impl Channel {
    /// What `epilogue` does to output channel `c` (worked out once per call, by [`finish`]).
    fn of(epilogue: &Epilogue, c: usize) -> Channel {
        match epilogue {
            Epilogue::Requantize {
                mult,
                bias,
                zy,
                dtype,
                reach,
            } => {
                let (m, b) = (per_channel(mult, c, 0.0), per_channel(bias, c, 0.0));
                let largest = reach + b.abs();
                // False for a NaN or infinite multiplier.
                let bounded = largest < 2f64.powi(31) && largest * m.abs() < 2f64.powi(30);
                Channel::Requantize((m, b, *zy), code_range(*dtype), bounded)
            }
            Epilogue::Float { scale, bias, codes } => Channel::Float(
                per_channel(scale, c, 1.0),
                per_channel(bias, c, 0.0),
                *codes,
            ),
        }
    }
}

/// An integer convolution's result: its sums, or the output its [`Epilogue`] made of them.
enum Conv {
    Sums(Sums),
    Done(Tensor),
}

/// The exact integer convolution of `x - x_zero` and `w - w_zero` (per tensor, or per output
/// channel for the weights): `i32` from the integer kernel, or `f64` when the contracted dim
/// (input channels per group times taps) exceeds [`EXACT_K`]. With an `epilogue`, the integer
/// kernel hands its sums to it and the output is returned instead.
fn integer_conv(
    ctx: &EvalCtx<'_>,
    shape: &ConvShape,
    (x, x_zero): (&Tensor, Option<&Tensor>),
    (w, w_zero, w_inputs): (&Tensor, Option<&Tensor>, [usize; 2]),
    epilogue: Option<&Epilogue>,
) -> Result<Conv> {
    for t in [Some(x), Some(w), x_zero, w_zero].into_iter().flatten() {
        if !matches!(t.dtype(), DataType::Int8 | DataType::Uint8) {
            return Err(unsupported_type("an integer convolution", t.dtype()));
        }
    }
    let zx = zero_points(x_zero)?;
    zero_at(&zx, 1, "the zero point of x").map(|_| ())?;
    let zw = zero_points(w_zero)?;
    zero_at(&zw, shape.c_out, "the zero point of w").map(|_| ())?;
    // 8-bit values (their types were checked above), so these conversions are exact.
    let zx = zx.first().map_or(0, |&z| z as i32);
    let zw: Vec<i32> = if zw.is_empty() {
        vec![0]
    } else {
        zw.iter().map(|&z| z as i32).collect()
    };
    let kc = (shape.c_in / shape.group).saturating_mul(shape.geo.taps());
    if kc > EXACT_K {
        return Ok(Conv::Sums(Sums::F64(reference_conv(shape, x, zx, w, &zw)?)));
    }
    let level = Level::detect();
    // Constant filters (the model's weights) are packed once for the plan.
    let kept = ctx.remember(&w_inputs, || pack_filters(shape, w, &zw, level))?;
    let w = (w, zw.as_slice(), kept);
    match epilogue {
        None => Ok(Conv::Sums(Sums::I32(int32_conv(shape, x, zx, w, level)?))),
        Some(epilogue) => finish(shape, epilogue, |sink| {
            kernel_conv(shape, x, zx, w, level, sink)
        })
        .map(Conv::Done),
    }
}

/// The output `epilogue` makes of a convolution's sums, which `store` hands to the sink it is
/// given, every segment of every output plane once.
fn finish(
    shape: &ConvShape,
    epilogue: &Epilogue,
    store: impl FnOnce(&PlaneSink) -> Result<()>,
) -> Result<Tensor> {
    let dtype = match epilogue {
        Epilogue::Requantize { dtype, .. } => *dtype,
        Epilogue::Float { codes, .. } => codes.map_or(DataType::Float, |(_, _, dtype)| dtype),
    };
    let mut out = Tensor::uninit(dtype, &shape.out_shape)?;
    let mut channels = try_with_capacity(shape.c_out)?;
    channels.extend((0..shape.c_out).map(|c| Channel::of(epilogue, c)));
    let sink = PlaneSink {
        ptr: out.bytes_mut().as_mut_ptr().cast(),
        plane: shape.geo.out_plane(),
        c_out: shape.c_out,
        channels,
    };
    store(&sink)?;
    // SAFETY: every segment of every output plane was stored, and the epilogue writes one
    // element of the output's type for each sum.
    Ok(unsafe { out.assume_init() })
}

/// The sums of [`kernel_conv`] as an `int32` tensor of the output's shape.
fn int32_conv(
    shape: &ConvShape,
    x: &Tensor,
    zx: i32,
    w: (&Tensor, &[i32], Option<&Filters>),
    level: Level,
) -> Result<Tensor> {
    let out = Tensor::uninit(DataType::Int32, &shape.out_shape)?;
    out.try_fill(|slots: &mut [MaybeUninit<i32>]| {
        let sink = PlaneSink {
            ptr: slots.as_mut_ptr().cast(),
            plane: shape.geo.out_plane(),
            c_out: shape.c_out,
            channels: Vec::new(),
        };
        kernel_conv(shape, x, zx, w, level, &sink)?;
        // SAFETY: the kernel stores every segment of every output plane.
        Ok(unsafe { assume_written(slots) })
    })
}

/// The sink of a convolution's products: output plane `p` (image times channel) holds `plane`
/// elements; each segment of sums is stored as they are or through the epilogue.
struct PlaneSink {
    ptr: *mut u8,
    plane: usize,
    c_out: usize,
    /// What the epilogue does to each output channel, worked out once per call (none: the
    /// sums are stored).
    channels: Vec<Channel>,
}

// SAFETY: the kernel's tasks store disjoint segments (`igemm::Sink::store`'s contract).
unsafe impl Send for PlaneSink {}
unsafe impl Sync for PlaneSink {}

impl PlaneSink {
    /// What the epilogue does to output channel `c`.
    #[inline(always)]
    fn channel(&self, c: usize) -> Channel {
        self.channels.get(c).copied().unwrap_or(Channel::Sums)
    }

    /// Stores `sums` into plane `p` from position `pos0`.
    ///
    /// # Safety
    /// As `igemm::Sink::store`: the segment lies in the output and is this call's alone.
    unsafe fn store(&self, p: usize, pos0: usize, sums: &[i32]) {
        let at = p * self.plane + pos0;
        let c = p % self.c_out.max(1);
        // SAFETY (all three): elements `at..at + sums.len()` lie in the output, whose elements
        // have the width written here (the caller's promise and `integer_conv`'s choice of
        // type).
        match self.channel(c) {
            Channel::Sums => {
                let dst = unsafe { slots::<i32>(self.ptr, at, sums.len()) };
                copy(dst, sums);
            }
            Channel::Requantize(params, range, _) => {
                let dst = unsafe { slots::<u8>(self.ptr, at, sums.len()) };
                requantize_run(sums, params, range, dst);
            }
            Channel::Float(s, b, codes) => match codes {
                None => {
                    let dst = unsafe { slots::<f32>(self.ptr, at, sums.len()) };
                    for (o, &v) in dst.iter_mut().zip(sums) {
                        o.write(v as f32 * s + b);
                    }
                }
                Some((ys, zy, DataType::Int8)) => {
                    let dst = unsafe { slots::<i8>(self.ptr, at, sums.len()) };
                    scaled_codes(sums, (s, b), (ys, zy), dst);
                }
                Some((ys, zy, _)) => {
                    let dst = unsafe { slots::<u8>(self.ptr, at, sums.len()) };
                    scaled_codes(sums, (s, b), (ys, zy), dst);
                }
            },
        }
    }
}

/// Copies `n <= 128` bytes from `src` to `dst` as two fixed-size copies that may overlap:
/// no call to `memcpy` for the short runs of a tile's row.
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping(src, dst, n)`.
#[inline(always)]
unsafe fn short_copy(dst: *mut u8, src: *const u8, n: usize) {
    /// Bytes `0..W` and `n - W..n`, for `W <= n <= 2 W`.
    #[inline(always)]
    unsafe fn ends<const W: usize>(dst: *mut u8, src: *const u8, n: usize) {
        // SAFETY: both copies lie in the first `n` bytes (the caller's promise).
        unsafe {
            dst.cast::<[u8; W]>()
                .write_unaligned(src.cast::<[u8; W]>().read_unaligned());
            let (d, s) = (dst.add(n - W), src.add(n - W));
            d.cast::<[u8; W]>()
                .write_unaligned(s.cast::<[u8; W]>().read_unaligned());
        }
    }
    debug_assert!(n <= 128);
    // SAFETY (every arm): `W <= n <= 2 W` and the caller's promise.
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                for i in 0..n {
                    *dst.add(i) = *src.add(i);
                }
            }
            4..=7 => ends::<4>(dst, src, n),
            8..=15 => ends::<8>(dst, src, n),
            16..=31 => ends::<16>(dst, src, n),
            32..=63 => ends::<32>(dst, src, n),
            _ => ends::<64>(dst, src, n),
        }
    }
}

/// `f` of each value, in a loop that inlines into its caller (`array::map` may not).
#[inline(always)]
fn each<T: Copy, U: Copy + Default>(values: &[T; COLS], f: impl Fn(T) -> U) -> [U; COLS] {
    let mut out = [U::default(); COLS];
    for (o, &v) in out.iter_mut().zip(values) {
        *o = f(v);
    }
    out
}

impl qdirect::Rows for PlaneSink {
    /// The epilogue of [`PlaneSink::store`] on all 32 sums at once (in registers at the kernel's
    /// `level`, else through `store`'s run loops), then the runs that lie in the output copied
    /// out.
    #[inline(always)]
    unsafe fn finish(
        &self,
        image: usize,
        c: usize,
        sums: &[i32; COLS],
        at: &[Segment],
        level: Level,
    ) {
        let base = (image * self.c_out + c) * self.plane;
        /// Copies each segment of `values` to its place in the output of `T`s at `ptr`.
        ///
        /// # Safety
        /// As `qdirect::Rows::finish`; the output's elements are `T`s.
        #[inline(always)]
        unsafe fn place<T: Copy>(ptr: *mut u8, base: usize, values: &[T; COLS], at: &[Segment]) {
            let size = std::mem::size_of::<T>();
            for s in at {
                // SAFETY: the segment lies in the plane at `base` (the caller's promise), and
                // `values` holds its elements.
                unsafe {
                    let src = values.as_ptr().add(s.from).cast::<u8>();
                    short_copy(ptr.add((base + s.to) * size), src, s.len * size);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        let avx512 = matches!(level, Level::Avx512Vnni | Level::Amx);
        let avx2 = level == Level::Avx2Pairs;
        #[cfg(not(target_arch = "x86_64"))]
        let _ = level;
        /// The 32 codes of an AVX2 register.
        #[cfg(target_arch = "x86_64")]
        fn bytes(v: std::arch::x86_64::__m256i) -> [u8; COLS] {
            // SAFETY: both are 32 bytes.
            unsafe { std::mem::transmute(v) }
        }
        // SAFETY (every `place` and `store`): the caller's promise, and the output's element
        // type is the one each epilogue writes (`finish`'s choice of type); `requantize` is
        // given a finite multiplier, and each vector arm runs where the caller's CPU (at
        // `level`) does.
        match self.channel(c) {
            Channel::Sums => unsafe { place(self.ptr, base, sums, at) },
            #[cfg(target_arch = "x86_64")]
            Channel::Requantize((m, b, zy), (lo, _), true) if avx512 || avx2 => unsafe {
                // `bounded`: the bias is an integer within `i32`, the zero point an 8-bit code.
                let params = (m, b as i32, zy as i32);
                if avx512 {
                    let codes = qcodes::x86::requantize_bounded(sums, params, lo < 0.0);
                    qcodes::x86::store(self.ptr.wrapping_add(base), codes, at);
                } else {
                    let codes = qcodes::x86::requantize_bounded_avx2(sums, params, lo < 0.0);
                    place(self.ptr, base, &bytes(codes), at);
                }
            },
            #[cfg(target_arch = "x86_64")]
            Channel::Requantize(params, range, _) if avx512 && params.0.is_finite() => unsafe {
                let codes = qcodes::x86::requantize(sums, params, range);
                qcodes::x86::store(self.ptr.wrapping_add(base), codes, at);
            },
            #[cfg(target_arch = "x86_64")]
            Channel::Float(s, b, Some((ys, zy, dtype))) if avx512 || avx2 => unsafe {
                let range = code_range(dtype);
                let range = (range.0 as f32, range.1 as f32);
                if avx512 {
                    let codes = qcodes::x86::quantize(sums, (s, b), (ys, zy), range);
                    qcodes::x86::store(self.ptr.wrapping_add(base), codes, at);
                } else {
                    let codes = qcodes::x86::quantize_avx2(sums, (s, b), (ys, zy), range);
                    place(self.ptr, base, &bytes(codes), at);
                }
            },
            Channel::Requantize(params, range, _) => {
                let mut codes = [0u8; COLS];
                // SAFETY: only codes are written.
                requantize_run(sums, params, range, unsafe { as_slots(&mut codes) });
                unsafe { place(self.ptr, base, &codes, at) };
            }
            Channel::Float(s, b, None) => {
                let y = each(sums, |v| v as f32 * s + b);
                unsafe { place(self.ptr, base, &y, at) };
            }
            Channel::Float(s, b, Some((ys, zy, DataType::Int8))) => {
                let mut codes = [0i8; COLS];
                // SAFETY: only codes are written.
                scaled_codes(sums, (s, b), (ys, zy), unsafe { as_slots(&mut codes) });
                unsafe { place(self.ptr, base, &codes, at) };
            }
            Channel::Float(s, b, Some((ys, zy, _))) => {
                let mut codes = [0u8; COLS];
                // SAFETY: only codes are written.
                scaled_codes(sums, (s, b), (ys, zy), unsafe { as_slots(&mut codes) });
                unsafe { place(self.ptr, base, &codes, at) };
            }
        }
    }
}

/// `len` slots of `T` from element `at` of the buffer at `ptr`.
///
/// # Safety
/// The buffer holds elements `at..at + len` of `T`, aligned, and no one else uses them.
unsafe fn slots<'a, T>(ptr: *mut u8, at: usize, len: usize) -> &'a mut [MaybeUninit<T>] {
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts_mut(ptr.cast::<MaybeUninit<T>>().add(at), len) }
}

/// One group of one image of a convolution, as the sink of its product: row `i` of the
/// product is output plane `plane0 + i`.
struct GroupSink<'s> {
    planes: &'s PlaneSink,
    plane0: usize,
}

impl igemm::Sink for GroupSink<'_> {
    unsafe fn store(&self, i: usize, col0: usize, sums: &[i32]) {
        // SAFETY: the product's row `i` is plane `plane0 + i`; the rest is the caller's promise.
        unsafe { self.planes.store(self.plane0 + i, col0, sums) }
    }
}

/// The convolution of [`integer_conv`] on the integer kernel of `level`: `zx` is the input's
/// zero point, `zw` one zero point or one per output channel.
fn kernel_conv(
    shape: &ConvShape,
    x: &Tensor,
    zx: i32,
    (w, zw, filters): (&Tensor, &[i32], Option<&Filters>),
    level: Level,
    sink: &PlaneSink,
) -> Result<()> {
    let made;
    let direct = match filters {
        Some(Filters::Direct(a)) => Some(a),
        Some(Filters::Groups(..)) => None,
        None if qdirect::applies(w.shape(), shape.group, level) => {
            made = direct_filters(shape, w, zw, level)?;
            made.as_ref()
        }
        None => None,
    };
    if let Some(packed) = direct {
        let x = (x.as_bytes()?, x.dtype() == DataType::Int8, zx);
        return qdirect::run(shape, x, packed, sink);
    }
    let g = &shape.geo;
    let (cg, mg) = (shape.c_in / shape.group, shape.c_out / shape.group);
    let (in_plane, out_plane) = (g.in_plane(), g.out_plane());
    if checked_product(&shape.out_shape)? == 0 {
        // Nothing to write; the planes of an empty output may multiply past `usize`.
        return Ok(());
    }
    let kc = cg * g.taps();
    let (xv, wv) = (x.as_bytes()?, w.as_bytes()?);
    if xv.len() != shape.batch * shape.c_in * in_plane || wv.len() != shape.c_out * kc {
        return Err(Error::Eval("X or W does not hold its shape".into()));
    }
    let level = match filters {
        Some(Filters::Groups(level, _)) => *level,
        _ => filters_level(w, kc, level)?,
    };
    // A pointwise convolution's im2col matrix is its input planes; the others read input rows
    // split into phases when the width stride is above 1.
    let pointwise = shape.is_pointwise();
    let sw = g.strides[2];
    // Splitting every input row into phases pays when the taps read each element more than
    // once on average; a sparse read (a 1x1 strided convolution) gathers its elements instead.
    let phases = sw > 1 && g.taps() > g.strides.iter().product::<usize>();
    let mut phased = None;
    // The zero point as the byte it is stored as (two's complement for `int8`).
    let pad = zx as u8;
    let zb = [zx];
    let signed = x.dtype() == DataType::Int8;
    for b in 0..shape.batch {
        for gi in 0..shape.group {
            let x0 = (b * shape.c_in + gi * cg) * in_plane;
            let planes = &xv[x0..x0 + cg * in_plane];
            let packed = if pointwise {
                let data = Bytes {
                    data: planes,
                    signed,
                };
                PackedB::new(data, kc, out_plane, level)?
            } else {
                let rows = if phases {
                    rewrite(&mut phased, planes.len(), |out| {
                        split_phases(planes, g.input[2], sw, out)
                    })?
                } else {
                    planes
                };
                PackedB::from_rows(kc, out_plane, signed, level, |r, out| {
                    im2col_row(rows, g, r, (pad, phases), out)
                })?
            };
            let made;
            let a = match filters {
                Some(Filters::Groups(_, filters)) => &filters[gi],
                _ => {
                    let (a, za) = group_filters(w, zw, (gi, mg, kc))?;
                    made = PackedA::new(a, mg, kc, za, level)?;
                    &made
                }
            };
            let group = GroupSink {
                planes: sink,
                plane0: b * shape.c_out + gi * mg,
            };
            igemm::gemm_packed_to(a, &packed, &zb, &group)?;
        }
    }
    Ok(())
}

/// Group `gi`'s filters (`mg` rows of `kc` bytes) and their zero points (one, or one per row).
fn group_filters<'w>(
    w: &'w Tensor,
    zw: &'w [i32],
    (gi, mg, kc): (usize, usize, usize),
) -> Result<(Bytes<'w>, &'w [i32])> {
    let filters = Bytes {
        data: &w.as_bytes()?[gi * mg * kc..(gi + 1) * mg * kc],
        signed: w.dtype() == DataType::Int8,
    };
    let za = if zw.len() == 1 {
        zw
    } else {
        &zw[gi * mg..(gi + 1) * mg]
    };
    Ok((filters, za))
}

/// A convolution's filters packed for the kernel that runs it.
enum Filters {
    /// For [`qdirect`].
    Direct(qdirect::Filters),
    /// Each group's, for the product with its im2col matrix at the level they were packed for.
    Groups(Level, Vec<PackedA>),
}

/// The level of the products of filters `w` (rows of `kc`) with im2col matrices on a CPU
/// whose best level is `level` (`Level::for_a`: the filters are known before the input).
fn filters_level(w: &Tensor, kc: usize, level: Level) -> Result<Level> {
    let filters = Bytes {
        data: w.as_bytes()?,
        signed: w.dtype() == DataType::Int8,
    };
    Ok(level.for_a(filters, kc))
}

/// The filters packed for the kernel [`kernel_conv`] runs at `level`.
fn pack_filters(shape: &ConvShape, w: &Tensor, zw: &[i32], level: Level) -> Result<Filters> {
    if qdirect::applies(w.shape(), shape.group, level) {
        if let Some(filters) = direct_filters(shape, w, zw, level)? {
            return Ok(Filters::Direct(filters));
        }
    }
    let (cg, mg) = (shape.c_in / shape.group, shape.c_out / shape.group);
    let kc = cg * shape.geo.taps();
    if w.len() != shape.c_out * kc {
        return Err(Error::Eval("W does not hold its shape".into()));
    }
    let level = filters_level(w, kc, level)?;
    (0..shape.group)
        .map(|gi| {
            let (a, za) = group_filters(w, zw, (gi, mg, kc))?;
            PackedA::new(a, mg, kc, za, level)
        })
        .collect::<Result<_>>()
        .map(|groups| Filters::Groups(level, groups))
}

/// The filters packed for [`qdirect`], unless its kernel does not take them
/// (`qdirect::pack_filters`).
fn direct_filters(
    shape: &ConvShape,
    w: &Tensor,
    zw: &[i32],
    level: Level,
) -> Result<Option<qdirect::Filters>> {
    let filters = Bytes {
        data: w.as_bytes()?,
        signed: w.dtype() == DataType::Int8,
    };
    let dims = (shape.c_out, shape.c_in, shape.geo.taps());
    qdirect::pack_filters(filters, zw, dims, level)
}

/// Writes row `r` of the im2col matrix of the input planes `x` into `row` (one byte per output
/// position): the byte kernel tap `r` sees at each output position, `pad` in the padding. Rows
/// come in im2col's order (channel, then depth, height and width taps), the order of a
/// filter's weights.
///
/// When `phased`, `x` holds each input row split into its phases (see [`split_phases`]), so that
/// a strided tap reads a contiguous run; else a strided tap gathers its elements.
fn im2col_row(
    x: &[u8],
    g: &Geometry3,
    r: usize,
    (pad, phased): (u8, bool),
    row: &mut [MaybeUninit<u8>],
) {
    let [od, oh, ow] = g.output;
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.strides;
    let [dd, dh, dw] = g.dilations;
    let [pd, ph, pw] = g.pad_begin;
    let (kx, rest) = (r % kw, r / kw);
    let (ky, rest) = (rest % kh, rest / kh);
    let (kz, c) = (rest % kd, rest / kd);
    // Output columns `lo..hi` read inside the input row at this tap; `inside` keeps
    // `ox * sw + kx * dw - pw` inside the row for `ox` in `lo..hi`, a run of one phase of the row
    // that starts at `start` (the same for every output row).
    let (lo, hi) = inside(ow, iw, sw, kx * dw, pw);
    let first = (lo < hi).then(|| lo * sw + kx * dw - pw);
    let contiguous = phased || sw == 1;
    let start = match first {
        Some(first) if contiguous => phase_start(iw, sw, first % sw) + first / sw,
        _ => 0,
    };
    let mut segs = row.chunks_exact_mut(ow.max(1));
    for oz in 0..od {
        let iz = coord(oz, kz, sd, dd, pd, id);
        for oy in 0..oh {
            let Some(seg) = segs.next() else { return };
            let (Some(iz), Some(iy), Some(first)) = (iz, coord(oy, ky, sh, dh, ph, ih), first)
            else {
                fill_slots(seg, pad);
                continue;
            };
            fill_slots(&mut seg[..lo], pad);
            fill_slots(&mut seg[hi..], pad);
            let src = &x[((c * id + iz) * ih + iy) * iw..][..iw];
            if contiguous {
                let run = &src[start..start + hi - lo];
                if run.len() <= 128 {
                    // SAFETY: `run` and `seg[lo..hi]` hold `hi - lo` bytes each and do not
                    // overlap.
                    unsafe { short_copy(seg[lo..].as_mut_ptr().cast(), run.as_ptr(), run.len()) };
                } else {
                    copy(&mut seg[lo..hi], run);
                }
            } else {
                for (d, &v) in seg[lo..hi].iter_mut().zip(src[first..].iter().step_by(sw)) {
                    d.write(v);
                }
            }
        }
    }
}

/// Where phase `phase` of a row of `width` elements starts once the row is split into its
/// `stride` phases: elements `phase, phase + stride, ...` follow the earlier phases.
fn phase_start(width: usize, stride: usize, phase: usize) -> usize {
    // Phase `p` holds `ceil((width - p) / stride)` elements.
    (0..phase).map(|p| (width - p).div_ceil(stride)).sum()
}

/// Every row of `width` bytes of `x` split into its `stride` phases (element `i` of phase `p`
/// is the row's element `p + i * stride`), into `out`, which has the length of `x`. A stride of
/// 2 compiles per SIMD level to vector shuffles.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn split_phases(x: &[u8], width: usize, stride: usize, out: &mut [MaybeUninit<u8>]) {
    for (row, dst) in x
        .chunks_exact(width.max(1))
        .zip(out.chunks_exact_mut(width.max(1)))
    {
        if stride == 2 {
            let half = width / 2;
            let (even, odd) = dst.split_at_mut(width - half);
            for ((pair, e), o) in row.chunks_exact(2).zip(even.iter_mut()).zip(odd.iter_mut()) {
                e.write(pair[0]);
                o.write(pair[1]);
            }
            if width % 2 == 1 {
                even[half].write(row[width - 1]);
            }
            continue;
        }
        let mut i = 0;
        for p in 0..stride.min(width) {
            for &v in row[p..].iter().step_by(stride) {
                dst[i].write(v);
                i += 1;
            }
        }
    }
}

fn fill_slots(slots: &mut [MaybeUninit<u8>], v: u8) {
    let n = slots.len();
    if n > 64 {
        for s in slots {
            s.write(v);
        }
        return;
    }
    /// Bytes `0..W` and `n - W..n`, for `W <= n <= 2 W`.
    #[inline(always)]
    fn ends<const W: usize>(slots: &mut [MaybeUninit<u8>], v: u8) {
        let n = slots.len();
        slots[..W].copy_from_slice(&[MaybeUninit::new(v); W]);
        slots[n - W..].copy_from_slice(&[MaybeUninit::new(v); W]);
    }
    // Pads of a few bytes are the rule (a row's edges): fixed-size stores, no call to `memset`.
    match n {
        0 => {}
        1 => slots[0] = MaybeUninit::new(v),
        2..=3 => ends::<2>(slots, v),
        4..=7 => ends::<4>(slots, v),
        8..=15 => ends::<8>(slots, v),
        16..=31 => ends::<16>(slots, v),
        _ => ends::<32>(slots, v),
    }
}

/// The bytes `write` leaves in `buf` (`len` of them, every one written by `write`): into the
/// buffer of an earlier call, or into a new one on the first.
fn rewrite(
    buf: &mut Option<Scratch<u8>>,
    len: usize,
    write: impl FnOnce(&mut [MaybeUninit<u8>]),
) -> Result<&[u8]> {
    let buf = match buf {
        // SAFETY: `write` writes only initialised bytes.
        Some(b) => {
            write(unsafe { as_slots(b) });
            b
        }
        // SAFETY: `write` writes every byte (the caller's promise).
        None => buf.insert(unsafe { Scratch::new_with(len, write) }?),
    };
    Ok(buf)
}

/// The convolution of [`integer_conv`] with both operands widened to `f64` (the convolution
/// of `conv/`): exact for any contracted dim.
fn reference_conv(
    shape: &ConvShape,
    x: &Tensor,
    zx: i32,
    w: &Tensor,
    zw: &[i32],
) -> Result<Vec<f64>> {
    let per_filter = w.len() / shape.c_out.max(1);
    let zw_at = |i: usize| i64::from(zw[if zw.len() == 1 { 0 } else { i }]);
    let xv = shifted_f64s(x, |_| i64::from(zx))?;
    let wv = shifted_f64s(w, |i| zw_at(i / per_filter.max(1)))?;
    let mut acc = try_vec(checked_product(&shape.out_shape)?, 0.0)?;
    // SAFETY: the convolution writes only initialised values.
    let filters = super::conv::Filters::new(&wv[..], None);
    shape.run::<f64>(&xv, filters, None, unsafe { as_slots(&mut acc) })?;
    Ok(acc)
}

pub(super) fn eval_conv_integer(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, w) = (required(inputs, 0)?, required(inputs, 1)?);
    let shape = ConvShape::new(ctx, x.shape(), w.shape())?;
    let x = (x, optional(inputs, 2));
    match integer_conv(ctx, &shape, x, (w, optional(inputs, 3), [1, 3]), None)? {
        Conv::Sums(sums) => Ok(vec![sums.into_int32(&shape.out_shape)?]),
        Conv::Done(y) => Ok(vec![y]),
    }
}

pub(super) fn eval_qlinear_conv(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, x_scale, x_zero) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let (w, w_scale, w_zero) = (
        required(inputs, 3)?,
        required(inputs, 4)?,
        required(inputs, 5)?,
    );
    let (y_scale, y_zero, bias) = (
        required(inputs, 6)?,
        required(inputs, 7)?,
        optional(inputs, 8),
    );
    if bias.is_some_and(|b| b.dtype() != DataType::Int32) {
        return Err(ctx.error("B must be int32"));
    }
    let shape = ConvShape::new(ctx, x.shape(), w.shape())?;
    let plane = shape.geo.out_plane().max(1);
    let c_out = shape.c_out.max(1);
    let bias = match bias {
        Some(b) => {
            let v = to_i64s(b)?;
            if v.len() != shape.c_out {
                return Err(ctx.error(format!(
                    "B has {} values for {} output channels",
                    v.len(),
                    shape.c_out
                )));
            }
            v
        }
        None => Vec::new(),
    };
    let sx = single(&to_f32s(x_scale)?, "x_scale")?;
    let sw = scales(w_scale, shape.c_out, "w_scale")?;
    let sy = single(&to_f32s(y_scale)?, "y_scale")?;
    let zy = single(&to_i64s(y_zero)?, "y_zero_point")?;
    let mult: Vec<f64> = sw.iter().map(|&s| (sx * s / sy) as f64).collect();
    let epilogue = matches!(y_zero.dtype(), DataType::Uint8 | DataType::Int8).then(|| {
        Epilogue::Requantize {
            mult: mult.clone(),
            // The bias is an exact integer in `f64`, as the sums are.
            bias: bias.iter().map(|&b| b as f64).collect(),
            zy: zy as f64,
            dtype: y_zero.dtype(),
            reach: (shape.c_in / shape.group)
                .saturating_mul(shape.geo.taps())
                .saturating_mul(255 * 255) as f64,
        }
    });
    let x = (x, Some(x_zero));
    let acc = match integer_conv(ctx, &shape, x, (w, Some(w_zero), [3, 5]), epilogue.as_ref())? {
        Conv::Sums(acc) => acc,
        Conv::Done(y) => return Ok(vec![y]),
    };
    let channel = |i: usize| (i / plane) % c_out;
    let scale = |i: usize| mult[if mult.len() == 1 { 0 } else { channel(i) }];
    // The bias is an exact integer in `f64`, as the sums are.
    let offset = |i: usize| bias.get(channel(i)).map_or(0.0, |&b| b as f64);
    Ok(vec![requantize_offset(
        &acc,
        offset,
        scale,
        zy,
        y_zero.dtype(),
        &shape.out_shape,
    )?])
}

/// The convolution of 8-bit codes with float output that the interpreter runs for a `Conv` of
/// dequantized operands (`interp::fuse`): inputs `x`, `w` (codes), `x_scale`, `w_scale` (one, or
/// one per output channel), `x_zero_point`, `w_zero_point`, then the float bias `B`; the
/// attributes are the `Conv`'s. `y = f32(sum) * (x_scale * w_scale[c]) + B[c]` for the exact
/// integer sums of output channel `c`, as `MatMulIntegerToFloat` scales its sums. With two more
/// inputs `y_scale`, `y_zero_point` (one each; `B` may then be empty), `y` is quantized as
/// `QuantizeLinear` quantizes it, into the zero point's 8-bit type.
pub(crate) fn eval_conv_integer_to_float(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, w) = (required(inputs, 0)?, required(inputs, 1)?);
    let (x_zero, w_zero) = (optional(inputs, 4), optional(inputs, 5));
    let sx = single(&to_f32s(required(inputs, 2)?)?, "x_scale")?;
    let shape = ConvShape::new(ctx, x.shape(), w.shape())?;
    let c_out = shape.c_out;
    let sw = scales(required(inputs, 3)?, c_out, "w_scale")?;
    let bias = optional(inputs, 6).map(to_f32s).transpose()?;
    if bias.as_ref().is_some_and(|b| b.len() != c_out) {
        return Err(ctx.error(format!("B does not hold {c_out} values")));
    }
    // With a scale and zero point after the bias, the output is quantized (a `QuantizeLinear`
    // reading the convolution, fused with it).
    let codes = match (optional(inputs, 7), optional(inputs, 8)) {
        (Some(ys), Some(zy)) => {
            let dtype = zy.dtype();
            if !matches!(dtype, DataType::Uint8 | DataType::Int8) {
                return Err(unsupported_type("the fused quantization", dtype));
            }
            let zy = single(&to_i64s(zy)?, "y_zero_point")? as f32;
            Some((single(&to_f32s(ys)?, "y_scale")?, zy, dtype))
        }
        _ => None,
    };
    let epilogue = Epilogue::Float {
        scale: sw.iter().map(|&s| sx * s).collect(),
        bias: bias.unwrap_or_default(),
        codes,
    };
    let x = (x, x_zero);
    match integer_conv(ctx, &shape, x, (w, w_zero, [1, 5]), Some(&epilogue))? {
        Conv::Done(y) => Ok(vec![y]),
        // Sums beyond the integer kernel's reach, as `int32`, through the same epilogue.
        Conv::Sums(sums) => {
            let sums = sums.into_int32(&shape.out_shape)?;
            let sums = sums.as_slice::<i32>()?;
            let plane = shape.geo.out_plane().max(1);
            let y = finish(&shape, &epilogue, |sink| {
                for (p, plane_sums) in sums.chunks_exact(plane).enumerate() {
                    // SAFETY: one call per plane, each plane whole.
                    unsafe { sink.store(p, 0, plane_sums) };
                }
                Ok(())
            })?;
            Ok(vec![y])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::{EvalCtx, NoSubgraphs};

    /// An 8-bit tensor of `shape` from a seed (xorshift).
    fn bytes(dtype: DataType, shape: &[usize], seed: u64) -> Tensor {
        let mut s = seed | 1;
        let len = shape.iter().product();
        let v: Vec<u8> = (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        Tensor::from_bytes(dtype, shape, &v).unwrap()
    }

    /// The kernel's sums at every level and the `f64` reference's, for one convolution.
    fn check(node: &Node, x: &Tensor, zx: i32, w: &Tensor, zw: &[i32]) {
        let ctx = EvalCtx {
            node,
            opset: 10,
            runner: &NoSubgraphs,
            prepared: None,
            memo: None,
        };
        let shape = ConvShape::new(&ctx, x.shape(), w.shape()).unwrap();
        let want = reference_conv(&shape, x, zx, w, zw).unwrap();
        for level in Level::supported() {
            let got = int32_conv(&shape, x, zx, (w, zw, None), level).unwrap();
            let got: Vec<f64> = got
                .as_slice::<i32>()
                .unwrap()
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            assert_eq!(got, want, "{level:?} {node:?}");
        }
    }

    /// A convolution of random bytes: `group` groups of `cg` input and `mg` output channels over
    /// `spatial` input dims, a square kernel, signs `sx` and `sw`, weight zero points per tensor
    /// or per output channel.
    struct Case {
        batch: usize,
        group: usize,
        cg: usize,
        mg: usize,
        spatial: Vec<usize>,
        kernel: usize,
        stride: usize,
        dilation: usize,
        pad: usize,
        sx: bool,
        sw: bool,
        per_channel: bool,
        seed: u64,
    }

    impl Case {
        /// Whether the dilated kernel fits the padded input.
        fn fits(&self) -> bool {
            let reach = (self.kernel - 1) * self.dilation + 1;
            self.spatial.iter().all(|&s| s + 2 * self.pad >= reach)
        }

        /// [`check`] of this case.
        fn check(&self) {
            let rank = self.spatial.len();
            let dt = |s: bool| if s { DataType::Int8 } else { DataType::Uint8 };
            let ints = |v: usize, n: usize| AttrValue::Ints(vec![v as i64; n]);
            let node = Node::new("ConvInteger", "c", ["x", "w"], ["y"])
                .with_attr("group", AttrValue::Int(self.group as i64))
                .with_attr("kernel_shape", ints(self.kernel, rank))
                .with_attr("strides", ints(self.stride, rank))
                .with_attr("dilations", ints(self.dilation, rank))
                .with_attr("pads", ints(self.pad, 2 * rank));
            let c_out = self.group * self.mg;
            let mut xs = vec![self.batch, self.group * self.cg];
            xs.extend(&self.spatial);
            let mut ws = vec![c_out, self.cg];
            ws.extend(vec![self.kernel; rank]);
            let seed = self.seed;
            let x = bytes(dt(self.sx), &xs, seed);
            let w = bytes(dt(self.sw), &ws, seed.wrapping_mul(31));
            let z = |s: bool, v: u64| {
                if s {
                    i32::from(v as u8 as i8)
                } else {
                    i32::from(v as u8)
                }
            };
            let zx = z(self.sx, seed >> 8);
            let zw: Vec<i32> = if self.per_channel {
                (0..c_out).map(|i| z(self.sw, seed >> (i % 48))).collect()
            } else {
                vec![z(self.sw, seed >> 16)]
            };
            check(&node, &x, zx, &w, &zw);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 64,
            failure_persistence: None,
            ..Default::default()
        })]
        /// Every level of the integer convolution gives the `f64` convolution's sums: grouped,
        /// strided, dilated and padded, over one to three spatial dims, on every sign
        /// combination, with zero points per tensor or per output channel.
        #[test]
        fn integer_convolution_matches_the_f64_convolution(
            rank in 1usize..4, batch in 1usize..3, group in 1usize..4, cg in 1usize..4,
            mg in 1usize..4, size in 1usize..7, kernel in 1usize..4, stride in 1usize..3,
            dilation in 1usize..3, pad in 0usize..3, sx: bool, sw: bool, per_channel: bool,
            seed: u64,
        ) {
            let size = if rank == 3 { size.min(4) } else { size };
            let case = Case {
                batch, group, cg, mg, spatial: vec![size; rank], kernel, stride, dilation, pad,
                sx, sw, per_channel, seed,
            };
            proptest::prop_assume!(case.fits());
            case.check();
        }

        /// The convolutions the direct kernel takes (one group, input channels in fours, one or
        /// two spatial dims) sum as the `f64` convolution does at every level: strided (one
        /// and two phases per dim), dilated and padded, grids of one to many tiles, with
        /// zero points per tensor or per output channel.
        #[test]
        fn direct_convolution_matches_the_f64_convolution(
            rank in 1usize..3, batch in 1usize..3, fours in 1usize..4, c_out in 1usize..20,
            height in 1usize..12, width in 1usize..40, kernel in 1usize..4, stride in 1usize..4,
            dilation in 1usize..3, pad in 0usize..3, sx: bool, sw: bool, per_channel: bool,
            seed: u64,
        ) {
            let spatial = if rank == 1 { vec![width] } else { vec![height, width] };
            let case = Case {
                batch, group: 1, cg: 4 * fours, mg: c_out, spatial, kernel, stride, dilation,
                pad, sx, sw, per_channel, seed,
            };
            proptest::prop_assume!(case.fits());
            case.check();
        }
    }

    /// Wide convolutions sum as the `f64` convolution does at every level: input channels of
    /// whole and partial chunks of 64 (the AMX tiles' depth) and output channels of whole and
    /// partial blocks of 32, pointwise and 3x3, strided.
    #[test]
    fn wide_direct_convolutions_sum_exactly() {
        let shapes = [
            (64, 32, 1, 1),
            (68, 40, 3, 1),
            (132, 70, 3, 2),
            (192, 33, 1, 2),
        ];
        for (i, (cg, mg, kernel, stride)) in shapes.into_iter().enumerate() {
            let case = Case {
                batch: 1,
                group: 1,
                cg,
                mg,
                spatial: vec![7, 11],
                kernel,
                stride,
                dilation: 1,
                pad: kernel / 2,
                sx: i % 2 == 0,
                sw: i < 2,
                per_channel: i % 2 == 1,
                seed: 91 + i as u64,
            };
            case.check();
        }
    }

    /// `QLinearConv` through the kernel requantises as the `f64` reference's sums do, per
    /// channel scales and bias included, for uint8 and int8 outputs.
    #[test]
    fn qlinear_conv_requantizes_the_kernel_sums_as_the_reference() {
        let node = Node::new(
            "QLinearConv",
            "c",
            ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"],
            ["y"],
        )
        .with_attr("pads", AttrValue::Ints(vec![1, 0, 1, 2]))
        .with_attr("strides", AttrValue::Ints(vec![1, 2]));
        let f = |v: Vec<f32>| Tensor::from_vec(DataType::Float, &[v.len()], v).unwrap();
        // Three input channels run the im2col kernel, eight the direct one where the CPU has
        // AVX-512 VNNI, or AVX2 for small filters (`small`: their pairs within the bound of
        // `Avx2Pairs`); the second filter's multiplier is too large for the bounded epilogue.
        let cases = [(DataType::Uint8, 0x70u8), (DataType::Int8, 0xf0)]
            .into_iter()
            .flat_map(|case| {
                [
                    (case, 3usize, 0.015f32, false),
                    (case, 8, 0.015, false),
                    (case, 8, 6000.0, false),
                    (case, 8, 0.015, true),
                    (case, 8, 6000.0, true),
                ]
            });
        for ((dt, zy), c_in, sw1, small) in cases {
            let x = bytes(dt, &[2, c_in, 9, 7], 11);
            let mut w = bytes(DataType::Int8, &[4, c_in, 3, 2], 12);
            if small {
                let v: Vec<u8> = w
                    .as_bytes()
                    .unwrap()
                    .iter()
                    .map(|&b| (b as i8 / 3) as u8)
                    .collect();
                w = Tensor::from_bytes(DataType::Int8, w.shape(), &v).unwrap();
            }
            let zx = Tensor::from_bytes(dt, &[], &[0x81]).unwrap();
            let zw = Tensor::from_bytes(DataType::Int8, &[4], &[0, 1, 0xff, 3]).unwrap();
            let zy = Tensor::from_bytes(dt, &[], &[zy]).unwrap();
            let (sx, sy) = (f(vec![0.02]), f(vec![0.3]));
            let sw = f(vec![0.01, sw1, 0.02, 0.005]);
            let b = Tensor::from_vec(DataType::Int32, &[4], vec![-900i32, 5, 40000, 7]).unwrap();
            let inputs = [&x, &sx, &zx, &w, &sw, &zw, &sy, &zy, &b].map(Some);
            let got = crate::ops::eval_node(&node, 10, &inputs).unwrap().remove(0);
            let ctx = EvalCtx {
                node: &node,
                opset: 10,
                runner: &NoSubgraphs,
                prepared: None,
                memo: None,
            };
            let shape = ConvShape::new(&ctx, x.shape(), w.shape()).unwrap();
            // The byte 0x81 as a zero point: -127 as int8, 129 as uint8.
            let zx = if dt == DataType::Int8 { -127 } else { 0x81 };
            let sums = reference_conv(&shape, &x, zx, &w, &[0, 1, -1, 3]).unwrap();
            let plane = shape.geo.out_plane();
            let mult: Vec<f64> = [0.01f32, sw1, 0.02, 0.005]
                .iter()
                .map(|&s| (0.02f32 * s / 0.3f32) as f64)
                .collect();
            let bias = [-900.0, 5.0, 40000.0, 7.0];
            let zy = if dt == DataType::Int8 { -16 } else { 0x70 };
            let want = requantize_offset(
                &Sums::F64(sums),
                |i| bias[(i / plane) % 4],
                |i| mult[(i / plane) % 4],
                zy,
                dt,
                &shape.out_shape,
            )
            .unwrap();
            let what = format!("{dt:?}, {c_in} channels, w_scale {sw1}, small {small}");
            assert_eq!(got.as_bytes().unwrap(), want.as_bytes().unwrap(), "{what}");
        }
    }

    /// Filters whose pairs of adjacent k mostly stay within the bound of `Avx2Pairs` (one
    /// weight in 29 beyond), which AVX2 runs on the direct kernel with the rest as a residual:
    /// every level sums as the `f64` convolution does, strided and padded, signed and unsigned.
    #[test]
    fn direct_convolution_of_bounded_filters_sums_exactly() {
        for (c_in, c_out, size, stride, sx) in [
            (4usize, 3usize, 9usize, 1usize, false),
            (8, 9, 13, 2, true),
            (16, 17, 7, 1, false),
        ] {
            let node = Node::new("ConvInteger", "c", ["x", "w"], ["y"])
                .with_attr("pads", AttrValue::Ints(vec![1, 0, 1, 2]))
                .with_attr("strides", AttrValue::Ints(vec![stride as i64; 2]));
            let dt = if sx { DataType::Int8 } else { DataType::Uint8 };
            let x = bytes(dt, &[2, c_in, size, size + 3], 5);
            let w = bytes(DataType::Int8, &[c_out, c_in, 3, 3], 6);
            let v: Vec<u8> = (w.as_bytes().unwrap().iter().enumerate())
                .map(|(i, &b)| {
                    if i % 29 == 3 {
                        b | 0x80
                    } else {
                        (b as i8 / 4) as u8
                    }
                })
                .collect();
            let w = Tensor::from_bytes(DataType::Int8, w.shape(), &v).unwrap();
            for zw in [vec![0], (0..c_out as i32).map(|i| i - 4).collect()] {
                check(&node, &x, 0x33, &w, &zw);
            }
        }
    }

    #[test]
    fn extreme_bytes_and_zero_points_sum_exactly() {
        // 255 x -128 at every tap, with padding read as the zero point.
        let node = Node::new("ConvInteger", "c", ["x", "w"], ["y"])
            .with_attr("pads", AttrValue::Ints(vec![1, 2, 1, 2]));
        for (vx, vw, sx, sw) in [
            (0xffu8, 0x80u8, false, true),
            (0x80, 0x80, true, true),
            (0, 0xff, false, false),
        ] {
            let dt = |s: bool| if s { DataType::Int8 } else { DataType::Uint8 };
            let x = Tensor::from_bytes(dt(sx), &[1, 40, 5, 7], &[vx; 40 * 35]).unwrap();
            let w = Tensor::from_bytes(dt(sw), &[3, 40, 3, 3], &[vw; 3 * 40 * 9]).unwrap();
            for (zx, zw) in [
                (0, 0),
                (if sx { -128 } else { 255 }, if sw { 127 } else { 0 }),
            ] {
                check(&node, &x, zx, &w, &[zw]);
            }
        }
    }
}
