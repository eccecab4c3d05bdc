//! `Softmax`, `LogSoftmax` and `Hardmax` (opset 1+, float types).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Softmax.html> (and its siblings).
//!
//! Up to opset 12 the input is coerced to 2-D at `axis` (default 1): the rows are everything
//! before `axis`, the reduction runs over everything from it. From opset 13 the reduction runs
//! along `axis` alone (default -1). Rows are computed in `f64` with the row's maximum subtracted
//! before exponentiating, except `Softmax` along the innermost axis of `float`, `float16` and
//! `bfloat16` tensors, which runs the vectorised `f32` kernel (halves widened, then rounded
//! once); `Hardmax` marks the first maximum of each row.

use std::mem::MaybeUninit;

use crate::error::Result;
use crate::ops::halves::{self, Widen};
use crate::ops::num::{Float, Num};
use crate::ops::util::{normalize_axis, required, tensor};
use crate::ops::vector;
use crate::ops::{Attributes, EvalCtx};
use crate::tensor::try_vec;
use crate::tensor::Tensor;
use crate::DataType;
use half::{bf16, f16};

use super::work::{bad_type, split_at_axis};

/// Which function a kernel applies to each row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

/// The `axis` of a softmax-like node: 1 when absent up to opset 12, -1 from 13.
#[derive(Clone, Copy, Debug)]
pub(super) struct SoftmaxAxis(i64);

impl Attributes for SoftmaxAxis {
    fn parse(node: &crate::ir::Node, opset: i64) -> Result<SoftmaxAxis> {
        let default = if opset < 13 { 1 } else { -1 };
        Ok(SoftmaxAxis(node.attr_int("axis", default)?))
    }
}

/// The rows of a node's input: `(outer, size, inner)` as in [`split_at_axis`].
fn rows(ctx: &EvalCtx<'_>, shape: &[usize]) -> Result<(usize, usize, usize)> {
    let SoftmaxAxis(axis) = *ctx.attrs::<SoftmaxAxis>()?;
    if ctx.opset < 13 {
        // The coerced axis may equal the rank: one row per element.
        let rank = shape.len() as i64;
        let a = if axis < 0 { axis + rank } else { axis };
        if !(0..=rank).contains(&a) {
            return Err(ctx.error(format!("axis {axis} is out of range for rank {rank}")));
        }
        let axis = a as usize;
        let outer = shape[..axis].iter().product();
        Ok((outer, shape[axis..].iter().product(), 1))
    } else {
        let axis = normalize_axis(axis, shape.len())?;
        Ok(split_at_axis(shape, axis))
    }
}

/// Replaces a row of values by the function's result.
fn apply(kind: Kind, row: &mut [f64]) {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match kind {
        Kind::Hardmax => {
            let first = row.iter().position(|&v| v == max);
            for (i, v) in row.iter_mut().enumerate() {
                *v = if Some(i) == first { 1.0 } else { 0.0 };
            }
        }
        Kind::Softmax | Kind::LogSoftmax => {
            let shift = if max.is_finite() { max } else { 0.0 };
            let sum: f64 = row.iter().map(|&v| (v - shift).exp()).sum();
            for v in row.iter_mut() {
                *v = if kind == Kind::Softmax {
                    (*v - shift).exp() / sum
                } else {
                    *v - shift - sum.ln()
                };
            }
        }
    }
}

fn eval(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>], kind: Kind) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let (outer, size, inner) = rows(ctx, x.shape())?;
    if kind == Kind::Softmax && inner == 1 && x.dtype() == DataType::Float {
        let src = x.as_slice::<f32>()?;
        let out = Tensor::uninit(DataType::Float, x.shape())?;
        return Ok(vec![out.fill(|dst| vector::softmax_rows(src, size, dst))?]);
    }
    if kind == Kind::Softmax && inner == 1 {
        match x.dtype() {
            DataType::Float16 => return half_softmax::<f16>(x, size),
            DataType::Bfloat16 => return half_softmax::<bf16>(x, size),
            _ => {}
        }
    }
    crate::ops::num::dispatch_float!(x.dtype(), T => {
        let src = x.as_slice::<T>()?;
        let mut out = try_vec(src.len(), <T as Float>::from_f64(0.0))?;
        let mut row = try_vec(size, 0.0f64)?;
        for o in 0..outer {
            for k in 0..inner {
                let at = |i: usize| (o * size + i) * inner + k;
                for (i, r) in row.iter_mut().enumerate() {
                    *r = src[at(i)].to_f64();
                }
                apply(kind, &mut row);
                for (i, &r) in row.iter().enumerate() {
                    out[at(i)] = <T as Float>::from_f64(r);
                }
            }
        }
        Ok(vec![tensor(T::DTYPE, x.shape(), out)?])
    }, _ => Err(bad_type(ctx, x.dtype())))
}

/// Softmax of the rows of `size` consecutive elements of a half tensor: the vectorised `f32`
/// softmax of the widened rows, rounded once (as onnxruntime computes it; the `f32` result is
/// within a few `f32` ulps of the exact one, far inside half precision), a group of rows at a
/// time in cache.
fn half_softmax<T: Widen + bytemuck::Pod>(x: &Tensor, size: usize) -> Result<Vec<Tensor>> {
    let src = x.as_slice::<T>()?;
    let out = Tensor::uninit(x.dtype(), x.shape())?;
    let y = out.try_fill(|dst: &mut [MaybeUninit<T>]| {
        halves::map_rows(src, dst, size, |w, p| vector::softmax_rows(w, size, p))
    })?;
    Ok(vec![y])
}

pub(super) fn eval_softmax(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    eval(ctx, inputs, Kind::Softmax)
}

pub(super) fn eval_log_softmax(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    eval(ctx, inputs, Kind::LogSoftmax)
}

pub(super) fn eval_hardmax(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    eval(ctx, inputs, Kind::Hardmax)
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn run(op: &str, opset: i64, axis: Option<i64>, x: &Tensor) -> crate::Result<Vec<f32>> {
        let mut node = Node::new(op, "s", ["x"], ["y"]);
        if let Some(a) = axis {
            node = node.with_attr("axis", AttrValue::Int(a));
        }
        Ok(eval_node(&node, opset, &[Some(x)])?
            .remove(0)
            .to_vec::<f32>()?)
    }

    fn x() -> Tensor {
        Tensor::from_vec(DataType::Float, &[2, 2], vec![1.0f32, 2.0, 3.0, 3.0]).unwrap()
    }

    #[test]
    fn softmax_runs_along_the_last_axis_from_opset_13() {
        let y = run("Softmax", 13, None, &x()).unwrap();
        let e = 1.0 / (1.0 + std::f32::consts::E);
        assert!((y[0] - e).abs() < 1e-6 && (y[1] - (1.0 - e)).abs() < 1e-6);
        assert_eq!(&y[2..], [0.5, 0.5]);
        let y = run("LogSoftmax", 13, Some(0), &x()).unwrap();
        assert!((y[1] - (-(1.0f32 + 1.0f32.exp()).ln())).abs() < 1e-6);
    }

    #[test]
    fn before_opset_13_the_input_is_coerced_to_2d() {
        let y = run("Softmax", 11, Some(0), &x()).unwrap();
        let sum: f32 = y.iter().sum();
        assert!((sum - 1.0).abs() < 1e-6);
        let y = run("Hardmax", 11, Some(0), &x()).unwrap();
        assert_eq!(y, [0.0, 0.0, 1.0, 0.0]);
        let err = run("Softmax", 11, Some(3), &x()).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
    }

    #[test]
    fn hardmax_marks_the_first_maximum() {
        let y = run("Hardmax", 13, None, &x()).unwrap();
        assert_eq!(y, [0.0, 1.0, 1.0, 0.0]);
    }

    #[test]
    fn large_values_do_not_overflow() {
        let x = Tensor::from_vec(DataType::Float, &[2], vec![10000.0f32, 10001.0]).unwrap();
        let y = run("Softmax", 13, None, &x).unwrap();
        assert!((y[0] - 0.268_941_43).abs() < 1e-6);
    }

    /// Half softmax rows come from the `f32` kernel rounded once: each value is the `f64`
    /// softmax of the half inputs rounded to the half type, or one of its neighbours.
    #[test]
    fn half_rows_are_within_one_unit_of_the_rounded_exact_softmax() {
        use half::{bf16, f16};
        let (rows, size) = (5, 37);
        let wide: Vec<f32> = (0..rows * size)
            .map(|i| f16::from_f32(((i * 7919) % 101) as f32 / 9.0 - 5.0).to_f32())
            .collect();
        let exact = |row: &[f32]| -> Vec<f64> {
            let max = row.iter().copied().fold(f32::MIN, f32::max) as f64;
            let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            row.iter().map(|&v| (v as f64 - max).exp() / sum).collect()
        };
        let node = Node::new("Softmax", "s", ["x"], ["y"]);
        let halves: Vec<f16> = wide.iter().map(|&v| f16::from_f32(v)).collect();
        let x = Tensor::from_vec(DataType::Float16, &[rows, size], halves).unwrap();
        let y = eval_node(&node, 13, &[Some(&x)]).unwrap().remove(0);
        for (row, got) in wide
            .chunks(size)
            .zip(y.as_slice::<f16>().unwrap().chunks(size))
        {
            for (&want, &g) in exact(row).iter().zip(got) {
                let want = crate::ops::halves::f16_from_f64(want);
                assert!(g.to_bits().abs_diff(want.to_bits()) <= 1, "{g} vs {want}");
            }
        }
        let b: Vec<bf16> = wide.iter().map(|&v| bf16::from_f32(v)).collect();
        let wide: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
        let x = Tensor::from_vec(DataType::Bfloat16, &[rows, size], b).unwrap();
        let y = eval_node(&node, 13, &[Some(&x)]).unwrap().remove(0);
        for (row, got) in wide
            .chunks(size)
            .zip(y.as_slice::<bf16>().unwrap().chunks(size))
        {
            for (&want, &g) in exact(row).iter().zip(got) {
                let want = crate::ops::halves::bf16_from_f64(want);
                assert!(g.to_bits().abs_diff(want.to_bits()) <= 1, "{g} vs {want}");
            }
        }
    }
}
