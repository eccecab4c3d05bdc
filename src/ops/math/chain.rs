//! Chains of element-wise operators run as one pass: the kernel the interpreter runs for a tree
//! of `Add`, `Sub`, `Mul`, `Div`, `Erf`, `Tanh`, `Sigmoid`, `Exp` and `Sqrt` steps whose
//! intermediate values nothing else reads (`interp::fuse`; the exact GELU
//! `x * 0.5 * (1 + erf(x / sqrt 2))` is five of them).
//!
//! The steps are a [`Program`]: each instruction reads inputs of the fused node and results of
//! earlier instructions, and the last one's result is the output. On `float` inputs that are
//! all of the output's shape or single values, the program runs over blocks of the output
//! that stay in the first-level cache, each instruction with the function of its standalone
//! kernel: the same bits, one pass over memory instead of one per operator. Anything else
//! (other types, broadcasting between shapes) runs the operators' own kernels in turn.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::{AttrValue, Node};
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

/// An operand of a block: a run of the block's elements, or one value for all of them.
#[derive(Clone, Copy)]
enum Value<'a> {
    Run(&'a [f32]),
    One(f32),
}

/// The program over blocks of the output, when every input is `float` and either of the
/// output's shape or a single value; `None` otherwise.
fn one_pass(program: &Program, inputs: &[Option<&Tensor>]) -> Result<Option<Tensor>> {
    let mut shapes = Vec::with_capacity(inputs.len());
    for t in inputs {
        match t {
            Some(t) if t.dtype() == DataType::Float => shapes.push(t.shape()),
            _ => return Ok(None),
        }
    }
    let Ok(shape) = broadcast_shapes(&shapes) else {
        return Ok(None);
    };
    let len: usize = shape.iter().product();
    let mut values = Vec::with_capacity(inputs.len());
    for t in inputs.iter().flatten() {
        let v = t.as_slice::<f32>()?;
        values.push(match v {
            _ if t.shape() == shape.as_slice() => Value::Run(v),
            [one] => Value::One(*one),
            _ => return Ok(None),
        });
    }
    let out = Tensor::uninit(DataType::Float, &shape)?;
    let y = out.try_fill(|dst: &mut [MaybeUninit<f32>]| -> Result<&mut [f32]> {
        let run_part = |start: usize, part: &mut [MaybeUninit<f32>]| -> Result<()> {
            let mut scratch = try_vec(program.instructions.len() * BLOCK, 0.0f32)?;
            for (b, block) in part.chunks_mut(BLOCK).enumerate() {
                let at = start + b * BLOCK;
                run_block(program, &values, at, block, &mut scratch);
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
        // SAFETY: every block of the output was written by `run_block`.
        Ok(unsafe { assume_written(dst) })
    })?;
    Ok(Some(y))
}

/// The program over the elements `at..at + out.len()`, each instruction's block in `scratch`.
fn run_block(
    program: &Program,
    inputs: &[Value<'_>],
    at: usize,
    out: &mut [MaybeUninit<f32>],
    scratch: &mut [f32],
) {
    let n = out.len();
    let mut results: Vec<Value<'_>> = Vec::with_capacity(program.instructions.len());
    let mut rest = scratch;
    for ins in &program.instructions {
        let (mine, later) = std::mem::take(&mut rest).split_at_mut(BLOCK);
        rest = later;
        let operand = |o: &Operand| match *o {
            Operand::Input(k) => match inputs[k] {
                Value::Run(v) => Value::Run(&v[at..at + n]),
                one => one,
            },
            Operand::Result(j) => results[j],
        };
        let args: Vec<Value<'_>> = ins.operands.iter().map(operand).collect();
        // SAFETY: only initialised values are written through the view.
        let dst = unsafe { as_slots(&mut mine[..n]) };
        let value = match *args.as_slice() {
            [x] => unary(ins.op, x, dst),
            [x, y] => binary(ins.op, x, y, dst),
            _ => unreachable!("a parsed program has one or two operands per instruction"),
        };
        results.push(value);
    }
    match results.last() {
        Some(Value::Run(v)) => {
            vector::copy(out, v);
        }
        Some(&Value::One(v)) => {
            vector::fill(out, v);
        }
        None => {}
    }
}

/// `op` of one operand into `dst`, or of one value.
fn unary<'d>(op: Op, x: Value<'_>, dst: &'d mut [MaybeUninit<f32>]) -> Value<'d> {
    macro_rules! apply {
        ($f:expr) => {
            match x {
                Value::Run(v) => Value::Run(vector::map(v, dst, $f)),
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

/// `op` of two operands into `dst`, or of two values.
fn binary<'d>(op: Op, x: Value<'_>, y: Value<'_>, dst: &'d mut [MaybeUninit<f32>]) -> Value<'d> {
    macro_rules! apply {
        ($f:expr) => {
            match (x, y) {
                (Value::Run(a), Value::Run(b)) => Value::Run(vector::zip(a, b, dst, $f)),
                (Value::Run(a), Value::One(b)) => {
                    Value::Run(vector::zip_scalar_right(a, b, dst, $f))
                }
                (Value::One(a), Value::Run(b)) => {
                    Value::Run(vector::zip_scalar_right(b, a, dst, |b, a| $f(a, b)))
                }
                (Value::One(a), Value::One(b)) => Value::One($f(a, b)),
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
