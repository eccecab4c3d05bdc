//! Lossless round trip: load then save with no pass changes nothing.
//!
//! Every model under `fixtures/` is checked, plus every `.onnx` file in the directories listed in
//! `MULTIGATHER_EXTRA_MODELS` (colon-separated; CI points it at third-party models it downloads).

mod common;

use common::all_models;

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
