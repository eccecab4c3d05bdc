//! `Unique` (opset 11): the distinct elements (or slices along `axis`) of a tensor, with the
//! index of each one's first occurrence, the inverse mapping and the counts.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Unique.html>.
//!
//! Without `axis` the input is flattened. With `sorted` (the default) the uniques are in
//! ascending order (slices lexicographically, NaN last, as numpy's `unique`), otherwise in order
//! of first occurrence. Every element type; the output is copied with `Tensor::take_blocks`.

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::ops::util::{normalize_axis, required};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::{try_with_capacity, Tensor};
use crate::DataType;

use super::runs::{in_elem, typed};

/// An element as a value that orders and compares as the element does.
#[derive(Clone, Debug, PartialEq)]
enum Key {
    Float(f64),
    Int(i128),
    Bytes(Vec<u8>),
}

impl Key {
    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Float(a), Key::Float(b)) => match (a.is_nan(), b.is_nan()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => a.partial_cmp(b).unwrap_or(Ordering::Equal),
            },
            (Key::Int(a), Key::Int(b)) => a.cmp(b),
            (Key::Bytes(a), Key::Bytes(b)) => a.cmp(b),
            _ => Ordering::Equal,
        }
    }
}

fn keys(t: &Tensor) -> Result<Vec<Key>> {
    use crate::ops::num::Float;
    let dtype = t.dtype();
    if dtype == DataType::String {
        return Ok(t
            .as_strings()?
            .iter()
            .map(|s| Key::Bytes(s.clone()))
            .collect());
    }
    if dtype == DataType::Bool {
        return Ok(t
            .as_slice::<u8>()?
            .iter()
            .map(|&b| Key::Int(i128::from(b)))
            .collect());
    }
    crate::ops::num::dispatch_float!(dtype, T => {
        return Ok(t.as_slice::<T>()?.iter().map(|v| Key::Float(v.to_f64())).collect());
    }, _ => {});
    crate::ops::num::dispatch_int!(dtype, T => Ok(t.as_slice::<T>()?.iter().map(|&v| Key::Int(v as i128)).collect()),
        _ => Err(Error::Eval(format!("Unique does not take {dtype} tensors"))))
}

pub(super) fn eval_unique(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let sorted = ctx.node.attr_int("sorted", 1)? != 0;
    let axis = match ctx.node.attr("axis") {
        Some(_) => Some(normalize_axis(ctx.node.attr_int("axis", 0)?, x.rank())?),
        None => None,
    };
    let shape = x.shape();
    // Slices: `len` of them along the axis, each `outer` runs of `inner` elements.
    let (outer, len, inner) = match axis {
        Some(a) => (
            shape[..a].iter().product::<usize>(),
            shape[a],
            shape[a + 1..].iter().product::<usize>(),
        ),
        None => (1, x.len(), 1),
    };
    let k = keys(x)?;
    let slice_cmp = |i: usize, j: usize| -> Ordering {
        for o in 0..outer {
            for e in 0..inner {
                let (a, b) = ((o * len + i) * inner + e, (o * len + j) * inner + e);
                match k[a].cmp(&k[b]) {
                    Ordering::Equal => {}
                    other => return other,
                }
            }
        }
        Ordering::Equal
    };
    // Positions sorted by slice (stable: the first occurrence leads each run of equals).
    let mut order = try_with_capacity::<usize>(len)?;
    order.extend(0..len);
    order.sort_by(|&i, &j| slice_cmp(i, j));
    let mut firsts: Vec<usize> = try_with_capacity(len)?;
    let mut counts: Vec<i64> = try_with_capacity(len)?;
    let mut group_of = try_with_capacity::<usize>(len)?;
    group_of.resize(len, 0);
    for (n, &i) in order.iter().enumerate() {
        if n == 0 || slice_cmp(order[n - 1], i) != Ordering::Equal {
            firsts.push(i);
            counts.push(0);
        }
        let g = firsts.len() - 1;
        counts[g] += 1;
        group_of[i] = g;
    }
    // Unsorted: groups in order of first occurrence.
    let mut rank: Vec<usize> = try_with_capacity(firsts.len())?;
    rank.extend(0..firsts.len());
    if !sorted {
        rank.sort_by_key(|&g| firsts[g]);
    }
    let mut position = try_with_capacity::<usize>(rank.len())?;
    position.resize(rank.len(), 0);
    for (p, &g) in rank.iter().enumerate() {
        position[g] = p;
    }
    let uniques = rank.len();
    let mut y_shape = shape.to_vec();
    let mut starts = try_with_capacity::<usize>(outer * uniques)?;
    match axis {
        Some(a) => y_shape[a] = uniques,
        None => y_shape = vec![uniques],
    }
    for o in 0..outer {
        starts.extend(rank.iter().map(|&g| (o * len + firsts[g]) * inner));
    }
    let y = x.take_blocks(&y_shape, &starts, inner)?;
    let int = |v: Vec<i64>| -> Result<Tensor> {
        let n = v.len();
        Ok(Tensor::from_vec(DataType::Int64, &[n], v)?)
    };
    let mut outs = vec![y];
    outs.push(int(rank.iter().map(|&g| firsts[g] as i64).collect())?);
    outs.push(int(group_of.iter().map(|&g| position[g] as i64).collect())?);
    outs.push(int(rank.iter().map(|&g| counts[g]).collect())?);
    outs.truncate(ctx.node.outputs.len().max(1));
    Ok(outs)
}

pub(super) fn infer_unique(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let rank = ctx
        .input(0)
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dims.len());
    let y_rank = match ctx.node.attr("axis") {
        Some(_) => rank,
        None => Some(1),
    };
    let vector = typed(Some(DataType::Int64), Some(vec![Dim::Unknown]));
    Ok(vec![
        typed(in_elem(ctx, 0), y_rank.map(|r| vec![Dim::Unknown; r])),
        vector.clone(),
        vector.clone(),
        vector,
    ])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;

    use super::*;

    #[test]
    fn follows_the_onnx_example_unsorted() {
        let x =
            Tensor::from_vec(DataType::Float, &[6], vec![2.0f32, 1.0, 1.0, 3.0, 4.0, 3.0]).unwrap();
        let node = Node::new("Unique", "u", ["x"], ["y", "i", "v", "c"])
            .with_attr("sorted", AttrValue::Int(0));
        let out = eval_node(&node, 11, &[Some(&x)]).unwrap();
        assert_eq!(out[0].as_slice::<f32>().unwrap(), &[2.0, 1.0, 3.0, 4.0]);
        assert_eq!(out[1].as_slice::<i64>().unwrap(), &[0, 1, 3, 4]);
        assert_eq!(out[2].as_slice::<i64>().unwrap(), &[0, 1, 1, 2, 3, 2]);
        assert_eq!(out[3].as_slice::<i64>().unwrap(), &[1, 2, 2, 1]);
    }
}
