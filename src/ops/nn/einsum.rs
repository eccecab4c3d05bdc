//! `Einsum` (opsets 12, 28): Einstein summation over any number of operands, with ellipsis
//! broadcasting, repeated labels (diagonals) and the implicit output form.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Einsum.html>.
//!
//! Labels are the ASCII letters (upper and lower case distinct); every `...` stands for the same
//! number of dims, broadcast right-aligned like numpy. Without `->` the output is the ellipsis dims
//! followed by the labels used exactly once, in ASCII order.
//!
//! Design note: two floating-point operands whose labels are distinct within each term and each
//! appear in the output or in the other operand form a batched matrix product (batch labels in
//! both operands and the output, contracted labels in both operands only): they are gathered into
//! `(batch, M, K)` and `(batch, K, N)` blocks and multiplied through the `gemm` crate. Everything
//! else runs an index-iterating loop over the output labels and then the summed labels, reading
//! each operand through per-label strides (a repeated label adds its strides, which walks the
//! diagonal).
//!
//! Design note: operands are contracted pairwise, as onnxruntime does, never all at once: first
//! each operand alone loses the labels no other operand and not the output has (summed out) and
//! its repeated labels (the diagonal taken), then the first two operands are joined into one
//! whose labels are those still needed, and so on. One loop over every label at once costs the
//! product of all label sizes: `a,b,c,d,e,f,g,h->` over 64-element vectors would take 2.8e14
//! steps; pairwise it takes 8 x 64.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::try_with_capacity;
use crate::tensor::Tensor;

use super::super::util::{strides, to_i64s, unsupported_type};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::matmul::Plan;
use super::values::{checked_product, input_dims, is_int, store_ints, tensor_type};
use crate::ops::num::{dispatch_real, Arith, Real};

/// The first label of the ellipsis dims (letters use 0..52).
const ELLIPSIS: usize = 52;

/// A parsed equation with every ellipsis expanded into labels.
#[derive(Debug, PartialEq, Eq)]
struct Equation {
    /// The labels of each operand's dims.
    inputs: Vec<Vec<usize>>,
    /// The labels of the output's dims.
    output: Vec<usize>,
}

/// The label of an ASCII letter: upper case first, so label order is ASCII order.
fn letter(c: char) -> Option<usize> {
    match c {
        'A'..='Z' => Some(c as usize - 'A' as usize),
        'a'..='z' => Some(c as usize - 'a' as usize + 26),
        _ => None,
    }
}

/// The letters of a term and where its ellipsis sits (as an index into the letters).
fn parse_term(term: &str) -> Result<(Vec<usize>, Option<usize>)> {
    let mut letters = Vec::new();
    let mut ellipsis = None;
    let mut rest = term;
    while let Some(c) = rest.chars().next() {
        if let Some(stripped) = rest.strip_prefix("...") {
            if ellipsis.replace(letters.len()).is_some() {
                return Err(Error::Eval(format!("term '{term}' has two ellipses")));
            }
            rest = stripped;
            continue;
        }
        letters.push(
            letter(c)
                .ok_or_else(|| Error::Eval(format!("'{c}' in term '{term}' is not a label")))?,
        );
        rest = &rest[c.len_utf8()..];
    }
    Ok((letters, ellipsis))
}

/// The error of an equation with `terms` terms for `inputs` operands.
fn term_count(equation: &str, terms: usize, inputs: usize) -> Error {
    Error::Eval(format!(
        "equation '{equation}' has {terms} terms for {inputs} inputs"
    ))
}

/// The `equation` of an `Einsum` node as written: each term's letters and where its ellipsis
/// sits, parsed once, for [`Terms::expand`] to fit to the operands' ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Terms {
    /// The equation's text, for messages.
    text: String,
    /// Each operand's term.
    inputs: Vec<(Vec<usize>, Option<usize>)>,
    /// The output term as written after `->` (its text and its parse); `None`: implicit.
    output: Option<(String, Vec<usize>, Option<usize>)>,
}

impl Attributes for Terms {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<Terms> {
        let equation = node
            .attr_string("equation")?
            .ok_or_else(|| Error::Eval("attribute 'equation' is required".into()))?;
        Terms::read(equation, node.inputs.len())
    }
}

impl Terms {
    /// Parses `equation` for `operands` operands.
    fn read(equation: &str, operands: usize) -> Result<Terms> {
        let eq: String = equation.chars().filter(|&c| c != ' ').collect();
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (eq.as_str(), None),
        };
        let terms: Vec<&str> = lhs.split(',').collect();
        if terms.len() != operands {
            return Err(term_count(equation, terms.len(), operands));
        }
        let inputs = terms
            .iter()
            .map(|t| parse_term(t))
            .collect::<Result<Vec<_>>>()?;
        let output = rhs
            .map(|r| parse_term(r).map(|(letters, ell)| (r.to_string(), letters, ell)))
            .transpose()?;
        Ok(Terms {
            text: equation.to_string(),
            inputs,
            output,
        })
    }

    /// The equation for operands of the given ranks (as many as the terms), every ellipsis
    /// expanded into labels.
    fn expand(&self, ranks: &[usize]) -> Result<Equation> {
        let (equation, parsed) = (&self.text, &self.inputs);
        if parsed.len() != ranks.len() {
            return Err(term_count(equation, parsed.len(), ranks.len()));
        }
        let mut ell_rank = 0;
        for ((letters, ell), &rank) in parsed.iter().zip(ranks) {
            let e = rank
                .checked_sub(letters.len())
                .filter(|&e| ell.is_some() || e == 0);
            let e = e.ok_or_else(|| {
                Error::Eval(format!(
                    "an operand of rank {rank} does not match a term of {} labels in '{equation}'",
                    letters.len()
                ))
            })?;
            ell_rank = ell_rank.max(e);
        }
        let expand = |letters: &[usize], ell: Option<usize>, e: usize| -> Vec<usize> {
            match ell {
                None => letters.to_vec(),
                Some(at) => letters[..at]
                    .iter()
                    .copied()
                    .chain((ell_rank - e..ell_rank).map(|j| ELLIPSIS + j))
                    .chain(letters[at..].iter().copied())
                    .collect(),
            }
        };
        let inputs: Vec<Vec<usize>> = parsed
            .iter()
            .zip(ranks)
            .map(|((l, ell), &r)| expand(l, *ell, r - l.len()))
            .collect();
        let output = match &self.output {
            Some((r, letters, ell)) => {
                let out = expand(letters, *ell, ell_rank);
                for (i, l) in out.iter().enumerate() {
                    if out[..i].contains(l) || !inputs.iter().any(|t| t.contains(l)) {
                        return Err(Error::Eval(format!(
                            "output term '{r}' repeats a label or names one no input has"
                        )));
                    }
                }
                out
            }
            None => {
                let mut count = [0usize; ELLIPSIS];
                for &l in inputs.iter().flatten().filter(|&&l| l < ELLIPSIS) {
                    count[l] += 1;
                }
                (ELLIPSIS..ELLIPSIS + ell_rank)
                    .chain((0..ELLIPSIS).filter(|&l| count[l] == 1))
                    .collect()
            }
        };
        Ok(Equation { inputs, output })
    }
}

impl Equation {
    /// Parses `equation` for operands of the given ranks.
    #[cfg(test)]
    fn parse(equation: &str, ranks: &[usize]) -> Result<Equation> {
        Terms::read(equation, ranks.len())?.expand(ranks)
    }

    /// Every label, output labels first.
    fn all_labels(&self) -> Vec<usize> {
        let mut labels = self.output.clone();
        for &l in self.inputs.iter().flatten() {
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
        labels
    }

    /// The size of every label (indexed by label), broadcasting size-1 ellipsis dims.
    fn sizes(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let mut size: Vec<Option<usize>> = vec![None; ELLIPSIS + 64];
        for (labels, shape) in self.inputs.iter().zip(shapes) {
            for (&l, &d) in labels.iter().zip(*shape) {
                let slot = size
                    .get_mut(l)
                    .ok_or_else(|| Error::Eval("too many ellipsis dims".into()))?;
                *slot = match *slot {
                    None => Some(d),
                    Some(s) if s == d => Some(s),
                    Some(1) if l >= ELLIPSIS => Some(d),
                    Some(s) if d == 1 && l >= ELLIPSIS => Some(s),
                    Some(s) => {
                        return Err(Error::Eval(format!(
                            "a label has sizes {s} and {d} in different places"
                        )))
                    }
                };
            }
        }
        Ok(size.into_iter().map(|s| s.unwrap_or(1)).collect())
    }
}

/// An operand's element stride for each of `labels` (0 where absent or broadcast).
fn label_strides(
    labels: &[usize],
    op_labels: &[usize],
    shape: &[usize],
    sizes: &[usize],
) -> Vec<usize> {
    let st = strides(shape);
    labels
        .iter()
        .map(|&l| {
            op_labels
                .iter()
                .zip(shape.iter().zip(&st))
                .filter(|(&ol, (&d, _))| ol == l && !(d == 1 && sizes[l] != 1))
                .map(|(_, (_, &s))| s)
                .sum()
        })
        .collect()
}

/// Walks a box of `dims` in row-major order, keeping one offset per operand.
struct Odometer<'a> {
    dims: &'a [usize],
    strides: &'a [Vec<usize>],
    idx: Vec<usize>,
    offsets: Vec<usize>,
}

impl<'a> Odometer<'a> {
    fn new(dims: &'a [usize], strides: &'a [Vec<usize>], start: Vec<usize>) -> Self {
        Odometer {
            dims,
            strides,
            idx: vec![0; dims.len()],
            offsets: start,
        }
    }

    /// Moves to the next position; false after the last one (offsets are back at the start).
    fn advance(&mut self) -> bool {
        for j in (0..self.dims.len()).rev() {
            self.idx[j] += 1;
            for (o, s) in self.offsets.iter_mut().zip(self.strides) {
                *o += s[j];
            }
            if self.idx[j] < self.dims[j] {
                return true;
            }
            for (o, s) in self.offsets.iter_mut().zip(self.strides) {
                *o -= s[j] * self.dims[j];
            }
            self.idx[j] = 0;
        }
        false
    }
}

/// The index-iterating evaluation: for each output position, the sum over the summed labels of
/// the product of the operands.
fn generic<T: Arith>(
    eq: &Equation,
    ops: &[&[T]],
    shapes: &[&[usize]],
    one: T,
) -> Result<(Vec<T>, Vec<usize>)> {
    let sizes = eq.sizes(shapes)?;
    let labels = eq.all_labels();
    let n_out = eq.output.len();
    let dims: Vec<usize> = labels.iter().map(|&l| sizes[l]).collect();
    let out_shape = dims[..n_out].to_vec();
    let out_len = checked_product(&out_shape)?;
    let red_len = checked_product(&dims[n_out..])?;
    let st: Vec<Vec<usize>> = eq
        .inputs
        .iter()
        .zip(shapes)
        .map(|(ol, s)| label_strides(&labels, ol, s, &sizes))
        .collect();
    let (out_st, red_st): (Vec<Vec<usize>>, Vec<Vec<usize>>) = st
        .iter()
        .map(|s| (s[..n_out].to_vec(), s[n_out..].to_vec()))
        .unzip();
    let mut out = try_with_capacity(out_len)?;
    if out_len == 0 {
        return Ok((out, out_shape));
    }
    let mut outer = Odometer::new(&dims[..n_out], &out_st, vec![0; ops.len()]);
    loop {
        let mut acc = T::default();
        if red_len > 0 {
            let mut inner = Odometer::new(&dims[n_out..], &red_st, outer.offsets.clone());
            loop {
                let term = ops
                    .iter()
                    .zip(&inner.offsets)
                    .fold(one, |p, (op, &o)| p.mul(op[o]));
                acc = acc.add(term);
                if !inner.advance() {
                    break;
                }
            }
        }
        out.push(acc);
        if !outer.advance() {
            break;
        }
    }
    Ok((out, out_shape))
}

/// Copies `src` into a new row-major block of `dims`, reading element `idx` at `sum(idx * st)`.
fn gather<T: Copy>(src: &[T], dims: &[usize], st: &[usize]) -> Result<Vec<T>> {
    let len = checked_product(dims)?;
    let mut out = try_with_capacity(len)?;
    if len == 0 {
        return Ok(out);
    }
    let st = [st.to_vec()];
    let mut od = Odometer::new(dims, &st, vec![0]);
    loop {
        out.push(src[od.offsets[0]]);
        if !od.advance() {
            break;
        }
    }
    Ok(out)
}

/// Two operands as a batched matrix product, when their labels allow it (see the module docs).
fn as_matmul<T: Real>(
    eq: &Equation,
    ops: &[&[T]],
    shapes: &[&[usize]],
) -> Result<Option<(Vec<T>, Vec<usize>)>> {
    let ([a, b], [la, lb]) = (ops, &eq.inputs[..]) else {
        return Ok(None);
    };
    let distinct = |l: &[usize]| l.iter().enumerate().all(|(i, x)| !l[..i].contains(x));
    let out = &eq.output;
    let covered =
        |l: &[usize], other: &[usize]| l.iter().all(|x| out.contains(x) || other.contains(x));
    if !distinct(la) || !distinct(lb) || !covered(la, lb) || !covered(lb, la) {
        return Ok(None);
    }
    let pick = |f: &dyn Fn(usize) -> bool| -> Vec<usize> {
        eq.all_labels().into_iter().filter(|&l| f(l)).collect()
    };
    let batch = pick(&|l| la.contains(&l) && lb.contains(&l) && out.contains(&l));
    let m = pick(&|l| la.contains(&l) && !lb.contains(&l));
    let n = pick(&|l| lb.contains(&l) && !la.contains(&l));
    let k = pick(&|l| la.contains(&l) && lb.contains(&l) && !out.contains(&l));
    let sizes = eq.sizes(shapes)?;
    let size = |ls: &[usize]| checked_product(&ls.iter().map(|&l| sizes[l]).collect::<Vec<_>>());
    let (bs, ms, ns, ks) = (size(&batch)?, size(&m)?, size(&n)?, size(&k)?);
    let block =
        |op: &[T], labels: &[usize], shape: &[usize], order: Vec<usize>| -> Result<Vec<T>> {
            let dims: Vec<usize> = order.iter().map(|&l| sizes[l]).collect();
            gather(op, &dims, &label_strides(&order, labels, shape, &sizes))
        };
    let concat = |x: &[usize], y: &[usize], z: &[usize]| [x, y, z].concat();
    let av = block(a, la, shapes[0], concat(&batch, &m, &k))?;
    let bv = block(b, lb, shapes[1], concat(&batch, &k, &n))?;
    let c = Plan::new(&[bs, ms, ks], &[bs, ks, ns])?.run_real(&av, &bv)?;
    // C has labels (batch, m, n); reorder to the output's.
    let c_labels = concat(&batch, &m, &n);
    let c_dims: Vec<usize> = c_labels.iter().map(|&l| sizes[l]).collect();
    let out_shape: Vec<usize> = out.iter().map(|&l| sizes[l]).collect();
    let y = gather(
        &c,
        &out_shape,
        &label_strides(out, &c_labels, &c_dims, &sizes),
    )?;
    Ok(Some((y, out_shape)))
}

/// Evaluates an equation of one or two operands: values and shape of the result.
type Step<T> = dyn Fn(&Equation, &[&[T]], &[&[usize]]) -> Result<(Vec<T>, Vec<usize>)>;

/// One labelled operand of a pairwise contraction: an input as it is, or an intermediate.
struct Term<'a, T: Clone> {
    values: std::borrow::Cow<'a, [T]>,
    labels: Vec<usize>,
    shape: Vec<usize>,
}

/// Evaluates `eq` by contracting its operands pairwise (see the module's design note). `step`
/// evaluates an equation of one or two operands.
fn contract<'a, T: Copy>(
    eq: &Equation,
    ops: &[&'a [T]],
    shapes: &[&[usize]],
    step: &Step<T>,
) -> Result<(Vec<T>, Vec<usize>)> {
    if ops.len() == 1 {
        return step(eq, ops, shapes);
    }
    // Labels in the order they first appear, kept where `needed`.
    let keep = |labels: &[&[usize]], needed: &dyn Fn(usize) -> bool| -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for &l in labels.iter().copied().flatten() {
            if needed(l) && !out.contains(&l) {
                out.push(l);
            }
        }
        out
    };
    let elsewhere = |i: usize, l: usize| {
        eq.output.contains(&l)
            || eq
                .inputs
                .iter()
                .enumerate()
                .any(|(j, t)| j != i && t.contains(&l))
    };
    // Each operand alone: sum out what only it has, take the diagonal of repeated labels.
    let mut terms: Vec<Term<'a, T>> = Vec::with_capacity(ops.len());
    for (i, (&op, &shape)) in ops.iter().zip(shapes).enumerate() {
        let labels = &eq.inputs[i];
        let kept = keep(&[labels], &|l| elsewhere(i, l));
        let term = if kept == *labels {
            Term {
                values: std::borrow::Cow::Borrowed(op),
                labels: kept,
                shape: shape.to_vec(),
            }
        } else {
            let single = Equation {
                inputs: vec![labels.clone()],
                output: kept.clone(),
            };
            let (values, shape) = step(&single, &[op], &[shape])?;
            Term {
                values: values.into(),
                labels: kept,
                shape,
            }
        };
        terms.push(term);
    }
    // Then the first two, again and again, keeping the labels the rest or the output need.
    let mut terms = terms.into_iter();
    let mut acc = terms
        .next()
        .ok_or_else(|| Error::Eval("no operand".into()))?;
    let rest: Vec<Term<'a, T>> = terms.collect();
    for (k, next) in rest.iter().enumerate() {
        let last = k + 1 == rest.len();
        let output = if last {
            eq.output.clone()
        } else {
            let later = |l: usize| {
                eq.output.contains(&l) || rest[k + 1..].iter().any(|t| t.labels.contains(&l))
            };
            keep(&[&acc.labels, &next.labels], &later)
        };
        let pair = Equation {
            inputs: vec![acc.labels.clone(), next.labels.clone()],
            output: output.clone(),
        };
        let (values, shape) = step(
            &pair,
            &[&acc.values, &next.values],
            &[&acc.shape, &next.shape],
        )?;
        acc = Term {
            values: values.into(),
            labels: output,
            shape,
        };
    }
    Ok((acc.values.into_owned(), acc.shape))
}

pub(super) fn eval_einsum(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let ops: Vec<&Tensor> = inputs
        .iter()
        .map(|t| t.ok_or_else(|| ctx.error("every input is required")))
        .collect::<Result<_>>()?;
    let dtype = ops
        .first()
        .map(|t| t.dtype())
        .ok_or_else(|| ctx.error("needs an input"))?;
    if ops.iter().any(|t| t.dtype() != dtype) {
        return Err(ctx.error("every input must have one element type"));
    }
    let terms = ctx.attrs::<Terms>()?;
    let shapes: Vec<&[usize]> = ops.iter().map(|t| t.shape()).collect();
    let ranks: Vec<usize> = shapes.iter().map(|s| s.len()).collect();
    let eq = terms.expand(&ranks)?;
    let y = dispatch_real!(dtype, R => {
        let loaded = ops.iter().map(|t| R::load(t)).collect::<Result<Vec<_>>>()?;
        let views: Vec<&[R]> = loaded.iter().map(|v| &**v).collect();
        let step = |eq: &Equation, ops: &[&[R]], shapes: &[&[usize]]| match as_matmul(eq, ops, shapes)? {
            Some(r) => Ok(r),
            None => generic(eq, ops, shapes, R::ONE),
        };
        let (v, shape) = contract(&eq, &views, &shapes, &step)?;
        R::store(dtype, &shape, v)?
    }, _ => {
        if !is_int(dtype) {
            return Err(unsupported_type("Einsum", dtype));
        }
        let loaded = ops.iter().map(|t| to_i64s(t)).collect::<Result<Vec<_>>>()?;
        let views: Vec<&[i64]> = loaded.iter().map(|v| v.as_slice()).collect();
        let step = |eq: &Equation, ops: &[&[i64]], shapes: &[&[usize]]| generic(eq, ops, shapes, 1);
        let (v, shape) = contract(&eq, &views, &shapes, &step)?;
        store_ints(dtype, &shape, &v)?
    });
    Ok(vec![y])
}

pub(super) fn infer_einsum(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let dims: Option<Vec<&[Dim]>> = (0..ctx.node.inputs.len())
        .map(|i| input_dims(ctx, i))
        .collect();
    // Without an equation only the element type is known (the plan refuses the node).
    let terms = match ctx.node.attr("equation") {
        Some(_) => Some(ctx.attrs::<Terms>()?),
        None => None,
    };
    let out = match (dims, terms) {
        (Some(dims), Some(terms)) => {
            let ranks: Vec<usize> = dims.iter().map(|d| d.len()).collect();
            let eq = terms.expand(&ranks)?;
            // A label's dim: the first that is not a known 1, else 1.
            let dim_of = |l: usize| -> Dim {
                let mut found = Dim::Known(1);
                for (labels, ds) in eq.inputs.iter().zip(&dims) {
                    for (&ol, d) in labels.iter().zip(ds.iter()) {
                        if ol == l && *d != Dim::Known(1) {
                            return d.clone();
                        }
                        if ol == l {
                            found = d.clone();
                        }
                    }
                }
                found
            };
            Some(eq.output.iter().map(|&l| dim_of(l)).collect())
        }
        _ => None,
    };
    Ok(vec![tensor_type(elem, out)])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    fn einsum(eq: &str, inputs: &[&Tensor]) -> crate::Result<Tensor> {
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("i{i}")).collect();
        let node = Node::new("Einsum", "e", names, ["y"])
            .with_attr("equation", AttrValue::String(eq.as_bytes().to_vec()));
        let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        Ok(eval_node(&node, 12, &ins)?.remove(0))
    }

    #[test]
    fn parses_implicit_outputs_and_ellipses() {
        let eq = Equation::parse("ij,jk", &[2, 2]).unwrap();
        assert_eq!(eq.output, vec![letter('i').unwrap(), letter('k').unwrap()]);
        let eq = Equation::parse("...ii->...i", &[4]).unwrap();
        assert_eq!(eq.inputs[0], vec![ELLIPSIS, ELLIPSIS + 1, 34, 34]);
        assert_eq!(eq.output, vec![ELLIPSIS, ELLIPSIS + 1, 34]);
        // Upper case sorts before lower case in the implicit output.
        let eq = Equation::parse("bA", &[2]).unwrap();
        assert_eq!(eq.output, vec![0, 27]);
        assert!(Equation::parse("ij", &[3]).is_err());
        assert!(Equation::parse("i,j", &[1]).is_err());
        assert!(Equation::parse("i->ii", &[1]).is_err());
    }

    #[test]
    fn matmul_transpose_trace_and_diagonal() {
        let a = f32s(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = f32s(&[3, 2], vec![7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        assert_eq!(
            einsum("ij,jk->ik", &[&a, &b]).unwrap(),
            f32s(&[2, 2], vec![58.0, 64.0, 139.0, 154.0])
        );
        // The same product written to the transposed output.
        assert_eq!(
            einsum("ij,jk->ki", &[&a, &b]).unwrap(),
            f32s(&[2, 2], vec![58.0, 139.0, 64.0, 154.0])
        );
        assert_eq!(
            einsum("ij->ji", &[&a]).unwrap(),
            f32s(&[3, 2], vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0])
        );
        let sq = f32s(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(einsum("ii", &[&sq]).unwrap(), f32s(&[], vec![5.0]));
        assert_eq!(einsum("ii->i", &[&sq]).unwrap(), f32s(&[2], vec![1.0, 4.0]));
        // Three operands and a label summed within one operand.
        let v = f32s(&[2], vec![1.0, -1.0]);
        assert_eq!(
            einsum("i,ij,j->", &[&v, &sq, &v]).unwrap(),
            f32s(&[], vec![0.0])
        );
        assert_eq!(
            einsum("ij,k->k", &[&sq, &v]).unwrap(),
            f32s(&[2], vec![10.0, -10.0])
        );
    }

    #[test]
    fn broadcast_batches_and_integers() {
        // "...ij,...jk" with batch dims [2] and [1].
        let a = f32s(&[2, 1, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b = f32s(&[1, 2, 1], vec![10.0, 100.0]);
        assert_eq!(
            einsum("...ij,...jk->...ik", &[&a, &b]).unwrap(),
            f32s(&[2, 1, 1], vec![210.0, 430.0])
        );
        let i = Tensor::from_vec(DataType::Int32, &[3], vec![1i32, 2, 3]).unwrap();
        let y = einsum("i,i", &[&i, &i]).unwrap();
        assert_eq!(y.as_slice::<i32>().unwrap(), &[14]);
        let err = einsum("ij,jk", &[&a, &b]).unwrap_err();
        assert!(err.to_string().contains("rank 3"), "{err}");
    }

    #[test]
    fn one_parsed_equation_serves_operands_of_every_rank() {
        use crate::ops::{prepare, EvalCtx, NoSubgraphs};
        // The plan parses "...ij,...jk->...ik" once; each run expands its ellipsis for the
        // ranks it is given. The node itself says something else, which a prepared state hides.
        let node = |eq: &str| {
            Node::new("Einsum", "e", ["a", "b"], ["y"])
                .with_attr("equation", AttrValue::String(eq.as_bytes().to_vec()))
        };
        let prepared = prepare::<Terms>(&node("...ij,...jk->...ik"), 12).unwrap();
        let written = node("ij,jk->ki");
        let ctx = EvalCtx {
            node: &written,
            opset: 12,
            runner: &NoSubgraphs,
            prepared: Some(&*prepared),
            memo: None,
        };
        let a = f32s(&[1, 2], vec![1.0, 2.0]);
        let b = f32s(&[2, 1], vec![10.0, 100.0]);
        let y = eval_einsum(&ctx, &[Some(&a), Some(&b)]).unwrap().remove(0);
        assert_eq!(y, f32s(&[1, 1], vec![210.0]));
        let a3 = f32s(&[2, 1, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b3 = f32s(&[1, 2, 1], vec![10.0, 100.0]);
        let y = eval_einsum(&ctx, &[Some(&a3), Some(&b3)])
            .unwrap()
            .remove(0);
        assert_eq!(y, f32s(&[2, 1, 1], vec![210.0, 430.0]));
        // What does not depend on the ranks fails when prepared, with the message a run gave.
        for (eq, want) in [
            ("ij", "has 1 terms for 2 inputs"),
            ("i1,j", "'1' in term 'i1' is not a label"),
            ("......i,j", "two ellipses"),
        ] {
            let err = prepare::<Terms>(&node(eq), 12).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
        let bare = Node::new("Einsum", "e", ["a"], ["y"]);
        let err = prepare::<Terms>(&bare, 12).unwrap_err().to_string();
        assert!(err.contains("attribute 'equation' is required"), "{err}");
    }
}
