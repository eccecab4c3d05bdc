//! Sampling grids: `GridSample` (opsets 16, 20, 22) and `AffineGrid` (opset 20).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__GridSample.html>,
//! <https://onnx.ai/onnx/operators/onnx__AffineGrid.html>.
//!
//! `GridSample` reads `X` `(N, C, D1, ..., Dr)` at the normalised coordinates of `grid`
//! `(N, G1, ..., Gr', r)` (last component first: `x` indexes the last dim). A coordinate `n` in
//! `[-1, 1]` maps to `(n + 1) / 2 * (len - 1)` with `align_corners`, else `((n + 1) * len - 1) / 2`.
//! A coordinate outside the borders (`[0, len - 1]` with `align_corners`, else
//! `[-0.5, len - 0.5]`) is clamped (`border`) or reflected (`reflection`) first; `nearest` rounds
//! half to even, `linear` and `cubic` (Keys, `a = -0.75`) weight 2 or 4 neighbours per dim, and a
//! neighbour outside the input reads 0 (`zeros`), the nearest edge (`border`) or its reflection.
//! Opset 16 spells the modes `bilinear` and `bicubic`. Computes in `f64`.
//!
//! `AffineGrid` maps the base grid of `size` `(N, C, H, W)` or `(N, C, D, H, W)` (the same
//! normalised coordinates) through `theta` `(N, 2, 3)` or `(N, 3, 4)`.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::{try_vec, Tensor};

use super::super::util::{required, strides, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::values::{input_dims, real_f64s, store_f64s, tensor_type};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// Reflects `x` into `[lo, hi]` by its nearest border, repeatedly.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (dx, from_low) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / range).trunc();
    let r = dx - n * range;
    let even = n % 2.0 == 0.0;
    match (from_low, even) {
        (true, true) | (false, false) => lo + r,
        _ => hi - r,
    }
}

/// The Keys cubic weights of the four neighbours of a point at fraction `t` past the second.
fn cubic_weights(t: f64) -> [f64; 4] {
    const A: f64 = -0.75;
    let w = |x: f64| {
        let x = x.abs();
        if x <= 1.0 {
            ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
        } else if x < 2.0 {
            ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
        } else {
            0.0
        }
    };
    [w(t + 1.0), w(t), w(1.0 - t), w(2.0 - t)]
}

pub(super) fn eval_grid_sample(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, grid) = (required(inputs, 0)?, required(inputs, 1)?);
    let default_mode = if ctx.opset < 20 { "bilinear" } else { "linear" };
    let mode = match ctx.node.attr_string("mode")?.unwrap_or(default_mode) {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        other => return Err(ctx.error(format!("mode '{other}' is not known"))),
    };
    let padding = match ctx.node.attr_string("padding_mode")?.unwrap_or("zeros") {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => return Err(ctx.error(format!("padding_mode '{other}' is not known"))),
    };
    let align = ctx.node.attr_int("align_corners", 0)? != 0;
    let (xs, gs) = (x.shape(), grid.shape());
    let r = xs.len().saturating_sub(2);
    if r == 0 || gs.len() != r + 2 || gs[0] != xs[0] || gs[r + 1] != r {
        return Err(ctx.error(format!(
            "grid {gs:?} is not (N, spatial..., {r}) for X {xs:?}"
        )));
    }
    let (n, c) = (xs[0], xs[1]);
    let dims = &xs[2..];
    let points: usize = gs[1..=r].iter().product();
    let plane: usize = dims.iter().product();
    if plane == 0 && n * c * points > 0 {
        return Err(ctx.error(format!("X {xs:?} has an empty spatial dim to sample from")));
    }
    let st = strides(dims);
    let xv = real_f64s(x, "GridSample")?;
    let gv = real_f64s(grid, "GridSample")?;
    let mut y = try_vec(n * c * points, 0.0f64)?;
    let (lo, hi): (Vec<f64>, Vec<f64>) = dims
        .iter()
        .map(|&d| {
            if align {
                (0.0, d as f64 - 1.0)
            } else {
                (-0.5, d as f64 - 0.5)
            }
        })
        .unzip();
    // An index along dim `i` resolved by the padding mode (`None`: reads zero).
    let resolve = |i: usize, k: i64| -> Option<usize> {
        let d = dims[i] as i64;
        match padding {
            Padding::Zeros => (0..d).contains(&k).then_some(k as usize),
            Padding::Border => Some(k.clamp(0, d - 1).max(0) as usize),
            Padding::Reflection => {
                let k = reflect(k as f64, lo[i], hi[i]) as i64;
                Some(k.clamp(0, d - 1).max(0) as usize)
            }
        }
    };
    let taps: usize = match mode {
        Mode::Nearest => 1,
        Mode::Linear => 2,
        Mode::Cubic => 4,
    };
    let combos = u32::try_from(r)
        .ok()
        .and_then(|r| taps.checked_pow(r))
        .filter(|&c| c <= 1 << 20)
        .ok_or_else(|| ctx.error(format!("{r} spatial dims are too many to interpolate")))?;
    let mut base = vec![0i64; r];
    let mut weights = vec![[0.0f64; 4]; r];
    for b in 0..n {
        for p in 0..points {
            let g = &gv[(b * points + p) * r..][..r];
            for i in 0..r {
                let norm = g[r - 1 - i];
                let len = dims[i] as f64;
                let mut v = if align {
                    (norm + 1.0) / 2.0 * (len - 1.0)
                } else {
                    ((norm + 1.0) * len - 1.0) / 2.0
                };
                if mode == Mode::Nearest {
                    v = v.round_ties_even();
                }
                if v < lo[i] || v > hi[i] {
                    match padding {
                        Padding::Border => v = v.clamp(0.0, len - 1.0),
                        Padding::Reflection => v = reflect(v, lo[i], hi[i]),
                        Padding::Zeros => {}
                    }
                }
                match mode {
                    Mode::Nearest => {
                        base[i] = v as i64;
                        weights[i] = [1.0, 0.0, 0.0, 0.0];
                    }
                    Mode::Linear => {
                        let f = v.floor();
                        base[i] = f as i64;
                        weights[i] = [1.0 - (v - f), v - f, 0.0, 0.0];
                    }
                    Mode::Cubic => {
                        let f = v.floor();
                        base[i] = f as i64 - 1;
                        weights[i] = cubic_weights(v - f);
                    }
                }
            }
            for ch in 0..c {
                let data = &xv[(b * c + ch) * plane..][..plane];
                let mut sum = 0.0;
                // Every combination of taps, as a counter in base `taps`.
                for combo in 0..combos {
                    let (mut w, mut off, mut rest) = (1.0, 0usize, combo);
                    let mut zero = false;
                    for i in (0..r).rev() {
                        let t = rest % taps;
                        rest /= taps;
                        w *= weights[i][t];
                        match resolve(i, base[i] + t as i64) {
                            Some(k) => off += k * st[i],
                            None => zero = true,
                        }
                    }
                    if !zero && w != 0.0 {
                        sum += w * data[off];
                    }
                }
                y[(b * c + ch) * points + p] = sum;
            }
        }
    }
    let mut shape = vec![n, c];
    shape.extend_from_slice(&gs[1..=r]);
    Ok(vec![store_f64s(x.dtype(), &shape, &y)?])
}

pub(super) fn infer_grid_sample(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let dims = match (input_dims(ctx, 0), input_dims(ctx, 1)) {
        (Some(x), Some(g)) if x.len() >= 2 && g.len() >= 2 => {
            let mut d = x[..2].to_vec();
            d.extend_from_slice(&g[1..g.len() - 1]);
            Some(d)
        }
        _ => None,
    };
    Ok(vec![tensor_type(elem, dims)])
}

/// The normalised coordinates of `len` points along one dim.
fn base_coords(len: usize, align: bool) -> Vec<f64> {
    (0..len)
        .map(|i| {
            if align {
                if len > 1 {
                    -1.0 + 2.0 * i as f64 / (len - 1) as f64
                } else {
                    -1.0
                }
            } else {
                -1.0 + (2 * i + 1) as f64 / len as f64
            }
        })
        .collect()
}

/// The spatial sizes an `AffineGrid` `size` input asks for.
fn affine_sizes(size: &[i64]) -> Result<Vec<usize>> {
    if size.len() != 4 && size.len() != 5 {
        return Err(Error::Eval(format!(
            "size {size:?} is not (N, C, H, W) or (N, C, D, H, W)"
        )));
    }
    size.iter()
        .map(|&d| usize::try_from(d).map_err(|_| Error::Eval(format!("size {size:?} is negative"))))
        .collect()
}

pub(super) fn eval_affine_grid(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let theta = required(inputs, 0)?;
    let size = affine_sizes(&to_i64s(required(inputs, 1)?)?)?;
    let align = ctx.node.attr_int("align_corners", 0)? != 0;
    let r = size.len() - 2;
    let n = size[0];
    if theta.shape() != [n, r, r + 1] {
        return Err(ctx.error(format!(
            "theta {:?} is not ({n}, {r}, {})",
            theta.shape(),
            r + 1
        )));
    }
    let spatial = &size[2..];
    let coords: Vec<Vec<f64>> = spatial.iter().map(|&d| base_coords(d, align)).collect();
    let points: usize = spatial.iter().product();
    let st = strides(spatial);
    let th = real_f64s(theta, "AffineGrid")?;
    let mut out = try_vec(n * points * r, 0.0f64)?;
    let mut homo = vec![1.0f64; r + 1];
    for b in 0..n {
        let t = &th[b * r * (r + 1)..][..r * (r + 1)];
        for p in 0..points {
            // Homogeneous point: (x, y[, z], 1) with x along the last dim.
            for i in 0..r {
                homo[r - 1 - i] = coords[i][p / st[i] % spatial[i]];
            }
            for j in 0..r {
                out[(b * points + p) * r + j] = (0..=r).map(|k| t[j * (r + 1) + k] * homo[k]).sum();
            }
        }
    }
    let mut shape = vec![n];
    shape.extend_from_slice(spatial);
    shape.push(r);
    Ok(vec![store_f64s(theta.dtype(), &shape, &out)?])
}

pub(super) fn infer_affine_grid(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let dims = match ctx.constant(1) {
        Some(s) => {
            let size = affine_sizes(&to_i64s(s)?)?;
            let mut d: Vec<Dim> = std::iter::once(size[0])
                .chain(size[2..].iter().copied())
                .map(|v| Dim::Known(v as i64))
                .collect();
            d.push(Dim::Known(size.len() as i64 - 2));
            Some(d)
        }
        None => None,
    };
    Ok(vec![tensor_type(elem, dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn identity_grid_samples_the_input_back() {
        let x =
            Tensor::from_vec(DataType::Float, &[1, 1, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let theta = Tensor::from_vec(
            DataType::Float,
            &[1, 2, 3],
            vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0],
        )
        .unwrap();
        let size = Tensor::from_vec(DataType::Int64, &[4], vec![1i64, 1, 2, 2]).unwrap();
        let node = Node::new("AffineGrid", "a", ["t", "s"], ["g"]);
        let g = eval_node(&node, 20, &[Some(&theta), Some(&size)])
            .unwrap()
            .remove(0);
        assert_eq!(g.shape(), &[1, 2, 2, 2]);
        for mode in ["nearest", "linear", "cubic"] {
            let node = Node::new("GridSample", "s", ["x", "g"], ["y"])
                .with_attr("mode", AttrValue::String(mode.as_bytes().to_vec()));
            let y = eval_node(&node, 20, &[Some(&x), Some(&g)]).unwrap();
            let v = y[0].as_slice::<f32>().unwrap();
            for (a, b) in v.iter().zip([1.0, 2.0, 3.0, 4.0]) {
                assert!((a - b).abs() < 1e-5, "{mode}: {v:?}");
            }
        }
    }

    #[test]
    fn reflection_folds_back_by_the_nearest_border() {
        assert!((reflect(-0.7, -0.5, 1.5) + 0.3).abs() < 1e-12);
        assert!((reflect(2.0, -0.5, 1.5) - 1.0).abs() < 1e-12);
    }
}
