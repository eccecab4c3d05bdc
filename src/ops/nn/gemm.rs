//! `Gemm` (opsets 1, 6, 7, 9, 11, 13): `Y = alpha * A' * B' + beta * C` with optional transposes
//! and C broadcast to the output.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Gemm.html>.
//!
//! One kernel serves every opset: C is optional (required before 11, which only makes older
//! models stricter) and always broadcast unidirectionally (opsets 1 and 6 asked for it with a
//! `broadcast` attribute, which is accepted and ignored). Integer Gemm (opset 9+) wraps in the
//! element type with `alpha` and `beta` truncated to integers.

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::tensor::try_vec;
use crate::tensor::Tensor;

use super::super::util::{
    broadcast_offsets, broadcast_shapes, optional, required, to_i64s, unsupported_type,
};
use super::super::{Attributes, EvalCtx, InferCtx};
use super::blas::{gemm, Mat};
use super::values::{input_dims, is_int, store_ints, tensor_type};
use crate::ops::num::{dispatch_real, Arith, Real};

/// The attributes of a Gemm node (and of `com.microsoft.QGemm`, which has no `beta`).
#[derive(Clone, Debug)]
pub(in crate::ops) struct GemmAttrs {
    pub trans_a: bool,
    pub trans_b: bool,
    pub alpha: f32,
    pub beta: f32,
}

impl Attributes for GemmAttrs {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<GemmAttrs> {
        Ok(GemmAttrs {
            trans_a: node.attr_int("transA", 0)? != 0,
            trans_b: node.attr_int("transB", 0)? != 0,
            alpha: node.attr_float("alpha", 1.0)?,
            beta: node.attr_float("beta", 1.0)?,
        })
    }
}

/// The attributes and the output size of one Gemm node.
pub(in crate::ops) struct Shape {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    trans_a: bool,
    trans_b: bool,
}

impl Shape {
    /// The sizes of `A' * B'` for operands of shapes `a` and `b`.
    pub fn new(ctx: &EvalCtx<'_>, attrs: &GemmAttrs, a: &[usize], b: &[usize]) -> Result<Shape> {
        let (trans_a, trans_b) = (attrs.trans_a, attrs.trans_b);
        let (&[ar, ac], &[br, bc]) = (a, b) else {
            return Err(ctx.error(format!("A {a:?} and B {b:?} must be matrices")));
        };
        let (m, k) = if trans_a { (ac, ar) } else { (ar, ac) };
        let (kb, n) = if trans_b { (bc, br) } else { (br, bc) };
        if k != kb {
            return Err(ctx.error(format!(
                "A {a:?} and B {b:?} do not agree on the contracted dim"
            )));
        }
        Ok(Shape {
            m,
            k,
            n,
            trans_a,
            trans_b,
        })
    }

    /// For each output element, the element of C it adds (C broadcast to `[m, n]`).
    fn bias_offsets(&self, c: &[usize]) -> Result<Vec<usize>> {
        let out = [self.m, self.n];
        if c.len() > 2 || broadcast_shapes(&[c, &out])? != out {
            return Err(Error::Eval(format!(
                "C {c:?} does not broadcast to the output [{}, {}]",
                self.m, self.n
            )));
        }
        Ok(broadcast_offsets(c, &out))
    }

    fn run_real<T: Real>(
        &self,
        a: &[T],
        b: &[T],
        c: Option<&[T]>,
        c_offsets: &[usize],
        alpha: f32,
        beta: f32,
    ) -> Result<Vec<T>> {
        let (m, k, n) = (self.m, self.k, self.n);
        let a = if self.trans_a {
            Mat::row_major(a, k, m)?.t()
        } else {
            Mat::row_major(a, m, k)?
        };
        let b = if self.trans_b {
            Mat::row_major(b, n, k)?.t()
        } else {
            Mat::row_major(b, k, n)?
        };
        let (mut out, beta) = match c {
            Some(c) => (
                c_offsets.iter().map(|&o| c[o]).collect(),
                T::from_f64(beta as f64),
            ),
            None => (try_vec(m * n, T::ZERO)?, T::ZERO),
        };
        gemm(T::from_f64(alpha as f64), a, b, beta, &mut out, n)?;
        Ok(out)
    }

    fn run_ring(
        &self,
        a: &[i64],
        b: &[i64],
        c: Option<&[i64]>,
        c_offsets: &[usize],
        alpha: i64,
        beta: i64,
    ) -> Vec<i64> {
        let (m, k, n) = (self.m, self.k, self.n);
        let at = |i: usize, p: usize| {
            if self.trans_a {
                a[p * m + i]
            } else {
                a[i * k + p]
            }
        };
        let bt = |p: usize, j: usize| {
            if self.trans_b {
                b[j * k + p]
            } else {
                b[p * n + j]
            }
        };
        let mut out = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let dot = (0..k).fold(0i64, |acc, p| acc.add(at(i, p).mul(bt(p, j))));
                let bias = c.map_or(0, |c| beta.mul(c[c_offsets[i * n + j]]));
                out.push(alpha.mul(dot).add(bias));
            }
        }
        out
    }
}

pub(in crate::ops) fn eval_gemm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (a, b, c) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        optional(inputs, 2),
    );
    let dtype = a.dtype();
    if b.dtype() != dtype || c.is_some_and(|c| c.dtype() != dtype) {
        return Err(ctx.error("A, B and C must have one element type"));
    }
    let attrs = ctx.attrs::<GemmAttrs>()?;
    let shape = Shape::new(ctx, &attrs, a.shape(), b.shape())?;
    let c_offsets = c.map_or(Ok(Vec::new()), |c| shape.bias_offsets(c.shape()))?;
    let (alpha, beta) = (attrs.alpha, attrs.beta);
    let out_shape = [shape.m, shape.n];
    let y = dispatch_real!(dtype, R => {
        let cv = c.map(R::load).transpose()?;
        let v = shape.run_real::<R>(&R::load(a)?, &R::load(b)?, cv.as_deref(), &c_offsets, alpha, beta)?;
        R::store(dtype, &out_shape, v)?
    }, _ => {
        if !is_int(dtype) {
            return Err(unsupported_type("Gemm", dtype));
        }
        let cv = c.map(to_i64s).transpose()?;
        let v = shape.run_ring(&to_i64s(a)?, &to_i64s(b)?, cv.as_deref(), &c_offsets, alpha as i64, beta as i64);
        store_ints(dtype, &out_shape, &v)?
    });
    Ok(vec![y])
}

pub(in crate::ops) fn infer_gemm(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    Ok(vec![tensor_type(elem, Some(gemm_dims(ctx, 0, 1)?))])
}

/// The output dims `[M, N]` of a Gemm whose A and B are inputs `a` and `b`.
pub(in crate::ops) fn gemm_dims(ctx: &InferCtx<'_>, a: usize, b: usize) -> Result<Vec<Dim>> {
    let pick = |dims: Option<&[Dim]>, trans: bool, first: bool| -> Dim {
        match dims {
            Some([r, c]) => (if trans == first { c } else { r }).clone(),
            _ => Dim::Unknown,
        }
    };
    let attrs = ctx.attrs::<GemmAttrs>()?;
    let m = pick(input_dims(ctx, a), attrs.trans_a, true);
    let n = pick(input_dims(ctx, b), attrs.trans_b, false);
    Ok(vec![m, n])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    #[test]
    fn transposes_scales_and_broadcast_bias() {
        // A' = A^T is [[1, 3], [2, 4]], B' = B^T is [[1, 0], [1, 1]].
        let a = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = f32s(&[2, 2], &[1.0, 1.0, 0.0, 1.0]);
        let c = f32s(&[2], &[10.0, 20.0]);
        let node = Node::new("Gemm", "g", ["a", "b", "c"], ["y"])
            .with_attr("transA", AttrValue::Int(1))
            .with_attr("transB", AttrValue::Int(1))
            .with_attr("alpha", AttrValue::Float(2.0))
            .with_attr("beta", AttrValue::Float(0.5));
        let y = eval_node(&node, 13, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        // A'B' = [[4, 3], [6, 4]].
        assert_eq!(y[0], f32s(&[2, 2], &[13.0, 16.0, 17.0, 18.0]));
        let bad = f32s(&[3], &[0.0; 3]);
        let err = eval_node(&node, 13, &[Some(&a), Some(&b), Some(&bad)]).unwrap_err();
        assert!(err.to_string().contains("not broadcast"), "{err}");
    }

    #[test]
    fn integer_gemm_without_bias() {
        let i = |s: &[usize], v: &[i64]| Tensor::from_vec(DataType::Int64, s, v.to_vec()).unwrap();
        let node = Node::new("Gemm", "g", ["a", "b"], ["y"]);
        let y = eval_node(
            &node,
            13,
            &[Some(&i(&[1, 2], &[2, 3])), Some(&i(&[2, 1], &[4, 5]))],
        )
        .unwrap();
        assert_eq!(y[0], i(&[1, 1], &[23]));
    }
}
