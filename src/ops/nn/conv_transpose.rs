//! `ConvTranspose` (opsets 1, 11, 22): the gradient of a convolution, over 1 to 3 spatial dims,
//! with groups, strides, dilations, pads, `output_padding`, `output_shape` and `auto_pad`.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__ConvTranspose.html>.
//!
//! Output size along each dim: `s * (in - 1) + output_padding + (k - 1) * d + 1 - pad_begin -
//! pad_end`. When `output_shape` is given the pads are derived from it; with `SAME_UPPER` /
//! `SAME_LOWER` the output is `in * s`. The total padding is split as for `Conv`: `SAME_UPPER`
//! puts the odd element at the end, everything else at the beginning.
//!
//! Design note: each group of each image is one matrix product, `W_g^T (M/g*taps x C/g)` times
//! the input (`C/g x in_positions`), followed by col2im, which adds every column's taps into the
//! output positions they reach. Output channels are accumulated in parallel.

use crate::tensor::try_vec;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::{Dim, Node, TensorType};
use crate::tensor::Tensor;

use super::super::util::unsupported_type;
use super::super::{EvalCtx, InferCtx};
use super::blas::{gemm, Mat};
use super::conv::{conv_operands, ranks_and_group};
use super::values::{checked_product, input_dims, known_sizes, output, tensor_type};
use super::window::{inside, AutoPad, Geometry, Geometry3, Window};
use crate::ops::num::{dispatch_real, Real};

/// `output_padding` or `output_shape` as `rank` spatial values, if present.
fn spatial_attr(node: &Node, name: &str, rank: usize) -> Result<Option<Vec<usize>>> {
    let Some(v) = node.attr_ints(name)? else {
        return Ok(None);
    };
    // `output_shape` may also name the batch and channel dims.
    let v = if v.len() == rank + 2 && name == "output_shape" {
        &v[2..]
    } else {
        v
    };
    if v.len() != rank || v.iter().any(|&x| x < 0) {
        return Err(Error::Eval(format!(
            "{name} {v:?} must be {rank} non-negative values"
        )));
    }
    Ok(Some(v.iter().map(|&x| x as usize).collect()))
}

/// The geometry of a transposed convolution over spatial input dims `input`: `output` holds the
/// output sizes and the pads are those of the equivalent forward convolution. An `output_shape`
/// larger than the full output pads nothing (the extra positions are at the end) unless
/// `auto_pad` is `SAME_*`, where the negative begin pad is returned as a shift (how far every
/// written position moves towards the end) with a zero begin pad.
fn resolve(node: &Node, input: &[usize], kernel: &[usize]) -> Result<(Geometry, Vec<usize>)> {
    let r = input.len();
    let window = Window::of(node, r, Some(kernel))?;
    let out_pad = spatial_attr(node, "output_padding", r)?.unwrap_or_else(|| vec![0; r]);
    let out_shape = spatial_attr(node, "output_shape", r)?;
    let mut g = Geometry {
        input: input.to_vec(),
        output: Vec::new(),
        kernel: window.kernel.clone(),
        strides: window.strides.clone(),
        dilations: window.dilations.clone(),
        pad_begin: Vec::new(),
        pad_end: Vec::new(),
    };
    let mut shift = vec![0; r];
    let too_large = || Error::Eval("ConvTranspose output is too large".into());
    for i in 0..r {
        let (s, k, d) = (window.strides[i], window.kernel[i], window.dilations[i]);
        let full = input[i]
            .saturating_sub(1)
            .checked_mul(s)
            .and_then(|v| v.checked_add(out_pad[i]))
            .and_then(|v| v.checked_add((k - 1).checked_mul(d)?.checked_add(1)?))
            .ok_or_else(too_large)?;
        let target = match (&out_shape, window.auto_pad) {
            (Some(o), _) => Some(o[i]),
            (None, AutoPad::SameUpper | AutoPad::SameLower) => {
                Some(input[i].checked_mul(s).ok_or_else(too_large)?)
            }
            _ => None,
        };
        let (out, pb, pe) = match target {
            Some(out) => {
                let mut total = i64::try_from(full).map_err(|_| too_large())?
                    - i64::try_from(out).map_err(|_| too_large())?;
                // An `output_shape` past the full output without `SAME_*` pads nothing: the
                // taps stay where they are and the extra positions at the end hold the bias
                // (onnx.reference and onnxruntime agree; a negative begin pad is not a shift).
                if matches!(window.auto_pad, AutoPad::NotSet | AutoPad::Valid) {
                    total = total.max(0);
                }
                // Python's floor division, as in the reference: the odd element goes to the
                // end with SAME_UPPER, to the beginning otherwise.
                let small = total.div_euclid(2);
                let (pb, pe) = if window.auto_pad == AutoPad::SameUpper {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                shift[i] = usize::try_from(-pb.min(0)).map_err(|_| too_large())?;
                (out, pb.max(0) as usize, pe.max(0) as usize)
            }
            None => {
                let (pb, pe) = match window.auto_pad {
                    AutoPad::Valid => (0, 0),
                    _ => (window.pads[i], window.pads[r + i]),
                };
                let out = full.checked_sub(pb + pe).ok_or_else(|| {
                    Error::Eval(format!("pads exceed the output along spatial dim {i}"))
                })?;
                (out, pb, pe)
            }
        };
        g.output.push(out);
        g.pad_begin.push(pb);
        g.pad_end.push(pe);
    }
    Ok((g, shift))
}

/// The layout of one transposed convolution: `x (N, C, in...)`, `w (C, M/group, k...)`,
/// `y (N, M, out...)`.
struct Layout {
    batch: usize,
    c_in: usize,
    c_out: usize,
    group: usize,
    geo: Geometry3,
    /// How far written positions move towards the end along each of the three dims.
    shift: [usize; 3],
    out_shape: Vec<usize>,
}

impl Layout {
    fn new(ctx: &EvalCtx<'_>, x: &[usize], w: &[usize]) -> Result<Layout> {
        let group = ranks_and_group(ctx, x, w)?;
        if w[0] != x[1] || !x[1].is_multiple_of(group) {
            return Err(ctx.error(format!("X {x:?} and W {w:?} do not fit {group} groups")));
        }
        let c_out = w[1]
            .checked_mul(group)
            .ok_or_else(|| ctx.error("too many output channels"))?;
        let (geometry, shift) = resolve(ctx.node, &x[2..], &w[2..])?;
        let mut shift3 = [0; 3];
        shift3[3 - shift.len().min(3)..].copy_from_slice(&shift[shift.len().saturating_sub(3)..]);
        let mut out_shape = vec![x[0], c_out];
        out_shape.extend(&geometry.output);
        checked_product(&out_shape)?;
        Ok(Layout {
            batch: x[0],
            c_in: x[1],
            c_out,
            group,
            geo: geometry.to_3d()?,
            shift: shift3,
            out_shape,
        })
    }

    /// Writes the transposed convolution plus bias into `out` (the output, zeroed).
    fn run<T: Real>(&self, x: &[T], w: &[T], bias: Option<&[T]>, out: &mut [T]) -> Result<()> {
        if out.is_empty() {
            // Nothing to write; the planes of an empty output may multiply past `usize`.
            return Ok(());
        }
        let (cg, mg) = (self.c_in / self.group, self.c_out / self.group);
        let (pin, pout, taps) = (self.geo.in_plane(), self.geo.out_plane(), self.geo.taps());
        if x.len() != self.batch * self.c_in * pin
            || w.len() != self.c_in * mg * taps
            || out.len() != self.batch * self.c_out * pout
        {
            return Err(Error::Eval("X, W or Y does not hold its shape".into()));
        }
        if bias.is_some_and(|b| b.len() != self.c_out) {
            return Err(Error::Eval(format!("B must hold {} values", self.c_out)));
        }
        let slab = mg * pout;
        if slab == 0 {
            return Ok(());
        }
        let col_len = mg
            .checked_mul(taps)
            .and_then(|v| v.checked_mul(pin))
            .ok_or_else(|| Error::Eval("the column buffer is too large".into()))?;
        let mut col = try_vec(col_len, T::ZERO)?;
        for (t, y) in out.chunks_mut(slab).enumerate() {
            let (n, g) = (t / self.group, t % self.group);
            let xg = Mat::row_major(&x[(n * self.c_in + g * cg) * pin..][..cg * pin], cg, pin)?;
            let wg = Mat::row_major(&w[g * cg * mg * taps..][..cg * mg * taps], cg, mg * taps)?;
            gemm(T::ONE, wg.t(), xg, T::ZERO, &mut col, pin)?;
            let col = &col;
            let planes = y.par_chunks_mut(pout).enumerate();
            let planes = planes.with_min_len(crate::par::min_len(mg, &[taps, pin]));
            planes.for_each(|(m, plane)| {
                col2im(
                    &col[m * taps * pin..(m + 1) * taps * pin],
                    &self.geo,
                    self.shift,
                    plane,
                );
                if let Some(b) = bias {
                    let bv = b[g * mg + m];
                    plane.iter_mut().for_each(|v| *v += bv);
                }
            });
        }
        Ok(())
    }
}

/// Adds the `taps` rows of `cols` (one per kernel tap, one column per input position) into the
/// output positions they reach.
fn col2im<T: Real>(cols: &[T], g: &Geometry3, shift: [usize; 3], plane: &mut [T]) {
    let [id, ih, iw] = g.input;
    let [od, oh, ow] = g.output;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.strides;
    let [dd, dh, dw] = g.dilations;
    let [pd, ph, pw] = g.pad_begin;
    let [ed, eh, ew] = shift;
    let pin = id * ih * iw;
    let mut rows = cols.chunks(pin.max(1));
    for kz in 0..kd {
        let (z0, z1) = inside(id, od, sd, kz * dd + ed, pd);
        for ky in 0..kh {
            let (y0, y1) = inside(ih, oh, sh, ky * dh + eh, ph);
            for kx in 0..kw {
                let Some(row) = rows.next() else { return };
                let (x0, x1) = inside(iw, ow, sw, kx * dw + ew, pw);
                for iz in z0..z1 {
                    let oz = iz * sd + kz * dd + ed - pd;
                    for iy in y0..y1 {
                        let oy = iy * sh + ky * dh + eh - ph;
                        let src = &row[(iz * ih + iy) * iw..][..iw];
                        let dst = &mut plane[(oz * oh + oy) * ow..][..ow];
                        for ix in x0..x1 {
                            dst[ix * sw + kx * dw + ew - pw] += src[ix];
                        }
                    }
                }
            }
        }
    }
}

pub(super) fn eval_conv_transpose(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, w, b, dtype) = conv_operands(ctx, inputs)?;
    let layout = Layout::new(ctx, x.shape(), w.shape())?;
    let y = dispatch_real!(dtype, R => {
        let (xv, wv) = (R::load(x)?, R::load(w)?);
        let bias = b.map(R::load).transpose()?;
        output::<R>(dtype, &layout.out_shape, |y| layout.run(&xv, &wv, bias.as_deref(), y))?
    }, _ => return Err(unsupported_type("ConvTranspose", dtype)));
    Ok(vec![y])
}

pub(super) fn infer_conv_transpose(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let group = ctx.node.attr_int("group", 1)?;
    let dims = input_dims(ctx, 0).filter(|x| x.len() >= 3).map(|x| {
        let w = input_dims(ctx, 1).filter(|w| w.len() == x.len());
        let c_out = match w.map(|w| &w[1]) {
            Some(Dim::Known(m)) => Dim::Known(m * group),
            _ => Dim::Unknown,
        };
        let spatial = match (known_sizes(&x[2..]), w.and_then(|w| known_sizes(&w[2..]))) {
            (Some(i), Some(k)) => resolve(ctx.node, &i, &k)
                .map(|(g, _)| g.output.iter().map(|&o| Dim::Known(o as i64)).collect())
                .ok(),
            _ => None,
        };
        let mut dims = vec![x[0].clone(), c_out];
        dims.extend(spatial.unwrap_or_else(|| vec![Dim::Unknown; x.len() - 2]));
        dims
    });
    Ok(vec![tensor_type(ctx.input(0).and_then(|t| t.elem), dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::AttrValue;
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    #[test]
    fn the_onnx_1d_example() {
        let x = f32s(&[1, 1, 3], vec![0.0, 1.0, 2.0]);
        let w = f32s(&[1, 2, 3], vec![1.0; 6]);
        let node = Node::new("ConvTranspose", "t", ["x", "w"], ["y"]);
        let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
        let row = [0.0, 1.0, 3.0, 3.0, 2.0];
        assert_eq!(y[0], f32s(&[1, 2, 5], [row, row].concat()));
    }

    #[test]
    fn strides_pads_and_output_shape() {
        // The ONNX example with strides [3, 2] and output_shape [10, 8] (equivalently
        // output_padding [1, 1]): the first row of each channel.
        let x = f32s(&[1, 1, 3, 3], (0..9).map(|v| v as f32).collect());
        let w = f32s(&[1, 2, 3, 3], vec![1.0; 18]);
        let with = |name: &str, v: Vec<i64>| {
            Node::new("ConvTranspose", "t", ["x", "w"], ["y"])
                .with_attr("strides", AttrValue::Ints(vec![3, 2]))
                .with_attr(name, AttrValue::Ints(v))
        };
        for node in [
            with("output_shape", vec![10, 8]),
            with("output_padding", vec![1, 1]),
        ] {
            let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
            assert_eq!(y[0].shape(), &[1, 2, 10, 8]);
            let v = y[0].as_slice::<f32>().unwrap();
            assert_eq!(&v[..8], &[0.0, 0.0, 1.0, 1.0, 3.0, 2.0, 2.0, 0.0]);
        }
        let node = with("pads", vec![1, 2, 1, 2]);
        let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 2, 7, 3]);
        let v = y[0].as_slice::<f32>().unwrap();
        assert_eq!(&v[..6], &[1.0, 1.0, 3.0, 1.0, 1.0, 3.0]);
    }

    /// Issue 12: strides 3 on a 5x5 input with `output_shape=[15, 17]` (auto_pad NOTSET) wrote
    /// every column one position to the right; the two extra columns are at the end.
    #[test]
    fn output_shape_past_the_full_output_strides_3_5x5_to_15x17() {
        let x = f32s(&[1, 1, 5, 5], (0..25).map(|v| v as f32).collect());
        let w = f32s(&[1, 1, 3, 3], vec![1.0; 9]);
        let node = Node::new("ConvTranspose", "t", ["x", "w"], ["y"])
            .with_attr("strides", AttrValue::Ints(vec![3, 3]))
            .with_attr("output_shape", AttrValue::Ints(vec![15, 17]));
        let y = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap();
        // Kernel and stride are both 3: output (oy, ox) is x[oy / 3][ox / 3] alone.
        let expected: Vec<f32> = (0..15)
            .flat_map(|oy| (0..17).map(move |ox| (oy, ox)))
            .map(|(oy, ox)| {
                if ox < 15 {
                    (oy / 3 * 5 + ox / 3) as f32
                } else {
                    0.0
                }
            })
            .collect();
        assert_eq!(y[0], f32s(&[1, 1, 15, 17], expected));
    }

    #[test]
    fn groups_must_divide_the_channels() {
        let x = f32s(&[1, 3, 2], vec![0.0; 6]);
        let w = f32s(&[3, 1, 2], vec![0.0; 6]);
        let node = Node::new("ConvTranspose", "t", ["x", "w"], ["y"])
            .with_attr("group", AttrValue::Int(2));
        let err = eval_node(&node, 22, &[Some(&x), Some(&w)]).unwrap_err();
        assert!(err.to_string().contains("groups"), "{err}");
    }
}
