//! `DepthToSpace` (opset 1, `mode` DCR/CRD from 11) and `SpaceToDepth` (1, `mode` from 28):
//! moving blocks between the channel axis and the two spatial axes of an NCHW tensor.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__DepthToSpace.html>,
//! <https://onnx.ai/onnx/operators/onnx__SpaceToDepth.html>.
//!
//! Both are a reshape to six dims, a transpose and a reshape back, exactly as the specs write
//! them; `DCR` (depth-column-row, the default) and `CRD` differ only in the six-dim layout.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

use super::super::util::required;
use super::super::{Attributes, EvalCtx, InferCtx};
use super::runs::{dim_times, in_dims, in_elem, permute, to_usize, typed};

/// The attributes of a `DepthToSpace` or `SpaceToDepth` node: the block size, its square (both
/// at most 2^63-1, the largest ONNX dim) and whether the mode is `CRD`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Blocks {
    b: usize,
    bb: usize,
    crd: bool,
}

impl Attributes for Blocks {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<Blocks> {
        let b = to_usize(node.attr_int("blocksize", 0)?, "blocksize")?;
        if b == 0 {
            return Err(crate::Error::Eval("needs a positive 'blocksize'".into()));
        }
        let bb = b
            .checked_mul(b)
            .filter(|&v| v <= i64::MAX as usize)
            .ok_or_else(|| crate::Error::Eval(format!("blocksize {b} squared is too large")))?;
        let crd = match node.attr_string("mode")?.unwrap_or("DCR") {
            "DCR" => false,
            "CRD" => true,
            other => return Err(crate::Error::Eval(format!("unknown mode '{other}'"))),
        };
        Ok(Blocks { b, bb, crd })
    }
}

/// `a * b` as an output dim, or an error naming `what`.
fn times(a: usize, b: usize, what: &str) -> Result<usize> {
    a.checked_mul(b)
        .filter(|&v| v <= i64::MAX as usize)
        .ok_or_else(|| crate::Error::Eval(format!("{what} {a} x {b} is too large")))
}

/// The four dims of an NCHW input.
fn nchw(data: &Tensor) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(data.shape()).map_err(|_| {
        crate::Error::Eval(format!("input must have rank 4, found {:?}", data.shape()))
    })
}

pub(super) fn eval_depth_to_space(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let Blocks { b, bb, crd } = *ctx.attrs::<Blocks>()?;
    let [n, c, h, w] = nchw(data)?;
    if c % bb != 0 {
        return Err(ctx.error(format!(
            "channels {c} are not a multiple of blocksize² {bb}"
        )));
    }
    let c2 = c / bb;
    let (h2, w2) = (times(h, b, "height")?, times(w, b, "width")?);
    let (six, perm) = if crd {
        ([n, c2, b, b, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        ([n, b, b, c2, h, w], [0, 3, 4, 1, 5, 2])
    };
    let moved = permute(&data.clone().into_shape(&six)?, &perm)?;
    Ok(vec![moved.into_shape(&[n, c2, h2, w2])?])
}

pub(super) fn eval_space_to_depth(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let data = required(inputs, 0)?;
    let Blocks { b, bb, crd } = *ctx.attrs::<Blocks>()?;
    let [n, c, h, w] = nchw(data)?;
    let c2 = times(c, bb, "channels")?;
    if h % b != 0 || w % b != 0 {
        return Err(ctx.error(format!(
            "spatial dims {h}x{w} are not multiples of blocksize {b}"
        )));
    }
    let six = [n, c, h / b, b, w / b, b];
    let perm = if crd {
        [0, 1, 3, 5, 2, 4]
    } else {
        [0, 3, 5, 1, 2, 4]
    };
    let moved = permute(&data.clone().into_shape(&six)?, &perm)?;
    Ok(vec![moved.into_shape(&[n, c2, h / b, w / b])?])
}

/// Output dims of either operator: `to_space` moves channels into the spatial dims.
fn infer_blocks(ctx: &InferCtx<'_>, to_space: bool) -> Result<Vec<TensorType>> {
    let Blocks { b, bb, .. } = *ctx.attrs::<Blocks>()?;
    let (b, bb) = (b as i64, bb as i64);
    let shrink = |d: &Dim, k: i64| match d {
        Dim::Known(v) if v % k == 0 => Dim::Known(v / k),
        _ => Dim::Unknown,
    };
    let dims = in_dims(ctx, 0).map(|d| match d {
        [n, c, h, w] if to_space => {
            vec![n.clone(), shrink(c, bb), dim_times(h, b), dim_times(w, b)]
        }
        [n, c, h, w] => vec![n.clone(), dim_times(c, bb), shrink(h, b), shrink(w, b)],
        _ => vec![Dim::Unknown; 4],
    });
    Ok(vec![typed(in_elem(ctx, 0), dims)])
}

pub(super) fn infer_depth_to_space(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_blocks(ctx, true)
}

pub(super) fn infer_space_to_depth(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_blocks(ctx, false)
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn run(op: &str, mode: &str, x: &Tensor, opset: i64) -> crate::Result<Tensor> {
        let node = Node::new(op, "d", ["x"], ["y"])
            .with_attr("blocksize", AttrValue::Int(2))
            .with_attr("mode", AttrValue::String(mode.into()));
        Ok(eval_node(&node, opset, &[Some(x)])?.remove(0))
    }

    #[test]
    fn depth_to_space_follows_the_onnx_examples_and_inverts() {
        // The spec's example: x = arange(48).reshape(1, 8, 2, 3).
        let x = Tensor::from_vec(
            DataType::Float,
            &[1, 8, 2, 3],
            (0..48).map(|v| v as f32).collect::<Vec<_>>(),
        )
        .unwrap();
        let dcr = run("DepthToSpace", "DCR", &x, 13).unwrap();
        assert_eq!(dcr.shape(), &[1, 2, 4, 6]);
        assert_eq!(
            &dcr.to_vec::<f32>().unwrap()[..12],
            &[0., 12., 1., 13., 2., 14., 24., 36., 25., 37., 26., 38.]
        );
        let crd = run("DepthToSpace", "CRD", &x, 13).unwrap();
        assert_eq!(
            &crd.to_vec::<f32>().unwrap()[..12],
            &[0., 6., 1., 7., 2., 8., 12., 18., 13., 19., 14., 20.]
        );
        for mode in ["DCR", "CRD"] {
            let there = run("DepthToSpace", mode, &x, 28).unwrap();
            assert_eq!(run("SpaceToDepth", mode, &there, 28).unwrap(), x);
        }
        let odd = Tensor::zeros(DataType::Float, &[1, 6, 2, 2]).unwrap();
        assert!(run("DepthToSpace", "DCR", &odd, 13)
            .unwrap_err()
            .to_string()
            .contains("multiple"));
    }
}
