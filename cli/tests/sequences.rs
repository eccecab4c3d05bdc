//! Sequences and optionals as values of the interpreter, wherever a graph holds them: inside a
//! `Scan` body, through a model-local function, across `multigather run --output-dir` and
//! `multigather test`, and in `verify`'s comparison of a rewritten model. The ONNX node tests of
//! the sequence operators run in `tests/conformance.rs`.

use std::process::Command;

use multigather::interp::Session;
use multigather::io::files::{read_output_values, write_value_pb};
use multigather::ir::{
    AttrValue, Dim, Function, Graph, Model, Node, OpsetImport, Sequence, Type, TypeKind, Value,
    ValueInfo,
};
use multigather::pass::{GatherToMultiaxis, RewriteConfig};
use multigather::verify::compare_values;
use multigather::{DataType, Tensor};

fn floats(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(DataType::Float, shape, v).unwrap()
}

fn ints(shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::from_vec(DataType::Int64, shape, v).unwrap()
}

fn float_seq() -> Type {
    let elem = Type::from(TypeKind::Tensor(multigather::ir::TensorType {
        elem: Some(DataType::Float),
        shape: None,
    }));
    Type::from(TypeKind::Sequence(Some(Box::new(elem))))
}

fn tensor(name: &str, elem: DataType, dims: &[i64]) -> ValueInfo {
    ValueInfo::new(
        name,
        Type::tensor(elem, dims.iter().map(|&d| Dim::Known(d)).collect()),
    )
}

/// `x` split into rows, the rows gathered back in reverse, and the sequence returned too.
fn split_and_gather() -> Model {
    let mut g = Graph::new("g");
    g.inputs.push(tensor("x", DataType::Float, &[3, 2]));
    g.inputs.push(tensor("i", DataType::Int64, &[3]));
    g.outputs.push(ValueInfo::new("rows", float_seq()));
    g.outputs.push(ValueInfo::untyped("back"));
    g.add_node(
        Node::new("Gather", "gather", ["x", "i"], ["picked"]).with_attr("axis", AttrValue::Int(0)),
    );
    g.add_node(Node::new("SplitToSequence", "split", ["picked"], ["rows"]));
    g.add_node(
        Node::new("ConcatFromSequence", "concat", ["rows"], ["back"])
            .with_attr("axis", AttrValue::Int(0)),
    );
    Model::new(g, 17)
}

#[test]
fn a_sequence_output_runs_and_a_tensor_run_refuses_it() {
    let model = split_and_gather();
    let session = Session::new(&model);
    session.check().unwrap();
    let x = floats(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let i = ints(&[3], vec![2, 1, 0]);
    let outputs = session
        .run_values(vec![
            ("x".to_string(), x.clone()),
            ("i".to_string(), i.clone()),
        ])
        .unwrap();
    let Value::Sequence(rows) = &outputs[0].1 else {
        panic!("not a sequence: {:?}", outputs[0].1)
    };
    assert_eq!(rows.len(), 3);
    assert_eq!(rows.get(0).unwrap(), &floats(&[1, 2], vec![5.0, 6.0]));
    assert_eq!(
        outputs[1].1,
        Value::Tensor(floats(&[3, 2], vec![5.0, 6.0, 3.0, 4.0, 1.0, 2.0]))
    );
    let err = session
        .run(vec![("x".to_string(), x), ("i".to_string(), i)])
        .unwrap_err();
    assert!(
        err.to_string().contains("output 'rows' is a sequence"),
        "{err}"
    );
}

#[test]
fn verify_compares_sequences_of_a_rewritten_model_tensor_by_tensor() {
    let model = split_and_gather();
    let mut rewritten = model.clone();
    let report = GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).unwrap();
    assert_eq!(report.rewritten, 1);
    let inputs = vec![
        (
            "x".to_string(),
            floats(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        ),
        ("i".to_string(), ints(&[3], vec![2, -3, 1])),
    ];
    let want = Session::new(&model).run_values(inputs.clone()).unwrap();
    let got = Session::new(&rewritten).run_values(inputs).unwrap();
    let comparisons = compare_values(&want, &got);
    assert!(comparisons.iter().all(|c| c.identical), "{comparisons:?}");
    assert_eq!(comparisons[0].dtype, "seq(tensor(float))");
    assert_eq!(comparisons[0].shape, [3]);
    // One element of one tensor changed: one mismatch, named by its tensor.
    let Value::Sequence(rows) = &got[0].1 else {
        panic!()
    };
    let mut changed = got.clone();
    let mut tensors = rows.tensors().to_vec();
    tensors[2] = floats(&[1, 2], vec![3.0, 4.5]);
    changed[0].1 = Value::Sequence(Sequence::new(None, tensors).unwrap());
    let c = &compare_values(&want, &changed)[0];
    assert!(!c.identical);
    assert_eq!((c.mismatches, c.max_abs_diff), (1, Some(0.5)));
    assert!(
        c.problem.as_deref().unwrap().starts_with("tensor 2"),
        "{c:?}"
    );
    // A shorter sequence is not identical either.
    changed[0].1 = Value::Sequence(Sequence::new(None, rows.tensors()[..2].to_vec()).unwrap());
    assert!(!compare_values(&want, &changed)[0].identical);
}

#[test]
fn sequences_live_inside_a_scan_body_and_through_a_function() {
    // Scan body: state s, scan input x (a row); s' = s + sum of the pieces of x put in a
    // sequence and concatenated back.
    let mut body = Graph::new("body");
    body.inputs.push(tensor("s", DataType::Float, &[2]));
    body.inputs.push(tensor("x", DataType::Float, &[2]));
    body.outputs.push(ValueInfo::untyped("s2"));
    body.add_node(Node::new("SequenceConstruct", "make", ["x", "x"], ["seq"]));
    body.add_node(Node::new("Twice", "call", ["seq"], ["seq2"]).with_domain("local"));
    body.add_node(Node::new("SequenceLength", "len", ["seq2"], ["n"]));
    body.add_node(Node::new("Cast", "cast", ["n"], ["nf"]).with_attr("to", AttrValue::Int(1)));
    body.add_node(Node::new("Mul", "scale", ["x", "nf"], ["xn"]));
    body.add_node(Node::new("Add", "acc", ["s", "xn"], ["s2"]));
    let mut g = Graph::new("g");
    g.inputs.push(tensor("init", DataType::Float, &[2]));
    g.inputs.push(tensor("xs", DataType::Float, &[3, 2]));
    g.outputs.push(ValueInfo::untyped("final"));
    g.add_node(
        Node::new("Scan", "scan", ["init", "xs"], ["final"])
            .with_attr("num_scan_inputs", AttrValue::Int(1))
            .with_attr("body", AttrValue::Graph(Box::new(body))),
    );
    // local.Twice(seq) = seq with its first tensor inserted again at the back.
    let mut f = Graph::new("Twice");
    f.inputs.push(ValueInfo::untyped("in"));
    f.outputs.push(ValueInfo::untyped("out"));
    f.add_node(
        Node::new("Constant", "zero", Vec::<String>::new(), ["z"])
            .with_attr("value_int", AttrValue::Int(0)),
    );
    f.add_node(Node::new("SequenceAt", "at", ["in", "z"], ["first"]));
    f.add_node(Node::new("SequenceInsert", "ins", ["in", "first"], ["out"]));
    let mut model = Model::new(g, 17);
    model.opset_imports.push(OpsetImport {
        domain: Some("local".into()),
        version: 1,
    });
    model.functions.push(Function {
        name: "Twice".into(),
        domain: "local".into(),
        overload: None,
        attributes: Vec::new(),
        attribute_defaults: Vec::new(),
        opset_imports: vec![OpsetImport {
            domain: None,
            version: 17,
        }],
        body: f,
        doc_string: None,
        metadata_props: Vec::new(),
    });
    let session = Session::new(&model);
    session.check().unwrap();
    let out = session
        .run(vec![
            ("init".to_string(), floats(&[2], vec![0.0, 0.0])),
            (
                "xs".to_string(),
                floats(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            ),
        ])
        .unwrap();
    // Each row counted three times (two constructed, one inserted).
    assert_eq!(out[0].1, floats(&[2], vec![27.0, 36.0]));
}

#[test]
fn a_sequence_where_a_tensor_is_expected_and_a_sequence_scan_output_are_errors() {
    let mut g = Graph::new("g");
    g.inputs.push(tensor("x", DataType::Float, &[2]));
    g.outputs.push(ValueInfo::untyped("y"));
    g.add_node(Node::new("SequenceConstruct", "make", ["x"], ["s"]));
    g.add_node(Node::new("Relu", "relu", ["s"], ["y"]));
    let model = Model::new(g, 17);
    let err = Session::new(&model)
        .run(vec![("x".to_string(), floats(&[2], vec![1.0, -1.0]))])
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("'relu'") && text.contains("input 's' is a sequence"),
        "{text}"
    );

    let mut body = Graph::new("body");
    body.inputs.push(tensor("i", DataType::Int64, &[]));
    body.inputs.push(tensor("c", DataType::Bool, &[]));
    body.outputs.push(ValueInfo::untyped("c2"));
    body.outputs.push(ValueInfo::untyped("piece"));
    body.add_node(Node::new("Identity", "keep", ["c"], ["c2"]));
    body.add_node(Node::new("SequenceConstruct", "make", ["i"], ["piece"]));
    let mut g = Graph::new("g");
    g.inputs.push(tensor("m", DataType::Int64, &[]));
    g.outputs.push(ValueInfo::untyped("scanned"));
    g.add_node(
        Node::new("Loop", "loop", ["m", ""], ["scanned"])
            .with_attr("body", AttrValue::Graph(Box::new(body))),
    );
    let model = Model::new(g, 17);
    let err = Session::new(&model)
        .run_values(vec![("m".to_string(), ints(&[], vec![2]))])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("scan output 'piece' is a sequence"),
        "{err}"
    );
}

#[test]
fn optionals_bind_to_declared_inputs_and_come_back() {
    let opt = Type::from(TypeKind::Optional(Some(Box::new(float_seq()))));
    let mut g = Graph::new("g");
    g.inputs.push(ValueInfo::new("o", opt.clone()));
    g.outputs.push(ValueInfo::new("same", opt));
    g.outputs.push(ValueInfo::untyped("has"));
    g.add_node(Node::new("Identity", "id", ["o"], ["same"]));
    g.add_node(Node::new("OptionalHasElement", "has", ["o"], ["has"]));
    let model = Model::new(g, 18);
    let session = Session::new(&model);
    // A sequence given for an optional input is a present optional.
    let seq = Value::Sequence(Sequence::new(None, vec![floats(&[1], vec![1.0])]).unwrap());
    let out = session
        .run_values(vec![("o".to_string(), seq.clone())])
        .unwrap();
    assert_eq!(out[0].1, Value::Optional(Some(Box::new(seq))));
    assert_eq!(
        out[1].1,
        Value::Tensor(Tensor::scalar(DataType::Bool, 1u8).unwrap())
    );
    let out = session
        .run_values(vec![("o".to_string(), Value::Optional(None))])
        .unwrap();
    assert_eq!(out[0].1, Value::Optional(None));
    assert_eq!(
        out[1].1,
        Value::Tensor(Tensor::scalar(DataType::Bool, 0u8).unwrap())
    );
    // An optional of ints where a sequence of floats is declared is refused.
    let ints_seq = Value::Sequence(Sequence::new(None, vec![ints(&[1], vec![1])]).unwrap());
    let err = session
        .run_values(vec![("o".to_string(), ints_seq)])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("declared a sequence of float tensors"),
        "{err}"
    );
}

#[test]
fn run_writes_sequence_protos_that_test_reads_back() {
    let dir = std::env::temp_dir().join(format!("mg-sequences-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("case/test_data_set_0");
    std::fs::create_dir_all(&data).unwrap();
    let model = split_and_gather();
    multigather::io::save(&model, dir.join("case/model.onnx")).unwrap();
    let x = floats(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    write_value_pb(&data.join("input_0.pb"), "x", &Value::Tensor(x)).unwrap();
    write_value_pb(
        &data.join("input_1.pb"),
        "i",
        &Value::Tensor(ints(&[3], vec![0, 0, 2])),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_multigather");
    let run = Command::new(bin)
        .args([
            "run",
            dir.join("case/model.onnx").to_str().unwrap(),
            "--inputs",
        ])
        .arg(&data)
        .arg("--output-dir")
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("rows seq(tensor(float))[3] [float[1, 2] [1, 2]"),
        "{stdout}"
    );
    let declared = Session::new(&model).output_types().unwrap();
    let written = read_output_values(&data, &declared).unwrap();
    let Value::Sequence(rows) = &written[0] else {
        panic!("{written:?}")
    };
    assert_eq!(rows.get(2).unwrap(), &floats(&[1, 2], vec![5.0, 6.0]));
    // `multigather test` on the case: whether it passed, and what it printed.
    let test = || {
        let out = Command::new(bin)
            .arg("test")
            .arg(dir.join("case"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, stdout) = test();
    assert!(ok && stdout.contains("1 passed"), "{stdout}");
    // A recorded sequence one tensor short fails, naming the output.
    let short = Sequence::new(None, rows.tensors()[..2].to_vec()).unwrap();
    write_value_pb(&data.join("output_0.pb"), "rows", &Value::Sequence(short)).unwrap();
    let (_, stdout) = test();
    assert!(
        stdout.contains("FAIL") && stdout.contains("output 'rows'"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
