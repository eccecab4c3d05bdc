//! `DeformConv` (opsets 19, 22): a 2-D convolution whose kernel taps are moved, per output
//! position, by learned offsets and optionally scaled by a mask.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__DeformConv.html>.
//!
//! `X` is `(N, C, H, W)`, `W` `(oC, C / group, kH, kW)`, `offset`
//! `(N, offset_group * 2 * kH * kW, oH, oW)` (for each offset group and tap, the row offset then
//! the column offset), `B` `(oC)` and `mask` `(N, offset_group * kH * kW, oH, oW)`. Tap `(i, j)`
//! of output `(y, x)` reads the input at `(y * stride - pad_top + i * dilation + dy,
//! x * stride - pad_left + j * dilation + dx)` by bilinear interpolation with zeros outside the
//! map (as `GridSample` with `align_corners = 1`, which the reference uses). The sampled,
//! masked taps form the columns of an im2col matrix; each group is then one matrix product
//! with its weights. Only 2-D maps (the reference implements no other); computes in `f64`.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_vec, Tensor};

use super::super::util::{optional, required};
use super::super::{EvalCtx, InferCtx};
use super::blas::{gemm, Mat};
use super::values::{checked_product, input_dims, real_f64s, store_f64s, tensor_type};

/// `[top, left, bottom, right]` pads, `[h, w]` strides and dilations, groups.
struct Params {
    pads: [usize; 4],
    strides: [usize; 2],
    dilations: [usize; 2],
    group: usize,
    offset_group: usize,
}

fn params(ctx: &EvalCtx<'_>, kernel: [usize; 2]) -> Result<Params> {
    let node = ctx.node;
    let ints = |name: &str, want: usize, fill: i64, min: i64| -> Result<Vec<usize>> {
        let v = node
            .attr_ints(name)?
            .map_or_else(|| vec![fill; want], <[i64]>::to_vec);
        if v.len() != want || v.iter().any(|&x| x < min) {
            return Err(ctx.error(format!(
                "{name} {v:?} is not {want} values of at least {min}"
            )));
        }
        Ok(v.iter().map(|&x| x as usize).collect())
    };
    if let Some(k) = node.attr_ints("kernel_shape")? {
        if k.len() != 2 || k[0] as usize != kernel[0] || k[1] as usize != kernel[1] {
            return Err(ctx.error(format!("kernel_shape {k:?} is not W's {kernel:?}")));
        }
    }
    let count = |name: &str| -> Result<usize> {
        let v = node.attr_int(name, 1)?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| ctx.error(format!("{name} = {v} is not positive")))
    };
    let (p, s, d) = (
        ints("pads", 4, 0, 0)?,
        ints("strides", 2, 1, 1)?,
        ints("dilations", 2, 1, 1)?,
    );
    Ok(Params {
        pads: [p[0], p[1], p[2], p[3]],
        strides: [s[0], s[1]],
        dilations: [d[0], d[1]],
        group: count("group")?,
        offset_group: count("offset_group")?,
    })
}

/// The output size along one dim, `None` when the kernel does not fit.
fn out_size(
    input: usize,
    pad: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
) -> Option<usize> {
    let span = dilation
        .checked_mul(kernel.checked_sub(1)?)?
        .checked_add(1)?;
    let room = input.checked_add(pad)?.checked_sub(span)?;
    Some(room / stride + 1)
}

/// The bilinear sample of the `h x w` plane at `(y, x)`, zero outside it.
fn bilinear(plane: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    let (y0, x0) = (y.floor(), x.floor());
    let (ly, lx) = (y - y0, x - x0);
    let at = |yy: f64, xx: f64| -> f64 {
        if yy >= 0.0 && xx >= 0.0 && yy < h as f64 && xx < w as f64 {
            plane[yy as usize * w + xx as usize]
        } else {
            0.0
        }
    };
    at(y0, x0) * (1.0 - ly) * (1.0 - lx)
        + at(y0, x0 + 1.0) * (1.0 - ly) * lx
        + at(y0 + 1.0, x0) * ly * (1.0 - lx)
        + at(y0 + 1.0, x0 + 1.0) * ly * lx
}

pub(super) fn eval_deform_conv(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, wt, offset) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let (bias, mask) = (optional(inputs, 3), optional(inputs, 4));
    let (&[n, c, h, w], &[oc, cg, kh, kw]) = (x.shape(), wt.shape()) else {
        return Err(ctx.error(format!(
            "X {:?} and W {:?} are not 2-D maps and kernels (rank 4)",
            x.shape(),
            wt.shape()
        )));
    };
    let p = params(ctx, [kh, kw])?;
    let (g, og) = (p.group, p.offset_group);
    if cg.checked_mul(g) != Some(c) || oc % g != 0 || c % og != 0 {
        return Err(ctx.error(format!(
            "X {:?}, W {:?}, group {g} and offset_group {og} do not match",
            x.shape(),
            wt.shape()
        )));
    }
    let too_large = || ctx.error("the output size overflows");
    let oh = p.pads[0]
        .checked_add(p.pads[2])
        .and_then(|pad| out_size(h, pad, kh, p.strides[0], p.dilations[0]));
    let ow = p.pads[1]
        .checked_add(p.pads[3])
        .and_then(|pad| out_size(w, pad, kw, p.strides[1], p.dilations[1]));
    let (Some(oh), Some(ow)) = (oh, ow) else {
        return Err(ctx.error("the kernel does not fit the padded input"));
    };
    let taps = kh * kw;
    let og_taps = og.checked_mul(taps).ok_or_else(too_large)?;
    let want_offset = [n, og_taps.checked_mul(2).ok_or_else(too_large)?, oh, ow];
    if offset.shape() != want_offset {
        return Err(ctx.error(format!(
            "offset {:?} is not {want_offset:?}",
            offset.shape()
        )));
    }
    let want_mask = [n, og_taps, oh, ow];
    if let Some(m) = mask.filter(|m| m.shape() != want_mask) {
        return Err(ctx.error(format!("mask {:?} is not {want_mask:?}", m.shape())));
    }
    if let Some(b) = bias.filter(|b| b.shape() != [oc]) {
        return Err(ctx.error(format!("B {:?} is not [{oc}]", b.shape())));
    }
    let xv = real_f64s(x, "DeformConv")?;
    let wv = real_f64s(wt, "DeformConv")?;
    let offv = real_f64s(offset, "DeformConv")?;
    let maskv = mask.map(|m| real_f64s(m, "DeformConv")).transpose()?;
    let biasv = bias.map(|b| real_f64s(b, "DeformConv")).transpose()?;
    let positions = oh * ow;
    let rows = c.checked_mul(taps).ok_or_else(too_large)?;
    // The columns of one image: row `ch * taps + tap`, column `y * ow + x`.
    let mut cols = try_vec(checked_product(&[rows, positions])?, 0.0f64)?;
    let mut out = try_vec(checked_product(&[n, oc, positions])?, 0.0f64)?;
    let (cpo, ocg) = (c / og, oc / g);
    for b in 0..n {
        for ch in 0..c {
            let plane = &xv[(b * c + ch) * h * w..][..h * w];
            let grp = ch / cpo;
            for tap in 0..taps {
                let (i, j) = (tap / kw, tap % kw);
                let dy = &offv[((b * og + grp) * 2 * taps + 2 * tap) * positions..][..positions];
                let dx =
                    &offv[((b * og + grp) * 2 * taps + 2 * tap + 1) * positions..][..positions];
                let m = maskv
                    .as_ref()
                    .map(|m| &m[((b * og + grp) * taps + tap) * positions..][..positions]);
                let row = &mut cols[(ch * taps + tap) * positions..][..positions];
                for (pos, v) in row.iter_mut().enumerate() {
                    let (y, xx) = (pos / ow, pos % ow);
                    let sy = (y * p.strides[0] + i * p.dilations[0]) as f64 - p.pads[0] as f64;
                    let sx = (xx * p.strides[1] + j * p.dilations[1]) as f64 - p.pads[1] as f64;
                    let s = bilinear(plane, h, w, sy + dy[pos], sx + dx[pos]);
                    *v = m.map_or(s, |m| s * m[pos]);
                }
            }
        }
        for gi in 0..g {
            let k = cg * taps;
            let a = Mat::row_major(&wv[gi * ocg * k..][..ocg * k], ocg, k)?;
            let bm = Mat::row_major(&cols[gi * k * positions..][..k * positions], k, positions)?;
            let dst = &mut out[(b * oc + gi * ocg) * positions..][..ocg * positions];
            gemm(1.0, a, bm, 0.0, dst, positions)?;
        }
        if let Some(bias) = &biasv {
            for (o, &bv) in bias.iter().enumerate() {
                for v in &mut out[(b * oc + o) * positions..][..positions] {
                    *v += bv;
                }
            }
        }
    }
    Ok(vec![store_f64s(x.dtype(), &[n, oc, oh, ow], &out)?])
}

pub(super) fn infer_deform_conv(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    // The output's spatial dims are the offset's.
    let dims = match (input_dims(ctx, 0), input_dims(ctx, 1), input_dims(ctx, 2)) {
        (Some(x), Some(w), Some(off)) if x.len() == 4 && w.len() == 4 && off.len() == 4 => {
            Some(vec![
                x[0].clone(),
                w[0].clone(),
                off[2].clone(),
                off[3].clone(),
            ])
        }
        (_, Some(w), Some(off)) if w.len() == 4 && off.len() == 4 => Some(vec![
            off[0].clone(),
            w[0].clone(),
            off[2].clone(),
            off[3].clone(),
        ]),
        _ => None::<Vec<Dim>>,
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
    fn zero_offsets_are_a_plain_convolution() {
        // A 1x1x2x2 map, a 1x1x2x2 kernel of ones, zero offsets: the sum of the map.
        let x =
            Tensor::from_vec(DataType::Float, &[1, 1, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let w = Tensor::from_vec(DataType::Float, &[1, 1, 2, 2], vec![1.0f32; 4]).unwrap();
        let off = Tensor::from_vec(DataType::Float, &[1, 8, 1, 1], vec![0.0f32; 8]).unwrap();
        let node = Node::new("DeformConv", "d", ["x", "w", "o"], ["y"]);
        let y = eval_node(&node, 19, &[Some(&x), Some(&w), Some(&off)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 1, 1]);
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[10.0]);
    }

    #[test]
    fn a_half_pixel_offset_interpolates() {
        // Every tap moved half a pixel right: the right column reads half zeros past the edge.
        let x =
            Tensor::from_vec(DataType::Float, &[1, 1, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let w = Tensor::from_vec(DataType::Float, &[1, 1, 2, 2], vec![1.0f32; 4]).unwrap();
        let off: Vec<f32> = (0..8).map(|k| if k % 2 == 1 { 0.5 } else { 0.0 }).collect();
        let off = Tensor::from_vec(DataType::Float, &[1, 8, 1, 1], off).unwrap();
        let node = Node::new("DeformConv", "d", ["x", "w", "o"], ["y"]);
        let y = eval_node(&node, 19, &[Some(&x), Some(&w), Some(&off)]).unwrap();
        // 1.5 + 1.0 + 3.5 + 2.0
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[8.0]);
    }
}
