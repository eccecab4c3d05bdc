//! The rewrite pass on every fixture: snapshots of the text form before and after, and the
//! properties every rewrite must have (valid result, no gather left, idempotent, names kept).

use std::path::Path;

use multigather::ir::Model;
use multigather::pass::{GatherKind, GatherToMultiaxis, NodeOutcome, RewriteConfig};
use multigather::text::model_to_text;

fn gathers_left(model: &Model) -> usize {
    let ops = model.op_histogram();
    GatherKind::ONNX
        .iter()
        .map(|k| ops.get(k.name()).copied().unwrap_or(0))
        .sum()
}

#[test]
fn fixture_rewrites() {
    insta::glob!("../fixtures", "*/model.onnx", |path: &Path| {
        let original = multigather::io::load(path).unwrap();
        let mut model = original.clone();
        let report = GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).unwrap();

        assert_eq!(report.skipped, 0, "{}", report.summary());
        assert_eq!(gathers_left(&model), 0, "{}", model_to_text(&model));
        let outputs = |m: &Model| m.graph.outputs.clone();
        assert_eq!(outputs(&original), outputs(&model), "graph outputs changed");
        let inputs = |m: &Model| m.graph.inputs.clone();
        assert_eq!(inputs(&original), inputs(&model), "graph inputs changed");

        // A second run finds nothing to do.
        let mut again = model.clone();
        let second = GatherToMultiaxis::rewrite(&mut again, RewriteConfig::default()).unwrap();
        assert_eq!(second.rewritten, 0);
        assert_eq!(again, model);

        // The saved model loads back to the same thing.
        let bytes = multigather::io::to_bytes(&model).unwrap();
        assert_eq!(multigather::io::load_bytes(&bytes).unwrap(), model);

        insta::assert_snapshot!(format!(
            "{}\n==> {}\n\n{}",
            model_to_text(&original),
            report.summary(),
            model_to_text(&model)
        ));
    });
}

/// The recipe the README gives users for their own models: a snapshot of the diff the rewrite
/// makes (`pass::rewrite_diff`), reviewed with `cargo insta review`.
#[test]
fn rewrite_diff_snapshot_of_a_gather_in_an_if_branch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gather_in_if/model.onnx");
    let model = multigather::io::load(&path).unwrap();
    let diff = multigather::pass::rewrite_diff(&model, RewriteConfig::default()).unwrap();
    insta::assert_snapshot!(diff);
}

#[test]
fn skip_patterns_and_op_selection_leave_nodes_alone() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gather_chain/model.onnx");
    let mut model = multigather::io::load(&path).unwrap();
    let config = RewriteConfig {
        kinds: vec![GatherKind::Gather, GatherKind::GatherNd],
        skip: vec!["points".into()],
    };
    let report = GatherToMultiaxis::rewrite(&mut model, config).unwrap();
    assert_eq!(report.rewritten, 1);
    let reasons: Vec<(String, String)> = report
        .nodes
        .iter()
        .filter_map(|n| match &n.outcome {
            NodeOutcome::Skipped { reason } => Some((n.node.clone(), reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "pick_elements".to_string(),
                "its op kind is not selected".to_string()
            ),
            (
                "pick_points".to_string(),
                "its name matches the skip pattern 'points'".to_string()
            ),
        ]
    );
    let ops = model.op_histogram();
    assert_eq!(ops.get("GatherElements"), Some(&1));
    assert_eq!(ops.get("GatherND"), Some(&1));
}

#[test]
fn unknown_rank_is_reported_not_guessed() {
    use multigather::ir::{Graph, Node, ValueInfo};
    let mut g = Graph::new("g");
    g.inputs.push(ValueInfo::untyped("data"));
    g.inputs.push(ValueInfo::untyped("idx"));
    g.outputs.push(ValueInfo::untyped("out"));
    g.add_node(Node::new("Gather", "opaque", ["data", "idx"], ["out"]));
    let mut model = Model::new(g, 13);
    let before = model.clone();
    let report = GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).unwrap();
    assert_eq!(report.rewritten, 0);
    assert_eq!(
        report.nodes[0].outcome,
        NodeOutcome::Skipped {
            reason: "the rank of 'data' is unknown".into()
        }
    );
    assert_eq!(model, before);
}

// --- Regression tests: the rewrite is complete and never wrong (crafted valid models) ----------

mod cases {
    use multigather::interp::Session;
    use multigather::ir::{
        AttrValue, Dim, Function, Graph, Model, Node, OpsetImport, StoredTensor, Type, TypeKind,
        ValueInfo,
    };
    use multigather::pass::{
        GatherToMultiaxis, LowerMultiaxis, NodeOutcome, RewriteConfig, RewriteReport,
    };
    use multigather::text::model_to_text;
    use multigather::{DataType, Tensor};

    use super::gathers_left;
    #[allow(unused_imports)]
    use multigather::ir::Shape;

    /// A type from `"2,n,?"` (known, symbolic, unknown dims); `"*"` for an unknown rank.
    pub fn ty(elem: DataType, dims: &str) -> Type {
        if dims == "*" {
            return Type::from(TypeKind::Tensor(multigather::ir::TensorType {
                elem: Some(elem),
                shape: None,
            }));
        }
        let dims = dims
            .split(',')
            .filter(|d| !d.is_empty())
            .map(|d| match (d.parse::<i64>(), d) {
                (Ok(n), _) => Dim::Known(n),
                (_, "?") => Dim::Unknown,
                (_, s) => Dim::Symbolic(s.into()),
            })
            .collect();
        Type::tensor(elem, dims)
    }

    pub fn f32s(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec(DataType::Float, shape, (0..n).map(|v| v as f32).collect()).unwrap()
    }

    pub fn i64s(shape: &[usize], values: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, shape, values.to_vec()).unwrap()
    }

    fn run(model: &Model, feeds: &[(&str, Tensor)]) -> Vec<(String, Tensor)> {
        let inputs = feeds
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        Session::new(model)
            .run(inputs)
            .unwrap_or_else(|e| panic!("{e}\n{}", model_to_text(model)))
    }

    /// Rewrites `model`; the rewritten and the lowered model must compute bit for bit what the
    /// original does on each set of feeds, and a second rewrite must change nothing.
    pub fn check(model: &Model, feeds: &[&[(&str, Tensor)]]) -> (Model, RewriteReport) {
        let mut rewritten = model.clone();
        let report = GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut lowered = rewritten.clone();
        LowerMultiaxis::lower(&mut lowered).unwrap();
        for feeds in feeds {
            let want = run(model, feeds);
            for (what, m) in [("rewritten", &rewritten), ("lowered", &lowered)] {
                let got = run(m, feeds);
                let diff = multigather::verify::compare(&want, &got);
                assert!(
                    diff.iter().all(|c| c.identical),
                    "{what}: {diff:?}\n{}",
                    model_to_text(m)
                );
            }
        }
        let mut again = rewritten.clone();
        let second = GatherToMultiaxis::rewrite(&mut again, RewriteConfig::default()).unwrap();
        assert_eq!(second.rewritten, 0);
        (rewritten, report)
    }

    pub fn skipped(report: &RewriteReport) -> Vec<(String, String)> {
        report
            .nodes
            .iter()
            .filter_map(|n| match &n.outcome {
                NodeOutcome::Skipped { reason } => Some((n.node.clone(), reason.clone())),
                _ => None,
            })
            .collect()
    }

    pub fn gather(name: &str, data: &str, idx: &str, out: &str, axis: i64) -> Node {
        Node::new("Gather", name, [data, idx], [out]).with_attr("axis", AttrValue::Int(axis))
    }

    pub fn function(name: &str, inputs: &[&str], output: &str, nodes: Vec<Node>) -> Function {
        let mut body = Graph::new(name);
        body.inputs = inputs.iter().map(|&i| ValueInfo::untyped(i)).collect();
        body.outputs = vec![ValueInfo::untyped(output)];
        for n in nodes {
            body.add_node(n);
        }
        Function {
            name: name.into(),
            domain: "local".into(),
            overload: None,
            attributes: Vec::new(),
            attribute_defaults: Vec::new(),
            opset_imports: vec![
                OpsetImport {
                    domain: Some(String::new()),
                    version: 13,
                },
                OpsetImport {
                    domain: Some("local".into()),
                    version: 1,
                },
            ],
            body,
            doc_string: None,
            metadata_props: Vec::new(),
        }
    }

    pub fn constant(name: &str, values: &[i64]) -> Node {
        let t = StoredTensor::from_i64s(None, &[values.len() as i64], values);
        Node::new("Constant", name, Vec::<String>::new(), [name])
            .with_attr("value", AttrValue::Tensor(Box::new(t)))
    }

    #[test]
    fn shadowed_loop_input_takes_the_body_type() {
        // The body's formal `x` (int64, no shape) shadows the outer float[2,3,4] `x`.
        let mut body = Graph::new("body");
        body.inputs = vec![
            ValueInfo::new("it", ty(DataType::Int64, "")),
            ValueInfo::new("c", ty(DataType::Bool, "")),
            ValueInfo::new("x", ty(DataType::Int64, "*")),
        ];
        body.outputs = vec![ValueInfo::untyped("c_out"), ValueInfo::untyped("y")];
        body.initializers
            .push(StoredTensor::from_i64s(Some("first"), &[1], &[0]));
        body.add_node(gather("gather_in_body", "x", "first", "y", 0));
        body.add_node(Node::new("Identity", "keep_going", ["c"], ["c_out"]));
        let mut g = Graph::new("main");
        g.inputs = vec![ValueInfo::new("x", ty(DataType::Float, "2,3,4"))];
        g.outputs = vec![ValueInfo::untyped("r")];
        g.initializers
            .push(StoredTensor::from_i64s(Some("trips"), &[], &[2]));
        g.add_node(Node::new("Shape", "shape", ["x"], ["s"]));
        g.add_node(
            Node::new("Loop", "loop", ["trips", "", "s"], ["r"])
                .with_attr("body", AttrValue::Graph(Box::new(body))),
        );
        let model = Model::new(g, 13);
        let (rewritten, report) = check(&model, &[&[("x", f32s(&[2, 3, 4]))]]);
        assert_eq!(
            (report.rewritten, report.skipped),
            (1, 0),
            "{}",
            report.summary()
        );
        assert_eq!(gathers_left(&rewritten), 0);
    }

    /// `f2` holds a Gather; the main graph calls it with a rank-2 argument, `f1` (called with a
    /// rank-3 one) calls it too.
    fn shared_function_model(f2_first: bool, rank3: bool) -> Model {
        let f2 = function(
            "f2",
            &["a"],
            "b",
            vec![
                constant("idx", &[1, 0]),
                gather("gather_in_f2", "a", "idx", "b", 1),
            ],
        );
        let f1 = function(
            "f1",
            &["a"],
            "b",
            vec![Node::new("f2", "call_f2_from_f1", ["a"], ["b"]).with_domain("local")],
        );
        let mut g = Graph::new("main");
        g.inputs = vec![
            ValueInfo::new("x2", ty(DataType::Float, "3,4")),
            ValueInfo::new(
                "x3",
                ty(DataType::Float, if rank3 { "2,3,4" } else { "5,4" }),
            ),
        ];
        g.outputs = vec![ValueInfo::untyped("y2"), ValueInfo::untyped("y3")];
        g.add_node(Node::new("f2", "call_f2", ["x2"], ["y2"]).with_domain("local"));
        g.add_node(Node::new("f1", "call_f1", ["x3"], ["y3"]).with_domain("local"));
        let mut model = Model::new(g, 13);
        model.ensure_opset("local", 1);
        model.functions = if f2_first { vec![f2, f1] } else { vec![f1, f2] };
        model
    }

    #[test]
    fn function_called_with_different_ranks_is_left_alone_in_either_file_order() {
        for f2_first in [true, false] {
            let model = shared_function_model(f2_first, true);
            let feeds = [("x2", f32s(&[3, 4])), ("x3", f32s(&[2, 3, 4]))];
            let (rewritten, report) = check(&model, &[&feeds]);
            assert_eq!(report.rewritten, 0);
            assert_eq!(
                skipped(&report),
                [(
                    "gather_in_f2".to_string(),
                    "call sites pass inputs of different ranks (input 0 has rank 2 at one call \
                     and 3 at another)"
                        .to_string()
                )]
            );
            assert_eq!(rewritten, model);
        }
    }

    #[test]
    fn function_ranks_agree_through_two_levels_of_calls() {
        let model = shared_function_model(true, false);
        let feeds = [("x2", f32s(&[3, 4])), ("x3", f32s(&[5, 4]))];
        let (rewritten, report) = check(&model, &[&feeds]);
        assert_eq!(
            (report.rewritten, report.skipped),
            (1, 0),
            "{}",
            report.summary()
        );
        assert_eq!(gathers_left(&rewritten), 0);
    }

    #[test]
    fn local_function_named_gather_is_a_call_not_the_operator() {
        let mut fake = function(
            "Gather",
            &["a", "i"],
            "b",
            vec![Node::new("Neg", "neg", ["a"], ["b"])],
        );
        fake.domain = String::new();
        let mut g = Graph::new("main");
        g.inputs = vec![
            ValueInfo::new("x", ty(DataType::Float, "3,4")),
            ValueInfo::new("i", ty(DataType::Int64, "2")),
        ];
        g.outputs = vec![ValueInfo::untyped("y")];
        g.add_node(Node::new("Gather", "calls_local_gather", ["x", "i"], ["y"]));
        let mut model = Model::new(g, 13);
        model.functions.push(fake);
        let mut rewritten = model.clone();
        let report = GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).unwrap();
        assert!(report.nodes.is_empty(), "{}", report.summary());
        assert_eq!(rewritten, model);
        // Which one runs is a matter of runtime (onnxruntime runs the operator, ONNX's inliner
        // the function): the interpreter refuses to pick one, naming the function.
        let feeds = vec![
            ("x".to_string(), f32s(&[3, 4])),
            ("i".to_string(), i64s(&[2], &[0, 1])),
        ];
        let err = Session::new(&model).run(feeds).unwrap_err().to_string();
        assert!(
            err.contains("model-local function 'Gather'") && err.contains("rename the function"),
            "{err}"
        );
    }

    #[test]
    fn input_overriding_an_initializer_has_the_input_rank_not_the_initializer_shape() {
        let mut g = Graph::new("main");
        g.inputs = vec![
            ValueInfo::new("w", ty(DataType::Float, "*")),
            ValueInfo::new("i", ty(DataType::Int64, "2")),
        ];
        g.outputs = vec![ValueInfo::untyped("y")];
        g.initializers.push(StoredTensor::raw(
            Some("w"),
            DataType::Float,
            &[4, 3],
            vec![0u8; 48].into(),
        ));
        g.add_node(gather("gather_overridable", "w", "i", "y", 1));
        let model = Model::new(g, 13);
        let feeds = [("w", f32s(&[2, 3, 5])), ("i", i64s(&[2], &[1, 0]))];
        let (_, report) = check(&model, &[&feeds]);
        assert_eq!(
            skipped(&report),
            [(
                "gather_overridable".to_string(),
                "the rank of 'w' is unknown".to_string()
            )]
        );
    }

    #[test]
    fn value_info_with_a_wrong_rank_is_reported_not_believed() {
        let mut g = Graph::new("main");
        g.inputs = vec![
            ValueInfo::new("x", ty(DataType::Float, "2,6")),
            ValueInfo::new("i", ty(DataType::Int64, "2")),
        ];
        g.outputs = vec![ValueInfo::untyped("y")];
        g.value_info = vec![ValueInfo::new("r", ty(DataType::Float, "3,2,2"))];
        g.initializers
            .push(StoredTensor::from_i64s(Some("shape"), &[2], &[3, 4]));
        g.add_node(Node::new("Reshape", "reshape", ["x", "shape"], ["r"]));
        g.add_node(gather("gather_after_reshape", "r", "i", "y", 1));
        let model = Model::new(g, 13);
        let feeds = [("x", f32s(&[2, 6])), ("i", i64s(&[2], &[3, 1]))];
        let (_, report) = check(&model, &[&feeds]);
        assert_eq!(report.rewritten, 1);
        assert_eq!(
            report.declarations,
            ["main: 'r' is declared float[3,2,2] but it has rank 2; the declaration is ignored"]
        );
    }

    /// Every node of every graph exists in the model's opset with its arity, `Reshape` before
    /// opset 5 reshapes floats only, and before IR 4 every initializer is a graph input.
    fn assert_valid_for_opset(model: &Model) {
        let opset = model.opset("").unwrap();
        let registry = multigather::ops::registry();
        let graph = &model.graph;
        let env = multigather::infer::TypeEnv::infer(
            graph,
            &model.opset_imports,
            multigather::infer::TypeEnv::empty(),
        );
        for (_, n) in graph.nodes() {
            if n.domain == "multigather" {
                continue;
            }
            let def = registry
                .lookup(&n.domain, &n.op_type, opset)
                .unwrap_or_else(|| panic!("{} does not exist in opset {opset}", n.op_type));
            def.check_arity(n).unwrap();
            if n.op_type == "Reshape" && opset < 5 {
                let elem = env.get(&n.inputs[0]).and_then(|t| t.elem);
                assert!(
                    matches!(
                        elem,
                        Some(DataType::Float | DataType::Float16 | DataType::Double)
                    ),
                    "Reshape of {elem:?} in opset {opset}\n{}",
                    model_to_text(model)
                );
            }
        }
        if model.ir_version.is_some_and(|v| v < 4) {
            for t in &graph.initializers {
                let name = t.name.as_deref().unwrap_or_default();
                assert!(
                    graph.inputs.iter().any(|v| v.name == name),
                    "initializer '{name}' is not an input in IR 3\n{}",
                    model_to_text(model)
                );
            }
        }
    }

    #[test]
    fn old_opset_and_ir3_gathers_stay_valid_when_rewritten_and_lowered() {
        for opset in 1..=13 {
            for ir in [3, 8] {
                for elem in [DataType::Float, DataType::Int64] {
                    for (dims, idx) in [("", vec![2]), ("2", vec![3, 0]), ("2,2", vec![0, 1, 3, 2])]
                    {
                        let mut g = Graph::new("main");
                        g.inputs = vec![
                            ValueInfo::new("x", ty(elem, "3,4")),
                            ValueInfo::new("i", ty(DataType::Int64, dims)),
                        ];
                        g.outputs = vec![ValueInfo::untyped("y")];
                        g.add_node(gather("gather", "x", "i", "y", 1));
                        let mut model = Model::new(g, opset);
                        model.ir_version = Some(ir);
                        let shape: Vec<usize> =
                            dims.split(',').filter_map(|d| d.parse().ok()).collect();
                        let x = if elem == DataType::Float {
                            f32s(&[3, 4])
                        } else {
                            i64s(&[3, 4], &(0..12).collect::<Vec<_>>())
                        };
                        let feeds = [("x", x), ("i", i64s(&shape, &idx))];
                        let (rewritten, report) = check(&model, &[&feeds]);
                        assert_eq!(report.rewritten, 1, "opset {opset}: {}", report.summary());
                        assert_valid_for_opset(&rewritten);
                        let mut lowered = rewritten.clone();
                        LowerMultiaxis::lower(&mut lowered).unwrap();
                        assert_valid_for_opset(&lowered);
                    }
                }
            }
        }
    }

    /// `GatherND(double[d0,3,3], int64[i0,i1,depth], batch_dims=1)`, directly in the main graph,
    /// in an If branch, or in a model-local function.
    fn symbolic_depth_model(place: &str) -> Model {
        let nd = Node::new("GatherND", "nd_symbolic_depth", ["x", "i"], ["y"])
            .with_attr("batch_dims", AttrValue::Int(1));
        let mut g = Graph::new("main");
        g.inputs = vec![
            ValueInfo::new("x", ty(DataType::Double, "d0,3,3")),
            ValueInfo::new("i", ty(DataType::Int64, "i0,i1,depth")),
        ];
        g.outputs = vec![ValueInfo::untyped("y")];
        let mut model = Model::new(g, 13);
        match place {
            "graph" => {
                model.graph.add_node(nd);
            }
            "if" => {
                let mut then = Graph::new("then");
                then.outputs = vec![ValueInfo::untyped("y_then")];
                let mut nd = nd;
                nd.outputs = vec!["y_then".into()];
                then.add_node(nd);
                let mut other = Graph::new("else");
                other.outputs = vec![ValueInfo::untyped("y_else")];
                other.add_node(Node::new("Identity", "same", ["x"], ["y_else"]));
                model
                    .graph
                    .inputs
                    .insert(0, ValueInfo::new("cond", ty(DataType::Bool, "")));
                model.graph.add_node(
                    Node::new("If", "branch", ["cond"], ["y"])
                        .with_attr("then_branch", AttrValue::Graph(Box::new(then)))
                        .with_attr("else_branch", AttrValue::Graph(Box::new(other))),
                );
            }
            _ => {
                let mut f = function("pick", &["x", "i"], "y", vec![nd]);
                f.opset_imports.truncate(1);
                model.functions.push(f);
                model.ensure_opset("local", 1);
                model
                    .graph
                    .add_node(Node::new("pick", "call", ["x", "i"], ["y"]).with_domain("local"));
            }
        }
        model
    }

    #[test]
    fn gathernd_with_symbolic_depth_is_rewritten_exactly_in_a_graph_a_branch_and_a_function() {
        let x = Tensor::from_vec(
            DataType::Double,
            &[2, 3, 3],
            (0..18).map(f64::from).collect::<Vec<_>>(),
        )
        .unwrap();
        let depth1 = i64s(&[2, 2, 1], &[2, 0, 1, 1]);
        let depth2 = i64s(&[2, 2, 2], &[2, 1, 0, 0, 1, -3, 2, 2]);
        for place in ["graph", "if", "function"] {
            let model = symbolic_depth_model(place);
            let feeds = |i: &Tensor| {
                let mut f = vec![("x", x.clone()), ("i", i.clone())];
                if place == "if" {
                    f.insert(0, ("cond", Tensor::scalar(DataType::Bool, 1u8).unwrap()));
                }
                f
            };
            let (f1, f2) = (feeds(&depth1), feeds(&depth2));
            let (rewritten, report) = check(&model, &[&f1, &f2]);
            assert_eq!(
                (report.rewritten, report.skipped),
                (1, 0),
                "{}",
                report.summary()
            );
            assert_eq!(gathers_left(&rewritten), 0);
            insta::assert_snapshot!(
                format!("gathernd_symbolic_depth_in_{place}"),
                format!(
                    "{}\n==> {}\n\n{}",
                    model_to_text(&model),
                    report.summary(),
                    model_to_text(&rewritten)
                )
            );
        }
    }

    #[test]
    fn gathernd_with_symbolic_depth_refuses_a_depth_the_data_cannot_take() {
        // Depth 3 with batch_dims 1 on rank-3 data: GatherND refuses it, and so must the rewrite.
        let model = symbolic_depth_model("graph");
        let mut rewritten = model.clone();
        GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).unwrap();
        let x = Tensor::from_vec(DataType::Double, &[2, 3, 3], vec![0f64; 18]).unwrap();
        let feeds = vec![
            ("x".to_string(), x),
            ("i".to_string(), i64s(&[2, 1, 3], &[0; 6])),
        ];
        assert!(Session::new(&model).run(feeds.clone()).is_err());
        assert!(Session::new(&rewritten).run(feeds).is_err());
    }

    fn single_node_model(node: Node, data: &str, idx: &str, opset: i64) -> Model {
        let mut g = Graph::new("main");
        g.inputs = vec![
            ValueInfo::new("x", ty(DataType::Float, data)),
            ValueInfo::new("i", ty(DataType::Int64, idx)),
        ];
        g.outputs = vec![ValueInfo::untyped("y")];
        g.add_node(node);
        Model::new(g, opset)
    }

    #[test]
    fn invalid_gathers_are_errors_naming_the_node() {
        let nd = |name: &str| Node::new("GatherND", name, ["x", "i"], ["y"]);
        let cases = [
            (
                single_node_model(gather("bad_axis", "x", "i", "y", 7), "3,4", "2", 13),
                "node 'bad_axis' (Gather): Gather: axis = 7 is invalid: must be in [-2, 2) for rank 2",
            ),
            (
                single_node_model(nd("too_deep"), "3,4", "2,3", 13),
                "node 'too_deep' (GatherND): GatherND: indices.shape[-1] = 3 is invalid: \
                 batch_dims + index depth must be at most the data rank 2",
            ),
            (
                single_node_model(
                    nd("batch_dims_in_opset11").with_attr("batch_dims", AttrValue::Int(0)),
                    "3,4",
                    "2,1",
                    11,
                ),
                "node 'batch_dims_in_opset11' (GatherND): attribute 'batch_dims' is not defined \
                 for GatherND in opset 11",
            ),
            (
                single_node_model(
                    Node::new("GatherElements", "elements_in_opset10", ["x", "i"], ["y"]),
                    "3,4",
                    "3,4",
                    10,
                ),
                "node 'elements_in_opset10' (GatherElements): GatherElements does not exist in \
                 opset 10 (it arrived in opset 11)",
            ),
            (
                single_node_model(
                    Node::new("GatherElements", "ranks_differ", ["x", "i"], ["y"]),
                    "3,4",
                    "3",
                    13,
                ),
                "node 'ranks_differ' (GatherElements): data has rank 2 but indices have rank 1; \
                 they must be equal",
            ),
            (
                single_node_model(
                    gather("float_axis", "x", "i", "y", 0).with_attr("axis", AttrValue::Float(1.0)),
                    "3,4",
                    "2",
                    13,
                ),
                "node 'float_axis' (Gather): attribute 'axis' must be an int, found float",
            ),
        ];
        for (model, want) in cases {
            let mut m = model.clone();
            let err = GatherToMultiaxis::rewrite(&mut m, RewriteConfig::default()).unwrap_err();
            assert_eq!(err.to_string(), format!("pass GatherToMultiaxis: {want}"));
        }
    }

    /// Runs `model` and its rewrite (and the rewrite's lowering) on `feeds`: both must fail, or
    /// both give the same values.
    fn same_outcome(model: &Model, feeds: &[(&str, Tensor)]) -> bool {
        let mut rewritten = model.clone();
        GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).unwrap();
        let mut lowered = rewritten.clone();
        LowerMultiaxis::lower(&mut lowered).unwrap();
        let feeds: Vec<(String, Tensor)> = feeds
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        let want = Session::new(model).run(feeds.clone());
        [rewritten, lowered].iter().all(|m| {
            let got = Session::new(m).run(feeds.clone());
            match (&want, &got) {
                (Err(_), Err(_)) => true,
                (Ok(w), Ok(g)) => multigather::verify::compare(w, g)
                    .iter()
                    .all(|c| c.identical),
                _ => false,
            }
        })
    }

    #[test]
    fn a_shared_dim_param_is_not_a_proof_of_a_size() {
        // GatherElements(data[B,5,H], indices[B,2,H]) fed indices with H = 1 and data with
        // H = 3: the original gives [2,2,1], and so must the rewrite (it keeps the crop).
        let model = single_node_model(
            Node::new("GatherElements", "pick", ["x", "i"], ["y"])
                .with_attr("axis", AttrValue::Int(1)),
            "B,5,H",
            "B,2,H",
            13,
        );
        let x = Tensor::from_vec(
            DataType::Float,
            &[2, 5, 3],
            (0..30).map(|v| v as f32).collect(),
        )
        .unwrap();
        let feeds = [("x", x), ("i", i64s(&[2, 2, 1], &[4, 0, 1, 3]))];
        let (rewritten, _) = check(&model, &[&feeds]);
        let out = run(&rewritten, &feeds);
        assert_eq!(out[0].1.shape(), [2, 2, 1]);
        // GatherND batch dims declared alike but fed apart: the original fails, so must the
        // rewrite, instead of broadcasting a batch of 1.
        let nd = single_node_model(
            Node::new("GatherND", "nd", ["x", "i"], ["y"])
                .with_attr("batch_dims", AttrValue::Int(1)),
            "B,5",
            "B,1",
            13,
        );
        for (xs, is) in [([1, 5], [3, 1]), ([3, 5], [1, 1]), ([3, 5], [3, 1])] {
            let x = Tensor::from_vec(DataType::Float, &xs, vec![1f32; xs[0] * 5]).unwrap();
            let i = i64s(&is, &vec![2; is[0]]);
            assert!(same_outcome(&nd, &[("x", x), ("i", i)]), "{xs:?} {is:?}");
        }
    }

    #[test]
    fn an_error_does_not_become_data_through_a_dimension_of_one() {
        // Static sizes: refused at rewrite time, as the operator refuses them.
        let mut m = single_node_model(
            Node::new("GatherElements", "wide", ["x", "i"], ["y"])
                .with_attr("axis", AttrValue::Int(1)),
            "1,4",
            "3,2",
            13,
        );
        let err = GatherToMultiaxis::rewrite(&mut m, RewriteConfig::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "pass GatherToMultiaxis: node 'wide' (GatherElements): indices have size 3 on axis 0, \
             larger than the data's 1"
        );
        let mut m = single_node_model(
            Node::new("GatherND", "nd", ["x", "i"], ["y"])
                .with_attr("batch_dims", AttrValue::Int(1)),
            "1,4",
            "3,1",
            13,
        );
        let err = GatherToMultiaxis::rewrite(&mut m, RewriteConfig::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("batch dimension 0 is 1 in the data but 3 in the indices"),
            "{err}"
        );
        // Sizes known only at run time: the rewrite fails where the original does.
        for (data, idx) in [("N,4", "M,2"), ("1,4", "M,2"), ("N,4", "?,2")] {
            let model = single_node_model(
                Node::new("GatherElements", "wide", ["x", "i"], ["y"])
                    .with_attr("axis", AttrValue::Int(1)),
                data,
                idx,
                13,
            );
            for rows in [1usize, 3] {
                let x = Tensor::from_vec(DataType::Float, &[1, 4], vec![1f32, 2., 3., 4.]).unwrap();
                let i = i64s(&[rows, 2], &vec![3; rows * 2]);
                assert!(
                    same_outcome(&model, &[("x", x), ("i", i)]),
                    "{data} {idx} {rows}"
                );
            }
        }
    }

    #[test]
    fn negative_dim_value_is_an_unknown_size() {
        // PaddlePaddle writes -1 for a dynamic dimension.
        let model = single_node_model(gather("pick", "x", "i", "y", 1), "-1,4", "2", 13);
        let feeds = [("x", f32s(&[3, 4])), ("i", i64s(&[2], &[3, 0]))];
        let (rewritten, report) = check(&model, &[&feeds]);
        assert_eq!(report.rewritten, 1);
        assert!(
            !model_to_text(&rewritten).contains("[3,"),
            "{}",
            model_to_text(&rewritten)
        );
        let bytes = multigather::io::to_bytes(&rewritten).unwrap();
        let back = multigather::io::load_bytes(&bytes).unwrap();
        assert_eq!(back.graph.inputs, model.graph.inputs, "-1 is kept as it is");
    }
}
