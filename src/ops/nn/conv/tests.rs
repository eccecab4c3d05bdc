use crate::ir::{AttrValue, Node};
use crate::ops::eval_node;

use super::*;

fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(DataType::Float, shape, v).unwrap()
}

/// A direct (seven-loop) convolution to check the im2col path against.
#[allow(clippy::too_many_arguments)]
fn reference(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    ws: [usize; 4],
    group: usize,
    s: [usize; 2],
    d: [usize; 2],
    p: [usize; 2],
    os: [usize; 2],
) -> Vec<f32> {
    let [n, c, h, wd] = xs;
    let [m, cg, kh, kw] = ws;
    let mg = m / group;
    let mut y = vec![0.0; n * m * os[0] * os[1]];
    for b in 0..n {
        for oc in 0..m {
            let g = oc / mg;
            for oy in 0..os[0] {
                for ox in 0..os[1] {
                    let mut acc = 0.0;
                    for ic in 0..cg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * s[0] + ky * d[0]) as isize - p[0] as isize;
                                let ix = (ox * s[1] + kx * d[1]) as isize - p[1] as isize;
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < wd {
                                    let xi = ((b * c + g * cg + ic) * h + iy as usize) * wd
                                        + ix as usize;
                                    let wi = ((oc * cg + ic) * kh + ky) * kw + kx;
                                    acc += x[xi] * w[wi];
                                }
                            }
                        }
                    }
                    y[((b * m + oc) * os[0] + oy) * os[1] + ox] = acc;
                }
            }
        }
    }
    y
}

/// An input of shape `xs` and weights of shape `ws` holding small integers, so that every
/// summation order gives the same bits.
fn small_ints(xs: [usize; 4], ws: [usize; 4]) -> (Vec<f32>, Vec<f32>) {
    let x = (0..xs.iter().product::<usize>())
        .map(|i| ((i * 7) % 11) as f32 - 5.0)
        .collect();
    let w = (0..ws.iter().product::<usize>())
        .map(|i| ((i * 5) % 7) as f32 - 3.0)
        .collect();
    (x, w)
}

#[test]
fn the_onnx_example_with_and_without_padding() {
    let x = f32s(&[1, 1, 5, 5], (0..25).map(|v| v as f32).collect());
    let w = f32s(&[1, 1, 3, 3], vec![1.0; 9]);
    let node = Node::new("Conv", "c", ["x", "w"], ["y"])
        .with_attr("kernel_shape", AttrValue::Ints(vec![3, 3]))
        .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]));
    let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
    let want = [
        12.0, 21.0, 27.0, 33.0, 24.0, 33.0, 54.0, 63.0, 72.0, 51.0, 63.0, 99.0, 108.0, 117.0, 81.0,
        93.0, 144.0, 153.0, 162.0, 111.0, 72.0, 111.0, 117.0, 123.0, 84.0,
    ];
    assert_eq!(y[0], f32s(&[1, 1, 5, 5], want.to_vec()));
    let node = Node::new("Conv", "c", ["x", "w"], ["y"]);
    let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
    let want = [54.0, 63.0, 72.0, 99.0, 108.0, 117.0, 144.0, 153.0, 162.0];
    assert_eq!(y[0], f32s(&[1, 1, 3, 3], want.to_vec()));
}

#[test]
fn fused_conv_adds_z_then_applies_its_activation() {
    let x = f32s(&[1, 1, 5, 5], (0..25).map(|v| v as f32).collect());
    let w = f32s(&[1, 1, 3, 3], vec![1.0; 9]);
    let conv = [
        12.0f32, 21.0, 27.0, 33.0, 24.0, 33.0, 54.0, 63.0, 72.0, 51.0, 63.0, 99.0, 108.0, 117.0,
        81.0, 93.0, 144.0, 153.0, 162.0, 111.0, 72.0, 111.0, 117.0, 123.0, 84.0,
    ];
    let z = f32s(&[1, 1, 5, 5], (0..25).map(|v| -(v as f32)).collect());
    let fused = |activation: &str, params: Vec<f32>| {
        Node::new("FusedConv", "c", ["x", "w", "", "z"], ["y"])
            .with_domain("com.microsoft")
            .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]))
            .with_attr("activation", AttrValue::String(activation.into()))
            .with_attr("activation_params", AttrValue::Floats(params))
    };
    let with_z = [Some(&x), Some(&w), None, Some(&z)];
    let y = eval_node(&fused("Clip", vec![20.0, 100.0]), 1, &with_z).unwrap();
    let want: Vec<f32> = (0..25)
        .map(|i| (conv[i] - i as f32).clamp(20.0, 100.0))
        .collect();
    assert_eq!(y[0], f32s(&[1, 1, 5, 5], want));
    let y = eval_node(&fused("Relu", vec![]), 1, &[Some(&x), Some(&w)]).unwrap();
    assert_eq!(y[0], f32s(&[1, 1, 5, 5], conv.to_vec()));
    let bad = [
        (fused("Gelu", vec![]), "activation 'Gelu' is not one of"),
        (
            Node::new("FusedConv", "c", ["x", "w"], ["y"]).with_domain("com.microsoft"),
            "the activation attribute is required",
        ),
    ];
    for (node, message) in bad {
        let e = eval_node(&node, 1, &[Some(&x), Some(&w)]).unwrap_err();
        assert!(e.to_string().contains(message), "{e}");
    }
    let short_z = f32s(&[1, 1, 5, 1], vec![0.0; 5]);
    let e = eval_node(
        &fused("Relu", vec![]),
        1,
        &[Some(&x), Some(&w), None, Some(&short_z)],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("Z must be float of the output's shape"),
        "{e}"
    );
}

#[test]
fn grouped_strided_dilated_padded_agrees_with_direct_loops() {
    let xs = [2, 4, 23, 19];
    let ws = [6, 2, 3, 2];
    let (x, w) = small_ints(xs, ws);
    let node = Node::new("Conv", "c", ["x", "w"], ["y"])
        .with_attr("group", AttrValue::Int(2))
        .with_attr("strides", AttrValue::Ints(vec![2, 1]))
        .with_attr("dilations", AttrValue::Ints(vec![1, 3]))
        .with_attr("pads", AttrValue::Ints(vec![1, 2, 0, 2]));
    let y = eval_node(
        &node,
        22,
        &[Some(&f32s(&xs, x.clone())), Some(&f32s(&ws, w.clone()))],
    )
    .unwrap();
    // out h = (23 + 1 - 3) / 2 + 1 = 11; out w = (19 + 4 - 4) / 1 + 1 = 20.
    assert_eq!(y[0].shape(), &[2, 6, 11, 20]);
    let want = reference(&x, xs, &w, ws, 2, [2, 1], [1, 3], [1, 2], [11, 20]);
    assert_eq!(y[0].as_slice::<f32>().unwrap(), &want[..]);
}

/// Runs the convolution `node` (inputs `x`, `w` and, when given, `b`) on the small integers
/// of shapes `xs` and `ws`, without and with a bias, on one thread and on three, against
/// `want` (the reference without a bias) plus the bias.
fn agrees_with_and_without_bias(node: Node, xs: [usize; 4], ws: [usize; 4], want: &[f32]) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let (x, w) = small_ints(xs, ws);
    let plane = want.len() / (xs[0] * ws[0]);
    let bias: Vec<f32> = (0..ws[0]).map(|m| m as f32 - 1.5).collect();
    let (xt, wt, bt) = (f32s(&xs, x), f32s(&ws, w), f32s(&[ws[0]], bias.clone()));
    for with_bias in [false, true] {
        let mut node = node.clone();
        let inputs = if with_bias {
            vec![Some(&xt), Some(&wt), Some(&bt)]
        } else {
            node.inputs.truncate(2);
            vec![Some(&xt), Some(&wt)]
        };
        let want: Vec<f32> = want
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                v + if with_bias {
                    bias[i / plane % ws[0]]
                } else {
                    0.0
                }
            })
            .collect();
        let serial = crate::par::serial(|| eval_node(&node, 22, &inputs)).unwrap();
        let parallel = pool.install(|| eval_node(&node, 22, &inputs)).unwrap();
        for y in [serial, parallel] {
            assert_eq!(
                y[0].as_slice::<f32>().unwrap(),
                want,
                "{xs:?} {ws:?} {with_bias}"
            );
        }
    }
}

#[test]
fn unit_strides_multiply_shifted_rows_serially_and_in_bands_in_parallel() {
    // Unit-stride convolutions take the products over shifted rows: groups, dilations and
    // uneven pads, a kernel one row high (one product), and a plane large enough to run in
    // several bands.
    for (xs, ws, group, d, pads) in [
        ([2, 6, 30, 17], [4, 3, 3, 2], 2, [2, 1], [1, 0, 2, 1]),
        ([1, 4, 9, 50], [3, 4, 1, 3], 1, [1, 4], [0, 3, 0, 2]),
        ([1, 64, 37, 41], [8, 64, 3, 3], 1, [1, 2], [2, 2, 2, 2]),
    ] {
        let (x, w) = small_ints(xs, ws);
        let [_, _, kh, kw] = ws;
        let out = [
            xs[2] + pads[0] + pads[2] - (kh - 1) * d[0],
            xs[3] + pads[1] + pads[3] - (kw - 1) * d[1],
        ];
        let want = reference(&x, xs, &w, ws, group, [1, 1], d, [pads[0], pads[1]], out);
        let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
            .with_attr("group", AttrValue::Int(group as i64))
            .with_attr("dilations", AttrValue::Ints(vec![d[0] as i64, d[1] as i64]))
            .with_attr(
                "pads",
                AttrValue::Ints(pads.iter().map(|&p| p as i64).collect()),
            );
        agrees_with_and_without_bias(node, xs, ws, &want);
    }
}

#[test]
fn direct_and_product_paths_agree_with_the_reference_in_f32_and_f64() {
    // `float` takes each direct kernel the CPU has (AVX-512F, AVX2), `double` the products
    // over shifted rows (unit strides) or im2col tiles: strides 1 to 3, dilations, uneven
    // pads, groups, filter counts around the block heights of both kernels (1, 5, 7, 13 and
    // 25 a group, 24), output widths that are not whole vectors, one-row and one-column
    // planes, and bands of rows split over three threads.
    for level in kernel::Level::ALL {
        kernel::testing::with_level(level, direct_and_product_paths_agree);
    }
}

/// The cases of [`direct_and_product_paths_agree_with_the_reference_in_f32_and_f64`].
fn direct_and_product_paths_agree() {
    for (xs, ws, group, s, d, pads) in [
        (
            [1, 4, 23, 35],
            [1, 4, 3, 3],
            1,
            [1, 1],
            [1, 1],
            [1, 1, 1, 1],
        ),
        (
            [1, 3, 19, 50],
            [5, 3, 3, 3],
            1,
            [1, 1],
            [1, 1],
            [0, 1, 0, 1],
        ),
        (
            [1, 6, 21, 33],
            [24, 6, 3, 3],
            1,
            [1, 1],
            [1, 1],
            [1, 1, 1, 1],
        ),
        (
            [1, 10, 18, 26],
            [50, 5, 3, 3],
            2,
            [2, 1],
            [1, 1],
            [1, 1, 1, 1],
        ),
        (
            [1, 5, 31, 29],
            [7, 5, 3, 3],
            1,
            [1, 1],
            [1, 1],
            [1, 1, 1, 1],
        ),
        (
            [2, 6, 30, 17],
            [26, 3, 3, 2],
            2,
            [1, 1],
            [2, 1],
            [1, 0, 2, 1],
        ),
        (
            [1, 3, 64, 70],
            [16, 3, 3, 3],
            1,
            [2, 2],
            [1, 1],
            [1, 1, 1, 1],
        ),
        (
            [1, 4, 40, 37],
            [6, 4, 5, 3],
            1,
            [3, 2],
            [1, 2],
            [2, 0, 1, 3],
        ),
        (
            [1, 8, 1, 300],
            [12, 8, 1, 5],
            1,
            [1, 1],
            [1, 1],
            [0, 2, 0, 2],
        ),
        (
            [1, 8, 300, 1],
            [12, 8, 3, 1],
            1,
            [1, 1],
            [1, 1],
            [1, 0, 1, 0],
        ),
        (
            [1, 64, 37, 41],
            [8, 64, 3, 3],
            1,
            [1, 1],
            [1, 2],
            [2, 2, 2, 2],
        ),
        // A few positions (at most `FEW_POSITIONS`), whose columns are built one position
        // at a time: padded on every side, dilated along the width, an STFT-like window
        // with a stride of half its length, and a streaming audio encoder's frames.
        ([1, 3, 4, 4], [5, 3, 3, 3], 1, [2, 2], [1, 1], [1, 1, 1, 1]),
        ([1, 2, 3, 9], [4, 2, 2, 3], 1, [1, 3], [2, 2], [0, 2, 1, 0]),
        (
            [1, 1, 1, 40],
            [6, 1, 1, 16],
            1,
            [1, 8],
            [1, 1],
            [0, 0, 0, 0],
        ),
        ([1, 5, 1, 4], [7, 5, 1, 3], 1, [1, 1], [1, 1], [0, 1, 0, 1]),
        ([1, 4, 1, 3], [6, 2, 1, 5], 2, [1, 1], [1, 1], [0, 3, 0, 2]),
    ] {
        let (x, w) = small_ints(xs, ws);
        let [_, _, kh, kw] = ws;
        let out = [0, 1]
            .map(|i| (xs[2 + i] + pads[i] + pads[i + 2] - (ws[2 + i] - 1) * d[i] - 1) / s[i] + 1);
        let want = reference(&x, xs, &w, ws, group, s, d, [pads[0], pads[1]], out);
        let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
            .with_attr("group", AttrValue::Int(group as i64))
            .with_attr("kernel_shape", AttrValue::Ints(vec![kh as i64, kw as i64]))
            .with_attr("strides", AttrValue::Ints(vec![s[0] as i64, s[1] as i64]))
            .with_attr("dilations", AttrValue::Ints(vec![d[0] as i64, d[1] as i64]))
            .with_attr(
                "pads",
                AttrValue::Ints(pads.iter().map(|&p| p as i64).collect()),
            );
        agrees_with_and_without_bias(node.clone(), xs, ws, &want);
        let doubles = |v: &[f32], shape: &[usize]| {
            let v: Vec<f64> = v.iter().map(|&v| f64::from(v)).collect();
            Tensor::from_vec(DataType::Double, shape, v).unwrap()
        };
        let (xt, wt) = (doubles(&x, &xs), doubles(&w, &ws));
        let mut node = node;
        node.inputs.truncate(2);
        let y = eval_node(&node, 22, &[Some(&xt), Some(&wt)]).unwrap();
        let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        assert_eq!(
            y[0].as_slice::<f64>().unwrap(),
            &want[..],
            "{xs:?} {ws:?} double"
        );
    }
}

#[test]
fn column_tiles_of_pointwise_and_strided_products_agree_on_three_threads() {
    // A pointwise convolution large enough to split its positions into column tiles, and a
    // strided one whose im2col tiles run in parallel: each tile's product lands in its own
    // columns of the output.
    for (xs, ws, s, p) in [
        ([1, 16, 40, 50], [24, 16, 1, 1], 1, 0),
        ([1, 8, 200, 200], [16, 8, 3, 3], 2, 1),
    ] {
        let (x, w) = small_ints(xs, ws);
        let out = [0, 1].map(|i| (xs[2 + i] + 2 * p - ws[2 + i]) / s + 1);
        let want = reference(&x, xs, &w, ws, 1, [s, s], [1, 1], [p, p], out);
        let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
            .with_attr("strides", AttrValue::Ints(vec![s as i64; 2]))
            .with_attr("pads", AttrValue::Ints(vec![p as i64; 4]));
        agrees_with_and_without_bias(node, xs, ws, &want);
    }
}

#[test]
fn bands_of_rows_agree_with_whole_planes_on_three_threads() {
    // Depthwise and direct convolutions large enough to split into bands of output rows on
    // three threads: each band loads its own input rows (the top one with the padding
    // above, the bottom one with what the taps read below), for unit and wider strides,
    // dilations, tall kernels and a channel multiplier of 2, two images each.
    for (group, (hw, k, s, d, p)) in [4, 1].into_iter().flat_map(|g| {
        [
            ([60, 70], [3, 3], 1, 1, 1),
            ([100, 90], [3, 3], 2, 1, 1),
            ([64, 66], [5, 5], 1, 1, 2),
            ([70, 64], [3, 3], 1, 2, 2),
            ([96, 80], [5, 1], 2, 1, 0),
        ]
        .map(|case| (g, case))
    }) {
        let (xs, ws) = ([2, 4, hw[0], hw[1]], [8, 4 / group, k[0], k[1]]);
        let (x, w) = small_ints(xs, ws);
        let out = [0, 1].map(|i| (hw[i] + 2 * p - (k[i] - 1) * d - 1) / s + 1);
        let want = reference(&x, xs, &w, ws, group, [s, s], [d, d], [p, p], out);
        let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
            .with_attr("group", AttrValue::Int(group as i64))
            .with_attr("strides", AttrValue::Ints(vec![s as i64; 2]))
            .with_attr("dilations", AttrValue::Ints(vec![d as i64; 2]))
            .with_attr("pads", AttrValue::Ints(vec![p as i64; 4]));
        agrees_with_and_without_bias(node, xs, ws, &want);
    }
}

#[test]
fn pointwise_products_add_the_bias_before_the_activation_serially_and_in_tiles() {
    // A 1x1 FusedConv over 2000 positions: the product is written without reading `y`, and
    // the pass after it adds the bias and then applies Relu, on one thread and in column
    // tiles on three.
    let (xs, ws) = ([1, 16, 40, 50], [24, 16, 1, 1]);
    let (x, w) = small_ints(xs, ws);
    let plain = reference(&x, xs, &w, ws, 1, [1, 1], [1, 1], [0, 0], [40, 50]);
    let bias: Vec<f32> = (0..24).map(|m| 10.0 - m as f32).collect();
    let want: Vec<f32> = plain
        .iter()
        .enumerate()
        .map(|(i, &v)| (v + bias[i / 2000]).max(0.0))
        .collect();
    assert!(want.contains(&0.0) && want.iter().any(|&v| v > 0.0));
    let node = Node::new("FusedConv", "c", ["x", "w", "b"], ["y"])
        .with_domain("com.microsoft")
        .with_attr("activation", AttrValue::String("Relu".into()));
    let (xt, wt, bt) = (f32s(&xs, x), f32s(&ws, w), f32s(&[24], bias));
    let inputs = [Some(&xt), Some(&wt), Some(&bt)];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let serial = crate::par::serial(|| eval_node(&node, 1, &inputs)).unwrap();
    let parallel = pool.install(|| eval_node(&node, 1, &inputs)).unwrap();
    for y in [serial, parallel] {
        assert_eq!(y[0], f32s(&[1, 24, 40, 50], want.clone()));
    }
}

#[test]
fn width_strides_split_rows_into_phases_for_any_width() {
    // Strides 2 (the deinterleaving pass), 3 and 5 (the general split), on rows narrower
    // than, as wide as and wider than the stride; depthwise (2 groups of 1 channel) and
    // dense (1 group); every path must agree with the direct loops.
    for (stride, width) in [(2, 1), (2, 7), (3, 1), (3, 2), (3, 8), (5, 3), (5, 11)] {
        for group in [1, 2] {
            let xs = [1, 2, 12, width];
            let ws = [2, 2 / group, 3, 3];
            let (x, w) = small_ints(xs, ws);
            let node = Node::new("Conv", "c", ["x", "w"], ["y"])
                .with_attr("group", AttrValue::Int(group as i64))
                .with_attr("strides", AttrValue::Ints(vec![1, stride as i64]))
                .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]));
            let inputs = [Some(&f32s(&xs, x.clone())), Some(&f32s(&ws, w.clone()))];
            let y = eval_node(&node, 22, &inputs).unwrap();
            let out = [12, (width + 2 - 3) / stride + 1];
            assert_eq!(
                y[0].shape(),
                &[1, 2, out[0], out[1]],
                "stride {stride}, width {width}"
            );
            let want = reference(&x, xs, &w, ws, group, [1, stride], [1, 1], [1, 1], out);
            assert_eq!(
                y[0].as_slice::<f32>().unwrap(),
                &want[..],
                "stride {stride}, width {width}, group {group}"
            );
        }
    }
}

#[test]
fn depthwise_phases_cover_strides_dilations_and_pads() {
    // Depthwise (3 groups of 1 channel, 2 filters each) takes the phase planes: strides
    // split the plane into phases (odd and even left pads put the first column in either),
    // dilations and uneven pads move the taps, a kernel wider than the padded row leaves
    // columns with no tap, and a bias seeds each plane.
    for (hw, k, s, d, pads) in [
        ([7, 9], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        ([6, 11], [3, 2], [1, 1], [2, 3], [0, 2, 1, 0]),
        ([5, 3], [1, 5], [1, 1], [1, 1], [0, 1, 0, 3]),
        ([4, 20], [2, 4], [1, 1], [1, 2], [2, 0, 0, 1]),
        ([8, 8], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
        ([9, 11], [3, 3], [2, 2], [1, 1], [0, 0, 0, 0]),
        ([7, 13], [3, 4], [2, 3], [2, 1], [2, 3, 1, 2]),
        ([5, 10], [2, 3], [3, 1], [1, 2], [1, 2, 2, 1]),
        ([6, 7], [3, 3], [1, 2], [1, 1], [1, 0, 1, 1]),
    ] {
        let xs = [2, 3, hw[0], hw[1]];
        let ws = [6, 1, k[0], k[1]];
        let (x, w) = small_ints(xs, ws);
        let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
            .with_attr("group", AttrValue::Int(3))
            .with_attr("strides", AttrValue::Ints(vec![s[0] as i64, s[1] as i64]))
            .with_attr("dilations", AttrValue::Ints(vec![d[0] as i64, d[1] as i64]))
            .with_attr(
                "pads",
                AttrValue::Ints(pads.iter().map(|&p| p as i64).collect()),
            );
        let b = f32s(&[6], vec![0.5, -1.0, 2.0, 0.0, 3.0, -2.5]);
        let inputs = [
            Some(&f32s(&xs, x.clone())),
            Some(&f32s(&ws, w.clone())),
            Some(&b),
        ];
        let y = eval_node(&node, 22, &inputs).unwrap();
        let out =
            [0, 1].map(|i| (hw[i] + pads[i] + pads[i + 2] - (k[i] - 1) * d[i] - 1) / s[i] + 1);
        let mut want = reference(&x, xs, &w, ws, 3, s, d, [pads[0], pads[1]], out);
        let plane = out[0] * out[1];
        for (i, v) in want.iter_mut().enumerate() {
            *v += b.as_slice::<f32>().unwrap()[i / plane % 6];
        }
        assert_eq!(y[0].shape(), &[2, 6, out[0], out[1]], "{hw:?} {k:?} {s:?}");
        assert_eq!(
            y[0].as_slice::<f32>().unwrap(),
            &want[..],
            "{hw:?} {k:?} {s:?} {d:?}"
        );
    }
}

#[test]
fn depthwise_pads_far_wider_than_the_row_take_the_general_loop() {
    // A left pad and a dilation of 2^62 columns on a row of one: the padded plane would
    // need 2^62-column rows (its size overflows), so the channel takes the general loop,
    // where only the second tap reaches the input.
    let x = f32s(&[1, 2, 4, 1], (1..=8).map(|v| v as f32).collect());
    let w = f32s(&[2, 1, 1, 2], vec![5.0, 2.0, 7.0, 3.0]);
    let b = f32s(&[2], vec![0.5, -1.0]);
    let huge = 1i64 << 62;
    let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
        .with_attr("group", AttrValue::Int(2))
        .with_attr("dilations", AttrValue::Ints(vec![1, huge]))
        .with_attr("pads", AttrValue::Ints(vec![0, huge, 0, 0]));
    let y = eval_node(&node, 22, &[Some(&x), Some(&w), Some(&b)]).unwrap();
    let want = [2.5, 4.5, 6.5, 8.5, 14.0, 17.0, 20.0, 23.0];
    assert_eq!(y[0], f32s(&[1, 2, 4, 1], want.to_vec()));
}

#[test]
fn large_planes_tile_and_pointwise_skips_im2col() {
    let xs = [1, 3, 40, 50];
    let x: Vec<f32> = (0..6000).map(|i| ((i * 13) % 17) as f32 - 8.0).collect();
    for (ws, pads) in [
        ([5, 3, 3, 3], [1i64, 1, 1, 1]),
        ([5, 3, 1, 1], [0, 0, 0, 0]),
    ] {
        let w: Vec<f32> = (0..ws.iter().product::<usize>())
            .map(|i| ((i * 3) % 5) as f32 - 2.0)
            .collect();
        let node = Node::new("Conv", "c", ["x", "w", "b"], ["y"])
            .with_attr("pads", AttrValue::Ints(pads.to_vec()));
        let b = f32s(&[5], vec![1.0, 2.0, 3.0, 4.0, 5.0]);
        let y = eval_node(
            &node,
            22,
            &[
                Some(&f32s(&xs, x.clone())),
                Some(&f32s(&ws, w.clone())),
                Some(&b),
            ],
        )
        .unwrap();
        let mut want = reference(
            &x,
            xs,
            &w,
            ws,
            1,
            [1, 1],
            [1, 1],
            [pads[0] as usize, pads[1] as usize],
            [40, 50],
        );
        for (i, v) in want.iter_mut().enumerate() {
            *v += (i / 2000 + 1) as f32;
        }
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &want[..]);
    }
}

#[test]
fn same_size_taps_copy_whole_rows_across_tiles() {
    // 576 im2col rows make tiles of 227 positions, which end inside rows of 41 columns; the
    // dilated taps leave two columns of padding on each side, and whole rows above and below.
    let (xs, ws) = ([1, 64, 37, 41], [4, 64, 3, 3]);
    let (x, w) = small_ints(xs, ws);
    let node = Node::new("Conv", "c", ["x", "w"], ["y"])
        .with_attr("dilations", AttrValue::Ints(vec![2, 2]))
        .with_attr("pads", AttrValue::Ints(vec![2, 2, 2, 2]));
    let y = eval_node(
        &node,
        22,
        &[Some(&f32s(&xs, x.clone())), Some(&f32s(&ws, w.clone()))],
    )
    .unwrap();
    assert_eq!(y[0].shape(), &[1, 4, 37, 41]);
    let want = reference(&x, xs, &w, ws, 1, [1, 1], [2, 2], [2, 2], [37, 41]);
    assert_eq!(y[0].as_slice::<f32>().unwrap(), &want[..]);
}

#[test]
fn auto_pad_same_lower_and_bad_groups() {
    let x = f32s(&[1, 1, 5, 5], (0..25).map(|v| v as f32).collect());
    let w = f32s(&[1, 1, 3, 3], vec![1.0; 9]);
    let node = Node::new("Conv", "c", ["x", "w"], ["y"])
        .with_attr("auto_pad", AttrValue::String(b"SAME_LOWER".to_vec()))
        .with_attr("strides", AttrValue::Ints(vec![2, 2]));
    let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
    let want = [12.0, 27.0, 24.0, 63.0, 108.0, 81.0, 72.0, 117.0, 84.0];
    assert_eq!(y[0], f32s(&[1, 1, 3, 3], want.to_vec()));
    let node = Node::new("Conv", "c", ["x", "w"], ["y"]).with_attr("group", AttrValue::Int(2));
    let err = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap_err();
    assert!(err.to_string().contains("groups"), "{err}");
}

#[test]
fn integer_convolution_pads_with_the_zero_point() {
    // The ONNX ConvInteger example with padding.
    let x = Tensor::from_vec(DataType::Uint8, &[1, 1, 3, 3], (2u8..11).collect()).unwrap();
    let w = Tensor::from_vec(DataType::Uint8, &[1, 1, 2, 2], vec![1u8; 4]).unwrap();
    let z = Tensor::from_vec(DataType::Uint8, &[], vec![1u8]).unwrap();
    let node = Node::new("ConvInteger", "c", ["x", "w", "z"], ["y"])
        .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]));
    let y = eval_node(&node, 10, &[Some(&x), Some(&w), Some(&z)]).unwrap();
    let want = [1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9];
    assert_eq!(y[0].as_slice::<i32>().unwrap(), &want);
}
