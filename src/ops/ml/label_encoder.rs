//! `LabelEncoder` (`ai.onnx.ml`, opsets 1, 2 and 4): maps every element of the input through a
//! table of keys and values, with a default for keys not in the table.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx_aionnxml_LabelEncoder.html>.
//!
//! - Opset 1: `classes_strings` is the table; a string input gives its position (int64,
//!   `default_int64` when absent), an int64 input gives the string at that position
//!   (`default_string` when out of range).
//! - Opset 2: `keys_{strings,int64s,floats}` and `values_{strings,int64s,floats}`, one of each;
//!   the default is `default_string` (`"_Unused"`), `default_int64` (-1) or `default_float`
//!   (-0.0), by the values' type.
//! - Opset 4: `keys_tensor`, `values_tensor` and `default_tensor` may replace them (any
//!   element type; the default tensor holds one element).
//!
//! Float keys match by value: every NaN matches a NaN key, and `-0.0` matches `0.0`. A key listed
//! twice maps to its first value.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ir::stored_to_tensor;
use crate::ir::Node;
use crate::tensor::{try_with_capacity, Tensor};
use crate::DataType;

use super::super::util::{required, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::{floats, input_dims, ints, strings, typed};
use crate::ir::TensorType;

/// A key, compared as the specification says.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Key {
    Bytes(Vec<u8>),
    Int(i64),
    /// An `f64` bit pattern, with every NaN and both zeros made one value.
    Float(u64),
}

fn float_key(v: f64) -> Key {
    let v = if v.is_nan() {
        f64::NAN
    } else if v == 0.0 {
        0.0
    } else {
        v
    };
    Key::Float(v.to_bits())
}

/// The keys of a tensor (the input, or `keys_tensor`), in order.
fn tensor_keys(t: &Tensor) -> Result<Vec<Key>> {
    let mut keys = try_with_capacity(t.len())?;
    match t.dtype() {
        DataType::String => keys.extend(t.as_strings()?.iter().cloned().map(Key::Bytes)),
        DataType::Float => keys.extend(t.as_slice::<f32>()?.iter().map(|&v| float_key(v.into()))),
        DataType::Double => keys.extend(t.as_slice::<f64>()?.iter().map(|&v| float_key(v))),
        _ => keys.extend(to_i64s(t)?.into_iter().map(Key::Int)),
    }
    Ok(keys)
}

/// A one-dimensional tensor from an attribute's values.
fn column<T: bytemuck::Pod>(dtype: DataType, v: &[T]) -> Result<Tensor> {
    Ok(Tensor::from_vec(dtype, &[v.len()], v.to_vec())?)
}

/// `{prefix}_strings`, `{prefix}_int64s`, `{prefix}_floats` or (opset 4) `{prefix}_tensor`,
/// exactly one of them, as a 1-D tensor.
fn column_attr(node: &Node, opset: i64, prefix: &str) -> Result<Tensor> {
    let tensor = if opset >= 4 {
        node.attr_tensor(&format!("{prefix}_tensor"))?
    } else {
        None
    };
    let s = strings(node, &format!("{prefix}_strings"))?;
    let i = ints(node, &format!("{prefix}_int64s"))?;
    let f = floats(node, &format!("{prefix}_floats"))?;
    let given = [
        !s.is_empty(),
        !i.is_empty(),
        !f.is_empty(),
        tensor.is_some(),
    ];
    if given.iter().filter(|&&g| g).count() != 1 {
        return Err(Error::Eval(format!(
            "exactly one of '{prefix}_strings', '{prefix}_int64s', '{prefix}_floats' and '{prefix}_tensor' must be given"
        )));
    }
    if let Some(t) = tensor {
        let t = stored_to_tensor(t)?;
        let n = t.len();
        Ok(t.into_shape(&[n])?)
    } else if !s.is_empty() {
        Ok(Tensor::from_strings(&[s.len()], s.to_vec())?)
    } else if !i.is_empty() {
        column(DataType::Int64, i)
    } else {
        column(DataType::Float, f)
    }
}

/// The table of opsets 2 and 4: keys, values (a 1-D tensor of the same length) and the default
/// (a one-element tensor of the values' type).
fn table(node: &Node, opset: i64) -> Result<(Vec<Key>, Tensor, Tensor)> {
    let keys = tensor_keys(&column_attr(node, opset, "keys")?)?;
    let values = column_attr(node, opset, "values")?;
    if values.len() != keys.len() {
        return Err(Error::Eval(format!(
            "{} keys and {} values",
            keys.len(),
            values.len()
        )));
    }
    let default = match (opset >= 4)
        .then(|| node.attr_tensor("default_tensor"))
        .transpose()?
    {
        Some(Some(t)) => {
            let t = stored_to_tensor(t)?;
            if t.len() != 1 || t.dtype() != values.dtype() {
                return Err(Error::Eval(format!(
                    "'default_tensor' must hold one {} element, found {} of {}",
                    values.dtype(),
                    t.len(),
                    t.dtype()
                )));
            }
            t.into_shape(&[1])?
        }
        _ => match values.dtype() {
            DataType::String => {
                let d = node.attr_string("default_string")?.unwrap_or("_Unused");
                Tensor::from_strings(&[1], vec![d.as_bytes().to_vec()])?
            }
            DataType::Float => column(DataType::Float, &[node.attr_float("default_float", -0.0)?])?,
            DataType::Double => column(DataType::Double, &[-0.0f64])?,
            DataType::Int64 => column(DataType::Int64, &[node.attr_int("default_int64", -1)?])?,
            DataType::Int32 => column(DataType::Int32, &[-1i32])?,
            DataType::Int16 => column(DataType::Int16, &[-1i16])?,
            other => Tensor::zeros(other, &[1])?,
        },
    };
    Ok((keys, values, default))
}

pub(in crate::ops) fn eval_label_encoder(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    if ctx.opset < 2 {
        return opset1(ctx.node, x);
    }
    let (keys, values, default) = table(ctx.node, ctx.opset)?;
    let mut position: HashMap<Key, usize> = HashMap::new();
    position
        .try_reserve(keys.len())
        .map_err(|_| Error::Eval(format!("out of memory for {} keys", keys.len())))?;
    for (i, k) in keys.into_iter().enumerate() {
        position.entry(k).or_insert(i);
    }
    // The values followed by the default: an element not found reads the last one.
    let k = values.len();
    let mut table = Tensor::zeros(values.dtype(), &[k + 1])?;
    for i in 0..k {
        table.copy_element_from(i, &values, i)?;
    }
    table.copy_element_from(k, &default, 0)?;
    let found = tensor_keys(x)?;
    let mut starts = try_with_capacity(found.len())?;
    starts.extend(
        found
            .iter()
            .map(|key| position.get(key).copied().unwrap_or(k)),
    );
    Ok(vec![table.take_blocks(x.shape(), &starts, 1)?])
}

/// Opset 1: `classes_strings` both ways.
fn opset1(node: &Node, x: &Tensor) -> Result<Vec<Tensor>> {
    let classes = strings(node, "classes_strings")?;
    match x.dtype() {
        DataType::String => {
            let default = node.attr_int("default_int64", -1)?;
            let mut position = HashMap::new();
            for (i, c) in classes.iter().enumerate() {
                position.entry(c.as_slice()).or_insert(i as i64);
            }
            let mut v = try_with_capacity(x.len())?;
            v.extend(
                x.as_strings()?
                    .iter()
                    .map(|s| position.get(s.as_slice()).copied().unwrap_or(default)),
            );
            Ok(vec![Tensor::from_vec(DataType::Int64, x.shape(), v)?])
        }
        DataType::Int64 => {
            let default = node.attr_string("default_string")?.unwrap_or("_Unused");
            let mut v = try_with_capacity(x.len())?;
            for &i in x.as_slice::<i64>()? {
                let s = usize::try_from(i)
                    .ok()
                    .and_then(|i| classes.get(i))
                    .map_or(default.as_bytes(), |c| c.as_slice());
                v.push(s.to_vec());
            }
            Ok(vec![Tensor::from_strings(x.shape(), v)?])
        }
        other => Err(super::super::util::unsupported_type("LabelEncoder", other)),
    }
}

pub(in crate::ops) fn infer_label_encoder(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let node = ctx.node;
    let elem = if ctx.opset < 2 {
        match ctx.input(0).and_then(|t| t.elem) {
            Some(DataType::String) => Some(DataType::Int64),
            Some(DataType::Int64) => Some(DataType::String),
            _ => None,
        }
    } else if let Some(t) = node
        .attr_tensor("values_tensor")?
        .filter(|_| ctx.opset >= 4)
    {
        Some(t.elem)
    } else if !strings(node, "values_strings")?.is_empty() {
        Some(DataType::String)
    } else if !ints(node, "values_int64s")?.is_empty() {
        Some(DataType::Int64)
    } else if !floats(node, "values_floats")?.is_empty() {
        Some(DataType::Float)
    } else {
        None
    };
    Ok(vec![typed(elem, input_dims(ctx, 0))])
}

#[cfg(test)]
mod tests {
    use crate::ir::tensor_to_stored;
    use crate::ir::AttrValue;
    use crate::{DataType, Tensor};

    use super::super::testing::*;

    #[test]
    fn opset1_strings_to_positions_and_back() {
        let n = node(
            "LabelEncoder",
            &["x"],
            &["y"],
            vec![
                ("classes_strings", strings(&["a", "b", "c"])),
                ("default_int64", AttrValue::Int(42)),
            ],
        );
        let y = run(&n, 1, &[&strs(&[3], &["c", "a", "z"])]).unwrap();
        assert_eq!(y[0], i64s(&[3], &[2, 0, 42]));
        let y = run(&n, 1, &[&i64s(&[2], &[1, 9])]).unwrap();
        assert_eq!(y[0], strs(&[2], &["b", "_Unused"]));
    }

    /// Attributes, input, expected output.
    type Case = (Vec<(&'static str, AttrValue)>, Tensor, Tensor);

    /// (keys and values attributes, input, expected output) at opset 2.
    #[test]
    fn opset2_tables() {
        let cases: Vec<Case> = vec![
            (
                vec![
                    ("keys_strings", strings(&["x", "y"])),
                    ("values_int64s", AttrValue::Ints(vec![7, 8])),
                ],
                strs(&[2, 2], &["y", "x", "q", "y"]),
                i64s(&[2, 2], &[8, 7, -1, 8]),
            ),
            (
                vec![
                    ("keys_int64s", AttrValue::Ints(vec![1, 2])),
                    ("values_strings", strings(&["one", "two"])),
                    ("default_string", string("many")),
                ],
                i64s(&[3], &[2, 5, 1]),
                strs(&[3], &["two", "many", "one"]),
            ),
            (
                vec![
                    ("keys_floats", AttrValue::Floats(vec![f32::NAN, 0.0, 1.5])),
                    ("values_floats", AttrValue::Floats(vec![10.0, 20.0, 30.0])),
                ],
                f32s(&[4], &[-f32::NAN, -0.0, 1.5, 2.0]),
                f32s(&[4], &[10.0, 20.0, 30.0, -0.0]),
            ),
        ];
        for (attrs, x, expected) in cases {
            let n = node("LabelEncoder", &["x"], &["y"], attrs);
            assert_eq!(run(&n, 2, &[&x]).unwrap()[0], expected);
        }
    }

    #[test]
    fn opset4_tensor_keys_values_and_default() {
        let keys = Tensor::from_vec(DataType::Int32, &[2], vec![3i32, 4]).unwrap();
        let values = Tensor::from_vec(DataType::Double, &[2], vec![0.5f64, 1.5]).unwrap();
        let default = Tensor::from_vec(DataType::Double, &[], vec![9.0f64]).unwrap();
        let attr = |name: &str, t: &Tensor| {
            AttrValue::Tensor(Box::new(tensor_to_stored(name, t).unwrap()))
        };
        let n = node(
            "LabelEncoder",
            &["x"],
            &["y"],
            vec![
                ("keys_tensor", attr("k", &keys)),
                ("values_tensor", attr("v", &values)),
                ("default_tensor", attr("d", &default)),
            ],
        );
        let x = Tensor::from_vec(DataType::Int32, &[3], vec![4i32, 3, 0]).unwrap();
        let y = run(&n, 4, &[&x]).unwrap();
        let expected = Tensor::from_vec(DataType::Double, &[3], vec![1.5f64, 0.5, 9.0]).unwrap();
        assert_eq!(y[0], expected);
        // Opset 2 does not read the tensor attributes.
        let err = run(&n, 2, &[&x]).unwrap_err().to_string();
        assert!(err.contains("exactly one of 'keys_strings'"), "{err}");
    }

    #[test]
    fn keys_and_values_of_different_lengths() {
        let n = node(
            "LabelEncoder",
            &["x"],
            &["y"],
            vec![
                ("keys_int64s", AttrValue::Ints(vec![1, 2])),
                ("values_int64s", AttrValue::Ints(vec![1])),
            ],
        );
        let err = run(&n, 2, &[&i64s(&[1], &[1])]).unwrap_err().to_string();
        assert!(err.contains("2 keys and 1 values"), "{err}");
    }
}
