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
        .join("../fixtures")
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

fn data_set(name: &str) -> PathBuf {
    fixture(name).with_file_name("test_data_set_0")
}

#[test]
fn run_writes_outputs_that_match_the_recorded_ones() {
    let out_dir = std::env::temp_dir().join(format!("mg-cli-run-{}", std::process::id()));
    let out = multigather(&[
        "run",
        fixture("gathernd_batch1").to_str().unwrap(),
        "--inputs",
        data_set("gathernd_batch1").to_str().unwrap(),
        "--output-dir",
        out_dir.to_str().unwrap(),
        "--repeat",
        "3",
        "--threads",
        "1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"], 3);
    assert!(v["median_s"].as_f64().unwrap() >= v["min_s"].as_f64().unwrap());
    assert_eq!(v["outputs"][0]["dtype"], "float");
    let written = std::fs::read(out_dir.join("output_0.pb")).unwrap();
    let recorded = std::fs::read(data_set("gathernd_batch1").join("output_0.pb")).unwrap();
    let decode = |b: Vec<u8>| {
        let t = multigather::proto::decode_tensor(b.into()).unwrap();
        multigather::ir::stored_to_tensor(&t).unwrap()
    };
    assert_eq!(decode(written), decode(recorded));
    std::fs::remove_dir_all(out_dir).ok();
}

#[test]
fn run_names_a_missing_input() {
    let out = multigather(&["run", fixture("gather_axis0").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("input 'data' is not given"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn verify_proves_a_rewrite_bit_for_bit() {
    let out = multigather(&[
        "verify",
        fixture("gather_elements_smaller_indices").to_str().unwrap(),
        "--inputs",
        data_set("gather_elements_smaller_indices")
            .to_str()
            .unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["identical"], true);
    assert_eq!(v["rewritten_nodes"], 1);
    let random = multigather(&[
        "verify",
        fixture("gather_symbolic_dims").to_str().unwrap(),
        "--random",
        "--seed",
        "3",
        "--dim",
        "batch=2",
        "--dim",
        "sequence=7",
    ]);
    assert!(random.status.success(), "{}", stderr(&random));
}

/// `verify MODEL` with no other argument proves the rewrite of every fixture: the draws find
/// index ranges through edge lists, scatters and function calls, and sizes the models take.
#[test]
fn verify_with_no_arguments_proves_every_fixture() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut models: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().join("model.onnx"))
        .filter(|p| p.is_file())
        .collect();
    models.sort();
    assert!(models.len() >= 30, "fixtures are missing");
    for model in &models {
        let out = multigather(&["verify", model.to_str().unwrap(), "--json"]);
        assert!(
            out.status.success(),
            "{}: {}",
            model.display(),
            stderr(&out)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["identical"], true, "{}", model.display());
        // Every `If` of a fixture is decided by an input or a constant: both branches run.
        for b in v["branches"].as_array().unwrap() {
            assert!(
                b["then_branch"].is_string() && b["else_branch"].is_string(),
                "{}: {b}",
                model.display()
            );
        }
        // The command line prints the library's proof (verdict, draws, dims, comparisons), as
        // the Python package returns it (`python/tests/test_verify_faces.py`).
        let proof = library_proof(model).unwrap();
        assert_eq!(
            v,
            serde_json::to_value(&proof).unwrap(),
            "{}",
            model.display()
        );
    }
}

/// The proof `multigather verify MODEL` makes, made by the library.
fn library_proof(model: &Path) -> multigather::Result<multigather::verify::Proof> {
    let original = multigather::io::load(model)?;
    let draw = multigather::verify::DrawOptions::default();
    multigather::verify::prove_rewrite(&original, &draw, &Default::default())
}

/// When a proof fails, the command line's error line is the library's error: an operator the
/// interpreter lacks, and a model no drawn size runs (a `Reshape` of `x[n]` to `[3]`, which no
/// searched size, a power of two, satisfies).
#[test]
fn verify_prints_the_library_error_when_a_proof_fails() {
    use multigather::ir::{Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
    let dir = tempfile::tempdir().unwrap();
    let mut g = Graph::new("main");
    let n = vec![Dim::Symbolic("n".into())];
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(multigather::DataType::Float, n),
    ));
    g.outputs.push(ValueInfo::untyped("z"));
    g.initializers
        .push(StoredTensor::from_i64s(Some("shape"), &[1], &[3]));
    g.add_node(Node::new("Reshape", "r", ["x", "shape"], ["z"]));
    let no_draw = dir.path().join("no_draw.onnx");
    multigather::io::save(&Model::new(g, 13), &no_draw).unwrap();
    for (model, wanted) in [
        (
            model_with_an_unknown_operator(dir.path()),
            "cannot prove the rewrite by running it (1 gathers rewritten",
        ),
        (
            no_draw,
            "running the original model on drawn inputs x float[1] with n=1 (also tried n = ",
        ),
    ] {
        let message = library_proof(&model).unwrap_err().to_string();
        assert!(message.starts_with(wanted), "{message}");
        let out = multigather(&["verify", model.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(stderr(&out).trim_end(), format!("error: {message}"));
    }
}

/// `verify ORIGINAL --rewritten FILE EXTRA...`, FILE being `model` saved to a temporary file
/// named after `tag`.
fn verify_against(
    original: &Path,
    model: &multigather::ir::Model,
    tag: &str,
    extra: &[&str],
) -> Output {
    let file = std::env::temp_dir().join(format!("mg-cli-{tag}-{}.onnx", std::process::id()));
    multigather::io::save(model, &file).unwrap();
    let mut args = vec![
        "verify",
        original.to_str().unwrap(),
        "--rewritten",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = multigather(&args);
    std::fs::remove_file(&file).ok();
    out
}

#[test]
fn verify_runs_each_branch_that_a_sample_rate_constant_names() {
    // `If(Equal(sr, 16000))`: a draw in [-100, 100) takes only the else branch; the constant
    // names the draw that takes the other.
    let model = fixture("if_sample_rate");
    let out = multigather(&["verify", model.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("If 'check_sr': then_branch ran (sr = 16000), else_branch ran (drawn inputs)"),
        "{err}"
    );
    let out = multigather(&["verify", model.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["branches"],
        serde_json::json!([{
            "node": "check_sr",
            "then_branch": "sr = 16000",
            "else_branch": "drawn inputs",
            "failed": null
        }])
    );
}

#[test]
fn verify_compares_the_branch_that_only_a_branch_draw_takes() {
    // A rewritten model whose 16 kHz window was tampered with differs only when sr = 16000.
    let original = fixture("if_sample_rate");
    let mut model = multigather::io::load(&original).unwrap();
    multigather::pass::GatherToMultiaxis::rewrite(&mut model, Default::default()).unwrap();
    let window = model
        .graph
        .initializers
        .iter_mut()
        .find(|t| t.name.as_deref() == Some("window_16k"))
        .unwrap();
    *window = multigather::ir::StoredTensor::from_i64s(Some("window_16k"), &[4], &[1, 3, 5, 7]);
    let out = verify_against(&original, &model, "branch", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains("output (sr = 16000)"), "{text}");
}

#[test]
fn verify_fails_with_exit_1_when_the_rewritten_model_differs() {
    // A rewritten model whose embedding table was tampered with: a failed proof, not an error.
    let original = fixture("gather_initializer_data");
    let mut model = multigather::io::load(&original).unwrap();
    multigather::pass::GatherToMultiaxis::rewrite(&mut model, Default::default()).unwrap();
    let table = &mut model.graph.initializers[0];
    let bytes = table
        .le_bytes()
        .unwrap()
        .iter()
        .map(|b| b ^ 0x40)
        .collect::<Vec<u8>>();
    table.payload = multigather::ir::Payload::Raw(bytes.into());
    let out = verify_against(&original, &model, "tampered", &["--random"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains("output"), "{text}");
    // The verdict names the file compared with, not a count of rewrites that did not happen.
    let err = stderr(&out);
    assert!(
        err.contains("DIFFERENT") && err.contains("(against "),
        "{err}"
    );
    assert!(!err.contains("gathers rewritten"), "{err}");
}

#[test]
fn verify_catches_a_rewrite_that_trusts_a_shared_dim_name() {
    // GatherElements(x[B,5,H], i[B,2,H]) and a rewrite without the crop, which agrees with it
    // while both H are equal: the proof also feeds H apart and finds the difference.
    use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
    use multigather::DataType;
    let s = |n: &str| Dim::Symbolic(n.into());
    let model = |node: Node| {
        let mut g = Graph::new("g");
        g.inputs.push(ValueInfo::new(
            "x",
            Type::tensor(DataType::Float, vec![s("B"), Dim::Known(5), s("H")]),
        ));
        g.inputs.push(ValueInfo::new(
            "i",
            Type::tensor(DataType::Int64, vec![s("B"), Dim::Known(2), s("H")]),
        ));
        g.outputs.push(ValueInfo::untyped("y"));
        g.add_node(node);
        let mut m = Model::new(g, 13);
        m.ensure_opset("multigather", 1);
        m
    };
    let dir = tempfile::tempdir().unwrap();
    let (original, wrong) = (dir.path().join("o.onnx"), dir.path().join("w.onnx"));
    let elements =
        Node::new("GatherElements", "pick", ["x", "i"], ["y"]).with_attr("axis", AttrValue::Int(1));
    let uncropped = Node::new("GatherMultiaxis", "pick", ["x", "i"], ["y"])
        .with_domain("multigather")
        .with_attr("axes", AttrValue::Ints(vec![1]));
    multigather::io::save(&model(elements), &original).unwrap();
    multigather::io::save(&model(uncropped), &wrong).unwrap();
    let (original, wrong) = (original.to_str().unwrap(), wrong.to_str().unwrap());
    let out = multigather(&["verify", original, "--rewritten", wrong]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains("(with B, H fed apart)"), "{text}");
    let out = multigather(&["verify", original]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn json_reports_are_json_whatever_the_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.onnx");
    let mut model = model_with_control_characters();
    model.graph.name = "abc\u{202e}fed\u{9b}".into();
    multigather::io::save(&model, &path).unwrap();
    let out = multigather(&["inspect", path.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_no_controls(&out.stdout);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains("\\u{") && !text.contains('\u{202e}') && !text.contains('\u{9b}'),
        "{text}"
    );
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(value.is_object(), "{text}");
}

#[test]
fn test_runs_a_test_data_directory() {
    let dir = fixture("gather_axis1");
    let out = multigather(&["test", dir.parent().unwrap().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("ok   gather_axis1"), "{text}");
    assert!(text.ends_with("1 passed, 0 failed, 0 skipped\n"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Output streams and terminals.

/// A model whose names carry terminal control sequences: a node that would set the window
/// title, an input that would erase the line it is printed on.
fn model_with_control_characters() -> multigather::ir::Model {
    use multigather::ir::{Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
    use multigather::DataType;
    let mut g = Graph::new("g\x07");
    g.inputs.push(ValueInfo::new(
        "ids\x1b[2K\r",
        Type::tensor(DataType::Int64, vec![Dim::Known(2)]),
    ));
    g.outputs.push(ValueInfo::new(
        "rows",
        Type::tensor(DataType::Float, vec![Dim::Known(2)]),
    ));
    g.initializers.push(StoredTensor::raw(
        Some("table"),
        DataType::Float,
        &[3],
        bytes::Bytes::from(vec![0u8; 12]),
    ));
    g.add_node(Node::new(
        "Gather",
        "\x1b]0;pwned\x07lookup",
        ["table", "ids\x1b[2K\r"],
        ["rows"],
    ));
    Model::new(g, 13)
}

/// No byte of `text` is a control character but newline.
fn assert_no_controls(text: &[u8]) {
    let bad: Vec<u8> = text
        .iter()
        .copied()
        .filter(|&b| (b < 0x20 && b != b'\n') || b == 0x7f)
        .collect();
    assert!(
        bad.is_empty(),
        "control bytes {bad:?} in {}",
        String::from_utf8_lossy(text)
    );
}

#[test]
fn control_characters_in_names_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.onnx");
    multigather::io::save(&model_with_control_characters(), &path).unwrap();
    let path = path.to_str().unwrap();

    let out = multigather(&["inspect", path]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_no_controls(&out.stdout);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(r#""\x1b]0;pwned\x07lookup""#), "{text}");

    // The rewrite report names the node it skipped.
    let output = dir.path().join("out.onnx");
    let out = multigather(&[
        "rewrite",
        path,
        "-o",
        output.to_str().unwrap(),
        "--skip",
        "pwned",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_no_controls(&out.stderr);
    assert!(
        stderr(&out).contains(r"\x1b]0;pwned\x07lookup"),
        "{}",
        stderr(&out)
    );

    // An error names the input.
    let out = multigather(&["run", path]);
    assert_eq!(out.status.code(), Some(2));
    assert_no_controls(&out.stderr);
    let err = stderr(&out);
    assert!(err.contains(r"ids\x1b[2K\x0d"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn inspect_into_a_closed_pipe() {
    use multigather::ir::{Graph, Model, Node, ValueInfo};
    use std::io::Read;
    use std::process::Stdio;
    // A text form far larger than a pipe's buffer, so the writer is still writing when the
    // reader leaves.
    let mut g = Graph::new("chain");
    g.inputs.push(ValueInfo::untyped("v0"));
    for i in 0..5000 {
        let (from, to) = (format!("v{i}"), format!("v{}", i + 1));
        g.add_node(Node::new("Identity", &format!("step_{i}"), [from], [to]));
    }
    g.outputs.push(ValueInfo::untyped("v5000"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain.onnx");
    multigather::io::save(&Model::new(g, 13), &path).unwrap();
    // `multigather inspect chain.onnx | head -c 1`: the reader leaves after one byte.
    let mut child = Command::new(env!("CARGO_BIN_EXE_multigather"))
        .args(["inspect", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "a closed pipe ends quietly");
}

#[test]
fn printing_to_a_full_device() {
    for args in [
        &["inspect", fixture("kitchen_sink").to_str().unwrap()][..],
        &[
            "inspect",
            fixture("kitchen_sink").to_str().unwrap(),
            "--json",
        ],
        &[
            "test",
            fixture("gather_axis1").parent().unwrap().to_str().unwrap(),
        ],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_multigather"))
            .args(args)
            .stdout(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(
            stderr(&out),
            "error: writing to standard output: No space left on device (os error 28)\n"
        );
    }
}

#[test]
fn npy_with_a_duplicate_fortran_order_key() {
    let dir = tempfile::tempdir().unwrap();
    let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), 'fortran_order': True}";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    npy.extend_from_slice(&[0u8; 16]);
    let file = dir.path().join("data.npy");
    std::fs::write(&file, npy).unwrap();
    let out = multigather(&[
        "run",
        fixture("gather_axis0").to_str().unwrap(),
        "--input",
        &format!("indices={}", file.display()),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("data.npy"), "{err}");
    assert!(
        err.contains("the header gives 'fortran_order' twice"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// `test` passes only what it compared.

/// A test directory `name` holding the `gather_axis1` fixture's model, and its data set copied
/// under `set` (when given) with the listed files only.
fn test_dir(root: &Path, name: &str, set: Option<&str>, files: &[(&str, &str)]) -> PathBuf {
    let fixture_dir = fixture("gather_axis1");
    let fixture_dir = fixture_dir.parent().unwrap();
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture_dir.join("model.onnx"), dir.join("model.onnx")).unwrap();
    if let Some(set) = set {
        std::fs::create_dir(dir.join(set)).unwrap();
        for (from, to) in files {
            std::fs::copy(
                fixture_dir.join("test_data_set_0").join(from),
                dir.join(set).join(to),
            )
            .unwrap();
        }
    }
    dir
}

fn run_test(dir: &Path) -> (Option<i32>, String) {
    let out = multigather(&["test", dir.to_str().unwrap()]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn test_with_no_data_sets() {
    let root = tempfile::tempdir().unwrap();
    let dir = test_dir(root.path(), "t", None, &[]);
    let (code, text) = run_test(&dir);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL t: no test_data_set_N directory, so nothing was compared"),
        "{text}"
    );
    assert!(text.ends_with("0 passed, 1 failed, 0 skipped\n"), "{text}");
}

#[test]
fn test_with_a_misnamed_data_set_directory() {
    let root = tempfile::tempdir().unwrap();
    let files = [
        ("input_0.pb", "input_0.pb"),
        ("input_1.pb", "input_1.pb"),
        ("output_0.pb", "output_0.pb"),
    ];
    let dir = test_dir(root.path(), "t", Some("test_data_0"), &files);
    let (code, text) = run_test(&dir);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("nothing was compared (directories found: test_data_0)"),
        "{text}"
    );
}

#[test]
fn test_with_output_1_but_no_output_0() {
    let root = tempfile::tempdir().unwrap();
    let files = [
        ("input_0.pb", "input_0.pb"),
        ("input_1.pb", "input_1.pb"),
        ("output_0.pb", "output_1.pb"),
    ];
    let dir = test_dir(root.path(), "t", Some("test_data_set_0"), &files);
    let (code, text) = run_test(&dir);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("output_0.pb: missing, but output_1.pb is there"),
        "{text}"
    );
    // And with no output at all.
    std::fs::remove_file(dir.join("test_data_set_0/output_1.pb")).unwrap();
    let (code, text) = run_test(&dir);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("test_data_set_0: no output_K.pb, so nothing was compared"),
        "{text}"
    );
    // The control: the complete set passes.
    let files = [
        ("input_0.pb", "input_0.pb"),
        ("input_1.pb", "input_1.pb"),
        ("output_0.pb", "output_0.pb"),
    ];
    let good = test_dir(root.path(), "good", Some("test_data_set_0"), &files);
    let (code, text) = run_test(&good);
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn rewrite_with_verify_proves_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("rewritten.onnx");
    let out = multigather(&[
        "rewrite",
        fixture("gather_symbolic_dims").to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
        "--verify",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("verified: 1 outputs identical bit for bit"),
        "{err}"
    );
    assert!(out_path.exists());
}

/// A model with a gather and an unnamed operator the interpreter lacks (`NoSuchOp` in a domain
/// of its own).
fn model_with_an_unknown_operator(dir: &Path) -> PathBuf {
    use multigather::ir::{Dim, Graph, Model, Node, OpsetImport, StoredTensor, Type, ValueInfo};
    use multigather::DataType;
    let mut g = Graph::new("main");
    let f =
        |dims: Vec<i64>| Type::tensor(DataType::Float, dims.into_iter().map(Dim::Known).collect());
    g.inputs.push(ValueInfo::new("x", f(vec![3, 2])));
    g.outputs.push(ValueInfo::new("z", f(vec![2, 2])));
    g.initializers
        .push(StoredTensor::from_i64s(Some("i"), &[2], &[2, 0]));
    g.add_node(Node::new("Gather", "g", ["x", "i"], ["y"]));
    g.add_node(Node::new("NoSuchOp", "", ["y"], ["z"]).with_domain("example.custom"));
    let mut model = Model::new(g, 13);
    model.opset_imports.push(OpsetImport {
        domain: Some("example.custom".into()),
        version: 3,
    });
    let path = dir.join("unknown_op.onnx");
    multigather::io::save(&model, &path).unwrap();
    path
}

/// Issue 12: an operator the interpreter lacks is reported before anything runs, naming the
/// unnamed node by its position (never `at node ''`), the domain and the opset; `verify` says
/// the rewrite was made and checked statically, and `rewrite --verify` still writes it.
#[test]
fn unsupported_operator_at_an_unnamed_node() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_with_an_unknown_operator(dir.path());
    let out = multigather(&["verify", model.to_str().unwrap(), "--random"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("operator NoSuchOp (example.custom, opset 3) at unnamed node #1 of graph 'main', producing 'z'"),
        "{err}"
    );
    assert!(
        err.contains("1 gathers rewritten and checked statically"),
        "{err}"
    );
    assert!(!err.contains("node ''"), "{err}");

    let out_path = dir.path().join("rewritten.onnx");
    let out = multigather(&[
        "rewrite",
        model.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
        "--verify",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("not verified by running"), "{err}");
    assert!(err.contains("checked statically only"), "{err}");
    assert!(out_path.exists());
}

#[test]
fn lower_to_a_target_opset_without_the_gather_fails_in_one_line_and_writes_nothing() {
    let dir = std::env::temp_dir().join(format!("mg-cli-target-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rewritten = dir.join("rewritten.onnx");
    let lowered = dir.join("lowered.onnx");
    let fixture = fixture("gather_elements_axis1");
    let out = multigather(&[
        "rewrite",
        fixture.to_str().unwrap(),
        "-o",
        rewritten.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lower = |to: &str| {
        multigather(&[
            "lower",
            rewritten.to_str().unwrap(),
            "-o",
            lowered.to_str().unwrap(),
            "--target-opset",
            to,
        ])
    };
    let out = lower("10");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot lower to opset 10: node '")
            && err.contains("GatherElements needs opset 11"),
        "{err}"
    );
    assert!(!lowered.exists());
    let out = lower("11");
    assert!(out.status.success(), "{}", stderr(&out));
    let model = multigather::io::load(&lowered).unwrap();
    assert_eq!(model.opset(""), Some(11));
    std::fs::remove_dir_all(&dir).ok();
}
