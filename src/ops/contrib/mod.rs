//! The `com.microsoft` domain: the contrib operators onnxruntime's own tools emit most — the
//! element-wise activations and the fused residual + normalisation of its transformer
//! optimizer (`onnxruntime.transformers.optimizer`).
//!
//! Spec: onnxruntime's `docs/ContribOperators.md`
//! (<https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md>).
//!
//! `QLinearSigmoid` and `QLinearLeakyRelu` take uint8/int8 with per-tensor scales (a lookup
//! table per call, `qlinear`), as does `QLinearSoftmax` (`qsoftmax`, onnxruntime's integer
//! recipe); the quantisers' operators (the 8-bit and 4-bit matmuls, `QGemm` (`qgemm`),
//! `QAttention`, `DynamicQuantizeLSTM`, `GatherBlockQuantized`) take their integer operands with
//! `float` scales. Every other kernel here is `float` only (what the optimizer emits for float
//! models); another type is an error naming it. The kernels reuse the engine's vectorised loops (`ops::vector`): the
//! GELUs are one pass of [`super::vector::par_map`], the normalisations one pass per row.
//!
//! The operators of a model saved by onnxruntime's graph optimizer (`fused`: `FusedMatMul`,
//! `TransposeMatMul`, `FusedGemm`; `nhwc`: the 8-bit `NhwcMaxPool`) run on the default domain's
//! kernels (`FusedConv` lives with `Conv` in `nn`).
//!
//! `SimplifiedLayerNormalization` (RMS normalisation) is registered in the default domain too,
//! where onnxruntime defines it.

mod activations;
mod embed_norm;
mod fused;
mod multi_head_attention;
mod nhwc;
mod qgemm;
mod qlinear;
mod qsoftmax;
mod quant_lstm;
mod quant_matmul;
mod rotary_embedding;
mod skip_norm;

use super::attrs::{Epsilon12, TrailingNorm};
use super::{prepare, OpDef};

/// The domain of the operators here.
const DOMAIN: &str = "com.microsoft";

/// RMS normalisation, in the default domain as onnxruntime defines it.
const SIMPLIFIED_LAYER_NORM: OpDef = OpDef::new(
    "SimplifiedLayerNormalization",
    1,
    2..=2,
    1..=2,
    skip_norm::eval_simplified_layer_norm,
)
.with_infer(activations::infer_like_input)
.with_prepare(prepare::<TrailingNorm>);

/// `FusedMatMul`, also registered under its older name `TransposeMatMul`.
const fn fused_matmul(name: &'static str) -> OpDef {
    OpDef::new(name, 1, 2..=2, 1..=1, fused::eval_fused_matmul)
        .with_infer(fused::infer_fused_matmul)
        .with_prepare(prepare::<fused::FusedMatMulAttrs>)
        .in_domain(DOMAIN)
}

pub(super) const DEFS: &[OpDef] = &[
    fused_matmul("FusedMatMul"),
    fused_matmul("TransposeMatMul"),
    OpDef::new("NhwcMaxPool", 1, 1..=1, 1..=1, nhwc::eval_nhwc_max_pool)
        .with_infer(nhwc::infer_nhwc_max_pool)
        .in_domain(DOMAIN),
    OpDef::new("FusedGemm", 1, 2..=3, 1..=1, fused::eval_fused_gemm)
        .with_infer(fused::infer_fused_gemm)
        .with_prepare(prepare::<super::nn::GemmAttrs>)
        .in_domain(DOMAIN),
    OpDef::new("Gelu", 1, 1..=1, 1..=1, activations::eval_gelu)
        .with_infer(activations::infer_like_input)
        .in_domain(DOMAIN),
    OpDef::new("FastGelu", 1, 1..=2, 1..=1, activations::eval_fast_gelu)
        .with_infer(activations::infer_like_input)
        .in_domain(DOMAIN),
    OpDef::new("BiasGelu", 1, 2..=2, 1..=1, activations::eval_bias_gelu)
        .with_infer(activations::infer_like_input)
        .in_domain(DOMAIN),
    OpDef::new("QuickGelu", 1, 1..=1, 1..=1, activations::eval_quick_gelu)
        .with_infer(activations::infer_like_input)
        .with_prepare(prepare::<activations::QuickGeluAlpha>)
        .in_domain(DOMAIN),
    OpDef::new("BiasAdd", 1, 3..=3, 1..=1, activations::eval_bias_add)
        .with_infer(activations::infer_like_input)
        .in_domain(DOMAIN),
    OpDef::new(
        "SkipLayerNormalization",
        1,
        3..=5,
        1..=4,
        skip_norm::eval_skip_layer_norm,
    )
    .with_infer(skip_norm::infer_skip_norm)
    .with_prepare(prepare::<Epsilon12>)
    .in_domain(DOMAIN),
    OpDef::new(
        "SkipSimplifiedLayerNormalization",
        1,
        3..=4,
        1..=4,
        skip_norm::eval_skip_simplified_layer_norm,
    )
    .with_infer(skip_norm::infer_skip_norm)
    .with_prepare(prepare::<Epsilon12>)
    .in_domain(DOMAIN),
    SIMPLIFIED_LAYER_NORM.in_domain(DOMAIN),
    SIMPLIFIED_LAYER_NORM,
    OpDef::new(
        "QLinearSigmoid",
        1,
        4..=5,
        1..=1,
        qlinear::eval_qlinear_sigmoid,
    )
    .with_infer(activations::infer_like_input)
    .in_domain(DOMAIN),
    OpDef::new(
        "QLinearLeakyRelu",
        1,
        4..=5,
        1..=1,
        qlinear::eval_qlinear_leaky_relu,
    )
    .with_infer(activations::infer_like_input)
    .in_domain(DOMAIN),
    OpDef::new(
        "Attention",
        1,
        2..=7,
        1..=2,
        multi_head_attention::eval_attention,
    )
    .with_infer(multi_head_attention::infer_float_outputs)
    .in_domain(DOMAIN),
    OpDef::new(
        "QAttention",
        1,
        5..=9,
        1..=2,
        multi_head_attention::eval_qattention,
    )
    .with_infer(multi_head_attention::infer_float_outputs)
    .in_domain(DOMAIN),
    OpDef::new(
        "MultiHeadAttention",
        1,
        1..=10,
        1..=4,
        multi_head_attention::eval_multi_head_attention,
    )
    .with_infer(multi_head_attention::infer_float_outputs)
    .in_domain(DOMAIN),
    OpDef::new(
        "GroupQueryAttention",
        1,
        7..=12,
        1..=4,
        multi_head_attention::eval_group_query_attention,
    )
    .with_infer(multi_head_attention::infer_float_outputs)
    .in_domain(DOMAIN),
    OpDef::new(
        "RotaryEmbedding",
        1,
        4..=4,
        1..=1,
        rotary_embedding::eval_rotary_embedding,
    )
    .with_infer(activations::infer_like_input)
    .in_domain(DOMAIN),
    OpDef::new(
        "EmbedLayerNormalization",
        1,
        7..=9,
        2..=3,
        embed_norm::eval_embed_layer_norm,
    )
    .with_infer(multi_head_attention::infer_embed_outputs)
    .with_prepare(prepare::<Epsilon12>)
    .in_domain(DOMAIN),
    OpDef::new("QLinearAdd", 1, 7..=8, 1..=1, qlinear::eval_qlinear_add)
        .with_infer(multi_head_attention::infer_first_input_type)
        .in_domain(DOMAIN),
    OpDef::new("QLinearMul", 1, 7..=8, 1..=1, qlinear::eval_qlinear_mul)
        .with_infer(multi_head_attention::infer_first_input_type)
        .in_domain(DOMAIN),
    OpDef::new(
        "QLinearConcat",
        1,
        5..=usize::MAX,
        1..=1,
        qlinear::eval_qlinear_concat,
    )
    .with_infer(multi_head_attention::infer_first_input_type)
    .in_domain(DOMAIN),
    OpDef::new(
        "QLinearSoftmax",
        1,
        4..=5,
        1..=1,
        qsoftmax::eval_qlinear_softmax,
    )
    .with_infer(multi_head_attention::infer_first_input_type)
    .in_domain(DOMAIN),
    OpDef::new(
        "QLinearGlobalAveragePool",
        1,
        4..=5,
        1..=1,
        qlinear::eval_qlinear_global_average_pool,
    )
    .with_infer(multi_head_attention::infer_first_input_type)
    .in_domain(DOMAIN),
    OpDef::new(
        "MatMulIntegerToFloat",
        1,
        4..=7,
        1..=1,
        quant_matmul::eval_matmul_integer_to_float,
    )
    .with_infer(multi_head_attention::infer_float_outputs)
    .in_domain(DOMAIN),
    OpDef::new("QGemm", 1, 6..=9, 1..=1, qgemm::eval_qgemm)
        .with_infer(qgemm::infer_qgemm)
        .in_domain(DOMAIN),
    OpDef::new(
        "DynamicQuantizeMatMul",
        1,
        3..=5,
        1..=1,
        quant_matmul::eval_dynamic_quantize_matmul,
    )
    .with_infer(multi_head_attention::infer_float_outputs)
    .in_domain(DOMAIN),
    OpDef::new(
        "DynamicQuantizeLSTM",
        1,
        12..=12,
        0..=3,
        quant_lstm::eval_dynamic_quantize_lstm,
    )
    .with_infer(super::rnn::infer_lstm_transposed)
    .with_prepare(super::rnn::prepare_lstm_transposed)
    .in_domain(DOMAIN),
    OpDef::new(
        "GatherBlockQuantized",
        1,
        3..=4,
        1..=1,
        quant_matmul::eval_gather_block_quantized,
    )
    .with_infer(multi_head_attention::infer_float_outputs)
    .in_domain(DOMAIN),
    OpDef::new(
        "MatMulNBits",
        1,
        3..=6,
        1..=1,
        quant_matmul::eval_matmul_nbits,
    )
    .with_infer(multi_head_attention::infer_float_outputs)
    .in_domain(DOMAIN),
];
