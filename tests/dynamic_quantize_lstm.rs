//! A dynamically quantised LSTM (`com.microsoft.DynamicQuantizeLSTM`, made by onnxruntime's
//! `quantize_dynamic` from a float bidirectional LSTM with `sequence_lens` and initial states,
//! `fixtures/dynamic_quantize_lstm/generate.py`) followed by a Gather: the interpreter agrees with
//! the outputs onnxruntime recorded, and the rewrite turns the Gather into `GatherMultiaxis`
//! while leaving the LSTM node and its domain import alone.

mod common;

#[test]
fn dynamic_quantize_lstm_fixture_matches_onnxruntime_and_survives_the_rewrite() {
    let model = common::check_recorded_fixture("dynamic_quantize_lstm", 1);
    let lstm: Vec<_> = model
        .graph
        .nodes()
        .filter(|(_, n)| n.op_type == "DynamicQuantizeLSTM")
        .map(|(_, n)| n.domain.clone())
        .collect();
    assert_eq!(lstm, ["com.microsoft"]);
    assert!(model
        .opset_imports
        .iter()
        .any(|i| i.domain.as_deref() == Some("com.microsoft")));
}
