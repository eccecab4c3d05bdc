//! `NonMaxSuppression` (opsets 10, 11): greedy box selection per batch and class.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html>.
//!
//! Boxes `(B, N, 4)` are corners `[y1, x1, y2, x2]` (either diagonal) or, with
//! `center_point_box`, `[x_center, y_center, width, height]`; scores are `(B, C, N)`. Per batch
//! and class, boxes scoring above `score_threshold` (when given) are visited by falling score
//! (ties: lower index first) and kept unless their IoU with a kept box exceeds `iou_threshold`,
//! up to `max_output_boxes_per_class` (0 when omitted). The output lists
//! `[batch, class, box]` rows in selection order.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_with_capacity, Tensor};
use crate::DataType;

use super::super::util::{optional, required, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::values::{real_f64s, tensor_type};

/// `(x_min, y_min, x_max, y_max)` of a box.
fn corners(b: &[f64], center: bool) -> (f64, f64, f64, f64) {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        (b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh)
    } else {
        (
            b[1].min(b[3]),
            b[0].min(b[2]),
            b[1].max(b[3]),
            b[0].max(b[2]),
        )
    }
}

/// Whether two boxes overlap by more than `threshold` (intersection over union).
fn suppresses(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64), threshold: f64) -> bool {
    let (ix0, iy0) = (a.0.max(b.0), a.1.max(b.1));
    let (ix1, iy1) = (a.2.min(b.2), a.3.min(b.3));
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let area = |c: (f64, f64, f64, f64)| (c.2 - c.0) * (c.3 - c.1);
    let (a1, a2) = (area(a), area(b));
    let union = a1 + a2 - inter;
    if inter <= 0.0 || a1 <= 0.0 || a2 <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

pub(super) fn eval_nms(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (boxes, scores) = (required(inputs, 0)?, required(inputs, 1)?);
    let (&[b, n, 4], &[sb, c, sn]) = (boxes.shape(), scores.shape()) else {
        return Err(ctx.error(format!(
            "boxes {:?} and scores {:?} are not (B, N, 4) and (B, C, N)",
            boxes.shape(),
            scores.shape()
        )));
    };
    if sb != b || sn != n {
        return Err(ctx.error(format!(
            "boxes {:?} and scores {:?} disagree",
            boxes.shape(),
            scores.shape()
        )));
    }
    let first = |i: usize| -> Result<Option<f64>> {
        Ok(match optional(inputs, i) {
            Some(t) if !t.is_empty() => real_f64s(t, "NonMaxSuppression")?.first().copied(),
            _ => None,
        })
    };
    let max_out = match optional(inputs, 2) {
        Some(t) if !t.is_empty() => to_i64s(t)?.first().copied().unwrap_or(0).max(0) as usize,
        _ => 0,
    };
    let iou = first(3)?.unwrap_or(0.0);
    let score_min = first(4)?;
    let center = ctx.node.attr_int("center_point_box", 0)? != 0;
    let (bv, sv) = (
        real_f64s(boxes, "NonMaxSuppression")?,
        real_f64s(scores, "NonMaxSuppression")?,
    );
    let most = b
        .saturating_mul(c)
        .saturating_mul(n.min(max_out))
        .saturating_mul(3);
    let mut selected: Vec<i64> = try_with_capacity(most)?;
    let mut order = try_with_capacity::<usize>(n)?;
    let mut kept: Vec<(f64, f64, f64, f64)> = try_with_capacity(n.min(max_out))?;
    for bi in 0..b {
        for ci in 0..c {
            let s = &sv[(bi * c + ci) * n..][..n];
            order.clear();
            order.extend((0..n).filter(|&i| score_min.is_none_or(|m| s[i] > m)));
            order.sort_by(|&i, &j| s[j].total_cmp(&s[i]).then(i.cmp(&j)));
            kept.clear();
            for &i in &order {
                if kept.len() >= max_out {
                    break;
                }
                let bx = corners(&bv[(bi * n + i) * 4..][..4], center);
                if kept.iter().all(|&k| !suppresses(bx, k, iou)) {
                    kept.push(bx);
                    selected.extend([bi as i64, ci as i64, i as i64]);
                }
            }
        }
    }
    let rows = selected.len() / 3;
    Ok(vec![Tensor::from_vec(
        DataType::Int64,
        &[rows, 3],
        selected,
    )?])
}

pub(super) fn infer_nms(_ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![tensor_type(
        Some(DataType::Int64),
        Some(vec![Dim::Unknown, Dim::Known(3)]),
    )])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;

    use super::*;

    #[test]
    fn an_overlapping_lower_score_is_suppressed() {
        let boxes = Tensor::from_vec(
            DataType::Float,
            &[1, 3, 4],
            vec![
                0.0f32, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, 5.0, 1.0, 6.0,
            ],
        )
        .unwrap();
        let scores = Tensor::from_vec(DataType::Float, &[1, 1, 3], vec![0.9f32, 0.8, 0.7]).unwrap();
        let max = Tensor::from_vec(DataType::Int64, &[1], vec![3i64]).unwrap();
        let iou = Tensor::from_vec(DataType::Float, &[1], vec![0.5f32]).unwrap();
        let node = Node::new("NonMaxSuppression", "n", ["b", "s", "m", "i"], ["y"]);
        let y = eval_node(
            &node,
            11,
            &[Some(&boxes), Some(&scores), Some(&max), Some(&iou)],
        )
        .unwrap();
        assert_eq!(y[0].as_slice::<i64>().unwrap(), &[0, 0, 0, 0, 0, 2]);
    }
}
