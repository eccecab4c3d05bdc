//! The output loop and the row kernels that write the output.
//!
//! [`drive`] walks a range of output elements as rows of the innermost canonical dimension,
//! keeping the input base offset and the offset-table position up to date with an odometer over
//! the outer dimensions. Each row goes to a [`RowSink`], which knows how to write elements of its
//! representation, always front to back:
//!
//! - [`ByteSink`] for whole-byte elements (1, 2, 4, 8, 16 bytes): block copies when the row is
//!   contiguous in the input (inlined fixed-width copies for rows of 4 to 64 bytes; runs of rows
//!   of at least 128 bytes with a [`BlockCopy`]: non-temporal stores into an output too large
//!   for the caches, 64-byte vector copies otherwise; `memcpy` where the CPU has neither),
//!   element gathers when the row is an index dimension (hardware gathers from
//!   [`super::simd`] where enabled, an unrolled scalar loop otherwise), strided copies otherwise;
//! - [`PackedSink`] for 2-, 4- and 6-bit elements, bit by bit through a
//!   [`crate::tensor::packed::BitWriter`];
//! - [`StringSink`] for strings, which are cloned.
//!
//! Soundness of the unchecked input reads: the caller verifies, for every offset-table slice it
//! hands to [`drive`], that `max(T) + Layout::max_base < n_in` (see `super::check_bound`). Every
//! read is at `base + T[..] + j * stride` with `base + j * stride <= max_base`, so every read is
//! inside the input.

use std::mem::MaybeUninit;

use super::canon::Dim;
use super::elem::{GatherFn, Offset, Word};
use super::simd::{prefetch, store_fence, CopyFn};
use crate::tensor::packed::{self, BitWriter};

/// What the innermost canonical dimension is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inner {
    /// An index dimension: one offset-table entry per element.
    Gather,
    /// A block dimension contiguous in the input.
    Block,
    /// A block dimension with this input stride (> 1).
    Strided(usize),
}

impl Inner {
    /// The input element that each output element `j` in `js` of a row reads (`None`: a zero of
    /// mode `zero`), for the element-by-element sinks; arguments as in [`RowSink::row`].
    fn sources<O: Offset>(
        self,
        t: &[O],
        base: usize,
        tb: usize,
        js: std::ops::Range<usize>,
    ) -> impl Iterator<Item = Option<usize>> + '_ {
        let at = move |x: O| (x != O::NONE).then(|| base + x.to_usize());
        js.map(move |j| match self {
            Inner::Gather => at(t[tb.wrapping_add(j)]),
            Inner::Block => at(t[tb]).map(|s| s + j),
            Inner::Strided(stride) => at(t[tb]).map(|s| s + j * stride),
        })
    }

    pub fn of(dim: &Dim) -> Inner {
        match (dim.t_stride, dim.in_stride) {
            (0, 1) => Inner::Block,
            (0, s) => Inner::Strided(s),
            _ => Inner::Gather,
        }
    }
}

/// Writes rows of output elements, front to back.
pub(crate) trait RowSink<O: Offset> {
    /// Writes elements `j0..j1` of a row whose block dimensions put it at input offset `base`
    /// and whose offset-table entries start at `t[tb]`.
    ///
    /// When a streamed tile starts inside an index row, the row's start lies before the tile
    /// and `tb` is "negative" (wrapped); only `tb + j` for `j0 <= j < j1` is a valid position,
    /// so it must be computed with `wrapping_add`.
    fn row(&mut self, t: &[O], base: usize, tb: usize, j0: usize, j1: usize);
    /// Writes `count` whole rows of `n` elements of a block dimension; row `k` uses table
    /// entry `t[tb + k * step]` (`tb` as in [`RowSink::row`]).
    #[inline]
    fn block_rows(&mut self, t: &[O], base: usize, tb: usize, step: usize, count: usize, n: usize) {
        for k in 0..count {
            self.row(t, base, tb.wrapping_add(k * step), 0, n);
        }
    }
    /// Whether the offset-table slice about to be used allows 32-bit hardware gathers.
    fn allow_simd(&mut self, allow: bool);
}

/// Walks output elements `e0..e1`, feeding rows to `sink`; `t[0]` is table entry `t_origin`.
/// `coord` is scratch space.
///
/// When the innermost dimension is a block and the next one an index dimension (embedding
/// lookups, GatherND rows, middle-axis gathers), whole rows go to [`RowSink::block_rows`] in runs
/// along that index dimension, so the sink's loop sees many rows at once.
pub(crate) fn drive<O: Offset, S: RowSink<O>>(
    dims: &[Dim],
    e0: usize,
    e1: usize,
    t: &[O],
    t_origin: usize,
    coord: &mut Vec<usize>,
    sink: &mut S,
) {
    let Some((inner, outer)) = dims.split_last() else {
        return;
    };
    let n = inner.size;
    coord.clear();
    coord.resize(outer.len(), 0);
    let mut rest = e0 / n;
    let (mut base, mut tb) = (0usize, 0usize);
    for d in (0..outer.len()).rev() {
        coord[d] = rest % outer[d].size;
        rest /= outer[d].size;
        base += coord[d] * outer[d].in_stride;
        tb += coord[d] * outer[d].t_stride;
    }
    let batch = inner.t_stride == 0 && outer.last().is_some_and(|m| m.t_stride > 0);
    let mut j0 = e0 % n;
    let mut e = e0;
    while e < e1 {
        if batch && j0 == 0 {
            let m = outer.len() - 1;
            let rows = (outer[m].size - coord[m]).min((e1 - e) / n);
            if rows > 0 {
                let step = outer[m].t_stride;
                sink.block_rows(t, base, tb.wrapping_sub(t_origin), step, rows, n);
                e += rows * n;
                coord[m] += rows - 1;
                tb += (rows - 1) * step;
                advance(outer, coord, &mut base, &mut tb);
                continue;
            }
        }
        let j1 = n.min(j0 + (e1 - e));
        sink.row(t, base, tb.wrapping_sub(t_origin), j0, j1);
        e += j1 - j0;
        j0 = 0;
        advance(outer, coord, &mut base, &mut tb);
    }
}

/// One step of the odometer over the outer dimensions.
#[inline(always)]
fn advance(outer: &[Dim], coord: &mut [usize], base: &mut usize, tb: &mut usize) {
    for d in (0..outer.len()).rev() {
        coord[d] += 1;
        *base += outer[d].in_stride;
        *tb += outer[d].t_stride;
        if coord[d] < outer[d].size {
            break;
        }
        coord[d] = 0;
        *base -= outer[d].in_stride * outer[d].size;
        *tb -= outer[d].t_stride * outer[d].size;
    }
}

/// Output for whole-byte element types.
pub(crate) struct ByteSink<'a, W: Word> {
    input: &'a [W],
    /// The input payload plus its zeroed slack when the tensor has it (else the payload alone:
    /// the bound check then keeps the 4-byte loads of 1- and 2-byte elements inside it).
    padded: &'a [u8],
    out: &'a mut [MaybeUninit<W>],
    at: usize,
    inner: Inner,
    zero: bool,
    simd: Option<GatherFn<W>>,
    simd_allowed: bool,
    /// Prefetch the sources of upcoming elements and rows: the input is too large to stay in
    /// the caches, and the random order defeats the hardware prefetchers.
    prefetch: bool,
    /// Prefetch ahead of the hardware gathers (a larger input than for the scalar loop).
    prefetch_simd: bool,
    /// How runs of wide block rows are copied (see [`BlockCopy`]).
    block_copy: Option<BlockCopy>,
}

/// The copy of runs of block rows of at least [`WIDE_ROW_MIN_BYTES`].
#[derive(Clone, Copy)]
pub(crate) struct BlockCopy {
    pub copy: CopyFn,
    /// The copy's stores are non-temporal: a fence follows the run.
    pub streamed: bool,
}

/// Inputs larger than this are prefetched in software (see [`ByteSink`]); smaller ones mostly
/// sit in L2 or L3, where the extra instructions cost more than they save.
const PREFETCH_MIN_BYTES: usize = 8 << 20;
/// Inputs larger than this are prefetched ahead of hardware gathers. Measured on Zen 5 (a
/// last-axis gather of 1M elements, `gather --simd-levels`): from 16 and 32 MiB inputs the
/// prefetch takes AVX-512 from 1.4 to 1.0 ms and from 3.0 to 2.1 ms; from an 8 MiB input, which
/// stays in L3, it costs 0.27 against 0.50 ms.
const PREFETCH_SIMD_MIN_BYTES: usize = 16 << 20;
/// Element gathers prefetch the source of the element this many table entries ahead.
const PREFETCH_ELEMENTS: usize = 64;
/// Block rows prefetch the row about this many bytes ahead (at most 16 rows). Measured on Zen 5
/// with `multigather run --repeat 100` (medians of 7 interleaved runs, 1 thread): GatherND of
/// 100,000 rows of 256 bytes from a 16 MiB table 1.24 ms at 2048 bytes (8 rows ahead), 0.94 at
/// 4096, 0.97 at 8192 (32 rows), 1.03 at 16384 (64 rows); rows of 512, 1536 and 3072 bytes
/// (`gathernd_batch`, `gather_embed_f16`, `gather_embed`) are within noise from 2048 to 8192
/// bytes ahead, while one row ahead costs `gathernd_batch` 28% (0.266 against 0.208 ms with
/// ordinary stores) and no prefetch costs the fp16 lookup 3-5% (0.145 against 0.138-0.141).
const PREFETCH_ROW_BYTES: usize = 4096;
/// Runs of block rows at least this wide go through the [`BlockCopy`]; narrower ones use the
/// inlined fixed-width copies.
const WIDE_ROW_MIN_BYTES: usize = 128;
/// Cache line size for row prefetches.
const LINE: usize = 64;

impl<'a, W: Word> ByteSink<'a, W> {
    pub fn new(
        input: &'a [W],
        padded: &'a [u8],
        out: &'a mut [MaybeUninit<W>],
        inner: Inner,
        zero: bool,
        simd: Option<GatherFn<W>>,
        block_copy: Option<BlockCopy>,
    ) -> Self {
        ByteSink {
            block_copy,
            input,
            padded,
            out,
            at: 0,
            inner,
            zero,
            simd,
            simd_allowed: false,
            prefetch: std::mem::size_of_val(input) >= PREFETCH_MIN_BYTES,
            prefetch_simd: std::mem::size_of_val(input) >= PREFETCH_SIMD_MIN_BYTES,
        }
    }

    /// Copies `n` elements starting at input element `src` to output element `dst`.
    #[inline(always)]
    fn copy_block(&mut self, src: usize, dst: usize, n: usize) {
        let bytes = n * std::mem::size_of::<W>();
        // SAFETY: `src + n <= input.len()` by the bound check (see the module docs);
        // `dst + n <= out.len()` because `row` took `dst..dst + n` from `out` checked; the two
        // buffers are distinct allocations.
        unsafe {
            let s = self.input.as_ptr().add(src).cast::<u8>();
            let d = self.out.as_mut_ptr().add(dst).cast::<u8>();
            match bytes {
                4 => copy_fixed::<4>(s, d),
                8 => copy_fixed::<8>(s, d),
                12 => copy_fixed::<12>(s, d),
                16 => copy_fixed::<16>(s, d),
                24 => copy_fixed::<24>(s, d),
                32 => copy_fixed::<32>(s, d),
                48 => copy_fixed::<48>(s, d),
                64 => copy_fixed::<64>(s, d),
                _ => std::ptr::copy_nonoverlapping(s, d, bytes),
            }
        }
    }
}

/// Copies `N` bytes with inlined unaligned loads and stores.
///
/// # Safety
/// `src` must be readable and `dst` writable for `N` bytes, without overlap.
#[inline(always)]
unsafe fn copy_fixed<const N: usize>(src: *const u8, dst: *mut u8) {
    // SAFETY: forwarded to the caller.
    unsafe {
        dst.cast::<[u8; N]>()
            .write_unaligned(src.cast::<[u8; N]>().read_unaligned())
    }
}

impl<W: Word, O: Offset> RowSink<O> for ByteSink<'_, W> {
    #[inline]
    fn row(&mut self, t: &[O], base: usize, tb: usize, j0: usize, j1: usize) {
        let n = j1 - j0;
        let dst = self.at;
        self.at += n;
        let input = self.input;
        match self.inner {
            Inner::Gather => {
                let ts = &t[tb.wrapping_add(j0)..tb.wrapping_add(j1)];
                let out = &mut self.out[dst..dst + n];
                if self.zero {
                    for (o, &x) in out.iter_mut().zip(ts) {
                        o.write(if x == O::NONE {
                            W::default()
                        } else {
                            // SAFETY: bound check (module docs).
                            unsafe { *input.get_unchecked(base + x.to_usize()) }
                        });
                    }
                    return;
                }
                if let (Some(gather), true, Some(t32)) =
                    (self.simd, self.simd_allowed, O::as_u32(ts))
                {
                    // SAFETY: the bound check covers every `base + t32[i]`; `simd_allowed` says
                    // every `t32[i] <= i32::MAX` and that the 4-byte loads of 1- and 2-byte
                    // elements stay inside `padded` (the slack past the last element, or, without
                    // it, offsets that end far enough from it); `out` holds `t32.len()` elements.
                    unsafe {
                        let start = self.padded.as_ptr().add(base * std::mem::size_of::<W>());
                        let out = out.as_mut_ptr().cast::<W>();
                        if self.prefetch_simd {
                            gather_prefetch(gather, input, base, start, t32, out);
                        } else {
                            gather(start, t32, out);
                        }
                    }
                    return;
                }
                if self.prefetch {
                    gather_scalar_prefetch(input, base, ts, out);
                } else {
                    gather_scalar(input, base, ts, out);
                }
            }
            Inner::Block => {
                let x = t[tb];
                if self.zero && x == O::NONE {
                    self.out[dst..dst + n].fill(MaybeUninit::new(W::default()));
                } else {
                    // Checked here so the unsafe copy below only relies on the bound check.
                    let _ = &self.out[dst..dst + n];
                    self.copy_block(base + x.to_usize() + j0, dst, n);
                }
            }
            Inner::Strided(stride) => {
                let x = t[tb];
                let out = &mut self.out[dst..dst + n];
                if self.zero && x == O::NONE {
                    out.fill(MaybeUninit::new(W::default()));
                } else {
                    let start = base + x.to_usize() + j0 * stride;
                    for (i, o) in out.iter_mut().enumerate() {
                        // SAFETY: bound check (module docs).
                        o.write(unsafe { *input.get_unchecked(start + i * stride) });
                    }
                }
            }
        }
    }

    #[inline]
    fn block_rows(&mut self, t: &[O], base: usize, tb: usize, step: usize, count: usize, n: usize) {
        if self.zero || self.inner != Inner::Block {
            for k in 0..count {
                self.row(t, base, tb.wrapping_add(k * step), 0, n);
            }
            return;
        }
        let dst = self.at;
        let total = count * n;
        // Checked here so the unsafe copies below only rely on the bound check.
        let _ = &self.out[dst..dst + total];
        self.at += total;
        let entry = |k: usize| t[tb.wrapping_add(k * step)].to_usize();
        let row_bytes = n * std::mem::size_of::<W>();
        if let Some(BlockCopy { copy, streamed }) =
            self.block_copy.filter(|_| row_bytes >= WIDE_ROW_MIN_BYTES)
        {
            let ahead = PREFETCH_ROW_BYTES.div_ceil(row_bytes).clamp(1, 16);
            let at = |k: usize| {
                self.input
                    .as_ptr()
                    .wrapping_add(base + entry(k))
                    .cast::<u8>()
            };
            for k in 0..count {
                if self.prefetch && k + ahead < count {
                    let p = at(k + ahead);
                    for line in (0..row_bytes).step_by(LINE) {
                        prefetch(p.wrapping_add(line));
                    }
                }
                // SAFETY: as for `copy_block`: the source row is inside the input by the bound
                // check, the destination inside `out` (checked above).
                unsafe {
                    let d = self.out.as_mut_ptr().add(dst + k * n).cast::<u8>();
                    copy(at(k), d, row_bytes);
                }
            }
            if streamed {
                store_fence();
            }
            return;
        }
        if !self.prefetch {
            for k in 0..count {
                self.copy_block(base + entry(k), dst + k * n, n);
            }
            return;
        }
        let ahead = PREFETCH_ROW_BYTES.div_ceil(row_bytes).clamp(1, 16);
        for k in 0..count {
            if k + ahead < count {
                let p = self
                    .input
                    .as_ptr()
                    .wrapping_add(base + entry(k + ahead))
                    .cast::<u8>();
                for line in (0..row_bytes).step_by(LINE) {
                    prefetch(p.wrapping_add(line));
                }
            }
            self.copy_block(base + entry(k), dst + k * n, n);
        }
    }

    fn allow_simd(&mut self, allow: bool) {
        self.simd_allowed = allow;
    }
}

/// The scalar element gather, unrolled four ways so the loads overlap.
#[inline(always)]
fn gather_scalar<W: Word, O: Offset>(
    input: &[W],
    base: usize,
    ts: &[O],
    out: &mut [MaybeUninit<W>],
) {
    // SAFETY (all reads): bound check (module docs).
    let read = |x: O| unsafe { *input.get_unchecked(base + x.to_usize()) };
    let mut outs = out.chunks_exact_mut(4);
    let mut xs = ts.chunks_exact(4);
    for (o, x) in outs.by_ref().zip(xs.by_ref()) {
        let (a, b, c, d) = (read(x[0]), read(x[1]), read(x[2]), read(x[3]));
        o[0].write(a);
        o[1].write(b);
        o[2].write(c);
        o[3].write(d);
    }
    for (o, &x) in outs.into_remainder().iter_mut().zip(xs.remainder()) {
        o.write(read(x));
    }
}

/// [`gather_scalar`] with a software prefetch of the source `PREFETCH_ELEMENTS` entries ahead.
#[inline(always)]
fn gather_scalar_prefetch<W: Word, O: Offset>(
    input: &[W],
    base: usize,
    ts: &[O],
    out: &mut [MaybeUninit<W>],
) {
    let split = ts.len().saturating_sub(PREFETCH_ELEMENTS) / 4 * 4;
    let (head, tail) = ts.split_at(split);
    let (out_head, out_tail) = out.split_at_mut(split);
    let ahead = &ts[PREFETCH_ELEMENTS.min(ts.len())..];
    // SAFETY (all reads): bound check (module docs).
    let read = |x: O| unsafe { *input.get_unchecked(base + x.to_usize()) };
    let at = |x: O| input.as_ptr().wrapping_add(base + x.to_usize());
    for ((o, x), y) in out_head
        .chunks_exact_mut(4)
        .zip(head.chunks_exact(4))
        .zip(ahead.chunks_exact(4))
    {
        prefetch(at(y[0]));
        prefetch(at(y[1]));
        prefetch(at(y[2]));
        prefetch(at(y[3]));
        let (a, b, c, d) = (read(x[0]), read(x[1]), read(x[2]), read(x[3]));
        o[0].write(a);
        o[1].write(b);
        o[2].write(c);
        o[3].write(d);
    }
    gather_scalar(input, base, tail, out_tail);
}

/// A hardware gather in steps of `PREFETCH_ELEMENTS` entries, each step prefetching the
/// sources of the next one (the random reads defeat the hardware prefetchers).
///
/// # Safety
/// As for the [`GatherFn`] `gather` on `start`; `input[base..]` is the input `start` points into.
#[inline(always)]
unsafe fn gather_prefetch<W: Word>(
    gather: GatherFn<W>,
    input: &[W],
    base: usize,
    start: *const u8,
    t: &[u32],
    out: *mut W,
) {
    let at = input.as_ptr().wrapping_add(base);
    let mut i = 0;
    while i < t.len() {
        let end = (i + PREFETCH_ELEMENTS).min(t.len());
        for &y in &t[end..(end + PREFETCH_ELEMENTS).min(t.len())] {
            prefetch(at.wrapping_add(y as usize));
        }
        // SAFETY: a part of the caller's table, and the matching part of `out`.
        unsafe { gather(start, &t[i..end], out.add(i)) };
        i = end;
    }
}

/// Output for packed 2-, 4- and 6-bit elements.
pub(crate) struct PackedSink<'a> {
    input: &'a [u8],
    bits: usize,
    writer: BitWriter<'a>,
    inner: Inner,
}

impl<'a> PackedSink<'a> {
    pub fn new(input: &'a [u8], bits: usize, out: &'a mut [MaybeUninit<u8>], inner: Inner) -> Self {
        PackedSink {
            input,
            bits,
            writer: BitWriter::new(out, bits),
            inner,
        }
    }

    /// Flushes a partial last byte.
    pub fn finish(self) {
        self.writer.finish();
    }

    #[inline]
    fn element(&self, at: Option<usize>) -> u8 {
        at.and_then(|i| packed::read(self.input, self.bits, i))
            .unwrap_or(0)
    }
}

impl<O: Offset> RowSink<O> for PackedSink<'_> {
    fn row(&mut self, t: &[O], base: usize, tb: usize, j0: usize, j1: usize) {
        for source in self.inner.sources(t, base, tb, j0..j1) {
            let v = self.element(source);
            self.writer.push(v);
        }
    }

    fn allow_simd(&mut self, _: bool) {}
}

/// Output for strings, which are cloned.
pub(crate) struct StringSink<'a> {
    input: &'a [Vec<u8>],
    out: &'a mut [Vec<u8>],
    at: usize,
    inner: Inner,
}

impl<'a> StringSink<'a> {
    pub fn new(input: &'a [Vec<u8>], out: &'a mut [Vec<u8>], inner: Inner) -> Self {
        StringSink {
            input,
            out,
            at: 0,
            inner,
        }
    }
}

impl<O: Offset> RowSink<O> for StringSink<'_> {
    fn row(&mut self, t: &[O], base: usize, tb: usize, j0: usize, j1: usize) {
        for source in self.inner.sources(t, base, tb, j0..j1) {
            let slot = &mut self.out[self.at];
            match source.and_then(|s| self.input.get(s)) {
                Some(s) => slot.clone_from(s),
                None => slot.clear(),
            }
            self.at += 1;
        }
    }

    fn allow_simd(&mut self, _: bool) {}
}
