//! `Attention` (opsets 23, 24, 25): scaled dot-product attention with masks, causal and
//! sliding-window masking, grouped-query heads and a key/value cache; and `FlexAttention`
//! (`ai.onnx.preview` 1), attention whose scores and probabilities subgraphs may rewrite.
//!
//! Spec: <https://onnx.ai/onnx/operators/onnx__Attention.html>; the reference is
//! `onnx.reference.ops.op_attention`, whose results the node tests record.
//!
//! `Q`, `K`, `V` are 4-D `(batch, heads, seq, head_size)` or 3-D `(batch, seq, heads *
//! head_size)` with `q_num_heads` / `kv_num_heads`; 3-D operands are read through strides, never
//! transposed. `past_key` / `past_value` (always 4-D) are concatenated before the new keys and
//! values into `present_key` / `present_value`. A query head `h` reads key/value head
//! `h / (q_heads / kv_heads)` (grouped-query attention).
//!
//! Per batch and query head the kernel runs one GEMM for the scores (`scale * Q Kᵀ`, through
//! `nn::blas`), applies the soft cap (`softcap * tanh(s / softcap)`), adds the bias (the mask, the
//! causal and window frontiers, the padding from `nonpad_kv_seqlen`), takes the softmax of each
//! row (vectorised for `f32`, through `ops::vector`), zeroes a row whose bias is `-inf`
//! everywhere (no key may be attended), and runs a second GEMM with `V`. Heads run in parallel.
//!
//! Masking follows the reference: a boolean mask is `0` where true and `-inf` where false; a
//! float mask is added; a mask shorter than the total sequence is padded with `-inf`. The causal
//! frontier is bottom-right aligned: query `i` attends key `j` iff `j <= i + offset`, where
//! `offset` is the past length with a cache, `nonpad_kv_seqlen[b] - q_len` with that input, and 0
//! otherwise; the window bounds `offset + i - j` by `left_window_size` and `j - offset - i` by
//! `right_window_size` (`-1` is unbounded). The fourth output is the soft-capped scores for modes
//! 0 and 1 (as the reference computes them), the biased scores for mode 2 and the guarded
//! probabilities for mode 3. Every float type computes in `f32` (`f64` for double);
//! `softmax_precision` asks for no more than that.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::{Dim, Node, TensorType};
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

use super::super::util::{optional, required, to_i64s, unsupported_type};
use super::super::{vector, EvalCtx, InferCtx};
use super::blas::{gemm, Mat};
use super::values::{input_dims, known_sizes, tensor_type};
use crate::ops::num::{dispatch_real, Arith, Float, Real};

/// The element types attention computes in, with their row softmax.
pub(in crate::ops) trait Attend: Real {
    /// The softmax of each row of `size` consecutive elements of `src` into `dst`.
    fn softmax_rows<'d>(
        src: &[Self],
        size: usize,
        dst: &'d mut [MaybeUninit<Self>],
    ) -> &'d mut [Self];
    /// `tanh(self)`: the vectorised `vector::tanh` for `f32` (not [`Real::tanh`], libm's), so
    /// callers name it `Attend::tanh`.
    fn tanh(self) -> Self;
}

impl Attend for f32 {
    fn softmax_rows<'d>(
        src: &[f32],
        size: usize,
        dst: &'d mut [MaybeUninit<f32>],
    ) -> &'d mut [f32] {
        vector::softmax_rows(src, size, dst)
    }
    fn tanh(self) -> f32 {
        vector::tanh(self)
    }
}

impl Attend for f64 {
    fn softmax_rows<'d>(
        src: &[f64],
        size: usize,
        dst: &'d mut [MaybeUninit<f64>],
    ) -> &'d mut [f64] {
        let n = src.len().min(dst.len());
        let n = if size == 0 { 0 } else { n - n % size };
        for (s, d) in src[..n].chunks(size).zip(dst[..n].chunks_mut(size)) {
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let shift = if max.is_finite() { max } else { 0.0 };
            let sum: f64 = s.iter().map(|&v| (v - shift).exp()).sum();
            for (d, &v) in d.iter_mut().zip(s) {
                d.write((v - shift).exp() / sum);
            }
        }
        // SAFETY: the loop above wrote every element of `dst[..n]`.
        unsafe { vector::assume_written(&mut dst[..n]) }
    }
    fn tanh(self) -> f64 {
        f64::tanh(self)
    }
}

/// The attributes of an `Attention` node and the sizes its operands give, read once for the
/// shape function and the kernel.
#[derive(Clone, Debug)]
pub(in crate::ops) struct Spec {
    batch: usize,
    q_heads: usize,
    kv_heads: usize,
    q_len: usize,
    kv_len: usize,
    past_len: usize,
    head: usize,
    v_head: usize,
    /// Whether Q, K, V (and Y) are 3-D.
    rank3: bool,
    scale: f64,
    softcap: f64,
    causal: bool,
    mode: i64,
    left: i64,
    right: i64,
}

/// The sizes of one attention call, for the operators that read them from operands of their own
/// layout (the `com.microsoft` attention family).
#[derive(Clone, Copy, Debug)]
pub(in crate::ops) struct Sizes {
    pub batch: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub q_len: usize,
    /// New keys and values in this call.
    pub kv_len: usize,
    /// Keys and values in the cache before this call.
    pub past_len: usize,
    pub head: usize,
    pub v_head: usize,
}

impl Spec {
    /// Attention on 3-D `(batch, seq, heads * size)` operands of the given sizes: `scale` on the
    /// scores, then the soft cap (`0` for none), the causal frontier (offset by the past
    /// length) and a left window (`-1` for none).
    pub fn from_sizes(z: Sizes, scale: f64, softcap: f64, causal: bool, left: i64) -> Result<Spec> {
        if z.kv_heads == 0 || !z.q_heads.is_multiple_of(z.kv_heads) {
            return Err(Error::Eval(format!(
                "{} query heads are not a multiple of {} key/value heads",
                z.q_heads, z.kv_heads
            )));
        }
        Ok(Spec {
            batch: z.batch,
            q_heads: z.q_heads,
            kv_heads: z.kv_heads,
            q_len: z.q_len,
            kv_len: z.kv_len,
            past_len: z.past_len,
            head: z.head,
            v_head: z.v_head,
            rank3: true,
            scale,
            softcap,
            causal,
            mode: 0,
            left,
            right: -1,
        })
    }

    /// The spec of `node` for operands of shapes `q`, `k`, `v` and an optional `past_key`.
    pub fn new(
        node: &Node,
        q: &[usize],
        k: &[usize],
        v: &[usize],
        past: Option<&[usize]>,
    ) -> Result<Spec> {
        let err = |m: String| Error::Eval(m);
        if q.len() != k.len() || q.len() != v.len() || !(q.len() == 3 || q.len() == 4) {
            return Err(err(format!(
                "Q {q:?}, K {k:?} and V {v:?} must all be 3-D or all 4-D"
            )));
        }
        let rank3 = q.len() == 3;
        let attr_heads = |name: &str| -> Result<usize> {
            let n = node.attr_int(name, 0)?;
            match usize::try_from(n) {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(err(format!("3-D inputs need a positive {name}, found {n}"))),
            }
        };
        let split = |hidden: usize, heads: usize, what: &str| -> Result<usize> {
            if !hidden.is_multiple_of(heads) {
                return Err(err(format!(
                    "{what} hidden size {hidden} is not a multiple of {heads} heads"
                )));
            }
            Ok(hidden / heads)
        };
        let (batch, q_heads, kv_heads, q_len, kv_len, head, k_head, v_head);
        if rank3 {
            q_heads = attr_heads("q_num_heads")?;
            kv_heads = attr_heads("kv_num_heads")?;
            (batch, q_len, kv_len) = (q[0], q[1], k[1]);
            head = split(q[2], q_heads, "Q")?;
            k_head = split(k[2], kv_heads, "K")?;
            v_head = split(v[2], kv_heads, "V")?;
            if v[1] != kv_len {
                return Err(err(format!(
                    "K {k:?} and V {v:?} differ in sequence length"
                )));
            }
        } else {
            (batch, q_heads, q_len, head) = (q[0], q[1], q[2], q[3]);
            (kv_heads, kv_len, k_head, v_head) = (k[1], k[2], k[3], v[3]);
            if v[1] != kv_heads || v[2] != kv_len {
                return Err(err(format!(
                    "K {k:?} and V {v:?} differ in heads or length"
                )));
            }
        }
        if k[0] != batch || v[0] != batch {
            return Err(err(format!(
                "Q {q:?}, K {k:?}, V {v:?} differ in batch size"
            )));
        }
        if k_head != head {
            return Err(err(format!(
                "Q head size {head} differs from K head size {k_head}"
            )));
        }
        if kv_heads == 0 || q_heads % kv_heads != 0 {
            return Err(err(format!(
                "{q_heads} query heads are not a multiple of {kv_heads} key/value heads"
            )));
        }
        let past_len = match past {
            None => 0,
            Some(p) => {
                if p.len() != 4 || p[0] != batch || p[1] != kv_heads || p[3] != head {
                    return Err(err(format!(
                        "past_key {p:?} is not ({batch}, {kv_heads}, past, {head})"
                    )));
                }
                p[2]
            }
        };
        let scale = match node.attr("scale") {
            Some(_) => node.attr_float("scale", 1.0)? as f64,
            None => 1.0 / (head as f64).sqrt(),
        };
        let mode = node.attr_int("qk_matmul_output_mode", 0)?;
        if !(0..=3).contains(&mode) {
            return Err(err(format!("qk_matmul_output_mode {mode} is not 0 to 3")));
        }
        let window = |name: &str| -> Result<i64> {
            let w = node.attr_int(name, -1)?;
            if w < -1 {
                return Err(err(format!("{name} {w} is below -1")));
            }
            Ok(w)
        };
        Ok(Spec {
            batch,
            q_heads,
            kv_heads,
            q_len,
            kv_len,
            past_len,
            head,
            v_head,
            rank3,
            scale,
            softcap: node.attr_float("softcap", 0.0)? as f64,
            causal: node.attr_int("is_causal", 0)? != 0,
            mode,
            left: window("left_window_size")?,
            right: window("right_window_size")?,
        })
    }

    /// Keys (and values) in the cache after this step.
    fn total(&self) -> usize {
        self.past_len + self.kv_len
    }

    /// The shapes of Y, present_key, present_value and qk_matmul_output.
    fn output_shapes(&self) -> [Vec<usize>; 4] {
        let (b, hq, hk, t) = (self.batch, self.q_heads, self.kv_heads, self.total());
        let y = if self.rank3 {
            vec![b, self.q_len, hq * self.v_head]
        } else {
            vec![b, hq, self.q_len, self.v_head]
        };
        [
            y,
            vec![b, hk, t, self.head],
            vec![b, hk, t, self.v_head],
            vec![b, hq, self.q_len, t],
        ]
    }

    /// Where element `(b, h, s, 0)` of a Q, K or V operand with `heads` heads of `size` lies,
    /// and the stride between sequence positions.
    fn layout(
        &self,
        heads: usize,
        len: usize,
        size: usize,
    ) -> impl Fn(usize, usize) -> (usize, usize) {
        let rank3 = self.rank3;
        move |b, h| {
            if rank3 {
                (b * len * heads * size + h * size, heads * size)
            } else {
                ((b * heads + h) * len * size, size)
            }
        }
    }
}

/// An additive mask: its values, their strides over `(batch, head, query)` and its length
/// along the keys.
pub(in crate::ops) type Mask<R> = (Vec<R>, [usize; 3], usize);

/// The additive bias of one `(batch, head)` pair: rows of `total` values per query.
pub(in crate::ops) struct Bias<'a, R> {
    spec: &'a Spec,
    /// The mask as values (`0`/`-inf` for a boolean mask), its strides over `(b, h, i)` and its
    /// length along the keys.
    mask: Option<Mask<R>>,
    nonpad: Option<Vec<i64>>,
}

impl<'a, R: Real> Bias<'a, R> {
    /// The bias of `spec` (its causal and window frontiers) plus `mask`, if any.
    pub fn new(spec: &'a Spec, mask: Option<Mask<R>>) -> Self {
        Bias {
            spec,
            mask,
            nonpad: None,
        }
    }

    /// Whether anything masks.
    fn any(&self) -> bool {
        let s = self.spec;
        self.mask.is_some() || s.causal || s.left >= 0 || s.right >= 0 || self.nonpad.is_some()
    }

    /// Writes the bias rows of `(b, h)` into `out` (`q_len * total` values).
    fn fill(&self, b: usize, h: usize, out: &mut [R]) {
        let s = self.spec;
        let t = s.total();
        let neg = R::from_f64(f64::NEG_INFINITY);
        let offset: i64 = match (&self.nonpad, s.past_len) {
            (Some(n), 0) => n.get(b).copied().unwrap_or(0) - s.q_len as i64,
            _ => s.past_len as i64,
        };
        let valid = self.nonpad.as_ref().map(|n| n.get(b).copied().unwrap_or(0));
        for (i, row) in out.chunks_mut(t.max(1)).take(s.q_len).enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                let mut x = match &self.mask {
                    Some((m, st, len)) if j < *len => m[b * st[0] + h * st[1] + i * st[2] + j],
                    Some(_) => neg,
                    None => R::ZERO,
                };
                let diff = i as i64 + offset - j as i64;
                let blocked = (s.causal && diff < 0)
                    || (s.left >= 0 && diff > s.left)
                    || (s.right >= 0 && -diff > s.right)
                    || valid.is_some_and(|n| j as i64 >= n);
                if blocked {
                    x += neg;
                }
                *v = x;
            }
        }
    }
}

/// The mask input as values broadcast over `(batch, q_heads, q_len, len)`.
fn load_mask<R: Real>(spec: &Spec, mask: &Tensor) -> Result<Mask<R>> {
    let shape = mask.shape();
    if shape.is_empty() || shape.len() > 4 {
        return Err(Error::Eval(format!(
            "attn_mask {shape:?} is not 1-D to 4-D"
        )));
    }
    let len = shape[shape.len() - 1];
    if len > spec.total() {
        return Err(Error::Eval(format!(
            "attn_mask {shape:?} is longer than the {} keys",
            spec.total()
        )));
    }
    let target = [spec.batch, spec.q_heads, spec.q_len];
    let mut strides = [0usize; 3];
    let mut stride = len;
    for k in 0..shape.len() - 1 {
        let d = shape[shape.len() - 2 - k];
        let axis = 2 - k;
        if d != 1 && d != target[axis] {
            return Err(Error::Eval(format!(
                "attn_mask {shape:?} does not broadcast to {:?}",
                [spec.batch, spec.q_heads, spec.q_len, spec.total()]
            )));
        }
        if d != 1 {
            strides[axis] = stride;
        }
        stride *= d;
    }
    let values = if mask.dtype() == DataType::Bool {
        let neg = R::from_f64(f64::NEG_INFINITY);
        mask.as_slice::<u8>()?
            .iter()
            .map(|&b| if b != 0 { R::ZERO } else { neg })
            .collect()
    } else {
        R::load(mask)?.into_owned()
    };
    Ok((values, strides, len))
}

/// Runs attention on values already in the compute type: `q`, `k`, `v` as given, `past_k` and
/// `past_v` 4-D. Returns Y, present_key, present_value and the fourth output (empty unless
/// `want_qk`), in the output shapes.
pub(in crate::ops) fn attend<R: Attend>(
    spec: &Spec,
    q: &[R],
    k: &[R],
    v: &[R],
    past: Option<(&[R], &[R])>,
    bias: &Bias<'_, R>,
    want_qk: bool,
) -> Result<[Vec<R>; 4]> {
    let s = spec;
    let (t, d, dv) = (s.total(), s.head, s.v_head);
    // The caches: past then new, per (batch, kv head).
    let cache = |new: &[R], past: Option<&[R]>, size: usize| -> Result<Vec<R>> {
        let mut out = try_vec(s.batch * s.kv_heads * t * size, R::ZERO)?;
        let at = s.layout(s.kv_heads, s.kv_len, size);
        for (bh, block) in out.chunks_mut((t * size).max(1)).enumerate() {
            let (b, h) = (bh / s.kv_heads, bh % s.kv_heads);
            let p = s.past_len * size;
            if let Some(past) = past {
                block[..p].copy_from_slice(&past[bh * p..][..p]);
            }
            let (base, stride) = at(b, h);
            for (r, row) in block[p..].chunks_mut(size.max(1)).enumerate() {
                row.copy_from_slice(&new[base + r * stride..][..size]);
            }
        }
        Ok(out)
    };
    let present_k = cache(k, past.map(|p| p.0), d)?;
    let present_v = cache(v, past.map(|p| p.1), dv)?;
    let (hq, group) = (s.q_heads, s.q_heads / s.kv_heads);
    let pairs = s.batch * hq;
    let mut y = try_vec(pairs * s.q_len * dv, R::ZERO)?;
    let mut qk = try_vec(if want_qk { pairs * s.q_len * t } else { 0 }, R::ZERO)?;
    let q_at = s.layout(hq, s.q_len, d);
    let softcap = R::from_f64(s.softcap);
    let scores_len = s.q_len * t;
    let y_chunk = (s.q_len * dv).max(1);
    let qk_chunk = if want_qk { scores_len.max(1) } else { 1 };
    let mut qk_chunks: Vec<&mut [R]> = qk.chunks_mut(qk_chunk).collect();
    qk_chunks.resize_with(pairs, || &mut []);
    y.par_chunks_mut(y_chunk)
        .zip(qk_chunks.into_par_iter())
        .enumerate()
        .with_min_len(crate::par::min_len(pairs, &[scores_len, d + dv]))
        .try_for_each(|(bh, (y_bh, qk_bh))| -> Result<()> {
            let (b, h) = (bh / hq, bh % hq);
            let kv = b * s.kv_heads + h / group;
            let (q_base, q_stride) = q_at(b, h);
            let qm = Mat::new(&q[q_base..], s.q_len, d, q_stride, 1)?;
            let km = Mat::row_major(&present_k[kv * t * d..][..t * d], t, d)?;
            let vm = Mat::row_major(&present_v[kv * t * dv..][..t * dv], t, dv)?;
            let mut scores = try_vec(scores_len, R::ZERO)?;
            gemm(R::from_f64(s.scale), qm, km.t(), R::ZERO, &mut scores, t)?;
            if s.softcap > 0.0 {
                for x in &mut scores {
                    *x = softcap * Attend::tanh(*x / softcap);
                }
            }
            if want_qk && s.mode <= 1 {
                qk_bh.copy_from_slice(&scores);
            }
            let mut masked_rows = Vec::new();
            if bias.any() {
                let mut add = try_vec(scores_len, R::ZERO)?;
                bias.fill(b, h, &mut add);
                let neg = R::from_f64(f64::NEG_INFINITY);
                for (i, (row, brow)) in scores
                    .chunks_mut(t.max(1))
                    .zip(add.chunks(t.max(1)))
                    .enumerate()
                {
                    if brow.iter().all(|&x| x == neg) {
                        masked_rows.push(i);
                    }
                    for (x, &a) in row.iter_mut().zip(brow) {
                        *x += a;
                    }
                }
            }
            if want_qk && s.mode == 2 {
                qk_bh.copy_from_slice(&scores);
            }
            let mut probs = try_vec(scores_len, MaybeUninit::<R>::uninit())?;
            let p = R::softmax_rows(&scores, t, &mut probs);
            for &i in &masked_rows {
                p[i * t..][..t].fill(R::ZERO);
            }
            if want_qk && s.mode == 3 {
                qk_bh.copy_from_slice(p);
            }
            let pm = Mat::row_major(p, s.q_len, t)?;
            gemm(R::ONE, pm, vm, R::ZERO, y_bh, dv)
        })?;
    if s.rank3 {
        // (b, h, s, dv) -> (b, s, h, dv).
        let mut out = try_vec(y.len(), R::ZERO)?;
        for (bh, block) in y.chunks(y_chunk).enumerate() {
            let (b, h) = (bh / hq, bh % hq);
            for (i, row) in block.chunks(dv.max(1)).enumerate() {
                out[((b * s.q_len + i) * hq + h) * dv..][..dv].copy_from_slice(row);
            }
        }
        y = out;
    }
    Ok([y, present_k, present_v, qk])
}

pub(super) fn eval_attention(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (q, k, v) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    let mask = optional(inputs, 3);
    let (past_k, past_v) = (optional(inputs, 4), optional(inputs, 5));
    let nonpad = optional(inputs, 6);
    if past_k.is_some() != past_v.is_some() {
        return Err(ctx.error("past_key and past_value must be given together"));
    }
    if nonpad.is_some() && past_k.is_some() {
        return Err(ctx.error("nonpad_kv_seqlen cannot be combined with past_key"));
    }
    let spec = Spec::new(
        ctx.node,
        q.shape(),
        k.shape(),
        v.shape(),
        past_k.map(Tensor::shape),
    )?;
    if let Some(pv) = past_v {
        let want = [spec.batch, spec.kv_heads, spec.past_len, spec.v_head];
        if pv.shape() != want {
            return Err(ctx.error(format!("past_value {:?} is not {want:?}", pv.shape())));
        }
    }
    let nonpad = nonpad
        .map(|n| {
            let n = to_i64s(n)?;
            if n.len() != spec.batch {
                return Err(ctx.error(format!(
                    "nonpad_kv_seqlen holds {} values for a batch of {}",
                    n.len(),
                    spec.batch
                )));
            }
            Ok(n)
        })
        .transpose()?;
    let dtype = q.dtype();
    for (t, what) in [(k, "K"), (v, "V")] {
        if t.dtype() != dtype {
            return Err(ctx.error(format!("{what} is {}, Q is {dtype}", t.dtype())));
        }
    }
    let shapes = spec.output_shapes();
    let want_qk = ctx.node.outputs.len() > 3 && !ctx.node.outputs[3].is_empty();
    dispatch_real!(dtype, R => {
        let bias = Bias::<R> {
            spec: &spec,
            mask: mask.map(|m| load_mask::<R>(&spec, m)).transpose()?,
            nonpad,
        };
        let (pk, pv) = (past_k.map(R::load).transpose()?, past_v.map(R::load).transpose()?);
        let past = pk.as_deref().zip(pv.as_deref());
        let outs = attend::<R>(&spec, &R::load(q)?, &R::load(k)?, &R::load(v)?, past, &bias, want_qk)?;
        let mut tensors = Vec::with_capacity(ctx.node.outputs.len());
        for (i, (values, shape)) in outs.into_iter().zip(shapes).enumerate() {
            if i >= ctx.node.outputs.len().max(1) {
                break;
            }
            tensors.push(R::store(dtype, &shape, values)?);
        }
        Ok(tensors)
    }, _ => Err(unsupported_type("Attention", dtype)))
}

pub(super) fn infer_attention(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let elem = ctx.input(0).and_then(|t| t.elem);
    let sizes = |i: usize| input_dims(ctx, i).and_then(known_sizes);
    let (Some(q), Some(k), Some(v)) = (sizes(0), sizes(1), sizes(2)) else {
        return Ok(vec![tensor_type(elem, None); ctx.node.outputs.len()]);
    };
    let past = if ctx.node.inputs.get(4).is_some_and(|n| !n.is_empty()) {
        match sizes(4) {
            Some(p) => Some(p),
            None => return Ok(vec![tensor_type(elem, None); ctx.node.outputs.len()]),
        }
    } else {
        None
    };
    let spec = Spec::new(ctx.node, &q, &k, &v, past.as_deref())?;
    Ok(spec
        .output_shapes()
        .into_iter()
        .take(ctx.node.outputs.len())
        .map(|s| {
            tensor_type(
                elem,
                Some(s.into_iter().map(|d| Dim::Known(d as i64)).collect()),
            )
        })
        .collect())
}

/// `FlexAttention` (`ai.onnx.preview`, opset 1): attention on 4-D `Q`, `K`, `V` whose scores and
/// probabilities may be rewritten by the `score_mod` and `prob_mod` subgraphs, each called once on
/// the whole `(B, Hq, L, S)` tensor in the softmax precision (float unless the input is double or
/// `softmax_precision` names float16 or bfloat16).
pub(super) fn eval_flex_attention(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let (q, k, v) = (
        required(inputs, 0)?,
        required(inputs, 1)?,
        required(inputs, 2)?,
    );
    if q.rank() != 4 {
        return Err(ctx.error(format!("Q {:?} is not 4-D", q.shape())));
    }
    let spec = Spec::new(ctx.node, q.shape(), k.shape(), v.shape(), None)?;
    let dtype = q.dtype();
    for (t, what) in [(k, "K"), (v, "V")] {
        if t.dtype() != dtype {
            return Err(ctx.error(format!("{what} is {}, Q is {dtype}", t.dtype())));
        }
    }
    let compute = match (dtype, ctx.node.attr_int("softmax_precision", 0)?) {
        (DataType::Double, _) => DataType::Double,
        (_, p) => match DataType::from_onnx(p as i32) {
            Some(d @ (DataType::Float16 | DataType::Bfloat16)) => d,
            _ => DataType::Float,
        },
    };
    let modifier = |name: &str| {
        ctx.node
            .attr(name)
            .map(|_| ctx.node.attr_graph(name))
            .transpose()
    };
    let (score_mod, prob_mod) = (modifier("score_mod")?, modifier("prob_mod")?);
    let (hq, group, l, t) = (
        spec.q_heads,
        spec.q_heads / spec.kv_heads,
        spec.q_len,
        spec.total(),
    );
    let (d, dv) = (spec.head, spec.v_head);
    let shape = [spec.batch, hq, l, t];
    let y = dispatch_real!(dtype, R => {
        let (qv, kv, vv) = (R::load(q)?, R::load(k)?, R::load(v)?);
        let mut scores = try_vec(spec.batch * hq * l * t, R::ZERO)?;
        let pairs = spec.batch * hq;
        let scores_at = scores.par_chunks_mut((l * t).max(1)).enumerate();
        let scores_at = scores_at.with_min_len(crate::par::min_len(pairs, &[l, t, d]));
        scores_at.try_for_each(|(bh, out)| {
            let kvh = bh / hq * spec.kv_heads + bh % hq / group;
            let qm = Mat::row_major(&qv[bh * l * d..][..l * d], l, d)?;
            let km = Mat::row_major(&kv[kvh * t * d..][..t * d], t, d)?;
            gemm(R::from_f64(spec.scale), qm, km.t(), R::ZERO, out, t)
        })?;
        let run_mod = |graph: &crate::ir::Graph, values: Vec<R>| -> Result<Vec<R>> {
            let input = R::store(compute, &shape, values)?;
            let out = ctx.run_subgraph(graph, vec![input])?;
            match out.as_slice() {
                [o] if o.shape() == shape => Ok(R::load(o)?.into_owned()),
                _ => Err(ctx.error("a modifier subgraph must return one tensor of its input's shape")),
            }
        };
        if let Some(g) = score_mod {
            scores = run_mod(g, scores)?;
        }
        let mut probs = try_vec(scores.len(), MaybeUninit::<R>::uninit())?;
        let mut probs = R::softmax_rows(&scores, t, &mut probs).to_vec();
        if let Some(g) = prob_mod {
            probs = run_mod(g, probs)?;
        }
        let mut y = try_vec(spec.batch * hq * l * dv, R::ZERO)?;
        let y_at = y.par_chunks_mut((l * dv).max(1)).enumerate();
        let y_at = y_at.with_min_len(crate::par::min_len(pairs, &[l, t, dv]));
        y_at.try_for_each(|(bh, out)| {
            let kvh = bh / hq * spec.kv_heads + bh % hq / group;
            let pm = Mat::row_major(&probs[bh * l * t..][..l * t], l, t)?;
            let vm = Mat::row_major(&vv[kvh * t * dv..][..t * dv], t, dv)?;
            gemm(R::ONE, pm, vm, R::ZERO, out, dv)
        })?;
        R::store(dtype, &[spec.batch, hq, l, dv], y)?
    }, _ => return Err(unsupported_type("FlexAttention", dtype)));
    Ok(vec![y])
}

pub(super) fn infer_flex_attention(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let mut outs = infer_attention(ctx)?;
    outs.truncate(1);
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;

    use super::*;

    fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DataType::Float, shape, v).unwrap()
    }

    #[test]
    fn one_query_attends_by_its_scores() {
        // Q = [1, 0], keys [1, 0] and [0, 1], scale 1: weights softmax([1, 0]).
        let q = f32s(&[1, 1, 1, 2], vec![1.0, 0.0]);
        let k = f32s(&[1, 1, 2, 2], vec![1.0, 0.0, 0.0, 1.0]);
        let v = f32s(&[1, 1, 2, 1], vec![10.0, 20.0]);
        let node = Node::new("Attention", "a", ["q", "k", "v"], ["y"])
            .with_attr("scale", AttrValue::Float(1.0));
        let y = eval_node(&node, 23, &[Some(&q), Some(&k), Some(&v)]).unwrap();
        let w = 1.0 / (1.0 + (-1.0f32).exp());
        let want = 10.0 * w + 20.0 * (1.0 - w);
        assert!((y[0].as_slice::<f32>().unwrap()[0] - want).abs() < 1e-4);
    }

    #[test]
    fn a_fully_masked_row_is_zero_and_causal_masks_the_future() {
        let q = f32s(&[1, 1, 2, 1], vec![1.0, 1.0]);
        let k = f32s(&[1, 1, 2, 1], vec![1.0, 1.0]);
        let v = f32s(&[1, 1, 2, 1], vec![1.0, 3.0]);
        let mask = Tensor::from_vec(DataType::Bool, &[2, 2], vec![0u8, 0, 1, 1]).unwrap();
        let node = Node::new("Attention", "a", ["q", "k", "v", "m"], ["y"]);
        let y = eval_node(&node, 23, &[Some(&q), Some(&k), Some(&v), Some(&mask)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[0.0, 2.0]);
        let node = Node::new("Attention", "a", ["q", "k", "v"], ["y"])
            .with_attr("is_causal", AttrValue::Int(1));
        let y = eval_node(&node, 23, &[Some(&q), Some(&k), Some(&v)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1.0, 2.0]);
    }

    #[test]
    fn three_d_inputs_need_head_counts() {
        let q = f32s(&[1, 1, 2], vec![1.0, 0.0]);
        let node = Node::new("Attention", "a", ["q", "k", "v"], ["y"]);
        let err = eval_node(&node, 23, &[Some(&q), Some(&q), Some(&q)]).unwrap_err();
        assert!(err.to_string().contains("q_num_heads"), "{err}");
    }
}
