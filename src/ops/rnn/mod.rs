//! The recurrent operators: `LSTM`, `GRU` and `RNN` (opsets 1, 7, 14; `GRU` also 3).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__LSTM.html>,
//! <https://onnx.ai/onnx/operators/onnx__GRU.html>,
//! <https://onnx.ai/onnx/operators/onnx__RNN.html>.
//!
//! Opset notes: one definition per operator covers every opset, because the versions differ only
//! in attributes the kernels read by opset: `layout` exists from 14 on, GRU's
//! `linear_before_reset` from 3 on, and `output_sequence` (before 7) changes nothing here since
//! `Y` is always computed. Later versions only widen the element types. `float`, `double`,
//! `float16` and `bfloat16` run (the last two computed in `f32`).
//!
//! Every kernel returns all its outputs (`Y`, `Y_h`, and `Y_c` for LSTM); the interpreter keeps
//! those the node names.
//!
//! Where the specification is silent or runtimes differ:
//! - `activation_alpha`/`activation_beta` are consumed in the order of the activations, each value
//!   by the next function that takes that parameter (as onnxruntime reads them).
//! - A missing parameter takes the default of the ONNX operator of the same name, as the
//!   specification says: `LeakyRelu` 0.01, `HardSigmoid` 0.2 and 0.5, `Elu` 1 (as onnxruntime),
//!   `Affine` 1 and 0, `ThresholdedRelu` 1 (onnxruntime uses 0 for both). `ScaledTanh` has no
//!   default, so its parameters are required (onnxruntime uses 0).
//! - `clip` bounds the input of every gate activation, not the cell state that `h` reads (as
//!   onnxruntime).
//! - Past a sequence's length `Y` is zero and `Y_h`/`Y_c` keep the state of its last step; a
//!   sequence of length zero has zero final states (as onnxruntime).
//! - `ThresholdedRelu` passes `x > alpha`, as the ONNX operator (the recurrent operators' table
//!   writes `>=`).

use super::{prepare, OpDef};
use schedule::Recurrent;

mod gru;
mod lstm;
mod math;
mod product;
mod schedule;
mod simple;

pub(super) use lstm::{
    eval_with as eval_lstm_with, infer_transposed as infer_lstm_transposed, Products,
};

/// The prepared attributes of onnxruntime's `DynamicQuantizeLSTM` (`ops::contrib`).
pub(super) fn prepare_lstm_transposed(
    node: &crate::ir::Node,
    opset: i64,
) -> crate::Result<super::Prepared> {
    prepare::<Recurrent<lstm::TransposedLstm>>(node, opset)
}

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("LSTM", 1, 3..=8, 0..=3, lstm::eval)
        .with_infer(lstm::infer)
        .with_prepare(prepare::<Recurrent<lstm::Lstm>>),
    OpDef::new("GRU", 1, 3..=6, 0..=2, gru::eval)
        .with_infer(gru::infer)
        .with_prepare(prepare::<Recurrent<gru::Gru>>),
    OpDef::new("RNN", 1, 3..=6, 0..=2, simple::eval)
        .with_infer(simple::infer)
        .with_prepare(prepare::<Recurrent<simple::Simple>>),
];
