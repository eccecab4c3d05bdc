//! The tree ensembles of `ai.onnx.ml`: `TreeEnsembleRegressor` and `TreeEnsembleClassifier`
//! (opsets 1 and 3, where 3 adds the `*_as_tensor` attributes) and `TreeEnsemble` (opset 5).
//!
//! Why one file: the three operator forms are prepared into one `Forest` and run by one evaluator
//! with onnxruntime's aggregation rules; a fifth of the file is its tests.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsembleRegressor.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsembleClassifier.html>,
//! <https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsemble.html>.
//!
//! Every form is prepared into one [`Forest`]: a flat array of nodes whose children are
//! indices into it, the leaves' `(target, weight)` lists, and the roots. A tree's root is the
//! first node listed with its tree id (opsets 1–3) or its `tree_roots` entry (opset 5). A
//! branch goes to its true child when `x[feature] <mode> threshold` holds, or when the value is
//! NaN and `nodes_missing_value_tracks_true` is set.
//!
//! Thresholds, weights and sums are `f64` for a double input and `f32` otherwise, as in
//! onnxruntime, whose aggregation rules are followed where the specification is silent:
//!
//! - one target: every tree adds (or takes the min / max of) its leaf's first weight; the base
//!   value is added when exactly one is given; only `PROBIT` transforms a single score;
//! - several targets: per-target sums (min / max), `AVERAGE` divides by the tree count, base
//!   values are added when there is one per target, and the post transform applies per row;
//! - the classifier sums, adds base values, and picks the first best class; with two classes
//!   it follows onnxruntime's binary rules (one class with weights: the positive class wins
//!   above 0.5 when every weight is positive, above 0 otherwise, and the score row is
//!   `[1 - s, s]`, or `[-s, s]` / `[logistic(-s), logistic(s)]` with mixed weights).

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ir::Node;
use crate::tensor::{try_vec, try_with_capacity, Tensor};
use crate::DataType;

use super::super::util::required;
use super::super::{EvalCtx, InferCtx};
use super::{
    f32_tensor, floats_or_tensor, infer_labels, infer_rows, infer_scores, ints, logistic, probit,
    rows_cols, strings, typed, Labels, PostTransform,
};
use crate::ir::{Dim, TensorType};
use crate::ops::num::Real;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    /// `x` is one of the node's `membership_values` (opset 5).
    Member,
}

/// One node of a [`Forest`].
#[derive(Clone, Debug)]
enum TreeNode<T> {
    Branch {
        feature: usize,
        threshold: T,
        mode: Mode,
        missing_true: bool,
        /// Where `true` and `false` go, as indices into the node array.
        yes: usize,
        no: usize,
        /// The range of `Forest::members` this node tests (`Member` mode).
        members: (usize, usize),
    },
    Leaf {
        /// The range of `Forest::weights` this leaf holds.
        weights: (usize, usize),
    },
}

/// A prepared tree ensemble.
struct Forest<T> {
    nodes: Vec<TreeNode<T>>,
    weights: Vec<(usize, T)>,
    members: Vec<T>,
    roots: Vec<usize>,
    targets: usize,
    /// The largest feature index a branch reads.
    max_feature: usize,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::Eval(reason.into())
}

fn mode_of(name: &[u8]) -> Result<Option<Mode>> {
    Ok(Some(match name {
        b"BRANCH_LEQ" => Mode::Leq,
        b"BRANCH_LT" => Mode::Lt,
        b"BRANCH_GTE" => Mode::Gte,
        b"BRANCH_GT" => Mode::Gt,
        b"BRANCH_EQ" => Mode::Eq,
        b"BRANCH_NEQ" => Mode::Neq,
        b"LEAF" => return Ok(None),
        other => {
            return Err(bad(format!(
                "node mode '{}' is not a BRANCH_* mode or LEAF",
                String::from_utf8_lossy(other)
            )))
        }
    }))
}

/// Checks that every per-node attribute has one value per node (`n`, the length of `by`).
fn same_lengths((n, by): (usize, &str), lists: &[(&str, usize)]) -> Result<()> {
    match lists.iter().find(|(_, len)| *len != n) {
        Some((name, len)) => Err(bad(format!(
            "'{name}' has {len} values for {n} nodes ('{by}')"
        ))),
        None => Ok(()),
    }
}

fn index(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| bad(format!("negative {what} {v}")))
}

impl<T: Real> Forest<T> {
    /// The forest of `TreeEnsembleRegressor` / `TreeEnsembleClassifier` (opsets 1–3), whose
    /// leaves' weights are named by `prefix` (`target` or `class`).
    fn from_legacy(node: &Node, prefix: &str, targets: usize) -> Result<Forest<T>> {
        let tree_ids = ints(node, "nodes_treeids")?;
        let node_ids = ints(node, "nodes_nodeids")?;
        let features = ints(node, "nodes_featureids")?;
        let modes = strings(node, "nodes_modes")?;
        let yes_ids = ints(node, "nodes_truenodeids")?;
        let no_ids = ints(node, "nodes_falsenodeids")?;
        let missing = ints(node, "nodes_missing_value_tracks_true")?;
        let values = floats_or_tensor(node, "nodes_values")?;
        let n = tree_ids.len();
        same_lengths(
            (n, "nodes_treeids"),
            &[
                ("nodes_nodeids", node_ids.len()),
                ("nodes_featureids", features.len()),
                ("nodes_modes", modes.len()),
                ("nodes_truenodeids", yes_ids.len()),
                ("nodes_falsenodeids", no_ids.len()),
                ("nodes_values", values.len()),
            ],
        )?;
        let mut position: HashMap<(i64, i64), usize> = HashMap::new();
        position
            .try_reserve(n)
            .map_err(|_| bad(format!("out of memory for {n} nodes")))?;
        for i in 0..n {
            if position.insert((tree_ids[i], node_ids[i]), i).is_some() {
                return Err(bad(format!(
                    "node {} of tree {} is listed twice",
                    node_ids[i], tree_ids[i]
                )));
            }
        }
        // The leaves' weights, grouped by leaf in (tree, node) order.
        let w_ids = ints(node, &format!("{prefix}_ids"))?;
        let w_nodes = ints(node, &format!("{prefix}_nodeids"))?;
        let w_trees = ints(node, &format!("{prefix}_treeids"))?;
        let w_values = floats_or_tensor(node, &format!("{prefix}_weights"))?;
        let m = w_ids.len();
        if w_nodes.len() != m || w_trees.len() != m || w_values.len() != m {
            return Err(bad(format!(
                "'{prefix}_ids', '{prefix}_nodeids', '{prefix}_treeids' and '{prefix}_weights' differ in length"
            )));
        }
        let mut order: Vec<usize> = try_with_capacity(m)?;
        order.extend(0..m);
        order.sort_by_key(|&k| (w_trees[k], w_nodes[k], k));
        let mut weights = try_with_capacity(m)?;
        let mut ranges: Vec<(usize, usize)> = try_vec(n, (0, 0))?;
        for &k in &order {
            let Some(&at) = position.get(&(w_trees[k], w_nodes[k])) else {
                return Err(bad(format!(
                    "weight {k} names node {} of tree {}, which does not exist",
                    w_nodes[k], w_trees[k]
                )));
            };
            let target = index(w_ids[k], "target id")?;
            if target >= targets {
                return Err(bad(format!(
                    "weight {k} is for target {target}, of {targets}"
                )));
            }
            if ranges[at].1 == 0 {
                ranges[at].0 = weights.len();
            }
            ranges[at].1 += 1;
            weights.push((target, T::from_f64(w_values[k])));
        }
        let mut nodes = try_with_capacity(n)?;
        let mut max_feature = 0;
        for i in 0..n {
            let child = |id: i64| {
                position.get(&(tree_ids[i], id)).copied().ok_or_else(|| {
                    bad(format!(
                        "node {} of tree {} points to node {id}, which does not exist",
                        node_ids[i], tree_ids[i]
                    ))
                })
            };
            nodes.push(match mode_of(&modes[i])? {
                None => TreeNode::Leaf {
                    weights: (ranges[i].0, ranges[i].0 + ranges[i].1),
                },
                Some(mode) => {
                    let feature = index(features[i], "feature id")?;
                    max_feature = max_feature.max(feature);
                    TreeNode::Branch {
                        feature,
                        threshold: T::from_f64(values[i]),
                        mode,
                        missing_true: missing.get(i) == Some(&1),
                        yes: child(yes_ids[i])?,
                        no: child(no_ids[i])?,
                        members: (0, 0),
                    }
                }
            });
        }
        let mut roots = Vec::new();
        for i in 0..n {
            if i == 0 || tree_ids[i] != tree_ids[i - 1] {
                roots.push(i);
            }
        }
        Ok(Forest {
            nodes,
            weights,
            members: Vec::new(),
            roots,
            targets,
            max_feature,
        })
    }

    /// The forest of `TreeEnsemble` (opset 5).
    fn from_opset5(node: &Node) -> Result<Forest<T>> {
        let features = ints(node, "nodes_featureids")?;
        let yes_ids = ints(node, "nodes_truenodeids")?;
        let yes_leaf = ints(node, "nodes_trueleafs")?;
        let no_ids = ints(node, "nodes_falsenodeids")?;
        let no_leaf = ints(node, "nodes_falseleafs")?;
        let missing = ints(node, "nodes_missing_value_tracks_true")?;
        let roots = ints(node, "tree_roots")?;
        let leaf_targets = ints(node, "leaf_targetids")?;
        let tensor = |name: &str| -> Result<Vec<f64>> {
            match node.attr_tensor(name)? {
                Some(t) => super::tensor_f64s(&crate::ir::stored_to_tensor(t)?),
                None => Ok(Vec::new()),
            }
        };
        let splits = tensor("nodes_splits")?;
        let leaf_weights = tensor("leaf_weights")?;
        let membership = tensor("membership_values")?;
        let modes = match node.attr_tensor("nodes_modes")? {
            Some(t) => super::super::util::to_i64s(&crate::ir::stored_to_tensor(t)?)?,
            None => Vec::new(),
        };
        let n = features.len();
        same_lengths(
            (n, "nodes_featureids"),
            &[
                ("nodes_truenodeids", yes_ids.len()),
                ("nodes_trueleafs", yes_leaf.len()),
                ("nodes_falsenodeids", no_ids.len()),
                ("nodes_falseleafs", no_leaf.len()),
                ("nodes_splits", splits.len()),
                ("nodes_modes", modes.len()),
            ],
        )?;
        if leaf_targets.len() != leaf_weights.len() {
            return Err(bad("'leaf_targetids' and 'leaf_weights' differ in length"));
        }
        let targets = index(node.attr_int("n_targets", 1)?, "n_targets")?;
        let leaves = leaf_targets.len();
        // Branches first, then one node per leaf.
        let mut nodes = try_with_capacity(n + leaves)?;
        let mut members = Vec::new();
        let mut member_groups = membership.split(|v| v.is_nan());
        let mut max_feature = 0;
        for i in 0..n {
            let child = |id: i64, leaf: i64| -> Result<usize> {
                let k = index(id, "child id")?;
                let (at, limit) = if leaf != 0 { (n + k, leaves) } else { (k, n) };
                if k >= limit {
                    return Err(bad(format!("node {i} points to missing node {id}")));
                }
                Ok(at)
            };
            let mode = match modes[i] {
                0 => Mode::Leq,
                1 => Mode::Lt,
                2 => Mode::Gte,
                3 => Mode::Gt,
                4 => Mode::Eq,
                5 => Mode::Neq,
                6 => Mode::Member,
                other => return Err(bad(format!("node {i} has mode {other}, not 0 to 6"))),
            };
            let range = if mode == Mode::Member {
                let group = member_groups
                    .next()
                    .ok_or_else(|| bad(format!("node {i} has no 'membership_values'")))?;
                let start = members.len();
                members.extend(group.iter().map(|&v| T::from_f64(v)));
                (start, members.len())
            } else {
                (0, 0)
            };
            let feature = index(features[i], "feature id")?;
            max_feature = max_feature.max(feature);
            nodes.push(TreeNode::Branch {
                feature,
                threshold: T::from_f64(splits[i]),
                mode,
                missing_true: missing.get(i) == Some(&1),
                yes: child(yes_ids[i], yes_leaf[i])?,
                no: child(no_ids[i], no_leaf[i])?,
                members: range,
            });
        }
        let mut weights = try_with_capacity(leaves)?;
        for (k, (&t, &w)) in leaf_targets.iter().zip(&leaf_weights).enumerate() {
            let target = index(t, "target id")?;
            if target >= targets {
                return Err(bad(format!(
                    "leaf {k} is for target {target}, of {targets}"
                )));
            }
            weights.push((target, T::from_f64(w)));
            nodes.push(TreeNode::Leaf {
                weights: (k, k + 1),
            });
        }
        let mut root_nodes = try_with_capacity(roots.len())?;
        for &r in roots {
            let r = index(r, "tree root")?;
            if r >= n {
                return Err(bad(format!("tree root {r} is not one of the {n} nodes")));
            }
            root_nodes.push(r);
        }
        Ok(Forest {
            nodes,
            weights,
            members,
            roots: root_nodes,
            targets,
            max_feature,
        })
    }

    /// The leaf row `x` reaches from `root`. A tree that loops is an error, not a hang: no walk
    /// is longer than the node count.
    fn leaf(&self, root: usize, x: &[T]) -> Result<(usize, usize)> {
        let mut at = root;
        for _ in 0..=self.nodes.len() {
            match &self.nodes[at] {
                TreeNode::Leaf { weights } => return Ok(*weights),
                TreeNode::Branch {
                    feature,
                    threshold,
                    mode,
                    missing_true,
                    yes,
                    no,
                    members,
                } => {
                    let v = x[*feature];
                    let t = *threshold;
                    let hit = match mode {
                        Mode::Leq => v <= t,
                        Mode::Lt => v < t,
                        Mode::Gte => v >= t,
                        Mode::Gt => v > t,
                        Mode::Eq => v == t,
                        Mode::Neq => v != t,
                        Mode::Member => self.members[members.0..members.1].contains(&v),
                    } || (*missing_true && v.is_nan());
                    at = if hit { *yes } else { *no };
                }
            }
        }
        Err(bad(format!("the tree at node {root} has a cycle")))
    }
}

/// How the trees of a regressor are combined.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Average,
    Min,
    Max,
}

/// Per-target scores of one row, with whether any tree gave one.
struct Scores<T> {
    value: Vec<T>,
    has: Vec<bool>,
}

impl<T: Real> Scores<T> {
    fn new(targets: usize) -> Result<Scores<T>> {
        Ok(Scores {
            value: try_vec(targets, T::default())?,
            has: try_vec(targets, false)?,
        })
    }

    fn reset(&mut self) {
        self.value.iter_mut().for_each(|v| *v = T::default());
        self.has.iter_mut().for_each(|h| *h = false);
    }

    fn add(&mut self, target: usize, w: T, how: Aggregate) {
        let (v, has) = (&mut self.value[target], &mut self.has[target]);
        *v = match how {
            Aggregate::Sum | Aggregate::Average => *v + w,
            Aggregate::Min if !*has || w < *v => w,
            Aggregate::Max if !*has || w > *v => w,
            _ => *v,
        };
        *has = true;
    }

    /// The score, or zero when no tree gave one.
    fn get(&self, k: usize) -> T {
        if self.has[k] {
            self.value[k]
        } else {
            T::default()
        }
    }
}

impl<T: Real> Forest<T> {
    /// Sums (min, max) the weights of the leaves row `x` reaches; one target reads each leaf's
    /// first weight only.
    fn score(&self, x: &[T], how: Aggregate, scores: &mut Scores<T>) -> Result<()> {
        scores.reset();
        for &root in &self.roots {
            let (a, b) = self.leaf(root, x)?;
            if self.targets == 1 {
                if a < b {
                    scores.add(0, self.weights[a].1, how);
                }
            } else {
                for &(t, w) in &self.weights[a..b] {
                    scores.add(t, w, how);
                }
            }
        }
        Ok(())
    }
}

/// The input rows as `T`, with the row count and width.
fn rows_as<T: Real>(x: &Tensor, op: &str) -> Result<(Vec<T>, usize, usize)> {
    let (rows, cols) = rows_cols(x, op)?;
    let mut v = try_with_capacity(x.len())?;
    match x.dtype() {
        DataType::Float => v.extend(x.as_slice::<f32>()?.iter().map(|&e| T::from_f64(e.into()))),
        DataType::Double => v.extend(x.as_slice::<f64>()?.iter().map(|&e| T::from_f64(e))),
        DataType::Float16 => v.extend(
            x.as_slice::<half::f16>()?
                .iter()
                .map(|e| T::from_f64(e.to_f64())),
        ),
        DataType::Int64 => v.extend(
            x.as_slice::<i64>()?
                .iter()
                .map(|&e| T::from_f64(e as f32 as f64)),
        ),
        DataType::Int32 => v.extend(
            x.as_slice::<i32>()?
                .iter()
                .map(|&e| T::from_f64(e as f32 as f64)),
        ),
        other => return Err(super::super::util::unsupported_type(op, other)),
    }
    Ok((v, rows, cols))
}

/// Regression: `[rows, targets]` scores of `forest` on `x`.
fn regress<T: Real>(
    forest: &Forest<T>,
    x: &[T],
    rows: usize,
    cols: usize,
    how: Aggregate,
    base: &[f64],
    post: PostTransform,
) -> Result<Vec<f32>> {
    check_features(forest, cols)?;
    let targets = forest.targets;
    let mut out = try_vec(rows * targets, 0.0f32)?;
    let mut scores = Scores::new(targets)?;
    let trees = T::from_f64(forest.roots.len() as f64);
    for (r, row) in out.chunks_mut(targets.max(1)).enumerate() {
        forest.score(&x[r * cols..(r + 1) * cols], how, &mut scores)?;
        if targets == 1 {
            let origin = if base.len() == 1 {
                T::from_f64(base[0])
            } else {
                T::default()
            };
            let mut s = match how {
                Aggregate::Sum => scores.value[0] + origin,
                Aggregate::Average => scores.value[0] / trees + origin,
                Aggregate::Min | Aggregate::Max => scores.get(0) + origin,
            };
            if post == PostTransform::Probit {
                s = T::from_f64(probit(s.to_f32()).into());
            }
            row[0] = s.to_f32();
            continue;
        }
        let with_base = base.len() == targets;
        for (k, out) in row.iter_mut().enumerate() {
            let b = if with_base {
                T::from_f64(base[k])
            } else {
                T::default()
            };
            let v = match how {
                Aggregate::Sum | Aggregate::Min | Aggregate::Max => scores.get(k),
                Aggregate::Average => scores.get(k) / trees,
            };
            *out = (v + b).to_f32();
        }
        post.apply_row(row);
    }
    Ok(out)
}

fn check_features<T>(forest: &Forest<T>, cols: usize) -> Result<()> {
    if forest
        .nodes
        .iter()
        .any(|n| matches!(n, TreeNode::Branch { .. }))
        && forest.max_feature >= cols
    {
        return Err(bad(format!(
            "a tree reads feature {} of {cols}",
            forest.max_feature
        )));
    }
    Ok(())
}

fn aggregate(name: &str) -> Result<Aggregate> {
    Ok(match name {
        "SUM" => Aggregate::Sum,
        "AVERAGE" => Aggregate::Average,
        "MIN" => Aggregate::Min,
        "MAX" => Aggregate::Max,
        other => {
            return Err(bad(format!(
                "aggregate_function '{other}' is not SUM, AVERAGE, MIN or MAX"
            )))
        }
    })
}

pub(in crate::ops) fn eval_tree_ensemble_regressor(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let node = ctx.node;
    let x = required(inputs, 0)?;
    let targets = index(node.attr_int("n_targets", 1)?, "n_targets")?;
    if targets == 0 {
        return Err(bad("'n_targets' is 0"));
    }
    let how = aggregate(super::string(node, "aggregate_function", "SUM")?)?;
    let post = PostTransform::of(node)?;
    let base = floats_or_tensor(node, "base_values")?;
    let y = if x.dtype() == DataType::Double {
        let forest = Forest::<f64>::from_legacy(node, "target", targets)?;
        let (v, rows, cols) = rows_as::<f64>(x, "TreeEnsembleRegressor")?;
        (regress(&forest, &v, rows, cols, how, &base, post)?, rows)
    } else {
        let forest = Forest::<f32>::from_legacy(node, "target", targets)?;
        let (v, rows, cols) = rows_as::<f32>(x, "TreeEnsembleRegressor")?;
        (regress(&forest, &v, rows, cols, how, &base, post)?, rows)
    };
    Ok(vec![f32_tensor(&[y.1, targets], y.0)?])
}

pub(in crate::ops) fn eval_tree_ensemble(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let node = ctx.node;
    let x = required(inputs, 0)?;
    let how = match node.attr_int("aggregate_function", 1)? {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        other => return Err(bad(format!("aggregate_function {other} is not 0 to 3"))),
    };
    let post = match node.attr_int("post_transform", 0)? {
        0 => PostTransform::None,
        1 => PostTransform::Softmax,
        2 => PostTransform::Logistic,
        3 => PostTransform::SoftmaxZero,
        4 => PostTransform::Probit,
        other => return Err(bad(format!("post_transform {other} is not 0 to 4"))),
    };
    let (y, rows, targets) = if x.dtype() == DataType::Double {
        let forest = Forest::<f64>::from_opset5(node)?;
        let (v, rows, cols) = rows_as::<f64>(x, "TreeEnsemble")?;
        (
            regress(&forest, &v, rows, cols, how, &[], post)?,
            rows,
            forest.targets,
        )
    } else {
        let forest = Forest::<f32>::from_opset5(node)?;
        let (v, rows, cols) = rows_as::<f32>(x, "TreeEnsemble")?;
        (
            regress(&forest, &v, rows, cols, how, &[], post)?,
            rows,
            forest.targets,
        )
    };
    let shape = [rows, targets];
    // The output takes the input's type.
    let out = match x.dtype() {
        DataType::Double => {
            let mut v = try_with_capacity(y.len())?;
            v.extend(y.iter().map(|&e| f64::from(e)));
            Tensor::from_vec(DataType::Double, &shape, v)?
        }
        DataType::Float16 => {
            let mut v = try_with_capacity(y.len())?;
            v.extend(y.iter().map(|&e| half::f16::from_f32(e)));
            Tensor::from_vec(DataType::Float16, &shape, v)?
        }
        _ => f32_tensor(&shape, y)?,
    };
    Ok(vec![out])
}

pub(in crate::ops) fn eval_tree_ensemble_classifier(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let node = ctx.node;
    let x = required(inputs, 0)?;
    let labels = Labels::of(node, "classlabels_int64s")?;
    let classes = labels.len();
    if classes < 2 {
        return Err(bad(format!("{classes} class labels (2 or more expected)")));
    }
    let post = PostTransform::of(node)?;
    let base = floats_or_tensor(node, "base_values")?;
    let weights = floats_or_tensor(node, "class_weights")?;
    let class_ids = ints(node, "class_ids")?;
    let all_positive = weights.iter().all(|&w| w >= 0.0);
    let one_class = class_ids.windows(2).all(|w| w[0] == w[1]) && !class_ids.is_empty();
    let rule = Binary {
        binary: classes == 2 && one_class,
        all_positive,
    };
    let (picks, z, rows) = if x.dtype() == DataType::Double {
        let forest = Forest::<f64>::from_legacy(node, "class", classes)?;
        let (v, rows, cols) = rows_as::<f64>(x, "TreeEnsembleClassifier")?;
        let (p, z) = classify(&forest, &v, rows, cols, &base, post, rule)?;
        (p, z, rows)
    } else {
        let forest = Forest::<f32>::from_legacy(node, "class", classes)?;
        let (v, rows, cols) = rows_as::<f32>(x, "TreeEnsembleClassifier")?;
        let (p, z) = classify(&forest, &v, rows, cols, &base, post, rule)?;
        (p, z, rows)
    };
    Ok(vec![
        labels.tensor(&picks)?,
        f32_tensor(&[rows, classes], z)?,
    ])
}

/// What decides a two-class classifier: whether only one class has weights, and whether
/// every weight is positive.
#[derive(Clone, Copy)]
struct Binary {
    binary: bool,
    all_positive: bool,
}

/// Labels (as class positions) and `[rows, classes]` scores.
fn classify<T: Real>(
    forest: &Forest<T>,
    x: &[T],
    rows: usize,
    cols: usize,
    base: &[f64],
    post: PostTransform,
    rule: Binary,
) -> Result<(Vec<usize>, Vec<f32>)> {
    check_features(forest, cols)?;
    let classes = forest.targets;
    let mut picks = try_vec(rows, 0usize)?;
    let mut out = try_vec(rows * classes, 0.0f32)?;
    let mut s = Scores::new(classes)?;
    let n_base = base.len();
    let base = |k: usize| T::from_f64(base[k]);
    for (r, row) in out.chunks_mut(classes).enumerate() {
        forest.score(&x[r * cols..(r + 1) * cols], Aggregate::Sum, &mut s)?;
        if classes > 2 {
            for k in 0..n_base.min(classes) {
                s.value[k] = if s.has[k] {
                    s.value[k] + base(k)
                } else {
                    base(k)
                };
                s.has[k] = true;
            }
            let mut best: Option<usize> = None;
            for k in 0..classes {
                if s.has[k] && best.is_none_or(|b| s.value[k] > s.value[b]) {
                    best = Some(k);
                }
            }
            picks[r] = best.unwrap_or(0);
            for (k, o) in row.iter_mut().enumerate() {
                *o = s.get(k).to_f32();
            }
            post.apply_row(row);
            continue;
        }
        let mut extra: i32 = -1;
        let mut kept = 2;
        match n_base {
            2 => {
                if s.has[1] {
                    s.value[1] = base(1) + s.value[0];
                    s.value[0] = -s.value[1];
                } else {
                    s.value[1] += base(1);
                    s.value[0] += base(0);
                }
            }
            1 => {
                s.value[0] += base(0);
                if !s.has[1] {
                    kept = 1;
                }
            }
            _ => {
                extra = 3;
                if !s.has[1] {
                    kept = 1;
                }
            }
        }
        // `_set_score_binary`: the positive weight decides.
        let (s0, s1) = (s.value[0], s.value[1]);
        let pos = if kept == 2 && s.has[1] {
            s1
        } else if s.has[0] {
            s0
        } else {
            T::default()
        };
        let half = T::from_f64(0.5);
        picks[r] = if rule.binary {
            let positive = if rule.all_positive {
                pos > half
            } else {
                pos > T::default()
            };
            extra = match (rule.all_positive, positive) {
                (true, true) => 0,
                (true, false) => 1,
                (false, true) => 2,
                (false, false) => 3,
            };
            usize::from(positive)
        } else {
            usize::from(pos > T::default())
        };
        let v0 = s.get(0);
        if kept == 2 {
            let v1 = s.get(1);
            row[0] = v0.to_f32();
            row[1] = v1.to_f32();
            post.apply_row(row);
            continue;
        }
        let v = v0.to_f32();
        let pair = if post == PostTransform::Probit {
            [probit(v), 0.0]
        } else {
            match extra {
                0 | 1 => [(T::ONE - v0).to_f32(), v],
                2 | 3 if post == PostTransform::Logistic => [logistic(-v), logistic(v)],
                2 | 3 => [(-v0).to_f32(), v],
                _ => [v, 0.0],
            }
        };
        row.copy_from_slice(&pair);
    }
    Ok((picks, out))
}

pub(in crate::ops) fn infer_tree_ensemble_regressor(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let targets = ctx.node.attr_int("n_targets", 1)?.max(0) as usize;
    Ok(vec![infer_scores(ctx, targets)])
}

pub(in crate::ops) fn infer_tree_ensemble_classifier(
    ctx: &InferCtx<'_>,
) -> Result<Vec<TensorType>> {
    let labels = Labels::of(ctx.node, "classlabels_int64s")?;
    Ok(vec![
        infer_labels(ctx, &labels),
        infer_scores(ctx, labels.len()),
    ])
}

pub(in crate::ops) fn infer_tree_ensemble(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let targets = ctx.node.attr_int("n_targets", 1)?;
    let dims = infer_rows(ctx).map(|n| vec![n, Dim::Known(targets)]);
    Ok(vec![typed(ctx.input(0).and_then(|t| t.elem), dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::tensor_to_stored;
    use crate::ir::AttrValue;
    use crate::{DataType, Tensor};

    use super::super::testing::*;

    fn ints(v: &[i64]) -> AttrValue {
        AttrValue::Ints(v.to_vec())
    }

    fn floats(v: &[f32]) -> AttrValue {
        AttrValue::Floats(v.to_vec())
    }

    /// Two stumps on feature 0 (threshold 0.5, then 1.5), each leaf with one weight per target:
    /// tree 0 gives (1, 10) / (2, 20), tree 1 gives (4, 40) / (8, 80) for x <= t / x > t.
    fn stumps(op: &str, prefix: &str, extra: Vec<(&str, AttrValue)>) -> crate::ir::Node {
        let mut attrs = vec![
            ("nodes_treeids", ints(&[0, 0, 0, 1, 1, 1])),
            ("nodes_nodeids", ints(&[0, 1, 2, 0, 1, 2])),
            ("nodes_featureids", ints(&[0, 0, 0, 0, 0, 0])),
            ("nodes_values", floats(&[0.5, 0.0, 0.0, 1.5, 0.0, 0.0])),
            (
                "nodes_modes",
                strings(&["BRANCH_LEQ", "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"]),
            ),
            ("nodes_truenodeids", ints(&[1, 0, 0, 1, 0, 0])),
            ("nodes_falsenodeids", ints(&[2, 0, 0, 2, 0, 0])),
        ];
        let w = [
            (0, 1, 0, 1.0),
            (0, 1, 1, 10.0),
            (0, 2, 0, 2.0),
            (0, 2, 1, 20.0),
            (1, 1, 0, 4.0),
            (1, 1, 1, 40.0),
            (1, 2, 0, 8.0),
            (1, 2, 1, 80.0),
        ];
        attrs.extend(extra);
        let outputs = if op.ends_with("Classifier") {
            &["y", "z"][..]
        } else {
            &["y"]
        };
        node(op, &["x"], outputs, attrs)
            .with_attr(&format!("{prefix}_treeids"), ints(&w.map(|w| w.0)))
            .with_attr(&format!("{prefix}_nodeids"), ints(&w.map(|w| w.1)))
            .with_attr(&format!("{prefix}_ids"), ints(&w.map(|w| w.2)))
            .with_attr(&format!("{prefix}_weights"), floats(&w.map(|w| w.3)))
    }

    /// (aggregate, base values, expected [3 rows x 2 targets]) for x = 0, 1, 2.
    #[test]
    fn regressor_aggregates_two_targets() {
        let x = f32s(&[3, 1], &[0.0, 1.0, 2.0]);
        let cases: &[(&str, &[f32], [f32; 6])] = &[
            ("SUM", &[], [5.0, 50.0, 6.0, 60.0, 10.0, 100.0]),
            ("SUM", &[0.5, -1.0], [5.5, 49.0, 6.5, 59.0, 10.5, 99.0]),
            ("AVERAGE", &[], [2.5, 25.0, 3.0, 30.0, 5.0, 50.0]),
            ("MIN", &[], [1.0, 10.0, 2.0, 20.0, 2.0, 20.0]),
            ("MAX", &[], [4.0, 40.0, 4.0, 40.0, 8.0, 80.0]),
        ];
        for (how, base, expected) in cases {
            let mut extra = vec![
                ("n_targets", AttrValue::Int(2)),
                ("aggregate_function", string(how)),
            ];
            if !base.is_empty() {
                extra.push(("base_values", floats(base)));
            }
            let n = stumps("TreeEnsembleRegressor", "target", extra);
            let y = run(&n, 1, &[&x]).unwrap();
            assert_eq!(y[0], f32s(&[3, 2], expected), "{how} {base:?}");
        }
    }

    #[test]
    fn regressor_one_target_reads_the_first_weight_and_a_nan_goes_false() {
        // One target: each leaf's first weight (target 0; target 1's weights are ignored).
        let n = stumps(
            "TreeEnsembleRegressor",
            "target",
            vec![
                ("n_targets", AttrValue::Int(1)),
                ("base_values", floats(&[100.0])),
            ],
        );
        // Target ids 1 are out of range for one target.
        let err = run(&n, 1, &[&f32s(&[1], &[0.0])]).unwrap_err().to_string();
        assert!(err.contains("target 1, of 1"), "{err}");
        let n = node(
            "TreeEnsembleRegressor",
            &["x"],
            &["y"],
            vec![
                ("nodes_treeids", ints(&[0, 0, 0])),
                ("nodes_nodeids", ints(&[0, 1, 2])),
                ("nodes_featureids", ints(&[1, 0, 0])),
                ("nodes_values", floats(&[0.5, 0.0, 0.0])),
                ("nodes_modes", strings(&["BRANCH_LT", "LEAF", "LEAF"])),
                ("nodes_truenodeids", ints(&[1, 0, 0])),
                ("nodes_falsenodeids", ints(&[2, 0, 0])),
                ("nodes_missing_value_tracks_true", ints(&[0, 0, 0])),
                ("target_treeids", ints(&[0, 0])),
                ("target_nodeids", ints(&[1, 2])),
                ("target_ids", ints(&[0, 0])),
                ("target_weights", floats(&[3.0, 7.0])),
                ("base_values", floats(&[100.0])),
            ],
        );
        let x = f32s(&[3, 2], &[0.0, 0.0, 0.0, 1.0, 0.0, f32::NAN]);
        let y = run(&n, 1, &[&x]).unwrap();
        assert_eq!(y[0], f32s(&[3, 1], &[103.0, 107.0, 107.0]));
        let err = run(&n, 1, &[&f32s(&[1, 1], &[0.0])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("reads feature 1 of 1"), "{err}");
    }

    #[test]
    fn classifier_multiclass_and_binary_rules() {
        // Three classes: class 2 never has a weight, so it never wins and scores 0.
        let n = stumps(
            "TreeEnsembleClassifier",
            "class",
            vec![("classlabels_strings", strings(&["a", "b", "c"]))],
        );
        let y = run(&n, 1, &[&f32s(&[2, 1], &[0.0, 2.0])]).unwrap();
        assert_eq!(y[0], strs(&[2], &["b", "b"]));
        assert_eq!(y[1], f32s(&[2, 3], &[5.0, 50.0, 0.0, 10.0, 100.0, 0.0]));
        // Binary, weights only for class 0 and of mixed sign (a gradient-boosting model):
        // label 1 when the score plus the base is positive; scores [logistic(-s), logistic(s)].
        let n = node(
            "TreeEnsembleClassifier",
            &["x"],
            &["y", "z"],
            vec![
                ("nodes_treeids", ints(&[0, 0, 0])),
                ("nodes_nodeids", ints(&[0, 1, 2])),
                ("nodes_featureids", ints(&[0, 0, 0])),
                ("nodes_values", floats(&[0.0, 0.0, 0.0])),
                ("nodes_modes", strings(&["BRANCH_LEQ", "LEAF", "LEAF"])),
                ("nodes_truenodeids", ints(&[1, 0, 0])),
                ("nodes_falsenodeids", ints(&[2, 0, 0])),
                ("class_treeids", ints(&[0, 0])),
                ("class_nodeids", ints(&[1, 2])),
                ("class_ids", ints(&[0, 0])),
                ("class_weights", floats(&[-1.0, 2.0])),
                ("base_values", floats(&[0.5])),
                ("classlabels_int64s", ints(&[4, 9])),
                ("post_transform", string("LOGISTIC")),
            ],
        );
        let y = run(&n, 1, &[&f32s(&[2, 1], &[-1.0, 1.0])]).unwrap();
        assert_eq!(y[0], i64s(&[2], &[4, 9]));
        let l = super::logistic;
        assert_close(
            y[1].as_slice::<f32>().unwrap(),
            &[l(0.5), l(-0.5), l(-2.5), l(2.5)],
        );
    }

    #[test]
    fn opset5_members_and_leaves() {
        let tensor = |name: &str, t: Tensor| {
            AttrValue::Tensor(Box::new(tensor_to_stored(name, &t).unwrap()))
        };
        // Root: x0 in {1, 3} ? leaf 0 : node 1; node 1: x0 < 5 ? leaf 1 : leaf 2.
        let n = node(
            "TreeEnsemble",
            &["x"],
            &["y"],
            vec![
                ("nodes_featureids", ints(&[0, 0])),
                ("nodes_splits", tensor("s", f32s(&[2], &[0.0, 5.0]))),
                (
                    "nodes_modes",
                    tensor(
                        "m",
                        Tensor::from_vec(DataType::Uint8, &[2], vec![6u8, 1]).unwrap(),
                    ),
                ),
                ("nodes_truenodeids", ints(&[0, 1])),
                ("nodes_trueleafs", ints(&[1, 1])),
                ("nodes_falsenodeids", ints(&[1, 2])),
                ("nodes_falseleafs", ints(&[0, 1])),
                ("tree_roots", ints(&[0])),
                ("leaf_targetids", ints(&[0, 0, 0])),
                ("leaf_weights", tensor("w", f32s(&[3], &[10.0, 20.0, 30.0]))),
                (
                    "membership_values",
                    tensor("mv", f32s(&[3], &[1.0, 3.0, f32::NAN])),
                ),
            ],
        );
        let y = run(&n, 5, &[&f32s(&[4, 1], &[1.0, 3.0, 4.0, 6.0])]).unwrap();
        assert_eq!(y[0], f32s(&[4, 1], &[10.0, 10.0, 20.0, 30.0]));
    }

    #[test]
    fn a_tree_with_a_cycle_is_an_error() {
        let n = node(
            "TreeEnsembleRegressor",
            &["x"],
            &["y"],
            vec![
                ("nodes_treeids", ints(&[0, 0])),
                ("nodes_nodeids", ints(&[0, 1])),
                ("nodes_featureids", ints(&[0, 0])),
                ("nodes_values", floats(&[0.0, 0.0])),
                ("nodes_modes", strings(&["BRANCH_LEQ", "BRANCH_LEQ"])),
                ("nodes_truenodeids", ints(&[1, 0])),
                ("nodes_falsenodeids", ints(&[1, 0])),
            ],
        );
        let err = run(&n, 1, &[&f32s(&[1], &[0.0])]).unwrap_err().to_string();
        assert!(err.contains("cycle"), "{err}");
    }
}
