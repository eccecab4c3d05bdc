//! The math family: elementwise operators (unary, binary with broadcasting, variadic, `Where`,
//! `Clip`), `Cast` and `CastLike`, the reductions, `ArgMax`/`ArgMin`, `Softmax`/`LogSoftmax`/
//! `Hardmax`, `CumSum`, `CumProd` and `TopK`.
//!
//! Specs: <https://onnx.ai/onnx/operators/> (one page per operator). Each file documents its
//! operators' opset differences and edge cases; [`common`] holds what they share: the work types
//! kernels compute in (`f32` for `f16`/`bf16`, rounded once when stored), dispatch over the numeric
//! types, and the broadcasting shape functions.
//!
//! The opset 1-6 forms of the binary operators (`broadcast`/`axis` attributes), which predate
//! multidirectional broadcasting, align B to A ([`legacy`]) and run the current kernels.

use super::attrs::Alpha1;
use super::{prepare, OpDef};

mod argmax;
mod binary;
mod cast;
mod chain;
mod cumsum;
mod legacy;
mod reduce;
mod softmax;
mod topk;
mod unary;
mod variadic;
mod work;

pub(in crate::ops) use binary::zip_f32;
pub(crate) use chain::{Instruction, Op as ChainOp, Operand, Program, MAX_INSTRUCTIONS, PROGRAM};
#[cfg(test)]
pub(crate) use unary::erf as erf_f64;
pub(crate) use unary::Activation;

use binary::{
    eval_arith, eval_bit_shift, eval_bitwise, eval_compare, eval_logic, eval_mod, eval_pow,
    eval_prelu,
};
use reduce::infer_reduce;
use unary::{eval_num_unary, num_unary_in_place};
use variadic::eval_fold;
use work::{infer_broadcast, infer_broadcast_bool, infer_like_input, infer_like_input_bool};

const ANY: usize = usize::MAX;

/// The opset 1-6 form of a binary operator: `$kernel` (its kernel from opset 7) on B aligned to
/// A by the `broadcast`/`axis` rule, the output typed as A (`$infer`).
macro_rules! legacy_binary {
    ($op:literal, $kernel:expr, $infer:expr) => {
        OpDef::new($op, 1, 2..=2, 1..=1, |c, i| {
            legacy::eval_legacy(c, i, $kernel)
        })
        .with_infer($infer)
        .with_prepare(prepare::<legacy::LegacyBroadcast>)
        .until(6)
    };
}

/// The kernel the interpreter runs for a tree of element-wise steps whose inner values nothing
/// else reads: the operators in one pass (`interp::fuse`; in no registry table).
pub(crate) static ELEMENTWISE_CHAIN: OpDef = OpDef::new(
    "ElementwiseChain",
    1,
    1..=usize::MAX,
    1..=1,
    chain::eval_chain,
)
.with_prepare(prepare::<chain::Program>)
.in_domain("multigather.fused");

pub(super) const DEFS: &[OpDef] = &[
    // Unary, floating point.
    OpDef::new("Floor", 1, 1..=1, 1..=1, unary::eval_floor)
        .with_infer(infer_like_input)
        .with_in_place(unary::floor_in_place),
    OpDef::new("Ceil", 1, 1..=1, 1..=1, unary::eval_ceil)
        .with_infer(infer_like_input)
        .with_in_place(unary::ceil_in_place),
    OpDef::new("Round", 11, 1..=1, 1..=1, unary::eval_round)
        .with_infer(infer_like_input)
        .with_in_place(unary::round_in_place),
    OpDef::new("Reciprocal", 1, 1..=1, 1..=1, unary::eval_reciprocal)
        .with_infer(infer_like_input)
        .with_in_place(unary::reciprocal_in_place),
    OpDef::new("Sqrt", 1, 1..=1, 1..=1, unary::eval_sqrt)
        .with_infer(infer_like_input)
        .with_in_place(unary::sqrt_in_place),
    OpDef::new("Exp", 1, 1..=1, 1..=1, unary::eval_exp)
        .with_infer(infer_like_input)
        .with_in_place(unary::exp_in_place),
    OpDef::new("Log", 1, 1..=1, 1..=1, unary::eval_log).with_infer(infer_like_input),
    OpDef::new("Tanh", 1, 1..=1, 1..=1, unary::eval_tanh)
        .with_infer(infer_like_input)
        .with_in_place(unary::tanh_in_place),
    OpDef::new("Sigmoid", 1, 1..=1, 1..=1, unary::eval_sigmoid)
        .with_infer(infer_like_input)
        .with_in_place(unary::sigmoid_in_place),
    OpDef::new("Erf", 9, 1..=1, 1..=1, unary::eval_erf)
        .with_infer(infer_like_input)
        .with_in_place(unary::erf_in_place),
    OpDef::new("Sin", 7, 1..=1, 1..=1, unary::eval_sin).with_infer(infer_like_input),
    OpDef::new("Cos", 7, 1..=1, 1..=1, unary::eval_cos).with_infer(infer_like_input),
    OpDef::new("Tan", 7, 1..=1, 1..=1, unary::eval_tan).with_infer(infer_like_input),
    OpDef::new("Asin", 7, 1..=1, 1..=1, unary::eval_asin).with_infer(infer_like_input),
    OpDef::new("Acos", 7, 1..=1, 1..=1, unary::eval_acos).with_infer(infer_like_input),
    OpDef::new("Atan", 7, 1..=1, 1..=1, unary::eval_atan).with_infer(infer_like_input),
    OpDef::new("Sinh", 9, 1..=1, 1..=1, unary::eval_sinh).with_infer(infer_like_input),
    OpDef::new("Cosh", 9, 1..=1, 1..=1, unary::eval_cosh).with_infer(infer_like_input),
    OpDef::new("Asinh", 9, 1..=1, 1..=1, unary::eval_asinh).with_infer(infer_like_input),
    OpDef::new("Acosh", 9, 1..=1, 1..=1, unary::eval_acosh).with_infer(infer_like_input),
    OpDef::new("Atanh", 9, 1..=1, 1..=1, unary::eval_atanh).with_infer(infer_like_input),
    OpDef::new("Softplus", 1, 1..=1, 1..=1, unary::eval_softplus).with_infer(infer_like_input),
    OpDef::new("Softsign", 1, 1..=1, 1..=1, unary::eval_softsign)
        .with_infer(infer_like_input)
        .with_in_place(unary::softsign_in_place),
    OpDef::new("Mish", 18, 1..=1, 1..=1, unary::eval_mish).with_infer(infer_like_input),
    OpDef::new("HardSwish", 14, 1..=1, 1..=1, unary::eval_hard_swish)
        .with_infer(infer_like_input)
        .with_in_place(unary::hard_swish_in_place),
    OpDef::new("LeakyRelu", 1, 1..=1, 1..=1, unary::eval_leaky_relu)
        .with_infer(infer_like_input)
        .with_in_place(unary::leaky_relu_in_place)
        .with_prepare(prepare::<unary::LeakyAlpha>),
    OpDef::new("Swish", 24, 1..=1, 1..=1, unary::eval_swish)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<Alpha1>),
    OpDef::new("Shrink", 9, 1..=1, 1..=1, unary::eval_shrink)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<unary::ShrinkAttrs>),
    OpDef::new("SwiGLU", 28, 2..=2, 1..=1, unary::eval_swiglu)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<Alpha1>),
    OpDef::new("Elu", 1, 1..=1, 1..=1, unary::eval_elu)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<Alpha1>),
    OpDef::new("Selu", 1, 1..=1, 1..=1, unary::eval_selu)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<unary::SeluAttrs>),
    OpDef::new("Celu", 12, 1..=1, 1..=1, unary::eval_celu)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<Alpha1>),
    OpDef::new(
        "ThresholdedRelu",
        10,
        1..=1,
        1..=1,
        unary::eval_thresholded_relu,
    )
    .with_infer(infer_like_input)
    .with_prepare(prepare::<Alpha1>),
    OpDef::new("HardSigmoid", 1, 1..=1, 1..=1, unary::eval_hard_sigmoid)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<unary::HardSigmoidAttrs>),
    OpDef::new("Gelu", 20, 1..=1, 1..=1, unary::eval_gelu)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<unary::GeluTanh>),
    // Unary, every numeric type.
    OpDef::new("Abs", 1, 1..=1, 1..=1, eval_num_unary::<unary::Abs>)
        .with_infer(infer_like_input)
        .with_in_place(num_unary_in_place::<unary::Abs>),
    OpDef::new("Neg", 1, 1..=1, 1..=1, eval_num_unary::<unary::Neg>)
        .with_infer(infer_like_input)
        .with_in_place(num_unary_in_place::<unary::Neg>),
    OpDef::new("Sign", 9, 1..=1, 1..=1, eval_num_unary::<unary::Sign>).with_infer(infer_like_input),
    OpDef::new("Relu", 1, 1..=1, 1..=1, eval_num_unary::<unary::Relu>)
        .with_infer(infer_like_input)
        .with_in_place(num_unary_in_place::<unary::Relu>),
    // Unary, bool, integers and predicates.
    OpDef::new("Not", 1, 1..=1, 1..=1, unary::eval_not).with_infer(infer_like_input),
    OpDef::new("BitwiseNot", 18, 1..=1, 1..=1, unary::eval_bitwise_not)
        .with_infer(infer_like_input),
    OpDef::new("IsNaN", 9, 1..=1, 1..=1, unary::eval_is_nan).with_infer(infer_like_input_bool),
    OpDef::new("IsInf", 10, 1..=1, 1..=1, unary::eval_is_inf)
        .with_infer(infer_like_input_bool)
        .with_prepare(prepare::<unary::DetectInf>),
    // Binary arithmetic.
    OpDef::new("Add", 7, 2..=2, 1..=1, eval_arith::<binary::Add>)
        .with_infer(infer_broadcast)
        .with_in_place(binary::arith_in_place::<binary::Add>),
    OpDef::new("Sub", 7, 2..=2, 1..=1, eval_arith::<binary::Sub>)
        .with_infer(infer_broadcast)
        .with_in_place(binary::arith_in_place::<binary::Sub>),
    OpDef::new("Mul", 7, 2..=2, 1..=1, eval_arith::<binary::Mul>)
        .with_infer(infer_broadcast)
        .with_in_place(binary::arith_in_place::<binary::Mul>),
    OpDef::new("Div", 7, 2..=2, 1..=1, eval_arith::<binary::Div>)
        .with_infer(infer_broadcast)
        .with_in_place(binary::arith_in_place::<binary::Div>),
    OpDef::new("Mod", 10, 2..=2, 1..=1, eval_mod).with_infer(infer_broadcast),
    OpDef::new("Pow", 7, 2..=2, 1..=1, eval_pow).with_infer(infer_broadcast),
    OpDef::new("PRelu", 7, 2..=2, 1..=1, eval_prelu).with_infer(infer_broadcast),
    OpDef::new("PRelu", 1, 2..=2, 1..=1, |c, i| {
        legacy::eval_legacy_prelu(c, i, eval_prelu)
    })
    .with_infer(infer_like_input)
    .until(6),
    legacy_binary!("Add", eval_arith::<binary::Add>, infer_like_input),
    legacy_binary!("Sub", eval_arith::<binary::Sub>, infer_like_input),
    legacy_binary!("Mul", eval_arith::<binary::Mul>, infer_like_input),
    legacy_binary!("Div", eval_arith::<binary::Div>, infer_like_input),
    legacy_binary!("Pow", eval_pow, infer_like_input),
    legacy_binary!("And", eval_logic::<binary::And>, infer_like_input_bool),
    legacy_binary!("Or", eval_logic::<binary::Or>, infer_like_input_bool),
    legacy_binary!("Xor", eval_logic::<binary::Xor>, infer_like_input_bool),
    legacy_binary!(
        "Equal",
        eval_compare::<binary::Equal>,
        infer_like_input_bool
    ),
    legacy_binary!(
        "Greater",
        eval_compare::<binary::Greater>,
        infer_like_input_bool
    ),
    legacy_binary!("Less", eval_compare::<binary::Less>, infer_like_input_bool),
    // Bitwise.
    OpDef::new("BitShift", 11, 2..=2, 1..=1, eval_bit_shift).with_infer(infer_broadcast),
    OpDef::new(
        "BitwiseAnd",
        18,
        2..=2,
        1..=1,
        eval_bitwise::<binary::BitAnd>,
    )
    .with_infer(infer_broadcast),
    OpDef::new("BitwiseOr", 18, 2..=2, 1..=1, eval_bitwise::<binary::BitOr>)
        .with_infer(infer_broadcast),
    OpDef::new(
        "BitwiseXor",
        18,
        2..=2,
        1..=1,
        eval_bitwise::<binary::BitXor>,
    )
    .with_infer(infer_broadcast),
    // Comparisons and logic.
    OpDef::new("Equal", 7, 2..=2, 1..=1, eval_compare::<binary::Equal>)
        .with_infer(infer_broadcast_bool),
    OpDef::new("Less", 7, 2..=2, 1..=1, eval_compare::<binary::Less>)
        .with_infer(infer_broadcast_bool),
    OpDef::new(
        "LessOrEqual",
        12,
        2..=2,
        1..=1,
        eval_compare::<binary::LessOrEqual>,
    )
    .with_infer(infer_broadcast_bool),
    OpDef::new("Greater", 7, 2..=2, 1..=1, eval_compare::<binary::Greater>)
        .with_infer(infer_broadcast_bool),
    OpDef::new(
        "GreaterOrEqual",
        12,
        2..=2,
        1..=1,
        eval_compare::<binary::GreaterOrEqual>,
    )
    .with_infer(infer_broadcast_bool),
    OpDef::new("And", 7, 2..=2, 1..=1, eval_logic::<binary::And>).with_infer(infer_broadcast_bool),
    OpDef::new("Or", 7, 2..=2, 1..=1, eval_logic::<binary::Or>).with_infer(infer_broadcast_bool),
    OpDef::new("Xor", 7, 2..=2, 1..=1, eval_logic::<binary::Xor>).with_infer(infer_broadcast_bool),
    // Variadic, selection and clipping.
    OpDef::new("Sum", 1, 1..=ANY, 1..=1, eval_fold::<variadic::Sum>).with_infer(infer_broadcast),
    OpDef::new("Mean", 1, 1..=ANY, 1..=1, eval_fold::<variadic::Mean>).with_infer(infer_broadcast),
    OpDef::new("Max", 1, 1..=ANY, 1..=1, eval_fold::<variadic::Max>).with_infer(infer_broadcast),
    OpDef::new("Min", 1, 1..=ANY, 1..=1, eval_fold::<variadic::Min>).with_infer(infer_broadcast),
    OpDef::new("Where", 9, 3..=3, 1..=1, variadic::eval_where).with_infer(variadic::infer_where),
    OpDef::new("Clip", 1, 1..=1, 1..=1, variadic::eval_clip_attrs)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<variadic::ClipBounds>)
        .until(10),
    OpDef::new("Clip", 11, 1..=3, 1..=1, variadic::eval_clip).with_infer(infer_like_input),
    // Casts.
    OpDef::new("Cast", 1, 1..=1, 1..=1, cast::eval_cast)
        .with_infer(cast::infer_cast)
        .with_prepare(prepare::<cast::CastAttrs>),
    OpDef::new("BitCast", 26, 1..=1, 1..=1, cast::eval_bitcast).with_infer(cast::infer_bitcast),
    OpDef::new("CastLike", 15, 2..=2, 1..=1, cast::eval_cast_like)
        .with_infer(cast::infer_cast_like),
    // Reductions: `axes` is an attribute, then an input.
    OpDef::new("ReduceSum", 1, 1..=1, 1..=1, reduce::eval_reduce_sum)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>)
        .until(12),
    OpDef::new("ReduceSum", 13, 1..=2, 1..=1, reduce::eval_reduce_sum)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new("ReduceMean", 1, 1..=1, 1..=1, reduce::eval_reduce_mean)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>)
        .until(17),
    OpDef::new("ReduceMean", 18, 1..=2, 1..=1, reduce::eval_reduce_mean)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new("ReduceMax", 1, 1..=1, 1..=1, reduce::eval_reduce_max)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>)
        .until(17),
    OpDef::new("ReduceMax", 18, 1..=2, 1..=1, reduce::eval_reduce_max)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new("ReduceMin", 1, 1..=1, 1..=1, reduce::eval_reduce_min)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>)
        .until(17),
    OpDef::new("ReduceMin", 18, 1..=2, 1..=1, reduce::eval_reduce_min)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new("ReduceProd", 1, 1..=1, 1..=1, reduce::eval_reduce_prod)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>)
        .until(17),
    OpDef::new("ReduceProd", 18, 1..=2, 1..=1, reduce::eval_reduce_prod)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new("ReduceL1", 1, 1..=1, 1..=1, reduce::eval_reduce_l1)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>)
        .until(17),
    OpDef::new("ReduceL1", 18, 1..=2, 1..=1, reduce::eval_reduce_l1)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new("ReduceL2", 1, 1..=1, 1..=1, reduce::eval_reduce_l2)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>)
        .until(17),
    OpDef::new("ReduceL2", 18, 1..=2, 1..=1, reduce::eval_reduce_l2)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new("ReduceLogSum", 1, 1..=1, 1..=1, reduce::eval_reduce_log_sum)
        .with_infer(infer_reduce)
        .with_prepare(prepare::<reduce::ReduceAttrs>)
        .until(17),
    OpDef::new(
        "ReduceLogSum",
        18,
        1..=2,
        1..=1,
        reduce::eval_reduce_log_sum,
    )
    .with_infer(infer_reduce)
    .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new(
        "ReduceLogSumExp",
        1,
        1..=1,
        1..=1,
        reduce::eval_reduce_log_sum_exp,
    )
    .with_infer(infer_reduce)
    .with_prepare(prepare::<reduce::ReduceAttrs>)
    .until(17),
    OpDef::new(
        "ReduceLogSumExp",
        18,
        1..=2,
        1..=1,
        reduce::eval_reduce_log_sum_exp,
    )
    .with_infer(infer_reduce)
    .with_prepare(prepare::<reduce::ReduceAttrs>),
    OpDef::new(
        "ReduceSumSquare",
        1,
        1..=1,
        1..=1,
        reduce::eval_reduce_sum_square,
    )
    .with_infer(infer_reduce)
    .with_prepare(prepare::<reduce::ReduceAttrs>)
    .until(17),
    OpDef::new(
        "ReduceSumSquare",
        18,
        1..=2,
        1..=1,
        reduce::eval_reduce_sum_square,
    )
    .with_infer(infer_reduce)
    .with_prepare(prepare::<reduce::ReduceAttrs>),
    // Along one axis.
    OpDef::new("ArgMax", 1, 1..=1, 1..=1, argmax::eval_argmax)
        .with_infer(argmax::infer_arg)
        .with_prepare(prepare::<argmax::ArgAttrs>),
    OpDef::new("ArgMin", 1, 1..=1, 1..=1, argmax::eval_argmin)
        .with_infer(argmax::infer_arg)
        .with_prepare(prepare::<argmax::ArgAttrs>),
    OpDef::new("Softmax", 1, 1..=1, 1..=1, softmax::eval_softmax)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<softmax::SoftmaxAxis>),
    OpDef::new("LogSoftmax", 1, 1..=1, 1..=1, softmax::eval_log_softmax)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<softmax::SoftmaxAxis>),
    OpDef::new("Hardmax", 1, 1..=1, 1..=1, softmax::eval_hardmax)
        .with_infer(infer_like_input)
        .with_prepare(prepare::<softmax::SoftmaxAxis>),
    OpDef::new("CumSum", 11, 2..=2, 1..=1, cumsum::eval_cumsum).with_infer(infer_like_input),
    OpDef::new("CumProd", 26, 2..=2, 1..=1, cumsum::eval_cumprod).with_infer(infer_like_input),
    OpDef::new("TopK", 1, 1..=1, 2..=2, topk::eval_topk)
        .with_infer(topk::infer_topk)
        .until(9),
    OpDef::new("TopK", 10, 2..=2, 2..=2, topk::eval_topk).with_infer(topk::infer_topk),
];
