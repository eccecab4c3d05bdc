//! The opset 1 to 6 forms of the binary operators, which predate multidirectional broadcasting:
//! `Add`, `Sub`, `Mul`, `Div` (versions 1 and 6), `Pow`, `And`, `Or`, `Xor`, `Equal`, `Greater`
//! and `Less` (version 1), and `PRelu`'s slope (versions 1 and 6).
//!
//! Spec: <https://github.com/onnx/onnx/blob/main/docs/Changelog.md#Add-6>. The output has A's
//! shape. With `broadcast = 0` (the default) B has A's shape. With `broadcast = 1`, B's dims are a
//! contiguous run of A's dims starting at `axis` (by default the run ends at A's last dim) or B
//! holds one element (a scalar, or shape `(1, 1)`), and B is repeated over A's other dims:
//! A `(2, 3, 4, 5)` takes B `(5,)`, `(4, 5)`, `(3, 4)` with `axis = 1` or `(2,)` with `axis = 0`.
//! Here a dim of B may also be 1 where A's is not (repeated as numpy would). B is given A's rank
//! with dims of 1 around the run, and the operator's current kernel runs on the aligned pair, so
//! the arithmetic is the same code at every opset. `consumed_inputs` (opset 1) was a hint for
//! in-place execution with no effect on the result, and is ignored.
//!
//! `PRelu` before opset 7: "If `Slope` is of size 1, the value is shared across different
//! channels"; otherwise it holds one value per channel, the dim 1 of X. A one-element slope is a
//! scalar and a rank-1 slope as long as X's dim 1 is read along dim 1; any other slope
//! broadcasts to X as from opset 7.

use crate::error::Result;
use crate::ops::{Attributes, EvalCtx, EvalFn};
use crate::tensor::Tensor;

use crate::ops::util::required;

/// The `broadcast` and `axis` attributes of an opset 1 to 6 binary operator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct LegacyBroadcast {
    broadcast: bool,
    axis: Option<i64>,
}

impl Attributes for LegacyBroadcast {
    fn parse(node: &crate::ir::Node, _opset: i64) -> Result<LegacyBroadcast> {
        let broadcast = match node.attr_int("broadcast", 0)? {
            0 => false,
            1 => true,
            b => {
                return Err(crate::Error::node(
                    &node.name,
                    &node.op_type,
                    format!("attribute 'broadcast' is {b}, not 0 or 1"),
                ))
            }
        };
        let axis = match node.attr("axis") {
            Some(_) => Some(node.attr_int("axis", 0)?),
            None => None,
        };
        Ok(LegacyBroadcast { broadcast, axis })
    }
}

/// B under a shape of A's rank whose every dim is A's dim or 1, as the legacy broadcast rule
/// places it; an error says why B does not fit.
fn aligned_b(ctx: &EvalCtx<'_>, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let attrs = *ctx.attrs::<LegacyBroadcast>()?;
    let (sa, sb) = (a.shape(), b.shape());
    if !attrs.broadcast {
        if sa != sb {
            return Err(ctx.error(format!(
                "shapes {sa:?} and {sb:?} differ and attribute 'broadcast' is 0"
            )));
        }
        return Ok(b.clone());
    }
    let rank = sa.len();
    if b.len() == 1 && sb.len() <= rank {
        return Ok(b.clone().into_shape(&vec![1; rank])?);
    }
    let start = match attrs.axis {
        None => rank.checked_sub(sb.len()),
        Some(axis) => {
            let r = rank as i64;
            if !(-r..r).contains(&axis) {
                return Err(ctx.error(format!("axis {axis} is out of range for A {sa:?}")));
            }
            Some(axis.rem_euclid(r.max(1)) as usize)
        }
    };
    let fits = start.is_some_and(|s| {
        s + sb.len() <= rank
            && sb
                .iter()
                .zip(&sa[s..])
                .all(|(&db, &da)| db == da || db == 1)
    });
    let Some(start) = start.filter(|_| fits) else {
        let at = attrs
            .axis
            .map_or(String::new(), |a| format!(" at axis {a}"));
        return Err(ctx.error(format!("B {sb:?} is not a run of the dims of A {sa:?}{at}")));
    };
    let mut shape = vec![1; rank];
    shape[start..start + sb.len()].copy_from_slice(sb);
    Ok(b.clone().into_shape(&shape)?)
}

/// Runs `kernel` (the operator's kernel from opset 7) on A and B aligned by the legacy rule.
pub(super) fn eval_legacy(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
    kernel: EvalFn,
) -> Result<Vec<Tensor>> {
    let (a, b) = (required(inputs, 0)?, required(inputs, 1)?);
    let b = aligned_b(ctx, a, b)?;
    kernel(ctx, &[Some(a), Some(&b)])
}

/// Runs `kernel` (`PRelu`'s from opset 7) with the slope read per channel where it is a
/// channel vector.
pub(super) fn eval_legacy_prelu(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
    kernel: EvalFn,
) -> Result<Vec<Tensor>> {
    let (x, slope) = (required(inputs, 0)?, required(inputs, 1)?);
    let rank = x.shape().len();
    let slope = if slope.len() == 1 && slope.shape().len() <= rank {
        slope.clone().into_shape(&vec![1; rank])?
    } else if slope.shape().len() == 1 && rank >= 2 && slope.len() == x.shape()[1] {
        let mut shape = vec![1; rank - 1];
        shape[0] = slope.len();
        slope.clone().into_shape(&shape)?
    } else {
        slope.clone()
    };
    kernel(ctx, &[Some(x), Some(&slope)])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    fn add(attrs: &[(&str, i64)]) -> Node {
        attrs
            .iter()
            .fold(Node::new("Add", "a", ["a", "b"], ["c"]), |n, (k, v)| {
                n.with_attr(k, AttrValue::Int(*v))
            })
    }

    #[test]
    fn b_is_placed_at_the_axis_or_at_the_end() {
        let a = f32s(&[2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let at_end = f32s(&[3], vec![10.0, 20.0, 30.0]);
        let out = eval_node(&add(&[("broadcast", 1)]), 6, &[Some(&a), Some(&at_end)]).unwrap();
        assert_eq!(
            out[0].as_slice::<f32>().unwrap(),
            [10.0, 21.0, 32.0, 13.0, 24.0, 35.0]
        );
        let at_0 = f32s(&[2], vec![10.0, 20.0]);
        let node = add(&[("broadcast", 1), ("axis", 0)]);
        let out = eval_node(&node, 1, &[Some(&a), Some(&at_0)]).unwrap();
        assert_eq!(out[0].shape(), [2, 3]);
        assert_eq!(
            out[0].as_slice::<f32>().unwrap(),
            [10.0, 11.0, 12.0, 23.0, 24.0, 25.0]
        );
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors() {
        let a = f32s(&[2, 3], vec![0.0; 6]);
        let b = f32s(&[2], vec![0.0; 2]);
        let err = eval_node(&add(&[("broadcast", 1)]), 6, &[Some(&a), Some(&b)]).unwrap_err();
        assert!(
            err.to_string().contains("is not a run of the dims"),
            "{err}"
        );
        let err = eval_node(&add(&[]), 6, &[Some(&a), Some(&b)]).unwrap_err();
        assert!(err.to_string().contains("'broadcast' is 0"), "{err}");
        let node = add(&[("broadcast", 1), ("axis", 2)]);
        let err = eval_node(&node, 6, &[Some(&a), Some(&b)]).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
    }

    #[test]
    fn prelu_reads_a_channel_vector_along_dim_1() {
        let x = f32s(&[1, 2, 3], vec![-1.0; 6]);
        let slope = f32s(&[2], vec![0.5, 2.0]);
        let node = Node::new("PRelu", "p", ["x", "s"], ["y"]);
        let out = eval_node(&node, 6, &[Some(&x), Some(&slope)]).unwrap();
        assert_eq!(
            out[0].as_slice::<f32>().unwrap(),
            [-0.5, -0.5, -0.5, -2.0, -2.0, -2.0]
        );
    }
}
