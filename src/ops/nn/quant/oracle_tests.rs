//! The loops of [`super::fast`] against the reference kernels, on random data with ties, NaNs,
//! infinities, saturating values and negative zeros.

use crate::ir::{AttrValue, Node};

use super::*;

fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(DataType::Float, shape, v).unwrap()
}

/// A value of the input to quantize: ordinary, a tie after scaling, or special.
fn x_value() -> impl proptest::strategy::Strategy<Value = f32> {
    use proptest::prelude::*;
    // Float ranges come from integers: proptest's own float range sampler trips a debug
    // assertion of its own on some seeds.
    prop_oneof![
        (-300_000_000i32..300_000_000).prop_map(|k| k as f32 * 1e-6),
        (-300i32..300).prop_map(|k| k as f32 + 0.5),
        (-70000i32..70000).prop_map(|k| k as f32 * 0.25),
        Just(f32::NAN),
        Just(f32::INFINITY),
        Just(f32::NEG_INFINITY),
        Just(-0.0f32),
        Just(1e30f32),
        Just(-3e38f32),
        any::<u32>().prop_map(f32::from_bits),
    ]
}

/// The layouts of scales the loops take: (x shape, axis, block size, scale shape).
fn granularity() -> impl proptest::strategy::Strategy<Value = (Vec<usize>, i64, i64, Vec<usize>)> {
    use proptest::prelude::*;
    prop_oneof![
        (1usize..70).prop_map(|n| (vec![n], 0, 0, vec![])),
        (1usize..4, 1usize..5, 1usize..40).prop_map(|(a, b, c)| (vec![a, b, c], 1, 0, vec![b])),
        (1usize..4, 1usize..5, 1usize..40).prop_map(|(a, b, c)| (vec![a, b, c], 2, 0, vec![c])),
        (1usize..4, 1usize..30, 1usize..9).prop_map(|(a, c, k)| (
            vec![a, c],
            1,
            k as i64,
            vec![a, c.div_ceil(k)]
        )),
        (1usize..4, 1usize..9, 1usize..5, 1usize..4).prop_map(|(a, c, d, k)| (
            vec![a, c, d],
            1,
            k as i64,
            vec![a, c.div_ceil(k), d]
        )),
    ]
}

fn ctx(node: &Node) -> EvalCtx<'_> {
    EvalCtx {
        node,
        opset: 21,
        runner: &crate::ops::NoSubgraphs,
        prepared: None,
        memo: None,
    }
}

fn same(a: Result<Vec<Tensor>>, b: Result<Vec<Tensor>>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => {
            a.len() == b.len()
                && a.iter().zip(&b).all(|(x, y)| {
                    x.dtype() == y.dtype()
                        && x.shape() == y.shape()
                        && x.as_bytes().unwrap() == y.as_bytes().unwrap()
                })
        }
        (Err(_), Err(_)) => true,
        _ => false,
    }
}

const CODES: [DataType; 4] = [
    DataType::Uint8,
    DataType::Int8,
    DataType::Uint16,
    DataType::Int16,
];

/// A tensor of `dtype` holding `v` (floats rounded, integers wrapped).
fn typed(dtype: DataType, shape: &[usize], v: &[f32]) -> Tensor {
    let ints: Vec<i64> = v.iter().map(|&x| x as i64).collect();
    match dtype {
        DataType::Float => f32s(shape, v.to_vec()),
        DataType::Float16 => Tensor::from_vec(
            dtype,
            shape,
            v.iter()
                .map(|&x| half::f16::from_f32(x))
                .collect::<Vec<_>>(),
        )
        .unwrap(),
        DataType::Bfloat16 => Tensor::from_vec(
            dtype,
            shape,
            v.iter()
                .map(|&x| half::bf16::from_f32(x))
                .collect::<Vec<_>>(),
        )
        .unwrap(),
        _ => store_ints(dtype, shape, &ints).unwrap(),
    }
}

proptest::proptest! {
    #[test]
    fn quantize_loops_give_the_reference_bits(
        (shape, axis, block, sshape) in granularity(),
        xs in proptest::collection::vec(x_value(), 512),
        scales in proptest::collection::vec(prop_scale(), 512),
        zeros in proptest::collection::vec(-40000i32..70000, 512),
        code in 0usize..4,
        xtype in 0usize..3,
        with_zero: bool,
    ) {
        let n: usize = shape.iter().product();
        let m: usize = sshape.iter().product();
        let out = CODES[code];
        let xtype = [DataType::Float, DataType::Float16, DataType::Bfloat16][xtype];
        let x = typed(xtype, &shape, &xs[..n]);
        let s = f32s(&sshape, scales[..m].to_vec());
        let zf: Vec<f32> = zeros[..m].iter().map(|&z| z as f32).collect();
        let z = typed(out, &sshape, &zf);
        let node = Node::new("QuantizeLinear", "q", ["x", "s", "z"], ["y"])
            .with_attr("axis", AttrValue::Int(axis))
            .with_attr("block_size", AttrValue::Int(block))
            .with_attr("output_dtype", AttrValue::Int(out.onnx().into()));
        let inputs = [Some(&x), Some(&s), if with_zero { Some(&z) } else { None }];
        let c = ctx(&node);
        let fast = fast::quantize(&c, &inputs).map(|t| t.into_iter().collect::<Vec<_>>());
        let got = match fast {
            Ok(t) if t.is_empty() => quantize_reference(&c, &inputs),
            other => other,
        };
        let agree = same(got, quantize_reference(&c, &inputs));
        proptest::prop_assert!(agree);
    }

    #[test]
    fn dequantize_loops_give_the_reference_bits(
        (shape, axis, block, sshape) in granularity(),
        xs in proptest::collection::vec(-40000i32..70000, 512),
        scales in proptest::collection::vec(prop_scale(), 512),
        zeros in proptest::collection::vec(-40000i32..70000, 512),
        code in 0usize..4,
        stype in 0usize..3,
        with_zero: bool,
    ) {
        let n: usize = shape.iter().product();
        let m: usize = sshape.iter().product();
        let dtype = CODES[code];
        let stype = [DataType::Float, DataType::Float16, DataType::Bfloat16][stype];
        let xf: Vec<f32> = xs[..n].iter().map(|&v| v as f32).collect();
        let x = typed(dtype, &shape, &xf);
        let s = typed(stype, &sshape, &scales[..m]);
        let zf: Vec<f32> = zeros[..m].iter().map(|&z| z as f32).collect();
        let z = typed(dtype, &sshape, &zf);
        let node = Node::new("DequantizeLinear", "d", ["x", "s", "z"], ["y"])
            .with_attr("axis", AttrValue::Int(axis))
            .with_attr("block_size", AttrValue::Int(block));
        let inputs = [Some(&x), Some(&s), if with_zero { Some(&z) } else { None }];
        let c = ctx(&node);
        let fast = fast::dequantize(&c, &inputs).map(|t| t.into_iter().collect::<Vec<_>>());
        let got = match fast {
            Ok(t) if t.is_empty() => dequantize_reference(&c, &inputs),
            other => other,
        };
        let agree = same(got, dequantize_reference(&c, &inputs));
        proptest::prop_assert!(agree);
    }

    #[test]
    fn dynamic_quantization_loops_give_the_reference_bits(
        xs in proptest::collection::vec(x_value(), 0..300),
    ) {
        let (min, max) = xs.iter().fold((0.0f32, 0.0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let (scale, zero) = dynamic_scale_of(&xs);
        proptest::prop_assert_eq!((scale.to_bits(), zero), {
            let (s, z) = scale_of_range(min, max);
            (s.to_bits(), z)
        });
        let mut got = vec![0u8; xs.len()];
        quantize_u8(&xs, scale, zero, &mut got);
        let want: Vec<u8> = xs
            .iter()
            .map(|&v| ((v / scale).round_ties_even() + f32::from(zero)).clamp(0.0, 255.0) as u8)
            .collect();
        proptest::prop_assert_eq!(got, want);
    }
}

/// A scale: ordinary, tiny, huge, negative or special.
fn prop_scale() -> impl proptest::strategy::Strategy<Value = f32> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (1_000u32..4_000_000).prop_map(|k| k as f32 * 1e-6),
        1 => Just(0.5f32),
        1 => Just(1e-40f32),
        1 => Just(-0.75f32),
        1 => Just(0.0f32),
        1 => Just(f32::INFINITY),
        1 => Just(f32::NAN),
        1 => any::<u32>().prop_map(f32::from_bits),
    ]
}
