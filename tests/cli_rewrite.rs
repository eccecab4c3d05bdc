//! The command line on crafted models: an invalid gather is an error that writes nothing (and
//! `inspect` still shows the model), and a negative `dim_value` is an unknown size for `run`,
//! `verify` and `rewrite`.

use std::path::Path;
use std::process::{Command, Output};

use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
use multigather::{DataType, Tensor};

fn multigather(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_multigather"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `Gather(x: float[dims], i: int64[2], axis)` saved to `path`.
fn gather_model(path: &Path, dims: &[i64], axis: i64) {
    let mut g = Graph::new("main");
    let dims = dims.iter().map(|&d| Dim::Known(d)).collect();
    g.inputs = vec![
        ValueInfo::new("x", Type::tensor(DataType::Float, dims)),
        ValueInfo::new("i", Type::tensor(DataType::Int64, vec![Dim::Known(2)])),
    ];
    g.outputs = vec![ValueInfo::untyped("y")];
    g.add_node(
        Node::new("Gather", "pick", ["x", "i"], ["y"]).with_attr("axis", AttrValue::Int(axis)),
    );
    multigather::io::save(&Model::new(g, 13), path).unwrap();
}

#[test]
fn rewrite_of_an_invalid_gather_exits_2_naming_the_node_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("axis7.onnx");
    gather_model(&model, &[3, 4], 7);
    let out_path = dir.path().join("out.onnx");
    let out = multigather(&[
        "rewrite",
        model.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("node 'pick' (Gather): Gather: axis = 7 is invalid"),
        "{err}"
    );
    assert!(!out_path.exists());
    // Showing a broken model is a legitimate use.
    let out = multigather(&["inspect", model.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("axis: int = 7"));
}

#[test]
fn negative_dim_value_is_unknown_to_run_verify_and_rewrite() {
    // PaddlePaddle exports write -1 for a dynamic dimension.
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("paddle.onnx");
    gather_model(&model, &[-1, 4], 1);
    let x = dir.path().join("x.pb");
    let data = Tensor::from_vec(
        DataType::Float,
        &[3, 4],
        (0..12).map(|v| v as f32).collect(),
    )
    .unwrap();
    multigather::interp::files::write_tensor_pb(&x, "x", &data).unwrap();
    let i = dir.path().join("i.pb");
    let idx = Tensor::from_vec(DataType::Int64, &[2], vec![3i64, -4]).unwrap();
    multigather::interp::files::write_tensor_pb(&i, "i", &idx).unwrap();
    let outputs = dir.path().join("outputs");
    let out = multigather(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        &format!("x={}", x.display()),
        "--input",
        &format!("i={}", i.display()),
        "--output-dir",
        outputs.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = multigather(&["verify", model.to_str().unwrap(), "--random"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(text.contains("identical: 1 outputs"), "{text}");

    let rewritten = dir.path().join("rewritten.onnx");
    let out = multigather(&[
        "rewrite",
        model.to_str().unwrap(),
        "-o",
        rewritten.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("rewrote 1 gather node(s), skipped 0"),
        "{}",
        stderr(&out)
    );
    // Saved as it was: the round trip is lossless.
    let back = multigather::io::load(&rewritten).unwrap();
    assert_eq!(
        back.graph.inputs[0]
            .tensor_type()
            .unwrap()
            .shape
            .as_ref()
            .unwrap()
            .dims[0],
        Dim::Known(-1)
    );
}
