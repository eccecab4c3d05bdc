//! The quantised element-wise contrib operators of `com.microsoft` (opset 1) that
//! `onnxruntime.quantization` emits for activations: `QLinearSigmoid` and `QLinearLeakyRelu`
//! (`alpha`, 0.01 by default).
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, sections `com.microsoft.QLinearSigmoid` and
//! `com.microsoft.QLinearLeakyRelu`. Inputs: `X` (uint8 or int8), `X_scale` (float scalar),
//! `X_zero_point` (optional, `X`'s type), `Y_scale`, `Y_zero_point` (optional); the output has
//! `X`'s type and shape.
//!
//! An 8-bit input has 256 values, so the kernel tabulates
//! `quantize(f(dequantize(q)))` once per call — dequantise `(q - zx) * sx`, quantise
//! `saturate(round_half_even(y / sy) + zy)` — and then looks every element up.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{optional, required, unsupported_type};
use super::super::{vector, EvalCtx};

/// A scalar scale input as `f32`, or an error naming the operator and input.
fn scale(t: &Tensor, op: &str, what: &str) -> Result<f32> {
    if t.dtype() != DataType::Float || t.len() != 1 {
        return Err(Error::Eval(format!(
            "{op}: {what} must be one float (per-tensor), got {} of shape {:?}",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(t.as_slice::<f32>()?[0])
}

/// An optional scalar zero point of type `dtype` as `i32` (0 when absent).
fn zero_point(t: Option<&Tensor>, dtype: DataType, op: &str, what: &str) -> Result<i32> {
    let Some(t) = t else { return Ok(0) };
    if t.dtype() != dtype || t.len() != 1 {
        return Err(Error::Eval(format!(
            "{op}: {what} must be one {dtype} (per-tensor), got {} of shape {:?}",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(match dtype {
        DataType::Uint8 => i32::from(t.as_slice::<u8>()?[0]),
        _ => i32::from(t.as_slice::<i8>()?[0]),
    })
}

/// `Y = quantize(f(dequantize(X)))` for the five inputs of a `QLinear*` unary operator.
fn lookup(inputs: &[Option<&Tensor>], op: &str, f: impl Fn(f32) -> f32) -> Result<Tensor> {
    let x = required(inputs, 0)?;
    let dtype = x.dtype();
    let (lo, hi) = match dtype {
        DataType::Uint8 => (0i32, 255i32),
        DataType::Int8 => (-128, 127),
        _ => return Err(unsupported_type(op, dtype)),
    };
    let sx = scale(required(inputs, 1)?, op, "X_scale")?;
    let zx = zero_point(optional(inputs, 2), dtype, op, "X_zero_point")?;
    let sy = scale(required(inputs, 3)?, op, "Y_scale")?;
    let zy = zero_point(optional(inputs, 4), dtype, op, "Y_zero_point")?;
    // table[q - lo] is the output code of input code q.
    let mut table = [0u8; 256];
    for (code, slot) in (lo..=hi).zip(table.iter_mut()) {
        let y = f((code - zx) as f32 * sx) / sy;
        let q = (y.round_ties_even() as i64 + i64::from(zy)).clamp(lo.into(), hi.into());
        // Two's complement: an int8 code is stored as its byte.
        *slot = q as i32 as u8;
    }
    let bytes = x.as_bytes()?;
    let offset = (-lo) as u8;
    Ok(Tensor::uninit(dtype, x.shape())?.fill::<u8>(|dst| {
        for (o, &b) in dst.iter_mut().zip(bytes) {
            o.write(table[usize::from(b.wrapping_add(offset))]);
        }
        // SAFETY: `dst` has one byte per element, as `bytes` does; each was written above.
        unsafe { vector::assume_written(dst) }
    })?)
}

pub(in crate::ops) fn eval_qlinear_sigmoid(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    Ok(vec![lookup(inputs, "QLinearSigmoid", vector::sigmoid)?])
}

pub(in crate::ops) fn eval_qlinear_leaky_relu(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let alpha = ctx.node.attr_float("alpha", 0.01)?;
    Ok(vec![lookup(inputs, "QLinearLeakyRelu", move |v| {
        if v >= 0.0 {
            v
        } else {
            alpha * v
        }
    })?])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    fn scalar_f(v: f32) -> Tensor {
        Tensor::from_vec(DataType::Float, &[], vec![v]).unwrap()
    }

    fn run(
        op: &str,
        inputs: &[Option<&Tensor>],
        attrs: Vec<(&str, AttrValue)>,
    ) -> crate::Result<Tensor> {
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("i{i}")).collect();
        let mut n = Node::new(op, "n", names, ["y"]).with_domain("com.microsoft");
        for (k, v) in attrs {
            n = n.with_attr(k, v);
        }
        Ok(eval_node(&n, 1, inputs)?.remove(0))
    }

    /// uint8: scale 0.5, zero point 128 in; LeakyRelu(alpha 0.5) out with scale 0.25, zero 100.
    #[test]
    fn qlinear_leaky_relu_uint8_saturates_and_rounds_half_even() {
        let x = Tensor::from_vec(DataType::Uint8, &[4], vec![0u8, 127, 128, 255]).unwrap();
        let zx = Tensor::from_vec(DataType::Uint8, &[], vec![128u8]).unwrap();
        let zy = Tensor::from_vec(DataType::Uint8, &[], vec![100u8]).unwrap();
        let y = run(
            "QLinearLeakyRelu",
            &[
                Some(&x),
                Some(&scalar_f(0.5)),
                Some(&zx),
                Some(&scalar_f(0.25)),
                Some(&zy),
            ],
            vec![("alpha", AttrValue::Float(0.5))],
        )
        .unwrap();
        // 0 -> -64 -> -32 -> -128 + 100 = -28 -> 0; 127 -> -0.5 -> -0.25 -> -1 + 100 = 99;
        // 128 -> 0 -> 100; 255 -> 63.5 -> 254 + 100 -> 255.
        assert_eq!(y.as_slice::<u8>().unwrap(), &[0, 99, 100, 255]);
    }

    /// int8 with no zero points: sigmoid(0) = 0.5 -> 0.5 / (1/256) = 128 saturates to 127.
    #[test]
    fn qlinear_sigmoid_int8_without_zero_points() {
        let x = Tensor::from_vec(DataType::Int8, &[3], vec![-128i8, 0, 100]).unwrap();
        let y = run(
            "QLinearSigmoid",
            &[
                Some(&x),
                Some(&scalar_f(0.1)),
                None,
                Some(&scalar_f(1.0 / 256.0)),
            ],
            vec![],
        )
        .unwrap();
        let want: Vec<i8> = [-12.8f32, 0.0, 10.0]
            .iter()
            .map(|&v| {
                let s = 1.0 / (1.0 + (-v).exp());
                (s * 256.0).round_ties_even().clamp(-128.0, 127.0) as i8
            })
            .collect();
        assert_eq!(y.as_slice::<i8>().unwrap(), &want[..]);
    }

    #[test]
    fn qlinear_sigmoid_rejects_float_input_and_per_axis_scales() {
        let f = scalar_f(1.0);
        let err = run(
            "QLinearSigmoid",
            &[Some(&f), Some(&f), None, Some(&f)],
            vec![],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("float"), "{err}");
        let x = Tensor::from_vec(DataType::Uint8, &[2], vec![1u8, 2]).unwrap();
        let two = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 1.0]).unwrap();
        let err = run(
            "QLinearSigmoid",
            &[Some(&x), Some(&two), None, Some(&f)],
            vec![],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("X_scale"), "{err}");
    }
}
