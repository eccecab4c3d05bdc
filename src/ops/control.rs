//! Control flow: `If` (opset 1+), `Loop` (1+) and `Scan` (8, and 9+).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__If.html>,
//! <https://onnx.ai/onnx/operators/onnx__Loop.html>,
//! <https://onnx.ai/onnx/operators/onnx__Scan.html>.
//!
//! Bodies run through [`EvalCtx::run_subgraph`], which gives them the enclosing scope. Scan
//! opset 8 has a leading batch axis on every state and scan input and an optional
//! `sequence_lens` input: each batch entry is scanned on its own, for its length, and scan
//! outputs of shorter entries are padded with zeros, as onnxruntime does.
//!
//! `If` and `Loop` run on values of any kind ([`OpDef::values`]): a branch may return a
//! sequence or an optional, and a loop-carried value may be one (its type may even change from
//! an optional to what it holds between iterations, as in onnx's `loop16_seq_none`). A `Loop`
//! scan output must be a tensor, as the specification says: a body that returns anything else
//! there is an error. `Scan`'s states and scan values are tensors by its specification; its body
//! may still use sequences inside.

use crate::error::{Error, Result};
use crate::ir::{Graph, Value};
use crate::tensor::Tensor;
use crate::tensor::{try_vec, try_with_capacity};
use crate::DataType;

use super::util::{optional, scalar_i64};
use super::{on_tensors, EvalCtx, OpDef};

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("If", 1, 1..=1, 1..=usize::MAX, if_tensors).with_values(eval_if),
    OpDef::new("Loop", 1, 2..=usize::MAX, 1..=usize::MAX, loop_tensors).with_values(eval_loop),
    OpDef::new("Scan", 8, 2..=usize::MAX, 1..=usize::MAX, eval_scan_batched).until(8),
    OpDef::new("Scan", 9, 1..=usize::MAX, 1..=usize::MAX, eval_scan),
];

fn truth(t: &Tensor, what: &str) -> Result<bool> {
    if t.len() != 1 {
        return Err(Error::Eval(format!(
            "{what} must hold one value, found shape {:?}",
            t.shape()
        )));
    }
    Ok(match t.dtype() {
        DataType::Bool | DataType::Uint8 | DataType::Int8 => t.as_bytes()?[0] != 0,
        _ => scalar_i64(t)? != 0,
    })
}

/// Input `i` of a value kernel, when given: a tensor (`what` names it in the error otherwise).
fn tensor_input<'v>(
    inputs: &[Option<&'v Value>],
    i: usize,
    what: &str,
) -> Result<Option<&'v Tensor>> {
    match inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(Value::Tensor(t)) => Ok(Some(t)),
        Some(other) => Err(Error::Eval(format!(
            "{what} is a {}, not a tensor",
            other.kind()
        ))),
    }
}

fn if_tensors(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    on_tensors(eval_if, ctx, inputs)
}

fn eval_if(ctx: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let cond = tensor_input(inputs, 0, "the condition")?
        .ok_or_else(|| Error::Eval("required input 0 is missing".into()))?;
    let branch = if truth(cond, "the condition")? {
        "then_branch"
    } else {
        "else_branch"
    };
    let graph = ctx.node.attr_graph(branch)?;
    ctx.run_subgraph_values(graph, Vec::new())
}

fn loop_tensors(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    on_tensors(eval_loop, ctx, inputs)
}

/// `Loop(M, cond, v...)`: the body takes `(iteration, cond, v...)` and returns
/// `(cond, v..., scan...)`; the node returns the final `v...` and each scan output stacked along
/// a new first axis.
fn eval_loop(ctx: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let body = ctx.node.attr_graph("body")?;
    let max_trip = tensor_input(inputs, 0, "the trip count")?
        .map(scalar_i64)
        .transpose()?;
    let mut cond = tensor_input(inputs, 1, "the loop condition")?
        .map(|t| truth(t, "the loop condition"))
        .transpose()?
        .unwrap_or(true);
    let mut carried: Vec<Value> = inputs[2..]
        .iter()
        .map(|v| {
            v.cloned()
                .ok_or_else(|| Error::Eval("an omitted loop-carried value".into()))
        })
        .collect::<Result<_>>()?;
    let n_carried = carried.len();
    let n_scan = body
        .outputs
        .len()
        .checked_sub(1 + n_carried)
        .ok_or_else(|| {
            Error::Eval(format!(
                "the body has {} outputs, fewer than 1 + {n_carried} loop-carried values",
                body.outputs.len()
            ))
        })?;
    let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); n_scan];
    let mut i: i64 = 0;
    while cond && max_trip.is_none_or(|m| i < m) {
        let mut args = Vec::with_capacity(2 + n_carried);
        args.push(Value::Tensor(Tensor::scalar(DataType::Int64, i)?));
        args.push(Value::Tensor(Tensor::scalar(DataType::Bool, 1u8)?));
        args.append(&mut carried);
        let mut out = ctx.run_subgraph_values(body, args)?.into_iter();
        let c = out
            .next()
            .ok_or_else(|| Error::Eval("the body returned no condition".into()))?;
        let c = c
            .as_tensor()
            .ok_or_else(|| Error::Eval(format!("the body's condition output is a {}", c.kind())))?;
        cond = truth(c, "the body's condition output")?;
        carried.extend(out.by_ref().take(n_carried));
        for ((s, v), decl) in scans
            .iter_mut()
            .zip(out)
            .zip(&body.outputs[1 + n_carried..])
        {
            match v {
                Value::Tensor(t) => s.push(t),
                other => {
                    return Err(Error::Eval(format!(
                        "scan output '{}' is a {}: a Loop's scan outputs must be tensors",
                        decl.name,
                        other.kind()
                    )))
                }
            }
        }
        i += 1;
    }
    let mut outputs = carried;
    for (k, parts) in scans.into_iter().enumerate() {
        let output = &body.outputs[1 + n_carried + k];
        outputs.push(Value::Tensor(stack(&parts, 0, || {
            empty_scan_output(body, output)
        })?));
    }
    Ok(outputs)
}

/// A scan output of zero iterations: shape `[0]` followed by the body output's declared dims
/// where they are known (else `[0]`), of its declared element type.
fn empty_scan_output(_body: &Graph, output: &crate::ir::ValueInfo) -> Option<Tensor> {
    let ty = output.tensor_type()?;
    let elem = ty.elem?;
    let mut shape = vec![0usize];
    if let Some(s) = &ty.shape {
        for d in &s.dims {
            shape.push(usize::try_from(d.known()?).ok()?);
        }
    }
    Tensor::zeros(elem, &shape).ok()
}

/// Stacks equally shaped tensors along a new axis at `axis`; `empty` gives the result when there
/// are none.
pub(super) fn stack(
    parts: &[Tensor],
    axis: usize,
    empty: impl FnOnce() -> Option<Tensor>,
) -> Result<Tensor> {
    let Some(first) = parts.first() else {
        return empty().ok_or_else(|| {
            Error::Unsupported("a scan output of zero iterations whose type is not declared".into())
        });
    };
    let item = first.shape().to_vec();
    if axis > item.len() {
        return Err(Error::Eval(format!(
            "axis {axis} is out of range for stacking shape {item:?}"
        )));
    }
    if let Some(p) = parts
        .iter()
        .find(|p| p.shape() != item.as_slice() || p.dtype() != first.dtype())
    {
        return Err(Error::Eval(format!(
            "scan outputs differ between iterations: {} {:?} then {} {:?}",
            first.dtype(),
            item,
            p.dtype(),
            p.shape()
        )));
    }
    // Concatenate along axis 0, then move that axis to `axis` with one block copy.
    let n = parts.len();
    let mut all = Tensor::zeros(first.dtype(), &[n * first.len()])?;
    for (k, p) in parts.iter().enumerate() {
        for e in 0..p.len() {
            all.copy_element_from(k * first.len() + e, p, e)?;
        }
    }
    let outer: usize = item[..axis].iter().product();
    let inner: usize = item[axis..].iter().product();
    let mut starts = try_with_capacity(outer * n)?;
    for o in 0..outer {
        for k in 0..n {
            starts.push(k * first.len() + o * inner);
        }
    }
    let mut shape = item.clone();
    shape.insert(axis, n);
    Ok(all.take_blocks(&shape, &starts, inner)?)
}

/// Slice `i` of `t` along `axis` (the axis removed).
fn slice_along(t: &Tensor, axis: usize, i: usize) -> Result<Tensor> {
    let shape = t.shape();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let starts: Vec<usize> = (0..outer).map(|o| (o * shape[axis] + i) * inner).collect();
    let out: Vec<usize> = shape[..axis]
        .iter()
        .chain(&shape[axis + 1..])
        .copied()
        .collect();
    Ok(t.take_blocks(&out, &starts, inner)?)
}

fn axes_attr(ctx: &EvalCtx<'_>, name: &str, count: usize, ranks: &[usize]) -> Result<Vec<usize>> {
    let given = ctx.node.attr_ints(name)?.map(<[i64]>::to_vec);
    let values = given.unwrap_or_else(|| vec![0; count]);
    if values.len() != count {
        return Err(ctx.error(format!(
            "{name} has {} entries, expected {count}",
            values.len()
        )));
    }
    values
        .iter()
        .zip(ranks)
        .map(|(&a, &r)| super::util::normalize_axis(a, r))
        .collect()
}

/// `Scan(state..., scan_inputs...)`: the body runs once per slice of the scan inputs along their
/// scan axes, threading the state; each scan output is the body's per-iteration outputs stacked
/// along its scan axis (in reverse order where its direction is 1).
fn eval_scan(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let body = ctx.node.attr_graph("body")?;
    let m = usize::try_from(ctx.node.attr_int("num_scan_inputs", 0)?)
        .ok()
        .filter(|&m| m >= 1 && m <= inputs.len())
        .ok_or_else(|| ctx.error("num_scan_inputs must be between 1 and the input count"))?;
    let n_state = inputs.len() - m;
    let all: Vec<&Tensor> = inputs
        .iter()
        .map(|t| t.ok_or_else(|| Error::Eval("an omitted Scan input".into())))
        .collect::<Result<_>>()?;
    let (state_in, scan_in) = all.split_at(n_state);
    let in_ranks: Vec<usize> = scan_in.iter().map(|t| t.rank()).collect();
    let in_axes = axes_attr(ctx, "scan_input_axes", m, &in_ranks)?;
    let in_dirs = ctx
        .node
        .attr_ints("scan_input_directions")?
        .map_or_else(|| vec![0; m], <[i64]>::to_vec);
    let steps = scan_in[0].shape()[in_axes[0]];
    for (t, &a) in scan_in.iter().zip(&in_axes) {
        if t.shape()[a] != steps {
            return Err(ctx.error(format!(
                "scan inputs differ in length along their scan axes ({steps} and {})",
                t.shape()[a]
            )));
        }
    }
    let n_out_scan = body
        .outputs
        .len()
        .checked_sub(n_state)
        .ok_or_else(|| ctx.error("the body has fewer outputs than state variables"))?;
    let state: Vec<Tensor> = state_in.iter().map(|t| (*t).clone()).collect();
    let (state, scans) = iterate(
        ctx, body, state, scan_in, &in_axes, &in_dirs, steps, n_out_scan,
    )?;
    let out_dirs = ctx
        .node
        .attr_ints("scan_output_directions")?
        .map_or_else(|| vec![0; n_out_scan], <[i64]>::to_vec);
    let out_axes_raw = ctx
        .node
        .attr_ints("scan_output_axes")?
        .map_or_else(|| vec![0; n_out_scan], <[i64]>::to_vec);
    let mut outputs = state;
    for (k, mut parts) in scans.into_iter().enumerate() {
        if out_dirs.get(k).copied().unwrap_or(0) == 1 {
            parts.reverse();
        }
        let output = &body.outputs[n_state + k];
        let item_rank = parts.first().map_or(0, Tensor::rank);
        let axis =
            super::util::normalize_axis(out_axes_raw.get(k).copied().unwrap_or(0), item_rank + 1)?;
        outputs.push(stack(&parts, axis, || empty_scan_output(body, output))?);
    }
    Ok(outputs)
}

/// Runs `body` `steps` times from `state`, each time on slice `i` (or `steps - 1 - i` where
/// `dirs` says 1) of every scan input along its axis; returns the final state and, for each scan
/// output, its value at every iteration.
#[allow(clippy::too_many_arguments)]
fn iterate(
    ctx: &EvalCtx<'_>,
    body: &Graph,
    mut state: Vec<Tensor>,
    scan_in: &[&Tensor],
    axes: &[usize],
    dirs: &[i64],
    steps: usize,
    n_out_scan: usize,
) -> Result<(Vec<Tensor>, Vec<Vec<Tensor>>)> {
    let n_state = state.len();
    let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); n_out_scan];
    for i in 0..steps {
        let mut args = std::mem::take(&mut state);
        for (k, t) in scan_in.iter().enumerate() {
            let j = if dirs.get(k).copied().unwrap_or(0) == 1 {
                steps - 1 - i
            } else {
                i
            };
            args.push(slice_along(t, axes[k], j)?);
        }
        let mut out = ctx.run_subgraph(body, args)?.into_iter();
        state.extend(out.by_ref().take(n_state));
        for (s, t) in scans.iter_mut().zip(out) {
            s.push(t);
        }
    }
    Ok((state, scans))
}

/// `Scan` opset 8: `Scan(sequence_lens?, state..., scan_inputs...)` where every state and scan
/// input has a leading batch axis and scan inputs scan along axis 1. Entry `b` of the batch runs
/// the body `sequence_lens[b]` times (the full length when omitted), reading its scan inputs
/// backwards where `directions` says 1; its final states and its scan outputs (zero-padded to
/// the full length) are stacked along the batch axis.
fn eval_scan_batched(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let body = ctx.node.attr_graph("body")?;
    let lens = optional(inputs, 0);
    let rest: Vec<&Tensor> = inputs[1..]
        .iter()
        .map(|t| t.ok_or_else(|| ctx.error("an omitted Scan state or scan input")))
        .collect::<Result<_>>()?;
    let m = usize::try_from(ctx.node.attr_int("num_scan_inputs", 0)?)
        .ok()
        .filter(|&m| m >= 1 && m <= rest.len())
        .ok_or_else(|| ctx.error("num_scan_inputs must be between 1 and the input count"))?;
    let n_state = rest.len() - m;
    let (state_in, scan_in) = rest.split_at(n_state);
    let dirs = ctx
        .node
        .attr_ints("directions")?
        .map_or_else(|| vec![0; m], <[i64]>::to_vec);
    let &[batch, steps, ..] = scan_in[0].shape() else {
        return Err(ctx.error("scan inputs need a batch and a sequence axis"));
    };
    if let Some(t) = rest
        .iter()
        .find(|t| t.shape().first() != Some(&batch))
        .or_else(|| scan_in.iter().find(|t| t.shape().get(1) != Some(&steps)))
    {
        return Err(ctx.error(format!(
            "input {:?} does not have the batch {batch} and sequence length {steps} of the first scan input",
            t.shape()
        )));
    }
    let lens: Vec<usize> = match lens {
        None => try_vec(batch, steps)?,
        Some(t) => {
            let v = super::util::to_i64s(t)?;
            if v.len() != batch || v.iter().any(|&l| l < 0 || l as usize > steps) {
                return Err(ctx.error(format!(
                    "sequence_lens {v:?} are not {batch} lengths of at most {steps}"
                )));
            }
            v.iter().map(|&l| l as usize).collect()
        }
    };
    let n_out_scan = body
        .outputs
        .len()
        .checked_sub(n_state)
        .ok_or_else(|| ctx.error("the body has fewer outputs than state variables"))?;
    // One tensor per batch entry for every state and scan output: an empty input may declare
    // a batch no memory holds, refused here rather than pushed one entry at a time.
    let per_entry = || try_with_capacity::<Tensor>(batch);
    let mut states: Vec<Vec<Tensor>> = (0..n_state)
        .map(|_| per_entry())
        .collect::<Result<_, _>>()?;
    let mut scans: Vec<Vec<Tensor>> = (0..n_out_scan)
        .map(|_| per_entry())
        .collect::<Result<_, _>>()?;
    for (b, &len) in lens.iter().enumerate() {
        let state: Vec<Tensor> = state_in
            .iter()
            .map(|t| slice_along(t, 0, b))
            .collect::<Result<_>>()?;
        let entry: Vec<Tensor> = scan_in
            .iter()
            .map(|t| slice_along(t, 0, b))
            .collect::<Result<_>>()?;
        let entry: Vec<&Tensor> = entry.iter().collect();
        let (state, per_step) = iterate(
            ctx,
            body,
            state,
            &entry,
            &vec![0; m],
            &dirs,
            len,
            n_out_scan,
        )?;
        for (all, t) in states.iter_mut().zip(state) {
            all.push(t);
        }
        for (k, mut parts) in per_step.into_iter().enumerate() {
            if let Some(first) = parts.first().cloned() {
                // Zero padding past a shorter entry's length.
                while parts.len() < steps {
                    parts.push(Tensor::zeros(first.dtype(), first.shape())?);
                }
            }
            let output = &body.outputs[n_state + k];
            let stacked = stack(&parts, 0, || {
                let empty = empty_scan_output(body, output)?;
                let mut shape = empty.shape().to_vec();
                shape[0] = steps;
                Tensor::zeros(empty.dtype(), &shape).ok()
            })?;
            scans[k].push(stacked);
        }
    }
    let mut outputs = Vec::with_capacity(n_state + n_out_scan);
    for (k, parts) in states.into_iter().chain(scans).enumerate() {
        let declared = body.outputs.get(k);
        outputs.push(stack(&parts, 0, || {
            declared.and_then(|o| empty_scan_output(body, o))
        })?);
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use crate::interp::Session;
    use crate::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
    use crate::{DataType, Tensor};

    fn float(name: &str, dims: &[i64]) -> ValueInfo {
        let dims = dims.iter().map(|&d| Dim::Known(d)).collect();
        ValueInfo::new(name, Type::tensor(DataType::Float, dims))
    }

    /// A running sum over a batch of two sequences of lengths 3 and 1: the second entry's
    /// state stops after one step and its scan output is padded with zeros.
    #[test]
    fn scan8_runs_each_batch_entry_for_its_length() {
        let mut body = Graph::new("body");
        body.inputs.push(float("s", &[1]));
        body.inputs.push(float("x", &[1]));
        body.outputs.push(float("s2", &[1]));
        body.outputs.push(float("y", &[1]));
        body.add_node(Node::new("Add", "add", ["s", "x"], ["s2"]));
        body.add_node(Node::new("Identity", "copy", ["s2"], ["y"]));
        let mut g = Graph::new("g");
        g.inputs.push(ValueInfo::new(
            "lens",
            Type::tensor(DataType::Int64, vec![Dim::Known(2)]),
        ));
        g.inputs.push(float("init", &[2, 1]));
        g.inputs.push(float("xs", &[2, 3, 1]));
        g.outputs.push(float("final", &[2, 1]));
        g.outputs.push(float("sums", &[2, 3, 1]));
        g.add_node(
            Node::new("Scan", "scan", ["lens", "init", "xs"], ["final", "sums"])
                .with_attr("num_scan_inputs", AttrValue::Int(1))
                .with_attr("body", AttrValue::Graph(Box::new(body))),
        );
        let model = Model::new(g, 8);
        let lens = Tensor::from_vec(DataType::Int64, &[2], vec![3i64, 1]).unwrap();
        let init = Tensor::from_vec(DataType::Float, &[2, 1], vec![0.0f32, 10.0]).unwrap();
        let xs = Tensor::from_vec(
            DataType::Float,
            &[2, 3, 1],
            vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0],
        )
        .unwrap();
        let out = Session::new(&model)
            .run(vec![
                ("lens".into(), lens),
                ("init".into(), init),
                ("xs".into(), xs),
            ])
            .unwrap();
        assert_eq!(out[0].1.as_slice::<f32>().unwrap(), &[6.0, 14.0]);
        assert_eq!(out[1].1.shape(), &[2, 3, 1]);
        assert_eq!(
            out[1].1.as_slice::<f32>().unwrap(),
            &[1.0, 3.0, 6.0, 14.0, 0.0, 0.0]
        );
    }

    /// Empty scan inputs that declare a batch of 2^40 entries: the per-entry outputs no memory
    /// holds are refused with an error, not allocated (or looped over) one entry at a time.
    #[test]
    fn scan8_with_a_huge_empty_batch_is_refused() {
        let mut body = Graph::new("body");
        body.inputs.push(float("s", &[0]));
        body.inputs.push(float("x", &[1]));
        body.outputs.push(float("s2", &[0]));
        body.add_node(Node::new("Identity", "copy", ["s"], ["s2"]));
        let huge = 1usize << 40;
        let mut g = Graph::new("g");
        g.inputs.push(float("init", &[huge as i64, 0]));
        g.inputs.push(float("xs", &[huge as i64, 0, 1]));
        g.outputs.push(float("final", &[huge as i64, 0]));
        g.add_node(
            Node::new("Scan", "scan", ["", "init", "xs"], ["final"])
                .with_attr("num_scan_inputs", AttrValue::Int(1))
                .with_attr("body", AttrValue::Graph(Box::new(body))),
        );
        let model = Model::new(g, 8);
        let init = Tensor::zeros(DataType::Float, &[huge, 0]).unwrap();
        let xs = Tensor::zeros(DataType::Float, &[huge, 0, 1]).unwrap();
        let err = Session::new(&model)
            .run(vec![("init".into(), init), ("xs".into(), xs)])
            .unwrap_err();
        assert!(err.to_string().contains("budget"), "{err}");
    }
}
