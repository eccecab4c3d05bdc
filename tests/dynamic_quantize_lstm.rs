//! A dynamically quantised LSTM (`com.microsoft.DynamicQuantizeLSTM`, made by onnxruntime's
//! `quantize_dynamic` from a float bidirectional LSTM with `sequence_lens` and initial states,
//! `fixtures/dynamic_quantize_lstm/generate.py`) followed by a Gather: the interpreter agrees with
//! the outputs onnxruntime recorded, and the rewrite turns the Gather into `GatherMultiaxis`
//! while leaving the LSTM node and its domain import alone.

use std::path::Path;

use multigather::interp::Session;
use multigather::io::files::{read_inputs_dir, read_outputs_dir};
use multigather::pass::{GatherToMultiaxis, RewriteConfig};
use multigather::verify::close_enough;

#[test]
fn dynamic_quantize_lstm_fixture_matches_onnxruntime_and_survives_the_rewrite() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/dynamic_quantize_lstm");
    let mut model = multigather::io::load(dir.join("model.onnx")).unwrap();
    let data = dir.join("test_data_set_0");
    let inputs = read_inputs_dir(&model.graph, &data).unwrap();
    let expected = read_outputs_dir(&data).unwrap();
    let got = Session::new(&model).run(inputs.clone()).unwrap();
    assert_eq!(got.len(), expected.len());
    for (k, (want, (_, got))) in expected.iter().zip(&got).enumerate() {
        close_enough(want, got).unwrap_or_else(|why| panic!("output {k}: {why}"));
    }

    let report = GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).unwrap();
    assert_eq!(report.rewritten, 1);
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
    let rewritten = Session::new(&model).run(inputs).unwrap();
    assert_eq!(rewritten, got, "the rewritten model computes other bits");
}
