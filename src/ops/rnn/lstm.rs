//! `LSTM`: gates `i`, `o`, `f`, `c` (in that order in `W`, `R` and `B`), peepholes `P` (`i`,
//! `o`, `f`), `input_forget`, and the cell state `initial_c`/`Y_c` besides the hidden state.
//!
//! Per step, with `f`, `g`, `h` the direction's activations (default Sigmoid, Tanh, Tanh) and
//! the clip applied to every gate's input:
//! `i = f(Xi + Hi + Pi*C)`, `f = f(Xf + Hf + Pf*C)` (or `1 - i` with `input_forget`),
//! `c = g(Xc + Hc)`, `C' = f*C + i*c`, `o = f(Xo + Ho + Po*C')`, `H' = o*h(C')`, where `X*`
//! and `H*` are the input and recurrent projections with their biases.

use crate::error::Result;
use crate::ir::TensorType;
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::Tensor;

use super::common::{self, precision, Precision, Problem, Spec, Track};
use super::math::{gemm, transposed, Activation, Real, View};

/// Position of `initial_c` among the inputs.
const INITIAL_C: usize = 6;
/// Position of `P`.
const P: usize = 7;

const SPEC: Spec = Spec {
    gates: 4,
    activations: &["Sigmoid", "Tanh", "Tanh"],
};

pub(super) fn eval(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    match precision(inputs)? {
        Precision::F32 => run::<f32>(ctx, inputs),
        Precision::F64 => run::<f64>(ctx, inputs),
    }
}

pub(super) fn infer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    common::infer(ctx, SPEC.gates, 2)
}

fn run<T: Real>(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let p = Problem::<T>::new(ctx, inputs, &SPEC)?;
    let hidden = p.dims.hidden;
    let initial_c = p.state(inputs, INITIAL_C, "initial_c")?;
    let peepholes = p.per_direction(inputs, P, "P", 3 * hidden)?;
    let input_forget = ctx.node.attr_int("input_forget", 0)? != 0;
    p.run(|d| {
        let peep = match &peepholes {
            Some(all) => all[3 * hidden * d..3 * hidden * (d + 1)].to_vec(),
            None => vec![T::ZERO; 3 * hidden],
        };
        let cell = Cell {
            p: &p,
            acts: p.activations(d),
            peep: &peep,
            input_forget,
        };
        direction(&p, d, initial_c.as_deref(), &cell)
    })
}

/// What one direction's cell update needs besides the states.
struct Cell<'p, 'a, T: Real> {
    p: &'p Problem<'a, T>,
    /// `f`, `g`, `h`.
    acts: &'p [Activation],
    /// `Pi`, `Po`, `Pf`, `hidden` each (zeros when `P` is omitted).
    peep: &'p [T],
    input_forget: bool,
}

impl<T: Real> Cell<'_, '_, T> {
    /// Advances one batch entry: `g` holds its four gate inputs (without peepholes), `h` and
    /// `c` its states.
    fn update(&self, g: &[T], h: &mut [T], c: &mut [T]) {
        let n = h.len();
        let (f, gc, hc) = (self.acts[0], self.acts[1], self.acts[2]);
        let (gi, rest) = g.split_at(n);
        let (go, rest) = rest.split_at(n);
        let (gf, gg) = rest.split_at(n);
        let (pi, rest) = self.peep.split_at(n);
        let (po, pf) = rest.split_at(n);
        for j in 0..n {
            let prev = c[j];
            let i = self.p.gate(f, gi[j] + pi[j] * prev);
            let forget = if self.input_forget {
                T::ONE - i
            } else {
                self.p.gate(f, gf[j] + pf[j] * prev)
            };
            let cell = forget * prev + i * self.p.gate(gc, gg[j]);
            let o = self.p.gate(f, go[j] + po[j] * cell);
            c[j] = cell;
            // The clip bounds gate inputs only, not the cell state `h` reads.
            h[j] = o * hc.eval(cell);
        }
    }
}

/// Runs direction `d` and returns its `Y` rows, final `h` and final `c`.
fn direction<T: Real>(
    p: &Problem<'_, T>,
    d: usize,
    initial_c: Option<&[T]>,
    cell: &Cell<'_, '_, T>,
) -> Result<Track<T>> {
    let (batch, hidden) = (p.dims.batch, p.dims.hidden);
    let width = 4 * hidden;
    let (w, r) = p.weights(d);
    let rt = transposed(r, width, hidden);
    let (wb, rb) = p.biases(d);
    let bias: Vec<T> = wb.iter().zip(&rb).map(|(&a, &b)| a + b).collect();
    let xw = p.project(w, &bias)?;
    let mut c = p.initial(initial_c, d);
    let h = p.initial(p.initial_h.as_deref(), d);
    let (y, h) = p.scan(d, &xw, width, h, |active, g, h| {
        gemm(
            View::rows(h, batch, hidden),
            View::rows(&rt, hidden, width),
            T::ONE,
            g,
            width,
        )?;
        let rows = g
            .chunks_exact(width)
            .zip(h.chunks_exact_mut(hidden))
            .zip(c.chunks_exact_mut(hidden));
        for (((g, h), c), _) in rows.zip(active).filter(|(_, &on)| on) {
            cell.update(g, h, c);
        }
        Ok(())
    })?;
    Ok(Track {
        y,
        states: vec![h, c],
    })
}
