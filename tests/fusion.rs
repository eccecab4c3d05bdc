//! Planning-time fusion: a `BatchNormalization` that alone reads a `Conv`'s output folds into the
//! convolution's weights and bias, and nothing else does. Each case is a small `Conv` ->
//! `BatchNormalization` model run twice, fused and with `RunOptions::unfused`: a folding case
//! must drop the normalisation's step and agree with the unfused run to float rounding; every
//! other case must keep the step and agree bit for bit. A `MatMul` or `Gemm` of QDQ-dequantized
//! 8-bit operands must run as `MatMulIntegerToFloat` on the codes, agree with the float product
//! to rounding, and give the same bits on a second run (which reads the packing the first kept).

use multigather::interp::{RunOptions, Session};
use multigather::ir::{tensor_to_stored, AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
use multigather::{DataType, Tensor};

/// How a case departs from the plain `Conv` (with bias) -> `BatchNormalization` model.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    Plain,
    NoConvBias,
    Epsilon,
    /// The convolution's output is a graph output too.
    ConvOutputIsGraphOutput,
    /// A `Relu` reads the convolution's output as well.
    ConvOutputReadTwice,
    /// The running mean is a graph input whose initializer is only a default.
    MeanIsAnInput,
    /// `training_mode = 1`: batch statistics, not the running ones.
    TrainingMode,
    /// `double` weights and data.
    Double,
    /// `float16` weights and data: folded in `f64`, rounded once to `float16`.
    Half,
}

const CHANNELS_IN: usize = 3;
const CHANNELS_OUT: usize = 4;
const SIDE: usize = 5;

fn values(n: usize, seed: u32, scale: f64, offset: f64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            offset + scale * (f64::from(h % 1000) / 1000.0 - 0.5)
        })
        .collect()
}

fn tensor(elem: DataType, shape: &[usize], v: Vec<f64>) -> Tensor {
    match elem {
        DataType::Double => Tensor::from_vec(elem, shape, v),
        DataType::Float16 => Tensor::from_vec(
            elem,
            shape,
            v.into_iter().map(half::f16::from_f64).collect::<Vec<_>>(),
        ),
        DataType::Bfloat16 => Tensor::from_vec(
            elem,
            shape,
            v.into_iter().map(half::bf16::from_f64).collect::<Vec<_>>(),
        ),
        _ => Tensor::from_vec(elem, shape, v.into_iter().map(|x| x as f32).collect()),
    }
    .unwrap()
}

fn model(variant: Variant) -> (Model, Vec<(String, Tensor)>) {
    let elem = match variant {
        Variant::Double => DataType::Double,
        Variant::Half => DataType::Float16,
        _ => DataType::Float,
    };
    let mut g = Graph::new("g");
    let declared = |name: &str, shape: &[usize]| {
        let dims = shape.iter().map(|&d| Dim::Known(d as i64)).collect();
        ValueInfo::new(name, Type::tensor(elem, dims))
    };
    let x_shape = [1, CHANNELS_IN, SIDE, SIDE];
    let y_shape = [1, CHANNELS_OUT, SIDE, SIDE];
    g.inputs.push(declared("x", &x_shape));
    g.outputs.push(declared("y", &y_shape));
    let mut init = |name: &str, shape: &[usize], v: Vec<f64>| {
        g.initializers
            .push(tensor_to_stored(name, &tensor(elem, shape, v)).unwrap());
    };
    init(
        "w",
        &[CHANNELS_OUT, CHANNELS_IN, 3, 3],
        values(CHANNELS_OUT * CHANNELS_IN * 9, 1, 1.0, 0.0),
    );
    init("b", &[CHANNELS_OUT], values(CHANNELS_OUT, 2, 1.0, 0.0));
    init("scale", &[CHANNELS_OUT], values(CHANNELS_OUT, 3, 1.0, 1.0));
    init("beta", &[CHANNELS_OUT], values(CHANNELS_OUT, 4, 1.0, 0.0));
    init("mean", &[CHANNELS_OUT], values(CHANNELS_OUT, 5, 1.0, 0.0));
    init("var", &[CHANNELS_OUT], values(CHANNELS_OUT, 6, 0.5, 1.0));
    let conv_inputs: &[&str] = match variant {
        Variant::NoConvBias => &["x", "w"],
        _ => &["x", "w", "b"],
    };
    g.add_node(
        Node::new("Conv", "conv", conv_inputs.iter().copied(), ["c"])
            .with_attr("pads", AttrValue::Ints(vec![1; 4])),
    );
    let mut bn = Node::new(
        "BatchNormalization",
        "bn",
        ["c", "scale", "beta", "mean", "var"],
        ["y"],
    );
    match variant {
        Variant::Epsilon => bn.set_attr("epsilon", AttrValue::Float(0.25)),
        Variant::TrainingMode => bn.set_attr("training_mode", AttrValue::Int(1)),
        _ => {}
    }
    g.add_node(bn);
    match variant {
        Variant::ConvOutputIsGraphOutput => g.outputs.push(declared("c", &y_shape)),
        Variant::ConvOutputReadTwice => {
            g.add_node(Node::new("Relu", "relu", ["c"], ["r"]));
            g.outputs.push(declared("r", &y_shape));
        }
        Variant::MeanIsAnInput => g.inputs.push(declared("mean", &[CHANNELS_OUT])),
        _ => {}
    }
    let x = tensor(
        elem,
        &x_shape,
        values(x_shape.iter().product(), 7, 4.0, 0.0),
    );
    (Model::new(g, 15), vec![("x".into(), x)])
}

/// The outputs of a run on one thread, and the operator of every step that ran.
fn run(model: &Model, feeds: &[(String, Tensor)], unfused: bool) -> (Vec<Tensor>, Vec<String>) {
    run_on(model, feeds, 1, unfused)
}

#[test]
fn batch_normalization_folds_into_a_convolution_only_when_nothing_else_sees_it() {
    use Variant::*;
    let cases = [
        (Plain, true),
        (NoConvBias, true),
        (Epsilon, true),
        (ConvOutputIsGraphOutput, false),
        (ConvOutputReadTwice, false),
        (MeanIsAnInput, false),
        (TrainingMode, false),
        (Double, false),
        (Half, true),
    ];
    for (variant, folds) in cases {
        let (model, feeds) = model(variant);
        let (fused, fused_ops) = run(&model, &feeds, false);
        let (plain, plain_ops) = run(&model, &feeds, true);
        assert!(plain_ops.iter().any(|op| op == "BatchNormalization"));
        assert_eq!(
            !fused_ops.iter().any(|op| op == "BatchNormalization"),
            folds,
            "{variant:?}: steps {fused_ops:?}"
        );
        assert_eq!(fused.len(), plain.len());
        for (f, p) in fused.iter().zip(&plain) {
            assert_eq!(f.shape(), p.shape(), "{variant:?}");
            if !folds {
                assert_eq!(f, p, "{variant:?}: an unfused plan must not change a bit");
                continue;
            }
            let floats = |t: &Tensor| -> Vec<f32> {
                match t.dtype() {
                    DataType::Float16 => {
                        let v = t.as_slice::<half::f16>().unwrap();
                        v.iter().map(|h| h.to_f32()).collect()
                    }
                    _ => t.to_vec::<f32>().unwrap(),
                }
            };
            // float16 rounds the folded weights and the output: a few of its steps (2^-11).
            let tolerance = match variant {
                Half => 4e-3,
                _ => 1e-5,
            };
            for (a, b) in floats(f).iter().zip(&floats(p)) {
                assert!(
                    (a - b).abs() <= tolerance * b.abs().max(1.0),
                    "{variant:?}: fused {a} vs unfused {b}"
                );
            }
        }
    }
}

/// A convolution of `x: float[1, c, side, side]` by `m` filters with `attrs`, followed by
/// `activation` (a node of the default domain).
fn conv_then(
    c: usize,
    m: usize,
    side: usize,
    group: usize,
    kernel: usize,
    stride: usize,
    activation: Node,
) -> (Model, Vec<(String, Tensor)>) {
    let mut g = Graph::new("g");
    let x_shape = [1, c, side, side];
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(
            DataType::Float,
            x_shape.iter().map(|&d| Dim::Known(d as i64)).collect(),
        ),
    ));
    g.outputs.push(ValueInfo::new(
        "y",
        Type::from(multigather::ir::TypeKind::Tensor(Default::default())),
    ));
    let w_shape = [m, c / group, kernel, kernel];
    let w = tensor(
        DataType::Float,
        &w_shape,
        values(w_shape.iter().product(), 11, 1.0, 0.0),
    );
    g.initializers.push(tensor_to_stored("w", &w).unwrap());
    let b = tensor(DataType::Float, &[m], values(m, 12, 1.0, 0.0));
    g.initializers.push(tensor_to_stored("b", &b).unwrap());
    let pad = (kernel / 2) as i64;
    g.add_node(
        Node::new("Conv", "conv", ["x", "w", "b"], ["c"])
            .with_attr("pads", AttrValue::Ints(vec![pad; 4]))
            .with_attr("strides", AttrValue::Ints(vec![stride as i64; 2]))
            .with_attr("group", AttrValue::Int(group as i64)),
    );
    g.add_node(activation);
    let x = tensor(
        DataType::Float,
        &x_shape,
        values(x_shape.iter().product(), 13, 8.0, 0.0),
    );
    (Model::new(g, 18), vec![("x".into(), x)])
}

/// Runs with `threads`, fused or not: the outputs and the operators of the steps.
fn run_on(
    model: &Model,
    feeds: &[(String, Tensor)],
    threads: usize,
    unfused: bool,
) -> (Vec<Tensor>, Vec<String>) {
    let options = RunOptions {
        threads: Some(threads),
        profile: true,
        unfused,
        ..RunOptions::default()
    };
    let session = Session::with_options(model, options);
    let outputs = session.run(feeds.to_vec()).unwrap();
    let ops = session
        .profile()
        .steps
        .into_iter()
        .map(|s| s.op_type)
        .collect();
    (outputs.into_iter().map(|(_, t)| t).collect(), ops)
}

#[test]
fn activations_run_inside_every_convolution_loop_and_change_no_bit() {
    let activations = [
        Node::new("Relu", "act", ["c"], ["y"]),
        Node::new("LeakyRelu", "act", ["c"], ["y"]).with_attr("alpha", AttrValue::Float(0.1)),
        Node::new("Sigmoid", "act", ["c"], ["y"]),
        Node::new("Tanh", "act", ["c"], ["y"]),
        Node::new("HardSigmoid", "act", ["c"], ["y"])
            .with_attr("alpha", AttrValue::Float(0.3))
            .with_attr("beta", AttrValue::Float(0.4)),
        Node::new("HardSwish", "act", ["c"], ["y"]),
    ];
    // (channels in, filters, side, group, kernel, stride): the loop each shape takes.
    let shapes = [
        (16, 16, 40, 1, 3, 1),  // shifted rows
        (24, 24, 40, 24, 3, 1), // depthwise phase planes
        (24, 24, 41, 24, 3, 2), // depthwise, stride 2
        (32, 48, 64, 1, 1, 1),  // pointwise, column tiles on several threads
        (3, 16, 65, 1, 3, 2),   // im2col tiles
        (8, 16, 200, 1, 3, 2),  // im2col tiles on several threads
        (8, 8, 2, 1, 3, 1),     // a few positions
    ];
    for activation in &activations {
        for &(c, m, side, group, kernel, stride) in &shapes {
            let (model, feeds) = conv_then(c, m, side, group, kernel, stride, activation.clone());
            let (want, plain_ops) = run(&model, &feeds, true);
            let want = &want[0];
            assert_eq!(plain_ops.len(), 2);
            for threads in [1, 3] {
                let (got, ops) = run_on(&model, &feeds, threads, false);
                let got = &got[0];
                let case = format!(
                    "{} after {:?} on {threads} threads",
                    activation.op_type,
                    (c, m, side, group, kernel, stride)
                );
                assert_eq!(ops, ["Conv"], "{case}");
                assert_eq!(got.shape(), want.shape(), "{case}");
                let (got, want) = (got.to_vec::<u32>().unwrap(), want.to_vec::<u32>().unwrap());
                assert!(got == want, "{case}: the fused output differs");
            }
        }
    }
}

/// `x -> QuantizeLinear -> DequantizeLinear -> MatMul/Gemm(., DequantizeLinear(w))`, the QDQ
/// form: per-tensor activation, weights per tensor or per column, with or without a bias.
fn qdq_matmul(
    gemm: bool,
    per_column: bool,
    signed_weights: bool,
) -> (Model, Vec<(String, Tensor)>) {
    let (m, k, n) = (6, 40, 5);
    let mut g = Graph::new("g");
    let float = |dims: &[usize]| {
        Type::tensor(
            DataType::Float,
            dims.iter().map(|&d| Dim::Known(d as i64)).collect(),
        )
    };
    g.inputs.push(ValueInfo::new("x", float(&[m, k])));
    g.outputs.push(ValueInfo::new("y", float(&[m, n])));
    let scalar = |name: &str, elem: DataType, v: f64| {
        let t = match elem {
            DataType::Float => Tensor::from_vec(elem, &[], vec![v as f32]),
            DataType::Uint8 => Tensor::from_vec(elem, &[], vec![v as u8]),
            _ => Tensor::from_vec(elem, &[], vec![v as i8]),
        };
        tensor_to_stored(name, &t.unwrap()).unwrap()
    };
    g.initializers.push(scalar("sa", DataType::Float, 0.05));
    g.initializers.push(scalar("za", DataType::Uint8, 131.0));
    let w_elem = if signed_weights {
        DataType::Int8
    } else {
        DataType::Uint8
    };
    let codes: Vec<f64> = values(k * n, 3, 250.0, if signed_weights { 0.0 } else { 128.0 });
    let w = match w_elem {
        DataType::Int8 => {
            Tensor::from_vec(w_elem, &[k, n], codes.iter().map(|&v| v as i8).collect())
        }
        _ => Tensor::from_vec(w_elem, &[k, n], codes.iter().map(|&v| v as u8).collect()),
    };
    g.initializers
        .push(tensor_to_stored("w", &w.unwrap()).unwrap());
    if per_column {
        let s = Tensor::from_vec(
            DataType::Float,
            &[n],
            vec![0.01f32, 0.02, 0.03, 0.015, 0.025],
        );
        g.initializers
            .push(tensor_to_stored("sw", &s.unwrap()).unwrap());
        let zeros: Vec<f64> = values(n, 5, 20.0, if signed_weights { 0.0 } else { 128.0 });
        let z = match w_elem {
            DataType::Int8 => {
                Tensor::from_vec(w_elem, &[n], zeros.iter().map(|&v| v as i8).collect())
            }
            _ => Tensor::from_vec(w_elem, &[n], zeros.iter().map(|&v| v as u8).collect()),
        };
        g.initializers
            .push(tensor_to_stored("zw", &z.unwrap()).unwrap());
    } else {
        g.initializers.push(scalar("sw", DataType::Float, 0.02));
        g.initializers.push(scalar(
            "zw",
            w_elem,
            if signed_weights { 3.0 } else { 120.0 },
        ));
    }
    g.add_node(Node::new("QuantizeLinear", "q", ["x", "sa", "za"], ["xq"]));
    g.add_node(Node::new(
        "DequantizeLinear",
        "dq",
        ["xq", "sa", "za"],
        ["xd"],
    ));
    g.add_node(
        Node::new("DequantizeLinear", "dqw", ["w", "sw", "zw"], ["wd"])
            .with_attr("axis", AttrValue::Int(1)),
    );
    if gemm {
        let b = tensor(DataType::Float, &[n], values(n, 9, 2.0, 0.0));
        g.initializers.push(tensor_to_stored("b", &b).unwrap());
        g.add_node(Node::new("Gemm", "mm", ["xd", "wd", "b"], ["y"]));
    } else {
        g.add_node(Node::new("MatMul", "mm", ["xd", "wd"], ["y"]));
    }
    let x = tensor(DataType::Float, &[m, k], values(m * k, 7, 12.0, 0.0));
    (Model::new(g, 13), vec![("x".into(), x)])
}

#[test]
fn a_matmul_of_dequantized_codes_runs_on_the_codes() {
    for (gemm, per_column, signed) in [
        (false, false, true),
        (false, true, true),
        (true, false, false),
        (true, true, false),
    ] {
        let case = format!("gemm {gemm}, per column {per_column}, signed {signed}");
        let (model, feeds) = qdq_matmul(gemm, per_column, signed);
        let (plain, plain_ops) = run(&model, &feeds, true);
        assert!(
            plain_ops.iter().any(|op| op == "MatMul" || op == "Gemm"),
            "{case}"
        );
        let options = RunOptions {
            threads: Some(1),
            profile: true,
            ..RunOptions::default()
        };
        let session = Session::with_options(&model, options);
        // Twice: the second run reads the weights the first one packed.
        let first = session.run(feeds.clone()).unwrap();
        let second = session.run(feeds.clone()).unwrap();
        assert_eq!(first, second, "{case}: a kept packing changed the result");
        let ops: Vec<String> = session
            .profile()
            .steps
            .into_iter()
            .map(|s| s.op_type)
            .collect();
        assert!(
            ops.iter()
                .any(|op| op == "com.microsoft.MatMulIntegerToFloat"),
            "{case}: {ops:?}"
        );
        assert!(
            !ops.iter().any(|op| op == "MatMul" || op == "Gemm"),
            "{case}: {ops:?}"
        );
        let (f, p) = (
            first[0].1.to_vec::<f32>().unwrap(),
            plain[0].to_vec::<f32>().unwrap(),
        );
        for (a, b) in f.iter().zip(&p) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "{case}: fused {a} vs unfused {b}"
            );
        }
    }
}

/// `x -> QuantizeLinear -> DequantizeLinear -> Conv(W = DequantizeLinear(int8 codes per output
/// channel), B)`: the QDQ form of a quantized convolution, 4 filters of `c_in` x 3 x 3, padded.
/// Three input channels take the im2col kernel; eight, with codes whose pairs mostly stay
/// within the bound of AVX2's pairs level (one code beyond), take the direct kernel where the
/// CPU has AVX2 or AVX-512 VNNI.
fn qdq_conv(per_channel: bool, c_in: usize) -> (Model, Vec<(String, Tensor)>) {
    qdq_conv_to(per_channel, c_in, &["y"])
}

/// The cases of [`qdq_conv`]: per tensor or per channel, three or eight input channels.
const QDQ_CONVS: [(bool, usize); 4] = [(false, 3), (true, 3), (false, 8), (true, 8)];

/// [`qdq_conv`] whose output `y` is also quantized to `yq` (`uint8`, one scale and zero point),
/// with `outputs` the graph's outputs.
fn qdq_conv_to(per_channel: bool, c_in: usize, outputs: &[&str]) -> (Model, Vec<(String, Tensor)>) {
    let (c_out, hw) = (4usize, 6usize);
    let mut g = Graph::new("qdq_conv");
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(
            DataType::Float,
            vec![
                Dim::Known(1),
                Dim::Known(c_in as i64),
                Dim::Known(6),
                Dim::Known(6),
            ],
        ),
    ));
    for &name in outputs {
        let elem = if name == "yq" {
            DataType::Uint8
        } else {
            DataType::Float
        };
        g.outputs
            .push(ValueInfo::new(name, Type::tensor(elem, vec![])));
    }
    let scalar = |name: &str, t: Tensor| tensor_to_stored(name, &t).unwrap();
    if outputs.contains(&"yq") {
        g.initializers.push(scalar(
            "sy",
            Tensor::from_vec(DataType::Float, &[], vec![0.07f32]).unwrap(),
        ));
        g.initializers.push(scalar(
            "zy",
            Tensor::from_vec(DataType::Uint8, &[], vec![131u8]).unwrap(),
        ));
        g.add_node(Node::new("QuantizeLinear", "qy", ["y", "sy", "zy"], ["yq"]));
    }
    g.initializers.push(scalar(
        "sx",
        Tensor::from_vec(DataType::Float, &[], vec![0.04f32]).unwrap(),
    ));
    g.initializers.push(scalar(
        "zx",
        Tensor::from_vec(DataType::Uint8, &[], vec![125u8]).unwrap(),
    ));
    let range = if c_in == 3 { 250.0 } else { 120.0 };
    let mut codes: Vec<i8> = values(c_out * c_in * 9, 4, range, 0.0)
        .iter()
        .map(|&v| v as i8)
        .collect();
    codes[5] = -127;
    g.initializers.push(scalar(
        "w",
        Tensor::from_vec(DataType::Int8, &[c_out, c_in, 3, 3], codes).unwrap(),
    ));
    let (sw, zw) = if per_channel {
        (
            Tensor::from_vec(DataType::Float, &[c_out], vec![0.01f32, 0.02, 0.005, 0.03]).unwrap(),
            Tensor::from_vec(DataType::Int8, &[c_out], vec![0i8; c_out]).unwrap(),
        )
    } else {
        (
            Tensor::from_vec(DataType::Float, &[], vec![0.02f32]).unwrap(),
            Tensor::from_vec(DataType::Int8, &[], vec![2i8]).unwrap(),
        )
    };
    g.initializers.push(scalar("sw", sw));
    g.initializers.push(scalar("zw", zw));
    let b = tensor(DataType::Float, &[c_out], values(c_out, 9, 2.0, 0.0));
    g.initializers.push(tensor_to_stored("b", &b).unwrap());
    g.add_node(Node::new("QuantizeLinear", "q", ["x", "sx", "zx"], ["xq"]));
    g.add_node(Node::new(
        "DequantizeLinear",
        "dq",
        ["xq", "sx", "zx"],
        ["xd"],
    ));
    g.add_node(
        Node::new("DequantizeLinear", "dqw", ["w", "sw", "zw"], ["wd"])
            .with_attr("axis", AttrValue::Int(0)),
    );
    g.add_node(
        Node::new("Conv", "conv", ["xd", "wd", "b"], ["y"])
            .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1])),
    );
    let x = tensor(
        DataType::Float,
        &[1, c_in, hw, hw],
        values(c_in * hw * hw, 7, 10.0, 0.0),
    );
    (Model::new(g, 13), vec![("x".into(), x)])
}

#[test]
fn a_convolution_of_dequantized_codes_runs_on_the_codes() {
    for (per_channel, c_in) in QDQ_CONVS {
        let (model, feeds) = qdq_conv(per_channel, c_in);
        let (plain, plain_ops) = run(&model, &feeds, true);
        let (fused, fused_ops) = run(&model, &feeds, false);
        let dequantizes =
            |ops: &[String]| ops.iter().filter(|op| *op == "DequantizeLinear").count();
        // The activation's DequantizeLinear leaves the plan: the convolution reads the codes.
        assert_eq!(dequantizes(&plain_ops), 1, "{plain_ops:?}");
        assert_eq!(dequantizes(&fused_ops), 0, "{fused_ops:?}");
        assert!(fused_ops.iter().any(|op| op == "Conv"), "{fused_ops:?}");
        let (f, p) = (
            fused[0].to_vec::<f32>().unwrap(),
            plain[0].to_vec::<f32>().unwrap(),
        );
        assert_eq!(fused[0].shape(), plain[0].shape());
        for (a, b) in f.iter().zip(&p) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "per channel {per_channel}, {c_in} channels: fused {a} vs unfused {b}"
            );
        }
    }
}

#[test]
fn an_activation_two_convolutions_read_as_codes_is_not_dequantized() {
    for (per_channel, c_in) in QDQ_CONVS {
        let (one, feeds) = qdq_conv(per_channel, c_in);
        let mut two = one.clone();
        two.graph.add_node(
            Node::new("Conv", "conv2", ["xd", "wd", "b"], ["y2"])
                .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1])),
        );
        two.graph
            .outputs
            .push(ValueInfo::new("y2", Type::tensor(DataType::Float, vec![])));
        let (alone, _) = run(&one, &feeds, false);
        let (both, ops) = run(&two, &feeds, false);
        // Both convolutions read the codes, so the activation's dequantization leaves the plan.
        assert!(!ops.iter().any(|op| op == "DequantizeLinear"), "{ops:?}");
        assert_eq!(ops.iter().filter(|op| *op == "Conv").count(), 2, "{ops:?}");
        assert_eq!(
            both[0], alone[0],
            "per channel {per_channel}, {c_in} channels"
        );
        assert_eq!(
            both[1], alone[0],
            "per channel {per_channel}, {c_in} channels"
        );
    }
}

#[test]
fn a_quantize_alone_reading_a_convolution_of_codes_takes_its_codes_from_the_sums() {
    for (per_channel, c_in) in QDQ_CONVS {
        let (alone, feeds) = qdq_conv_to(per_channel, c_in, &["yq"]);
        let (seen, _) = qdq_conv_to(per_channel, c_in, &["y", "yq"]);
        let (fused, fused_ops) = run(&alone, &feeds, false);
        let (apart, apart_ops) = run(&seen, &feeds, false);
        let quantizes = |ops: &[String]| ops.iter().filter(|op| *op == "QuantizeLinear").count();
        // The input's QuantizeLinear stays; the output's joins the convolution unless the float
        // output is seen too.
        assert_eq!(quantizes(&fused_ops), 1, "{fused_ops:?}");
        assert_eq!(quantizes(&apart_ops), 2, "{apart_ops:?}");
        assert_eq!(fused[0].dtype(), DataType::Uint8);
        assert_eq!(
            fused[0], apart[1],
            "per channel {per_channel}, {c_in} channels"
        );
        let codes = fused[0].as_slice::<u8>().unwrap();
        assert!(codes.iter().any(|&c| c != codes[0]), "{codes:?}");
    }
}

/// `x -> QuantizeLinear -> DequantizeLinear -> Relu`, the codes also a graph output when `seen`.
fn round_trip(seen: bool, zero: Tensor) -> (Model, Vec<(String, Tensor)>) {
    let shape = [3usize, 50];
    let dims = shape
        .iter()
        .map(|&d| Dim::Known(d as i64))
        .collect::<Vec<_>>();
    let mut g = Graph::new("round_trip");
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(DataType::Float, dims.clone()),
    ));
    g.outputs
        .push(ValueInfo::new("y", Type::tensor(DataType::Float, vec![])));
    if seen {
        g.outputs
            .push(ValueInfo::new("q", Type::tensor(zero.dtype(), vec![])));
    }
    let scale = Tensor::from_vec(DataType::Float, &[], vec![0.037f32]).unwrap();
    g.initializers.push(tensor_to_stored("s", &scale).unwrap());
    g.initializers.push(tensor_to_stored("z", &zero).unwrap());
    g.add_node(Node::new("QuantizeLinear", "quant", ["x", "s", "z"], ["q"]));
    g.add_node(Node::new(
        "DequantizeLinear",
        "dequant",
        ["q", "s", "z"],
        ["d"],
    ));
    g.add_node(Node::new("Relu", "relu", ["d"], ["y"]));
    let x = tensor(DataType::Float, &shape, values(150, 3, 12.0, -6.0));
    (Model::new(g, 13), vec![("x".into(), x)])
}

#[test]
fn a_quantize_dequantize_round_trip_is_one_step_with_the_same_bits() {
    let zeros = [
        Tensor::from_vec(DataType::Uint8, &[], vec![128u8]).unwrap(),
        Tensor::from_vec(DataType::Int8, &[], vec![-3i8]).unwrap(),
    ];
    for zero in zeros {
        let (alone, feeds) = round_trip(false, zero.clone());
        let (fused, fused_ops) = run(&alone, &feeds, false);
        let (plain, plain_ops) = run(&alone, &feeds, true);
        assert!(
            !fused_ops.iter().any(|op| op == "QuantizeLinear"),
            "{fused_ops:?}"
        );
        assert!(
            plain_ops.iter().any(|op| op == "QuantizeLinear"),
            "{plain_ops:?}"
        );
        assert_eq!(fused, plain, "{:?}", zero.dtype());
        // Codes a graph output shows stay a step of their own.
        let (seen, feeds) = round_trip(true, zero);
        let (_, seen_ops) = run(&seen, &feeds, false);
        assert!(
            seen_ops.iter().any(|op| op == "QuantizeLinear"),
            "{seen_ops:?}"
        );
    }
}

/// `QuantizeLinear(DequantizeLinear(a) + DequantizeLinear(b))`, the residual sum of a QDQ
/// network: `a` of `uint8` codes `[4, 300]`, `b` of `int8` codes of shape `b_shape`, the sum
/// quantized into the type of `zy`.
fn quantized_add(b_shape: &[usize], zy: Tensor) -> (Model, Vec<(String, Tensor)>) {
    let known = |shape: &[usize]| shape.iter().map(|&d| Dim::Known(d as i64)).collect();
    let mut g = Graph::new("quantized_add");
    g.inputs.push(ValueInfo::new(
        "a",
        Type::tensor(DataType::Uint8, known(&[4, 300])),
    ));
    g.inputs.push(ValueInfo::new(
        "b",
        Type::tensor(DataType::Int8, known(b_shape)),
    ));
    g.outputs
        .push(ValueInfo::new("y", Type::tensor(zy.dtype(), vec![])));
    let f = |v: f32| Tensor::from_vec(DataType::Float, &[], vec![v]).unwrap();
    let constants = [
        ("sa", f(0.05)),
        (
            "za",
            Tensor::from_vec(DataType::Uint8, &[], vec![131u8]).unwrap(),
        ),
        ("sb", f(0.031)),
        (
            "zb",
            Tensor::from_vec(DataType::Int8, &[], vec![-7i8]).unwrap(),
        ),
        ("sy", f(0.07)),
        ("zy", zy),
    ];
    for (name, t) in &constants {
        g.initializers.push(tensor_to_stored(name, t).unwrap());
    }
    g.add_node(Node::new(
        "DequantizeLinear",
        "dqa",
        ["a", "sa", "za"],
        ["fa"],
    ));
    g.add_node(Node::new(
        "DequantizeLinear",
        "dqb",
        ["b", "sb", "zb"],
        ["fb"],
    ));
    g.add_node(Node::new("Add", "add", ["fa", "fb"], ["sum"]));
    g.add_node(Node::new("QuantizeLinear", "q", ["sum", "sy", "zy"], ["y"]));
    let bytes = |shape: &[usize], seed: u32| {
        let n = shape.iter().product();
        values(n, seed, 255.0, 127.5)
            .into_iter()
            .map(|v| v as u8)
            .collect::<Vec<u8>>()
    };
    let a = Tensor::from_vec(DataType::Uint8, &[4, 300], bytes(&[4, 300], 5)).unwrap();
    let b: Vec<i8> = bytes(b_shape, 9).into_iter().map(|v| v as i8).collect();
    let b = Tensor::from_vec(DataType::Int8, b_shape, b).unwrap();
    let feeds = vec![("a".into(), a), ("b".into(), b)];
    (Model::new(g, 19), feeds)
}

#[test]
fn a_quantized_sum_of_dequantized_codes_is_one_step_with_the_same_codes() {
    let zeros = [
        Tensor::from_vec(DataType::Uint8, &[], vec![3u8]).unwrap(),
        Tensor::from_vec(DataType::Int8, &[], vec![-20i8]).unwrap(),
    ];
    // Same shapes take the fused loop; a broadcast `b` the three operators in turn.
    for (b_shape, zero) in [[4usize, 300].as_slice(), &[300]]
        .into_iter()
        .flat_map(|s| zeros.iter().map(move |z| (s, z.clone())))
    {
        let (model, feeds) = quantized_add(b_shape, zero.clone());
        let (fused, fused_ops) = run(&model, &feeds, false);
        let (plain, plain_ops) = run(&model, &feeds, true);
        assert_eq!(fused_ops, ["QuantizedAdd"], "{b_shape:?}");
        assert!(plain_ops.iter().any(|op| op == "Add"), "{plain_ops:?}");
        assert_eq!(fused, plain, "{b_shape:?} {:?}", zero.dtype());
    }
}

/// `DequantizeLinear -> Transpose -> QuantizeLinear` of `uint8` codes, the quantization by
/// `(scale_y, zero_y)`.
fn moved_codes(scale_y: f32, zero_y: u8) -> (Model, Vec<(String, Tensor)>) {
    let mut g = Graph::new("moved_codes");
    let dims = [3usize, 40].iter().map(|&d| Dim::Known(d as i64)).collect();
    g.inputs
        .push(ValueInfo::new("c", Type::tensor(DataType::Uint8, dims)));
    g.outputs
        .push(ValueInfo::new("y", Type::tensor(DataType::Uint8, vec![])));
    let f = |v: f32| Tensor::from_vec(DataType::Float, &[], vec![v]).unwrap();
    let u = |v: u8| Tensor::from_vec(DataType::Uint8, &[], vec![v]).unwrap();
    let constants = [
        ("s", f(0.0173)),
        ("z", u(119)),
        ("sy", f(scale_y)),
        ("zy", u(zero_y)),
    ];
    for (name, t) in &constants {
        g.initializers.push(tensor_to_stored(name, t).unwrap());
    }
    g.add_node(Node::new("DequantizeLinear", "dq", ["c", "s", "z"], ["f"]));
    g.add_node(
        Node::new("Transpose", "t", ["f"], ["ft"]).with_attr("perm", AttrValue::Ints(vec![1, 0])),
    );
    g.add_node(Node::new("QuantizeLinear", "q", ["ft", "sy", "zy"], ["y"]));
    let codes: Vec<u8> = (0..120u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let c = Tensor::from_vec(DataType::Uint8, &[3, 40], codes).unwrap();
    (Model::new(g, 19), vec![("c".into(), c)])
}

#[test]
fn a_movement_between_a_dequantize_and_a_quantize_of_one_scale_moves_the_codes() {
    let (model, feeds) = moved_codes(0.0173, 119);
    let (fused, fused_ops) = run(&model, &feeds, false);
    let (plain, plain_ops) = run(&model, &feeds, true);
    assert_eq!(fused_ops, ["Transpose"]);
    assert_eq!(plain_ops.len(), 3, "{plain_ops:?}");
    assert_eq!(fused, plain);
    // Another scale or zero point changes the codes: the three steps stay.
    for (scale, zero) in [(0.02, 119), (0.0173, 120)] {
        let (model, feeds) = moved_codes(scale, zero);
        let (_, ops) = run(&model, &feeds, false);
        assert_eq!(ops.len(), 3, "{ops:?}");
    }
}

/// How the float output of a dynamically quantized product ends.
#[derive(Clone, Copy, Debug)]
enum ScaledEnd {
    /// `Mul` by the scales, then `Add` of a bias per column.
    Bias,
    /// `Add(bias, Mul(scales, sums))`: the operands the other way round.
    BiasFirst,
    /// A bias `[rows, 1]`, which broadcasts over columns (the operators run in turn).
    BiasPerRow,
    /// No bias: the `Mul` ends it.
    NoBias,
    /// Scales one per column.
    ScalePerColumn,
    /// The scaled product is a graph output too: the `Add` stays a step of its own.
    ProductSeen,
}

/// `DynamicQuantizeLinear(x) -> MatMulInteger(., w) -> Cast -> Mul(scales) [-> Add(bias)]`,
/// the form `onnxruntime.quantization.quantize_dynamic` writes, on a batch `[2, 6, 40]`.
fn dynamic_product(end: ScaledEnd) -> (Model, Vec<(String, Tensor)>) {
    let (batch, m, k, n) = (2, 6, 40, 35);
    let known = |shape: &[usize]| shape.iter().map(|&d| Dim::Known(d as i64)).collect();
    let mut g = Graph::new("dynamic_product");
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(DataType::Float, known(&[batch, m, k])),
    ));
    g.outputs
        .push(ValueInfo::new("y", Type::tensor(DataType::Float, vec![])));
    if matches!(end, ScaledEnd::ProductSeen) {
        g.outputs.push(ValueInfo::new(
            "scaled",
            Type::tensor(DataType::Float, vec![]),
        ));
    }
    let w: Vec<i8> = values(k * n, 7, 255.0, 0.0)
        .into_iter()
        .map(|v| v as i8)
        .collect();
    let w_scale_shape: &[usize] = match end {
        ScaledEnd::ScalePerColumn => &[n],
        _ => &[],
    };
    let w_scales: Vec<f32> = values(w_scale_shape.iter().product(), 8, 0.01, 0.02)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let bias_shape: &[usize] = match end {
        ScaledEnd::BiasPerRow => &[m, 1],
        _ => &[n],
    };
    let bias = tensor(
        DataType::Float,
        bias_shape,
        values(bias_shape.iter().product(), 9, 2.0, 0.0),
    );
    let constants = [
        ("w", Tensor::from_vec(DataType::Int8, &[k, n], w).unwrap()),
        (
            "w_zero",
            Tensor::from_vec(DataType::Int8, &[], vec![3i8]).unwrap(),
        ),
        (
            "w_scale",
            Tensor::from_vec(DataType::Float, w_scale_shape, w_scales).unwrap(),
        ),
        ("bias", bias),
    ];
    for (name, t) in &constants {
        g.initializers.push(tensor_to_stored(name, t).unwrap());
    }
    g.add_node(Node::new(
        "DynamicQuantizeLinear",
        "dql",
        ["x"],
        ["xq", "x_scale", "x_zero"],
    ));
    g.add_node(Node::new(
        "Mul",
        "scales",
        ["x_scale", "w_scale"],
        ["scale"],
    ));
    g.add_node(Node::new(
        "MatMulInteger",
        "product",
        ["xq", "w", "x_zero", "w_zero"],
        ["sums"],
    ));
    let mut cast = Node::new("Cast", "cast", ["sums"], ["sums_f"]);
    cast.set_attr("to", AttrValue::Int(DataType::Float as i64));
    g.add_node(cast);
    let scaled = match end {
        ScaledEnd::NoBias => "y",
        _ => "scaled",
    };
    g.add_node(Node::new(
        "Mul",
        "scale_sums",
        ["sums_f", "scale"],
        [scaled],
    ));
    match end {
        ScaledEnd::NoBias => {}
        ScaledEnd::BiasFirst => {
            g.add_node(Node::new("Add", "add", ["bias", "scaled"], ["y"]));
        }
        _ => {
            g.add_node(Node::new("Add", "add", ["scaled", "bias"], ["y"]));
        }
    }
    let x = tensor(
        DataType::Float,
        &[batch, m, k],
        values(batch * m * k, 4, 6.0, 0.5),
    );
    (Model::new(g, 13), vec![("x".into(), x)])
}

#[test]
fn a_dynamically_quantized_product_is_scaled_as_it_leaves_the_kernel_with_the_same_bits() {
    use ScaledEnd::*;
    for end in [
        Bias,
        BiasFirst,
        BiasPerRow,
        NoBias,
        ScalePerColumn,
        ProductSeen,
    ] {
        let (model, feeds) = dynamic_product(end);
        let (fused, fused_ops) = run(&model, &feeds, false);
        let (plain, plain_ops) = run(&model, &feeds, true);
        assert!(plain_ops.iter().any(|op| op == "Cast"), "{plain_ops:?}");
        assert!(
            fused_ops
                .iter()
                .any(|op| op.ends_with("MatMulIntegerScaled")),
            "{end:?}: {fused_ops:?}"
        );
        assert!(
            !fused_ops
                .iter()
                .any(|op| op == "Cast" || op == "MatMulInteger"),
            "{end:?}: {fused_ops:?}"
        );
        let adds = fused_ops.iter().filter(|op| *op == "Add").count();
        assert_eq!(adds, usize::from(matches!(end, ProductSeen)), "{end:?}");
        let bits = |ts: &[Tensor]| -> Vec<Vec<u32>> {
            ts.iter()
                .map(|t| {
                    t.as_slice::<f32>()
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect()
                })
                .collect()
        };
        assert_eq!(bits(&fused), bits(&plain), "{end:?}");
        assert_eq!(fused[0].shape(), plain[0].shape(), "{end:?}");
        // A second run reads the packing the first kept; two threads store disjoint rows.
        let (again, _) = run(&model, &feeds, false);
        assert_eq!(bits(&again), bits(&plain), "{end:?}");
        let (threaded, _) = run_on(&model, &feeds, 2, false);
        assert_eq!(bits(&threaded), bits(&plain), "{end:?}");
    }
}

/// The exact GELU `Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)` of an `elem` input `x_shape`,
/// the `Div`'s divisor of shape `divisor_shape`; with `erf_seen`, the `Erf`'s result is a
/// graph output too.
fn gelu(
    elem: DataType,
    x_shape: &[usize],
    divisor_shape: &[usize],
    erf_seen: bool,
) -> (Model, Vec<(String, Tensor)>) {
    let known = |shape: &[usize]| shape.iter().map(|&d| Dim::Known(d as i64)).collect();
    let mut g = Graph::new("gelu");
    g.inputs
        .push(ValueInfo::new("x", Type::tensor(elem, known(x_shape))));
    g.outputs
        .push(ValueInfo::new("y", Type::tensor(elem, vec![])));
    if erf_seen {
        g.outputs
            .push(ValueInfo::new("e", Type::tensor(elem, vec![])));
    }
    let divisors = divisor_shape.iter().product();
    let constants = [
        (
            "sqrt2",
            tensor(
                elem,
                divisor_shape,
                values(divisors, 3, 0.2, std::f64::consts::SQRT_2),
            ),
        ),
        ("one", tensor(elem, &[], vec![1.0])),
        ("half", tensor(elem, &[1], vec![0.5])),
    ];
    for (name, t) in &constants {
        g.initializers.push(tensor_to_stored(name, t).unwrap());
    }
    g.add_node(Node::new("Div", "div", ["x", "sqrt2"], ["d"]));
    g.add_node(Node::new("Erf", "erf", ["d"], ["e"]));
    g.add_node(Node::new("Add", "add", ["e", "one"], ["a"]));
    g.add_node(Node::new("Mul", "mul", ["x", "a"], ["m"]));
    g.add_node(Node::new("Mul", "half", ["m", "half"], ["y"]));
    let n = x_shape.iter().product();
    let x = tensor(elem, x_shape, values(n, 11, 12.0, 0.3));
    (Model::new(g, 17), vec![("x".into(), x)])
}

#[test]
fn a_chain_of_element_wise_steps_is_one_pass_with_the_same_bits() {
    let float = DataType::Float;
    // (input type, x, divisor, Erf seen, steps left when fused)
    type Case = (DataType, &'static [usize], &'static [usize], bool, usize);
    let cases: [Case; 11] = [
        // One pass: x and single values; large enough for blocks and threads.
        (float, &[3, 40_000], &[], false, 1),
        (DataType::Float16, &[3, 40_000], &[], false, 1),
        (DataType::Bfloat16, &[7, 300], &[1, 1], false, 1),
        (float, &[7, 300], &[1, 1], false, 1),
        // The divisor is a row repeated along the leading dims (read cyclically, across
        // blocks and threads' parts).
        (float, &[7, 300], &[300], false, 1),
        (float, &[3, 40_000], &[1, 40_000], false, 1),
        (DataType::Float16, &[2, 5, 3001], &[5, 3001], false, 1),
        // A column broadcasts otherwise: the operators run in turn, in one step.
        (float, &[7, 300], &[7, 1], false, 1),
        // A graph output in the middle splits the tree in two.
        (float, &[7, 300], &[], true, 2),
        // Doubles run the operators' own kernels.
        (DataType::Double, &[7, 300], &[], false, 1),
        // A single element.
        (float, &[], &[], false, 1),
    ];
    let bits = |ts: &[Tensor]| -> Vec<Vec<u64>> {
        ts.iter()
            .map(|t| match t.dtype() {
                DataType::Double => t
                    .as_slice::<f64>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect(),
                DataType::Float16 | DataType::Bfloat16 => t
                    .as_slice::<u16>()
                    .unwrap()
                    .iter()
                    .map(|&v| u64::from(v))
                    .collect(),
                _ => t
                    .as_slice::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| u64::from(v.to_bits()))
                    .collect(),
            })
            .collect()
    };
    for (elem, x_shape, divisor_shape, erf_seen, fused_steps) in cases {
        let case = format!("{elem:?} {x_shape:?} / {divisor_shape:?}, Erf seen {erf_seen}");
        let (model, feeds) = gelu(elem, x_shape, divisor_shape, erf_seen);
        let (plain, plain_ops) = run(&model, &feeds, true);
        assert_eq!(plain_ops.len(), 5, "{case}: {plain_ops:?}");
        for threads in [1, 2] {
            let (fused, fused_ops) = run_on(&model, &feeds, threads, false);
            assert_eq!(fused_ops.len(), fused_steps, "{case}: {fused_ops:?}");
            assert_eq!(bits(&fused), bits(&plain), "{case}, {threads} threads");
            assert_eq!(fused[0].shape(), plain[0].shape(), "{case}");
        }
    }
}

/// Every `float16` and `bfloat16` value through each unary operator a chain holds (times one),
/// and through a division by a single value less the value: fused, each pair of steps is one
/// pass over widened blocks; the bits are those of the operators' own kernels in turn, NaNs,
/// infinities, subnormals and the values near each rounding boundary included.
#[test]
fn half_chains_round_every_value_as_the_operators_do() {
    for elem in [DataType::Float16, DataType::Bfloat16] {
        let unary = ["Erf", "Tanh", "Sigmoid", "Exp", "Sqrt"];
        let mut g = Graph::new("half_chains");
        g.inputs.push(ValueInfo::new(
            "x",
            Type::tensor(elem, vec![Dim::Known(1 << 16)]),
        ));
        for (name, v) in [("one", 1.0), ("three", 3.0)] {
            g.initializers
                .push(tensor_to_stored(name, &tensor(elem, &[], vec![v])).unwrap());
        }
        for op in unary {
            let (t, y) = (format!("{op}_t"), format!("{op}_y"));
            g.add_node(Node::new(op, &t, ["x"], [t.as_str()]));
            g.add_node(Node::new("Mul", &y, [t.as_str(), "one"], [y.as_str()]));
            g.outputs
                .push(ValueInfo::new(&y, Type::tensor(elem, vec![])));
        }
        g.add_node(Node::new("Div", "div", ["x", "three"], ["third"]));
        g.add_node(Node::new("Sub", "sub", ["third", "x"], ["rest"]));
        g.outputs
            .push(ValueInfo::new("rest", Type::tensor(elem, vec![])));
        let model = Model::new(g, 17);
        let every: Vec<u16> = (0..=u16::MAX).collect();
        let x = Tensor::from_vec(elem, &[1 << 16], every).unwrap();
        let feeds = vec![("x".to_string(), x)];
        let bits = |ts: &[Tensor]| -> Vec<Vec<u16>> {
            ts.iter()
                .map(|t| t.as_slice::<u16>().unwrap().to_vec())
                .collect()
        };
        let (plain, plain_ops) = run(&model, &feeds, true);
        assert_eq!(plain_ops.len(), 12, "{elem:?}: {plain_ops:?}");
        for threads in [1, 2] {
            let (fused, fused_ops) = run_on(&model, &feeds, threads, false);
            assert_eq!(fused_ops.len(), 6, "{elem:?}: {fused_ops:?}");
            for (k, (f, p)) in bits(&fused).iter().zip(bits(&plain)).enumerate() {
                let at = f.iter().zip(&p).position(|(a, b)| a != b);
                assert_eq!(
                    at, None,
                    "{elem:?} output {k}, {threads} threads: first at x bits {at:?}"
                );
            }
        }
    }
}
