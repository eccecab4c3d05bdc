//! The command line on crafted models: an invalid gather is an error that writes nothing (and
//! `inspect` still shows the model), a negative `dim_value` is an unknown size for `run`,
//! `verify` and `rewrite`, `verify` draws inputs the model can take (index inputs within the
//! indexed dim, symbolic dims as the graph requires or searched, some inputs given) and says what
//! it drew, and `rewrite --diff` prints a stable diff.

use std::path::Path;
use std::process::{Command, Output};

use multigather::ir::{AttrValue, Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
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
    multigather::io::files::write_tensor_pb(&x, "x", &data).unwrap();
    let i = dir.path().join("i.pb");
    let idx = Tensor::from_vec(DataType::Int64, &[2], vec![3i64, -4]).unwrap();
    multigather::io::files::write_tensor_pb(&i, "i", &idx).unwrap();
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

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A type from `"2,n,?"` (known, symbolic, unknown dims).
fn ty(elem: DataType, dims: &str) -> Type {
    let dims = dims
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| match d.parse::<i64>() {
            Ok(n) => Dim::Known(n),
            Err(_) if d == "?" => Dim::Unknown,
            Err(_) => Dim::Symbolic(d.into()),
        })
        .collect();
    Type::tensor(elem, dims)
}

/// A graph network's message step: `edges: int64[2, e]` are node numbers into `x: float[n, 8]`,
/// reached through `Cast` (int32 and back), `Reshape` and `Add` of the constant 1 (the ids are
/// stored one less), then `Gather(x, ids, axis 0)`.
fn edge_gather_model(path: &Path) {
    let mut g = Graph::new("main");
    g.inputs = vec![
        ValueInfo::new("x", ty(DataType::Float, "n,8")),
        ValueInfo::new("edges", ty(DataType::Int64, "2,e")),
    ];
    g.outputs = vec![ValueInfo::untyped("messages")];
    g.initializers
        .push(StoredTensor::from_i64s(Some("flat"), &[1], &[-1]));
    g.initializers
        .push(StoredTensor::from_i64s(Some("one"), &[], &[1]));
    g.add_node(Node::new("Cast", "narrow", ["edges"], ["e32"]).with_attr("to", AttrValue::Int(6)));
    g.add_node(Node::new("Cast", "widen", ["e32"], ["e64"]).with_attr("to", AttrValue::Int(7)));
    g.add_node(Node::new(
        "Reshape",
        "flatten_edges",
        ["e64", "flat"],
        ["ids0"],
    ));
    g.add_node(Node::new("Add", "shift", ["ids0", "one"], ["ids"]));
    g.add_node(
        Node::new("Gather", "pick_nodes", ["x", "ids"], ["messages"])
            .with_attr("axis", AttrValue::Int(0)),
    );
    multigather::io::save(&Model::new(g, 13), path).unwrap();
}

#[test]
fn verify_draws_edge_indices_within_the_node_count() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("edges.onnx");
    edge_gather_model(&model);
    for seed in ["0", "1", "2"] {
        let out = multigather(&[
            "verify",
            model.to_str().unwrap(),
            "--dim",
            "n=5",
            "--dim",
            "e=40",
            "--seed",
            seed,
        ]);
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        // Index -5..4 after the shift of 1: the input is drawn in [-6, 4).
        assert!(
            err.contains(
                "drawn edges: int64[2, 40] in [-6, 4) (indices of 'pick_nodes' (Gather, axis 0))"
            ),
            "{err}"
        );
        assert!(err.contains("drawn x: float[5, 8] in [-1, 1)"), "{err}");
        assert!(err.contains("dims: n=5 (--dim), e=40 (--dim)"), "{err}");
    }
    // As JSON, the same choices.
    let out = multigather(&["verify", model.to_str().unwrap(), "--json", "--dim", "n=3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["inputs"][1]["name"], "edges");
    assert_eq!(report["inputs"][1]["range"], "[-4, 2)");
    assert_eq!(report["dims"][0]["source"], "--dim");
    assert_eq!(report["dims"][1]["source"], "default");
}

#[test]
fn verify_input_fixes_some_inputs_and_draws_the_rest_with_their_dims() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("edges.onnx");
    edge_gather_model(&model);
    let x = dir.path().join("x.pb");
    let data = Tensor::from_vec(DataType::Float, &[6, 8], vec![0.5f32; 48]).unwrap();
    multigather::io::files::write_tensor_pb(&x, "x", &data).unwrap();
    let out = multigather(&[
        "verify",
        model.to_str().unwrap(),
        "--input",
        &format!("x={}", x.display()),
        "--dim",
        "e=9",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("given x: float[6, 8]"), "{err}");
    assert!(err.contains("drawn edges: int64[2, 9] in [-7, 5)"), "{err}");
    assert!(err.contains("n=6 (input 'x')"), "{err}");
}

#[test]
fn verify_sizes_a_symbolic_dim_as_a_matmul_requires() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("matmul.onnx");
    let mut g = Graph::new("main");
    g.inputs = vec![ValueInfo::new("a", ty(DataType::Float, "batch,k"))];
    g.outputs = vec![ValueInfo::untyped("y")];
    let w: Vec<f32> = (0..48).map(|v| v as f32).collect();
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    g.initializers.push(StoredTensor::raw(
        Some("w"),
        DataType::Float,
        &[16, 3],
        bytes.into(),
    ));
    g.add_node(Node::new("MatMul", "mm", ["a", "w"], ["y"]));
    multigather::io::save(&Model::new(g, 13), &path).unwrap();
    let out = multigather(&["verify", path.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("dims: batch=1 (default), k=16 (node 'mm' (MatMul) needs 16)"),
        "{err}"
    );
}

/// `x: float[1, 1, t]` through `MaxPool(kernel 8)`, then a gather on the result.
fn window_model(path: &Path) {
    let mut g = Graph::new("main");
    g.inputs = vec![ValueInfo::new("x", ty(DataType::Float, "1,1,t"))];
    g.outputs = vec![ValueInfo::untyped("y")];
    g.initializers
        .push(StoredTensor::from_i64s(Some("first"), &[1], &[0]));
    g.add_node(
        Node::new("MaxPool", "pool", ["x"], ["p"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![8])),
    );
    g.add_node(
        Node::new("Gather", "g", ["p", "first"], ["y"]).with_attr("axis", AttrValue::Int(2)),
    );
    multigather::io::save(&Model::new(g, 13), path).unwrap();
}

#[test]
fn verify_searches_a_size_the_window_fits_in() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("window.onnx");
    window_model(&model);
    let out = multigather(&["verify", model.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("drawn x: float[1, 1, 8]"), "{err}");
    assert!(err.contains("dims: t=8 (searched)"), "{err}");
    assert!(err.contains("identical: 1 outputs"), "{err}");
}

#[test]
fn verify_that_no_draw_runs_names_the_drawn_inputs_and_suggests_dim() {
    // Reshape to [3, 5] takes exactly 15 elements: no power of two will do.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifteen.onnx");
    let mut g = Graph::new("main");
    g.inputs = vec![ValueInfo::new("x", ty(DataType::Float, "t"))];
    g.outputs = vec![ValueInfo::untyped("y")];
    g.initializers
        .push(StoredTensor::from_i64s(Some("shape"), &[2], &[3, 5]));
    g.add_node(Node::new("Reshape", "to_3x5", ["x", "shape"], ["y"]));
    multigather::io::save(&Model::new(g, 13), &path).unwrap();
    let out = multigather(&["verify", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("on drawn inputs x float[1] with t=1"), "{err}");
    assert!(
        err.contains("(also tried t = 2, 4, 8, 16, 32, 64)"),
        "{err}"
    );
    assert!(
        err.contains("give sizes with --dim t=VALUE or inputs with --input NAME=FILE"),
        "{err}"
    );
    assert!(err.contains("node 'to_3x5' (Reshape)"), "{err}");
    let out = multigather(&["verify", path.to_str().unwrap(), "--dim", "t=15"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn rewrite_diff_is_stable_and_is_the_library_text() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("edges.onnx");
    edge_gather_model(&model);
    let rewritten = dir.path().join("rewritten.onnx");
    let run = || {
        let out = multigather(&[
            "rewrite",
            model.to_str().unwrap(),
            "-o",
            rewritten.to_str().unwrap(),
            "--diff",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let first = run();
    assert_eq!(run(), first, "two runs print the same diff");
    let loaded = multigather::io::load(&model).unwrap();
    let library =
        multigather::pass::rewrite_diff(&loaded, multigather::pass::RewriteConfig::default())
            .unwrap();
    assert_eq!(first, library);
    assert!(
        first.starts_with("--- original\n+++ rewritten\n@@"),
        "{first}"
    );
    assert!(
        first.contains("\n-   [pick_nodes] messages = Gather <axis: int = 0> (x, ids)\n"),
        "{first}"
    );
    // The diff goes to standard output, so the model cannot, nor the JSON report.
    for extra in [
        &["-o", "-"][..],
        &["-o", rewritten.to_str().unwrap(), "--json"],
    ] {
        let mut args = vec!["rewrite", model.to_str().unwrap(), "--diff"];
        args.extend_from_slice(extra);
        let out = multigather(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
}
