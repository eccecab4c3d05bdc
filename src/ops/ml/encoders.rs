//! `OneHotEncoder` and `CategoryMapper` (`ai.onnx.ml`, opset 1): categories to indicator
//! vectors, and string categories to integers and back.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx_aionnxml_OneHotEncoder.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_CategoryMapper.html>.
//!
//! `OneHotEncoder` appends a dimension of `len(cats)` to the input's shape; numeric inputs are
//! truncated to int64 and looked up in `cats_int64s`, strings in `cats_strings`. An unknown
//! category gives a row of zeros, or an error when `zeros` is 0. A category listed twice
//! counts at its first position.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::tensor::{try_vec, try_with_capacity, Tensor};
use crate::DataType;

use super::super::util::{required, unsupported_type};
use super::super::{EvalCtx, InferCtx};
use super::{f32_tensor, input_dims, ints, strings, typed};
use crate::ir::{Dim, TensorType};

/// First position of every key.
fn positions<K: std::hash::Hash + Eq + Clone>(keys: &[K]) -> Result<HashMap<K, usize>> {
    let mut map = HashMap::new();
    map.try_reserve(keys.len())
        .map_err(|_| Error::Eval(format!("out of memory for {} categories", keys.len())))?;
    for (i, k) in keys.iter().enumerate() {
        map.entry(k.clone()).or_insert(i);
    }
    Ok(map)
}

pub(in crate::ops) fn eval_one_hot_encoder(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let zeros = ctx.node.attr_int("zeros", 1)? != 0;
    let (cat_ints, cat_strings) = (
        ints(ctx.node, "cats_int64s")?,
        strings(ctx.node, "cats_strings")?,
    );
    // The category of every element (`None`: unknown).
    let found: Vec<Option<usize>> = if x.dtype() == DataType::String {
        let map = positions(cat_strings)?;
        let mut v = try_with_capacity(x.len())?;
        v.extend(x.as_strings()?.iter().map(|s| map.get(s).copied()));
        v
    } else {
        let map = positions(cat_ints)?;
        let mut v = try_with_capacity(x.len())?;
        let keys: Vec<i64> = match x.dtype() {
            DataType::Int64 => x.to_vec::<i64>()?,
            DataType::Int32 => widen(x.as_slice::<i32>()?, |&e| i64::from(e))?,
            DataType::Float => widen(x.as_slice::<f32>()?, |&e| e as i64)?,
            DataType::Double => widen(x.as_slice::<f64>()?, |&e| e as i64)?,
            other => return Err(unsupported_type("OneHotEncoder", other)),
        };
        v.extend(keys.iter().map(|k| map.get(k).copied()));
        v
    };
    let k = if x.dtype() == DataType::String {
        cat_strings.len()
    } else {
        cat_ints.len()
    };
    if k == 0 {
        return Err(Error::Eval(format!(
            "no categories for a {} input ('cats_int64s' or 'cats_strings')",
            x.dtype()
        )));
    }
    let mut shape = x.shape().to_vec();
    shape.push(k);
    Tensor::check_size(DataType::Float, &shape)?;
    let mut y = try_vec(x.len() * k, 0.0f32)?;
    for (i, f) in found.iter().enumerate() {
        match f {
            Some(j) => y[i * k + j] = 1.0,
            None if !zeros => {
                return Err(Error::Eval(format!(
                    "element {i} is not a known category and 'zeros' is 0"
                )))
            }
            None => {}
        }
    }
    Ok(vec![f32_tensor(&shape, y)?])
}

fn widen<T>(v: &[T], f: impl Fn(&T) -> i64) -> Result<Vec<i64>> {
    let mut out = try_with_capacity(v.len())?;
    out.extend(v.iter().map(f));
    Ok(out)
}

pub(in crate::ops) fn eval_category_mapper(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let (cat_ints, cat_strings) = (
        ints(ctx.node, "cats_int64s")?,
        strings(ctx.node, "cats_strings")?,
    );
    if cat_ints.len() != cat_strings.len() {
        return Err(Error::Eval(format!(
            "'cats_int64s' has {} values and 'cats_strings' {}",
            cat_ints.len(),
            cat_strings.len()
        )));
    }
    let y = match x.dtype() {
        DataType::String => {
            let default = ctx.node.attr_int("default_int64", -1)?;
            let map = positions(cat_strings)?;
            let mut v = try_with_capacity(x.len())?;
            v.extend(
                x.as_strings()?
                    .iter()
                    .map(|s| map.get(s).map_or(default, |&i| cat_ints[i])),
            );
            Tensor::from_vec(DataType::Int64, x.shape(), v)?
        }
        DataType::Int64 => {
            let default = ctx
                .node
                .attr_string("default_string")?
                .unwrap_or("_Unused")
                .as_bytes();
            let map = positions(cat_ints)?;
            let mut v = try_with_capacity(x.len())?;
            for k in x.as_slice::<i64>()? {
                v.push(map.get(k).map_or(default, |&i| &cat_strings[i]).to_vec());
            }
            Tensor::from_strings(x.shape(), v)?
        }
        other => return Err(unsupported_type("CategoryMapper", other)),
    };
    Ok(vec![y])
}

pub(in crate::ops) fn infer_one_hot_encoder(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let (i, s) = (
        ints(ctx.node, "cats_int64s")?,
        strings(ctx.node, "cats_strings")?,
    );
    let k = match ctx.input(0).and_then(|t| t.elem) {
        Some(DataType::String) => Some(s.len()),
        Some(_) => Some(i.len()),
        None => None,
    };
    let dims = input_dims(ctx, 0).map(|mut d| {
        d.push(k.map_or(Dim::Unknown, |k| Dim::Known(k as i64)));
        d
    });
    Ok(vec![typed(Some(DataType::Float), dims)])
}

pub(in crate::ops) fn infer_category_mapper(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = match ctx.input(0).and_then(|t| t.elem) {
        Some(DataType::String) => Some(DataType::Int64),
        Some(DataType::Int64) => Some(DataType::String),
        _ => None,
    };
    Ok(vec![typed(elem, input_dims(ctx, 0))])
}

#[cfg(test)]
mod tests {
    use crate::ir::AttrValue;

    use super::super::testing::*;

    #[test]
    fn one_hot_encoder_strings_ints_and_unknowns() {
        let n = node(
            "OneHotEncoder",
            &["x"],
            &["y"],
            vec![("cats_strings", strings(&["a", "b", "c"]))],
        );
        let y = run(&n, 1, &[&strs(&[2, 1], &["c", "z"])]).unwrap();
        assert_eq!(y[0], f32s(&[2, 1, 3], &[0.0, 0.0, 1.0, 0.0, 0.0, 0.0]));
        let n = node(
            "OneHotEncoder",
            &["x"],
            &["y"],
            vec![
                ("cats_int64s", AttrValue::Ints(vec![3, 1])),
                ("zeros", AttrValue::Int(0)),
            ],
        );
        let y = run(&n, 1, &[&f32s(&[2], &[1.7, 3.0])]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[0.0, 1.0, 1.0, 0.0]));
        let err = run(&n, 1, &[&i64s(&[1], &[2])]).unwrap_err().to_string();
        assert!(err.contains("not a known category"), "{err}");
    }

    #[test]
    fn category_mapper_both_ways_with_defaults() {
        let n = node(
            "CategoryMapper",
            &["x"],
            &["y"],
            vec![
                ("cats_strings", strings(&["a", "b"])),
                ("cats_int64s", AttrValue::Ints(vec![5, 6])),
                ("default_string", string("?")),
            ],
        );
        let y = run(&n, 1, &[&strs(&[3], &["b", "a", "x"])]).unwrap();
        assert_eq!(y[0], i64s(&[3], &[6, 5, -1]));
        let y = run(&n, 1, &[&i64s(&[2], &[6, 7])]).unwrap();
        assert_eq!(y[0], strs(&[2], &["b", "?"]));
    }
}
