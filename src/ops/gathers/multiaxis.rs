//! `multigather.GatherMultiaxis` as the interpreter runs it: the kernel crate's fast kernel on
//! the prepared spec, and the shape rule over symbolic dims.

use super::{prepared, GatherAttributes};
use crate::error::Result;
use crate::gather::{self, GatherSpec};
use crate::ir::{broadcast_dim, Dim, Shape, TensorType};
use crate::ops::util::required;
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;

/// The prepared attributes of a `GatherMultiaxis` node, as the spec for inputs of rank `rank`.
fn spec_of(attrs: &GatherAttributes, rank: usize) -> Result<GatherSpec> {
    Ok(prepared(attrs, GatherAttributes::multiaxis)?.spec(rank)?)
}

pub(super) fn eval(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (data, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let spec = spec_of(&*ctx.attrs()?, data.rank())?;
    Ok(vec![gather::gather_multiaxis(data, indices, &spec)?])
}

pub(super) fn infer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let Some(data) = ctx.input(0) else {
        return Ok(Vec::new());
    };
    let unknown_shape = || {
        Ok(vec![TensorType {
            elem: data.elem,
            shape: None,
        }])
    };
    let (Some(d), Some(i)) = (&data.shape, ctx.input(1).and_then(|t| t.shape.as_ref())) else {
        return unknown_shape();
    };
    let spec = spec_of(&*ctx.attrs()?, d.rank())?;
    if i.rank() != d.rank() {
        return unknown_shape();
    }
    let dims: Vec<Dim> = gather_multiaxis_dims(&d.dims, &i.dims, &spec.axes);
    Ok(vec![TensorType {
        elem: data.elem,
        shape: Some(Shape::new(dims)),
    }])
}

/// The output dims of `GatherMultiaxis` over possibly symbolic input and indices dims of equal
/// rank: the dims of `axes` come from the logical indices (the last indices dim divided by the
/// coordinate size `max(len(axes), 1)`), the others broadcast.
///
/// # Example
/// ```
/// use multigather::ops::gather_multiaxis_dims;
/// use multigather::ir::Dim;
/// let b = Dim::Symbolic("B".into());
/// let out = gather_multiaxis_dims(&[b.clone(), Dim::Known(5), Dim::Known(1)], &[Dim::Known(1), Dim::Known(1), Dim::Known(8)], &[1, 2]);
/// assert_eq!(out, vec![b, Dim::Known(1), Dim::Known(4)]);
/// ```
pub fn gather_multiaxis_dims(input: &[Dim], indices: &[Dim], axes: &[usize]) -> Vec<Dim> {
    let logical = logical_indices_dims(indices, axes.len());
    input
        .iter()
        .zip(&logical)
        .enumerate()
        .map(|(j, (x, l))| {
            if axes.contains(&j) {
                l.clone()
            } else {
                broadcast_dim(x, l)
            }
        })
        .collect()
}

/// The logical indices dims of `GatherMultiaxis` with `axis_count` axes: the last dim divided by
/// the coordinate size (unknown unless it is a known size).
pub fn logical_indices_dims(indices: &[Dim], axis_count: usize) -> Vec<Dim> {
    let c = axis_count.max(1) as i64;
    let mut logical = indices.to_vec();
    if let Some(last) = logical.last_mut() {
        *last = match &*last {
            Dim::Known(n) => Dim::Known(*n / c),
            d if c == 1 => d.clone(),
            _ => Dim::Unknown,
        };
    }
    logical
}
