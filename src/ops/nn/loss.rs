//! The losses: `NegativeLogLikelihoodLoss` (opsets 12, 13, 22) and `SoftmaxCrossEntropyLoss`
//! (12, 13).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html>,
//! <https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html>.
//!
//! The input is `(N, C, d1, ..., dk)` and the target `(N, d1, ..., dk)` of class indices. Each
//! element's loss is `-weight[t] * x[n, t, d]` (for cross-entropy, `x` is the log-softmax over
//! `C`), zero where `t == ignore_index`. `reduction` is `none` (the losses, shaped as the target),
//! `sum`, or `mean`: the sum divided by the sum of the weights of the elements not ignored (their
//! count without `weight`). `SoftmaxCrossEntropyLoss` may also return the log-probabilities.
//! Everything accumulates in `f64` and is rounded once to the input's type.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_vec, Tensor};

use super::super::util::{optional, required, to_i64s, unsupported_type};
use super::super::{EvalCtx, InferCtx};
use super::values::{input_dims, store_f64s, tensor_type};
use crate::ops::num::{dispatch_real, Float, Real};

/// How element losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

fn reduction(ctx_node: &crate::ir::Node) -> Result<Reduction> {
    match ctx_node.attr_string("reduction")?.unwrap_or("mean") {
        "none" => Ok(Reduction::None),
        "sum" => Ok(Reduction::Sum),
        "mean" => Ok(Reduction::Mean),
        other => Err(Error::Eval(format!(
            "reduction '{other}' is not none, sum or mean"
        ))),
    }
}

/// The loss of log-probabilities `logp` (`(N, C, D)` flattened) against `target`: the element
/// losses, or their reduction as one value.
fn nll(
    logp: &[f64],
    shape: &[usize],
    target: &[i64],
    weight: Option<&[f64]>,
    ignore: Option<i64>,
    how: Reduction,
) -> Result<Vec<f64>> {
    let (n, c) = (shape[0], shape[1]);
    let d: usize = shape[2..].iter().product();
    if target.len() != n * d {
        return Err(Error::Eval(format!(
            "target holds {} values; expected {} for input {shape:?}",
            target.len(),
            n * d
        )));
    }
    if let Some(w) = weight {
        if w.len() != c {
            return Err(Error::Eval(format!(
                "weight holds {} values for {c} classes",
                w.len()
            )));
        }
    }
    let mut losses = try_vec(n * d, 0.0f64)?;
    let (mut total, mut weights) = (0.0f64, 0.0f64);
    for (k, (&t, loss)) in target.iter().zip(losses.iter_mut()).enumerate() {
        if Some(t) == ignore {
            continue;
        }
        let class = usize::try_from(t)
            .ok()
            .filter(|&t| t < c)
            .ok_or_else(|| Error::Eval(format!("target {t} is not a class below {c}")))?;
        let (i, j) = (k / d.max(1), k % d.max(1));
        let w = weight.map_or(1.0, |w| w[class]);
        *loss = -w * logp[(i * c + class) * d + j];
        total += *loss;
        weights += w;
    }
    Ok(match how {
        Reduction::None => losses,
        Reduction::Sum => vec![total],
        Reduction::Mean => vec![total / weights],
    })
}

/// The operands of a loss node: input, its shape (checked to have a class dim), target values,
/// weights and `ignore_index`.
struct Operands<'t> {
    x: &'t Tensor,
    target: Vec<i64>,
    weight: Option<Vec<f64>>,
    ignore: Option<i64>,
    how: Reduction,
}

fn operands<'t>(ctx: &EvalCtx<'_>, inputs: &[Option<&'t Tensor>]) -> Result<Operands<'t>> {
    let x = required(inputs, 0)?;
    let target = required(inputs, 1)?;
    if x.rank() < 2 {
        return Err(ctx.error(format!("input {:?} has no class dim", x.shape())));
    }
    let mut want = vec![x.shape()[0]];
    want.extend_from_slice(&x.shape()[2..]);
    if target.shape() != want {
        return Err(ctx.error(format!(
            "target {:?} is not {want:?} for input {:?}",
            target.shape(),
            x.shape()
        )));
    }
    let weight = optional(inputs, 2)
        .map(|w| {
            dispatch_real!(w.dtype(), R => Ok(R::load(w)?.iter().map(|v| v.to_f64()).collect::<Vec<f64>>()),
                _ => Err(unsupported_type("weight", w.dtype())))
        })
        .transpose()?;
    let ignore = ctx
        .node
        .attr("ignore_index")
        .map(|_| ctx.node.attr_int("ignore_index", 0))
        .transpose()?;
    Ok(Operands {
        x,
        target: to_i64s(target)?,
        weight,
        ignore,
        how: reduction(ctx.node)?,
    })
}

fn loss_shape(ops: &Operands<'_>) -> Vec<usize> {
    let s = ops.x.shape();
    match ops.how {
        Reduction::None => std::iter::once(s[0])
            .chain(s[2..].iter().copied())
            .collect(),
        _ => Vec::new(),
    }
}

pub(super) fn eval_nll_loss(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let ops = operands(ctx, inputs)?;
    let dtype = ops.x.dtype();
    let x: Vec<f64> = dispatch_real!(dtype, R => R::load(ops.x)?.iter().map(|v| v.to_f64()).collect(),
        _ => return Err(unsupported_type("NegativeLogLikelihoodLoss", dtype)));
    let loss = nll(
        &x,
        ops.x.shape(),
        &ops.target,
        ops.weight.as_deref(),
        ops.ignore,
        ops.how,
    )?;
    Ok(vec![store_f64s(dtype, &loss_shape(&ops), &loss)?])
}

pub(super) fn eval_softmax_ce_loss(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let ops = operands(ctx, inputs)?;
    let dtype = ops.x.dtype();
    let shape = ops.x.shape();
    let mut logp: Vec<f64> = dispatch_real!(dtype, R => R::load(ops.x)?.iter().map(|v| v.to_f64()).collect(),
        _ => return Err(unsupported_type("SoftmaxCrossEntropyLoss", dtype)));
    // Log-softmax over the class dim of each (n, d).
    let (c, d) = (shape[1], shape[2..].iter().product::<usize>());
    for block in logp.chunks_mut((c * d).max(1)) {
        for j in 0..d {
            let max = (0..c)
                .map(|k| block[k * d + j])
                .fold(f64::NEG_INFINITY, f64::max);
            let shift = if max.is_finite() { max } else { 0.0 };
            let sum: f64 = (0..c).map(|k| (block[k * d + j] - shift).exp()).sum();
            let log_sum = sum.ln() + shift;
            for k in 0..c {
                block[k * d + j] -= log_sum;
            }
        }
    }
    let loss = nll(
        &logp,
        shape,
        &ops.target,
        ops.weight.as_deref(),
        ops.ignore,
        ops.how,
    )?;
    let mut outs = vec![store_f64s(dtype, &loss_shape(&ops), &loss)?];
    if ctx.node.outputs.len() > 1 {
        outs.push(store_f64s(dtype, shape, &logp)?);
    }
    Ok(outs)
}

pub(super) fn infer_loss(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let how = reduction(ctx.node)?;
    let loss_dims = match how {
        Reduction::None => input_dims(ctx, 1).map(<[Dim]>::to_vec),
        _ => Some(Vec::new()),
    };
    let mut outs = vec![tensor_type(elem, loss_dims)];
    if ctx.node.outputs.len() > 1 {
        outs.push(tensor_type(elem, input_dims(ctx, 0).map(<[Dim]>::to_vec)));
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn mean_divides_by_the_weights_of_kept_elements() {
        // x (2, 2): log-probs; targets [0, 1]; weights [1, 3]; target 1 ignored.
        let x =
            Tensor::from_vec(DataType::Float, &[2, 2], vec![-1.0f32, -2.0, -3.0, -4.0]).unwrap();
        let t = Tensor::from_vec(DataType::Int64, &[2], vec![0i64, 1]).unwrap();
        let w = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 3.0]).unwrap();
        let node = Node::new("NegativeLogLikelihoodLoss", "l", ["x", "t", "w"], ["y"]);
        let y = eval_node(&node, 13, &[Some(&x), Some(&t), Some(&w)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[(1.0 + 12.0) / 4.0]);
        let node = node.with_attr("ignore_index", AttrValue::Int(1));
        let y = eval_node(&node, 13, &[Some(&x), Some(&t), Some(&w)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1.0]);
        let bad = Tensor::from_vec(DataType::Int64, &[2], vec![0i64, 2]).unwrap();
        let err = eval_node(&node, 13, &[Some(&x), Some(&bad), Some(&w)]).unwrap_err();
        assert!(err.to_string().contains("not a class"), "{err}");
    }

    #[test]
    fn cross_entropy_of_equal_logits_is_log_of_the_class_count() {
        let x = Tensor::from_vec(DataType::Float, &[1, 4], vec![0.5f32; 4]).unwrap();
        let t = Tensor::from_vec(DataType::Int64, &[1], vec![2i64]).unwrap();
        let node = Node::new("SoftmaxCrossEntropyLoss", "l", ["x", "t"], ["y", "p"]);
        let y = eval_node(&node, 13, &[Some(&x), Some(&t)]).unwrap();
        assert!((y[0].as_slice::<f32>().unwrap()[0] - 4f32.ln()).abs() < 1e-6);
        assert_eq!(y[1].shape(), &[1, 4]);
    }
}
