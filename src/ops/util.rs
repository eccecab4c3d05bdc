//! What many kernels share: input access, axis normalisation and multidirectional broadcasting
//! (element types and their dispatch are in `num.rs`).

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::DataType;

/// Input `i`, which the operator requires.
pub fn required<'t>(inputs: &[Option<&'t Tensor>], i: usize) -> Result<&'t Tensor> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| Error::Eval(format!("required input {i} is missing")))
}

/// Input `i`, or `None` when omitted.
pub fn optional<'t>(inputs: &[Option<&'t Tensor>], i: usize) -> Option<&'t Tensor> {
    inputs.get(i).copied().flatten()
}

/// An axis attribute or input value in `[-rank, rank)`, made non-negative.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(Error::Eval(format!(
            "axis {axis} is out of range for rank {rank}"
        )))
    }
}

/// The values of an integer tensor (int8 to int64, uint8 to uint64), widened to `i64`.
pub fn to_i64s(t: &Tensor) -> Result<Vec<i64>> {
    Ok(match t.dtype() {
        DataType::Int64 => t.as_slice::<i64>()?.to_vec(),
        DataType::Int32 => t.as_slice::<i32>()?.iter().map(|&v| v as i64).collect(),
        DataType::Int16 => t.as_slice::<i16>()?.iter().map(|&v| v as i64).collect(),
        DataType::Int8 => t.as_slice::<i8>()?.iter().map(|&v| v as i64).collect(),
        DataType::Uint8 => t.as_slice::<u8>()?.iter().map(|&v| v as i64).collect(),
        DataType::Uint16 => t.as_slice::<u16>()?.iter().map(|&v| v as i64).collect(),
        DataType::Uint32 => t.as_slice::<u32>()?.iter().map(|&v| v as i64).collect(),
        DataType::Uint64 => t.as_slice::<u64>()?.iter().map(|&v| v as i64).collect(),
        other => {
            return Err(Error::Eval(format!(
                "expected an integer tensor, found {other}"
            )))
        }
    })
}

/// The single value of a one-element integer tensor (scalar or shape `[1]`).
pub fn scalar_i64(t: &Tensor) -> Result<i64> {
    let v = to_i64s(t)?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(Error::Eval(format!(
            "expected a single value, found shape {:?}",
            t.shape()
        ))),
    }
}

/// A shape read from a tensor of dims (negative entries rejected).
pub fn to_dims(t: &Tensor) -> Result<Vec<usize>> {
    to_i64s(t)?
        .into_iter()
        .map(|d| usize::try_from(d).map_err(|_| Error::Eval(format!("negative dimension {d}"))))
        .collect()
}

/// The multidirectional (numpy) broadcast of shapes: right-aligned, each dim equal or 1.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let offset = rank - s.len();
        for (j, &d) in s.iter().enumerate() {
            let o = &mut out[offset + j];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(Error::Eval(format!(
                    "shapes {:?} do not broadcast",
                    shapes.iter().map(|s| s.to_vec()).collect::<Vec<_>>()
                )));
            }
        }
    }
    Ok(out)
}

/// Row-major strides (in elements) of `shape`. The products saturate: they only overflow for an
/// empty tensor with huge dims, whose strides never address an element.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for j in (0..shape.len().saturating_sub(1)).rev() {
        s[j] = s[j + 1].saturating_mul(shape[j + 1]);
    }
    s
}

/// Strides (in elements) that read a tensor of `shape` broadcast to `out` (right-aligned): 0 on
/// broadcast dims.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let offset = out.len() - shape.len();
    (0..out.len())
        .map(|j| {
            if j < offset || shape[j - offset] == 1 {
                0
            } else {
                own[j - offset]
            }
        })
        .collect()
}

/// For each element of a tensor of shape `out` in row-major order, the offset of the element it
/// reads in a tensor of shape `shape` broadcast to `out`.
pub fn broadcast_offsets(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let st = broadcast_strides(shape, out);
    let n: usize = out.iter().product();
    let mut offsets = Vec::with_capacity(n);
    if n == 0 {
        return offsets;
    }
    let mut idx = vec![0usize; out.len()];
    let mut off = 0usize;
    for _ in 0..n {
        offsets.push(off);
        for j in (0..out.len()).rev() {
            idx[j] += 1;
            off += st[j];
            if idx[j] < out[j] {
                break;
            }
            off -= st[j] * out[j];
            idx[j] = 0;
        }
    }
    offsets
}

/// Applies `f` elementwise to two broadcast operands, returning the values and the output shape.
pub fn broadcast_binary<A: Copy, B: Copy, O>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    mut f: impl FnMut(A, B) -> O,
) -> Result<(Vec<O>, Vec<usize>)> {
    let out = broadcast_shapes(&[a_shape, b_shape])?;
    let values = if a_shape == b_shape {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    } else if b.len() == 1 && out == a_shape {
        a.iter().map(|&x| f(x, b[0])).collect()
    } else if a.len() == 1 && out == b_shape {
        b.iter().map(|&y| f(a[0], y)).collect()
    } else {
        broadcast_runs(a, a_shape, b, b_shape, &out, f)
    };
    Ok((values, out))
}

/// [`broadcast_binary`] over shapes that differ, run by run ([`BroadcastRuns`]): a per-channel
/// scale or bias is one run per channel.
fn broadcast_runs<A: Copy, B: Copy, O>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    out: &[usize],
    mut f: impl FnMut(A, B) -> O,
) -> Vec<O> {
    let total: usize = out.iter().product();
    let mut values = Vec::with_capacity(total);
    let runs = BroadcastRuns::new(a_shape, b_shape, out);
    let n = runs.run_len();
    if total == 0 || n == 0 {
        return values;
    }
    for k in 0..total / n {
        let (ia, ra, ib, rb) = runs.run(k);
        match (ra, rb) {
            (1, 1) => values.extend(
                a[ia..ia + n]
                    .iter()
                    .zip(&b[ib..ib + n])
                    .map(|(&x, &y)| f(x, y)),
            ),
            (1, 0) => {
                let y = b[ib];
                values.extend(a[ia..ia + n].iter().map(|&x| f(x, y)));
            }
            (0, 1) => {
                let x = a[ia];
                values.extend(b[ib..ib + n].iter().map(|&y| f(x, y)));
            }
            _ => values.extend((0..n).map(|j| f(a[ia + j * ra], b[ib + j * rb]))),
        }
    }
    values
}

/// Two operands broadcast to an output shape, as runs: the output's dims are merged where both
/// operands step through them alike (dims of one dropped), the innermost merged dim is one run,
/// and run `k` can be located directly, so runs can be computed in any order or in parallel.
#[derive(Clone, Debug)]
pub struct BroadcastRuns {
    /// `(count, stride in a, stride in b)` of the dims outside the run, outermost first.
    outer: Vec<(usize, usize, usize)>,
    /// `(length, stride in a, stride in b)` of the run.
    run: (usize, usize, usize),
}

impl BroadcastRuns {
    /// The runs of `a_shape` and `b_shape` broadcast to `out` (which must be their broadcast).
    pub fn new(a_shape: &[usize], b_shape: &[usize], out: &[usize]) -> BroadcastRuns {
        // Element strides of an operand along the output's dims: 0 where it is broadcast.
        let strides = |shape: &[usize]| {
            let mut st = vec![0; out.len()];
            let offset = out.len() - shape.len().min(out.len());
            let mut step: usize = 1;
            for (i, &n) in shape.iter().enumerate().rev() {
                if n != 1 && offset + i < out.len() {
                    st[offset + i] = step;
                }
                step = step.saturating_mul(n);
            }
            st
        };
        let (sa, sb) = (strides(a_shape), strides(b_shape));
        let mut dims: Vec<(usize, usize, usize)> = Vec::with_capacity(out.len());
        for (i, &n) in out.iter().enumerate() {
            if n == 1 {
                continue;
            }
            match dims.last_mut() {
                Some(last) if last.1 == sa[i] * n && last.2 == sb[i] * n => {
                    *last = (last.0 * n, sa[i], sb[i]);
                }
                _ => dims.push((n, sa[i], sb[i])),
            }
        }
        let run = dims.pop().unwrap_or((1, 0, 0));
        BroadcastRuns { outer: dims, run }
    }

    /// The number of output elements of one run.
    pub fn run_len(&self) -> usize {
        self.run.0
    }

    /// Run `k`: its first element's offsets in `a` and `b`, and the strides of `a` and `b`
    /// along it (0 for a broadcast operand, 1 for a contiguous one).
    pub fn run(&self, mut k: usize) -> (usize, usize, usize, usize) {
        let (mut ia, mut ib) = (0, 0);
        for &(count, sa, sb) in self.outer.iter().rev() {
            let i = k % count;
            k /= count;
            ia += i * sa;
            ib += i * sb;
        }
        (ia, self.run.1, ib, self.run.2)
    }
}

/// An error for an element type an operator does not take.
pub fn unsupported_type(what: &str, dtype: DataType) -> Error {
    Error::Eval(format!("{what} does not take {dtype} tensors"))
}

/// A tensor built from values whose count matches `shape` by construction.
pub fn tensor<T: Pod>(dtype: DataType, shape: &[usize], values: Vec<T>) -> Result<Tensor> {
    Ok(Tensor::from_vec(dtype, shape, values)?)
}

/// The dot product of two equally long slices, in sixteen independent sums so that it
/// vectorizes (the summation order is fixed, so results do not depend on the caller or on the
/// SIMD level, which is chosen at run time).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn dot<T>(a: &[T], b: &[T]) -> T
where
    T: Copy + Default + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    const LANES: usize = 16;
    let mut sums = [T::default(); LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .fold(T::default(), |s, (&x, &y)| s + x * y);
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            sums[l] = sums[l] + x[l] * y[l];
        }
    }
    sums.iter().fold(tail, |s, &v| s + v)
}

/// A tensor of `dtype` and `shape` whose elements `values` yields in row-major order, written
/// straight into the tensor's buffer (no zero fill, no intermediate vector). `T` must be as wide
/// as one element of `dtype`, and `values` must yield exactly the element count.
pub fn tensor_from_iter<T: Pod>(
    dtype: DataType,
    shape: &[usize],
    values: impl Iterator<Item = T>,
) -> Result<Tensor> {
    let mut out = Tensor::uninit(dtype, shape)?;
    let len = out.len();
    let bytes = out.bytes_mut();
    if dtype == DataType::String || bytes.len() != len * std::mem::size_of::<T>() {
        return Err(Error::Eval(format!(
            "{dtype} elements cannot be written as {}-byte values",
            std::mem::size_of::<T>()
        )));
    }
    if std::mem::align_of::<T>() > 8 {
        return Err(Error::Eval("over-aligned element type".into()));
    }
    // SAFETY: the buffer is 8-byte aligned (`Tensor::uninit`), enough for `T` (checked above);
    // it holds exactly `len` values of `T` (checked above), and `MaybeUninit<T>` has no validity
    // requirement.
    let slots: &mut [std::mem::MaybeUninit<T>] =
        unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), len) };
    let mut written = 0;
    for (slot, v) in slots.iter_mut().zip(values) {
        slot.write(v);
        written += 1;
    }
    if written != len {
        return Err(Error::Eval(format!(
            "{written} values were computed for {len} elements"
        )));
    }
    // SAFETY: every one of the `len` elements, i.e. every payload byte, was written above.
    Ok(unsafe { out.assume_init() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_runs_agree_with_offsets() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[1, 3, 4, 5], &[1, 3, 1, 1]),
            (&[2, 3, 4], &[4]),
            (&[2, 1, 4], &[3, 1]),
            (&[3, 1], &[1, 4]),
            (&[2, 3, 1, 5], &[2, 1, 4, 5]),
            (&[1], &[2, 3]),
            (&[2, 0, 3], &[3]),
            (&[1, 1], &[1]),
        ];
        for &(sa, sb) in cases {
            let a: Vec<i64> = (0..sa.iter().product::<usize>() as i64).collect();
            let b: Vec<i64> = (0..sb.iter().product::<usize>() as i64)
                .map(|v| 1000 * v)
                .collect();
            let out = broadcast_shapes(&[sa, sb]).unwrap();
            let (oa, ob) = (broadcast_offsets(sa, &out), broadcast_offsets(sb, &out));
            let want: Vec<i64> = oa.iter().zip(&ob).map(|(&i, &j)| a[i] + b[j]).collect();
            let (got, shape) = broadcast_binary(&a, sa, &b, sb, |x, y| x + y).unwrap();
            assert_eq!(shape, out, "{sa:?} {sb:?}");
            assert_eq!(got, want, "{sa:?} {sb:?}");
            let (got, _) = broadcast_binary(&b, sb, &a, sa, |y, x| x + y).unwrap();
            assert_eq!(got, want, "{sb:?} {sa:?}");
        }
    }

    #[test]
    fn broadcasting_right_aligns_and_stretches_ones() {
        assert_eq!(
            broadcast_shapes(&[&[2, 1, 3], &[4, 1]]).unwrap(),
            vec![2, 4, 3]
        );
        assert!(broadcast_shapes(&[&[2, 3], &[4]]).is_err());
        assert_eq!(broadcast_offsets(&[3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(broadcast_offsets(&[2, 1], &[2, 3]), vec![0, 0, 0, 1, 1, 1]);
    }

    #[test]
    fn binary_broadcast_matches_numpy() {
        let (v, s) = broadcast_binary(&[1, 2], &[2, 1], &[10, 20, 30], &[3], |a, b| a + b).unwrap();
        assert_eq!(s, vec![2, 3]);
        assert_eq!(v, vec![11, 21, 31, 12, 22, 32]);
    }

    #[test]
    fn strides_of_an_empty_tensor_with_huge_dims_do_not_overflow() {
        // The fuzz input `[234, 0, 0, 181, 41, 157, 0, 181, 7]`: float[0, 3, 2^62, 3].
        let s = strides(&[0, 3, 1 << 62, 3]);
        assert_eq!(s[2..], [3, 1]);
        assert_eq!(s[0], usize::MAX);
    }

    #[test]
    fn axes_normalise_or_fail() {
        assert_eq!(normalize_axis(-1, 3).unwrap(), 2);
        assert!(normalize_axis(3, 3).is_err());
        assert!(normalize_axis(-4, 3).is_err());
    }
}
