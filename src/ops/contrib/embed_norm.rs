//! `com.microsoft.EmbedLayerNormalization` (opset 1): the embedding lookups of a BERT-style
//! encoder, summed and layer-normalised, with the mask reduced to a mask index.
//!
//! Spec: onnxruntime `docs/ContribOperators.md`, section
//! `com.microsoft.EmbedLayerNormalization`.
//!
//! Inputs: `input_ids` `(B, S)`, `segment_ids` (optional), `word_embedding` `(V, H)`,
//! `position_embedding` `(P, H)`, `segment_embedding` (optional), `gamma`, `beta` `(H)`, `mask`
//! `(B, S)` (optional) and `position_ids` `(B, S)` or `(1, S)` (optional, `0..S` by default).
//! Outputs: the normalised sum `(B, S, H)`, the mask index `(B)` int32 (the number of non-zero
//! mask entries of each sequence; 0 without a mask) and optionally the sum before
//! normalisation. An id outside its table is an error naming the node.

use crate::error::Result;
use crate::tensor::{try_vec, Tensor};
use crate::DataType;

use super::super::attrs::Epsilon12;
use super::super::util::{optional, required, to_i64s};
use super::super::EvalCtx;
use super::activations::floats;
use super::skip_norm::normalize;

/// The rows of `table` (`(rows, width)`) selected by `ids`, added into `sum`.
fn add_rows(
    ctx: &EvalCtx<'_>,
    sum: &mut [f32],
    table: &Tensor,
    ids: &[i64],
    what: &str,
) -> Result<()> {
    let values = floats(table, "EmbedLayerNormalization")?;
    let width = match *table.shape() {
        [_, w] => w,
        _ => return Err(ctx.error(format!("{what} {:?} is not 2-D", table.shape()))),
    };
    let rows = table.shape()[0];
    for (row, &id) in sum.chunks_mut(width.max(1)).zip(ids) {
        let r = usize::try_from(id)
            .ok()
            .filter(|&r| r < rows)
            .ok_or_else(|| ctx.error(format!("{what}: id {id} is outside its {rows} rows")))?;
        for (o, &v) in row.iter_mut().zip(&values[r * width..][..width]) {
            *o += v;
        }
    }
    Ok(())
}

pub(in crate::ops) fn eval_embed_layer_norm(
    ctx: &EvalCtx<'_>,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let ids = required(inputs, 0)?;
    let (word, pos) = (required(inputs, 2)?, required(inputs, 3)?);
    let (gamma, beta) = (required(inputs, 5)?, required(inputs, 6)?);
    let [b, s] = *ids.shape() else {
        return Err(ctx.error(format!("input_ids {:?} is not 2-D", ids.shape())));
    };
    let hidden = word.shape().get(1).copied().unwrap_or(0);
    for (t, what) in [
        (pos, "position_embedding"),
        (gamma, "gamma"),
        (beta, "beta"),
    ] {
        if t.shape().last() != Some(&hidden) {
            return Err(ctx.error(format!(
                "{what} {:?} does not end in the hidden size {hidden}",
                t.shape()
            )));
        }
    }
    let (g, bt) = (
        floats(gamma, "EmbedLayerNormalization")?,
        floats(beta, "EmbedLayerNormalization")?,
    );
    if g.len() != hidden || bt.len() != hidden {
        return Err(ctx.error("gamma and beta must hold one value per hidden feature"));
    }
    let tokens = b * s;
    let len = tokens
        .checked_mul(hidden)
        .ok_or_else(|| ctx.error(format!("{tokens} tokens of {hidden} features overflow")))?;
    let mut sum = try_vec(len, 0.0f32)?;
    let word_ids = to_i64s(ids)?;
    add_rows(ctx, &mut sum, word, &word_ids, "word_embedding")?;
    let positions: Vec<i64> = match optional(inputs, 8) {
        Some(p) => {
            let p = to_i64s(p)?;
            match p.len() {
                n if n == tokens => p,
                n if n == s => (0..tokens).map(|k| p[k % s]).collect(),
                _ => return Err(ctx.error("position_ids is not (B, S) or (1, S)")),
            }
        }
        None => (0..tokens).map(|k| (k % s.max(1)) as i64).collect(),
    };
    add_rows(ctx, &mut sum, pos, &positions, "position_embedding")?;
    if let (Some(seg), Some(table)) = (optional(inputs, 1), optional(inputs, 4)) {
        let seg = to_i64s(seg)?;
        if seg.len() != tokens {
            return Err(ctx.error("segment_ids is not (B, S)"));
        }
        add_rows(ctx, &mut sum, table, &seg, "segment_embedding")?;
    }
    let eps = ctx.attrs::<Epsilon12>()?.0;
    let mut y = try_vec(sum.len(), 0.0f32)?;
    normalize(&sum, hidden, (g, Some(bt)), eps, false, &mut y)?;
    let mut index = try_vec(b, 0i32)?;
    if let Some(mask) = optional(inputs, 7) {
        let m = to_i64s(mask)?;
        if m.len() != tokens {
            return Err(ctx.error(format!("mask {:?} is not ({b}, {s})", mask.shape())));
        }
        for (o, row) in index.iter_mut().zip(m.chunks(s.max(1))) {
            *o = row.iter().filter(|&&v| v != 0).count() as i32;
        }
    }
    let mut out = vec![
        Tensor::from_vec(DataType::Float, &[b, s, hidden], y)?,
        Tensor::from_vec(DataType::Int32, &[b], index)?,
    ];
    if ctx.node.outputs.len() > 2 {
        out.push(Tensor::from_vec(DataType::Float, &[b, s, hidden], sum)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::ir::{AttrValue, Node};
    use crate::ops::eval_node;
    use crate::{DataType, Tensor};

    #[test]
    fn embed_layer_norm_counts_the_mask_and_rejects_an_id_outside_the_table() {
        let ids = Tensor::from_vec(DataType::Int32, &[1, 2], vec![1i32, 0]).unwrap();
        let word = Tensor::from_vec(DataType::Float, &[2, 2], vec![0.0f32, 2.0, 4.0, 0.0]).unwrap();
        let pos = Tensor::from_vec(DataType::Float, &[2, 2], vec![0.0f32; 4]).unwrap();
        let g = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 1.0]).unwrap();
        let b = Tensor::from_vec(DataType::Float, &[2], vec![0.0f32, 0.0]).unwrap();
        let mask = Tensor::from_vec(DataType::Int32, &[1, 2], vec![1i32, 0]).unwrap();
        let n = Node::new(
            "EmbedLayerNormalization",
            "e",
            ["i", "", "w", "p", "", "g", "b", "m"],
            ["y", "idx"],
        )
        .with_domain("com.microsoft")
        .with_attr("epsilon", AttrValue::Float(0.0));
        let inputs = [
            Some(&ids),
            None,
            Some(&word),
            Some(&pos),
            None,
            Some(&g),
            Some(&b),
            Some(&mask),
        ];
        let y = eval_node(&n, 1, &inputs).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1.0, -1.0, -1.0, 1.0]);
        assert_eq!(y[1].as_slice::<i32>().unwrap(), &[1]);
        let bad = Tensor::from_vec(DataType::Int32, &[1, 2], vec![2i32, 0]).unwrap();
        let mut inputs = inputs;
        inputs[0] = Some(&bad);
        let err = eval_node(&n, 1, &inputs).unwrap_err().to_string();
        assert!(err.contains("id 2"), "{err}");
    }
}
