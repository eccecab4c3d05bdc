//! Linear quantization: `QuantizeLinear` and `DequantizeLinear` (opsets 10, 13, 19, 21, 23, 24,
//! 25, 28) and `DynamicQuantizeLinear` (11).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html>,
//! <https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html>,
//! <https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html>.
//!
//! Quantized types: int8, uint8, int16, uint16, the packed int4, uint4, int2 and uint2, the four
//! float8 formats and float4e2m1 (float6 is unsupported); int32 can be dequantized. Scales and
//! zero points apply per tensor (one value), per axis (a 1-D tensor along `axis`) or per block
//! (`block_size`, opset 21+: the input's shape with `axis` divided into blocks).
//!
//! Like the ONNX reference: `x / scale` is computed in `f32` (after rounding both operands to
//! `precision` when that attribute is set), rounded half to even, shifted by the zero point and
//! saturated; float8 outputs ignore the zero point and saturate only when `saturate` is set;
//! float4 outputs add it and always saturate. Dequantization subtracts the zero point exactly
//! (float types have none) and multiplies in `f64`, rounding once to the output type.

use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::tensor::try_vec;
use crate::tensor::{packed, Tensor};
use crate::DataType;

use super::super::util::{normalize_axis, optional, required, to_i64s, unsupported_type};
use super::super::{EvalCtx, InferCtx};
use super::values::{round_to, store_f64s, store_ints, tensor_type, to_f32s};
use crate::ops::minifloat::{decode_e8m0, MiniFloat};

mod fast;

pub(in crate::ops) use fast::{code, eval_quantized_add, eval_round_trip, scaled_codes, Code};
#[cfg(test)]
mod oracle_tests;

/// A quantized element type.
#[derive(Clone, Copy, Debug)]
enum QType {
    /// An integer type of `bits` bits (packed below 8) saturating to `lo..=hi`.
    Int { lo: i64, hi: i64, bits: usize },
    /// A small float format (float4 is packed).
    Float(MiniFloat),
}

impl QType {
    fn of(dtype: DataType) -> Result<QType> {
        use DataType::*;
        let int = |lo: i64, hi: i64, bits: usize| Ok(QType::Int { lo, hi, bits });
        match dtype {
            Int8 => int(-128, 127, 8),
            Uint8 => int(0, 255, 8),
            Int16 => int(-32768, 32767, 16),
            Uint16 => int(0, 65535, 16),
            Int32 => int(i32::MIN.into(), i32::MAX.into(), 32),
            Int4 => int(-8, 7, 4),
            Uint4 => int(0, 15, 4),
            Int2 => int(-2, 1, 2),
            Uint2 => int(0, 3, 2),
            _ => MiniFloat::of(dtype)
                .map(QType::Float)
                .ok_or_else(|| unsupported_type("linear quantization", dtype)),
        }
    }
}

/// The elements of a quantized tensor: exact integers, or the values of a float format.
enum Quantized {
    Ints(Vec<i64>),
    Floats(Vec<f32>),
}

/// Reads every element of a tensor of a quantized type.
fn read_quantized(t: &Tensor) -> Result<Quantized> {
    let dtype = t.dtype();
    Ok(match QType::of(dtype)? {
        QType::Int { lo, bits, .. } if bits < 8 => {
            let bytes = t.as_bytes()?;
            let sign = lo < 0;
            let v = (0..t.len())
                .map(|i| {
                    let raw = i64::from(packed::read(bytes, bits, i).unwrap_or(0));
                    if sign && raw >= 1 << (bits - 1) {
                        raw - (1 << bits)
                    } else {
                        raw
                    }
                })
                .collect();
            Quantized::Ints(v)
        }
        QType::Int { .. } => Quantized::Ints(to_i64s(t)?),
        QType::Float(f) => {
            let bits = dtype.bits();
            let bytes = t.as_bytes()?;
            let v = (0..t.len())
                .map(|i| f.decode(packed::read(bytes, bits, i).unwrap_or(0)) as f32)
                .collect();
            Quantized::Floats(v)
        }
    })
}

/// The values of a scale input (any float type, float8e8m0 or int32) as `f32`.
fn scale_values(t: &Tensor) -> Result<Vec<f32>> {
    match t.dtype() {
        DataType::Float8E8M0 => Ok(t
            .as_slice::<u8>()?
            .iter()
            .map(|&c| decode_e8m0(c) as f32)
            .collect()),
        _ => to_f32s(t),
    }
}

/// Which scale (and zero point) applies to each element.
#[derive(Clone, Copy, Debug)]
enum Granularity {
    Tensor,
    /// Per index along an axis of size `dim`, each index covering `inner` consecutive elements.
    Axis {
        dim: usize,
        inner: usize,
    },
    /// Per block of `block` indices along an axis of size `dim`, of which the scale has `blocks`.
    Block {
        dim: usize,
        inner: usize,
        blocks: usize,
        block: usize,
    },
}

impl Granularity {
    /// The granularity a scale of shape `scale` gives an input of shape `x`.
    fn new(ctx: &EvalCtx<'_>, x: &[usize], scale: &[usize]) -> Result<Granularity> {
        let count: usize = scale.iter().product();
        let block = ctx.node.attr_int("block_size", 0)?;
        if count == 1 && block == 0 {
            return Ok(Granularity::Tensor);
        }
        let axis = normalize_axis(ctx.node.attr_int("axis", 1)?, x.len())?;
        let (dim, inner) = (x[axis], x[axis + 1..].iter().product());
        if block == 0 {
            return if scale.len() == 1 && scale[0] == dim {
                Ok(Granularity::Axis { dim, inner })
            } else {
                Err(ctx.error(format!(
                    "a scale of shape {scale:?} is neither per tensor nor per axis {axis} of {x:?}"
                )))
            };
        }
        let block = usize::try_from(block)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| ctx.error("block_size must be positive"))?;
        let blocks = scale.get(axis).copied().unwrap_or(0);
        let fits = scale.len() == x.len()
            && (0..x.len()).all(|j| j == axis || scale[j] == x[j])
            && dim.div_ceil(block) == blocks;
        if !fits {
            return Err(ctx.error(format!(
                "a scale of shape {scale:?} does not block {x:?} by {block} along axis {axis}"
            )));
        }
        Ok(Granularity::Block {
            dim,
            inner,
            blocks,
            block,
        })
    }

    /// The scale index of element `i`.
    fn index(&self, i: usize) -> usize {
        match *self {
            Granularity::Tensor => 0,
            Granularity::Axis { dim, inner } => (i / inner) % dim,
            Granularity::Block {
                dim,
                inner,
                blocks,
                block,
            } => {
                let (o, a, n) = (i / (inner * dim), (i / inner) % dim, i % inner);
                (o * blocks + a / block) * inner + n
            }
        }
    }
}

/// Checks that a zero point has the scale's shape and type `dtype` (when given).
fn check_zero(ctx: &EvalCtx<'_>, zero: Option<&Tensor>, scale: &Tensor) -> Result<()> {
    match zero {
        Some(z) if z.len() != scale.len() => Err(ctx.error(format!(
            "the zero point {:?} and the scale {:?} must have one shape",
            z.shape(),
            scale.shape()
        ))),
        _ => Ok(()),
    }
}

/// The `output_dtype` attribute, if set.
fn output_dtype(ctx: &EvalCtx<'_>) -> Result<Option<DataType>> {
    match ctx.node.attr_int("output_dtype", 0)? {
        0 => Ok(None),
        code => DataType::from_onnx(code as i32)
            .map(Some)
            .ok_or_else(|| ctx.error(format!("output_dtype {code} is not a type"))),
    }
}

/// Packs quantized codes (integers in range, or float codes) into a tensor of `dtype`.
fn pack(dtype: DataType, shape: &[usize], codes: &[i64]) -> Result<Tensor> {
    let bits = dtype.bits();
    if MiniFloat::of(dtype).is_some() && bits == 8 {
        let v: Vec<u8> = codes.iter().map(|&c| c as u8).collect();
        return Ok(Tensor::from_vec(dtype, shape, v)?);
    }
    if bits >= 8 {
        return store_ints(dtype, shape, codes);
    }
    let n = dtype
        .storage_bytes(codes.len())
        .ok_or_else(|| Error::Eval("output is too large".into()))?;
    let mut bytes = try_vec(n, 0u8)?;
    for (i, &c) in codes.iter().enumerate() {
        packed::write(&mut bytes, bits, i, c as u8);
    }
    Ok(Tensor::from_bytes(dtype, shape, &bytes)?)
}

pub(super) fn eval_quantize(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    if let Some(y) = fast::quantize(ctx, inputs)? {
        return Ok(vec![y]);
    }
    quantize_reference(ctx, inputs)
}

/// `QuantizeLinear` element by element through `i64` codes: every type, granularity and
/// precision (the oracle of the loops in [`fast`]).
fn quantize_reference(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, scale, zero) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        optional(inputs, 2),
    );
    check_zero(ctx, zero, scale)?;
    let out = match (zero.map(Tensor::dtype), output_dtype(ctx)?) {
        (Some(z), Some(o)) if z != o => {
            return Err(ctx.error(format!(
                "output_dtype {o} differs from the zero point's {z}"
            )))
        }
        (Some(z), _) => z,
        (None, Some(o)) => o,
        (None, None) => DataType::Uint8,
    };
    let qtype = QType::of(out)?;
    let gran = Granularity::new(ctx, x.shape(), scale.shape())?;
    let precision = match ctx.node.attr_int("precision", 0)? {
        0 => None,
        p => DataType::from_onnx(p as i32),
    };
    let saturate = ctx.node.attr_int("saturate", 1)? != 0;
    let xv = to_f32s(x)?;
    let sv = scale_values(scale)?;
    let zv = zero.map(read_quantized).transpose()?;
    let quotient = |i: usize| -> f32 {
        let s = sv[gran.index(i)];
        match precision {
            Some(p) => round_to(p, round_to(p, xv[i]) / round_to(p, s)),
            None => xv[i] / s,
        }
    };
    let codes: Vec<i64> = match qtype {
        QType::Int { lo, hi, .. } => {
            let zi = match &zv {
                Some(Quantized::Ints(z)) => Some(z),
                _ => None,
            };
            (0..xv.len())
                .map(|i| {
                    let z = zi.map_or(0, |z| z[gran.index(i)]);
                    (f64::from(quotient(i).round_ties_even()) + z as f64)
                        .clamp(lo as f64, hi as f64) as i64
                })
                .collect()
        }
        QType::Float(f) => {
            // Float8 ignores the zero point; float4 adds it (and always saturates).
            let add_zero = out == DataType::Float4E2M1;
            (0..xv.len())
                .map(|i| {
                    let z = match (&zv, add_zero) {
                        (Some(Quantized::Floats(z)), true) => z[gran.index(i)],
                        _ => 0.0,
                    };
                    let q = if add_zero {
                        quotient(i) + z
                    } else {
                        quotient(i)
                    };
                    i64::from(f.encode(f64::from(q), saturate))
                })
                .collect()
        }
    };
    Ok(vec![pack(out, x.shape(), &codes)?])
}

pub(super) fn eval_dequantize(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    if let Some(y) = fast::dequantize(ctx, inputs)? {
        return Ok(vec![y]);
    }
    dequantize_reference(ctx, inputs)
}

/// `DequantizeLinear` element by element in `f64`: every type and granularity (the oracle of the
/// loops in [`fast`]).
fn dequantize_reference(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, scale, zero) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        optional(inputs, 2),
    );
    check_zero(ctx, zero, scale)?;
    let out = match output_dtype(ctx)? {
        Some(o) => o,
        None if scale.dtype() == DataType::Float8E8M0 => DataType::Float,
        None => scale.dtype(),
    };
    let gran = Granularity::new(ctx, x.shape(), scale.shape())?;
    let sv = scale_values(scale)?;
    let values: Vec<f64> = match read_quantized(x)? {
        Quantized::Ints(xv) => {
            let zv = match zero.map(read_quantized).transpose()? {
                Some(Quantized::Ints(z)) => z,
                Some(Quantized::Floats(_)) => {
                    return Err(ctx.error("the zero point's type differs from x's"))
                }
                None => Vec::new(),
            };
            xv.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let j = gran.index(i);
                    (v - zv.get(j).copied().unwrap_or(0)) as f64 * f64::from(sv[j])
                })
                .collect()
        }
        // Float formats have no zero point.
        Quantized::Floats(xv) => xv
            .iter()
            .enumerate()
            .map(|(i, &v)| f64::from(v) * f64::from(sv[gran.index(i)]))
            .collect(),
    };
    if !matches!(
        out,
        DataType::Float | DataType::Double | DataType::Float16 | DataType::Bfloat16
    ) {
        return Err(unsupported_type("DequantizeLinear output", out));
    }
    Ok(vec![store_f64s(out, x.shape(), &values)?])
}

pub(super) fn eval_dynamic_quantize(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    if x.dtype() != DataType::Float {
        return Err(ctx.error(format!("x must be float, found {}", x.dtype())));
    }
    let (y, scale, zero) = dynamic_quantize(x.as_slice::<f32>()?)?;
    Ok(vec![
        Tensor::from_vec(DataType::Uint8, x.shape(), y)?,
        Tensor::scalar(DataType::Float, scale)?,
        Tensor::scalar(DataType::Uint8, zero)?,
    ])
}

/// `DynamicQuantizeLinear` of `xv`: uint8 codes over the range of the values and 0, with their
/// scale and zero point (`round_half_even(-min / scale)`).
pub(in crate::ops) fn dynamic_quantize(xv: &[f32]) -> Result<(Vec<u8>, f32, u8)> {
    let (scale, zero) = dynamic_scale_of(xv);
    let mut y = try_vec(xv.len(), 0u8)?;
    quantize_u8(xv, scale, zero, &mut y);
    Ok((y, scale, zero))
}

/// `DynamicQuantizeLinear`'s scale and zero point for `values`: their range widened to hold 0,
/// mapped onto `0..=255`.
pub(in crate::ops) fn dynamic_scale(values: impl Iterator<Item = f32>) -> (f32, u8) {
    let (min, max) = values.fold((0.0f32, 0.0f32), |(lo, hi), v| (lo.min(v), hi.max(v)));
    scale_of_range(min, max)
}

/// [`dynamic_scale`] of a slice, its range found by vectorised loops.
pub(in crate::ops) fn dynamic_scale_of(values: &[f32]) -> (f32, u8) {
    let (min, max) = fast::range(values);
    scale_of_range(min, max)
}

/// The scale and zero point of the range `min..=max` (which holds 0).
fn scale_of_range(min: f32, max: f32) -> (f32, u8) {
    let scale = if max == min { 1.0 } else { max - min } / 255.0;
    let zero = (0.0 - min / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zero as u8)
}

/// `round_half_even(x / scale) + zero`, saturated to uint8, for each `x` of `xv` into `out`.
/// NaN becomes 0.
pub(in crate::ops) fn quantize_u8(xv: &[f32], scale: f32, zero: u8, out: &mut [u8]) {
    // SAFETY: only initialised codes are written through the view.
    fast::quantize_u8(xv, scale, zero, unsafe {
        crate::ops::vector::as_slots(out)
    });
}

pub(super) fn infer_quantize(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let attr = ctx.node.attr_int("output_dtype", 0)?;
    let elem = ctx
        .input(2)
        .and_then(|t| t.elem)
        .or_else(|| DataType::from_onnx(attr as i32))
        .or(Some(DataType::Uint8));
    let dims = ctx
        .input(0)
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dims.clone());
    Ok(vec![tensor_type(elem, dims)])
}

pub(super) fn infer_dequantize(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let attr = ctx.node.attr_int("output_dtype", 0)?;
    let elem = DataType::from_onnx(attr as i32).or_else(|| ctx.input(1).and_then(|t| t.elem));
    let dims = ctx
        .input(0)
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dims.clone());
    Ok(vec![tensor_type(elem, dims)])
}

pub(super) fn infer_dynamic_quantize(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = ctx
        .input(0)
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dims.clone());
    Ok(vec![
        tensor_type(Some(DataType::Uint8), dims),
        TensorType::new(DataType::Float, Vec::new()),
        TensorType::new(DataType::Uint8, Vec::new()),
    ])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;

    use super::*;

    /// `QuantizeLinear(DequantizeLinear(c))` by one scale and zero point is `c` for every code,
    /// zero point and normal scale whose 256 multiple is finite: what lets the interpreter move
    /// codes instead of floats (`interp::fuse::move_codes`).
    #[test]
    fn a_quantize_of_a_dequantize_by_the_same_normal_scale_is_the_code() {
        let mut scales = vec![f32::MIN_POSITIVE, 1e-30, 1e-10, 0.0173, 1.0, 3.7e5, 1e35];
        scales.push(f32::MAX / 256.0);
        let mut s = 0x2545_f491u32;
        for _ in 0..2000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let v = f32::from_bits(s & 0x7fff_ffff);
            if v.is_normal() && (v * 256.0).is_finite() {
                scales.push(v);
            }
        }
        for &scale in &scales {
            for z in [0i32, 1, 119, 128, 255] {
                for c in 0..=255i32 {
                    let f = (c - z) as f32 * scale;
                    assert_eq!(
                        i32::from(code::<u8>(f, scale, z as f32)),
                        c,
                        "{scale:e} {z}"
                    );
                }
            }
        }
    }

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        // The ONNX QuantizeLinear example.
        let x = f32s(&[6], vec![0.0, 2.0, 3.0, 1000.0, -254.0, -1000.0]);
        let s = f32s(&[], vec![2.0]);
        let z = Tensor::from_vec(DataType::Uint8, &[], vec![128u8]).unwrap();
        let node = Node::new("QuantizeLinear", "q", ["x", "s", "z"], ["y"]);
        let y = eval_node(&node, 28, &[Some(&x), Some(&s), Some(&z)]).unwrap();
        assert_eq!(y[0].as_slice::<u8>().unwrap(), &[128, 129, 130, 255, 1, 0]);
    }

    #[test]
    fn per_axis_and_blocked_scales() {
        let x = f32s(&[2, 4], vec![1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0]);
        let s = f32s(&[2], vec![1.0, 10.0]);
        let node = Node::new("QuantizeLinear", "q", ["x", "s"], ["y"])
            .with_attr("axis", AttrValue::Int(0))
            .with_attr("output_dtype", AttrValue::Int(DataType::Int8.onnx().into()));
        let y = eval_node(&node, 28, &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(y[0].as_slice::<i8>().unwrap(), &[1, 2, 3, 4, 1, 2, 3, 4]);
        // Blocks of 2 along axis 1: scales [[1, 2], [10, 20]].
        let s = f32s(&[2, 2], vec![1.0, 2.0, 10.0, 20.0]);
        let node = Node::new("QuantizeLinear", "q", ["x", "s"], ["y"])
            .with_attr("axis", AttrValue::Int(1))
            .with_attr("block_size", AttrValue::Int(2));
        let y = eval_node(&node, 28, &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(y[0].as_slice::<u8>().unwrap(), &[1, 2, 2, 2, 1, 2, 2, 2]);
        let bad = f32s(&[3], vec![1.0; 3]);
        let err = eval_node(&node, 28, &[Some(&x), Some(&bad)]).unwrap_err();
        assert!(err.to_string().contains("does not block"), "{err}");
    }

    #[test]
    fn packed_int4_round_trips() {
        let x = f32s(&[3], vec![-9.0, 3.0, 7.4]);
        let s = f32s(&[], vec![1.0]);
        let z = Tensor::from_bytes(DataType::Int4, &[], &[0]).unwrap();
        let q = eval_node(
            &Node::new("QuantizeLinear", "q", ["x", "s", "z"], ["y"]),
            28,
            &[Some(&x), Some(&s), Some(&z)],
        )
        .unwrap();
        assert_eq!(q[0].dtype(), DataType::Int4);
        assert_eq!(q[0].as_bytes().unwrap(), &[0x38, 0x07]);
        let d = eval_node(
            &Node::new("DequantizeLinear", "d", ["q", "s", "z"], ["y"]),
            28,
            &[Some(&q[0]), Some(&s), Some(&z)],
        )
        .unwrap();
        assert_eq!(d[0], f32s(&[3], vec![-8.0, 3.0, 7.0]));
    }

    #[test]
    fn dequantize_subtracts_per_axis_zero_points() {
        let x = Tensor::from_vec(DataType::Uint8, &[1, 2, 2], vec![0u8, 3, 128, 255]).unwrap();
        let s = f32s(&[2], vec![2.0, 4.0]);
        let z = Tensor::from_vec(DataType::Uint8, &[2], vec![1u8, 128]).unwrap();
        let node = Node::new("DequantizeLinear", "d", ["x", "s", "z"], ["y"]);
        let y = eval_node(&node, 21, &[Some(&x), Some(&s), Some(&z)]).unwrap();
        assert_eq!(y[0], f32s(&[1, 2, 2], vec![-2.0, 4.0, 0.0, 508.0]));
    }

    #[test]
    fn dynamic_quantization_spans_zero() {
        // The ONNX DynamicQuantizeLinear example.
        let x = f32s(&[6], vec![0.0, 2.0, -3.0, -2.5, 1.34, 0.5]);
        let node = Node::new("DynamicQuantizeLinear", "d", ["x"], ["y", "s", "z"]);
        let y = eval_node(&node, 11, &[Some(&x)]).unwrap();
        assert_eq!(y[0].as_slice::<u8>().unwrap(), &[153, 255, 0, 26, 221, 179]);
        assert!((y[1].as_slice::<f32>().unwrap()[0] - 0.019_607_844).abs() < 1e-9);
        assert_eq!(y[2].as_slice::<u8>().unwrap(), &[153]);
    }
}
