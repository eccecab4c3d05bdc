//! A rule written against the public pass API ([`multigather::pass::Rule`]), run by
//! [`multigather::pass::RulePass`] over the main graph, a function body and the bodies of `If`
//! and `Loop` nodes.

use multigather::ir::{
    is_onnx_domain, AttrValue, Dim, Function, Graph, Model, Node, OpsetImport, StoredTensor, Type,
    ValueInfo,
};
use multigather::pass::{Change, PassManager, Rule, RulePass, Site};
use multigather::DataType;

/// `Identity(x) -> y ==> (readers of y read x)`, unless `y` is an output of its graph.
struct FoldIdentity {
    /// The scope of each folded node.
    folded: Vec<String>,
}

impl Rule for FoldIdentity {
    fn visit(&mut self, site: &Site<'_>) -> multigather::Result<Option<Change>> {
        let node = site.node();
        let ([input], [output]) = (node.inputs.as_slice(), node.outputs.as_slice()) else {
            return Ok(None);
        };
        let is_output = site.graph().outputs.iter().any(|o| &o.name == output);
        if node.op_type != "Identity" || !is_onnx_domain(&node.domain) || is_output {
            return Ok(None);
        }
        if input.is_empty() {
            return Ok(None);
        }
        self.folded
            .push(format!("{} in {}", node.name, site.scope()));
        Ok(Some(Change::remove().with_rename(output, input)))
    }
}

fn float(dims: &[i64]) -> Type {
    Type::tensor(
        DataType::Float,
        dims.iter().map(|&d| Dim::Known(d)).collect(),
    )
}

fn graph(name: &str, inputs: Vec<ValueInfo>, outputs: &[&str], nodes: Vec<Node>) -> Graph {
    let mut g = Graph::new(name);
    g.inputs = inputs;
    g.outputs = outputs.iter().map(|&o| ValueInfo::untyped(o)).collect();
    for n in nodes {
        g.add_node(n);
    }
    g
}

/// Identities in the main graph, in a function body, in both branches of an `If` and in a
/// `Loop` body; some of them define their graph's output.
fn model() -> Model {
    let body = graph(
        "f",
        vec![ValueInfo::untyped("p")],
        &["r"],
        vec![
            Node::new("Identity", "id_fn", ["p"], ["q"]),
            Node::new("Relu", "relu_fn", ["q"], ["r"]),
        ],
    );
    let f = Function {
        name: "f".into(),
        domain: "local".into(),
        overload: None,
        attributes: Vec::new(),
        attribute_defaults: Vec::new(),
        opset_imports: vec![OpsetImport {
            domain: Some(String::new()),
            version: 13,
        }],
        body,
        doc_string: None,
        metadata_props: Vec::new(),
    };
    let then_branch = graph(
        "then",
        Vec::new(),
        &["t2"],
        vec![
            Node::new("Identity", "id_then", ["b"], ["t"]),
            Node::new("Relu", "relu_then", ["t"], ["t2"]),
        ],
    );
    let else_branch = graph(
        "else",
        Vec::new(),
        &["e"],
        vec![Node::new("Identity", "id_else_out", ["b"], ["e"])],
    );
    let loop_body = graph(
        "body",
        vec![
            ValueInfo::new("it", Type::tensor(DataType::Int64, vec![])),
            ValueInfo::new("cond", Type::tensor(DataType::Bool, vec![])),
            ValueInfo::untyped("v"),
        ],
        &["cond_out", "v2"],
        vec![
            Node::new("Identity", "id_loop", ["v"], ["w"]),
            Node::new("Neg", "neg_loop", ["w"], ["v2"]),
            Node::new("Identity", "id_cond_out", ["cond"], ["cond_out"]),
        ],
    );
    let mut main = graph(
        "main",
        vec![
            ValueInfo::new("x", float(&[3])),
            ValueInfo::new("c", Type::tensor(DataType::Bool, vec![])),
        ],
        &["y"],
        vec![
            Node::new("Identity", "id_main", ["x"], ["a"]),
            Node::new("f", "call", ["a"], ["b"]).with_domain("local"),
            Node::new("If", "branch", ["c"], ["i"])
                .with_attr("then_branch", AttrValue::Graph(Box::new(then_branch)))
                .with_attr("else_branch", AttrValue::Graph(Box::new(else_branch))),
            Node::new("Loop", "loop", ["trips", "", "i"], ["l"])
                .with_attr("body", AttrValue::Graph(Box::new(loop_body))),
            Node::new("Identity", "id_out", ["l"], ["y"]),
        ],
    );
    main.initializers
        .push(StoredTensor::from_i64s(Some("trips"), &[], &[2]));
    let mut model = Model::new(main, 13);
    model.ensure_opset("local", 1);
    model.functions.push(f);
    model
}

/// Every node of `g` and of its subgraphs, as `name: op(inputs)`.
fn nodes(g: &Graph, out: &mut Vec<String>) {
    for (_, n) in g.nodes() {
        out.push(format!(
            "{}: {}({})",
            n.name,
            n.op_type,
            n.inputs.join(", ")
        ));
        for sub in n.subgraphs() {
            nodes(sub, out);
        }
    }
}

#[test]
fn identity_folds_in_functions_and_subgraphs_but_not_at_graph_outputs() {
    let mut model = model();
    let mut pass = RulePass::new("FoldIdentity", FoldIdentity { folded: Vec::new() });
    // The manager validates the model after the pass.
    let changed = PassManager::new()
        .run(&mut model, &mut [&mut pass])
        .unwrap();
    assert_eq!(changed, vec![("FoldIdentity", true)]);
    assert_eq!(pass.replaced(), 4);
    assert_eq!(
        pass.rule().folded,
        [
            "id_main in main",
            "id_then in main/branch.then_branch",
            "id_loop in main/loop.body",
            "id_fn in function local.f",
        ]
    );
    let mut all = Vec::new();
    nodes(&model.graph, &mut all);
    nodes(&model.functions[0].body, &mut all);
    all.sort();
    assert_eq!(
        all,
        [
            "branch: If(c)",
            "call: f(x)",
            "id_cond_out: Identity(cond)",
            "id_else_out: Identity(b)",
            "id_out: Identity(l)",
            "loop: Loop(trips, , i)",
            "neg_loop: Neg(v)",
            "relu_fn: Relu(p)",
            "relu_then: Relu(b)",
        ]
    );

    // A second run finds nothing left to fold.
    let mut again = RulePass::new("FoldIdentity", FoldIdentity { folded: Vec::new() });
    let changed = PassManager::new()
        .run(&mut model, &mut [&mut again])
        .unwrap();
    assert_eq!(changed, vec![("FoldIdentity", false)]);
}

/// A rule's error stops the walk and reaches the caller with the pass's name.
#[test]
fn a_rule_error_names_the_pass() {
    struct Refuse;
    impl Rule for Refuse {
        fn visit(&mut self, site: &Site<'_>) -> multigather::Result<Option<Change>> {
            Err(multigather::Error::Unsupported(format!(
                "node '{}' in {}",
                site.node().name,
                site.scope()
            )))
        }
    }
    let mut model = model();
    let mut pass = RulePass::new("Refuse", Refuse);
    let error = PassManager::new()
        .run(&mut model, &mut [&mut pass])
        .unwrap_err();
    assert!(error.to_string().contains("Refuse"), "{error}");
    assert!(
        error.to_string().contains("node 'id_main' in main"),
        "{error}"
    );
}
