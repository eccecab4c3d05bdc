//! Rule 1 and the sizes of rule 3 (the rules are written in `mod.rs`): the size of every
//! symbolic dim of the inputs, the dims a failed run may search, and the sizes it tries.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{runtime_inputs, DimChoice, DrawOptions};
use crate::infer::TypeEnv;
use crate::ir::{is_onnx_domain, Dim, Graph, Model};
use crate::tensor::Tensor;

/// Rule 1: the size of every symbolic dim of the inputs, with where it came from.
pub(super) fn choose_dims(model: &Model, env: &TypeEnv, options: &DrawOptions) -> Vec<DimChoice> {
    let graph = &model.graph;
    let given: HashMap<&str, &Tensor> = options
        .given
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.as_tensor()?)))
        .collect();
    let mut from_inputs: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for input in runtime_inputs(graph) {
        let (Some(t), Some(dims)) = (given.get(input.name.as_str()), declared_dims(input)) else {
            continue;
        };
        if t.shape().len() != dims.len() {
            continue;
        }
        for (d, &size) in dims.iter().zip(t.shape()) {
            if let Dim::Symbolic(s) = d {
                from_inputs
                    .entry(s.clone())
                    .or_insert_with(|| (size, format!("input '{}'", input.name)));
            }
        }
    }
    let required = required_sizes(graph, env);
    let mut out: Vec<DimChoice> = Vec::new();
    let mut seen = HashSet::new();
    for input in runtime_inputs(graph) {
        for d in declared_dims(input).unwrap_or_default() {
            let Dim::Symbolic(s) = &d else { continue };
            if !seen.insert(s.clone()) {
                continue;
            }
            let (size, source) = if let Some(&v) = options.dims.get(s) {
                (v, "--dim".to_owned())
            } else if let Some((v, why)) = from_inputs.get(s) {
                (*v, why.clone())
            } else if let Some((v, why)) = required.get(s) {
                (*v, why.clone())
            } else {
                (1, "default".to_owned())
            };
            out.push(DimChoice {
                name: s.clone(),
                size,
                source,
            });
        }
    }
    out
}

/// The dims an input declares, with each dim it leaves unnamed (neither a size nor a name)
/// named `INPUT[AXIS]`, so that unnamed dims are chosen, searched and set by `--dim` as named
/// ones are.
pub(super) fn declared_dims(input: &crate::ir::ValueInfo) -> Option<Vec<Dim>> {
    let dims = &input.tensor_type()?.shape.as_ref()?.dims;
    Some(
        dims.iter()
            .enumerate()
            .map(|(k, d)| match d {
                Dim::Unknown => Dim::Symbolic(format!("{}[{k}]", input.name)),
                d => d.clone(),
            })
            .collect(),
    )
}

/// Symbolic dims the graph ties to a known size above 1: operands of a broadcasting operator
/// aligned from the right, the contracted axes of `MatMul` and `Gemm`, the kept axes of
/// `Concat`. The first node that says so wins, and is named.
fn required_sizes(graph: &Graph, env: &TypeEnv) -> BTreeMap<String, (usize, String)> {
    let mut out = BTreeMap::new();
    for (_, node) in graph.nodes() {
        if !is_onnx_domain(&node.domain) {
            continue;
        }
        let dims = |i: usize| node.inputs.get(i).and_then(|n| env.dims(n));
        // Groups of dims that must be equal (or, when broadcasting, 1).
        let mut groups: Vec<Vec<&Dim>> = Vec::new();
        match node.op_type.as_str() {
            "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "Equal" | "Less" | "LessOrEqual"
            | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" | "Max" | "Min" | "Sum"
            | "Mean" | "Where" | "PRelu" | "BitShift" | "BitwiseAnd" | "BitwiseOr"
            | "BitwiseXor" => {
                let operands: Vec<&[Dim]> = (0..node.inputs.len()).filter_map(dims).collect();
                let rank = operands.iter().map(|d| d.len()).max().unwrap_or(0);
                for k in 1..=rank {
                    groups.push(
                        operands
                            .iter()
                            .filter_map(|d| d.len().checked_sub(k).map(|i| &d[i]))
                            .collect(),
                    );
                }
            }
            "MatMul" => {
                if let (Some(a), Some(b)) = (dims(0), dims(1)) {
                    let inner_b = if b.len() >= 2 { b.len() - 2 } else { 0 };
                    if let (Some(x), Some(y)) = (a.last(), b.get(inner_b)) {
                        groups.push(vec![x, y]);
                    }
                }
            }
            "Gemm" => {
                if let (Some(a), Some(b)) = (dims(0), dims(1)) {
                    let ta = node.attr_int("transA", 0).unwrap_or(0) != 0;
                    let tb = node.attr_int("transB", 0).unwrap_or(0) != 0;
                    let x = a.get(usize::from(!ta));
                    let y = b.get(usize::from(tb));
                    if let (Some(x), Some(y)) = (x, y) {
                        groups.push(vec![x, y]);
                    }
                }
            }
            "Concat" => {
                let operands: Vec<&[Dim]> = (0..node.inputs.len()).filter_map(dims).collect();
                let rank = operands.first().map_or(0, |d| d.len());
                let axis = node.attr_int("axis", 0).unwrap_or(0);
                let axis = if axis < 0 { axis + rank as i64 } else { axis };
                for k in (0..rank).filter(|&k| k as i64 != axis) {
                    groups.push(operands.iter().filter_map(|d| d.get(k)).collect());
                }
            }
            _ => {}
        }
        for group in groups {
            let known: HashSet<i64> = group
                .iter()
                .filter_map(|d| match d {
                    Dim::Known(v) if *v > 1 => Some(*v),
                    _ => None,
                })
                .collect();
            let [size] = known.into_iter().collect::<Vec<_>>()[..] else {
                continue;
            };
            for d in group {
                if let Dim::Symbolic(s) = d {
                    out.entry(s.clone()).or_insert_with(|| {
                        let why = format!("node '{}' ({}) needs {size}", node.name, node.op_type);
                        (size as usize, why)
                    });
                }
            }
        }
    }
    out
}

/// Rule 3: the dims left at their default that are not only a batch axis.
pub(super) fn searchable_dims(model: &Model, dims: &[DimChoice]) -> Vec<String> {
    let mut batch_only: HashMap<String, bool> = HashMap::new();
    for input in runtime_inputs(&model.graph) {
        let Some(declared) = declared_dims(input) else {
            continue;
        };
        let rank = declared.len();
        for (k, d) in declared.into_iter().enumerate() {
            if let Dim::Symbolic(s) = d {
                let entry = batch_only.entry(s).or_insert(true);
                *entry &= k == 0 && rank >= 2;
            }
        }
    }
    let defaults: Vec<&DimChoice> = dims.iter().filter(|d| d.source == "default").collect();
    let free: Vec<String> = defaults
        .iter()
        .filter(|d| !batch_only.get(d.name.as_str()).copied().unwrap_or(false))
        .map(|d| d.name.clone())
        .collect();
    if free.is_empty() {
        // Nothing but batch axes: they are what there is to search.
        return defaults.iter().map(|d| d.name.clone()).collect();
    }
    free
}

/// Rule 3's sizes: 2, 4, … up to the first power of two at least the product of the strides
/// of the convolutions and pools and at least their largest kernel extent (64 when there are
/// none), at most 4096.
pub(super) fn candidate_sizes(graph: &Graph) -> Vec<usize> {
    let (mut stride, mut kernel) = (1u64, 1u64);
    let mut any = false;
    fn visit(g: &Graph, stride: &mut u64, kernel: &mut u64, any: &mut bool) {
        for (_, node) in g.nodes() {
            for sub in node.subgraphs() {
                visit(sub, stride, kernel, any);
            }
            if !matches!(
                node.op_type.as_str(),
                "Conv"
                    | "ConvTranspose"
                    | "ConvInteger"
                    | "QLinearConv"
                    | "MaxPool"
                    | "AveragePool"
                    | "LpPool"
            ) {
                continue;
            }
            *any = true;
            let list = |name| node.attr_ints(name).ok().flatten().unwrap_or(&[]);
            let s = list("strides")
                .iter()
                .copied()
                .max()
                .unwrap_or(1)
                .clamp(1, 4096);
            *stride = stride.saturating_mul(s as u64).min(1 << 20);
            let dilations = list("dilations");
            for (k, &extent) in list("kernel_shape").iter().enumerate() {
                let d = dilations.get(k).copied().unwrap_or(1).clamp(1, 4096);
                let e = extent.clamp(1, 4096).saturating_sub(1) * d + 1;
                *kernel = (*kernel).max(e as u64);
            }
        }
    }
    visit(graph, &mut stride, &mut kernel, &mut any);
    let cap = if any { stride.max(kernel) } else { 64 }
        .clamp(2, 4096)
        .next_power_of_two() as usize;
    (1..=12)
        .map(|k| 1usize << k)
        .take_while(|&s| s <= cap)
        .collect()
}

/// The size of `d` with the symbolic dims of `sizes` (1 for what it does not give).
pub(super) fn resolve(d: &Dim, sizes: &HashMap<String, usize>) -> usize {
    match d {
        Dim::Known(v) if *v >= 0 => *v as usize,
        Dim::Symbolic(s) => sizes.get(s).copied().unwrap_or(1),
        Dim::Known(_) | Dim::Unknown => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::ir::{AttrValue, Node, Type, Value, ValueInfo};
    use crate::verify::{draw_runnable, Attempt};
    use crate::DataType;

    #[test]
    fn unnamed_dims_are_named_by_their_input_and_searched_one_at_a_time() {
        // A signal `x[batch, samples]` and a state `s[2, batch, 4]`, both batches unnamed: the
        // model runs when the samples reach 8 and the two batches agree.
        let mut g = Graph::new("g");
        let unknown = |dims: Vec<Dim>| Type::tensor(DataType::Float, dims);
        g.inputs.push(ValueInfo::new(
            "x",
            unknown(vec![Dim::Unknown, Dim::Unknown]),
        ));
        g.inputs.push(ValueInfo::new(
            "s",
            unknown(vec![Dim::Known(2), Dim::Unknown, Dim::Known(4)]),
        ));
        let model = Model::new(g, 13);
        let run = |inputs: &[(String, Value)]| {
            let shape = |i: usize| inputs[i].1.as_tensor().unwrap().shape().to_vec();
            let (x, s) = (shape(0), shape(1));
            if x[1] >= 8 && x[0] == s[1] {
                Ok((x, s))
            } else {
                Err(Error::Eval(format!("{x:?} and {s:?} do not fit")))
            }
        };
        let Attempt::Ran { result, drawn, .. } =
            draw_runnable(&model, &DrawOptions::default(), run).unwrap()
        else {
            panic!("no draw ran");
        };
        assert_eq!(result, (vec![1, 8], vec![2, 1, 4]));
        let names: Vec<&str> = drawn.dims.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["x[0]", "x[1]", "s[1]"]);
        // `--dim` sets an unnamed dim by that name.
        let options = DrawOptions {
            dims: [("x[1]".to_string(), 16)].into_iter().collect(),
            ..DrawOptions::default()
        };
        let Attempt::Ran { result, .. } = draw_runnable(&model, &options, run).unwrap() else {
            panic!("no draw ran");
        };
        assert_eq!(result, (vec![1, 16], vec![2, 1, 4]));
    }

    #[test]
    fn candidate_sizes_reach_the_total_stride_and_the_widest_kernel() {
        let conv = |strides: &[i64], kernel: &[i64]| {
            Node::new("Conv", "", ["x", "w"], ["y"])
                .with_attr("strides", AttrValue::Ints(strides.to_vec()))
                .with_attr("kernel_shape", AttrValue::Ints(kernel.to_vec()))
        };
        let cases: Vec<(&str, Vec<Node>, usize)> = vec![
            ("no_convolution", vec![], 64),
            (
                "five_stride_2_layers",
                (0..5).map(|_| conv(&[2, 2], &[3, 3])).collect(),
                32,
            ),
            ("a_window_of_400", vec![conv(&[160], &[400])], 512),
            (
                "huge_strides_are_capped",
                (0..9).map(|_| conv(&[64], &[1])).collect(),
                4096,
            ),
        ];
        for (name, nodes, top) in cases {
            let mut g = Graph::new("g");
            for n in nodes {
                g.add_node(n);
            }
            let sizes = candidate_sizes(&g);
            assert_eq!(sizes.first(), Some(&2), "{name}");
            assert_eq!(sizes.last(), Some(&top), "{name}");
        }
    }
}
