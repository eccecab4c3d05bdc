//! The lowering pass: snapshots of every fixture rewritten and then lowered, and of hand-built
//! `GatherMultiaxis` nodes for what the rewrite never produces (axes out of order, broadcasting
//! both ways, empty axes, modes, symbolic dimensions, old opsets); the properties every lowering
//! must have (a valid model, no `multigather` left anywhere, graph inputs and outputs kept,
//! idempotent, saved and loaded back unchanged); and the reasons for what is left alone.
//!
//! That the lowered models compute what the originals compute is proven by running them in
//! onnxruntime: `scripts/check_onnxruntime.py`, and `scripts/check_rewrites.py` for every
//! fixture. Lowerings to another opset (`LowerConfig::target_opset`) are run here in the
//! interpreter against the original.

use std::path::Path;

use multigather::ir::{AttrValue, Dim, Function, Graph, Model, Node, OpsetImport, Type, ValueInfo};
use multigather::pass::{
    GatherToMultiaxis, LowerConfig, LowerMultiaxis, LowerReport, NodeOutcome, RewriteConfig,
};
use multigather::text::model_to_text;
use multigather::DataType;

const DOMAIN: &str = "multigather";

/// Where the `multigather` domain is still mentioned, if anywhere.
fn multigather_left(model: &Model) -> Option<String> {
    let nodes: usize = model
        .op_histogram()
        .iter()
        .filter(|(op, _)| op.starts_with("multigather."))
        .map(|(_, n)| n)
        .sum();
    if nodes > 0 {
        return Some(format!("{nodes} multigather node(s)"));
    }
    if model.opset(DOMAIN).is_some() {
        return Some("the model's opset import".into());
    }
    model
        .functions
        .iter()
        .find(|f| f.opset_imports.iter().any(|o| o.domain() == DOMAIN))
        .map(|f| format!("the opset import of function {}", f.name))
}

/// Lowers `model` and checks what every complete lowering must satisfy.
fn lower_checked(model: &Model) -> (Model, LowerReport) {
    let mut lowered = model.clone();
    let report = LowerMultiaxis::lower(&mut lowered).unwrap();
    assert_eq!(report.skipped, 0, "{}", report.summary());
    if let Some(left) = multigather_left(&lowered) {
        panic!("{left} left after lowering:\n{}", model_to_text(&lowered));
    }
    assert_eq!(
        model.graph.inputs, lowered.graph.inputs,
        "graph inputs changed"
    );
    let names = |m: &Model| {
        m.graph
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(model), names(&lowered), "graph outputs changed");

    let mut again = lowered.clone();
    let second = LowerMultiaxis::lower(&mut again).unwrap();
    assert_eq!((second.lowered, second.skipped), (0, 0));
    assert_eq!(again, lowered, "a second lowering changed the model");

    let bytes = multigather::io::to_bytes(&lowered).unwrap();
    assert_eq!(multigather::io::load_bytes(&bytes).unwrap(), lowered);
    (lowered, report)
}

#[test]
fn fixture_lowerings() {
    insta::glob!("../fixtures", "*/model.onnx", |path: &std::path::Path| {
        let original = multigather::io::load(path).unwrap();
        let mut rewritten = original.clone();
        GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).unwrap();
        let (lowered, report) = lower_checked(&rewritten);
        // Every gather the rewrite made is lowered back to a standard one.
        let multiaxis = rewritten
            .op_histogram()
            .get("multigather.GatherMultiaxis")
            .copied()
            .unwrap_or(0);
        assert_eq!(report.lowered, multiaxis);
        insta::assert_snapshot!(format!(
            "{}\n==> {}\n\n{}",
            model_to_text(&rewritten),
            report.summary(),
            model_to_text(&lowered)
        ));
    });
}

/// One hand-built node: operand dims (`"4"` known, `"n"` symbolic, `"?"` unknown), axes, mode,
/// element types and opset.
struct Case {
    name: &'static str,
    x: &'static [&'static str],
    i: &'static [&'static str],
    axes: &'static [i64],
    mode: &'static str,
    elem: DataType,
    index_elem: DataType,
    opset: i64,
}

const fn case(
    name: &'static str,
    x: &'static [&'static str],
    i: &'static [&'static str],
    axes: &'static [i64],
) -> Case {
    Case {
        name,
        x,
        i,
        axes,
        mode: "error",
        elem: DataType::Float,
        index_elem: DataType::Int64,
        opset: 13,
    }
}

impl Case {
    const fn mode(mut self, mode: &'static str) -> Case {
        self.mode = mode;
        self
    }
    const fn elem(mut self, elem: DataType) -> Case {
        self.elem = elem;
        self
    }
    const fn index_elem(mut self, elem: DataType) -> Case {
        self.index_elem = elem;
        self
    }
    const fn opset(mut self, opset: i64) -> Case {
        self.opset = opset;
        self
    }

    fn dims(spec: &[&str]) -> Vec<Dim> {
        spec.iter()
            .map(|s| match s.parse() {
                Ok(n) => Dim::Known(n),
                Err(_) if *s == "?" => Dim::Unknown,
                Err(_) => Dim::Symbolic((*s).to_owned()),
            })
            .collect()
    }

    fn node(&self, name: &str, output: &str) -> Node {
        let mut node = Node::new("GatherMultiaxis", name, ["x", "i"], [output])
            .with_domain(DOMAIN)
            .with_attr("axes", AttrValue::Ints(self.axes.to_vec()));
        if self.mode != "error" {
            node = node.with_attr("mode", AttrValue::String(self.mode.as_bytes().to_vec()));
        }
        node
    }

    fn model(&self) -> Model {
        let mut g = Graph::new(self.name);
        g.inputs.push(ValueInfo::new(
            "x",
            Type::tensor(self.elem, Case::dims(self.x)),
        ));
        g.inputs.push(ValueInfo::new(
            "i",
            Type::tensor(self.index_elem, Case::dims(self.i)),
        ));
        g.outputs.push(ValueInfo::untyped("y"));
        g.add_node(self.node("gma", "y"));
        let mut model = Model::new(g, self.opset);
        model.ensure_opset(DOMAIN, 1);
        model
    }
}

const CASES: &[Case] = &[
    // Axes out of order and not contiguous; every role of the other dimensions.
    case(
        "axes_2_0_points",
        &["4", "3", "5"],
        &["6", "1", "14"],
        &[2, 0],
    ),
    case("axes_1_0_reversed", &["5", "6"], &["4", "2"], &[1, 0]),
    case(
        "axes_0_2_batch_middle",
        &["4", "3", "5"],
        &["6", "3", "14"],
        &[0, 2],
    ),
    case(
        "axes_3_1_mixed_roles",
        &["2", "4", "1", "5", "3"],
        &["2", "6", "7", "1", "2"],
        &[3, 1],
    ),
    case(
        "axes_1_2_fold_free",
        &["3", "4", "5", "2"],
        &["3", "6", "1", "2"],
        &[1, 2],
    ),
    // One axis.
    case(
        "blocks_input_broadcasts",
        &["1", "5", "1"],
        &["3", "4", "2"],
        &[1],
    ),
    case(
        "blocks_indices_broadcast",
        &["3", "5", "2"],
        &["1", "4", "1"],
        &[1],
    ),
    case("blocks_transpose", &["1", "2", "5"], &["3", "1", "4"], &[2]),
    case(
        "elements_same_shapes",
        &["3", "5", "2"],
        &["3", "4", "2"],
        &[1],
    ),
    case(
        "nd_batch_index_input",
        &["3", "5", "1", "2"],
        &["3", "4", "6", "1"],
        &[1],
    ),
    // No axes.
    case("empty_axes_expand", &["3", "1"], &["1", "4"], &[]),
    case("empty_axes_identity", &["2", "3"], &["2", "1"], &[]),
    case("empty_axes_rank0", &[], &[], &[]),
    // Modes.
    case("zero_blocks_float_pads", &["4", "3"], &["6", "1"], &[0]).mode("zero"),
    case(
        "zero_nd_int32_masks",
        &["4", "3", "5"],
        &["6", "1", "14"],
        &[2, 0],
    )
    .mode("zero")
    .elem(DataType::Int32)
    .index_elem(DataType::Int32),
    case("zero_bool_and", &["2", "4"], &["2", "5"], &[1])
        .mode("zero")
        .elem(DataType::Bool),
    case("zero_string_opset18", &["a", "b"], &["a", "c"], &[1, 0])
        .mode("zero")
        .elem(DataType::String)
        .opset(18),
    case("clamp_elements_int32", &["3", "5"], &["3", "4"], &[1])
        .mode("clamp")
        .index_elem(DataType::Int32),
    case("clamp_opset11_where", &["r", "c"], &["6", "1"], &[0])
        .mode("clamp")
        .opset(11),
    // Symbolic and unknown dimensions.
    case(
        "symbolic_elements_expand_both",
        &["n", "5"],
        &["m", "2"],
        &[1],
    ),
    case(
        "symbolic_nd_split",
        &["a", "b", "c"],
        &["p", "1", "q"],
        &[2, 0],
    ),
    case(
        "symbolic_nd_batch_expand",
        &["n", "4", "5"],
        &["m", "2", "2"],
        &[1, 2],
    ),
    case(
        "unknown_indices_rank_from_input",
        &["4", "3"],
        &["?", "1"],
        &[0],
    ),
    // Old opsets.
    case("blocks_opset7", &["5", "2"], &["3", "1"], &[0]).opset(7),
    case("nd_opset11_no_batch", &["4", "5"], &["3", "2"], &[0, 1]).opset(11),
    // One axis with batch and block dimensions, before GatherND has batch dimensions.
    case(
        "elements_for_nd_batch_index_input_opset11",
        &["3", "5", "1", "2"],
        &["3", "4", "6", "1"],
        &[1],
    )
    .opset(11),
    case(
        "elements_for_nd_symbolic_opset11",
        &["n", "5", "h"],
        &["n", "2", "1"],
        &[1],
    )
    .mode("clamp")
    .opset(11),
];

/// Dims of a hand-built case made concrete: symbols become 3, unknowns 2.
fn concrete(spec: &[&str]) -> Vec<usize> {
    spec.iter()
        .map(|s| s.parse().unwrap_or(if *s == "?" { 2 } else { 3 }))
        .collect()
}

/// The opset-11 lowerings compute what the operator does: the interpreter runs the node and its
/// lowering on the same random feeds, and the outputs agree bit for bit (onnxruntime checks the
/// other hand-built cases through `scripts/check_onnxruntime.py`).
#[test]
fn opset11_lowerings_compute_what_the_operator_does() {
    use multigather::interp::Session;
    use multigather::tensor::Tensor;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for c in CASES
        .iter()
        .filter(|c| c.name.starts_with("elements_for_nd"))
    {
        let model = c.model();
        let (lowered, report) = lower_checked(&model);
        assert_eq!(
            report.by_pattern.keys().collect::<Vec<_>>(),
            [&multigather::pass::Pattern::Elements]
        );
        let (xs, is) = (concrete(c.x), concrete(c.i));
        let axis_size = xs[c.axes[0] as usize] as u64;
        let x: Vec<f32> = (0..xs.iter().product::<usize>())
            .map(|_| next() as u32 as f32)
            .collect();
        // In range, negative ones included; `clamp` cases also out of range.
        let spread = if c.mode == "clamp" {
            4 * axis_size
        } else {
            2 * axis_size
        };
        let i: Vec<i64> = (0..is.iter().product::<usize>())
            .map(|_| (next() % spread) as i64 - (spread / 2) as i64)
            .collect();
        let feeds = vec![
            (
                "x".to_owned(),
                Tensor::from_vec(DataType::Float, &xs, x).unwrap(),
            ),
            (
                "i".to_owned(),
                Tensor::from_vec(DataType::Int64, &is, i).unwrap(),
            ),
        ];
        let want = Session::new(&model).run(feeds.clone()).unwrap();
        let got = Session::new(&lowered).run(feeds).unwrap();
        assert_eq!(want[0].1.shape(), got[0].1.shape(), "{}", c.name);
        assert_eq!(
            want[0].1.as_bytes().unwrap(),
            got[0].1.as_bytes().unwrap(),
            "{}",
            c.name
        );
    }
}

#[test]
fn hand_built_lowerings() {
    for c in CASES {
        let model = c.model();
        let (lowered, report) = lower_checked(&model);
        insta::assert_snapshot!(
            c.name,
            format!(
                "{}\n==> {}\n\n{}",
                model_to_text(&model),
                report.summary(),
                model_to_text(&lowered)
            )
        );
    }
}

#[test]
fn unsupported_nodes_are_reported_and_kept() {
    let cases = [
        (
            case("float8_data", &["4"], &["2"], &[0]).elem(DataType::Float8E4M3FN),
            "no standard ONNX gather accepts element type float8e4m3fn",
        ),
        (
            case("bfloat16_opset12", &["4"], &["2"], &[0])
                .elem(DataType::Bfloat16)
                .opset(12),
            "bfloat16 data needs opset 13; the graph imports opset 12",
        ),
        (
            case(
                "nd_batch_opset11",
                &["3", "4", "5"],
                &["3", "2", "2"],
                &[1, 2],
            )
            .opset(11),
            "GatherND with batch dimensions needs opset 12; the graph imports opset 11",
        ),
        (
            case("elements_opset10", &["3", "5"], &["3", "4"], &[1]).opset(10),
            "GatherElements needs opset 11; the graph imports opset 10",
        ),
        (
            case("zero_opset8", &["4", "3"], &["6", "1"], &[0])
                .mode("zero")
                .opset(8),
            "mode 'zero' (Where, Less) needs opset 9; the graph imports opset 8",
        ),
        (
            case("float_indices", &["4"], &["2"], &[0]).index_elem(DataType::Float),
            "indices 'i' are float, not int32 or int64",
        ),
        (
            case("bad_last_dim", &["4", "5"], &["3", "3"], &[0, 1]),
            "the last indices dimension 3 is not a multiple of the coordinate size 2",
        ),
        (
            case("not_broadcastable", &["3", "5"], &["4", "2"], &[1]),
            "dimension 0 does not broadcast: input has 3, logical indices have 4",
        ),
        (
            case("bad_axis", &["4", "5"], &["3", "1"], &[2]),
            "axis 2 is out of range for rank 2",
        ),
        (
            case("bad_mode", &["4"], &["2"], &[0]).mode("wrap"),
            "unknown mode \"wrap\"; expected \"error\", \"zero\" or \"clamp\"",
        ),
    ];
    for (c, reason) in cases {
        let mut model = c.model();
        let before = model.clone();
        let report = LowerMultiaxis::lower(&mut model).unwrap();
        assert_eq!((report.lowered, report.skipped), (0, 1), "{}", c.name);
        assert_eq!(
            report.nodes[0].outcome,
            NodeOutcome::Skipped {
                reason: reason.into()
            },
            "{}",
            c.name
        );
        // Nothing changes, and the import stays for the node that is left.
        assert_eq!(model, before, "{}", c.name);
    }
}

#[test]
fn unknown_ranks_are_reported_not_guessed() {
    let mut model = case("opaque", &[], &[], &[0]).model();
    for v in &mut model.graph.inputs {
        v.ty = None;
    }
    let report = LowerMultiaxis::lower(&mut model).unwrap();
    assert_eq!(
        report.nodes[0].outcome,
        NodeOutcome::Skipped {
            reason: "the element type of 'x' is unknown".into()
        }
    );
    let mut model = case("opaque", &[], &[], &[0]).model();
    for v in &mut model.graph.inputs {
        if let Some(Type {
            kind: multigather::ir::TypeKind::Tensor(t),
            ..
        }) = &mut v.ty
        {
            t.shape = None;
        }
    }
    let report = LowerMultiaxis::lower(&mut model).unwrap();
    assert_eq!(
        report.nodes[0].outcome,
        NodeOutcome::Skipped {
            reason: "the ranks of 'x' and 'i' are unknown".into()
        }
    );
    assert!(report
        .summary()
        .contains("the multigather opset import stays"));
    assert_eq!(model.opset(DOMAIN), Some(1));
}

/// A model calling a local function whose body holds a `GatherMultiaxis`, from call sites with
/// the given input dims.
fn function_model(calls: &[(&[&str], &[&str])]) -> Model {
    let c = case("with_function", &[], &[], &[0]);
    let mut body = Graph::new("Pick");
    body.inputs.push(ValueInfo::untyped("x"));
    body.inputs.push(ValueInfo::untyped("i"));
    body.outputs.push(ValueInfo::untyped("y"));
    body.add_node(c.node("fn_gma", "y"));
    let mut g = Graph::new("main");
    for (n, (x, i)) in calls.iter().enumerate() {
        let (xn, i_n, yn) = (format!("x{n}"), format!("i{n}"), format!("y{n}"));
        g.inputs.push(ValueInfo::new(
            &xn,
            Type::tensor(DataType::Float, Case::dims(x)),
        ));
        g.inputs.push(ValueInfo::new(
            &i_n,
            Type::tensor(DataType::Int64, Case::dims(i)),
        ));
        g.outputs.push(ValueInfo::untyped(&yn));
        g.add_node(Node::new("Pick", &format!("call{n}"), [xn, i_n], [yn]).with_domain("local"));
    }
    let mut model = Model::new(g, 13);
    model.ensure_opset("local", 1);
    model.functions.push(Function {
        name: "Pick".into(),
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
                domain: Some(DOMAIN.into()),
                version: 1,
            },
        ],
        body,
        doc_string: None,
        metadata_props: Vec::new(),
    });
    model.ensure_opset(DOMAIN, 1);
    model
}

#[test]
fn functions_are_typed_from_their_call_sites() {
    // Two calls that agree on ranks but not on sizes: the body is lowered with unknown sizes
    // (so the batch dimension is broadcast at run time).
    let model = function_model(&[(&["3", "5"], &["3", "4"]), (&["2", "5"], &["2", "1"])]);
    let (lowered, report) = lower_checked(&model);
    assert_eq!(report.lowered, 1);
    let ops = lowered.op_histogram();
    assert_eq!(
        ops.get("GatherND").or(ops.get("GatherElements")),
        Some(&1),
        "{ops:?}"
    );

    // Calls of different ranks: the body is left alone, with the reason.
    let mut model = function_model(&[(&["3", "5"], &["3", "4"]), (&["5"], &["4"])]);
    let report = LowerMultiaxis::lower(&mut model).unwrap();
    assert_eq!(
        report.nodes[0].outcome,
        NodeOutcome::Skipped {
            reason: "call sites pass inputs of different ranks (input 0 has rank 2 at one call \
                     and 1 at another)"
                .into()
        }
    );
    assert_eq!(model.functions[0].opset_imports.len(), 2);
}

#[test]
fn function_bodies_one_overload_per_distinct_lowering() {
    use multigather::pass::DefineMultiaxisFunctions;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gather_chain/model.onnx");
    let mut model = multigather::io::load(&path).unwrap();
    GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).unwrap();
    let rewritten = model.clone();
    let report = DefineMultiaxisFunctions::define(&mut model).unwrap();
    assert_eq!(
        (report.defined, report.functions, report.skipped),
        (3, 3, 0)
    );
    assert_eq!(model.ir_version, Some(10));
    let overloads: Vec<Option<String>> =
        model.functions.iter().map(|f| f.overload.clone()).collect();
    assert_eq!(
        overloads,
        [
            Some("blocks".into()),
            Some("elements".into()),
            Some("nd".into())
        ]
    );
    // Every node names its overload; the nodes themselves are otherwise unchanged.
    for (_, node) in model.graph.nodes() {
        if node.domain == DOMAIN {
            assert!(node.overload.is_some(), "{}", node.name);
        }
    }

    // A second run has nothing to do.
    let mut again = model.clone();
    let second = DefineMultiaxisFunctions::define(&mut again).unwrap();
    assert_eq!((second.defined, second.functions), (0, 0));
    assert_eq!(again, model);

    // Lowering the result drops the definitions with the nodes.
    let (lowered, _) = lower_checked(&model);
    let (plain, _) = lower_checked(&rewritten);
    assert!(lowered.functions.is_empty());
    assert_eq!(lowered.graph, plain.graph);

    insta::assert_snapshot!(model_to_text(&model));
}

#[test]
fn function_bodies_a_single_lowering_is_defined_without_overload() {
    use multigather::pass::DefineMultiaxisFunctions;
    // Two nodes with the same lowering, one in the main graph and one in a function body
    // (where onnxruntime cannot resolve overloads).
    let mut model = function_model(&[(&["3", "5"], &["2", "5"])]);
    model.graph.add_node(
        Node::new("GatherMultiaxis", "main_gma", ["x0", "i0"], ["y_main"])
            .with_domain(DOMAIN)
            .with_attr("axes", AttrValue::Ints(vec![0])),
    );
    model.graph.outputs.push(ValueInfo::untyped("y_main"));
    let report = DefineMultiaxisFunctions::define(&mut model).unwrap();
    assert_eq!(
        (report.defined, report.functions),
        (2, 1),
        "{}",
        report.summary()
    );
    let f = model.functions.iter().find(|f| f.domain == DOMAIN).unwrap();
    assert_eq!(f.overload, None);
    assert!(model
        .op_histogram()
        .contains_key("multigather.GatherMultiaxis"));
    // Idempotent too: the nodes without overload are served already.
    let mut again = model.clone();
    let second = DefineMultiaxisFunctions::define(&mut again).unwrap();
    assert_eq!((second.defined, second.skipped), (0, 0));
    assert_eq!(again, model);
}

/// The fixture `name` rewritten, then lowered for opset `to`.
fn lowered_for(name: &str, to: i64) -> (Model, multigather::Result<LowerReport>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
        .join("model.onnx");
    let original = multigather::io::load(&path).unwrap();
    let mut lowered = original.clone();
    GatherToMultiaxis::rewrite(&mut lowered, RewriteConfig::default()).unwrap();
    let config = LowerConfig {
        target_opset: Some(to),
    };
    let report = LowerMultiaxis::lower_with(&mut lowered, config);
    if report.is_ok() {
        let inputs = multigather::verify::random_inputs(&original, 0, &Default::default()).unwrap();
        let run = |m: &Model| multigather::interp::Session::new(m).run(inputs.clone());
        let (want, got) = (run(&original).unwrap(), run(&lowered).unwrap());
        let comparisons = multigather::verify::compare(&want, &got);
        assert!(comparisons.iter().all(|c| c.identical), "{name} at {to}");
    }
    (lowered, report)
}

#[test]
fn a_target_opset_lowers_with_the_gathers_of_that_opset() {
    // (fixture, its opset, target, the gather the lowering uses there)
    let cases = [
        ("gather_elements_axis1", 13, 11, "GatherElements"),
        ("gathernd_batch1", 13, 12, "GatherND"),
        ("gathernd_batch1", 13, 11, "GatherElements"),
        ("gather_axis0", 13, 11, "Gather"),
        ("gather_opset11_negative_indices", 11, 13, "Gather"),
        ("gather_opset1", 7, 9, "Gather"),
    ];
    for (name, from, to, op) in cases {
        let (lowered, report) = lowered_for(name, to);
        let report = report.unwrap_or_else(|e| panic!("{name} ({from} -> {to}): {e}"));
        assert_eq!(report.skipped, 0, "{name}: {}", report.summary());
        assert_eq!(lowered.opset(""), Some(to), "{name}");
        assert!(
            lowered.op_histogram().contains_key(op),
            "{name}: {:?}",
            lowered.op_histogram()
        );
        assert_eq!(multigather_left(&lowered), None, "{name}");
    }
}

#[test]
fn a_target_opset_without_the_gather_is_an_error_naming_the_node() {
    let (_, report) = lowered_for("gather_elements_axis1", 10);
    let error = report.unwrap_err().to_string();
    assert!(
        error.contains("cannot lower to opset 10: node '")
            && error.contains("GatherElements needs opset 11; the graph imports opset 10"),
        "{error}"
    );
    assert!(!error.contains('\n'), "{error}");
    let (_, report) = lowered_for("gather_axis0", 0);
    let error = report.unwrap_err().to_string();
    assert!(
        error.contains("target opset 0: the default domain has opsets 1 to "),
        "{error}"
    );
}

#[test]
fn a_target_opset_where_another_node_changes_meaning_is_an_error_naming_it() {
    // A Squeeze with its axes as an input (opset 13) has no equal at opset 11.
    let mut g = Graph::new("main");
    let known = |d: &[i64]| d.iter().map(|&n| Dim::Known(n)).collect::<Vec<_>>();
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(DataType::Float, known(&[1, 3])),
    ));
    g.initializers
        .push(multigather::ir::StoredTensor::from_i64s(
            Some("axes"),
            &[1],
            &[0],
        ));
    g.add_node(Node::new("Squeeze", "drop_batch", ["x", "axes"], ["y"]));
    g.outputs.push(ValueInfo::untyped("y"));
    let mut model = Model::new(g, 13);
    let config = LowerConfig {
        target_opset: Some(11),
    };
    let error = LowerMultiaxis::lower_with(&mut model, config)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(
            "cannot lower to opset 11: node 'drop_batch' (Squeeze) in main: its definition at \
             opset 11 differs from the one at opset 13"
        ),
        "{error}"
    );
}
