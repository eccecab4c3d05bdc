//! Meaning is kept: every fixture runs in the interpreter, agrees with the outputs onnxruntime
//! recorded for it (`test_data_set_0`, written by `fixtures/generate.py`), and its rewritten and
//! lowered forms produce exactly the same bits as the original.
//!
//! The original model runs the ONNX gathers (written directly from the ONNX definitions), the
//! rewritten one runs `GatherMultiaxis` (the fast kernel), the lowered one runs standard gathers
//! again through different shapes: three independent routes that must agree bit for bit.

mod common;

use std::path::Path;

use multigather::interp::Session;
use multigather::io::files::{read_inputs_dir, read_output_values};
use multigather::ir::{Model, Value};
use multigather::pass::{GatherToMultiaxis, LowerMultiaxis, RewriteConfig};
use multigather::verify::{close_enough_values, random_inputs};
use multigather::Tensor;

/// The outputs as users see them (`ZipMap`'s as sequences of maps).
fn run(model: &Model, inputs: &[(String, Tensor)], what: &str, path: &Path) -> Vec<Value> {
    Session::new(model)
        .run_values(inputs.to_vec())
        .unwrap_or_else(|e| panic!("{}: running the {what} model: {e}", path.display()))
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

/// Checks one fixture; returns how many gathers were rewritten.
fn check(path: &Path) -> usize {
    let model = multigather::io::load(path).unwrap();
    let data = path.with_file_name("test_data_set_0");
    let inputs = if data.is_dir() {
        read_inputs_dir(&model.graph, &data).unwrap()
    } else {
        random_inputs(&model, 1, &Default::default()).unwrap()
    };
    let original = run(&model, &inputs, "original", path);
    if data.is_dir() {
        let declared = Session::new(&model).output_types().unwrap();
        let recorded = read_output_values(&data, &declared).unwrap();
        assert_eq!(recorded.len(), original.len(), "{}", path.display());
        for (k, (want, got)) in recorded.iter().zip(&original).enumerate() {
            close_enough_values(want, got).unwrap_or_else(|why| {
                panic!("{} output {k} vs onnxruntime: {why}", path.display())
            });
        }
    }
    let mut rewritten = model.clone();
    let report = GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).unwrap();
    assert_eq!(
        run(&rewritten, &inputs, "rewritten", path),
        original,
        "{}: the rewritten model computes other bits",
        path.display()
    );
    let mut lowered = rewritten;
    LowerMultiaxis::lower(&mut lowered).unwrap();
    assert_eq!(
        run(&lowered, &inputs, "lowered", path),
        original,
        "{}: the lowered model computes other bits",
        path.display()
    );
    report.rewritten
}

#[test]
fn every_fixture_keeps_its_meaning_through_rewrite_and_lowering() {
    let mut models = Vec::new();
    common::models_under(&common::fixtures_dir(), &mut models);
    assert!(models.len() >= 30, "fixtures are missing");
    let rewritten: usize = models.iter().map(|p| check(p)).sum();
    assert!(
        rewritten >= models.len() - 2,
        "too few gathers rewritten: {rewritten}"
    );
}
