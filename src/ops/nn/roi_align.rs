//! `RoiAlign` (opsets 10, 16, 22): pools each region of interest of a feature map into a fixed
//! `output_height x output_width` grid by bilinear sampling.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__RoiAlign.html>.
//!
//! `X` is `(N, C, H, W)`, `rois` `(R, 4)` as `(x1, y1, x2, y2)` in input coordinates (scaled by
//! `spatial_scale`), `batch_indices` `(R,)` the image of each region. Each output cell averages
//! (`mode = avg`) or takes the maximum of (`max`) `sampling_ratio x sampling_ratio` bilinear
//! samples (adaptive, `ceil(roi size / output size)`, when the ratio is 0), as onnxruntime's
//! kernel does: samples more than one pixel outside the map count as zero, and in `max` mode a
//! sample is the largest of its four weighted corners. `coordinate_transformation_mode`
//! (opset 16) `half_pixel` shifts the region by half a pixel and lets it be smaller than one
//! pixel; `output_half_pixel` (and every opset-10 node) does not. Computes in `f64`.

use crate::error::Result;
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_vec, Tensor};

use super::super::util::{required, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::values::{input_dims, real_f64s, store_f64s, tensor_type};

/// The attributes of one node.
struct Params {
    out_h: usize,
    out_w: usize,
    ratio: usize,
    scale: f64,
    half_pixel: bool,
    max: bool,
}

fn params(ctx: &EvalCtx<'_>) -> Result<Params> {
    let node = ctx.node;
    let size = |name: &str| -> Result<usize> {
        let v = node.attr_int(name, 1)?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| ctx.error(format!("{name} = {v} is not positive")))
    };
    let ratio = node.attr_int("sampling_ratio", 0)?;
    let ratio = usize::try_from(ratio)
        .map_err(|_| ctx.error(format!("sampling_ratio = {ratio} is negative")))?;
    let default_mode = if ctx.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = match node
        .attr_string("coordinate_transformation_mode")?
        .filter(|_| ctx.opset >= 16)
        .unwrap_or(default_mode)
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(ctx.error(format!(
                "coordinate_transformation_mode '{other}' is not half_pixel or output_half_pixel"
            )))
        }
    };
    let max = match node.attr_string("mode")?.unwrap_or("avg") {
        "avg" => false,
        "max" => true,
        other => return Err(ctx.error(format!("mode '{other}' is not avg or max"))),
    };
    Ok(Params {
        out_h: size("output_height")?,
        out_w: size("output_width")?,
        ratio,
        scale: f64::from(node.attr_float("spatial_scale", 1.0)?),
        half_pixel,
        max,
    })
}

/// One bilinear sample: the flat offsets of its four corners in a `H x W` plane and their
/// weights (all zero for a sample outside the map).
#[derive(Clone, Copy, Default)]
struct Sample {
    at: [usize; 4],
    w: [f64; 4],
}

fn sample(h: usize, w: usize, mut y: f64, mut x: f64) -> Sample {
    let (hf, wf) = (h as f64, w as f64);
    if y < -1.0 || y > hf || x < -1.0 || x > wf || h == 0 || w == 0 {
        return Sample::default();
    }
    y = y.max(0.0);
    x = x.max(0.0);
    let (mut y0, mut x0) = (y as usize, x as usize);
    let y1 = if y0 >= h - 1 {
        y0 = h - 1;
        y = y0 as f64;
        y0
    } else {
        y0 + 1
    };
    let x1 = if x0 >= w - 1 {
        x0 = w - 1;
        x = x0 as f64;
        x0
    } else {
        x0 + 1
    };
    let (ly, lx) = (y - y0 as f64, x - x0 as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Sample {
        at: [y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1],
        w: [hy * hx, hy * lx, ly * hx, ly * lx],
    }
}

pub(super) fn eval_roi_align(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, rois, batch) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let p = params(ctx)?;
    let &[n, c, h, w] = x.shape() else {
        return Err(ctx.error(format!("X {:?} is not (N, C, H, W)", x.shape())));
    };
    let r = match rois.shape() {
        &[r, 4] if batch.shape() == [r] => r,
        s => {
            return Err(ctx.error(format!(
                "rois {s:?} and batch_indices {:?} are not (R, 4) and (R)",
                batch.shape()
            )))
        }
    };
    let xv = real_f64s(x, "RoiAlign")?;
    let boxes = real_f64s(rois, "RoiAlign")?;
    let images = to_i64s(batch)?;
    let plane = h * w;
    let cells = p.out_h * p.out_w;
    let out_len = super::values::checked_product(&[r, c, cells])?;
    let mut out = try_vec(out_len, 0.0f64)?;
    let offset = if p.half_pixel { 0.5 } else { 0.0 };
    for (roi, dst) in out.chunks_mut(c * cells).enumerate().take(r) {
        let image = usize::try_from(images[roi])
            .ok()
            .filter(|&b| b < n)
            .ok_or_else(|| {
                ctx.error(format!(
                    "batch index {} of roi {roi} is not below N = {n}",
                    images[roi]
                ))
            })?;
        let b = &boxes[roi * 4..roi * 4 + 4];
        let (x0, y0) = (b[0] * p.scale - offset, b[1] * p.scale - offset);
        let (x1, y1) = (b[2] * p.scale - offset, b[3] * p.scale - offset);
        let (mut rw, mut rh) = (x1 - x0, y1 - y0);
        if !p.half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bin_h, bin_w) = (rh / p.out_h as f64, rw / p.out_w as f64);
        let grid = |size: f64| -> usize {
            match p.ratio {
                0 => size.ceil().clamp(0.0, 1e6) as usize,
                k => k,
            }
        };
        let (gh, gw) = (grid(bin_h), grid(bin_w));
        let count = (gh * gw).max(1) as f64;
        // The samples of every output cell, shared by every channel.
        let too_large = || ctx.error("the sampling grid is too large");
        let total = cells
            .checked_mul(gh)
            .and_then(|v| v.checked_mul(gw))
            .ok_or_else(too_large)?;
        let mut samples = Vec::new();
        samples.try_reserve_exact(total).map_err(|_| too_large())?;
        for ph in 0..p.out_h {
            for pw in 0..p.out_w {
                for iy in 0..gh {
                    let y = y0 + ph as f64 * bin_h + (iy as f64 + 0.5) * bin_h / gh as f64;
                    for ix in 0..gw {
                        let xx = x0 + pw as f64 * bin_w + (ix as f64 + 0.5) * bin_w / gw as f64;
                        samples.push(sample(h, w, y, xx));
                    }
                }
            }
        }
        let per_cell = gh * gw;
        for (ch, cell_out) in dst.chunks_mut(cells).enumerate() {
            let src = &xv[(image * c + ch) * plane..][..plane];
            for (cell, v) in cell_out.iter_mut().enumerate() {
                let cell_samples = &samples[cell * per_cell..][..per_cell];
                *v = if p.max {
                    cell_samples
                        .iter()
                        .map(|s| {
                            (0..4)
                                .map(|k| s.w[k] * src[s.at[k]])
                                .fold(f64::NEG_INFINITY, f64::max)
                        })
                        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                        .unwrap_or(0.0)
                } else {
                    cell_samples
                        .iter()
                        .map(|s| (0..4).map(|k| s.w[k] * src[s.at[k]]).sum::<f64>())
                        .sum::<f64>()
                        / count
                };
            }
        }
    }
    Ok(vec![store_f64s(
        x.dtype(),
        &[r, c, p.out_h, p.out_w],
        &out,
    )?])
}

pub(super) fn infer_roi_align(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let size = |name: &str| -> Result<Dim> { Ok(Dim::Known(ctx.node.attr_int(name, 1)?)) };
    let rois = input_dims(ctx, 1).and_then(|d| d.first().cloned());
    let channels = input_dims(ctx, 0)
        .filter(|d| d.len() == 4)
        .map(|d| d[1].clone());
    let dims = vec![
        rois.unwrap_or(Dim::Unknown),
        channels.unwrap_or(Dim::Unknown),
        size("output_height")?,
        size("output_width")?,
    ];
    Ok(vec![tensor_type(elem, Some(dims))])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn a_whole_constant_map_averages_to_its_value() {
        let x = Tensor::from_vec(DataType::Float, &[1, 1, 4, 4], vec![3.0f32; 16]).unwrap();
        let rois = Tensor::from_vec(DataType::Float, &[1, 4], vec![0.0f32, 0.0, 3.0, 3.0]).unwrap();
        let batch = Tensor::from_vec(DataType::Int64, &[1], vec![0i64]).unwrap();
        let node = Node::new("RoiAlign", "r", ["x", "rois", "b"], ["y"])
            .with_attr("output_height", AttrValue::Int(2))
            .with_attr("output_width", AttrValue::Int(2));
        let y = eval_node(&node, 16, &[Some(&x), Some(&rois), Some(&batch)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 2, 2]);
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[3.0; 4]);
    }

    #[test]
    fn a_batch_index_past_n_is_an_error() {
        let x = Tensor::from_vec(DataType::Float, &[1, 1, 2, 2], vec![1.0f32; 4]).unwrap();
        let rois = Tensor::from_vec(DataType::Float, &[1, 4], vec![0.0f32; 4]).unwrap();
        let batch = Tensor::from_vec(DataType::Int64, &[1], vec![1i64]).unwrap();
        let node = Node::new("RoiAlign", "r", ["x", "rois", "b"], ["y"]);
        let e = eval_node(&node, 16, &[Some(&x), Some(&rois), Some(&batch)]).unwrap_err();
        assert!(e.to_string().contains("batch index 1"), "{e}");
    }
}
