//! `Cast` (opset 1+; `saturate` from 19, `round_mode` from 24) and `CastLike` (15+): conversion
//! between every numeric type, `bool`, the 8-bit and 4-bit float types, the packed 4-bit and
//! 2-bit integers, and `string`.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Cast.html>.
//!
//! Every source element is read exactly as an integer (`i128`) or a real (`f64`), then written to
//! the target:
//! - integer to integer keeps the low bits (two's complement wrap, `200i16 -> -56i8`);
//! - real to integer truncates toward zero, then wraps like an integer (out of range is undefined
//!   in the specification; this matches onnxruntime on x86 and the ONNX reference);
//! - to `bool`: nonzero (NaN included) is true;
//! - to a float type: rounded once to nearest even; small float types follow [`super::minifloat`];
//! - to `string`: integers in decimal, reals as numpy prints them (`1.5`, `1e-05`, `inf`, `nan`),
//!   `bool` as `True`/`False`; from `string`: decimal or scientific numbers, `INF`, `-INF` and
//!   `NaN` in any case, and integers for integer targets (a fraction is truncated).
//!
//! Complex and 6-bit float types are not supported (an `Unsupported` error).

use crate::error::{Error, Result};
use crate::ir::{AttrValue, TensorType};
use crate::ops::num::Float;
use crate::ops::util::{required, tensor};
use crate::ops::{Attributes, EvalCtx, InferCtx};
use crate::tensor::try_vec;
use crate::tensor::{packed, Tensor};
use crate::DataType;

use crate::ops::minifloat::{decode_e8m0, encode_e8m0, E8M0Rounding, MiniFloat};

mod fast;

/// The elements of a source tensor, read exactly.
enum Values {
    /// Integer and `bool` elements.
    Ints(Vec<i128>),
    /// Floating-point elements, with whether the source had single precision or less (for
    /// formatting as strings).
    Reals(Vec<f64>, bool),
    Strings(Vec<Vec<u8>>),
}

/// What a cast does at the edges of the target's range.
#[derive(Clone, Copy)]
struct Options {
    saturate: bool,
    rounding: E8M0Rounding,
}

fn unsupported(dtype: DataType) -> Error {
    Error::Unsupported(format!("Cast from or to {dtype}"))
}

/// Bits and signedness of the packed integer types.
fn packed_int(dtype: DataType) -> Option<(usize, bool)> {
    match dtype {
        DataType::Int4 => Some((4, true)),
        DataType::Uint4 => Some((4, false)),
        DataType::Int2 => Some((2, true)),
        DataType::Uint2 => Some((2, false)),
        _ => None,
    }
}

/// Reads every element of `t`.
fn read(t: &Tensor) -> Result<Values> {
    let dtype = t.dtype();
    if dtype == DataType::String {
        return Ok(Values::Strings(t.as_strings()?.to_vec()));
    }
    if dtype == DataType::Bool {
        return Ok(Values::Ints(
            t.as_slice::<u8>()?
                .iter()
                .map(|&b| i128::from(b != 0))
                .collect(),
        ));
    }
    if let Some((bits, signed)) = packed_int(dtype) {
        let bytes = t.as_bytes()?;
        let shift = 8 - bits as u32;
        let values = (0..t.len())
            .map(|i| {
                let v = packed::read(bytes, bits, i).unwrap_or(0);
                if signed {
                    i128::from(((v << shift) as i8) >> shift)
                } else {
                    i128::from(v)
                }
            })
            .collect();
        return Ok(Values::Ints(values));
    }
    if let Some(format) = MiniFloat::of(dtype) {
        let bytes = t.as_bytes()?;
        let bits = dtype.bits();
        let values = (0..t.len())
            .map(|i| format.decode(packed::read(bytes, bits, i).unwrap_or(0)))
            .collect();
        return Ok(Values::Reals(values, true));
    }
    if dtype == DataType::Float8E8M0 {
        let values = t.as_bytes()?.iter().map(|&c| decode_e8m0(c)).collect();
        return Ok(Values::Reals(values, true));
    }
    let single = dtype != DataType::Double;
    crate::ops::num::dispatch_float!(dtype, T => {
        Ok(Values::Reals(t.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect(), single))
    }, _ => crate::ops::num::dispatch_int!(dtype, T => {
        Ok(Values::Ints(t.as_slice::<T>()?.iter().map(|&v| v as i128).collect()))
    }, _ => Err(unsupported(dtype))))
}

/// A packed tensor of `to` from one code per element.
fn packed_tensor(to: DataType, shape: &[usize], codes: impl Iterator<Item = u8>) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let bytes_len = to.storage_bytes(n).ok_or_else(|| unsupported(to))?;
    let mut bytes = try_vec(bytes_len, 0u8)?;
    for (i, c) in codes.enumerate() {
        packed::write(&mut bytes, to.bits(), i, c)
            .ok_or_else(|| Error::Eval(format!("element {i} is outside a {to} buffer")))?;
    }
    Ok(Tensor::from_bytes(to, shape, &bytes)?)
}

/// Integers written to an integer or `bool` target, keeping their low bits.
fn write_ints(v: &[i128], to: DataType, shape: &[usize]) -> Result<Tensor> {
    if to == DataType::Bool {
        return tensor(to, shape, v.iter().map(|&x| u8::from(x != 0)).collect());
    }
    if let Some((bits, _)) = packed_int(to) {
        let mask = (1u8 << bits) - 1;
        return packed_tensor(to, shape, v.iter().map(|&x| x as u8 & mask));
    }
    crate::ops::num::dispatch_int!(to, T => {
        tensor(to, shape, v.iter().map(|&x| x as T).collect())
    }, _ => Err(unsupported(to)))
}

/// Reals written to a floating-point target, rounded once.
fn write_reals(v: &[f64], to: DataType, shape: &[usize], opts: Options) -> Result<Tensor> {
    if let Some(format) = MiniFloat::of(to) {
        return packed_tensor(
            to,
            shape,
            v.iter().map(|&x| format.encode(x, opts.saturate)),
        );
    }
    if to == DataType::Float8E8M0 {
        let codes = v
            .iter()
            .map(|&x| encode_e8m0(x as f32, opts.saturate, opts.rounding));
        return packed_tensor(to, shape, codes);
    }
    crate::ops::num::dispatch_float!(to, T => {
        tensor(to, shape, v.iter().map(|&x| <T as Float>::from_f64(x)).collect())
    }, _ => Err(unsupported(to)))
}

/// True for the targets written through [`write_ints`].
fn is_integer_target(to: DataType) -> bool {
    use DataType as D;
    matches!(
        to,
        D::Bool
            | D::Int8
            | D::Int16
            | D::Int32
            | D::Int64
            | D::Uint8
            | D::Uint16
            | D::Uint32
            | D::Uint64
            | D::Int4
            | D::Uint4
            | D::Int2
            | D::Uint2
    )
}

/// A real formatted as numpy prints it: positional between 1e-4 and 1e16, scientific with a
/// signed two-digit exponent outside, shortest digits that read back to the same value.
fn format_real(v: f64, single: bool) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = v.abs();
    if a == 0.0 || (1e-4..1e16).contains(&a) {
        let s = if single {
            format!("{}", v as f32)
        } else {
            format!("{v}")
        };
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        let s = if single {
            format!("{:e}", v as f32)
        } else {
            format!("{v:e}")
        };
        let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = exponent.parse().unwrap_or(0);
        let sign = if e < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", e.abs())
    }
}

fn write_strings(values: Values, shape: &[usize], from: DataType) -> Result<Tensor> {
    let strings = match values {
        Values::Strings(s) => s,
        Values::Ints(v) if from == DataType::Bool => v
            .iter()
            .map(|&x| if x != 0 { "True" } else { "False" }.into())
            .collect(),
        Values::Ints(v) => v.iter().map(|x| x.to_string().into_bytes()).collect(),
        Values::Reals(v, single) => v
            .iter()
            .map(|&x| format_real(x, single).into_bytes())
            .collect(),
    };
    Ok(Tensor::from_strings(shape, strings)?)
}

/// Parses strings as numbers: integers for integer targets (a real is truncated), reals
/// otherwise.
fn parse_strings(strings: &[Vec<u8>], to: DataType) -> Result<Values> {
    let text = |s: &[u8]| -> Result<String> {
        Ok(std::str::from_utf8(s)
            .map_err(|_| Error::Eval("a string to cast is not UTF-8".into()))?
            .trim()
            .to_owned())
    };
    let real = |s: &str| -> Result<f64> {
        s.parse::<f64>()
            .map_err(|_| Error::Eval(format!("cannot cast the string '{s}' to a number")))
    };
    if is_integer_target(to) {
        let v = strings
            .iter()
            .map(|s| {
                let s = text(s)?;
                match s.parse::<i128>() {
                    Ok(i) => Ok(i),
                    Err(_) => real(&s).map(|r| r as i128),
                }
            })
            .collect::<Result<_>>()?;
        Ok(Values::Ints(v))
    } else {
        let v = strings
            .iter()
            .map(|s| real(&text(s)?))
            .collect::<Result<_>>()?;
        Ok(Values::Reals(v, false))
    }
}

/// `x` converted to `to`: by the loops of [`fast`] for the pairs they take, else by
/// [`cast_reference`].
fn cast(x: &Tensor, to: DataType, opts: Options) -> Result<Tensor> {
    if x.dtype() == to {
        return Ok(x.clone());
    }
    match fast::cast(x, to)? {
        Some(y) => Ok(y),
        None => cast_reference(x, to, opts),
    }
}

/// `x` converted to `to` through exact values (`i128` or `f64`) element by element: every pair
/// (the oracle of [`fast`]).
fn cast_reference(x: &Tensor, to: DataType, opts: Options) -> Result<Tensor> {
    if x.dtype() == to {
        return Ok(x.clone());
    }
    let shape = x.shape();
    let mut values = read(x)?;
    if to == DataType::String {
        return write_strings(values, shape, x.dtype());
    }
    if let Values::Strings(s) = &values {
        values = parse_strings(s, to)?;
    }
    match values {
        Values::Strings(_) => Err(unsupported(to)),
        Values::Reals(v, _) if to == DataType::Bool => {
            tensor(to, shape, v.iter().map(|&x| u8::from(x != 0.0)).collect())
        }
        Values::Ints(v) if is_integer_target(to) => write_ints(&v, to, shape),
        Values::Reals(v, _) if is_integer_target(to) => {
            // `as` truncates toward zero, saturates and maps NaN to 0, all within `i128`.
            let ints: Vec<i128> = v.iter().map(|&x| x as i128).collect();
            write_ints(&ints, to, shape)
        }
        // `i128 as f32` rounds once; going through `f64` could round twice.
        Values::Ints(v) if to == DataType::Float => {
            tensor(to, shape, v.iter().map(|&x| x as f32).collect())
        }
        Values::Ints(v) => {
            let reals: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            write_reals(&reals, to, shape, opts)
        }
        Values::Reals(v, _) => write_reals(&v, to, shape, opts),
    }
}

/// The cast options of a node.
fn options(node: &crate::ir::Node) -> Result<Options> {
    let saturate = node.attr_int("saturate", 1)? != 0;
    let rounding = match node.attr_string("round_mode")?.unwrap_or("up") {
        "up" => E8M0Rounding::Up,
        "down" => E8M0Rounding::Down,
        "nearest" => E8M0Rounding::Nearest,
        other => {
            return Err(Error::Eval(format!(
                "round_mode must be up, down or nearest, found '{other}'"
            )))
        }
    };
    Ok(Options { saturate, rounding })
}

/// The attributes of a `Cast` node: the target type and the options.
#[derive(Clone, Copy)]
pub(super) struct CastAttrs {
    to: DataType,
    options: Options,
}

impl Attributes for CastAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<CastAttrs> {
        Ok(CastAttrs {
            to: target(node)?,
            options: options(node)?,
        })
    }
}

/// The `to` attribute: a type number, or (opset 1) a type name such as `FLOAT`.
fn target(node: &crate::ir::Node) -> Result<DataType> {
    let fail = |reason: String| Error::Eval(reason);
    match node.attr("to") {
        Some(AttrValue::Int(code)) => i32::try_from(*code)
            .ok()
            .and_then(DataType::from_onnx)
            .ok_or_else(|| fail(format!("'to' is not a known type: {code}"))),
        Some(AttrValue::String(name)) => {
            let name = String::from_utf8_lossy(name).to_lowercase();
            DataType::from_name(&name)
                .ok_or_else(|| fail(format!("'to' is not a known type: {name}")))
        }
        Some(other) => Err(fail(format!(
            "'to' must be an int, found {}",
            other.type_name()
        ))),
        None => Err(fail("the 'to' attribute is required".into())),
    }
}

/// `BitCast` (opset 26): the same bytes read as the element type `to`, which must be as wide as
/// the input's (strings excluded).
pub(super) fn eval_bitcast(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let to = bitcast_target(ctx.node, x.dtype())?;
    Ok(vec![Tensor::from_bytes(to, x.shape(), x.as_bytes()?)?])
}

/// The `to` type of a `BitCast` node from `from`, checked to have the same width.
fn bitcast_target(node: &crate::ir::Node, from: DataType) -> Result<DataType> {
    let code = node.attr_int("to", 0)?;
    let to = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| Error::Eval(format!("'to' {code} is not an element type")))?;
    if to == DataType::String || from == DataType::String || to.bits() != from.bits() {
        return Err(Error::Eval(format!(
            "BitCast from {from} to {to} needs two types of one width (no strings)"
        )));
    }
    Ok(to)
}

pub(super) fn infer_bitcast(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let Some(x) = ctx.input(0) else {
        return Ok(Vec::new());
    };
    let to = match x.elem {
        Some(from) => Some(bitcast_target(ctx.node, from)?),
        None => None,
    };
    Ok(vec![TensorType {
        elem: to,
        shape: x.shape.clone(),
    }])
}

pub(super) fn eval_cast(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let attrs = ctx.attrs::<CastAttrs>()?;
    Ok(vec![cast(x, attrs.to, attrs.options)?])
}

pub(super) fn eval_cast_like(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, like) = (required(inputs, 0)?, required(inputs, 1)?);
    Ok(vec![cast(x, like.dtype(), options(ctx.node)?)?])
}

pub(super) fn infer_cast(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![TensorType {
        elem: Some(ctx.attrs::<CastAttrs>()?.to),
        shape: ctx.input(0).and_then(|t| t.shape.clone()),
    }])
}

pub(super) fn infer_cast_like(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![TensorType {
        elem: ctx.input(1).and_then(|t| t.elem),
        shape: ctx.input(0).and_then(|t| t.shape.clone()),
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;
    use crate::ops::eval_node;

    fn cast_to(x: &Tensor, to: DataType) -> crate::Result<Tensor> {
        let node =
            Node::new("Cast", "c", ["x"], ["y"]).with_attr("to", AttrValue::Int(to.onnx() as i64));
        Ok(eval_node(&node, 21, &[Some(x)])?.remove(0))
    }

    #[test]
    fn integers_wrap_and_reals_truncate() {
        let x = Tensor::from_vec(DataType::Int16, &[2], vec![200i16, -1]).unwrap();
        assert_eq!(
            cast_to(&x, DataType::Int8).unwrap().to_vec::<i8>().unwrap(),
            [-56, -1]
        );
        assert_eq!(
            cast_to(&x, DataType::Uint16)
                .unwrap()
                .to_vec::<u16>()
                .unwrap(),
            [200, 65535]
        );
        let f = Tensor::from_vec(DataType::Float, &[4], vec![-9.7f32, 2.5, f32::NAN, 0.0]).unwrap();
        assert_eq!(
            cast_to(&f, DataType::Int32)
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            [-9, 2, 0, 0]
        );
        assert_eq!(
            cast_to(&f, DataType::Bool).unwrap().to_vec::<u8>().unwrap(),
            [1, 1, 1, 0]
        );
    }

    #[test]
    fn packed_integers_wrap_into_their_bits() {
        // The ONNX node test: -9..=14 as int4.
        let v: Vec<f32> = (-9..=14).map(|i| i as f32).collect();
        let x = Tensor::from_vec(DataType::Float, &[24], v).unwrap();
        let y = cast_to(&x, DataType::Int4).unwrap();
        let back = cast_to(&y, DataType::Int8).unwrap().to_vec::<i8>().unwrap();
        assert_eq!(&back[..4], [7, -8, -7, -6]);
        assert_eq!(&back[16..], [7, -8, -7, -6, -5, -4, -3, -2]);
    }

    #[test]
    fn float8_saturates_by_default() {
        let x = Tensor::from_vec(
            DataType::Float,
            &[3],
            vec![1e6f32, 0.478_925_47, f32::INFINITY],
        )
        .unwrap();
        let y = cast_to(&x, DataType::Float8E4M3FN).unwrap();
        let back = cast_to(&y, DataType::Float)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(back, [448.0, 0.46875, 448.0]);
        let node = Node::new("Cast", "c", ["x"], ["y"])
            .with_attr("to", AttrValue::Int(DataType::Float8E5M2.onnx() as i64))
            .with_attr("saturate", AttrValue::Int(0));
        let y = eval_node(&node, 21, &[Some(&x)]).unwrap().remove(0);
        let back = cast_to(&y, DataType::Float)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(back, [f32::INFINITY, 0.5, f32::INFINITY]);
    }

    #[test]
    fn strings_round_trip_numbers() {
        let x = Tensor::from_vec(
            DataType::Float,
            &[5],
            vec![1.0f32, 0.1, 1e-5, f32::NEG_INFINITY, 1.5e16],
        )
        .unwrap();
        let s = cast_to(&x, DataType::String).unwrap();
        let text: Vec<&[u8]> = s
            .as_strings()
            .unwrap()
            .iter()
            .map(|v| v.as_slice())
            .collect();
        assert_eq!(text, [&b"1.0"[..], b"0.1", b"1e-05", b"-inf", b"1.5e+16"]);
        let back = cast_to(&s, DataType::Float).unwrap();
        assert_eq!(back, x);
        let s = Tensor::from_strings(
            &[3],
            vec![b"+INF".to_vec(), b"NaN".to_vec(), b"100.5".to_vec()],
        )
        .unwrap();
        let f = cast_to(&s, DataType::Double)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert!(f[0] == f64::INFINITY && f[1].is_nan() && f[2] == 100.5);
        let bad = Tensor::from_strings(&[1], vec![b"hello".to_vec()]).unwrap();
        let err = cast_to(&bad, DataType::Float).unwrap_err();
        assert!(err.to_string().contains("'hello'"), "{err}");
    }

    #[test]
    fn cast_like_takes_the_second_input_type_and_inference_knows_it() {
        let x = Tensor::from_vec(DataType::Int32, &[2], vec![1i32, 2]).unwrap();
        let like = Tensor::from_vec(DataType::Double, &[0], Vec::<f64>::new()).unwrap();
        let node = Node::new("CastLike", "c", ["x", "l"], ["y"]);
        let y = eval_node(&node, 21, &[Some(&x), Some(&like)])
            .unwrap()
            .remove(0);
        assert_eq!(y.to_vec::<f64>().unwrap(), [1.0, 2.0]);
        let node = Node::new("Cast", "c", ["x"], ["y"]).with_attr("to", AttrValue::Int(10));
        let t = crate::ops::infer_node(&node, 21, &[None], &[None]);
        assert_eq!(t[0].elem, Some(DataType::Float16));
    }

    /// The numeric types of the fast pairs, and a few the reference alone takes.
    const TYPES: [DataType; 13] = [
        DataType::Float,
        DataType::Double,
        DataType::Float16,
        DataType::Bfloat16,
        DataType::Int8,
        DataType::Uint8,
        DataType::Int16,
        DataType::Uint16,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Bool,
    ];

    /// A tensor of `dtype` from random bits: every bit pattern of the type is possible, plus
    /// integral reals and ties for the float types.
    fn from_bits(dtype: DataType, words: &[u64], picks: &[u8]) -> Tensor {
        let n = words.len();
        let special = |i: usize| -> Option<f64> {
            let w = words[i];
            match picks[i] % 8 {
                0 => Some(
                    [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.5, -2.5][w as usize % 6],
                ),
                1 => Some((w as i64 >> (w % 64)) as f64 + 0.5),
                2 => Some((w as i32) as f64 * 2f64.powi((w >> 40) as i32 % 80)),
                _ => None,
            }
        };
        macro_rules! make {
            ($t:ty, $bits:expr, $from:expr) => {{
                let v: Vec<$t> = (0..n)
                    .map(|i| match special(i) {
                        Some(r) => $from(r),
                        None => $bits(words[i]),
                    })
                    .collect();
                Tensor::from_vec(dtype, &[n], v).unwrap()
            }};
        }
        match dtype {
            DataType::Float => make!(f32, |w: u64| f32::from_bits(w as u32), |r: f64| r as f32),
            DataType::Double => make!(f64, f64::from_bits, |r: f64| r),
            DataType::Float16 => make!(
                half::f16,
                |w: u64| half::f16::from_bits(w as u16),
                crate::ops::halves::f16_from_f64
            ),
            DataType::Bfloat16 => make!(
                half::bf16,
                |w: u64| half::bf16::from_bits(w as u16),
                crate::ops::halves::bf16_from_f64
            ),
            DataType::Bool => make!(u8, |w: u64| (w & 1) as u8, |r: f64| (r != 0.0) as u8),
            _ => crate::ops::num::dispatch_int!(dtype, T => {
                let v: Vec<T> = words.iter().map(|&w| w as T).collect();
                Tensor::from_vec(dtype, &[n], v).unwrap()
            }, _ => unreachable!()),
        }
    }

    proptest::proptest! {
        #[test]
        fn fast_pairs_give_the_reference_bits(
            words in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..1500),
            picks in proptest::collection::vec(proptest::prelude::any::<u8>(), 1500),
            from in 0usize..13,
            to in 0usize..13,
        ) {
            let x = from_bits(TYPES[from], &words, &picks[..words.len()]);
            let opts = Options { saturate: true, rounding: E8M0Rounding::Up };
            let want = cast_reference(&x, TYPES[to], opts).unwrap();
            let got = cast(&x, TYPES[to], opts).unwrap();
            proptest::prop_assert_eq!(got.dtype(), want.dtype());
            proptest::prop_assert_eq!(got.as_bytes().unwrap(), want.as_bytes().unwrap());
        }
    }

    #[test]
    fn every_half_widens_and_every_f32_boundary_narrows_as_the_reference() {
        let opts = Options {
            saturate: true,
            rounding: E8M0Rounding::Up,
        };
        for dtype in [DataType::Float16, DataType::Bfloat16] {
            let words: Vec<u64> = (0..=u64::from(u16::MAX)).collect();
            let picks = vec![7u8; words.len()];
            let x = from_bits(dtype, &words, &picks);
            for to in [DataType::Float, DataType::Double] {
                let want = cast_reference(&x, to, opts).unwrap();
                assert_eq!(
                    cast(&x, to, opts).unwrap().as_bytes().unwrap(),
                    want.as_bytes().unwrap()
                );
            }
        }
        let mut v = Vec::new();
        for hi in (0..=u32::from(u16::MAX)).step_by(3) {
            for lo in [
                0u32, 1, 7, 8, 0x0FFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0x8001, 0x8008, 0xFFFF,
            ] {
                v.push(f32::from_bits((hi << 16) | lo));
            }
        }
        let x = Tensor::from_vec(DataType::Float, &[v.len()], v).unwrap();
        for to in [
            DataType::Float16,
            DataType::Bfloat16,
            DataType::Int32,
            DataType::Int64,
            DataType::Uint8,
        ] {
            let want = cast_reference(&x, to, opts).unwrap();
            assert_eq!(
                cast(&x, to, opts).unwrap().as_bytes().unwrap(),
                want.as_bytes().unwrap(),
                "{to}"
            );
        }
    }
}
