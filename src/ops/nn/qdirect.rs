//! The direct 8-bit convolution: the integer product of `qconv.rs` without an im2col matrix,
//! for one- and two-dimensional convolutions of whole groups of four input channels on CPUs with
//! AMX or AVX-512 VNNI, or AVX2 with filters whose pairs of adjacent k are bounded (`Avx2Pairs`).
//!
//! Design note: the filters are the kernel's A, packed once with their k in tap-major order
//! (`k = tap * C + c`). The input is laid out once per call so that the kernel's B is read
//! straight from it: channels four at a time (the four bytes one `vpdpbusd` lane sums), over a
//! *grid* that holds the padded input split into the phases of the strides (phase `(py, px)`
//! holds padded rows `py, py + sh, ...` and columns `px, px + sw, ...`). On that grid, the
//! input a tap reads for output `(oy, ox)` lies at `oy * width + ox + offset(tap)` of the tap's
//! phase, so the tap's operand for 32 consecutive grid columns `j` is 128 consecutive bytes.
//! The product's columns are the grid's positions `j = oy * width + ox`; the `width - OW`
//! columns of each grid row that fall in the padding are summed and never stored (a 3x3
//! convolution over 14x14 wastes 2 columns of 16). Output rows are output channels, so each row
//! of a tile is a run of an output plane, stored in place through [`Rows`].
//!
//! At the VNNI level the input is shifted into `i8` (an unsigned input is XORed with 0x80) and
//! A into `u8` by `PackedA`; at `Avx2Pairs` the input is stored as `u8` and A as `i8`, split
//! by `PackedA` into pairs within the bound and a sparse residual (`igemm.rs`), which a tile
//! adds to its sums from the laid-out input. Either way the input is padded with its zero
//! point, and the zero points are corrected as in `igemm.rs`, `C[i,j] = S[i,j] - zb (rs[i] -
//! K za[i]) - za[i] cs[j]`, where `cs[j]`, the sum of the input a column reads, is summed per
//! call from the laid-out input (its four-channel sums per position, then a sum over the taps).
//!
//! On AMX (`amx.rs`) a block is 32 filters by 32 grid columns: the 16 groups of a tap's chunk
//! of 64 channels are 16 rows of the B tile, each row the 64 bytes of 16 grid columns, so a B
//! tile is read straight from the laid-out input at a stride of one group; the filters are
//! stored as rows (k tap-major), each tap's channels padded with zeros to whole chunks, and the
//! laid-out input gets as many padding groups. The stored sums are corrected and handed on
//! eight filters at a time. On an Intel Xeon with AMX (family 6 model 167 as reported), one
//! thread, minima of `multigather run --repeat 40`, against `Avx512Vnni`: one `QLinearConv` of
//! 64 channels 3x3 over 56x56 0.50 -> 0.21 ms, 256 over 14x14 0.43 -> 0.17, 256 -> 1024 1x1
//! over 14x14 0.30 -> 0.19, 512 -> 128 1x1 over 28x28 0.28 -> 0.15, and 64 -> 256 1x1 over
//! 56x56 0.49 -> 0.45, whose time is its epilogue's (the requantisation of 800 000 codes).
//!
//! A tile is eight filters by 32 grid columns at both levels: one pass of two 512-bit
//! registers per row at the VNNI level, four passes of four rows by sixteen columns (eight
//! 256-bit sums, no spills) at `Avx2Pairs`, whose epilogue then runs without AVX-512.
//!
//! im2col copies the input once per tap (nine times for a 3x3 filter) and packs the copy; this
//! lays it out once. At `Avx2Pairs` on an AMD EPYC (Zen 3, family 25 model 1), one thread,
//! minima of alternated `multigather run --repeat 40` against the im2col kernel: one
//! `QLinearConv` of 64 channels 3x3 over 56x56 1.93 -> 1.59 ms, 128 over 28x28 1.66 -> 1.55,
//! 256 over 14x14 1.59 -> 1.49; in the quantised ResNet-50 of `scripts/check_deployed.py` its
//! 3x3 classes took 10-30% less (`run --profile`, normalised by the 1x1 classes it leaves to
//! im2col), the whole net 67.4 -> 64.5 ms.
//!
//! Why one file: the grid (its phases, taps and slack), the filters' tiles and the two levels'
//! tile loops are one layout contract: a tile's reads are bounded by the grid's slack, its
//! broadcasts by the tiles' packing, its zero-point and residual corrections by how the input
//! was stored; split, each half would restate the offsets the other computes.

use std::mem::MaybeUninit;
use std::ops::Range;

use super::conv::ConvShape;
use super::igemm::{self, Bytes, Level, PackedA, Residual};
use super::window::inside;
use crate::error::{Error, Result};
use crate::tensor::{try_vec, try_with_capacity, Scratch};

/// Grid columns of a tile: the 32 `i32` lanes of two registers.
pub(super) const COLS: usize = 32;
/// Output channels of a tile.
const ROWS: usize = 8;

/// Where a tile's row lands in its output plane: columns `from..from + len` of the tile are
/// positions `to..to + len` of the plane.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Segment {
    pub from: usize,
    pub to: usize,
    pub len: usize,
}

/// What receives the finished sums, one output channel of one tile at a time.
pub(super) trait Rows: Sync {
    /// Stores the exact sums of output channel `channel` of image `image` for a tile's 32 grid
    /// columns, through the segments that lie in the output.
    ///
    /// # Safety
    /// Concurrent calls store disjoint segments; every segment lies in the output plane; the
    /// CPU runs `level` (the kernel's: `Avx512Vnni`, or `Avx2Pairs` on AVX2).
    unsafe fn finish(
        &self,
        image: usize,
        channel: usize,
        sums: &[i32; COLS],
        at: &[Segment],
        level: Level,
    );
}

/// Whether the direct kernel may run convolutions with filters of shape `w` in `group` groups
/// on a CPU whose best level is `level`: one or two spatial dims, one group, input channels in
/// whole fours, on AVX-512 VNNI, or on AVX2 for filters of more than one tap (where
/// [`pack_filters`] decides by the filters' pairs). A pointwise convolution's im2col matrix is
/// its input, and at AVX2 its few k per tile would not pay for the epilogue of a tile's rows,
/// which the im2col kernel runs once per strip of 256 columns (`ResNet-50`'s 1x1 convolutions
/// took 10-30% longer direct).
pub(super) fn applies(w: &[usize], group: usize, level: Level) -> bool {
    let kernel = w.get(2..).unwrap_or_default();
    #[cfg(target_arch = "x86_64")]
    let direct = match level {
        Level::Avx512Vnni | Level::Amx => true,
        Level::Avx2 | Level::Avx2Pairs => kernel.iter().product::<usize>() > 1,
        _ => false,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let direct = {
        let _ = level;
        false
    };
    direct
        && group == 1
        && matches!(w.len(), 3 | 4)
        && w[1] > 0
        && w[1].is_multiple_of(4)
        && kernel.iter().all(|&k| k > 0)
}

/// A convolution's filters packed for the direct kernel: shifted into `u8` with the zero-point
/// terms of their rows (as `PackedA` makes them), in tiles of eight filters whose bytes come
/// four k at a time, the eight filters' fours together (32 bytes): a tile reads one stream, and
/// each of its eight broadcasts is at a fixed offset from one pointer. At `Amx`, one row per
/// filter instead (`x86::pack_amx`), which the A tiles read at a stride.
pub(super) struct Filters {
    /// `Avx512Vnni`, `Amx` or `Avx2Pairs`.
    level: Level,
    data: Scratch<u8>,
    m: usize,
    k: usize,
    /// Bytes from one filter's row of `data` to the next.
    lda: usize,
    row_terms: Vec<i32>,
    row_zeros: Vec<i32>,
    /// What the stored filters leave out at `Avx2Pairs` (by filter, k in tap-major order).
    residual: Residual,
}

/// The filters `w` (`c_out x c_in x taps` bytes) with zero points `zw` (one, or one per filter),
/// packed as the direct kernel's A: filter `m`'s k run tap by tap, each tap's channels in turn.
/// None when the CPU's best level is `Avx2` and too many pairs of adjacent k exceed the bound
/// of `Avx2Pairs` (`Level::for_a`): the im2col kernel then runs the convolution.
pub(super) fn pack_filters(
    w: Bytes<'_>,
    zw: &[i32],
    (c_out, c_in, taps): (usize, usize, usize),
    level: Level,
) -> Result<Option<Filters>> {
    let k = c_in * taps;
    let len = c_out
        .checked_mul(k)
        .filter(|&len| len <= w.data.len())
        .ok_or_else(|| Error::Eval("W does not hold its shape".into()))?;
    let mut data = try_vec(len, 0u8)?;
    for (filter, row) in w
        .data
        .chunks_exact(k.max(1))
        .zip(data.chunks_exact_mut(k.max(1)))
    {
        for (c, taps_of_c) in filter.chunks_exact(taps).enumerate() {
            for (t, &v) in taps_of_c.iter().enumerate() {
                row[t * c_in + c] = v;
            }
        }
    }
    let a = Bytes {
        data: &data,
        signed: w.signed,
    };
    #[cfg(target_arch = "x86_64")]
    let level = match level.for_a(a, k) {
        level @ (Level::Avx512Vnni | Level::Amx | Level::Avx2Pairs) => level,
        _ => return Ok(None),
    };
    let packed = PackedA::new(a, c_out, k, zw, level)?;
    let (rows, lda) = packed
        .narrow()
        .ok_or_else(|| Error::Eval("filters packed for another kernel".into()))?;
    let (row_terms, row_zeros) = packed.row_terms();
    #[cfg(target_arch = "x86_64")]
    if level == Level::Amx {
        return Ok(Some(Filters {
            level,
            data: x86::pack_amx(rows, lda, (c_out, c_in, taps))?,
            m: c_out,
            k,
            lda: taps * x86::amx_channels(c_in),
            row_terms: row_terms.to_vec(),
            row_zeros: row_zeros.to_vec(),
            residual: packed.residual().clone(),
        }));
    }
    // `k` (channels in fours) is whole groups, so `lda == k`; the rows are padded to whole
    // tiles of `ROWS` here (`PackedA` pads them to its own tiles), with zeros.
    let len = c_out
        .div_ceil(ROWS)
        .checked_mul(ROWS * lda)
        .ok_or_else(|| Error::Eval("W does not hold its shape".into()))?;
    let write = |out: &mut [MaybeUninit<u8>]| {
        for (t, out) in out.chunks_exact_mut(ROWS * lda.max(1)).enumerate() {
            for (g, fours) in out.chunks_exact_mut(ROWS * 4).enumerate() {
                for (r, four) in fours.chunks_exact_mut(4).enumerate() {
                    let filter = t * ROWS + r;
                    let from = if filter < c_out {
                        &rows[filter * lda + 4 * g..][..4]
                    } else {
                        &[0; 4]
                    };
                    for (o, &v) in four.iter_mut().zip(from) {
                        o.write(v);
                    }
                }
            }
        }
    };
    // SAFETY: the tiles cover all `len` bytes.
    let tiles = unsafe { Scratch::new_with(len, write) }?;
    Ok(Some(Filters {
        level,
        data: tiles,
        m: c_out,
        k,
        lda,
        row_terms: row_terms.to_vec(),
        row_zeros: row_zeros.to_vec(),
        residual: packed.residual().clone(),
    }))
}

/// The grid of one convolution: the phases its taps read and where each tap starts.
struct Grid {
    /// Columns of a grid row (output columns, then those only the last taps reach).
    width: usize,
    /// Rows of a phase.
    height: usize,
    /// Positions from one phase to the next, slack for a last tile's reads included.
    plane: usize,
    /// The phases some tap reads, as `(row phase, column phase)`.
    phases: Vec<(usize, usize)>,
    /// Each tap's first position, phase included, from a column's own.
    taps: Vec<usize>,
    /// Grid columns the product sums: `OH * width`.
    columns: usize,
}

impl Grid {
    fn new(shape: &ConvShape) -> Result<Grid> {
        let g = &shape.geo;
        let ([_, oh, ow], [_, kh, kw]) = (g.output, g.kernel);
        let ([_, sh, sw], [_, dh, dw]) = (g.strides, g.dilations);
        let reach = |k: usize, d: usize, s: usize| (k - 1) * d / s;
        let width = ow + reach(kw, dw, sw);
        let height = oh + reach(kh, dh, sh);
        let too_large = || Error::Eval("the convolution's input grid is too large".into());
        let area = height.checked_mul(width).ok_or_else(too_large)?;
        // A last tile reads up to `COLS - 1` columns past the output's and a grid row more.
        let plane = area.checked_add(width + COLS).ok_or_else(too_large)?;
        let mut phases = Vec::new();
        let mut taps = try_with_capacity(kh * kw)?;
        for ky in 0..kh {
            for kx in 0..kw {
                let phase = ((ky * dh) % sh, (kx * dw) % sw);
                let p = match phases.iter().position(|&q| q == phase) {
                    Some(p) => p,
                    None => {
                        phases.push(phase);
                        phases.len() - 1
                    }
                };
                taps.push(p * plane + (ky * dh / sh) * width + kx * dw / sw);
            }
        }
        Ok(Grid {
            width,
            height,
            plane,
            phases,
            taps,
            columns: oh * width,
        })
    }

    /// Positions of one group of four channels: every phase.
    fn group_len(&self) -> usize {
        self.phases.len() * self.plane
    }
}

/// Lays out channels `4q..4q + 4` of the image `x` (`C` planes) on the grid into `out` (one
/// group: four bytes per position of every phase), each byte XORed with `flip`, the padding
/// and slack `pad`, for the kernel of `level`.
fn lay_out_group(
    x: &[u8],
    shape: &ConvShape,
    grid: &Grid,
    q: usize,
    (flip, pad, level): (u8, u8, Level),
    out: &mut [MaybeUninit<u8>],
) {
    let g = &shape.geo;
    let ([_, ih, iw], [_, sh, sw], [_, ph, pw]) = (g.input, g.strides, g.pad_begin);
    let in_plane = ih * iw;
    let fill = |s: &mut [MaybeUninit<u8>]| {
        for b in s {
            b.write(pad);
        }
    };
    for (&(py, px), phase) in grid.phases.iter().zip(out.chunks_exact_mut(grid.plane * 4)) {
        // Grid columns `lo..hi` of this phase read inside an input row.
        let (lo, hi) = inside(grid.width, iw, sw, px, pw);
        let (rows, slack) = phase.split_at_mut(grid.height * grid.width * 4);
        fill(slack);
        for (a, row) in rows.chunks_exact_mut(grid.width * 4).enumerate() {
            let iy = (a * sh + py).checked_sub(ph).filter(|&iy| iy < ih);
            let Some(iy) = iy.filter(|_| lo < hi) else {
                fill(row);
                continue;
            };
            fill(&mut row[..lo * 4]);
            fill(&mut row[hi * 4..]);
            let first = lo * sw + px - pw;
            let src: [&[u8]; 4] =
                std::array::from_fn(|c| &x[(4 * q + c) * in_plane + iy * iw..][..iw]);
            let inner = &mut row[lo * 4..hi * 4];
            // `inside` keeps the `hi - lo` columns from `first` in each input row.
            #[cfg(target_arch = "x86_64")]
            if sw == 1 && matches!(level, Level::Avx512Vnni | Level::Amx) {
                // SAFETY: the filters were packed for this level, which the CPU runs.
                unsafe { x86::interleave(src.map(|r| &r[first..first + hi - lo]), flip, inner) };
                continue;
            }
            // Whole sixteens of columns in registers; the rest in the loop below.
            #[cfg(target_arch = "x86_64")]
            let (inner, first) = if sw == 1 {
                let whole = (hi - lo) / 16 * 16;
                let (done, rest) = inner.split_at_mut(whole * 4);
                for (c0, out) in (0..whole).step_by(16).zip(done.chunks_exact_mut(64)) {
                    let c0 = first + c0;
                    igemm::interleave16(src.map(|r| &r[c0..c0 + 16]), flip, out);
                }
                (rest, first + whole)
            } else {
                (inner, first)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = level;
            for (b, slots) in inner.chunks_exact_mut(4).enumerate() {
                let ix = first + b * sw;
                for (slot, r) in slots.iter_mut().zip(&src) {
                    slot.write(r[ix] ^ flip);
                }
            }
        }
    }
}

/// The sum over every group of the four bytes (as `i8` at the VNNI level, `u8` at
/// `Avx2Pairs`) at each position of the laid-out input `b` (groups of `sums.len()` positions).
fn position_sums(b: &[u8], sums: &mut [i32], level: Level) {
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY: the filters were packed for this level, which the CPU runs.
        Level::Avx512Vnni | Level::Amx => return unsafe { x86::position_sums(b, sums) },
        // SAFETY: as above; `Avx2Pairs` runs on AVX2.
        Level::Avx2Pairs => return unsafe { x86::position_sums_unsigned(b, sums) },
        _ => {}
    }
    let _ = level;
    for group in b.chunks_exact(sums.len() * 4) {
        for (s, v) in sums.iter_mut().zip(group.chunks_exact(4)) {
            let four: i32 = v.iter().map(|&b| i32::from(b as i8)).sum();
            *s = s.wrapping_add(four);
        }
    }
}

/// The shared state of one image's tiles.
struct Task<'a, R: Rows> {
    /// The filters' tiles, `lda` bytes per filter.
    a: &'a [u8],
    lda: usize,
    m: usize,
    row_terms: &'a [i32],
    row_zeros: &'a [i32],
    /// What the stored filters leave out, and the input channels that decode its k.
    residual: &'a Residual,
    c_in: usize,
    /// The laid-out input.
    b: &'a [u8],
    grid: &'a Grid,
    /// Groups of four input channels.
    groups: usize,
    /// The sum of the input each grid column reads.
    col_sums: &'a [i32],
    /// The shifted zero point of the input.
    zb: i32,
    /// Output columns.
    ow: usize,
    image: usize,
    rows: &'a R,
}

/// Runs the convolution of `shape` on the image planes `x` (`batch x C` planes, `signed` when
/// `int8`, zero point `zx`) with filters packed by [`pack_filters`], handing every output row
/// segment to `rows` once.
pub(super) fn run<R: Rows>(
    shape: &ConvShape,
    (x, signed, zx): (&[u8], bool, i32),
    filters: &Filters,
    rows: &R,
) -> Result<()> {
    let (a, lda, level) = (&filters.data[..], filters.lda, filters.level);
    let (row_terms, row_zeros) = (&filters.row_terms[..], &filters.row_zeros[..]);
    let g = &shape.geo;
    let grid = Grid::new(shape)?;
    let groups = shape.c_in / 4;
    let in_plane = g.input[1] * g.input[2];
    if (filters.m, filters.k) != (shape.c_out, shape.c_in * grid.taps.len()) {
        return Err(Error::Eval("filters packed for another convolution".into()));
    }
    if x.len() != shape.batch * shape.c_in * in_plane {
        return Err(Error::Eval("X does not hold its shape".into()));
    }
    if shape.c_out == 0 || grid.columns == 0 {
        return Ok(());
    }
    let (flip, shift) = level.b_bytes(signed);
    let pad = (zx as u8) ^ flip;
    let group_len = grid.group_len();
    // AMX reads the channels of a tap 64 at a time: the groups past the last are padding.
    #[cfg(target_arch = "x86_64")]
    let stored = match level {
        Level::Amx => x86::amx_channels(shape.c_in) / 4,
        _ => groups,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let stored = groups;
    let len = group_len
        .checked_mul(stored * 4)
        .ok_or_else(|| Error::Eval("the convolution's input grid is too large".into()))?;
    let tiles = grid.columns.div_ceil(COLS);
    let image_len = shape.c_in * in_plane;
    for (image, x) in x.chunks_exact(image_len.max(1)).enumerate() {
        let write = |out: &mut [MaybeUninit<u8>]| {
            use rayon::prelude::*;
            let min_len = crate::par::min_len(groups, &[group_len, 4]);
            out.par_chunks_exact_mut(group_len * 4)
                .enumerate()
                .with_min_len(min_len)
                .for_each(|(q, out)| {
                    if q < groups {
                        lay_out_group(x, shape, &grid, q, (flip, pad, level), out);
                    } else {
                        out.iter_mut().for_each(|v| {
                            v.write(pad);
                        });
                    }
                });
        };
        // SAFETY: `lay_out_group` writes every byte of its group, the padding's are `pad`.
        let b = unsafe { Scratch::new_with(len, write) }?;
        let mut sums = try_vec(group_len, 0i32)?;
        position_sums(&b[..group_len * groups * 4], &mut sums, level);
        let mut col_sums = try_vec(tiles * COLS, 0i32)?;
        for &t in &grid.taps {
            for (s, &v) in col_sums.iter_mut().zip(&sums[t..]) {
                *s = s.wrapping_add(v);
            }
        }
        let task = Task {
            a,
            lda,
            m: shape.c_out,
            row_terms,
            row_zeros,
            residual: &filters.residual,
            c_in: shape.c_in,
            b: &b,
            grid: &grid,
            groups,
            col_sums: &col_sums,
            zb: zx.wrapping_add(shift),
            ow: g.output[2],
            image,
            rows,
        };
        let threads = crate::par::threads();
        let whole = crate::par::min_len(1, &[shape.c_out, grid.columns, lda]) == usize::MAX;
        if threads <= 1 || whole {
            // SAFETY: one task stores every tile.
            unsafe { tiles_of(&task, 0..tiles, level) };
        } else {
            use rayon::prelude::*;
            let parts = threads.min(tiles);
            (0..parts).into_par_iter().for_each(|p| {
                let part = tiles * p / parts..tiles * (p + 1) / parts;
                // SAFETY: each task stores the columns of its own tiles.
                unsafe { tiles_of(&task, part, level) };
            });
        }
    }
    Ok(())
}

/// The segments of the output that grid columns `j0..j0 + COLS` hold, into `at`; returns how
/// many.
fn segments(j0: usize, grid: &Grid, ow: usize, at: &mut [Segment; COLS + 1]) -> usize {
    let mut n = 0;
    let end = (j0 + COLS).min(grid.columns);
    let mut j = j0;
    while j < end {
        let (oy, ox) = (j / grid.width, j % grid.width);
        let row_end = (oy * grid.width + grid.width).min(end);
        if ox < ow {
            let len = (ow - ox).min(row_end - j);
            at[n] = Segment {
                from: j - j0,
                to: oy * ow + ox,
                len,
            };
            n += 1;
        }
        j = row_end;
    }
    n
}

/// Runs the tiles of grid columns `tiles` (32 each) for every output channel at `level`.
///
/// # Safety
/// No concurrent task stores these columns; the filters were packed for `level`.
unsafe fn tiles_of<R: Rows>(t: &Task<'_, R>, tiles: Range<usize>, level: Level) {
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY: the filters were packed for this level, which the CPU runs.
        Level::Avx512Vnni => unsafe { x86::tiles(t, tiles) },
        // SAFETY: as above; `Amx` runs where `amx::usable` said so.
        Level::Amx => unsafe { x86::tiles_amx(t, tiles) },
        // SAFETY: as above; `Avx2Pairs` runs on AVX2.
        Level::Avx2Pairs => unsafe { x86::tiles_avx2(t, tiles) },
        _ => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (t, tiles, level);
}

/// The zero-point terms of one tile (module doc): `C[i, j] = S[i, j] - rows[i] - zeros[i]
/// cols[j]` for the tile's rows `i` and columns `j` (rows past the last filter take zeros).
struct Correction<'a> {
    rows: [i32; ROWS],
    zeros: [i32; ROWS],
    cols: &'a [i32; COLS],
}

impl<'a, R: Rows> Task<'a, R> {
    /// The zero-point terms of the tile of filters from `row0` and grid columns from `j0`.
    #[inline(always)]
    fn correction(&self, row0: usize, j0: usize) -> Correction<'a> {
        let (mut rows, mut zeros) = ([0; ROWS], [0; ROWS]);
        for (r, (zr, zc)) in rows.iter_mut().zip(&mut zeros).enumerate() {
            if let (Some(&ri), Some(&zi)) =
                (self.row_terms.get(row0 + r), self.row_zeros.get(row0 + r))
            {
                (*zr, *zc) = (self.zb.wrapping_mul(ri), zi);
            }
        }
        let cols = self.col_sums[j0..j0 + COLS]
            .try_into()
            .unwrap_or(&[0; COLS]);
        Correction { rows, zeros, cols }
    }
}

/// Hands each output channel's row of a corrected tile to the sink (the caller's CPU runs
/// `level`).
#[inline(always)]
fn finish_tile<R: Rows>(
    t: &Task<'_, R>,
    row0: usize,
    acc: &[[i32; COLS]; ROWS],
    at: &[Segment],
    level: Level,
) {
    for (r, sums) in acc.iter().enumerate().take(ROWS.min(t.m - row0)) {
        // SAFETY: the segments lie in the output plane of channel `row0 + r` and these
        // columns are this task's alone (the caller's promise).
        unsafe { t.rows.finish(t.image, row0 + r, sums, at, level) };
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{finish_tile, segments, Correction, Level, Rows, Segment, Task, COLS, ROWS};
    use crate::error::{Error, Result};
    use crate::ops::nn::amx;
    use crate::tensor::Scratch;
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;
    use std::ops::Range;

    /// Filters of one AMX block: 32, two A tiles of 16.
    const AMX_ROWS: usize = 32;

    /// The bytes of a tap in an AMX filter row: the input channels, in whole chunks of 64.
    pub(super) fn amx_channels(c_in: usize) -> usize {
        c_in.div_ceil(64) * 64
    }

    /// The filters' shifted rows (`rows`, `lda` bytes apart, k tap-major) laid out for
    /// [`tiles_amx`]: one row of `taps * amx_channels(c_in)` bytes per filter, each tap's
    /// channels padded with zeros to whole chunks of 64 (zero bytes of A add nothing to a sum,
    /// whatever the padded input holds), the filters padded with zero rows to whole blocks.
    pub(super) fn pack_amx(
        rows: &[u8],
        lda: usize,
        (c_out, c_in, taps): (usize, usize, usize),
    ) -> Result<Scratch<u8>> {
        let cp = amx_channels(c_in);
        let row_len = taps * cp;
        let len = c_out
            .div_ceil(AMX_ROWS)
            .checked_mul(AMX_ROWS * row_len)
            .ok_or_else(|| Error::Eval("W does not hold its shape".into()))?;
        let write = |out: &mut [MaybeUninit<u8>]| {
            for (f, out) in out.chunks_exact_mut(row_len.max(1)).enumerate() {
                for (t, out) in out.chunks_exact_mut(cp.max(1)).enumerate() {
                    let from = if f < c_out {
                        &rows[f * lda + t * c_in..][..c_in]
                    } else {
                        &[][..]
                    };
                    for (c, o) in out.iter_mut().enumerate() {
                        o.write(from.get(c).copied().unwrap_or(0));
                    }
                }
            }
        };
        // SAFETY: the rows cover all `len` bytes.
        Ok(unsafe { Scratch::new_with(len, write) }?)
    }

    /// The tile loop on AMX: blocks of 32 filters by 32 grid columns (one [`amx::Block`]),
    /// summed tap by tap over the channels in chunks of 64 (16 groups; the filters and the
    /// laid-out input padded to whole chunks), stored, then corrected and handed to the sink
    /// eight filters at a time.
    ///
    /// # Safety
    /// As `super::tiles_of`, where [`amx::usable`] holds; the filters were packed by
    /// [`pack_amx`] and the input laid out with its padding groups.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    pub(super) unsafe fn tiles_amx<R: Rows>(t: &Task<'_, R>, tiles: Range<usize>) {
        let grid = t.grid;
        let group_bytes = grid.group_len() * 4;
        let chunks = t.groups.div_ceil(16);
        let cp = chunks * 64;
        let last_tap = grid.taps.iter().copied().max().unwrap_or(0);
        let mut at = [Segment::default(); COLS + 1];
        let mut sums = [[0i32; COLS]; AMX_ROWS];
        // SAFETY: the caller's promise.
        let block = unsafe { amx::Block::begin() };
        for k in tiles {
            let j0 = k * COLS;
            let n = segments(j0, grid, t.ow, &mut at);
            // Every read of B: the last padded group, the last tap, 32 columns of four bytes.
            assert!(
                (chunks * 16 - 1) * group_bytes + (last_tap + j0 + COLS) * 4 <= t.b.len()
                    && j0 + COLS <= t.col_sums.len()
            );
            let b = t.b.as_ptr().wrapping_add(j0 * 4);
            for row0 in (0..t.m).step_by(AMX_ROWS) {
                // Every read of A: 32 rows of every tap's chunks.
                assert!((row0 + AMX_ROWS) * t.lda <= t.a.len() && grid.taps.len() * cp <= t.lda);
                let a = t.a.as_ptr().wrapping_add(row0 * t.lda);
                block.zero();
                for (i, &tap) in grid.taps.iter().enumerate() {
                    for c in 0..chunks {
                        let ap = a.wrapping_add(i * cp + c * 64);
                        let bp = b.wrapping_add(tap * 4 + c * 16 * group_bytes);
                        let a_rows = (ap, ap.wrapping_add(16 * t.lda), t.lda);
                        // SAFETY: the asserts above bound the 16 rows of each operand.
                        unsafe { block.multiply(a_rows, (bp, bp.wrapping_add(64), group_bytes)) };
                    }
                }
                block.store(&mut sums, 0);
                for (q, acc) in sums.chunks_exact_mut(ROWS).enumerate() {
                    let r0 = row0 + q * ROWS;
                    if r0 >= t.m {
                        break;
                    }
                    let acc: &mut [[i32; COLS]; ROWS] = acc.try_into().expect("eight rows");
                    correct(&t.correction(r0, j0), acc);
                    finish_tile(t, r0, acc, &at[..n], Level::Amx);
                }
            }
        }
    }

    /// Subtracts a tile's zero-point terms from its sums, in AVX-512 registers.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn correct(c: &Correction<'_>, acc: &mut [[i32; COLS]; ROWS]) {
        // SAFETY: the column sums are 32 `i32`, two registers.
        let cs = unsafe { [0, 16].map(|h| _mm512_loadu_si512(c.cols.as_ptr().add(h).cast())) };
        for ((row, &zr), &zc) in acc.iter_mut().zip(&c.rows).zip(&c.zeros) {
            let (zr, zc) = (_mm512_set1_epi32(zr), _mm512_set1_epi32(zc));
            for (h, &cs) in cs.iter().enumerate() {
                // SAFETY: a row holds 32 `i32`, two registers.
                unsafe {
                    let to = row.as_mut_ptr().add(16 * h).cast::<__m512i>();
                    let terms = _mm512_add_epi32(zr, _mm512_mullo_epi32(zc, cs));
                    _mm512_storeu_si512(to, _mm512_sub_epi32(_mm512_loadu_si512(to), terms));
                }
            }
        }
    }

    /// The tile loop of both levels: for each tile of 32 grid columns and eight filters,
    /// `sum(row0, j0, a, b, correction, acc)` sums it from the filters' tile at `a` and the
    /// columns' input at `b` (reads this function bounds: every tap of every group from `b`, the
    /// tile's `taps * groups` runs of 32 bytes from `a`) and corrects it for the zero points,
    /// then its rows go to the sink at `level`.
    #[inline(always)]
    fn tile_loop<R: Rows>(
        t: &Task<'_, R>,
        tiles: Range<usize>,
        level: Level,
        mut sum: impl FnMut(
            usize,
            usize,
            *const u8,
            *const u8,
            &Correction<'_>,
            &mut [[i32; COLS]; ROWS],
        ),
    ) {
        let grid = t.grid;
        let group_bytes = grid.group_len() * 4;
        let taps = grid.taps.len();
        let last_tap = grid.taps.iter().copied().max().unwrap_or(0);
        let mut at = [Segment::default(); COLS + 1];
        let mut acc = [[0i32; COLS]; ROWS];
        for k in tiles {
            let j0 = k * COLS;
            let n = segments(j0, grid, t.ow, &mut at);
            // Every read of B: the last group, the last tap, 32 columns of four bytes.
            assert!(
                (t.groups - 1) * group_bytes + (last_tap + j0 + COLS) * 4 <= t.b.len()
                    && j0 + COLS <= t.col_sums.len()
            );
            let b = t.b.as_ptr().wrapping_add(j0 * 4);
            for row0 in (0..t.m).step_by(ROWS) {
                // Every read of A: one tile of `taps * groups` runs of 32 bytes.
                assert!((row0 + ROWS) * t.lda <= t.a.len() && taps * t.groups * 4 <= t.lda);
                let a = t.a.as_ptr().wrapping_add(row0 * t.lda);
                sum(row0, j0, a, b, &t.correction(row0, j0), &mut acc);
                finish_tile(t, row0, &acc, &at[..n], level);
            }
        }
    }

    /// # Safety
    /// As `super::tiles_of`, on a CPU with AVX-512F, BW, VL, DQ and VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    pub(super) unsafe fn tiles<R: Rows>(t: &Task<'_, R>, tiles: Range<usize>) {
        let reads = (&t.grid.taps[..], t.grid.group_len() * 4, t.groups);
        tile_loop(
            t,
            tiles,
            Level::Avx512Vnni,
            |_, _, a, b, correction, acc| {
                // SAFETY: `tile_loop` bounds every read.
                unsafe { sum_tile(a, b, reads, correction, acc) }
            },
        );
    }

    /// [`tiles`] at `Avx2Pairs`: each tile summed in four passes of four filters by sixteen
    /// columns ([`sum_quarter`]), then the filters' residual added from the laid-out input.
    ///
    /// # Safety
    /// As `super::tiles_of`, on a CPU with AVX2, the filters packed for `Avx2Pairs`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn tiles_avx2<R: Rows>(t: &Task<'_, R>, tiles: Range<usize>) {
        let reads = (&t.grid.taps[..], t.grid.group_len() * 4, t.groups);
        tile_loop(
            t,
            tiles,
            Level::Avx2Pairs,
            |row0, j0, a, b, correction, acc| {
                for (r0, c0) in [(0, 0), (0, 16), (4, 0), (4, 16)] {
                    // SAFETY: `tile_loop` bounds every read; the quarter's rows and columns lie in
                    // the tile.
                    unsafe {
                        let (a, b) = (a.wrapping_add(4 * r0), b.wrapping_add(4 * c0));
                        sum_quarter(a, b, reads, (r0, c0), acc)
                    };
                }
                add_residual(t, row0, j0, acc);
                correct_avx2(correction, acc);
            },
        );
    }

    /// Subtracts a tile's zero-point terms from its sums, in AVX2 registers.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn correct_avx2(c: &Correction<'_>, acc: &mut [[i32; COLS]; ROWS]) {
        for ((sums, &zr), &zc) in acc.iter_mut().zip(&c.rows).zip(&c.zeros) {
            let (zr, zc) = (_mm256_set1_epi32(zr), _mm256_set1_epi32(zc));
            for (eight, cols) in sums.chunks_exact_mut(8).zip(c.cols.chunks_exact(8)) {
                // SAFETY: both chunks hold eight `i32`.
                unsafe {
                    let cs = _mm256_loadu_si256(cols.as_ptr().cast());
                    let terms = _mm256_add_epi32(zr, _mm256_mullo_epi32(zc, cs));
                    let to = eight.as_mut_ptr().cast::<__m256i>();
                    _mm256_storeu_si256(to, _mm256_sub_epi32(_mm256_loadu_si256(to), terms));
                }
            }
        }
    }

    /// Adds to a tile's sums what its filters' stored bytes leave out: each residual entry
    /// `(k, v)` of a filter, `v` times the input its k reads at each of the tile's columns
    /// (the byte of channel `k % 4` of each column's four, shifted down and masked, times `v`
    /// by `vpmaddwd`: the byte and `v`, within `i8`, are the low `i16` of their lanes).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn add_residual<R: Rows>(
        t: &Task<'_, R>,
        row0: usize,
        j0: usize,
        acc: &mut [[i32; COLS]; ROWS],
    ) {
        let group_bytes = t.grid.group_len() * 4;
        let byte = _mm256_set1_epi32(0xff);
        for (r, sums) in acc.iter_mut().enumerate().take(ROWS.min(t.m - row0)) {
            for &(kk, v) in t.residual.row(row0 + r) {
                let (tap, c) = (kk / t.c_in, kk % t.c_in);
                let at = (c / 4) * group_bytes + (t.grid.taps[tap] + j0) * 4;
                let columns = &t.b[at..at + 4 * COLS];
                let shift = _mm_cvtsi32_si128(8 * (c % 4) as i32);
                let by = _mm256_set1_epi32(i32::from(v as i16 as u16));
                for (h, eight) in columns.chunks_exact(32).enumerate() {
                    // SAFETY: `eight` holds 32 bytes and a row of `sums` 32 lanes.
                    unsafe {
                        let x = _mm256_loadu_si256(eight.as_ptr().cast());
                        let x = _mm256_and_si256(_mm256_srl_epi32(x, shift), byte);
                        let to = sums.as_mut_ptr().add(8 * h).cast::<__m256i>();
                        let y = _mm256_add_epi32(_mm256_loadu_si256(to), _mm256_madd_epi16(x, by));
                        _mm256_storeu_si256(to, y);
                    }
                }
            }
        }
    }

    /// Sums a quarter of a tile, four filters (the rows of a [`super::Filters`] tile from `a`)
    /// by sixteen grid columns of the laid-out input from `b`, into `acc` from row `r0` and
    /// column `c0`: per group of four channels, `vpmaddubsw` of the input's unsigned bytes by a
    /// filter's broadcast signed ones (exact: its pairs are bounded), then `vpmaddwd` by ones.
    ///
    /// # Safety
    /// Every read lies in the buffers (see `tiles_avx2`).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn sum_quarter(
        a: *const u8,
        b: *const u8,
        (taps, group_bytes, groups): (&[usize], usize, usize),
        (r0, c0): (usize, usize),
        acc: &mut [[i32; COLS]; ROWS],
    ) {
        let ones = _mm256_set1_epi16(1);
        let mut c = [[_mm256_setzero_si256(); 2]; 4];
        for (t, &tap) in taps.iter().enumerate() {
            // SAFETY (all reads): the caller's promise.
            let mut bp = unsafe { b.add(tap * 4) };
            let mut ap = unsafe { a.add(t * groups * 4 * ROWS) };
            for _ in 0..groups {
                unsafe {
                    let b0 = _mm256_loadu_si256(bp.cast());
                    let b1 = _mm256_loadu_si256(bp.add(32).cast());
                    for (r, cr) in c.iter_mut().enumerate() {
                        let x = ap.add(4 * r).cast::<i32>().read_unaligned();
                        let av = _mm256_set1_epi32(x);
                        let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(b0, av), ones);
                        let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(b1, av), ones);
                        cr[0] = _mm256_add_epi32(cr[0], p0);
                        cr[1] = _mm256_add_epi32(cr[1], p1);
                    }
                    bp = bp.add(group_bytes);
                    ap = ap.add(4 * ROWS);
                }
            }
        }
        for (row, cr) in acc[r0..r0 + 4].iter_mut().zip(&c) {
            // SAFETY: a row holds 32 i32, and `c0 + 16 <= 32`.
            unsafe {
                _mm256_storeu_si256(row.as_mut_ptr().add(c0).cast(), cr[0]);
                _mm256_storeu_si256(row.as_mut_ptr().add(c0 + 8).cast(), cr[1]);
            }
        }
    }

    /// [`super::position_sums`] of unsigned bytes (the input as `Avx2Pairs` stores it).
    ///
    /// # Safety
    /// The CPU runs AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn position_sums_unsigned(b: &[u8], sums: &mut [i32]) {
        let n = sums.len();
        let groups = b.len() / (4 * n).max(1);
        assert!(b.len() == groups * 4 * n);
        let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
        let whole = n / 8 * 8;
        for p0 in (0..whole).step_by(8) {
            let mut acc = _mm256_setzero_si256();
            for q in 0..groups {
                // SAFETY: positions `p0..p0 + 8` of group `q` lie in `b` (asserted above).
                let v = unsafe { _mm256_loadu_si256(b.as_ptr().add((q * n + p0) * 4).cast()) };
                let pairs = _mm256_maddubs_epi16(v, ones8);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones16));
            }
            // SAFETY: `p0 + 8 <= n`.
            unsafe { _mm256_storeu_si256(sums.as_mut_ptr().add(p0).cast(), acc) };
        }
        for (p, s) in sums.iter_mut().enumerate().skip(whole) {
            *s = (0..groups)
                .flat_map(|q| &b[(q * n + p) * 4..(q * n + p) * 4 + 4])
                .map(|&v| i32::from(v))
                .sum();
        }
    }

    /// Writes the `n` columns of four rows (each XORed with `flip`) as `n` runs of four bytes,
    /// one per column, into `out` (`4 n` bytes).
    ///
    /// # Safety
    /// The CPU runs AVX-512F and AVX-512BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn interleave(rows: [&[u8]; 4], flip: u8, out: &mut [MaybeUninit<u8>]) {
        let n = rows[0].len();
        assert!(rows.iter().all(|r| r.len() == n) && out.len() == 4 * n);
        let f = _mm512_set1_epi8(flip as i8);
        let mut c0 = 0;
        while c0 < n {
            let cols = (n - c0).min(64);
            let mask = if cols == 64 {
                u64::MAX
            } else {
                (1u64 << cols) - 1
            };
            // SAFETY: the mask keeps the loads to the rows' `n` bytes and the stores to the
            // output's `4 n` (asserted above).
            unsafe {
                let load = |r: &[u8]| {
                    _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, r.as_ptr().add(c0).cast()), f)
                };
                let [r0, r1, r2, r3] = rows.map(load);
                // Within each 128-bit lane: pairs, then runs of four, of 16 columns.
                let (a, b) = (_mm512_unpacklo_epi8(r0, r1), _mm512_unpackhi_epi8(r0, r1));
                let (c, d) = (_mm512_unpacklo_epi8(r2, r3), _mm512_unpackhi_epi8(r2, r3));
                let e0 = _mm512_unpacklo_epi16(a, c);
                let e1 = _mm512_unpackhi_epi16(a, c);
                let e2 = _mm512_unpacklo_epi16(b, d);
                let e3 = _mm512_unpackhi_epi16(b, d);
                // Lane `l` of `e0..e3` holds columns `16 l ..`, four at a time: a 4x4
                // transpose of lanes puts columns `16 l .. 16 l + 16` in register `l`.
                let t0 = _mm512_shuffle_i64x2::<0x44>(e0, e1);
                let t1 = _mm512_shuffle_i64x2::<0x44>(e2, e3);
                let t2 = _mm512_shuffle_i64x2::<0xee>(e0, e1);
                let t3 = _mm512_shuffle_i64x2::<0xee>(e2, e3);
                let outs = [
                    _mm512_shuffle_i64x2::<0x88>(t0, t1),
                    _mm512_shuffle_i64x2::<0xdd>(t0, t1),
                    _mm512_shuffle_i64x2::<0x88>(t2, t3),
                    _mm512_shuffle_i64x2::<0xdd>(t2, t3),
                ];
                let dst = out.as_mut_ptr().add(4 * c0);
                for (l, v) in outs.into_iter().enumerate() {
                    let left = (4 * cols).saturating_sub(64 * l).min(64);
                    if left == 0 {
                        break;
                    }
                    let m = if left == 64 {
                        u64::MAX
                    } else {
                        (1u64 << left) - 1
                    };
                    _mm512_mask_storeu_epi8(dst.add(64 * l).cast(), m, v);
                }
            }
            c0 += cols;
        }
    }

    /// The sum over every group of the four bytes (as `i8`) at each position of `b` (groups of
    /// `sums.len()` positions), into `sums`.
    ///
    /// # Safety
    /// The CPU runs AVX-512F, AVX-512BW and AVX-512 VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn position_sums(b: &[u8], sums: &mut [i32]) {
        let n = sums.len();
        let groups = b.len() / (4 * n).max(1);
        assert!(b.len() == groups * 4 * n);
        let ones = _mm512_set1_epi8(1);
        let mut p0 = 0;
        while p0 < n {
            let k = (n - p0).min(16);
            let mask = if k == 16 { u16::MAX } else { (1u16 << k) - 1 };
            // SAFETY: the mask keeps every load within position `n` of its group and the store
            // within `sums`.
            unsafe {
                let mut acc = _mm512_setzero_si512();
                for q in 0..groups {
                    let at = b.as_ptr().add((q * n + p0) * 4);
                    let v = _mm512_maskz_loadu_epi32(mask, at.cast());
                    acc = _mm512_dpbusd_epi32(acc, ones, v);
                }
                _mm512_mask_storeu_epi32(sums.as_mut_ptr().add(p0).cast(), mask, acc);
            }
            p0 += k;
        }
    }

    /// Sums one tile and subtracts its zero-point terms (`correction`): eight filters (a tile
    /// of [`super::Filters`] from `a`) by 32 grid columns of the
    /// laid-out input from `b`, every tap (`taps`, positions from `b`) of every group of four
    /// channels (`group_bytes` apart).
    ///
    /// # Safety
    /// Every read lies in the buffers (see `tiles`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn sum_tile(
        a: *const u8,
        b: *const u8,
        (taps, group_bytes, groups): (&[usize], usize, usize),
        correction: &Correction<'_>,
        acc: &mut [[i32; COLS]; ROWS],
    ) {
        let mut c = [[_mm512_setzero_si512(); 2]; ROWS];
        for (t, &tap) in taps.iter().enumerate() {
            // SAFETY (all reads): the caller's promise.
            let mut bp = unsafe { b.add(tap * 4) };
            let mut ap = unsafe { a.add(t * groups * 4 * ROWS) };
            for _ in 0..groups {
                unsafe {
                    let b0 = _mm512_loadu_si512(bp.cast());
                    let b1 = _mm512_loadu_si512(bp.add(64).cast());
                    for (r, cr) in c.iter_mut().enumerate() {
                        let x = ap.add(4 * r).cast::<i32>().read_unaligned();
                        let av = _mm512_set1_epi32(x);
                        cr[0] = _mm512_dpbusd_epi32(cr[0], av, b0);
                        cr[1] = _mm512_dpbusd_epi32(cr[1], av, b1);
                    }
                    bp = bp.add(group_bytes);
                    ap = ap.add(4 * ROWS);
                }
            }
        }
        // SAFETY: the column sums are 32 `i32`, two registers.
        let cs =
            unsafe { [0, 16].map(|h| _mm512_loadu_si512(correction.cols.as_ptr().add(h).cast())) };
        for (r, (row, cr)) in acc.iter_mut().zip(&c).enumerate() {
            let zr = _mm512_set1_epi32(correction.rows[r]);
            let zc = _mm512_set1_epi32(correction.zeros[r]);
            let corrected = |h: usize| {
                _mm512_sub_epi32(cr[h], _mm512_add_epi32(zr, _mm512_mullo_epi32(zc, cs[h])))
            };
            // SAFETY: a row holds 32 i32, two registers.
            unsafe {
                _mm512_storeu_si512(row.as_mut_ptr().cast(), corrected(0));
                _mm512_storeu_si512(row.as_mut_ptr().add(16).cast(), corrected(1));
            }
        }
    }
}
