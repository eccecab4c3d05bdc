//! `DynamicQuantizeLSTM` (com.microsoft, opset 1): the LSTM that onnxruntime's dynamic quantiser
//! (`onnxruntime.quantization.quantize_dynamic`) makes of an ONNX `LSTM`, with 8-bit weights and
//! activations quantised on the fly.
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, section `com.microsoft.DynamicQuantizeLSTM`.
//! Inputs 0 to 7 and the attributes are the ONNX `LSTM`'s (no `layout`), except that `W` is
//! `[num_directions, input_size, 4*hidden_size]` and `R` `[num_directions, hidden_size,
//! 4*hidden_size]`, int8 or uint8 (the transposes of the float weights), followed by
//! `W_scale`, `W_zero_point`, `R_scale`, `R_zero_point`: per direction (`[num_directions]`) or per
//! gate unit (`[num_directions, 4*hidden_size]`). Per gate unit, int8 zero points must be zero
//! and uint8 ones all equal (onnxruntime refuses others). `X` and the outputs are float.
//!
//! The cell is the ONNX `LSTM`'s (`ops::rnn`, through its [`Products`] hook); only the two
//! products differ, computed as onnxruntime's CPU kernel does: the input product quantises the
//! rows of `X` before the longest sequence's end as one uint8 matrix (`DynamicQuantizeLinear`:
//! its range widened to hold 0), each step's recurrent product quantises the hidden state of the
//! batch entries onnxruntime still holds, and each product is exact in 32-bit integers
//! (`(a - a_zero) * (w - w_zero)`, on the integer kernel with `W` and `R` packed once per plan),
//! then scaled by `a_scale * w_scale` as one float multiplier. Input sizes past the exact
//! range of 32-bit sums (33,025) are refused.
//! Onnxruntime splits a large batch across its threads and quantises each part on its own; this
//! kernel quantises the whole batch, as onnxruntime does on one thread.

use crate::error::{Error, Result};
use crate::tensor::{try_vec, try_with_capacity, Tensor};
use crate::DataType;

use super::super::nn::{
    dynamic_scale, igemm_to, quantize_u8, Bytes, IgemmSink, Level, PackedA, PackedB, EXACT_K,
};
use super::super::rnn::{eval_lstm_with, Products};
use super::super::util::required;
use super::super::EvalCtx;
use super::activations::floats;

/// Position of `W_scale`; `W_zero_point`, `R_scale` and `R_zero_point` follow.
const W_SCALE: usize = 8;

/// One direction's 8-bit weights (`[k, n]`, row-major), packed for the integer kernel, with
/// their zero point and scales.
struct Weights {
    packed: PackedB,
    zero: i32,
    k: usize,
    n: usize,
    /// One scale, or one per column.
    scales: Vec<f32>,
}

impl Weights {
    /// Direction `d` of `w` (`[num_directions, k, n]`, shape already checked) with its scale
    /// and zero point.
    fn read(
        (w, scale, zero): (&Tensor, &Tensor, &Tensor),
        d: usize,
        name: &str,
    ) -> Result<Weights> {
        let &[directions, k, n] = w.shape() else {
            return Err(Error::Eval(format!(
                "{name} {:?} is not of rank 3",
                w.shape()
            )));
        };
        if !matches!(w.dtype(), DataType::Int8 | DataType::Uint8) || zero.dtype() != w.dtype() {
            return Err(Error::Eval(format!(
                "{name} and {name}_zero_point must both be int8 or uint8, found {} and {}",
                w.dtype(),
                zero.dtype()
            )));
        }
        if k > EXACT_K {
            return Err(Error::Unsupported(format!(
                "DynamicQuantizeLSTM: {name} has {k} rows; the 32-bit integer sums are exact up \
                 to {EXACT_K}"
            )));
        }
        let signed = w.dtype() == DataType::Int8;
        // Per direction or per column, like onnxruntime's check.
        let per = |t: &Tensor, what: &str| -> Result<usize> {
            match t.shape() {
                [nd] if *nd == directions => Ok(1),
                [nd, cols] if *nd == directions && *cols == n => Ok(n),
                other => Err(Error::Eval(format!(
                    "{name}_{what} {other:?} is neither [{directions}] nor [{directions}, {n}]"
                ))),
            }
        };
        let count = per(scale, "scale")?;
        let all_scales = floats(scale, "DynamicQuantizeLSTM scale")?;
        let scales = all_scales[d * count..(d + 1) * count].to_vec();
        let zeros: Vec<i32> = if signed {
            zero.as_slice::<i8>()?
                .iter()
                .map(|&z| i32::from(z))
                .collect()
        } else {
            zero.as_slice::<u8>()?
                .iter()
                .map(|&z| i32::from(z))
                .collect()
        };
        let z = if per(zero, "zero_point")? == 1 {
            zeros[d]
        } else if zeros.iter().all(|&z| z == zeros[0]) && (!signed || zeros[0] == 0) {
            zeros[0]
        } else {
            return Err(Error::Eval(format!(
                "per-column {name}_zero_point must be {}",
                if signed { "zero" } else { "one value" }
            )));
        };
        let len = k * n;
        let codes = Bytes {
            data: &w.as_bytes()?[d * len..(d + 1) * len],
            signed,
        };
        Ok(Weights {
            packed: PackedB::new(codes, k, n, Level::detect())?.split_pairs()?,
            zero: z,
            k,
            n,
            scales,
        })
    }

    /// `out[r] += float((a[r] - zero) . B) * (a_scale * scale)` for the `rows` rows of codes
    /// `a` (`[rows, k]`) and of `out` (`[rows, n]`): the sums exact in 32-bit integers, then
    /// scaled as one float multiplier per column, added as the kernel finishes each run of a
    /// row (no `int32` product is stored).
    fn accumulate(
        &self,
        a: &[u8],
        rows: usize,
        (a_scale, zero): (f32, u8),
        out: &mut [f32],
    ) -> Result<()> {
        if out.len() != rows * self.n {
            return Err(Error::Eval("the gates do not hold the product".into()));
        }
        let codes = Bytes {
            data: a,
            signed: false,
        };
        let level = self.packed.level();
        let packed = PackedA::new(codes, rows, self.k, &[i32::from(zero)], level)?;
        let sink = AddScaled {
            ptr: out.as_mut_ptr(),
            n: self.n,
            scales: &self.scales,
            a_scale,
        };
        igemm_to(&packed, &self.packed, &[self.zero], &sink)
    }
}

/// The sink of [`Weights::accumulate`]: rows of `n` floats, each sum added times
/// `a_scale * scale` (one scale, or one per column).
struct AddScaled<'s> {
    ptr: *mut f32,
    n: usize,
    scales: &'s [f32],
    a_scale: f32,
}

// SAFETY: the kernel's tasks store disjoint (row, column) segments (`Sink::store`'s contract).
unsafe impl Send for AddScaled<'_> {}
unsafe impl Sync for AddScaled<'_> {}

impl IgemmSink for AddScaled<'_> {
    unsafe fn store(&self, i: usize, col0: usize, sums: &[i32]) {
        // SAFETY: the segment lies in the output (the caller's promise) and is this call's alone.
        let out =
            unsafe { std::slice::from_raw_parts_mut(self.ptr.add(i * self.n + col0), sums.len()) };
        match self.scales {
            [scale] => add_scaled(sums, self.a_scale * scale, out),
            scales => add_scaled_each(sums, self.a_scale, &scales[col0..col0 + sums.len()], out),
        }
    }
}

/// `out += sum as f32 * mult`, each element.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn add_scaled(sums: &[i32], mult: f32, out: &mut [f32]) {
    for (o, &s) in out.iter_mut().zip(sums) {
        *o += s as f32 * mult;
    }
}

/// `out += sum as f32 * (a_scale * scale)`, with a scale per element.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn add_scaled_each(sums: &[i32], a_scale: f32, scales: &[f32], out: &mut [f32]) {
    for ((o, &s), &scale) in out.iter_mut().zip(sums).zip(scales) {
        *o += s as f32 * (a_scale * scale);
    }
}

/// One direction's quantised products, with scratch for the codes of the hidden state.
struct Quantised<'w> {
    w: &'w Weights,
    r: &'w Weights,
    /// The codes of the hidden state (`[batch, hidden]`).
    codes: Vec<u8>,
}

impl Products<f32> for Quantised<'_> {
    fn project(&mut self, x: &[f32], rows: usize, live: usize, bias: &[f32]) -> Result<Vec<f32>> {
        let (k, n) = (self.w.k, self.w.n);
        let mut out = try_with_capacity(rows * n)?;
        for _ in 0..rows {
            out.extend_from_slice(bias);
        }
        if k == 0 {
            return Ok(out);
        }
        let (scale, zero) = dynamic_scale(x[..live * k].iter().copied());
        let mut codes = try_vec(live * k, 0u8)?;
        quantize_u8(&x[..live * k], scale, zero, &mut codes);
        self.w
            .accumulate(&codes, live, (scale, zero), &mut out[..live * n])?;
        Ok(out)
    }

    fn recur(&mut self, h: &[f32], live: &[bool], g: &mut [f32]) -> Result<()> {
        let k = self.r.k;
        if k == 0 {
            return Ok(());
        }
        let held = h
            .chunks_exact(k)
            .zip(live)
            .filter(|(_, &on)| on)
            .flat_map(|(row, _)| row.iter().copied());
        let (scale, zero) = dynamic_scale(held);
        if self.codes.len() != h.len() {
            self.codes = try_vec(h.len(), 0u8)?;
        }
        quantize_u8(h, scale, zero, &mut self.codes);
        self.r.accumulate(&self.codes, live.len(), (scale, zero), g)
    }
}

/// Each direction's `W` and `R`, packed.
type Directions = Vec<(Weights, Weights)>;

pub(in crate::ops) fn eval_dynamic_quantize_lstm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    if x.dtype() != DataType::Float {
        return Err(ctx.error(format!("X must be float, found {}", x.dtype())));
    }
    let param = |i: usize| required(inputs, W_SCALE + i);
    let w = (required(inputs, 1)?, param(0)?, param(1)?);
    let r = (required(inputs, 2)?, param(2)?, param(3)?);
    let directions = w.0.shape().first().copied().unwrap_or(0);
    let read = || -> Result<Directions> {
        (0..directions)
            .map(|d| Ok((Weights::read(w, d, "W")?, Weights::read(r, d, "R")?)))
            .collect()
    };
    // Constant weights (the quantiser's initializers) are packed once for the plan.
    let kept = ctx.remember(
        &[1, 2, W_SCALE, W_SCALE + 1, W_SCALE + 2, W_SCALE + 3],
        read,
    )?;
    let made;
    let packed: &Directions = match kept {
        Some(kept) => kept,
        None => {
            made = read()?;
            &made
        }
    };
    eval_lstm_with(ctx, inputs, |d| {
        let (w, r) = packed
            .get(d)
            .ok_or_else(|| Error::Eval(format!("W has no direction {d}")))?;
        Ok(Quantised {
            w,
            r,
            codes: Vec::new(),
        })
    })
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    fn node() -> Node {
        let inputs = ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"];
        Node::new("DynamicQuantizeLSTM", "n", inputs, ["y", "y_h", "y_c"])
            .with_domain("com.microsoft")
            .with_attr("hidden_size", AttrValue::Int(1))
    }

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn u8s(shape: &[usize], v: &[u8]) -> Tensor {
        Tensor::from_vec(DataType::Uint8, shape, v.to_vec()).unwrap()
    }

    /// The inputs of one step of `x = 1`, hidden size 1, from `W`, `R` and the scales and zero
    /// points (no bias, lengths, states or peepholes).
    fn one_step(w: Tensor, r: Tensor, params: [Tensor; 4]) -> Vec<Option<Tensor>> {
        let mut inputs = vec![Some(f32s(&[1, 1, 1], &[1.0])), Some(w), Some(r)];
        inputs.extend([None, None, None, None, None]);
        inputs.extend(params.map(Some));
        inputs
    }

    fn run(inputs: &[Option<Tensor>]) -> crate::error::Result<Vec<Tensor>> {
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
        eval_node(&node(), 1, &refs)
    }

    /// One step, input 1, hidden 1: `x = 1` quantises to code 255 at scale 1/255, so each gate
    /// input is `(w - 100) * w_scale[gate]`, the recurrent product of the zero state is 0.
    #[test]
    fn uint8_weights_subtract_their_zero_point_and_scale_per_gate_unit() {
        let w = u8s(&[1, 1, 4], &[102, 99, 104, 110]);
        let scales = [0.5f32, 0.25, 0.125, 0.1];
        let out = run(&one_step(
            w,
            u8s(&[1, 1, 4], &[7; 4]),
            [
                f32s(&[1, 4], &scales),
                u8s(&[1, 4], &[100; 4]),
                f32s(&[1], &[0.3]),
                u8s(&[1], &[7]),
            ],
        ))
        .unwrap();
        let mult = |k: usize| (1.0f32 / 255.0) * scales[k];
        let gate = |k: usize, code: f32| 255.0 * code * mult(k);
        let sigmoid = |v: f32| 1.0 / (1.0 + (-v).exp());
        // The forget gate multiplies the zero initial cell.
        let (i, o, c) = (gate(0, 2.0), gate(1, -1.0), gate(3, 10.0));
        let cell = sigmoid(i) * c.tanh();
        let h = sigmoid(o) * cell.tanh();
        for (t, want) in out.iter().zip([h, h, cell]) {
            let got = t.as_slice::<f32>().unwrap()[0];
            assert!((got - want).abs() < 1e-6, "got {got}, expected {want}");
        }
    }

    #[test]
    fn per_gate_unit_int8_zero_points_must_be_zero() {
        let i8s = |v: &[i8]| Tensor::from_vec(DataType::Int8, &[1, 1, 4], v.to_vec()).unwrap();
        let zeros = Tensor::from_vec(DataType::Int8, &[1, 4], vec![0i8, 0, 1, 0]).unwrap();
        let err = run(&one_step(
            i8s(&[1; 4]),
            i8s(&[1; 4]),
            [
                f32s(&[1], &[0.5]),
                zeros,
                f32s(&[1], &[0.5]),
                Tensor::from_vec(DataType::Int8, &[1], vec![0i8]).unwrap(),
            ],
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("W_zero_point must be zero"), "{err}");
    }

    #[test]
    fn float_weights_are_refused_with_their_type() {
        let err = run(&one_step(
            f32s(&[1, 1, 4], &[0.0; 4]),
            f32s(&[1, 1, 4], &[0.0; 4]),
            [
                f32s(&[1], &[0.5]),
                u8s(&[1], &[0]),
                f32s(&[1], &[0.5]),
                u8s(&[1], &[0]),
            ],
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("int8 or uint8, found float"), "{err}");
    }
}
