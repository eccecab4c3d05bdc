//! The attention operators of `com.microsoft` (opset 1) that onnxruntime's transformer optimizer
//! fuses (and its dynamic quantiser quantises, `QAttention`): `Attention` (input projection, heads, mask index, past/present state),
//! `MultiHeadAttention` (projected Q, K, V) and `GroupQueryAttention` (grouped key/value heads,
//! causal, key/value cache, rotary embedding).
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, sections `com.microsoft.Attention`,
//! `com.microsoft.MultiHeadAttention` and `com.microsoft.GroupQueryAttention`.
//!
//! Why one file: the four operators share their head layout, scale, bias and output handling;
//! `Attention`, `QAttention` and `MultiHeadAttention` also share one path to `nn::attend` (mask
//! index, past/present), where only their projections differ.
//!
//! Those three read their operands into `(batch, seq, heads * size)` rows and run the default
//! domain's attention kernel (`nn::attend`: one GEMM per batch and head for the scores, the row
//! softmax, one GEMM with V), with the masks folded into one additive bias.
//!
//! Masks follow onnxruntime's CPU kernels: a masked score gets `mask_filter_value` (-10000 by
//! default) in place of its mask value rather than `-inf`, so a row masked everywhere averages
//! all keys instead of being zero. The mask index is 1-D `(B)` (keys from the given end
//! position on are masked) or `(2B)` (also keys before the start positions in the second half),
//! 2-D `(B, T)` (0 masks a key), 3-D `(B, S, T)` (per query), or 4-D `(B, 1, M, M)` (Megatron:
//! query `i` reads row `past + i`). `unidirectional` masks keys after `past + i`. An
//! `attention_bias` `(B or 1, H or 1, S, T)` is added on top.
//!
//! `GroupQueryAttention` has a kernel of its own (`gqa_attend`), as each batch holds its own
//! number of keys (`seqlens_k`): it is causal, its `local_window_size` `w` keeps the `w` keys
//! ending at each query's position, and `smooth_softmax` / `head_sink` add a sink to each
//! softmax's denominator (see `eval_group_query_attention`).
//!
//! `QAttention` is `Attention` with an 8-bit integer projection (`eval_qattention`).
//!
//! `Attention`'s shared past/present buffer (`past_present_share_buffer`): `past` is the whole
//! preallocated `(2, B, H, max, D)` cache, of which the `past_sequence_length` input (one int32)
//! says how many positions hold keys and values; attention reads those and the new ones, and
//! `present` is the same buffer, `(2, B, H, max, D)`, with the new keys and values written at
//! positions `past_sequence_length ..`, the positions after them unchanged. onnxruntime's CPU
//! kernel refuses this form (only its GPU kernels take `past_sequence_length`), so
//! `scripts/check_contrib.py` checks it against a numpy reference.
//!
//! Not supported (an error naming the node): packed batching, `Attention`'s `do_rotary`,
//! `cache_indirection`, and `GroupQueryAttention`'s `output_qk` output and quantised caches.

use crate::error::Result;
use crate::ir::TensorType;
use crate::tensor::{try_to_vec, try_vec, Tensor};
use crate::DataType;

use super::super::nn::{
    attend, gemm, integer_product_kept, rotate, Bias, Mask, Mat, Rotation, Sizes, Spec,
};
use super::super::util::{optional, required, to_i64s};
use super::super::{EvalCtx, InferCtx};
use super::activations::floats;
use super::quant_matmul::{scalar_scale, scale_columns};

/// onnxruntime's default score for a masked key.
const MASK_FILTER: f32 = -10000.0;

/// Outputs have the types the kernel gives them; only the element type is known here.
pub(super) fn infer_float_outputs(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let t = TensorType {
        elem: Some(DataType::Float),
        shape: None,
    };
    Ok(vec![t; ctx.node.outputs.len()])
}

/// One output of the first input's element type (the third's for `QLinearConcat`, whose first
/// two are the output's scale and zero point), its shape left to the kernel.
pub(super) fn infer_first_input_type(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let at = if ctx.node.op_type == "QLinearConcat" {
        2
    } else {
        0
    };
    let elem = ctx.input(at).and_then(|t| t.elem);
    Ok(vec![TensorType { elem, shape: None }])
}

/// `EmbedLayerNormalization`: float, the int32 mask index, float.
pub(super) fn infer_embed_outputs(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let t = |elem| TensorType {
        elem: Some(elem),
        shape: None,
    };
    let all = [t(DataType::Float), t(DataType::Int32), t(DataType::Float)];
    Ok(all.into_iter().take(ctx.node.outputs.len()).collect())
}

/// A positive head-count attribute.
fn heads(ctx: &EvalCtx<'_>, name: &str) -> Result<usize> {
    let n = ctx.node.attr_int(name, 0)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| ctx.error(format!("{name} must be positive, found {n}")))
}

/// `hidden / heads`, or an error when it does not divide.
fn per_head(ctx: &EvalCtx<'_>, hidden: usize, heads: usize, what: &str) -> Result<usize> {
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(ctx.error(format!(
            "{what} hidden size {hidden} is not a multiple of {heads} heads"
        )));
    }
    Ok(hidden / heads)
}

/// The `scale` attribute, `1 / sqrt(head)` when absent or 0.
fn scale(ctx: &EvalCtx<'_>, head: usize) -> Result<f64> {
    let s = ctx.node.attr_float("scale", 0.0)?;
    Ok(if s == 0.0 {
        1.0 / (head as f64).sqrt()
    } else {
        f64::from(s)
    })
}

/// The key mask of `(batch, query, key)` as `0` (attend) or `filter` (masked), from a mask
/// index (see the module notes) and the unidirectional frontier; `None` when nothing masks.
fn key_mask(
    ctx: &EvalCtx<'_>,
    mask: Option<&Tensor>,
    z: &Sizes,
    unidirectional: bool,
    filter: f32,
) -> Result<Option<Vec<f32>>> {
    let (b, s, past) = (z.batch, z.q_len, z.past_len);
    let t = past + z.kv_len;
    if mask.is_none() && !unidirectional {
        return Ok(None);
    }
    let mut out = try_vec(b * s * t, 0.0f32)?;
    if let Some(m) = mask {
        let v = to_i64s(m)?;
        let shape = m.shape();
        let bad = || {
            ctx.error(format!(
                "mask {shape:?} is not (B), (2B), (B, T), (B, S, T) or (B, 1, M, M) for B {b}, S {s}, T {t}"
            ))
        };
        for bi in 0..b {
            for i in 0..s {
                let row = &mut out[(bi * s + i) * t..][..t];
                for (j, o) in row.iter_mut().enumerate() {
                    let keep = match *shape {
                        [n] if n == b => (j as i64) < v[bi],
                        [n] if n == 2 * b => (j as i64) < v[bi] && (j as i64) >= v[b + bi],
                        [mb, mt] if mb == b && mt == t => v[bi * t + j] > 0,
                        [mb, 1] if mb == b || mb == 1 => true,
                        [mb, ms, mt] if mb == b && ms == s && mt == t => {
                            v[(bi * s + i) * t + j] > 0
                        }
                        [mb, 1, r, c] if mb == b && r == c && r >= t => {
                            v[(bi * r + past + i) * c + j] > 0
                        }
                        _ => return Err(bad()),
                    };
                    if !keep {
                        *o = filter;
                    }
                }
            }
        }
    }
    if unidirectional {
        for (r, row) in out.chunks_mut(t.max(1)).enumerate() {
            let i = r % s.max(1);
            for o in row.iter_mut().skip(past + i + 1) {
                *o = filter;
            }
        }
    }
    Ok(Some(out))
}

/// The additive mask of the attention kernel: the key mask `(B, S, T)` plus an
/// `attention_bias` `(B or 1, H or 1, S, T)`; `None` when there is neither.
fn combine(
    ctx: &EvalCtx<'_>,
    keys: Option<Vec<f32>>,
    bias: Option<&Tensor>,
    z: &Sizes,
) -> Result<Option<Mask<f32>>> {
    let (b, h, s) = (z.batch, z.q_heads, z.q_len);
    let t = z.past_len + z.kv_len;
    let Some(bias) = bias else {
        return Ok(keys.map(|k| (k, [s * t, 0, t], t)));
    };
    let shape = bias.shape();
    let (bb, bh) = match *shape {
        [bb, bh, bs, bt] if (bb == b || bb == 1) && (bh == h || bh == 1) && bs == s && bt == t => {
            (bb, bh)
        }
        _ => {
            return Err(ctx.error(format!(
                "attention_bias {shape:?} is not ({b} or 1, {h} or 1, {s}, {t})"
            )))
        }
    };
    let values = floats(bias, "attention_bias")?;
    let (ob, oh) = (if keys.is_some() { b } else { bb }, bh);
    let mut out = try_vec(ob * oh * s * t, 0.0f32)?;
    for (k, o) in out.chunks_mut((s * t).max(1)).enumerate() {
        let (bi, hi) = (k / oh, k % oh);
        let src = &values[((bi % bb) * bh + hi) * s * t..][..s * t];
        o.copy_from_slice(src);
        if let Some(keys) = &keys {
            for (o, &m) in o.iter_mut().zip(&keys[bi * s * t..][..s * t]) {
                *o += m;
            }
        }
    }
    let sb = if ob == 1 { 0 } else { oh * s * t };
    let sh = if oh == 1 { 0 } else { s * t };
    Ok(Some((out, [sb, sh, t], t)))
}

/// `x @ w[:, cols] + bias[cols]` for the `rows x k` matrix `x` and the `k x n` weights `w`,
/// columns `cols.0 .. cols.0 + cols.1`.
fn project(
    x: &[f32],
    (rows, k): (usize, usize),
    w: &[f32],
    n: usize,
    bias: Option<&[f32]>,
    (first, count): (usize, usize),
) -> Result<Vec<f32>> {
    let mut out = try_vec(rows * count, 0.0f32)?;
    if let Some(b) = bias {
        for row in out.chunks_mut(count.max(1)) {
            row.copy_from_slice(&b[first..][..count]);
        }
    }
    let a = Mat::row_major(x, rows, k)?;
    let wm = Mat::new(w.get(first..).unwrap_or(&[]), k, count, n, 1)?;
    let beta = if bias.is_some() { 1.0 } else { 0.0 };
    gemm(1.0f32, a, wm, beta, &mut out, count)?;
    Ok(out)
}

/// The float values of an optional input.
fn opt_floats<'t>(t: Option<&'t Tensor>, what: &str) -> Result<Option<&'t [f32]>> {
    t.map(|t| floats(t, what)).transpose()
}

/// Stores the first `n` of Y, present key and present value (and the scores, when asked) in
/// the given shapes.
fn outputs(ctx: &EvalCtx<'_>, values: Vec<(Vec<f32>, Vec<usize>)>) -> Result<Vec<Tensor>> {
    let n = ctx.node.outputs.len().max(1);
    values
        .into_iter()
        .take(n)
        .map(|(v, s)| Ok(Tensor::from_vec(DataType::Float, &s, v)?))
        .collect()
}

/// `com.microsoft.Attention`.
pub(in crate::ops) fn eval_attention(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    const OP: &str = "Attention";
    let (x, w) = (required(inputs, 0)?, required(inputs, 1)?);
    let bias = opt_floats(optional(inputs, 2), OP)?;
    let (mask, past, attn_bias) = (
        optional(inputs, 3),
        optional(inputs, 4),
        optional(inputs, 5),
    );
    let parts = Parts {
        mask,
        past,
        attn_bias,
        past_sequence_length: optional(inputs, 6),
    };
    let (xs, ws) = (floats(x, OP)?, floats(w, OP)?);
    attention(ctx, x.shape(), w.shape(), bias, parts, |rows, n, cols| {
        project(xs, rows, ws, n, bias, cols)
    })
}

/// `com.microsoft.QAttention` (what `quantize_dynamic` makes of `Attention`): `Attention`
/// without `qkv_hidden_sizes` or `attention_bias`, whose projection is the exact product of the
/// 8-bit input and weights minus their zero points (per tensor; the weights' also per column),
/// scaled by `input_scale * weight_scale` before the bias is added, as `MatMulIntegerToFloat`.
/// Inputs: input, weight, bias, input_scale, weight_scale, mask_index, input_zero_point,
/// weight_zero_point, past.
pub(in crate::ops) fn eval_qattention(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, w, bias) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let a_scale = scalar_scale(ctx, required(inputs, 3)?, "input_scale")?;
    let (plan, acc) =
        integer_product_kept(ctx, (x, optional(inputs, 6)), (w, optional(inputs, 7), 1))?;
    let n = plan.n;
    let qkv = scale_columns(ctx, acc, n, a_scale, required(inputs, 4)?, Some(bias))?;
    let parts = Parts {
        mask: optional(inputs, 5),
        past: optional(inputs, 8),
        attn_bias: None,
        past_sequence_length: None,
    };
    let bias = floats(bias, "QAttention")?;
    attention(
        ctx,
        x.shape(),
        w.shape(),
        Some(bias),
        parts,
        |(rows, _), _, (first, count)| {
            let mut out = try_vec(rows * count, 0.0f32)?;
            for (o, row) in out.chunks_mut(count.max(1)).zip(qkv.chunks(n.max(1))) {
                o.copy_from_slice(&row[first..first + count]);
            }
            Ok(out)
        },
    )
}

/// The inputs of `Attention` besides the projection's.
struct Parts<'t> {
    mask: Option<&'t Tensor>,
    past: Option<&'t Tensor>,
    attn_bias: Option<&'t Tensor>,
    /// How many of a shared past/present buffer's positions hold keys and values.
    past_sequence_length: Option<&'t Tensor>,
}

/// `Attention` on an input of shape `x_shape` projected through weights of shape `w_shape`
/// (with `bias`, checked here) by `project(rows, n, cols)`: the columns `cols` (first, count) of
/// the `n` of the projection of the `rows` (count, input hidden size) of the input, bias
/// added. `QAttention` projects with an integer product.
fn attention(
    ctx: &EvalCtx<'_>,
    x_shape: &[usize],
    w_shape: &[usize],
    bias: Option<&[f32]>,
    Parts {
        mask,
        past,
        attn_bias,
        past_sequence_length,
    }: Parts<'_>,
    project: impl Fn((usize, usize), usize, (usize, usize)) -> Result<Vec<f32>>,
) -> Result<Vec<Tensor>> {
    const OP: &str = "Attention";
    let shared = ctx.node.attr_int("past_present_share_buffer", 0)? != 0;
    if ctx.node.attr_int("do_rotary", 0)? != 0 {
        return Err(ctx.error("do_rotary is not supported"));
    }
    let h = heads(ctx, "num_heads")?;
    let [b, s, input_hidden] = *x_shape else {
        return Err(ctx.error(format!("input {x_shape:?} is not 3-D")));
    };
    let [wk, wn] = *w_shape else {
        return Err(ctx.error(format!("weights {w_shape:?} are not 2-D")));
    };
    if wk != input_hidden {
        return Err(ctx.error(format!(
            "weights {w_shape:?} do not take an input hidden size of {input_hidden}"
        )));
    }
    let [qh, kh, vh] = match ctx.node.attr_ints("qkv_hidden_sizes")? {
        Some(&[q, k, v]) => [q, k, v].map(|d| usize::try_from(d).unwrap_or(usize::MAX)),
        Some(other) => {
            return Err(ctx.error(format!(
                "qkv_hidden_sizes {other:?} does not hold three sizes"
            )))
        }
        None => [wn / 3; 3],
    };
    if qh.checked_add(kh).and_then(|n| n.checked_add(vh)) != Some(wn) || qh != kh {
        return Err(ctx.error(format!(
            "hidden sizes {qh}, {kh}, {vh} (Q and K equal) do not split the weights' {wn} columns"
        )));
    }
    if bias.is_some_and(|b| b.len() != wn) {
        return Err(ctx.error(format!("bias does not hold {wn} values")));
    }
    let (d, dv) = (per_head(ctx, qh, h, "Q")?, per_head(ctx, vh, h, "V")?);
    // With a shared buffer, `past` is (2, B, H, max, D) and its first `past_len` positions hold
    // the keys and values so far (`buffer` is `max`).
    let (past_len, buffer) = match past {
        None => (0, None),
        Some(p) => match *p.shape() {
            [2, pb, ph, pl, pd] if pb == b && ph == h && pd == d && d == dv => {
                if shared {
                    let used = shared_length(ctx, past_sequence_length, pl, s)?;
                    (used, Some(pl))
                } else {
                    (pl, None)
                }
            }
            _ => {
                return Err(ctx.error(format!(
                    "past {:?} is not (2, {b}, {h}, past, {d}) with equal K and V head sizes",
                    p.shape()
                )))
            }
        },
    };
    let z = Sizes {
        batch: b,
        q_heads: h,
        kv_heads: h,
        q_len: s,
        kv_len: s,
        past_len,
        head: d,
        v_head: dv,
    };
    let rows = (b * s, input_hidden);
    let q = project(rows, wn, (0, qh))?;
    let k = project(rows, wn, (qh, kh))?;
    let v = project(rows, wn, (qh + kh, vh))?;
    let unidirectional = ctx.node.attr_int("unidirectional", 0)? != 0;
    let filter = ctx.node.attr_float("mask_filter_value", MASK_FILTER)?;
    let keys = key_mask(ctx, mask, &z, unidirectional, filter)?;
    let additive = combine(ctx, keys, attn_bias, &z)?;
    let spec = Spec::from_sizes(z, scale(ctx, d)?, 0.0, false, -1)?;
    let past_values = past.map(|p| floats(p, OP)).transpose()?;
    let used = match (past_values, buffer) {
        (Some(p), Some(max)) => Some(leading(p, max, past_len, d)?),
        _ => None,
    };
    let half = b * h * past_len * d;
    let past_kv = used
        .as_deref()
        .or(past_values)
        .map(|p| (&p[..half], &p[half..]));
    let [y, pk, pv, _] = attend::<f32>(
        &spec,
        &q,
        &k,
        &v,
        past_kv,
        &Bias::new(&spec, additive),
        false,
    )?;
    let t = past_len + s;
    let mut present = pk;
    present.extend_from_slice(&pv);
    let (present, rows) = match (past_values, buffer) {
        (Some(p), Some(max)) => (share_present(p, &present, max, t, d)?, max),
        _ => (present, t),
    };
    outputs(
        ctx,
        vec![(y, vec![b, s, vh]), (present, vec![2, b, h, rows, d])],
    )
}

/// The valid length of a shared past/present buffer of `max` positions: the
/// `past_sequence_length` input (one int32), leaving room for the `s` new positions.
fn shared_length(ctx: &EvalCtx<'_>, given: Option<&Tensor>, max: usize, s: usize) -> Result<usize> {
    let Some(given) = given else {
        return Err(
            ctx.error("past_present_share_buffer needs the past_sequence_length input with a past")
        );
    };
    let values = to_i64s(given)?;
    let [used] = values[..] else {
        return Err(ctx.error(format!(
            "past_sequence_length holds {} values, not one",
            values.len()
        )));
    };
    usize::try_from(used)
        .ok()
        .filter(|&u| u.checked_add(s).is_some_and(|t| t <= max))
        .ok_or_else(|| {
            ctx.error(format!(
                "past_sequence_length {used} and {s} new positions do not fit the shared \
                 buffer's {max}"
            ))
        })
}

/// The first `used` positions of every (K or V, batch, head) block of `max` positions of `d`
/// values in `x`, as blocks of `used` positions.
fn leading(x: &[f32], max: usize, used: usize, d: usize) -> Result<Vec<f32>> {
    let blocks = x.len() / (max * d).max(1);
    let mut out = try_vec(blocks * used * d, 0.0f32)?;
    for (o, block) in out
        .chunks_mut((used * d).max(1))
        .zip(x.chunks((max * d).max(1)))
    {
        o.copy_from_slice(&block[..used * d]);
    }
    Ok(out)
}

/// The shared buffer after a step: `past` (blocks of `max` positions) with its first `t`
/// positions of every block replaced by `present`'s (blocks of `t` positions); the positions
/// after them keep what the buffer held.
fn share_present(
    past: &[f32],
    present: &[f32],
    max: usize,
    t: usize,
    d: usize,
) -> Result<Vec<f32>> {
    let mut out = try_to_vec(past)?;
    for (o, block) in out
        .chunks_mut((max * d).max(1))
        .zip(present.chunks((t * d).max(1)))
    {
        o[..t * d].copy_from_slice(block);
    }
    Ok(out)
}

/// `(B, H, L, D)` rows as `(B, L, H * D)` (the batch follows from the length).
fn heads_last(x: &[f32], (h, l, d): (usize, usize, usize)) -> Result<Vec<f32>> {
    let mut out = try_vec(x.len(), 0.0f32)?;
    for (k, row) in x.chunks(d.max(1)).enumerate() {
        let (bi, hi, li) = (k / (h * l), k / l % h, k % l);
        out[((bi * l + li) * h + hi) * d..][..d].copy_from_slice(row);
    }
    Ok(out)
}

/// Part `part` of `parts` of a packed `(B, L, H, parts, D)` tensor as `(B, L, H * D)`.
fn unpack(x: &[f32], parts: usize, part: usize, d: usize) -> Result<Vec<f32>> {
    let mut out = try_vec(x.len() / parts.max(1), 0.0f32)?;
    for (row, o) in x.chunks(parts * d.max(1)).zip(out.chunks_mut(d.max(1))) {
        o.copy_from_slice(&row[part * d..][..d]);
    }
    Ok(out)
}

/// `com.microsoft.MultiHeadAttention`.
pub(in crate::ops) fn eval_multi_head_attention(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    const OP: &str = "MultiHeadAttention";
    let h = heads(ctx, "num_heads")?;
    let query = required(inputs, 0)?;
    let (key, value) = (optional(inputs, 1), optional(inputs, 2));
    let bias = opt_floats(optional(inputs, 3), OP)?;
    let (mask, attn_bias) = (optional(inputs, 4), optional(inputs, 5));
    let (past_k, past_v) = (optional(inputs, 6), optional(inputs, 7));
    if optional(inputs, 8).is_some() || optional(inputs, 9).is_some() {
        return Err(ctx.error("past_sequence_length and cache_indirection are not supported"));
    }
    if past_k.is_some() != past_v.is_some() {
        return Err(ctx.error("past_key and past_value must be given together"));
    }
    let qv = floats(query, OP)?;
    let shape_err = || {
        ctx.error(format!(
            "query {:?}, key {:?}, value {:?} are not a supported layout",
            query.shape(),
            key.map(Tensor::shape),
            value.map(Tensor::shape)
        ))
    };
    // Q, K, V as (B, S or L, H * size), K and V with the bias still to add when 3-D.
    let (b, s, l, d, dv, mut q, mut k, mut v, kv_biased);
    match (
        query.shape(),
        key.map(Tensor::shape),
        value.map(Tensor::shape),
    ) {
        (&[qb, qs, qh, 3, qd], None, None) if qh == h => {
            (b, s, l, d, dv) = (qb, qs, qs, qd, qd);
            q = unpack(qv, 3, 0, d)?;
            k = unpack(qv, 3, 1, d)?;
            v = unpack(qv, 3, 2, d)?;
            kv_biased = false;
        }
        (&[qb, qs, qhid], Some(&[kb, kl, kh, 2, kd]), None) if kb == qb && kh == h => {
            (b, s, l, d, dv) = (qb, qs, kl, per_head(ctx, qhid, h, "Q")?, kd);
            let kv = floats(key.ok_or_else(shape_err)?, OP)?;
            q = qv.to_vec();
            k = unpack(kv, 2, 0, kd)?;
            v = unpack(kv, 2, 1, kd)?;
            kv_biased = false;
        }
        (&[qb, qs, qhid], Some(&[kb, kl, khid]), Some(&[vb, vl, vhid]))
            if kb == qb && vb == qb && vl == kl =>
        {
            (b, s, l) = (qb, qs, kl);
            (d, dv) = (per_head(ctx, qhid, h, "Q")?, per_head(ctx, vhid, h, "V")?);
            if khid != qhid {
                return Err(shape_err());
            }
            q = qv.to_vec();
            k = floats(key.ok_or_else(shape_err)?, OP)?.to_vec();
            v = floats(value.ok_or_else(shape_err)?, OP)?.to_vec();
            kv_biased = false;
        }
        (&[qb, qs, qhid], Some(&[kb, kh, kl, kd]), Some(&[vb, vh, vl, vd]))
            if kb == qb && vb == qb && kh == h && vh == h && vl == kl =>
        {
            (b, s, l, d, dv) = (qb, qs, kl, kd, vd);
            if qhid != h * d {
                return Err(shape_err());
            }
            q = qv.to_vec();
            k = heads_last(floats(key.ok_or_else(shape_err)?, OP)?, (h, l, d))?;
            v = heads_last(floats(value.ok_or_else(shape_err)?, OP)?, (h, l, dv))?;
            // Keys and values given per head are already projected and biased.
            kv_biased = true;
        }
        _ => return Err(shape_err()),
    }
    if let Some(bias) = bias {
        let (qh, vh) = (h * d, h * dv);
        if bias.len() != 2 * qh + vh {
            return Err(ctx.error(format!("bias does not hold {} values", 2 * qh + vh)));
        }
        let add = |x: &mut [f32], part: &[f32]| {
            for row in x.chunks_mut(part.len().max(1)) {
                for (o, &c) in row.iter_mut().zip(part) {
                    *o += c;
                }
            }
        };
        add(&mut q, &bias[..qh]);
        if !kv_biased {
            add(&mut k, &bias[qh..2 * qh]);
            add(&mut v, &bias[2 * qh..]);
        }
    }
    mha_finish(
        ctx,
        (b, s, l, d, dv, h),
        (&q, &k, &v),
        (mask, attn_bias),
        (past_k, past_v),
    )
}

/// The attention step of `MultiHeadAttention` on `(B, S or L, H * size)` operands.
fn mha_finish(
    ctx: &EvalCtx<'_>,
    (b, s, l, d, dv, h): (usize, usize, usize, usize, usize, usize),
    (q, k, v): (&[f32], &[f32], &[f32]),
    (mask, attn_bias): (Option<&Tensor>, Option<&Tensor>),
    (past_k, past_v): (Option<&Tensor>, Option<&Tensor>),
) -> Result<Vec<Tensor>> {
    const OP: &str = "MultiHeadAttention";
    let past_len = match (past_k, past_v) {
        (Some(pk), Some(pv)) => match (pk.shape(), pv.shape()) {
            (&[kb, kh, kl, kd], &[vb, vh, vl, vd])
                if kb == b && vb == b && kh == h && vh == h && kl == vl && kd == d && vd == dv =>
            {
                kl
            }
            _ => {
                return Err(ctx.error(format!(
                    "past_key {:?} and past_value {:?} are not ({b}, {h}, past, head)",
                    pk.shape(),
                    pv.shape()
                )))
            }
        },
        _ => 0,
    };
    let z = Sizes {
        batch: b,
        q_heads: h,
        kv_heads: h,
        q_len: s,
        kv_len: l,
        past_len,
        head: d,
        v_head: dv,
    };
    let unidirectional = ctx.node.attr_int("unidirectional", 0)? != 0;
    let filter = ctx.node.attr_float("mask_filter_value", MASK_FILTER)?;
    let keys = key_mask(ctx, mask, &z, unidirectional, filter)?;
    let additive = combine(ctx, keys, attn_bias, &z)?;
    let spec = Spec::from_sizes(z, scale(ctx, d)?, 0.0, false, -1)?;
    let (pk, pv) = (opt_floats(past_k, OP)?, opt_floats(past_v, OP)?);
    let want_qk = ctx.node.outputs.get(3).is_some_and(|n| !n.is_empty());
    let [y, pk, pv, qk] = attend::<f32>(
        &spec,
        q,
        k,
        v,
        pk.zip(pv),
        &Bias::new(&spec, additive),
        want_qk,
    )?;
    let t = past_len + l;
    outputs(
        ctx,
        vec![
            (y, vec![b, s, h * dv]),
            (pk, vec![b, h, t, d]),
            (pv, vec![b, h, t, dv]),
            (qk, vec![b, h, s, t]),
        ],
    )
}

/// `com.microsoft.GroupQueryAttention`, as onnxruntime's CPU kernel computes it.
///
/// Each batch `b` holds `seqlens_k[b] + 1` keys in all (`t_b`). The call is a first prompt when
/// the query length equals `total_sequence_length` (its new keys start at 0; rows past `t_b` are
/// right padding), and otherwise continues a cache whose first `t_b - S` keys come from the
/// past. Present key and value are `(B, kv_heads, max(total, past buffer), D)`: the past rows of
/// each batch, then its new rows, then zeros; a past buffer longer than the total (the shared
/// past/present buffer layout, `max_sequence_length` long) keeps its length. Query `i` of batch
/// `b` attends the keys before `min(past_b + i + 1, t_b)`, the last `local_window_size` of them
/// when that is positive; on those, the scores are soft-capped, `attention_bias` is added, and
/// the softmax takes `exp(head_sink[h])` (or `exp(0)` with `smooth_softmax`) into its
/// denominator when asked.
pub(in crate::ops) fn eval_group_query_attention(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    const OP: &str = "GroupQueryAttention";
    let (hq, hk) = (heads(ctx, "num_heads")?, heads(ctx, "kv_num_heads")?);
    if !hq.is_multiple_of(hk) {
        return Err(ctx.error(format!(
            "num_heads {hq} is not a multiple of kv_num_heads {hk}"
        )));
    }
    if ctx.node.outputs.get(3).is_some_and(|n| !n.is_empty()) {
        return Err(ctx.error("the output_qk output is not supported"));
    }
    let query = required(inputs, 0)?;
    let (key, value) = (optional(inputs, 1), optional(inputs, 2));
    let (past_k, past_v) = (optional(inputs, 3), optional(inputs, 4));
    let seqlens = to_i64s(required(inputs, 5)?)?;
    let total = to_i64s(required(inputs, 6)?)?;
    let (cos, sin) = (optional(inputs, 7), optional(inputs, 8));
    let positions = optional(inputs, 9).map(to_i64s).transpose()?;
    let (attn_bias, head_sink) = (optional(inputs, 10), optional(inputs, 11));
    let [b, s, qhid] = *query.shape() else {
        return Err(ctx.error(format!("query {:?} is not 3-D", query.shape())));
    };
    let packed = key.is_none();
    let d = per_head(ctx, qhid, if packed { hq + 2 * hk } else { hq }, "query")?;
    let (q, k, v) = gqa_operands(ctx, query, key, value, (b, s, d), (hq, hk))?;
    let total = match total[..] {
        [t] => usize::try_from(t).ok(),
        _ => None,
    }
    .ok_or_else(|| ctx.error("total_sequence_length must be one non-negative value"))?;
    let past_buf = match (past_k, past_v) {
        (Some(pk), Some(pv)) => match *pk.shape() {
            [pb, ph, p, pd] if pb == b && ph == hk && pd == d && pv.shape() == pk.shape() => p,
            _ => {
                return Err(ctx.error(format!(
                    "past_key {:?} and past_value {:?} are not ({b}, {hk}, past, {d})",
                    pk.shape(),
                    pv.shape()
                )))
            }
        },
        (None, None) => 0,
        _ => return Err(ctx.error("past_key and past_value must be given together")),
    };
    let present = total.max(past_buf);
    let first_prompt = s == total;
    // Keys in all and keys from the past, per batch.
    let lens = gqa_lengths(ctx, &seqlens, (b, s), first_prompt, (past_buf, present))?;
    let (q, k) = if ctx.node.attr_int("do_rotary", 0)? != 0 {
        let (Some(cos), Some(sin)) = (cos, sin) else {
            return Err(ctx.error("do_rotary needs cos_cache and sin_cache"));
        };
        let half = cos.shape().get(1).copied().unwrap_or(0);
        // A first prompt counts from the first position id (0 by default); a continuation
        // from each batch's past length unless position ids are given.
        let ids: Vec<i64> = match (first_prompt, positions) {
            (true, p) => {
                let base = p.and_then(|p| p.first().copied()).unwrap_or(0);
                (0..b)
                    .flat_map(|_| (0..s as i64).map(move |i| base + i))
                    .collect()
            }
            (false, Some(p)) => p,
            (false, None) => lens
                .iter()
                .flat_map(|&(_, past)| (0..s).map(move |i| (past + i) as i64))
                .collect(),
        };
        let interleaved = ctx.node.attr_int("rotary_interleaved", 0)? != 0;
        let turn = |x: Vec<f32>, n: usize| -> Result<Vec<f32>> {
            let t = Tensor::from_vec(DataType::Float, &[b, s, n * d], x)?;
            let rotation = Rotation {
                num_heads: n as i64,
                dim: 2 * half as i64,
                interleaved,
            };
            Ok(rotate(ctx, &t, (cos, sin), Some(ids.clone()), rotation)?
                .as_slice::<f32>()?
                .to_vec())
        };
        (turn(q, hq)?, turn(k, hk)?)
    } else {
        (q, k)
    };
    let (pk, pv) = (opt_floats(past_k, OP)?, opt_floats(past_v, OP)?);
    let cache = |new: &[f32], past: Option<&[f32]>| -> Result<Vec<f32>> {
        let mut out = try_vec(b * hk * present * d, 0.0f32)?;
        for (bh, block) in out.chunks_mut((present * d).max(1)).enumerate() {
            let (bi, h) = (bh / hk, bh % hk);
            let past_len = lens[bi].1;
            if let Some(past) = past {
                block[..past_len * d].copy_from_slice(&past[bh * past_buf * d..][..past_len * d]);
            }
            for (i, row) in block[past_len * d..][..s * d]
                .chunks_mut(d.max(1))
                .enumerate()
            {
                row.copy_from_slice(&new[((bi * s + i) * hk + h) * d..][..d]);
            }
        }
        Ok(out)
    };
    let present_k = cache(&k, pk)?;
    let present_v = cache(&v, pv)?;
    let scores = GqaScores {
        scale: scale(ctx, d)? as f32,
        softcap: ctx.node.attr_float("softcap", 0.0)?,
        window: usize::try_from(ctx.node.attr_int("local_window_size", -1)?).unwrap_or(0),
        bias: gqa_bias(ctx, attn_bias, (b, hq, s), &lens)?,
        sinks: gqa_sinks(ctx, head_sink, hq)?,
    };
    let y = gqa_attend(
        &scores,
        &q,
        (&present_k, &present_v),
        &lens,
        (b, s, hq, hk, d),
        present,
    )?;
    outputs(
        ctx,
        vec![
            (y, vec![b, s, hq * d]),
            (present_k, vec![b, hk, present, d]),
            (present_v, vec![b, hk, present, d]),
        ],
    )
}

/// Q `(B, S, hq * D)`, K and V `(B, S, hk * D)` of `GroupQueryAttention`, from separate inputs
/// or split out of packed QKV.
fn gqa_operands(
    ctx: &EvalCtx<'_>,
    query: &Tensor,
    key: Option<&Tensor>,
    value: Option<&Tensor>,
    (b, s, d): (usize, usize, usize),
    (hq, hk): (usize, usize),
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    const OP: &str = "GroupQueryAttention";
    let qv = floats(query, OP)?;
    let Some(key) = key else {
        if value.is_some() {
            return Err(ctx.error("key and value must be given together"));
        }
        let width = (hq + 2 * hk) * d;
        let split = |first: usize, n: usize| -> Result<Vec<f32>> {
            let mut out = try_vec(b * s * n * d, 0.0f32)?;
            for (row, o) in qv.chunks(width.max(1)).zip(out.chunks_mut((n * d).max(1))) {
                o.copy_from_slice(&row[first * d..][..n * d]);
            }
            Ok(out)
        };
        return Ok((split(0, hq)?, split(hq, hk)?, split(hq + hk, hk)?));
    };
    let Some(value) = value else {
        return Err(ctx.error("key and value must be given together"));
    };
    if key.shape() != [b, s, hk * d] || value.shape() != key.shape() {
        return Err(ctx.error(format!(
            "key {:?} and value {:?} are not ({b}, {s}, {})",
            key.shape(),
            value.shape(),
            hk * d
        )));
    }
    Ok((
        try_to_vec(qv)?,
        try_to_vec(floats(key, OP)?)?,
        try_to_vec(floats(value, OP)?)?,
    ))
}

/// `(t_b, past_b)` per batch: the keys batch `b` attends in all (`seqlens_k[b] + 1`) and those
/// that come from the past (none in a first prompt, `t_b - S` otherwise), checked against the
/// past buffer's and the present's lengths.
fn gqa_lengths(
    ctx: &EvalCtx<'_>,
    seqlens: &[i64],
    (b, s): (usize, usize),
    first_prompt: bool,
    (past_buf, present): (usize, usize),
) -> Result<Vec<(usize, usize)>> {
    if seqlens.len() != b {
        return Err(ctx.error(format!(
            "seqlens_k holds {} values for a batch of {b}",
            seqlens.len()
        )));
    }
    seqlens
        .iter()
        .map(|&n| {
            let t = usize::try_from(n.saturating_add(1)).unwrap_or(0);
            let past = if first_prompt {
                Some(0)
            } else {
                t.checked_sub(s)
            };
            match past {
                Some(p) if t >= 1 && t <= present && p <= past_buf && p + s <= present => {
                    Ok((t, p))
                }
                _ => Err(ctx.error(format!(
                    "seqlens_k {n} does not fit {s} new tokens after a past of {past_buf} in a \
                     present of {present} keys"
                ))),
            }
        })
        .collect()
}

/// The `attention_bias` `(B or 1, H or 1, S, T)` as values with their batch and head strides
/// and row length; `T` must reach every batch's total length.
fn gqa_bias<'t>(
    ctx: &EvalCtx<'_>,
    bias: Option<&'t Tensor>,
    (b, h, s): (usize, usize, usize),
    lens: &[(usize, usize)],
) -> Result<Option<GqaBias<'t>>> {
    let Some(bias) = bias else {
        return Ok(None);
    };
    let longest = lens.iter().map(|&(t, _)| t).max().unwrap_or(0);
    match *bias.shape() {
        [bb, bh, bs, bt]
            if (bb == b || bb == 1) && (bh == h || bh == 1) && bs == s && bt >= longest =>
        {
            let values = floats(bias, "attention_bias")?;
            let sh = if bh == 1 { 0 } else { s * bt };
            let sb = if bb == 1 { 0 } else { bh * s * bt };
            Ok(Some((values, [sb, sh], bt)))
        }
        _ => Err(ctx.error(format!(
            "attention_bias {:?} is not ({b} or 1, {h} or 1, {s}, at least {longest})",
            bias.shape()
        ))),
    }
}

/// The softmax sink of each query head: `head_sink` `(H)`, zeros with `smooth_softmax`, or
/// none.
fn gqa_sinks(ctx: &EvalCtx<'_>, sink: Option<&Tensor>, h: usize) -> Result<Option<Vec<f32>>> {
    match sink {
        Some(t) => {
            let v = floats(t, "head_sink")?;
            if v.len() != h {
                return Err(ctx.error(format!(
                    "head_sink {:?} does not hold one value per head ({h})",
                    t.shape()
                )));
            }
            Ok(Some(try_to_vec(v)?))
        }
        None if ctx.node.attr_int("smooth_softmax", 0)? != 0 => Ok(Some(try_vec(h, 0.0f32)?)),
        None => Ok(None),
    }
}

/// `attention_bias` values, their batch and head strides, and their row length.
type GqaBias<'t> = (&'t [f32], [usize; 2], usize);

/// How `GroupQueryAttention` turns scores into probabilities.
struct GqaScores<'t> {
    scale: f32,
    /// `c * tanh(x / c)` when positive.
    softcap: f32,
    /// Keys each query may see (its own included); 0 for all.
    window: usize,
    bias: Option<GqaBias<'t>>,
    sinks: Option<Vec<f32>>,
}

/// Y `(B, S, hq * D)` of `GroupQueryAttention` on the present caches `(B, hk, present, D)`:
/// per batch and query head, one GEMM for the scores of the batch's keys, the windowed softmax
/// of each row (`gqa_row`), one GEMM with V.
fn gqa_attend(
    p: &GqaScores<'_>,
    q: &[f32],
    (kc, vc): (&[f32], &[f32]),
    lens: &[(usize, usize)],
    (b, s, hq, hk, d): (usize, usize, usize, usize, usize),
    present: usize,
) -> Result<Vec<f32>> {
    use rayon::prelude::*;
    let group = hq / hk;
    let pairs = b * hq;
    let chunk = (s * d).max(1);
    let mut heads = try_vec(pairs * s * d, 0.0f32)?;
    heads
        .par_chunks_mut(chunk)
        .enumerate()
        .with_min_len(crate::par::min_len(pairs, &[s, present, d]))
        .try_for_each(|(bh, out)| -> Result<()> {
            let (bi, h) = (bh / hq, bh % hq);
            let (t, past) = lens[bi];
            let kv = (bi * hk + h / group) * present * d;
            let qm = Mat::new(&q[(bi * s * hq + h) * d..], s, d, hq * d, 1)?;
            let km = Mat::row_major(&kc[kv..][..t * d], t, d)?;
            let vm = Mat::row_major(&vc[kv..][..t * d], t, d)?;
            let mut scores = try_vec(s * t, 0.0f32)?;
            gemm(p.scale, qm, km.t(), 0.0, &mut scores, t)?;
            for (i, row) in scores.chunks_mut(t.max(1)).enumerate() {
                let bias = p
                    .bias
                    .map(|(v, [sb, sh], bt)| &v[bi * sb + h * sh + i * bt..][..t]);
                let sink = p.sinks.as_ref().map(|v| v[h]);
                gqa_row(p, row, (past + i + 1).min(t), bias, sink);
            }
            let pm = Mat::row_major(&scores, s, t)?;
            gemm(1.0f32, pm, vm, 0.0, out, d)
        })?;
    // (b, h, s, d) -> (b, s, h, d).
    let mut y = try_vec(heads.len(), 0.0f32)?;
    for (bh, block) in heads.chunks(chunk).enumerate() {
        let (bi, h) = (bh / hq, bh % hq);
        for (i, row) in block.chunks(d.max(1)).enumerate() {
            y[((bi * s + i) * hq + h) * d..][..d].copy_from_slice(row);
        }
    }
    Ok(y)
}

/// One row of scores into probabilities: the keys before `end` (the last `window` of them when
/// windowed) are soft-capped, biased and soft-maxed (with `exp(sink)` in the denominator when
/// given); every other key gets 0.
fn gqa_row(
    p: &GqaScores<'_>,
    row: &mut [f32],
    end: usize,
    bias: Option<&[f32]>,
    sink: Option<f32>,
) {
    let start = if p.window > 0 && end > p.window {
        end - p.window
    } else {
        0
    };
    let seen = &mut row[start..end];
    if p.softcap > 0.0 {
        for x in seen.iter_mut() {
            *x = p.softcap * (*x / p.softcap).tanh();
        }
    }
    if let Some(bias) = bias {
        for (x, &c) in seen.iter_mut().zip(&bias[start..end]) {
            *x += c;
        }
    }
    let top = seen
        .iter()
        .copied()
        .fold(sink.unwrap_or(f32::NEG_INFINITY), f32::max);
    let mut sum = sink.map_or(0.0, |c| (c - top).exp());
    for x in seen.iter_mut() {
        *x = (*x - top).exp();
        sum += *x;
    }
    for x in seen.iter_mut() {
        *x /= sum;
    }
    row[..start].fill(0.0);
    row[end..].fill(0.0);
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    /// Identity weights, one head of size 1: Q = K = V = x, so a masked key drops out.
    #[test]
    fn attention_mask_index_end_positions_drop_keys() {
        let x = f32s(&[1, 2, 1], vec![1.0, 3.0]);
        let w = f32s(&[1, 3], vec![1.0, 1.0, 1.0]);
        let mask = Tensor::from_vec(DataType::Int32, &[1], vec![1i32]).unwrap();
        let n = Node::new("Attention", "a", ["x", "w", "", "m"], ["y"])
            .with_domain("com.microsoft")
            .with_attr("num_heads", AttrValue::Int(1));
        let y = eval_node(&n, 1, &[Some(&x), Some(&w), None, Some(&mask)]).unwrap();
        // Only key 0 (value 1) is attended by both queries.
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1.0, 1.0]);
    }

    /// A shared past/present buffer computes what the separate past and present compute: the
    /// first `past_sequence_length` positions are the past, the new keys and values are
    /// written after them, and the positions after those keep what the buffer held.
    #[test]
    fn attention_shared_past_present_buffer_matches_separate_past() {
        let (p, s, max, d) = (2usize, 2usize, 5usize, 2usize);
        let x = f32s(&[1, s, d], vec![0.5, -1.0, 2.0, 0.25]);
        let w: Vec<f32> = (0..d * 3 * d).map(|i| (i as f32 * 0.37).sin()).collect();
        let w = f32s(&[d, 3 * d], w);
        let past: Vec<f32> = (0..2 * p * d).map(|i| (i as f32 * 0.91).cos()).collect();
        let mut buffer = vec![99.0f32; 2 * max * d];
        for kv in 0..2 {
            buffer[kv * max * d..][..p * d].copy_from_slice(&past[kv * p * d..][..p * d]);
        }
        let attention = |shared: bool| {
            Node::new(
                "Attention",
                "a",
                ["x", "w", "", "", "past", "", "len"],
                ["y", "present"],
            )
            .with_domain("com.microsoft")
            .with_attr("num_heads", AttrValue::Int(1))
            .with_attr("unidirectional", AttrValue::Int(1))
            .with_attr(
                "past_present_share_buffer",
                AttrValue::Int(i64::from(shared)),
            )
        };
        let separate = f32s(&[2, 1, 1, p, d], past);
        let want = eval_node(
            &attention(false),
            1,
            &[Some(&x), Some(&w), None, None, Some(&separate)],
        )
        .unwrap();
        let shared = f32s(&[2, 1, 1, max, d], buffer.clone());
        let len = |v: i32| Tensor::from_vec(DataType::Int32, &[1], vec![v]).unwrap();
        let run_shared = |given: Option<&Tensor>| {
            let inputs = [Some(&x), Some(&w), None, None, Some(&shared), None, given];
            eval_node(&attention(true), 1, &inputs)
        };
        let got = run_shared(Some(&len(p as i32))).unwrap();
        assert_eq!(got[0], want[0]);
        assert_eq!(got[1].shape(), &[2, 1, 1, max, d]);
        let (got_present, want_present) = (
            got[1].as_slice::<f32>().unwrap(),
            want[1].as_slice::<f32>().unwrap(),
        );
        let t = p + s;
        for kv in 0..2 {
            assert_eq!(
                got_present[kv * max * d..][..t * d],
                want_present[kv * t * d..][..t * d]
            );
            assert_eq!(
                got_present[kv * max * d + t * d..][..(max - t) * d],
                buffer[kv * max * d + t * d..][..(max - t) * d]
            );
        }
        let errors = [
            (None, "needs the past_sequence_length input"),
            (
                Some(len(4)),
                "past_sequence_length 4 and 2 new positions do not fit the shared buffer's 5",
            ),
            (Some(len(-1)), "past_sequence_length -1 and 2 new positions"),
        ];
        for (given, want) in errors {
            let err = run_shared(given.as_ref()).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    /// Codes whose dequantised values are small integers: QAttention on them computes what
    /// Attention computes on the dequantised input and weights (exactly, the products being
    /// integers), two heads of 1, unidirectional.
    #[test]
    fn qattention_equals_attention_on_the_dequantised_operands() {
        let xq: Vec<u8> = vec![130, 126, 129, 131, 128, 125];
        let wq: Vec<i8> = vec![1, -2, 0, 3, 1, 2, -1, 0, 2, 1, 1, -3];
        let (zx, sx, sw) = (128u8, 0.5f32, [0.25f32, 0.5, 1.0, 2.0, 0.5, 0.25]);
        let bias = f32s(&[6], vec![0.1, -0.2, 0.3, 0.0, 0.5, -0.5]);
        let xf: Vec<f32> = xq.iter().map(|&c| (f32::from(c) - 128.0) * sx).collect();
        let wf: Vec<f32> = wq
            .iter()
            .enumerate()
            .map(|(i, &c)| f32::from(c) * sw[i % 6])
            .collect();
        let x = Tensor::from_vec(DataType::Uint8, &[1, 3, 2], xq).unwrap();
        let w = Tensor::from_vec(DataType::Int8, &[2, 6], wq).unwrap();
        let node = |op: &str, inputs: &[&str]| {
            Node::new(op, "a", inputs.iter().copied(), ["y"])
                .with_domain("com.microsoft")
                .with_attr("num_heads", AttrValue::Int(2))
                .with_attr("unidirectional", AttrValue::Int(1))
        };
        let q = node("QAttention", &["x", "w", "b", "sx", "sw", "", "zx"]);
        let got = eval_node(
            &q,
            1,
            &[
                Some(&x),
                Some(&w),
                Some(&bias),
                Some(&f32s(&[], vec![sx])),
                Some(&f32s(&[6], sw.to_vec())),
                None,
                Some(&Tensor::scalar(DataType::Uint8, zx).unwrap()),
            ],
        )
        .unwrap();
        let f = node("Attention", &["x", "w", "b"]);
        let want = eval_node(
            &f,
            1,
            &[
                Some(&f32s(&[1, 3, 2], xf)),
                Some(&f32s(&[2, 6], wf)),
                Some(&bias),
            ],
        )
        .unwrap();
        assert_eq!(got[0].shape(), &[1, 3, 2]);
        for (g, w) in got[0]
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .zip(want[0].as_slice::<f32>().unwrap())
        {
            assert!((g - w).abs() < 1e-6, "QAttention {g}, Attention {w}");
        }
    }

    #[test]
    fn attention_rejects_a_mask_of_the_wrong_shape() {
        let x = f32s(&[1, 2, 1], vec![1.0, 3.0]);
        let w = f32s(&[1, 3], vec![1.0, 1.0, 1.0]);
        let mask = Tensor::from_vec(DataType::Int32, &[3], vec![1i32, 1, 1]).unwrap();
        let n = Node::new("Attention", "a", ["x", "w", "", "m"], ["y"])
            .with_domain("com.microsoft")
            .with_attr("num_heads", AttrValue::Int(1));
        let err = eval_node(&n, 1, &[Some(&x), Some(&w), None, Some(&mask)]).unwrap_err();
        assert!(err.to_string().contains("mask [3]"), "{err}");
    }

    #[test]
    fn group_query_attention_is_causal() {
        let q = f32s(&[1, 2, 1], vec![1.0, 1.0]);
        let v = f32s(&[1, 2, 1], vec![2.0, 4.0]);
        let seqlens = Tensor::from_vec(DataType::Int32, &[1], vec![1i32]).unwrap();
        let total = Tensor::from_vec(DataType::Int32, &[], vec![2i32]).unwrap();
        let n = Node::new(
            "GroupQueryAttention",
            "g",
            ["q", "k", "v", "", "", "s", "t"],
            ["y", "pk", "pv"],
        )
        .with_domain("com.microsoft")
        .with_attr("num_heads", AttrValue::Int(1))
        .with_attr("kv_num_heads", AttrValue::Int(1));
        let y = eval_node(
            &n,
            1,
            &[
                Some(&q),
                Some(&q),
                Some(&v),
                None,
                None,
                Some(&seqlens),
                Some(&total),
            ],
        )
        .unwrap();
        // Query 0 sees value 2 only; query 1 averages 2 and 4 (equal scores).
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[2.0, 3.0]);
        assert_eq!(y[2].as_slice::<f32>().unwrap(), &[2.0, 4.0]);
    }

    /// The `GroupQueryAttention` node of one head of size 1 and its inputs: zero queries and
    /// keys (equal scores), the given values, past `(B, 1, 3, 1)` and `seqlens_k`.
    fn gqa_one_token(
        v: Vec<f32>,
        past_v: Vec<f32>,
        seqlens: Vec<i32>,
        attrs: &[(&str, i64)],
        sink: Option<f32>,
    ) -> Vec<Tensor> {
        let b = v.len();
        let zeros = |shape: &[usize]| f32s(shape, vec![0.0; shape.iter().product()]);
        let total = *seqlens.iter().max().unwrap() + 1;
        let mut n = Node::new(
            "GroupQueryAttention",
            "g",
            ["q", "k", "v", "pk", "pv", "s", "t", "", "", "", "", "sink"],
            ["y", "pk_out", "pv_out"],
        )
        .with_domain("com.microsoft")
        .with_attr("num_heads", AttrValue::Int(1))
        .with_attr("kv_num_heads", AttrValue::Int(1));
        for &(k, x) in attrs {
            n = n.with_attr(k, AttrValue::Int(x));
        }
        let sink = sink.map(|x| f32s(&[1], vec![x]));
        eval_node(
            &n,
            1,
            &[
                Some(&zeros(&[b, 1, 1])),
                Some(&zeros(&[b, 1, 1])),
                Some(&f32s(&[b, 1, 1], v)),
                Some(&zeros(&[b, 1, 3, 1])),
                Some(&f32s(&[b, 1, 3, 1], past_v)),
                Some(&Tensor::from_vec(DataType::Int32, &[b], seqlens).unwrap()),
                Some(&Tensor::from_vec(DataType::Int32, &[], vec![total]).unwrap()),
                None,
                None,
                None,
                None,
                sink.as_ref(),
            ],
        )
        .unwrap()
    }

    /// Batch 0 holds one key (its new one), batch 1 three (two from the past): each averages
    /// its own keys' values, and the present keeps each batch's past rows, then its new row,
    /// then zeros.
    #[test]
    fn group_query_attention_batches_of_differing_lengths() {
        let out = gqa_one_token(
            vec![5.0, 6.0],
            vec![7.0, 7.0, 7.0, 1.0, 2.0, 9.0],
            vec![0, 2],
            &[],
            None,
        );
        assert_eq!(out[0].as_slice::<f32>().unwrap(), &[5.0, 3.0]);
        assert_eq!(out[2].shape(), &[2, 1, 3, 1]);
        assert_eq!(
            out[2].as_slice::<f32>().unwrap(),
            &[5.0, 0.0, 0.0, 1.0, 2.0, 6.0]
        );
    }

    /// One key of score 0 and value 4: a sink of 0 (`head_sink`, or `smooth_softmax`) takes half
    /// of the softmax, a sink of ln 3 three quarters.
    #[test]
    fn group_query_attention_sink_adds_to_the_softmax_denominator() {
        for (name, attrs, sink, want) in [
            ("no sink", &[][..], None, 4.0),
            ("smooth_softmax", &[("smooth_softmax", 1)][..], None, 2.0),
            ("head_sink 0", &[][..], Some(0.0), 2.0),
            ("head_sink ln 3", &[][..], Some(3.0f32.ln()), 1.0),
        ] {
            let out = gqa_one_token(vec![4.0], vec![0.0; 3], vec![0], attrs, sink);
            let y = out[0].as_slice::<f32>().unwrap()[0];
            assert!((y - want).abs() < 1e-6, "{name}: {y}");
        }
    }

    /// A Megatron mask `(B, 1, M, M)` lower-triangular: query 0 sees key 0 only, query 1 both.
    #[test]
    fn attention_megatron_mask_reads_the_row_of_each_query() {
        let x = f32s(&[1, 2, 1], vec![1.0, 3.0]);
        let w = f32s(&[1, 3], vec![0.0, 0.0, 1.0]);
        let mask = Tensor::from_vec(
            DataType::Int32,
            &[1, 1, 3, 3],
            vec![1i32, 0, 0, 1, 1, 0, 1, 1, 1],
        )
        .unwrap();
        let n = Node::new("Attention", "a", ["x", "w", "", "m"], ["y"])
            .with_domain("com.microsoft")
            .with_attr("num_heads", AttrValue::Int(1));
        let y = eval_node(&n, 1, &[Some(&x), Some(&w), None, Some(&mask)]).unwrap();
        // Zero queries and keys: equal scores over the keys each query may see.
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1.0, 2.0]);
    }

    /// Packed `(B, S, H, 3, D)` QKV gives what separate Q, K and V give.
    #[test]
    fn multi_head_attention_packed_qkv_matches_separate_inputs() {
        let q = [0.5f32, -1.0, 2.0];
        let k = [1.0f32, 0.5, -0.5];
        let v = [3.0f32, -2.0, 1.0];
        let packed: Vec<f32> = (0..3).flat_map(|s| [q[s], k[s], v[s]]).collect();
        let n1 = Node::new("MultiHeadAttention", "m", ["qkv"], ["y"])
            .with_domain("com.microsoft")
            .with_attr("num_heads", AttrValue::Int(1));
        let y1 = eval_node(&n1, 1, &[Some(&f32s(&[1, 3, 1, 3, 1], packed))]).unwrap();
        let n3 = Node::new("MultiHeadAttention", "m", ["q", "k", "v"], ["y"])
            .with_domain("com.microsoft")
            .with_attr("num_heads", AttrValue::Int(1));
        let t = |v: [f32; 3]| f32s(&[1, 3, 1], v.to_vec());
        let y3 = eval_node(&n3, 1, &[Some(&t(q)), Some(&t(k)), Some(&t(v))]).unwrap();
        assert_eq!(y1[0], y3[0]);
    }
}
