//! Elementwise operators of two inputs with multidirectional (numpy) broadcasting: arithmetic
//! (`Add`, `Sub`, `Mul`, `Div`, `Mod`, `Pow`, `PRelu`), bitwise operators and shifts, comparisons
//! and logical operators.
//!
//! Integer arithmetic wraps. Integer `Div` truncates toward zero and `Mod` with `fmod = 0` takes
//! the divisor's sign (numpy's `mod`, also for floats), with `fmod = 1` the dividend's (C's
//! `fmod`); a zero integer divisor is an error, never a trap. `BitShift` takes signed types too
//! (opset 28): right shifts are arithmetic, and a shift that is negative or reaches the width
//! leaves only the sign fill. `Pow` takes an exponent of any numeric type and computes in
//! `f64`. Comparisons return `bool`; `Equal` (and the others) also compare `bool` and `string`
//! tensors. The opset 1 to 6 forms (the `broadcast`/`axis` attributes) are in `legacy.rs`.

use crate::error::Result;
use crate::ops::halves::{self, Widen};
use crate::ops::util::{broadcast_binary, broadcast_shapes, required, tensor};
use crate::ops::vector;
use crate::ops::EvalCtx;
use crate::tensor::Scratch;
use crate::tensor::Tensor;
use crate::DataType;
use half::{bf16, f16};

use super::work::{bad_type, same_types, zip_num};
use crate::ops::num::{dispatch_num, real_values, Arith, Num};

/// The two inputs of a binary operator, with their common element type.
fn operands<'t>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&'t Tensor>],
) -> Result<(&'t Tensor, &'t Tensor, DataType)> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    let dtype = same_types(ctx, &[a, b])?;
    Ok((a, b, dtype))
}

/// Fails when an integer divisor tensor holds a zero.
fn check_divisor<T: Num>(ctx: &EvalCtx<'_>, b: &Tensor) -> Result<()> {
    let zero = <T::Work as Arith>::ZERO;
    if !<T::Work as Arith>::IS_FLOAT && b.as_slice::<T>()?.iter().any(|v| v.widen() == zero) {
        return Err(ctx.error("integer division by zero"));
    }
    Ok(())
}

/// An arithmetic operation on every numeric type.
pub(super) trait BinArith {
    /// True when an integer zero divisor must be rejected.
    const DIVIDES: bool = false;
    fn apply<A: Arith>(a: A, b: A) -> A;
}

pub(super) struct Add;
pub(super) struct Sub;
pub(super) struct Mul;
pub(super) struct Div;

impl BinArith for Add {
    fn apply<A: Arith>(a: A, b: A) -> A {
        a.add(b)
    }
}

impl BinArith for Sub {
    fn apply<A: Arith>(a: A, b: A) -> A {
        a.sub(b)
    }
}

impl BinArith for Mul {
    fn apply<A: Arith>(a: A, b: A) -> A {
        a.mul(b)
    }
}

impl BinArith for Div {
    const DIVIDES: bool = true;
    fn apply<A: Arith>(a: A, b: A) -> A {
        a.div(b)
    }
}

/// The kernel of a [`BinArith`] operation.
pub(super) fn eval_arith<Op: BinArith>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b, dtype) = operands(ctx, inputs)?;
    match dtype {
        DataType::Float => return Ok(vec![zip_f32(a, b, |x, y| Op::apply(x, y))?]),
        DataType::Float16 => return Ok(vec![zip_half::<f16>(a, b, |x, y| Op::apply(x, y))?]),
        DataType::Bfloat16 => return Ok(vec![zip_half::<bf16>(a, b, |x, y| Op::apply(x, y))?]),
        _ => {}
    }
    dispatch_num!(dtype, T => {
        if Op::DIVIDES {
            check_divisor::<T>(ctx, b)?;
        }
        Ok(vec![zip_num::<T, T>(a, b, dtype, |x, y| T::narrow(Op::apply(x, y)))?])
    }, _ => Err(bad_type(ctx, dtype)))
}

/// The in-place form of [`eval_arith`] on `float` tensors: `a = a op b` when `b` broadcasts
/// into `a`'s shape.
pub(super) fn arith_in_place<Op: BinArith>(
    _: &EvalCtx<'_>,
    a: Tensor,
    rest: &[Option<&Tensor>],
) -> Result<std::result::Result<Vec<Tensor>, Tensor>> {
    let b = match rest {
        [Some(b)] => *b,
        _ => return Ok(Err(a)),
    };
    let fits = a.dtype() == DataType::Float
        && b.dtype() == DataType::Float
        && a.is_unique()
        && broadcast_shapes(&[a.shape(), b.shape()]).is_ok_and(|s| s == a.shape());
    if !fits {
        return Ok(Err(a));
    }
    let mut a = a;
    let shape = a.shape().to_vec();
    let y = b.as_slice::<f32>()?;
    let f = |x, y| Op::apply(x, y);
    if !vector::broadcast_zip_in_place((a.as_slice_mut::<f32>()?, &shape), (y, b.shape()), f) {
        // Left to the out-of-place kernel, which checks the shapes and says what is wrong.
        return Ok(Err(a));
    }
    Ok(Ok(vec![a]))
}

/// `f` applied to two broadcast `float` tensors with the vectorised loops of
/// [`crate::ops::vector`].
pub(crate) fn zip_f32(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(f32, f32) -> f32 + Sync + Send + Copy,
) -> Result<Tensor> {
    let shape = broadcast_shapes(&[a.shape(), b.shape()])?;
    let (x, y) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
    let out = Tensor::uninit(DataType::Float, &shape)?;
    Ok(out.fill(|dst| vector::broadcast_zip((x, a.shape()), (y, b.shape()), &shape, dst, f))?)
}

/// `f` applied to two broadcast `float16` or `bfloat16` tensors: both widened to `f32` by
/// slices (a block at a time when they have one shape), zipped by the vectorised loops, each
/// result rounded once (what the element loop of [`zip_num`] computes). On the float16 ResNet-50
/// (Intel Xeon family 6 model 167, one thread) its 16 residual additions took 8.0 ms widened
/// whole, 1.8 ms by blocks.
fn zip_half<T: Widen + Num>(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(f32, f32) -> f32 + Sync + Send + Copy,
) -> Result<Tensor> {
    let shape = broadcast_shapes(&[a.shape(), b.shape()])?;
    if a.shape() == b.shape() {
        let (x, y) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
        return Ok(Tensor::uninit(T::DTYPE, &shape)?.fill(|d| halves::zip_blocks(x, y, d, f))?);
    }
    let x = halves::widened_scratch(a.as_slice::<T>()?)?;
    let y = halves::widened_scratch(b.as_slice::<T>()?)?;
    let n = shape.iter().product();
    let mut wide = Scratch::new(n, 0.0f32)?;
    // SAFETY: only initialised values are written through the view.
    let z = vector::broadcast_zip(
        (&x, a.shape()),
        (&y, b.shape()),
        &shape,
        unsafe { vector::as_slots(&mut wide) },
        f,
    );
    Ok(Tensor::uninit(T::DTYPE, &shape)?.fill(|d| T::narrow_slice(z, d))?)
}

/// The remainder with the divisor's sign (Python's `%`, numpy's `mod`): a zero remainder takes
/// the divisor's sign too.
fn floor_mod<A: Arith>(a: A, b: A) -> A {
    let r = a.rem(b);
    if r == A::ZERO {
        b.signed_zero()
    } else if (r < A::ZERO) != (b < A::ZERO) {
        r.add(b)
    } else {
        r
    }
}

pub(super) fn eval_mod(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (a, b, dtype) = operands(ctx, inputs)?;
    let fmod = ctx.node.attr_int("fmod", 0)? != 0;
    dispatch_num!(dtype, T => {
        check_divisor::<T>(ctx, b)?;
        let f = if fmod { Arith::rem } else { floor_mod };
        Ok(vec![zip_num::<T, T>(a, b, dtype, |x, y| T::narrow(f(x, y)))?])
    }, _ => Err(bad_type(ctx, dtype)))
}

pub(super) fn eval_pow(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, y) = (required(inputs, 0)?, required(inputs, 1)?);
    let exponents = real_values(y)?;
    dispatch_num!(x.dtype(), T => {
        let (values, shape) = broadcast_binary(
            x.as_slice::<T>()?,
            x.shape(),
            &exponents,
            y.shape(),
            |b: T, e: f64| {
                let r = b.widen().to_real();
                // A square rounds once, as `powf` does: the same value, faster.
                let p = if e == 2.0 { r * r } else { r.powf(e) };
                T::narrow(Arith::from_real(p))
            },
        )?;
        Ok(vec![tensor(x.dtype(), &shape, values)?])
    }, _ => Err(bad_type(ctx, x.dtype())))
}

/// `x` for non-negative `x`, `slope * x` below zero.
fn prelu<A: Arith>(x: A, slope: A) -> A {
    if x < A::ZERO {
        x.mul(slope)
    } else {
        x
    }
}

pub(super) fn eval_prelu(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, slope, dtype) = operands(ctx, inputs)?;
    dispatch_num!(dtype, T => {
        Ok(vec![zip_num::<T, T>(x, slope, dtype, |v, s| T::narrow(prelu(v, s)))?])
    }, _ => Err(bad_type(ctx, dtype)))
}

/// Bit operations of the integer types.
pub(super) trait Bits: Copy {
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    /// `self << n` (bits past the top, sign bit included, are lost); 0 once `n` is negative or
    /// reaches the width.
    fn shl(self, n: Self) -> Self;
    /// `self >> n` (arithmetic for signed types); once `n` is negative or reaches the width, the
    /// sign fill alone: -1 for a negative `self`, else 0.
    fn shr(self, n: Self) -> Self;
}

macro_rules! impl_bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            fn and(self, o: Self) -> Self { self & o }
            fn or(self, o: Self) -> Self { self | o }
            fn xor(self, o: Self) -> Self { self ^ o }
            fn shl(self, n: Self) -> Self {
                u32::try_from(n).ok().and_then(|n| self.checked_shl(n)).unwrap_or(0)
            }
            fn shr(self, n: Self) -> Self {
                // The sign fill: all ones for a negative signed value, else 0.
                let fill = ((self as i128) >> 127) as $t;
                u32::try_from(n).ok().and_then(|n| self.checked_shr(n)).unwrap_or(fill)
            }
        }
    )*};
}

impl_bits!(i8, i16, i32, i64, u8, u16, u32, u64);

/// A bitwise operation on the integer types.
pub(super) trait BitOp {
    fn apply<B: Bits>(a: B, b: B) -> B;
}

pub(super) struct BitAnd;
pub(super) struct BitOr;
pub(super) struct BitXor;

impl BitOp for BitAnd {
    fn apply<B: Bits>(a: B, b: B) -> B {
        a.and(b)
    }
}

impl BitOp for BitOr {
    fn apply<B: Bits>(a: B, b: B) -> B {
        a.or(b)
    }
}

impl BitOp for BitXor {
    fn apply<B: Bits>(a: B, b: B) -> B {
        a.xor(b)
    }
}

/// The kernel of a [`BitOp`].
pub(super) fn eval_bitwise<Op: BitOp>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b, dtype) = operands(ctx, inputs)?;
    crate::ops::num::dispatch_int!(dtype, T => {
        Ok(vec![zip_num::<T, T>(a, b, dtype, Op::apply::<T>)?])
    }, _ => Err(bad_type(ctx, dtype)))
}

pub(super) fn eval_bit_shift(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (a, b, dtype) = operands(ctx, inputs)?;
    let left = match ctx.node.attr_string("direction")? {
        Some("LEFT") => true,
        Some("RIGHT") => false,
        Some(other) => {
            return Err(ctx.error(format!("direction must be LEFT or RIGHT, found '{other}'")))
        }
        None => return Err(ctx.error("the direction attribute is required")),
    };
    crate::ops::num::dispatch_int!(dtype, T => {
        let f = if left { Bits::shl } else { Bits::shr };
        Ok(vec![zip_num::<T, T>(a, b, dtype, f)?])
    }, _ => Err(bad_type(ctx, dtype)))
}

/// A comparison of two elements.
pub(super) trait Compare {
    fn test<T: PartialOrd>(a: T, b: T) -> bool;
}

pub(super) struct Equal;
pub(super) struct Less;
pub(super) struct LessOrEqual;
pub(super) struct Greater;
pub(super) struct GreaterOrEqual;

impl Compare for Equal {
    fn test<T: PartialOrd>(a: T, b: T) -> bool {
        a == b
    }
}

impl Compare for Less {
    fn test<T: PartialOrd>(a: T, b: T) -> bool {
        a < b
    }
}

impl Compare for LessOrEqual {
    fn test<T: PartialOrd>(a: T, b: T) -> bool {
        a <= b
    }
}

impl Compare for Greater {
    fn test<T: PartialOrd>(a: T, b: T) -> bool {
        a > b
    }
}

impl Compare for GreaterOrEqual {
    fn test<T: PartialOrd>(a: T, b: T) -> bool {
        a >= b
    }
}

/// The kernel of a [`Compare`]: numeric, `bool` and `string` inputs, `bool` output.
pub(super) fn eval_compare<Op: Compare>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b, dtype) = operands(ctx, inputs)?;
    let out = match dtype {
        DataType::Bool => zip_num::<u8, u8>(a, b, DataType::Bool, |x, y| u8::from(Op::test(x, y)))?,
        DataType::String => {
            let (sa, sb): (Vec<&[u8]>, Vec<&[u8]>) = (
                a.as_strings()?.iter().map(Vec::as_slice).collect(),
                b.as_strings()?.iter().map(Vec::as_slice).collect(),
            );
            let f = |x: &[u8], y: &[u8]| u8::from(Op::test(x, y));
            let (values, shape) = broadcast_binary(&sa, a.shape(), &sb, b.shape(), f)?;
            tensor(DataType::Bool, &shape, values)?
        }
        _ => dispatch_num!(dtype, T => {
            zip_num::<T, u8>(a, b, DataType::Bool, |x, y| u8::from(Op::test(x, y)))?
        }, _ => return Err(bad_type(ctx, dtype))),
    };
    Ok(vec![out])
}

/// A logical operation on booleans.
pub(super) trait Logic {
    fn apply(a: bool, b: bool) -> bool;
}

pub(super) struct And;
pub(super) struct Or;
pub(super) struct Xor;

impl Logic for And {
    fn apply(a: bool, b: bool) -> bool {
        a && b
    }
}

impl Logic for Or {
    fn apply(a: bool, b: bool) -> bool {
        a || b
    }
}

impl Logic for Xor {
    fn apply(a: bool, b: bool) -> bool {
        a != b
    }
}

/// The kernel of a [`Logic`] operation on `bool` tensors.
pub(super) fn eval_logic<Op: Logic>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b, dtype) = operands(ctx, inputs)?;
    if dtype != DataType::Bool {
        return Err(bad_type(ctx, dtype));
    }
    let f = |x: u8, y: u8| u8::from(Op::apply(x != 0, y != 0));
    Ok(vec![zip_num::<u8, u8>(a, b, DataType::Bool, f)?])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn run(node: Node, a: &Tensor, b: &Tensor) -> crate::Result<Tensor> {
        Ok(eval_node(&node, 22, &[Some(a), Some(b)])?.remove(0))
    }

    #[test]
    fn halves_zip_to_the_rounded_f32_result_of_one_shape_and_broadcast() {
        // One shape takes the block loop, a broadcast row the widened one: both must give
        // the f32 operation on the widened values, rounded once.
        let cast = |t: &Tensor, to: DataType| {
            let node =
                Node::new("Cast", "c", ["x"], ["y"]).with_attr("to", AttrValue::Int(to as i64));
            eval_node(&node, 21, &[Some(t)]).unwrap().remove(0)
        };
        let floats = |shape: &[usize], k: usize| {
            let n: usize = shape.iter().product();
            let v = (0..n)
                .map(|i| ((i * k % 997) as f32 - 498.0) * 0.037 * k as f32)
                .collect();
            Tensor::from_vec(DataType::Float, shape, v).unwrap()
        };
        let x = floats(&[3, 700], 31);
        for dtype in [DataType::Float16, DataType::Bfloat16] {
            let xh = cast(&x, dtype);
            for y in [floats(&[3, 700], 17), floats(&[1, 700], 13)] {
                let yh = cast(&y, dtype);
                for op in ["Add", "Sub", "Mul", "Div"] {
                    let got = run(node(op), &xh, &yh).unwrap();
                    let wide = (cast(&xh, DataType::Float), cast(&yh, DataType::Float));
                    let want = cast(&run(node(op), &wide.0, &wide.1).unwrap(), dtype);
                    assert_eq!(got.dtype(), dtype);
                    assert_eq!(
                        got.as_bytes().unwrap(),
                        want.as_bytes().unwrap(),
                        "{op} {dtype:?} {:?}",
                        y.shape()
                    );
                }
            }
        }
    }

    fn node(op: &str) -> Node {
        Node::new(op, "n", ["a", "b"], ["y"])
    }

    fn i32s(shape: &[usize], v: &[i32]) -> Tensor {
        Tensor::from_vec(DataType::Int32, shape, v.to_vec()).unwrap()
    }

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    #[test]
    fn add_broadcasts_both_ways() {
        let y = run(
            node("Add"),
            &i32s(&[2, 1], &[1, 2]),
            &i32s(&[3], &[10, 20, 30]),
        )
        .unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_vec::<i32>().unwrap(), [11, 21, 31, 12, 22, 32]);
        let err = run(node("Add"), &i32s(&[2], &[1, 2]), &i32s(&[3], &[1, 2, 3])).unwrap_err();
        assert!(err.to_string().contains("do not broadcast"), "{err}");
        let err = run(node("Add"), &i32s(&[1], &[1]), &f32s(&[1], &[1.0])).unwrap_err();
        assert!(err.to_string().contains("one element type"), "{err}");
    }

    #[test]
    fn integer_division_truncates_and_rejects_zero() {
        let y = run(node("Div"), &i32s(&[2], &[7, -7]), &i32s(&[1], &[2])).unwrap();
        assert_eq!(y.to_vec::<i32>().unwrap(), [3, -3]);
        let err = run(node("Div"), &i32s(&[1], &[1]), &i32s(&[1], &[0])).unwrap_err();
        assert!(err.to_string().contains("division by zero"), "{err}");
        let y = run(node("Div"), &f32s(&[1], &[1.0]), &f32s(&[1], &[0.0])).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [f32::INFINITY]);
    }

    #[test]
    fn mod_follows_the_divisor_or_the_dividend() {
        let a = i32s(&[4], &[-4, 7, 5, -5]);
        let b = i32s(&[4], &[3, -3, 2, -2]);
        let y = run(node("Mod"), &a, &b).unwrap();
        assert_eq!(y.to_vec::<i32>().unwrap(), [2, -2, 1, -1]);
        let fmod = node("Mod").with_attr("fmod", AttrValue::Int(1));
        let y = run(fmod.clone(), &a, &b).unwrap();
        assert_eq!(y.to_vec::<i32>().unwrap(), [-1, 1, 1, -1]);
        let y = run(fmod, &f32s(&[1], &[-4.5]), &f32s(&[1], &[2.0])).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [-0.5]);
        let a = f32s(&[3], &[-4.5, 0.0, 3.0]);
        let y = run(
            node("Mod"),
            &a,
            &f32s(&[3], &[2.0, -1.0, f32::NEG_INFINITY]),
        )
        .unwrap();
        let y = y.to_vec::<f32>().unwrap();
        assert_eq!(y[0], 1.5);
        assert!(y[1] == 0.0 && y[1].is_sign_negative());
        assert_eq!(y[2], f32::NEG_INFINITY);
        let err = run(node("Mod"), &a, &i32s(&[1], &[2])).unwrap_err();
        assert!(err.to_string().contains("one element type"), "{err}");
    }

    #[test]
    fn pow_takes_mixed_exponent_types() {
        let e = Tensor::from_vec(DataType::Int64, &[3], vec![1i64, 2, 3]).unwrap();
        let y = run(node("Pow"), &f32s(&[3], &[1.0, 2.0, 3.0]), &e).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 4.0, 27.0]);
        let y = run(node("Pow"), &i32s(&[1], &[2]), &f32s(&[1], &[10.0])).unwrap();
        assert_eq!(y.to_vec::<i32>().unwrap(), [1024]);
    }

    #[test]
    fn comparisons_and_logic_give_bool() {
        let y = run(node("Less"), &i32s(&[3], &[1, 2, 3]), &i32s(&[], &[2])).unwrap();
        assert_eq!(y.dtype(), DataType::Bool);
        assert_eq!(y.to_vec::<u8>().unwrap(), [1, 0, 0]);
        let s = |v: &[&str]| {
            Tensor::from_strings(
                &[v.len()],
                v.iter().map(|s| s.as_bytes().to_vec()).collect(),
            )
            .unwrap()
        };
        let y = run(node("Equal"), &s(&["a", "b"]), &s(&["a", "c"])).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), [1, 0]);
        let b = |v: &[u8]| Tensor::from_vec(DataType::Bool, &[v.len()], v.to_vec()).unwrap();
        let y = run(node("Xor"), &b(&[1, 1, 0]), &b(&[1, 0, 0])).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), [0, 1, 0]);
    }

    #[test]
    fn inference_broadcasts_symbolic_dims() {
        use crate::ir::{Dim, TensorType};
        let n = Dim::Symbolic("n".into());
        let a = TensorType::new(DataType::Float, vec![n.clone(), Dim::Known(1)]);
        let b = TensorType::new(DataType::Float, vec![Dim::Known(4)]);
        let inputs = [Some(a), Some(b)];
        let t = crate::ops::infer_node(&node("Less"), 13, &inputs, &[None, None]);
        assert_eq!(
            t[0],
            TensorType::new(DataType::Bool, vec![n.clone(), Dim::Known(4)])
        );
        let t = crate::ops::infer_node(&node("Mul"), 13, &inputs, &[None, None]);
        assert_eq!(
            t[0],
            TensorType::new(DataType::Float, vec![n, Dim::Known(4)])
        );
        let t = crate::ops::infer_node(&node("Add"), 13, &[None, None], &[None, None]);
        assert_eq!(t[0].shape, None);
    }

    #[test]
    fn shifts_and_bitwise_operators() {
        let a = Tensor::from_vec(DataType::Uint8, &[3], vec![16u8, 4, 1]).unwrap();
        let b = Tensor::from_vec(DataType::Uint8, &[3], vec![1u8, 2, 9]).unwrap();
        let right = node("BitShift").with_attr("direction", AttrValue::String(b"RIGHT".to_vec()));
        assert_eq!(
            run(right, &a, &b).unwrap().to_vec::<u8>().unwrap(),
            [8, 1, 0]
        );
        let left = node("BitShift").with_attr("direction", AttrValue::String(b"LEFT".to_vec()));
        assert_eq!(
            run(left, &a, &b).unwrap().to_vec::<u8>().unwrap(),
            [32, 16, 0]
        );
        let s = Tensor::from_vec(DataType::Int8, &[3], vec![-16i8, -16, 64]).unwrap();
        let n = Tensor::from_vec(DataType::Int8, &[3], vec![2i8, 8, -1]).unwrap();
        let right = node("BitShift").with_attr("direction", AttrValue::String(b"RIGHT".to_vec()));
        assert_eq!(
            run(right, &s, &n).unwrap().to_vec::<i8>().unwrap(),
            [-4, -1, 0]
        );
        let left = node("BitShift").with_attr("direction", AttrValue::String(b"LEFT".to_vec()));
        assert_eq!(
            run(left, &s, &n).unwrap().to_vec::<i8>().unwrap(),
            [-64, 0, 0]
        );
        let y = run(node("BitwiseXor"), &a, &b).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), [17, 6, 8]);
    }

    #[test]
    fn prelu_broadcasts_the_slope() {
        let x = f32s(&[2, 2], &[-1.0, 2.0, -3.0, 4.0]);
        let slope = f32s(&[2], &[0.5, 0.25]);
        let y = run(node("PRelu"), &x, &slope).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [-0.5, 2.0, -1.5, 4.0]);
    }
}
