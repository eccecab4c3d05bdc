//! The reductions: `ReduceSum`, `ReduceMean`, `ReduceMax`, `ReduceMin`, `ReduceProd`, `ReduceL1`,
//! `ReduceL2`, `ReduceLogSum`, `ReduceLogSumExp` and `ReduceSumSquare`.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__ReduceSum.html> (and its siblings).
//!
//! `axes` is an attribute up to opset 12 (`ReduceSum`) or 17 (the others) and an optional input
//! after; one kernel reads whichever the node has. With no axes, every axis is reduced unless
//! `noop_with_empty_axes` is set, in which case nothing is: each element is "reduced" on its own,
//! which leaves `ReduceSum` an identity and squares `ReduceSumSquare`, as in the ONNX reference.
//! Reducing an empty set gives the operation's identity: 0 for sums and norms, 1 for products,
//! the type's lowest (highest) value for `ReduceMax` (`ReduceMin`), `-inf` for the logarithmic
//! ones and NaN for `ReduceMean`.
//!
//! Floats accumulate in `f64` and integers exactly in `i128` (wrapping like the element type),
//! except for `ReduceL2`, `ReduceLogSum` and `ReduceLogSumExp` of integers, computed in `f64` and
//! truncated. `ReduceMax` and `ReduceMin` propagate NaN and also take `bool`.

use crate::error::Result;
use crate::ir::{Dim, Shape, TensorType};
use crate::ops::num::{real_values, Arith, Float};
use crate::ops::util::{broadcast_offsets, normalize_axis, optional, required, tensor, to_i64s};
use crate::ops::{Attributes, EvalCtx, InferCtx};
use crate::tensor::try_vec;
use crate::tensor::Tensor;
use crate::DataType;

use super::work::bad_type;

/// Which reduction a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

/// What a reduction reduces: the input's shape with the reduced axes kept as 1, the output count
/// and shape, how many input elements each output reduces, and the reduced axes.
struct Plan {
    input: Vec<usize>,
    kept: Vec<usize>,
    axes: Vec<usize>,
    out_len: usize,
    out_shape: Vec<usize>,
    count: usize,
}

impl Plan {
    /// Where each input element goes: the output element it reduces into.
    fn targets(&self) -> Vec<usize> {
        broadcast_offsets(&self.kept, &self.input)
    }

    /// `[outer, reduced, inner]` when the reduced axes are one run of consecutive axes: the
    /// input is then `outer` blocks of `reduced` rows of `inner` elements, each block reducing
    /// into one row of the output.
    fn blocks(&self) -> Option<[usize; 3]> {
        let (&first, &last) = (self.axes.first()?, self.axes.last()?);
        (last - first + 1 == self.axes.len()).then(|| {
            [
                self.input[..first].iter().product(),
                self.count,
                self.input[last + 1..].iter().product(),
            ]
        })
    }
}

/// The attributes of a reduction: `axes` (read only when the node has no axes input),
/// `keepdims` and `noop_with_empty_axes`.
#[derive(Clone, Debug)]
pub(super) struct ReduceAttrs {
    axes: Option<Vec<i64>>,
    keepdims: bool,
    noop: bool,
}

impl Attributes for ReduceAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<ReduceAttrs> {
        let axes = match has_axes_input(node) {
            true => None,
            false => node.attr_ints("axes")?.map(<[i64]>::to_vec),
        };
        Ok(ReduceAttrs {
            axes,
            keepdims: node.attr_int("keepdims", 1)? != 0,
            noop: node.attr_int("noop_with_empty_axes", 0)? != 0,
        })
    }
}

/// Whether a node names its axes as input 1.
fn has_axes_input(node: &crate::ir::Node) -> bool {
    node.inputs.get(1).is_some_and(|n| !n.is_empty())
}

/// The axes a node reduces over (normalized, sorted, distinct), given the input rank.
fn reduced_axes(noop: bool, axes: Option<Vec<i64>>, rank: usize) -> Result<Vec<usize>> {
    let axes = axes.unwrap_or_default();
    if axes.is_empty() {
        return Ok(if noop {
            Vec::new()
        } else {
            (0..rank).collect()
        });
    }
    let mut out = axes
        .iter()
        .map(|&a| normalize_axis(a, rank))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(crate::Error::Eval(format!("axes {axes:?} repeat an axis")));
    }
    Ok(out)
}

fn plan(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>], shape: &[usize]) -> Result<Plan> {
    let attrs = ctx.attrs::<ReduceAttrs>()?;
    // Input 1 when present, else the `axes` attribute.
    let axes = match optional(inputs, 1) {
        Some(t) => Some(to_i64s(t)?),
        None => attrs.axes.clone(),
    };
    let axes = reduced_axes(attrs.noop, axes, shape.len())?;
    let keepdims = attrs.keepdims;
    let kept: Vec<usize> = (0..shape.len())
        .map(|j| if axes.contains(&j) { 1 } else { shape[j] })
        .collect();
    let out_shape = if keepdims {
        kept.clone()
    } else {
        (0..shape.len())
            .filter(|j| !axes.contains(j))
            .map(|j| shape[j])
            .collect()
    };
    Ok(Plan {
        input: shape.to_vec(),
        out_len: kept.iter().product(),
        count: axes.iter().map(|&j| shape[j]).product(),
        kept,
        axes,
        out_shape,
    })
}

/// The identity of reduction `kind`: where its accumulators start.
fn identity<A: Arith>(kind: Kind, lowest: A, highest: A) -> A {
    match kind {
        Kind::Prod => A::ONE,
        Kind::Max => lowest,
        Kind::Min => highest,
        _ => A::ZERO,
    }
}

/// One step of reduction `kind`: the accumulator `a` after element `v` (for `LogSumExp`, the
/// exponential of the element less its output's shift).
#[inline(always)]
fn step<A: Arith>(kind: Kind, a: A, v: A) -> A {
    match kind {
        Kind::Sum | Kind::Mean | Kind::LogSum | Kind::LogSumExp => a.add(v),
        Kind::Prod => a.mul(v),
        Kind::Max if a.is_nan() || v < a => a,
        Kind::Min if a.is_nan() || v > a => a,
        Kind::Max | Kind::Min => v,
        Kind::L1 => a.add(v.abs()),
        Kind::L2 | Kind::SumSquare => a.add(v.mul(v)),
    }
}

/// Reduction `kind` of `float` elements in blocks (see [`Plan::blocks`]), accumulated in `f64`:
/// each output's elements are taken in the order the general loop takes them, so the results
/// are its bits, without an index per element. `None` for `LogSumExp`, which shifts first.
fn reduce_blocks(
    kind: Kind,
    x: &[f32],
    [outer, reduced, inner]: [usize; 3],
) -> Result<Option<Vec<f64>>> {
    if kind == Kind::LogSumExp {
        return Ok(None);
    }
    let mut acc = try_vec(
        outer * inner,
        identity(kind, f64::NEG_INFINITY, f64::INFINITY),
    )?;
    if inner == 0 || reduced == 0 {
        return Ok(Some(acc));
    }
    // Each kind is its own loop, so the step's `match` leaves the loop body.
    macro_rules! blocks {
        ($kind:expr) => {
            for (block, acc) in x
                .chunks_exact(reduced * inner)
                .zip(acc.chunks_exact_mut(inner))
            {
                for row in block.chunks_exact(inner) {
                    for (a, &v) in acc.iter_mut().zip(row) {
                        *a = step($kind, *a, f64::from(v));
                    }
                }
            }
        };
    }
    match kind {
        Kind::Sum | Kind::Mean | Kind::LogSum => blocks!(Kind::Sum),
        Kind::Prod => blocks!(Kind::Prod),
        Kind::Max => blocks!(Kind::Max),
        Kind::Min => blocks!(Kind::Min),
        Kind::L1 => blocks!(Kind::L1),
        Kind::L2 | Kind::SumSquare => blocks!(Kind::SumSquare),
        Kind::LogSumExp => return Ok(None),
    }
    Ok(Some(acc))
}

/// Runs reduction `kind` of `x` (elements in accumulator type) over `plan`; `lowest` and
/// `highest` are the element type's extremes (the identities of max and min).
fn reduce<A: Arith>(kind: Kind, x: &[A], plan: &Plan, lowest: A, highest: A) -> Result<Vec<A>> {
    let init = identity(kind, lowest, highest);
    let targets = plan.targets();
    // LogSumExp subtracts each output's largest finite element before exponentiating.
    let shift = if kind == Kind::LogSumExp {
        let mut m = try_vec(plan.out_len, f64::NEG_INFINITY)?;
        for (&o, &v) in targets.iter().zip(x) {
            let v = v.to_real();
            if v.is_finite() && v > m[o] {
                m[o] = v;
            }
        }
        m.iter()
            .map(|&v| if v.is_finite() { v } else { 0.0 })
            .collect()
    } else {
        Vec::new()
    };
    let mut acc = try_vec(plan.out_len, init)?;
    for (&o, &v) in targets.iter().zip(x) {
        let a = acc[o];
        acc[o] = match kind {
            Kind::LogSumExp => step(kind, a, A::from_real((v.to_real() - shift[o]).exp())),
            _ => step(kind, a, v),
        };
    }
    Ok(finish(kind, acc, &shift, plan.count))
}

/// The outputs of reduction `kind` from its accumulators (`shift`: `LogSumExp`'s per output).
fn finish<A: Arith>(kind: Kind, acc: Vec<A>, shift: &[f64], count: usize) -> Vec<A> {
    match kind {
        Kind::Mean => acc.iter().map(|a| mean(*a, count)).collect(),
        Kind::L2 => acc
            .iter()
            .map(|a| A::from_real(a.to_real().sqrt()))
            .collect(),
        Kind::LogSum => acc.iter().map(|a| A::from_real(a.to_real().ln())).collect(),
        Kind::LogSumExp => acc
            .iter()
            .zip(shift)
            .map(|(a, s)| A::from_real(a.to_real().ln() + s))
            .collect(),
        _ => acc,
    }
}

/// `sum / n`: truncating for integers, 0 for an integer `n` of 0 (and NaN or infinite for a
/// float `n` of 0).
fn mean<A: Arith>(sum: A, n: usize) -> A {
    sum.div(A::from_usize(n))
}

/// The extremes of an integer or `bool` element type, widened.
fn int_bounds(dtype: DataType) -> Option<(i128, i128)> {
    if dtype == DataType::Bool {
        return Some((0, 1));
    }
    crate::ops::num::dispatch_int!(dtype, T => Some((T::MIN as i128, T::MAX as i128)), _ => None)
}

/// The kernel shared by every reduction.
fn eval_reduce(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>], kind: Kind) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let dtype = x.dtype();
    let plan = plan(ctx, inputs, x.shape())?;
    let shape = &plan.out_shape;
    let is_bool = dtype == DataType::Bool;
    if is_bool && !matches!(kind, Kind::Max | Kind::Min) {
        return Err(bad_type(ctx, dtype));
    }
    if let (DataType::Float, Some(blocks)) = (dtype, plan.blocks()) {
        if let Some(acc) = reduce_blocks(kind, x.as_slice::<f32>()?, blocks)? {
            let r = finish(kind, acc, &[], plan.count);
            return Ok(vec![tensor(
                dtype,
                shape,
                r.into_iter().map(|v| v as f32).collect(),
            )?]);
        }
    }
    let out = crate::ops::num::dispatch_float!(dtype, T => {
        let v: Vec<f64> = x.as_slice::<T>()?.iter().map(|e| e.to_f64()).collect();
        let r = reduce(kind, &v, &plan, f64::NEG_INFINITY, f64::INFINITY)?;
        tensor(dtype, shape, r.into_iter().map(<T as Float>::from_f64).collect())?
    }, _ => {
        let (lowest, highest) = int_bounds(dtype).ok_or_else(|| bad_type(ctx, dtype))?;
        let exact = !matches!(kind, Kind::L2 | Kind::LogSum | Kind::LogSumExp);
        let r: Vec<i128> = if exact {
            let v: Vec<i128> = int_values(x)?;
            reduce(kind, &v, &plan, lowest, highest)?
        } else {
            let v = real_values(x)?;
            let r = reduce(kind, &v, &plan, lowest as f64, highest as f64)?;
            r.into_iter().map(|f| f as i128).collect()
        };
        if is_bool {
            tensor(dtype, shape, r.into_iter().map(|v| u8::from(v != 0)).collect())?
        } else {
            crate::ops::num::dispatch_int!(dtype, T => {
                tensor(dtype, shape, r.into_iter().map(|v| v as T).collect())?
            }, _ => return Err(bad_type(ctx, dtype)))
        }
    });
    Ok(vec![out])
}

/// The elements of an integer or `bool` tensor, exactly.
fn int_values(x: &Tensor) -> Result<Vec<i128>> {
    if x.dtype() == DataType::Bool {
        return Ok(x
            .as_slice::<u8>()?
            .iter()
            .map(|&b| i128::from(b != 0))
            .collect());
    }
    crate::ops::num::dispatch_int!(x.dtype(), T => {
        Ok(x.as_slice::<T>()?.iter().map(|&v| v as i128).collect())
    }, _ => Err(crate::Error::Eval(format!("expected integers, found {}", x.dtype()))))
}

/// Declares the kernel of each reduction.
macro_rules! reduce_kernels {
    ($($name:ident => $kind:ident;)*) => {$(
        pub(super) fn $name(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
            eval_reduce(ctx, inputs, Kind::$kind)
        }
    )*};
}

reduce_kernels! {
    eval_reduce_sum => Sum;
    eval_reduce_mean => Mean;
    eval_reduce_max => Max;
    eval_reduce_min => Min;
    eval_reduce_prod => Prod;
    eval_reduce_l1 => L1;
    eval_reduce_l2 => L2;
    eval_reduce_log_sum => LogSum;
    eval_reduce_log_sum_exp => LogSumExp;
    eval_reduce_sum_square => SumSquare;
}

/// The shape function of every reduction: the input's element type; the output dims when the
/// input rank and the axes (attribute, constant input, or none) are known.
pub(super) fn infer_reduce(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let input = ctx.input(0).cloned().unwrap_or_default();
    let attrs = ctx.attrs::<ReduceAttrs>()?;
    let keepdims = attrs.keepdims;
    let axes = match has_axes_input(ctx.node) {
        true => match ctx.constant(1) {
            Some(t) => Some(to_i64s(t)?),
            // Unknown axes: with keepdims only the rank is known.
            None => {
                let shape = input
                    .shape
                    .filter(|_| keepdims)
                    .map(|s| Shape::new(vec![Dim::Unknown; s.rank()]));
                return Ok(vec![TensorType {
                    elem: input.elem,
                    shape,
                }]);
            }
        },
        false => attrs.axes.clone(),
    };
    let shape = match &input.shape {
        Some(s) => {
            let axes = reduced_axes(attrs.noop, axes, s.rank())?;
            let dims = s
                .dims
                .iter()
                .enumerate()
                .filter_map(|(j, d)| match (axes.contains(&j), keepdims) {
                    (false, _) => Some(d.clone()),
                    (true, true) => Some(Dim::Known(1)),
                    (true, false) => None,
                })
                .collect();
            Some(Shape::new(dims))
        }
        None => None,
    };
    Ok(vec![TensorType {
        elem: input.elem,
        shape,
    }])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::tensor::Tensor;
    use crate::DataType;

    fn data() -> Tensor {
        let v: Vec<f32> = (1..=12).map(|i| i as f32).collect();
        Tensor::from_vec(DataType::Float, &[3, 2, 2], v).unwrap()
    }

    fn axes(v: &[i64]) -> Tensor {
        Tensor::from_vec(DataType::Int64, &[v.len()], v.to_vec()).unwrap()
    }

    fn run(op: &str, opset: i64, attrs: &[(&str, i64)], x: &Tensor, a: Option<&Tensor>) -> Tensor {
        let mut node = Node::new(op, "r", ["x", "a"], ["y"]);
        for (k, v) in attrs {
            node = node.with_attr(k, AttrValue::Int(*v));
        }
        eval_node(&node, opset, &[Some(x), a]).unwrap().remove(0)
    }

    #[test]
    fn float_blocks_give_the_bits_of_the_general_loop() {
        // The general loop accumulates `float` and `double` alike in `f64`; `float` reductions
        // over consecutive axes take the block loop, so each must equal the `double` result
        // rounded once.
        let shape = [2usize, 3, 4, 5];
        let mut s = 0x9e37_79b9u32;
        let v: Vec<f32> = (0..120)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                match i {
                    7 => f32::NAN,
                    30 => f32::INFINITY,
                    61 => f32::NEG_INFINITY,
                    _ => (s % 2001) as f32 / 97.0 - 10.0,
                }
            })
            .collect();
        let x = Tensor::from_vec(DataType::Float, &shape, v.clone()).unwrap();
        let d: Vec<f64> = v.iter().map(|&e| f64::from(e)).collect();
        let xd = Tensor::from_vec(DataType::Double, &shape, d).unwrap();
        let ops = [
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceSumSquare",
        ];
        let axis_sets: [&[i64]; 8] = [
            &[1],
            &[1, 2],
            &[0],
            &[3],
            &[2, 3],
            &[0, 1, 2, 3],
            &[0, 2],
            &[],
        ];
        for op in ops {
            for set in axis_sets {
                let a = axes(set);
                let y = run(op, 18, &[("keepdims", 0)], &x, Some(&a));
                let yd = run(op, 18, &[("keepdims", 0)], &xd, Some(&a));
                let want: Vec<u32> = yd
                    .to_vec::<f64>()
                    .unwrap()
                    .iter()
                    .map(|&e| (e as f32).to_bits())
                    .collect();
                let got: Vec<u32> = y
                    .to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|e| e.to_bits())
                    .collect();
                assert_eq!(got, want, "{op} over {set:?}");
            }
        }
    }

    #[test]
    fn sum_over_one_axis_with_and_without_keepdims() {
        let y = run("ReduceSum", 13, &[], &data(), Some(&axes(&[1])));
        assert_eq!(y.shape(), &[3, 1, 2]);
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            [4.0, 6.0, 12.0, 14.0, 20.0, 22.0]
        );
        let y = run(
            "ReduceSum",
            13,
            &[("keepdims", 0)],
            &data(),
            Some(&axes(&[-1])),
        );
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            [3.0, 7.0, 11.0, 15.0, 19.0, 23.0]
        );
    }

    #[test]
    fn empty_axes_reduce_all_or_nothing() {
        let y = run("ReduceMean", 18, &[("keepdims", 0)], &data(), None);
        assert_eq!(y.shape(), &[] as &[usize]);
        assert_eq!(y.to_vec::<f32>().unwrap(), [6.5]);
        let y = run(
            "ReduceSumSquare",
            18,
            &[("noop_with_empty_axes", 1)],
            &data(),
            Some(&axes(&[])),
        );
        assert_eq!(y.shape(), &[3, 2, 2]);
        assert_eq!(y.to_vec::<f32>().unwrap()[2], 9.0);
    }

    #[test]
    fn norms_logs_and_products() {
        let x = Tensor::from_vec(DataType::Float, &[2, 2], vec![3.0f32, -4.0, 1.0, 2.0]).unwrap();
        let one = axes(&[1]);
        let y = run("ReduceL2", 18, &[("keepdims", 0)], &x, Some(&one));
        assert_eq!(y.to_vec::<f32>().unwrap()[0], 5.0);
        let y = run("ReduceL1", 18, &[("keepdims", 0)], &x, Some(&one));
        assert_eq!(y.to_vec::<f32>().unwrap(), [7.0, 3.0]);
        let y = run("ReduceProd", 18, &[("keepdims", 0)], &x, Some(&one));
        assert_eq!(y.to_vec::<f32>().unwrap(), [-12.0, 2.0]);
        let y = run("ReduceLogSumExp", 18, &[("keepdims", 0)], &x, Some(&one));
        let want = (1f64.exp() + 2f64.exp()).ln() as f32;
        assert!((y.to_vec::<f32>().unwrap()[1] - want).abs() < 1e-6);
    }

    #[test]
    fn empty_sets_give_identities_and_integers_stay_exact() {
        let x = Tensor::from_vec(DataType::Int8, &[2, 0], Vec::<i8>::new()).unwrap();
        let y = run("ReduceMax", 18, &[], &x, Some(&axes(&[1])));
        assert_eq!(y.to_vec::<i8>().unwrap(), [-128, -128]);
        let f = Tensor::from_vec(DataType::Float, &[0], Vec::<f32>::new()).unwrap();
        let y = run("ReduceLogSum", 18, &[], &f, None);
        assert_eq!(y.to_vec::<f32>().unwrap(), [f32::NEG_INFINITY]);
        let big = Tensor::from_vec(DataType::Int64, &[2], vec![i64::MAX - 1, 1]).unwrap();
        let y = run("ReduceSum", 13, &[("keepdims", 0)], &big, None);
        assert_eq!(y.to_vec::<i64>().unwrap(), [i64::MAX]);
    }

    #[test]
    fn axes_come_from_the_attribute_in_old_opsets_and_are_checked() {
        let node = Node::new("ReduceMin", "r", ["x"], ["y"])
            .with_attr("axes", AttrValue::Ints(vec![0, 2]));
        let y = eval_node(&node, 13, &[Some(&data())]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 2, 1]);
        assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 3.0]);
        let node = Node::new("ReduceMin", "r", ["x"], ["y"])
            .with_attr("axes", AttrValue::Ints(vec![0, 3]));
        let err = eval_node(&node, 13, &[Some(&data())]).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        let node = Node::new("ReduceMin", "r", ["x"], ["y"])
            .with_attr("axes", AttrValue::Ints(vec![0, -3]));
        let err = eval_node(&node, 13, &[Some(&data())]).unwrap_err();
        assert!(err.to_string().contains("repeat"), "{err}");
    }

    #[test]
    fn inference_knows_the_output_rank() {
        use crate::ir::{Dim, TensorType};
        let n = Dim::Symbolic("n".into());
        let input = TensorType::new(DataType::Float, vec![n.clone(), Dim::Known(4)]);
        let a = axes(&[1]);
        let node =
            Node::new("ReduceSum", "r", ["x", "a"], ["y"]).with_attr("keepdims", AttrValue::Int(0));
        let t = crate::ops::infer_node(&node, 13, &[Some(input.clone()), None], &[None, Some(&a)]);
        assert_eq!(t[0].shape.as_ref().unwrap().dims, vec![n]);
        let t = crate::ops::infer_node(&node, 13, &[Some(input.clone()), None], &[None, None]);
        assert_eq!(t[0].shape, None);
        let node = Node::new("ReduceSum", "r", ["x", "a"], ["y"]);
        let t = crate::ops::infer_node(&node, 13, &[Some(input), None], &[None, None]);
        assert_eq!(t[0].shape.as_ref().unwrap().dims, vec![Dim::Unknown; 2]);
    }
}
