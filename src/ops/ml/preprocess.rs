//! The element-wise preprocessors of `ai.onnx.ml`: `Normalizer`, `Scaler`, `Binarizer` and
//! `Imputer` (all opset 1).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx_aionnxml_Normalizer.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_Scaler.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_Binarizer.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_Imputer.html>.
//!
//! `Normalizer` and `Scaler` read float, double, int32 or int64 features and write float;
//! `Binarizer` and `Imputer` keep the input's type. A zero norm leaves a row unchanged, and `L2`
//! is computed as onnxruntime does (`sign(x) * sqrt(x^2 / sum(x^2))`).

use crate::error::{Error, Result};
use crate::tensor::{try_with_capacity, Tensor};
use crate::DataType;

use super::super::util::{required, unsupported_type};
use super::super::EvalCtx;
use super::{f32_tensor, floats, ints, string, Features};

pub(in crate::ops) fn eval_normalizer(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let norm = string(ctx.node, "norm", "MAX")?;
    let mut f = Features::of(x, "Normalizer")?;
    let cols = f.cols.max(1);
    for row in f.values.chunks_mut(cols) {
        match norm {
            "MAX" => {
                let max = row.iter().copied().fold(f32::MIN, f32::max);
                if max != 0.0 {
                    row.iter_mut().for_each(|v| *v /= max);
                }
            }
            "L1" => {
                let sum: f32 = row.iter().map(|v| v.abs()).sum();
                if sum != 0.0 {
                    row.iter_mut().for_each(|v| *v /= sum);
                }
            }
            "L2" => {
                let sum: f32 = row.iter().map(|v| v * v).sum();
                if sum != 0.0 {
                    for v in row.iter_mut() {
                        let r = (*v * *v / sum).sqrt();
                        *v = if *v < 0.0 { -r } else { r };
                    }
                }
            }
            other => return Err(Error::Eval(format!("norm '{other}' is not MAX, L1 or L2"))),
        }
    }
    Ok(vec![f32_tensor(x.shape(), f.values)?])
}

/// A per-column parameter: one value for every column, or one per column.
fn per_column<'a>(v: &'a [f32], cols: usize, name: &str, default: f32) -> Result<Param<'a>> {
    match v.len() {
        0 => Ok(Param::One(default)),
        1 => Ok(Param::One(v[0])),
        n if n == cols => Ok(Param::Each(v)),
        n => Err(Error::Eval(format!(
            "'{name}' has {n} values for {cols} columns (1 or {cols} expected)"
        ))),
    }
}

enum Param<'a> {
    One(f32),
    Each(&'a [f32]),
}

impl Param<'_> {
    fn at(&self, column: usize) -> f32 {
        match self {
            Param::One(v) => *v,
            Param::Each(v) => v[column],
        }
    }
}

pub(in crate::ops) fn eval_scaler(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let mut f = Features::of(x, "Scaler")?;
    let cols = f.cols;
    let offset = per_column(floats(ctx.node, "offset")?, cols, "offset", 0.0)?;
    let scale = per_column(floats(ctx.node, "scale")?, cols, "scale", 1.0)?;
    for row in f.values.chunks_mut(cols.max(1)) {
        for (j, v) in row.iter_mut().enumerate() {
            *v = (*v - offset.at(j)) * scale.at(j);
        }
    }
    Ok(vec![f32_tensor(x.shape(), f.values)?])
}

pub(in crate::ops) fn eval_binarizer(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let threshold = ctx.node.attr_float("threshold", 0.0)?;
    let y = match x.dtype() {
        DataType::Float => map::<f32>(x, |v| if v > threshold { 1.0 } else { 0.0 })?,
        DataType::Double => {
            let t = f64::from(threshold);
            map::<f64>(x, |v| if v > t { 1.0 } else { 0.0 })?
        }
        DataType::Int64 => map::<i64>(x, |v| i64::from(v as f32 > threshold))?,
        DataType::Int32 => map::<i32>(x, |v| i32::from(v as f32 > threshold))?,
        other => return Err(unsupported_type("Binarizer", other)),
    };
    Ok(vec![y])
}

/// `x` with `f` applied to every element, in the same type.
fn map<T: bytemuck::Pod>(x: &Tensor, f: impl Fn(T) -> T) -> Result<Tensor> {
    let src = x.as_slice::<T>()?;
    let mut v = try_with_capacity(src.len())?;
    v.extend(src.iter().map(|&e| f(e)));
    Ok(Tensor::from_vec(x.dtype(), x.shape(), v)?)
}

pub(in crate::ops) fn eval_imputer(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let (_, cols) = super::rows_cols(x, "Imputer")?;
    let cols = cols.max(1);
    let node = ctx.node;
    let y = match x.dtype() {
        DataType::Float | DataType::Double => {
            let values = floats(node, "imputed_value_floats")?;
            if values.is_empty() {
                return Err(Error::Eval(
                    "a float input needs 'imputed_value_floats'".into(),
                ));
            }
            let imputed = per_column(values, cols, "imputed_value_floats", 0.0)?;
            let replaced = node.attr_float("replaced_value_float", 0.0)?;
            let hit = |v: f64| {
                if replaced.is_nan() {
                    v.is_nan()
                } else {
                    v == f64::from(replaced)
                }
            };
            if x.dtype() == DataType::Float {
                map_indexed::<f32>(
                    x,
                    cols,
                    |j, v| {
                        if hit(f64::from(v)) {
                            imputed.at(j)
                        } else {
                            v
                        }
                    },
                )?
            } else {
                map_indexed::<f64>(
                    x,
                    cols,
                    |j, v| {
                        if hit(v) {
                            f64::from(imputed.at(j))
                        } else {
                            v
                        }
                    },
                )?
            }
        }
        DataType::Int64 | DataType::Int32 => {
            let values = ints(node, "imputed_value_int64s")?;
            if values.len() != 1 && values.len() != cols {
                return Err(Error::Eval(format!(
                    "'imputed_value_int64s' has {} values for {cols} columns (1 or {cols} expected)",
                    values.len()
                )));
            }
            let at = |j: usize| {
                if values.len() == 1 {
                    values[0]
                } else {
                    values[j]
                }
            };
            let replaced = node.attr_int("replaced_value_int64", 0)?;
            if x.dtype() == DataType::Int64 {
                map_indexed::<i64>(x, cols, |j, v| if v == replaced { at(j) } else { v })?
            } else {
                map_indexed::<i32>(x, cols, |j, v| {
                    if i64::from(v) == replaced {
                        at(j) as i32
                    } else {
                        v
                    }
                })?
            }
        }
        other => return Err(unsupported_type("Imputer", other)),
    };
    Ok(vec![y])
}

/// `x` with `f(column, value)` applied to every element, in the same type.
fn map_indexed<T: bytemuck::Pod>(
    x: &Tensor,
    cols: usize,
    f: impl Fn(usize, T) -> T,
) -> Result<Tensor> {
    let src = x.as_slice::<T>()?;
    let mut v = try_with_capacity(src.len())?;
    v.extend(src.iter().enumerate().map(|(k, &e)| f(k % cols, e)));
    Ok(Tensor::from_vec(x.dtype(), x.shape(), v)?)
}

#[cfg(test)]
mod tests {
    use crate::ir::AttrValue;

    use super::super::testing::*;

    #[test]
    fn normalizer_cases() {
        let x = f32s(&[2, 3], &[1.0, -2.0, 2.0, 0.0, 0.0, 0.0]);
        let cases: &[(&str, [f32; 6])] = &[
            ("MAX", [0.5, -1.0, 1.0, 0.0, 0.0, 0.0]),
            ("L1", [0.2, -0.4, 0.4, 0.0, 0.0, 0.0]),
            ("L2", [1.0 / 3.0, -2.0 / 3.0, 2.0 / 3.0, 0.0, 0.0, 0.0]),
        ];
        for (norm, expected) in cases {
            let n = node("Normalizer", &["x"], &["y"], vec![("norm", string(norm))]);
            let y = run(&n, 1, &[&x]).unwrap();
            assert_close(y[0].as_slice::<f32>().unwrap(), expected);
        }
        let n = node("Normalizer", &["x"], &["y"], vec![("norm", string("L3"))]);
        let err = run(&n, 1, &[&x]).unwrap_err().to_string();
        assert!(err.contains("L3"), "{err}");
    }

    #[test]
    fn scaler_per_column_and_broadcast() {
        let x = i64s(&[2, 2], &[1, 2, 3, 4]);
        let n = node(
            "Scaler",
            &["x"],
            &["y"],
            vec![
                ("offset", AttrValue::Floats(vec![1.0, 2.0])),
                ("scale", AttrValue::Floats(vec![0.5])),
            ],
        );
        let y = run(&n, 1, &[&x]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[0.0, 0.0, 1.0, 1.0]));
        let n = node(
            "Scaler",
            &["x"],
            &["y"],
            vec![("offset", AttrValue::Floats(vec![1.0, 2.0, 3.0]))],
        );
        let err = run(&n, 1, &[&x]).unwrap_err().to_string();
        assert!(err.contains("3 values for 2 columns"), "{err}");
    }

    #[test]
    fn binarizer_keeps_the_type() {
        let n = node(
            "Binarizer",
            &["x"],
            &["y"],
            vec![("threshold", AttrValue::Float(1.5))],
        );
        let y = run(&n, 1, &[&f32s(&[3], &[1.0, 1.5, 2.0])]).unwrap();
        assert_eq!(y[0], f32s(&[3], &[0.0, 0.0, 1.0]));
        let y = run(&n, 1, &[&i64s(&[3], &[1, 2, 3])]).unwrap();
        assert_eq!(y[0], i64s(&[3], &[0, 1, 1]));
    }

    #[test]
    fn imputer_replaces_nan_per_column_and_ints() {
        let n = node(
            "Imputer",
            &["x"],
            &["y"],
            vec![
                ("imputed_value_floats", AttrValue::Floats(vec![7.0, 8.0])),
                ("replaced_value_float", AttrValue::Float(f32::NAN)),
            ],
        );
        let x = f32s(&[2, 2], &[f32::NAN, 1.0, 2.0, f32::NAN]);
        let y = run(&n, 1, &[&x]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[7.0, 1.0, 2.0, 8.0]));
        let n = node(
            "Imputer",
            &["x"],
            &["y"],
            vec![
                ("imputed_value_int64s", AttrValue::Ints(vec![9])),
                ("replaced_value_int64", AttrValue::Int(-1)),
            ],
        );
        let y = run(&n, 1, &[&i64s(&[3], &[-1, 0, -1])]).unwrap();
        assert_eq!(y[0], i64s(&[3], &[9, 0, 9]));
    }
}
