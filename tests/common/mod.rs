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

/// Runs one node-test directory (`model.onnx` and `test_data_set_N/`) in the interpreter and
/// compares every output within the tolerance of the conformance tests; the error says which data
/// set and output failed.
pub fn run_node_test(dir: &Path) -> Result<(), String> {
    let model = multigather::io::load(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let session = Session::new(&model);
    let mut sets: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    for set in sets {
        let inputs = read_inputs_dir(&model.graph, &set).map_err(|e| e.to_string())?;
        let expected = read_outputs_dir(&set).map_err(|e| e.to_string())?;
        let actual = session.run(inputs).map_err(|e| e.to_string())?;
        for (k, want) in expected.iter().enumerate() {
            let (_, got) = actual.get(k).ok_or(format!("output {k} missing"))?;
            close_enough(want, got)
                .map_err(|why| format!("{}: output {k}: {why}", set.display()))?;
        }
    }
    Ok(())
}
