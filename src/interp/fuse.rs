//! Planning-time fusions a runtime makes: steps whose work another step can do for free leave
//! the plan.
//!
//! - A `BatchNormalization` in inference mode that alone reads a `Conv`'s output is an affine
//!   map per output channel, `y = s * (x - mean) + beta` with
//!   `s = scale / sqrt(var + epsilon)`. When the convolution's weights and bias and the
//!   normalisation's parameters are all constants, it folds into them:
//!   `W'[m] = s[m] * W[m]`, `B'[m] = s[m] * (B[m] - mean[m]) + beta[m]`, and the convolution
//!   writes the normalised output directly (onnxruntime's `ConvBNFusion` does the same). The
//!   folded values are rounded once from `f64` to the weights' type (`float` or `float16`),
//!   so they differ from the unfused result only in the last bits of that type; both models
//!   of a `verify` are planned alike, so the comparison stays bit for bit.
//! - An activation (`Relu`, `LeakyRelu`, `Sigmoid`, `Tanh`, `HardSigmoid`, `HardSwish`) that
//!   alone reads a `float` `Conv`'s output runs inside the convolution, on each piece of the
//!   output while it is in cache (the kernel of `com.microsoft.FusedConv`). The step keeps the
//!   `Conv` node's name and operator, so errors and profiles name what the model holds. The
//!   activation computes the bits of its standalone kernel, so this fusion changes nothing.
//!
//! - A `MatMul` (or a `Gemm` that is one plus a bias row) of a dequantized activation
//!   `DequantizeLinear(a, sa, za)` and constant weights `DequantizeLinear(w, sw, zw)` — the
//!   QDQ form `onnxruntime.quantization` writes — runs as `com.microsoft.MatMulIntegerToFloat`
//!   on the 8-bit codes: the integer product is exact and is scaled once,
//!   `sa * sw[n] * sum((a - za) * (w - zw[n])) + bias[n]`, where the float product of the
//!   dequantized operands rounds every term (onnxruntime's `QDQ` selectors make the same
//!   fusion). Results differ from the unfused product in the last bits, like the folded
//!   batch norms; `RunOptions::unfused` plans without fusions.
//! - A `Conv` of such a dequantized activation and constant dequantized weights (per tensor or
//!   per output channel) with a constant float bias runs the same way on the codes
//!   (`ops::CONV_INTEGER_TO_FLOAT`, the integer convolution of `ConvInteger` scaled per output
//!   channel, `sx * sw[c] * sum + B[c]`). The step keeps the `Conv` node's name and operator.
//!   When a `QuantizeLinear` of one fixed scale and zero point alone reads that output (the
//!   QDQ form of the next layer's input), it quantizes each piece of the sums as the kernel
//!   finishes them, with `QuantizeLinear`'s own arithmetic, and leaves the plan: the float
//!   output is never stored.
//!
//! - A `MatMulInteger` whose sums only a `Cast` to `float` reads, whose result only a `Mul`
//!   reads (by the scales, `a_scale * b_scale`: the dynamic quantization
//!   `onnxruntime.quantization` writes), and that product only an `Add` (the bias), runs as
//!   one step (`ops::INTEGER_PRODUCT_SCALED`) in place of the last: each sum is converted,
//!   scaled and biased as it leaves the integer kernel, one rounding per operator as the graph
//!   has them — the same bits, and no `int32` or unscaled tensor stored. Scales and biases
//!   are read at run time; shapes other than one value or one per column run the operators
//!   in turn.
//! - An `Add` of two such dequantized activations whose sum only a `QuantizeLinear` of one fixed
//!   scale and zero point reads (the residual of a QDQ network) runs as one pass over the codes
//!   (`ops::QUANTIZED_ADD`) with the three operators' own arithmetic: the same codes, and no
//!   float tensor stored.
//! - A movement (`Reshape`, `Transpose`, `Squeeze`, `Unsqueeze`, `Flatten`) of such a
//!   dequantized activation whose result only a `QuantizeLinear` of the same scale and zero
//!   point reads moves the codes instead (onnxruntime's QDQ propagation does the same): the
//!   round trip gives back each code exactly (see `move_codes`), so the codes are the same.
//! - A `DequantizeLinear` whose output the fused steps left unread (two fused convolutions of
//!   one activation) leaves the plan.
//! - A value folded at planning that no step, subgraph or graph output reads once the fusions
//!   have taken its readers (a QDQ model's float weights, dequantized at planning, where the
//!   fused steps read the codes) leaves the constants (`drop_unread`, which planning calls
//!   after `fuse`).
//! - A `DequantizeLinear` of a `QuantizeLinear`'s codes that nothing else reads, by the same
//!   fixed scale and 8-bit zero point (the round trip a QDQ model makes between two float
//!   operators), runs as one pass over the float values (`ops::QUANTIZE_ROUND_TRIP`) with the
//!   two operators' own arithmetic: the same bits, one memory pass and no codes stored.
//!
//! - A tree of element-wise steps (`Add`, `Sub`, `Mul`, `Div`, `Erf`, `Tanh`, `Sigmoid`,
//!   `Exp`, `Sqrt`) whose inner values each one step of the tree alone reads — the exact GELU
//!   `Div -> Erf -> Add -> Mul -> Mul` — runs as one step (`ops::ELEMENTWISE_CHAIN`) in place
//!   of its last, one pass over memory with each operator's own function: the same bits.
//!   Types and shapes are read at run time; what the one pass does not take (other types,
//!   broadcasting between shapes) runs the operators in turn.
//!
//! Only what is certain fuses: `float` weights, a convolution output nothing else reads (no
//! other step, no subgraph, not a graph output), and parameters no graph input can override.
//!
//! Why one file: every rule reads the plan through the same `Uses` (who makes and reads each
//! value) and `Fixed` constants and is spliced in by the same `replace_steps`, in an order
//! where each rule sees the steps the earlier ones left.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use super::{Step, StepKind};
use crate::dtype::DataType;
use crate::ir::{AttrValue, Graph, Node};
use crate::ops::halves::f16_from_f64;
use crate::ops::{
    registry, value_bytes, Activation, ChainOp, Instruction, OpDef, Operand, Program,
    CONV_INTEGER_TO_FLOAT, ELEMENTWISE_CHAIN, INTEGER_PRODUCT_SCALED, MAX_INSTRUCTIONS, PROGRAM,
    QUANTIZED_ADD, QUANTIZE_ROUND_TRIP,
};
use crate::tensor::{try_with_capacity, Tensor};
use half::f16;

/// The domain of onnxruntime's contrib operators, where `FusedConv` is registered.
const CONTRIB: &str = "com.microsoft";

/// Who reads and who makes each value of a list of steps, and the names in use.
struct Uses {
    /// Readers of each name: inputs of steps, subgraphs' outer references, graph outputs.
    readers: HashMap<String, usize>,
    /// The step making each name.
    producer: HashMap<String, usize>,
    /// A step reading each name (the only one when `readers` counts one and it is no graph
    /// output).
    reader: HashMap<String, usize>,
    /// Every name of the graph, and those given out since.
    taken: HashSet<String>,
}

impl Uses {
    fn of(graph: &Graph, steps: &[Step<'_>], constants: &HashMap<String, Tensor>) -> Uses {
        let mut readers: HashMap<String, usize> = HashMap::new();
        let mut reader: HashMap<String, usize> = HashMap::new();
        for (i, step) in steps.iter().enumerate() {
            let node: &Node = &step.node;
            let subgraph_reads = node.subgraphs().next().is_some().then(|| node.uses());
            for name in node.inputs.iter().chain(subgraph_reads.iter().flatten()) {
                *readers.entry(name.clone()).or_default() += 1;
                reader.insert(name.clone(), i);
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
            reader,
            taken,
        }
    }

    /// The step reading `name`, when one step alone reads it (and it is no graph output).
    fn only_reader(&self, name: &str) -> Option<usize> {
        (self.readers.get(name) == Some(&1))
            .then(|| self.reader.get(name).copied())
            .flatten()
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

/// Replaces each step `c` of `fused` by its fused node and drops the steps `i` it took in.
fn splice<'m>(steps: Vec<Step<'m>>, fused: Vec<(usize, usize, Step<'m>)>) -> Vec<Step<'m>> {
    let gone: HashSet<usize> = fused.iter().map(|&(_, i, _)| i).collect();
    let replaced = fused.into_iter().map(|(c, _, step)| (c, step)).collect();
    replace_steps(steps, replaced, &gone)
}

/// Replaces the steps of `replaced` and drops those of `gone`.
fn replace_steps<'m>(
    steps: Vec<Step<'m>>,
    mut replaced: HashMap<usize, Step<'m>>,
    gone: &HashSet<usize>,
) -> Vec<Step<'m>> {
    if replaced.is_empty() && gone.is_empty() {
        return steps;
    }
    steps
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .map(|(i, step)| replaced.remove(&i).unwrap_or(step))
        .collect()
}

/// A copy of `step` running `node`.
fn with_node<'m>(step: &Step<'m>, node: Node, kind: StepKind<'m>) -> Step<'m> {
    Step::new(Cow::Owned(node), kind, step.opset, step.schema)
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
    let steps = fuse_activations(graph, steps, constants, fixed);
    let steps = match registry().lookup(CONTRIB, "MatMulIntegerToFloat", 1) {
        Some(def) => fuse_each(graph, steps, constants, fixed, |site, i| {
            quantized_matmul(site, i, def)
        }),
        None => steps,
    };
    let steps = fuse_each(graph, steps, constants, fixed, scaled_integer_product);
    let steps = fuse_each(graph, steps, constants, fixed, quantized_conv);
    let steps = fuse_each(graph, steps, constants, fixed, quantized_add);
    let steps = fuse_each(graph, steps, constants, fixed, move_codes);
    let steps = fuse_each(graph, steps, constants, fixed, round_trip);
    let steps = drop_unread_dequantizations(graph, steps, constants);
    fuse_chains(graph, steps, constants)
}

/// The steps without the `DequantizeLinear`s whose output nothing reads any more: an
/// activation that two fused steps read as codes (a residual's input feeding two
/// convolutions) is dequantized by neither, but each rule only takes in a producer it reads
/// alone.
fn drop_unread_dequantizations<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &HashMap<String, Tensor>,
) -> Vec<Step<'m>> {
    let uses = Uses::of(graph, &steps, constants);
    let gone: HashSet<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, step)| is_op(step, "DequantizeLinear"))
        .filter(|(_, step)| {
            step.node
                .outputs
                .iter()
                .all(|o| !uses.readers.contains_key(o))
        })
        .map(|(i, _)| i)
        .collect();
    replace_steps(steps, HashMap::new(), &gone)
}

/// Drops the values of `folds` (folded at planning) that no step, subgraph or graph output
/// reads once fusion has taken their readers, and takes them off the `folded` count: the float
/// weights of a QDQ model's convolutions and products, dequantized at planning, are read by no
/// one once the fused steps multiply the 8-bit codes (the QDQ ResNet-50 of
/// `scripts/check_deployed.py` kept 97 MiB of them for nothing).
pub(super) fn drop_unread(
    graph: &Graph,
    steps: &[Step<'_>],
    folds: Vec<String>,
    constants: &mut HashMap<String, Tensor>,
    fixed: &mut HashSet<String>,
    folded: &mut (usize, usize),
) {
    let uses = Uses::of(graph, steps, constants);
    let unread: Vec<String> = folds
        .into_iter()
        .filter(|name| !uses.readers.contains_key(name))
        .collect();
    for name in unread {
        if let Some(t) = constants.remove(&name) {
            fixed.remove(&name);
            folded.0 = folded.0.saturating_sub(1);
            folded.1 = folded.1.saturating_sub(value_bytes(&t));
        }
    }
}

/// The operators that only move elements: on codes they give the codes of their result.
const MOVEMENTS: [&str; 5] = ["Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"];

/// What a fusion rule sees: the steps, who reads and makes each value, the fixed constants.
struct Site<'a, 'm> {
    graph: &'a Graph,
    steps: &'a [Step<'m>],
    uses: &'a Uses,
    constant: &'a Fixed<'a>,
}

impl Site<'_, '_> {
    /// The `DequantizeLinear` step making `name` (see [`dequantized_activation`]).
    fn dequantized(&self, name: &str) -> Option<(usize, Dequantized)> {
        dequantized_activation(self.steps, self.uses, self.constant, name)
    }

    /// The `QuantizeLinear` step alone reading `name` (see [`quantize_reader`]).
    fn quantized(&self, name: &str) -> Option<(usize, [String; 3])> {
        quantize_reader(self.steps, self.uses, self.constant, name)
    }

    /// `step` when `name`, which it makes, is read by nothing else: a producer the fused step
    /// takes in.
    fn only_for(&self, name: &str, step: usize) -> Option<usize> {
        (self.uses.readers.get(name) == Some(&1)).then_some(step)
    }
}

/// The step that replaces a rule's step, and the steps it takes in.
struct Fused<'m> {
    step: Step<'m>,
    gone: Vec<usize>,
}

/// Applies `rule` at every step: each step it fuses is replaced, and the steps the fused ones
/// take in leave the plan.
fn fuse_each<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &HashMap<String, Tensor>,
    fixed: &HashSet<String>,
    rule: impl for<'a> Fn(&Site<'a, 'm>, usize) -> Option<Fused<'m>>,
) -> Vec<Step<'m>> {
    let uses = Uses::of(graph, &steps, constants);
    let constant = Fixed { constants, fixed };
    let site = Site {
        graph,
        steps: &steps,
        uses: &uses,
        constant: &constant,
    };
    let mut replaced: HashMap<usize, Step<'m>> = HashMap::new();
    let mut gone: HashSet<usize> = HashSet::new();
    for i in 0..steps.len() {
        if let Some(fused) = rule(&site, i) {
            replaced.insert(i, fused.step);
            gone.extend(fused.gone);
        }
    }
    replace_steps(steps, replaced, &gone)
}

/// A step running the fused kernel `def` as `node` in place of `step`.
fn fused_step<'m>(step: &Step<'m>, node: Node, def: &'static OpDef) -> Step<'m> {
    let mut fused = with_node(step, node, StepKind::Op(def));
    fused.schema = None;
    fused
}

/// A movement of a dequantized activation that only a `QuantizeLinear` of the same scale and
/// zero point reads, run on the codes themselves (see the module documentation): the
/// `QuantizeLinear` leaves the plan, and the `DequantizeLinear` when nothing else reads it.
fn move_codes<'m>(site: &Site<'_, 'm>, i: usize) -> Option<Fused<'m>> {
    let step = &site.steps[i];
    let node: &Node = &step.node;
    if !MOVEMENTS.iter().any(|op| is_op(step, op)) || node.outputs.len() != 1 {
        return None;
    }
    let x = node.inputs.first()?;
    let (dq, d) = site.dequantized(x)?;
    let (j, [scale, zero, codes]) = site.quantized(&node.outputs[0])?;
    // `QuantizeLinear(DequantizeLinear(c))` is `c` when both take one scale `s` and one zero
    // point: `(c - z) * s / s` is within `255 * 2^-23` of the integer `c - z` while `s` is
    // normal and `255 s` finite, so it rounds back to it.
    let constant = site.constant;
    let same = |a: &str, b: &str| {
        constant
            .get(a)
            .zip(constant.get(b))
            .is_some_and(|(a, b)| a == b)
    };
    let invertible = constant.get(&scale).is_some_and(|s| {
        s.as_slice::<f32>()
            .ok()
            .and_then(|v| v.first())
            .is_some_and(|&s| s.is_normal() && (s.abs() * 256.0).is_finite())
    });
    if !(same(&scale, &d.scale_name) && same(&zero, &d.zero_name) && invertible) {
        return None;
    }
    let mut moved = node.clone();
    moved.inputs[0] = d.codes;
    moved.outputs = vec![codes];
    let gone = [Some(j), site.only_for(x, dq)]
        .into_iter()
        .flatten()
        .collect();
    Some(Fused {
        step: with_node(step, moved, step.kind),
        gone,
    })
}

/// An `Add` of two dequantized activations whose sum only a `QuantizeLinear` reads, run as one
/// step on the codes (see the module documentation); the `DequantizeLinear`s leave the plan
/// when nothing else reads them.
fn quantized_add<'m>(site: &Site<'_, 'm>, i: usize) -> Option<Fused<'m>> {
    let add = &site.steps[i];
    let node: &Node = &add.node;
    if !is_op(add, "Add") || add.opset < 7 || node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    let (dqa, a) = site.dequantized(&node.inputs[0])?;
    let (dqb, b) = site.dequantized(&node.inputs[1])?;
    let (j, [scale, zero, codes]) = site.quantized(&node.outputs[0])?;
    let fused = Node::new(
        "QuantizedAdd",
        &node.name,
        [
            a.codes,
            a.scale_name,
            a.zero_name,
            b.codes,
            b.scale_name,
            b.zero_name,
            scale,
            zero,
        ],
        [codes],
    );
    let inputs = [(dqa, &node.inputs[0]), (dqb, &node.inputs[1])];
    let producers = inputs
        .into_iter()
        .filter_map(|(dq, x)| site.only_for(x, dq));
    Some(Fused {
        step: fused_step(add, fused, &QUANTIZED_ADD),
        gone: std::iter::once(j).chain(producers).collect(),
    })
}

/// A `DequantizeLinear` of a `QuantizeLinear`'s codes that nothing else reads, by the same
/// fixed scale and 8-bit zero point, run as one step over the float values (see the module
/// documentation).
fn round_trip<'m>(site: &Site<'_, 'm>, i: usize) -> Option<Fused<'m>> {
    let dq = &site.steps[i];
    let codes = dq
        .node
        .inputs
        .first()
        .filter(|_| is_op(dq, "DequantizeLinear"))?;
    let q = site.uses.producer_read_once(codes)?;
    let (quantize, dequantize) = (&site.steps[q].node, &dq.node);
    let constant = site.constant;
    let same = |k: usize| {
        let (a, b) = (&quantize.inputs[k], &dequantize.inputs[k]);
        a == b
            || constant
                .get(a)
                .zip(constant.get(b))
                .is_some_and(|(a, b)| a == b)
    };
    if !is_op(&site.steps[q], "QuantizeLinear")
        || quantized_output(quantize, constant).is_none()
        || dequantized(dequantize, constant).is_none_or(|d| d.scale_len != 1 || d.zero_len != 1)
        || !same(1)
        || !same(2)
    {
        return None;
    }
    let mut node: Node = dequantize.as_ref().clone();
    node.inputs = quantize.inputs.clone();
    Some(Fused {
        step: fused_step(dq, node, &QUANTIZE_ROUND_TRIP),
        gone: vec![q],
    })
}

/// A `MatMul` / `Gemm` of dequantized 8-bit operands, run on the codes by `def`
/// (`MatMulIntegerToFloat`; see the module documentation); the activation's
/// `DequantizeLinear` leaves the plan when nothing else reads its output.
fn quantized_matmul<'m>(site: &Site<'_, 'm>, i: usize, def: &'static OpDef) -> Option<Fused<'m>> {
    let mm = &site.steps[i];
    let constant = site.constant;
    let (a, b, bias) = matmul_operands(mm, constant)?;
    let (dqa, activation) = site.dequantized(a)?;
    let weights = dequantized_weights(site.graph, constant, b).filter(|w| {
        let shape = constant.get(&w.codes).map(|t| t.shape().to_vec());
        let n = match shape.as_deref() {
            Some(&[_, n]) => n,
            _ => return false,
        };
        let per_column = |len: usize| len == 1 || (len == n && w.axis_is_last);
        per_column(w.scale_len) && per_column(w.zero_len)
    })?;
    let mut node = Node::new(
        "MatMulIntegerToFloat",
        &mm.node.name,
        integer_operands(activation, weights),
        mm.node.outputs.clone(),
    )
    .with_domain(CONTRIB);
    if let Some(bias) = bias {
        node.inputs.push(bias.to_owned());
    }
    Some(Fused {
        step: fused_step(mm, node, def),
        gone: site.only_for(a, dqa).into_iter().collect(),
    })
}

/// `MatMulInteger -> Cast -> Mul [-> Add]` ending at step `i`, run as one step in its place
/// (see the module documentation).
fn scaled_integer_product<'m>(site: &Site<'_, 'm>, i: usize) -> Option<Fused<'m>> {
    let tail = &site.steps[i];
    let (mul, bias) = if is_op(tail, "Add") {
        let inputs = &tail.node.inputs;
        added(site, i)?;
        let (k, mul) = (0..2).find_map(|k| {
            let mul = site.uses.producer_read_once(&inputs[k])?;
            scaled_sums(site, mul).map(|_| (k, mul))
        })?;
        (mul, Some(inputs[1 - k].clone()))
    } else {
        // A product an `Add` alone reads is taken in by that `Add`.
        let read_by_add = tail.node.outputs.first().and_then(|o| {
            let j = site.uses.only_reader(o)?;
            added(site, j)
        });
        if read_by_add.is_some() {
            return None;
        }
        (i, None)
    };
    let (cast, product, scale) = scaled_sums(site, mul)?;
    let mm: &Node = &site.steps[product].node;
    let input = |k: usize| mm.inputs.get(k).cloned().unwrap_or_default();
    let mut inputs = vec![input(0), input(1), input(2), input(3), scale];
    inputs.extend(bias);
    let node = Node::new(
        INTEGER_PRODUCT_SCALED.op_type,
        &mm.name,
        inputs,
        tail.node.outputs.clone(),
    )
    .with_domain(INTEGER_PRODUCT_SCALED.domain);
    let mut gone = vec![product, cast];
    if mul != i {
        gone.push(mul);
    }
    Some(Fused {
        step: fused_step(tail, node, &INTEGER_PRODUCT_SCALED),
        gone,
    })
}

/// Step `j` when it is an `Add` of two different values with one output.
fn added(site: &Site<'_, '_>, j: usize) -> Option<usize> {
    let node: &Node = &site.steps[j].node;
    (is_op(&site.steps[j], "Add")
        && node.inputs.len() == 2
        && node.inputs[0] != node.inputs[1]
        && node.outputs.len() == 1)
        .then_some(j)
}

/// When step `mul` is a `Mul` of a `Cast` to `float` of a `MatMulInteger`'s sums, each read by
/// nothing else: the `Cast` step, the `MatMulInteger` step and the other factor (the scale).
fn scaled_sums(site: &Site<'_, '_>, mul: usize) -> Option<(usize, usize, String)> {
    let node: &Node = &site.steps[mul].node;
    if !is_op(&site.steps[mul], "Mul") || node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    (0..2).find_map(|k| {
        let cast = site.uses.producer_read_once(&node.inputs[k])?;
        let cast_node: &Node = &site.steps[cast].node;
        let to_float = cast_node.attr_int("to", 0).ok() == Some(DataType::Float as i64);
        if !is_op(&site.steps[cast], "Cast") || !to_float || node.inputs[1 - k] == node.inputs[k] {
            return None;
        }
        let product = site.uses.producer_read_once(cast_node.inputs.first()?)?;
        let one_output = site.steps[product].node.outputs.len() == 1;
        (is_op(&site.steps[product], "MatMulInteger") && one_output)
            .then(|| (cast, product, node.inputs[1 - k].clone()))
    })
}

/// The first inputs of a product of codes (`MatMulIntegerToFloat`'s order): both codes, both
/// scales, both zero points.
fn integer_operands(activation: Dequantized, weights: Dequantized) -> [String; 6] {
    [
        activation.codes,
        weights.codes,
        activation.scale_name,
        weights.scale_name,
        activation.zero_name,
        weights.zero_name,
    ]
}

/// A `Conv` of a dequantized activation and constant dequantized weights, run on the codes
/// (see the module documentation), as [`quantized_matmul`] does for products.
fn quantized_conv<'m>(site: &Site<'_, 'm>, i: usize) -> Option<Fused<'m>> {
    let conv = &site.steps[i];
    let node: &Node = &conv.node;
    if !is_op(conv, "Conv") || node.outputs.len() != 1 || node.inputs.len() < 2 {
        return None;
    }
    let constant = site.constant;
    let (x, w) = (node.inputs[0].as_str(), node.inputs[1].as_str());
    let (dqx, activation) = site.dequantized(x)?;
    // Per tensor, or per output channel (axis 0 of the weights).
    let (weights, c_out) = dequantized_weights(site.graph, constant, w).and_then(|q| {
        let c_out = *constant.get(&q.codes)?.shape().first()?;
        let per_channel = |len: usize| len == 1 || (len == c_out && q.axis == 0);
        (per_channel(q.scale_len) && per_channel(q.zero_len)).then_some((q, c_out))
    })?;
    let bias = match node.inputs.get(2).filter(|b| !b.is_empty()) {
        None => None,
        Some(b) => match constant.get(b) {
            Some(t) if t.dtype() == DataType::Float && t.shape() == [c_out] => Some(b),
            _ => return None,
        },
    };
    let mut fused = node.clone();
    fused.inputs = integer_operands(activation, weights).to_vec();
    fused.inputs.extend(bias.cloned());
    let mut gone: Vec<usize> = site.only_for(x, dqx).into_iter().collect();
    // A `QuantizeLinear` alone reading the output takes the codes straight from the sums.
    if let Some((j, [scale, zero, codes])) = site.quantized(&node.outputs[0]) {
        fused.inputs.resize(7, String::new());
        fused.inputs.extend([scale, zero]);
        fused.outputs = vec![codes];
        gone.push(j);
    }
    Some(Fused {
        step: fused_step(conv, fused, &CONV_INTEGER_TO_FLOAT),
        gone,
    })
}

/// The step alone reading `name` when it is a `QuantizeLinear` to 8-bit codes by one fixed scale
/// and zero point, with its scale, zero point and output.
fn quantize_reader(
    steps: &[Step<'_>],
    uses: &Uses,
    constant: &Fixed<'_>,
    name: &str,
) -> Option<(usize, [String; 3])> {
    let j = uses
        .only_reader(name)
        .filter(|&j| is_op(&steps[j], "QuantizeLinear"))?;
    Some((j, quantized_output(&steps[j].node, constant)?))
}

/// The scale, zero point and output of a `QuantizeLinear` to 8-bit codes by one fixed scale and
/// zero point.
fn quantized_output(node: &Node, constant: &Fixed<'_>) -> Option<[String; 3]> {
    if node.inputs.len() != 3
        || node.outputs.len() != 1
        || node.attr_int("block_size", 0).ok()? != 0
        || node.attr_int("output_dtype", 0).ok()? != 0
    {
        return None;
    }
    let scale = constant.get(&node.inputs[1])?;
    let zero = constant.get(&node.inputs[2])?;
    let eight_bit = matches!(zero.dtype(), DataType::Uint8 | DataType::Int8);
    (scale.dtype() == DataType::Float && scale.len() == 1 && zero.len() == 1 && eight_bit).then(
        || {
            [
                node.inputs[1].clone(),
                node.inputs[2].clone(),
                node.outputs[0].clone(),
            ]
        },
    )
}

/// The constants no graph input overrides.
struct Fixed<'c> {
    constants: &'c HashMap<String, Tensor>,
    fixed: &'c HashSet<String>,
}

impl<'c> Fixed<'c> {
    fn get(&self, name: &str) -> Option<&'c Tensor> {
        self.fixed
            .contains(name)
            .then(|| self.constants.get(name))
            .flatten()
    }
}

/// The activation, weights and bias of a `MatMul`, or of a `Gemm` that is one plus a constant
/// float bias of one value per column.
fn matmul_operands<'s>(
    step: &'s Step<'_>,
    constant: &Fixed<'_>,
) -> Option<(&'s str, &'s str, Option<&'s str>)> {
    let node: &Node = &step.node;
    if node.outputs.len() != 1 || node.inputs.len() < 2 {
        return None;
    }
    let (a, b) = (node.inputs[0].as_str(), node.inputs[1].as_str());
    if is_op(step, "MatMul") && node.inputs.len() == 2 {
        return Some((a, b, None));
    }
    let plain = node.attr_float("alpha", 1.0).ok() == Some(1.0)
        && node.attr_float("beta", 1.0).ok() == Some(1.0)
        && node.attr_int("transA", 0).ok() == Some(0)
        && node.attr_int("transB", 0).ok() == Some(0);
    if !is_op(step, "Gemm") || !plain {
        return None;
    }
    let n = *constant.get(b)?.shape().get(1)?;
    match node.inputs.get(2).filter(|c| !c.is_empty()) {
        None => Some((a, b, None)),
        Some(c) => {
            let bias = constant.get(c)?;
            (bias.dtype() == DataType::Float && bias.shape() == [n]).then_some((a, b, Some(c)))
        }
    }
}

/// What a `DequantizeLinear` node reads, when its scale and zero point are fixed constants of
/// one value or one per channel, its codes 8-bit (as its zero point says) and it has no blocks.
struct Dequantized {
    codes: String,
    scale_name: String,
    scale_len: usize,
    zero_name: String,
    zero_len: usize,
    /// Whether `axis` names the last of two dimensions (the columns of weights).
    axis_is_last: bool,
    /// `axis` as written (1 when omitted).
    axis: i64,
}

/// The step making `name` when it is a `DequantizeLinear` of one scale and zero point (a
/// quantised activation), with what it reads.
fn dequantized_activation(
    steps: &[Step<'_>],
    uses: &Uses,
    constant: &Fixed<'_>,
    name: &str,
) -> Option<(usize, Dequantized)> {
    let &step = uses.producer.get(name)?;
    let q = dequantized(&steps[step].node, constant)
        .filter(|_| is_op(&steps[step], "DequantizeLinear"))
        .filter(|q| q.scale_len == 1 && q.zero_len == 1)?;
    Some((step, q))
}

/// What the graph's `DequantizeLinear` making the weights `name` reads (the step itself may
/// have been folded into a constant at planning).
fn dequantized_weights(graph: &Graph, constant: &Fixed<'_>, name: &str) -> Option<Dequantized> {
    graph
        .producer(name)
        .map(|id| graph.node(id))
        .filter(|n| n.op_type == "DequantizeLinear" && n.domain.is_empty())
        .and_then(|n| dequantized(n, constant))
}

fn dequantized(node: &Node, constant: &Fixed<'_>) -> Option<Dequantized> {
    if node.inputs.len() != 3
        || node.outputs.len() != 1
        || node.attr_int("block_size", 0).ok()? != 0
    {
        return None;
    }
    let scale = constant.get(&node.inputs[1])?;
    let zero = constant.get(&node.inputs[2])?;
    let eight_bit = matches!(zero.dtype(), DataType::Uint8 | DataType::Int8);
    if scale.dtype() != DataType::Float || !eight_bit || scale.shape().len() > 1 {
        return None;
    }
    let axis = node.attr_int("axis", 1).ok()?;
    Some(Dequantized {
        codes: node.inputs[0].clone(),
        scale_name: node.inputs[1].clone(),
        scale_len: scale.len(),
        zero_name: node.inputs[2].clone(),
        zero_len: zero.len(),
        axis_is_last: axis == 1 || axis == -1,
        axis,
    })
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

/// Every tree of element-wise steps whose inner values one step of the tree alone reads, run
/// as one step in place of its last (see the module documentation).
fn fuse_chains<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &HashMap<String, Tensor>,
) -> Vec<Step<'m>> {
    let uses = Uses::of(graph, &steps, constants);
    // Each chain step opens a tree and takes in the trees making its operands that it alone
    // reads, as long as the tree stays within the instructions a chain holds.
    let mut tree_of: Vec<Option<usize>> = vec![None; steps.len()];
    let mut trees: Vec<Vec<usize>> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if chain_op(step).is_none() {
            continue;
        }
        let mut members = vec![i];
        for input in &step.node.inputs {
            let Some(t) = uses.producer_read_once(input).and_then(|p| tree_of[p]) else {
                continue;
            };
            if members.len() + trees[t].len() <= MAX_INSTRUCTIONS {
                members.append(&mut trees[t]);
            }
        }
        for &m in &members {
            tree_of[m] = Some(trees.len());
        }
        trees.push(members);
    }
    let mut replaced: HashMap<usize, Step<'m>> = HashMap::new();
    let mut gone: HashSet<usize> = HashSet::new();
    for mut members in trees.into_iter().filter(|t| t.len() >= 2) {
        members.sort_unstable();
        let Some((tail, program, inputs)) = chain_program(&steps, &uses, &members) else {
            continue;
        };
        let mut node = Node::new(
            ELEMENTWISE_CHAIN.op_type,
            &steps[tail].node.name,
            inputs,
            steps[tail].node.outputs.clone(),
        )
        .with_domain(ELEMENTWISE_CHAIN.domain);
        node.set_attr(PROGRAM, program.attribute());
        replaced.insert(tail, fused_step(&steps[tail], node, &ELEMENTWISE_CHAIN));
        gone.extend(members.into_iter().filter(|&m| m != tail));
    }
    replace_steps(steps, replaced, &gone)
}

/// The operator of a step a chain may hold: a default-domain element-wise operator without
/// attributes, with its operands and one output.
fn chain_op(step: &Step<'_>) -> Option<ChainOp> {
    let StepKind::Op(def) = step.kind else {
        return None;
    };
    let node: &Node = &step.node;
    let op = ChainOp::of(def.op_type, step.opset).filter(|_| def.domain.is_empty())?;
    let whole = node.attributes.is_empty()
        && node.inputs.len() == op.arity()
        && node.inputs.iter().all(|i| !i.is_empty())
        && node.outputs.len() == 1
        && !node.outputs[0].is_empty();
    whole.then_some(op)
}

/// The last step of a tree of chain steps (in plan order), its program and the inputs of the
/// fused node: the values the tree reads from outside, each once.
fn chain_program(
    steps: &[Step<'_>],
    uses: &Uses,
    members: &[usize],
) -> Option<(usize, Program, Vec<String>)> {
    let mut inputs: Vec<String> = Vec::new();
    let mut instructions = Vec::with_capacity(members.len());
    for &m in members {
        let op = chain_op(&steps[m])?;
        let operands = steps[m]
            .node
            .inputs
            .iter()
            .map(|name| {
                let made_here = uses
                    .producer
                    .get(name)
                    .and_then(|p| members.iter().position(|q| q == p));
                match made_here {
                    Some(j) => Operand::Result(j),
                    None => Operand::Input(match inputs.iter().position(|i| i == name) {
                        Some(k) => k,
                        None => {
                            inputs.push(name.clone());
                            inputs.len() - 1
                        }
                    }),
                }
            })
            .collect();
        instructions.push(Instruction { op, operands });
    }
    Some((*members.last()?, Program { instructions }, inputs))
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
/// constant of the weights' type (`float` or `float16`) and the right shape. `float16`
/// values are folded in `f64` and rounded once to `float16`.
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
    let w = fixed
        .contains(&node.inputs[1])
        .then(|| constants.get(&node.inputs[1]))
        .flatten()?;
    let dtype = w.dtype();
    let values = |t: &Tensor| -> Option<Vec<f64>> {
        let mut v: Vec<f64> = try_with_capacity(t.len()).ok()?;
        match t.dtype() {
            _ if t.dtype() != dtype => return None,
            DataType::Float => v.extend(t.as_slice::<f32>().ok()?.iter().map(|&x| f64::from(x))),
            DataType::Float16 => v.extend(t.as_slice::<f16>().ok()?.iter().map(|x| x.to_f64())),
            _ => return None,
        }
        Some(v)
    };
    let constant = |name: &String| -> Option<&Tensor> {
        fixed.contains(name).then(|| constants.get(name)).flatten()
    };
    let c_out = *w.shape().first()?;
    let per_channel = |name: &String| -> Option<Vec<f64>> {
        let t = constant(name)?;
        (t.shape() == [c_out]).then(|| values(t))?
    };
    let bias = match node.inputs.get(2).filter(|b| !b.is_empty()) {
        Some(b) => Some(per_channel(b)?),
        None => None,
    };
    let params: Vec<Vec<f64>> = bn.node.inputs[1..5]
        .iter()
        .map(per_channel)
        .collect::<Option<_>>()?;
    let (scale, beta, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
    let epsilon = f64::from(bn.node.attr_float("epsilon", 1e-5).ok()?);
    let mut s: Vec<f64> = try_with_capacity(c_out).ok()?;
    s.extend((0..c_out).map(|m| scale[m] / (var[m] + epsilon).sqrt()));
    let weights = values(w)?;
    let per_filter = weights.len() / c_out.max(1);
    let mut folded_w: Vec<f64> = try_with_capacity(weights.len()).ok()?;
    for (filter, &sm) in weights.chunks(per_filter.max(1)).zip(&s) {
        folded_w.extend(filter.iter().map(|&v| v * sm));
    }
    let mut folded_b: Vec<f64> = try_with_capacity(c_out).ok()?;
    folded_b.extend((0..c_out).map(|m| {
        let b = bias.as_ref().map_or(0.0, |b| b[m]);
        s[m] * (b - mean[m]) + beta[m]
    }));
    let rounded = |shape: &[usize], v: Vec<f64>| -> Option<Tensor> {
        match dtype {
            DataType::Float16 => {
                let mut out: Vec<f16> = try_with_capacity(v.len()).ok()?;
                out.extend(v.into_iter().map(f16_from_f64));
                Tensor::from_vec(dtype, shape, out).ok()
            }
            _ => {
                let mut out: Vec<f32> = try_with_capacity(v.len()).ok()?;
                out.extend(v.into_iter().map(|x| x as f32));
                Tensor::from_vec(dtype, shape, out).ok()
            }
        }
    };
    Some((rounded(w.shape(), folded_w)?, rounded(&[c_out], folded_b)?))
}
