//! Feature plumbing of `ai.onnx.ml` (opset 1): `ArrayFeatureExtractor` (select columns),
//! `FeatureVectorizer` (concatenate inputs column-wise) and `ZipMap` (class scores to maps).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx_aionnxml_ArrayFeatureExtractor.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_FeatureVectorizer.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_ZipMap.html>.
//!
//! `ArrayFeatureExtractor` selects along the last axis (any element type); a rank-1 input gives
//! a `[1, K]` output, as in the reference. `FeatureVectorizer` takes `inputdimensions[i]`
//! columns of input `i`, padding with zeros or truncating, and writes float. `ZipMap`'s kernel
//! returns the `[N, C]` float tensor of the map values, column `j` for the `j`-th label, and
//! [`zipmap_keys`] the labels that make it a sequence of maps at the graph's edge (see the
//! module note of [`super`]).

use crate::error::{Error, Result};
use crate::tensor::{try_vec, try_with_capacity, Tensor};
use crate::DataType;

use super::super::util::{required, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::{f32_tensor, infer_rows, input_dims, ints, rows_cols, strings, typed, Features};
use crate::ir::{Dim, MapKeys, Node, TensorType};

pub(in crate::ops) fn eval_array_feature_extractor(
    _ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, indices) = (required(inputs, 0)?, required(inputs, 1)?);
    let Some((&last, outer)) = x.shape().split_last() else {
        return Err(Error::Eval(
            "ArrayFeatureExtractor takes an input of rank 1 or more".into(),
        ));
    };
    let index = to_i64s(indices)?;
    let mut columns = try_with_capacity(index.len())?;
    for &i in &index {
        let c = usize::try_from(i)
            .ok()
            .filter(|&c| c < last)
            .ok_or_else(|| Error::Eval(format!("index {i} is out of range for {last} columns")))?;
        columns.push(c);
    }
    let rows: usize = outer.iter().product();
    let shape: Vec<usize> = if outer.is_empty() {
        vec![1, columns.len()]
    } else {
        outer.iter().copied().chain([columns.len()]).collect()
    };
    Tensor::check_size(x.dtype(), &shape)?;
    let mut starts = try_with_capacity(rows * columns.len())?;
    for r in 0..rows {
        starts.extend(columns.iter().map(|&c| r * last + c));
    }
    Ok(vec![x.take_blocks(&shape, &starts, 1)?])
}

pub(in crate::ops) fn eval_feature_vectorizer(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let dims = ints(ctx.node, "inputdimensions")?;
    if dims.len() != inputs.len() {
        return Err(Error::Eval(format!(
            "'inputdimensions' has {} values for {} inputs",
            dims.len(),
            inputs.len()
        )));
    }
    let mut parts = Vec::with_capacity(inputs.len());
    let mut rows = None;
    for i in 0..inputs.len() {
        let f = Features::of(required(inputs, i)?, "FeatureVectorizer")?;
        if *rows.get_or_insert(f.rows) != f.rows {
            return Err(Error::Eval(format!(
                "input {i} has {} rows, input 0 {}",
                f.rows,
                rows.unwrap_or(0)
            )));
        }
        parts.push(f);
    }
    let rows = rows.unwrap_or(0);
    let widths: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::Eval(format!("negative value in 'inputdimensions' {dims:?}")))?;
    let total = widths
        .iter()
        .try_fold(0usize, |a, &w| a.checked_add(w))
        .ok_or_else(|| Error::Eval("'inputdimensions' overflow".into()))?;
    let shape = [rows, total];
    Tensor::check_size(DataType::Float, &shape)?;
    let mut y = try_vec(rows * total, 0.0f32)?;
    for r in 0..rows {
        let mut at = r * total;
        for (f, &w) in parts.iter().zip(&widths) {
            let row = f.row(r);
            let n = w.min(row.len());
            y[at..at + n].copy_from_slice(&row[..n]);
            at += w;
        }
    }
    Ok(vec![f32_tensor(&shape, y)?])
}

pub(in crate::ops) fn eval_zipmap(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    if x.dtype() != DataType::Float {
        return Err(super::super::util::unsupported_type("ZipMap", x.dtype()));
    }
    let labels = zipmap_keys(ctx.node)?.len();
    let (rows, cols) = rows_cols(x, "ZipMap")?;
    if cols != labels {
        return Err(Error::Eval(format!(
            "{cols} scores per row for {labels} class labels"
        )));
    }
    Ok(vec![x.clone().into_shape(&[rows, cols])?])
}

/// The keys of every map a `ZipMap` node returns: its class labels, in order.
pub(crate) fn zipmap_keys(node: &Node) -> Result<MapKeys> {
    let (s, i) = (
        strings(node, "classlabels_strings")?,
        ints(node, "classlabels_int64s")?,
    );
    match (s.is_empty(), i.is_empty()) {
        (false, true) => Ok(MapKeys::String(s.to_vec())),
        (true, false) => Ok(MapKeys::Int64(i.to_vec())),
        _ => Err(Error::Eval(
            "exactly one of 'classlabels_strings' and 'classlabels_int64s' must be given".into(),
        )),
    }
}

pub(in crate::ops) fn infer_array_feature_extractor(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let count = input_dims(ctx, 1).and_then(|d| {
        d.iter()
            .map(Dim::known)
            .try_fold(1i64, |a, k| a.checked_mul(k?))
    });
    let dims = input_dims(ctx, 0).and_then(|x| {
        let (_, outer) = x.split_last()?;
        let count = count.map_or(Dim::Unknown, Dim::Known);
        Some(if outer.is_empty() {
            vec![Dim::Known(1), count]
        } else {
            outer.iter().cloned().chain([count]).collect()
        })
    });
    Ok(vec![typed(ctx.input(0).and_then(|t| t.elem), dims)])
}

pub(in crate::ops) fn infer_feature_vectorizer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let total = ints(ctx.node, "inputdimensions")?
        .iter()
        .try_fold(0i64, |a, &d| a.checked_add(d.max(0)));
    let dims = infer_rows(ctx).map(|n| vec![n, total.map_or(Dim::Unknown, Dim::Known)]);
    Ok(vec![typed(Some(DataType::Float), dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::AttrValue;

    use super::super::testing::*;

    #[test]
    fn array_feature_extractor_cases() {
        let n = node("ArrayFeatureExtractor", &["x", "i"], &["y"], vec![]);
        let x = f32s(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let y = run(&n, 1, &[&x, &i64s(&[2], &[2, 0])]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[2.0, 0.0, 5.0, 3.0]));
        let y = run(&n, 1, &[&strs(&[3], &["a", "b", "c"]), &i64s(&[1], &[1])]).unwrap();
        assert_eq!(y[0], strs(&[1, 1], &["b"]));
        let err = run(&n, 1, &[&x, &i64s(&[1], &[3])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("index 3 is out of range"), "{err}");
    }

    #[test]
    fn feature_vectorizer_pads_and_truncates() {
        let n = node(
            "FeatureVectorizer",
            &["a", "b"],
            &["y"],
            vec![("inputdimensions", AttrValue::Ints(vec![3, 1]))],
        );
        let a = i64s(&[2, 2], &[1, 2, 3, 4]);
        let b = f32s(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
        let y = run(&n, 1, &[&a, &b]).unwrap();
        assert_eq!(
            y[0],
            f32s(&[2, 4], &[1.0, 2.0, 0.0, 5.0, 3.0, 4.0, 0.0, 7.0])
        );
    }

    #[test]
    fn zipmap_checks_the_labels() {
        let n = node(
            "ZipMap",
            &["x"],
            &["y"],
            vec![("classlabels_int64s", AttrValue::Ints(vec![4, 7]))],
        );
        let x = f32s(&[1, 2], &[0.25, 0.75]);
        assert_eq!(run(&n, 1, &[&x]).unwrap()[0], x);
        let err = run(&n, 1, &[&f32s(&[1, 3], &[0.0; 3])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("3 scores per row for 2 class labels"), "{err}");
    }

    #[test]
    fn zipmap_keys_are_the_labels() {
        let labels = vec![("classlabels_strings", strings(&["b", "a"]))];
        let n = node("ZipMap", &["x"], &["y"], labels);
        assert_eq!(
            super::zipmap_keys(&n).unwrap(),
            crate::ir::MapKeys::String(vec![b"b".to_vec(), b"a".to_vec()])
        );
        let both = vec![
            ("classlabels_strings", strings(&["b"])),
            ("classlabels_int64s", AttrValue::Ints(vec![1])),
        ];
        let err = super::zipmap_keys(&node("ZipMap", &["x"], &["y"], both)).unwrap_err();
        assert!(err.to_string().contains("exactly one of"), "{err}");
    }
}
