//! `MatMulInteger` (opset 10) and `QLinearMatMul` (10, 21): 8-bit matrix products, and the exact
//! integer sums the quantized convolutions and the `com.microsoft` products share.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__MatMulInteger.html>,
//! <https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html>.
//!
//! The operands minus their zero points multiply on the integer kernel ([`super::igemm`]) while the
//! contracted dim keeps `i32` sums exact, else in `f64`, which is exact for 8-bit operands; the
//! sums are requantized with round-half-to-even and saturation. The shapes line up as `MatMul`'s
//! ([`Plan`]).
//!
//! Why one file: the `int32` sums, their requantisation and their scaled `float` form (the
//! fused dynamic product) share one packing of B kept per plan (`with_packing`), one folding
//! of the batch into rows and one test oracle.

use std::mem::MaybeUninit;

use multiversion::multiversion;
use rayon::prelude::*;

use crate::par;

use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::tensor::try_vec;
use crate::tensor::Tensor;
use crate::DataType;

use super::super::math::zip_f32;
use super::super::util::{optional, required, to_i64s, unsupported_type};
use super::super::vector::assume_written;
use super::super::{EvalCtx, InferCtx};
use super::igemm::{self, Bytes, Level, PackedB, EXACT_K};
use super::matmul::{infer_product, matmul_dims, Plan};
use super::values::{
    code_range, input_dims, round_to, shifted_f64s, store_ints, tensor_type, to_f32s, zero_at,
    zero_points,
};

/// The exact sums of an 8-bit matrix product: `i32` from the integer kernel when the contracted
/// dim keeps them exact there ([`EXACT_K`]), else `f64` from the reference product.
#[derive(Debug)]
pub(in crate::ops) enum Sums {
    /// From the integer kernel: an `int32` tensor of the product's shape.
    I32(Tensor),
    /// From the `f64` product (a contracted dim beyond [`EXACT_K`]).
    F64(Vec<f64>),
}

impl Sums {
    /// The sums as an `int32` tensor of `shape` (the `f64` sums, exact integers, converted).
    pub fn into_int32(self, shape: &[usize]) -> Result<Tensor> {
        match self {
            Sums::I32(t) => Ok(t),
            Sums::F64(v) => {
                let ints: Vec<i32> = v.into_iter().map(|v| v as i32).collect();
                Ok(Tensor::from_vec(DataType::Int32, shape, ints)?)
            }
        }
    }

    /// `f(i, sum)` for every sum, in order, collected (allocated through the arena).
    pub fn map<T: Clone>(&self, fill: T, f: impl Fn(usize, f64) -> T) -> Result<Vec<T>> {
        let len = match self {
            Sums::I32(v) => v.len(),
            Sums::F64(v) => v.len(),
        };
        let mut out = try_vec(len, fill)?;
        match self {
            Sums::I32(v) => {
                for (i, (o, &s)) in out.iter_mut().zip(v.as_slice::<i32>()?).enumerate() {
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
    a: (&Tensor, Option<&Tensor>),
    b: (&Tensor, Option<&Tensor>, usize),
) -> Result<(Plan, Sums)> {
    product_kept(ctx, a, b, false)
}

/// [`integer_product_kept`] of `A @ B` for a 2-D B given transposed (`N x K`, as `Gemm`'s
/// `transB` holds it), packed straight from its rows.
pub(in crate::ops) fn integer_product_kept_transposed(
    ctx: &EvalCtx<'_>,
    a: (&Tensor, Option<&Tensor>),
    b: (&Tensor, Option<&Tensor>, usize),
) -> Result<(Plan, Sums)> {
    product_kept(ctx, a, b, true)
}

fn product_kept(
    ctx: &EvalCtx<'_>,
    (a, a_zero): (&Tensor, Option<&Tensor>),
    (b, b_zero, b_input): (&Tensor, Option<&Tensor>, usize),
    transposed: bool,
) -> Result<(Plan, Sums)> {
    let b_shape = b_shape(b, transposed)?;
    let plan = Plan::new(a.shape(), &b_shape)?;
    if !packable(&plan, &b_shape, [Some(a), Some(b), a_zero, b_zero]) {
        if transposed {
            return integer_product(a, a_zero, &transposed_matrix(b)?, b_zero);
        }
        return integer_product(a, a_zero, b, b_zero);
    }
    let level = Level::detect();
    let za = zeros_i32(a_zero, plan.m, "the zero point of A")?;
    let zb = zeros_i32(b_zero, plan.n, "the zero point of B")?;
    // B's bytes are read only through its packing.
    let sums = with_packing(ctx, (b, b_input, transposed), &plan, level, |packed| {
        integer_product_with(a, &za, b, &zb, &plan, level, Some(packed))
    })?;
    Ok((plan, Sums::I32(sums)))
}

/// The shape of B as the product sees it: a transposed B (`N x K`) must be a matrix.
fn b_shape(b: &Tensor, transposed: bool) -> Result<Vec<usize>> {
    match (transposed, b.shape()) {
        (true, &[n, k]) => Ok(vec![k, n]),
        (true, other) => Err(Error::Eval(format!(
            "a transposed B must be a matrix, not of shape {other:?}"
        ))),
        (false, shape) => Ok(shape.to_vec()),
    }
}

/// Whether a product of `plan` runs on a B packed once: B a matrix, the batch folding into
/// A's rows, sums exact in `i32`, and every operand and zero point of 8 bits.
fn packable(plan: &Plan, b_shape: &[usize], operands: [Option<&Tensor>; 4]) -> bool {
    let eight_bit = |t: &Tensor| matches!(t.dtype(), DataType::Int8 | DataType::Uint8);
    b_shape.len() == 2
        && plan.k <= EXACT_K
        && plan.folds_into_rows()
        && operands[..2].iter().all(|t| t.is_some_and(eight_bit))
        && operands.into_iter().flatten().all(eight_bit)
}

/// `f` of B's packing for `level`, made on the first run and kept when B (input `b_input`) is
/// a constant of the plan ([`EvalCtx::remember`]; split into pairs within the bound when that
/// pays, [`PackedB::split_pairs`]), else made for this run.
fn with_packing<R>(
    ctx: &EvalCtx<'_>,
    (b, b_input, transposed): (&Tensor, usize, bool),
    plan: &Plan,
    level: Level,
    f: impl FnOnce(&PackedB) -> Result<R>,
) -> Result<R> {
    let pack = || {
        let data = Bytes {
            data: b.as_bytes()?,
            signed: b.dtype() == DataType::Int8,
        };
        if transposed {
            PackedB::from_transposed(data, plan.k, plan.n, level)
        } else {
            PackedB::new(data, plan.k, plan.n, level)
        }
    };
    match ctx.remember(&[b_input], || pack()?.split_pairs())? {
        Some(kept) => f(kept),
        None => f(&pack()?),
    }
}

/// The zero points of the rows of all `batches` products folded into one: `za` once, or its
/// `m` values repeated per product.
fn folded_zeros(za: &[i32], m: usize, batches: usize) -> Result<Vec<i32>> {
    if za.len() == 1 {
        return Ok(za.to_vec());
    }
    let mut v = try_vec(batches * m, 0i32)?;
    for (r, z) in v.iter_mut().enumerate() {
        *z = za[r % m];
    }
    Ok(v)
}

/// A 2-D tensor of single bytes, transposed.
pub(in crate::ops) fn transposed_matrix(t: &Tensor) -> Result<Tensor> {
    let &[rows, cols] = t.shape() else {
        return Err(Error::Eval(format!(
            "only a matrix is transposed here, not shape {:?}",
            t.shape()
        )));
    };
    let bytes = t.as_bytes()?;
    if bytes.len() != rows * cols {
        return Err(Error::Eval("the matrix is not of single bytes".into()));
    }
    let mut out = try_vec(bytes.len(), 0u8)?;
    for (i, row) in bytes.chunks_exact(cols.max(1)).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            out[j * rows + i] = v;
        }
    }
    Ok(Tensor::from_vec(t.dtype(), &[cols, rows], out)?)
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
) -> Result<Tensor> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let (av, bv) = (a.as_bytes()?, b.as_bytes()?);
    plan.check_lens(av, bv)?;
    let out = Tensor::uninit(DataType::Int32, &plan.out_shape)?;
    if plan.out_len() == 0 {
        // SAFETY: the output has no elements.
        return Ok(out.fill::<i32>(|s| unsafe { assume_written(s) })?);
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
        let za_rows = folded_zeros(za, m, plan.pairs.len())?;
        let a_all = Bytes {
            data: &av[..rows * k],
            signed: sa,
        };
        return out.try_fill(|slots| igemm::gemm_into(a_all, rows, &za_rows, packed, zb, slots));
    }
    out.try_fill(|slots: &mut [MaybeUninit<i32>]| {
        let mut packed: Option<(usize, PackedB)> = None;
        for (c, &(ai, bi)) in slots.chunks_mut(m * n).zip(&plan.pairs) {
            let pb = match &packed {
                Some((p, pb)) if *p == bi => pb,
                _ => &packed.insert((bi, PackedB::new(b_mat(bi), k, n, level)?)).1,
            };
            let a_mat = Bytes {
                data: &av[ai * m * k..(ai + 1) * m * k],
                signed: sa,
            };
            igemm::gemm_into(a_mat, m, za, pb, zb, c)?;
        }
        // SAFETY: the pairs' products cover the output (`Plan::out_len`).
        Ok(unsafe { assume_written(slots) })
    })
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
    Ok(vec![sums.into_int32(&plan.out_shape)?])
}

/// The kernel the interpreter runs for `MatMulInteger -> Cast(float) -> Mul(scale)
/// [-> Add(bias)]`, the float output of a dynamically quantized product (`interp::fuse`):
/// inputs `a, b, a_zero, b_zero, scale, bias`. Each exact sum is converted to `float`, times
/// its scale, plus its bias, one rounding per operator as the graph has them, as it leaves
/// the integer kernel: the same bits, and no `int32` or unscaled tensor stored. A scale or
/// bias that is not one value or one per column, or a product the packed kernel does not
/// take, runs the operators in turn.
pub(super) fn eval_integer_product_scaled(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    let (a_zero, b_zero) = (optional(inputs, 2), optional(inputs, 3));
    let (scale, bias) = (required(inputs, 4)?, optional(inputs, 5));
    let plan = Plan::new(a.shape(), b.shape())?;
    let columns = |t| per_column(t, &plan.out_shape, plan.n);
    if packable(&plan, b.shape(), [Some(a), Some(b), a_zero, b_zero]) {
        let bias_columns = match bias {
            None => Some(None),
            Some(t) => columns(t).map(Some),
        };
        if let (Some(s), Some(c)) = (columns(scale), bias_columns) {
            let level = Level::detect();
            let za = zeros_i32(a_zero, plan.m, "the zero point of A")?;
            let zb = zeros_i32(b_zero, plan.n, "the zero point of B")?;
            let rows = plan.pairs.len() * plan.m;
            let a_rows = Bytes {
                data: a
                    .as_bytes()?
                    .get(..rows * plan.k)
                    .ok_or_else(|| Error::Eval("A is smaller than its shape".into()))?,
                signed: a.dtype() == DataType::Int8,
            };
            let scale = expanded(s, plan.n)?;
            let bias = c.map(|c| expanded(c, plan.n)).transpose()?;
            let out = Tensor::uninit(DataType::Float, &plan.out_shape)?;
            let y = with_packing(ctx, (b, 1, false), &plan, level, |packed_b| {
                let za = folded_zeros(&za, plan.m, plan.pairs.len())?;
                let packed_a = igemm::PackedA::new(a_rows, rows, plan.k, &za, packed_b.level())?;
                out.try_fill(|slots: &mut [MaybeUninit<f32>]| {
                    let sink = ScaledRows {
                        ptr: slots.as_mut_ptr(),
                        n: plan.n,
                        scale: &scale,
                        bias: bias.as_deref(),
                    };
                    igemm::gemm_packed_to(&packed_a, packed_b, &zb, &sink)?;
                    // SAFETY: the product stores every row segment of its sums.
                    Ok(unsafe { assume_written(slots) })
                })
            })?;
            return Ok(vec![y]);
        }
    }
    let (plan, sums) = integer_product_kept(ctx, (a, a_zero), (b, b_zero, 1))?;
    let sums = sums.into_int32(&plan.out_shape)?;
    let ints = sums.as_slice::<i32>()?;
    let floats = Tensor::uninit(DataType::Float, sums.shape())?.fill(|d| {
        for (o, &v) in d.iter_mut().zip(ints) {
            o.write(v as f32);
        }
        // SAFETY: every element was written (the tensors have one shape).
        unsafe { assume_written(d) }
    })?;
    let y = zip_f32(&floats, scale, |x, s| x * s)?;
    Ok(vec![match bias {
        Some(c) => zip_f32(&y, c, |x, c| x + c)?,
        None => y,
    }])
}

/// The values of a `float` tensor that broadcasts onto a product's output `out_shape` (of `n`
/// columns) as one value or one per column.
fn per_column<'t>(t: &'t Tensor, out_shape: &[usize], n: usize) -> Option<&'t [f32]> {
    let shape = t.shape();
    let fits = t.dtype() == DataType::Float
        && shape.len() <= out_shape.len()
        && shape.iter().rev().skip(1).all(|&d| d == 1)
        && (matches!(shape.last(), None | Some(1)) || shape.last() == Some(&n));
    fits.then(|| t.as_slice::<f32>().ok()).flatten()
}

/// One value per column: `values` as they are, or their one value repeated `n` times.
fn expanded(values: &[f32], n: usize) -> Result<Vec<f32>> {
    let mut v = try_vec(n, values[0])?;
    if values.len() == n {
        v.copy_from_slice(values);
    }
    Ok(v)
}

/// The sink of [`eval_integer_product_scaled`]: rows of `n` floats, each sum converted, scaled
/// and biased by its column's values.
struct ScaledRows<'s> {
    ptr: *mut MaybeUninit<f32>,
    n: usize,
    scale: &'s [f32],
    bias: Option<&'s [f32]>,
}

// SAFETY: tasks store disjoint (row, column) segments (`Sink::store`'s contract).
unsafe impl Send for ScaledRows<'_> {}
unsafe impl Sync for ScaledRows<'_> {}

impl igemm::Sink for ScaledRows<'_> {
    unsafe fn store(&self, i: usize, col0: usize, sums: &[i32]) {
        let cols = col0..col0 + sums.len();
        // SAFETY: the segment lies in the output (the caller's promise) and is this call's alone.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(self.ptr.add(i * self.n + col0), sums.len()) };
        let scale = &self.scale[cols.clone()];
        match self.bias {
            Some(bias) => scale_bias_run(sums, scale, &bias[cols], dst),
            None => scale_run(sums, scale, dst),
        }
    }
}

/// `sum as f32 * scale` for each column.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn scale_run(sums: &[i32], scale: &[f32], out: &mut [MaybeUninit<f32>]) {
    for ((o, &v), &s) in out.iter_mut().zip(sums).zip(scale) {
        o.write(v as f32 * s);
    }
}

/// `sum as f32 * scale + bias` for each column, rounded after each operation.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn scale_bias_run(sums: &[i32], scale: &[f32], bias: &[f32], out: &mut [MaybeUninit<f32>]) {
    for (((o, &v), &s), &c) in out.iter_mut().zip(sums).zip(scale).zip(bias) {
        o.write(v as f32 * s + c);
    }
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

/// The byte of the 8-bit code `clamp(round_half_even((sum + b) * m) + zy)` (two's complement
/// for `int8`); a NaN (from a NaN scale) becomes code 0, as a saturating cast makes it.
#[inline(always)]
pub(super) fn code_byte(sum: i32, (m, b, zy): (f64, f64, f64), (lo, hi): (f64, f64)) -> u8 {
    // Clamped before it is rounded: the bounds less the zero point are integers, so the code is
    // the same, and the loops of whole runs vectorise (a rounding instruction, no branch).
    let x = (f64::from(sum) + b) * m;
    let x = if x.is_nan() {
        -zy
    } else {
        x.max(lo - zy).min(hi - zy)
    };
    let q = x.round_ties_even() + zy;
    // SAFETY: `q` is finite and within an 8-bit code's range.
    unsafe { q.to_int_unchecked::<i32>() as u8 }
}

/// Requantizes a run of sums that share one multiplier `m`, bias `b` and zero point `zy`.
pub(super) fn requantize_run(
    sums: &[i32],
    params: (f64, f64, f64),
    range: (f64, f64),
    out: &mut [MaybeUninit<u8>],
) {
    let n = sums.len().min(out.len());
    let (sums, out) = (&sums[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    let done = if params.0.is_finite() && params.1.is_finite() && super::qcodes::x86::avx512() {
        // SAFETY: the CPU has AVX-512F, BW, VL and DQ; the multiplier and the bias are finite,
        // so no sum makes a NaN.
        unsafe { x86::requantize_run_avx512(sums, params, range, out) }
    } else if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        unsafe { x86::requantize_run_avx2(sums, params, range, out) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    requantize_tail(&sums[done..], params, range, &mut out[done..]);
}

/// [`requantize_run`] one code at a time, for what the vector loop leaves.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn requantize_tail(
    sums: &[i32],
    params: (f64, f64, f64),
    range: (f64, f64),
    out: &mut [MaybeUninit<u8>],
) {
    for (o, &v) in out.iter_mut().zip(sums) {
        o.write(code_byte(v, params, range));
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    use super::super::qcodes;

    /// [`super::code_byte`] on 32 sums at a time (`qcodes::x86::requantize`, in `f64` lanes of
    /// eight). Returns how many codes it wrote, a multiple of 32.
    ///
    /// # Safety
    /// The CPU runs AVX-512F, BW, VL and DQ; `m` and `b` are finite.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    pub(super) unsafe fn requantize_run_avx512(
        sums: &[i32],
        params: (f64, f64, f64),
        range: (f64, f64),
        out: &mut [MaybeUninit<u8>],
    ) -> usize {
        let (chunks, _) = sums.as_chunks::<{ qcodes::x86::COLS }>();
        let mut n = 0;
        for (o, s) in out.chunks_exact_mut(32).zip(chunks) {
            // SAFETY: the caller's promise; each chunk holds 32 sums and 32 slots.
            unsafe {
                let codes = qcodes::x86::requantize(s, params, range);
                _mm256_storeu_si256(o.as_mut_ptr().cast(), codes);
            }
            n += 32;
        }
        n
    }

    /// [`super::code_byte`] on eight sums at a time in `f64` lanes (the same operations in the
    /// same order, so the same codes; the compiler's own loop takes four per round and a
    /// shuffle per store). Returns how many codes it wrote, a multiple of eight.
    #[target_feature(enable = "avx2")]
    pub(super) fn requantize_run_avx2(
        sums: &[i32],
        (m, b, zy): (f64, f64, f64),
        (lo, hi): (f64, f64),
        out: &mut [MaybeUninit<u8>],
    ) -> usize {
        let n = sums.len().min(out.len()) / 8 * 8;
        let (vm, vb, vz) = (_mm256_set1_pd(m), _mm256_set1_pd(b), _mm256_set1_pd(zy));
        let (vlo, vhi, nan_code) = (
            _mm256_set1_pd(lo - zy),
            _mm256_set1_pd(hi - zy),
            _mm256_set1_pd(-zy),
        );
        let code = |v: __m128i| {
            let x = _mm256_mul_pd(_mm256_add_pd(_mm256_cvtepi32_pd(v), vb), vm);
            let nan = _mm256_cmp_pd::<_CMP_UNORD_Q>(x, x);
            let x = _mm256_min_pd(_mm256_max_pd(x, vlo), vhi);
            let x = _mm256_blendv_pd(x, nan_code, nan);
            let q = _mm256_add_pd(
                _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x),
                vz,
            );
            _mm256_cvtpd_epi32(q)
        };
        let signed = lo < 0.0;
        for (o, s) in out[..n].chunks_exact_mut(8).zip(sums.chunks_exact(8)) {
            // SAFETY: each chunk holds eight sums and eight slots.
            unsafe {
                let v = _mm256_loadu_si256(s.as_ptr().cast());
                let (a, c) = (
                    code(_mm256_castsi256_si128(v)),
                    code(_mm256_extracti128_si256::<1>(v)),
                );
                // The codes lie in an 8-bit range, so the packs keep them and a code's byte is
                // its two's complement.
                let words = _mm_packs_epi32(a, c);
                let bytes = if signed {
                    _mm_packs_epi16(words, words)
                } else {
                    _mm_packus_epi16(words, words)
                };
                _mm_storel_epi64(o.as_mut_ptr().cast(), bytes);
            }
        }
        n
    }
}

/// Requantizes a row of sums with one multiplier per column (no bias).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn requantize_columns(
    sums: &[i32],
    mult: &[f64],
    zy: f64,
    range: (f64, f64),
    out: &mut [MaybeUninit<u8>],
) {
    for ((o, &v), &m) in out.iter_mut().zip(sums).zip(mult) {
        o.write(code_byte(v, (m, 0.0, zy), range));
    }
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
        let sums = sums.as_slice::<i32>()?;
        let dtype = y_zero.dtype();
        let (lo, hi) = code_range(dtype);
        let zy = zy as f64;
        let y = Tensor::uninit(dtype, &plan.out_shape)?.fill::<u8>(|dst| {
            let rows = sums.len() / n.max(1);
            dst.par_chunks_mut(n.max(1))
                .zip(sums.par_chunks(n.max(1)))
                .with_min_len(par::min_len(rows, &[n]))
                .for_each(|(out, row)| match mult[..] {
                    [m] => requantize_run(row, (m, 0.0, zy), (lo, hi), out),
                    _ => requantize_columns(row, &mult, zy, (lo, hi), out),
                });
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
                let got: Vec<f64> = got.as_slice::<i32>().unwrap().iter().map(|&v| f64::from(v)).collect();
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
                        let got: Vec<f64> = got
                            .as_slice::<i32>()
                            .unwrap()
                            .iter()
                            .map(|&v| f64::from(v))
                            .collect();
                        assert_eq!(got, want, "{level:?} {ta} {tb} {sa} {sb}");
                    }
                }
            }
        }
    }

    #[test]
    fn runs_requantize_as_one_code_at_a_time() {
        // Ties (odd sums times a half), both saturations, a NaN and an infinite multiplier,
        // signed and unsigned ranges, and lengths off the vector width.
        let sums: Vec<i32> = (-300..300).chain([i32::MIN, i32::MAX, -1, 1]).collect();
        let params = [
            (0.5, 0.0, 0.0),
            (0.5, 1.0, 128.0),
            (0.013, -7.5, 3.0),
            (-0.25, 0.0, 10.0),
            (f64::NAN, 0.0, 5.0),
            (f64::INFINITY, 0.0, 0.0),
            (1e-9, f64::NAN, 0.0),
        ];
        for p in params {
            for range in [(0.0, 255.0), (-128.0, 127.0)] {
                for len in [0, 7, 8, 9, 603, sums.len()] {
                    let mut out = vec![MaybeUninit::new(0u8); len];
                    requantize_run(&sums[..len], p, range, &mut out);
                    for (j, (o, &v)) in out.iter().zip(&sums).enumerate() {
                        // SAFETY: every slot was initialised above.
                        let got = unsafe { o.assume_init() };
                        assert_eq!(got, code_byte(v, p, range), "{p:?} {range:?} sum {j}");
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
