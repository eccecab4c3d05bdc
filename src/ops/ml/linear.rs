//! `LinearRegressor` and `LinearClassifier` (`ai.onnx.ml`, opset 1): `scores = X W^T + b`,
//! with `W` the `coefficients` as `[targets, C]` and `b` the `intercepts`.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx_aionnxml_LinearRegressor.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_LinearClassifier.html>.
//!
//! The post transform applies to rows of two or more scores; a single score only takes
//! `PROBIT` (onnxruntime's rule). The classifier has one target per intercept; its label is
//! the first class of the highest raw score. With one target it is binary: the label is the
//! second class when the raw score is positive (`1` / `"1"` when there are not two labels), and
//! with two labels the scores are `[1 - s, s]`.

use crate::error::{Error, Result};
use crate::tensor::{try_vec, Tensor};

use super::super::util::{dot, required};
use super::super::{EvalCtx, InferCtx};
use super::{
    f32_tensor, floats, infer_labels, infer_scores, input_dims, Features, Labels, PostTransform,
};
use crate::ir::TensorType;

/// `X W^T + b` for every row: `[rows, targets]`.
fn scores(f: &Features, w: &[f32], b: &[f32], targets: usize) -> Result<Vec<f32>> {
    if targets == 0 || w.len() != targets * f.cols {
        return Err(Error::Eval(format!(
            "{} coefficients for {targets} targets of {} features",
            w.len(),
            f.cols
        )));
    }
    if !b.is_empty() && b.len() != targets {
        return Err(Error::Eval(format!(
            "{} intercepts for {targets} targets",
            b.len()
        )));
    }
    let mut out = try_vec(f.rows * targets, 0.0f32)?;
    for (r, scores) in out.chunks_mut(targets).enumerate() {
        let x = f.row(r);
        for (t, s) in scores.iter_mut().enumerate() {
            *s = dot(x, &w[t * f.cols..(t + 1) * f.cols]) + b.get(t).copied().unwrap_or(0.0);
        }
    }
    Ok(out)
}

/// The post transform of rows of `targets` scores (one score: only `PROBIT`).
fn transform(post: PostTransform, values: &mut [f32], targets: usize) {
    if targets == 1 {
        if post == PostTransform::Probit {
            values.iter_mut().for_each(|v| *v = super::probit(*v));
        }
        return;
    }
    for row in values.chunks_mut(targets) {
        post.apply_row(row);
    }
}

pub(in crate::ops) fn eval_linear_regressor(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let f = Features::of(required(inputs, 0)?, "LinearRegressor")?;
    let targets = usize::try_from(ctx.node.attr_int("targets", 1)?)
        .map_err(|_| Error::Eval("'targets' is negative".into()))?;
    let post = PostTransform::of(ctx.node)?;
    let (w, b) = (
        floats(ctx.node, "coefficients")?,
        floats(ctx.node, "intercepts")?,
    );
    let mut y = scores(&f, w, b, targets)?;
    transform(post, &mut y, targets);
    Ok(vec![f32_tensor(&[f.rows, targets], y)?])
}

pub(in crate::ops) fn eval_linear_classifier(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let f = Features::of(required(inputs, 0)?, "LinearClassifier")?;
    let labels = Labels::of(ctx.node, "classlabels_ints")?;
    let post = PostTransform::of(ctx.node)?;
    let (w, b) = (
        floats(ctx.node, "coefficients")?,
        floats(ctx.node, "intercepts")?,
    );
    let targets = if b.is_empty() {
        w.len() / f.cols.max(1)
    } else {
        b.len()
    };
    let raw = scores(&f, w, b, targets)?;
    let mut picks = try_vec(f.rows, 0usize)?;
    if targets == 1 {
        let two = labels.len() == 2;
        for (p, &s) in picks.iter_mut().zip(&raw) {
            *p = usize::from(s > 0.0);
        }
        let labels_out = if two {
            labels.tensor(&picks)?
        } else {
            binary_default(&labels, &picks)?
        };
        let mut z = raw;
        transform(post, &mut z, 1);
        let z = if two {
            let mut both = try_vec(2 * f.rows, 0.0f32)?;
            for (pair, &s) in both.chunks_mut(2).zip(&z) {
                pair.copy_from_slice(&[1.0 - s, s]);
            }
            f32_tensor(&[f.rows, 2], both)?
        } else {
            f32_tensor(&[f.rows, 1], z)?
        };
        return Ok(vec![labels_out, z]);
    }
    if labels.len() < targets {
        return Err(Error::Eval(format!(
            "{} class labels for {targets} classes",
            labels.len()
        )));
    }
    for (p, row) in picks.iter_mut().zip(raw.chunks(targets)) {
        *p = argmax(row);
    }
    let mut z = raw;
    transform(post, &mut z, targets);
    Ok(vec![
        labels.tensor(&picks)?,
        f32_tensor(&[f.rows, targets], z)?,
    ])
}

/// The position of the first maximum (NaN never wins).
pub(super) fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (j, &v) in row.iter().enumerate().skip(1) {
        if v > row[best] {
            best = j;
        }
    }
    best
}

/// Binary labels without two class labels: `1` / `0` (`"1"` / `"0"` for a string model).
fn binary_default(labels: &Labels<'_>, picks: &[usize]) -> Result<Tensor> {
    match labels {
        Labels::Strings(_) => {
            let mut v = crate::tensor::try_with_capacity(picks.len())?;
            v.extend(
                picks
                    .iter()
                    .map(|&p| if p == 1 { b"1".to_vec() } else { b"0".to_vec() }),
            );
            Ok(Tensor::from_strings(&[picks.len()], v)?)
        }
        Labels::Ints(_) => {
            let mut v = crate::tensor::try_with_capacity(picks.len())?;
            v.extend(picks.iter().map(|&p| p as i64));
            Ok(Tensor::from_vec(crate::DataType::Int64, &[picks.len()], v)?)
        }
    }
}

pub(in crate::ops) fn infer_linear_regressor(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let targets = ctx.node.attr_int("targets", 1)?.max(0) as usize;
    Ok(vec![infer_scores(ctx, targets)])
}

pub(in crate::ops) fn infer_linear_classifier(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let labels = Labels::of(ctx.node, "classlabels_ints")?;
    let (w, b) = (
        floats(ctx.node, "coefficients")?,
        floats(ctx.node, "intercepts")?,
    );
    let cols = input_dims(ctx, 0)
        .and_then(|d| d.last().and_then(|c| c.known()))
        .map(|c| c.max(1) as usize);
    let targets = if b.is_empty() {
        cols.map(|c| w.len() / c)
    } else {
        Some(b.len())
    };
    let mut out = vec![infer_labels(ctx, &labels)];
    if let Some(t) = targets {
        out.push(infer_scores(
            ctx,
            if t == 1 && labels.len() == 2 { 2 } else { t },
        ));
    } else {
        out.push(super::typed(Some(crate::DataType::Float), None));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::ir::AttrValue;

    use super::super::testing::*;

    #[test]
    fn linear_regressor_two_targets_and_probit() {
        let n = node(
            "LinearRegressor",
            &["x"],
            &["y"],
            vec![
                ("coefficients", AttrValue::Floats(vec![1.0, 2.0, 0.5, -1.0])),
                ("intercepts", AttrValue::Floats(vec![0.5, 0.0])),
                ("targets", AttrValue::Int(2)),
            ],
        );
        let x = f32s(&[2, 2], &[1.0, 1.0, 2.0, 0.0]);
        let y = run(&n, 1, &[&x]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[3.5, -0.5, 2.5, 1.0]));
        // One target: PROBIT is applied, LOGISTIC is not (onnxruntime's rule).
        for (post, expected) in [("PROBIT", 0.0f32), ("LOGISTIC", 0.5)] {
            let n = node(
                "LinearRegressor",
                &["x"],
                &["y"],
                vec![
                    ("coefficients", AttrValue::Floats(vec![1.0])),
                    ("post_transform", string(post)),
                ],
            );
            let y = run(&n, 1, &[&f32s(&[1], &[0.5])]).unwrap();
            assert_close(y[0].as_slice::<f32>().unwrap(), &[expected]);
        }
    }

    #[test]
    fn linear_classifier_multiclass_softmax() {
        let n = node(
            "LinearClassifier",
            &["x"],
            &["y", "z"],
            vec![
                (
                    "coefficients",
                    AttrValue::Floats(vec![1.0, 0.0, 0.0, 1.0, -1.0, -1.0]),
                ),
                ("intercepts", AttrValue::Floats(vec![0.0, 0.0, 0.0])),
                ("classlabels_strings", strings(&["a", "b", "c"])),
                ("post_transform", string("SOFTMAX")),
            ],
        );
        let x = f32s(&[2, 2], &[2.0, 1.0, -1.0, -1.0]);
        let y = run(&n, 1, &[&x]).unwrap();
        assert_eq!(y[0], strs(&[2], &["a", "c"]));
        let e = |v: f32| v.exp();
        let (s0, s1) = (e(2.0) + e(1.0) + e(-3.0), e(-1.0) + e(-1.0) + e(2.0));
        assert_close(
            y[1].as_slice::<f32>().unwrap(),
            &[
                e(2.0) / s0,
                e(1.0) / s0,
                e(-3.0) / s0,
                e(-1.0) / s1,
                e(-1.0) / s1,
                e(2.0) / s1,
            ],
        );
    }

    #[test]
    fn linear_classifier_binary_one_target() {
        let n = node(
            "LinearClassifier",
            &["x"],
            &["y", "z"],
            vec![
                ("coefficients", AttrValue::Floats(vec![1.0])),
                ("intercepts", AttrValue::Floats(vec![-0.5])),
                ("classlabels_ints", AttrValue::Ints(vec![3, 7])),
            ],
        );
        let y = run(&n, 1, &[&f32s(&[2, 1], &[1.0, 0.0])]).unwrap();
        assert_eq!(y[0], i64s(&[2], &[7, 3]));
        assert_eq!(y[1], f32s(&[2, 2], &[0.5, 0.5, 1.5, -0.5]));
    }
}
