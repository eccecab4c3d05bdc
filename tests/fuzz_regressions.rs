//! Inputs found by the fuzz targets (`fuzz/`, README "Fuzzing and sanitizers"), each a test named
//! after the crash artifact it reproduces (`fuzz/artifacts/TARGET/crash-HASH`, not committed). The
//! models are rebuilt here with the library's types, so a test reads without the fuzz decoder.

use multigather::interp::Session;
use multigather::ir::{AttrValue, Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
use multigather::pass::{GatherToMultiaxis, LowerMultiaxis, RewriteConfig};
use multigather::{DataType, Tensor};

type Outputs = Vec<(String, Tensor)>;

/// `y = Gather(x, index, axis)` with `x: float[x_dims]` and a scalar int64 index initializer.
fn scalar_gather(opset: i64, x_dims: &[usize], index: i64, axis: i64) -> Model {
    let mut g = Graph::new("g");
    let dims = x_dims.iter().map(|&d| Dim::Known(d as i64)).collect();
    g.inputs
        .push(ValueInfo::new("x", Type::tensor(DataType::Float, dims)));
    g.outputs.push(ValueInfo::untyped("y"));
    g.initializers
        .push(StoredTensor::from_i64s(Some("i"), &[], &[index]));
    g.add_node(Node::new("Gather", "y", ["x", "i"], ["y"]).with_attr("axis", AttrValue::Int(axis)));
    Model::new(g, opset)
}

fn run(model: &Model, x: &Tensor) -> Outputs {
    Session::new(model)
        .run(vec![("x".to_owned(), x.clone())])
        .unwrap_or_else(|e| panic!("{e}\n{}", multigather::text::model_to_text(model)))
}

/// Runs `model`, its rewrite and the rewrite lowered back to standard ONNX on `x`; all three must
/// give the same outputs. Returns them.
fn same_through_rewrite_and_lowering(model: &Model, x: &Tensor) -> Outputs {
    let expected = run(model, x);
    let mut rewritten = model.clone();
    let report = GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).unwrap();
    assert_eq!(report.rewritten, 1, "{}", report.summary());
    assert_eq!(run(&rewritten, x), expected, "rewritten");
    LowerMultiaxis::lower(&mut rewritten).unwrap();
    assert_eq!(run(&rewritten, x), expected, "rewritten and lowered");
    expected
}

/// `interpret`, crash-4189b1532b2a5b59ed6bc0c2c161322611e503a2: `Gather` of a scalar index from
/// `float[3, 0]` gives `float[0]`. The rewrite collapsed its shape operations into `Reshape` to the
/// constant shape `[0]`, but a 0 in `Reshape`'s shape copies the input dim (here 1) unless
/// `allowzero` is set, so the rewritten model failed ("cannot reshape [1, 0] to [0]"). Now the
/// emitter sets `allowzero` (opset 14 and later) or keeps `Unsqueeze` / `Squeeze` (before).
#[test]
fn crash_4189b153_zero_sized_output_of_a_collapsed_reshape() {
    let x = Tensor::from_vec(DataType::Float, &[3, 0], Vec::<f32>::new()).unwrap();
    for opset in [11, 13, 14, 18] {
        for axis in [0, -2] {
            let model = scalar_gather(opset, &[3, 0], -3, axis);
            let outputs = same_through_rewrite_and_lowering(&model, &x);
            assert_eq!(outputs[0].1.shape(), &[0], "opset {opset}");
        }
    }
}

/// The same zero-sized output one level up: `float[2, 3, 0]` indexed on the middle axis gives
/// `float[2, 0]`, where the collapsed reshape's 0 would copy the gathered tensor's 1.
#[test]
fn crash_4189b153_zero_sized_trailing_dim() {
    let x = Tensor::from_vec(DataType::Float, &[2, 3, 0], Vec::<f32>::new()).unwrap();
    for opset in [11, 13, 18] {
        let model = scalar_gather(opset, &[2, 3, 0], 1, 1);
        let outputs = same_through_rewrite_and_lowering(&model, &x);
        assert_eq!(outputs[0].1.shape(), &[2, 0], "opset {opset}");
    }
}

/// Zeros that a plain `Reshape` copies correctly keep the plain form: no `allowzero` attribute
/// where the input has the same 0 at the same position.
#[test]
fn zeros_a_reshape_copies_need_no_allowzero() {
    let model = scalar_gather(18, &[0, 4], 2, 1);
    let x = Tensor::from_vec(DataType::Float, &[0, 4], Vec::<f32>::new()).unwrap();
    same_through_rewrite_and_lowering(&model, &x);
    let mut rewritten = model.clone();
    GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).unwrap();
    let text = multigather::text::model_to_text(&rewritten);
    assert!(!text.contains("allowzero"), "{text}");
}
