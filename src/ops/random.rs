//! The random operators: `RandomUniform`, `RandomUniformLike`, `RandomNormal`,
//! `RandomNormalLike` (opset 1+) and `Bernoulli` (15+); `Dropout` in training mode draws from the
//! same generator.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__RandomUniformLike.html> (and its siblings),
//! <https://onnx.ai/onnx/operators/onnx__Bernoulli.html>.
//!
//! Design note: values come from a SplitMix64 stream seeded by the node's `seed` attribute (a
//! fixed seed when it is absent), so a model draws the same values on every run and a rewritten
//! model can still be verified bit for bit against its original. The values are not those of
//! numpy or onnxruntime for the same seed: only the distribution, shape and type can be compared
//! with another runtime, and `multigather test` says so when it compares a model that uses one
//! of these operators ([`is_random`]).

use crate::error::{Error, Result};
use crate::ir::{Dim, Node, TensorType};
use crate::ops::num::Float;
use crate::ops::util::{required, tensor_from_iter, to_dims};
use crate::ops::{EvalCtx, InferCtx, OpDef};
use crate::tensor::Tensor;
use crate::DataType;

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("RandomUniform", 1, 0..=0, 1..=1, eval_uniform).with_infer(infer_random),
    OpDef::new("RandomUniformLike", 1, 1..=1, 1..=1, eval_uniform).with_infer(infer_random),
    OpDef::new("RandomNormal", 1, 0..=0, 1..=1, eval_normal).with_infer(infer_random),
    OpDef::new("RandomNormalLike", 1, 1..=1, 1..=1, eval_normal).with_infer(infer_random),
    OpDef::new("Bernoulli", 15, 1..=1, 1..=1, eval_bernoulli).with_infer(infer_random),
];

/// Whether `op_type` (default domain) draws random values, so that its outputs, and everything
/// computed from them, can only be compared with another runtime by shape, type and range.
///
/// # Example
/// ```
/// assert!(multigather::ops::is_random("Bernoulli"));
/// assert!(!multigather::ops::is_random("Add"));
/// ```
pub fn is_random(op_type: &str) -> bool {
    matches!(
        op_type,
        "RandomUniform"
            | "RandomUniformLike"
            | "RandomNormal"
            | "RandomNormalLike"
            | "Bernoulli"
            | "Multinomial"
            | "Dropout"
    )
}

/// A SplitMix64 stream.
pub(super) struct Stream(u64);

impl Stream {
    /// The stream of a node: its `seed` attribute (float or int), or a fixed default.
    pub fn of(node: &Node) -> Result<Stream> {
        let seed = match node.attr("seed") {
            Some(crate::ir::AttrValue::Float(f)) => u64::from(f.to_bits()),
            Some(_) => node.attr_int("seed", 0)? as u64,
            None => 0x6d75_6c74_6967_6174,
        };
        Ok(Stream(seed ^ 0x9e37_79b9_7f4a_7c15))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The output type and shape of a random node: `dtype` (or the input's type for the `Like`
/// forms, float for the others) and `shape` (or the input's shape).
fn target(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<(DataType, Vec<usize>)> {
    let like = ctx.node.op_type.ends_with("Like") || ctx.node.op_type == "Bernoulli";
    let default = if like {
        required(inputs, 0)?.dtype()
    } else {
        DataType::Float
    };
    let dtype = match ctx.node.attr("dtype") {
        Some(_) => {
            let code = ctx.node.attr_int("dtype", 1)?;
            i32::try_from(code)
                .ok()
                .and_then(DataType::from_onnx)
                .ok_or_else(|| ctx.error(format!("dtype {code} is not an element type")))?
        }
        None => default,
    };
    let shape = if like {
        required(inputs, 0)?.shape().to_vec()
    } else {
        let s = ctx
            .node
            .attr_ints("shape")?
            .ok_or_else(|| ctx.error("shape is required"))?;
        to_dims(&Tensor::from_vec(DataType::Int64, &[s.len()], s.to_vec())?)?
    };
    Ok((dtype, shape))
}

/// A tensor of `dtype` (floating point, or for `Bernoulli` also integer or bool) from `draw`.
fn fill(dtype: DataType, shape: &[usize], mut draw: impl FnMut() -> f64) -> Result<Tensor> {
    crate::ops::num::dispatch_float!(dtype, T => {
        return tensor_from_iter(dtype, shape, std::iter::from_fn(|| Some(T::from_f64(draw()))));
    }, _ => {});
    if dtype == DataType::Bool {
        return tensor_from_iter(
            dtype,
            shape,
            std::iter::from_fn(|| Some(u8::from(draw() != 0.0))),
        );
    }
    crate::ops::num::dispatch_int!(dtype, T => tensor_from_iter(dtype, shape, std::iter::from_fn(|| Some(draw() as T))),
        _ => Err(Error::Eval(format!("random values of type {dtype} are not defined"))))
}

fn eval_uniform(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (dtype, shape) = target(ctx, inputs)?;
    let low = f64::from(ctx.node.attr_float("low", 0.0)?);
    let high = f64::from(ctx.node.attr_float("high", 1.0)?);
    let mut s = Stream::of(ctx.node)?;
    Ok(vec![fill(dtype, &shape, || low + (high - low) * s.unit())?])
}

fn eval_normal(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (dtype, shape) = target(ctx, inputs)?;
    let mean = f64::from(ctx.node.attr_float("mean", 0.0)?);
    let scale = f64::from(ctx.node.attr_float("scale", 1.0)?);
    let mut s = Stream::of(ctx.node)?;
    // Box-Muller, one value per pair of draws.
    Ok(vec![fill(dtype, &shape, || {
        let (u, v) = (1.0 - s.unit(), s.unit());
        mean + scale * (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    })?])
}

fn eval_bernoulli(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let (dtype, shape) = target(ctx, inputs)?;
    let p: Vec<f64> = crate::ops::num::dispatch_float!(x.dtype(), T => x.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect(),
        _ => return Err(ctx.error(format!("probabilities of type {} are not floating point", x.dtype()))));
    let mut s = Stream::of(ctx.node)?;
    let mut it = p.into_iter();
    Ok(vec![fill(dtype, &shape, || {
        let p = it.next().unwrap_or(0.0);
        f64::from(u8::from(s.unit() < p))
    })?])
}

fn infer_random(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let input = ctx.input(0);
    let like = !ctx.node.inputs.is_empty();
    let elem = match ctx.node.attr("dtype") {
        Some(_) => DataType::from_onnx(ctx.node.attr_int("dtype", 1)? as i32),
        None if like => input.and_then(|t| t.elem),
        None => Some(DataType::Float),
    };
    let shape = if like {
        input.and_then(|t| t.shape.clone())
    } else {
        ctx.node
            .attr_ints("shape")?
            .map(|s| crate::ir::Shape::new(s.iter().map(|&d| Dim::Known(d)).collect()))
    };
    Ok(vec![TensorType { elem, shape }])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;

    use super::*;

    #[test]
    fn draws_stay_in_range_and_repeat_with_the_seed() {
        let x = Tensor::from_vec(DataType::Double, &[1000], vec![0.25f64; 1000]).unwrap();
        let node = Node::new("RandomUniformLike", "r", ["x"], ["y"])
            .with_attr("low", AttrValue::Float(2.0))
            .with_attr("high", AttrValue::Float(3.0));
        let a = eval_node(&node, 22, &[Some(&x)]).unwrap().remove(0);
        assert!(a
            .as_slice::<f64>()
            .unwrap()
            .iter()
            .all(|&v| (2.0..3.0).contains(&v)));
        assert_eq!(a, eval_node(&node, 22, &[Some(&x)]).unwrap().remove(0));
        let node = Node::new("Bernoulli", "b", ["x"], ["y"]);
        let b = eval_node(&node, 22, &[Some(&x)]).unwrap().remove(0);
        let ones = b
            .as_slice::<f64>()
            .unwrap()
            .iter()
            .filter(|&&v| v == 1.0)
            .count();
        assert!(b
            .as_slice::<f64>()
            .unwrap()
            .iter()
            .all(|&v| v == 0.0 || v == 1.0));
        assert!((150..350).contains(&ones), "{ones} of 1000 at p = 0.25");
    }
}
