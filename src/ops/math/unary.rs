//! Elementwise operators of one input: rounding, powers and logarithms, trigonometric and
//! hyperbolic functions, activations with their attributes, sign-related operators on every
//! numeric type, logical and bitwise negation, and the NaN/infinity predicates.
//!
//! Floating-point functions are evaluated in `f64` and rounded once to the element type, so `f16`
//! and `bf16` results are correctly rounded and `f32` results agree with onnxruntime within float
//! tolerance. `Round` rounds half to even; `Erf` uses a series and a continued fraction accurate to
//! about 1e-15 (Rust's standard library has no `erf`).

use crate::error::Result;
use crate::ops::attrs::{Alpha, Alpha1};
use crate::ops::halves::{self, Widen};
use crate::ops::num::Float;
use crate::ops::util::{required, tensor_from_iter};
use crate::ops::vector;
use crate::ops::{Attributes, EvalCtx};
use crate::tensor::Tensor;
use crate::DataType;

use super::work::bad_type;

#[cfg(test)]
mod half_tests;
mod numeric;

pub(super) use numeric::{
    eval_bitwise_not, eval_is_inf, eval_is_nan, eval_not, eval_num_unary, num_unary_in_place, Abs,
    DetectInf, Neg, Relu, Sign,
};

/// Applies a real function to every element of a floating-point tensor.
pub(super) fn float_map(ctx: &EvalCtx<'_>, x: &Tensor, f: impl Fn(f64) -> f64) -> Result<Tensor> {
    crate::ops::num::dispatch_float!(x.dtype(), T => {
        let v = x.as_slice::<T>()?.iter().map(|&e| <T as Float>::from_f64(f(e.to_f64())));
        tensor_from_iter(x.dtype(), x.shape(), v)
    }, _ => Err(bad_type(ctx, x.dtype())))
}

/// Applies `f` to every element of a `float` tensor with the vectorised loops of
/// [`crate::ops::vector`], over the session's threads for large tensors.
pub(crate) fn map_f32(x: &Tensor, f: impl Fn(f32) -> f32 + Sync + Send + Copy) -> Result<Tensor> {
    let src = x.as_slice::<f32>()?;
    Ok(Tensor::uninit(DataType::Float, x.shape())?.fill(|dst| vector::par_map(src, dst, f))?)
}

/// The in-place form of a kernel applying `fast` to a `float` tensor: the buffer of `x` is
/// rewritten when nothing else holds it, and `x` is handed back otherwise.
fn in_place_f32(
    x: Tensor,
    fast: impl Fn(f32) -> f32 + Sync + Send + Copy,
) -> Result<std::result::Result<Vec<Tensor>, Tensor>> {
    in_place_f32_with(x, |v| vector::par_map_in_place(v, fast))
}

/// [`in_place_f32`] with `kernel` rewriting the whole buffer.
fn in_place_f32_with(
    x: Tensor,
    kernel: impl FnOnce(&mut [f32]),
) -> Result<std::result::Result<Vec<Tensor>, Tensor>> {
    if x.dtype() != DataType::Float || !x.is_unique() {
        return Ok(Err(x));
    }
    let mut x = x;
    kernel(x.as_slice_mut::<f32>()?);
    Ok(Ok(vec![x]))
}

/// A kernel applying a real function to input 0: `fast` on `float` tensors, `f` (in `f64`,
/// rounded once) on the other floating-point types.
fn unary_fast(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
    f: impl Fn(f64) -> f64,
    fast: impl Fn(f32) -> f32 + Sync + Send + Copy,
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    match x.dtype() {
        DataType::Float => Ok(vec![map_f32(x, fast)?]),
        DataType::Float16 => Ok(vec![map_half::<half::f16>(x, f, fast)?]),
        DataType::Bfloat16 => Ok(vec![map_half::<half::bf16>(x, f, fast)?]),
        _ => Ok(vec![float_map(ctx, x, f)?]),
    }
}

/// `f` (in `f64`, rounded once) on every element of a `float16` or `bfloat16` tensor, computed
/// by the vectorised `fast` in blocks where its rounding is certain to be `f`'s
/// ([`halves::map_checked`]).
fn map_half<T: Widen + Float>(
    x: &Tensor,
    f: impl Fn(f64) -> f64,
    fast: impl Fn(f32) -> f32 + Copy,
) -> Result<Tensor> {
    let src = x.as_slice::<T>()?;
    let exact = |v: f32| <T as Float>::from_f64(f(f64::from(v)));
    Ok(Tensor::uninit(T::DTYPE, x.shape())?
        .fill(|dst| halves::map_checked(src, dst, fast, exact))?)
}

/// Declares kernels that apply a real function without attributes, with a vectorised `f32`
/// form, and their in-place forms.
macro_rules! fast_float_kernels {
    ($($name:ident, $in_place:ident => $f:expr, $fast:expr;)*) => {$(
        pub(super) fn $name(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
            unary_fast(ctx, inputs, $f, $fast)
        }

        pub(super) fn $in_place(
            _: &EvalCtx<'_>,
            x: Tensor,
            _: &[Option<&Tensor>],
        ) -> Result<std::result::Result<Vec<Tensor>, Tensor>> {
            in_place_f32(x, $fast)
        }
    )*};
}

fast_float_kernels! {
    eval_floor, floor_in_place => f64::floor, f32::floor;
    eval_ceil, ceil_in_place => f64::ceil, f32::ceil;
    eval_round, round_in_place => f64::round_ties_even, f32::round_ties_even;
    eval_reciprocal, reciprocal_in_place => f64::recip, |x: f32| 1.0 / x;
    eval_sqrt, sqrt_in_place => f64::sqrt, f32::sqrt;
    eval_exp, exp_in_place => f64::exp, vector::exp;
    eval_tanh, tanh_in_place => f64::tanh, vector::tanh;
    eval_sigmoid, sigmoid_in_place => sigmoid, vector::sigmoid;
    eval_erf, erf_in_place => erf, vector::erf;
    eval_softsign, softsign_in_place => |x| x / (1.0 + x.abs()), |x: f32| x / (1.0 + x.abs());
    eval_hard_swish, hard_swish_in_place => |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        hard_swish_f32;
}

/// `HardSwish` on `float`: the function of the standalone kernel and of a fused one.
fn hard_swish_f32(x: f32) -> f32 {
    x * (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)
}

/// `LeakyRelu`'s `alpha`, 0.01 when absent.
pub(super) type LeakyAlpha = Alpha<{ 0.01f32.to_bits() }>;

/// The `alpha` (0.2) and `beta` (0.5) attributes of a `HardSigmoid` node.
#[derive(Clone, Copy, Debug)]
pub(super) struct HardSigmoidAttrs {
    alpha: f32,
    beta: f32,
}

impl Attributes for HardSigmoidAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<HardSigmoidAttrs> {
        Ok(HardSigmoidAttrs {
            alpha: node.attr_float("alpha", 0.2)?,
            beta: node.attr_float("beta", 0.5)?,
        })
    }
}

/// `HardSigmoid` on `float`, evaluated in `f64` and rounded once as its kernel does.
fn hard_sigmoid_f32(alpha: f32, beta: f32) -> impl Fn(f32) -> f32 + Sync + Send + Copy {
    let (alpha, beta) = (f64::from(alpha), f64::from(beta));
    move |x: f32| (alpha * f64::from(x) + beta).clamp(0.0, 1.0) as f32
}

/// An activation a convolution applies to its output as it writes it: the `activation` of
/// `com.microsoft.FusedConv`, and the element-wise step the interpreter's planner fuses into a
/// `Conv` before it. Each computes on `float` exactly the bits of the standalone operator's
/// kernel, so fusing never changes a result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Activation {
    Relu,
    LeakyRelu(f32),
    Sigmoid,
    Tanh,
    HardSigmoid(f32, f32),
    HardSwish,
    /// `min`, `max` (FusedConv only: the planner leaves `Clip` a step of its own).
    Clip(f32, f32),
}

impl Activation {
    /// FusedConv's `activation` named `name` with its `activation_params`.
    pub(crate) fn named(name: &str, params: &[f32]) -> std::result::Result<Activation, String> {
        let param = |i: usize, default: f32| params.get(i).copied().unwrap_or(default);
        Ok(match name {
            "Relu" => Activation::Relu,
            "LeakyRelu" => Activation::LeakyRelu(param(0, 0.01)),
            "Sigmoid" => Activation::Sigmoid,
            "Tanh" => Activation::Tanh,
            "HardSigmoid" => Activation::HardSigmoid(param(0, 0.2), param(1, 0.5)),
            "HardSwish" => Activation::HardSwish,
            "Clip" => Activation::Clip(param(0, f32::MIN), param(1, f32::MAX)),
            other => {
                return Err(format!(
                    "activation '{other}' is not one of Relu, LeakyRelu, Sigmoid, Tanh, \
                     HardSigmoid, HardSwish, Clip"
                ))
            }
        })
    }

    /// The activation a node of the default domain computes, if it is one the planner fuses.
    pub(crate) fn of_node(node: &crate::ir::Node) -> Option<Activation> {
        if !crate::ir::is_onnx_domain(&node.domain) || node.inputs.len() != 1 {
            return None;
        }
        Some(match node.op_type.as_str() {
            "Relu" => Activation::Relu,
            "LeakyRelu" => Activation::LeakyRelu(LeakyAlpha::parse(node, 0).ok()?.0),
            "Sigmoid" => Activation::Sigmoid,
            "Tanh" => Activation::Tanh,
            "HardSigmoid" => {
                let HardSigmoidAttrs { alpha, beta } = HardSigmoidAttrs::parse(node, 0).ok()?;
                Activation::HardSigmoid(alpha, beta)
            }
            "HardSwish" => Activation::HardSwish,
            _ => return None,
        })
    }

    /// FusedConv's `activation` and `activation_params` for this activation.
    pub(crate) fn attributes(self) -> (&'static str, Vec<f32>) {
        match self {
            Activation::Relu => ("Relu", vec![]),
            Activation::LeakyRelu(a) => ("LeakyRelu", vec![a]),
            Activation::Sigmoid => ("Sigmoid", vec![]),
            Activation::Tanh => ("Tanh", vec![]),
            Activation::HardSigmoid(a, b) => ("HardSigmoid", vec![a, b]),
            Activation::HardSwish => ("HardSwish", vec![]),
            Activation::Clip(lo, hi) => ("Clip", vec![lo, hi]),
        }
    }

    /// Applies the activation to every element of `y`, on the calling thread.
    pub(crate) fn apply(self, y: &mut [f32]) {
        match self {
            Activation::Relu => vector::clamp_in_place(y, 0.0, f32::INFINITY),
            Activation::LeakyRelu(a) => vector::leaky_relu_in_place(y, a),
            Activation::Sigmoid => vector::map_in_place(y, vector::sigmoid),
            Activation::Tanh => vector::map_in_place(y, vector::tanh),
            Activation::HardSigmoid(a, b) => vector::map_in_place(y, hard_sigmoid_f32(a, b)),
            Activation::HardSwish => vector::map_in_place(y, hard_swish_f32),
            Activation::Clip(lo, hi) => vector::clamp_in_place(y, lo, hi),
        }
    }
}

/// A kernel applying a real function to input 0.
fn unary_float(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
    f: impl Fn(f64) -> f64,
) -> Result<Vec<Tensor>> {
    Ok(vec![float_map(ctx, required(inputs, 0)?, f)?])
}

/// Declares kernels that apply a real function without attributes.
macro_rules! float_kernels {
    ($($name:ident => $f:expr;)*) => {$(
        pub(super) fn $name(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
            unary_float(ctx, inputs, $f)
        }
    )*};
}

float_kernels! {
    eval_log => f64::ln;
    eval_sin => f64::sin;
    eval_cos => f64::cos;
    eval_tan => f64::tan;
    eval_asin => f64::asin;
    eval_acos => f64::acos;
    eval_atan => f64::atan;
    eval_sinh => f64::sinh;
    eval_cosh => f64::cosh;
    eval_asinh => f64::asinh;
    eval_acosh => f64::acosh;
    eval_atanh => f64::atanh;
    eval_softplus => softplus;
    eval_mish => |x| x * softplus(x).tanh();
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `ln(1 + e^x)` without overflow for large `x`.
fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// The error function.
///
/// Below 3 it sums `2/√π · e^(-x²) · Σ 2ⁿ x^(2n+1) / (1·3·…·(2n+1))`, whose terms are all
/// positive (no cancellation); above, it evaluates the continued fraction of `erfc`, which
/// converges fast there. From 6 on, `erf` is 1 in `f64`.
pub(crate) fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI;
    let r = if a < 3.0 {
        let x2 = a * a;
        let (mut term, mut sum) = (a, a);
        for n in 1..200 {
            term *= 2.0 * x2 / (2 * n + 1) as f64;
            sum += term;
            if term <= sum * 1e-17 {
                break;
            }
        }
        two_over_sqrt_pi * (-x2).exp() * sum
    } else if a < 6.0 {
        // erfc(a) = e^(-a²)/√π / (a + (1/2)/(a + (2/2)/(a + (3/2)/(a + ...)))), from the tail in.
        let mut f = a;
        for k in (1..=60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - two_over_sqrt_pi / 2.0 * (-a * a).exp() / f
    } else {
        1.0
    };
    r.copysign(x)
}

pub(super) fn eval_leaky_relu(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let a = ctx.attrs::<LeakyAlpha>()?.0;
    let alpha = f64::from(a);
    unary_fast(
        ctx,
        inputs,
        |x| if x < 0.0 { alpha * x } else { x },
        leaky_relu_f32(a),
    )
}

fn leaky_relu_f32(a: f32) -> impl Fn(f32) -> f32 + Sync + Send + Copy {
    move |x: f32| if x < 0.0 { a * x } else { x }
}

pub(super) fn leaky_relu_in_place(
    ctx: &EvalCtx<'_>,
    x: Tensor,
    _: &[Option<&Tensor>],
) -> Result<std::result::Result<Vec<Tensor>, Tensor>> {
    let alpha = ctx.attrs::<LeakyAlpha>()?.0;
    in_place_f32_with(x, |v| {
        vector::par_in_place(v, |v| vector::leaky_relu_in_place(v, alpha))
    })
}

pub(super) fn eval_swish(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let a = ctx.attrs::<Alpha1>()?.0;
    let alpha = f64::from(a);
    unary_fast(
        ctx,
        inputs,
        |x| x / (1.0 + (-alpha * x).exp()),
        move |x: f32| x * vector::sigmoid(a * x),
    )
}

/// `SwiGLU` (opset 28): `a * sigmoid(alpha * a) * b` on equally shaped `a` and `b`.
pub(super) fn eval_swiglu(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return Err(ctx.error(format!(
            "A {}{:?} and B {}{:?} must have one type and shape",
            a.dtype(),
            a.shape(),
            b.dtype(),
            b.shape()
        )));
    }
    let alpha = f64::from(ctx.attrs::<Alpha1>()?.0);
    crate::ops::num::dispatch_float!(a.dtype(), T => {
        let (av, bv) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
        let v = av.iter().zip(bv).map(|(&x, &y)| {
            let x = x.to_f64();
            <T as Float>::from_f64(x / (1.0 + (-alpha * x).exp()) * y.to_f64())
        });
        Ok(vec![tensor_from_iter(a.dtype(), a.shape(), v)?])
    }, _ => Err(bad_type(ctx, a.dtype())))
}

/// The `bias` (0) and `lambd` (0.5) attributes of a `Shrink` node.
#[derive(Clone, Copy, Debug)]
pub(super) struct ShrinkAttrs {
    bias: f32,
    lambd: f32,
}

impl Attributes for ShrinkAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<ShrinkAttrs> {
        Ok(ShrinkAttrs {
            bias: node.attr_float("bias", 0.0)?,
            lambd: node.attr_float("lambd", 0.5)?,
        })
    }
}

pub(super) fn eval_shrink(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let ShrinkAttrs { bias, lambd } = *ctx.attrs::<ShrinkAttrs>()?;
    let (bias, lambd) = (f64::from(bias), f64::from(lambd));
    unary_float(ctx, inputs, |x| {
        if x < -lambd {
            x + bias
        } else if x > lambd {
            x - bias
        } else {
            0.0
        }
    })
}

pub(super) fn eval_elu(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let alpha = f64::from(ctx.attrs::<Alpha1>()?.0);
    unary_float(
        ctx,
        inputs,
        |x| {
            if x < 0.0 {
                alpha * x.exp_m1()
            } else {
                x
            }
        },
    )
}

/// The `alpha` and `gamma` attributes of a `Selu` node.
#[derive(Clone, Copy, Debug)]
pub(super) struct SeluAttrs {
    alpha: f32,
    gamma: f32,
}

impl Attributes for SeluAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<SeluAttrs> {
        Ok(SeluAttrs {
            alpha: node.attr_float("alpha", 1.673_263_2)?,
            gamma: node.attr_float("gamma", 1.050_701)?,
        })
    }
}

pub(super) fn eval_selu(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let SeluAttrs { alpha, gamma } = *ctx.attrs::<SeluAttrs>()?;
    let (alpha, gamma) = (f64::from(alpha), f64::from(gamma));
    unary_float(ctx, inputs, |x| {
        if x > 0.0 {
            gamma * x
        } else {
            gamma * alpha * x.exp_m1()
        }
    })
}

pub(super) fn eval_celu(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let alpha = f64::from(ctx.attrs::<Alpha1>()?.0);
    if alpha == 0.0 {
        return Err(ctx.error("alpha must not be 0"));
    }
    unary_float(ctx, inputs, |x| {
        x.max(0.0) + (alpha * (x / alpha).exp_m1()).min(0.0)
    })
}

pub(super) fn eval_thresholded_relu(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let alpha = f64::from(ctx.attrs::<Alpha1>()?.0);
    unary_float(ctx, inputs, |x| if x > alpha { x } else { 0.0 })
}

pub(super) fn eval_hard_sigmoid(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let HardSigmoidAttrs { alpha: a, beta: b } = *ctx.attrs::<HardSigmoidAttrs>()?;
    let (alpha, beta) = (f64::from(a), f64::from(b));
    unary_fast(
        ctx,
        inputs,
        |x| (alpha * x + beta).clamp(0.0, 1.0),
        hard_sigmoid_f32(a, b),
    )
}

/// The `approximate` attribute of a `Gelu` node: whether it is `tanh` (else `none`).
#[derive(Clone, Copy, Debug)]
pub(super) struct GeluTanh(bool);

impl Attributes for GeluTanh {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<GeluTanh> {
        match node.attr_string("approximate")?.unwrap_or("none") {
            "none" => Ok(GeluTanh(false)),
            "tanh" => Ok(GeluTanh(true)),
            other => Err(crate::Error::Eval(format!(
                "approximate must be 'none' or 'tanh', found '{other}'"
            ))),
        }
    }
}

pub(super) fn eval_gelu(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    if matches!(x.dtype(), DataType::Float16 | DataType::Bfloat16) {
        // The `f32` forms lose relative accuracy where `1 + erf` cancels (large negative
        // inputs), beyond what `halves::map_checked` can trust: halves stay in `f64`.
        let tanh = ctx.attrs::<GeluTanh>()?.0;
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let f = move |x: f64| match tanh {
            false => 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)),
            true => 0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh()),
        };
        return Ok(vec![float_map(ctx, x, f)?]);
    }
    match ctx.attrs::<GeluTanh>()?.0 {
        false => unary_fast(
            ctx,
            inputs,
            |x| 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)),
            vector::gelu,
        ),
        true => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            unary_fast(
                ctx,
                inputs,
                |x| 0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh()),
                vector::gelu_tanh,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn run(op: &str, attrs: &[(&str, AttrValue)], x: &Tensor) -> crate::Result<Tensor> {
        let mut node = Node::new(op, "n", ["x"], ["y"]);
        for (k, v) in attrs {
            node = node.with_attr(k, v.clone());
        }
        Ok(eval_node(&node, 22, &[Some(x)])?.remove(0))
    }

    fn f32s(v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, &[v.len()], v.to_vec()).unwrap()
    }

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{got:?} vs {want:?}"
            );
        }
    }

    #[test]
    fn erf_matches_tabulated_values() {
        let table = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_7),
            (-1.0, -0.842_700_792_949_714_9),
        ];
        for (x, want) in table {
            assert!((super::erf(x) - want).abs() < 1e-14, "erf({x})");
        }
    }

    #[test]
    fn round_is_half_to_even() {
        let y = run("Round", &[], &f32s(&[0.5, 1.5, 2.5, -2.5, -0.4, 2.6])).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [0.0, 2.0, 2.0, -2.0, -0.0, 3.0]);
    }

    #[test]
    fn activations_follow_their_definitions() {
        let x = f32s(&[-1.0, 0.0, 1.0]);
        let y = run("LeakyRelu", &[("alpha", AttrValue::Float(0.1))], &x).unwrap();
        close(&y.to_vec::<f32>().unwrap(), &[-0.1, 0.0, 1.0]);
        let y = run("Elu", &[("alpha", AttrValue::Float(2.0))], &x).unwrap();
        close(&y.to_vec::<f32>().unwrap(), &[-1.264_241_1, 0.0, 1.0]);
        let y = run("HardSigmoid", &[], &x).unwrap();
        close(&y.to_vec::<f32>().unwrap(), &[0.3, 0.5, 0.7]);
        let y = run(
            "Gelu",
            &[("approximate", AttrValue::String(b"tanh".to_vec()))],
            &x,
        )
        .unwrap();
        close(&y.to_vec::<f32>().unwrap(), &[-0.158_808, 0.0, 0.841_192]);
        let y = run("Gelu", &[], &x).unwrap();
        close(
            &y.to_vec::<f32>().unwrap(),
            &[-0.158_655_25, 0.0, 0.841_344_7],
        );
        let err = run(
            "Gelu",
            &[("approximate", AttrValue::String(b"x".to_vec()))],
            &x,
        );
        assert!(err.unwrap_err().to_string().contains("approximate"));
    }

    #[test]
    fn sign_abs_and_relu_take_integers() {
        let x = Tensor::from_vec(DataType::Int8, &[3], vec![-128i8, 0, 5]).unwrap();
        let y = run("Sign", &[], &x).unwrap();
        assert_eq!(y.to_vec::<i8>().unwrap(), [-1, 0, 1]);
        let y = run("Abs", &[], &x).unwrap();
        assert_eq!(y.to_vec::<i8>().unwrap(), [-128, 0, 5]);
        let y = run("Relu", &[], &x).unwrap();
        assert_eq!(y.to_vec::<i8>().unwrap(), [0, 0, 5]);
    }

    #[test]
    fn halves_are_computed_in_wider_floats() {
        let x = Tensor::from_vec(DataType::Float16, &[1], vec![half::f16::from_f32(2.0)]).unwrap();
        let y = run("Sqrt", &[], &x).unwrap();
        assert_eq!(
            y.to_vec::<half::f16>().unwrap()[0],
            half::f16::from_f64(2f64.sqrt())
        );
    }

    #[test]
    fn predicates_and_negations() {
        let x = f32s(&[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0]);
        let attrs = [("detect_negative", AttrValue::Int(0))];
        let y = run("IsInf", &attrs, &x).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), [1, 0, 0, 0]);
        let y = run("IsNaN", &[], &x).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), [0, 0, 1, 0]);
        let b = Tensor::from_vec(DataType::Bool, &[2], vec![1u8, 0]).unwrap();
        assert_eq!(run("Not", &[], &b).unwrap().to_vec::<u8>().unwrap(), [0, 1]);
        let i = Tensor::from_vec(DataType::Uint8, &[1], vec![5u8]).unwrap();
        assert_eq!(
            run("BitwiseNot", &[], &i).unwrap().to_vec::<u8>().unwrap(),
            [250]
        );
        let err = run("Exp", &[], &i).unwrap_err();
        assert!(err.to_string().contains("does not take uint8"), "{err}");
    }
}
