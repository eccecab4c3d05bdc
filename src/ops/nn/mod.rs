//! The neural-network operators: matrix products (`MatMul`, `Gemm`, `Einsum` and their integer
//! and quantized forms), convolutions, pools, normalizations and linear quantization.
//!
//! Every floating-point kernel computes in `f32` (float, float16, bfloat16) or `f64` (double) and
//! rounds once on output; matrix products and convolutions go through the `gemm` crate
//! ([`blas`]), parallelised with rayon over batches, groups or tiles of output positions.

#[cfg(target_arch = "x86_64")]
mod amx;
mod attention;
pub(crate) mod blas;
mod causal_conv;
mod col2im;
mod conv;
mod conv_transpose;
mod deform_conv;
mod det;
mod einsum;
mod gemm;
mod grid;
mod igemm;
mod linear_attention;
mod loss;
mod lrn;
mod matmul;
mod nms;
mod norm;
mod pool;
mod qcodes;
mod qconv;
mod qdirect;
mod qmatmul;
mod quant;
mod roi_align;
mod rotary;
mod unpool;
mod values;
mod window;

use super::attrs::{Axes, Epsilon5};
use super::{prepare, OpDef};

use attention::{eval_attention, eval_flex_attention, infer_attention, infer_flex_attention};
use causal_conv::{eval_causal_conv, infer_causal_conv};
use col2im::{eval_col2im, infer_col2im};
use conv::{eval_conv, eval_fused_conv, infer_conv, infer_conv_integer, infer_qlinear_conv};
use conv_transpose::{eval_conv_transpose, infer_conv_transpose};
use deform_conv::{eval_deform_conv, infer_deform_conv};
use det::{eval_det, infer_det};
use einsum::{eval_einsum, infer_einsum};
use grid::{eval_affine_grid, eval_grid_sample, infer_affine_grid, infer_grid_sample};
use linear_attention::{eval_linear_attention, infer_linear_attention};
use loss::{eval_nll_loss, eval_softmax_ce_loss, infer_loss};
use lrn::eval_lrn;
use matmul::{eval_matmul, infer_matmul};
use values::infer_same_as_input;
// The products `com.microsoft.FusedGemm` and `FusedMatMul` build on.
pub(in crate::ops) use gemm::{eval_gemm, infer_gemm};
pub(in crate::ops) use matmul::matmul_dims;
use nms::{eval_nms, infer_nms};
use norm::{
    eval_batch_norm, eval_group_norm, eval_instance_norm, eval_layer_norm, eval_lp_norm, eval_mvn,
    eval_rms_norm, infer_batch_norm, infer_layer_norm,
};
use pool::{
    eval_average_pool, eval_global_average_pool, eval_global_lp_pool, eval_global_max_pool,
    eval_lp_pool, eval_max_pool, infer_global_pool, infer_pool,
};
use qconv::{eval_conv_integer, eval_qlinear_conv};
use qmatmul::{
    eval_matmul_integer, eval_qlinear_matmul, infer_matmul_integer, infer_qlinear_matmul,
};
use quant::{
    eval_dequantize, eval_dynamic_quantize, eval_quantize, infer_dequantize,
    infer_dynamic_quantize, infer_quantize,
};
use roi_align::{eval_roi_align, infer_roi_align};
use rotary::{eval_rotary, infer_rotary};
use unpool::{eval_max_unpool, infer_max_unpool};

// The building blocks the `com.microsoft` attention family shares with `Attention`.
pub(in crate::ops) use attention::{attend, Bias, Mask, Sizes, Spec};
pub(in crate::ops) use blas::{gemm, Mat};
pub(in crate::ops) use gemm::{gemm_dims, GemmAttrs, Shape as GemmShape};
pub(in crate::ops) use igemm::{
    gemm_packed_to as igemm_to, Bytes, Level, PackedA, PackedB, Sink as IgemmSink, EXACT_K,
};
pub(in crate::ops) use qmatmul::{
    integer_product_kept, integer_product_kept_transposed, transposed_matrix, Sums,
};
pub(in crate::ops) use quant::{
    code as quantize_code, dynamic_quantize, dynamic_scale, quantize_u8, Code,
};
pub(in crate::ops) use rotary::{rotate, Rotation};

/// The kernel the interpreter runs for a `Conv` of dequantized 8-bit operands (the QDQ form):
/// a planning-time fusion, not an operator a model can name (it is in no registry table).
pub(crate) static CONV_INTEGER_TO_FLOAT: OpDef = OpDef::new(
    "ConvIntegerToFloat",
    1,
    6..=9,
    1..=1,
    qconv::eval_conv_integer_to_float,
)
.with_prepare(prepare::<conv::ConvAttrs>)
.in_domain("multigather.fused");

/// The kernel the interpreter runs for a `QuantizeLinear` whose codes only a
/// `DequantizeLinear` of the same scale and zero point reads: the round trip in one pass
/// (`interp::fuse`; in no registry table).
pub(crate) static QUANTIZE_ROUND_TRIP: OpDef =
    OpDef::new("QuantizeRoundTrip", 1, 3..=3, 1..=1, quant::eval_round_trip)
        .in_domain("multigather.fused");

/// The kernel the interpreter runs for an `Add` of two dequantized 8-bit tensors whose sum only
/// a `QuantizeLinear` reads (the residual of a QDQ network): the three operators in one pass
/// (`interp::fuse`; in no registry table).
pub(crate) static QUANTIZED_ADD: OpDef =
    OpDef::new("QuantizedAdd", 1, 8..=8, 1..=1, quant::eval_quantized_add)
        .in_domain("multigather.fused");

/// The kernel the interpreter runs for `MatMulInteger -> Cast -> Mul [-> Add]`, the float
/// output of a dynamically quantized product: the sums scaled as they leave the integer
/// kernel (`interp::fuse`; in no registry table).
pub(crate) static INTEGER_PRODUCT_SCALED: OpDef = OpDef::new(
    "MatMulIntegerScaled",
    1,
    5..=6,
    1..=1,
    qmatmul::eval_integer_product_scaled,
)
.in_domain("multigather.fused");

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("Attention", 23, 3..=7, 1..=4, eval_attention).with_infer(infer_attention),
    OpDef::new("FlexAttention", 1, 3..=3, 1..=1, eval_flex_attention)
        .with_infer(infer_flex_attention)
        .in_domain("ai.onnx.preview"),
    OpDef::new("MatMul", 1, 2..=2, 1..=1, eval_matmul).with_infer(infer_matmul),
    OpDef::new("MatMulInteger", 10, 2..=4, 1..=1, eval_matmul_integer)
        .with_infer(infer_matmul_integer),
    OpDef::new("QLinearMatMul", 10, 8..=8, 1..=1, eval_qlinear_matmul)
        .with_infer(infer_qlinear_matmul),
    OpDef::new("Einsum", 12, 1..=usize::MAX, 1..=1, eval_einsum)
        .with_infer(infer_einsum)
        .with_prepare(prepare::<einsum::Terms>),
    OpDef::new("Gemm", 1, 2..=3, 1..=1, eval_gemm)
        .with_infer(infer_gemm)
        .with_prepare(prepare::<gemm::GemmAttrs>),
    OpDef::new("Conv", 1, 2..=3, 1..=1, eval_conv)
        .with_infer(infer_conv)
        .with_prepare(prepare::<conv::ConvAttrs>),
    OpDef::new("FusedConv", 1, 2..=4, 1..=1, eval_fused_conv)
        .with_infer(infer_conv)
        .with_prepare(prepare::<conv::ConvAttrs>)
        .in_domain("com.microsoft"),
    OpDef::new("ConvTranspose", 1, 2..=3, 1..=1, eval_conv_transpose)
        .with_infer(infer_conv_transpose),
    OpDef::new("DeformConv", 19, 3..=5, 1..=1, eval_deform_conv).with_infer(infer_deform_conv),
    OpDef::new("RoiAlign", 10, 3..=3, 1..=1, eval_roi_align).with_infer(infer_roi_align),
    OpDef::new("ConvInteger", 10, 2..=4, 1..=1, eval_conv_integer)
        .with_infer(infer_conv_integer)
        .with_prepare(prepare::<conv::ConvAttrs>),
    OpDef::new("QLinearConv", 10, 8..=9, 1..=1, eval_qlinear_conv)
        .with_infer(infer_qlinear_conv)
        .with_prepare(prepare::<conv::ConvAttrs>),
    OpDef::new("MaxPool", 1, 1..=1, 1..=2, eval_max_pool)
        .with_infer(infer_pool)
        .with_prepare(prepare::<pool::PoolAttrs>),
    OpDef::new("AveragePool", 1, 1..=1, 1..=1, eval_average_pool)
        .with_infer(infer_pool)
        .with_prepare(prepare::<pool::PoolAttrs>),
    OpDef::new("LpPool", 1, 1..=1, 1..=1, eval_lp_pool)
        .with_infer(infer_pool)
        .with_prepare(prepare::<pool::PoolAttrs>),
    OpDef::new("GlobalMaxPool", 1, 1..=1, 1..=1, eval_global_max_pool)
        .with_infer(infer_global_pool),
    OpDef::new(
        "GlobalAveragePool",
        1,
        1..=1,
        1..=1,
        eval_global_average_pool,
    )
    .with_infer(infer_global_pool),
    OpDef::new("GlobalLpPool", 1, 1..=1, 1..=1, eval_global_lp_pool).with_infer(infer_global_pool),
    OpDef::new("BatchNormalization", 1, 5..=5, 1..=5, eval_batch_norm)
        .with_infer(infer_batch_norm)
        .with_prepare(prepare::<norm::BatchNormAttrs>),
    OpDef::new("InstanceNormalization", 1, 3..=3, 1..=1, eval_instance_norm)
        .with_infer(infer_same_as_input)
        .with_prepare(prepare::<Epsilon5>),
    OpDef::new("LayerNormalization", 17, 2..=3, 1..=3, eval_layer_norm)
        .with_infer(infer_layer_norm)
        .with_prepare(prepare::<norm::LayerNormAttrs>),
    // Before opset 17, onnxruntime's own definition in the default domain (the same operator,
    // which its LayerNormFusion writes into saved models of any opset).
    OpDef::new("LayerNormalization", 1, 2..=3, 1..=3, eval_layer_norm)
        .with_infer(infer_layer_norm)
        .with_prepare(prepare::<norm::LayerNormAttrs>)
        .until(16),
    OpDef::new("GroupNormalization", 18, 3..=3, 1..=1, eval_group_norm)
        .with_infer(infer_same_as_input)
        .with_prepare(prepare::<norm::GroupNormAttrs>),
    OpDef::new("MeanVarianceNormalization", 9, 1..=1, 1..=1, eval_mvn)
        .with_infer(infer_same_as_input)
        .with_prepare(prepare::<Axes>),
    OpDef::new("NegativeLogLikelihoodLoss", 12, 2..=3, 1..=1, eval_nll_loss).with_infer(infer_loss),
    OpDef::new(
        "SoftmaxCrossEntropyLoss",
        12,
        2..=3,
        1..=2,
        eval_softmax_ce_loss,
    )
    .with_infer(infer_loss),
    OpDef::new("RMSNormalization", 23, 2..=2, 1..=1, eval_rms_norm)
        .with_infer(infer_same_as_input)
        .with_prepare(prepare::<norm::LayerNormAttrs>),
    OpDef::new("LpNormalization", 1, 1..=1, 1..=1, eval_lp_norm)
        .with_infer(infer_same_as_input)
        .with_prepare(prepare::<norm::LpNormAttrs>),
    OpDef::new("Det", 11, 1..=1, 1..=1, eval_det).with_infer(infer_det),
    OpDef::new("LinearAttention", 27, 3..=6, 1..=2, eval_linear_attention)
        .with_infer(infer_linear_attention),
    OpDef::new("CausalConvWithState", 27, 2..=4, 1..=2, eval_causal_conv)
        .with_infer(infer_causal_conv),
    OpDef::new("GridSample", 16, 2..=2, 1..=1, eval_grid_sample).with_infer(infer_grid_sample),
    OpDef::new("AffineGrid", 20, 2..=2, 1..=1, eval_affine_grid).with_infer(infer_affine_grid),
    OpDef::new("RotaryEmbedding", 23, 3..=4, 1..=1, eval_rotary).with_infer(infer_rotary),
    OpDef::new("NonMaxSuppression", 10, 2..=5, 1..=1, eval_nms).with_infer(infer_nms),
    OpDef::new("Col2Im", 18, 3..=3, 1..=1, eval_col2im).with_infer(infer_col2im),
    OpDef::new("MaxUnpool", 9, 2..=3, 1..=1, eval_max_unpool).with_infer(infer_max_unpool),
    OpDef::new("LRN", 1, 1..=1, 1..=1, eval_lrn).with_infer(infer_same_as_input),
    OpDef::new("QuantizeLinear", 10, 2..=3, 1..=1, eval_quantize).with_infer(infer_quantize),
    OpDef::new("DequantizeLinear", 10, 2..=3, 1..=1, eval_dequantize).with_infer(infer_dequantize),
    OpDef::new(
        "DynamicQuantizeLinear",
        11,
        1..=1,
        3..=3,
        eval_dynamic_quantize,
    )
    .with_infer(infer_dynamic_quantize),
];
