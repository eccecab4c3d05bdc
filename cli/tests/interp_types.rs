//! The interpreter enforces the operator schemas' type constraints, so `verify` cannot call
//! identical a model a conforming runtime refuses: each case is a small model whose node is fed
//! an element type its schema forbids (or, as a control, allows). The check runs before anything
//! does (`Session::check`, what `run` and `verify` call first) from the statically known types,
//! and again on the tensors when a step runs; both must refuse each bad case with a message
//! naming the node, the operator, the input and the allowed types.

use std::process::Command;

use multigather::interp::Session;
use multigather::ir::tensor_to_stored;
use multigather::ir::{
    AttrValue, Attribute, Dim, Function, Graph, Model, Node, OpsetImport, TensorType, Type,
    TypeKind, ValueInfo,
};
use multigather::{DataType, Tensor};

/// A graph input, `float[2]` style.
fn input(name: &str, elem: DataType) -> ValueInfo {
    ValueInfo::new(name, Type::tensor(elem, vec![Dim::Known(2)]))
}

/// A declaration with no element type or shape.
fn untyped(name: &str) -> ValueInfo {
    ValueInfo::new(name, Type::from(TypeKind::Tensor(TensorType::default())))
}

/// A tensor of two elements of `elem` (all zero bits but a valid index).
fn two(elem: DataType) -> Tensor {
    match elem {
        DataType::Float => Tensor::from_vec(elem, &[2], vec![0.0f32, 1.0]),
        DataType::Int64 => Tensor::from_vec(elem, &[2], vec![0i64, 1]),
        DataType::Int32 => Tensor::from_vec(elem, &[2], vec![1i32, 0]),
        _ => unreachable!("the cases use float, int64 and int32"),
    }
    .unwrap()
}

/// `y = op(a, b)` at `opset`, with `a` and `b` graph inputs of the given types.
fn binary(op: &str, opset: i64, a: DataType, b: DataType) -> (Model, Vec<(String, Tensor)>) {
    let mut g = Graph::new("g");
    g.inputs.push(input("a", a));
    g.inputs.push(input("b", b));
    g.outputs.push(untyped("y"));
    g.add_node(Node::new(op, "n", ["a", "b"], ["y"]));
    let feeds = vec![("a".into(), two(a)), ("b".into(), two(b))];
    (Model::new(g, opset), feeds)
}

/// `y = op(a)` at `opset`.
fn unary(op: &str, opset: i64, a: DataType) -> (Model, Vec<(String, Tensor)>) {
    let mut g = Graph::new("g");
    g.inputs.push(input("a", a));
    g.outputs.push(untyped("y"));
    g.add_node(Node::new(op, "n", ["a"], ["y"]));
    (Model::new(g, opset), vec![("a".into(), two(a))])
}

/// `Reshape(a, shape)` with `shape` an initializer of type `elem`, at opset 13.
fn reshape_with_shape(elem: DataType) -> (Model, Vec<(String, Tensor)>) {
    let mut g = Graph::new("g");
    g.inputs.push(input("a", DataType::Float));
    g.outputs.push(untyped("y"));
    let shape = match elem {
        DataType::Int64 => Tensor::from_vec(elem, &[1], vec![2i64]),
        _ => Tensor::from_vec(elem, &[1], vec![2i32]),
    }
    .unwrap();
    g.initializers
        .push(tensor_to_stored("shape", &shape).unwrap());
    g.add_node(Node::new("Reshape", "n", ["a", "shape"], ["y"]));
    let feeds = vec![("a".into(), two(DataType::Float))];
    (Model::new(g, 13), feeds)
}

/// A `Gather` inside the `then` and `else` branches of an `If`, reading `data` and `idx` from
/// the main graph.
fn gather_in_if_branch(idx: DataType) -> (Model, Vec<(String, Tensor)>) {
    let branch = |name: &str| {
        let mut b = Graph::new(name);
        b.outputs.push(untyped("z"));
        b.add_node(Node::new("Gather", "n", ["data", "idx"], ["z"]));
        b
    };
    let mut g = Graph::new("g");
    g.inputs.push(input("data", DataType::Float));
    g.inputs.push(input("idx", idx));
    g.inputs.push(ValueInfo::new(
        "cond",
        Type::tensor(DataType::Bool, Vec::new()),
    ));
    g.outputs.push(untyped("y"));
    g.add_node(
        Node::new("If", "branch", ["cond"], ["y"])
            .with_attr("then_branch", AttrValue::Graph(Box::new(branch("then"))))
            .with_attr("else_branch", AttrValue::Graph(Box::new(branch("else")))),
    );
    let cond = Tensor::from_vec(DataType::Bool, &[], vec![1u8]).unwrap();
    let feeds = vec![
        ("data".into(), two(DataType::Float)),
        ("idx".into(), two(idx)),
        ("cond".into(), cond),
    ];
    (Model::new(g, 13), feeds)
}

/// A model-local function `local.pick(x, i) = Gather(x, i)` called with `idx` as `i`.
fn gather_in_function(idx: DataType) -> (Model, Vec<(String, Tensor)>) {
    let mut body = Graph::new("pick");
    body.inputs.push(untyped("x"));
    body.inputs.push(untyped("i"));
    body.outputs.push(untyped("z"));
    body.add_node(Node::new("Gather", "n", ["x", "i"], ["z"]));
    let mut g = Graph::new("g");
    g.inputs.push(input("data", DataType::Float));
    g.inputs.push(input("idx", idx));
    g.outputs.push(untyped("y"));
    g.add_node(Node::new("pick", "call", ["data", "idx"], ["y"]).with_domain("local"));
    let mut model = Model::new(g, 13);
    let imports = vec![OpsetImport {
        domain: None,
        version: 13,
    }];
    model.opset_imports.push(OpsetImport {
        domain: Some("local".into()),
        version: 1,
    });
    model.functions.push(Function {
        name: "pick".into(),
        domain: "local".into(),
        overload: None,
        attributes: Vec::new(),
        attribute_defaults: Vec::<Attribute>::new(),
        opset_imports: imports,
        body,
        doc_string: None,
        metadata_props: Vec::new(),
    });
    let feeds = vec![
        ("data".into(), two(DataType::Float)),
        ("idx".into(), two(idx)),
    ];
    (model, feeds)
}

type Case = (
    &'static str,
    fn() -> (Model, Vec<(String, Tensor)>),
    &'static [&'static str],
);

/// (case, model, the words the error must hold; none for a model that must run)
const CASES: &[Case] = &[
    (
        "gather_with_float_indices",
        || binary("Gather", 13, DataType::Float, DataType::Float),
        &[
            "'n'",
            "(Gather)",
            "input 1 ('b') is float",
            "Tind",
            "{int32, int64}",
        ],
    ),
    (
        "gather_with_int32_indices_runs",
        || binary("Gather", 13, DataType::Float, DataType::Int32),
        &[],
    ),
    (
        "add_float_and_int64",
        || binary("Add", 14, DataType::Float, DataType::Int64),
        &[
            "(Add)",
            "input 1 ('b') is int64 but input 0 ('a') is float",
            "parameter T",
        ],
    ),
    (
        "relu_on_int64_at_opset_13",
        || unary("Relu", 13, DataType::Int64),
        &[
            "(Relu)",
            "input 0 ('a') is int64",
            "{float, float16, double, bfloat16}",
        ],
    ),
    (
        "relu_on_int64_at_opset_14_runs",
        || unary("Relu", 14, DataType::Int64),
        &[],
    ),
    (
        "reshape_with_int32_shape",
        || reshape_with_shape(DataType::Int32),
        &["(Reshape)", "input 1 ('shape') is int32", "{int64}"],
    ),
    (
        "reshape_with_int64_shape_runs",
        || reshape_with_shape(DataType::Int64),
        &[],
    ),
    (
        "gather_with_float_indices_in_an_if_branch",
        || gather_in_if_branch(DataType::Float),
        &[
            "'n'",
            "(Gather)",
            "input 1 ('idx') is float",
            "{int32, int64}",
        ],
    ),
    (
        "gather_with_int64_indices_in_an_if_branch_runs",
        || gather_in_if_branch(DataType::Int64),
        &[],
    ),
    (
        "gather_with_float_indices_in_a_function",
        || gather_in_function(DataType::Float),
        &[
            "'n'",
            "(Gather)",
            "input 1 ('i') is float",
            "{int32, int64}",
        ],
    ),
    (
        "gather_with_int64_indices_in_a_function_runs",
        || gather_in_function(DataType::Int64),
        &[],
    ),
];

fn expect(case: &str, when: &str, result: multigather::Result<()>, words: &[&str]) {
    match (result, words.is_empty()) {
        (Ok(()), true) => {}
        (Ok(()), false) => panic!("{case}: {when} accepted the model"),
        (Err(e), true) => panic!("{case}: {when} refused a valid model: {e}"),
        (Err(e), false) => {
            let message = e.to_string();
            for w in words {
                assert!(
                    message.contains(w),
                    "{case}: {when}: {message:?} lacks {w:?}"
                );
            }
            assert!(!message.contains('\n'), "{case}: {message:?}");
        }
    }
}

/// Before anything runs, from the types static inference knows.
#[test]
fn check_refuses_what_the_schemas_forbid() {
    for &(case, build, words) in CASES {
        let (model, _) = build();
        expect(case, "check", Session::new(&model).check(), words);
    }
}

/// When a step runs, from its tensors (a session that was not checked first).
#[test]
fn run_refuses_what_the_schemas_forbid() {
    for &(case, build, words) in CASES {
        let (model, feeds) = build();
        let result = Session::new(&model).run(feeds).map(drop);
        expect(case, "run", result, words);
    }
}

/// `multigather verify` on a model with `Add(float, int64)`: one error line, exit 2.
#[test]
fn verify_add_float_and_int64_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("add.onnx");
    let (model, _) = binary("Add", 14, DataType::Float, DataType::Int64);
    multigather::io::save(&model, &path).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_multigather"))
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error:"), "{stderr}");
    assert!(
        stderr.contains("node 'n' (Add): input 1 ('b') is int64 but input 0 ('a') is float"),
        "{stderr}"
    );
}
