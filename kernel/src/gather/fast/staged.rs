//! Staged column gathers: `GatherElements` along an outer axis of a large input (PyTorch
//! `gather(dim=0)`), where every output element reads a random row of the input.
//!
//! Read directly, each element is a cache miss on a random page (a 16 MiB input with 16 KiB
//! rows spends most of its time in TLB misses and page walks, whatever the order of the reads).
//! Here the work is cut into column tiles instead: for each tile, the tile's columns of every
//! coordinate of the axis are first copied into a small contiguous buffer (the *stage*, at most
//! [`STAGE_BYTES`]), then every output row reads its tile from the stage, which stays in L2.
//! The input is read once per tile, a few cache lines at a time, and the random reads hit L2.
//! Each row's index segment starts a new page, where the hardware prefetchers stop: the index
//! segments are prefetched a few rows ahead, and the stage's input rows a few coordinates ahead.
//!
//! The canonical form ([`super::canon`]) must be a single index dimension whose logical indices
//! end in `[.., K, W]`, where the `W` innermost tuples read consecutive input elements (fold 1)
//! and the `K` before them only move through the index values (fold 0): the output is rows of
//! `W` elements, row `(o, i)` reading `input[base(o) + coordinate(o, i, j) * S + j]`.
//!
//! Indices are validated as they are used; any bad index stops the chunk, and the caller then
//! finds the first bad index in row-major order with the ordinary pre-pass.

use crate::tensor::try_with_capacity;
use std::mem::MaybeUninit;

use super::canon::Layout;
use super::elem::SimdLevel;
use super::elem::Word;
use super::offsets::{fill_block, Axes32, IndexValue, Indices};
use super::simd::{column_gather, prefetch, ColumnGatherFn};
use crate::gather::OutOfRange;

/// Size of the stage: the L2 of a Zen 5 core (1 MiB). Each tile's index and output segments
/// are as wide as the tile, so a wider tile also means longer runs in the indices and the
/// output, which the prefetchers follow. `gather_elements_first` of the shared benchmark
/// (`[1024, 4096]` f32, indices `[512, 4096]`) in onnxruntime with the custom-op library, one
/// thread, medians of 20 runs: 256 KiB 4.1 ms, 512 KiB 3.6-3.8, 768 KiB 3.2-3.5, 1 MiB
/// 3.0-3.3, 2 MiB 3.6-3.7, 4 MiB 3.9-4.1 (the stage then spills into L3).
const STAGE_BYTES: usize = 1 << 20;
/// Calls are staged only if one cache line per coordinate fits this much: how large the stage
/// is does not change which calls are staged.
const STAGE_MIN_BYTES: usize = 256 << 10;
/// Inputs smaller than this mostly sit in the caches, where direct reads are as fast.
const MIN_INPUT_BYTES: usize = 8 << 20;
/// Cache line size for the prefetches.
const LINE: usize = 64;
/// How many rows ahead the index segments are prefetched (the same case with a 1 MiB stage:
/// 4.3 ms without, 3.1-3.4 with 2 to 16 rows ahead).
const ROWS_AHEAD: usize = 2;
/// How many coordinates ahead the stage's input rows are prefetched (a few percent: 3.4-3.5 ms
/// without, 3.1-3.2 with 2 to 8 ahead).
const STAGE_AHEAD: usize = 4;
/// Axis strides below a page keep neighbouring rows on few pages: no need to stage.
const MIN_STRIDE_BYTES: usize = 4096;

/// The output of a staged gather, shared by tasks that each write their own column tiles of
/// every row.
pub(crate) struct Columnar<'a, W> {
    ptr: *mut MaybeUninit<W>,
    len: usize,
    _out: std::marker::PhantomData<&'a mut [MaybeUninit<W>]>,
}

// SAFETY: the buffer is only written through `segment`, whose callers promise disjoint ranges.
unsafe impl<W: Send> Sync for Columnar<'_, W> {}

impl<'a, W> Columnar<'a, W> {
    pub fn new(out: &'a mut [MaybeUninit<W>]) -> Self {
        Columnar {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            _out: std::marker::PhantomData,
        }
    }

    /// Elements `at .. at + n` (panics if out of range).
    ///
    /// # Safety
    /// No two live segments may overlap.
    #[allow(clippy::mut_from_ref)]
    unsafe fn segment(&self, at: usize, n: usize) -> &mut [MaybeUninit<W>] {
        assert!(at <= self.len && n <= self.len - at, "segment out of range");
        // SAFETY: in bounds (checked), exclusive by the caller's promise, and alive for `'a`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), n) }
    }
}

/// A staged column gather, when the call has the required shape and staging pays off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Columns {
    /// Input offset of each outer position (the folds of the outer logical dimensions).
    outer: Vec<usize>,
    /// Rows per outer position (`K`).
    rows: usize,
    /// Elements per row (`W`).
    width: usize,
    /// Size and input stride of the axis.
    dim: usize,
    stride: usize,
    /// Columns per tile.
    tile: usize,
    clamp: bool,
}

impl Columns {
    /// The plan for this call, or `None` when it is not a staged column gather or staging would
    /// not pay off. `element` is the element size in bytes.
    pub fn new(layout: &Layout, element: usize) -> Option<Columns> {
        let t = &layout.t;
        let [dim] = layout.dims[..] else {
            return None;
        };
        let [axis] = t.axes[..] else {
            return None;
        };
        let (inner, rest) = t.dims.split_last()?;
        let (middle, outer) = rest.split_last()?;
        let clamp = match t.mode {
            OutOfRange::Error => false,
            OutOfRange::Clamp => true,
            OutOfRange::Zero => return None,
        };
        let shaped = dim.t_stride == 1
            && t.coordinate_size == 1
            && inner.fold == 1
            && middle.fold == 0
            && axis.dim > 0;
        if !shaped {
            return None;
        }
        // Staging copies `dim * width` elements per outer position and saves one random read
        // per element of its `rows * width` outputs: worth it when the rows are not much fewer
        // than the coordinates, the rows are at least a page apart, the input is large, and a
        // stage of at least one cache line per coordinate fits.
        let line = 64usize.div_ceil(element);
        let fits = axis.dim.checked_mul(line * element)? <= STAGE_MIN_BYTES;
        let worth = middle.size * 8 >= axis.dim
            && axis.stride * element >= MIN_STRIDE_BYTES
            && layout.n_in * element >= MIN_INPUT_BYTES;
        if !fits || !worth {
            return None;
        }
        let tile = (STAGE_BYTES / (axis.dim * element)) / line * line;
        let tile = tile.min(inner.size.div_ceil(line) * line);
        // Outer positions: an odometer over the outer logical dimensions.
        let count: usize = outer.iter().map(|d| d.size).product();
        let mut offsets = try_with_capacity(count).ok()?;
        for p in 0..count {
            let mut rest = p;
            let mut base = 0usize;
            for d in outer.iter().rev() {
                base += (rest % d.size) * d.fold;
                rest /= d.size;
            }
            offsets.push(base);
        }
        // Every staged read must be inside the input: the largest is the last column of the
        // last coordinate at the largest outer offset.
        let last = offsets.iter().max().copied().unwrap_or(0)
            + (axis.dim - 1) * axis.stride
            + (inner.size - 1);
        if last >= layout.n_in {
            return None;
        }
        Some(Columns {
            outer: offsets,
            rows: middle.size,
            width: inner.size,
            dim: axis.dim,
            stride: axis.stride,
            tile,
            clamp,
        })
    }

    /// Number of column tiles per row.
    pub fn tiles(&self) -> usize {
        self.width.div_ceil(self.tile)
    }

    /// Writes column tiles `tiles` of every output row into `out`, resolving indices at level
    /// `simd` and reading the stage with hardware gathers at level `gather` where there are
    /// some. Returns `false`, with `out` partly written, when an index was out of range.
    pub fn run<W: Word>(
        &self,
        input: &[W],
        indices: Indices<'_>,
        tiles: std::ops::Range<usize>,
        out: &Columnar<'_, W>,
        levels: Levels,
    ) -> bool {
        match indices {
            Indices::I32(v) => self.run_typed(input, v, tiles, out, levels),
            Indices::I64(v) => self.run_typed(input, v, tiles, out, levels),
        }
    }

    fn run_typed<W: Word, I: IndexValue>(
        &self,
        input: &[W],
        idx: &[I],
        tiles: std::ops::Range<usize>,
        out: &Columnar<'_, W>,
        levels: Levels,
    ) -> bool {
        let width = self.width;
        let gather = if self.clamp {
            column_gather::<W, I, true>(levels.gather)
        } else {
            column_gather::<W, I, false>(levels.gather)
        };
        // The hardware gathers load 4 bytes for 1- and 2-byte elements: slack after the cells.
        let cells = self.dim * self.tile;
        let mut stage = vec![W::default(); cells + 4usize.div_ceil(size_of::<W>())];
        let mut positions = vec![0u32; self.tile];
        let index_lines = (self.tile * size_of::<I>()).div_ceil(LINE);
        for (o, &base) in self.outer.iter().enumerate() {
            for tile in tiles.clone() {
                let j0 = tile * self.tile;
                let n = self.tile.min(width - j0);
                self.fill_stage(input, base + j0, n, &mut stage);
                let end = (o + 1) * self.rows;
                for row in o * self.rows..end {
                    let at = row * width + j0;
                    if row + ROWS_AHEAD < end {
                        // The index segment of a row a few rows on: each segment starts a new
                        // page, which the hardware prefetchers do not cross to.
                        prefetch_lines(
                            idx.as_ptr().wrapping_add(at + ROWS_AHEAD * width),
                            index_lines,
                        );
                    }
                    // SAFETY: tasks get disjoint tile ranges, so no other task touches
                    // `at .. at + n`; `Columnar::segment` checks the range.
                    let segment = unsafe { out.segment(at, n) };
                    let values = &idx[at..at + n];
                    let stage = Stage {
                        cells: &stage,
                        len: cells,
                    };
                    if !self.gather_row(stage, values, &mut positions, gather, levels, segment) {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Copies columns `start .. start + n` (as input offsets) of every coordinate into the
    /// stage, `tile` elements apart.
    fn fill_stage<W: Word>(&self, input: &[W], start: usize, n: usize, stage: &mut [W]) {
        let lines = (n * size_of::<W>()).div_ceil(LINE);
        for (c, slot) in stage.chunks_exact_mut(self.tile).enumerate() {
            let from = start + c * self.stride;
            if c + STAGE_AHEAD < self.dim {
                prefetch_lines(
                    input
                        .as_ptr()
                        .wrapping_add(from + STAGE_AHEAD * self.stride),
                    lines,
                );
            }
            slot[..n].copy_from_slice(&input[from..from + n]);
        }
    }

    /// One row segment from the stage; `false` if an index was out of range. Whole vectors
    /// of the segment go through the hardware column gather where there is one; the rest has
    /// its stage positions computed by the vectorised pre-pass loop, then read one by one.
    #[inline]
    fn gather_row<W: Word, I: IndexValue>(
        &self,
        stage: Stage<'_, W>,
        values: &[I],
        positions: &mut [u32],
        gather: Option<ColumnGatherFn<W, I>>,
        levels: Levels,
        out: &mut [MaybeUninit<W>],
    ) -> bool {
        let mut done = 0;
        if let Some(gather) = gather {
            // SAFETY: the CPU has the gather's features (`column_gather` checked); `dim > 0`;
            // a segment is at most a tile (`values.len() <= self.tile`); the stage holds
            // `dim * tile` cells (a count below `STAGE_BYTES`) plus 4 bytes of slack; `out`
            // has one slot per value.
            let (k, bad) = unsafe {
                gather(
                    stage.cells.as_ptr().cast(),
                    self.dim,
                    self.tile,
                    values,
                    out.as_mut_ptr().cast(),
                )
            };
            if bad {
                return false;
            }
            done = k;
        }
        let (values, out) = (&values[done..], &mut out[done..]);
        let consts = Axes32 {
            dims: [self.dim as i64],
            strides: [self.tile as u32],
        };
        let positions = &mut positions[..values.len()];
        let simd = levels.vector;
        let (bad, max) = if self.clamp {
            fill_block::<I, 1, true>(values, done, 1, consts, simd, positions)
        } else {
            fill_block::<I, 1, false>(values, done, 1, consts, simd, positions)
        };
        if bad || (!values.is_empty() && max as usize >= stage.len) {
            return false;
        }
        for (o, &p) in out.iter_mut().zip(positions.iter()) {
            // SAFETY: every position is at most `max`, which is inside the stage.
            o.write(unsafe { *stage.cells.get_unchecked(p as usize) });
        }
        true
    }
}

/// The SIMD levels of a staged gather: of the index resolution, and of the stage reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Levels {
    pub vector: SimdLevel,
    pub gather: SimdLevel,
}

/// A filled stage: `len` cells, then slack for the hardware gathers' wide loads.
#[derive(Clone, Copy)]
struct Stage<'a, W> {
    cells: &'a [W],
    len: usize,
}

/// Prefetches `lines` cache lines from `first` on (prefetches never fault, wherever they point).
#[inline(always)]
fn prefetch_lines<T>(first: *const T, lines: usize) {
    let first = first.cast::<u8>();
    for line in 0..lines {
        prefetch(first.wrapping_add(line * LINE));
    }
}
