//! `MatMul` (opsets 1, 9, 13), `MatMulInteger` (10) and `QLinearMatMul` (10, 21): numpy-style
//! matrix products with broadcast batch dims and 1-D operands.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__MatMul.html>,
//! <https://onnx.ai/onnx/operators/onnx__MatMulInteger.html>,
//! <https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html>.
//!
//! Floating-point products go through the `gemm` crate (float16 and bfloat16 via `f32`). Integer
//! `MatMul` wraps in the element type, like every runtime. The quantized products subtract their
//! zero points and multiply in `f64`, which is exact for 8-bit operands, then requantize with
//! round-half-to-even and saturation.

use crate::tensor::try_vec;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::broadcast_dim;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{
    broadcast_offsets, broadcast_shapes, optional, required, to_i64s, unsupported_type,
};
use super::super::vector::assume_written;
use super::super::{EvalCtx, InferCtx};
use super::blas::{gemm, Mat};
use super::common::{
    code_range, input_dims, is_int, output, round_half_even, round_to, shifted_f64s, store_ints,
    tensor_type, to_f32s, zero_at, zero_points,
};
use super::igemm::{self, Bytes, Level, PackedB, EXACT_K};
use crate::ops::num::{dispatch_real, Arith, Real};

/// Batches with at least this many multiply-adds in all run in parallel.
const PARALLEL_FLOPS: usize = 1 << 18;

/// How a (possibly batched, possibly 1-D) matrix product lines up its operands.
#[derive(Debug)]
pub(in crate::ops) struct Plan {
    /// Rows of each product.
    pub m: usize,
    /// The contracted dim.
    pub k: usize,
    /// Columns of each product.
    pub n: usize,
    /// For each output matrix, the index of the A matrix and of the B matrix it multiplies.
    pairs: Vec<(usize, usize)>,
    /// The output shape (without the dims 1-D operands drop).
    pub out_shape: Vec<usize>,
}

impl Plan {
    /// The plan for `A @ B` with numpy semantics.
    pub fn new(a: &[usize], b: &[usize]) -> Result<Plan> {
        if a.is_empty() || b.is_empty() {
            return Err(Error::Eval(format!(
                "operands of shapes {a:?} and {b:?}: both must have rank 1 or more"
            )));
        }
        let (m, k) = match a.len() {
            1 => (1, a[0]),
            r => (a[r - 2], a[r - 1]),
        };
        let (kb, n) = match b.len() {
            1 => (b[0], 1),
            r => (b[r - 2], b[r - 1]),
        };
        if k != kb {
            return Err(Error::Eval(format!(
                "operands of shapes {a:?} and {b:?} do not agree on the contracted dim"
            )));
        }
        let a_batch = &a[..a.len().saturating_sub(2)];
        let b_batch = &b[..b.len().saturating_sub(2)];
        let batch = broadcast_shapes(&[a_batch, b_batch])?;
        let a_idx = broadcast_offsets(a_batch, &batch);
        let b_idx = broadcast_offsets(b_batch, &batch);
        let mut out_shape = batch;
        if a.len() > 1 {
            out_shape.push(m);
        }
        if b.len() > 1 {
            out_shape.push(n);
        }
        Ok(Plan {
            m,
            k,
            n,
            pairs: a_idx.into_iter().zip(b_idx).collect(),
            out_shape,
        })
    }

    /// The number of output elements.
    fn out_len(&self) -> usize {
        self.pairs.len() * self.m * self.n
    }

    /// Whether every product uses the same B and consecutive A matrices, so the batch folds into
    /// the rows of one product.
    fn folds_into_rows(&self) -> bool {
        self.pairs
            .iter()
            .enumerate()
            .all(|(i, &(ai, bi))| ai == i && bi == self.pairs[0].1)
    }

    fn check_lens<T>(&self, a: &[T], b: &[T]) -> Result<()> {
        let a_mats = self.pairs.iter().map(|p| p.0 + 1).max().unwrap_or(0);
        let b_mats = self.pairs.iter().map(|p| p.1 + 1).max().unwrap_or(0);
        if a.len() < a_mats * self.m * self.k || b.len() < b_mats * self.k * self.n {
            return Err(Error::Eval("operands are smaller than their shapes".into()));
        }
        Ok(())
    }

    /// Writes `A @ B` into `out` (the output), in a floating-point type, through
    /// the `gemm` crate.
    pub fn run_real_into<T: Real>(&self, a: &[T], b: &[T], out: &mut [T]) -> Result<()> {
        self.check_lens(a, b)?;
        let (m, k, n) = (self.m, self.k, self.n);
        if out.len() != self.out_len() {
            return Err(Error::Eval("the output does not hold its shape".into()));
        }
        if out.is_empty() {
            return Ok(());
        }
        if self.folds_into_rows() {
            let rows = self.pairs.len() * m;
            let bi = self.pairs[0].1;
            let a_all = Mat::row_major(&a[..rows * k], rows, k)?;
            let b_mat = Mat::row_major(&b[bi * k * n..(bi + 1) * k * n], k, n)?;
            return gemm(T::ONE, a_all, b_mat, T::ZERO, out, n);
        }
        let one = |(c, &(ai, bi)): (&mut [T], &(usize, usize))| -> Result<()> {
            let am = Mat::row_major(&a[ai * m * k..(ai + 1) * m * k], m, k)?;
            let bm = Mat::row_major(&b[bi * k * n..(bi + 1) * k * n], k, n)?;
            gemm(T::ONE, am, bm, T::ZERO, c, n)
        };
        if self.out_len().saturating_mul(k) >= PARALLEL_FLOPS {
            out.par_chunks_mut(m * n)
                .zip(&self.pairs)
                .with_min_len(crate::par::min_len(self.pairs.len(), &[m, n, k]))
                .try_for_each(one)
        } else {
            out.chunks_mut(m * n).zip(&self.pairs).try_for_each(one)
        }
    }

    /// `A @ B` in a floating-point type.
    pub fn run_real<T: Real>(&self, a: &[T], b: &[T]) -> Result<Vec<T>> {
        let mut out = try_vec(self.out_len(), T::ZERO)?;
        self.run_real_into(a, b, &mut out)?;
        Ok(out)
    }

    /// `A @ B` in an integer type, wrapping.
    pub fn run_ring<T: Arith>(&self, a: &[T], b: &[T]) -> Result<Vec<T>> {
        self.check_lens(a, b)?;
        let (m, k, n) = (self.m, self.k, self.n);
        let mut out = try_vec(self.out_len(), T::default())?;
        if out.is_empty() {
            return Ok(out);
        }
        for (c, &(ai, bi)) in out.chunks_mut(m * n).zip(&self.pairs) {
            let am = &a[ai * m * k..(ai + 1) * m * k];
            let bm = &b[bi * k * n..(bi + 1) * k * n];
            for (c_row, a_row) in c.chunks_mut(n).zip(am.chunks(k.max(1))) {
                for (p, &x) in a_row.iter().enumerate().take(k) {
                    for (acc, &y) in c_row.iter_mut().zip(&bm[p * n..(p + 1) * n]) {
                        *acc = acc.add(x.mul(y));
                    }
                }
            }
        }
        Ok(out)
    }
}

pub(super) fn eval_matmul(_: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    if a.dtype() != b.dtype() {
        return Err(Error::Eval(format!(
            "operands are {} and {}; they must have one type",
            a.dtype(),
            b.dtype()
        )));
    }
    let plan = Plan::new(a.shape(), b.shape())?;
    let dtype = a.dtype();
    let out = dispatch_real!(dtype, R => {
        let (av, bv) = (R::load(a)?, R::load(b)?);
        output::<R>(dtype, &plan.out_shape, |y| plan.run_real_into(&av, &bv, y))?
    }, _ => {
        if !is_int(dtype) {
            return Err(unsupported_type("MatMul", dtype));
        }
        let values = plan.run_ring::<i64>(&to_i64s(a)?, &to_i64s(b)?)?;
        store_ints(dtype, &plan.out_shape, &values)?
    });
    Ok(vec![out])
}

/// The exact sums of an 8-bit matrix product: `i32` from the integer kernel when the contracted
/// dim keeps them exact there ([`EXACT_K`]), else `f64` from the reference product.
#[derive(Debug)]
pub(in crate::ops) enum Sums {
    /// From the integer kernel.
    I32(Vec<i32>),
    /// From the `f64` product (a contracted dim beyond [`EXACT_K`]).
    F64(Vec<f64>),
}

impl Sums {
    /// `f(i, sum)` for every sum, in order, collected (allocated through the arena).
    pub fn map<T: Clone>(&self, fill: T, f: impl Fn(usize, f64) -> T) -> Result<Vec<T>> {
        let len = match self {
            Sums::I32(v) => v.len(),
            Sums::F64(v) => v.len(),
        };
        let mut out = try_vec(len, fill)?;
        match self {
            Sums::I32(v) => {
                for (i, (o, &s)) in out.iter_mut().zip(v).enumerate() {
                    *o = f(i, f64::from(s));
                }
            }
            Sums::F64(v) => {
                for (i, (o, &s)) in out.iter_mut().zip(v).enumerate() {
                    *o = f(i, s);
                }
            }
        }
        Ok(out)
    }
}

/// The values of an 8-bit operand's zero point as `i32`: one (0 when omitted) or `len`.
fn zeros_i32(t: Option<&Tensor>, len: usize, what: &str) -> Result<Vec<i32>> {
    let z = zero_points(t)?;
    zero_at(&z, len, what).map(|_| ())?;
    if z.is_empty() {
        return Ok(vec![0]);
    }
    // 8-bit values (the dtype was checked), so the conversion is exact.
    Ok(z.into_iter().map(|v| v as i32).collect())
}

/// The product of two 8-bit operands minus their zero points, exactly: `a_zero` is per tensor or
/// per row of A, `b_zero` per tensor or per column of B.
pub(in crate::ops) fn integer_product(
    a: &Tensor,
    a_zero: Option<&Tensor>,
    b: &Tensor,
    b_zero: Option<&Tensor>,
) -> Result<(Plan, Sums)> {
    for t in [Some(a), Some(b), a_zero, b_zero].into_iter().flatten() {
        if !matches!(t.dtype(), DataType::Int8 | DataType::Uint8) {
            return Err(unsupported_type("a quantized matrix product", t.dtype()));
        }
    }
    let plan = Plan::new(a.shape(), b.shape())?;
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let za = zeros_i32(a_zero, m, "the zero point of A")?;
    let zb = zeros_i32(b_zero, n, "the zero point of B")?;
    if k > EXACT_K {
        return Ok((plan, Sums::F64(reference_product(a, &za, b, &zb)?)));
    }
    let sums = integer_product_with(a, &za, b, &zb, &plan, Level::detect(), None)?;
    Ok((plan, Sums::I32(sums)))
}

/// [`integer_product`] for a kernel whose B (its input `b_input`) may be a constant of the
/// plan: B's packing is then made on the first run and kept ([`EvalCtx::remember`]).
pub(in crate::ops) fn integer_product_kept(
    ctx: &EvalCtx<'_>,
    (a, a_zero): (&Tensor, Option<&Tensor>),
    (b, b_zero, b_input): (&Tensor, Option<&Tensor>, usize),
) -> Result<(Plan, Sums)> {
    let plan = Plan::new(a.shape(), b.shape())?;
    let eight_bit = |t: &Tensor| matches!(t.dtype(), DataType::Int8 | DataType::Uint8);
    let zeros_ok = [a_zero, b_zero].into_iter().flatten().all(eight_bit);
    let packable = b.shape().len() == 2 && plan.k <= EXACT_K && plan.folds_into_rows();
    if !packable || !eight_bit(a) || !eight_bit(b) || !zeros_ok {
        return integer_product(a, a_zero, b, b_zero);
    }
    let level = Level::detect();
    let packed = ctx.remember(&[b_input], || {
        let data = Bytes {
            data: b.as_bytes()?,
            signed: b.dtype() == DataType::Int8,
        };
        PackedB::new(data, plan.k, plan.n, level)
    })?;
    let Some(packed) = packed else {
        return integer_product(a, a_zero, b, b_zero);
    };
    let za = zeros_i32(a_zero, plan.m, "the zero point of A")?;
    let zb = zeros_i32(b_zero, plan.n, "the zero point of B")?;
    let sums = integer_product_with(a, &za, b, &zb, &plan, level, Some(packed))?;
    Ok((plan, Sums::I32(sums)))
}

/// The product of [`integer_product`] in `i32` on the kernel of `level`; `za`, `zb` hold one
/// value or one per row / column.
fn integer_product_with(
    a: &Tensor,
    za: &[i32],
    b: &Tensor,
    zb: &[i32],
    plan: &Plan,
    level: Level,
    packed_b: Option<&PackedB>,
) -> Result<Vec<i32>> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let (av, bv) = (a.as_bytes()?, b.as_bytes()?);
    plan.check_lens(av, bv)?;
    let mut out = try_vec(plan.out_len(), 0i32)?;
    if out.is_empty() {
        return Ok(out);
    }
    let (sa, sb) = (a.dtype() == DataType::Int8, b.dtype() == DataType::Int8);
    let b_mat = |bi: usize| Bytes {
        data: &bv[bi * k * n..(bi + 1) * k * n],
        signed: sb,
    };
    if plan.folds_into_rows() {
        // One product of all the batch's rows, their zero points repeated per matrix.
        let rows = plan.pairs.len() * m;
        let made;
        let packed = match packed_b {
            Some(p) => p,
            None => {
                made = PackedB::new(b_mat(plan.pairs[0].1), k, n, level)?;
                &made
            }
        };
        let za_rows: Vec<i32> = if za.len() == 1 {
            za.to_vec()
        } else {
            let mut v = try_vec(rows, 0i32)?;
            for (r, z) in v.iter_mut().enumerate() {
                *z = za[r % m];
            }
            v
        };
        let a_all = Bytes {
            data: &av[..rows * k],
            signed: sa,
        };
        igemm::gemm(a_all, rows, &za_rows, packed, zb, &mut out)?;
        return Ok(out);
    }
    let mut packed: Option<(usize, PackedB)> = None;
    for (c, &(ai, bi)) in out.chunks_mut(m * n).zip(&plan.pairs) {
        if packed.as_ref().is_none_or(|(p, _)| *p != bi) {
            packed = Some((bi, PackedB::new(b_mat(bi), k, n, level)?));
        }
        let Some((_, pb)) = packed.as_ref() else {
            continue;
        };
        let a_mat = Bytes {
            data: &av[ai * m * k..(ai + 1) * m * k],
            signed: sa,
        };
        igemm::gemm(a_mat, m, za, pb, zb, c)?;
    }
    Ok(out)
}

/// The product of [`integer_product`] with both operands widened to `f64`: exact for any
/// contracted dim, the reference the integer kernel is tested against.
fn reference_product(a: &Tensor, za: &[i32], b: &Tensor, zb: &[i32]) -> Result<Vec<f64>> {
    let plan = Plan::new(a.shape(), b.shape())?;
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let at = |z: &[i32], i: usize| i64::from(z[if z.len() == 1 { 0 } else { i }]);
    let av = shifted_f64s(a, |i| at(za, (i / k.max(1)) % m.max(1)))?;
    let bv = shifted_f64s(b, |i| at(zb, i % n.max(1)))?;
    plan.run_real::<f64>(&av, &bv)
}

pub(super) fn eval_matmul_integer(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    let (plan, sums) =
        integer_product_kept(ctx, (a, optional(inputs, 2)), (b, optional(inputs, 3), 1))?;
    let ints = match sums {
        Sums::I32(v) => v,
        Sums::F64(v) => v.into_iter().map(|v| v as i32).collect(),
    };
    Ok(vec![Tensor::from_vec(
        DataType::Int32,
        &plan.out_shape,
        ints,
    )?])
}

/// Quantizes exact integer accumulators: `round_half_even(acc * scale(i)) + zero`, saturated to
/// the 8-bit (or 16-bit) `dtype`.
pub(super) fn requantize(
    acc: &Sums,
    scale: impl Fn(usize) -> f64,
    zero: i64,
    dtype: DataType,
    shape: &[usize],
) -> Result<Tensor> {
    requantize_offset(acc, |_| 0.0, scale, zero, dtype, shape)
}

/// [`requantize`] of `acc(i) + offset(i)`: `offset` is an exact integer (a bias), so the sum is
/// exact in `f64`.
pub(super) fn requantize_offset(
    acc: &Sums,
    offset: impl Fn(usize) -> f64,
    scale: impl Fn(usize) -> f64,
    zero: i64,
    dtype: DataType,
    shape: &[usize],
) -> Result<Tensor> {
    let (lo, hi) = match dtype {
        DataType::Uint8 => (0.0, 255.0),
        DataType::Int8 => (-128.0, 127.0),
        DataType::Uint16 => (0.0, 65535.0),
        DataType::Int16 => (-32768.0, 32767.0),
        other => return Err(unsupported_type("a quantized output", other)),
    };
    let q = acc.map(0i64, |i, v| {
        (((v + offset(i)) * scale(i)).round_ties_even() + zero as f64).clamp(lo, hi) as i64
    })?;
    store_ints(dtype, shape, &q)
}

/// A scale input's values, per tensor (one) or per index along one axis (`len`).
pub(super) fn scales(t: &Tensor, len: usize, what: &str) -> Result<Vec<f32>> {
    let v = to_f32s(t)?;
    if v.len() == 1 || v.len() == len {
        Ok(v)
    } else {
        Err(Error::Eval(format!(
            "{what} has {} values; expected 1 or {len}",
            v.len()
        )))
    }
}

/// The single value of a scale or zero-point input that must be per tensor.
pub(super) fn single<T: Copy>(values: &[T], what: &str) -> Result<T> {
    match values {
        [v] => Ok(*v),
        _ => Err(Error::Eval(format!(
            "{what} must hold one value, found {}",
            values.len()
        ))),
    }
}

pub(super) fn eval_qlinear_matmul(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, a_scale) = (required(inputs, 0)?, required(inputs, 1)?);
    let (b, b_scale) = (required(inputs, 3)?, required(inputs, 4)?);
    let (y_scale, y_zero) = (required(inputs, 6)?, required(inputs, 7)?);
    let (plan, acc) =
        integer_product_kept(ctx, (a, optional(inputs, 2)), (b, optional(inputs, 5), 3))?;
    let n = plan.n;
    let sa = single(&scales(a_scale, 1, "a_scale")?, "a_scale")?;
    let sb = scales(b_scale, n, "b_scale")?;
    let sy = single(&to_f32s(y_scale)?, "y_scale")?;
    let zy = single(&to_i64s(y_zero)?, "y_zero_point")?;
    // The multiplier follows the precision of the scales, one rounding per operation.
    let st = a_scale.dtype();
    let mult: Vec<f64> = sb
        .iter()
        .map(|&b| round_to(st, round_to(st, sa * b) / sy) as f64)
        .collect();
    if let (Sums::I32(sums), DataType::Uint8 | DataType::Int8) = (&acc, y_zero.dtype()) {
        // The arithmetic of `requantize`, a row of `n` columns at a time.
        let dtype = y_zero.dtype();
        let (lo, hi) = code_range(dtype);
        let zy = zy as f64;
        let y = Tensor::uninit(dtype, &plan.out_shape)?.fill::<u8>(|dst| {
            for (out, row) in dst.chunks_mut(n.max(1)).zip(sums.chunks(n.max(1))) {
                for (j, (o, &v)) in out.iter_mut().zip(row).enumerate() {
                    let m = mult[if mult.len() == 1 { 0 } else { j }];
                    let q = (round_half_even(f64::from(v) * m) + zy).clamp(lo, hi);
                    // Two's complement: an int8 code is stored as its byte.
                    o.write(q as i64 as u8);
                }
            }
            // SAFETY: `sums` holds one sum per output element, so every byte was written.
            unsafe { assume_written(dst) }
        })?;
        return Ok(vec![y]);
    }
    let scale = |i: usize| mult[if mult.len() == 1 { 0 } else { i % n }];
    Ok(vec![requantize(
        &acc,
        scale,
        zy,
        y_zero.dtype(),
        &plan.out_shape,
    )?])
}

/// The output dims of `A @ B` from what is known of the operands.
pub(super) fn matmul_dims(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let a_batch = &a[..a.len().saturating_sub(2)];
    let b_batch = &b[..b.len().saturating_sub(2)];
    let rank = a_batch.len().max(b_batch.len());
    let one = Dim::Known(1);
    let at = |s: &[Dim], j: usize| -> Dim {
        let off = rank - s.len();
        if j < off {
            one.clone()
        } else {
            s[j - off].clone()
        }
    };
    let mut dims: Vec<Dim> = (0..rank)
        .map(|j| broadcast_dim(&at(a_batch, j), &at(b_batch, j)))
        .collect();
    if a.len() > 1 {
        dims.push(a[a.len() - 2].clone());
    }
    if b.len() > 1 {
        dims.push(b[b.len() - 1].clone());
    }
    Some(dims)
}

fn infer_product(ctx: &InferCtx<'_>, elem: Option<DataType>) -> Result<Vec<TensorType>> {
    let dims = match (input_dims(ctx, 0), input_dims(ctx, 1)) {
        (Some(a), Some(b)) => matmul_dims(a, b),
        _ => None,
    };
    Ok(vec![tensor_type(elem, dims)])
}

pub(super) fn infer_matmul(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_product(ctx, ctx.input(0).and_then(|t| t.elem))
}

pub(super) fn infer_matmul_integer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_product(ctx, Some(DataType::Int32))
}

pub(super) fn infer_qlinear_matmul(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = match (input_dims(ctx, 0), input_dims(ctx, 3)) {
        (Some(a), Some(b)) => matmul_dims(a, b),
        _ => None,
    };
    Ok(vec![tensor_type(ctx.input(7).and_then(|t| t.elem), dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;

    use super::*;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn run(op: &str, opset: i64, inputs: &[Option<&Tensor>]) -> crate::Result<Vec<Tensor>> {
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("i{i}")).collect();
        eval_node(&Node::new(op, "n", names, ["y"]), opset, inputs)
    }

    #[test]
    fn matrices_vectors_and_broadcast_batches() {
        let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = f32s(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        let y = run("MatMul", 13, &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[58.0, 64.0, 139.0, 154.0]));
        // 1-D operands drop their dim: [3] @ [3, 2] -> [2]; [2, 3] @ [3] -> [2].
        let v = f32s(&[3], &[1.0, 0.0, -1.0]);
        let y = run("MatMul", 13, &[Some(&v), Some(&b)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[-4.0, -4.0]));
        let y = run("MatMul", 13, &[Some(&a), Some(&v)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[-2.0, -2.0]));
        // A batch of two B matrices against one A: [2, 3] @ [2, 3, 2].
        let bb = f32s(
            &[2, 3, 2],
            &[
                7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0,
            ],
        );
        let y = run("MatMul", 13, &[Some(&a), Some(&bb)]).unwrap();
        assert_eq!(
            y[0],
            f32s(&[2, 2, 2], &[58.0, 64.0, 139.0, 154.0, 1.0, 2.0, 4.0, 5.0])
        );
    }

    #[test]
    fn integers_wrap_and_half_types_round_once() {
        let a = Tensor::from_vec(DataType::Int32, &[1, 2], vec![i32::MAX, 1]).unwrap();
        let b = Tensor::from_vec(DataType::Int32, &[2, 1], vec![2, 3]).unwrap();
        let y = run("MatMul", 13, &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(
            y[0].as_slice::<i32>().unwrap(),
            &[i32::MAX.wrapping_mul(2).wrapping_add(3)]
        );
        let h = |v: &[f32]| {
            let v: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
            Tensor::from_vec(DataType::Float16, &[1, v.len()], v).unwrap()
        };
        let y = run(
            "MatMul",
            13,
            &[
                Some(&h(&[0.5, 2.0])),
                Some(&h(&[3.0, 4.0]).into_shape(&[2, 1]).unwrap()),
            ],
        )
        .unwrap();
        assert_eq!(y[0], h(&[9.5]));
    }

    #[test]
    fn mismatched_operands_are_errors() {
        let a = f32s(&[2, 3], &[0.0; 6]);
        let err = run("MatMul", 13, &[Some(&a), Some(&a)]).unwrap_err();
        assert!(err.to_string().contains("contracted dim"), "{err}");
        let s = f32s(&[], &[1.0]);
        let err = run("MatMul", 13, &[Some(&s), Some(&a)]).unwrap_err();
        assert!(err.to_string().contains("rank 1 or more"), "{err}");
    }

    #[test]
    fn integer_products_subtract_zero_points() {
        // The ONNX MatMulInteger example.
        let a = Tensor::from_vec(
            DataType::Uint8,
            &[4, 3],
            vec![11u8, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0],
        )
        .unwrap();
        let b = Tensor::from_vec(DataType::Uint8, &[3, 2], vec![1u8, 4, 2, 5, 3, 6]).unwrap();
        let za = Tensor::from_vec(DataType::Uint8, &[], vec![12u8]).unwrap();
        let zb = Tensor::from_vec(DataType::Uint8, &[], vec![0u8]).unwrap();
        let y = run(
            "MatMulInteger",
            10,
            &[Some(&a), Some(&b), Some(&za), Some(&zb)],
        )
        .unwrap();
        assert_eq!(
            y[0].as_slice::<i32>().unwrap(),
            &[-38, -83, -44, -98, -50, -113, -56, -128]
        );
    }

    /// An 8-bit tensor of `shape` from a seed.
    fn bytes(dtype: DataType, shape: &[usize], seed: u64) -> Tensor {
        let mut s = seed | 1;
        let len = shape.iter().product();
        let v: Vec<u8> = (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        Tensor::from_bytes(dtype, shape, &v).unwrap()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 48,
            failure_persistence: None,
            ..Default::default()
        })]
        /// Every level of the integer kernel gives the `f64` reference's values, on every sign
        /// combination, zero points per tensor, per row and per column, and batches that fold
        /// into rows or broadcast.
        #[test]
        fn integer_kernel_matches_the_f64_product(
            m in 1usize..12, k in 0usize..40, n in 1usize..40,
            sa: bool, sb: bool, per_row: bool, per_col: bool, batch in 0usize..4, seed: u64,
        ) {
            let dt = |s: bool| if s { DataType::Int8 } else { DataType::Uint8 };
            let (a_shape, b_shape) = match batch {
                0 => (vec![m, k], vec![k, n]),
                1 => (vec![2, m, k], vec![k, n]),
                2 => (vec![2, m, k], vec![2, k, n]),
                _ => (vec![m, k], vec![3, k, n]),
            };
            let a = bytes(dt(sa), &a_shape, seed);
            let b = bytes(dt(sb), &b_shape, seed.wrapping_mul(7));
            let za = bytes(dt(sa), &[if per_row { m } else { 1 }], seed ^ 5);
            let zb = bytes(dt(sb), &[if per_col { n } else { 1 }], seed ^ 9);
            let plan = Plan::new(a.shape(), b.shape()).unwrap();
            let za = zeros_i32(Some(&za), m, "za").unwrap();
            let zb = zeros_i32(Some(&zb), n, "zb").unwrap();
            let want = reference_product(&a, &za, &b, &zb).unwrap();
            for level in Level::supported() {
                let got = integer_product_with(&a, &za, &b, &zb, &plan, level, None).unwrap();
                let got: Vec<f64> = got.into_iter().map(f64::from).collect();
                proptest::prop_assert_eq!(&got, &want, "{:?}", level);
            }
        }
    }

    #[test]
    fn worst_case_products_match_the_f64_product_at_every_level() {
        // 255 x -128 (and the other extremes) in every position, zero points at their ends.
        let (m, k, n) = (5, 700, 19);
        for (ta, tb) in [
            (0x00u8, 0x80u8),
            (0xff, 0x80),
            (0xff, 0x7f),
            (0x80, 0x80),
            (0x7f, 0xff),
        ] {
            for (sa, sb) in [(false, true), (false, false), (true, true), (true, false)] {
                let dt = |s: bool| if s { DataType::Int8 } else { DataType::Uint8 };
                let t = |s: bool, shape: &[usize], v: u8| {
                    let len: usize = shape.iter().product();
                    Tensor::from_bytes(dt(s), shape, &vec![v; len]).unwrap()
                };
                let (a, b) = (t(sa, &[m, k], ta), t(sb, &[k, n], tb));
                for (za, zb) in [(0u8, 0u8), (0xff, 0x80), (0x80, 0xff), (0x7f, 0x00)] {
                    let za = zeros_i32(Some(&t(sa, &[], za)), m, "za").unwrap();
                    let zb = zeros_i32(Some(&t(sb, &[], zb)), n, "zb").unwrap();
                    let plan = Plan::new(a.shape(), b.shape()).unwrap();
                    let want = reference_product(&a, &za, &b, &zb).unwrap();
                    for level in Level::supported() {
                        let got =
                            integer_product_with(&a, &za, &b, &zb, &plan, level, None).unwrap();
                        let got: Vec<f64> = got.into_iter().map(f64::from).collect();
                        assert_eq!(got, want, "{level:?} {ta} {tb} {sa} {sb}");
                    }
                }
            }
        }
    }

    #[test]
    fn quantized_products_requantize() {
        // The ONNX QLinearMatMul example (uint8, float scales).
        let u8s = |s: &[usize], v: &[u8]| Tensor::from_vec(DataType::Uint8, s, v.to_vec()).unwrap();
        let a = u8s(&[2, 4], &[208, 236, 0, 238, 3, 214, 255, 29]);
        let b = u8s(
            &[4, 3],
            &[152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247],
        );
        let (sa, za) = (f32s(&[], &[0.0066]), u8s(&[], &[113]));
        let (sb, zb) = (f32s(&[], &[0.00705]), u8s(&[], &[114]));
        let (sy, zy) = (f32s(&[], &[0.0107]), u8s(&[], &[118]));
        let y = run(
            "QLinearMatMul",
            21,
            &[
                Some(&a),
                Some(&sa),
                Some(&za),
                Some(&b),
                Some(&sb),
                Some(&zb),
                Some(&sy),
                Some(&zy),
            ],
        )
        .unwrap();
        assert_eq!(y[0], u8s(&[2, 3], &[168, 115, 255, 1, 66, 151]));
    }

    /// QLinearMatMul's row-wise requantisation of the kernel's sums gives the bytes of
    /// `requantize` on the `f64` reference product, with per-column scales and both output
    /// types.
    #[test]
    fn qlinear_matmul_rows_requantize_as_the_reference() {
        let (m, k, n) = (7, 29, 11);
        for (dt, zy) in [(DataType::Uint8, 0x70u8), (DataType::Int8, 0xf6)] {
            let a = bytes(dt, &[2, m, k], 3);
            let b = bytes(DataType::Int8, &[k, n], 4);
            let za = Tensor::from_bytes(dt, &[], &[0x85]).unwrap();
            let zb = Tensor::from_bytes(DataType::Int8, &[], &[2]).unwrap();
            let zyt = Tensor::from_bytes(dt, &[], &[zy]).unwrap();
            let sa = f32s(&[], &[0.02]);
            let sbv: Vec<f32> = (0..n).map(|j| 0.001 * (j + 1) as f32).collect();
            let sb = f32s(&[n], &sbv);
            let sy = f32s(&[], &[0.05]);
            let inputs = [&a, &sa, &za, &b, &sb, &zb, &sy, &zyt].map(Some);
            let got = run("QLinearMatMul", 21, &inputs).unwrap().remove(0);
            let za = zeros_i32(Some(&za), m, "za").unwrap();
            let zb = zeros_i32(Some(&zb), n, "zb").unwrap();
            let sums = reference_product(&a, &za, &b, &zb).unwrap();
            let mult: Vec<f64> = sbv
                .iter()
                .map(|&s| {
                    round_to(DataType::Float, round_to(DataType::Float, 0.02 * s) / 0.05) as f64
                })
                .collect();
            let zy = if dt == DataType::Int8 {
                i64::from(zy as i8)
            } else {
                i64::from(zy)
            };
            let want = requantize(&Sums::F64(sums), |i| mult[i % n], zy, dt, &[2, m, n]).unwrap();
            assert_eq!(got.as_bytes().unwrap(), want.as_bytes().unwrap(), "{dt:?}");
        }
    }
}
