//! `Trilu` (opset 14): the upper or lower triangle of the last two dims, the rest zeroed.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Trilu.html>.
//!
//! Element `(i, j)` is kept when `j - i >= k` (`upper`, the default) or `j - i <= k` (lower).
//! "Zero" is the all-clear element of the type (the empty string for strings).

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::util::{optional, required, scalar_i64};
use super::super::{EvalCtx, InferCtx};
use super::runs::{in_dims, in_elem, typed, Writer};

pub(super) fn eval_trilu(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let k = optional(inputs, 1)
        .map(scalar_i64)
        .transpose()?
        .unwrap_or(0);
    let upper = ctx.node.attr_int("upper", 1)? != 0;
    let shape = data.shape();
    let &[.., rows, cols] = shape else {
        return Err(ctx.error("input must have rank 2 or more"));
    };
    let zero = Tensor::zeros(data.dtype(), &[1])?;
    let sources = [data, &zero];
    let mut out = Writer::new(data.dtype(), shape, &sources)?;
    // An overflowing matrix size means another dim is 0: there are no matrices.
    let matrices = match rows.checked_mul(cols) {
        Some(n) if n > 0 => data.len() / n,
        _ => 0,
    };
    for m in 0..matrices {
        for i in 0..rows {
            let start = (m * rows + i) * cols;
            // Row `i` is split at the first column kept (upper) or dropped (lower).
            let edge = (i as i64)
                .saturating_add(k)
                .saturating_add(i64::from(!upper));
            let split = edge.clamp(0, cols as i64) as usize;
            if upper {
                out.repeat(1, 0, split)?;
                out.copy(0, start + split, cols - split)?;
            } else {
                out.copy(0, start, split)?;
                out.repeat(1, 0, cols - split)?;
            }
        }
    }
    Ok(vec![out.finish()?])
}

pub(super) fn infer_trilu(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![typed(
        in_elem(ctx, 0),
        in_dims(ctx, 0).map(<[Dim]>::to_vec),
    )])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn trilu(upper: bool, k: i64) -> Vec<i32> {
        let x = Tensor::from_vec(DataType::Int32, &[3, 4], (1..=12).collect::<Vec<i32>>()).unwrap();
        let k = Tensor::scalar(DataType::Int64, k).unwrap();
        let node = Node::new("Trilu", "t", ["x", "k"], ["y"])
            .with_attr("upper", AttrValue::Int(upper.into()));
        eval_node(&node, 14, &[Some(&x), Some(&k)]).unwrap()[0]
            .to_vec::<i32>()
            .unwrap()
    }

    #[test]
    fn triangles_with_offsets() {
        assert_eq!(trilu(true, 0), [1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12]);
        assert_eq!(trilu(true, 1), [0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12]);
        assert_eq!(trilu(true, -1), [1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12]);
        assert_eq!(trilu(false, 0), [1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0]);
        assert_eq!(trilu(false, -1), [0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0]);
        assert_eq!(trilu(false, 10), (1..=12).collect::<Vec<i32>>());
        assert_eq!(trilu(true, 10), [0; 12]);
        let v = Tensor::zeros(DataType::Int32, &[3]).unwrap();
        let node = Node::new("Trilu", "t", ["x"], ["y"]);
        assert!(eval_node(&node, 14, &[Some(&v)])
            .unwrap_err()
            .to_string()
            .contains("rank 2"));
    }
}
