//! `TensorScatter` (opset 24): writes `update` into a copy of `past_cache` along the sequence
//! `axis`, at each batch's `write_indices` offset (zero by default).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__TensorScatter.html>.
//!
//! `linear` mode requires every write to fit (`index + seq_len <= max_seq_len`); `circular`
//! wraps positions modulo the cache length. Every element type.

use crate::error::Result;
use crate::ir::TensorType;
use crate::ops::util::{normalize_axis, optional, required, to_i64s};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;

use super::runs::{in_dims, in_elem, typed};

pub(super) fn eval_tensor_scatter(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (past, update) = (required(inputs, 0)?, required(inputs, 1)?);
    let circular = match ctx.node.attr_string("mode")?.unwrap_or("linear") {
        "linear" => false,
        "circular" => true,
        other => return Err(ctx.error(format!("mode '{other}' is not linear or circular"))),
    };
    let (ps, us) = (past.shape(), update.shape());
    let axis = normalize_axis(ctx.node.attr_int("axis", -2)?, ps.len())?;
    if axis == 0 || us.len() != ps.len() || past.dtype() != update.dtype() {
        return Err(ctx.error(format!(
            "update {us:?} does not fit past_cache {ps:?} along axis {axis}"
        )));
    }
    for (d, (&p, &u)) in ps.iter().zip(us).enumerate() {
        if (d == axis && u > p) || (d != axis && u != p) {
            return Err(ctx.error(format!(
                "update {us:?} does not fit past_cache {ps:?} along axis {axis}"
            )));
        }
    }
    let batch = ps[0];
    let indices = match optional(inputs, 2) {
        Some(w) => to_i64s(w)?,
        None => vec![0; batch],
    };
    if indices.len() != batch {
        return Err(ctx.error(format!(
            "write_indices holds {} values for a batch of {batch}",
            indices.len()
        )));
    }
    let (max_len, len) = (ps[axis], us[axis]);
    let inner: usize = ps[axis + 1..].iter().product();
    let prefixes: usize = ps[1..axis].iter().product();
    let mut out = past.clone();
    for (b, &start) in indices.iter().enumerate() {
        for pre in 0..prefixes {
            for s in 0..len {
                let mut at = start.saturating_add(s as i64);
                if circular && max_len > 0 {
                    at = at.rem_euclid(max_len as i64);
                }
                let at = usize::try_from(at)
                    .ok()
                    .filter(|&a| a < max_len)
                    .ok_or_else(|| {
                        ctx.error(format!(
                            "write index {start} + {s} is outside the cache of {max_len}"
                        ))
                    })?;
                let row = b * prefixes + pre;
                let dst = (row * max_len + at) * inner;
                let src = (row * len + s) * inner;
                for k in 0..inner {
                    out.copy_element_from(dst + k, update, src + k)?;
                }
            }
        }
    }
    Ok(vec![out])
}

pub(super) fn infer_tensor_scatter(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    Ok(vec![typed(
        in_elem(ctx, 0),
        in_dims(ctx, 0).map(<[_]>::to_vec),
    )])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn circular_writes_wrap_around() {
        let past = Tensor::from_vec(DataType::Int32, &[1, 3, 1], vec![0i32; 3]).unwrap();
        let up = Tensor::from_vec(DataType::Int32, &[1, 2, 1], vec![7i32, 8]).unwrap();
        let idx = Tensor::from_vec(DataType::Int64, &[1], vec![2i64]).unwrap();
        let node = Node::new("TensorScatter", "t", ["p", "u", "i"], ["y"])
            .with_attr("mode", AttrValue::String(b"circular".to_vec()));
        let y = eval_node(&node, 24, &[Some(&past), Some(&up), Some(&idx)]).unwrap();
        assert_eq!(y[0].as_slice::<i32>().unwrap(), &[8, 0, 7]);
        let node = Node::new("TensorScatter", "t", ["p", "u", "i"], ["y"]);
        assert!(eval_node(&node, 24, &[Some(&past), Some(&up), Some(&idx)]).is_err());
    }
}
