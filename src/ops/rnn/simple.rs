//! `RNN`, the simple recurrent network: `H' = f(X Wi^T + H Ri^T + Wbi + Rbi)`, with `f` the
//! direction's activation (default Tanh) applied to the clipped input.

use crate::error::Result;
use crate::ir::TensorType;
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;

use super::product::{StepWeights, View};
use super::schedule::{self, Problem, RecurrentOp, Spec, Track, WeightLayout};
use crate::ops::num::Real;

/// `RNN`: its spec.
pub(super) struct Simple;

impl RecurrentOp for Simple {
    const SPEC: Spec = Spec {
        gates: 1,
        activations: &["Tanh"],
        weights: WeightLayout::Gates,
    };
}

pub(super) fn eval(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    schedule::by_precision(ctx, inputs, run::<f32>, run::<f64>)
}

pub(super) fn infer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    schedule::infer::<Simple>(ctx, 1)
}

fn run<T: Real + 'static>(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let p = Problem::<T>::new::<Simple>(ctx, inputs)?;
    let n = p.dims.hidden;
    let steps = p.step_weights(ctx, n, n)?;
    p.run(|d| direction(&p, d, &steps[d]))
}

/// Runs direction `d` and returns its `Y` rows and final `h`.
fn direction<T: Real>(p: &Problem<'_, T>, d: usize, rt: &StepWeights<'_, T>) -> Result<Track<T>> {
    let (batch, n) = (p.dims.batch, p.dims.hidden);
    let f = p.activations(d)[0];
    let w = p.weights(d).0;
    let xw = p.project(w, &p.summed_biases(d))?;
    let h = p.initial(p.initial_h.as_deref(), d);
    let (y, h) = p.scan(d, &xw, n, h, |active, g, h| {
        rt.view().multiply(View::rows(h, batch, n), T::ONE, g, n)?;
        for ((g, h), _) in g
            .chunks_exact(n)
            .zip(h.chunks_exact_mut(n))
            .zip(active)
            .filter(|(_, &on)| on)
        {
            h.copy_from_slice(g);
            p.gates(f, h);
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

    const X: &[f32] = &[
        -0.9, -0.6, -0.3, -0.1, 0.8, 0.4, -0.3, -1.0, -0.7, 1.0, -0.1, 0.4,
    ];
    const W: &[f32] = &[-0.9, -0.9, 0.7, 0.2];
    const R: &[f32] = &[-0.4, -0.4, -0.8, -0.7];

    #[test]
    fn reverse_with_clip_leaky_relu_and_sequence_lens_matches_onnxruntime() {
        // seq_length 3, batch 2 with lengths 2 and 3: the first entry's reverse pass starts at
        // time 1 and its row at time 2 stays zero.
        let n = node(
            "RNN",
            &["X", "W", "R", "", "sequence_lens"],
            &[
                ("direction", string("reverse")),
                (
                    "activations",
                    AttrValue::Strings(vec![b"LeakyRelu".to_vec()]),
                ),
                ("activation_alpha", AttrValue::Floats(vec![0.5])),
                ("clip", AttrValue::Float(0.4)),
            ],
        );
        let (x, w, r, lens) = (
            f32s(&[3, 2, 2], X),
            f32s(&[1, 2, 2], W),
            f32s(&[1, 2, 2], R),
            i32s(&[2, 3]),
        );
        let out = eval_node(&n, 14, &[Some(&x), Some(&w), Some(&r), None, Some(&lens)]).unwrap();
        let y = [
            0.4, -0.2, 0.2618, -0.2, -0.2, 0.4, 0.4, -0.1545, 0.0, 0.0, -0.135, 0.01,
        ];
        assert_close(&out[0], &[3, 1, 2, 2], &y);
        assert_close(&out[1], &[1, 2, 2], &y[..4]);
    }

    #[test]
    fn a_zero_length_sequence_has_zero_outputs_and_state() {
        // As onnxruntime: the initial state does not carry over to Y_h.
        let n = node(
            "RNN",
            &["X", "W", "R", "", "sequence_lens", "initial_h"],
            &[],
        );
        let (x, w, r) = (
            f32s(&[3, 2, 2], X),
            f32s(&[1, 2, 2], W),
            f32s(&[1, 2, 2], R),
        );
        let (lens, h0) = (i32s(&[0, 1]), f32s(&[1, 2, 2], &[1.0; 4]));
        let out = eval_node(
            &n,
            14,
            &[Some(&x), Some(&w), Some(&r), None, Some(&lens), Some(&h0)],
        )
        .unwrap();
        let (y, y_h) = (
            out[0].as_slice::<f32>().unwrap(),
            out[1].as_slice::<f32>().unwrap(),
        );
        // Entry 1 runs one step from h0 = 1: tanh(x W^T + h0 R^T).
        let x1 = [-0.3f32, -0.1];
        let h1: Vec<f32> = (0..2)
            .map(|j| (x1[0] * W[2 * j] + x1[1] * W[2 * j + 1] + R[2 * j] + R[2 * j + 1]).tanh())
            .collect();
        assert_eq!(&y[..2], &[0.0, 0.0]);
        assert!(y[4..].iter().all(|&v| v == 0.0));
        assert_eq!(&y_h[..2], &[0.0, 0.0]);
        assert!((y_h[2] - h1[0]).abs() < 1e-6 && (y_h[3] - h1[1]).abs() < 1e-6);
        assert_eq!(&y[2..4], &y_h[2..4]);
    }
}
