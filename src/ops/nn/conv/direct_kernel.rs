//! The `f32` kernels of direct convolutions on x86-64, with AVX2 and FMA or with AVX-512F: a
//! block of filters by a run of output positions, every tap of every input channel summed in
//! registers, reading the input where it lies in a padded, phase-split copy (see
//! `PhaseLayout` of `depthwise.rs`).
//!
//! A convolution by matrix product (im2col, or the shifted copies of a unit-stride one) writes
//! and reads a copy of the input per width tap and adds each height tap's product onto the
//! output in memory; here the input is copied once and each output element is written once.
//! The kernel holds `R x V` vectors of sums (`R` filters, `V` vectors of [`Kernel::lanes`]
//! positions) and, per tap, loads `V` vectors of input and broadcasts `R` weights. Both
//! instruction sets run the one tile loop (`x86::tiles`), over the vector type of their level.
//!
//! Every output sums its taps in the same order with fused multiply-adds from the bias, so the
//! two kernels give the same bits.
//!
//! Why one file: the packing of the weights (`Packed`, blocks of `tall` or `short` filters tap
//! by tap), the tile loop that reads them and the shapes of both levels are one layout contract;
//! a change of block height, tile width or chunk of taps is one edit read in one place, with
//! the tests that hold the two levels to the same bits beside it.

use crate::error::{Error, Result};
use crate::tensor::Scratch;

/// An instruction set with a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Level {
    /// AVX2 and FMA: eight `f32` per vector, sixteen vector registers.
    Avx2,
    /// AVX-512F: sixteen `f32` per vector, thirty-two vector registers.
    Avx512,
}

impl Level {
    /// The levels, best first.
    pub const ALL: [Level; 2] = [Level::Avx512, Level::Avx2];

    /// Whether this CPU has the instructions of the level.
    fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Level::Avx2 => {
                    std::arch::is_x86_feature_detected!("avx2")
                        && std::arch::is_x86_feature_detected!("fma")
                }
                Level::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = self;
            false
        }
    }

    /// The block heights and tile widths of the level's kernel.
    const fn shape(self) -> Shape {
        match self {
            Level::Avx2 => AVX2,
            Level::Avx512 => AVX512,
        }
    }
}

/// The blocks and tiles of one kernel.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// Filters per block. Filters go in blocks of `tall`, the last ones in blocks of `short`
    /// where that needs fewer padding rows: the last one to `short` filters take one short
    /// block, the last `tall + 1` to `2 * short` two. No block pads `short` rows or more, and
    /// multiples of `short` pad none.
    tall: usize,
    /// Filters in a short block.
    short: usize,
    /// `f32` per vector.
    lanes: usize,
    /// Vectors per tile of positions; the rest of a row in tiles of two and one vectors.
    vectors: usize,
}

/// AVX2 and FMA: blocks of six filters by tiles of two vectors, twelve sums in registers, the
/// most the sixteen registers hold beside the input vectors and the broadcast weight: twelve
/// independent fused multiply-adds per tap, enough to cover their latency on both FMA pipes.
const AVX2: Shape = Shape {
    tall: 6,
    short: 4,
    lanes: 8,
    vectors: 2,
};

/// AVX-512F: blocks of eight filters by tiles of three vectors (48 positions), 24 sums in the
/// 32 registers; per tap three input loads and eight broadcast weights feed 24 multiply-adds,
/// enough to keep both 512-bit FMA pipes busy. Sixteen and thirty-two filters fill their
/// blocks; the last one to four filters take a block of four.
///
/// Twelve filters by two vectors (also 24 sums; 16 and 32 filters as 8 + 8 and 12 + 12 + 8, 14
/// loads per tap against 11) measured 4-6 % slower on each direct convolution of the generated
/// conv-net (`--profile`), though the same on the whole net. In a loop of the kernel alone over
/// those shapes, six by four measured as eight by three; eight by two, fourteen by two and
/// sixteen by one slower.
///
/// Measured on an Intel Xeon with AVX-512 (`lscpu`: "Intel(R) Xeon(R) Processor", family 6
/// model 167, a Sapphire Rapids class virtual machine) against the AVX2 kernel alone on the
/// generated conv-net (`convnet320.onnx`), `multigather run --repeat 200`, three interleaved
/// runs each: at 1 thread medians 4.01-4.09 -> 3.27-3.53 ms (minima 3.73-3.84 -> 3.08-3.14),
/// at 2 threads 2.74-2.89 -> 2.37-2.62 ms (minima 2.44-2.62 -> 2.12-2.36); per node
/// (`--profile`, 1 thread) 64 to 32 channels 3x3 over 40x40 0.63 -> 0.39 ms, 16 to 16 over
/// 80x80 0.34 -> 0.22 ms, the 3-channel stride-2 stem (27 taps, where copying the input and
/// the sums weighs most) 0.41 -> 0.35-0.38 ms. The outputs are the same bits.
const AVX512: Shape = Shape {
    tall: 8,
    short: 4,
    lanes: 16,
    vectors: 3,
};

/// Taps summed over every tile of a row before the next ones: sixteen channels of a 3x3
/// filter, a few KiB of weights and input rows. Measured on Zen 3 (AMD EPYC, AVX2) at 1
/// thread, minima of `multigather run --repeat 60` on single 3x3 convolutions of ResNet-50
/// (two alternated runs per chunk): 128 channels at stride 2 over 56x56 3.93-4.33 ms with
/// all taps in one chunk, 3.47-3.53 with 72, 3.65-3.74 with 144; 256 channels over 14x14
/// 3.23-3.27, 2.97-2.99, 2.93-2.94; 512 over 7x7 (one band, so nothing to reuse)
/// 3.21-3.24, 3.32-3.51, 3.32-3.35.
pub(super) const TAP_CHUNK: usize = 144;

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

/// Weights in blocks of filters of a kernel's heights, each block tap by tap (`rows` weights
/// per tap, zero for the padding filters). Constant weights are packed once per plan (the
/// convolution keeps them, `KeptFilters`); the bias is laid out per call
/// ([`Packed::bias`]), as it may not be a constant.
pub(super) struct Packed {
    w: Scratch<f32>,
    /// The kernel whose blocks these are.
    kernel: Kernel,
    filters: usize,
    taps: usize,
    /// Each block's first filter, its height (`tall` or `short` of the kernel's [`Shape`]) and
    /// its first row in `bias` (its weights start `taps` times further into `w`).
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
    /// `filters` filters of `taps` weights each (filter `m` is `row(m)`, of `taps` weights) in
    /// the blocks of `kernel`.
    pub fn new<'r>(
        kernel: Kernel,
        filters: usize,
        taps: usize,
        row: impl Fn(usize) -> std::borrow::Cow<'r, [f32]>,
    ) -> Result<Packed> {
        let Shape { tall, short, .. } = kernel.0.shape();
        let mut blocks = Vec::new();
        let (mut first, mut at) = (0, 0);
        while first < filters {
            let rest = filters - first;
            let rows = if rest > 2 * short || (short + 1..=tall).contains(&rest) {
                tall
            } else {
                short
            };
            blocks.push(Block { first, rows, at });
            first += rows;
            at += rows;
        }
        let len = at
            .checked_mul(taps)
            .ok_or_else(|| Error::Eval("the packed weights of a convolution overflow".into()))?;
        let mut w = Scratch::new(len, 0.0)?;
        for blk in &blocks {
            let dst = &mut w[blk.at * taps..][..blk.rows * taps];
            for i in 0..blk.rows.min(filters - blk.first) {
                let row = row(blk.first + i);
                if row.len() != taps {
                    return Err(Error::Eval(format!(
                        "a filter of a convolution holds {} weights, not {taps}",
                        row.len()
                    )));
                }
                for (t, &v) in row.iter().enumerate() {
                    dst[t * blk.rows + i] = v;
                }
            }
        }
        Ok(Packed {
            w,
            kernel,
            filters,
            taps,
            blocks,
        })
    }

    /// Whether these are `filters` filters of `taps` weights in the blocks of `kernel`.
    pub fn fits(&self, kernel: Kernel, filters: usize, taps: usize) -> bool {
        self.kernel.0 == kernel.0 && self.filters == filters && self.taps == taps
    }

    /// `bias` (one value per filter, or none: zeros) in the rows of the blocks, zero for the
    /// padding filters, as [`Kernel::row`] reads it.
    pub fn bias(&self, bias: Option<&[f32]>) -> Result<Scratch<f32>> {
        let rows = self.blocks.last().map_or(0, |b| b.at + b.rows);
        let mut laid = Scratch::new(rows, 0.0)?;
        if let Some(bias) = bias {
            if bias.len() != self.filters {
                return Err(Error::Eval(format!(
                    "B holds {} values for {} filters",
                    bias.len(),
                    self.filters
                )));
            }
            for blk in &self.blocks {
                let n = blk.rows.min(self.filters - blk.first);
                laid[blk.at..][..n].copy_from_slice(&bias[blk.first..][..n]);
            }
        }
        Ok(laid)
    }

    /// The blocks of filters.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }
}

/// The instruction set of a kernel, checked on this CPU: the proof that calling it is sound.
#[derive(Clone, Copy, Debug)]
pub(super) struct Kernel(Level);

impl Kernel {
    /// The best kernel this CPU has: AVX-512F, else AVX2 and FMA, else none.
    pub fn detect() -> Option<Kernel> {
        #[cfg(test)]
        if let Some(level) = testing::forced() {
            return Kernel::with_level(level);
        }
        Level::ALL.into_iter().find_map(Kernel::with_level)
    }

    /// The kernel of `level`, if this CPU has it.
    pub fn with_level(level: Level) -> Option<Kernel> {
        level.available().then_some(Kernel(level))
    }

    /// Output positions per vector: the caller computes whole vectors, so it rounds its widths
    /// up to a multiple of this and leaves as many readable elements past its input.
    pub fn lanes(self) -> usize {
        self.0.shape().lanes
    }

    /// The most rows (filters and padding) in one block of [`Packed`] for this kernel.
    pub fn rows(self) -> usize {
        self.0.shape().tall
    }

    /// Output positions `q0 .. q0 + width` (`width` a whole number of [`Kernel::lanes`]) of
    /// the filters of `block` into `out` (`block.rows` rows of `width`): position `q` sums
    /// `w[t] * x[q + offsets[t]]` over the taps, from the bias (laid out by [`Packed::bias`]).
    #[allow(clippy::too_many_arguments)]
    pub fn row(
        self,
        x: &[f32],
        taps: &Taps,
        packed: &Packed,
        bias: &[f32],
        block: Block,
        q0: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let shape = self.0.shape();
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
        if !width.is_multiple_of(shape.lanes)
            || out.len() != rows * width
            || !fits
            || !weights
            || taps.len() != packed.taps
            || packed.kernel.0 != self.0
            || bias.len() < block.at + rows
            || !(rows == shape.tall || rows == shape.short)
        {
            return Err(Error::Eval(
                "a direct convolution tile out of its buffers".into(),
            ));
        }
        let w = &packed.w[block.at * packed.taps..][..rows * packed.taps];
        let bias = &bias[block.at..][..rows];
        #[cfg(target_arch = "x86_64")]
        {
            use x86::{F32x16, F32x8, Vector};
            let (x, offsets, w) = (x[q0..].as_ptr(), &taps.offsets[..], w.as_ptr());
            // SAFETY: `Kernel` exists only where its level's instructions were detected, and
            // each arm runs the vectors of its level; every read is at most `reach + width - 1`
            // past `x` (checked above), every write inside `out` (`rows` rows of `width`, a
            // whole number of the level's vectors), and `w` holds `rows` weights per tap (the
            // arm's `R`, as `rows` is `tall` or `short`).
            unsafe {
                match (self.0, rows == shape.tall) {
                    (Level::Avx2, true) => {
                        F32x8::row::<{ AVX2.tall }, { AVX2.vectors }>(x, offsets, w, bias, out)
                    }
                    (Level::Avx2, false) => {
                        F32x8::row::<{ AVX2.short }, { AVX2.vectors }>(x, offsets, w, bias, out)
                    }
                    (Level::Avx512, true) => {
                        F32x16::row::<{ AVX512.tall }, { AVX512.vectors }>(x, offsets, w, bias, out)
                    }
                    (Level::Avx512, false) => F32x16::row::<{ AVX512.short }, { AVX512.vectors }>(
                        x, offsets, w, bias, out,
                    ),
                }
            }
            Ok(())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (w, bias);
            Err(Error::Eval(
                "no direct convolution kernel on this CPU".into(),
            ))
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// The vector operations of the tile loop, for one instruction set. The methods are
    /// inlined into [`Vector::row`] of their level, compiled with its instructions.
    ///
    /// # Safety
    /// The implementor's instructions must be enabled where its methods run (which
    /// [`Vector::row`] ensures).
    pub(super) unsafe trait Vector: Copy {
        /// `f32` per vector.
        const LANES: usize;

        /// Every lane `v`.
        ///
        /// # Safety
        /// The instructions of the vectors are enabled.
        unsafe fn splat(v: f32) -> Self;

        /// The vector at `p` (unaligned).
        ///
        /// # Safety
        /// The instructions of the vectors are enabled; `p` is readable for [`Vector::LANES`].
        unsafe fn load(p: *const f32) -> Self;

        /// `a * b + c`, fused.
        ///
        /// # Safety
        /// The instructions of the vectors are enabled.
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self;

        /// Stores `self` at `p` (unaligned).
        ///
        /// # Safety
        /// The instructions of the vectors are enabled; `p` is writable for [`Vector::LANES`].
        unsafe fn store(self, p: *mut f32);

        /// See [`super::Kernel::row`] for `R` filters, compiled with the instructions of the
        /// vectors: `x` points at position `q0`, `out` holds `R` rows of the width.
        ///
        /// # Safety
        /// The instructions of the vectors; `x` readable up to `max(offsets) + width`
        /// elements, `w` for `R` per tap, `bias` holding `R` values, `out` `R` rows of `width`,
        /// a whole number of [`Vector::LANES`].
        unsafe fn row<const R: usize, const N: usize>(
            x: *const f32,
            offsets: &[usize],
            w: *const f32,
            bias: &[f32],
            out: &mut [f32],
        );
    }

    // `Kernel::row` checks its widths against the lanes of the shapes.
    const _: () = assert!(
        F32x8::LANES == super::AVX2.lanes && F32x16::LANES == super::AVX512.lanes,
        "the vectors have the lanes of their shapes"
    );

    /// AVX2 and FMA vectors.
    #[derive(Clone, Copy)]
    pub(super) struct F32x8(__m256);

    /// AVX-512F vectors.
    #[derive(Clone, Copy)]
    pub(super) struct F32x16(__m512);

    // SAFETY: `row` enables AVX2 and FMA, which the methods use, and inlines them.
    unsafe impl Vector for F32x8 {
        const LANES: usize = 8;

        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            // SAFETY: the caller's AVX.
            F32x8(unsafe { _mm256_set1_ps(v) })
        }

        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's AVX and bounds.
            F32x8(unsafe { _mm256_loadu_ps(p) })
        }

        #[inline(always)]
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: the caller's FMA.
            F32x8(unsafe { _mm256_fmadd_ps(a.0, b.0, c.0) })
        }

        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's AVX and bounds.
            unsafe { _mm256_storeu_ps(p, self.0) }
        }

        #[target_feature(enable = "avx2,fma")]
        unsafe fn row<const R: usize, const N: usize>(
            x: *const f32,
            offsets: &[usize],
            w: *const f32,
            bias: &[f32],
            out: &mut [f32],
        ) {
            // SAFETY: the caller's bounds; AVX2 and FMA enabled here.
            unsafe { tiles::<Self, R, N>(x, offsets, w, bias, out) }
        }
    }

    // SAFETY: `row` enables AVX-512F, which the methods use, and inlines them.
    unsafe impl Vector for F32x16 {
        const LANES: usize = 16;

        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            // SAFETY: the caller's AVX-512F.
            F32x16(unsafe { _mm512_set1_ps(v) })
        }

        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's AVX-512F and bounds.
            F32x16(unsafe { _mm512_loadu_ps(p) })
        }

        #[inline(always)]
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: the caller's AVX-512F.
            F32x16(unsafe { _mm512_fmadd_ps(a.0, b.0, c.0) })
        }

        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's AVX-512F and bounds.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }

        #[target_feature(enable = "avx512f")]
        unsafe fn row<const R: usize, const N: usize>(
            x: *const f32,
            offsets: &[usize],
            w: *const f32,
            bias: &[f32],
            out: &mut [f32],
        ) {
            // SAFETY: the caller's bounds; AVX-512F enabled here.
            unsafe { tiles::<Self, R, N>(x, offsets, w, bias, out) }
        }
    }

    /// The tiles of [`Vector::row`]: tiles of `N` vectors, then one of two (if `N` is more)
    /// and of one for the rest.
    ///
    /// # Safety
    /// As [`Vector::row`].
    #[inline(always)]
    unsafe fn tiles<L: Vector, const R: usize, const N: usize>(
        x: *const f32,
        offsets: &[usize],
        w: *const f32,
        bias: &[f32],
        out: &mut [f32],
    ) {
        let width = out.len() / R;
        let bias: [f32; R] = std::array::from_fn(|i| bias[i]);
        // The taps in chunks, each summed over all the tiles before the next: a chunk's
        // weights and input rows stay in L1 from one tile to the next, and each tile's sums go
        // through `out` between chunks (exactly: each output still sums its taps in order).
        for (c, chunk) in offsets.chunks(super::TAP_CHUNK).enumerate() {
            // SAFETY: the chunk's weights are `R` per tap from its first tap's.
            let w = unsafe { w.add(c * super::TAP_CHUNK * R) };
            let from = if c == 0 {
                Start::Bias(bias)
            } else {
                Start::Out
            };
            let mut j = 0;
            while j + N * L::LANES <= width {
                // SAFETY: `N` vectors from column `j` lie inside the width.
                unsafe { tile::<L, R, N>(x.add(j), chunk, w, from, out, width, j) };
                j += N * L::LANES;
            }
            if N > 2 && j + 2 * L::LANES <= width {
                // SAFETY: two vectors from column `j` lie inside the width.
                unsafe { tile::<L, R, 2>(x.add(j), chunk, w, from, out, width, j) };
                j += 2 * L::LANES;
            }
            while j < width {
                // SAFETY: the width is a whole number of vectors, so one more lies inside it.
                unsafe { tile::<L, R, 1>(x.add(j), chunk, w, from, out, width, j) };
                j += L::LANES;
            }
        }
    }

    /// Where a tile's sums start: from the bias (the first chunk of taps) or from what the
    /// chunks before left in `out`.
    #[derive(Clone, Copy)]
    enum Start<const R: usize> {
        Bias([f32; R]),
        Out,
    }

    /// How far ahead of the tap being summed its weights are prefetched, in `f32`: a few hundred
    /// cycles of taps. Measured on an Intel Xeon (family 6 model 167) at 1 thread, twelve 3x3
    /// convolutions of 512 channels over 7x7 in a chain (113 MB of weights, `--profile`):
    /// 44.5 ms without, 33.2 at 128, 21.0 at 512, 20.7 at 1024, 22.5 at 2048 (one alone: 1.75).
    const PREFETCH: usize = 512;

    /// `N` vectors of positions from `x` for `R` filters, written at column `j` of the rows of
    /// `out` (of `width`).
    ///
    /// # Safety
    /// `L`'s instructions; `x` readable up to `max(offsets) + N * LANES` elements, `w` for `R`
    /// per tap, `j + N * LANES <= width`.
    #[inline(always)]
    unsafe fn tile<L: Vector, const R: usize, const N: usize>(
        x: *const f32,
        offsets: &[usize],
        w: *const f32,
        start: Start<R>,
        out: &mut [f32],
        width: usize,
        j: usize,
    ) {
        // SAFETY (whole function): the caller's instructions and bounds; `wt` advances `R` per
        // tap.
        let mut acc: [[L; N]; R] = match start {
            Start::Bias(bias) => bias.map(|b| [unsafe { L::splat(b) }; N]),
            Start::Out => std::array::from_fn(|i| {
                let src = &out[i * width + j..][..N * L::LANES];
                // SAFETY: `src` holds `N` vectors.
                std::array::from_fn(|v| unsafe { L::load(src.as_ptr().add(v * L::LANES)) })
            }),
        };
        let mut wt = w;
        for &off in offsets {
            // The weights stream from memory once per block when they are larger than the
            // caches (ResNet-50's 3x3 convolutions of 512 channels over 7x7 read 9.4 MB for
            // 64 positions); the hardware prefetcher stops at each 4 KiB page.
            // SAFETY: SSE is part of x86-64; a prefetch does not fault, wherever it points.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(wt.wrapping_add(PREFETCH).cast()) };
            let xp = unsafe { x.add(off) };
            let xs: [L; N] = std::array::from_fn(|v| unsafe { L::load(xp.add(v * L::LANES)) });
            for (i, row) in acc.iter_mut().enumerate() {
                let wb = unsafe { L::splat(*wt.add(i)) };
                for (a, &xv) in row.iter_mut().zip(&xs) {
                    *a = unsafe { L::fmadd(wb, xv, *a) };
                }
            }
            wt = unsafe { wt.add(R) };
        }
        for (i, row) in acc.iter().enumerate() {
            let dst = &mut out[i * width + j..][..N * L::LANES];
            for (v, a) in row.iter().enumerate() {
                // SAFETY: `dst` holds `N` vectors.
                unsafe { a.store(dst.as_mut_ptr().add(v * L::LANES)) };
            }
        }
    }
}

/// A way for tests to run the convolutions on one level's kernel.
#[cfg(test)]
pub(super) mod testing {
    use super::Level;
    use std::sync::{Mutex, PoisonError};

    /// The level [`super::Kernel::detect`] returns, if set.
    static FORCED: Mutex<Option<Level>> = Mutex::new(None);
    /// Held while a level is forced, so tests force one level at a time.
    static TURN: Mutex<()> = Mutex::new(());

    /// The forced level.
    pub(super) fn forced() -> Option<Level> {
        *FORCED.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` with [`super::Kernel::detect`] returning `level`'s kernel (or none, where the
    /// CPU lacks it). Other tests running meanwhile get that level too: every kernel gives the
    /// same bits.
    pub fn with_level<T>(level: Level, f: impl FnOnce() -> T) -> T {
        /// Clears the forced level when dropped, even if `f` panics.
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                *FORCED.lock().unwrap_or_else(PoisonError::into_inner) = None;
            }
        }
        let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
        *FORCED.lock().unwrap_or_else(PoisonError::into_inner) = Some(level);
        // Dropped before `_turn`: the next test forces its level after this one is cleared.
        let _reset = Reset;
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sum_t w[m][t] * x[q + offsets[t]] + bias[m]` for filter `m` at position `q`, in the
    /// kernel's order (exact on the small integers of the tests).
    fn reference(
        x: &[f32],
        offsets: &[usize],
        w: &[Vec<f32>],
        bias: &[f32],
        m: usize,
        q: usize,
    ) -> f32 {
        offsets
            .iter()
            .zip(&w[m])
            .fold(bias[m], |acc, (&off, &wv)| wv.mul_add(x[q + off], acc))
    }

    #[test]
    fn each_level_sums_every_block_height_and_tail_of_positions() {
        // Filter counts around both levels' block heights, widths of one to five vectors (so
        // tiles of two vectors and a tail of one), at an offset into the input.
        let offsets = vec![0, 1, 2, 9, 10, 11, 18, 19, 20, 37];
        let taps = Taps::new(offsets.clone());
        let levels: Vec<Kernel> = Level::ALL
            .into_iter()
            .filter_map(Kernel::with_level)
            .collect();
        for kernel in levels {
            let lanes = kernel.lanes();
            for filters in [1, 2, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 20, 24, 25, 32, 33] {
                let w: Vec<Vec<f32>> = (0..filters)
                    .map(|m| {
                        (0..offsets.len())
                            .map(|t| ((m * 5 + t * 3) % 7) as f32 - 3.0)
                            .collect()
                    })
                    .collect();
                let bias: Vec<f32> = (0..filters).map(|m| m as f32 - 2.5).collect();
                let packed =
                    Packed::new(kernel, filters, offsets.len(), |m| w[m][..].into()).unwrap();
                let laid = packed.bias(Some(&bias)).unwrap();
                assert!(packed.blocks().iter().all(|b| b.rows <= kernel.rows()));
                let pad: usize = packed.blocks().iter().map(|b| b.rows).sum::<usize>() - filters;
                assert!(
                    pad < kernel.0.shape().short,
                    "{kernel:?} {filters}: {pad} padding rows"
                );
                for vectors in 1..=5 {
                    let width = vectors * lanes;
                    let q0 = 3;
                    let x: Vec<f32> = (0..q0 + taps.reach + width)
                        .map(|i| ((i * 7) % 11) as f32 - 5.0)
                        .collect();
                    for &block in packed.blocks() {
                        let mut out = vec![f32::NAN; block.rows * width];
                        kernel
                            .row(&x, &taps, &packed, &laid, block, q0, &mut out)
                            .unwrap();
                        for (i, row) in out.chunks_exact(width).enumerate() {
                            let m = block.first + i;
                            for (q, &v) in row.iter().enumerate() {
                                let want = match m < filters {
                                    true => reference(&x, &offsets, &w, &bias, m, q0 + q),
                                    false => 0.0,
                                };
                                assert_eq!(
                                    v, want,
                                    "{kernel:?} {filters} filters, row {m}, position {q}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn chunks_of_taps_keep_each_sum_in_the_order_of_its_taps() {
        // More than two chunks of taps on values whose sums round: every output is the chain
        // of fused multiply-adds over its taps in order, from the bias, bit for bit.
        let n = 2 * TAP_CHUNK + 7;
        let offsets: Vec<usize> = (0..n).map(|t| (t % 9) + 21 * (t / 9)).collect();
        let taps = Taps::new(offsets.clone());
        let val = |i: usize| ((i * 7919) % 1013) as f32 / 97.0 - 5.1;
        for kernel in Level::ALL.into_iter().filter_map(Kernel::with_level) {
            let filters = kernel.rows() + 1;
            let w: Vec<Vec<f32>> = (0..filters)
                .map(|m| (0..n).map(|t| val(m * n + t + 5)).collect())
                .collect();
            let bias: Vec<f32> = (0..filters).map(|m| val(m) * 3.0).collect();
            let packed = Packed::new(kernel, filters, n, |m| w[m][..].into()).unwrap();
            let laid = packed.bias(Some(&bias)).unwrap();
            let width = 5 * kernel.lanes();
            let x: Vec<f32> = (0..taps.reach + width).map(|i| val(i + 77)).collect();
            for &block in packed.blocks() {
                let mut out = vec![f32::NAN; block.rows * width];
                kernel
                    .row(&x, &taps, &packed, &laid, block, 0, &mut out)
                    .unwrap();
                for (i, row) in out.chunks_exact(width).enumerate() {
                    let m = block.first + i;
                    for (q, &v) in row.iter().enumerate().filter(|_| m < filters) {
                        let want = reference(&x, &offsets, &w, &bias, m, q);
                        assert_eq!(v.to_bits(), want.to_bits(), "{kernel:?} row {m} at {q}");
                    }
                }
            }
        }
    }

    #[test]
    fn tiles_past_their_buffers_are_errors() {
        let taps = Taps::new(vec![0, 4]);
        for kernel in Level::ALL.into_iter().filter_map(Kernel::with_level) {
            let lanes = kernel.lanes();
            let packed = Packed::new(kernel, 3, 2, |_| [1.0, 2.0][..].into()).unwrap();
            let bias = packed.bias(None).unwrap();
            let block = packed.blocks()[0];
            let x = vec![0.0; 4 + 2 * lanes];
            let mut out = vec![0.0; block.rows * 2 * lanes];
            assert!(kernel
                .row(&x, &taps, &packed, &bias, block, 0, &mut out)
                .is_ok());
            // One position too far, a width of a part of a vector, a short output.
            assert!(kernel
                .row(&x, &taps, &packed, &bias, block, 1, &mut out)
                .is_err());
            let mut part = vec![0.0; block.rows * (lanes + 1)];
            assert!(kernel
                .row(&x, &taps, &packed, &bias, block, 0, &mut part)
                .is_err());
            assert!(kernel
                .row(&x, &taps, &packed, &bias, block, 0, &mut out[1..])
                .is_err());
            // Taps that do not match the weights.
            let three = Taps::new(vec![0, 1, 2]);
            assert!(kernel
                .row(&x, &three, &packed, &bias, block, 0, &mut out)
                .is_err());
            // A bias shorter than the blocks, weights packed for another filter count.
            assert!(kernel
                .row(&x, &taps, &packed, &[], block, 0, &mut out)
                .is_err());
            assert!(!packed.fits(kernel, 4, 2) && packed.fits(kernel, 3, 2));
            // A filter of the wrong length.
            assert!(Packed::new(kernel, 3, 2, |_| [1.0][..].into()).is_err());
        }
    }
}
