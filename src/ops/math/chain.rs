//! Chains of element-wise operators run as one pass: the kernel the interpreter runs for a tree
//! of `Add`, `Sub`, `Mul`, `Div`, `Erf`, `Tanh`, `Sigmoid`, `Exp` and `Sqrt` steps whose
//! intermediate values nothing else reads (`interp::fuse`; the exact GELU
//! `x * 0.5 * (1 + erf(x / sqrt 2))` is five of them).
//!
//! The steps are a [`Program`]: each instruction reads inputs of the fused node and results of
//! earlier instructions, and the last one's result is the output. When the inputs are `float`,
//! `float16` or `bfloat16` (all of one type) and each is of the output's shape, a single value
//! or a row the output repeats along its leading dims (a bias), the program runs over blocks
//! of the output that stay in the first-level cache, each instruction with the function of its
//! standalone kernel: the same bits, one pass over memory instead of one per operator. Half
//! inputs are widened a block at a time and every instruction's results rounded to the half
//! type as its kernel rounds them. Anything else (other types, other broadcasts) runs the
//! operators' own kernels in turn.

use std::mem::MaybeUninit;

use half::{bf16, f16};
use rayon::prelude::*;

use super::unary::{erf as erf_f64, sigmoid as sigmoid_f64};
use crate::error::{Error, Result};
use crate::ir::{AttrValue, Node};
use crate::ops::halves::Widen;
use crate::ops::num::Float;
use crate::ops::util::broadcast_shapes;
use crate::ops::vector::{self, as_slots, assume_written};
use crate::ops::{registry, Attributes, EvalCtx};
use crate::par::{self, GRAIN};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

/// The attribute of a fused node holding its program.
pub(crate) const PROGRAM: &str = "program";

/// The most instructions a chain holds (a block of each stays in cache).
pub(crate) const MAX_INSTRUCTIONS: usize = 12;

/// Elements per block: all instructions' blocks of one chain fit in 48 KiB.
const BLOCK: usize = 1024;

/// An element-wise operator a chain may hold, with the `float` function of its standalone
/// kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Erf,
    Tanh,
    Sigmoid,
    Exp,
    Sqrt,
}

impl Op {
    const ALL: [Op; 9] = [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Erf,
        Op::Tanh,
        Op::Sigmoid,
        Op::Exp,
        Op::Sqrt,
    ];

    /// The operator of a default-domain node of type `op_type` at `opset`, when a chain may
    /// hold it (binary operators from opset 7, where they broadcast without attributes).
    pub(crate) fn of(op_type: &str, opset: i64) -> Option<Op> {
        let op = Op::ALL.into_iter().find(|op| op.name() == op_type)?;
        (op.arity() == 1 || opset >= 7).then_some(op)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Add => "Add",
            Op::Sub => "Sub",
            Op::Mul => "Mul",
            Op::Div => "Div",
            Op::Erf => "Erf",
            Op::Tanh => "Tanh",
            Op::Sigmoid => "Sigmoid",
            Op::Exp => "Exp",
            Op::Sqrt => "Sqrt",
        }
    }

    /// The function in `f64` whose value, rounded once, the standalone kernel gives on half
    /// inputs (unary operators).
    fn exact(self) -> fn(f64) -> f64 {
        match self {
            Op::Erf => erf_f64,
            Op::Tanh => f64::tanh,
            Op::Sigmoid => sigmoid_f64,
            Op::Exp => f64::exp,
            Op::Sqrt => f64::sqrt,
            Op::Add | Op::Sub | Op::Mul | Op::Div => unreachable!("a binary operator"),
        }
    }

    pub(crate) fn arity(self) -> usize {
        match self {
            Op::Add | Op::Sub | Op::Mul | Op::Div => 2,
            _ => 1,
        }
    }
}

/// Where an instruction's operand comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operand {
    /// Input `k` of the fused node.
    Input(usize),
    /// The result of instruction `j` (an earlier one).
    Result(usize),
}

/// One operator applied to its operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Instruction {
    pub op: Op,
    pub operands: Vec<Operand>,
}

/// The instructions of a chain, in order; the last one's result is the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Program {
    pub instructions: Vec<Instruction>,
}

impl Program {
    /// The program as the fused node's attribute: `Div i0 i1;Erf r0;...`.
    pub(crate) fn attribute(&self) -> AttrValue {
        let text: Vec<String> = self
            .instructions
            .iter()
            .map(|ins| {
                let mut s = ins.op.name().to_string();
                for o in &ins.operands {
                    match o {
                        Operand::Input(k) => s.push_str(&format!(" i{k}")),
                        Operand::Result(j) => s.push_str(&format!(" r{j}")),
                    }
                }
                s
            })
            .collect();
        AttrValue::String(text.join(";").into_bytes())
    }
}

impl Attributes for Program {
    fn parse(node: &Node, _opset: i64) -> Result<Program> {
        let bad = |why: &str| Error::Eval(format!("an element-wise chain's program {why}"));
        let text = node
            .attr_string(PROGRAM)?
            .ok_or_else(|| bad("is missing"))?;
        let mut instructions = Vec::new();
        for (j, ins) in text.split(';').enumerate() {
            let mut words = ins.split(' ');
            let name = words.next().unwrap_or_default();
            let op = Op::ALL
                .into_iter()
                .find(|op| op.name() == name)
                .ok_or_else(|| bad(&format!("names an unknown operator {name:?}")))?;
            let operands = words
                .map(|w| {
                    let (kind, index) = w.split_at(w.len().min(1));
                    let index: usize = index.parse().map_err(|_| bad("has a bad operand"))?;
                    match kind {
                        "i" if index < node.inputs.len() => Ok(Operand::Input(index)),
                        "r" if index < j => Ok(Operand::Result(index)),
                        _ => Err(bad("has a bad operand")),
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            if operands.len() != op.arity() {
                return Err(bad("has an operator with the wrong number of operands"));
            }
            instructions.push(Instruction { op, operands });
        }
        if instructions.is_empty() || instructions.len() > MAX_INSTRUCTIONS {
            return Err(bad("has no instructions or too many"));
        }
        Ok(Program { instructions })
    }
}

/// The kernel of a fused chain (see the module documentation).
pub(crate) fn eval_chain(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let program = ctx.attrs::<Program>()?;
    match one_pass(&program, inputs)? {
        Some(y) => Ok(vec![y]),
        None => in_turn(ctx, &program, inputs),
    }
}

/// An input of the chain: of the output's shape, a row the output repeats along its leading
/// dims (a bias), or one value.
#[derive(Clone, Copy)]
enum Input<'a, T> {
    Whole(&'a [T]),
    Row(&'a [T]),
    One(f32),
}

/// An operand of a block: a run of the block's elements, or one value for all of them.
#[derive(Clone, Copy)]
enum Value<'a> {
    Run(&'a [f32]),
    One(f32),
}

/// An element type the one-pass loop runs: `float` as it is, and the half types widened a
/// block at a time, each instruction's results rounded as its standalone kernel rounds them.
trait Lanes: Widen + Float {
    /// Whether results are rounded to this type after every instruction (the half types).
    const ROUNDS: bool;

    /// A block of an input as `f32`s: itself, or widened into `wide`.
    fn wide<'a>(src: &'a [Self], wide: &'a mut [MaybeUninit<f32>]) -> &'a [f32];
}

impl Lanes for f32 {
    const ROUNDS: bool = false;

    fn wide<'a>(src: &'a [f32], _: &'a mut [MaybeUninit<f32>]) -> &'a [f32] {
        src
    }
}

macro_rules! half_lanes {
    ($($t:ty),*) => {$(
        impl Lanes for $t {
            const ROUNDS: bool = true;

            fn wide<'a>(src: &'a [$t], wide: &'a mut [MaybeUninit<f32>]) -> &'a [f32] {
                <$t>::widen_slice(src, wide)
            }
        }
    )*};
}

half_lanes!(f16, bf16);

/// The program over blocks of the output, when every input has the output's type (`float`,
/// `float16` or `bfloat16`) and is of the output's shape, a single value or a row the output
/// repeats; `None` otherwise.
fn one_pass(program: &Program, inputs: &[Option<&Tensor>]) -> Result<Option<Tensor>> {
    match inputs.first().copied().flatten().map(Tensor::dtype) {
        Some(DataType::Float) => blocks::<f32>(program, inputs),
        Some(DataType::Float16) => blocks::<f16>(program, inputs),
        Some(DataType::Bfloat16) => blocks::<bf16>(program, inputs),
        _ => Ok(None),
    }
}

/// [`one_pass`] on inputs of type `T`.
fn blocks<T: Lanes>(program: &Program, inputs: &[Option<&Tensor>]) -> Result<Option<Tensor>> {
    let mut shapes = Vec::with_capacity(inputs.len());
    for t in inputs {
        match t {
            Some(t) if t.dtype() == T::DTYPE => shapes.push(t.shape()),
            _ => return Ok(None),
        }
    }
    let Ok(shape) = broadcast_shapes(&shapes) else {
        return Ok(None);
    };
    let len: usize = shape.iter().product();
    let mut values = Vec::with_capacity(inputs.len());
    for t in inputs.iter().flatten() {
        let v = t.as_slice::<T>()?;
        let dims = t.shape();
        let dims = &dims[dims.iter().take_while(|&&d| d == 1).count()..];
        values.push(match v {
            _ if t.shape() == shape.as_slice() => Input::Whole(v),
            [one] => Input::One(one.to_f32()),
            _ if shape.ends_with(dims) => Input::Row(v),
            _ => return Ok(None),
        });
    }
    let out = Tensor::uninit(T::DTYPE, &shape)?;
    let y = out.try_fill(|dst: &mut [MaybeUninit<T>]| -> Result<&mut [T]> {
        let run_part = |start: usize, part: &mut [MaybeUninit<T>]| -> Result<()> {
            let widened = values.len();
            let slots = (program.instructions.len() + widened) * BLOCK;
            let mut scratch = try_vec(slots, MaybeUninit::<f32>::uninit())?;
            for (b, block) in part.chunks_mut(BLOCK).enumerate() {
                let (at, n) = (start + b * BLOCK, block.len());
                let (wide, results) = scratch.split_at_mut(widened * BLOCK);
                let wide = wide.chunks_mut(BLOCK);
                let args: Vec<Value<'_>> = values
                    .iter()
                    .zip(wide)
                    .map(|(v, slots)| match *v {
                        Input::Whole(v) => Value::Run(T::wide(&v[at..at + n], &mut slots[..n])),
                        Input::Row(row) => Value::Run(cycle(row, at, &mut slots[..n])),
                        Input::One(v) => Value::One(v),
                    })
                    .collect();
                match run_block::<T>(program, &args, n, results) {
                    Some(Value::Run(v)) => {
                        T::narrow_slice(v, block);
                    }
                    Some(Value::One(v)) => {
                        vector::fill(block, T::from_f32(v));
                    }
                    None => {}
                }
            }
            Ok(())
        };
        if par::min_len(len, &[program.instructions.len()]) == usize::MAX {
            run_part(0, dst)?;
        } else {
            dst.par_chunks_mut(GRAIN)
                .enumerate()
                .try_for_each(|(c, part)| run_part(c * GRAIN, part))?;
        }
        // SAFETY: every block of the output was written from the program's last result.
        Ok(unsafe { assume_written(dst) })
    })?;
    Ok(Some(y))
}

/// The elements `at..at + slots.len()` of the output that repeats `row` along its leading dims,
/// widened into `slots`.
fn cycle<'s, T: Widen>(row: &[T], at: usize, slots: &'s mut [MaybeUninit<f32>]) -> &'s [f32] {
    let (mut k, mut done) = (at % row.len(), 0);
    while done < slots.len() {
        let m = (row.len() - k).min(slots.len() - done);
        T::widen_slice(&row[k..k + m], &mut slots[done..done + m]);
        (k, done) = (0, done + m);
    }
    // SAFETY: the loop widened into every slot.
    unsafe { assume_written(slots) }
}

/// The program over one block of `n` elements of `inputs`, each instruction's block in
/// `scratch`; returns the last instruction's result.
fn run_block<'s, T: Lanes>(
    program: &Program,
    inputs: &[Value<'s>],
    n: usize,
    scratch: &'s mut [MaybeUninit<f32>],
) -> Option<Value<'s>> {
    let mut results: Vec<Value<'s>> = Vec::with_capacity(program.instructions.len());
    let mut rest = scratch;
    for ins in &program.instructions {
        let (mine, later) = std::mem::take(&mut rest).split_at_mut(BLOCK);
        rest = later;
        let operand = |o: &Operand| match *o {
            Operand::Input(k) => inputs[k],
            Operand::Result(j) => results[j],
        };
        let dst = &mut mine[..n];
        let value = match *ins.operands.as_slice() {
            [x] => unary::<T>(ins.op, operand(&x), dst),
            [x, y] => binary::<T>(ins.op, operand(&x), operand(&y), dst),
            _ => unreachable!("a parsed program has one or two operands per instruction"),
        };
        results.push(value);
    }
    results.pop()
}

/// `op` of one operand into `dst`, or of one value; on halves rounded as the standalone kernel
/// rounds (`halves::map_checked`: the vectorised `f32` function rounded once, or the `f64`
/// function rounded once where that lies near a rounding boundary).
fn unary<'d, T: Lanes>(op: Op, x: Value<'_>, dst: &'d mut [MaybeUninit<f32>]) -> Value<'d> {
    macro_rules! apply {
        ($f:expr) => {
            match x {
                Value::Run(v) => {
                    let y = vector::map(v, dst, $f);
                    if T::ROUNDS {
                        round_checked::<T>(v, y, op.exact());
                    }
                    Value::Run(y)
                }
                Value::One(v) if T::ROUNDS => {
                    Value::One(T::from_f64(op.exact()(v.into())).to_f32())
                }
                Value::One(v) => Value::One($f(v)),
            }
        };
    }
    match op {
        Op::Erf => apply!(vector::erf),
        Op::Tanh => apply!(vector::tanh),
        Op::Sigmoid => apply!(vector::sigmoid),
        Op::Exp => apply!(vector::exp),
        Op::Sqrt => apply!(f32::sqrt),
        Op::Add | Op::Sub | Op::Mul | Op::Div => unreachable!("a binary operator"),
    }
}

/// `op` of two operands into `dst`, or of two values; on halves each result rounded once.
fn binary<'d, T: Lanes>(
    op: Op,
    x: Value<'_>,
    y: Value<'_>,
    dst: &'d mut [MaybeUninit<f32>],
) -> Value<'d> {
    macro_rules! apply {
        ($f:expr) => {
            match (x, y) {
                (Value::Run(a), Value::Run(b)) => rounded::<T>(vector::zip(a, b, dst, $f)),
                (Value::Run(a), Value::One(b)) => {
                    rounded::<T>(vector::zip_scalar_right(a, b, dst, $f))
                }
                (Value::One(a), Value::Run(b)) => {
                    rounded::<T>(vector::zip_scalar_right(b, a, dst, |b, a| $f(a, b)))
                }
                (Value::One(a), Value::One(b)) => Value::One(T::from_f32($f(a, b)).to_f32()),
            }
        };
    }
    match op {
        Op::Add => apply!(|a: f32, b: f32| a + b),
        Op::Sub => apply!(|a: f32, b: f32| a - b),
        Op::Mul => apply!(|a: f32, b: f32| a * b),
        Op::Div => apply!(|a: f32, b: f32| a / b),
        _ => unreachable!("a unary operator"),
    }
}

/// `y` rounded to `T` in place (nothing for `float`).
fn rounded<T: Lanes>(y: &mut [f32]) -> Value<'_> {
    if T::ROUNDS {
        let mut narrow = [MaybeUninit::<T>::uninit(); BLOCK];
        let n = T::narrow_slice(y, &mut narrow[..y.len()]);
        // SAFETY: only initialised values are written through the view.
        T::widen_slice(n, unsafe { as_slots(y) });
    }
    Value::Run(y)
}

/// The results `y` of a function of `x` rounded to `T` in place, each one that lies near a
/// rounding boundary of `T` replaced by `exact` of its operand rounded once.
fn round_checked<T: Lanes>(x: &[f32], y: &mut [f32], exact: fn(f64) -> f64) {
    let mut narrow = [MaybeUninit::<T>::uninit(); BLOCK];
    let n = T::narrow_slice(y, &mut narrow[..y.len()]);
    for ((c, &fast), &v) in n.iter_mut().zip(y.iter()).zip(x) {
        if T::near_boundary(fast) {
            *c = T::from_f64(exact(v.into()));
        }
    }
    // SAFETY: only initialised values are written through the view.
    T::widen_slice(n, unsafe { as_slots(y) });
}

/// The program run by the operators' own kernels, one after the other.
fn in_turn(
    ctx: &EvalCtx<'_>,
    program: &Program,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let mut results: Vec<Tensor> = Vec::with_capacity(program.instructions.len());
    for ins in &program.instructions {
        let def = registry()
            .lookup("", ins.op.name(), ctx.opset)
            .ok_or_else(|| {
                Error::Eval(format!(
                    "no kernel for {} at opset {}",
                    ins.op.name(),
                    ctx.opset
                ))
            })?;
        let args: Vec<Option<&Tensor>> = ins
            .operands
            .iter()
            .map(|o| match *o {
                Operand::Input(k) => inputs.get(k).copied().flatten(),
                Operand::Result(j) => results.get(j),
            })
            .collect();
        let op_ctx = EvalCtx {
            node: ctx.node,
            opset: ctx.opset,
            runner: ctx.runner,
            prepared: None,
            memo: None,
        };
        let mut out = (def.eval)(&op_ctx, &args)?;
        if out.len() != 1 {
            return Err(Error::Eval(format!(
                "{} gave {} outputs",
                ins.op.name(),
                out.len()
            )));
        }
        results.push(out.remove(0));
    }
    results
        .pop()
        .map(|y| vec![y])
        .ok_or_else(|| Error::Eval("an element-wise chain without instructions".into()))
}
