//! What several integration tests share: finding the models they run on.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

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
