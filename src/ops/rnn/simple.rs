//! `RNN`, the simple recurrent network: `H' = f(X Wi^T + H Ri^T + Wbi + Rbi)`, with `f` the
//! direction's activation (default Tanh) applied to the clipped input.

use crate::error::Result;
use crate::ir::TensorType;
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;

use super::common::{self, precision, Precision, Problem, Spec, Track};
use super::math::{gemm, transposed, Real, View};

const SPEC: Spec = Spec {
    gates: 1,
    activations: &["Tanh"],
};

pub(super) fn eval(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    match precision(inputs)? {
        Precision::F32 => run::<f32>(ctx, inputs),
        Precision::F64 => run::<f64>(ctx, inputs),
    }
}

pub(super) fn infer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    common::infer(ctx, SPEC.gates, 1)
}

fn run<T: Real>(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let p = Problem::<T>::new(ctx, inputs, &SPEC)?;
    p.run(|d| direction(&p, d))
}

/// Runs direction `d` and returns its `Y` rows and final `h`.
fn direction<T: Real>(p: &Problem<'_, T>, d: usize) -> Result<Track<T>> {
    let (batch, n) = (p.dims.batch, p.dims.hidden);
    let f = p.activations(d)[0];
    let (w, r) = p.weights(d);
    let rt = transposed(r, n, n);
    let (wb, rb) = p.biases(d);
    let bias: Vec<T> = wb.iter().zip(&rb).map(|(&a, &b)| a + b).collect();
    let xw = p.project(w, &bias)?;
    let h = p.initial(p.initial_h.as_deref(), d);
    let (y, h) = p.scan(d, &xw, n, h, |active, g, h| {
        gemm(View::rows(h, batch, n), View::rows(&rt, n, n), T::ONE, g, n)?;
        for ((g, h), _) in g
            .chunks_exact(n)
            .zip(h.chunks_exact_mut(n))
            .zip(active)
            .filter(|(_, &on)| on)
        {
            for (h, &x) in h.iter_mut().zip(g) {
                *h = p.gate(f, x);
            }
        }
        Ok(())
    })?;
    Ok(Track { y, states: vec![h] })
}
