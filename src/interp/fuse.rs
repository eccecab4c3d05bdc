//! Planning-time fusions a runtime makes: steps whose work another step can do for free leave
//! the plan.
//!
//! A `BatchNormalization` in inference mode that alone reads a `Conv`'s output is an affine map
//! per output channel, `y = s * (x - mean) + beta` with `s = scale / sqrt(var + epsilon)`. When
//! the convolution's weights and bias and the normalisation's parameters are all constants, it
//! folds into them: `W'[m] = s[m] * W[m]`, `B'[m] = s[m] * (B[m] - mean[m]) + beta[m]`, and the
//! convolution writes the normalised output directly (onnxruntime's `ConvBNFusion` does the
//! same). The folded values are rounded once from `f64`, so they differ from the unfused
//! result only in the last bits; both models of a `verify` are planned alike, so the comparison
//! stays bit for bit.
//!
//! Only what is certain folds: `float` weights, one-dimensional parameters of one value per
//! output channel, a convolution output nothing else reads (no other step, no subgraph, not a
//! graph output), and parameters no graph input can override.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use super::{Step, StepKind};
use crate::dtype::DataType;
use crate::ir::{Graph, Node};
use crate::tensor::{try_with_capacity, Tensor};

/// Folds every `Conv` -> `BatchNormalization` pair of `steps` that qualifies (see the module
/// documentation); `fixed` are the constants no input overrides. The folded weights join
/// `constants` under fresh names.
pub(super) fn fold_batch_norms<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &mut HashMap<String, Tensor>,
    fixed: &HashSet<String>,
) -> Vec<Step<'m>> {
    let mut readers: HashMap<String, usize> = HashMap::new();
    for step in &steps {
        let node: &Node = &step.node;
        let subgraph_reads = node.subgraphs().next().is_some().then(|| node.uses());
        for name in node.inputs.iter().chain(subgraph_reads.iter().flatten()) {
            *readers.entry(name.clone()).or_default() += 1;
        }
    }
    for o in &graph.outputs {
        *readers.entry(o.name.clone()).or_default() += 1;
    }
    let producer: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.node.outputs.iter().map(move |o| (o.as_str(), i)))
        .collect();
    let mut taken: HashSet<String> = readers.keys().cloned().collect();
    taken.extend(producer.keys().map(|s| s.to_string()));
    taken.extend(constants.keys().cloned());
    taken.extend(graph.inputs.iter().map(|v| v.name.clone()));

    let mut folds: Vec<(usize, usize, Node)> = Vec::new();
    for (i, bn) in steps.iter().enumerate() {
        let Some(x) = batch_norm_input(bn) else {
            continue;
        };
        let Some(&c) = producer.get(x.as_str()) else {
            continue;
        };
        if readers.get(x.as_str()) != Some(&1) {
            continue;
        }
        let conv = &steps[c];
        let Some(folded) = fold(conv, bn, constants, fixed) else {
            continue;
        };
        let mut node: Node = conv.node.as_ref().clone();
        let w = fresh(&mut taken, &format!("{}:folded_weights", node.inputs[1]));
        let b = fresh(&mut taken, &format!("{}:folded_bias", bn.node.outputs[0]));
        node.inputs.truncate(2);
        node.inputs[1] = w.clone();
        node.inputs.push(b.clone());
        node.outputs = vec![bn.node.outputs[0].clone()];
        constants.insert(w, folded.0);
        constants.insert(b, folded.1);
        folds.push((c, i, node));
    }
    if folds.is_empty() {
        return steps;
    }
    let gone: HashSet<usize> = folds.iter().map(|&(_, i, _)| i).collect();
    let mut replaced: HashMap<usize, Node> = folds.into_iter().map(|(c, _, n)| (c, n)).collect();
    steps
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .map(|(i, mut step)| {
            if let Some(node) = replaced.remove(&i) {
                step.node = Cow::Owned(node);
            }
            step
        })
        .collect()
}

/// The input of a `BatchNormalization` step in inference mode with one output, if `step` is one.
fn batch_norm_input(step: &Step<'_>) -> Option<String> {
    let node: &Node = &step.node;
    let is_op = matches!(step.kind, StepKind::Op(d) if d.domain.is_empty() && d.op_type == "BatchNormalization");
    let inference = step.opset >= 7
        && node.attr_int("spatial", 1).ok() == Some(1)
        && node.attr_int("training_mode", 0).ok() == Some(0);
    let one_output = node.outputs.first().is_some_and(|o| !o.is_empty())
        && node.outputs[1..].iter().all(String::is_empty);
    (is_op && inference && one_output && node.inputs.len() == 5).then(|| node.inputs[0].clone())
}

/// The folded weights and bias of `conv` followed by `bn`, when every operand is a fixed
/// `float` constant of the right shape.
fn fold(
    conv: &Step<'_>,
    bn: &Step<'_>,
    constants: &HashMap<String, Tensor>,
    fixed: &HashSet<String>,
) -> Option<(Tensor, Tensor)> {
    let node: &Node = &conv.node;
    let is_conv =
        matches!(conv.kind, StepKind::Op(d) if d.domain.is_empty() && d.op_type == "Conv");
    if !is_conv || node.outputs.len() != 1 || !(2..=3).contains(&node.inputs.len()) {
        return None;
    }
    let constant = |name: &String| -> Option<&Tensor> {
        fixed
            .contains(name)
            .then(|| constants.get(name))
            .flatten()
            .filter(|t| t.dtype() == DataType::Float)
    };
    let w = constant(&node.inputs[1])?;
    let c_out = *w.shape().first()?;
    let per_channel = |name: &String| -> Option<&[f32]> {
        let t = constant(name)?;
        (t.shape() == [c_out]).then(|| t.as_slice::<f32>().ok())?
    };
    let bias = match node.inputs.get(2).filter(|b| !b.is_empty()) {
        Some(b) => Some(per_channel(b)?),
        None => None,
    };
    let params: Vec<&[f32]> = bn.node.inputs[1..5]
        .iter()
        .map(per_channel)
        .collect::<Option<_>>()?;
    let (scale, beta, mean, var) = (params[0], params[1], params[2], params[3]);
    let epsilon = f64::from(bn.node.attr_float("epsilon", 1e-5).ok()?);
    let mut s: Vec<f64> = try_with_capacity(c_out).ok()?;
    s.extend((0..c_out).map(|m| f64::from(scale[m]) / (f64::from(var[m]) + epsilon).sqrt()));
    let weights = w.as_slice::<f32>().ok()?;
    let per_filter = weights.len() / c_out.max(1);
    let mut folded_w: Vec<f32> = try_with_capacity(weights.len()).ok()?;
    for (filter, &sm) in weights.chunks(per_filter.max(1)).zip(&s) {
        folded_w.extend(filter.iter().map(|&v| (f64::from(v) * sm) as f32));
    }
    let mut folded_b: Vec<f32> = try_with_capacity(c_out).ok()?;
    folded_b.extend((0..c_out).map(|m| {
        let b = bias.map_or(0.0, |b| f64::from(b[m]));
        (s[m] * (b - f64::from(mean[m])) + f64::from(beta[m])) as f32
    }));
    Some((
        Tensor::from_vec(DataType::Float, w.shape(), folded_w).ok()?,
        Tensor::from_vec(DataType::Float, &[c_out], folded_b).ok()?,
    ))
}

/// `base`, or `base` with a number appended, whichever no value of the graph is named yet.
fn fresh(taken: &mut HashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while taken.contains(&name) {
        name = format!("{base}{k}");
        k += 1;
    }
    taken.insert(name.clone());
    name
}
