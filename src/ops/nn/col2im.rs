//! `Col2Im` (opset 18): sums sliding blocks back into an image, the inverse layout of im2col.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Col2Im.html>.
//!
//! The input is `(N, C * prod(block_shape), L)` with `L` the number of block positions that
//! `image_shape`, `block_shape`, `dilations`, `pads` (begins then ends) and `strides` give; every
//! value is added at its image position (positions in the padding are dropped). N-D; computes in
//! `f64`.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_vec, Tensor};

use super::super::util::{required, strides as row_strides, to_i64s, unsupported_type};
use super::super::{EvalCtx, InferCtx};
use super::values::{input_dims, store_f64s, tensor_type};
use crate::ops::num::{dispatch_real, Float, Real};

/// A per-dim attribute of `r` values (default `fill`).
fn per_dim(ctx: &EvalCtx<'_>, name: &str, r: usize, fill: i64) -> Result<Vec<i64>> {
    let want = if name == "pads" { 2 * r } else { r };
    let v = ctx
        .node
        .attr_ints(name)?
        .map_or_else(|| vec![fill; want], <[i64]>::to_vec);
    if v.len() != want || v.iter().any(|&x| x < 0 || (name != "pads" && x == 0)) {
        return Err(ctx.error(format!("{name} {v:?} is not {want} valid values")));
    }
    Ok(v)
}

pub(super) fn eval_col2im(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let image = to_i64s(required(inputs, 1)?)?;
    let block = to_i64s(required(inputs, 2)?)?;
    let r = image.len();
    if r == 0 || block.len() != r || image.iter().chain(&block).any(|&d| d <= 0) {
        return Err(ctx.error(format!(
            "image_shape {image:?} and block_shape {block:?} do not match"
        )));
    }
    let (dil, pads, st) = (
        per_dim(ctx, "dilations", r, 1)?,
        per_dim(ctx, "pads", r, 0)?,
        per_dim(ctx, "strides", r, 1)?,
    );
    let too_large = || ctx.error("image_shape, block_shape and the attributes overflow");
    let cols: Vec<i64> = (0..r)
        .map(|i| {
            let span = dil[i].checked_mul(block[i] - 1)?.checked_add(1)?;
            let room = image[i].checked_add(pads[i])?.checked_add(pads[i + r])?;
            Some(room.checked_sub(span)? / st[i] + 1)
        })
        .collect::<Option<_>>()
        .ok_or_else(too_large)?;
    let k = block
        .iter()
        .try_fold(1i64, |a, &b| a.checked_mul(b))
        .ok_or_else(too_large)?;
    let l = cols
        .iter()
        .try_fold(1i64, |a, &b| a.checked_mul(b.max(0)))
        .ok_or_else(too_large)?;
    let &[n, ck, len] = x.shape() else {
        return Err(ctx.error(format!("input {:?} is not (N, C * K, L)", x.shape())));
    };
    if cols.iter().any(|&c| c < 1) || ck as i64 % k != 0 || len as i64 != l {
        return Err(ctx.error(format!(
            "input {:?} does not hold the {cols:?} blocks of {block:?}",
            x.shape()
        )));
    }
    let (k, c) = (k as usize, ck / k as usize);
    let image: Vec<usize> = image.iter().map(|&d| d as usize).collect();
    let plane = super::values::checked_product(&image)?;
    let block_u: Vec<usize> = block.iter().map(|&d| d as usize).collect();
    let cols_u: Vec<usize> = cols.iter().map(|&d| d as usize).collect();
    let (kst, cst, ist) = (
        row_strides(&block_u),
        row_strides(&cols_u),
        row_strides(&image),
    );
    let dtype = x.dtype();
    let xv: Vec<f64> = dispatch_real!(dtype, R => R::load(x)?.iter().map(|v| v.to_f64()).collect(),
        _ => return Err(unsupported_type("Col2Im", dtype)));
    let mut out = try_vec(super::values::checked_product(&[n, c, plane])?, 0.0f64)?;
    for b in 0..n {
        for ch in 0..c {
            let dst = &mut out[(b * c + ch) * plane..][..plane];
            for kk in 0..k {
                let src = &xv[((b * ck) + ch * k + kk) * len..][..len];
                for (pos, &v) in src.iter().enumerate() {
                    let mut at = 0usize;
                    let mut inside = true;
                    for i in 0..r {
                        let ko = (kk / kst[i] % block_u[i]) as i64;
                        let co = (pos / cst[i] % cols_u[i]) as i64;
                        let p = co * st[i] - pads[i] + ko * dil[i];
                        if p < 0 || p >= image[i] as i64 {
                            inside = false;
                            break;
                        }
                        at += p as usize * ist[i];
                    }
                    if inside {
                        dst[at] += v;
                    }
                }
            }
        }
    }
    let mut shape = vec![n, c];
    shape.extend_from_slice(&image);
    Ok(vec![store_f64s(dtype, &shape, &out)?])
}

pub(super) fn infer_col2im(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let dims = match (input_dims(ctx, 0), ctx.constant(1), ctx.constant(2)) {
        (Some(x), Some(img), Some(blk)) if x.len() == 3 => {
            let (img, blk) = (to_i64s(img)?, to_i64s(blk)?);
            let k: i64 = blk.iter().product();
            let c = match x[1].known() {
                Some(ck) if k > 0 => Dim::Known(ck / k),
                _ => Dim::Unknown,
            };
            let mut d = vec![x[0].clone(), c];
            d.extend(img.iter().map(|&v| Dim::Known(v)));
            Some(d)
        }
        _ => None,
    };
    Ok(vec![tensor_type(elem, dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn overlapping_blocks_add_up() {
        // A 1x3 image from two 1x2 blocks at stride 1: the middle pixel is covered twice.
        let x = Tensor::from_vec(DataType::Float, &[1, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let img = Tensor::from_vec(DataType::Int64, &[2], vec![1i64, 3]).unwrap();
        let blk = Tensor::from_vec(DataType::Int64, &[2], vec![1i64, 2]).unwrap();
        let node = Node::new("Col2Im", "c", ["x", "i", "b"], ["y"]);
        let y = eval_node(&node, 18, &[Some(&x), Some(&img), Some(&blk)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 1, 3]);
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1.0, 5.0, 4.0]);
    }
}
