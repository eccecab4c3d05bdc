//! Lossless round trip: load then save with no pass changes nothing.
//!
//! Every model under `fixtures/` is checked, plus every `.onnx` file in the directories listed in
//! `MULTIGATHER_EXTRA_MODELS` (colon-separated; CI points it at third-party models it downloads).

use std::path::{Path, PathBuf};

fn models_under(dir: &Path, out: &mut Vec<PathBuf>) {
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

fn all_models() -> Vec<PathBuf> {
    let mut models = Vec::new();
    models_under(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
        &mut models,
    );
    if let Ok(extra) = std::env::var("MULTIGATHER_EXTRA_MODELS") {
        for dir in extra.split(':').filter(|d| !d.is_empty()) {
            models_under(Path::new(dir), &mut models);
        }
    }
    models
}

#[test]
fn load_then_save_is_lossless() {
    let models = all_models();
    assert!(!models.is_empty(), "no fixtures found");
    for path in models {
        let original = std::fs::read(&path).unwrap();
        let model =
            multigather::io::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        model
            .validate()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let saved = multigather::io::to_bytes(&model).unwrap();
        let same = multigather::proto::same_model_message(&original, &saved).unwrap();
        assert!(
            same,
            "{}: round trip changed the model: {:?}",
            path.display(),
            multigather::proto::first_difference(&original, &saved)
        );
    }
}
