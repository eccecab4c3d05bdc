//! What `LSTM`, `GRU` and `RNN` share: attributes (direction, activations with their alpha and
//! beta, clip, layout, hidden_size), validation of the shared inputs, the input projection of all
//! time steps as one GEMM, the per-step schedule under `sequence_lens`, running the directions,
//! and the assembly of `Y` and the final states.
//!
//! Why one file: it is the one schedule (projection, time steps, directions, assembly) the three
//! cells run under; the cells are `lstm.rs`, `gru.rs` and `simple.rs`, the matrix helpers `math.rs`.
//!
//! Design note: `X` is never transposed. Its rows (one per time step and batch entry, in storage
//! order) are projected through `W` at once; each step then gathers the rows of its batch
//! entries from that projection. The reverse direction of a batch entry of length `len` visits
//! times `len - 1` down to `0`, so at one step different entries may read different times. An
//! entry whose sequence has ended keeps its state and writes no output (its `Y` rows stay zero);
//! its final state is the one of its last valid step. A zero-length sequence has zero final
//! states, as in onnxruntime.

use crate::tensor::{try_vec, try_with_capacity};
use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::ir::{AttrValue, Dim, Node, Shape, TensorType};
use crate::ops::num::{Float, Real};
use crate::ops::util::{optional, required, to_i64s};
use crate::ops::{Attributes, EvalCtx, EvalFn, InferCtx};
use crate::tensor::Tensor;
use crate::DataType;

use super::math::{max, min, Activation};
use super::product::{gemm, panelled, StepWeights, View};

/// Position of `X` among the inputs (the same for the three operators).
pub(super) const X: usize = 0;
/// Position of `W`.
pub(super) const W: usize = 1;
/// Position of `R`.
pub(super) const R: usize = 2;
/// Position of `B`.
pub(super) const B: usize = 3;
/// Position of `sequence_lens`.
pub(super) const SEQUENCE_LENS: usize = 4;
/// Position of `initial_h`.
pub(super) const INITIAL_H: usize = 5;

/// The `direction` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
    Forward,
    Reverse,
    Bidirectional,
}

impl Direction {
    /// The node's direction (default `forward`).
    pub fn of(node: &Node) -> Result<Direction> {
        match node.attr_string("direction")?.unwrap_or("forward") {
            "forward" => Ok(Direction::Forward),
            "reverse" => Ok(Direction::Reverse),
            "bidirectional" => Ok(Direction::Bidirectional),
            other => Err(Error::Eval(format!(
                "direction must be forward, reverse or bidirectional, not '{other}'"
            ))),
        }
    }

    /// `num_directions`: 2 when bidirectional, else 1.
    pub fn count(self) -> usize {
        if self == Direction::Bidirectional {
            2
        } else {
            1
        }
    }

    /// Whether direction `d` (0 or 1) runs backwards in time.
    fn reverses(self, d: usize) -> bool {
        self == Direction::Reverse || (self == Direction::Bidirectional && d == 1)
    }
}

/// Whether the node uses `layout = 1` (batch-major `X`, `Y`, states), which opsets before 14 do
/// not have.
pub(super) fn batch_major(node: &Node, opset: i64) -> Result<bool> {
    if opset < 14 {
        return Ok(false);
    }
    match node.attr_int("layout", 0)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(Error::Eval(format!("layout must be 0 or 1, not {other}"))),
    }
}

/// The activations of every direction, `per_direction` each (forward first): the
/// `activations` attribute with `activation_alpha`/`activation_beta`, or `defaults` repeated.
fn activations(node: &Node, defaults: &[&str], directions: usize) -> Result<Vec<Activation>> {
    let floats = |name| match node.attr(name) {
        None => Ok(&[][..]),
        Some(AttrValue::Floats(v)) => Ok(&v[..]),
        Some(other) => Err(Error::Eval(format!(
            "{name} must be floats, not {}",
            other.type_name()
        ))),
    };
    let names: Vec<String> = match node.attr("activations") {
        None => (0..directions)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
        Some(AttrValue::Strings(v)) => v
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        Some(other) => {
            return Err(Error::Eval(format!(
                "activations must be strings, not {}",
                other.type_name()
            )))
        }
    };
    let want = defaults.len() * directions;
    if names.len() != want {
        return Err(Error::Eval(format!(
            "activations lists {} functions, expected {want} ({} per direction)",
            names.len(),
            defaults.len()
        )));
    }
    Activation::parse_all(
        &names,
        floats("activation_alpha")?,
        floats("activation_beta")?,
    )
}

/// The sizes of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Dims {
    pub seq: usize,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
    pub directions: usize,
    /// Gate blocks in `W`, `R` and each half of `B`: 4 (LSTM), 3 (GRU), 1 (RNN).
    pub gates: usize,
}

/// What each operator declares about itself to [`Problem::new`].
pub(super) struct Spec {
    /// Gate blocks in `W` and `R`.
    pub gates: usize,
    /// The activations of one direction when the node does not list them.
    pub activations: &'static [&'static str],
    /// How `W` and `R` are stored.
    pub weights: WeightLayout,
}

/// A recurrent operator as [`Problem::new`] sees it: its [`Spec`] and its one flag attribute.
pub(super) trait RecurrentOp: Send + Sync + 'static {
    /// What the operator declares about itself.
    const SPEC: Spec;

    /// GRU's `linear_before_reset`, LSTM's `input_forget`; `false` for the others.
    fn flag(_node: &Node, _opset: i64) -> Result<bool> {
        Ok(false)
    }
}

/// The attributes a recurrent kernel reads, parsed once per plan ([`crate::ops::OpDef::prepare`]):
/// `direction`, `layout`, `hidden_size`, the activations with their alpha and beta, `clip`
/// and the operator's flag.
pub(super) struct Recurrent<C> {
    direction: Direction,
    batch_major: bool,
    hidden_size: Option<i64>,
    activations: Vec<Activation>,
    clip: Option<f32>,
    /// [`RecurrentOp::flag`].
    flag: bool,
    op: std::marker::PhantomData<fn() -> C>,
}

impl<C> Clone for Recurrent<C> {
    fn clone(&self) -> Self {
        Recurrent {
            activations: self.activations.clone(),
            ..*self
        }
    }
}

impl<C: RecurrentOp> Attributes for Recurrent<C> {
    fn parse(node: &Node, opset: i64) -> Result<Self> {
        let direction = Direction::of(node)?;
        let clip = match node.attr("clip") {
            None => None,
            Some(AttrValue::Float(c)) if *c >= 0.0 => Some(*c),
            Some(_) => return Err(Error::Eval("clip must be a non-negative float".into())),
        };
        let hidden_size = match node.attr("hidden_size") {
            None => None,
            Some(_) => Some(node.attr_int("hidden_size", 0)?),
        };
        Ok(Recurrent {
            direction,
            batch_major: batch_major(node, opset)?,
            hidden_size,
            activations: activations(node, C::SPEC.activations, direction.count())?,
            clip,
            flag: C::flag(node, opset)?,
            op: std::marker::PhantomData,
        })
    }
}

/// How a node stores `W` and `R`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WeightLayout {
    /// In `X`'s element type, `[num_directions, gates*hidden_size, input_size]` and
    /// `[num_directions, gates*hidden_size, hidden_size]`: the ONNX operators.
    Gates,
    /// Of any element type, read by the operator itself: `[num_directions, input_size,
    /// gates*hidden_size]` and `[num_directions, hidden_size, gates*hidden_size]`
    /// (onnxruntime's `DynamicQuantizeLSTM`). [`Problem::weights`] is then empty.
    Transposed,
}

/// The inputs the recurrent operators share the element type of `X` among (LSTM has eight);
/// later ones (quantisation parameters) are the operator's to check.
const OWN_INPUTS: usize = 8;

/// One node's validated inputs and attributes, with the data of its floating-point inputs in
/// the compute type `T`.
pub(super) struct Problem<'a, T: Real> {
    pub dims: Dims,
    pub batch_major: bool,
    /// The length of each batch entry's sequence.
    lens: Vec<usize>,
    direction: Direction,
    activations: Vec<Activation>,
    clip: Option<T>,
    /// [`RecurrentOp::flag`]: GRU's `linear_before_reset`, LSTM's `input_forget`.
    pub flag: bool,
    /// The element type of `X` and of the outputs.
    dtype: DataType,
    x: Cow<'a, [T]>,
    w: Cow<'a, [T]>,
    r: Cow<'a, [T]>,
    b: Option<Cow<'a, [T]>>,
    pub initial_h: Option<Cow<'a, [T]>>,
}

/// Runs `f32_run` or `f64_run` by the element type of `X` (`float16` and `bfloat16` compute in
/// `f32`).
pub(super) fn by_precision(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
    f32_run: EvalFn,
    f64_run: EvalFn,
) -> Result<Vec<Tensor>> {
    match required(inputs, X)?.dtype() {
        DataType::Float | DataType::Float16 | DataType::Bfloat16 => f32_run(ctx, inputs),
        DataType::Double => f64_run(ctx, inputs),
        other => Err(crate::ops::util::unsupported_type(
            "a recurrent operator",
            other,
        )),
    }
}

/// The elements of `t` in the compute type `T`: borrowed when `t` already has that type,
/// converted from `float16`/`bfloat16` otherwise.
fn values<'a, T: Real>(t: &'a Tensor) -> Result<Cow<'a, [T]>> {
    if t.dtype() == T::DTYPE {
        return Ok(Cow::Borrowed(t.as_slice::<T>()?));
    }
    crate::ops::num::dispatch_float!(t.dtype(), S => Ok(Cow::Owned(
        t.as_slice::<S>()?.iter().map(|&v| T::from_f32(v.to_f32())).collect()
    )), _ => Err(crate::ops::util::unsupported_type("a recurrent operator", t.dtype())))
}

/// A tensor of `dtype` from values computed in `T`.
fn output<T: Real>(dtype: DataType, shape: &[usize], values: Vec<T>) -> Result<Tensor> {
    if dtype == T::DTYPE {
        return Ok(Tensor::from_vec(dtype, shape, values)?);
    }
    crate::ops::num::dispatch_float!(dtype, S => {
        let narrowed: Vec<S> = values.iter().map(|&v| S::from_f32(v.to_f32())).collect();
        Ok(Tensor::from_vec(dtype, shape, narrowed)?)
    }, _ => Err(crate::ops::util::unsupported_type("a recurrent operator", dtype)))
}

/// The product of `sizes`, as an element count whose bytes fit in memory addressing.
pub(super) fn checked_len<T>(sizes: &[usize]) -> Result<usize> {
    sizes
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| {
            n.checked_mul(std::mem::size_of::<T>())
                .is_some_and(|b| b <= isize::MAX as usize)
        })
        .ok_or_else(|| Error::Eval(format!("a buffer of {sizes:?} elements is too large")))
}

/// Checks that `t` has shape `expected`.
fn expect_shape(t: &Tensor, name: &str, expected: &[usize], meaning: &str) -> Result<()> {
    if t.shape() == expected {
        Ok(())
    } else {
        Err(Error::Eval(format!(
            "{name} has shape {:?}, expected {expected:?} ({meaning})",
            t.shape()
        )))
    }
}

/// The per-entry sequence lengths: all `seq` when `sequence_lens` is omitted.
fn sequence_lens(t: Option<&Tensor>, seq: usize, batch: usize) -> Result<Vec<usize>> {
    let Some(t) = t else {
        return Ok(vec![seq; batch]);
    };
    expect_shape(t, "sequence_lens", &[batch], "[batch_size]")?;
    to_i64s(t)?
        .into_iter()
        .map(|len| {
            usize::try_from(len)
                .ok()
                .filter(|&l| l <= seq)
                .ok_or_else(|| {
                    Error::Eval(format!(
                        "sequence length {len} is outside [0, {seq}] (seq_length)"
                    ))
                })
        })
        .collect()
}

/// `X W^T + bias` for the `rows` rows of `x` (`[rows, input]`), where `w` is `[width, input]`
/// and `width` the length of `bias`.
pub(super) fn project<T: Real>(
    x: &[T],
    rows: usize,
    input: usize,
    w: &[T],
    bias: &[T],
) -> Result<Vec<T>> {
    let width = bias.len();
    let mut out = try_with_capacity(checked_len::<T>(&[rows, width])?)?;
    for _ in 0..rows {
        out.extend_from_slice(bias);
    }
    gemm(
        View::rows(x, rows, input),
        View::rows(w, width, input).t(),
        T::ONE,
        &mut out,
        width,
    )?;
    Ok(out)
}

/// What one direction computed: its `Y` rows (`[seq, batch, hidden]`, zero past each
/// sequence's end) and its final states (`[batch, hidden]` each: `h`, then `c` for LSTM).
pub(super) struct Track<T> {
    pub y: Vec<T>,
    pub states: Vec<Vec<T>>,
}

impl<'a, T: Real> Problem<'a, T> {
    /// Validates `X`, `W`, `R`, `B`, `sequence_lens` and `initial_h` against the attributes
    /// of operator `C` (as prepared).
    pub fn new<C: RecurrentOp>(ctx: &EvalCtx<'_>, inputs: &[Option<&'a Tensor>]) -> Result<Self> {
        let attrs = ctx.attrs::<Recurrent<C>>()?;
        let spec = &C::SPEC;
        let (direction, batch_major) = (attrs.direction, attrs.batch_major);
        let (x, w, r) = (
            required(inputs, X)?,
            required(inputs, W)?,
            required(inputs, R)?,
        );
        let dtype = x.dtype();
        let transposed = spec.weights == WeightLayout::Transposed;
        for (i, t) in inputs.iter().enumerate().take(OWN_INPUTS) {
            let typed = i != SEQUENCE_LENS && !(transposed && (i == W || i == R));
            if let Some(t) = t.filter(|_| typed) {
                if t.dtype() != dtype {
                    return Err(Error::Eval(format!(
                        "input {i} is {}, but X is {dtype}",
                        t.dtype()
                    )));
                }
            }
        }
        let &[d0, d1, input] = x.shape() else {
            return Err(Error::Eval(format!(
                "X must have rank 3, found shape {:?}",
                x.shape()
            )));
        };
        let (seq, batch) = if batch_major { (d1, d0) } else { (d0, d1) };
        let directions = direction.count();
        let &[_, r1, r2] = r.shape() else {
            return Err(Error::Eval(format!(
                "R must have rank 3, found shape {:?}",
                r.shape()
            )));
        };
        let hidden = if transposed { r1 } else { r2 };
        if hidden == 0 {
            return Err(Error::Eval("hidden_size must be positive".into()));
        }
        let declared = attrs.hidden_size.unwrap_or(hidden as i64);
        if declared != hidden as i64 {
            return Err(Error::Eval(format!(
                "hidden_size is {declared}, but R has hidden size {hidden}"
            )));
        }
        let gh = spec
            .gates
            .checked_mul(hidden)
            .ok_or_else(|| Error::Eval("hidden_size is too large".into()))?;
        if transposed {
            expect_shape(
                r,
                "R",
                &[directions, hidden, gh],
                "[num_directions, hidden_size, gates*hidden_size]",
            )?;
            expect_shape(
                w,
                "W",
                &[directions, input, gh],
                "[num_directions, input_size, gates*hidden_size]",
            )?;
        } else {
            expect_shape(
                r,
                "R",
                &[directions, gh, hidden],
                "[num_directions, gates*hidden_size, hidden_size]",
            )?;
            expect_shape(
                w,
                "W",
                &[directions, gh, input],
                "[num_directions, gates*hidden_size, input_size]",
            )?;
        }
        let dims = Dims {
            seq,
            batch,
            input,
            hidden,
            directions,
            gates: spec.gates,
        };
        // Every buffer of a run is at most one of these large (per direction); `X` may be
        // empty while its batch is not, so the second does not follow from the first.
        checked_len::<T>(&[seq, batch, gh.max(input)])?;
        checked_len::<T>(&[directions, batch, gh])?;
        let lens = sequence_lens(optional(inputs, SEQUENCE_LENS), seq, batch)?;
        let mut problem = Problem {
            dims,
            batch_major,
            lens,
            direction,
            activations: attrs.activations.clone(),
            clip: attrs.clip.map(T::from_f32),
            flag: attrs.flag,
            dtype,
            x: values(x)?,
            w: if transposed {
                Cow::Borrowed(&[])
            } else {
                values(w)?
            },
            r: if transposed {
                Cow::Borrowed(&[])
            } else {
                values(r)?
            },
            b: None,
            initial_h: None,
        };
        problem.b = problem.per_direction(inputs, B, "B", 2 * gh)?;
        problem.initial_h = problem.state(inputs, INITIAL_H, "initial_h")?;
        Ok(problem)
    }

    /// Optional input `i` of shape `[num_directions, width]`.
    pub fn per_direction(
        &self,
        inputs: &[Option<&'a Tensor>],
        i: usize,
        name: &str,
        width: usize,
    ) -> Result<Option<Cow<'a, [T]>>> {
        let Some(t) = optional(inputs, i) else {
            return Ok(None);
        };
        expect_shape(
            t,
            name,
            &[self.dims.directions, width],
            "[num_directions, width]",
        )?;
        Ok(Some(values(t)?))
    }

    /// Optional initial state input `i`: `[num_directions, batch, hidden]` (batch-major:
    /// `[batch, num_directions, hidden]`).
    pub fn state(
        &self,
        inputs: &[Option<&'a Tensor>],
        i: usize,
        name: &str,
    ) -> Result<Option<Cow<'a, [T]>>> {
        let Some(t) = optional(inputs, i) else {
            return Ok(None);
        };
        let Dims {
            batch,
            hidden,
            directions,
            ..
        } = self.dims;
        let (expected, meaning) = if self.batch_major {
            (
                [batch, directions, hidden],
                "[batch_size, num_directions, hidden_size]",
            )
        } else {
            (
                [directions, batch, hidden],
                "[num_directions, batch_size, hidden_size]",
            )
        };
        expect_shape(t, name, &expected, meaning)?;
        Ok(Some(values(t)?))
    }

    /// Direction `d`'s `W` (`[gates*hidden, input]`) and `R` (`[gates*hidden, hidden]`); empty
    /// for [`WeightLayout::Transposed`] weights, which the operator reads itself.
    pub fn weights(&self, d: usize) -> (&[T], &[T]) {
        let Dims {
            gates,
            hidden,
            input,
            ..
        } = self.dims;
        let (wn, rn) = (gates * hidden * input, gates * hidden * hidden);
        (
            self.w.get(d * wn..(d + 1) * wn).unwrap_or_default(),
            self.r.get(d * rn..(d + 1) * rn).unwrap_or_default(),
        )
    }

    /// Each direction's recurrent weights for the per-step products, `R` being `rows x cols`
    /// per direction: `R^T` is made once per plan when the batch needs it and `R` is constant.
    pub fn step_weights<'s>(
        &'s self,
        ctx: &EvalCtx<'s>,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<StepWeights<'s, T>>>
    where
        T: 'static,
    {
        let directions = 0..self.dims.directions;
        if !StepWeights::<T>::uses_panels(self.dims.batch) {
            let direct = |d| StepWeights::direct(self.weights(d).1, rows, cols);
            return Ok(directions.map(direct).collect());
        }
        let make = || -> Result<Vec<Vec<T>>> {
            directions
                .clone()
                .map(|d| panelled(self.weights(d).1, rows, cols))
                .collect()
        };
        let weights = match ctx.remember(&[R], make)? {
            Some(kept) => kept.iter().map(|rt| Cow::Borrowed(&rt[..])).collect(),
            None => make()?.into_iter().map(Cow::Owned).collect::<Vec<_>>(),
        };
        Ok(weights
            .into_iter()
            .map(|rt| StepWeights::panels(rt, rows, cols))
            .collect())
    }

    /// `X`'s elements, in storage order (`[seq * batch, input]` rows).
    pub fn x(&self) -> &[T] {
        &self.x
    }

    /// The length of the longest sequence.
    pub fn longest(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(0)
    }

    /// Direction `d`'s input and recurrence biases (`Wb`, `Rb`), zeros when `B` is omitted.
    pub fn biases(&self, d: usize) -> (Vec<T>, Vec<T>) {
        let gh = self.dims.gates * self.dims.hidden;
        match &self.b {
            Some(b) => {
                let row = &b[2 * gh * d..2 * gh * (d + 1)];
                (row[..gh].to_vec(), row[gh..].to_vec())
            }
            None => (vec![T::ZERO; gh], vec![T::ZERO; gh]),
        }
    }

    /// Direction `d`'s two biases summed, for gates where both are plain additive terms.
    pub fn summed_biases(&self, d: usize) -> Vec<T> {
        let (wb, rb) = self.biases(d);
        wb.iter().zip(&rb).map(|(&a, &b)| a + b).collect()
    }

    /// Direction `d`'s activation functions.
    pub fn activations(&self, d: usize) -> &[Activation] {
        let k = self.activations.len() / self.dims.directions;
        &self.activations[d * k..(d + 1) * k]
    }

    /// A gate's activation applied to its clipped inputs, in place.
    pub fn gates(&self, f: Activation, v: &mut [T]) {
        if let Some(c) = self.clip {
            for x in v.iter_mut() {
                *x = min(max(*x, -c), c);
            }
        }
        f.apply(v);
    }

    /// Direction `d`'s starting state (`[batch, hidden]`) from an initial-state input, zeros
    /// when omitted.
    pub fn initial(&self, state: Option<&[T]>, d: usize) -> Vec<T> {
        let Dims {
            batch,
            hidden,
            directions,
            ..
        } = self.dims;
        let Some(state) = state else {
            return vec![T::ZERO; batch * hidden];
        };
        if self.batch_major {
            (0..batch)
                .flat_map(|b| {
                    let at = (b * directions + d) * hidden;
                    state[at..at + hidden].iter().copied()
                })
                .collect()
        } else {
            state[d * batch * hidden..(d + 1) * batch * hidden].to_vec()
        }
    }

    /// `X W^T + bias` for every row of `X` (`[seq * batch, width]`, rows in `X`'s order), where
    /// `w` is `[width, input]`.
    pub fn project(&self, w: &[T], bias: &[T]) -> Result<Vec<T>> {
        let Dims {
            seq, batch, input, ..
        } = self.dims;
        project(&self.x, seq * batch, input, w, bias)
    }

    /// Runs direction `d` over its sequence. `xw` is its projection ([`Problem::project`],
    /// rows of `width`); `h` its starting hidden state. At each step the rows of the active
    /// batch entries are gathered into `g` (`[batch, width]`) and `step(active, g, h)` advances
    /// `h` (and whatever state the operator keeps) for the entries marked active. Returns `Y`'s
    /// rows for the direction and the final `h`.
    pub fn scan(
        &self,
        d: usize,
        xw: &[T],
        width: usize,
        mut h: Vec<T>,
        mut step: impl FnMut(&[bool], &mut [T], &mut [T]) -> Result<()>,
    ) -> Result<(Vec<T>, Vec<T>)> {
        let Dims {
            seq, batch, hidden, ..
        } = self.dims;
        let reverse = self.direction.reverses(d);
        let mut y = try_vec(checked_len::<T>(&[seq, batch, hidden])?, T::ZERO)?;
        let mut g = try_vec(batch * width, T::ZERO)?;
        let mut times = vec![None; batch];
        let mut active = vec![false; batch];
        for s in 0..seq {
            for ((time, on), &len) in times.iter_mut().zip(&mut active).zip(&self.lens) {
                *time = (s < len).then(|| if reverse { len - 1 - s } else { s });
                *on = time.is_some();
            }
            if !active.contains(&true) {
                break;
            }
            for (b, (row, time)) in g.chunks_exact_mut(width).zip(&times).enumerate() {
                if let Some(t) = *time {
                    let at = self.x_row(t, b) * width;
                    row.copy_from_slice(&xw[at..at + width]);
                }
            }
            step(&active, &mut g, &mut h)?;
            for (b, (state, time)) in h.chunks_exact(hidden).zip(&times).enumerate() {
                if let Some(t) = *time {
                    let at = (t * batch + b) * hidden;
                    y[at..at + hidden].copy_from_slice(state);
                }
            }
        }
        Ok((y, h))
    }

    /// The row of `X` (and of a projection) holding time `t` of batch entry `b`.
    fn x_row(&self, t: usize, b: usize) -> usize {
        if self.batch_major {
            b * self.dims.seq + t
        } else {
            t * self.dims.batch + b
        }
    }

    /// Runs `direction(d)` for every direction (both at once when bidirectional) and assembles
    /// `Y` and the final states into output tensors.
    pub fn run(&self, direction: impl Fn(usize) -> Result<Track<T>> + Sync) -> Result<Vec<Tensor>> {
        let tracks = if self.dims.directions == 2 {
            let (f, b) = crate::par::join(|| direction(0), || direction(1));
            vec![f?, b?]
        } else {
            vec![direction(0)?]
        };
        self.assemble(tracks)
    }

    /// `Y` and each final state, in the node's layout.
    fn assemble(&self, mut tracks: Vec<Track<T>>) -> Result<Vec<Tensor>> {
        let Dims {
            seq,
            batch,
            hidden,
            directions: nd,
            ..
        } = self.dims;
        for track in &mut tracks {
            // A sequence of length zero has zero final states.
            for state in &mut track.states {
                for (row, _) in state
                    .chunks_exact_mut(hidden)
                    .zip(&self.lens)
                    .filter(|(_, &l)| l == 0)
                {
                    row.fill(T::ZERO);
                }
            }
        }
        let y = match tracks.as_mut_slice() {
            // One time-major direction is already in `Y`'s order.
            [track] if !self.batch_major => std::mem::take(&mut track.y),
            _ => {
                let mut y = try_vec(checked_len::<T>(&[seq, nd, batch, hidden])?, T::ZERO)?;
                for (d, track) in tracks.iter().enumerate() {
                    for (k, row) in track.y.chunks_exact(hidden).enumerate() {
                        let (t, b) = (k / batch, k % batch);
                        let at = self.output_row(t, d, b) * hidden;
                        y[at..at + hidden].copy_from_slice(row);
                    }
                }
                y
            }
        };
        let (y_shape, state_shape) = if self.batch_major {
            (vec![batch, seq, nd, hidden], vec![batch, nd, hidden])
        } else {
            (vec![seq, nd, batch, hidden], vec![nd, batch, hidden])
        };
        let mut outputs = vec![output(self.dtype, &y_shape, y)?];
        let n_states = tracks.first().map_or(0, |t| t.states.len());
        for s in 0..n_states {
            let mut state = try_vec(nd * batch * hidden, T::ZERO)?;
            for (d, track) in tracks.iter().enumerate() {
                for (b, row) in track.states[s].chunks_exact(hidden).enumerate() {
                    let at = if self.batch_major {
                        b * nd + d
                    } else {
                        d * batch + b
                    } * hidden;
                    state[at..at + hidden].copy_from_slice(row);
                }
            }
            outputs.push(output(self.dtype, &state_shape, state)?);
        }
        Ok(outputs)
    }

    /// The row of `Y` holding time `t` of direction `d` for batch entry `b`.
    fn output_row(&self, t: usize, d: usize, b: usize) -> usize {
        let Dims {
            seq,
            batch,
            directions: nd,
            ..
        } = self.dims;
        if self.batch_major {
            (b * seq + t) * nd + d
        } else {
            (t * nd + d) * batch + b
        }
    }
}

/// The output types of a recurrent node: `Y`, then `states` final states (`Y_h`, and `Y_c` for
/// LSTM), with `seq_length` and `batch_size` carried from `X` and `hidden_size` from the
/// attribute or the shape of `R` (or `W`).
pub(super) fn infer<C: RecurrentOp>(ctx: &InferCtx<'_>, states: usize) -> Result<Vec<TensorType>> {
    let spec = &C::SPEC;
    let node = ctx.node;
    let nd = Dim::Known(Direction::of(node)?.count() as i64);
    let batch_major = batch_major(node, ctx.opset)?;
    let x = ctx.input(X);
    let (seq, batch) = match x.and_then(|t| t.shape.as_ref()) {
        Some(s) if s.rank() == 3 => {
            let (a, b) = (s.dims[0].clone(), s.dims[1].clone());
            if batch_major {
                (b, a)
            } else {
                (a, b)
            }
        }
        Some(s) => {
            return Err(Error::Eval(format!(
                "X must have rank 3, found rank {}",
                s.rank()
            )))
        }
        None => (Dim::Unknown, Dim::Unknown),
    };
    let hidden = hidden_dim(ctx, spec)?;
    let (y, state) = if batch_major {
        (
            vec![batch.clone(), seq, nd.clone(), hidden.clone()],
            vec![batch, nd, hidden],
        )
    } else {
        (
            vec![seq, nd.clone(), batch.clone(), hidden.clone()],
            vec![nd, batch, hidden],
        )
    };
    let elem = x.and_then(|t| t.elem);
    Ok(std::iter::once(y)
        .chain(std::iter::repeat_n(state, states))
        .map(|dims| TensorType {
            elem,
            shape: Some(Shape::new(dims)),
        })
        .collect())
}

/// `hidden_size`: the attribute, else the hidden axis of `R` (2, or 1 when transposed), else
/// `W`'s gate axis (1, or 2 when transposed) divided by the gates.
fn hidden_dim(ctx: &InferCtx<'_>, spec: &Spec) -> Result<Dim> {
    if let Some(AttrValue::Int(h)) = ctx.node.attr("hidden_size") {
        return Ok(Dim::Known(*h));
    }
    let dim = |i: usize, axis: usize| {
        ctx.input(i)
            .and_then(|t| t.shape.as_ref())
            .filter(|s| s.rank() == 3)
            .map(|s| s.dims[axis].clone())
    };
    let (r_axis, w_axis) = match spec.weights {
        WeightLayout::Gates => (2, 1),
        WeightLayout::Transposed => (1, 2),
    };
    if let Some(d) = dim(R, r_axis).filter(|d| *d != Dim::Unknown) {
        return Ok(d);
    }
    Ok(match dim(W, w_axis).and_then(|d| d.known()) {
        Some(n) => Dim::Known(n / spec.gates as i64),
        None => Dim::Unknown,
    })
}

/// Helpers for the tests of the three operators.
#[cfg(test)]
pub(super) mod testing {
    use crate::ir::{AttrValue, Node};
    use crate::tensor::Tensor;
    use crate::DataType;

    /// A float tensor.
    pub fn f32s(shape: &[usize], values: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, values.to_vec()).unwrap()
    }

    /// An int32 tensor.
    pub fn i32s(values: &[i32]) -> Tensor {
        Tensor::from_vec(DataType::Int32, &[values.len()], values.to_vec()).unwrap()
    }

    /// A node named `n` with the given inputs (`""` for an omitted one), the usual outputs and
    /// attributes.
    pub fn node(op: &str, inputs: &[&str], attrs: &[(&str, AttrValue)]) -> Node {
        let outputs = if op == "LSTM" {
            &["Y", "Y_h", "Y_c"][..]
        } else {
            &["Y", "Y_h"][..]
        };
        attrs.iter().fold(
            Node::new(op, "n", inputs.iter().copied(), outputs.iter().copied()),
            |n, (name, value)| n.with_attr(name, value.clone()),
        )
    }

    /// A string attribute value.
    pub fn string(s: &str) -> AttrValue {
        AttrValue::String(s.as_bytes().to_vec())
    }

    /// Asserts that `t` is a float tensor of `shape` within 1e-5 of `expected`.
    pub fn assert_close(t: &Tensor, shape: &[usize], expected: &[f32]) {
        assert_eq!(t.shape(), shape);
        let got = t.as_slice::<f32>().unwrap();
        assert_eq!(got.len(), expected.len());
        for (k, (g, e)) in got.iter().zip(expected).enumerate() {
            assert!((g - e).abs() <= 1e-5, "element {k}: got {g}, expected {e}");
        }
    }

    /// `values` of shape `[a, b, rest]` with its first two axes swapped.
    pub fn swap01(values: &[f32], a: usize, b: usize) -> Vec<f32> {
        let rest = values.len() / (a * b);
        (0..b)
            .flat_map(|j| (0..a).flat_map(move |i| (0..rest).map(move |k| (i, j, k))))
            .map(|(i, j, k)| values[(i * b + j) * rest + k])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::ir::Node;
    use crate::ops::infer_node;

    fn dims(t: &TensorType) -> Vec<Dim> {
        t.shape.as_ref().unwrap().dims.clone()
    }

    fn sym(s: &str) -> Dim {
        Dim::Symbolic(s.into())
    }

    #[test]
    fn shapes_carry_symbolic_dims_in_both_layouts() {
        let x = TensorType::new(
            DataType::Float,
            vec![sym("seq"), sym("batch"), Dim::Known(3)],
        );
        let r = TensorType::new(
            DataType::Float,
            vec![Dim::Known(2), Dim::Known(20), Dim::Known(5)],
        );
        let inputs = [Some(x), None, Some(r)];
        let n = node(
            "LSTM",
            &["X", "W", "R"],
            &[("direction", string("bidirectional"))],
        );
        let types = infer_node(&n, 14, &inputs, &[]);
        assert_eq!(types.len(), 3);
        let two = Dim::Known(2);
        let five = Dim::Known(5);
        assert_eq!(
            dims(&types[0]),
            vec![sym("seq"), two.clone(), sym("batch"), five.clone()]
        );
        assert_eq!(
            dims(&types[1]),
            vec![two.clone(), sym("batch"), five.clone()]
        );
        assert_eq!(types[2].elem, Some(DataType::Float));

        let n = node(
            "GRU",
            &["X", "W", "R"],
            &[
                ("layout", AttrValue::Int(1)),
                ("hidden_size", AttrValue::Int(7)),
            ],
        );
        let types = infer_node(&n, 14, &inputs, &[]);
        let one = Dim::Known(1);
        let seven = Dim::Known(7);
        // With layout 1, X is [batch, seq, input]: its first dim is the batch.
        assert_eq!(
            dims(&types[0]),
            vec![sym("seq"), sym("batch"), one.clone(), seven.clone()]
        );
        assert_eq!(dims(&types[1]), vec![sym("seq"), one, seven]);
    }

    #[test]
    fn shapes_take_the_hidden_size_from_w_when_r_is_unknown() {
        let w = TensorType::new(
            DataType::Double,
            vec![Dim::Known(1), Dim::Known(12), Dim::Known(4)],
        );
        let n = node("GRU", &["X", "W", "R"], &[]);
        let types = infer_node(&n, 7, &[None, Some(w)], &[]);
        assert_eq!(
            dims(&types[1]),
            vec![Dim::Known(1), Dim::Unknown, Dim::Known(4)]
        );
        assert_eq!(types[0].elem, None);
    }

    #[test]
    fn attributes_are_checked() {
        let bad = node("RNN", &["X"], &[("direction", string("sideways"))]);
        assert!(Direction::of(&bad)
            .unwrap_err()
            .to_string()
            .contains("sideways"));
        let bad = node("RNN", &["X"], &[("layout", AttrValue::Int(2))]);
        assert!(batch_major(&bad, 14)
            .unwrap_err()
            .to_string()
            .contains("layout"));
        // Before opset 14 there is no layout attribute to read.
        assert!(!batch_major(&bad, 7).unwrap());
        let n = Node::new("LSTM", "n", ["X"], ["Y"]);
        assert_eq!(Direction::of(&n).unwrap(), Direction::Forward);
    }

    #[test]
    fn activation_lists_have_one_entry_per_function_and_direction() {
        let n = node("GRU", &["X"], &[]);
        let acts = activations(&n, &["Sigmoid", "Tanh"], 2).unwrap();
        assert_eq!(
            acts,
            vec![
                Activation::Sigmoid,
                Activation::Tanh,
                Activation::Sigmoid,
                Activation::Tanh
            ]
        );
        let names = AttrValue::Strings(vec![b"Tanh".to_vec()]);
        let n = node("GRU", &["X"], &[("activations", names)]);
        let err = activations(&n, &["Sigmoid", "Tanh"], 1).unwrap_err();
        assert!(err.to_string().contains("expected 2"), "{err}");
    }

    #[test]
    fn sequence_lengths_must_fit_the_sequence() {
        assert_eq!(sequence_lens(None, 4, 2).unwrap(), vec![4, 4]);
        assert_eq!(
            sequence_lens(Some(&i32s(&[0, 4])), 4, 2).unwrap(),
            vec![0, 4]
        );
        let err = sequence_lens(Some(&i32s(&[5, 1])), 4, 2).unwrap_err();
        assert!(err.to_string().contains("outside [0, 4]"), "{err}");
        let err = sequence_lens(Some(&i32s(&[-1, 1])), 4, 2).unwrap_err();
        assert!(err.to_string().contains("-1"), "{err}");
        let err = sequence_lens(Some(&i32s(&[1])), 4, 2).unwrap_err();
        assert!(err.to_string().contains("[batch_size]"), "{err}");
    }
}
