//! The `ai.onnx.ml` domain: the operators scikit-learn models converted by skl2onnx (and other
//! classical-ML converters) use — label and category encoders, tree ensembles, linear and SVM
//! models, the element-wise preprocessors, feature extraction and `ZipMap`.
//!
//! Spec: <https://onnx.ai/onnx/operators/#ai-onnx-ml>. Where the specification leaves a choice
//! open (the binary cases of the classifiers, how a post transform applies to one score), the
//! kernels follow onnxruntime, which every converter is tested against; each file says where.
//!
//! Design note: the models these operators run are small matrices of features (`[N, C]`, or
//! `[C]` for one row) and their attributes hold the trained model. Every kernel reads its
//! attributes once per call into a typed value (trees into a flat node array with child
//! offsets, linear models into a coefficient matrix), and works in `f32` as onnxruntime does
//! (`f64` for the tree thresholds of a double input).
//!
//! `ZipMap` returns a sequence of maps in ONNX (`seq(map(string, float))` or
//! `seq(map(int64, float))`), every map with the node's class labels as keys. Inside a run the
//! interpreter carries it as the `[N, C]` float tensor of the map values, column `j` for the
//! `j`-th label; where a graph output leaves the library it becomes an
//! [`crate::ir::SequenceOfMaps`] with those labels as keys (`interp::Session::run_values`), so
//! `multigather run` writes a `SequenceProto` of `MapProto`s, `multigather test` compares maps
//! key by key, and the Python package returns a list of dicts, as onnxruntime does. A node
//! other than `Identity` that reads `ZipMap`'s output, and a graph input or output declared as
//! a sequence or map that is not `ZipMap`'s, are refused before anything runs.

mod encoders;
mod features;
mod label_encoder;
mod linear;
mod preprocess;
mod svm;
mod tree_ensemble;

pub(crate) use features::zipmap_keys;

use crate::error::{Error, Result};
use crate::ir::{Dim, Node, Shape, TensorType};
use crate::tensor::{try_with_capacity, Tensor};
use crate::DataType;

use super::util::to_i64s;
use super::{InferCtx, OpDef};

/// The domain of every operator here.
pub(crate) const DOMAIN: &str = "ai.onnx.ml";

const fn ml(op: &'static str, since: i64, n_in: usize, outs: usize) -> OpDefParts {
    OpDefParts {
        op,
        since,
        n_in,
        outs,
    }
}

/// The parts of a definition that vary by operator (all take one input except
/// `FeatureVectorizer`).
struct OpDefParts {
    op: &'static str,
    since: i64,
    n_in: usize,
    outs: usize,
}

impl OpDefParts {
    const fn def(self, eval: super::EvalFn) -> OpDef {
        let inputs = if self.n_in == usize::MAX {
            1..=usize::MAX
        } else {
            self.n_in..=self.n_in
        };
        let outputs = if self.outs == 2 { 1..=2 } else { 1..=1 };
        OpDef::new(self.op, self.since, inputs, outputs, eval).in_domain(DOMAIN)
    }
}

pub(super) const DEFS: &[OpDef] = &[
    ml("ArrayFeatureExtractor", 1, 2, 1)
        .def(features::eval_array_feature_extractor)
        .with_infer(features::infer_array_feature_extractor),
    ml("Binarizer", 1, 1, 1)
        .def(preprocess::eval_binarizer)
        .with_infer(infer_like_input),
    ml("CategoryMapper", 1, 1, 1)
        .def(encoders::eval_category_mapper)
        .with_infer(encoders::infer_category_mapper),
    ml("FeatureVectorizer", 1, usize::MAX, 1)
        .def(features::eval_feature_vectorizer)
        .with_infer(features::infer_feature_vectorizer),
    ml("Imputer", 1, 1, 1)
        .def(preprocess::eval_imputer)
        .with_infer(infer_like_input),
    ml("LabelEncoder", 1, 1, 1)
        .def(label_encoder::eval_label_encoder)
        .with_infer(label_encoder::infer_label_encoder)
        .until(1),
    ml("LabelEncoder", 2, 1, 1)
        .def(label_encoder::eval_label_encoder)
        .with_infer(label_encoder::infer_label_encoder),
    ml("LinearClassifier", 1, 1, 2)
        .def(linear::eval_linear_classifier)
        .with_infer(linear::infer_linear_classifier),
    ml("LinearRegressor", 1, 1, 1)
        .def(linear::eval_linear_regressor)
        .with_infer(linear::infer_linear_regressor),
    ml("Normalizer", 1, 1, 1)
        .def(preprocess::eval_normalizer)
        .with_infer(infer_float_like_input),
    ml("OneHotEncoder", 1, 1, 1)
        .def(encoders::eval_one_hot_encoder)
        .with_infer(encoders::infer_one_hot_encoder),
    ml("Scaler", 1, 1, 1)
        .def(preprocess::eval_scaler)
        .with_infer(infer_float_like_input),
    ml("SVMClassifier", 1, 1, 2)
        .def(svm::eval_svm_classifier)
        .with_infer(svm::infer_svm_classifier),
    ml("SVMRegressor", 1, 1, 1)
        .def(svm::eval_svm_regressor)
        .with_infer(svm::infer_svm_regressor),
    ml("TreeEnsemble", 5, 1, 1)
        .def(tree_ensemble::eval_tree_ensemble)
        .with_infer(tree_ensemble::infer_tree_ensemble),
    ml("TreeEnsembleClassifier", 1, 1, 2)
        .def(tree_ensemble::eval_tree_ensemble_classifier)
        .with_infer(tree_ensemble::infer_tree_ensemble_classifier),
    ml("TreeEnsembleRegressor", 1, 1, 1)
        .def(tree_ensemble::eval_tree_ensemble_regressor)
        .with_infer(tree_ensemble::infer_tree_ensemble_regressor),
    // The output is a sequence of maps in ONNX's type system: no tensor type to infer.
    ml("ZipMap", 1, 1, 1).def(features::eval_zipmap),
];

/// A numeric input as `f32` values (float, double, int32 and int64 inputs, as onnxruntime takes
/// them), with the rows and columns of its `[N, C]` (or `[C]`: one row) layout.
pub(super) struct Features {
    pub values: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl Features {
    pub fn of(x: &Tensor, op: &str) -> Result<Features> {
        let (rows, cols) = rows_cols(x, op)?;
        let mut values = try_with_capacity(x.len())?;
        match x.dtype() {
            DataType::Float => values.extend_from_slice(x.as_slice::<f32>()?),
            DataType::Double => values.extend(x.as_slice::<f64>()?.iter().map(|&v| v as f32)),
            DataType::Int64 => values.extend(x.as_slice::<i64>()?.iter().map(|&v| v as f32)),
            DataType::Int32 => values.extend(x.as_slice::<i32>()?.iter().map(|&v| v as f32)),
            other => return Err(super::util::unsupported_type(op, other)),
        }
        Ok(Features { values, rows, cols })
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.cols..(i + 1) * self.cols]
    }
}

/// The `[N, C]` layout of a feature input: a rank-1 input is one row, a rank-2 input is rows of
/// features; anything else is refused.
pub(super) fn rows_cols(x: &Tensor, op: &str) -> Result<(usize, usize)> {
    match x.shape() {
        [c] => Ok((1, *c)),
        [n, c] => Ok((*n, *c)),
        other => Err(Error::Eval(format!(
            "{op} takes a [N, C] or [C] input, found shape {other:?}"
        ))),
    }
}

/// A `floats` attribute, empty when absent.
pub(super) fn floats<'n>(node: &'n Node, name: &str) -> Result<&'n [f32]> {
    Ok(node.attr_floats(name)?.unwrap_or(&[]))
}

/// An `ints` attribute, empty when absent.
pub(super) fn ints<'n>(node: &'n Node, name: &str) -> Result<&'n [i64]> {
    Ok(node.attr_ints(name)?.unwrap_or(&[]))
}

/// A `strings` attribute, empty when absent.
pub(super) fn strings<'n>(node: &'n Node, name: &str) -> Result<&'n [Vec<u8>]> {
    Ok(node.attr_strings(name)?.unwrap_or(&[]))
}

/// A `string` attribute, or `default` when absent.
pub(super) fn string<'n>(node: &'n Node, name: &str, default: &'n str) -> Result<&'n str> {
    Ok(node.attr_string(name)?.unwrap_or(default))
}

/// The values of a `float` attribute or of its `_as_tensor` twin (opset 3 of the tree
/// ensembles, where double models keep double thresholds), as `f64`; empty when both are
/// absent, an error when both are given.
pub(super) fn floats_or_tensor(node: &Node, name: &str) -> Result<Vec<f64>> {
    let tensor_name = format!("{name}_as_tensor");
    match (node.attr_floats(name)?, node.attr_tensor(&tensor_name)?) {
        (Some(_), Some(_)) => Err(Error::Eval(format!(
            "attributes '{name}' and '{tensor_name}' are both given"
        ))),
        (Some(v), None) => {
            let mut out = try_with_capacity(v.len())?;
            out.extend(v.iter().map(|&x| f64::from(x)));
            Ok(out)
        }
        (None, Some(t)) => {
            let t = crate::ir::stored_to_tensor(t)?;
            tensor_f64s(&t)
        }
        (None, None) => Ok(Vec::new()),
    }
}

/// The values of a float, double or integer tensor as `f64`.
pub(super) fn tensor_f64s(t: &Tensor) -> Result<Vec<f64>> {
    let mut out = try_with_capacity(t.len())?;
    match t.dtype() {
        DataType::Float => out.extend(t.as_slice::<f32>()?.iter().map(|&v| f64::from(v))),
        DataType::Double => out.extend_from_slice(t.as_slice::<f64>()?),
        _ => out.extend(to_i64s(t)?.into_iter().map(|v| v as f64)),
    }
    Ok(out)
}

/// What a classifier or regressor does to its raw scores (`post_transform`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PostTransform {
    None,
    Logistic,
    Softmax,
    SoftmaxZero,
    Probit,
}

impl PostTransform {
    pub fn of(node: &Node) -> Result<PostTransform> {
        Ok(match string(node, "post_transform", "NONE")? {
            "NONE" => PostTransform::None,
            "LOGISTIC" => PostTransform::Logistic,
            "SOFTMAX" => PostTransform::Softmax,
            "SOFTMAX_ZERO" => PostTransform::SoftmaxZero,
            "PROBIT" => PostTransform::Probit,
            other => {
                return Err(Error::Eval(format!(
                "post_transform '{other}' is not NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO or PROBIT"
            )))
            }
        })
    }

    /// Applies the transform to one row of two or more scores.
    pub fn apply_row(self, row: &mut [f32]) {
        match self {
            PostTransform::None => {}
            PostTransform::Logistic => row.iter_mut().for_each(|v| *v = logistic(*v)),
            PostTransform::Probit => row.iter_mut().for_each(|v| *v = probit(*v)),
            PostTransform::Softmax => softmax(row),
            PostTransform::SoftmaxZero => softmax_zero(row),
        }
    }
}

/// `1 / (1 + e^-x)`, computed on `|x|` so that it never overflows (as onnxruntime does).
pub(super) fn logistic(x: f32) -> f32 {
    let v = 1.0 / (1.0 + (-x.abs()).exp());
    if x < 0.0 {
        1.0 - v
    } else {
        v
    }
}

/// `sqrt(2) * erfinv(2x - 1)`, with the closed-form `erfinv` approximation onnxruntime and the
/// ONNX reference use (Winitzki, a = 0.147).
pub(super) fn probit(x: f32) -> f32 {
    std::f32::consts::SQRT_2 * erf_inv(2.0 * x - 1.0)
}

fn erf_inv(x: f32) -> f32 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let x = (1.0 - x) * (1.0 + x);
    let log = x.ln();
    let v = 2.0 / (std::f32::consts::PI * 0.147) + 0.5 * log;
    let v2 = 1.0 / 0.147 * log;
    let v3 = -v + (v * v - v2).sqrt();
    sign * v3.sqrt()
}

/// Softmax of one row, shifted by its maximum.
pub(super) fn softmax(row: &mut [f32]) {
    let max = row.iter().copied().fold(-f32::MAX, f32::max);
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    row.iter_mut().for_each(|v| *v /= sum);
}

/// Softmax that leaves zero scores at zero (`SOFTMAX_ZERO`).
fn softmax_zero(row: &mut [f32]) {
    let max = row.iter().copied().fold(-f32::MAX, f32::max);
    let exp_neg_max = (-max).exp();
    let mut sum = 0.0;
    for v in row.iter_mut() {
        if v.abs() > 1e-7 {
            *v = (*v - max).exp();
            sum += *v;
        } else {
            *v *= exp_neg_max;
        }
    }
    row.iter_mut().for_each(|v| *v /= sum);
}

/// A classifier's labels: `classlabels_strings` or the integer labels (`classlabels_ints` or
/// `classlabels_int64s`, by operator).
pub(super) enum Labels<'n> {
    Strings(&'n [Vec<u8>]),
    Ints(&'n [i64]),
}

impl<'n> Labels<'n> {
    pub fn of(node: &'n Node, ints_name: &str) -> Result<Labels<'n>> {
        let s = strings(node, "classlabels_strings")?;
        let i = ints(node, ints_name)?;
        match (s.is_empty(), i.is_empty()) {
            (false, true) => Ok(Labels::Strings(s)),
            (true, _) => Ok(Labels::Ints(i)),
            (false, false) => Err(Error::Eval(format!(
                "attributes 'classlabels_strings' and '{ints_name}' are both given"
            ))),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Labels::Strings(s) => s.len(),
            Labels::Ints(i) => i.len(),
        }
    }

    /// The label tensor `[N]` for the label indices `picks`.
    pub fn tensor(&self, picks: &[usize]) -> Result<Tensor> {
        let out_of_range = |k: usize| Error::Eval(format!("class {k} has no label"));
        match self {
            Labels::Strings(s) => {
                let mut v = try_with_capacity(picks.len())?;
                for &k in picks {
                    v.push(s.get(k).ok_or_else(|| out_of_range(k))?.clone());
                }
                Ok(Tensor::from_strings(&[picks.len()], v)?)
            }
            Labels::Ints(i) => {
                let mut v = try_with_capacity(picks.len())?;
                for &k in picks {
                    v.push(*i.get(k).ok_or_else(|| out_of_range(k))?);
                }
                Ok(Tensor::from_vec(DataType::Int64, &[picks.len()], v)?)
            }
        }
    }
}

/// The dims of input `i`, where its rank is known.
pub(super) fn input_dims(ctx: &InferCtx<'_>, i: usize) -> Option<Vec<Dim>> {
    Some(ctx.input(i)?.shape.as_ref()?.dims.clone())
}

/// The row count of a feature input (`[C]`: one row, `[N, C]`: `N`), where its rank is known.
pub(super) fn infer_rows(ctx: &InferCtx<'_>) -> Option<Dim> {
    match input_dims(ctx, 0)?.as_slice() {
        [_] => Some(Dim::Known(1)),
        [n, _] => Some(n.clone()),
        _ => None,
    }
}

/// A type of `elem` whose shape is `dims`, where known.
pub(super) fn typed(elem: Option<DataType>, dims: Option<Vec<Dim>>) -> TensorType {
    TensorType {
        elem,
        shape: dims.map(Shape::new),
    }
}

/// `[rows, width]` floats, the rows from the feature input.
pub(super) fn infer_scores(ctx: &InferCtx<'_>, width: usize) -> TensorType {
    let rows = infer_rows(ctx);
    typed(
        Some(DataType::Float),
        rows.map(|n| vec![n, Dim::Known(width as i64)]),
    )
}

/// `[rows]` labels of the classifier's label type.
pub(super) fn infer_labels(ctx: &InferCtx<'_>, labels: &Labels<'_>) -> TensorType {
    let elem = match labels {
        Labels::Strings(_) => DataType::String,
        Labels::Ints(_) => DataType::Int64,
    };
    typed(Some(elem), infer_rows(ctx).map(|n| vec![n]))
}

/// Float output of the input's shape (`Normalizer`, `Scaler`).
pub(super) fn infer_float_like_input(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![typed(Some(DataType::Float), input_dims(ctx, 0))])
}

/// The input's type and shape (`Binarizer`, `Imputer`).
pub(super) fn infer_like_input(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![typed(
        ctx.input(0).and_then(|t| t.elem),
        input_dims(ctx, 0),
    )])
}

/// A float tensor of `shape` from `values` (whose length matches by construction).
pub(super) fn f32_tensor(shape: &[usize], values: Vec<f32>) -> Result<Tensor> {
    Ok(Tensor::from_vec(DataType::Float, shape, values)?)
}

#[cfg(test)]
pub(super) mod testing {
    //! Shared helpers of the tests of this module.
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    /// A node of this domain with attributes.
    pub fn node(
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<(&str, AttrValue)>,
    ) -> Node {
        let mut n = Node::new(
            op,
            "n",
            inputs.iter().map(|s| s.to_string()),
            outputs.iter().map(|s| s.to_string()),
        )
        .with_domain(super::DOMAIN);
        for (k, v) in attrs {
            n = n.with_attr(k, v);
        }
        n
    }

    pub fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    pub fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, shape, v.to_vec()).unwrap()
    }

    pub fn strs(shape: &[usize], v: &[&str]) -> Tensor {
        Tensor::from_strings(shape, v.iter().map(|s| s.as_bytes().to_vec()).collect()).unwrap()
    }

    pub fn strings(v: &[&str]) -> AttrValue {
        AttrValue::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
    }

    pub fn string(v: &str) -> AttrValue {
        AttrValue::String(v.as_bytes().to_vec())
    }

    /// Runs `node` at `opset` on `inputs`.
    pub fn run(node: &Node, opset: i64, inputs: &[&Tensor]) -> crate::Result<Vec<Tensor>> {
        let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        eval_node(node, opset, &inputs)
    }

    /// Asserts that two float slices agree to a relative 1e-6.
    pub fn assert_close(actual: &[f32], expected: &[f32]) {
        assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
        for (a, e) in actual.iter().zip(expected) {
            assert!(
                (a - e).abs() <= 1e-6 * e.abs().max(1.0),
                "{actual:?} vs {expected:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use crate::ir::{AttrValue, Dim, TensorType};
    use crate::ops::infer_node;
    use crate::DataType;

    fn ty(elem: DataType, dims: &[i64]) -> TensorType {
        TensorType::new(elem, dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    /// (node, input types, the output types the shape function gives).
    #[test]
    fn shape_functions() {
        let x = ty(DataType::Float, &[5, 3]);
        let cases = vec![
            (
                node("Scaler", &["x"], &["y"], vec![]),
                vec![ty(DataType::Int64, &[5, 3])],
                vec![ty(DataType::Float, &[5, 3])],
            ),
            (
                node(
                    "OneHotEncoder",
                    &["x"],
                    &["y"],
                    vec![("cats_strings", strings(&["a", "b"]))],
                ),
                vec![ty(DataType::String, &[5, 1])],
                vec![ty(DataType::Float, &[5, 1, 2])],
            ),
            (
                node(
                    "LinearClassifier",
                    &["x"],
                    &["y", "z"],
                    vec![
                        ("coefficients", AttrValue::Floats(vec![0.0; 3])),
                        ("intercepts", AttrValue::Floats(vec![0.0])),
                        ("classlabels_ints", AttrValue::Ints(vec![0, 1])),
                    ],
                ),
                vec![x.clone()],
                vec![ty(DataType::Int64, &[5]), ty(DataType::Float, &[5, 2])],
            ),
            (
                node(
                    "TreeEnsembleClassifier",
                    &["x"],
                    &["y", "z"],
                    vec![("classlabels_strings", strings(&["a", "b", "c"]))],
                ),
                vec![ty(DataType::Float, &[3])],
                vec![ty(DataType::String, &[1]), ty(DataType::Float, &[1, 3])],
            ),
            (
                node(
                    "LabelEncoder",
                    &["x"],
                    &["y"],
                    vec![
                        ("keys_strings", strings(&["a"])),
                        ("values_floats", AttrValue::Floats(vec![1.0])),
                    ],
                ),
                vec![ty(DataType::String, &[2, 2])],
                vec![ty(DataType::Float, &[2, 2])],
            ),
            (
                node(
                    "FeatureVectorizer",
                    &["a", "b"],
                    &["y"],
                    vec![("inputdimensions", AttrValue::Ints(vec![3, 2]))],
                ),
                vec![x.clone(), ty(DataType::Int64, &[5, 2])],
                vec![ty(DataType::Float, &[5, 5])],
            ),
            (
                node("ArrayFeatureExtractor", &["x", "i"], &["y"], vec![]),
                vec![x.clone(), ty(DataType::Int64, &[2])],
                vec![ty(DataType::Float, &[5, 2])],
            ),
        ];
        for (n, inputs, expected) in cases {
            let inputs: Vec<_> = inputs.into_iter().map(Some).collect();
            let opset = if n.op_type == "LabelEncoder" { 2 } else { 1 };
            let got = infer_node(&n, opset, &inputs, &[]);
            assert_eq!(got, expected, "{}", n.op_type);
        }
    }
}
