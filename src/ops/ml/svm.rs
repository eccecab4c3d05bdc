//! `SVMRegressor` and `SVMClassifier` (`ai.onnx.ml`, opset 1): support vector machines as
//! libsvm trains them (support vectors and a kernel) or as liblinear does (coefficients only).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx_aionnxml_SVMRegressor.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_SVMClassifier.html>.
//!
//! Kernels (`kernel_params` = gamma, coef0, degree): `LINEAR` `x.v`, `POLY`
//! `(gamma x.v + coef0)^degree`, `RBF` `exp(-gamma |x - v|^2)`, `SIGMOID`
//! `tanh(gamma x.v + coef0)`. Without support vectors the model is linear: one score per class,
//! `x.w_c + rho[0]`.
//!
//! The classifier with support vectors is one-vs-one: classifier `(i, j)` scores
//! `sum(coef[j-1][sv of i] * k) + sum(coef[i][sv of j] * k) + rho[ij]` and votes for `i` when
//! positive; the label is the class with most votes (first on ties). With `prob_a` / `prob_b`
//! the pairwise scores become probabilities (Platt) and then class probabilities by libsvm's
//! iterative method (`multiclass_probability`); otherwise the scores are the pairwise scores,
//! and with two classes `[-s, s]` (`[1 - s, s]` under a post transform other than `NONE`), as
//! onnxruntime writes them. The regressor ignores `post_transform`, as onnxruntime does; with
//! `one_class` its output is 1 or -1.

use crate::error::{Error, Result};
use crate::ir::Node;
use crate::tensor::{try_vec, Tensor};

use super::super::util::{dot, required};
use super::super::{EvalCtx, InferCtx};
use super::linear::argmax;
use super::{
    f32_tensor, floats, infer_labels, infer_scores, ints, string, Features, Labels, PostTransform,
};
use crate::ir::TensorType;

#[derive(Clone, Copy)]
enum Kernel {
    Linear,
    Poly { gamma: f32, coef0: f32, degree: f32 },
    Rbf { gamma: f32 },
    Sigmoid { gamma: f32, coef0: f32 },
}

impl Kernel {
    fn of(node: &Node) -> Result<Kernel> {
        let p = floats(node, "kernel_params")?;
        let [gamma, coef0, degree] = match p {
            [] => [0.0; 3],
            [g, c, d, ..] => [*g, *c, *d],
            _ => {
                return Err(Error::Eval(format!(
                    "'kernel_params' has {} values (gamma, coef0, degree expected)",
                    p.len()
                )))
            }
        };
        Ok(match string(node, "kernel_type", "LINEAR")? {
            "LINEAR" => Kernel::Linear,
            "POLY" => Kernel::Poly {
                gamma,
                coef0,
                degree,
            },
            "RBF" => Kernel::Rbf { gamma },
            "SIGMOID" => Kernel::Sigmoid { gamma, coef0 },
            other => {
                return Err(Error::Eval(format!(
                    "kernel_type '{other}' is not LINEAR, POLY, RBF or SIGMOID"
                )))
            }
        })
    }

    fn apply(self, x: &[f32], v: &[f32]) -> f32 {
        match self {
            Kernel::Linear => dot(x, v),
            Kernel::Poly {
                gamma,
                coef0,
                degree,
            } => {
                let b = gamma * dot(x, v) + coef0;
                match degree {
                    2.0 => b * b,
                    3.0 => b * b * b,
                    d => b.powf(d),
                }
            }
            Kernel::Rbf { gamma } => {
                let d: f32 = x.iter().zip(v).map(|(a, b)| (a - b) * (a - b)).sum();
                (-gamma * d).exp()
            }
            Kernel::Sigmoid { gamma, coef0 } => (gamma * dot(x, v) + coef0).tanh(),
        }
    }
}

/// The support vectors `[count, C]`, checked against the features.
fn support_vectors(node: &Node, count: usize, cols: usize) -> Result<&[f32]> {
    let sv = floats(node, "support_vectors")?;
    if sv.len() != count * cols {
        return Err(Error::Eval(format!(
            "{} support vector values for {count} vectors of {cols} features",
            sv.len()
        )));
    }
    Ok(sv)
}

/// The kernel of row `x` with every support vector.
fn kernels(kernel: Kernel, x: &[f32], sv: &[f32], cols: usize, out: &mut [f32]) {
    for (k, v) in out.iter_mut().zip(sv.chunks(cols.max(1))) {
        *k = kernel.apply(x, v);
    }
}

pub(in crate::ops) fn eval_svm_regressor(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let node = ctx.node;
    let f = Features::of(required(inputs, 0)?, "SVMRegressor")?;
    let count = usize::try_from(node.attr_int("n_supports", 0)?)
        .map_err(|_| Error::Eval("'n_supports' is negative".into()))?;
    let coef = floats(node, "coefficients")?;
    let rho = floats(node, "rho")?.first().copied().unwrap_or(0.0);
    let one_class = node.attr_int("one_class", 0)? != 0;
    let mut y = try_vec(f.rows, 0.0f32)?;
    if count > 0 {
        let kernel = Kernel::of(node)?;
        let sv = support_vectors(node, count, f.cols)?;
        if coef.len() != count {
            return Err(Error::Eval(format!(
                "{} coefficients for {count} support vectors",
                coef.len()
            )));
        }
        let mut k = try_vec(count, 0.0f32)?;
        for (r, y) in y.iter_mut().enumerate() {
            kernels(kernel, f.row(r), sv, f.cols, &mut k);
            *y = dot(&k, coef) + rho;
        }
    } else {
        if coef.len() != f.cols {
            return Err(Error::Eval(format!(
                "{} coefficients for {} features",
                coef.len(),
                f.cols
            )));
        }
        for (r, y) in y.iter_mut().enumerate() {
            *y = dot(f.row(r), coef) + rho;
        }
    }
    if one_class {
        y.iter_mut()
            .for_each(|v| *v = if *v > 0.0 { 1.0 } else { -1.0 });
    }
    Ok(vec![f32_tensor(&[f.rows, 1], y)?])
}

pub(in crate::ops) fn eval_svm_classifier(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let node = ctx.node;
    let f = Features::of(required(inputs, 0)?, "SVMClassifier")?;
    let labels = Labels::of(node, "classlabels_ints")?;
    let classes = labels.len().max(1);
    let post = PostTransform::of(node)?;
    let coef = floats(node, "coefficients")?;
    let rho = floats(node, "rho")?;
    let (prob_a, prob_b) = (floats(node, "prob_a")?, floats(node, "prob_b")?);
    if prob_a.len() != prob_b.len() {
        return Err(Error::Eval(format!(
            "'prob_a' has {} values and 'prob_b' {}",
            prob_a.len(),
            prob_b.len()
        )));
    }
    let per_class = ints(node, "vectors_per_class")?;
    let mut starts = Vec::with_capacity(per_class.len());
    let mut count = 0usize;
    for &n in per_class {
        starts.push(count);
        count = usize::try_from(n)
            .ok()
            .and_then(|n| count.checked_add(n))
            .ok_or_else(|| Error::Eval(format!("bad 'vectors_per_class' {per_class:?}")))?;
    }
    let weights_all_positive = coef.iter().all(|&c| c >= 0.0);
    let pairs = classes * (classes - 1) / 2;
    let mut picks = try_vec(f.rows, 0usize)?;
    if count == 0 {
        // liblinear: one score per class.
        if coef.len() != classes * f.cols || rho.is_empty() {
            return Err(Error::Eval(format!(
                "{} coefficients and {} rho for {classes} classes of {} features",
                coef.len(),
                rho.len(),
                f.cols
            )));
        }
        let mut z = try_vec(f.rows * classes, 0.0f32)?;
        for (r, row) in z.chunks_mut(classes).enumerate() {
            for (c, s) in row.iter_mut().enumerate() {
                *s = dot(f.row(r), &coef[c * f.cols..(c + 1) * f.cols]) + rho[0];
            }
            let best = argmax(row);
            picks[r] = if classes == 2 {
                let top = row[best];
                let positive =
                    (weights_all_positive && top >= 0.5) || (!weights_all_positive && top > 0.0);
                if positive {
                    1
                } else {
                    best
                }
            } else {
                best
            };
            if classes > 1 {
                post.apply_row(row);
            }
        }
        return Ok(vec![
            labels.tensor(&picks)?,
            f32_tensor(&[f.rows, classes], z)?,
        ]);
    }
    if per_class.len() != classes || coef.len() != (classes - 1) * count || rho.len() < pairs {
        return Err(Error::Eval(format!(
            "{} coefficients, {} rho and {} 'vectors_per_class' for {classes} classes and {count} support vectors",
            coef.len(),
            rho.len(),
            per_class.len()
        )));
    }
    let have_proba = !prob_a.is_empty();
    if have_proba && prob_a.len() < pairs {
        return Err(Error::Eval(format!(
            "{} 'prob_a' values for {pairs} class pairs",
            prob_a.len()
        )));
    }
    let kernel = Kernel::of(node)?;
    let sv = support_vectors(node, count, f.cols)?;
    let width = if have_proba {
        classes
    } else if classes > 2 {
        pairs
    } else {
        2
    };
    let mut z = try_vec(f.rows * width, 0.0f32)?;
    let mut k = try_vec(count, 0.0f32)?;
    let mut pair_scores = try_vec(pairs, 0.0f32)?;
    let mut votes = try_vec(classes, 0usize)?;
    let mut probs = try_vec(classes * classes, 0.0f32)?;
    for (r, out) in z.chunks_mut(width).enumerate() {
        kernels(kernel, f.row(r), sv, f.cols, &mut k);
        votes.iter_mut().for_each(|v| *v = 0);
        let mut p = 0;
        for i in 0..classes {
            for j in i + 1..classes {
                let (si, ni) = (starts[i], per_class[i] as usize);
                let (sj, nj) = (starts[j], per_class[j] as usize);
                let mut sum = 0.0f64;
                let row_j = &coef[(j - 1) * count..j * count];
                let row_i = &coef[i * count..(i + 1) * count];
                for m in 0..ni {
                    sum += f64::from(row_j[si + m] * k[si + m]);
                }
                for m in 0..nj {
                    sum += f64::from(row_i[sj + m] * k[sj + m]);
                }
                sum += f64::from(rho[p]);
                pair_scores[p] = sum as f32;
                votes[if sum > 0.0 { i } else { j }] += 1;
                p += 1;
            }
        }
        let mut best = 0;
        for (c, &v) in votes.iter().enumerate() {
            if v > votes[best] {
                best = c;
            }
        }
        picks[r] = best;
        if have_proba {
            probs.iter_mut().for_each(|v| *v = 0.0);
            let mut index = 0;
            for i in 0..classes {
                for j in i + 1..classes {
                    let val =
                        1.0 - super::logistic(pair_scores[index] * prob_a[index] + prob_b[index]);
                    let val = val.clamp(1e-7, 1.0 - 1e-7);
                    probs[i * classes + j] = val;
                    probs[j * classes + i] = 1.0 - val;
                    index += 1;
                }
            }
            multiclass_probability(classes, &probs, out)?;
            if classes > 1 {
                post.apply_row(out);
            }
        } else if classes > 2 {
            out.copy_from_slice(&pair_scores);
            post.apply_row(out);
        } else {
            let s = pair_scores.first().copied().unwrap_or(0.0);
            let pair = match post {
                PostTransform::None => [-s, s],
                PostTransform::Probit => [super::probit(s), 0.0],
                _ => [1.0 - s, s],
            };
            out.copy_from_slice(&pair);
        }
    }
    Ok(vec![
        labels.tensor(&picks)?,
        f32_tensor(&[f.rows, width], z)?,
    ])
}

/// Class probabilities from pairwise ones (`r[i][j]`: probability of `i` against `j`), by the
/// iterative method of Wu, Lin and Weng (libsvm's `multiclass_probability`), in `f32` as
/// onnxruntime computes it.
fn multiclass_probability(k: usize, r: &[f32], p: &mut [f32]) -> Result<()> {
    let mut q = try_vec(k * k, 0.0f32)?;
    let mut qp = try_vec(k, 0.0f32)?;
    let eps = 0.005 / k as f32;
    for i in 0..k {
        p[i] = 1.0 / k as f32;
        for j in 0..i {
            q[i * k + i] += r[j * k + i] * r[j * k + i];
            q[i * k + j] = q[j * k + i];
        }
        for j in i + 1..k {
            q[i * k + i] += r[j * k + i] * r[j * k + i];
            q[i * k + j] = -r[j * k + i] * r[i * k + j];
        }
    }
    for _ in 0..100 {
        let mut pqp = 0.0;
        for i in 0..k {
            qp[i] = (0..k).map(|j| q[i * k + j] * p[j]).sum();
            pqp += p[i] * qp[i];
        }
        let max_error = (0..k).map(|i| (qp[i] - pqp).abs()).fold(0.0, f32::max);
        if max_error < eps {
            break;
        }
        for i in 0..k {
            let diff = (-qp[i] + pqp) / q[i * k + i];
            p[i] += diff;
            pqp = (pqp + diff * (diff * q[i * k + i] + 2.0 * qp[i])) / (1.0 + diff) / (1.0 + diff);
            for j in 0..k {
                qp[j] = (qp[j] + diff * q[i * k + j]) / (1.0 + diff);
                p[j] /= 1.0 + diff;
            }
        }
    }
    Ok(())
}

pub(in crate::ops) fn infer_svm_regressor(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![infer_scores(ctx, 1)])
}

pub(in crate::ops) fn infer_svm_classifier(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let labels = Labels::of(ctx.node, "classlabels_ints")?;
    let classes = labels.len().max(1);
    let with_vectors = !ints(ctx.node, "vectors_per_class")?.is_empty();
    let width = if !with_vectors || !floats(ctx.node, "prob_a")?.is_empty() {
        classes
    } else if classes > 2 {
        classes * (classes - 1) / 2
    } else {
        2
    };
    Ok(vec![infer_labels(ctx, &labels), infer_scores(ctx, width)])
}

#[cfg(test)]
mod tests {
    use crate::ir::AttrValue;

    use super::super::testing::*;

    #[test]
    fn svm_regressor_rbf_and_linear() {
        let n = node(
            "SVMRegressor",
            &["x"],
            &["y"],
            vec![
                ("n_supports", AttrValue::Int(2)),
                (
                    "support_vectors",
                    AttrValue::Floats(vec![0.0, 0.0, 1.0, 1.0]),
                ),
                ("coefficients", AttrValue::Floats(vec![1.0, -2.0])),
                ("rho", AttrValue::Floats(vec![0.5])),
                ("kernel_type", string("RBF")),
                ("kernel_params", AttrValue::Floats(vec![0.5, 0.0, 3.0])),
            ],
        );
        let y = run(&n, 1, &[&f32s(&[1, 2], &[1.0, 0.0])]).unwrap();
        let k = (-0.5f32).exp();
        assert_close(y[0].as_slice::<f32>().unwrap(), &[k - 2.0 * k + 0.5]);
        let n = node(
            "SVMRegressor",
            &["x"],
            &["y"],
            vec![
                ("coefficients", AttrValue::Floats(vec![2.0, 3.0])),
                ("rho", AttrValue::Floats(vec![1.0])),
                ("one_class", AttrValue::Int(1)),
            ],
        );
        let y = run(&n, 1, &[&f32s(&[2, 2], &[1.0, 1.0, -1.0, -1.0])]).unwrap();
        assert_eq!(y[0], f32s(&[2, 1], &[1.0, -1.0]));
    }

    #[test]
    fn svm_classifier_one_vs_one_votes() {
        // Three classes, one support vector each, linear kernel: pair scores are coefficient
        // sums of x.v plus rho.
        let n = node(
            "SVMClassifier",
            &["x"],
            &["y", "z"],
            vec![
                ("classlabels_ints", AttrValue::Ints(vec![10, 20, 30])),
                ("vectors_per_class", AttrValue::Ints(vec![1, 1, 1])),
                (
                    "support_vectors",
                    AttrValue::Floats(vec![1.0, 0.0, 0.0, 1.0, -1.0, -1.0]),
                ),
                // Rows (j - 1): row 0 = [c(1,0) c(2,0)...], laid out [classes - 1, count].
                (
                    "coefficients",
                    AttrValue::Floats(vec![1.0, -1.0, -1.0, 1.0, 1.0, -1.0]),
                ),
                ("rho", AttrValue::Floats(vec![0.0, 0.0, 0.0])),
            ],
        );
        let y = run(&n, 1, &[&f32s(&[1, 2], &[2.0, 0.0])]).unwrap();
        // k = [2, 0, -2]. (0,1): 1*2 + (-1)*0 = 2 -> 0. (0,2): row1[0]*k0 + row0[2]*k2 =
        // 1*2 + (-1)*(-2) = 4 -> 0. (1,2): row1[1]*k1 + row1[2]*k2 = 0 + (-1)(-2) = 2 -> 1.
        assert_eq!(y[0], i64s(&[1], &[10]));
        assert_eq!(y[1], f32s(&[1, 3], &[2.0, 4.0, 2.0]));
    }

    #[test]
    fn multiclass_probability_of_symmetric_pairs_is_uniform() {
        let r = [0.0, 0.5, 0.5, 0.5, 0.0, 0.5, 0.5, 0.5, 0.0];
        let mut p = [0.0; 3];
        super::multiclass_probability(3, &r, &mut p).unwrap();
        assert_close(&p, &[1.0 / 3.0; 3]);
    }
}
