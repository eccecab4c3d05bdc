//! What the layout kernels share: one output writer that copies runs of elements from several
//! source tensors (every element type, strings and packed types included), a gather of
//! per-axis index maps built on it, numeric conversions for the few kernels that compute values,
//! and small helpers for shape functions over possibly symbolic dims.
//!
//! Why one file: the run writer and the index-map gather built on it are one mechanism that every
//! layout kernel uses; a sixth of the file is its tests.

use crate::error::{Error, Result};
use crate::ir::{Dim, Shape, TensorType};
use crate::tensor::{element_count, try_with_capacity, Tensor};
use crate::DataType;
use std::mem::MaybeUninit;

use super::super::vector::assume_written;

use super::super::util::{strides, to_i64s};
use crate::ops::num::{dispatch_width, real_values, Float};

use super::super::InferCtx;

/// The most elements an output may have, so that a buffer of any element type (strings
/// included) or of `f64` working values stays addressable.
pub(super) const MAX_ELEMENTS: usize = isize::MAX as usize / 32;

/// The element count of an output of `shape`, which must not exceed [`MAX_ELEMENTS`].
pub(super) fn checked_len(shape: &[usize]) -> Result<usize> {
    element_count(shape)
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| Error::Eval(format!("output shape {shape:?} is too large")))
}

/// Builds an output tensor front to back from runs of elements of source tensors.
///
/// Fixed-width elements are copied as bytes, strings cloned, packed sub-byte elements moved one
/// at a time; every run is checked against its source and the output before it is copied, so
/// callers may compute positions from model values without further checks.
pub(super) struct Writer<'a> {
    sources: &'a [&'a Tensor],
    out: Out,
    pos: usize,
    total: usize,
}

enum Out {
    Bytes(Tensor, usize),
    Strings(Vec<Vec<u8>>, Vec<usize>),
    Packed(Tensor),
}

impl<'a> Writer<'a> {
    /// A writer of a `dtype` tensor of `shape`; every source must have that element type.
    pub fn new(dtype: DataType, shape: &[usize], sources: &'a [&'a Tensor]) -> Result<Writer<'a>> {
        if let Some(s) = sources.iter().find(|s| s.dtype() != dtype) {
            return Err(Error::Eval(format!(
                "expected {dtype} values, found {}",
                s.dtype()
            )));
        }
        let total = checked_len(shape)?;
        let out = match dtype.byte_size() {
            _ if dtype == DataType::String => Out::Strings(Vec::new(), shape.to_vec()),
            Some(w) => Out::Bytes(Tensor::zeros(dtype, shape)?, w),
            None => Out::Packed(Tensor::zeros(dtype, shape)?),
        };
        Ok(Writer {
            sources,
            out,
            pos: 0,
            total,
        })
    }

    /// Checks that `count` elements fit in the output and that source `src` holds elements
    /// `start .. start + span`.
    fn check(&self, src: usize, start: usize, span: usize, count: usize) -> Result<&'a Tensor> {
        let source = *self
            .sources
            .get(src)
            .ok_or_else(|| Error::Eval(format!("no source tensor {src}")))?;
        let fits_source = start.checked_add(span).is_some_and(|e| e <= source.len());
        let fits_out = self.pos.checked_add(count).is_some_and(|e| e <= self.total);
        if !fits_source || !fits_out {
            return Err(Error::Eval(format!(
                "element run {start}+{span} is out of bounds of a source of {} elements",
                source.len()
            )));
        }
        Ok(source)
    }

    /// Appends elements `start .. start + len` of source `src`.
    pub fn copy(&mut self, src: usize, start: usize, len: usize) -> Result<()> {
        let source = self.check(src, start, len, len)?;
        match &mut self.out {
            Out::Bytes(t, w) => {
                let w = *w;
                t.as_bytes_mut()?[self.pos * w..(self.pos + len) * w]
                    .copy_from_slice(&source.as_bytes()?[start * w..(start + len) * w]);
            }
            Out::Strings(v, _) => v.extend_from_slice(&source.as_strings()?[start..start + len]),
            Out::Packed(t) => {
                for i in 0..len {
                    t.copy_element_from(self.pos + i, source, start + i)?;
                }
            }
        }
        self.pos += len;
        Ok(())
    }

    /// Appends element `index` of source `src`, `count` times.
    pub fn repeat(&mut self, src: usize, index: usize, count: usize) -> Result<()> {
        let source = self.check(src, index, 1, count)?;
        match &mut self.out {
            Out::Bytes(t, w) => {
                let w = *w;
                let value = &source.as_bytes()?[index * w..(index + 1) * w];
                let dst = &mut t.as_bytes_mut()?[self.pos * w..(self.pos + count) * w];
                if value.iter().any(|&b| b != 0) {
                    dst.chunks_exact_mut(w)
                        .for_each(|c| c.copy_from_slice(value));
                }
            }
            Out::Strings(v, _) => {
                let value = &source.as_strings()?[index];
                v.extend(std::iter::repeat_n(value, count).cloned());
            }
            Out::Packed(t) => {
                for i in 0..count {
                    t.copy_element_from(self.pos + i, source, index)?;
                }
            }
        }
        self.pos += count;
        Ok(())
    }

    /// The finished tensor; every element must have been written.
    pub fn finish(self) -> Result<Tensor> {
        if self.pos != self.total {
            return Err(Error::Eval(format!(
                "{} of {} output elements written",
                self.pos, self.total
            )));
        }
        Ok(match self.out {
            Out::Bytes(t, _) | Out::Packed(t) => t,
            Out::Strings(v, shape) => Tensor::from_strings(&shape, v)?,
        })
    }
}

/// A tensor of `shape` whose element `i` is element 1 of `values` where `flag(i)` holds and
/// element 0 elsewhere, for any element type.
pub(super) fn two_valued(
    values: &Tensor,
    shape: &[usize],
    flag: impl Fn(usize) -> bool,
) -> Result<Tensor> {
    let sources = [values];
    let mut out = Writer::new(values.dtype(), shape, &sources)?;
    let total = out.total;
    // Runs of equal flags are written as one repeat.
    let mut start = 0;
    while start < total {
        let on = flag(start);
        let end = (start + 1..total).find(|&i| flag(i) != on).unwrap_or(total);
        out.repeat(0, usize::from(on), end - start)?;
        start = end;
    }
    out.finish()
}

/// How one output axis reads the input: its length, the input position along some input axis
/// that each output position reads (`None` reads the fill value), and the input stride of that
/// axis in elements. Positions are computed only once the whole output is known to fit, so an
/// axis may be long when another is empty.
pub(super) struct AxisRead<'f> {
    len: usize,
    stride: usize,
    index: Box<dyn Fn(usize) -> Option<usize> + 'f>,
}

impl<'f> AxisRead<'f> {
    /// Output position `i` reads input position `i`.
    pub fn identity(len: usize, stride: usize) -> AxisRead<'f> {
        AxisRead::map(len, stride, Some)
    }

    /// Output position `i` reads input position `f(i)`, or the fill value when `None`.
    pub fn map(len: usize, stride: usize, f: impl Fn(usize) -> Option<usize> + 'f) -> AxisRead<'f> {
        AxisRead {
            len,
            stride,
            index: Box::new(f),
        }
    }
}

/// The tensor whose element at output coordinates `(i0, i1, ...)` is the element of `data` at
/// offset `sum(index_d(i_d) * stride_d)` over the axis reads, or element 0 of `fill` when any
/// index is `None`. Slices, transposes, tiles, broadcasts, pads and nearest resizes are all this
/// one gather; trailing axes that read whole contiguous input rows are copied as one block.
pub(super) fn gather_axes(
    data: &Tensor,
    axes: &[AxisRead<'_>],
    fill: Option<&Tensor>,
) -> Result<Tensor> {
    let shape: Vec<usize> = axes.iter().map(|a| a.len).collect();
    let sources: Vec<&Tensor> = std::iter::once(data).chain(fill).collect();
    if checked_len(&shape)? == 0 || fill.is_some_and(|f| f.dtype() != data.dtype()) {
        // Nothing to write, or a fill of another type, which the writer reports.
        return Writer::new(data.dtype(), &shape, &sources)?.finish();
    }
    // The output is not empty, so no axis is longer than the (checked) output.
    let maps: Vec<Vec<Option<usize>>> = axes
        .iter()
        .map(|a| (0..a.len).map(&a.index).collect())
        .collect();
    let strides: Vec<usize> = axes.iter().map(|a| a.stride).collect();
    let is_identity = |m: &[Option<usize>]| m.iter().enumerate().all(|(i, &j)| j == Some(i));
    let mut outer = axes.len();
    let mut block = 1usize;
    while outer > 0 && strides[outer - 1] == block && is_identity(&maps[outer - 1]) {
        block *= shape[outer - 1];
        outer -= 1;
    }
    if outer == 0 {
        let mut out = Writer::new(data.dtype(), &shape, &sources)?;
        out.copy(0, 0, block)?;
        return out.finish();
    }
    let last = outer - 1;
    if block < SMALL_BLOCK {
        let rows = Rows {
            maps: &maps,
            strides: &strides,
            shape: &shape,
            last,
            block,
        };
        dispatch_width!(data.dtype(), W => return rows.gather::<W>(data, fill), _ => {});
    }
    // The odometer walks the axes before the last non-contiguous one; that axis runs in an
    // inner loop whose adjacent blocks merge into single copies (a slice row is one copy).
    let mut out = Writer::new(data.dtype(), &shape, &sources)?;
    let mut coord = vec![0usize; last];
    loop {
        match offset(&maps[..last], &strides, &coord)? {
            None => out.repeat(1, 0, block * shape[last])?,
            Some(base) => copy_row(&mut out, base, &maps[last], strides[last], block)?,
        }
        if !advance(&mut coord, &shape[..last]) {
            break;
        }
    }
    out.finish()
}

/// Blocks shorter than this (in elements) are gathered element by element into a typed output
/// ([`Rows::gather`]) rather than copied as runs (a nearest 2x upsample reads blocks of one).
const SMALL_BLOCK: usize = 16;

/// The output rows of [`gather_axes`] once contiguous trailing axes are merged into `block`:
/// axes `..last` are walked by an odometer, axis `last` maps each position to a block.
struct Rows<'a> {
    maps: &'a [Vec<Option<usize>>],
    strides: &'a [usize],
    shape: &'a [usize],
    last: usize,
    block: usize,
}

impl Rows<'_> {
    /// The gather for elements as wide as `T`, written in order into an uninitialised output.
    fn gather<T: bytemuck::Pod>(&self, data: &Tensor, fill: Option<&Tensor>) -> Result<Tensor> {
        let src = data.as_slice::<T>()?;
        let fill = match fill {
            Some(f) => f.as_slice::<T>()?.first().copied(),
            None => None,
        };
        // Each position of the last axis as an element offset from its row's base.
        let inner = self.maps[self.last]
            .iter()
            .map(|j| match j {
                Some(j) => j
                    .checked_mul(self.strides[self.last])
                    .map(Some)
                    .ok_or_else(overflow),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let row = self.shape[self.last] * self.block;
        let mut status = Ok(());
        let tensor =
            Tensor::uninit(data.dtype(), self.shape)?.fill(|slots: &mut [MaybeUninit<T>]| {
                let mut coord = vec![0usize; self.last];
                let mut written = 0;
                for dst in slots.chunks_exact_mut(row) {
                    let base = offset(&self.maps[..self.last], self.strides, &coord);
                    if let Err(e) =
                        base.and_then(|base| self.write_row(dst, base, &inner, src, fill))
                    {
                        status = Err(e);
                        break;
                    }
                    written += dst.len();
                    advance(&mut coord, &self.shape[..self.last]);
                }
                // SAFETY: the first `written` slots were written by `write_row`. After an error the
                // slice is short, so `fill` fails, and the error is returned below.
                unsafe { assume_written(&mut slots[..written]) }
            });
        status?;
        Ok(tensor?)
    }

    /// Writes one output row: the block each position of the last axis reads at `inner` from
    /// `base` (`None`: the fill value).
    fn write_row<T: bytemuck::Pod>(
        &self,
        dst: &mut [MaybeUninit<T>],
        base: Option<usize>,
        inner: &[Option<usize>],
        src: &[T],
        fill: Option<T>,
    ) -> Result<()> {
        if self.block == 1 {
            // Element by element: the block loop below would call `memcpy` for each.
            for (slot, &o) in dst.iter_mut().zip(inner) {
                let value = match base.zip(o) {
                    Some((base, o)) => base.checked_add(o).and_then(|i| src.get(i)).copied(),
                    None => fill,
                };
                slot.write(value.ok_or_else(|| self.out_of_bounds(base, o, src.len()))?);
            }
            return Ok(());
        }
        for (slots, &o) in dst.chunks_exact_mut(self.block).zip(inner) {
            match base.zip(o) {
                Some((base, o)) => {
                    let values = base
                        .checked_add(o)
                        .and_then(|start| src.get(start..start.checked_add(self.block)?))
                        .ok_or_else(|| self.out_of_bounds(Some(base), Some(o), src.len()))?;
                    for (d, &v) in slots.iter_mut().zip(values) {
                        d.write(v);
                    }
                }
                None => {
                    let v = fill.ok_or_else(|| self.out_of_bounds(None, None, src.len()))?;
                    slots.iter_mut().for_each(|d| {
                        d.write(v);
                    });
                }
            }
        }
        Ok(())
    }

    /// The error for a read at `base + o` outside a source of `len` elements (or of the fill
    /// value when there is none).
    fn out_of_bounds(&self, base: Option<usize>, o: Option<usize>, len: usize) -> Error {
        match base.zip(o) {
            Some((base, o)) => Error::Eval(format!(
                "element run {base}+{o} is out of bounds of a source of {len} elements"
            )),
            None => Error::Eval("a position reads the fill value, which is empty".into()),
        }
    }
}

fn overflow() -> Error {
    Error::Eval("input offset overflows".into())
}

/// Writes the blocks one axis reads from `base`, merging runs that are adjacent in the input
/// (or all fill) into one copy.
fn copy_row(
    out: &mut Writer<'_>,
    base: usize,
    map: &[Option<usize>],
    stride: usize,
    block: usize,
) -> Result<()> {
    // The pending run: its input start (`None`: fill) and its length in elements.
    let mut run: Option<(Option<usize>, usize)> = None;
    for &j in map {
        let start = match j {
            Some(j) => Some(
                j.checked_mul(stride)
                    .and_then(|o| o.checked_add(base))
                    .ok_or_else(overflow)?,
            ),
            None => None,
        };
        run = match run {
            Some((Some(s), n)) if start == s.checked_add(n) => Some((Some(s), n + block)),
            Some((None, n)) if start.is_none() => Some((None, n + block)),
            pending => {
                flush(out, pending)?;
                Some((start, block))
            }
        };
    }
    flush(out, run)
}

/// Writes a pending run of [`copy_row`].
fn flush(out: &mut Writer<'_>, run: Option<(Option<usize>, usize)>) -> Result<()> {
    match run {
        Some((Some(start), n)) => out.copy(0, start, n),
        Some((None, n)) => out.repeat(1, 0, n),
        None => Ok(()),
    }
}

/// The input offset of output coordinates `coord`, or `None` when some axis reads the fill.
fn offset(
    maps: &[Vec<Option<usize>>],
    strides: &[usize],
    coord: &[usize],
) -> Result<Option<usize>> {
    let mut sum = 0usize;
    for ((map, &stride), &c) in maps.iter().zip(strides).zip(coord) {
        let Some(i) = map[c] else {
            return Ok(None);
        };
        sum = i
            .checked_mul(stride)
            .and_then(|v| v.checked_add(sum))
            .ok_or_else(overflow)?;
    }
    Ok(Some(sum))
}

/// Steps `coord` to the next row-major position inside `dims`; false after the last one.
pub(super) fn advance(coord: &mut [usize], dims: &[usize]) -> bool {
    for j in (0..coord.len()).rev() {
        coord[j] += 1;
        if coord[j] < dims[j] {
            return true;
        }
        coord[j] = 0;
    }
    false
}

/// `data` with its axes permuted: output axis `d` is input axis `perm[d]`.
pub(super) fn permute(data: &Tensor, perm: &[usize]) -> Result<Tensor> {
    dispatch_width!(data.dtype(), W => permute_typed::<W>(data, perm), _ => permute_runs(data, perm))
}

/// [`permute`] of elements of `T`'s width: the output is written in order, with the dims merged
/// where the source steps through them contiguously, the innermost dim read with its stride (or
/// copied when contiguous), and the outer rows split over the thread pool when large.
fn permute_typed<T: bytemuck::Pod + Send + Sync>(data: &Tensor, perm: &[usize]) -> Result<Tensor> {
    let shape = data.shape();
    let src = data.as_slice::<T>()?;
    let st = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    // (count, source stride) per output dim, outermost first, merged where contiguous.
    let mut dims: Vec<(usize, usize)> = Vec::with_capacity(perm.len());
    for &p in perm {
        if shape[p] == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == st[p] * shape[p] => *last = (last.0 * shape[p], st[p]),
            _ => dims.push((shape[p], st[p])),
        }
    }
    let (n, stride) = dims.pop().unwrap_or((1, 1));
    let out = Tensor::uninit(data.dtype(), &out_shape)?;
    let total = out.len();
    Ok(out.fill(|dst: &mut [std::mem::MaybeUninit<T>]| {
        if total == 0 {
            return &mut [];
        }
        // Rows `first..` of `n` elements into `d`: the source offset of the first row from its
        // coordinates, then runs of rows along the innermost of the other dims, each next run's
        // offset by an odometer step (no division per row).
        let rows = |first: usize, d: &mut [std::mem::MaybeUninit<T>]| {
            let mut coord = Vec::with_capacity(dims.len());
            let (mut at, mut k) = (0, first);
            for &(count, s) in dims.iter().rev() {
                coord.push(k % count);
                at += (k % count) * s;
                k /= count;
            }
            coord.reverse();
            let mut d = d;
            while !d.is_empty() {
                // The run: rows `coord[last]..count` of the innermost dim (one row without one).
                let (count, s) = dims.last().copied().unwrap_or((1, 0));
                let c = coord.last().copied().unwrap_or(0);
                let run = (count - c).min(d.len() / n);
                let (now, rest) = std::mem::take(&mut d).split_at_mut(run * n);
                write_rows(now, &src[at..], n, stride, s);
                d = rest;
                // The odometer, `run` rows on.
                let Some((last, outer)) = coord.split_last_mut() else {
                    break;
                };
                *last += run;
                at += run * s;
                if *last < count {
                    continue;
                }
                *last = 0;
                at -= count * s;
                for (c, &(count, s)) in outer.iter_mut().zip(&dims).rev() {
                    *c += 1;
                    at += s;
                    if *c < count {
                        break;
                    }
                    *c = 0;
                    at -= count * s;
                }
            }
        };
        let min_len = crate::par::min_len(total / n, &[n]);
        if min_len != usize::MAX {
            use rayon::prelude::*;
            // Tasks of `min_len` rows, a grain each.
            dst.par_chunks_mut(n * min_len)
                .enumerate()
                .for_each(|(t, d)| rows(t * min_len, d));
        } else {
            rows(0, dst);
        }
        // SAFETY: each row writes its `n` elements, and the rows of `n` elements cover the
        // output (`total`, the product of the dims, is a multiple of the merged run `n`).
        unsafe { crate::ops::vector::assume_written(dst) }
    })?)
}

/// Output rows of `n` elements into `dst` (whole rows): element `j` of row `i` is
/// `src[i * row_stride + j * stride]`. Short rows whose elements lie in contiguous source
/// columns (the swap of the last two axes of a tensor with a short second-last axis) are written
/// by [`interleave`], which unrolls the row.
fn write_rows<T: Copy>(
    dst: &mut [std::mem::MaybeUninit<T>],
    src: &[T],
    n: usize,
    stride: usize,
    row_stride: usize,
) {
    match (n, stride, row_stride) {
        (_, 1, _) => {
            for (i, row) in dst.chunks_exact_mut(n).enumerate() {
                crate::ops::vector::copy(row, &src[i * row_stride..][..n]);
            }
        }
        (2, _, 1) => interleave::<T, 2>(dst, src, stride),
        (3, _, 1) => interleave::<T, 3>(dst, src, stride),
        (4, _, 1) => interleave::<T, 4>(dst, src, stride),
        (5, _, 1) => interleave::<T, 5>(dst, src, stride),
        (6, _, 1) => interleave::<T, 6>(dst, src, stride),
        (7, _, 1) => interleave::<T, 7>(dst, src, stride),
        (8, _, 1) => interleave::<T, 8>(dst, src, stride),
        _ => {
            for (i, row) in dst.chunks_exact_mut(n).enumerate() {
                let at = i * row_stride;
                for (j, v) in row.iter_mut().enumerate() {
                    v.write(src[at + j * stride]);
                }
            }
        }
    }
}

/// Rows of `N` elements into `dst` (whole rows), element `j` of row `i` from `src[j * stride + i]`:
/// `N` contiguous source columns interleaved.
#[inline]
fn interleave<T: Copy, const N: usize>(
    dst: &mut [std::mem::MaybeUninit<T>],
    src: &[T],
    stride: usize,
) {
    let m = dst.len() / N;
    let columns: [&[T]; N] = std::array::from_fn(|j| &src[j * stride..][..m]);
    for (i, row) in dst.chunks_exact_mut(N).enumerate() {
        for (slot, column) in row.iter_mut().zip(&columns) {
            slot.write(column[i]);
        }
    }
}

/// [`permute`] through the checked run writer, for every element type.
fn permute_runs(data: &Tensor, perm: &[usize]) -> Result<Tensor> {
    let shape = data.shape();
    let st = strides(shape);
    let axes: Vec<AxisRead> = perm
        .iter()
        .map(|&p| AxisRead::identity(shape[p], st[p]))
        .collect();
    gather_axes(data, &axes, None)
}

/// Checks that `perm` is a permutation of `0..rank`.
pub(super) fn check_permutation(perm: &[usize], rank: usize) -> Result<()> {
    let mut seen = vec![false; rank];
    for &p in perm {
        match seen.get_mut(p) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(Error::Eval(format!(
                    "perm {perm:?} is not a permutation of {rank} axes"
                )))
            }
        }
    }
    if perm.len() != rank {
        return Err(Error::Eval(format!(
            "perm {perm:?} is not a permutation of {rank} axes"
        )));
    }
    Ok(())
}

/// Axes (attribute or input values) made non-negative against `rank`, rejecting repeats.
pub(super) fn normalize_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = super::super::util::normalize_axis(a, rank)?;
        if out.contains(&n) {
            return Err(Error::Eval(format!("axis {a} is repeated in {axes:?}")));
        }
        out.push(n);
    }
    Ok(out)
}

/// A count or size read from a model value, which must not be negative.
pub(super) fn to_usize(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::Eval(format!("{what} must not be negative, found {v}")))
}

/// The values of a numeric tensor as `i64`: integers exactly, floats truncated toward zero.
pub(super) fn to_i64s_truncating(t: &Tensor) -> Result<Vec<i64>> {
    match t.dtype() {
        DataType::Float | DataType::Double | DataType::Float16 | DataType::Bfloat16 => {
            Ok(real_values(t)?.into_iter().map(|v| v as i64).collect())
        }
        _ => to_i64s(t),
    }
}

/// A tensor of `dtype` holding `values` converted the way a saturating cast does: floats
/// rounded to nearest, integers rounded half to even and clamped to the type's range, bool
/// true when non-zero.
pub(super) fn from_f64s(dtype: DataType, shape: &[usize], values: &[f64]) -> Result<Tensor> {
    crate::ops::num::dispatch_float!(dtype, T => {
        let v: Vec<T> = values.iter().map(|&x| T::from_f64(x)).collect();
        Ok(Tensor::from_vec(dtype, shape, v)?)
    }, _ => crate::ops::num::dispatch_int!(dtype, T => {
        // `as` saturates and maps NaN to 0, which is what a saturating cast does.
        let v: Vec<T> = values.iter().map(|&x| x.round_ties_even() as T).collect();
        Ok(Tensor::from_vec(dtype, shape, v)?)
    }, _ => match dtype {
        DataType::Bool => {
            let v: Vec<u8> = values.iter().map(|&x| u8::from(x != 0.0)).collect();
            Ok(Tensor::from_vec(dtype, shape, v)?)
        }
        other => Err(Error::Eval(format!("cannot compute {other} values"))),
    }))
}

/// For each element, whether it is non-zero: floats compare with 0 (so `-0.0` is zero and NaN
/// is not), strings are non-zero when non-empty, every other type when any bit is set (or, for
/// the small float types with a sign bit, any bit besides the sign).
pub(super) fn nonzero_flags(t: &Tensor) -> Result<Vec<bool>> {
    use DataType as D;
    let dtype = t.dtype();
    // Element by element into one flag each (no wider copy of the input on the way).
    let numeric = crate::ops::num::dispatch_float!(dtype, T => {
        Some(flags_of(t.as_slice::<T>()?, |v| v.to_f64() != 0.0)?)
    }, _ => crate::ops::num::dispatch_int!(dtype, T => {
        Some(flags_of(t.as_slice::<T>()?, |&v| v != 0)?)
    }, _ => match dtype {
        D::Bool => Some(flags_of(t.as_slice::<u8>()?, |&v| v != 0)?),
        _ => None,
    }));
    if let Some(flags) = numeric {
        return Ok(flags);
    }
    if dtype == D::String {
        return Ok(t.as_strings()?.iter().map(|s| !s.is_empty()).collect());
    }
    let bits = dtype.bits();
    // The float8/6/4 types whose all-zero pattern with the sign bit set is negative zero.
    let magnitude: u8 = match dtype {
        D::Float8E4M3FN | D::Float8E5M2 => 0x7f,
        D::Float6E2M3 | D::Float6E3M2 => 0x1f,
        D::Float4E2M1 => 0x07,
        _ => 0xff,
    };
    let bytes = t.as_bytes()?;
    match dtype.byte_size() {
        Some(w) => Ok(bytes
            .chunks_exact(w)
            .map(|c| match dtype {
                // float8e8m0 has no zero: every pattern is a power of two or NaN.
                D::Float8E8M0 => true,
                _ if w == 1 => c[0] & magnitude != 0,
                _ => c.iter().any(|&b| b != 0),
            })
            .collect()),
        None => (0..t.len())
            .map(|i| {
                crate::tensor::packed::read(bytes, bits, i)
                    .map(|v| v & magnitude != 0)
                    .ok_or_else(|| Error::Eval(format!("element {i} is out of bounds")))
            })
            .collect(),
    }
}

/// `keep(v)` for every element of `values`, in a vector allocated fallibly.
fn flags_of<T>(values: &[T], keep: impl Fn(&T) -> bool) -> Result<Vec<bool>> {
    let mut flags = try_with_capacity(values.len())?;
    flags.extend(values.iter().map(keep));
    Ok(flags)
}

/// The dims of input `i`, when its rank is known.
pub(super) fn in_dims<'c>(ctx: &'c InferCtx<'_>, i: usize) -> Option<&'c [Dim]> {
    ctx.input(i)?.shape.as_ref().map(|s| s.dims.as_slice())
}

/// The element type of input `i`, when known.
pub(super) fn in_elem(ctx: &InferCtx<'_>, i: usize) -> Option<DataType> {
    ctx.input(i)?.elem
}

/// The integer values of input `i` when it is a constant.
pub(super) fn const_ints(ctx: &InferCtx<'_>, i: usize) -> Option<Vec<i64>> {
    to_i64s(ctx.constant(i)?).ok()
}

/// The length of 1-D input `i`, when known.
pub(super) fn in_len(ctx: &InferCtx<'_>, i: usize) -> Option<usize> {
    match in_dims(ctx, i)? {
        [Dim::Known(n)] => usize::try_from(*n).ok(),
        _ => None,
    }
}

/// A tensor type of element `elem` and dims `dims` (`None`: rank unknown).
pub(super) fn typed(elem: Option<DataType>, dims: Option<Vec<Dim>>) -> TensorType {
    TensorType {
        elem,
        shape: dims.map(Shape::new),
    }
}

/// `rank` dims of unknown size.
pub(super) fn unknown_dims(rank: usize) -> Vec<Dim> {
    vec![Dim::Unknown; rank]
}

/// `d * k` for a known factor: exact for known dims, the same symbol for `k == 1`.
pub(super) fn dim_times(d: &Dim, k: i64) -> Dim {
    match d {
        Dim::Known(v) => v.checked_mul(k).map_or(Dim::Unknown, Dim::Known),
        _ if k == 1 => d.clone(),
        _ if k == 0 => Dim::Known(0),
        _ => Dim::Unknown,
    }
}

/// `d + k` for a known term: exact for known dims, the same symbol for `k == 0`.
pub(super) fn dim_plus(d: &Dim, k: i64) -> Dim {
    match d {
        Dim::Known(v) => v.checked_add(k).map_or(Dim::Unknown, Dim::Known),
        _ if k == 0 => d.clone(),
        _ => Dim::Unknown,
    }
}

/// The product of dims: known when all are, the one symbol when every other dim is 1.
pub(super) fn dim_product(dims: &[Dim]) -> Dim {
    dim_quotient(dims, &[])
}

/// `product(num) / product(den)` where it can be known: equal symbols cancel, and what is left
/// must be known sizes that divide, or one symbol over matching known sizes.
pub(super) fn dim_quotient(num: &[Dim], den: &[Dim]) -> Dim {
    let mut num: Vec<&Dim> = num.iter().collect();
    let mut den_known = 1i64;
    for d in den {
        match d {
            Dim::Known(v) => match den_known.checked_mul(*v) {
                Some(p) => den_known = p,
                None => return Dim::Unknown,
            },
            Dim::Symbolic(_) => match num.iter().position(|n| *n == d) {
                Some(p) => {
                    num.remove(p);
                }
                None => return Dim::Unknown,
            },
            Dim::Unknown => return Dim::Unknown,
        }
    }
    let mut known = 1i64;
    let mut symbols = Vec::new();
    for n in num {
        match n {
            Dim::Known(v) => match known.checked_mul(*v) {
                Some(p) => known = p,
                None => return Dim::Unknown,
            },
            Dim::Symbolic(_) => symbols.push(n),
            Dim::Unknown => return Dim::Unknown,
        }
    }
    match symbols.as_slice() {
        [] if den_known != 0 && known % den_known == 0 => Dim::Known(known / den_known),
        [s] if known == den_known => (*s).clone(),
        _ => Dim::Unknown,
    }
}

/// For shape-function tests: the inferred dims of output 0 of `node` at `opset`, given input
/// dims written as `"N"` (a symbol), `"?"` (unknown) or a number, and constant inputs.
#[cfg(test)]
pub(super) fn infer_dims_for(
    node: &crate::ir::Node,
    opset: i64,
    inputs: &[Option<&[&str]>],
    constants: &[Option<&Tensor>],
) -> Option<Vec<String>> {
    let parse = |d: &&str| match d.parse::<i64>() {
        Ok(v) => Dim::Known(v),
        Err(_) if *d == "?" => Dim::Unknown,
        Err(_) => Dim::Symbolic((*d).to_owned()),
    };
    let types: Vec<Option<TensorType>> = inputs
        .iter()
        .map(|i| i.map(|dims| TensorType::new(DataType::Float, dims.iter().map(parse).collect())))
        .collect();
    let mut consts = constants.to_vec();
    consts.resize(types.len(), None);
    let out = crate::ops::infer_node(node, opset, &types, &consts);
    let shape = out.first()?.shape.as_ref()?;
    Some(shape.dims.iter().map(|d| d.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i32s(shape: &[usize], v: &[i32]) -> Tensor {
        Tensor::from_vec(DataType::Int32, shape, v.to_vec()).unwrap()
    }

    #[test]
    fn writer_copies_and_repeats_every_representation() {
        let a = i32s(&[3], &[1, 2, 3]);
        let b = i32s(&[1], &[9]);
        let sources = [&a, &b];
        let mut w = Writer::new(DataType::Int32, &[5], &sources).unwrap();
        w.copy(0, 1, 2).unwrap();
        w.repeat(1, 0, 2).unwrap();
        w.copy(0, 0, 1).unwrap();
        assert_eq!(
            w.finish().unwrap().to_vec::<i32>().unwrap(),
            [2, 3, 9, 9, 1]
        );

        let s = Tensor::from_strings(&[2], vec![b"x".to_vec(), b"y".to_vec()]).unwrap();
        let sources = [&s];
        let mut w = Writer::new(DataType::String, &[3], &sources).unwrap();
        w.copy(0, 1, 1).unwrap();
        w.repeat(0, 0, 2).unwrap();
        let out = w.finish().unwrap();
        assert_eq!(
            out.as_strings().unwrap(),
            &[b"y".to_vec(), b"x".to_vec(), b"x".to_vec()]
        );

        let p = Tensor::from_bytes(DataType::Uint4, &[2], &[0x21]).unwrap();
        let sources = [&p];
        let mut w = Writer::new(DataType::Uint4, &[3], &sources).unwrap();
        w.copy(0, 0, 2).unwrap();
        w.repeat(0, 1, 1).unwrap();
        assert_eq!(w.finish().unwrap().as_bytes().unwrap(), &[0x21, 0x02]);
    }

    #[test]
    fn writer_rejects_runs_out_of_bounds_and_short_outputs() {
        let a = i32s(&[3], &[1, 2, 3]);
        let sources = [&a];
        let mut w = Writer::new(DataType::Int32, &[2], &sources).unwrap();
        assert!(w
            .copy(0, 2, 2)
            .unwrap_err()
            .to_string()
            .contains("out of bounds"));
        assert!(w.copy(0, 0, 3).is_err());
        assert!(w
            .repeat(1, 0, 1)
            .unwrap_err()
            .to_string()
            .contains("no source"));
        w.copy(0, 0, 1).unwrap();
        let e = w.finish().unwrap_err();
        assert_eq!(e.to_string(), "1 of 2 output elements written");
        let f = Tensor::zeros(DataType::Float, &[1]).unwrap();
        let sources = [&f];
        assert!(Writer::new(DataType::Int32, &[1], &sources).is_err());
    }

    #[test]
    fn permute_rows_match_the_run_writer() {
        // The typed permute (rows of the innermost output dim, an odometer over the others,
        // split over the threads when large) against the checked run writer: the conv-net's
        // `[1, 3, 7, 1600]` swap of the last two axes, odd sizes, dims of 1 and 0, contiguous
        // tails, full reversals, rank 1 and 5, and outputs large enough to be split.
        for (shape, perm) in [
            (vec![1, 3, 7, 1600], vec![0, 1, 3, 2]),
            (vec![1, 3, 7, 100], vec![0, 1, 3, 2]),
            (vec![5, 1, 3], vec![2, 1, 0]),
            (vec![2, 3, 4, 5], vec![0, 2, 1, 3]),
            (vec![2, 3, 4, 5], vec![3, 0, 2, 1]),
            (vec![3, 0, 2], vec![2, 0, 1]),
            (vec![7], vec![0]),
            (vec![2, 1, 3, 1, 5], vec![4, 3, 2, 1, 0]),
            (vec![1, 1, 1], vec![2, 0, 1]),
            (vec![257, 129, 3], vec![1, 0, 2]),
            (vec![3, 257, 129], vec![0, 2, 1]),
        ] {
            let n: usize = shape.iter().product();
            let t = Tensor::from_vec(DataType::Int32, &shape, (0..n as i32).collect::<Vec<_>>())
                .unwrap();
            let runs = permute_runs(&t, &perm).unwrap();
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let typed = pool.install(|| permute_typed::<u32>(&t, &perm)).unwrap();
                assert_eq!(typed, runs, "{shape:?} {perm:?} at {threads} threads");
            }
        }
    }

    #[test]
    fn gather_axes_transposes_and_fills() {
        let t = i32s(&[2, 3], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(
            permute(&t, &[1, 0]).unwrap().to_vec::<i32>().unwrap(),
            [0, 3, 1, 4, 2, 5]
        );
        let fill = i32s(&[], &[-1]);
        let axes = [
            AxisRead::identity(2, 3),
            AxisRead::map(4, 1, |i| i.checked_sub(1).filter(|&j| j < 3)),
        ];
        let most = i64::MAX as usize;
        let huge = [AxisRead::identity(0, 1), AxisRead::identity(most, 1)];
        assert_eq!(gather_axes(&t, &huge, None).unwrap().shape(), &[0, most]);
        // A dim beyond 2^63-1 is refused even beside a 0.
        let beyond = [AxisRead::identity(0, 1), AxisRead::identity(most + 1, 1)];
        let e = gather_axes(&t, &beyond, None).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        let e = gather_axes(&t, &[AxisRead::identity(usize::MAX, 1)], None).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        let out = gather_axes(&t, &axes, Some(&fill)).unwrap();
        assert_eq!(out.shape(), &[2, 4]);
        assert_eq!(out.to_vec::<i32>().unwrap(), [-1, 0, 1, 2, -1, 3, 4, 5]);
    }

    #[test]
    fn dims_multiply_and_divide_through_symbols() {
        let n = Dim::Symbolic("n".into());
        assert_eq!(dim_product(&[Dim::Known(2), Dim::Known(3)]), Dim::Known(6));
        assert_eq!(dim_product(&[Dim::Known(1), n.clone()]), n);
        assert_eq!(dim_product(&[Dim::Known(2), n.clone()]), Dim::Unknown);
        assert_eq!(
            dim_quotient(&[n.clone(), Dim::Known(12)], &[n.clone(), Dim::Known(3)]),
            Dim::Known(4)
        );
        assert_eq!(
            dim_quotient(&[n.clone(), Dim::Known(3)], &[Dim::Known(3)]),
            n
        );
        assert_eq!(
            dim_quotient(&[Dim::Known(7)], &[Dim::Known(2)]),
            Dim::Unknown
        );
        assert_eq!(dim_plus(&n, 0), n);
        assert_eq!(dim_times(&Dim::Known(4), 3), Dim::Known(12));
    }

    #[test]
    fn numeric_conversions_saturate_and_find_zeros() {
        let t = from_f64s(DataType::Uint8, &[4], &[-3.0, 2.5, 3.5, 300.0]).unwrap();
        assert_eq!(t.to_vec::<u8>().unwrap(), [0, 2, 4, 255]);
        let f = Tensor::from_vec(DataType::Float, &[3], vec![0.0f32, -0.0, f32::NAN]).unwrap();
        assert_eq!(nonzero_flags(&f).unwrap(), [false, false, true]);
        let e = Tensor::from_bytes(DataType::Float8E4M3FN, &[2], &[0x80, 0x01]).unwrap();
        assert_eq!(nonzero_flags(&e).unwrap(), [false, true]);
        let s = Tensor::from_strings(&[2], vec![vec![], b"a".to_vec()]).unwrap();
        assert_eq!(nonzero_flags(&s).unwrap(), [false, true]);
        let h = Tensor::from_vec(DataType::Float16, &[1], vec![half::f16::from_f32(2.5)]).unwrap();
        assert_eq!(to_i64s_truncating(&h).unwrap(), [2]);
    }
}
