//! `RotaryEmbedding` (opset 23): rotates pairs of features of each head by position-dependent
//! angles given as cosine and sine caches.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html>.
//!
//! `X` is `(B, H, S, D)` or `(B, S, H * D)` (with `num_heads`). The first
//! `rotary_embedding_dim` features of each head (all by default) form pairs — `(i, i + r/2)`, or
//! `(2i, 2i + 1)` when `interleaved` — rotated as `(x1 cos - x2 sin, x1 sin + x2 cos)`; the rest
//! pass through. The caches are `(max_pos, r/2)` indexed by `position_ids` `(B, S)`, or
//! `(B, S, r/2)` without them.

use crate::error::Result;
use crate::ir::TensorType;
use crate::tensor::Tensor;

use super::super::util::{optional, required, to_i64s, unsupported_type};
use super::super::{EvalCtx, InferCtx};
use super::values::{infer_same_as_input, output};
use crate::ops::num::{dispatch_real, Real};

pub(super) fn eval_rotary(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, cos, sin) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let positions = optional(inputs, 3).map(to_i64s).transpose()?;
    let rotation = Rotation {
        num_heads: ctx.node.attr_int("num_heads", 0)?,
        dim: ctx.node.attr_int("rotary_embedding_dim", 0)?,
        interleaved: ctx.node.attr_int("interleaved", 0)? != 0,
    };
    Ok(vec![rotate(ctx, x, (cos, sin), positions, rotation)?])
}

/// How [`rotate`] pairs features: the head count of a 3-D input (`0` when 4-D), the rotated
/// features per head (`0` for all) and whether pairs are adjacent.
#[derive(Clone, Copy, Debug)]
pub(in crate::ops) struct Rotation {
    pub num_heads: i64,
    pub dim: i64,
    pub interleaved: bool,
}

/// Rotates `x` (`(B, H, S, D)` or `(B, S, H * D)`) by the `(cos, sin)` caches at `positions`
/// (`(B, S)` ids into 2-D caches, or `None` for `(B, S, r/2)` caches); errors name `ctx`'s node.
pub(in crate::ops) fn rotate(
    ctx: &EvalCtx<'_>,
    x: &Tensor,
    (cos, sin): (&Tensor, &Tensor),
    positions: Option<Vec<i64>>,
    rotation: Rotation,
) -> Result<Tensor> {
    let shape = x.shape();
    let (b, s, h, d, rank4) = match *shape {
        [b, h, s, d] => (b, s, h, d, true),
        [b, s, hidden] => {
            let h = usize::try_from(rotation.num_heads)
                .ok()
                .filter(|&h| h > 0 && hidden % h == 0)
                .ok_or_else(|| ctx.error("3-D input needs num_heads dividing its hidden size"))?;
            (b, s, h, hidden / h, false)
        }
        _ => return Err(ctx.error(format!("X {shape:?} is not 3-D or 4-D"))),
    };
    let rdim = match rotation.dim {
        0 => d,
        r => usize::try_from(r)
            .ok()
            .filter(|&r| r <= d && r % 2 == 0)
            .ok_or_else(|| {
                ctx.error(format!(
                    "rotary_embedding_dim {r} does not fit head size {d}"
                ))
            })?,
    };
    let half = rdim / 2;
    // The cache row of (batch, position).
    let rows = match &positions {
        Some(p) => {
            if p.len() != b * s || cos.rank() != 2 {
                return Err(ctx.error("position_ids must be (B, S) with 2-D caches"));
            }
            cos.shape()[0]
        }
        None => {
            if cos.shape() != [b, s, half] {
                return Err(ctx.error(format!(
                    "cos_cache {:?} is not ({b}, {s}, {half})",
                    cos.shape()
                )));
            }
            b * s
        }
    };
    for c in [cos, sin] {
        if c.shape().last() != Some(&half) || c.len() != rows * half || c.shape() != cos.shape() {
            return Err(ctx.error(format!(
                "caches {:?} and {:?} do not hold {half} values per position",
                cos.shape(),
                sin.shape()
            )));
        }
    }
    let row_of = |bi: usize, si: usize| -> Result<usize> {
        match &positions {
            None => Ok(bi * s + si),
            Some(p) => usize::try_from(p[bi * s + si])
                .ok()
                .filter(|&r| r < rows)
                .ok_or_else(|| {
                    ctx.error(format!(
                        "position id {} is outside the caches",
                        p[bi * s + si]
                    ))
                }),
        }
    };
    let interleaved = rotation.interleaved;
    let dtype = x.dtype();
    let y = dispatch_real!(dtype, R => {
        let (xv, cv, sv) = (R::load(x)?, R::load(cos)?, R::load(sin)?);
        output::<R>(dtype, shape, |y| {
            for bi in 0..b {
                for si in 0..s {
                    let r = row_of(bi, si)?;
                    let (c, sn) = (&cv[r * half..][..half], &sv[r * half..][..half]);
                    for hi in 0..h {
                        let at = if rank4 { ((bi * h + hi) * s + si) * d } else { ((bi * s + si) * h + hi) * d };
                        let (src, dst) = (&xv[at..][..d], &mut y[at..][..d]);
                        dst[rdim..].copy_from_slice(&src[rdim..]);
                        for i in 0..half {
                            let (i1, i2) = if interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
                            let (x1, x2) = (src[i1], src[i2]);
                            dst[i1] = c[i] * x1 - sn[i] * x2;
                            dst[i2] = sn[i] * x1 + c[i] * x2;
                        }
                    }
                }
            }
            Ok(())
        })?
    }, _ => return Err(unsupported_type("RotaryEmbedding", dtype)));
    Ok(y)
}

pub(super) fn infer_rotary(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    infer_same_as_input(ctx)
}

#[cfg(test)]
mod tests {
    use crate::ir::Node;
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn a_quarter_turn_swaps_the_pair() {
        let x = Tensor::from_vec(DataType::Float, &[1, 1, 1, 2], vec![1.0f32, 2.0]).unwrap();
        let c = Tensor::from_vec(DataType::Float, &[1, 1, 1], vec![0.0f32]).unwrap();
        let s = Tensor::from_vec(DataType::Float, &[1, 1, 1], vec![1.0f32]).unwrap();
        let node = Node::new("RotaryEmbedding", "r", ["x", "c", "s"], ["y"]);
        let y = eval_node(&node, 23, &[Some(&x), Some(&c), Some(&s)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[-2.0, 1.0]);
    }
}
