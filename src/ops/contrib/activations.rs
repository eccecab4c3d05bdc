//! The element-wise contrib operators of `com.microsoft` (opset 1): `Gelu` (exact, erf),
//! `FastGelu` (tanh approximation, with an optional bias), `BiasGelu` (exact GELU of
//! `A + bias`), `QuickGelu` (`x * sigmoid(alpha * x)`, alpha 1.702 by default) and `BiasAdd`
//! (`X + bias + skip`).
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, sections `com.microsoft.Gelu`,
//! `com.microsoft.FastGelu`, `com.microsoft.BiasGelu`, `com.microsoft.QuickGelu`,
//! `com.microsoft.BiasAdd`.
//!
//! A bias is one-dimensional and runs along the last axis of `X`.

use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::tensor::Tensor;
use crate::DataType;

use super::super::attrs::Alpha;
use super::super::util::{optional, required, unsupported_type};
use super::super::{vector, EvalCtx, InferCtx};

/// The output has the input's type and shape.
pub(super) fn infer_like_input(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(ctx.input(0).cloned().into_iter().collect())
}

/// `X` as floats, or an error naming the operator.
pub(super) fn floats<'t>(x: &'t Tensor, op: &str) -> Result<&'t [f32]> {
    if x.dtype() != DataType::Float {
        return Err(unsupported_type(op, x.dtype()));
    }
    Ok(x.as_slice::<f32>()?)
}

/// `f` of every element of `x`.
fn map(x: &Tensor, op: &str, f: impl Fn(f32) -> f32 + Sync + Send + Copy) -> Result<Tensor> {
    let src = floats(x, op)?;
    Ok(Tensor::uninit(DataType::Float, x.shape())?.fill(|dst| vector::par_map(src, dst, f))?)
}

/// A bias along the last axis of `x`: its values, checked.
pub(super) fn bias<'t>(x: &Tensor, b: &'t Tensor, op: &str) -> Result<&'t [f32]> {
    let last = x.shape().last().copied().unwrap_or(1);
    if b.len() != last || b.rank() > 1 && b.shape().iter().rev().skip(1).any(|&d| d != 1) {
        return Err(Error::Eval(format!(
            "{op}: bias of shape {:?} does not run along the last axis of {:?}",
            b.shape(),
            x.shape()
        )));
    }
    floats(b, op)
}

/// `f(x + bias)` for every element, the bias along the last axis.
fn map_biased(
    x: &Tensor,
    b: &Tensor,
    op: &str,
    f: impl Fn(f32) -> f32 + Sync + Send + Copy,
) -> Result<Tensor> {
    let src = floats(x, op)?;
    let b = bias(x, b, op)?;
    let out = Tensor::uninit(DataType::Float, x.shape())?;
    Ok(out.fill(|dst| {
        let width = b.len().max(1);
        for (row, out) in src.chunks(width).zip(dst.chunks_mut(width)) {
            for ((o, &v), &c) in out.iter_mut().zip(row).zip(b) {
                o.write(f(v + c));
            }
        }
        // SAFETY: the rows cover `dst` (x's length is a multiple of the bias length, checked
        // by `bias`), and every element of each was written above.
        unsafe { vector::assume_written(dst) }
    })?)
}

pub(in crate::ops) fn eval_gelu(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    Ok(vec![map(required(inputs, 0)?, "Gelu", vector::gelu)?])
}

pub(in crate::ops) fn eval_fast_gelu(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    Ok(vec![match optional(inputs, 1) {
        Some(b) => map_biased(x, b, "FastGelu", vector::gelu_tanh)?,
        None => map(x, "FastGelu", vector::gelu_tanh)?,
    }])
}

pub(in crate::ops) fn eval_bias_gelu(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, b) = (required(inputs, 0)?, required(inputs, 1)?);
    Ok(vec![map_biased(x, b, "BiasGelu", vector::gelu)?])
}

/// `QuickGelu`'s `alpha`, 1.702 when absent.
pub(super) type QuickGeluAlpha = Alpha<{ 1.702f32.to_bits() }>;

pub(in crate::ops) fn eval_quick_gelu(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let alpha = ctx.attrs::<QuickGeluAlpha>()?.0;
    let x = required(inputs, 0)?;
    Ok(vec![map(x, "QuickGelu", move |v| {
        v * vector::sigmoid(alpha * v)
    })?])
}

pub(in crate::ops) fn eval_bias_add(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, b, skip) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    if skip.shape() != x.shape() {
        return Err(Error::Eval(format!(
            "BiasAdd: skip of shape {:?} differs from X {:?}",
            skip.shape(),
            x.shape()
        )));
    }
    let (src, s) = (floats(x, "BiasAdd")?, floats(skip, "BiasAdd")?);
    let b = bias(x, b, "BiasAdd")?;
    let out = Tensor::uninit(DataType::Float, x.shape())?;
    Ok(vec![out.fill(|dst| {
        let width = b.len().max(1);
        for ((row, srow), out) in src
            .chunks(width)
            .zip(s.chunks(width))
            .zip(dst.chunks_mut(width))
        {
            for (((o, &v), &k), &c) in out.iter_mut().zip(row).zip(srow).zip(b) {
                o.write(v + c + k);
            }
        }
        // SAFETY: the rows cover `dst` and every element of each was written above.
        unsafe { vector::assume_written(dst) }
    })?])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn run(op: &str, inputs: &[&Tensor], attrs: Vec<(&str, AttrValue)>) -> crate::Result<Tensor> {
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("i{i}")).collect();
        let mut n = Node::new(op, "n", names, ["y"]).with_domain("com.microsoft");
        for (k, v) in attrs {
            n = n.with_attr(k, v);
        }
        let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        Ok(eval_node(&n, 1, &inputs)?.remove(0))
    }

    fn close(a: &Tensor, e: &[f32]) {
        let a = a.as_slice::<f32>().unwrap();
        for (x, y) in a.iter().zip(e) {
            assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{a:?} vs {e:?}");
        }
        assert_eq!(a.len(), e.len());
    }

    /// (op, inputs, expected) against closed forms in f64.
    #[test]
    fn activations_against_their_formulas() {
        let x = f32s(&[2, 2], &[-1.0, 0.0, 0.5, 2.0]);
        let b = f32s(&[2], &[0.5, -0.5]);
        let gelu = |v: f64| 0.5 * v * (1.0 + libm_erf(v / 2f64.sqrt()));
        let tanh_gelu = |v: f64| {
            0.5 * v
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
        };
        let biased = [-0.5, -0.5, 1.0, 1.5];
        let plain = [-1.0, 0.0, 0.5, 2.0];
        let f = |g: &dyn Fn(f64) -> f64, v: &[f64]| -> Vec<f32> {
            v.iter().map(|&v| g(v) as f32).collect()
        };
        close(&run("Gelu", &[&x], vec![]).unwrap(), &f(&gelu, &plain));
        close(
            &run("BiasGelu", &[&x, &b], vec![]).unwrap(),
            &f(&gelu, &biased),
        );
        close(
            &run("FastGelu", &[&x, &b], vec![]).unwrap(),
            &f(&tanh_gelu, &biased),
        );
        close(
            &run("FastGelu", &[&x], vec![]).unwrap(),
            &f(&tanh_gelu, &plain),
        );
        let quick = |v: f64| v / (1.0 + (-1.702 * v).exp());
        close(
            &run("QuickGelu", &[&x], vec![]).unwrap(),
            &f(&quick, &plain),
        );
        let skip = f32s(&[2, 2], &[1.0, 1.0, 1.0, 1.0]);
        close(
            &run("BiasAdd", &[&x, &b, &skip], vec![]).unwrap(),
            &[0.5, 0.5, 2.0, 2.5],
        );
    }

    /// erf by its series (enough terms for |x| <= 2).
    fn libm_erf(x: f64) -> f64 {
        let mut sum = 0.0;
        let mut term = x;
        for n in 0..60 {
            sum += term / (2 * n + 1) as f64;
            term *= -x * x / (n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn a_bias_across_the_wrong_axis_is_an_error() {
        let x = f32s(&[2, 2], &[0.0; 4]);
        let err = run("BiasGelu", &[&x, &f32s(&[3], &[0.0; 3])], vec![])
            .unwrap_err()
            .to_string();
        assert!(err.contains("last axis"), "{err}");
        let ints = Tensor::from_vec(DataType::Int32, &[1], vec![1i32]).unwrap();
        let err = run("Gelu", &[&ints], vec![]).unwrap_err().to_string();
        assert!(err.contains("int32"), "{err}");
    }
}
