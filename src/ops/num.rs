//! The one numeric layer of the kernels: the traits every kernel family computes with, and the
//! macros that dispatch over element types.
//!
//! - [`Arith`]: the types arithmetic runs in (`f32`, `f64`, the integers, and `i128` for exact
//!   integer reductions): constants, wrapping integer arithmetic, conversions to and from `f64`.
//! - [`Num`]: a numeric element type of a tensor and the [`Arith`] type it is computed in
//!   ([`Num::Work`]: itself, or `f32` for `float16` and `bfloat16`).
//! - [`Float`]: the floating-point element types (`f32`, `f64`, `f16`, `bf16`) and their
//!   conversions to and from `f32` and `f64`.
//! - [`Real`]: the floating-point types kernels compute in (`f32`, also for `float16` and
//!   `bfloat16`, and `f64`): operators, transcendental functions, and loading and storing tensors
//!   of any floating-point type through one widening and one rounding.
//! - [`dispatch_float`], [`dispatch_int`], [`dispatch_num`] and [`dispatch_real`] bind a type
//!   name to the Rust type of a runtime element type.
//!
//! Design note: every kernel computes in a "work" type, [`Num::Work`]: the element type itself
//! for `f32`, `f64` and the integers, and `f32` for `f16` and `bf16`, whose results are rounded
//! once when they are stored. Every method is a thin wrapper of the standard operation it names (the same
//! `std`/libm call, the same widening of `f16` and `bf16`), so kernels written on these traits
//! compute the same bits as kernels written on the concrete types. Nothing here is exported
//! from the crate.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub};

use bytemuck::Pod;
use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::DataType;

use super::util::unsupported_type;

/// Arithmetic on the types kernels compute in: `f32`, `f64`, the integer types, and `i128`.
///
/// For example, `Arith::add(127i8, 1)` is `-128` and `<u8 as Arith>::from_real(300.0)` is `255`.
pub(crate) trait Arith: Copy + PartialOrd + Default + Debug + Send + Sync + 'static {
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
    /// The count `n` as this type (through `f64` for floats; wrapping for integers).
    fn from_usize(n: usize) -> Self;
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
            #[inline] fn from_usize(n: usize) -> Self { n as $t }
        }
    )*};
}

impl_arith_int! {
    i8, i8::wrapping_abs;
    i16, i16::wrapping_abs;
    i32, i32::wrapping_abs;
    i64, i64::wrapping_abs;
    i128, i128::wrapping_abs;
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
            #[inline] fn from_usize(n: usize) -> Self { n as f64 as $t }
        }
    )*};
}

impl_arith_float!(f32, f64);

/// A numeric element type of a tensor and the type it is computed in.
///
/// For example, an `f16` widens to its exact `f32` value, and `f16::narrow(w)` rounds `w` once.
pub(crate) trait Num: Pod + Send + Sync + 'static {
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

/// Floating-point element types (`f32`, `f64`, `f16`, `bf16`) and their conversions.
///
/// For example, `<f16 as Float>::from_f64(0.5).to_f32()` is `0.5`.
pub(crate) trait Float: Num + PartialOrd {
    /// Widens to `f64`.
    fn to_f64(self) -> f64;
    /// Narrows from `f64` (round to nearest).
    fn from_f64(v: f64) -> Self;
    /// Widens to `f32`.
    fn to_f32(self) -> f32;
    /// Narrows from `f32` (round to nearest).
    fn from_f32(v: f32) -> Self;
}

impl Float for f32 {
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Float for f64 {
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
}

macro_rules! impl_float_half {
    ($($t:ty),*) => {$(
        impl Float for $t {
            #[inline]
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f32(super::halves::f32_round_to_odd(v))
            }
            #[inline]
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }
            #[inline]
            fn from_f32(v: f32) -> Self {
                <$t>::from_f32(v)
            }
        }
    )*};
}

impl_float_half!(f16, bf16);

/// The floating-point types kernels compute in: `f32` (also for `float16` and `bfloat16`
/// tensors, widened once on load and rounded once on store) and `f64`.
pub(crate) trait Real:
    Float
    + Arith
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + MulAssign
    + Sum
{
    /// The square root.
    fn sqrt(self) -> Self;
    /// `self` raised to `e`.
    fn powf(self, e: Self) -> Self;
    /// `e^self`.
    fn exp(self) -> Self;
    /// The hyperbolic tangent.
    fn tanh(self) -> Self;
    /// `ln(1 + self)`, accurate near zero.
    fn ln_1p(self) -> Self;
    /// `self * a + b` rounded once: one instruction in code compiled for FMA, a call to
    /// libm's slow software fallback elsewhere, so loops ask [`has_fma`] first.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Widens a `float16` value (exact).
    #[inline]
    fn from_f16(v: f16) -> Self {
        Self::from_f32(v.to_f32())
    }
    /// Widens a `bfloat16` value (exact).
    #[inline]
    fn from_bf16(v: bf16) -> Self {
        Self::from_f32(v.to_f32())
    }
    /// Rounds to `float16` (once, from this type).
    fn to_f16(self) -> f16;
    /// Rounds to `bfloat16` (once, from this type).
    fn to_bf16(self) -> bf16;

    /// The values of a floating-point tensor in this type, borrowed when no conversion is needed.
    fn load(t: &Tensor) -> Result<Loaded<'_, Self>>;

    /// A tensor of `dtype` (one this type computes for) holding `values`, rounded once.
    fn store(dtype: DataType, shape: &[usize], values: Vec<Self>) -> Result<Tensor>;
}

macro_rules! impl_real {
    ($($t:ty;)*) => {$(
        impl Real for $t {
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline]
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            #[inline]
            fn mul_add(self, a: Self, b: Self) -> Self {
                <$t>::mul_add(self, a, b)
            }
            #[inline]
            fn to_f16(self) -> f16 {
                super::halves::f16_from_f64(self as f64)
            }
            #[inline]
            fn to_bf16(self) -> bf16 {
                super::halves::bf16_from_f64(self as f64)
            }
            fn load(t: &Tensor) -> Result<Loaded<'_, Self>> {
                load_widened::<$t>(t)
            }
            fn store(dtype: DataType, shape: &[usize], values: Vec<Self>) -> Result<Tensor> {
                store_rounded::<$t>(dtype, shape, values)
            }
        }
    )*};
}

impl_real! {
    f32;
    f64;
}

/// Whether this CPU has fused multiply-adds, so that [`Real::mul_add`] in a loop compiled for
/// its SIMD level is one instruction (aarch64 always has them).
pub(crate) fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    return cfg!(target_arch = "aarch64");
}

/// The values of a `T` tensor, or of a `float16` or `bfloat16` one widened to `T`.
/// The values of a tensor in a compute type `T` ([`Real::load`]): borrowed when it is stored
/// as `T`; half values widened to `f32` into a pooled buffer of the arena (the next step reuses
/// its memory: a fresh buffer for each load faulted its pages in again, 18% of the float16
/// ResNet-50's time); other conversions in a buffer of their own.
pub(crate) enum Loaded<'a, T> {
    Borrowed(&'a [T]),
    Owned(Vec<T>),
    /// Only made when `T` is `f32`.
    Widened(crate::tensor::Scratch<f32>),
}

impl<T: Pod> std::ops::Deref for Loaded<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Loaded::Borrowed(v) => v,
            Loaded::Owned(v) => v,
            // `T` is `f32` here.
            Loaded::Widened(v) => bytemuck::cast_slice(&v[..]),
        }
    }
}

impl<T: Pod> Loaded<'_, T> {
    /// The values in a vector of their own.
    pub fn into_owned(self) -> Vec<T> {
        match self {
            Loaded::Owned(v) => v,
            other => other.to_vec(),
        }
    }
}

fn load_widened<T: Real>(t: &Tensor) -> Result<Loaded<'_, T>> {
    if t.dtype() == T::DTYPE {
        return Ok(Loaded::Borrowed(t.as_slice::<T>()?));
    }
    match t.dtype() {
        // Widened by slices (the same bits as `f16::to_f32` and `bf16::to_f32` one by one).
        DataType::Float16 if T::DTYPE == DataType::Float => Ok(Loaded::Widened(
            super::halves::widened_scratch(t.as_slice::<f16>()?)?,
        )),
        DataType::Bfloat16 if T::DTYPE == DataType::Float => Ok(Loaded::Widened(
            super::halves::widened_scratch(t.as_slice::<bf16>()?)?,
        )),
        DataType::Float16 => Ok(Loaded::Owned(
            t.as_slice::<f16>()?
                .iter()
                .map(|&v| T::from_f16(v))
                .collect(),
        )),
        DataType::Bfloat16 => Ok(Loaded::Owned(
            t.as_slice::<bf16>()?
                .iter()
                .map(|&v| T::from_bf16(v))
                .collect(),
        )),
        other => Err(unsupported_type("this kernel", other)),
    }
}

/// A `dtype` tensor of a copy of `values` rounded once to `float16` or `bfloat16` (or as they
/// are for `T`'s own type), for values in a kernel's scratch.
pub(crate) fn narrowed<T: Real>(dtype: DataType, shape: &[usize], values: &[T]) -> Result<Tensor> {
    use super::halves::Widen;
    if T::DTYPE != DataType::Float {
        return store_rounded(dtype, shape, values.to_vec());
    }
    // `T` is `f32`.
    let v: &[f32] = bytemuck::cast_slice(values);
    Ok(match dtype {
        DataType::Float16 => Tensor::uninit(dtype, shape)?.fill(|d| f16::narrow_slice(v, d))?,
        DataType::Bfloat16 => Tensor::uninit(dtype, shape)?.fill(|d| bf16::narrow_slice(v, d))?,
        _ => return store_rounded(dtype, shape, values.to_vec()),
    })
}

/// A `dtype` tensor of `values`: as they are for `T`'s own type, rounded once to `float16` or
/// `bfloat16`.
fn store_rounded<T: Real>(dtype: DataType, shape: &[usize], values: Vec<T>) -> Result<Tensor> {
    use super::halves::Widen;
    let t = match dtype {
        d if d == T::DTYPE => Tensor::from_vec(d, shape, values)?,
        // Rounded by slices (the same bits as `f16::from_f32` and `bf16::from_f32` one by one).
        DataType::Float16 if T::DTYPE == DataType::Float => {
            let v: Vec<f32> = values.into_iter().map(T::to_f32).collect();
            Tensor::uninit(dtype, shape)?.fill(|d| f16::narrow_slice(&v, d))?
        }
        DataType::Bfloat16 if T::DTYPE == DataType::Float => {
            let v: Vec<f32> = values.into_iter().map(T::to_f32).collect();
            Tensor::uninit(dtype, shape)?.fill(|d| bf16::narrow_slice(&v, d))?
        }
        DataType::Float16 => {
            let v: Vec<f16> = values.into_iter().map(T::to_f16).collect();
            Tensor::from_vec(dtype, shape, v)?
        }
        DataType::Bfloat16 => {
            let v: Vec<bf16> = values.into_iter().map(T::to_bf16).collect();
            Tensor::from_vec(dtype, shape, v)?
        }
        other => return Err(unsupported_type("this kernel", other)),
    };
    Ok(t)
}

/// Runs `$body` with `$T` bound to the Rust type of a floating-point `$dtype`
/// (float, double, float16, bfloat16); evaluates `$other` for any other type.
///
/// For example, `dispatch_float!(dtype, T => std::mem::size_of::<T>(), _ => 0)` is the element
/// size of a float type and 0 otherwise.
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::DataType::Float => {
                type $T = f32;
                $body
            }
            $crate::DataType::Double => {
                type $T = f64;
                $body
            }
            $crate::DataType::Float16 => {
                type $T = ::half::f16;
                $body
            }
            $crate::DataType::Bfloat16 => {
                type $T = ::half::bf16;
                $body
            }
            _ => $other,
        }
    };
}
pub(crate) use dispatch_float;

/// Runs `$body` with `$T` bound to the Rust type of an integer `$dtype` (int8 to uint64);
/// evaluates `$other` for any other type.
///
/// For example, `dispatch_int!(dtype, T => Some(T::MAX as i128), _ => None)` is an integer
/// type's largest value.
macro_rules! dispatch_int {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::DataType::Int8 => {
                type $T = i8;
                $body
            }
            $crate::DataType::Int16 => {
                type $T = i16;
                $body
            }
            $crate::DataType::Int32 => {
                type $T = i32;
                $body
            }
            $crate::DataType::Int64 => {
                type $T = i64;
                $body
            }
            $crate::DataType::Uint8 => {
                type $T = u8;
                $body
            }
            $crate::DataType::Uint16 => {
                type $T = u16;
                $body
            }
            $crate::DataType::Uint32 => {
                type $T = u32;
                $body
            }
            $crate::DataType::Uint64 => {
                type $T = u64;
                $body
            }
            _ => $other,
        }
    };
}
pub(crate) use dispatch_int;

/// Runs `$body` with `$T` bound to the Rust type of any numeric `$dtype` (the float types and
/// int8 to uint64); evaluates `$other` for any other type.
///
/// For example, `dispatch_num!(t.dtype(), T => t.as_slice::<T>().map(|v| v.len()), _ => Ok(0))`
/// counts the elements of any numeric tensor.
macro_rules! dispatch_num {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::ops::num::dispatch_float!($dtype, $T => $body,
            _ => $crate::ops::num::dispatch_int!($dtype, $T => $body, _ => $other))
    };
}
pub(crate) use dispatch_num;

/// Runs `$body` with `$R` bound to the [`Real`] type a floating-point `$dtype` computes in
/// (`f32` for float, float16 and bfloat16; `f64` for double); evaluates `$other` otherwise.
macro_rules! dispatch_real {
    ($dtype:expr, $R:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::DataType::Float | $crate::DataType::Float16 | $crate::DataType::Bfloat16 => {
                type $R = f32;
                $body
            }
            $crate::DataType::Double => {
                type $R = f64;
                $body
            }
            _ => $other,
        }
    };
}
pub(crate) use dispatch_real;

/// Runs `$body` with `$W` bound to an unsigned integer as wide as one element of `$dtype`
/// (`u8`, `u16`, `u32` or `u64`), for kernels that only move elements; evaluates `$other` for
/// strings and the types not stored in whole bytes of those widths.
macro_rules! dispatch_width {
    ($dtype:expr, $W:ident => $body:expr, _ => $other:expr) => {
        match ($dtype, $dtype.byte_size()) {
            ($crate::DataType::String, _) => $other,
            (_, Some(1)) => {
                type $W = u8;
                $body
            }
            (_, Some(2)) => {
                type $W = u16;
                $body
            }
            (_, Some(4)) => {
                type $W = u32;
                $body
            }
            (_, Some(8)) => {
                type $W = u64;
                $body
            }
            _ => $other,
        }
    };
}
pub(crate) use dispatch_width;

/// The elements of a numeric or boolean tensor as real numbers.
pub(crate) fn real_values(t: &Tensor) -> Result<Vec<f64>> {
    if t.dtype() == DataType::Bool {
        return Ok(t.as_slice::<u8>()?.iter().map(|&v| f64::from(v)).collect());
    }
    dispatch_num!(t.dtype(), T => {
        Ok(t.as_slice::<T>()?.iter().map(|&v| v.widen().to_real()).collect())
    }, _ => Err(Error::Eval(format!("expected a numeric tensor, found {}", t.dtype()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_arithmetic_wraps_and_converts_with_saturation() {
        assert_eq!(Arith::add(127i8, 1), -128);
        assert_eq!(Arith::abs(i8::MIN), i8::MIN);
        assert_eq!(Arith::div(i32::MIN, -1), i32::MIN);
        assert_eq!(<u8 as Arith>::from_real(300.0), 255);
        assert_eq!(<i32 as Arith>::from_real(f64::NAN), 0);
    }

    #[test]
    fn halves_compute_in_f32_and_round_once() {
        let x = f16::from_f32(1.0);
        let y = f16::narrow(Arith::add(x.widen(), f16::from_f32(0.0004).widen()));
        assert_eq!(y, f16::from_f32(1.0));
        assert_eq!(bf16::narrow(3.0), bf16::from_f32(3.0));
    }
}
