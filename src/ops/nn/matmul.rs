//! `MatMul` (opsets 1, 9, 13): numpy-style matrix products with broadcast batch dims and 1-D
//! operands, and the [`Plan`] that lines up every matrix product's operands (the 8-bit ones are in
//! [`super::qmatmul`]).
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__MatMul.html>.
//!
//! Floating-point products go through the `gemm` crate (float16 and bfloat16 via `f32`). Integer
//! `MatMul` wraps in the element type, like every runtime.

use crate::tensor::try_vec;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::broadcast_dim;
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::DataType;

use super::super::util::{
    broadcast_offsets, broadcast_shapes, required, to_i64s, unsupported_type,
};
use super::super::{EvalCtx, InferCtx};
use super::blas::{gemm, Mat};
use super::values::{input_dims, is_int, output, store_ints, tensor_type, widened_once};
use crate::ops::num::{dispatch_real, Arith, Real};

/// Batches with at least this many multiply-adds in all run in parallel.
const PARALLEL_FLOPS: usize = 1 << 18;

/// How a (possibly batched, possibly 1-D) matrix product lines up its operands.
#[derive(Debug)]
pub(in crate::ops) struct Plan {
    /// Rows of each product.
    pub m: usize,
    /// The contracted dim.
    pub k: usize,
    /// Columns of each product.
    pub n: usize,
    /// For each output matrix, the index of the A matrix and of the B matrix it multiplies.
    pub(super) pairs: Vec<(usize, usize)>,
    /// The output shape (without the dims 1-D operands drop).
    pub out_shape: Vec<usize>,
}

impl Plan {
    /// The plan for `A @ B` with numpy semantics.
    pub fn new(a: &[usize], b: &[usize]) -> Result<Plan> {
        if a.is_empty() || b.is_empty() {
            return Err(Error::Eval(format!(
                "operands of shapes {a:?} and {b:?}: both must have rank 1 or more"
            )));
        }
        let (m, k) = match a.len() {
            1 => (1, a[0]),
            r => (a[r - 2], a[r - 1]),
        };
        let (kb, n) = match b.len() {
            1 => (b[0], 1),
            r => (b[r - 2], b[r - 1]),
        };
        if k != kb {
            return Err(Error::Eval(format!(
                "operands of shapes {a:?} and {b:?} do not agree on the contracted dim"
            )));
        }
        let a_batch = &a[..a.len().saturating_sub(2)];
        let b_batch = &b[..b.len().saturating_sub(2)];
        let batch = broadcast_shapes(&[a_batch, b_batch])?;
        let a_idx = broadcast_offsets(a_batch, &batch);
        let b_idx = broadcast_offsets(b_batch, &batch);
        let mut out_shape = batch;
        if a.len() > 1 {
            out_shape.push(m);
        }
        if b.len() > 1 {
            out_shape.push(n);
        }
        Ok(Plan {
            m,
            k,
            n,
            pairs: a_idx.into_iter().zip(b_idx).collect(),
            out_shape,
        })
    }

    /// The number of output elements.
    pub(super) fn out_len(&self) -> usize {
        self.pairs.len() * self.m * self.n
    }

    /// Whether every product uses the same B and consecutive A matrices, so the batch folds into
    /// the rows of one product.
    pub(super) fn folds_into_rows(&self) -> bool {
        self.pairs
            .iter()
            .enumerate()
            .all(|(i, &(ai, bi))| ai == i && bi == self.pairs[0].1)
    }

    pub(super) fn check_lens<T>(&self, a: &[T], b: &[T]) -> Result<()> {
        let a_mats = self.pairs.iter().map(|p| p.0 + 1).max().unwrap_or(0);
        let b_mats = self.pairs.iter().map(|p| p.1 + 1).max().unwrap_or(0);
        if a.len() < a_mats * self.m * self.k || b.len() < b_mats * self.k * self.n {
            return Err(Error::Eval("operands are smaller than their shapes".into()));
        }
        Ok(())
    }

    /// Writes `A @ B` into `out` (the output), in a floating-point type, through
    /// the `gemm` crate.
    pub fn run_real_into<T: Real>(&self, a: &[T], b: &[T], out: &mut [T]) -> Result<()> {
        self.check_lens(a, b)?;
        let (m, k, n) = (self.m, self.k, self.n);
        if out.len() != self.out_len() {
            return Err(Error::Eval("the output does not hold its shape".into()));
        }
        if out.is_empty() {
            return Ok(());
        }
        if self.folds_into_rows() {
            let rows = self.pairs.len() * m;
            let bi = self.pairs[0].1;
            let a_all = Mat::row_major(&a[..rows * k], rows, k)?;
            let b_mat = Mat::row_major(&b[bi * k * n..(bi + 1) * k * n], k, n)?;
            return gemm(T::ONE, a_all, b_mat, T::ZERO, out, n);
        }
        let one = |(c, &(ai, bi)): (&mut [T], &(usize, usize))| -> Result<()> {
            let am = Mat::row_major(&a[ai * m * k..(ai + 1) * m * k], m, k)?;
            let bm = Mat::row_major(&b[bi * k * n..(bi + 1) * k * n], k, n)?;
            gemm(T::ONE, am, bm, T::ZERO, c, n)
        };
        if self.out_len().saturating_mul(k) >= PARALLEL_FLOPS {
            out.par_chunks_mut(m * n)
                .zip(&self.pairs)
                .with_min_len(crate::par::min_len(self.pairs.len(), &[m, n, k]))
                .try_for_each(one)
        } else {
            out.chunks_mut(m * n).zip(&self.pairs).try_for_each(one)
        }
    }

    /// `A @ B` in a floating-point type.
    pub fn run_real<T: Real>(&self, a: &[T], b: &[T]) -> Result<Vec<T>> {
        let mut out = try_vec(self.out_len(), T::ZERO)?;
        self.run_real_into(a, b, &mut out)?;
        Ok(out)
    }

    /// `A @ B` in an integer type, wrapping.
    pub fn run_ring<T: Arith>(&self, a: &[T], b: &[T]) -> Result<Vec<T>> {
        self.check_lens(a, b)?;
        let (m, k, n) = (self.m, self.k, self.n);
        let mut out = try_vec(self.out_len(), T::default())?;
        if out.is_empty() {
            return Ok(out);
        }
        for (c, &(ai, bi)) in out.chunks_mut(m * n).zip(&self.pairs) {
            let am = &a[ai * m * k..(ai + 1) * m * k];
            let bm = &b[bi * k * n..(bi + 1) * k * n];
            for (c_row, a_row) in c.chunks_mut(n).zip(am.chunks(k.max(1))) {
                for (p, &x) in a_row.iter().enumerate().take(k) {
                    for (acc, &y) in c_row.iter_mut().zip(&bm[p * n..(p + 1) * n]) {
                        *acc = acc.add(x.mul(y));
                    }
                }
            }
        }
        Ok(out)
    }
}

pub(super) fn eval_matmul(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    if a.dtype() != b.dtype() {
        return Err(Error::Eval(format!(
            "operands are {} and {}; they must have one type",
            a.dtype(),
            b.dtype()
        )));
    }
    let plan = Plan::new(a.shape(), b.shape())?;
    let dtype = a.dtype();
    let out = dispatch_real!(dtype, R => {
        let (av, bv) = (R::load(a)?, widened_once::<R>(ctx, b, 1)?);
        output::<R>(dtype, &plan.out_shape, |y| plan.run_real_into(&av, &bv, y))?
    }, _ => {
        if !is_int(dtype) {
            return Err(unsupported_type("MatMul", dtype));
        }
        let values = plan.run_ring::<i64>(&to_i64s(a)?, &to_i64s(b)?)?;
        store_ints(dtype, &plan.out_shape, &values)?
    });
    Ok(vec![out])
}

/// The output dims of `A @ B` from what is known of the operands.
pub(in crate::ops) fn matmul_dims(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let a_batch = &a[..a.len().saturating_sub(2)];
    let b_batch = &b[..b.len().saturating_sub(2)];
    let rank = a_batch.len().max(b_batch.len());
    let one = Dim::Known(1);
    let at = |s: &[Dim], j: usize| -> Dim {
        let off = rank - s.len();
        if j < off {
            one.clone()
        } else {
            s[j - off].clone()
        }
    };
    let mut dims: Vec<Dim> = (0..rank)
        .map(|j| broadcast_dim(&at(a_batch, j), &at(b_batch, j)))
        .collect();
    if a.len() > 1 {
        dims.push(a[a.len() - 2].clone());
    }
    if b.len() > 1 {
        dims.push(b[b.len() - 1].clone());
    }
    Some(dims)
}

pub(super) fn infer_product(ctx: &InferCtx<'_>, elem: Option<DataType>) -> Result<Vec<TensorType>> {
    let dims = match (input_dims(ctx, 0), input_dims(ctx, 1)) {
        (Some(a), Some(b)) => matmul_dims(a, b),
        _ => None,
    };
    Ok(vec![tensor_type(elem, dims)])
}

pub(super) fn infer_matmul(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_product(ctx, ctx.input(0).and_then(|t| t.elem))
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;

    use super::*;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v.to_vec()).unwrap()
    }

    fn run(op: &str, opset: i64, inputs: &[Option<&Tensor>]) -> crate::Result<Vec<Tensor>> {
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("i{i}")).collect();
        eval_node(&Node::new(op, "n", names, ["y"]), opset, inputs)
    }

    #[test]
    fn matrices_vectors_and_broadcast_batches() {
        let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = f32s(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        let y = run("MatMul", 13, &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[58.0, 64.0, 139.0, 154.0]));
        // 1-D operands drop their dim: [3] @ [3, 2] -> [2]; [2, 3] @ [3] -> [2].
        let v = f32s(&[3], &[1.0, 0.0, -1.0]);
        let y = run("MatMul", 13, &[Some(&v), Some(&b)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[-4.0, -4.0]));
        let y = run("MatMul", 13, &[Some(&a), Some(&v)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[-2.0, -2.0]));
        // A batch of two B matrices against one A: [2, 3] @ [2, 3, 2].
        let bb = f32s(
            &[2, 3, 2],
            &[
                7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0,
            ],
        );
        let y = run("MatMul", 13, &[Some(&a), Some(&bb)]).unwrap();
        assert_eq!(
            y[0],
            f32s(&[2, 2, 2], &[58.0, 64.0, 139.0, 154.0, 1.0, 2.0, 4.0, 5.0])
        );
    }

    #[test]
    fn integers_wrap_and_half_types_round_once() {
        let a = Tensor::from_vec(DataType::Int32, &[1, 2], vec![i32::MAX, 1]).unwrap();
        let b = Tensor::from_vec(DataType::Int32, &[2, 1], vec![2, 3]).unwrap();
        let y = run("MatMul", 13, &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(
            y[0].as_slice::<i32>().unwrap(),
            &[i32::MAX.wrapping_mul(2).wrapping_add(3)]
        );
        let h = |v: &[f32]| {
            let v: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
            Tensor::from_vec(DataType::Float16, &[1, v.len()], v).unwrap()
        };
        let y = run(
            "MatMul",
            13,
            &[
                Some(&h(&[0.5, 2.0])),
                Some(&h(&[3.0, 4.0]).into_shape(&[2, 1]).unwrap()),
            ],
        )
        .unwrap();
        assert_eq!(y[0], h(&[9.5]));
    }

    #[test]
    fn mismatched_operands_are_errors() {
        let a = f32s(&[2, 3], &[0.0; 6]);
        let err = run("MatMul", 13, &[Some(&a), Some(&a)]).unwrap_err();
        assert!(err.to_string().contains("contracted dim"), "{err}");
        let s = f32s(&[], &[1.0]);
        let err = run("MatMul", 13, &[Some(&s), Some(&a)]).unwrap_err();
        assert!(err.to_string().contains("rank 1 or more"), "{err}");
    }
}
