//! `ZipMap`'s sequence of maps at every edge where users see it: `multigather run --output-dir`
//! writes a `SequenceProto` of `MapProto`s, `multigather test` reads the recorded ones and
//! compares them key by key, `verify` compares the maps of both runs, and what the interpreter
//! cannot hold (a map, or a sequence of maps other than `ZipMap`'s output) is a one-line error.
//!
//! The fixtures (`fixtures/zipmap/{strings,int64}`, written by `fixtures/zipmap/generate.py`) hold
//! onnxruntime's outputs: a `LinearClassifier` behind a Gather, its scores through `ZipMap`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use multigather::interp::Session;
use multigather::io::files::{read_inputs_dir, read_output_values};
use multigather::ir::{AttrValue, Dim, Graph, MapKeys, Model, Node, OpsetImport, Type, TypeKind};
use multigather::ir::{Value, ValueInfo};
use multigather::verify::close_enough_values;
use multigather::DataType;

const CASES: [&str; 2] = ["strings", "int64"];

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/zipmap")
        .join(case)
}

fn multigather(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_multigather"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scratch directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mg-zipmap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn zipmap_fixtures_run_as_sequences_of_maps_matching_onnxruntime() {
    for case in CASES {
        let dir = fixture(case);
        let model = multigather::io::load(dir.join("model.onnx")).unwrap();
        let data = dir.join("test_data_set_0");
        let inputs = read_inputs_dir(&model.graph, &data).unwrap();
        let session = Session::new(&model);
        session.check().unwrap();
        let keys = session.output_keys().unwrap();
        let want_keys = match case {
            "strings" => MapKeys::String(vec![b"cat".to_vec(), b"dog".to_vec(), b"emu".to_vec()]),
            _ => MapKeys::Int64(vec![10, 20, 30]),
        };
        assert_eq!(keys, [None, Some(want_keys)], "{case}");
        let got = session.run_values(inputs).unwrap();
        let recorded = read_output_values(&data, &session.output_types().unwrap()).unwrap();
        for (k, (want, (_, got))) in recorded.iter().zip(&got).enumerate() {
            close_enough_values(want, got).unwrap_or_else(|why| panic!("{case} output {k}: {why}"));
        }
        let Value::Maps(maps) = &got[1].1 else {
            panic!("{case}: ZipMap's output is not a sequence of maps");
        };
        assert_eq!(maps.len(), 5, "{case}");
    }
}

#[test]
fn zipmap_run_output_dir_writes_sequence_protos_that_test_reads_back() {
    for case in CASES {
        let dir = fixture(case);
        let out = scratch(&format!("run-{case}"));
        let model = dir.join("model.onnx");
        let data = dir.join("test_data_set_0");
        let args = [
            "run",
            model.to_str().unwrap(),
            "--inputs",
            data.to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
        ];
        let run = multigather(&args);
        assert!(run.status.success(), "{case}: {}", text(&run.stderr));
        let stdout = text(&run.stdout);
        let kind = if case == "strings" { "string" } else { "int64" };
        assert!(
            stdout.contains(&format!("probabilities seq(map({kind}, float))[5] [{{")),
            "{case}: {stdout}"
        );
        // What `run` wrote is what the recorded outputs say, read the way `test` reads them.
        let declared = [None, Some(seq_of_maps())];
        let written = read_output_values(&out, &declared).unwrap();
        let recorded = read_output_values(&data, &declared).unwrap();
        for (want, got) in recorded.iter().zip(&written) {
            close_enough_values(want, got).unwrap();
        }
        // A sequence of maps read as a tensor is an error naming the file, not a tensor.
        let err = read_output_values(&out, &[None, None]).unwrap_err();
        assert!(err.to_string().contains("output_1.pb"), "{err}");
        std::fs::remove_dir_all(&out).ok();
    }
}

#[test]
fn zipmap_test_command_compares_maps_key_by_key() {
    let dirs: Vec<PathBuf> = CASES.iter().map(|c| fixture(c)).collect();
    let mut args = vec!["test"];
    args.extend(dirs.iter().map(|d| d.to_str().unwrap()));
    let out = multigather(&args);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("2 passed, 0 failed, 0 skipped"),
        "{}",
        text(&out.stdout)
    );

    // The same test with recorded maps whose values or keys differ fails and says where.
    let changed = scratch("test-changed");
    let case = changed.join("strings");
    std::fs::create_dir_all(case.join("test_data_set_0")).unwrap();
    std::fs::copy(dirs[0].join("model.onnx"), case.join("model.onnx")).unwrap();
    let data = case.join("test_data_set_0");
    for f in ["input_0.pb", "output_0.pb"] {
        std::fs::copy(dirs[0].join("test_data_set_0").join(f), data.join(f)).unwrap();
    }
    // The int64 fixture's maps where string keys are recorded: keys that differ.
    std::fs::copy(
        dirs[1].join("test_data_set_0/output_1.pb"),
        data.join("output_1.pb"),
    )
    .unwrap();
    let out = multigather(&["test", case.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("FAIL strings: test_data_set_0: output 'probabilities': expected seq(map(int64, float)) with keys [10, 20, 30], got seq(map(string, float)) with keys"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&changed).ok();
}

#[test]
fn zipmap_verify_compares_the_maps_of_both_runs() {
    for case in CASES {
        let dir = fixture(case);
        let model = dir.join("model.onnx");
        let data = dir.join("test_data_set_0");
        let out = multigather(&[
            "verify",
            model.to_str().unwrap(),
            "--inputs",
            data.to_str().unwrap(),
            "--json",
        ]);
        assert!(out.status.success(), "{case}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("\"identical\": true"), "{case}: {stdout}");
        let kind = if case == "strings" { "string" } else { "int64" };
        assert!(
            stdout.contains(&format!("\"dtype\": \"seq(map({kind}, float))\"")),
            "{case}: {stdout}"
        );
    }
}

/// A model around one `ZipMap` (int64 labels 4 and 7) on a `[1, 2]` float input `x`, with
/// `extra` nodes after it and the given graph outputs.
fn zipmap_model(extra: Vec<Node>, outputs: Vec<ValueInfo>, inputs: Vec<ValueInfo>) -> Model {
    let mut g = Graph::new("g");
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(DataType::Float, vec![Dim::Known(1), Dim::Known(2)]),
    ));
    g.inputs.extend(inputs);
    g.outputs = outputs;
    g.add_node(
        Node::new("ZipMap", "zip", ["x"], ["maps"])
            .with_domain("ai.onnx.ml")
            .with_attr("classlabels_int64s", AttrValue::Ints(vec![4, 7])),
    );
    for n in extra {
        g.add_node(n);
    }
    let mut model = Model::new(g, 17);
    model.opset_imports.push(OpsetImport {
        domain: Some("ai.onnx.ml".into()),
        version: 1,
    });
    model
}

fn seq_of_maps() -> Type {
    let value = Type::tensor(DataType::Float, vec![]);
    let map = Type::from(TypeKind::Map {
        key: Some(DataType::Int64.onnx()),
        value: Some(Box::new(value)),
    });
    Type::from(TypeKind::Sequence(Some(Box::new(map))))
}

#[test]
fn zipmap_edges_refuse_what_the_interpreter_cannot_hold() {
    let declared = |name: &str, ty: Type| ValueInfo::new(name, ty);
    let cases: Vec<(&str, Model, &str)> =
        vec![
        (
            "through identity",
            zipmap_model(
                vec![Node::new("Identity", "", ["maps"], ["same"])],
                vec![declared("same", seq_of_maps())],
                vec![],
            ),
            "",
        ),
        (
            "read by another node",
            zipmap_model(
                vec![Node::new("Relu", "", ["maps"], ["r"])],
                vec![ValueInfo::untyped("r")],
                vec![],
            ),
            "node producing 'r' (Relu) reads 'maps', the sequence of maps of ZipMap 'zip'; the \
             interpreter holds that only to return it as a graph output",
        ),
        (
            "sequence output not from ZipMap",
            zipmap_model(
                vec![],
                vec![declared("maps", seq_of_maps()), declared("x", seq_of_maps())],
                vec![],
            ),
            "graph output 'x' is declared a sequence of maps; the interpreter holds no sequence \
             of maps but ZipMap's output",
        ),
        (
            "sequence input",
            zipmap_model(
                vec![],
                vec![declared("maps", seq_of_maps())],
                vec![declared("s", seq_of_maps())],
            ),
            "graph input 's' is declared a sequence of maps; the interpreter holds no sequence \
             of maps but ZipMap's output",
        ),
    ];
    for (what, model, want) in cases {
        let session = Session::new(&model);
        match (session.check(), want) {
            (Ok(()), "") => {
                let keys = session.output_keys().unwrap();
                assert_eq!(keys, [Some(MapKeys::Int64(vec![4, 7]))], "{what}");
            }
            (Ok(()), want) => panic!("{what}: no error, expected: {want}"),
            (Err(e), want) => assert_eq!(e.to_string(), format!("unsupported: {want}"), "{what}"),
        }
    }
}
