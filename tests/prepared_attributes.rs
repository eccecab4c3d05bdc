//! Attributes are parsed once, when the interpreter plans a graph (`OpDef::prepare`): a node
//! whose attributes do not parse is refused before any step runs, with one line naming the node,
//! its operator and the attribute, and the prepared state gives the same results as parsing.

use multigather::interp::Session;
use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
use multigather::{DataType, Tensor};

/// `y = Transpose(Gather(data, indices, axis 0), perm)`, data `float[3, 2]`.
fn model(perm: Vec<i64>) -> Model {
    let mut g = Graph::new("g");
    let known = |name: &str, elem, dims: &[i64]| {
        ValueInfo::new(
            name,
            Type::tensor(elem, dims.iter().map(|&d| Dim::Known(d)).collect()),
        )
    };
    g.inputs.push(known("data", DataType::Float, &[3, 2]));
    g.inputs.push(known("indices", DataType::Int64, &[2]));
    g.outputs.push(known("y", DataType::Float, &[2, 2]));
    g.add_node(Node::new("Gather", "pick", ["data", "indices"], ["rows"]));
    g.add_node(
        Node::new("Transpose", "flip", ["rows"], ["y"]).with_attr("perm", AttrValue::Ints(perm)),
    );
    Model::new(g, 13)
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
