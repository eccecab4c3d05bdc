//! Planning-time fusions a runtime makes: steps whose work another step can do for free leave
//! the plan.
//!
//! - A `BatchNormalization` in inference mode that alone reads a `Conv`'s output is an affine
//!   map per output channel, `y = s * (x - mean) + beta` with
//!   `s = scale / sqrt(var + epsilon)`. When the convolution's weights and bias and the
//!   normalisation's parameters are all constants, it folds into them:
//!   `W'[m] = s[m] * W[m]`, `B'[m] = s[m] * (B[m] - mean[m]) + beta[m]`, and the convolution
//!   writes the normalised output directly (onnxruntime's `ConvBNFusion` does the same). The
//!   folded values are rounded once from `f64`, so they differ from the unfused result only
//!   in the last bits; both models of a `verify` are planned alike, so the comparison stays
//!   bit for bit.
//! - An activation (`Relu`, `LeakyRelu`, `Sigmoid`, `Tanh`, `HardSigmoid`, `HardSwish`) that
//!   alone reads a `float` `Conv`'s output runs inside the convolution, on each piece of the
//!   output while it is in cache (the kernel of `com.microsoft.FusedConv`). The step keeps the
//!   `Conv` node's name and operator, so errors and profiles name what the model holds. The
//!   activation computes the bits of its standalone kernel, so this fusion changes nothing.
//!
//! Only what is certain fuses: `float` weights, a convolution output nothing else reads (no
//! other step, no subgraph, not a graph output), and parameters no graph input can override.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use super::{Step, StepKind};
use crate::dtype::DataType;
use crate::ir::{AttrValue, Graph, Node};
use crate::ops::{registry, Activation};
use crate::tensor::{try_with_capacity, Tensor};

/// The domain of onnxruntime's contrib operators, where `FusedConv` is registered.
const CONTRIB: &str = "com.microsoft";

/// Who reads and who makes each value of a list of steps, and the names in use.
struct Uses {
    /// Readers of each name: inputs of steps, subgraphs' outer references, graph outputs.
    readers: HashMap<String, usize>,
    /// The step making each name.
    producer: HashMap<String, usize>,
    /// Every name of the graph, and those given out since.
    taken: HashSet<String>,
}

impl Uses {
    fn of(graph: &Graph, steps: &[Step<'_>], constants: &HashMap<String, Tensor>) -> Uses {
        let mut readers: HashMap<String, usize> = HashMap::new();
        for step in steps {
            let node: &Node = &step.node;
            let subgraph_reads = node.subgraphs().next().is_some().then(|| node.uses());
            for name in node.inputs.iter().chain(subgraph_reads.iter().flatten()) {
                *readers.entry(name.clone()).or_default() += 1;
            }
        }
        for o in &graph.outputs {
            *readers.entry(o.name.clone()).or_default() += 1;
        }
        let producer: HashMap<String, usize> = steps
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.node.outputs.iter().map(move |o| (o.clone(), i)))
            .collect();
        let mut taken: HashSet<String> = readers.keys().cloned().collect();
        taken.extend(producer.keys().cloned());
        taken.extend(constants.keys().cloned());
        taken.extend(graph.inputs.iter().map(|v| v.name.clone()));
        Uses {
            readers,
            producer,
            taken,
        }
    }

    /// The step making `name`, when one step alone reads it (and it is no graph output).
    fn producer_read_once(&self, name: &str) -> Option<usize> {
        (self.readers.get(name) == Some(&1))
            .then(|| self.producer.get(name).copied())
            .flatten()
    }

    /// `base`, or `base` with a number appended, whichever no value of the graph is named yet.
    fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut k = 1;
        while self.taken.contains(&name) {
            name = format!("{base}{k}");
            k += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// Replaces each step `c` of `fused` by its fused node and drops the steps `gone`.
fn splice<'m>(steps: Vec<Step<'m>>, fused: Vec<(usize, usize, Step<'m>)>) -> Vec<Step<'m>> {
    if fused.is_empty() {
        return steps;
    }
    let gone: HashSet<usize> = fused.iter().map(|&(_, i, _)| i).collect();
    let mut replaced: HashMap<usize, Step<'m>> =
        fused.into_iter().map(|(c, _, step)| (c, step)).collect();
    steps
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .map(|(i, step)| replaced.remove(&i).unwrap_or(step))
        .collect()
}

/// A copy of `step` running `node`.
fn with_node<'m>(step: &Step<'m>, node: Node, kind: StepKind<'m>) -> Step<'m> {
    Step {
        node: Cow::Owned(node),
        kind,
        opset: step.opset,
        schema: step.schema,
        inputs: Vec::new(),
        outputs: Vec::new(),
        frees: Vec::new(),
        donates: None,
        prepared: None,
    }
}

/// Both fusions of the module documentation, in order; `fixed` are the constants no input
/// overrides. Folded weights join `constants` and `fixed` under fresh names.
pub(super) fn fuse<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &mut HashMap<String, Tensor>,
    fixed: &mut HashSet<String>,
) -> Vec<Step<'m>> {
    let steps = fold_batch_norms(graph, steps, constants, fixed);
    fuse_activations(graph, steps, constants, fixed)
}

/// Folds every `Conv` -> `BatchNormalization` pair of `steps` that qualifies.
fn fold_batch_norms<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &mut HashMap<String, Tensor>,
    fixed: &mut HashSet<String>,
) -> Vec<Step<'m>> {
    let mut uses = Uses::of(graph, &steps, constants);
    let mut fused = Vec::new();
    for (i, bn) in steps.iter().enumerate() {
        let Some(c) = batch_norm_input(bn).and_then(|x| uses.producer_read_once(&x)) else {
            continue;
        };
        let conv = &steps[c];
        let Some((w, b)) = fold(conv, bn, constants, fixed) else {
            continue;
        };
        let mut node: Node = conv.node.as_ref().clone();
        let w_name = uses.fresh(&format!("{}:folded_weights", node.inputs[1]));
        let b_name = uses.fresh(&format!("{}:folded_bias", bn.node.outputs[0]));
        node.inputs.truncate(2);
        node.inputs[1] = w_name.clone();
        node.inputs.push(b_name.clone());
        node.outputs = vec![bn.node.outputs[0].clone()];
        fixed.extend([w_name.clone(), b_name.clone()]);
        constants.insert(w_name, w);
        constants.insert(b_name, b);
        fused.push((c, i, with_node(conv, node, conv.kind)));
    }
    splice(steps, fused)
}

/// Runs every activation that alone reads a `float` `Conv`'s output inside the convolution.
fn fuse_activations<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &HashMap<String, Tensor>,
    fixed: &HashSet<String>,
) -> Vec<Step<'m>> {
    let Some(fused_conv) = registry().lookup(CONTRIB, "FusedConv", 1) else {
        return steps;
    };
    let uses = Uses::of(graph, &steps, constants);
    let mut fused = Vec::new();
    for (i, act) in steps.iter().enumerate() {
        let activation = match act.kind {
            StepKind::Op(_) => Activation::of_node(&act.node),
            StepKind::Call(_) => None,
        };
        let Some(activation) = activation else {
            continue;
        };
        let Some(c) = uses.producer_read_once(&act.node.inputs[0]) else {
            continue;
        };
        let conv = &steps[c];
        let float_weights = conv.node.inputs.get(1).is_some_and(|w| {
            fixed.contains(w)
                && constants
                    .get(w)
                    .is_some_and(|t| t.dtype() == DataType::Float)
        });
        if !is_op(conv, "Conv") || !float_weights || conv.node.outputs.len() != 1 {
            continue;
        }
        let mut node: Node = conv.node.as_ref().clone();
        let (name, params) = activation.attributes();
        node.set_attr("activation", AttrValue::String(name.as_bytes().to_vec()));
        node.set_attr("activation_params", AttrValue::Floats(params));
        node.outputs = act.node.outputs.clone();
        fused.push((c, i, with_node(conv, node, StepKind::Op(fused_conv))));
    }
    splice(steps, fused)
}

/// Whether `step` runs the operator `op_type` of the default domain.
fn is_op(step: &Step<'_>, op_type: &str) -> bool {
    matches!(step.kind, StepKind::Op(d) if d.domain.is_empty() && d.op_type == op_type)
}

/// The input of a `BatchNormalization` step in inference mode with one output, if `step` is one.
fn batch_norm_input(step: &Step<'_>) -> Option<String> {
    let node: &Node = &step.node;
    let inference = step.opset >= 7
        && node.attr_int("spatial", 1).ok() == Some(1)
        && node.attr_int("training_mode", 0).ok() == Some(0);
    let one_output = node.outputs.first().is_some_and(|o| !o.is_empty())
        && node.outputs[1..].iter().all(String::is_empty);
    (is_op(step, "BatchNormalization") && inference && one_output && node.inputs.len() == 5)
        .then(|| node.inputs[0].clone())
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
    if !is_op(conv, "Conv") || node.outputs.len() != 1 || !(2..=3).contains(&node.inputs.len()) {
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
