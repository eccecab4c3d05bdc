//! Attributes are parsed once, when the interpreter plans a graph (`OpDef::prepare`): a node
//! whose attributes do not parse is refused before any step runs, with one line naming the node,
//! its operator and the attribute, and the prepared state gives the same results as parsing.

use multigather::interp::Session;
use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
use multigather::{DataType, Tensor};

/// A value of a known type.
fn known(name: &str, elem: DataType, dims: &[i64]) -> ValueInfo {
    ValueInfo::new(
        name,
        Type::tensor(elem, dims.iter().map(|&d| Dim::Known(d)).collect()),
    )
}

/// `y = op(Gather(data, indices, axis 0))`, data `float[3, 2]`: `op` is the node under test,
/// reading `rows` and the graph inputs `extra`; `y` is a float of dims `out`.
fn gather_then(op: Node, out: &[i64], extra: &[&Tensor]) -> Model {
    let mut g = Graph::new("g");
    g.inputs.push(known("data", DataType::Float, &[3, 2]));
    g.inputs.push(known("indices", DataType::Int64, &[2]));
    for (i, t) in extra.iter().enumerate() {
        let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
        g.inputs.push(known(&format!("extra{i}"), t.dtype(), &dims));
    }
    g.outputs.push(known("y", DataType::Float, out));
    g.add_node(Node::new("Gather", "pick", ["data", "indices"], ["rows"]));
    g.add_node(op);
    Model::new(g, 18)
}

/// `y = Transpose(Gather(data, indices, axis 0), perm)`.
fn model(perm: Vec<i64>) -> Model {
    let flip =
        Node::new("Transpose", "flip", ["rows"], ["y"]).with_attr("perm", AttrValue::Ints(perm));
    gather_then(flip, &[2, 2], &[])
}

fn feeds(indices: Vec<i64>) -> Vec<(String, Tensor)> {
    let data = Tensor::from_vec(
        DataType::Float,
        &[3, 2],
        vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0],
    );
    let indices = Tensor::from_vec(DataType::Int64, &[2], indices);
    vec![
        ("data".into(), data.unwrap()),
        ("indices".into(), indices.unwrap()),
    ]
}

#[test]
fn a_bad_attribute_is_refused_when_the_graph_is_planned() {
    // The gather's index 7 would fail first if the transpose's attributes were only read when
    // it runs: the plan refuses the transpose before the gather runs.
    let model = model(vec![-1, 0]);
    let err = Session::new(&model).run(feeds(vec![7, 0])).unwrap_err();
    let message = err.to_string();
    for word in ["'flip'", "Transpose", "perm", "-1"] {
        assert!(message.contains(word), "{message:?} lacks {word:?}");
    }
    assert!(!message.contains('\n'), "{message:?}");
}

#[test]
fn prepared_attributes_give_the_parsed_results_run_after_run() {
    let model = model(vec![1, 0]);
    let session = Session::new(&model);
    for _ in 0..3 {
        let out = session.run(feeds(vec![2, 0])).unwrap();
        assert_eq!(out[0].1.shape(), &[2, 2]);
        assert_eq!(out[0].1.to_vec::<f32>().unwrap(), [4.0, 0.0, 5.0, 1.0]);
    }
    // An out-of-range index is still the gather's error once the plan is built.
    let err = session.run(feeds(vec![7, 0])).unwrap_err().to_string();
    assert!(err.contains("'pick'") && err.contains("Gather"), "{err:?}");
}

#[test]
fn converted_operators_refuse_bad_attributes_when_planned() {
    let int = |v| AttrValue::Int(v);
    let cases = [
        (
            Node::new("Softmax", "soft", ["rows"], ["y"]).with_attr("axis", AttrValue::Float(1.0)),
            vec!["axis"],
        ),
        (
            Node::new("LpNormalization", "lp", ["rows"], ["y"]).with_attr("p", int(3)),
            vec!["p must be 1 or 2, found 3"],
        ),
        (
            Node::new("ReduceSum", "sum", ["rows"], ["y"])
                .with_attr("keepdims", AttrValue::String(b"yes".to_vec())),
            vec!["keepdims"],
        ),
        (
            Node::new("Einsum", "ein", ["rows"], ["y"])
                .with_attr("equation", AttrValue::String(b"ij,jk->ik".to_vec())),
            vec!["'ij,jk->ik' has 2 terms for 1 inputs"],
        ),
        (
            Node::new("Concat", "cat", ["rows"], ["y"]),
            vec!["needs an 'axis' attribute"],
        ),
        (
            Node::new("DepthToSpace", "d2s", ["rows"], ["y"])
                .with_attr("blocksize", int(2))
                .with_attr("mode", AttrValue::String(b"RCD".to_vec())),
            vec!["unknown mode 'RCD'"],
        ),
        (
            Node::new("Shrink", "shrink", ["rows"], ["y"])
                .with_attr("lambd", AttrValue::String(b"half".to_vec())),
            vec!["lambd"],
        ),
        (
            Node::new("LeakyRelu", "leaky", ["rows"], ["y"]).with_attr("alpha", int(1)),
            vec!["alpha"],
        ),
        (
            Node::new("Resize", "grow", ["rows"], ["y"]).with_attr(
                "coordinate_transformation_mode",
                AttrValue::String(b"corners".to_vec()),
            ),
            vec!["unknown coordinate_transformation_mode 'corners'"],
        ),
    ];
    for (node, words) in cases {
        let name = format!("'{}'", node.name);
        let op = node.op_type.clone();
        let model = gather_then(node, &[], &[]);
        let message = Session::new(&model)
            .run(feeds(vec![7, 0]))
            .unwrap_err()
            .to_string();
        for word in [name.as_str(), op.as_str()].into_iter().chain(words) {
            assert!(message.contains(word), "{message:?} lacks {word:?}");
        }
        assert!(!message.contains('\n'), "{message:?}");
    }
    // GatherND's batch_dims, in a graph of its own.
    let node =
        Node::new("GatherND", "nd", ["rows", "extra0"], ["y"]).with_attr("batch_dims", int(-1));
    let at = Tensor::from_vec(DataType::Int64, &[1, 1], vec![0i64]).unwrap();
    let model = gather_then(node, &[], &[&at]);
    let mut feeds = feeds(vec![7, 0]);
    feeds.push(("extra0".into(), at));
    let message = Session::new(&model).run(feeds).unwrap_err().to_string();
    assert!(
        message.contains("'nd'") && message.contains("batch_dims must not be negative"),
        "{message:?}"
    );
}

#[test]
fn an_einsum_parsed_once_runs_the_same_every_time() {
    let mut g = Graph::new("g");
    g.inputs.push(known("a", DataType::Float, &[2, 1, 2]));
    g.inputs.push(known("b", DataType::Float, &[1, 2, 1]));
    g.outputs.push(known("y", DataType::Float, &[2, 1, 1]));
    g.add_node(Node::new("Einsum", "ein", ["a", "b"], ["y"]).with_attr(
        "equation",
        AttrValue::String(b"...ij, ...jk -> ...ik".to_vec()),
    ));
    let model = Model::new(g, 12);
    let session = Session::new(&model);
    let a = Tensor::from_vec(DataType::Float, &[2, 1, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let b = Tensor::from_vec(DataType::Float, &[1, 2, 1], vec![10.0f32, 100.0]).unwrap();
    for _ in 0..3 {
        let out = session
            .run(vec![("a".into(), a.clone()), ("b".into(), b.clone())])
            .unwrap();
        assert_eq!(out[0].1.shape(), &[2, 1, 1]);
        assert_eq!(out[0].1.to_vec::<f32>().unwrap(), [210.0, 430.0]);
    }
}
