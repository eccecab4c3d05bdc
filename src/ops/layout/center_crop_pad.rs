//! `CenterCropPad` (opset 18): crops or zero-pads the given axes to `shape`, keeping the centre.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__CenterCropPad.html>.
//!
//! Along each axis in `axes` (every axis by default) a longer input is cropped starting at
//! `(len - size) / 2` (rounded down) and a shorter one is placed at `(size - len) / 2` in zeros.
//! Every element type; the copy is [`super::runs::gather_axes`].

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::ops::util::{required, strides, to_i64s};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;

use super::runs::{
    const_ints, gather_axes, in_dims, in_elem, normalize_axes, to_usize, typed, AxisRead,
};

/// The target size of every axis: `shape` on `axes`, the input's elsewhere.
fn target(ctx_axes: Option<&[i64]>, shape: &[i64], dims: usize) -> Result<Vec<Option<i64>>> {
    let axes = match ctx_axes {
        Some(a) => normalize_axes(a, dims)?,
        None => (0..dims).collect(),
    };
    if axes.len() != shape.len() {
        return Err(crate::Error::Eval(format!(
            "shape holds {} sizes for {} axes",
            shape.len(),
            axes.len()
        )));
    }
    let mut out = vec![None; dims];
    for (&a, &s) in axes.iter().zip(shape) {
        out[a] = Some(s);
    }
    Ok(out)
}

pub(super) fn eval_center_crop_pad(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let sizes = to_i64s(required(inputs, 1)?)?;
    let shape = data.shape();
    let want = target(ctx.node.attr_ints("axes")?, &sizes, shape.len())?;
    let st = strides(shape);
    let reads = (0..shape.len())
        .map(|d| {
            let n = shape[d];
            let size = match want[d] {
                Some(s) => to_usize(s, "shape")?,
                None => n,
            };
            Ok(if size <= n {
                let start = (n - size) / 2;
                AxisRead::map(size, st[d], move |i| Some(i + start))
            } else {
                let start = (size - n) / 2;
                AxisRead::map(size, st[d], move |i| {
                    i.checked_sub(start).filter(|&j| j < n)
                })
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let zero = Tensor::zeros(data.dtype(), &[1])?;
    Ok(vec![gather_axes(data, &reads, Some(&zero))?])
}

pub(super) fn infer_center_crop_pad(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = in_elem(ctx, 0);
    let (Some(dims), Some(sizes)) = (in_dims(ctx, 0), const_ints(ctx, 1)) else {
        return Ok(vec![typed(elem, None)]);
    };
    let want = target(ctx.node.attr_ints("axes")?, &sizes, dims.len())?;
    let out = dims
        .iter()
        .zip(want)
        .map(|(d, w)| w.map_or_else(|| d.clone(), Dim::Known))
        .collect();
    Ok(vec![typed(elem, Some(out))])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn crops_and_pads_around_the_centre() {
        let x = Tensor::from_vec(DataType::Int32, &[1, 4], vec![1i32, 2, 3, 4]).unwrap();
        let s = Tensor::from_vec(DataType::Int64, &[2], vec![3i64, 2]).unwrap();
        let node = Node::new("CenterCropPad", "c", ["x", "s"], ["y"]);
        let y = eval_node(&node, 18, &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(y[0].shape(), &[3, 2]);
        assert_eq!(y[0].as_slice::<i32>().unwrap(), &[0, 0, 2, 3, 0, 0]);
    }
}
