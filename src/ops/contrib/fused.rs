//! The matrix products onnxruntime's graph optimizer fuses (`GraphOptimizationLevel`
//! EXTENDED, CPU provider), as a model saved through `SessionOptions.optimized_model_filepath`
//! holds them: `com.microsoft.FusedMatMul` (and its older name `TransposeMatMul`) and
//! `com.microsoft.FusedGemm`.
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, sections `com.microsoft.FusedMatMul` and
//! `com.microsoft.FusedGemm`; the meaning is onnxruntime's CPU kernels
//! (`core/providers/cpu/math/matmul.cc` with `matmul_helper.h`, `contrib_ops/cpu/fused_gemm.cc`).
//!
//! `FusedMatMul(A, B) = alpha * A' @ B'` with numpy's batch broadcasting, where `A'` is `A` with
//! its first dim moved behind the batch dims when `transBatchA` is set (`[M, b0.., K]` read as
//! `[b0.., M, K]`), then its last two dims swapped when `transA` is set; `B'` likewise. As in
//! onnxruntime, `transA` / `transB` are ignored on a 1-D operand, and `transBatchA` /
//! `transBatchB` need both operands of one rank, 3 or more. The transposes are strides of the
//! GEMM's operand views: nothing is copied.
//!
//! `FusedGemm` is `Gemm` followed by the activation its `activation` attribute names, whose own
//! attributes travel prefixed `activation_` (onnxruntime's `GemmActivationFusion`: Elu,
//! HardSigmoid, LeakyRelu, Relu, Selu, Sigmoid, Softplus, Softsign, Tanh, ThresholdedRelu, and
//! onnxruntime's ScaledTanh / ParametricSoftplus, which the interpreter lacks and reports). The
//! activation runs as the default-domain operator of that name, so it computes that kernel's
//! bits.
//!
//! Both are `float` only, as onnxruntime's CPU kernels are; another type is an error naming it.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::{Dim, Node, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::nn::{eval_gemm, gemm, matmul_dims, Mat};
use super::super::util::{broadcast_shapes, required, unsupported_type};
use super::super::{eval_node, Attributes, EvalCtx, InferCtx};

/// Batches with at least this many multiply-adds in all run in parallel.
const PARALLEL_FLOPS: usize = 1 << 18;

/// The attributes of a `FusedMatMul` node, parsed once per plan.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct FusedMatMulAttrs {
    alpha: f32,
    trans_a: bool,
    trans_b: bool,
    trans_batch_a: bool,
    trans_batch_b: bool,
}

impl Attributes for FusedMatMulAttrs {
    fn parse(node: &Node, _opset: i64) -> Result<FusedMatMulAttrs> {
        Ok(FusedMatMulAttrs {
            alpha: node.attr_float("alpha", 1.0)?,
            trans_a: node.attr_int("transA", 0)? != 0,
            trans_b: node.attr_int("transB", 0)? != 0,
            trans_batch_a: node.attr_int("transBatchA", 0)? != 0,
            trans_batch_b: node.attr_int("transBatchB", 0)? != 0,
        })
    }
}

impl FusedMatMulAttrs {
    /// The order in which an operand of rank `rank` is read: `perm[j]` is the stored dim that
    /// logical dim `j` is (the batch move, then the transpose). Errors when the batch move is
    /// asked of operands of differing ranks or of rank 2 or less.
    fn orders(&self, a_rank: usize, b_rank: usize) -> Result<(Vec<usize>, Vec<usize>)> {
        if (self.trans_batch_a || self.trans_batch_b) && (a_rank < 3 || a_rank != b_rank) {
            return Err(Error::Eval(format!(
                "transBatchA and transBatchB need operands of one rank, 3 or more; they have \
                 ranks {a_rank} and {b_rank}"
            )));
        }
        let order = |rank: usize, batch: bool, trans: bool| {
            let mut perm: Vec<usize> = (0..rank).collect();
            if batch {
                // [d0, b0.., bn, last] read as [b0.., bn, d0, last].
                perm[..rank - 1].rotate_left(1);
            }
            if trans && rank >= 2 {
                perm.swap(rank - 2, rank - 1);
            }
            perm
        };
        Ok((
            order(a_rank, self.trans_batch_a, self.trans_a),
            order(b_rank, self.trans_batch_b, self.trans_b),
        ))
    }
}

/// An operand as the product reads it: logical dims and the element stride of each.
struct View {
    dims: Vec<usize>,
    strides: Vec<usize>,
}

impl View {
    /// The view of a row-major tensor of shape `shape` read in the order `perm`.
    fn new(shape: &[usize], perm: &[usize]) -> View {
        let mut own = vec![1usize; shape.len()];
        for j in (0..shape.len().saturating_sub(1)).rev() {
            own[j] = own[j + 1] * shape[j + 1];
        }
        View {
            dims: perm.iter().map(|&p| shape[p]).collect(),
            strides: perm.iter().map(|&p| own[p]).collect(),
        }
    }

    /// The batch dims (all but the matrix dims; a 1-D operand has none).
    fn batch(&self) -> &[usize] {
        &self.dims[..self.dims.len().saturating_sub(2)]
    }

    /// The element offset of the matrix at batch index `idx` of the broadcast batch `out`.
    fn offset(&self, idx: &[usize]) -> usize {
        let batch = self.batch();
        let skip = idx.len() - batch.len();
        batch
            .iter()
            .zip(&idx[skip..])
            .zip(&self.strides)
            .map(|((&d, &i), &s)| if d == 1 { 0 } else { i * s })
            .sum()
    }
}

/// `alpha * A' @ B'` (module docs).
pub(super) fn eval_fused_matmul(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    for t in [a, b] {
        if t.dtype() != DataType::Float {
            return Err(unsupported_type(&ctx.node.op_type, t.dtype()));
        }
    }
    let attrs = ctx.attrs::<FusedMatMulAttrs>()?;
    if a.rank() == 0 || b.rank() == 0 {
        return Err(ctx.error(format!(
            "operands of shapes {:?} and {:?}: both must have rank 1 or more",
            a.shape(),
            b.shape()
        )));
    }
    let (pa, pb) = attrs.orders(a.rank(), b.rank())?;
    let (va, vb) = (View::new(a.shape(), &pa), View::new(b.shape(), &pb));
    // A 1-D A is one row, a 1-D B one column: (rows, cols, row stride, column stride).
    let (m, k, a_rs, a_cs) = match va.dims.len() {
        1 => (1, va.dims[0], 0, 1),
        r => (
            va.dims[r - 2],
            va.dims[r - 1],
            va.strides[r - 2],
            va.strides[r - 1],
        ),
    };
    let (kb, n, b_rs, b_cs) = match vb.dims.len() {
        1 => (vb.dims[0], 1, 1, 0),
        r => (
            vb.dims[r - 2],
            vb.dims[r - 1],
            vb.strides[r - 2],
            vb.strides[r - 1],
        ),
    };
    if k != kb {
        return Err(ctx.error(format!(
            "A {:?} and B {:?} do not agree on the contracted dim ({k} and {kb}) after the \
             transposes",
            a.shape(),
            b.shape()
        )));
    }
    let batch = broadcast_shapes(&[va.batch(), vb.batch()])?;
    let mut out_shape = batch.clone();
    if va.dims.len() > 1 {
        out_shape.push(m);
    }
    if vb.dims.len() > 1 {
        out_shape.push(n);
    }
    let (av, bv) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
    let alpha = attrs.alpha;
    let product = |(i, c): (usize, &mut [f32])| -> Result<()> {
        let mut idx = vec![0usize; batch.len()];
        let mut rest = i;
        for (slot, &d) in idx.iter_mut().zip(&batch).rev() {
            *slot = rest % d;
            rest /= d;
        }
        let am = Mat::new(tail(av, va.offset(&idx)), m, k, a_rs, a_cs)?;
        let bm = Mat::new(tail(bv, vb.offset(&idx)), k, n, b_rs, b_cs)?;
        gemm(alpha, am, bm, 0.0, c, n)
    };
    // Zeroed once: a product with an empty contracted dim writes zeros, the others overwrite.
    let mut y = Tensor::zeros(DataType::Float, &out_shape)?;
    let ys = y.as_slice_mut::<f32>()?;
    if !ys.is_empty() {
        let mats = ys.len() / (m * n);
        if mats > 1 && ys.len().saturating_mul(k) >= PARALLEL_FLOPS {
            ys.par_chunks_mut(m * n)
                .enumerate()
                .with_min_len(crate::par::min_len(mats, &[m, n, k]))
                .try_for_each(product)?;
        } else {
            ys.chunks_mut(m * n).enumerate().try_for_each(product)?;
        }
    }
    Ok(vec![y])
}

/// The elements of `data` from `offset` on (none past its end: `Mat::new` then refuses a
/// matrix that does not fit).
fn tail(data: &[f32], offset: usize) -> &[f32] {
    data.get(offset..).unwrap_or(&[])
}

/// The output of `FusedMatMul` from what is known of its operands.
pub(super) fn infer_fused_matmul(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let attrs = ctx.attrs::<FusedMatMulAttrs>()?;
    let dims = |i: usize| ctx.input(i).and_then(|t| t.shape.as_ref()).map(|s| &s.dims);
    let shape = match (dims(0), dims(1)) {
        (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => {
            let (pa, pb) = attrs.orders(a.len(), b.len())?;
            let read =
                |d: &[Dim], p: &[usize]| -> Vec<Dim> { p.iter().map(|&j| d[j].clone()).collect() };
            matmul_dims(&read(a, &pa), &read(b, &pb)).map(crate::ir::Shape::new)
        }
        _ => None,
    };
    let elem = ctx.input(0).and_then(|t| t.elem);
    Ok(vec![TensorType { elem, shape }])
}

/// `FusedGemm`: the `Gemm` of its inputs and `alpha`, `beta`, `transA`, `transB`, then its
/// activation (module docs).
pub(super) fn eval_fused_gemm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    if let Some(t) = inputs
        .iter()
        .flatten()
        .find(|t| t.dtype() != DataType::Float)
    {
        return Err(unsupported_type("FusedGemm", t.dtype()));
    }
    let activation = activation_node(ctx.node)?;
    let y = eval_gemm(ctx, inputs)?;
    eval_node(&activation, ACTIVATION_OPSET, &[y.first()]).map_err(|e| {
        Error::Eval(format!(
            "activation '{}' of FusedGemm: {e}",
            activation.op_type
        ))
    })
}

/// The default-domain opset the activation of `FusedGemm` runs at: onnxruntime fuses only
/// activations whose meaning on `float` is the same at every opset (`IsFusableActivation`).
const ACTIVATION_OPSET: i64 = 13;

/// The activation node of a `FusedGemm`: its `activation` (required) with each
/// `activation_<name>` attribute as `<name>`.
fn activation_node(node: &Node) -> Result<Node> {
    let op = node
        .attr_string("activation")?
        .ok_or_else(|| Error::Eval("FusedGemm: the activation attribute is required".into()))?;
    let mut act = Node::new(op, "activation", ["x"], ["y"]);
    for attr in &node.attributes {
        if let Some(name) = attr.name.strip_prefix("activation_") {
            act = act.with_attr(name, attr.value.clone());
        }
    }
    Ok(act)
}

/// `FusedGemm` has `Gemm`'s output type.
pub(super) fn infer_fused_gemm(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    super::super::nn::infer_gemm(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::AttrValue;

    fn float(v: f32) -> AttrValue {
        AttrValue::Float(v)
    }

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn iota(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        f32s(shape, &(0..n).map(|i| i as f32 - 3.0).collect::<Vec<_>>())
    }

    fn node(op: &str, attrs: &[(&str, AttrValue)]) -> Node {
        let mut n = Node::new(op, "n", ["a", "b"], ["y"]);
        n.domain = "com.microsoft".into();
        for (k, v) in attrs {
            n = n.with_attr(k, v.clone());
        }
        n
    }

    /// Element `idx` of a row-major tensor.
    fn at(t: &Tensor, idx: &[usize]) -> f32 {
        let mut off = 0;
        for (&i, &d) in idx.iter().zip(t.shape()) {
            off = off * d + i;
        }
        t.as_slice::<f32>().unwrap()[off]
    }

    /// The product by definition: `alpha * sum_p A'[.., i, p] * B'[.., p, j]`, with A' and B'
    /// read through `perm` (the logical dim `j` is stored dim `perm[j]`), on 3-D operands.
    fn reference(a: &Tensor, b: &Tensor, pa: &[usize], pb: &[usize], alpha: f32) -> Tensor {
        let la: Vec<usize> = pa.iter().map(|&p| a.shape()[p]).collect();
        let lb: Vec<usize> = pb.iter().map(|&p| b.shape()[p]).collect();
        let (batch, m, k, n) = (la[0].max(lb[0]), la[1], la[2], lb[2]);
        let stored = |perm: &[usize], logical: [usize; 3]| {
            let mut s = [0; 3];
            for (j, &p) in perm.iter().enumerate() {
                s[p] = logical[j];
            }
            s
        };
        let mut out = Vec::new();
        for g in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0.0f64;
                    for p in 0..k {
                        let x = at(a, &stored(pa, [if la[0] == 1 { 0 } else { g }, i, p]));
                        let y = at(b, &stored(pb, [if lb[0] == 1 { 0 } else { g }, p, j]));
                        acc += f64::from(x) * f64::from(y);
                    }
                    out.push((acc * f64::from(alpha)) as f32);
                }
            }
        }
        f32s(&[batch, m, n], &out)
    }

    /// A product case: attributes, A's and B's stored shapes, and the order each is read in.
    type Case = (
        &'static [(&'static str, i64)],
        [usize; 3],
        [usize; 3],
        [usize; 3],
        [usize; 3],
    );

    #[test]
    fn transposes_and_batch_moves_match_the_definition() {
        // Each case: attributes, A's and B's stored shapes, and how each is read.
        let cases: &[Case] = &[
            (&[], [2, 3, 4], [2, 4, 5], [0, 1, 2], [0, 1, 2]),
            (&[("transA", 1)], [2, 4, 3], [1, 4, 5], [0, 2, 1], [0, 1, 2]),
            (&[("transB", 1)], [1, 3, 4], [2, 5, 4], [0, 1, 2], [0, 2, 1]),
            (
                &[("transBatchA", 1)],
                [3, 2, 4],
                [2, 4, 5],
                [1, 0, 2],
                [0, 1, 2],
            ),
            (
                &[("transBatchB", 1)],
                [2, 3, 4],
                [4, 2, 5],
                [0, 1, 2],
                [1, 0, 2],
            ),
            (
                &[("transBatchA", 1), ("transA", 1)],
                [4, 2, 3],
                [2, 4, 5],
                [1, 2, 0],
                [0, 1, 2],
            ),
            (
                &[("transBatchB", 1), ("transB", 1), ("transA", 1)],
                [2, 4, 3],
                [5, 2, 4],
                [0, 2, 1],
                [1, 2, 0],
            ),
        ];
        for (flags, sa, sb, pa, pb) in cases {
            let mut attrs: Vec<(&str, AttrValue)> =
                flags.iter().map(|&(k, v)| (k, AttrValue::Int(v))).collect();
            attrs.push(("alpha", float(0.5)));
            let (a, b) = (iota(sa), iota(sb));
            let y = eval_node(&node("FusedMatMul", &attrs), 1, &[Some(&a), Some(&b)]).unwrap();
            assert_eq!(y[0], reference(&a, &b, pa, pb, 0.5), "{flags:?}");
        }
    }

    #[test]
    fn vectors_ignore_their_transposes() {
        // [3] @ [3, 2] with transA: the vector is not transposed (onnxruntime's rule).
        let v = f32s(&[3], &[1.0, 0.0, -1.0]);
        let b = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let n = node(
            "FusedMatMul",
            &[("transA", AttrValue::Int(1)), ("transB", AttrValue::Int(1))],
        );
        let y = eval_node(&n, 1, &[Some(&v), Some(&b)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[-2.0, -2.0]));
        // TransposeMatMul is the same kernel under its older name.
        let n = node("TransposeMatMul", &[("transB", AttrValue::Int(1))]);
        let y = eval_node(&n, 1, &[Some(&v), Some(&b)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[-2.0, -2.0]));
    }

    #[test]
    fn bad_operands_are_errors() {
        let a = iota(&[2, 3]);
        let n = node("FusedMatMul", &[("transBatchA", AttrValue::Int(1))]);
        let err = eval_node(&n, 1, &[Some(&a), Some(&a)]).unwrap_err();
        assert!(err.to_string().contains("rank, 3 or more"), "{err}");
        let n = node("FusedMatMul", &[]);
        let err = eval_node(&n, 1, &[Some(&a), Some(&a)]).unwrap_err();
        assert!(err.to_string().contains("contracted dim"), "{err}");
        let d = Tensor::from_vec(DataType::Double, &[1], vec![1.0f64]).unwrap();
        let err = eval_node(&n, 1, &[Some(&d), Some(&d)]).unwrap_err();
        assert!(err.to_string().contains("double"), "{err}");
    }

    #[test]
    fn fused_gemm_applies_its_activation_with_its_attributes() {
        let a = f32s(&[1, 2], &[1.0, -2.0]);
        let b = f32s(&[2, 2], &[1.0, 0.0, 0.0, 1.0]);
        let n = node(
            "FusedGemm",
            &[
                ("activation", AttrValue::String(b"LeakyRelu".to_vec())),
                ("activation_alpha", float(0.25)),
                ("alpha", float(2.0)),
            ],
        );
        let y = eval_node(&n, 1, &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(y[0], f32s(&[1, 2], &[2.0, -1.0]));
        let n = node(
            "FusedGemm",
            &[("activation", AttrValue::String(b"Swish".to_vec()))],
        );
        let err = eval_node(&n, 1, &[Some(&a), Some(&b)]).unwrap_err();
        assert!(err.to_string().contains("activation 'Swish'"), "{err}");
        let n = node("FusedGemm", &[]);
        let err = eval_node(&n, 1, &[Some(&a), Some(&b)]).unwrap_err();
        assert!(err.to_string().contains("required"), "{err}");
    }
}
