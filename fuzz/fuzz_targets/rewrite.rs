//! Fuzz target `rewrite`: the `GatherToMultiaxis` pass on arbitrary models and on generated
//! models built to hit the rewrite's hard cases.
//!
//! The first byte chooses the mode. Even: the rest is loaded as a model file and rewritten
//! through the `PassManager`, which validates the model after it; any `Err` is fine (a model the
//! loader let through may still be refused), a panic is not. What the pass produced must then
//! save, and a second run must change nothing (ARCHITECTURE.md: the rewrite is idempotent).
//!
//! Odd: the rest drives a generator of valid-looking models around gathers (`Gather`,
//! `GatherElements`, `GatherND`) with
//! - names shadowed in subgraphs: a `Loop` body whose formal parameter, or an `If` branch whose
//!   node output, takes the name of an outer value of another rank;
//! - model-local functions shared by call sites of different ranks: called from the main graph
//!   and from another function, the two definitions in either file order;
//! - old opsets (1-18) and IR versions (3-10).
//!
//! When the generated model runs, the rewritten model must run and compute the same bits, its
//! every default-domain node must exist in the model's opset, it must lower back and compute
//! the same bits again (unless an output is empty: the lowered standard gathers check indices
//! that `GatherMultiaxis` never reads there), and a second rewrite must change nothing.

#![no_main]

mod shared;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use multigather::ir::{
    AttrValue, Dim, Function, Graph, Model, Node, OpsetImport, StoredTensor, Type, ValueInfo,
};
use multigather::interp::RunOptions;
use multigather::pass::{GatherToMultiaxis, LowerMultiaxis, Pass, PassManager, RewriteConfig};
use multigather::text::model_to_text;
use multigather::{DataType, Tensor};
use shared::{check_same, session, Reader};

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((&mode, rest)) if mode % 2 == 1 => generated(&mut Reader(rest)),
        _ => bytes_as_model(data),
    }
});

/// The file mode: arbitrary bytes loaded and rewritten.
fn bytes_as_model(data: &[u8]) {
    let Ok(mut model) = multigather::io::load_bytes(data) else {
        return;
    };
    let mut pass = GatherToMultiaxis::new(RewriteConfig::default());
    if PassManager::new()
        .run(&mut model, &mut [&mut pass])
        .is_err()
    {
        return;
    }
    model
        .validate()
        .expect("the pass manager validated the model");
    multigather::io::to_bytes(&model).expect("a rewritten model saves");
    let mut second = GatherToMultiaxis::new(RewriteConfig::default());
    let changed = second
        .run(&mut model)
        .expect("a rewritten model rewrites again");
    assert!(!changed, "a second rewrite changed the model");
}

impl Reader<'_> {
    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A shape of rank `min..=max` with sizes 1-4.
    fn shape(&mut self, min: usize, max: usize) -> Vec<usize> {
        let rank = min + self.below(max - min + 1);
        (0..rank).map(|_| 1 + self.below(4)).collect()
    }
}

/// The shapes of the generated model's two inputs, `x` and `z`; they usually differ in rank.
struct Inputs {
    x: Vec<usize>,
    z: Vec<usize>,
}

fn dims_of(shape: &[usize]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::Known(d as i64)).collect()
}

fn float_input(name: &str, shape: &[usize]) -> ValueInfo {
    ValueInfo::new(name, Type::tensor(DataType::Float, dims_of(shape)))
}

fn int_tensor(name: Option<&str>, dims: &[usize], values: &[i64]) -> StoredTensor {
    let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    StoredTensor::raw(name, DataType::Int64, &dims, Bytes::from(bytes))
}

/// A `Constant` node holding int64 `values` of shape `dims`, named after its output.
fn constant(out: &str, dims: &[usize], values: &[i64]) -> Node {
    Node::new("Constant", out, Vec::<String>::new(), [out]).with_attr(
        "value",
        AttrValue::Tensor(Box::new(int_tensor(None, dims, values))),
    )
}

/// A gather of `data` (axis sizes `dims`) into `out`, with its indices as a `Constant` node
/// named `idx`: returns the two nodes. Index values are in range for `dims` (negative ones from
/// opset 11, where the gathers allow them), and one time in sixteen anything in `-4..=4`;
/// `GatherElements` and `GatherND` appear from opset 11, and one time in sixteen before (an
/// error the rewrite must report, not a panic).
fn gather_nodes(
    r: &mut Reader,
    data: &str,
    dims: &[usize],
    opset: i64,
    idx: &str,
    out: &str,
) -> [Node; 2] {
    let rank = dims.len().max(1);
    let dim = |axis: usize| dims.get(axis).copied().unwrap_or(1) as i64;
    let index = |r: &mut Reader, d: i64| -> i64 {
        if r.byte() % 16 == 0 {
            return i64::from(r.byte() % 9) - 4;
        }
        let low = if opset >= 11 { -d } else { 0 };
        low + i64::from(r.byte()) % (d - low).max(1)
    };
    let newer = opset >= 11 || r.byte() % 16 == 0;
    match if newer { r.below(3) } else { 0 } {
        0 => {
            let shape = r.shape(0, 2);
            let n: usize = shape.iter().product();
            let axis = r.below(rank);
            let values: Vec<i64> = (0..n).map(|_| index(r, dim(axis))).collect();
            let axis = axis as i64 - if r.flag() { rank as i64 } else { 0 };
            [
                constant(idx, &shape, &values),
                Node::new("Gather", out, [data, idx], [out])
                    .with_attr("axis", AttrValue::Int(axis)),
            ]
        }
        1 => {
            // GatherElements: indices of the data's rank, no larger than the data off the axis.
            let axis = r.below(rank);
            let shape: Vec<usize> = (0..rank)
                .map(|k| 1 + r.below(dim(k).max(1) as usize))
                .collect();
            let n: usize = shape.iter().product();
            let values: Vec<i64> = (0..n).map(|_| index(r, dim(axis))).collect();
            [
                constant(idx, &shape, &values),
                Node::new("GatherElements", out, [data, idx], [out])
                    .with_attr("axis", AttrValue::Int(axis as i64)),
            ]
        }
        _ => {
            let depth = 1 + r.below(rank);
            let rows = 1 + r.below(3);
            let values: Vec<i64> = (0..rows * depth)
                .map(|k| index(r, dim(k % depth)))
                .collect();
            [
                constant(idx, &[rows, depth], &values),
                Node::new("GatherND", out, [data, idx], [out]),
            ]
        }
    }
}

/// A model-local function `name(a) -> b` of domain `local`.
fn function(name: &str, opset: i64, nodes: Vec<Node>) -> Function {
    let mut body = Graph::new(name);
    body.inputs = vec![ValueInfo::untyped("a")];
    body.outputs = vec![ValueInfo::untyped("b")];
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
                version: opset,
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

/// Builds a model from the reader: a plain gather on `x`, then one or more of the hard cases.
fn build(r: &mut Reader) -> (Model, Inputs) {
    let opset = 1 + r.below(18) as i64;
    let ir = [3, 4, 6, 7, 8, 10][r.below(6)];
    let inputs = Inputs {
        x: r.shape(1, 3),
        z: r.shape(1, 3),
    };
    let mut g = Graph::new("main");
    g.inputs = vec![float_input("x", &inputs.x), float_input("z", &inputs.z)];
    let mut functions = Vec::new();
    let [c, n] = gather_nodes(r, "x", &inputs.x, opset, "i0", "y0");
    g.add_node(c);
    g.add_node(n);
    g.outputs.push(ValueInfo::untyped("y0"));
    let cases = r.byte();
    if cases & 1 == 1 {
        // A Loop body whose formal parameter `x` carries the outer `z`, of another rank.
        let mut body = Graph::new("body");
        body.inputs = vec![
            ValueInfo::new("it", Type::tensor(DataType::Int64, vec![])),
            ValueInfo::new("c", Type::tensor(DataType::Bool, vec![])),
            ValueInfo::untyped("x"),
        ];
        body.outputs = vec![ValueInfo::untyped("c_out"), ValueInfo::untyped("x_out")];
        let [c, n] = gather_nodes(r, "x", &inputs.z, opset, "i_body", "picked");
        body.add_node(c);
        body.add_node(n);
        body.add_node(Node::new("Identity", "keep_going", ["c"], ["c_out"]));
        body.add_node(Node::new("Identity", "carry", ["x"], ["x_out"]));
        body.outputs.push(ValueInfo::untyped("picked"));
        g.add_node(constant("trips", &[], &[1]));
        g.add_node(
            Node::new("Loop", "loop", ["trips", "", "z"], ["carried", "scanned"])
                .with_attr("body", AttrValue::Graph(Box::new(body))),
        );
        g.outputs.push(ValueInfo::untyped("carried"));
        g.outputs.push(ValueInfo::untyped("scanned"));
    }
    if cases & 2 == 2 {
        // An If whose branch defines `x` again, from `z`, and gathers from it.
        let branch = |r: &mut Reader, name: &str| {
            let mut b = Graph::new(name);
            b.outputs = vec![ValueInfo::untyped("branch_out")];
            b.add_node(Node::new("Identity", "redefine_x", ["z"], ["x"]));
            let [c, n] = gather_nodes(r, "x", &inputs.z, opset, "i_branch", "branch_out");
            b.add_node(c);
            b.add_node(n);
            b
        };
        let then_branch = branch(r, "then");
        let else_branch = branch(r, "else");
        let cond = r.flag();
        // A Constant, not an initializer: before IR 4 an initializer must also be an input.
        let cond = StoredTensor::raw(None, DataType::Bool, &[], Bytes::from(vec![u8::from(cond)]));
        g.add_node(
            Node::new("Constant", "cond", Vec::<String>::new(), ["cond"])
                .with_attr("value", AttrValue::Tensor(Box::new(cond))),
        );
        g.add_node(
            Node::new("If", "if", ["cond"], ["from_if"])
                .with_attr("then_branch", AttrValue::Graph(Box::new(then_branch)))
                .with_attr("else_branch", AttrValue::Graph(Box::new(else_branch))),
        );
        g.outputs.push(ValueInfo::untyped("from_if"));
    }
    if cases & 4 == 4 {
        // `f2` gathers; the main graph calls it on `x`, and `f1` (called on `z`) calls it too.
        // Indices that fit both call sites where they can: the smaller size on each axis.
        let both: Vec<usize> = inputs
            .x
            .iter()
            .zip(&inputs.z)
            .map(|(a, b)| *a.min(b))
            .collect();
        let f2 = function(
            "f2",
            opset,
            gather_nodes(r, "a", &both, opset, "idx", "b").into(),
        );
        let f1 = function(
            "f1",
            opset,
            vec![Node::new("f2", "call_f2_from_f1", ["a"], ["b"]).with_domain("local")],
        );
        g.add_node(Node::new("f2", "call_f2", ["x"], ["from_f2"]).with_domain("local"));
        g.add_node(Node::new("f1", "call_f1", ["z"], ["from_f1"]).with_domain("local"));
        g.outputs.push(ValueInfo::untyped("from_f2"));
        g.outputs.push(ValueInfo::untyped("from_f1"));
        functions = if r.flag() { vec![f2, f1] } else { vec![f1, f2] };
    }
    let mut model = Model::new(g, opset);
    model.ir_version = Some(ir);
    if !functions.is_empty() {
        model.ensure_opset("local", 1);
        model.functions = functions;
    }
    (model, inputs)
}

fn feeds(r: &mut Reader, inputs: &Inputs) -> Vec<(String, Tensor)> {
    let mut tensor = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| f32::from(r.byte())).collect();
        Tensor::from_vec(DataType::Float, shape, values).expect("a small float tensor")
    };
    vec![
        ("x".to_owned(), tensor(&inputs.x)),
        ("z".to_owned(), tensor(&inputs.z)),
    ]
}

/// The first default-domain node of `graph` (or its subgraphs) that does not exist in `opset`
/// with its arity.
fn opset_problem(graph: &Graph, opset: i64, local: &[Function]) -> Option<String> {
    let registry = multigather::ops::registry();
    for (_, n) in graph.nodes() {
        for sub in n.subgraphs() {
            if let Some(p) = opset_problem(sub, opset, local) {
                return Some(p);
            }
        }
        let is_call = local
            .iter()
            .any(|f| f.domain == n.domain && f.name == n.op_type);
        if is_call || !matches!(n.domain.as_str(), "" | "ai.onnx") {
            continue;
        }
        let Some(def) = registry.lookup(&n.domain, &n.op_type, opset) else {
            return Some(format!("{} does not exist in opset {opset}", n.op_type));
        };
        if let Err(e) = def.check_arity(n) {
            return Some(e.to_string());
        }
    }
    None
}

/// Every default-domain node of the model, in the main graph and in the functions, exists in
/// the opset its graph imports.
fn model_opset_problem(model: &Model) -> Option<String> {
    let opset = model.opset("").unwrap_or(1);
    opset_problem(&model.graph, opset, &model.functions).or_else(|| {
        model.functions.iter().find_map(|f| {
            let fopset = multigather::ir::opset_version(&f.opset_imports, "").unwrap_or(opset);
            opset_problem(&f.body, fopset, &model.functions)
        })
    })
}

/// The generated mode.
fn generated(r: &mut Reader) {
    let (model, inputs) = build(r);
    let feeds = feeds(r, &inputs);
    let mut rewritten = model.clone();
    let Ok(_) = GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()) else {
        return;
    };
    rewritten
        .validate()
        .unwrap_or_else(|e| panic!("{e}\n{}", model_to_text(&rewritten)));
    let bytes = multigather::io::to_bytes(&rewritten).expect("a rewritten model saves");
    multigather::io::load_bytes(&bytes).expect("a saved rewritten model loads");
    // A model valid in its opset stays valid (one that is not is the generator's doing).
    if model_opset_problem(&model).is_none() {
        if let Some(problem) = model_opset_problem(&rewritten) {
            panic!("{problem}\n{}", model_to_text(&rewritten));
        }
    }
    let mut again = rewritten.clone();
    let second = GatherToMultiaxis::rewrite(&mut again, RewriteConfig::default())
        .expect("a rewritten model rewrites again");
    assert_eq!(second.rewritten, 0, "a second rewrite changed the model");
    let options = RunOptions {
        threads: Some(1),
        ..RunOptions::default()
    };
    let Ok(expected) = session(&model, &options).run(feeds.clone()) else {
        return;
    };
    check_same(&model, &rewritten, "rewritten", &feeds, &expected, &options);
    if expected.iter().any(|(_, t)| t.is_empty()) {
        return;
    }
    if LowerMultiaxis::lower(&mut rewritten).is_ok() {
        check_same(
            &model,
            &rewritten,
            "rewritten and lowered",
            &feeds,
            &expected,
            &options,
        );
    }
}
