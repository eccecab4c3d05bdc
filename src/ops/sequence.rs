//! The sequence operators (opset 11+): `SequenceEmpty`, `SequenceConstruct`, `SequenceInsert`,
//! `SequenceErase`, `SequenceAt`, `SequenceLength`, `SplitToSequence`, `ConcatFromSequence`,
//! and `SequenceMap` (17+).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__SequenceEmpty.html> and the pages of the other
//! operators beside it.
//!
//! A sequence is an [`ir::Sequence`](crate::ir::Sequence): tensors of one element type. The
//! kernels are [`ValuesFn`](super::ValuesFn)s; their tensor kernels refuse (nothing folds a
//! sequence). Inserting a tensor of another element type than the sequence's is an error, as in
//! onnxruntime. Positions are `int32` or `int64` scalars, negative ones counted from the back:
//! `SequenceInsert` takes `[-n, n]` (`n` appends), `SequenceErase` and `SequenceAt` `[-n, n)`.
//! Tensors are shared, not copied, between the sequences that hold them (a tensor's payload is
//! copied on its first write), so building a sequence of `n` tensors by insertion moves `n²`
//! handles, as onnxruntime copies its `TensorSeq` on every insertion, but no element twice.
//!
//! `SplitToSequence` cuts its input with `Split`'s kernel: into the sizes of a 1-D `split`,
//! into chunks of a scalar `split` (the last one shorter when the dim does not divide), or, with
//! no `split`, into chunks of 1 along `axis`, squeezed when `keepdims` is 0.
//! `ConcatFromSequence` joins with `Concat`'s kernel, along a new axis when `new_axis` is 1
//! (`axis` then in `[-rank-1, rank]`); an empty sequence is an error, as its result would have
//! no shape.
//!
//! `SequenceMap` runs its body once per position of its sequence inputs (which must be equally
//! long), giving the body each sequence's tensor at that position and each tensor input whole,
//! and collects every body output into a sequence; on empty sequences each output is an empty
//! sequence of the body output's declared element type.

use crate::error::{Error, Result};
use crate::ir::{Sequence, Value};
use crate::tensor::{try_with_capacity, Tensor};
use crate::DataType;

use super::layout::{concat, split};
use super::util::{normalize_axis, scalar_i64, to_i64s};
use super::{EvalCtx, OpDef};

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("SequenceEmpty", 11, 0..=0, 1..=1, refuse).with_values(eval_empty),
    OpDef::new("SequenceConstruct", 11, 1..=usize::MAX, 1..=1, refuse).with_values(eval_construct),
    OpDef::new("SequenceInsert", 11, 2..=3, 1..=1, refuse).with_values(eval_insert),
    OpDef::new("SequenceErase", 11, 1..=2, 1..=1, refuse).with_values(eval_erase),
    OpDef::new("SequenceAt", 11, 2..=2, 1..=1, refuse).with_values(eval_at),
    OpDef::new("SequenceLength", 11, 1..=1, 1..=1, refuse).with_values(eval_length),
    OpDef::new("SplitToSequence", 11, 1..=2, 1..=1, refuse).with_values(eval_split),
    OpDef::new("ConcatFromSequence", 11, 1..=1, 1..=1, refuse).with_values(eval_concat),
    OpDef::new("SequenceMap", 17, 1..=usize::MAX, 1..=usize::MAX, refuse).with_values(eval_map),
];

/// The tensor kernel of an operator on sequences: there is none.
fn refuse(ctx: &EvalCtx<'_>, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    Err(ctx.error(format!(
        "{} works on sequences, which only a running graph holds",
        ctx.node.op_type
    )))
}

/// Input `i`, which must be a sequence.
fn sequence<'v>(inputs: &[Option<&'v Value>], i: usize) -> Result<&'v Sequence> {
    match inputs.get(i).copied().flatten() {
        Some(Value::Sequence(s)) => Ok(s),
        Some(other) => Err(Error::Eval(format!(
            "input {i} is a {}, not a sequence",
            other.kind()
        ))),
        None => Err(Error::Eval(format!("required input {i} is missing"))),
    }
}

/// Input `i` when given, which must be a tensor.
fn tensor<'v>(inputs: &[Option<&'v Value>], i: usize) -> Result<Option<&'v Tensor>> {
    match inputs.get(i).copied().flatten() {
        Some(Value::Tensor(t)) => Ok(Some(t)),
        Some(other) => Err(Error::Eval(format!(
            "input {i} is a {}, not a tensor",
            other.kind()
        ))),
        None => Ok(None),
    }
}

/// Input `i`, which must be a tensor.
fn required_tensor<'v>(inputs: &[Option<&'v Value>], i: usize) -> Result<&'v Tensor> {
    tensor(inputs, i)?.ok_or_else(|| Error::Eval(format!("required input {i} is missing")))
}

/// A position input (an `int32` or `int64` scalar) made non-negative: within `[-len, len]` when
/// `end` is allowed (insertion), else `[-len, len)`.
fn position(t: &Tensor, len: usize, end: bool) -> Result<usize> {
    if !matches!(t.dtype(), DataType::Int32 | DataType::Int64) {
        return Err(Error::Eval(format!(
            "the position is {}, not int32 or int64",
            t.dtype()
        )));
    }
    let p = scalar_i64(t)?;
    let n = len as i64;
    let at = if p < 0 { p + n } else { p };
    let last = if end { n } else { n - 1 };
    if at < 0 || at > last {
        let range = if end {
            format!("[-{len}, {len}]")
        } else {
            format!("[-{len}, {len})")
        };
        return Err(Error::Eval(format!(
            "position {p} is out of range {range} for a sequence of {len}"
        )));
    }
    Ok(at as usize)
}

fn eval_empty(ctx: &EvalCtx<'_>, _: &[Option<&Value>]) -> Result<Vec<Value>> {
    let code = ctx.node.attr_int("dtype", DataType::Float.onnx() as i64)?;
    let elem = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| ctx.error(format!("dtype {code} is not an ONNX element type")))?;
    Ok(vec![Value::Sequence(Sequence::empty(Some(elem)))])
}

fn eval_construct(_: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let tensors = (0..inputs.len())
        .map(|i| required_tensor(inputs, i).cloned())
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![Value::Sequence(Sequence::new(None, tensors)?)])
}

fn eval_insert(_: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let seq = sequence(inputs, 0)?;
    let t = required_tensor(inputs, 1)?;
    let at = match tensor(inputs, 2)? {
        Some(p) => position(p, seq.len(), true)?,
        None => seq.len(),
    };
    let mut tensors = Vec::with_capacity(seq.len() + 1);
    tensors.extend_from_slice(&seq.tensors()[..at]);
    tensors.push(t.clone());
    tensors.extend_from_slice(&seq.tensors()[at..]);
    Ok(vec![Value::Sequence(Sequence::new(seq.elem(), tensors)?)])
}

fn eval_erase(_: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let seq = sequence(inputs, 0)?;
    if seq.is_empty() {
        return Err(Error::Eval("cannot erase from an empty sequence".into()));
    }
    let at = match tensor(inputs, 1)? {
        Some(p) => position(p, seq.len(), false)?,
        None => seq.len() - 1,
    };
    let mut tensors = seq.tensors().to_vec();
    tensors.remove(at);
    Ok(vec![Value::Sequence(Sequence::new(seq.elem(), tensors)?)])
}

fn eval_at(_: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let seq = sequence(inputs, 0)?;
    let at = position(required_tensor(inputs, 1)?, seq.len(), false)?;
    Ok(vec![Value::Tensor(seq.tensors()[at].clone())])
}

fn eval_length(_: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let seq = sequence(inputs, 0)?;
    Ok(vec![Value::Tensor(Tensor::scalar(
        DataType::Int64,
        seq.len() as i64,
    )?)])
}

fn eval_split(ctx: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let data = required_tensor(inputs, 0)?;
    if data.rank() == 0 {
        return Err(ctx.error("input must have rank 1 or more"));
    }
    let axis = normalize_axis(ctx.node.attr_int("axis", 0)?, data.rank())?;
    let len = data.shape()[axis];
    let given = tensor(inputs, 1)?;
    // One entry per piece: as many as the axis is long, which an empty tensor does not bound.
    let pieces = |chunk: usize| -> Result<Vec<usize>> {
        let mut sizes = try_with_capacity(len.div_ceil(chunk))?;
        sizes.extend(std::iter::repeat_n(chunk, len / chunk));
        if len % chunk != 0 {
            sizes.push(len % chunk);
        }
        Ok(sizes)
    };
    let sizes: Vec<usize> = match given {
        None => pieces(1)?,
        Some(s) if s.rank() == 0 => {
            let chunk = usize::try_from(scalar_i64(s)?)
                .ok()
                .filter(|&c| c > 0)
                .ok_or_else(|| ctx.error("a scalar split must be positive"))?;
            pieces(chunk)?
        }
        Some(s) if s.rank() == 1 => to_i64s(s)?
            .into_iter()
            .map(|v| {
                usize::try_from(v).map_err(|_| ctx.error(format!("split size {v} is negative")))
            })
            .collect::<Result<_>>()?,
        Some(s) => {
            return Err(ctx.error(format!(
                "split must be a scalar or 1-D, found shape {:?}",
                s.shape()
            )))
        }
    };
    if sizes.iter().try_fold(0usize, |a, &b| a.checked_add(b)) != Some(len) {
        return Err(ctx.error(format!(
            "split sizes {sizes:?} do not add up to the dim of {len}"
        )));
    }
    let mut pieces = split(data, axis, &sizes)?;
    if given.is_none() && ctx.node.attr_int("keepdims", 1)? == 0 {
        let mut squeezed = data.shape().to_vec();
        squeezed.remove(axis);
        for p in &mut pieces {
            p.reshape(&squeezed)?;
        }
    }
    Ok(vec![Value::Sequence(Sequence::new(
        Some(data.dtype()),
        pieces,
    )?)])
}

fn eval_concat(ctx: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let seq = sequence(inputs, 0)?;
    let Some(first) = seq.tensors().first() else {
        return Err(ctx.error("the sequence is empty"));
    };
    let axis = match ctx.node.attr("axis") {
        Some(_) => ctx.node.attr_int("axis", 0)?,
        None => return Err(ctx.error("needs an 'axis' attribute")),
    };
    let new_axis = ctx.node.attr_int("new_axis", 0)? == 1;
    let rank = first.rank();
    if new_axis {
        let axis = normalize_axis(axis, rank + 1)?;
        let stacked = seq
            .tensors()
            .iter()
            .map(|t| {
                if t.shape() != first.shape() {
                    return Err(ctx.error(format!(
                        "tensors of shapes {:?} and {:?} cannot be stacked",
                        first.shape(),
                        t.shape()
                    )));
                }
                let mut shape = t.shape().to_vec();
                shape.insert(axis, 1);
                let mut t = t.clone();
                t.reshape(&shape)?;
                Ok(t)
            })
            .collect::<Result<Vec<_>>>()?;
        let parts: Vec<&Tensor> = stacked.iter().collect();
        return Ok(vec![Value::Tensor(concat(&parts, axis)?)]);
    }
    if rank == 0 {
        return Err(ctx.error("tensors of rank 0 cannot be concatenated without new_axis"));
    }
    let axis = normalize_axis(axis, rank)?;
    let parts: Vec<&Tensor> = seq.tensors().iter().collect();
    Ok(vec![Value::Tensor(concat(&parts, axis)?)])
}

fn eval_map(ctx: &EvalCtx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
    let body = ctx.node.attr_graph("body")?;
    if body.inputs.len() != inputs.len() {
        return Err(ctx.error(format!(
            "the body takes {} inputs, the node gives {}",
            body.inputs.len(),
            inputs.len()
        )));
    }
    let len = sequence(inputs, 0)?.len();
    let given = inputs
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Some(Value::Sequence(s)) if s.len() != len => Err(ctx.error(format!(
                "input {i} is a sequence of {}, input 0 of {len}",
                s.len()
            ))),
            Some(v @ (Value::Sequence(_) | Value::Tensor(_))) => Ok(*v),
            Some(other) => Err(ctx.error(format!(
                "input {i} is a {}, not a sequence or a tensor",
                other.kind()
            ))),
            None => Err(ctx.error(format!("required input {i} is missing"))),
        })
        .collect::<Result<Vec<&Value>>>()?;
    let mut collected: Vec<Vec<Tensor>> = vec![Vec::with_capacity(len); body.outputs.len()];
    for k in 0..len {
        let args = given
            .iter()
            .map(|v| match v {
                Value::Sequence(s) => Value::Tensor(s.tensors()[k].clone()),
                other => (*other).clone(),
            })
            .collect();
        let outputs = ctx.run_subgraph_values(body, args)?;
        for ((out, into), decl) in outputs.into_iter().zip(&mut collected).zip(&body.outputs) {
            match out {
                Value::Tensor(t) => into.push(t),
                other => {
                    return Err(ctx.error(format!(
                        "body output '{}' is a {}, not a tensor",
                        decl.name,
                        other.kind()
                    )))
                }
            }
        }
    }
    collected
        .into_iter()
        .zip(&body.outputs)
        .map(|(tensors, decl)| {
            let declared = decl.tensor_type().and_then(|t| t.elem);
            Ok(Value::Sequence(Sequence::new(declared, tensors)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::NoSubgraphs;

    fn run(node: &Node, f: super::super::ValuesFn, inputs: &[Option<&Value>]) -> Result<Value> {
        let ctx = EvalCtx {
            node,
            opset: 17,
            runner: &NoSubgraphs,
            prepared: None,
            memo: None,
        };
        Ok(f(&ctx, inputs)?.remove(0))
    }

    fn ints(shape: &[usize], v: Vec<i64>) -> Tensor {
        Tensor::from_vec(DataType::Int64, shape, v).unwrap()
    }

    fn seq_of(tensors: Vec<Tensor>) -> Value {
        Value::Sequence(Sequence::new(None, tensors).unwrap())
    }

    #[test]
    fn insert_erase_and_at_count_negative_positions_from_the_back() {
        let node = Node::new("SequenceInsert", "n", ["s", "t", "p"], ["o"]);
        let s = seq_of(vec![ints(&[1], vec![1]), ints(&[1], vec![2])]);
        let t = Value::Tensor(ints(&[1], vec![9]));
        let p = Value::Tensor(ints(&[], vec![-1]));
        let out = run(&node, eval_insert, &[Some(&s), Some(&t), Some(&p)]).unwrap();
        let firsts: Vec<i64> = out
            .as_sequence()
            .unwrap()
            .tensors()
            .iter()
            .map(|t| t.as_slice::<i64>().unwrap()[0])
            .collect();
        assert_eq!(firsts, [1, 9, 2]);
        let end = Value::Tensor(ints(&[], vec![2]));
        assert!(run(&node, eval_insert, &[Some(&s), Some(&t), Some(&end)]).is_ok());
        let past = Value::Tensor(ints(&[], vec![3]));
        let err = run(&node, eval_insert, &[Some(&s), Some(&t), Some(&past)]).unwrap_err();
        assert!(err.to_string().contains("out of range [-2, 2]"), "{err}");

        let node = Node::new("SequenceErase", "n", ["s"], ["o"]);
        let out = run(&node, eval_erase, &[Some(&s)]).unwrap();
        assert_eq!(out.as_sequence().unwrap().len(), 1);
        let empty = Value::Sequence(Sequence::empty(Some(DataType::Int64)));
        assert!(run(&node, eval_erase, &[Some(&empty)]).is_err());

        let node = Node::new("SequenceAt", "n", ["s", "p"], ["o"]);
        let last = Value::Tensor(ints(&[], vec![-1]));
        let out = run(&node, eval_at, &[Some(&s), Some(&last)]).unwrap();
        assert_eq!(out.as_tensor().unwrap().as_slice::<i64>().unwrap(), &[2]);
        assert!(run(&node, eval_at, &[Some(&s), Some(&end)]).is_err());
    }

    #[test]
    fn insert_refuses_a_tensor_of_another_element_type() {
        let node = Node::new("SequenceEmpty", "n", Vec::<String>::new(), ["o"])
            .with_attr("dtype", AttrValue::Int(DataType::Float.onnx() as i64));
        let empty = run(&node, eval_empty, &[]).unwrap();
        let node = Node::new("SequenceInsert", "n", ["s", "t"], ["o"]);
        let t = Value::Tensor(ints(&[1], vec![1]));
        let err = run(&node, eval_insert, &[Some(&empty), Some(&t)]).unwrap_err();
        assert!(
            err.to_string()
                .contains("float tensors cannot hold a int64"),
            "{err}"
        );
    }

    #[test]
    fn split_to_sequence_by_scalar_by_sizes_and_into_ones() {
        let x = Value::Tensor(ints(&[5, 2], (0..10).collect()));
        let node = Node::new("SplitToSequence", "n", ["x", "s"], ["o"]);
        let two = Value::Tensor(ints(&[], vec![2]));
        let out = run(&node, eval_split, &[Some(&x), Some(&two)]).unwrap();
        let shapes: Vec<Vec<usize>> = out
            .as_sequence()
            .unwrap()
            .tensors()
            .iter()
            .map(|t| t.shape().to_vec())
            .collect();
        assert_eq!(shapes, [vec![2, 2], vec![2, 2], vec![1, 2]]);
        let sizes = Value::Tensor(ints(&[2], vec![1, 4]));
        let out = run(&node, eval_split, &[Some(&x), Some(&sizes)]).unwrap();
        assert_eq!(out.as_sequence().unwrap().get(1).unwrap().shape(), &[4, 2]);
        let node = Node::new("SplitToSequence", "n", ["x"], ["o"])
            .with_attr("axis", AttrValue::Int(1))
            .with_attr("keepdims", AttrValue::Int(0));
        let out = run(&node, eval_split, &[Some(&x)]).unwrap();
        let seq = out.as_sequence().unwrap();
        assert_eq!(seq.len(), 2);
        assert_eq!(
            seq.get(1).unwrap().as_slice::<i64>().unwrap(),
            &[1, 3, 5, 7, 9]
        );
    }

    #[test]
    fn splitting_an_empty_tensor_of_a_huge_axis_is_an_error_not_an_abort() {
        // No element, so the tensor exists; one piece per index of the axis would not.
        let x = Value::Tensor(Tensor::zeros(DataType::Float, &[1 << 61, 0]).unwrap());
        let node = Node::new("SplitToSequence", "n", ["x"], ["o"]);
        let err = run(&node, eval_split, &[Some(&x)]).unwrap_err().to_string();
        assert!(err.contains("memory") || err.contains("large"), "{err}");
    }

    #[test]
    fn concat_from_sequence_joins_or_stacks() {
        let s = seq_of(vec![ints(&[2], vec![1, 2]), ints(&[2], vec![3, 4])]);
        let node =
            Node::new("ConcatFromSequence", "n", ["s"], ["o"]).with_attr("axis", AttrValue::Int(0));
        let out = run(&node, eval_concat, &[Some(&s)]).unwrap();
        assert_eq!(out.as_tensor().unwrap().shape(), &[4]);
        let node = Node::new("ConcatFromSequence", "n", ["s"], ["o"])
            .with_attr("axis", AttrValue::Int(-1))
            .with_attr("new_axis", AttrValue::Int(1));
        let out = run(&node, eval_concat, &[Some(&s)]).unwrap();
        let t = out.as_tensor().unwrap();
        assert_eq!(
            (t.shape(), t.as_slice::<i64>().unwrap()),
            (&[2, 2][..], &[1, 3, 2, 4][..])
        );
        let empty = Value::Sequence(Sequence::empty(Some(DataType::Int64)));
        assert!(run(&node, eval_concat, &[Some(&empty)]).is_err());
    }

    #[test]
    fn a_tensor_where_a_sequence_is_expected_is_named() {
        let node = Node::new("SequenceLength", "n", ["s"], ["o"]);
        let t = Value::Tensor(ints(&[1], vec![1]));
        let err = run(&node, eval_length, &[Some(&t)]).unwrap_err();
        assert!(
            err.to_string()
                .contains("input 0 is a tensor, not a sequence"),
            "{err}"
        );
    }
}
