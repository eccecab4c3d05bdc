//! What several integration tests share: finding the models they run on.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use multigather::interp::Session;
use multigather::io::files::{read_inputs_dir, read_outputs_dir};
use multigather::verify::close_enough;

/// Every `.onnx` file under `dir`, sorted, recursively.
pub fn models_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            models_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "onnx") {
            out.push(path);
        }
    }
}

/// The project's `fixtures/` directory.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Every fixture model, plus every `.onnx` file in the directories listed in
/// `MULTIGATHER_EXTRA_MODELS` (colon-separated; CI points it at third-party models it downloads).
pub fn all_models() -> Vec<PathBuf> {
    let mut models = Vec::new();
    models_under(&fixtures_dir(), &mut models);
    if let Ok(extra) = std::env::var("MULTIGATHER_EXTRA_MODELS") {
        for dir in extra.split(':').filter(|d| !d.is_empty()) {
            models_under(Path::new(dir), &mut models);
        }
    }
    models
}

/// Runs the fixture `fixtures/<name>/model.onnx` on its `test_data_set_0` inputs and checks
/// the outputs against the ones recorded there (`close_enough`); then rewrites its gathers,
/// checks that `rewritten` of them were, and that the rewritten model computes the same bits.
/// Returns the rewritten model, for the caller's checks of what the rewrite left alone.
pub fn check_recorded_fixture(name: &str, rewritten: usize) -> multigather::ir::Model {
    use multigather::pass::{GatherToMultiaxis, RewriteConfig};

    let dir = fixtures_dir().join(name);
    let mut model = multigather::io::load(dir.join("model.onnx")).unwrap();
    let data = dir.join("test_data_set_0");
    let inputs = read_inputs_dir(&model.graph, &data).unwrap();
    let expected = read_outputs_dir(&data).unwrap();
    let got = Session::new(&model).run(inputs.clone()).unwrap();
    assert_eq!(got.len(), expected.len());
    for (k, (want, (_, got))) in expected.iter().zip(&got).enumerate() {
        close_enough(want, got).unwrap_or_else(|why| panic!("{name}, output {k}: {why}"));
    }
    let report = GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).unwrap();
    assert_eq!(report.rewritten, rewritten, "{name}");
    let after = Session::new(&model).run(inputs).unwrap();
    assert_eq!(
        after, got,
        "{name}: the rewritten model computes other bits"
    );
    model
}

/// Runs one node-test directory (`model.onnx` and `test_data_set_N/`) in the interpreter and
/// compares every output within the tolerance of the conformance tests; the error says which data
/// set and output failed. Sequences and optionals are read from their `SequenceProto` /
/// `OptionalProto` files and compared element by element.
pub fn run_node_test(dir: &Path) -> Result<(), String> {
    use multigather::io::files::{read_input_values, read_output_values};
    use multigather::verify::close_enough_values;

    let model = multigather::io::load(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let session = Session::new(&model);
    let declared = session.output_types().map_err(|e| e.to_string())?;
    let mut sets: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    for set in sets {
        let inputs = read_input_values(&model.graph, &set).map_err(|e| e.to_string())?;
        let expected = read_output_values(&set, &declared).map_err(|e| e.to_string())?;
        let actual = session.run_values(inputs).map_err(|e| e.to_string())?;
        for (k, want) in expected.iter().enumerate() {
            let (_, got) = actual.get(k).ok_or(format!("output {k} missing"))?;
            close_enough_values(want, got)
                .map_err(|why| format!("{}: output {k}: {why}", set.display()))?;
        }
    }
    Ok(())
}
