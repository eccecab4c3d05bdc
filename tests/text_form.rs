//! Snapshots of the text form of every fixture, as `multigather inspect` prints it.

#[test]
fn fixture_text_forms() {
    insta::glob!("../fixtures", "*/model.onnx", |path: &std::path::Path| {
        let model = multigather::io::load(path).unwrap();
        insta::assert_snapshot!(multigather::text::model_to_text(&model));
    });
}
