//! What the math kernels share: NaN-propagating extremes, loading and storing tensors in their
//! work type ([`Num::Work`], from `ops/num.rs`), conversions to `f64`, splitting a shape around
//! an axis, and the shape functions of elementwise operators.
//!
//! Design note: integer arithmetic wraps, as two's complement hardware (and onnxruntime) does;
//! the few operations that could trap (division and remainder by zero) are checked by their
//! kernels before any arithmetic runs.

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::ir::broadcast_dim;
use crate::ir::{Dim, Shape, TensorType};
use crate::ops::num::{Arith, Num};
use crate::ops::util::{broadcast_binary, tensor, tensor_from_iter, unsupported_type};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;
use crate::DataType;

/// The larger of two values; a NaN on either side wins, as in numpy and onnxruntime.
pub(super) fn max_nan<A: Arith>(a: A, b: A) -> A {
    if a.is_nan() || b < a {
        a
    } else {
        b
    }
}

/// The smaller of two values; a NaN on either side wins.
pub(super) fn min_nan<A: Arith>(a: A, b: A) -> A {
    if a.is_nan() || b > a {
        a
    } else {
        b
    }
}

/// The elements of a numeric tensor in their work type.
pub(super) fn work_values<T: Num>(t: &Tensor) -> Result<Vec<T::Work>> {
    Ok(t.as_slice::<T>()?.iter().map(|&v| v.widen()).collect())
}

/// A tensor of `T` from work values, each rounded once.
pub(super) fn from_work<T: Num>(shape: &[usize], values: Vec<T::Work>) -> Result<Tensor> {
    tensor(T::DTYPE, shape, values.into_iter().map(T::narrow).collect())
}

/// Applies `f` to every element of a tensor of `T`, in the work type.
pub(super) fn map_num<T: Num>(x: &Tensor, f: impl Fn(T::Work) -> T::Work) -> Result<Tensor> {
    let v = x.as_slice::<T>()?.iter().map(|&e| T::narrow(f(e.widen())));
    tensor_from_iter(T::DTYPE, x.shape(), v)
}

/// Applies `f` to every pair of elements of two broadcast tensors of `T` (in the work type),
/// producing a tensor of `out` whose elements are `O`.
pub(super) fn zip_num<T: Num, O: Pod>(
    a: &Tensor,
    b: &Tensor,
    out: DataType,
    mut f: impl FnMut(T::Work, T::Work) -> O,
) -> Result<Tensor> {
    let (values, shape) = broadcast_binary(
        a.as_slice::<T>()?,
        a.shape(),
        b.as_slice::<T>()?,
        b.shape(),
        |x: T, y: T| f(x.widen(), y.widen()),
    )?;
    tensor(out, &shape, values)
}

/// Checks that every input of an operator has the type of the first; returns that type.
pub(super) fn same_types(ctx: &EvalCtx<'_>, inputs: &[&Tensor]) -> Result<DataType> {
    let first = inputs
        .first()
        .ok_or_else(|| ctx.error("needs at least one input"))?
        .dtype();
    match inputs.iter().find(|t| t.dtype() != first) {
        Some(t) => Err(ctx.error(format!(
            "inputs must have one element type, found {first} and {}",
            t.dtype()
        ))),
        None => Ok(first),
    }
}

/// An error for an element type the node's operator does not take.
pub(super) fn bad_type(ctx: &EvalCtx<'_>, dtype: DataType) -> Error {
    unsupported_type(&ctx.node.op_type, dtype)
}

/// A shape split around `axis`: the number of rows before it, its size, and the number of elements
/// after it. Element `(o, i, n)` is at `(o * size + i) * inner + n`.
pub(super) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let size = shape.get(axis).copied().unwrap_or(1);
    let inner = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    (outer, size, inner)
}

/// The shape function of operators whose output has the type and shape of input 0.
pub(super) fn infer_like_input(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![ctx.input(0).cloned().unwrap_or_default()])
}

/// What is known of the multidirectional broadcast of the inputs at `indices`, with element type
/// `elem`: the rank and dims when every input's rank is known.
pub(super) fn broadcast_type(
    ctx: &InferCtx<'_>,
    indices: impl IntoIterator<Item = usize>,
    elem: Option<DataType>,
) -> TensorType {
    let mut dims: Option<Vec<Dim>> = Some(Vec::new());
    for i in indices {
        let input = ctx.input(i).and_then(|t| t.shape.as_ref());
        dims = match (dims, input) {
            (Some(acc), Some(s)) => Some(broadcast_dims(&acc, &s.dims)),
            _ => None,
        };
    }
    TensorType {
        elem,
        shape: dims.map(Shape::new),
    }
}

/// The right-aligned broadcast of two lists of dims.
fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Vec<Dim> {
    let rank = a.len().max(b.len());
    let one = Dim::Known(1);
    let at = |d: &[Dim], j: usize| {
        let offset = rank - d.len();
        if j < offset {
            one.clone()
        } else {
            d[j - offset].clone()
        }
    };
    (0..rank)
        .map(|j| broadcast_dim(&at(a, j), &at(b, j)))
        .collect()
}

/// The shape function of elementwise operators that broadcast all their inputs and keep the
/// element type of input 0.
pub(super) fn infer_broadcast(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    Ok(vec![broadcast_type(ctx, 0..ctx.inputs.len(), elem)])
}

/// The shape function of comparisons and logical operators: broadcast inputs, `bool` output.
pub(super) fn infer_broadcast_bool(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![broadcast_type(
        ctx,
        0..ctx.inputs.len(),
        Some(DataType::Bool),
    )])
}

/// The shape function of unary predicates (`IsNaN`, `IsInf`): input 0's shape, `bool` output.
pub(super) fn infer_like_input_bool(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let shape = ctx.input(0).and_then(|t| t.shape.clone());
    Ok(vec![TensorType {
        elem: Some(DataType::Bool),
        shape,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_extremes_propagate_nan() {
        assert!(max_nan(1.0f32, f32::NAN).is_nan());
        assert!(min_nan(f32::NAN, 1.0f32).is_nan());
        assert_eq!(max_nan(1, 3), 3);
    }

    #[test]
    fn axes_split_shapes() {
        assert_eq!(split_at_axis(&[2, 3, 4], 1), (2, 3, 4));
        assert_eq!(split_at_axis(&[5], 0), (1, 5, 1));
    }

    #[test]
    fn dims_broadcast_symbolically() {
        let n = Dim::Symbolic("n".into());
        let out = broadcast_dims(&[n.clone(), Dim::Known(1)], &[Dim::Known(3)]);
        assert_eq!(out, vec![n, Dim::Known(3)]);
    }
}
