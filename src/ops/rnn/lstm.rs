//! `LSTM`: gates `i`, `o`, `f`, `c` (in that order in `W`, `R` and `B`), peepholes `P` (`i`,
//! `o`, `f`), `input_forget`, and the cell state `initial_c`/`Y_c` besides the hidden state.
//!
//! Per step, with `f`, `g`, `h` the direction's activations (default Sigmoid, Tanh, Tanh) and
//! the clip applied to every gate's input:
//! `i = f(Xi + Hi + Pi*C)`, `f = f(Xf + Hf + Pf*C)` (or `1 - i` with `input_forget`),
//! `c = g(Xc + Hc)`, `C' = f*C + i*c`, `o = f(Xo + Ho + Po*C')`, `H' = o*h(C')`, where `X*`
//! and `H*` are the input and recurrent projections with their biases.
//!
//! The two matrix products (`X W^T` of all steps, `H R^T` of each step) go through
//! [`Products`], so `com.microsoft.DynamicQuantizeLSTM` (`ops::contrib`) runs this same cell
//! with 8-bit weights and dynamically quantised activations ([`eval_with`]).

use crate::error::Result;
use crate::ir::{Node, TensorType};
use crate::ops::{EvalCtx, InferCtx};
use crate::tensor::{try_vec, Tensor};

use super::math::Activation;
use super::product::{StepWeights, View};
use super::schedule::{self, Dims, Problem, RecurrentOp, Spec, Track, WeightLayout};
use crate::ops::num::Real;

/// Position of `initial_c` among the inputs.
const INITIAL_C: usize = 6;
/// Position of `P`.
const P: usize = 7;

/// `LSTM`: its spec and `input_forget`.
pub(super) struct Lstm;

impl RecurrentOp for Lstm {
    const SPEC: Spec = Spec {
        gates: 4,
        activations: &["Sigmoid", "Tanh", "Tanh"],
        weights: WeightLayout::Gates,
    };

    /// `input_forget`.
    fn flag(node: &Node, _opset: i64) -> Result<bool> {
        Ok(node.attr_int("input_forget", 0)? != 0)
    }
}

/// The LSTM of [`eval_with`]: `W` and `R` transposed, read by the caller.
pub(in crate::ops) struct TransposedLstm;

impl RecurrentOp for TransposedLstm {
    const SPEC: Spec = Spec {
        weights: WeightLayout::Transposed,
        ..Lstm::SPEC
    };

    fn flag(node: &Node, opset: i64) -> Result<bool> {
        Lstm::flag(node, opset)
    }
}

/// The two matrix products of one direction of an LSTM, however the weights are stored.
pub(in crate::ops) trait Products<T> {
    /// `X W^T + bias` for every row of `x` (`[rows, input]`, `rows` rows in storage order), as
    /// `[rows, 4*hidden]`. The first `live` rows are the times before the longest sequence ends
    /// (onnxruntime's product covers those).
    fn project(&mut self, x: &[T], rows: usize, live: usize, bias: &[T]) -> Result<Vec<T>>;

    /// `g += h R^T` for the state `h` (`[batch, hidden]`, `g` `[batch, 4*hidden]`). `live`
    /// marks the rows whose state onnxruntime still holds at this step (all at the first step,
    /// then those active at the previous one; the others are zeros there).
    fn recur(&mut self, h: &[T], live: &[bool], g: &mut [T]) -> Result<()>;
}

/// The ONNX operator's products: float `W` (`[4*hidden, input]`) and `R` (`[4*hidden, hidden]`).
struct FloatProducts<'a, T: Clone> {
    w: &'a [T],
    rt: &'a StepWeights<'a, T>,
    input: usize,
    hidden: usize,
}

impl<T: Real> Products<T> for FloatProducts<'_, T> {
    fn project(&mut self, x: &[T], rows: usize, _: usize, bias: &[T]) -> Result<Vec<T>> {
        schedule::project(x, rows, self.input, self.w, bias)
    }

    fn recur(&mut self, h: &[T], live: &[bool], g: &mut [T]) -> Result<()> {
        let width = 4 * self.hidden;
        self.rt
            .view()
            .multiply(View::rows(h, live.len(), self.hidden), T::ONE, g, width)
    }
}

pub(super) fn eval(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    schedule::by_precision(ctx, inputs, run::<f32>, run::<f64>)
}

pub(super) fn infer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    schedule::infer::<Lstm>(ctx, 2)
}

/// The output types of [`eval_with`]'s node.
pub(in crate::ops) fn infer_transposed(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    schedule::infer::<TransposedLstm>(ctx, 2)
}

fn run<T: Real + 'static>(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let p = Problem::<T>::new::<Lstm>(ctx, inputs)?;
    let Dims { hidden, input, .. } = p.dims;
    let steps = p.step_weights(ctx, 4 * hidden, hidden)?;
    lstm(inputs, &p, |d| {
        Ok(FloatProducts {
            w: p.weights(d).0,
            rt: &steps[d],
            input,
            hidden,
        })
    })
}

/// `LSTM` in `f32` on weights the caller reads: `W` `[num_directions, input_size,
/// 4*hidden_size]` and `R` `[num_directions, hidden_size, 4*hidden_size]`, of any type, with
/// `products(d)` computing direction `d`'s products. Inputs 0 to 7 and the attributes are the
/// ONNX operator's (without `layout`).
pub(in crate::ops) fn eval_with<P: Products<f32>>(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
    products: impl Fn(usize) -> Result<P> + Sync,
) -> Result<Vec<Tensor>> {
    let p = Problem::<f32>::new::<TransposedLstm>(ctx, inputs)?;
    lstm(inputs, &p, products)
}

/// Runs the LSTM of `p` with `products(d)` for direction `d`.
fn lstm<T: Real, P: Products<T>>(
    inputs: &[Option<&Tensor>],
    p: &Problem<'_, T>,
    products: impl Fn(usize) -> Result<P> + Sync,
) -> Result<Vec<Tensor>> {
    let hidden = p.dims.hidden;
    let initial_c = p.state(inputs, INITIAL_C, "initial_c")?;
    let peepholes = p.per_direction(inputs, P, "P", 3 * hidden)?;
    p.run(|d| {
        let peep = match &peepholes {
            Some(all) => all[3 * hidden * d..3 * hidden * (d + 1)].to_vec(),
            None => vec![T::ZERO; 3 * hidden],
        };
        let cell = Cell {
            p,
            acts: p.activations(d),
            peep: &peep,
            input_forget: p.flag,
        };
        direction(p, d, initial_c.as_deref(), &cell, products(d)?)
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
    /// Advances one batch entry: `g` holds its four gate inputs (without peepholes; it is
    /// overwritten), `h` and `c` its states. Each step runs over the whole row, so the gate
    /// activations are vector loops ([`Problem::gates`]); the arithmetic per element is the
    /// cell's formula in its order.
    fn update(&self, g: &mut [T], h: &mut [T], c: &mut [T]) {
        let n = h.len();
        let (f, gc, hc) = (self.acts[0], self.acts[1], self.acts[2]);
        let (gi, rest) = g.split_at_mut(n);
        let (go, rest) = rest.split_at_mut(n);
        let (gf, gg) = rest.split_at_mut(n);
        let (pi, rest) = self.peep.split_at(n);
        let (po, pf) = rest.split_at(n);
        // The input and forget gates see the previous cell state through their peepholes.
        for (((gi, gf), (&pi, &pf)), &prev) in gi
            .iter_mut()
            .zip(gf.iter_mut())
            .zip(pi.iter().zip(pf))
            .zip(&*c)
        {
            *gi += pi * prev;
            *gf += pf * prev;
        }
        self.p.gates(f, gi);
        if self.input_forget {
            for (gf, &i) in gf.iter_mut().zip(&*gi) {
                *gf = T::ONE - i;
            }
        } else {
            self.p.gates(f, gf);
        }
        self.p.gates(gc, gg);
        for (((c, &forget), &i), &candidate) in c.iter_mut().zip(&*gf).zip(&*gi).zip(&*gg) {
            *c = forget * *c + i * candidate;
        }
        // The output gate sees the new cell state.
        for ((go, &po), &cell) in go.iter_mut().zip(po).zip(&*c) {
            *go += po * cell;
        }
        self.p.gates(f, go);
        // The clip bounds gate inputs only, not the cell state `h` reads.
        h.copy_from_slice(c);
        hc.apply(h);
        for (h, &o) in h.iter_mut().zip(&*go) {
            *h = o * *h;
        }
    }
}

/// Runs direction `d` and returns its `Y` rows, final `h` and final `c`.
fn direction<T: Real>(
    p: &Problem<'_, T>,
    d: usize,
    initial_c: Option<&[T]>,
    cell: &Cell<'_, '_, T>,
    mut products: impl Products<T>,
) -> Result<Track<T>> {
    let Dims {
        seq, batch, hidden, ..
    } = p.dims;
    let width = 4 * hidden;
    // The rows of the times before the longest sequence ends are the first ones when X is
    // time-major, as it always is for `eval_with` (no layout); the float products ignore this.
    let live_rows = p.longest() * batch;
    let xw = products.project(p.x(), seq * batch, live_rows, &p.summed_biases(d))?;
    let mut c = p.initial(initial_c, d);
    let h = p.initial(p.initial_h.as_deref(), d);
    let mut live = try_vec(batch, true)?;
    let (y, h) = p.scan(d, &xw, width, h, |active, g, h| {
        products.recur(h, &live, g)?;
        live.copy_from_slice(active);
        let rows = g
            .chunks_exact_mut(width)
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

#[cfg(test)]
mod tests {
    use super::super::schedule::testing::*;
    use crate::ir::AttrValue;
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    // A bidirectional LSTM with biases and initial states, seq_length 3, batch 2, input 2,
    // hidden 2.
    const X: &[f32] = &[
        0.3, 0.8, 0.6, -0.5, -0.4, 0.7, -1.0, 0.6, 0.6, -0.1, -0.4, -0.4,
    ];
    const W: &[f32] = &[
        -0.5, -0.1, 0.0, 0.1, 1.0, 0.6, 0.2, 1.0, -0.6, -0.7, 0.2, -0.9, -0.9, 0.0, -0.1, 0.8, 0.3,
        0.0, -0.0, -0.5, -1.0, -0.6, 0.4, -0.6, -0.3, -1.0, 0.7, -0.7, -0.5, 0.8, 0.0, 0.7,
    ];
    const R: &[f32] = &[
        0.3, 0.5, -0.8, 0.1, 0.0, 0.7, -0.3, 0.2, -0.9, -0.2, -0.4, -0.7, 0.6, -0.2, 1.0, 0.2, 0.2,
        0.3, 0.4, -0.7, -0.1, -0.5, -0.2, -0.8, 0.9, -0.6, 0.3, -0.4, 0.7, 0.3, -0.7, 0.7,
    ];
    const B: &[f32] = &[
        0.9, 0.8, 0.1, -0.7, -0.6, 0.9, 0.1, -0.6, 0.8, 0.3, 0.1, -0.2, -0.2, -0.5, -0.9, 0.8,
        -0.1, 0.1, -0.4, 0.5, -0.9, -0.3, -0.9, -0.8, 0.9, 0.3, -0.1, 0.0, 0.7, -0.3, 0.2, 0.4,
    ];
    const H0: &[f32] = &[-0.3, 0.0, 0.5, 0.8, -0.7, 0.9, -1.0, 0.5];
    const C0: &[f32] = &[0.6, -0.7, -0.2, 0.6, -1.0, 0.3, 0.6, 0.0];
    const LENS: &[i32] = &[3, 2];

    // Computed with onnx.reference (which ignores sequence_lens) on each batch entry's valid
    // prefix, then padded with zeros; onnxruntime with sequence_lens agrees within 6e-8.
    const Y: &[f32] = &[
        -0.3618667,
        0.02709866,
        -0.481853,
        0.1158324,
        -0.04441636,
        0.09307925,
        -0.1776809,
        -0.1588778,
        -0.3275412,
        0.1592178,
        -0.2001082,
        0.1985901,
        -0.07449014,
        0.08848702,
        -0.03392674,
        0.1022988,
        -0.5147271,
        0.01662587,
        0.0,
        0.0,
        -0.1333075,
        0.172764,
        0.0,
        0.0,
    ];
    const Y_H: &[f32] = &[
        -0.5147271,
        0.01662587,
        -0.2001082,
        0.1985901,
        -0.04441636,
        0.09307925,
        -0.1776809,
        -0.1588778,
    ];
    const Y_C: &[f32] = &[
        -0.9382342, 0.05186555, -0.5316205, 0.5170919, -0.2133318, 0.1805878, -0.681448, -0.2230371,
    ];

    fn bidirectional(layout: i64) -> crate::ir::Node {
        node(
            "LSTM",
            &[
                "X",
                "W",
                "R",
                "B",
                "sequence_lens",
                "initial_h",
                "initial_c",
            ],
            &[
                ("direction", string("bidirectional")),
                ("hidden_size", AttrValue::Int(2)),
                ("layout", AttrValue::Int(layout)),
            ],
        )
    }

    fn run(node: &crate::ir::Node, inputs: &[Tensor]) -> crate::error::Result<Vec<Tensor>> {
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
        eval_node(node, 14, &refs)
    }

    fn weights() -> [Tensor; 3] {
        [f32s(&[2, 8, 2], W), f32s(&[2, 8, 2], R), f32s(&[2, 16], B)]
    }

    #[test]
    fn bidirectional_with_sequence_lens_matches_onnx_reference() {
        let [w, r, b] = weights();
        let inputs = [
            f32s(&[3, 2, 2], X),
            w,
            r,
            b,
            i32s(LENS),
            f32s(&[2, 2, 2], H0),
            f32s(&[2, 2, 2], C0),
        ];
        let out = run(&bidirectional(0), &inputs).unwrap();
        assert_eq!(out.len(), 3);
        assert_close(&out[0], &[3, 2, 2, 2], Y);
        assert_close(&out[1], &[2, 2, 2], Y_H);
        assert_close(&out[2], &[2, 2, 2], Y_C);
    }

    #[test]
    fn batch_major_layout_moves_the_batch_first() {
        let [w, r, b] = weights();
        let inputs = [
            f32s(&[2, 3, 2], &swap01(X, 3, 2)),
            w,
            r,
            b,
            i32s(LENS),
            f32s(&[2, 2, 2], &swap01(H0, 2, 2)),
            f32s(&[2, 2, 2], &swap01(C0, 2, 2)),
        ];
        let out = run(&bidirectional(1), &inputs).unwrap();
        // Y is [batch, seq, num_directions, hidden]: [seq, dir, batch] with batch moved first.
        let y_bsd: Vec<f32> = (0..2)
            .flat_map(|b| {
                (0..3).flat_map(move |t| {
                    (0..2).flat_map(move |d| (0..2).map(move |j| ((t * 2 + d) * 2 + b) * 2 + j))
                })
            })
            .map(|k| Y[k])
            .collect();
        assert_close(&out[0], &[2, 3, 2, 2], &y_bsd);
        assert_close(&out[1], &[2, 2, 2], &swap01(Y_H, 2, 2));
        assert_close(&out[2], &[2, 2, 2], &swap01(Y_C, 2, 2));
    }

    #[test]
    fn double_and_half_compute_the_same_values() {
        let widen = |t: &Tensor, dtype: DataType| -> Tensor {
            let v = t.as_slice::<f32>().unwrap();
            match dtype {
                DataType::Double => {
                    Tensor::from_vec(dtype, t.shape(), v.iter().map(|&x| x as f64).collect())
                }
                _ => Tensor::from_vec(
                    dtype,
                    t.shape(),
                    v.iter().map(|&x| half::f16::from_f32(x)).collect(),
                ),
            }
            .unwrap()
        };
        let [w, r, b] = weights();
        let floats = [f32s(&[3, 2, 2], X), w, r, b];
        for (dtype, tolerance) in [(DataType::Double, 1e-6), (DataType::Float16, 2e-2)] {
            let mut inputs: Vec<Tensor> = floats.iter().map(|t| widen(t, dtype)).collect();
            inputs.push(i32s(LENS));
            inputs.push(widen(&f32s(&[2, 2, 2], H0), dtype));
            inputs.push(widen(&f32s(&[2, 2, 2], C0), dtype));
            let out = run(&bidirectional(0), &inputs).unwrap();
            assert_eq!(out[0].dtype(), dtype);
            let got: Vec<f64> = match dtype {
                DataType::Double => out[0].to_vec::<f64>().unwrap(),
                _ => out[0]
                    .as_slice::<half::f16>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_f64())
                    .collect(),
            };
            for (g, &e) in got.iter().zip(Y) {
                assert!(
                    (g - e as f64).abs() < tolerance,
                    "{dtype}: got {g}, expected {e}"
                );
            }
        }
    }

    #[test]
    fn coupled_input_and_forget_gates_with_peepholes() {
        // One step, hidden 1, all gate inputs zero except through the peepholes:
        // i = sigmoid(Pi * c0), f = 1 - i, C = f * c0 + i * tanh(0), o = sigmoid(Po * C),
        // H = o * tanh(C).
        let n = node(
            "LSTM",
            &["X", "W", "R", "", "", "", "initial_c", "P"],
            &[("input_forget", AttrValue::Int(1))],
        );
        let inputs = [
            Some(f32s(&[1, 1, 1], &[1.0])),
            Some(f32s(&[1, 4, 1], &[0.0; 4])),
            Some(f32s(&[1, 4, 1], &[0.0; 4])),
            None,
            None,
            None,
            Some(f32s(&[1, 1, 1], &[2.0])),
            Some(f32s(&[1, 3], &[0.5, -1.0, 3.0])),
        ];
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
        let out = eval_node(&n, 7, &refs).unwrap();
        let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
        let i = sigmoid(0.5 * 2.0);
        let c = (1.0 - i) * 2.0;
        let h = sigmoid(-c) * c.tanh();
        assert_close(&out[1], &[1, 1, 1], &[h]);
        assert_close(&out[2], &[1, 1, 1], &[c]);
    }

    #[test]
    fn malformed_inputs_fail_with_a_reason() {
        let [w, r, b] = weights();
        let x = f32s(&[3, 2, 2], X);
        let n = bidirectional(0);
        let bad_p = node(
            "LSTM",
            &["X", "W", "R", "B", "", "", "", "P"],
            &[("direction", string("bidirectional"))],
        );
        let p = f32s(&[2, 5], &[0.0; 10]);
        let refs = [
            Some(&x),
            Some(&w),
            Some(&r),
            Some(&b),
            None,
            None,
            None,
            Some(&p),
        ];
        let err = eval_node(&bad_p, 14, &refs).unwrap_err();
        assert!(
            err.to_string()
                .contains("P has shape [2, 5], expected [2, 6]"),
            "{err}"
        );

        let forward = node("LSTM", &["X", "W", "R"], &[]);
        let err = eval_node(&forward, 14, &[Some(&x), Some(&w), Some(&r)]).unwrap_err();
        assert!(
            err.to_string()
                .contains("R has shape [2, 8, 2], expected [1, 8, 2]"),
            "{err}"
        );

        let lens = i32s(&[3, 4]);
        let err = run(&n, &[x.clone(), w.clone(), r.clone(), b.clone(), lens]).unwrap_err();
        assert!(err.to_string().contains("sequence length 4"), "{err}");

        let x64 = Tensor::from_vec(DataType::Double, &[3, 2, 2], vec![0.0f64; 12]).unwrap();
        let err = run(&n, &[x64, w.clone(), r.clone()]).unwrap_err();
        assert!(
            err.to_string()
                .contains("input 1 is float, but X is double"),
            "{err}"
        );

        let sized = node(
            "LSTM",
            &["X", "W", "R"],
            &[
                ("direction", string("bidirectional")),
                ("hidden_size", AttrValue::Int(3)),
            ],
        );
        let err = run(&sized, &[x, w, r]).unwrap_err();
        assert!(err.to_string().contains("hidden_size is 3"), "{err}");
    }
}
