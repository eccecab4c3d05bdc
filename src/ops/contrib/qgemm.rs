//! `com.microsoft.QGemm` (opset 1), which `onnxruntime.quantization` emits for a `Gemm` in the
//! QOperator format: `alpha * (A' - a_zero) * (B' - b_zero) + C`, with 8-bit A and B, an int32
//! bias C at scale `a_scale * b_scale`, and a float output, or a quantised one when `y_scale`
//! and `y_zero_point` are given.
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, section `com.microsoft.QGemm`. Inputs: `A`,
//! `a_scale`, `a_zero_point` (per tensor), `B`, `b_scale`, `b_zero_point` (per tensor or per
//! column of B'), `C` (int32, broadcast to `[M, N]`), `y_scale`, `y_zero_point`; attributes
//! `alpha`, `transA`, `transB`.
//!
//! The operator has no specification beyond onnxruntime's CPU kernel, whose float arithmetic is
//! therefore the meaning, reproduced here: the exact integer sums plus C (in `i32`), then, per
//! column, `scale = alpha * a_scale * b_scale[col]` in `f32` (divided by `y_scale` for a
//! quantised output) and `y = f32(sum) * scale`, or `code = round_half_even(f32(sum) * scale) +
//! y_zero` saturated. With an empty contracted dim (K = 0) onnxruntime quantises the bias as
//! `QuantizeLinear(f32(C) * a_scale * b_scale, y_scale, y_zero)` (without `alpha`, with the first
//! `b_scale`), which is reproduced; its float output for K = 0 is not defined (it writes bytes
//! into the float buffer), so multigather gives the formula's value, `alpha * a_scale * b_scale * C`.

use crate::error::Result;
use crate::ir::{Shape, TensorType};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

use multiversion::multiversion;
use rayon::prelude::*;

use crate::par;

use super::super::nn::{
    gemm_dims, integer_product_kept, integer_product_kept_transposed, transposed_matrix, GemmAttrs,
    GemmShape, Sums,
};
use super::super::util::{optional, required};
use super::super::{EvalCtx, InferCtx};
use super::activations::floats;
use super::quant_matmul::scalar_scale;

pub(in crate::ops) fn eval_qgemm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 3)?);
    let a_scale = scalar_scale(ctx, required(inputs, 1)?, "a_scale")?;
    let (a_zero, b_zero) = (optional(inputs, 2), optional(inputs, 5));
    let (c, y_zero) = (optional(inputs, 6), optional(inputs, 8));
    let attrs = ctx.attrs::<GemmAttrs>()?;
    let shape = GemmShape::new(ctx, &attrs, a.shape(), b.shape())?;
    let (m, k, n) = (shape.m, shape.k, shape.n);
    // An empty contracted dim leaves the output's size to the outer dims alone.
    let len = m
        .checked_mul(n)
        .ok_or_else(|| ctx.error(format!("an output of {m} x {n} elements")))?;
    if a_zero.is_some_and(|z| z.len() != 1) {
        return Err(ctx.error("a_zero_point must hold one value"));
    }
    let b_scale = floats(required(inputs, 4)?, "b_scale")?;
    if b_scale.len() != 1 && b_scale.len() != n {
        return Err(ctx.error(format!(
            "b_scale holds {} values; expected 1 or {n} (one per column)",
            b_scale.len()
        )));
    }
    let y_scale = match (optional(inputs, 7), y_zero) {
        (Some(s), Some(_)) => Some(scalar_scale(ctx, s, "y_scale")?),
        (None, None) => None,
        _ => {
            return Err(ctx.error(
                "y_scale and y_zero_point come together (a quantised output) or not at all",
            ))
        }
    };
    if c.is_some_and(|c| c.dtype() != DataType::Int32) {
        return Err(ctx.error("C must be int32 (a bias at scale a_scale * b_scale)"));
    }

    // A as row-major [M, K]; B packed from either layout and kept across runs.
    let a_rows = if attrs.trans_a {
        Some(transposed_matrix(a)?)
    } else {
        None
    };
    let product = if attrs.trans_b {
        integer_product_kept_transposed
    } else {
        integer_product_kept
    };
    let (_, acc) = product(ctx, (a_rows.as_ref().unwrap_or(a), a_zero), (b, b_zero, 3))?;
    // onnxruntime accumulates in `i32` into a buffer holding C.
    let mut sums = match acc {
        Sums::I32(t) => t,
        Sums::F64(v) => {
            let wrapped: Vec<i32> = v.into_iter().map(|s| s as i64 as i32).collect();
            Tensor::from_vec(DataType::Int32, &[m, n], wrapped)?
        }
    };
    let sums: &[i32] = {
        let sums = sums.as_slice_mut::<i32>()?;
        if let Some(c) = c {
            add_bias(ctx, sums, c, (m, n))?;
        }
        sums
    };
    let mut scale = try_vec(b_scale.len(), 0.0f32)?;
    for (s, &bs) in scale.iter_mut().zip(b_scale) {
        *s = attrs.alpha * a_scale * bs;
        if let Some(ys) = y_scale {
            *s /= ys;
        }
    }
    let out_shape = [m, n];
    let (Some(y_zero), Some(ys)) = (y_zero, y_scale) else {
        let mut y = try_vec(len, 0.0f32)?;
        for (row, sums) in y
            .chunks_exact_mut(n.max(1))
            .zip(sums.chunks_exact(n.max(1)))
        {
            for (j, (y, &s)) in row.iter_mut().zip(sums).enumerate() {
                *y = s as f32 * scale[if scale.len() == 1 { 0 } else { j }];
            }
        }
        return Ok(vec![Tensor::from_vec(DataType::Float, &out_shape, y)?]);
    };
    let (lo, hi) = match y_zero.dtype() {
        DataType::Uint8 => (0.0f32, 255.0f32),
        DataType::Int8 => (-128.0, 127.0),
        other => {
            return Err(ctx.error(format!(
                "y_zero_point is {other}; QGemm quantises to uint8 or int8"
            )))
        }
    };
    if y_zero.len() != 1 {
        return Err(ctx.error("y_zero_point must hold one value"));
    }
    let zy = match y_zero.dtype() {
        DataType::Int8 => f32::from(y_zero.as_slice::<i8>()?[0]),
        _ => f32::from(y_zero.as_slice::<u8>()?[0]),
    };
    let mut y = try_vec(len, 0u8)?;
    if k == 0 && c.is_some() {
        for (y, &c) in y.iter_mut().zip(sums) {
            *y = code(c as f32 * a_scale * b_scale[0] / ys, zy, (lo, hi));
        }
    } else {
        y.par_chunks_exact_mut(n.max(1))
            .zip(sums.par_chunks_exact(n.max(1)))
            .with_min_len(par::min_len(m, &[n]))
            .for_each(|(row, sums)| requantize_row(sums, &scale, zy, (lo, hi), row));
    }
    Ok(vec![Tensor::from_vec(y_zero.dtype(), &out_shape, y)?])
}

/// `sums[i, j] += C` broadcast to `[m, n]` (wrapping, as onnxruntime's `i32` accumulator):
/// C is one value, a row of `n` (`[n]`, `[1, n]`), a column of `m` (`[m, 1]`) or `[m, n]`.
fn add_bias(ctx: &EvalCtx<'_>, sums: &mut [i32], c: &Tensor, (m, n): (usize, usize)) -> Result<()> {
    let values = c.as_slice::<i32>()?;
    let rows = sums.chunks_exact_mut(n.max(1));
    match c.shape() {
        _ if values.len() == 1 => sums.iter_mut().for_each(|s| *s = s.wrapping_add(values[0])),
        [len] | [1, len] if *len == n => {
            for row in rows {
                for (s, &b) in row.iter_mut().zip(values) {
                    *s = s.wrapping_add(b);
                }
            }
        }
        [rows_c, 1] if *rows_c == m => {
            for (row, &b) in rows.zip(values) {
                row.iter_mut().for_each(|s| *s = s.wrapping_add(b));
            }
        }
        [rows_c, cols] if *rows_c == m && *cols == n => {
            for (s, &b) in sums.iter_mut().zip(values) {
                *s = s.wrapping_add(b);
            }
        }
        other => {
            return Err(ctx.error(format!(
                "C {other:?} does not broadcast to the output [{m}, {n}]"
            )))
        }
    }
    Ok(())
}

/// The byte of `clamp(round_half_even(v) + zy)` (two's complement for `int8`); NaN gives 0.
#[inline(always)]
fn code(v: f32, zy: f32, (lo, hi): (f32, f32)) -> u8 {
    let q = v.round_ties_even() + zy;
    let q = if q.is_nan() { 0.0 } else { q.max(lo).min(hi) };
    // SAFETY: `q` is finite and within an 8-bit code's range.
    unsafe { q.to_int_unchecked::<i32>() as u8 }
}

/// One row of quantised output: `code(f32(sum) * scale[j])`, `scale` one value or one per column.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1",
    "aarch64+neon"
))]
fn requantize_row(sums: &[i32], scale: &[f32], zy: f32, range: (f32, f32), out: &mut [u8]) {
    if let [m] = scale[..] {
        for (o, &s) in out.iter_mut().zip(sums) {
            *o = code(s as f32 * m, zy, range);
        }
    } else {
        for ((o, &s), &m) in out.iter_mut().zip(sums).zip(scale) {
            *o = code(s as f32 * m, zy, range);
        }
    }
}

/// Float, or `y_zero_point`'s type when the output is quantised; `[M, N]`.
pub(super) fn infer_qgemm(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let quantised = ctx.node.inputs.get(8).is_some_and(|s| !s.is_empty());
    let elem = if quantised {
        ctx.input(8).and_then(|t| t.elem)
    } else {
        Some(DataType::Float)
    };
    let dims = gemm_dims(ctx, 0, 3)?;
    Ok(vec![TensorType {
        elem,
        shape: Some(Shape::new(dims)),
    }])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;

    use super::*;

    fn t<T: bytemuck::Pod>(dtype: DataType, shape: &[usize], v: &[T]) -> Tensor {
        Tensor::from_vec(dtype, shape, v.to_vec()).unwrap()
    }

    fn qgemm(inputs: &[Option<&Tensor>], attrs: &[(&str, AttrValue)]) -> Result<Vec<Tensor>> {
        let names: Vec<String> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| t.map_or(String::new(), |_| format!("i{i}")))
            .collect();
        let mut node = Node::new("QGemm", "n", names, ["y"]);
        node.domain = "com.microsoft".into();
        for (name, v) in attrs {
            node.set_attr(name, v.clone());
        }
        eval_node(&node, 1, inputs)
    }

    #[test]
    fn float_output_scales_exact_sums_per_column_and_adds_the_bias() {
        // A [2, 3] u8, zero 1; B' = B^T, B [2, 3] i8 per-column scales; C [2] int32.
        let a = t(DataType::Uint8, &[2, 3], &[1u8, 2, 3, 4, 5, 6]);
        let sa = t(DataType::Float, &[], &[0.5f32]);
        let za = t(DataType::Uint8, &[], &[1u8]);
        let b = t(DataType::Int8, &[2, 3], &[1i8, 0, -1, 2, 2, 2]);
        let sb = t(DataType::Float, &[2], &[1.0f32, 0.25]);
        let c = t(DataType::Int32, &[2], &[10i32, -4]);
        let y = qgemm(
            &[
                Some(&a),
                Some(&sa),
                Some(&za),
                Some(&b),
                Some(&sb),
                None,
                Some(&c),
            ],
            &[
                ("transB", AttrValue::Int(1)),
                ("alpha", AttrValue::Float(2.0)),
            ],
        )
        .unwrap();
        // A - 1 = [[0, 1, 2], [3, 4, 5]]; sums [[-2, 6], [-2, 24]]; + C = [[8, 2], [8, 20]];
        // scales 2 * 0.5 * [1, 0.25] = [1, 0.25].
        assert_eq!(y[0].shape(), &[2, 2]);
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[8.0, 0.5, 8.0, 5.0]);
    }

    #[test]
    fn quantised_output_rounds_half_to_even_and_saturates() {
        let a = t(DataType::Uint8, &[1, 2], &[3u8, 1]);
        let sa = t(DataType::Float, &[], &[1.0f32]);
        let b = t(DataType::Uint8, &[2, 3], &[1u8, 0, 200, 0, 1, 200]);
        let sb = t(DataType::Float, &[], &[0.5f32]);
        let sy = t(DataType::Float, &[], &[1.0f32]);
        let zy = t(DataType::Int8, &[], &[-1i8]);
        let y = qgemm(
            &[
                Some(&a),
                Some(&sa),
                None,
                Some(&b),
                Some(&sb),
                None,
                None,
                Some(&sy),
                Some(&zy),
            ],
            &[],
        )
        .unwrap();
        // Sums [3, 1, 800] * 0.5 = [1.5, 0.5, 400] -> [2, 0, 400] - 1 -> [1, -1, 127].
        assert_eq!(y[0].dtype(), DataType::Int8);
        assert_eq!(y[0].as_slice::<i8>().unwrap(), &[1, -1, 127]);
    }

    #[test]
    fn a_scale_without_a_zero_point_is_an_error() {
        let a = t(DataType::Uint8, &[1, 1], &[3u8]);
        let s = t(DataType::Float, &[], &[1.0f32]);
        let err = qgemm(
            &[
                Some(&a),
                Some(&s),
                None,
                Some(&a),
                Some(&s),
                None,
                None,
                Some(&s),
            ],
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("come together"), "{err}");
    }
}
