//! Row-wise element gathers: `GatherElements` along the last axis (a top-k style select), where
//! each run of index tuples picks elements of one input row and the next run moves to the next
//! row.
//!
//! The pre-pass and the copy run fused, one row at a time: index values are resolved and the
//! element read in the same loop, and before a row is processed every cache line of the *next*
//! row is prefetched. The random order of the picks inside a row defeats the hardware
//! prefetchers, so without that each line of the row is a separate wait on memory; with it the
//! row streams in while the previous one is gathered (measured on a 16 MiB input with 4 KiB rows:
//! 1.3 ms against 2.8 ms for the table-based loop).
//!
//! With AVX-512 (`FastOptions::simd` or the default level, see `super::simd`) each run is done
//! 16 values at a time: the values are resolved and checked in vector registers and the elements
//! read with one hardware gather (1- and 2-byte elements are loaded as 4 bytes and narrowed, so
//! without the tensor's slack after its payload the rows that end in the input's last 3 bytes
//! take the scalar loop); the rest of a run, and every run at other levels, goes through the
//! scalar loop. On Zen 5 that halves the time of a
//! GatherElements of int8 along the last axis (1M elements from 1 KiB rows, int64 indices:
//! 0.93 against 0.44 ms).
//!
//! The canonical form ([`super::canon`]) must be a single index dimension (output order is tuple
//! order) whose innermost logical dimension is the only axis, with input stride 1 and no fold:
//! tuple `(o, e)` reads `input[base(o) + coordinate(o, e)]`, so run `o` reads inside
//! `input[base(o) .. base(o) + dim]`.
//!
//! Indices are validated as they are used; a bad index stops the chunk, and the caller then finds
//! the first bad index in row-major order with the ordinary pre-pass.

use std::mem::MaybeUninit;

use super::canon::{Layout, TDim};
use super::elem::{SimdLevel, Word};
use super::offsets::{IndexValue, Indices};
use super::simd::{prefetch, row_gather, RowGatherFn};
use crate::gather::OutOfRange;

/// Cache line size for the row prefetches.
const LINE: usize = 64;

/// A row-wise element gather, when the call has the required shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rows {
    /// Outer logical dimensions (outermost first) with their input folds.
    outer: Vec<TDim>,
    /// Tuples per run (the innermost logical dimension).
    run: usize,
    /// Size of the axis: each run reads inside `dim` consecutive input elements.
    dim: usize,
    clamp: bool,
}

impl Rows {
    /// The plan for this call, or `None` when it is not a row-wise element gather.
    /// `element` is the element size in bytes.
    pub fn new(layout: &Layout, element: usize) -> Option<Rows> {
        let t = &layout.t;
        let [dim] = layout.dims[..] else {
            return None;
        };
        let [axis] = t.axes[..] else {
            return None;
        };
        let (inner, outer) = t.dims.split_last()?;
        let clamp = match t.mode {
            OutOfRange::Error => false,
            OutOfRange::Clamp => true,
            OutOfRange::Zero => return None,
        };
        // A row's lines are prefetched once per run: at most one prefetch per element.
        let lines = axis.dim.checked_mul(element)?.div_ceil(LINE);
        let shaped = dim.t_stride == 1
            && t.coordinate_size == 1
            && inner.fold == 0
            && axis.stride == 1
            && axis.dim > 0
            && lines <= inner.size
            && !outer.is_empty();
        if !shaped {
            return None;
        }
        // Every row must be inside the input: the largest base plus the row.
        let top: usize = outer.iter().map(|d| (d.size - 1) * d.fold).sum();
        if top.checked_add(axis.dim)? > layout.n_in {
            return None;
        }
        Some(Rows {
            outer: outer.to_vec(),
            run: inner.size,
            dim: axis.dim,
            clamp,
        })
    }

    /// Writes output elements `e0 .. e0 + out.len()`. Returns `false`, with `out` partly
    /// written, when an index was out of range.
    ///
    /// `padded` is the input's bytes followed by at least 8 bytes of slack, when the caller has
    /// it; hardware gathers at `level` need it for 1- and 2-byte elements (they load 4 bytes).
    pub fn run<W: Word>(
        &self,
        input: &[W],
        padded: Option<&[u8]>,
        level: SimdLevel,
        indices: Indices<'_>,
        e0: usize,
        out: &mut [MaybeUninit<W>],
    ) -> bool {
        let source = Source {
            input,
            padded,
            level,
        };
        match (indices, self.clamp) {
            (Indices::I32(v), false) => self.run_typed::<W, i32, false>(source, v, e0, out),
            (Indices::I32(v), true) => self.run_typed::<W, i32, true>(source, v, e0, out),
            (Indices::I64(v), false) => self.run_typed::<W, i64, false>(source, v, e0, out),
            (Indices::I64(v), true) => self.run_typed::<W, i64, true>(source, v, e0, out),
        }
    }

    /// The hardware row gather to use, if any (the level has one and the axis fits 32-bit
    /// lanes), where it reads from, and the end (in elements) that the rows it gathers from must
    /// not pass: narrow elements are loaded as 4 bytes, so without the slack of a padded input the
    /// rows that end within 3 bytes of the input's end go through the scalar loop.
    fn simd<W: Word, I: IndexValue, const CLAMP: bool>(
        &self,
        source: &Source<'_, W>,
    ) -> Option<(RowGatherFn<W, I>, *const u8, usize)> {
        if self.dim > i32::MAX as usize {
            return None;
        }
        let gather = row_gather::<W, I, CLAMP>(source.level)?;
        let input = source.input;
        Some(match source.padded {
            Some(p) if p.len() >= std::mem::size_of_val(input) + 3 => {
                (gather, p.as_ptr(), input.len())
            }
            _ => {
                let overhang = 4usize.div_ceil(size_of::<W>()) - 1;
                let end = input.len().saturating_sub(overhang);
                (gather, input.as_ptr().cast::<u8>(), end)
            }
        })
    }

    fn run_typed<W: Word, I: IndexValue, const CLAMP: bool>(
        &self,
        source: Source<'_, W>,
        idx: &[I],
        e0: usize,
        out: &mut [MaybeUninit<W>],
    ) -> bool {
        let input = source.input;
        let simd = self.simd::<W, I, CLAMP>(&source);
        let lines = (self.dim * size_of::<W>()).div_ceil(LINE);
        let mut odometer = Odometer::new(&self.outer, e0 / self.run);
        let mut base = odometer.base;
        let mut j = e0 % self.run;
        let mut done = 0;
        while done < out.len() {
            let n = (self.run - j).min(out.len() - done);
            // The next row streams in while this one is gathered (past the last row this
            // prefetches wherever the odometer wrapped to, which is harmless).
            odometer.step(&self.outer);
            let next = input.as_ptr().wrapping_add(odometer.base).cast::<u8>();
            for line in 0..lines {
                prefetch(next.wrapping_add(line * LINE));
            }
            let Some(row) = input.get(base..base + self.dim) else {
                return false;
            };
            let first = e0 + done;
            let Some(values) = idx.get(first..first + n) else {
                return false;
            };
            let out = &mut out[done..done + n];
            let mut k = 0;
            if let Some((gather, start, _)) = simd.filter(|&(_, _, end)| base + self.dim <= end) {
                // SAFETY: `simd` checked the level and the width of the axis; the row
                // `base .. base + dim` is inside the input (checked above) and ends where the
                // 4-byte loads of its elements stay inside what `start` points to, `out` holds
                // `n` elements, one per value.
                let (written, bad) = unsafe {
                    gather(
                        start.wrapping_add(base * size_of::<W>()),
                        self.dim,
                        values,
                        out.as_mut_ptr().cast::<W>(),
                    )
                };
                if bad {
                    return false;
                }
                k = written;
            }
            if !gather_row::<W, I, CLAMP>(row, &values[k..], &mut out[k..]) {
                return false;
            }
            done += n;
            j = 0;
            base = odometer.base;
        }
        true
    }
}

/// Where a row-wise gather reads from.
#[derive(Clone, Copy)]
struct Source<'a, W> {
    input: &'a [W],
    /// The input's bytes plus slack (see [`Rows::run`]).
    padded: Option<&'a [u8]>,
    level: SimdLevel,
}

/// Index values resolved per block of [`gather_row`].
const BLOCK: usize = 256;

/// One run: `out[e] = row[resolve(values[e])]`; `false` if an index was out of range (never
/// when `CLAMP`). `row` is not empty.
///
/// Two passes per block of [`BLOCK`] values: the values are resolved into 32-bit coordinates
/// and checked in a loop the compiler vectorises ([`resolve_block`]), then the elements are
/// read in a loop of one load and one store each. On an AMD EPYC Zen 3 (no AVX-512, so no
/// hardware row gather; a busy host), `multigather run --repeat 200` at 1 thread, medians of 5
/// interleaved runs, with the resolution fused into the element loop against two passes:
/// `gather_elements_i8` of `scripts/bench_gather.py` (1M int8 elements from 1 KiB rows, int64
/// indices) 2.49 against 2.02 ms, `gather_elements_last` (the same in f32) 6.75 against 4.63 ms.
/// Half the time is reading the 8 MiB of index values.
#[inline(always)]
fn gather_row<W: Word, I: IndexValue, const CLAMP: bool>(
    row: &[W],
    values: &[I],
    out: &mut [MaybeUninit<W>],
) -> bool {
    if u32::try_from(row.len()).is_err() {
        return gather_row_fused::<W, I, CLAMP>(row, values, out);
    }
    let mut coordinates = [0u32; BLOCK];
    for (values, out) in values.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
        let coordinates = &mut coordinates[..values.len()];
        if !resolve_block(values, row.len(), CLAMP, coordinates) {
            return false;
        }
        for (o, &c) in out.iter_mut().zip(coordinates.iter()) {
            // SAFETY: `resolve_block` made every coordinate less than `row.len()`.
            o.write(unsafe { *row.get_unchecked(c as usize) });
        }
    }
    true
}

/// `coordinates[e]` = `values[e]` resolved on an axis of `d` elements (`0 < d <= u32::MAX`),
/// clamped into `0..d` either way; `false` if a value was out of range and not `clamp`.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn resolve_block<I: IndexValue>(
    values: &[I],
    d: usize,
    clamp: bool,
    coordinates: &mut [u32],
) -> bool {
    let d = d as i64;
    let mut bad = false;
    for (c, v) in coordinates.iter_mut().zip(values) {
        let (coordinate, out_of_range) = clamp_index(v.get(), d);
        bad |= out_of_range;
        *c = coordinate as u32;
    }
    clamp || !bad
}

/// Index value `v` on an axis of `d > 0` elements: its coordinate, clamped into `0..d` (so a
/// read stays in the row whatever the mode), and whether `v` was out of range.
#[inline(always)]
fn clamp_index(v: i64, d: i64) -> (i64, bool) {
    let wrapped = if v < 0 { v.wrapping_add(d) } else { v };
    let clamped = wrapped.clamp(0, d - 1);
    (clamped, clamped != wrapped)
}

/// [`gather_row`] in one pass, for rows too long for 32-bit coordinates.
fn gather_row_fused<W: Word, I: IndexValue, const CLAMP: bool>(
    row: &[W],
    values: &[I],
    out: &mut [MaybeUninit<W>],
) -> bool {
    let d = row.len() as i64;
    let mut bad = false;
    for (o, v) in out.iter_mut().zip(values) {
        let (c, out_of_range) = clamp_index(v.get(), d);
        bad |= out_of_range;
        o.write(row[c as usize]);
    }
    CLAMP || !bad
}

/// Position over the outer logical dimensions and the input offset it folds to.
struct Odometer {
    coord: Vec<usize>,
    base: usize,
}

impl Odometer {
    /// At run `run` (row-major over `dims`).
    fn new(dims: &[TDim], run: usize) -> Odometer {
        let mut coord = vec![0; dims.len()];
        let mut rest = run;
        let mut base = 0;
        for (c, d) in coord.iter_mut().zip(dims).rev() {
            *c = rest % d.size;
            rest /= d.size;
            base += *c * d.fold;
        }
        Odometer { coord, base }
    }

    /// To the next run, wrapping around after the last.
    fn step(&mut self, dims: &[TDim]) {
        for (c, d) in self.coord.iter_mut().zip(dims).rev() {
            *c += 1;
            self.base += d.fold;
            if *c < d.size {
                return;
            }
            *c = 0;
            self.base -= d.fold * d.size;
        }
    }
}
