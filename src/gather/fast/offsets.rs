//! The index pre-pass: validate every index tuple, count negative indices from the end, apply the
//! out-of-range mode, and turn the tuple into one input element offset.
//!
//! The result is the offset table `T` of [`super::canon`]: entry `p` is
//! `fold(p) + sum_k resolve(indices[p * c + k]) * stride_k`. Entries are `u32` when the input has
//! fewer than `u32::MAX` elements (half the memory traffic) and `u64` otherwise; `Offset::NONE`
//! marks a tuple that reads nothing (mode `zero`).
//!
//! Errors name the first bad index value in row-major order of the indices: the pre-pass walks a
//! range front to back and stops at the first bad one, and ranges processed in parallel are
//! merged by position.

use super::canon::{AxisInfo, TLayout};
use crate::gather::OutOfRange;

/// An entry of the offset table.
pub(crate) trait Offset: Copy + Send + Sync + Default + PartialEq + 'static {
    /// Marks a tuple that reads nothing (mode `zero`); never a valid offset.
    const NONE: Self;
    fn from_usize(v: usize) -> Self;
    fn to_usize(self) -> usize;
    /// The table as 32-bit offsets, for hardware gathers; `None` for 64-bit tables.
    fn as_u32(t: &[Self]) -> Option<&[u32]>;
}

impl Offset for u32 {
    const NONE: u32 = u32::MAX;
    #[inline(always)]
    fn from_usize(v: usize) -> u32 {
        v as u32
    }
    #[inline(always)]
    fn to_usize(self) -> usize {
        self as usize
    }
    fn as_u32(t: &[u32]) -> Option<&[u32]> {
        Some(t)
    }
}

impl Offset for u64 {
    const NONE: u64 = u64::MAX;
    #[inline(always)]
    fn from_usize(v: usize) -> u64 {
        v as u64
    }
    #[inline(always)]
    fn to_usize(self) -> usize {
        self as usize
    }
    fn as_u32(_: &[u64]) -> Option<&[u32]> {
        None
    }
}

/// The index values, typed.
#[derive(Clone, Copy)]
pub(crate) enum Indices<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

/// An index value as read from the tensor.
pub(crate) trait IndexValue: Copy + Send + Sync {
    fn get(self) -> i64;
}

impl IndexValue for i32 {
    #[inline(always)]
    fn get(self) -> i64 {
        i64::from(self)
    }
}

impl IndexValue for i64 {
    #[inline(always)]
    fn get(self) -> i64 {
        self
    }
}

/// The first bad index value of a range: its flat position in the indices, which coordinate of
/// the tuple it is, and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BadIndex {
    pub flat: usize,
    pub component: usize,
    pub value: i64,
}

/// `value` resolved on an axis of size `dim`: `Some(coordinate)`, or `None` when out of range.
/// Mode `clamp` returns `None` only for an empty axis (`dim = 0`).
#[inline(always)]
fn resolve(value: i64, dim: usize, clamp: bool) -> Option<usize> {
    // `dim` fits in i64 (tensor sizes are below isize::MAX), and `value + dim` cannot overflow
    // for a negative `value`.
    let d = dim as i64;
    let wrapped = if value < 0 { value + d } else { value };
    if clamp && d > 0 {
        Some(wrapped.clamp(0, d - 1) as usize)
    } else if (wrapped as u64) < dim as u64 {
        Some(wrapped as usize)
    } else {
        None
    }
}

impl TLayout {
    /// Fills `out` with the offsets of tuples `start .. start + out.len()`.
    ///
    /// Returns the largest offset written (ignoring `NONE`), or the first bad index.
    pub fn fill<O: Offset>(
        &self,
        indices: Indices<'_>,
        start: usize,
        out: &mut [O],
    ) -> Result<Option<usize>, BadIndex> {
        match indices {
            Indices::I32(v) => self.fill_typed(v, start, out),
            Indices::I64(v) => self.fill_typed(v, start, out),
        }
    }

    fn fill_typed<I: IndexValue, O: Offset>(
        &self,
        idx: &[I],
        start: usize,
        out: &mut [O],
    ) -> Result<Option<usize>, BadIndex> {
        let (outer, inner) = self.dims.split_at(self.dims.len() - 1);
        let inner = inner[0];
        // Odometer over the outer dimensions, started at the run containing `start`.
        let mut coord = vec![0usize; outer.len()];
        let mut rest = start / inner.size;
        let mut base = 0usize;
        for d in (0..outer.len()).rev() {
            coord[d] = rest % outer[d].size;
            rest /= outer[d].size;
            base += coord[d] * outer[d].fold;
        }
        let mut j = start % inner.size;
        let mut max: Option<usize> = None;
        let mut done = 0;
        while done < out.len() {
            let n = (inner.size - j).min(out.len() - done);
            let run = Run {
                first: start + done,
                base: base + j * inner.fold,
                step: inner.fold,
            };
            let run_max = self.fill_run(idx, run, &mut out[done..done + n])?;
            max = max.max(run_max);
            done += n;
            j = 0;
            for d in (0..outer.len()).rev() {
                coord[d] += 1;
                base += outer[d].fold;
                if coord[d] < outer[d].size {
                    break;
                }
                base -= outer[d].fold * outer[d].size;
                coord[d] = 0;
            }
        }
        Ok(max)
    }

    /// One run along the innermost logical dimension.
    #[inline]
    fn fill_run<I: IndexValue, O: Offset>(
        &self,
        idx: &[I],
        run: Run,
        out: &mut [O],
    ) -> Result<Option<usize>, BadIndex> {
        let clamp = self.mode == OutOfRange::Clamp;
        let zero = self.mode == OutOfRange::Zero;
        match (self.axes.as_slice(), zero) {
            ([], _) => {
                // No axes: the index values are not read, only the folded position counts.
                for (e, slot) in out.iter_mut().enumerate() {
                    *slot = O::from_usize(run.base + e * run.step);
                }
                Ok(out
                    .len()
                    .checked_sub(1)
                    .map(|last| run.base + last * run.step))
            }
            ([axis], false) => fill_one(idx, run, *axis, clamp, out),
            (axes, _) => fill_tuples(idx, run, axes, self.coordinate_size, self.mode, out),
        }
    }
}

/// A run of consecutive tuples: the first one's position, its folded base offset, and the fold
/// step from one tuple to the next.
#[derive(Clone, Copy)]
struct Run {
    first: usize,
    base: usize,
    step: usize,
}

/// Single-axis runs in modes `error` and `clamp`: the hot loop of most gathers. It checks a
/// block at a time without branching, so it vectorises, and only looks for the culprit when a
/// block had a bad value.
#[inline]
fn fill_one<I: IndexValue, O: Offset>(
    idx: &[I],
    run: Run,
    axis: AxisInfo,
    clamp: bool,
    out: &mut [O],
) -> Result<Option<usize>, BadIndex> {
    const BLOCK: usize = 256;
    let values = &idx[run.first..run.first + out.len()];
    let d = axis.dim as i64;
    // An empty axis has nothing to clamp to: every index into it is out of range.
    let clamp = clamp && d > 0;
    let mut max = 0usize;
    for (b, (slots, vals)) in out.chunks_mut(BLOCK).zip(values.chunks(BLOCK)).enumerate() {
        let mut bad = false;
        let base = run.base + b * BLOCK * run.step;
        for (e, (slot, v)) in slots.iter_mut().zip(vals).enumerate() {
            let v = v.get();
            let wrapped = if v < 0 { v.wrapping_add(d) } else { v };
            let coordinate = if clamp {
                wrapped.clamp(0, d - 1)
            } else {
                bad |= (wrapped as u64) >= d as u64;
                wrapped
            };
            let offset =
                (base + e * run.step).wrapping_add((coordinate as usize).wrapping_mul(axis.stride));
            max = max.max(offset);
            *slot = O::from_usize(offset);
        }
        if bad {
            let e = vals
                .iter()
                .position(|v| resolve(v.get(), axis.dim, clamp).is_none())
                .unwrap_or(0);
            return Err(BadIndex {
                flat: run.first + b * BLOCK + e,
                component: 0,
                value: vals.get(e).map_or(0, |v| v.get()),
            });
        }
    }
    Ok((!out.is_empty()).then_some(max))
}

/// Runs of tuples with several coordinates, and every run in mode `zero`.
#[inline]
fn fill_tuples<I: IndexValue, O: Offset>(
    idx: &[I],
    run: Run,
    axes: &[AxisInfo],
    c: usize,
    mode: OutOfRange,
    out: &mut [O],
) -> Result<Option<usize>, BadIndex> {
    let clamp = mode == OutOfRange::Clamp;
    let values = &idx[run.first * c..(run.first + out.len()) * c];
    let mut max: Option<usize> = None;
    for (e, (slot, tuple)) in out.iter_mut().zip(values.chunks_exact(c)).enumerate() {
        let mut offset = run.base + e * run.step;
        let mut reads = true;
        for (k, (axis, v)) in axes.iter().zip(tuple).enumerate() {
            match resolve(v.get(), axis.dim, clamp) {
                Some(coordinate) => offset += coordinate * axis.stride,
                None if mode == OutOfRange::Zero => reads = false,
                None => {
                    return Err(BadIndex {
                        flat: (run.first + e) * c + k,
                        component: k,
                        value: v.get(),
                    })
                }
            }
        }
        *slot = if reads {
            max = max.max(Some(offset));
            O::from_usize(offset)
        } else {
            O::NONE
        };
    }
    Ok(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gather::{resolve_index, Resolved};

    #[test]
    fn resolve_agrees_with_the_definition() {
        let values = [
            i64::MIN,
            i64::MIN + 1,
            -1_000_000,
            -6,
            -5,
            -4,
            -1,
            0,
            1,
            4,
            5,
            6,
            1_000_000,
            i64::MAX,
        ];
        for dim in [1usize, 2, 5, 1 << 40] {
            for &v in &values {
                for mode in [OutOfRange::Error, OutOfRange::Clamp] {
                    let want = match resolve_index(v, dim, mode) {
                        Resolved::At(i) => Some(i),
                        _ => None,
                    };
                    assert_eq!(
                        resolve(v, dim, mode == OutOfRange::Clamp),
                        want,
                        "{v} {dim} {mode:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn first_bad_index_of_a_block() {
        let layout = TLayout {
            count: 600,
            dims: vec![super::super::canon::TDim { size: 600, fold: 0 }],
            coordinate_size: 1,
            axes: vec![AxisInfo { dim: 10, stride: 3 }],
            mode: OutOfRange::Error,
        };
        let mut idx = vec![1i64; 600];
        idx[300] = -11;
        idx[400] = 10;
        let mut out = vec![0u32; 500];
        assert_eq!(
            layout.fill(Indices::I64(&idx), 100, &mut out),
            Err(BadIndex {
                flat: 300,
                component: 0,
                value: -11
            })
        );
        let mut out = vec![0u32; 100];
        assert_eq!(layout.fill(Indices::I64(&idx), 0, &mut out), Ok(Some(3)));
    }
}
