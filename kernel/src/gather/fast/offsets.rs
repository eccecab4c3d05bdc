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
use super::elem::{Offset, SimdLevel};
use crate::gather::OutOfRange;

/// Index values borrowed from an `int32` or `int64` tensor, in row-major order (the indices
/// operand of [`super::gather_multiaxis_into`]).
#[derive(Clone, Copy, Debug)]
pub enum Indices<'a> {
    /// `int32` index values.
    I32(&'a [i32]),
    /// `int64` index values.
    I64(&'a [i64]),
}

impl Indices<'_> {
    /// The number of index values.
    pub fn len(&self) -> usize {
        match self {
            Indices::I32(v) => v.len(),
            Indices::I64(v) => v.len(),
        }
    }

    /// True when there are no index values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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
    /// Fills `out` with the offsets of tuples `start .. start + out.len()`, with vector
    /// instructions up to `simd` (at most [`SimdLevel::detected`]).
    ///
    /// Returns the largest offset written (ignoring `NONE`), or the first bad index.
    pub fn fill<O: Offset>(
        &self,
        indices: Indices<'_>,
        start: usize,
        out: &mut [O],
        simd: SimdLevel,
    ) -> Result<Option<usize>, BadIndex> {
        match indices {
            Indices::I32(v) => self.fill_typed(v, start, out, simd),
            Indices::I64(v) => self.fill_typed(v, start, out, simd),
        }
    }

    fn fill_typed<I: IndexValue, O: Offset>(
        &self,
        idx: &[I],
        start: usize,
        out: &mut [O],
        simd: SimdLevel,
    ) -> Result<Option<usize>, BadIndex> {
        let (outer, inner) = self.dims.split_at(self.dims.len() - 1);
        let inner = inner[0];
        // Odometer over the outer dimensions, started at the run containing `start`. Streamed
        // tables call this once per small tile, so the usual ranks avoid an allocation.
        let mut on_stack = [0usize; 8];
        let mut on_heap = Vec::new();
        let coord: &mut [usize] = if outer.len() <= on_stack.len() {
            &mut on_stack[..outer.len()]
        } else {
            on_heap.resize(outer.len(), 0);
            &mut on_heap
        };
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
            let run_max = self.fill_run(idx, run, &mut out[done..done + n], simd)?;
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
        simd: SimdLevel,
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
            (axes, false) => {
                if let Some(out32) = O::as_u32_mut(out) {
                    if let Some(result) = fill_u32(idx, run, axes, clamp, simd, out32) {
                        return result;
                    }
                }
                match axes {
                    [axis] => fill_one(idx, run, *axis, clamp, out),
                    _ => fill_tuples(idx, run, axes, self.coordinate_size, self.mode, out),
                }
            }
            (axes, true) => fill_tuples(idx, run, axes, self.coordinate_size, self.mode, out),
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

/// Tuples per block of the 32-bit pre-pass: the bad-index flag is checked once per block.
const BLOCK32: usize = 256;

/// Runs in modes `error` and `clamp` of tables with 32-bit entries, for tuples of 1 to 3
/// coordinates: the hot loop of nearly every gather. `None` when the call is not one of those
/// (the callers then use the general loops).
///
/// The loop has no branch and no 64-bit multiply, so it vectorises (with AVX2 where the CPU has
/// it): the offset is computed in wrapping 32-bit arithmetic, which is exact whenever every index
/// of the block is valid, because the true offset is then below the input size and the input
/// size fits 32 bits (that is when tables are 32-bit). A block with a bad index is an error
/// whatever was written, so its wrapped offsets are never used. Every offset written still counts
/// toward the returned maximum, which the caller checks against the input size before any read.
#[inline]
fn fill_u32<I: IndexValue>(
    idx: &[I],
    run: Run,
    axes: &[AxisInfo],
    clamp: bool,
    simd: SimdLevel,
    out: &mut [u32],
) -> Option<Result<Option<usize>, BadIndex>> {
    // An empty axis has nothing to clamp to: the general loops report its indices.
    if clamp && axes.iter().any(|a| a.dim == 0) {
        return None;
    }
    Some(match (axes.len(), clamp) {
        (1, false) => fill_u32_c::<I, 1, false>(idx, run, axes, simd, out),
        (1, true) => fill_u32_c::<I, 1, true>(idx, run, axes, simd, out),
        (2, false) => fill_u32_c::<I, 2, false>(idx, run, axes, simd, out),
        (2, true) => fill_u32_c::<I, 2, true>(idx, run, axes, simd, out),
        (3, false) => fill_u32_c::<I, 3, false>(idx, run, axes, simd, out),
        (3, true) => fill_u32_c::<I, 3, true>(idx, run, axes, simd, out),
        _ => return None,
    })
}

/// The constants of one 32-bit block loop: the axis sizes and strides.
#[derive(Clone, Copy)]
pub(crate) struct Axes32<const C: usize> {
    pub dims: [i64; C],
    pub strides: [u32; C],
}

/// [`fill_u32`] for `C` coordinates per tuple (`axes.len() == C`).
fn fill_u32_c<I: IndexValue, const C: usize, const CLAMP: bool>(
    idx: &[I],
    run: Run,
    axes: &[AxisInfo],
    simd: SimdLevel,
    out: &mut [u32],
) -> Result<Option<usize>, BadIndex> {
    let values = &idx[run.first * C..(run.first + out.len()) * C];
    let consts = Axes32::<C> {
        // Axis sizes fit i64 (tensor sizes are below isize::MAX); strides are below the input
        // size, which fits 32 bits for 32-bit tables.
        dims: std::array::from_fn(|k| axes[k].dim as i64),
        strides: std::array::from_fn(|k| axes[k].stride as u32),
    };
    let mut max = 0u32;
    for (b, (slots, vals)) in out
        .chunks_mut(BLOCK32)
        .zip(values.chunks(BLOCK32 * C))
        .enumerate()
    {
        let base = run.base + b * BLOCK32 * run.step;
        let (bad, block_max) = fill_block::<I, C, CLAMP>(vals, base, run.step, consts, simd, slots);
        max = max.max(block_max);
        if bad {
            let first = run.first + b * BLOCK32;
            return Err(first_bad(vals, axes, first, C));
        }
    }
    Ok((!out.is_empty()).then_some(max as usize))
}

/// One block of 32-bit offsets `base + e * step + sum_k coordinate_k * strides[k]` for the
/// tuples of `vals` (see [`fill_u32`]), compiled for the widest of AVX-512 and AVX2 that `simd`
/// allows and the CPU has (see the module docs of `super::simd`); returns whether
/// some index was out of range (never when `CLAMP`; every axis must then be non-empty) and the
/// largest offset written.
#[inline(always)]
pub(crate) fn fill_block<I: IndexValue, const C: usize, const CLAMP: bool>(
    vals: &[I],
    base: usize,
    step: usize,
    consts: Axes32<C>,
    simd: SimdLevel,
    out: &mut [u32],
) -> (bool, u32) {
    #[cfg(target_arch = "x86_64")]
    if simd >= SimdLevel::Avx512 && avx512_vl() {
        // SAFETY: the CPU has AVX-512 F, BW, DQ and VL (checked just above).
        return unsafe { fill_block_avx512::<I, C, CLAMP>(vals, base, step, consts, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if simd >= SimdLevel::Avx2 && SimdLevel::detected() >= SimdLevel::Avx2 {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { fill_block_avx2::<I, C, CLAMP>(vals, base, step, consts, out) };
    }
    let _ = simd;
    fill_block_body::<I, C, CLAMP>(vals, base, step, consts, out)
}

/// `$name`: [`fill_block_body`] compiled with the target features `$features`.
macro_rules! fill_block_for {
    ($name:ident, $features:literal) => {
        #[doc = concat!("[`fill_block_body`] compiled for ", $features, ".")]
        ///
        /// # Safety
        /// The CPU must support those features.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name<I: IndexValue, const C: usize, const CLAMP: bool>(
            vals: &[I],
            base: usize,
            step: usize,
            consts: Axes32<C>,
            out: &mut [u32],
        ) -> (bool, u32) {
            fill_block_body::<I, C, CLAMP>(vals, base, step, consts, out)
        }
    };
}

fill_block_for!(fill_block_avx2, "avx2");
fill_block_for!(fill_block_avx512, "avx512f,avx512bw,avx512dq,avx512vl");

/// Whether the CPU has the AVX-512 subsets [`fill_block_avx512`] is compiled for (every CPU
/// with AVX-512 since Skylake-SP and Zen 4 has them all).
#[cfg(target_arch = "x86_64")]
fn avx512_vl() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
    })
}

/// Offsets of one block of tuples in wrapping 32-bit arithmetic (see [`fill_u32`]); returns
/// whether some index was out of range (never in mode `clamp`) and the largest offset written.
#[inline(always)]
fn fill_block_body<I: IndexValue, const C: usize, const CLAMP: bool>(
    vals: &[I],
    base: usize,
    step: usize,
    consts: Axes32<C>,
    out: &mut [u32],
) -> (bool, u32) {
    let (base, step) = (base as u32, step as u32);
    let mut bad = false;
    let mut max = 0u32;
    for (e, (slot, tuple)) in out.iter_mut().zip(vals.chunks_exact(C)).enumerate() {
        let mut offset = base.wrapping_add((e as u32).wrapping_mul(step));
        let axes = consts.dims.iter().zip(&consts.strides);
        for (v, (&d, &stride)) in tuple.iter().zip(axes) {
            let v = v.get();
            let wrapped = if v < 0 { v.wrapping_add(d) } else { v };
            let coordinate = if CLAMP {
                // `d > 0`: callers send empty axes in mode clamp elsewhere.
                wrapped.clamp(0, d - 1)
            } else {
                bad |= (wrapped as u64) >= d as u64;
                wrapped
            };
            offset = offset.wrapping_add((coordinate as u32).wrapping_mul(stride));
        }
        max = max.max(offset);
        *slot = offset;
    }
    (bad, max)
}

/// The first out-of-range index of a block of `c`-coordinate tuples whose first tuple is
/// `first` (mode `error`: clamped blocks have none).
#[cold]
fn first_bad<I: IndexValue>(vals: &[I], axes: &[AxisInfo], first: usize, c: usize) -> BadIndex {
    for (e, tuple) in vals.chunks_exact(c).enumerate() {
        for (k, (axis, v)) in axes.iter().zip(tuple).enumerate() {
            if resolve(v.get(), axis.dim, false).is_none() {
                return BadIndex {
                    flat: (first + e) * c + k,
                    component: k,
                    value: v.get(),
                };
            }
        }
    }
    // Unreachable when the block loop reported a bad index; a harmless stand-in otherwise.
    BadIndex {
        flat: first * c,
        component: 0,
        value: vals.first().map_or(0, |v| v.get()),
    }
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
            layout.fill(Indices::I64(&idx), 100, &mut out, SimdLevel::Scalar),
            Err(BadIndex {
                flat: 300,
                component: 0,
                value: -11
            })
        );
        let mut out = vec![0u32; 100];
        assert_eq!(
            layout.fill(Indices::I64(&idx), 0, &mut out, SimdLevel::Scalar),
            Ok(Some(3))
        );
    }
}
