//! What the math kernels share: the arithmetic they compute in ([`Arith`]), the element types they
//! read and write ([`Num`]), dispatch over every numeric type ([`dispatch_num`]), conversions to
//! `f64`, splitting a shape around an axis, and the shape functions of elementwise operators.
//!
//! Design note: every kernel computes in a "work" type, [`Num::Work`]: the element type itself for
//! `f32`, `f64` and the integers, and `f32` for `f16` and `bf16`, whose results are rounded once
//! when they are stored. Integer arithmetic wraps, as two's complement hardware (and onnxruntime)
//! does; the few operations that could trap (division and remainder by zero) are checked by their
//! kernels before any arithmetic runs.

use bytemuck::Pod;
use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::ir::broadcast_dim;
use crate::ir::{Dim, Shape, TensorType};
use crate::ops::util::{broadcast_binary, tensor, tensor_from_iter, unsupported_type};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;
use crate::DataType;

/// Arithmetic on the types kernels compute in: `f32`, `f64` and the integer types.
pub(super) trait Arith: Copy + PartialOrd + Send + Sync + 'static {
    /// The additive identity.
    const ZERO: Self;
    /// The multiplicative identity.
    const ONE: Self;
    /// The smallest value (`-inf` for floats): the identity of a maximum.
    const LOWEST: Self;
    /// The largest value (`+inf` for floats): the identity of a minimum.
    const HIGHEST: Self;
    /// True for `f32` and `f64`.
    const IS_FLOAT: bool;
    /// `self + o`, wrapping for integers.
    fn add(self, o: Self) -> Self;
    /// `self - o`, wrapping for integers.
    fn sub(self, o: Self) -> Self;
    /// `self * o`, wrapping for integers.
    fn mul(self, o: Self) -> Self;
    /// `self / o`, truncating for integers; the caller rules out an integer zero divisor.
    fn div(self, o: Self) -> Self;
    /// The remainder with the dividend's sign (C `fmod`); the caller rules out an integer zero
    /// divisor.
    fn rem(self, o: Self) -> Self;
    /// `|self|`, wrapping for the most negative integer.
    fn abs(self) -> Self;
    /// `-self`, wrapping for integers.
    fn neg(self) -> Self;
    /// True for a floating-point NaN.
    fn is_nan(self) -> bool;
    /// A zero with the sign of `self` (`+0.0` or `-0.0` for floats, 0 for integers).
    fn signed_zero(self) -> Self;
    /// The value as a real number (rounded for integers wider than 53 bits).
    fn to_real(self) -> f64;
    /// A real number as this type: rounded for floats, truncated toward zero and saturated for
    /// integers (NaN becomes 0).
    fn from_real(v: f64) -> Self;
}

macro_rules! impl_arith_int {
    ($($t:ty, $abs:expr;)*) => {$(
        impl Arith for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            const IS_FLOAT: bool = false;
            #[inline] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            // Kernels reject zero divisors first; 0 here only keeps these total.
            #[inline] fn div(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
            #[inline] fn rem(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_rem(o) } }
            #[inline] fn abs(self) -> Self { $abs(self) }
            #[inline] fn neg(self) -> Self { self.wrapping_neg() }
            #[inline] fn is_nan(self) -> bool { false }
            #[inline] fn signed_zero(self) -> Self { 0 }
            #[inline] fn to_real(self) -> f64 { self as f64 }
            #[inline] fn from_real(v: f64) -> Self { v as $t }
        }
    )*};
}

impl_arith_int! {
    i8, i8::wrapping_abs;
    i16, i16::wrapping_abs;
    i32, i32::wrapping_abs;
    i64, i64::wrapping_abs;
    u8, std::convert::identity;
    u16, std::convert::identity;
    u32, std::convert::identity;
    u64, std::convert::identity;
}

macro_rules! impl_arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            const IS_FLOAT: bool = true;
            #[inline] fn add(self, o: Self) -> Self { self + o }
            #[inline] fn sub(self, o: Self) -> Self { self - o }
            #[inline] fn mul(self, o: Self) -> Self { self * o }
            #[inline] fn div(self, o: Self) -> Self { self / o }
            #[inline] fn rem(self, o: Self) -> Self { self % o }
            #[inline] fn abs(self) -> Self { <$t>::abs(self) }
            #[inline] fn neg(self) -> Self { -self }
            #[inline] fn is_nan(self) -> bool { <$t>::is_nan(self) }
            #[inline] fn signed_zero(self) -> Self { <$t>::copysign(0.0, self) }
            #[inline] fn to_real(self) -> f64 { self as f64 }
            #[inline] fn from_real(v: f64) -> Self { v as $t }
        }
    )*};
}

impl_arith_float!(f32, f64);

/// A numeric element type of a tensor and the type it is computed in.
pub(super) trait Num: Pod + Send + Sync + 'static {
    /// The element type.
    const DTYPE: DataType;
    /// The type arithmetic runs in.
    type Work: Arith;
    /// The value in the work type (exact).
    fn widen(self) -> Self::Work;
    /// A work value stored as this type (rounded once for `f16` and `bf16`).
    fn narrow(w: Self::Work) -> Self;
}

macro_rules! impl_num_native {
    ($($t:ty => $d:ident),*) => {$(
        impl Num for $t {
            const DTYPE: DataType = DataType::$d;
            type Work = $t;
            #[inline]
            fn widen(self) -> $t { self }
            #[inline]
            fn narrow(w: $t) -> $t { w }
        }
    )*};
}

impl_num_native!(
    f32 => Float, f64 => Double, i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64
);

macro_rules! impl_num_half {
    ($($t:ty => $d:ident),*) => {$(
        impl Num for $t {
            const DTYPE: DataType = DataType::$d;
            type Work = f32;
            #[inline]
            fn widen(self) -> f32 { self.to_f32() }
            #[inline]
            fn narrow(w: f32) -> $t { <$t>::from_f32(w) }
        }
    )*};
}

impl_num_half!(f16 => Float16, bf16 => Bfloat16);

/// Runs `$body` with `$T` bound to the Rust type of any numeric `$dtype` (the float types and
/// int8 to uint64); evaluates `$other` for any other type.
macro_rules! dispatch_num {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::dispatch_float!($dtype, $T => $body, _ => $crate::dispatch_int!($dtype, $T => $body, _ => $other))
    };
}
pub(super) use dispatch_num;

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

/// The elements of a numeric or boolean tensor as real numbers.
pub(super) fn real_values(t: &Tensor) -> Result<Vec<f64>> {
    if t.dtype() == DataType::Bool {
        return Ok(t.as_slice::<u8>()?.iter().map(|&v| f64::from(v)).collect());
    }
    dispatch_num!(t.dtype(), T => {
        Ok(t.as_slice::<T>()?.iter().map(|&v| v.widen().to_real()).collect())
    }, _ => Err(Error::Eval(format!("expected a numeric tensor, found {}", t.dtype()))))
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
    fn integer_arithmetic_wraps_and_float_extremes_propagate() {
        assert_eq!(Arith::add(127i8, 1), -128);
        assert_eq!(Arith::abs(i8::MIN), i8::MIN);
        assert_eq!(Arith::div(i32::MIN, -1), i32::MIN);
        assert_eq!(<u8 as Arith>::from_real(300.0), 255);
        assert_eq!(<i32 as Arith>::from_real(f64::NAN), 0);
        assert!(max_nan(1.0f32, f32::NAN).is_nan());
        assert!(min_nan(f32::NAN, 1.0f32).is_nan());
        assert_eq!(max_nan(1, 3), 3);
    }

    #[test]
    fn halves_compute_in_f32_and_round_once() {
        let x = f16::from_f32(1.0);
        let y = f16::narrow(x.widen().add(f16::from_f32(0.0004).widen()));
        assert_eq!(y, f16::from_f32(1.0));
        assert_eq!(bf16::narrow(3.0), bf16::from_f32(3.0));
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
