//! `Det` (opsets 11, 22): the determinant of each square matrix in the last two dims.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Det.html>.
//!
//! LU factorisation with partial pivoting, in `f64`, rounded once to the input's type.

use crate::error::Result;
use crate::ir::TensorType;
use crate::tensor::{try_vec, Tensor};

use super::super::util::{required, unsupported_type};
use super::super::{EvalCtx, InferCtx};
use super::values::{input_dims, store_f64s, tensor_type};
use crate::ops::num::{dispatch_real, Float, Real};

/// The determinant of the `n x n` row-major matrix `a` (overwritten).
fn determinant(a: &mut [f64], n: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
            .unwrap_or(col);
        if a[pivot * n + col] == 0.0 {
            return 0.0;
        }
        if pivot != col {
            for k in 0..n {
                a.swap(pivot * n + k, col * n + k);
            }
            det = -det;
        }
        let p = a[col * n + col];
        det *= p;
        for row in col + 1..n {
            let f = a[row * n + col] / p;
            for k in col..n {
                a[row * n + k] -= f * a[col * n + k];
            }
        }
    }
    det
}

pub(super) fn eval_det(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let shape = x.shape();
    let r = shape.len();
    if r < 2 || shape[r - 1] != shape[r - 2] {
        return Err(ctx.error(format!("X {shape:?} is not a batch of square matrices")));
    }
    let n = shape[r - 1];
    let dtype = x.dtype();
    let values: Vec<f64> = dispatch_real!(dtype, R => R::load(x)?.iter().map(|v| v.to_f64()).collect(),
        _ => return Err(unsupported_type("Det", dtype)));
    let count: usize = shape[..r - 2].iter().product();
    let mut dets = try_vec(count, 0.0f64)?;
    let mut m = try_vec(n * n, 0.0f64)?;
    for (i, d) in dets.iter_mut().enumerate() {
        m.copy_from_slice(&values[i * n * n..][..n * n]);
        *d = determinant(&mut m, n);
    }
    Ok(vec![store_f64s(dtype, &shape[..r - 2], &dets)?])
}

pub(super) fn infer_det(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let dims = input_dims(ctx, 0)
        .filter(|d| d.len() >= 2)
        .map(|d| d[..d.len() - 2].to_vec());
    Ok(vec![tensor_type(elem, dims)])
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn determinants_of_a_batch() {
        let x = Tensor::from_vec(
            DataType::Float,
            &[2, 2, 2],
            vec![1.0f32, 2.0, 3.0, 4.0, 0.0, 1.0, 1.0, 0.0],
        )
        .unwrap();
        let node = Node::new("Det", "d", ["x"], ["y"]);
        let y = eval_node(&node, 11, &[Some(&x)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[-2.0, -1.0]);
        let bad = Tensor::from_vec(DataType::Float, &[2, 3], vec![0.0f32; 6]).unwrap();
        assert!(eval_node(&node, 11, &[Some(&bad)]).is_err());
    }
}
