//! The scatters: `ScatterElements` (opset 11, `reduction` add/mul from 16, max/min from 18),
//! `ScatterND` (same opsets) and the deprecated `Scatter` (9, an alias of `ScatterElements`
//! without reduction).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__ScatterElements.html>,
//! <https://onnx.ai/onnx/operators/onnx__ScatterND.html>,
//! <https://onnx.ai/onnx/operators/onnx__Scatter.html>.
//!
//! The output is a copy of `data` with the updates written in the order they appear in the
//! updates tensor; with `reduction = none` a later update to the same position wins (the specs
//! leave duplicates undefined). Negative indices count from the end of their dim. Without a
//! reduction every element type works; reductions take the numeric types, floats computed in
//! `f64` and rounded once (exactly what a native add or multiply gives), integers wrapping.

use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::tensor::try_with_capacity;
use crate::tensor::Tensor;

use super::super::util::{normalize_axis, required, strides};

use super::super::{EvalCtx, InferCtx};
use super::runs::{advance, in_dims, in_elem, typed};
use crate::ops::num::Float;

#[derive(Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

fn reduction(node: &crate::ir::Node) -> Result<Reduction> {
    Ok(match node.attr_string("reduction")?.unwrap_or("none") {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        other => return Err(Error::Eval(format!("unknown reduction '{other}'"))),
    })
}

/// Index value `v` resolved against a dim of `dim`.
fn resolve(v: i64, dim: usize) -> Result<usize> {
    let d = dim as i64;
    let r = if v < 0 { v + d } else { v };
    if (0..d).contains(&r) {
        Ok(r as usize)
    } else {
        Err(Error::Eval(format!(
            "index {v} is out of range for a dim of {dim}"
        )))
    }
}

/// `values[dst] = f(values[dst], updates[src])` for every `(dst, src)` pair, in order.
fn combine<T: Copy>(
    values: &mut [T],
    updates: &[T],
    pairs: &[(usize, usize)],
    f: impl Fn(T, T) -> T,
) -> Result<()> {
    for &(dst, src) in pairs {
        let (Some(u), Some(v)) = (updates.get(src), values.get_mut(dst)) else {
            return Err(Error::Eval(format!(
                "update {src} to element {dst} is out of bounds"
            )));
        };
        *v = f(*v, *u);
    }
    Ok(())
}

/// `data` with `updates[src]` written to (or combined into) element `dst` for every pair.
fn scatter(
    data: &Tensor,
    updates: &Tensor,
    pairs: &[(usize, usize)],
    r: Reduction,
) -> Result<Tensor> {
    let dtype = data.dtype();
    if updates.dtype() != dtype {
        return Err(Error::Eval(format!(
            "updates are {}, data is {dtype}",
            updates.dtype()
        )));
    }
    let mut out = data.clone();
    if r == Reduction::None {
        for &(dst, src) in pairs {
            out.copy_element_from(dst, updates, src)?;
        }
        return Ok(out);
    }
    crate::ops::num::dispatch_float!(dtype, T => {
        let op = |a: T, b: T| {
            let (a, b) = (a.to_f64(), b.to_f64());
            <T as Float>::from_f64(match r {
                Reduction::Add => a + b,
                Reduction::Mul => a * b,
                Reduction::Max => a.max(b),
                Reduction::Min => a.min(b),
                Reduction::None => b,
            })
        };
        combine(out.as_slice_mut::<T>()?, updates.as_slice::<T>()?, pairs, op)?
    }, _ => crate::ops::num::dispatch_int!(dtype, T => {
        let op = |a: T, b: T| match r {
            Reduction::Add => a.wrapping_add(b),
            Reduction::Mul => a.wrapping_mul(b),
            Reduction::Max => a.max(b),
            Reduction::Min => a.min(b),
            Reduction::None => b,
        };
        combine(out.as_slice_mut::<T>()?, updates.as_slice::<T>()?, pairs, op)?
    }, _ => return Err(Error::Eval(format!("a reduction does not take {dtype} values")))));
    Ok(out)
}

/// The `(data element, update element)` pairs of `ScatterElements` along `axis`.
fn element_pairs(
    data: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    axis: i64,
) -> Result<Vec<(usize, usize)>> {
    let (ds, is) = (data.shape(), indices.shape());
    if is != updates.shape() || is.len() != ds.len() || ds.is_empty() {
        return Err(Error::Eval(format!(
            "indices {is:?} and updates {:?} must have one shape, of the data's rank {}",
            updates.shape(),
            ds.len()
        )));
    }
    let axis = normalize_axis(axis, ds.len())?;
    if let Some(d) = (0..ds.len()).find(|&d| d != axis && is[d] > ds[d]) {
        return Err(Error::Eval(format!(
            "indices {is:?} exceed data {ds:?} on axis {d}"
        )));
    }
    let st = strides(ds);
    let mut coord = vec![0usize; is.len()];
    let mut pairs = try_with_capacity(indices.len())?;
    for k in 0..indices.len() {
        let p = resolve(indices.index_at(k)?, ds[axis])?;
        let dst = coord
            .iter()
            .enumerate()
            .map(|(d, &c)| if d == axis { p } else { c } * st[d])
            .sum();
        pairs.push((dst, k));
        advance(&mut coord, is);
    }
    Ok(pairs)
}

/// The `(data element, update element)` pairs of `ScatterND`.
fn nd_pairs(data: &Tensor, indices: &Tensor, updates: &Tensor) -> Result<Vec<(usize, usize)>> {
    let (ds, is) = (data.shape(), indices.shape());
    let Some((&k, batch)) = is.split_last() else {
        return Err(Error::Eval("indices must have rank 1 or more".into()));
    };
    if k == 0 || k > ds.len() {
        return Err(Error::Eval(format!(
            "the last indices dim ({k}) must be between 1 and the data rank {}",
            ds.len()
        )));
    }
    let want: Vec<usize> = batch.iter().chain(&ds[k..]).copied().collect();
    if updates.shape() != want {
        return Err(Error::Eval(format!(
            "updates must have shape {want:?}, found {:?}",
            updates.shape()
        )));
    }
    let st = strides(ds);
    let inner: usize = ds[k..].iter().product();
    let tuples: usize = batch.iter().product();
    let mut pairs = try_with_capacity(tuples * inner)?;
    for t in 0..tuples {
        let mut base = 0;
        for c in 0..k {
            base += resolve(indices.index_at(t * k + c)?, ds[c])? * st[c];
        }
        pairs.extend((0..inner).map(|j| (base + j, t * inner + j)));
    }
    Ok(pairs)
}

/// The three inputs of a scatter.
fn operands<'t>(inputs: &[Option<&'t Tensor>]) -> Result<(&'t Tensor, &'t Tensor, &'t Tensor)> {
    Ok((
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    ))
}

pub(super) fn eval_scatter_elements(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (data, indices, updates) = operands(inputs)?;
    let pairs = element_pairs(data, indices, updates, ctx.node.attr_int("axis", 0)?)?;
    Ok(vec![scatter(data, updates, &pairs, reduction(ctx.node)?)?])
}

pub(super) fn eval_scatter_nd(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (data, indices, updates) = operands(inputs)?;
    let pairs = nd_pairs(data, indices, updates)?;
    Ok(vec![scatter(data, updates, &pairs, reduction(ctx.node)?)?])
}

/// All three scatters return a tensor of the data's type and shape.
pub(super) fn infer_scatter(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![typed(
        in_elem(ctx, 0),
        in_dims(ctx, 0).map(<[_]>::to_vec),
    )])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, shape, v.to_vec()).unwrap()
    }

    #[test]
    fn scatter_elements_follows_the_onnx_examples() {
        let data = f32s(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let idx = i64s(&[1, 2], &[1, 3]);
        let upd = f32s(&[1, 2], &[1.1, 2.1]);
        let node = Node::new("ScatterElements", "s", ["d", "i", "u"], ["y"])
            .with_attr("axis", AttrValue::Int(1));
        let out = eval_node(&node, 18, &[Some(&data), Some(&idx), Some(&upd)]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [1.0, 1.1, 3.0, 2.1, 5.0]);

        let dup = i64s(&[1, 2], &[1, 1]);
        let node = node.with_attr("reduction", AttrValue::String(b"add".to_vec()));
        let out = eval_node(&node, 18, &[Some(&data), Some(&dup), Some(&upd)]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [1.0, 5.2, 3.0, 4.0, 5.0]);

        let bad = i64s(&[1, 2], &[1, 5]);
        let e = eval_node(&node, 18, &[Some(&data), Some(&bad), Some(&upd)]).unwrap_err();
        assert!(e.to_string().contains("index 5 is out of range"), "{e}");

        let neg = i64s(&[1, 1], &[-1]);
        let one = f32s(&[1, 1], &[9.0]);
        let node =
            Node::new("Scatter", "s", ["d", "i", "u"], ["y"]).with_attr("axis", AttrValue::Int(1));
        let out = eval_node(&node, 10, &[Some(&data), Some(&neg), Some(&one)]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 9.0]);
    }

    #[test]
    fn scatter_nd_writes_slices_and_reduces() {
        // The spec's first example.
        let data = i64s(&[8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let idx = i64s(&[4, 1], &[4, 3, 1, 7]);
        let upd = i64s(&[4], &[9, 10, 11, 12]);
        let node = Node::new("ScatterND", "s", ["d", "i", "u"], ["y"]);
        let out = eval_node(&node, 18, &[Some(&data), Some(&idx), Some(&upd)]).unwrap();
        assert_eq!(out[0].to_vec::<i64>().unwrap(), [1, 11, 3, 10, 9, 6, 7, 12]);

        let node = node.with_attr("reduction", AttrValue::String(b"mul".to_vec()));
        let out = eval_node(&node, 18, &[Some(&data), Some(&idx), Some(&upd)]).unwrap();
        assert_eq!(
            out[0].to_vec::<i64>().unwrap(),
            [1, 22, 3, 40, 45, 6, 7, 96]
        );

        let rows = i64s(&[2, 2], &[1, 2, 3, 4]);
        let idx = i64s(&[1, 1], &[1]);
        let upd = i64s(&[1, 2], &[7, 8]);
        let node = Node::new("ScatterND", "s", ["d", "i", "u"], ["y"]);
        let out = eval_node(&node, 18, &[Some(&rows), Some(&idx), Some(&upd)]).unwrap();
        assert_eq!(out[0].to_vec::<i64>().unwrap(), [1, 2, 7, 8]);
        let e = eval_node(&node, 18, &[Some(&rows), Some(&idx), Some(&data)]).unwrap_err();
        assert!(
            e.to_string().contains("updates must have shape [1, 2]"),
            "{e}"
        );
    }
}
