//! The pools: `MaxPool` (opsets 1, 8, 10, 11, 12, 22), `AveragePool` (1, 7, 10, 11, 19, 22),
//! `LpPool` (1, 2, 11, 18, 22) and their global forms `GlobalMaxPool`, `GlobalAveragePool` (1,
//! 22) and `GlobalLpPool` (1, 2, 22), over 1 to 3 spatial dims.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__MaxPool.html>,
//! <https://onnx.ai/onnx/operators/onnx__AveragePool.html>,
//! <https://onnx.ai/onnx/operators/onnx__LpPool.html> and the global pages.
//!
//! One kernel per reduction serves every opset: attributes an opset does not define are absent,
//! and their defaults (no dilation, floor mode) give the older behaviour. Windows see only input
//! elements; `AveragePool` with `count_include_pad` divides by the taps that land inside the input
//! or its explicit pads (never the extra positions `ceil_mode` adds). `MaxPool`'s optional
//! `Indices` output holds flat indices into the input, with the spatial dims in row-major
//! (`storage_order` 0) or column-major (1) order. `LpPool` opset 1 has a float `p`; later opsets an
//! integer one.
//!
//! Why one file: the six pools share one window geometry (`Pool`, its spans and the walk over
//! every window); what makes the file long is `MaxPool`'s own path for its values alone (interior
//! columns by stride phases, compiled per SIMD level) and the tests that hold it to the window
//! walk.

use crate::tensor::try_vec;
use bytemuck::Pod;
use half::{bf16, f16};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::{AttrValue, Dim, Node, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::halves::{self, Widen};
use super::super::util::{required, unsupported_type};
use super::super::vector::{as_slots, assume_written, copy, fill, max_assign};
use std::mem::MaybeUninit;

use super::super::vector::ColumnBlocks;
use super::super::{Attributes, EvalCtx, InferCtx};
use super::values::{checked_product, input_dims, tensor_type};
use super::window::{Geometry3, WindowAttrs};
use crate::ops::num::{dispatch_num, dispatch_real, Arith, Real};

/// The taps of one output index along one dim: the first input position, the number of taps
/// inside the input, and the number inside the input or its explicit pads.
#[derive(Clone, Copy, Debug)]
struct Span {
    first: usize,
    count: usize,
    padded: usize,
}

/// The window attributes and `ceil_mode` of a pooling node, parsed once per plan.
#[derive(Clone, Debug)]
pub(super) struct PoolAttrs {
    window: WindowAttrs,
    ceil: bool,
}

impl Attributes for PoolAttrs {
    fn parse(node: &Node, _opset: i64) -> Result<PoolAttrs> {
        Ok(PoolAttrs {
            window: WindowAttrs::parse(node)?,
            ceil: node.attr_int("ceil_mode", 0)? != 0,
        })
    }
}

/// A pool over one input: geometry, the taps of every output index, and the plane count.
struct Pool {
    geo: Geometry3,
    spans: [Vec<Span>; 3],
    planes: usize,
    out_shape: Vec<usize>,
}

impl Pool {
    fn new(attrs: &PoolAttrs, x: &[usize]) -> Result<Pool> {
        if x.len() < 3 {
            return Err(Error::Eval(format!(
                "X {x:?} needs a batch, a channel and at least one spatial dim"
            )));
        }
        let window = attrs.window.window(x.len() - 2, None)?;
        let geometry = window.resolve(&x[2..], attrs.ceil)?;
        let geo = geometry.to_3d()?;
        let mut out_shape = x[..2].to_vec();
        out_shape.extend(&geometry.output);
        // An empty output (a batch or a channel count of 0, or a spatial output of 0) has no
        // windows: its other dims, and the input's spatial dims, may multiply past `usize`.
        let planes = x[0] * x[1];
        if checked_product(&out_shape)? == 0 {
            return Ok(Pool {
                geo,
                spans: Default::default(),
                planes: 0,
                out_shape,
            });
        }
        // One span per output index along each dim: as many as the output dims say, which are
        // bounded by the (non-empty, checked) output.
        let mut spans: [Vec<Span>; 3] = Default::default();
        for (i, spans) in spans.iter_mut().enumerate() {
            spans
                .try_reserve_exact(geo.output[i])
                .map_err(|_| Error::Limit(format!("output dims {out_shape:?} are too large")))?;
            spans.extend((0..geo.output[i]).map(|o| {
                let (_, count, first) = geo.taps_inside(i, o);
                Span {
                    first,
                    count,
                    padded: geo.taps_padded(i, o),
                }
            }));
        }
        Ok(Pool {
            geo,
            spans,
            planes,
            out_shape,
        })
    }

    /// Whether the output has no elements (then no window is walked and nothing else about the
    /// geometry is computed).
    fn is_empty(&self) -> bool {
        self.planes == 0
    }

    /// Output elements per plane (0 for an empty output).
    fn out_plane(&self) -> usize {
        if self.is_empty() {
            0
        } else {
            self.geo.out_plane()
        }
    }

    /// Input elements per plane (0 for an empty output).
    fn in_plane(&self) -> usize {
        if self.is_empty() {
            0
        } else {
            self.geo.in_plane()
        }
    }

    /// Runs `f(plane_input, output_index, positions)` for every output element of every plane in
    /// parallel; `positions` lists the input offsets (within the plane) the window covers.
    fn for_each<O: Send>(
        &self,
        x_plane: usize,
        out: &mut [O],
        f: impl Fn(usize, &[usize], &Span3, &mut O) + Sync,
    ) {
        let out_plane = self.out_plane();
        if out_plane == 0 {
            return;
        }
        let [_, ih, iw] = self.geo.input;
        let [dd, dh, dw] = self.geo.dilations;
        let [kd, kh, kw] = self.geo.kernel;
        out.par_chunks_mut(out_plane)
            .enumerate()
            .with_min_len(crate::par::min_len(self.planes, &[out_plane, kd, kh, kw]))
            .for_each(|(plane, y)| {
                let mut positions = Vec::new();
                let mut k = 0;
                for sz in &self.spans[0] {
                    for sy in &self.spans[1] {
                        for sx in &self.spans[2] {
                            positions.clear();
                            for jz in 0..sz.count {
                                let z = sz.first + jz * dd;
                                for jy in 0..sy.count {
                                    let row = (z * ih + sy.first + jy * dh) * iw;
                                    positions
                                        .extend((0..sx.count).map(|jx| row + sx.first + jx * dw));
                                }
                            }
                            // In `f64`: a huge kernel over its SAME padding can count more
                            // than 2^64 taps.
                            let spans = Span3 {
                                padded: sz.padded as f64 * sy.padded as f64 * sx.padded as f64,
                            };
                            f(plane * x_plane, &positions, &spans, &mut y[k]);
                            k += 1;
                        }
                    }
                }
            });
    }
}

/// What a window knows besides its positions.
struct Span3 {
    /// Taps inside the input or its explicit pads.
    padded: f64,
}

/// The flat index `MaxPool` reports for plane offset `base` and spatial offset `pos` (row-major
/// within the plane), in the requested storage order.
fn flat_index(geo: &Geometry3, base: usize, pos: usize, column_major: bool) -> i64 {
    if !column_major {
        return (base + pos) as i64;
    }
    let [id, ih, iw] = geo.input;
    let (z, y, x) = (pos / (ih * iw), (pos / iw) % ih, pos % iw);
    (base + z + y * id + x * id * ih) as i64
}

fn max_pool<T: Copy + PartialOrd + Default + Send + Sync>(
    pool: &Pool,
    x: &[T],
    column_major: bool,
) -> Result<Vec<(T, i64)>> {
    let mut out = try_vec(pool.planes * pool.out_plane(), (T::default(), -1i64))?;
    let x_plane = pool.in_plane();
    pool.for_each(x_plane, &mut out, |base, positions, _, o| {
        let mut best: Option<(T, usize)> = None;
        for &p in positions {
            let v = x[base + p];
            if best.is_none_or(|(b, _)| v > b) {
                best = Some((v, p));
            }
        }
        if let Some((v, p)) = best {
            *o = (v, flat_index(&pool.geo, base, p, column_major));
        }
    });
    Ok(out)
}

/// The output columns of a max pool whose windows lie wholly inside the input row (dilation 1),
/// and how to take their maxima as whole vectors: the row of column maxima is split into its
/// `stride` phases, where tap `kx` of output column `ox` is element `ox + shift` of one phase,
/// so each tap is one element-wise maximum over the interior columns. Measured on Zen 5 at 1
/// thread (`multigather run --repeat 500`, medians): a 3x3 stride-2 pool of 16 planes of
/// 160x160 0.124 -> 0.078 ms, against one scalar maximum per window (onnxruntime 1.32: 0.067
/// ms).
struct Interior {
    stride: usize,
    /// Output columns `lo..hi` whose windows are inside the row.
    columns: (usize, usize),
    /// For each tap: its phase and shift.
    taps: Vec<(usize, isize)>,
}

impl Interior {
    fn of(pool: &Pool) -> Interior {
        let (sw, kw, pw, dw) = (
            pool.geo.strides[2].max(1),
            pool.geo.kernel[2],
            pool.geo.pad_begin[2],
            pool.geo.dilations[2],
        );
        let whole = |ox: usize, s: &Span| s.count == kw && s.first + pw == ox * sw;
        let spans = &pool.spans[2];
        let lo = spans.iter().enumerate().position(|(ox, s)| whole(ox, s));
        let (lo, hi) = match lo {
            Some(lo) if dw == 1 && kw > 0 => {
                let n = spans[lo..]
                    .iter()
                    .enumerate()
                    .take_while(|&(i, s)| whole(lo + i, s))
                    .count();
                (lo, lo + n)
            }
            _ => (0, 0),
        };
        // Only a pool with interior columns has taps to list: then `kw` columns fit in the
        // input row, which is in memory.
        let taps = (0..kw)
            .take(if lo < hi { kw } else { 0 })
            .map(|kx| {
                let off = kx as isize - pw as isize;
                (
                    off.rem_euclid(sw as isize) as usize,
                    off.div_euclid(sw as isize),
                )
            })
            .collect();
        Interior {
            stride: sw,
            columns: (lo, hi),
            taps,
        }
    }

    /// The row of column maxima `row` split into its stride phases in `phases` (phase `p` at
    /// `p * plen`, `plen = ceil(len / stride)`), or `row` itself for stride 1.
    #[inline(always)]
    fn split<'a, T: Pod>(&self, row: &'a [T], phases: &'a mut [T]) -> &'a [T] {
        let sw = self.stride;
        let plen = row.len().div_ceil(sw);
        match sw {
            1 => row,
            2 => {
                let (even, odd) = phases.split_at_mut(plen);
                let pairs = row.len() / 2;
                for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(row.chunks_exact(2)) {
                    (*e, *o) = (pair[0], pair[1]);
                }
                if row.len() % 2 == 1 {
                    even[pairs] = row[row.len() - 1];
                }
                phases
            }
            _ => {
                for (p, phase) in phases.chunks_mut(plen).enumerate() {
                    for (d, &v) in phase.iter_mut().zip(row.iter().skip(p).step_by(sw)) {
                        *d = v;
                    }
                }
                phases
            }
        }
    }

    /// `out[i]` = the maximum of the window of output column `lo + i`, from the column maxima
    /// split into phases of `plen` ([`Interior::split`]). Writes every element of `out` when the
    /// pool has interior columns (`lo < hi`); two to four taps are taken in one pass.
    #[inline(always)]
    fn windows<T: Pod + PartialOrd>(&self, split: &[T], plen: usize, out: &mut [MaybeUninit<T>]) {
        let (lo, n) = (self.columns.0 as isize, out.len());
        let tap = |&(p, shift): &(usize, isize)| {
            // Inside the row: `lo + shift` is the first interior column's tap, at least 0.
            let at = (lo + shift) as usize;
            &split[p * plen + at..][..n]
        };
        match self.taps.as_slice() {
            [a, b] => max_of(out, [tap(a), tap(b)]),
            [a, b, c] => max_of(out, [tap(a), tap(b), tap(c)]),
            [a, b, c, d] => max_of(out, [tap(a), tap(b), tap(c), tap(d)]),
            [first, rest @ ..] => {
                let out = copy(out, tap(first));
                for t in rest {
                    max_assign(out, tap(t));
                }
            }
            [] => {}
        }
    }
}

/// The maxima alone (no `Indices` output): the same windows as [`max_pool`], read straight from
/// the input rows without listing positions or computing indices. The taps are compared column by
/// column rather than row by row, which gives the same maximum (only which of two equal values,
/// `-0.0` and `0.0`, or which NaN wins can differ).
fn max_values<T: Pod + PartialOrd + Default + Send + Sync>(
    pool: &Pool,
    x: &[T],
    dtype: DataType,
) -> Result<Tensor> {
    let out_plane = pool.out_plane();
    if out_plane == 0 {
        return Ok(Tensor::zeros(dtype, &pool.out_shape)?);
    }
    let x_plane = pool.in_plane();
    let (oh, ow) = (pool.spans[1].len(), pool.spans[2].len());
    let row = Interior::of(pool);
    let min_len = crate::par::min_len(pool.planes, &[x_plane.max(out_plane)]);
    let mut status = Ok(());
    let out = Tensor::uninit(dtype, &pool.out_shape)?.fill(|out: &mut [MaybeUninit<T>]| {
        status = if min_len != usize::MAX && pool.spans[0].len() == 1 && oh > 1 {
            // Bands of output rows over every plane: a thread reads the input rows the
            // operator before wrote on it (split by rows or positions, as convolutions are)
            // and writes the rows the one after reads there.
            let chunk = oh.div_ceil(2 * crate::par::threads());
            ColumnBlocks::new(out, pool.planes, out_plane).and_then(|blocks| {
                (0..oh).into_par_iter().step_by(chunk).try_for_each(|oy0| {
                    let oy1 = (oy0 + chunk).min(oh);
                    // SAFETY: this task alone writes rows `oy0..oy1` of every plane, and
                    // each slice of them is dropped before the next is taken.
                    let planes = (0..pool.planes)
                        .map(|p| (p, unsafe { blocks.slots(p, oy0 * ow, (oy1 - oy0) * ow) }));
                    band_maxima(pool, &row, x, planes, oy0..oy1)
                })
            })
        } else {
            out.par_chunks_mut(out_plane)
                .enumerate()
                .with_min_len(min_len)
                .try_for_each(|(plane, y)| {
                    band_maxima(pool, &row, x, std::iter::once((plane, Some(y))), 0..oh)
                })
        };
        match status {
            // SAFETY: `plane_maxima` writes every element of its plane, and the planes cover
            // the output.
            Ok(()) => unsafe { assume_written(out) },
            // Short, so that `fill` fails; the error is returned below.
            Err(_) => &mut [],
        }
    });
    status?;
    Ok(out?)
}

/// The maxima of output rows `rows` of each plane of `planes` (its index, and those rows of its
/// output), in scratch space allocated once for them all.
fn band_maxima<'y, T: Pod + PartialOrd + Default>(
    pool: &Pool,
    row: &Interior,
    x: &[T],
    planes: impl Iterator<Item = (usize, Option<&'y mut [MaybeUninit<T>]>)>,
    rows: std::ops::Range<usize>,
) -> Result<()> {
    let (x_plane, iw) = (pool.in_plane(), pool.geo.input[2]);
    let mut column_max = try_vec(iw, T::default())?;
    let mut phases = try_vec(row.stride * iw.div_ceil(row.stride), T::default())?;
    let mut starts = Vec::new();
    for (plane, y) in planes {
        let (Some(xp), Some(y)) = (x.get(plane * x_plane..).and_then(|x| x.get(..x_plane)), y)
        else {
            return Err(Error::Eval("X or Y does not hold its planes".into()));
        };
        let scratch = Scratch {
            rows: &mut starts,
            column_max: &mut column_max,
            phases: &mut phases,
        };
        plane_maxima(pool, row, xp, y, scratch, rows.clone());
    }
    Ok(())
}

/// The space one plane of [`plane_maxima`] works in.
struct Scratch<'s, T> {
    /// The starts of the input rows one output row reads.
    rows: &'s mut Vec<usize>,
    /// Their maximum, column by column (one input row long).
    column_max: &'s mut [T],
    /// That row split into its stride phases.
    phases: &'s mut [T],
}

/// The maxima of output rows `rows` (of every depth) of one plane `xp` into `y`, compiled per
/// SIMD level as one piece: the element-wise maxima of short rows are too short to pay a
/// dispatch each. Measured on Zen 5 at
/// 1 thread (`multigather run --repeat 300`, medians), a 3x3 stride-2 pool of 16 planes of
/// 160x160: 0.078 -> 0.066 ms (onnxruntime 1.32: 0.028 ms).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn plane_maxima<T: Pod + PartialOrd + Default>(
    pool: &Pool,
    row: &Interior,
    xp: &[T],
    y: &mut [MaybeUninit<T>],
    scratch: Scratch<'_, T>,
    rows: std::ops::Range<usize>,
) {
    let [_, ih, iw] = pool.geo.input;
    let [dd, dh, dw] = pool.geo.dilations;
    let ow = pool.spans[2].len();
    let Scratch {
        rows: starts,
        column_max,
        phases,
    } = scratch;
    let mut y = y.chunks_mut(ow.max(1));
    let spans_y = pool.spans[1].get(rows).unwrap_or_default();
    for sz in &pool.spans[0] {
        for sy in spans_y {
            let Some(y) = y.next() else {
                return;
            };
            // The start of every input row the windows of this output row read.
            starts.clear();
            for jz in 0..sz.count {
                let z = sz.first + jz * dd;
                starts.extend((0..sy.count).map(|jy| (z * ih + sy.first + jy * dh) * iw));
            }
            let Some((&first_row, rest)) = starts.split_first() else {
                // Every window of the row lies in the padding: it sees no element.
                fill(y, T::default());
                continue;
            };
            // The maximum over this output row's input rows, column by column: the windows
            // then read one row instead of one per tap, and this loop vectorises. Two or three
            // rows (a kernel of 2 or 3) are taken in one pass, for stride 2 straight into the
            // two phases the windows read.
            let row_at = |r: usize| &xp[r..][..iw];
            let plen = iw.div_ceil(row.stride);
            let (lo, hi) = row.columns;
            let split: &[T] = match *rest {
                [b] | [b, _] if row.stride == 2 && lo < hi => {
                    let (even, odd) = phases.split_at_mut(plen);
                    if let [_, c] = *rest {
                        let rows = [row_at(first_row), row_at(b), row_at(c)];
                        max_of_pairs(even, odd, rows);
                        if iw % 2 == 1 {
                            max_of_init(&mut even[plen - 1..], rows.map(|r| &r[iw - 1..]));
                        }
                    } else {
                        let rows = [row_at(first_row), row_at(b)];
                        max_of_pairs(even, odd, rows);
                        if iw % 2 == 1 {
                            max_of_init(&mut even[plen - 1..], rows.map(|r| &r[iw - 1..]));
                        }
                    }
                    phases
                }
                _ => {
                    match *rest {
                        [b] => max_of_init(column_max, [row_at(first_row), row_at(b)]),
                        [b, c] => {
                            max_of_init(column_max, [row_at(first_row), row_at(b), row_at(c)])
                        }
                        _ => {
                            column_max.copy_from_slice(row_at(first_row));
                            for &r in rest {
                                max_assign(column_max, row_at(r));
                            }
                        }
                    }
                    row.split(column_max, phases)
                }
            };
            if lo < hi {
                row.windows(split, plen, &mut y[lo..hi]);
            }
            // Column `c` of the column maxima, from its phase.
            let column = |c: usize| match row.stride {
                1 => split[c],
                sw => split[(c % sw) * plen + c / sw],
            };
            // The columns at the edges, window by window.
            for ox in (0..lo).chain(hi..ow) {
                let (sx, o) = (&pool.spans[2][ox], &mut y[ox]);
                if sx.count == 0 {
                    o.write(T::default());
                    continue;
                }
                let select = |best: T, v: T| if v > best { v } else { best };
                let taps = (1..sx.count).map(|j| column(sx.first + j * dw));
                o.write(taps.fold(column(sx.first), select));
            }
        }
    }
}

/// Elements per step of [`max_of`] and [`max_of_pairs`]: each step's maxima go through a
/// fixed-size array, which the compiler turns into vector maxima for every element type (an
/// element-indexed loop stayed scalar for bytes: a `uint8` 3x3 stride-2 pool of 64 planes of
/// 112x112, Intel Xeon family 6 model 167, one thread: 0.59 -> 0.25 ms).
const CHUNK: usize = 32;

/// The starts of the chunks that cover `n >= CHUNK` elements: whole chunks, the last one ending
/// at `n` (overlapping the one before: its elements are computed twice, to the same values).
fn chunk_starts(n: usize) -> impl Iterator<Item = usize> {
    let last = n - CHUNK;
    (0..last).step_by(CHUNK).chain(std::iter::once(last))
}

/// The maximum of `values[k]` over the `N` values in order, `>` deciding (as [`max_assign`]).
#[inline(always)]
fn max_in_order<T: Copy + PartialOrd, const N: usize>(values: [T; N]) -> T {
    let mut m = values[0];
    for &v in &values[1..] {
        m = if v > m { v } else { m };
    }
    m
}

/// `dst[i]` = the maximum of `rows[k][i]` over the rows in order (`>` deciding, as
/// [`max_assign`] does), in one pass.
#[inline(always)]
fn max_of<T: Copy + PartialOrd, const N: usize>(dst: &mut [MaybeUninit<T>], rows: [&[T]; N]) {
    let n = dst.len();
    let rows = rows.map(|r| &r[..n]);
    if n < CHUNK {
        for (i, d) in dst.iter_mut().enumerate() {
            d.write(max_in_order(rows.map(|r| r[i])));
        }
        return;
    }
    for at in chunk_starts(n) {
        let chunks = rows.map(|r| &r[at..at + CHUNK]);
        let m: [T; CHUNK] = std::array::from_fn(|i| max_in_order(chunks.map(|r| r[i])));
        for (d, v) in dst[at..at + CHUNK].iter_mut().zip(m) {
            d.write(v);
        }
    }
}

/// [`max_of`] into initialised elements.
#[inline(always)]
fn max_of_init<T: Copy + PartialOrd, const N: usize>(dst: &mut [T], rows: [&[T]; N]) {
    // SAFETY: `max_of` writes only initialised values.
    max_of(unsafe { as_slots(dst) }, rows)
}

/// [`max_of`] over rows of pairs, each maximum written to `even` or `odd` by its column's
/// parity (the column maxima split into the two phases of stride 2 in the same pass), for as
/// many pairs as the rows and both phases hold (an odd last column is left to the caller).
#[inline(always)]
fn max_of_pairs<T: Copy + PartialOrd, const N: usize>(
    even: &mut [T],
    odd: &mut [T],
    rows: [&[T]; N],
) {
    let shortest = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    let n = even.len().min(odd.len()).min(shortest / 2);
    let rows = rows.map(|r| &r[..2 * n]);
    if n < CHUNK {
        for i in 0..n {
            even[i] = max_in_order(rows.map(|r| r[2 * i]));
            odd[i] = max_in_order(rows.map(|r| r[2 * i + 1]));
        }
        return;
    }
    for c in chunk_starts(n) {
        let chunks = rows.map(|r| &r[2 * c..2 * c + 2 * CHUNK]);
        let m: [T; 2 * CHUNK] = std::array::from_fn(|i| max_in_order(chunks.map(|r| r[i])));
        let (e, o) = (&mut even[c..c + CHUNK], &mut odd[c..c + CHUNK]);
        for ((e, o), pair) in e.iter_mut().zip(o).zip(m.chunks_exact(2)) {
            (*e, *o) = (pair[0], pair[1]);
        }
    }
}

/// Whether `MaxPool` takes `dtype`: the floating-point types, int8 and uint8.
fn max_pool_takes(dtype: DataType) -> bool {
    use DataType::*;
    matches!(dtype, Float | Double | Float16 | Bfloat16 | Int8 | Uint8)
}

pub(super) fn eval_max_pool(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let pool = Pool::new(ctx.attrs::<PoolAttrs>()?.as_ref(), x.shape())?;
    let column_major = ctx.node.attr_int("storage_order", 0)? != 0;
    let dtype = x.dtype();
    if !max_pool_takes(dtype) {
        return Err(unsupported_type("MaxPool", dtype));
    }
    if ctx.node.outputs.len() < 2 {
        // Half types pool their widened values: a maximum is one of its elements (or the
        // padding's -inf), which narrows back exactly, and f32 comparisons vectorise where
        // those of `half`'s types do not (the float16 ResNet-50's 112x112 pool, Intel Xeon
        // family 6 model 167, one thread: 2.0 ms elementwise on float16).
        let values = match dtype {
            DataType::Float16 => max_values_widened::<f16>(&pool, x)?,
            DataType::Bfloat16 => max_values_widened::<bf16>(&pool, x)?,
            _ => None,
        };
        if let Some(values) = values {
            return Ok(vec![values]);
        }
        let values = dispatch_num!(dtype, T => {
            max_values(&pool, x.as_slice::<T>()?, dtype)?
        }, _ => return Err(unsupported_type("MaxPool", dtype)));
        return Ok(vec![values]);
    }
    let (values, indices) = dispatch_num!(dtype, T => {
        let out = max_pool(&pool, x.as_slice::<T>()?, column_major)?;
        let (v, i): (Vec<T>, Vec<i64>) = out.into_iter().unzip();
        (Tensor::from_vec(dtype, &pool.out_shape, v)?, i)
    }, _ => return Err(unsupported_type("MaxPool", dtype)));
    let mut outs = vec![values];
    if ctx.node.outputs.len() > 1 {
        outs.push(Tensor::from_vec(DataType::Int64, &pool.out_shape, indices)?);
    }
    Ok(outs)
}

/// [`max_values`] of a half-precision `x` on its values widened to `f32`, narrowed back.
fn max_values_widened<T: Widen + Pod>(pool: &Pool, x: &Tensor) -> Result<Option<Tensor>> {
    let wide = halves::widened_scratch(x.as_slice::<T>()?)?;
    let y = max_values(pool, &wide, DataType::Float)?;
    let y = y.as_slice::<f32>()?;
    let out = Tensor::uninit(x.dtype(), &pool.out_shape)?;
    Ok(Some(
        out.fill(|d: &mut [MaybeUninit<T>]| T::narrow_slice(y, d))?,
    ))
}

fn average_pool<T: Real>(pool: &Pool, x: &[T], include_pad: bool) -> Result<Vec<T>> {
    let mut out = try_vec(pool.planes * pool.out_plane(), T::ZERO)?;
    pool.for_each(pool.in_plane(), &mut out, |base, positions, spans, o| {
        let sum: T = positions.iter().map(|&p| x[base + p]).sum();
        let n = if include_pad {
            T::from_f64(spans.padded)
        } else {
            T::from_usize(positions.len())
        };
        *o = sum / n;
    });
    Ok(out)
}

pub(super) fn eval_average_pool(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let pool = Pool::new(ctx.attrs::<PoolAttrs>()?.as_ref(), x.shape())?;
    let include_pad = ctx.node.attr_int("count_include_pad", 0)? != 0;
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        R::store(dtype, &pool.out_shape, average_pool(&pool, &R::load(x)?, include_pad)?)?
    }, _ => return Err(unsupported_type("AveragePool", dtype)));
    Ok(vec![y])
}

/// The `p` attribute of the Lp pools: a float in opset 1, an integer later; 2 by default.
fn lp_exponent(node: &Node) -> Result<f64> {
    let p = match node.attr("p") {
        None => 2.0,
        Some(AttrValue::Int(p)) => *p as f64,
        Some(AttrValue::Float(p)) => *p as f64,
        Some(other) => {
            return Err(Error::Eval(format!(
                "attribute 'p' must be a number, found {}",
                other.type_name()
            )))
        }
    };
    if p > 0.0 {
        Ok(p)
    } else {
        Err(Error::Eval(format!("p must be positive, found {p}")))
    }
}

/// `(sum |v|^p)^(1/p)`, with the common `p = 2` and `p = 1` computed directly.
fn lp_norm<T: Real>(values: impl Iterator<Item = T>, p: f64) -> T {
    if p == 2.0 {
        values.map(|v| v * v).sum::<T>().sqrt()
    } else if p == 1.0 {
        values.map(|v| v.abs()).sum()
    } else {
        let pt = T::from_f64(p);
        values
            .map(|v| v.abs().powf(pt))
            .sum::<T>()
            .powf(T::from_f64(1.0 / p))
    }
}

pub(super) fn eval_lp_pool(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let pool = Pool::new(ctx.attrs::<PoolAttrs>()?.as_ref(), x.shape())?;
    let p = lp_exponent(ctx.node)?;
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        let xv = R::load(x)?;
        let mut out = try_vec(pool.planes * pool.out_plane(), R::ZERO)?;
        pool.for_each(pool.in_plane(), &mut out, |base, positions, _, o| {
            *o = lp_norm(positions.iter().map(|&q| xv[base + q]), p);
        });
        R::store(dtype, &pool.out_shape, out)?
    }, _ => return Err(unsupported_type("LpPool", dtype)));
    Ok(vec![y])
}

/// The reduction of a global pool.
#[derive(Clone, Copy)]
enum Global {
    Average,
    Max,
    Lp(f64),
}

/// Reduces every `(n, c)` plane of `x` to one value.
fn global_pool(ctx: &EvalCtx<'_>, x: &Tensor, kind: Global) -> Result<Tensor> {
    let shape = x.shape();
    if shape.len() < 2 {
        return Err(ctx.error(format!("X {shape:?} needs a batch and a channel dim")));
    }
    // An empty tensor can have dims whose product overflows.
    let plane = checked_product(&shape[2..])?;
    let mut out_shape = shape[..2].to_vec();
    out_shape.resize(shape.len(), 1);
    let dtype = x.dtype();
    dispatch_real!(dtype, R => {
        let xv = R::load(x)?;
        let values: Vec<R> = if plane == 0 {
            try_vec(shape[0] * shape[1], R::ZERO)?
        } else {
            xv.par_chunks(plane)
                .with_min_len(crate::par::min_len(xv.len() / plane, &[plane]))
                .map(|p| match kind {
                    Global::Average => p.iter().copied().sum::<R>() / R::from_usize(plane),
                    Global::Max => p.iter().copied().fold(p[0], |a, b| if b > a { b } else { a }),
                    Global::Lp(e) => lp_norm(p.iter().copied(), e),
                })
                .collect()
        };
        R::store(dtype, &out_shape, values)
    }, _ => Err(unsupported_type(&ctx.node.op_type, dtype)))
}

pub(super) fn eval_global_average_pool(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    Ok(vec![global_pool(
        ctx,
        required(inputs, 0)?,
        Global::Average,
    )?])
}

pub(super) fn eval_global_max_pool(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    Ok(vec![global_pool(ctx, required(inputs, 0)?, Global::Max)?])
}

pub(super) fn eval_global_lp_pool(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let p = lp_exponent(ctx.node)?;
    Ok(vec![global_pool(ctx, required(inputs, 0)?, Global::Lp(p))?])
}

/// The output dims of a windowed pool.
fn pool_dims(ctx: &InferCtx<'_>) -> Option<Vec<Dim>> {
    let x = input_dims(ctx, 0).filter(|x| x.len() >= 3)?;
    let attrs = ctx.attrs::<PoolAttrs>().ok()?;
    let spatial = attrs
        .window
        .window(x.len() - 2, None)
        .map(|w| w.output_dims(&x[2..], attrs.ceil))
        .unwrap_or_else(|_| vec![Dim::Unknown; x.len() - 2]);
    Some(x[..2].iter().cloned().chain(spatial).collect())
}

pub(super) fn infer_pool(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = pool_dims(ctx);
    let mut outs = vec![tensor_type(ctx.input(0).and_then(|t| t.elem), dims.clone())];
    if ctx.node.outputs.len() > 1 {
        outs.push(tensor_type(Some(DataType::Int64), dims));
    }
    Ok(outs)
}

pub(super) fn infer_global_pool(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = input_dims(ctx, 0).filter(|x| x.len() >= 2).map(|x| {
        let mut d = x[..2].to_vec();
        d.resize(x.len(), Dim::Known(1));
        d
    });
    Ok(vec![tensor_type(ctx.input(0).and_then(|t| t.elem), dims)])
}

#[cfg(test)]
mod tests {
    use crate::ops::eval_node;

    use super::*;

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    fn pool_node(op: &str, outputs: &[&str], attrs: &[(&str, AttrValue)]) -> Node {
        attrs
            .iter()
            .fold(Node::new(op, "p", ["x"], outputs.to_vec()), |n, (k, v)| {
                n.with_attr(k, v.clone())
            })
    }

    fn ints(v: &[i64]) -> AttrValue {
        AttrValue::Ints(v.to_vec())
    }

    #[test]
    fn max_pool_with_indices_in_both_storage_orders() {
        // The ONNX maxpool_with_argmax_2d_precomputed_strides example: 5x5, kernel 2, stride 2.
        let x = f32s(&[1, 1, 5, 5], (1..=25).map(|v| v as f32).collect());
        for (order, want_idx) in [(0, [6i64, 8, 16, 18]), (1, [6, 16, 8, 18])] {
            let node = pool_node(
                "MaxPool",
                &["y", "i"],
                &[
                    ("kernel_shape", ints(&[2, 2])),
                    ("strides", ints(&[2, 2])),
                    ("storage_order", AttrValue::Int(order)),
                ],
            );
            let y = eval_node(&node, 22, &[Some(&x)]).unwrap();
            assert_eq!(y[0], f32s(&[1, 1, 2, 2], vec![7.0, 9.0, 17.0, 19.0]));
            assert_eq!(y[1].as_slice::<i64>().unwrap(), &want_idx);
        }
    }

    #[test]
    fn half_max_pools_are_the_maxima_of_their_elements() {
        // Padded 3x3 windows with stride 2 over 2 planes of 9x7, with a NaN and infinities.
        let n = 2 * 9 * 7;
        let mut v: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % 23) as f32 * 0.37 - 4.0)
            .collect();
        v[5] = f32::NAN;
        v[20] = f32::NEG_INFINITY;
        v[70] = f32::INFINITY;
        // Values float16 holds exactly, so the float pool is the float16 one's oracle.
        let v: Vec<f32> = v.into_iter().map(|x| f16::from_f32(x).to_f32()).collect();
        let node = pool_node(
            "MaxPool",
            &["y"],
            &[
                ("kernel_shape", ints(&[3, 3])),
                ("strides", ints(&[2, 2])),
                ("pads", ints(&[1, 1, 1, 1])),
            ],
        );
        let float = eval_node(&node, 22, &[Some(&f32s(&[1, 2, 9, 7], v.clone()))]).unwrap();
        let want: Vec<f32> = float[0].as_slice::<f32>().unwrap().to_vec();
        let halves: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        let x = Tensor::from_vec(DataType::Float16, &[1, 2, 9, 7], halves).unwrap();
        let y = eval_node(&node, 22, &[Some(&x)]).unwrap();
        let got: Vec<f32> = y[0]
            .as_slice::<f16>()
            .unwrap()
            .iter()
            .map(|h| h.to_f32())
            .collect();
        assert_eq!(y[0].shape(), float[0].shape());
        for (g, w) in got.iter().zip(&want) {
            assert!(g == w || (g.is_nan() && w.is_nan()), "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn average_pool_counts_pads_only_when_asked() {
        // 3x3 input, kernel 3, pads 1: the corner window sees 4 values of 9 taps.
        let x = f32s(&[1, 1, 3, 3], (1..=9).map(|v| v as f32).collect());
        let attrs = |include: i64| {
            pool_node(
                "AveragePool",
                &["y"],
                &[
                    ("kernel_shape", ints(&[3, 3])),
                    ("pads", ints(&[1, 1, 1, 1])),
                    ("count_include_pad", AttrValue::Int(include)),
                ],
            )
        };
        let y = eval_node(&attrs(0), 22, &[Some(&x)]).unwrap();
        assert_eq!(
            y[0].as_slice::<f32>().unwrap()[0],
            (1.0 + 2.0 + 4.0 + 5.0) / 4.0
        );
        let y = eval_node(&attrs(1), 22, &[Some(&x)]).unwrap();
        assert_eq!(
            y[0].as_slice::<f32>().unwrap()[0],
            (1.0 + 2.0 + 4.0 + 5.0) / 9.0
        );
        assert_eq!(y[0].as_slice::<f32>().unwrap()[4], 5.0);
    }

    #[test]
    fn maxima_in_bands_of_rows_on_three_threads_agree_with_the_windows() {
        // Pools large enough to split: 2-D ones in bands of output rows over every plane
        // (bands at the top and bottom padding, strides, a ceil-mode row past the input), a
        // 3-D one plane by plane; against the path that walks each window for its index.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (shape, k, s, pads) in [
            (
                vec![2, 4, 100, 100],
                vec![3, 3],
                vec![2, 2],
                vec![1, 1, 1, 1],
            ),
            (
                vec![1, 3, 91, 111],
                vec![2, 4],
                vec![1, 3],
                vec![0, 2, 1, 1],
            ),
            (
                vec![1, 2, 200, 64],
                vec![3, 3],
                vec![1, 1],
                vec![1, 1, 1, 1],
            ),
            (
                vec![1, 2, 10, 60, 60],
                vec![3, 3, 3],
                vec![2, 2, 2],
                vec![1; 6],
            ),
        ] {
            let n: usize = shape.iter().product();
            let x = f32s(
                &shape,
                (0..n).map(|i| ((i * 37) % 23) as f32 - 11.0).collect(),
            );
            let as_ints = |v: &[usize]| ints(&v.iter().map(|&v| v as i64).collect::<Vec<_>>());
            let attrs = [
                ("kernel_shape", as_ints(&k)),
                ("strides", as_ints(&s)),
                ("pads", as_ints(&pads)),
                ("ceil_mode", AttrValue::Int(1)),
            ];
            let values =
                pool.install(|| eval_node(&pool_node("MaxPool", &["y"], &attrs), 22, &[Some(&x)]));
            let windows = crate::par::serial(|| {
                eval_node(&pool_node("MaxPool", &["y", "i"], &attrs), 22, &[Some(&x)])
            });
            assert_eq!(values.unwrap()[0], windows.unwrap()[0], "{shape:?} {k:?}");
        }
    }

    #[test]
    fn interior_columns_take_the_maxima_of_the_windows() {
        // The maxima alone (interior columns by phases, edge columns window by window) against
        // the path that walks each window for its index: strides 1 to 3, odd and even widths,
        // pads on either side, ceil mode, dilations (no interior), 1-D and 2-D, ties.
        for (shape, k, s, d, pads, ceil) in [
            (vec![2, 3, 9, 11], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], 0),
            (vec![1, 2, 8, 12], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], 0),
            (vec![1, 2, 7, 13], [2, 4], [1, 3], [1, 1], [0, 2, 1, 1], 1),
            (vec![1, 1, 6, 10], [3, 2], [1, 1], [1, 1], [1, 0, 1, 1], 0),
            (vec![1, 1, 5, 15], [2, 3], [2, 3], [1, 2], [0, 1, 0, 2], 0),
            (vec![1, 2, 1, 30], [1, 5], [1, 2], [1, 1], [0, 2, 0, 2], 1),
            // The conv-net's 3x3 stride-2 pool; two, four and one rows per window; windows
            // wholly in the padding (rows and columns that see no element).
            (vec![1, 3, 20, 20], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], 0),
            (vec![1, 2, 6, 7], [2, 2], [2, 2], [1, 1], [0, 0, 0, 0], 1),
            (vec![1, 2, 9, 9], [4, 3], [1, 2], [1, 1], [1, 1, 2, 1], 0),
            (vec![1, 1, 4, 5], [2, 2], [1, 1], [1, 1], [2, 2, 0, 0], 0),
            // Rows of whole chunks and a last chunk that overlaps the one before (the
            // ResNet's 112-wide pool, odd and even widths), for every element type below.
            (vec![1, 2, 7, 113], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], 0),
            (vec![1, 2, 6, 112], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], 0),
            (vec![1, 1, 5, 70], [2, 3], [1, 1], [1, 1], [0, 1, 1, 1], 0),
            (vec![1, 1, 3, 64], [1, 2], [1, 2], [1, 1], [0, 0, 0, 0], 0),
        ] {
            let n: usize = shape.iter().product();
            let value = |i: usize| ((i * 37) % 23) as f32 - 11.0;
            let float = f32s(&shape, (0..n).map(value).collect());
            let bytes = |dtype, shift: f32| {
                let data: Vec<u8> = (0..n)
                    .map(|i| (value(i) * 11.0 + shift) as i32 as u8)
                    .collect();
                Tensor::from_bytes(dtype, &shape, &data).unwrap()
            };
            let attrs = [
                ("kernel_shape", ints(&[k[0] as i64, k[1] as i64])),
                ("strides", ints(&[s[0] as i64, s[1] as i64])),
                ("dilations", ints(&[d[0] as i64, d[1] as i64])),
                ("pads", ints(&pads.map(|p| p as i64))),
                ("ceil_mode", AttrValue::Int(ceil)),
            ];
            for x in [
                float,
                bytes(DataType::Uint8, 128.0),
                bytes(DataType::Int8, 0.0),
            ] {
                let values = eval_node(&pool_node("MaxPool", &["y"], &attrs), 22, &[Some(&x)]);
                let windows =
                    eval_node(&pool_node("MaxPool", &["y", "i"], &attrs), 22, &[Some(&x)]);
                assert_eq!(
                    values.unwrap()[0],
                    windows.unwrap()[0],
                    "{shape:?} {k:?} {s:?} {:?}",
                    x.dtype()
                );
            }
        }
    }

    #[test]
    fn ceil_mode_dilations_and_lp() {
        // The ONNX maxpool_2d_ceil example: 4x4, kernel 3, stride 2, ceil -> 2x2.
        let x = f32s(&[1, 1, 4, 4], (1..=16).map(|v| v as f32).collect());
        let node = pool_node(
            "MaxPool",
            &["y"],
            &[
                ("kernel_shape", ints(&[3, 3])),
                ("strides", ints(&[2, 2])),
                ("ceil_mode", AttrValue::Int(1)),
            ],
        );
        let y = eval_node(&node, 22, &[Some(&x)]).unwrap();
        assert_eq!(y[0], f32s(&[1, 1, 2, 2], vec![11.0, 12.0, 15.0, 16.0]));
        // maxpool_2d_dilations: kernel 2, dilation 2 over 4x4 -> 2x2.
        let node = pool_node(
            "MaxPool",
            &["y"],
            &[
                ("kernel_shape", ints(&[2, 2])),
                ("dilations", ints(&[2, 2])),
            ],
        );
        let y = eval_node(&node, 22, &[Some(&x)]).unwrap();
        assert_eq!(y[0], f32s(&[1, 1, 2, 2], vec![11.0, 12.0, 15.0, 16.0]));
        let node = pool_node(
            "LpPool",
            &["y"],
            &[("kernel_shape", ints(&[2])), ("p", AttrValue::Int(2))],
        );
        let y = eval_node(&node, 22, &[Some(&f32s(&[1, 1, 3], vec![3.0, 4.0, 0.0]))]).unwrap();
        assert_eq!(y[0], f32s(&[1, 1, 2], vec![5.0, 4.0]));
    }

    #[test]
    fn global_pools_reduce_each_plane() {
        let x = f32s(
            &[1, 2, 2, 2],
            vec![1.0, 2.0, 3.0, 4.0, -1.0, -2.0, -3.0, -4.0],
        );
        let run = |op: &str| eval_node(&Node::new(op, "g", ["x"], ["y"]), 22, &[Some(&x)]).unwrap();
        assert_eq!(
            run("GlobalAveragePool")[0],
            f32s(&[1, 2, 1, 1], vec![2.5, -2.5])
        );
        assert_eq!(
            run("GlobalMaxPool")[0],
            f32s(&[1, 2, 1, 1], vec![4.0, -1.0])
        );
        let y = run("GlobalLpPool")[0].as_slice::<f32>().unwrap().to_vec();
        assert!((y[0] - 30f32.sqrt()).abs() < 1e-6);
    }

    #[test]
    fn pools_need_a_kernel_and_spatial_dims() {
        let x = f32s(&[1, 4], vec![0.0; 4]);
        let node = pool_node("MaxPool", &["y"], &[("kernel_shape", ints(&[2]))]);
        let err = eval_node(&node, 22, &[Some(&x)]).unwrap_err();
        assert!(err.to_string().contains("spatial"), "{err}");
        let node = pool_node("AveragePool", &["y"], &[]);
        let err = eval_node(&node, 22, &[Some(&f32s(&[1, 1, 4], vec![0.0; 4]))]).unwrap_err();
        assert!(err.to_string().contains("kernel_shape"), "{err}");
    }
}
