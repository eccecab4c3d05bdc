//! `LinearAttention` (opset 27): the recurrent (linear) attention of the linear, gated, delta and
//! gated-delta rules, with a carried state.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__LinearAttention.html>; the reference is
//! `onnx.reference.ops.op_linear_attention`.
//!
//! `query` is `(B, T, Hq * dk)`, `key` `(B, T, Hkv * dk)`, `value` `(B, T, Hkv * dv)`; the state
//! of each `(batch, kv head)` is a `dk x dv` matrix `S` (from `past_state`, or zero). At each step
//! `t`: gated rules decay it (`S *= exp(g_t)`, per head or per key dim), delta rules replace the
//! value by `beta_t * (v_t - Sᵀ k_t)`, then `S += k_t ⊗ v_t`, and every query head of the group
//! reads `o_t = scale * Sᵀ q_t`. The `(batch, kv head)` pairs run in parallel; the recurrence
//! computes in `f64` and rounds once. `chunk_size` is a tuning hint with no effect on results.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::tensor::{try_vec, Tensor};

use super::super::util::{optional, required};
use super::super::{EvalCtx, InferCtx};
use super::values::{input_dims, real_f64s, store_f64s, tensor_type};

/// A positive head-count attribute.
fn heads(node: &crate::ir::Node, name: &str) -> Result<usize> {
    let n = node.attr_int(name, 0)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::Eval(format!("{name} must be positive, found {n}")))
}

pub(super) fn eval_linear_attention(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (q, k, v) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let (past, decay, beta) = (
        optional(inputs, 3),
        optional(inputs, 4),
        optional(inputs, 5),
    );
    let rule = ctx
        .node
        .attr_string("update_rule")?
        .unwrap_or("gated_delta");
    let (gating, delta) = match rule {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => return Err(ctx.error(format!("update_rule '{other}' is not known"))),
    };
    if gating != decay.is_some() || delta != beta.is_some() {
        return Err(ctx.error(format!(
            "update_rule '{rule}' takes {}decay and {}beta",
            if gating { "" } else { "no " },
            if delta { "" } else { "no " }
        )));
    }
    let (hq, hkv) = (
        heads(ctx.node, "q_num_heads")?,
        heads(ctx.node, "kv_num_heads")?,
    );
    if hq % hkv != 0 {
        return Err(ctx.error(format!("{hq} query heads are not a multiple of {hkv}")));
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if qs.len() != 3 || ks.len() != 3 || vs.len() != 3 {
        return Err(ctx.error("query, key and value must be 3-D (B, T, H * D)"));
    }
    let (b, t) = (qs[0], qs[1]);
    if ks[..2] != qs[..2] || vs[..2] != qs[..2] || qs[2] % hq != 0 || vs[2] % hkv != 0 {
        return Err(ctx.error(format!(
            "query {qs:?}, key {ks:?} and value {vs:?} do not split into {hq} and {hkv} heads"
        )));
    }
    let (dk, dv) = (qs[2] / hq, vs[2] / hkv);
    if ks[2] != hkv * dk {
        return Err(ctx.error(format!("key {ks:?} is not (B, T, {hkv} * {dk})")));
    }
    let decay_per_dim = match decay.map(Tensor::shape) {
        None => false,
        Some([db, dt, last]) if *db == b && *dt == t && *last == hkv * dk => true,
        Some([db, dt, last]) if *db == b && *dt == t && *last == hkv => false,
        Some(s) => return Err(ctx.error(format!("decay {s:?} is not (B, T, Hkv[*dk])"))),
    };
    let beta_per_head = match beta.map(Tensor::shape) {
        None => false,
        Some([bb, bt, last]) if *bb == b && *bt == t && (*last == hkv || *last == 1) => {
            *last == hkv
        }
        Some(s) => return Err(ctx.error(format!("beta {s:?} is not (B, T, Hkv or 1)"))),
    };
    if let Some(p) = past {
        if p.shape() != [b, hkv, dk, dv] {
            return Err(ctx.error(format!(
                "past_state {:?} is not ({b}, {hkv}, {dk}, {dv})",
                p.shape()
            )));
        }
    }
    let scale = match ctx.node.attr_float("scale", 0.0)? {
        0.0 => 1.0 / (dk as f64).sqrt(),
        s => s as f64,
    };
    let (qv, kv, vv) = (
        real_f64s(q, "LinearAttention")?,
        real_f64s(k, "LinearAttention")?,
        real_f64s(v, "LinearAttention")?,
    );
    let dv_ = decay.map(|t| real_f64s(t, "LinearAttention")).transpose()?;
    let bv = beta.map(|t| real_f64s(t, "LinearAttention")).transpose()?;
    let mut state = match past {
        Some(p) => real_f64s(p, "LinearAttention")?,
        None => try_vec(b * hkv * dk * dv, 0.0)?,
    };
    let group = hq / hkv;
    // Outputs per (batch, kv head): group heads x T x dv.
    let mut out = try_vec(b * hq * t * dv, 0.0f64)?;
    state
        .par_chunks_mut((dk * dv).max(1))
        .zip(out.par_chunks_mut((group * t * dv).max(1)))
        .enumerate()
        .with_min_len(crate::par::min_len(b * hkv, &[group, t, dk, dv]))
        .try_for_each(|(pair, (s, o))| -> Result<()> {
            let (bi, h) = (pair / hkv, pair % hkv);
            let mut val = try_vec(dv, 0.0f64)?;
            for step in 0..t {
                let row = bi * t + step;
                if let Some(d) = &dv_ {
                    for i in 0..dk {
                        let g = if decay_per_dim {
                            d[row * hkv * dk + h * dk + i]
                        } else {
                            d[row * hkv + h]
                        };
                        let f = g.exp();
                        s[i * dv..][..dv].iter_mut().for_each(|x| *x *= f);
                    }
                }
                let key = &kv[row * hkv * dk + h * dk..][..dk];
                val.copy_from_slice(&vv[row * hkv * dv + h * dv..][..dv]);
                if let Some(be) = &bv {
                    let bt = if beta_per_head {
                        be[row * hkv + h]
                    } else {
                        be[row]
                    };
                    for (m, x) in val.iter_mut().enumerate() {
                        let retrieved: f64 = (0..dk).map(|i| s[i * dv + m] * key[i]).sum();
                        *x = bt * (*x - retrieved);
                    }
                }
                for i in 0..dk {
                    for (sv, &x) in s[i * dv..][..dv].iter_mut().zip(&val) {
                        *sv += key[i] * x;
                    }
                }
                for g in 0..group {
                    let qh = h * group + g;
                    let query = &qv[row * hq * dk + qh * dk..][..dk];
                    let dst = &mut o[(g * t + step) * dv..][..dv];
                    for (m, d) in dst.iter_mut().enumerate() {
                        *d = scale * (0..dk).map(|i| query[i] * s[i * dv + m]).sum::<f64>();
                    }
                }
            }
            Ok(())
        })?;
    // (b, hkv, group, t, dv) = (b, hq, t, dv) -> (b, t, hq, dv).
    let mut y = try_vec(out.len(), 0.0f64)?;
    for bi in 0..b {
        for h in 0..hq {
            for step in 0..t {
                let src = &out[((bi * hq + h) * t + step) * dv..][..dv];
                y[((bi * t + step) * hq + h) * dv..][..dv].copy_from_slice(src);
            }
        }
    }
    let state_type = past.map_or(q.dtype(), Tensor::dtype);
    let mut outs = vec![store_f64s(q.dtype(), &[b, t, hq * dv], &y)?];
    if ctx.node.outputs.len() > 1 {
        outs.push(store_f64s(state_type, &[b, hkv, dk, dv], &state)?);
    }
    Ok(outs)
}

pub(super) fn infer_linear_attention(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let state_elem = ctx.input(3).and_then(|t| t.elem).or(elem);
    let dims = |i: usize| input_dims(ctx, i).map(<[_]>::to_vec);
    let (Some(q), Some(v)) = (dims(0), dims(2)) else {
        return Ok(vec![tensor_type(elem, None), tensor_type(state_elem, None)]);
    };
    if q.len() != 3 || v.len() != 3 {
        return Err(Error::Eval("query and value must be 3-D".into()));
    }
    let (hq, hkv) = (
        heads(ctx.node, "q_num_heads")?,
        heads(ctx.node, "kv_num_heads")?,
    );
    use crate::ir::Dim;
    let div = |d: &Dim, n: usize| d.known().map_or(Dim::Unknown, |d| Dim::Known(d / n as i64));
    let (dk, dv) = (div(&q[2], hq), div(&v[2], hkv));
    let y_last = dv
        .known()
        .map_or(Dim::Unknown, |d| Dim::Known(d * hq as i64));
    Ok(vec![
        tensor_type(elem, Some(vec![q[0].clone(), q[1].clone(), y_last])),
        tensor_type(
            state_elem,
            Some(vec![q[0].clone(), Dim::Known(hkv as i64), dk, dv]),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::DataType;

    use super::*;

    #[test]
    fn linear_rule_accumulates_outer_products() {
        // One head, dk = dv = 1, scale 1: o_t = q_t * Σ k_s v_s.
        let f = |v: Vec<f32>| Tensor::from_vec(DataType::Float, &[1, 2, 1], v).unwrap();
        let (q, k, v) = (f(vec![1.0, 2.0]), f(vec![1.0, 1.0]), f(vec![3.0, 4.0]));
        let node = Node::new("LinearAttention", "l", ["q", "k", "v"], ["y", "s"])
            .with_attr("q_num_heads", AttrValue::Int(1))
            .with_attr("kv_num_heads", AttrValue::Int(1))
            .with_attr("scale", AttrValue::Float(1.0))
            .with_attr("update_rule", AttrValue::String(b"linear".to_vec()));
        let y = eval_node(&node, 27, &[Some(&q), Some(&k), Some(&v)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[3.0, 14.0]);
        assert_eq!(y[1].as_slice::<f32>().unwrap(), &[7.0]);
    }
}
