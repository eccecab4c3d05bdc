//! The quantised matrix products of `com.microsoft` (opset 1) that onnxruntime's quantisation
//! tools emit: `MatMulIntegerToFloat` (8-bit operands, float output), `DynamicQuantizeMatMul`
//! (a float A quantised on the fly against 8-bit weights) and `MatMulNBits` (float A against
//! 4-bit block-quantised weights).
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, sections `com.microsoft.MatMulIntegerToFloat`,
//! `com.microsoft.DynamicQuantizeMatMul` and `com.microsoft.MatMulNBits`.
//!
//! The 8-bit forms share the default domain's exact integer product (`nn::integer_product`,
//! accumulated in `f64`) and scale it by `a_scale * b_scale[column]` (per tensor or per column)
//! before adding the bias. `DynamicQuantizeMatMul` quantises A as `DynamicQuantizeLinear`
//! does (`nn::dynamic_quantize`). `MatMulNBits` dequantises its weights `(N, K)` into one
//! buffer — `code * scale - zero * scale`, codes two to a byte low nibble first in blocks of K,
//! zero points packed the same way (8 when absent) or given as floats (scaled all the same, as
//! onnxruntime does); the scale and zero point of a row of K are those of its block or, with
//! `g_idx` (act-order), of the group `g_idx[k]` — then runs one GEMM (`nn::gemm`). With `g_idx`,
//! onnxruntime's CPU kernel (1.32) reads packed uint8 zero points but dequantises with 8 in
//! their place (its CUDA kernel uses them); multigather uses them, as the operator's
//! documentation and the quantiser that wrote them mean.
//! `GatherBlockQuantized` (section `com.microsoft.GatherBlockQuantized`) gathers rows of weights
//! stored the same way and dequantises only the rows it gathers.

use rayon::prelude::*;

use crate::error::Result;
use crate::par;
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

use super::super::nn::{dynamic_quantize, gemm, integer_product_kept, Mat, Sums};
use super::super::util::{normalize_axis, optional, required, to_i64s};
use super::super::EvalCtx;
use super::activations::floats;

/// `acc * a_scale * b_scale[col] + bias[col]` for exact accumulators of `n` columns.
pub(super) fn scale_columns(
    ctx: &EvalCtx<'_>,
    acc: Sums,
    n: usize,
    a_scale: f32,
    b_scale: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Vec<f32>> {
    let bs = floats(b_scale, "b_scale")?;
    if bs.len() != 1 && bs.len() != n {
        return Err(ctx.error(format!(
            "b_scale {:?} is neither one value nor one per column ({n})",
            b_scale.shape()
        )));
    }
    let bias = bias.map(|b| floats(b, "bias")).transpose()?;
    if bias.is_some_and(|b| b.len() != n) {
        return Err(ctx.error(format!("bias does not hold {n} values")));
    }
    let mut scale = try_vec(n, 0.0f32)?;
    for (j, s) in scale.iter_mut().enumerate() {
        *s = a_scale * bs[if bs.len() == 1 { 0 } else { j }];
    }
    let mut offset = try_vec(n, 0.0f32)?;
    if let Some(b) = bias {
        offset.copy_from_slice(b);
    }
    match acc {
        // Row by row, so the loop over columns vectorises: `v as f32 * s + b`, the bits of the
        // per-element form below.
        Sums::I32(v) if n > 0 => {
            let v = v.as_slice::<i32>()?;
            let mut out = try_vec(v.len(), 0.0f32)?;
            let rows = v.len() / n;
            out.par_chunks_exact_mut(n)
                .zip(v.par_chunks_exact(n))
                .with_min_len(par::min_len(rows, &[n]))
                .for_each(|(o, sums)| {
                    for (((o, &v), &s), &b) in o.iter_mut().zip(sums).zip(&scale).zip(&offset) {
                        *o = v as f32 * s + b;
                    }
                });
            Ok(out)
        }
        acc => acc.map(0.0f32, |k, v| {
            let j = k % n.max(1);
            v as f32 * scale[j] + offset[j]
        }),
    }
}

/// One float scale.
pub(super) fn scalar_scale(ctx: &EvalCtx<'_>, t: &Tensor, what: &str) -> Result<f32> {
    match floats(t, what)? {
        [s] => Ok(*s),
        _ => Err(ctx.error(format!(
            "{what} {:?} is not one value (per tensor)",
            t.shape()
        ))),
    }
}

pub(in crate::ops) fn eval_matmul_integer_to_float(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    let a_scale = scalar_scale(ctx, required(inputs, 2)?, "a_scale")?;
    let b_scale = required(inputs, 3)?;
    let (plan, acc) =
        integer_product_kept(ctx, (a, optional(inputs, 4)), (b, optional(inputs, 5), 1))?;
    let y = scale_columns(ctx, acc, plan.n, a_scale, b_scale, optional(inputs, 6))?;
    Ok(vec![Tensor::from_vec(DataType::Float, &plan.out_shape, y)?])
}

pub(in crate::ops) fn eval_dynamic_quantize_matmul(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    let (codes, a_scale, a_zero) = dynamic_quantize(floats(a, "DynamicQuantizeMatMul")?)?;
    let qa = Tensor::from_vec(DataType::Uint8, a.shape(), codes)?;
    let za = Tensor::scalar(DataType::Uint8, a_zero)?;
    let (plan, acc) = integer_product_kept(ctx, (&qa, Some(&za)), (b, optional(inputs, 3), 1))?;
    let y = scale_columns(
        ctx,
        acc,
        plan.n,
        a_scale,
        required(inputs, 2)?,
        optional(inputs, 4),
    )?;
    Ok(vec![Tensor::from_vec(DataType::Float, &plan.out_shape, y)?])
}

/// Code `i` of 4-bit codes packed two to a byte, low nibble first.
fn nibble(bytes: &[u8], i: usize) -> u8 {
    (bytes[i / 2] >> (4 * (i % 2))) & 0xF
}

/// A positive size attribute.
fn size_attr(ctx: &EvalCtx<'_>, name: &str, default: i64) -> Result<usize> {
    let v = ctx.node.attr_int(name, default)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| ctx.error(format!("{name} must be positive, found {v}")))
}

pub(in crate::ops) fn eval_matmul_nbits(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b, scales) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let (zeros, g_idx, bias) = (
        optional(inputs, 3),
        optional(inputs, 4),
        optional(inputs, 5),
    );
    let (k, n) = (size_attr(ctx, "K", 0)?, size_attr(ctx, "N", 0)?);
    let block = size_attr(ctx, "block_size", 0)?;
    if ctx.node.attr_int("bits", 4)? != 4 || block < 16 || !block.is_power_of_two() {
        return Err(
            ctx.error("only 4-bit weights in power-of-two blocks of 16 or more are supported")
        );
    }
    let blocks = k.div_ceil(block);
    let blob = block / 2;
    if b.dtype() != DataType::Uint8 || b.len() != n * blocks * blob {
        return Err(ctx.error(format!(
            "B {:?} ({}) is not uint8 ({n}, {blocks}, {blob})",
            b.shape(),
            b.dtype()
        )));
    }
    let sv = floats(scales, "scales")?;
    if sv.len() != n * blocks {
        return Err(ctx.error(format!("scales do not hold {n} x {blocks} values")));
    }
    // The group of each row of K: its block, or `g_idx[k]` (act-order).
    let groups: Vec<usize> = match g_idx {
        None => (0..k).map(|r| r / block).collect(),
        Some(g) => {
            let g = to_i64s(g)?;
            if g.len() != k || g.iter().any(|&x| x < 0 || x as usize >= blocks) {
                return Err(ctx.error(format!(
                    "g_idx does not give each of the {k} rows of K a group below {blocks}"
                )));
            }
            g.into_iter().map(|x| x as usize).collect()
        }
    };
    // The zero point of each (column, group), times its scale.
    let mut zs = try_vec(n * blocks, 0.0f32)?;
    let zero_bytes = blocks.div_ceil(2);
    match zeros {
        None => {
            for (z, &s) in zs.iter_mut().zip(sv) {
                *z = 8.0 * s;
            }
        }
        Some(z) if z.dtype() == DataType::Uint8 && z.len() == n * zero_bytes => {
            let packed = z.as_slice::<u8>()?;
            for (i, z) in zs.iter_mut().enumerate() {
                let (col, grp) = (i / blocks, i % blocks);
                *z = f32::from(nibble(&packed[col * zero_bytes..], grp)) * sv[i];
            }
        }
        Some(z) if z.dtype() == DataType::Float && z.len() == n * blocks => {
            for ((z, &f), &s) in zs.iter_mut().zip(z.as_slice::<f32>()?).zip(sv) {
                *z = f * s;
            }
        }
        Some(z) => {
            return Err(ctx.error(format!(
                "zero_points {:?} ({}) are neither packed uint8 nor one float per block",
                z.shape(),
                z.dtype()
            )))
        }
    }
    // W (N, K) dequantised: code * scale - zero * scale, with the scale and zero point of the
    // row's group; the codes stay in their blocks of K.
    let codes = b.as_slice::<u8>()?;
    let mut w = try_vec(n * k, 0.0f32)?;
    for (col, row) in w.chunks_mut(k.max(1)).enumerate() {
        let bytes = &codes[col * blocks * blob..][..blocks * blob];
        let (scales, zeros) = (&sv[col * blocks..][..blocks], &zs[col * blocks..][..blocks]);
        for ((r, o), &grp) in row.iter_mut().enumerate().zip(&groups) {
            let code = nibble(&bytes[(r / block) * blob..], r % block);
            *o = f32::from(code) * scales[grp] - zeros[grp];
        }
    }
    let av = floats(a, "MatMulNBits")?;
    let shape = a.shape();
    if shape.last() != Some(&k) {
        return Err(ctx.error(format!("A {shape:?} does not end in K = {k}")));
    }
    let m = av.len() / k;
    let bias = bias.map(|t| floats(t, "bias")).transpose()?;
    if bias.is_some_and(|b| b.len() != n) {
        return Err(ctx.error(format!("bias does not hold {n} values")));
    }
    let mut y = try_vec(m * n, 0.0f32)?;
    if let Some(bias) = bias {
        for row in y.chunks_mut(n) {
            row.copy_from_slice(bias);
        }
    }
    let beta = if bias.is_some() { 1.0 } else { 0.0 };
    gemm(
        1.0f32,
        Mat::row_major(av, m, k)?,
        Mat::row_major(&w, n, k)?.t(),
        beta,
        &mut y,
        n,
    )?;
    let mut out_shape = shape.to_vec();
    if let Some(last) = out_shape.last_mut() {
        *last = n;
    }
    Ok(vec![Tensor::from_vec(DataType::Float, &out_shape, y)?])
}

/// `GatherBlockQuantized` on uint8 data in `MatMulNBits`'s layout (`bits` 4: two codes a byte,
/// low nibble first, zero point 8 by default; `bits` 8: one code a byte, zero point 128),
/// quantised in blocks along the last axis: gathers `indices` along `gather_axis` of the
/// logical (unpacked) data and dequantises only the gathered rows, `(code - zero) * scale`.
pub(in crate::ops) fn eval_gather_block_quantized(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (data, indices, scales) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let zeros = optional(inputs, 3);
    let bits = ctx.node.attr_int("bits", 4)?;
    let per_byte = match bits {
        4 => 2,
        8 => 1,
        _ => return Err(ctx.error(format!("bits {bits} is not 4 or 8"))),
    };
    if data.dtype() != DataType::Uint8 || zeros.is_some_and(|z| z.dtype() != DataType::Uint8) {
        return Err(ctx.error("only uint8 data and zero points are supported"));
    }
    let rank = data.rank();
    let mut shape = data.shape().to_vec();
    let Some(last) = shape.last_mut() else {
        return Err(ctx.error("data is a scalar"));
    };
    *last *= per_byte;
    let k = *last;
    let qaxis = normalize_axis(ctx.node.attr_int("quantize_axis", 1)?, rank)?;
    if qaxis + 1 != rank {
        return Err(ctx.error("only quantisation along the last axis is supported"));
    }
    let gaxis = normalize_axis(ctx.node.attr_int("gather_axis", 0)?, rank)?;
    let block = size_attr(ctx, "block_size", 128)?;
    let blocks = k.div_ceil(block);
    let rows = shape[..rank - 1].iter().product::<usize>();
    let sv = floats(scales, "scales")?;
    let zero_row = if per_byte == 2 {
        blocks.div_ceil(2)
    } else {
        blocks
    };
    if sv.len() != rows * blocks || zeros.is_some_and(|z| z.len() != rows * zero_row) {
        return Err(ctx.error(format!(
            "scales {:?} or zero_points do not hold one value per block of {block} along the last axis of {shape:?}",
            scales.shape()
        )));
    }
    let zb = zeros.map(|z| z.as_slice::<u8>()).transpose()?;
    let codes = data.as_slice::<u8>()?;
    let code = |p: usize| -> u8 {
        if per_byte == 2 {
            nibble(codes, p)
        } else {
            codes[p]
        }
    };
    let zero = |row: usize, blk: usize| -> f32 {
        match zb {
            None if per_byte == 2 => 8.0,
            None => 128.0,
            Some(z) if per_byte == 2 => f32::from(nibble(&z[row * zero_row..], blk)),
            Some(z) => f32::from(z[row * zero_row + blk]),
        }
    };
    let ids = to_i64s(indices)?;
    let dg = shape[gaxis];
    let outer: usize = shape[..gaxis].iter().product();
    let inner: usize = shape[gaxis + 1..].iter().product();
    let mut out_shape = shape[..gaxis].to_vec();
    out_shape.extend_from_slice(indices.shape());
    out_shape.extend_from_slice(&shape[gaxis + 1..]);
    let mut y = try_vec(outer * ids.len() * inner, 0.0f32)?;
    let mut slabs = y.chunks_mut(inner.max(1));
    for o in 0..outer {
        for &id in &ids {
            let i = if id < 0 { id + dg as i64 } else { id };
            let i = usize::try_from(i)
                .ok()
                .filter(|&i| i < dg)
                .ok_or_else(|| ctx.error(format!("index {id} is outside {dg}")))?;
            let Some(slab) = slabs.next() else { break };
            let base = (o * dg + i) * inner;
            for (r, v) in slab.iter_mut().enumerate() {
                let p = base + r;
                let (row, blk) = (p / k, p % k / block);
                *v = (f32::from(code(p)) - zero(row, blk)) * sv[row * blocks + blk];
            }
        }
    }
    Ok(vec![Tensor::from_vec(DataType::Float, &out_shape, y)?])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    fn node(op: &str, n: usize, attrs: &[(&str, i64)]) -> Node {
        let names: Vec<String> = (0..n).map(|i| format!("i{i}")).collect();
        let mut node = Node::new(op, "n", names, ["y"]).with_domain("com.microsoft");
        for &(k, v) in attrs {
            node = node.with_attr(k, AttrValue::Int(v));
        }
        node
    }

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    /// A (1x2) [130, 126] with zero 128 is [2, -2]; B column [1, 1] with zero 0 gives 0; the
    /// bias is added after the scales.
    #[test]
    fn matmul_integer_to_float_subtracts_zero_points_then_scales() {
        let a = Tensor::from_vec(DataType::Uint8, &[1, 2], vec![130u8, 126]).unwrap();
        let b = Tensor::from_vec(DataType::Uint8, &[2, 2], vec![1u8, 3, 1, 1]).unwrap();
        let za = Tensor::scalar(DataType::Uint8, 128u8).unwrap();
        let y = eval_node(
            &node("MatMulIntegerToFloat", 7, &[]),
            1,
            &[
                Some(&a),
                Some(&b),
                Some(&f32s(&[], vec![0.5])),
                Some(&f32s(&[2], vec![1.0, 2.0])),
                Some(&za),
                None,
                Some(&f32s(&[2], vec![10.0, 20.0])),
            ],
        )
        .unwrap();
        // Column 0: 2 - 2 = 0 -> 10; column 1: 6 - 2 = 4 -> 4 * 0.5 * 2 + 20 = 24.
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[10.0, 24.0]);
    }

    /// One column of 16 codes 0..16 with scale 0.5 and the default zero point 8.
    #[test]
    fn matmul_nbits_unpacks_low_nibble_first_around_zero_eight() {
        let bytes: Vec<u8> = (0..8u8).map(|i| (2 * i) | ((2 * i + 1) << 4)).collect();
        let b = Tensor::from_vec(DataType::Uint8, &[1, 1, 8], bytes).unwrap();
        let mut a = vec![0.0f32; 16];
        a[15] = 1.0;
        a[0] = 1.0;
        let y = eval_node(
            &node(
                "MatMulNBits",
                3,
                &[("K", 16), ("N", 1), ("bits", 4), ("block_size", 16)],
            ),
            1,
            &[
                Some(&f32s(&[1, 16], a)),
                Some(&b),
                Some(&f32s(&[1], vec![0.5])),
            ],
        )
        .unwrap();
        // (0 - 8) * 0.5 + (15 - 8) * 0.5 = -0.5.
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[-0.5]);
    }

    /// `MatMulNBits` on one column of K = 32 (two blocks of 16), every code 10, scales
    /// [1, 0.5], packed uint8 zero points [2, 4] (or the same as floats), A ones at rows 0 and 16:
    /// y = W[0] + W[16], each row dequantised with its group's scale and zero point.
    #[test]
    fn matmul_nbits_g_idx_takes_each_rows_group() {
        let zu = Tensor::from_vec(DataType::Uint8, &[1, 1], vec![2u8 | (4 << 4)]).unwrap();
        let zf = f32s(&[2], vec![2.0, 4.0]);
        let mut a = vec![0.0f32; 32];
        (a[0], a[16]) = (1.0, 1.0);
        let swapped: Vec<i32> = (0..32).map(|r| 1 - r / 16).collect();
        for (name, zeros, g_idx, want) in [
            // Blocks: (10 - 2) * 1 + (10 - 4) * 0.5.
            ("blocks, uint8 zero points", &zu, None, 11.0),
            ("blocks, float zero points", &zf, None, 11.0),
            // Row 0 in group 1, row 16 in group 0: (10 - 4) * 0.5 + (10 - 2) * 1.
            (
                "swapped groups, uint8 zero points",
                &zu,
                Some(swapped.clone()),
                11.0,
            ),
            ("rows 0 and 16 in group 1", &zu, Some(vec![1; 32]), 6.0),
            ("rows 0 and 16 in group 0", &zf, Some(vec![0; 32]), 16.0),
        ] {
            let g = g_idx.map(|g| Tensor::from_vec(DataType::Int32, &[32], g).unwrap());
            let y = eval_node(
                &node(
                    "MatMulNBits",
                    5,
                    &[("K", 32), ("N", 1), ("bits", 4), ("block_size", 16)],
                ),
                1,
                &[
                    Some(&f32s(&[1, 32], a.clone())),
                    Some(&Tensor::from_vec(DataType::Uint8, &[1, 2, 8], vec![0xAAu8; 16]).unwrap()),
                    Some(&f32s(&[2], vec![1.0, 0.5])),
                    Some(zeros),
                    g.as_ref(),
                ],
            )
            .unwrap();
            assert_eq!(y[0].as_slice::<f32>().unwrap(), &[want], "{name}");
        }
    }

    #[test]
    fn matmul_nbits_rejects_a_g_idx_group_past_the_blocks() {
        let g = Tensor::from_vec(DataType::Int32, &[16], vec![1i32; 16]).unwrap();
        let err = eval_node(
            &node(
                "MatMulNBits",
                5,
                &[("K", 16), ("N", 1), ("bits", 4), ("block_size", 16)],
            ),
            1,
            &[
                Some(&f32s(&[1, 16], vec![0.0; 16])),
                Some(&Tensor::from_vec(DataType::Uint8, &[1, 1, 8], vec![0u8; 8]).unwrap()),
                Some(&f32s(&[1], vec![1.0])),
                None,
                Some(&g),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("g_idx"), "{err}");
    }

    #[test]
    fn gather_block_quantized_rejects_an_index_outside_the_table() {
        let data = Tensor::from_vec(DataType::Uint8, &[2, 8], vec![0u8; 16]).unwrap();
        let ids = Tensor::from_vec(DataType::Int64, &[1], vec![2i64]).unwrap();
        let err = eval_node(
            &node("GatherBlockQuantized", 3, &[("block_size", 16)]),
            1,
            &[
                Some(&data),
                Some(&ids),
                Some(&f32s(&[2, 1], vec![1.0, 1.0])),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("index 2"), "{err}");
    }
}
