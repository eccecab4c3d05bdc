//! `GRU`: gates `z`, `r`, `h` (in that order in `W`, `R` and `B`), and `linear_before_reset`
//! (opset 3 on).
//!
//! Per step, with `f`, `g` the direction's activations (default Sigmoid, Tanh) and the clip
//! applied to every gate's input: `z = f(Xz + Hz)`, `r = f(Xr + Hr)`, then
//! `h = g(Xh + (r*H) Rh^T + Rbh)` (`linear_before_reset = 0`) or
//! `h = g(Xh + r*(H Rh^T + Rbh))` (otherwise), and `H' = (1 - z)*h + z*H`, where `X*` are the
//! input projections with `Wb*` and `H*` the recurrent ones with `Rb*`.
//!
//! Design note: the recurrent product of `z` and `r` is one GEMM into the gathered gate inputs.
//! Without `linear_before_reset` the `h` gate needs `r*H` first, so it is a second GEMM after
//! the reset gate; with it, `H Rh^T` goes into a separate buffer because `r` scales it.

use crate::error::Result;
use crate::ir::{Node, TensorType};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;

use super::product::{StepWeights, View};
use super::schedule::{self, Problem, RecurrentOp, Spec, Track, WeightLayout};
use crate::ops::num::Real;

/// `GRU`: its spec and `linear_before_reset`.
pub(super) struct Gru;

impl RecurrentOp for Gru {
    const SPEC: Spec = Spec {
        gates: 3,
        activations: &["Sigmoid", "Tanh"],
        weights: WeightLayout::Gates,
    };

    /// `linear_before_reset`: opset 1 has none, and always resets before the product.
    fn flag(node: &Node, opset: i64) -> Result<bool> {
        Ok(opset >= 3 && node.attr_int("linear_before_reset", 0)? != 0)
    }
}

pub(super) fn eval(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    schedule::by_precision(ctx, inputs, run::<f32>, run::<f64>)
}

pub(super) fn infer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    schedule::infer::<Gru>(ctx, 1)
}

fn run<T: Real + 'static>(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let p = Problem::<T>::new::<Gru>(ctx, inputs)?;
    let n = p.dims.hidden;
    let steps = p.step_weights(ctx, 3 * n, n)?;
    p.run(|d| direction(&p, d, &steps[d], p.flag))
}

/// Runs direction `d` and returns its `Y` rows and final `h`.
fn direction<T: Real>(
    p: &Problem<'_, T>,
    d: usize,
    rt: &StepWeights<'_, T>,
    linear: bool,
) -> Result<Track<T>> {
    let (batch, n) = (p.dims.batch, p.dims.hidden);
    let width = 3 * n;
    let acts = p.activations(d);
    let (f, g_act) = (acts[0], acts[1]);
    let w = p.weights(d).0;
    // `R^T` (`[hidden, 3 * hidden]`): its first `2 * hidden` columns serve `z` and `r`.
    let r_zr = rt.view().columns(0, 2 * n);
    let r_h = rt.view().columns(2 * n, n);
    let (wb, rb) = p.biases(d);
    // `Rbh` joins the projection unless the reset gate scales it.
    let folded = if linear { 2 * n } else { width };
    let bias: Vec<T> = (0..width)
        .map(|j| if j < folded { wb[j] + rb[j] } else { wb[j] })
        .collect();
    let rbh = &rb[2 * n..];
    let xw = p.project(w, &bias)?;
    // `r*H` (default) or `H Rh^T` (linear_before_reset), one row per batch entry.
    let mut scratch = p.initial(None, d);
    let h = p.initial(p.initial_h.as_deref(), d);
    let (y, h) = p.scan(d, &xw, width, h, |active, g, h| {
        r_zr.multiply(View::rows(h, batch, n), T::ONE, g, width)?;
        if linear {
            r_h.multiply(View::rows(h, batch, n), T::ZERO, &mut scratch, n)?;
        }
        for ((g, h), (extra, _)) in g
            .chunks_exact_mut(width)
            .zip(h.chunks_exact(n))
            .zip(scratch.chunks_exact_mut(n).zip(active))
            .filter(|(_, (_, &on))| on)
        {
            let (zr, gh) = g.split_at_mut(2 * n);
            p.gates(f, zr);
            let reset = &zr[n..];
            if linear {
                for ((gh, &reset), (&extra, &rbh)) in
                    gh.iter_mut().zip(reset).zip(extra.iter().zip(rbh))
                {
                    *gh += reset * (extra + rbh);
                }
            } else {
                for ((extra, &reset), &h) in extra.iter_mut().zip(reset).zip(h) {
                    *extra = reset * h;
                }
            }
        }
        if !linear {
            r_h.multiply(
                View::rows(&scratch, batch, n),
                T::ONE,
                &mut g[2 * n..],
                width,
            )?;
        }
        for ((g, h), _) in g
            .chunks_exact_mut(width)
            .zip(h.chunks_exact_mut(n))
            .zip(active)
            .filter(|(_, &on)| on)
        {
            let (z, gh) = g.split_at_mut(2 * n);
            let candidate = &mut gh[..n];
            p.gates(g_act, candidate);
            for ((h, &z), &candidate) in h.iter_mut().zip(&z[..n]).zip(&*candidate) {
                *h = (T::ONE - z) * candidate + z * *h;
            }
        }
        Ok(())
    })?;
    Ok(Track { y, states: vec![h] })
}

#[cfg(test)]
mod tests {
    use super::super::schedule::testing::*;
    use crate::ir::AttrValue;
    use crate::ops::eval_node;

    // seq_length 2, batch 1, input 2, hidden 2; expected values from onnx.reference, which
    // onnxruntime matches within 9e-8.
    const X: &[f32] = &[-0.7, -0.0, 0.2, -0.9];
    const W: &[f32] = &[
        -0.7, 0.9, -0.9, -0.7, 0.9, 0.2, -0.3, 0.0, 0.3, -0.4, -0.7, 0.6,
    ];
    const R: &[f32] = &[
        0.3, 0.0, 0.6, 0.1, 1.0, -0.6, 0.1, -0.0, -0.3, 0.2, -0.5, 0.6,
    ];
    const B: &[f32] = &[
        0.7, -0.7, -0.1, -0.4, -0.8, 0.8, -0.1, -0.7, 0.3, -0.6, 0.8, -0.6,
    ];
    const Y_RESET_FIRST: &[f32] = &[-0.05207656, 0.4087332, 0.2269745, -0.161388];
    const Y_LINEAR_FIRST: &[f32] = &[-0.1512207, 0.547819, -0.04229223, 0.1998974];

    fn run(linear_before_reset: i64, opset: i64) -> Vec<crate::tensor::Tensor> {
        let n = node(
            "GRU",
            &["X", "W", "R", "B"],
            &[("linear_before_reset", AttrValue::Int(linear_before_reset))],
        );
        let (x, w, r, b) = (
            f32s(&[2, 1, 2], X),
            f32s(&[1, 6, 2], W),
            f32s(&[1, 6, 2], R),
            f32s(&[1, 12], B),
        );
        eval_node(&n, opset, &[Some(&x), Some(&w), Some(&r), Some(&b)]).unwrap()
    }

    #[test]
    fn reset_before_the_recurrent_product() {
        let out = run(0, 14);
        assert_close(&out[0], &[2, 1, 1, 2], Y_RESET_FIRST);
        assert_close(&out[1], &[1, 1, 2], &Y_RESET_FIRST[2..]);
    }

    #[test]
    fn linear_before_reset() {
        let out = run(1, 14);
        assert_close(&out[0], &[2, 1, 1, 2], Y_LINEAR_FIRST);
        assert_close(&out[1], &[1, 1, 2], &Y_LINEAR_FIRST[2..]);
    }

    #[test]
    fn opset_1_has_no_linear_before_reset() {
        assert_close(&run(1, 1)[0], &[2, 1, 1, 2], Y_RESET_FIRST);
    }
}
