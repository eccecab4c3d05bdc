//! The command line end to end: output, JSON, exit codes and one-line errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn multigather(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_multigather"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
        .join("model.onnx")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn inspect_prints_the_text_form() {
    let out = multigather(&["inspect", fixture("gather_axis1").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("gather_axis1 (float[4,3] data, int64[5] indices) => (float[4,5] output)")
    );
    assert!(text.contains("[gather_axis1] output = Gather <axis: int = 1> (data, indices)"));
}

#[test]
fn inspect_json_summarises_ops_and_io() {
    let out = multigather(&[
        "inspect",
        fixture("gather_chain").to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nodes"], 3);
    assert_eq!(v["ops"]["GatherND"], 1);
    assert_eq!(v["inputs"][0]["name"], "data");
    assert_eq!(v["inputs"][0]["type"], "float[6,5]");
    assert_eq!(v["outputs"][0]["type"], "float[2]");
}

#[test]
fn rewrite_writes_the_model_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.onnx");
    let out = multigather(&[
        "rewrite",
        fixture("gather_in_if").to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).starts_with("rewrote 2 gather node(s), skipped 0"));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["rewritten"], 2);
    assert_eq!(report["nodes"][0]["outcome"], "rewritten");
    assert_eq!(
        report["nodes"][0]["scope"],
        "gather_in_if/branch.else_branch"
    );
    let model = multigather::io::load(&out_path).unwrap();
    assert_eq!(
        model.op_histogram().get("multigather.GatherMultiaxis"),
        Some(&2)
    );
}

#[test]
fn errors_are_one_line_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.onnx");
    let out = multigather(&["inspect", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: loading "), "{err}");
    assert!(err.contains("missing.onnx"), "{err}");

    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\xff\xff\xff\xff not a model").unwrap();
    let out = multigather(&["inspect", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a valid ONNX model"),
        "{}",
        stderr(&out)
    );

    let out = multigather(&[
        "rewrite",
        fixture("gather_axis0").to_str().unwrap(),
        "-o",
        dir.path().join("o.onnx").to_str().unwrap(),
        "--ops",
        "Gahter",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown op kind 'Gahter'"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.path().join("o.onnx").exists());
}

#[test]
fn rewrite_refuses_to_overwrite_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.onnx");
    std::fs::copy(fixture("gather_axis0"), &model).unwrap();
    let before = std::fs::read(&model).unwrap();
    let out = multigather(&[
        "rewrite",
        model.to_str().unwrap(),
        "-o",
        model.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--in-place"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&model).unwrap(), before);

    let out = multigather(&[
        "rewrite",
        model.to_str().unwrap(),
        "-o",
        model.to_str().unwrap(),
        "--in-place",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_ne!(std::fs::read(&model).unwrap(), before);
}

#[test]
fn help_and_version() {
    let out = multigather(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("Examples:"), "{help}");
    let out = multigather(&["--version"]);
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("multigather "));
}
