//! The string operators: `StringConcat` (opset 20), `StringSplit` (20), `StringNormalizer` (10)
//! `RegexFullMatch` (20) and `TfIdfVectorizer` (9).
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__StringConcat.html>,
//! <https://onnx.ai/onnx/operators/onnx__StringSplit.html>,
//! <https://onnx.ai/onnx/operators/onnx__StringNormalizer.html>,
//! <https://onnx.ai/onnx/operators/onnx__RegexFullMatch.html>.
//!
//! Strings are UTF-8. `StringConcat` broadcasts. `StringSplit` splits at `delimiter` (or, when it
//! is empty or absent, at runs of whitespace, ignoring leading and trailing whitespace), at most
//! `maxsplit` times, and pads every row with empty strings to the longest. `StringNormalizer`
//! drops the elements equal to a stop word (ignoring case unless `is_case_sensitive`), then
//! changes case; an input that loses every element gives one empty string. `RegexFullMatch`
//! matches RE2 syntax (the `regex` crate) against whole strings. `TfIdfVectorizer` counts the
//! n-grams of `pool_int64s` / `pool_strings` (sizes `min_gram_length..=max_gram_length`, items
//! up to `max_skip_count` apart; unigrams once) in each row and weighs the counts (`TF`, `IDF`,
//! `TFIDF`).

use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::ops::util::{broadcast_offsets, broadcast_shapes, required};
use crate::ops::{EvalCtx, InferCtx, OpDef};
use crate::tensor::{try_with_capacity, Tensor};
use crate::DataType;

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("StringConcat", 20, 2..=2, 1..=1, eval_concat).with_infer(infer_concat),
    OpDef::new("StringSplit", 20, 1..=1, 2..=2, eval_split).with_infer(infer_split),
    OpDef::new("StringNormalizer", 10, 1..=1, 1..=1, eval_normalizer).with_infer(infer_normalizer),
    OpDef::new("RegexFullMatch", 20, 1..=1, 1..=1, eval_regex).with_infer(infer_regex),
    OpDef::new("TfIdfVectorizer", 9, 1..=1, 1..=1, eval_tfidf).with_infer(infer_tfidf),
];

/// The strings of `t` as UTF-8 text.
fn texts(t: &Tensor) -> Result<Vec<&str>> {
    t.as_strings()?
        .iter()
        .map(|s| std::str::from_utf8(s).map_err(|_| Error::Eval("a string is not UTF-8".into())))
        .collect()
}

fn strings(shape: &[usize], values: Vec<Vec<u8>>) -> Result<Tensor> {
    Ok(Tensor::from_strings(shape, values)?)
}

fn eval_concat(_ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let (x, y) = (required(inputs, 0)?, required(inputs, 1)?);
    let shape = broadcast_shapes(&[x.shape(), y.shape()])?;
    let (xs, ys) = (x.as_strings()?, y.as_strings()?);
    let (xo, yo) = (
        broadcast_offsets(x.shape(), &shape),
        broadcast_offsets(y.shape(), &shape),
    );
    let mut out = try_with_capacity(xo.len())?;
    for (&i, &j) in xo.iter().zip(&yo) {
        let mut s = xs[i].clone();
        s.extend_from_slice(&ys[j]);
        out.push(s);
    }
    Ok(vec![strings(&shape, out)?])
}

/// The pieces of `s` split at `sep` (whitespace runs when `None`), at most `max` splits.
fn split<'s>(s: &'s str, sep: Option<&str>, max: Option<usize>) -> Vec<&'s str> {
    match sep {
        Some(sep) => match max {
            Some(m) => s.splitn(m + 1, sep).collect(),
            None => s.split(sep).collect(),
        },
        None => {
            let mut parts = Vec::new();
            let mut rest = s.trim_start();
            while !rest.is_empty() {
                if max.is_some_and(|m| parts.len() == m) {
                    parts.push(rest);
                    break;
                }
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                parts.push(&rest[..end]);
                rest = rest[end..].trim_start();
            }
            parts
        }
    }
}

fn eval_split(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let sep = ctx.node.attr_string("delimiter")?.filter(|d| !d.is_empty());
    let max = match ctx.node.attr("maxsplit") {
        Some(_) => Some(
            usize::try_from(ctx.node.attr_int("maxsplit", 0)?)
                .map_err(|_| ctx.error("maxsplit is negative"))?,
        ),
        None => None,
    };
    let pieces: Vec<Vec<&str>> = texts(x)?.into_iter().map(|s| split(s, sep, max)).collect();
    let width = pieces.iter().map(Vec::len).max().unwrap_or(0);
    let mut shape = x.shape().to_vec();
    shape.push(width);
    let mut out = try_with_capacity(pieces.len().saturating_mul(width))?;
    for p in &pieces {
        out.extend(p.iter().map(|s| s.as_bytes().to_vec()));
        out.extend(std::iter::repeat_n(Vec::new(), width - p.len()));
    }
    let counts: Vec<i64> = pieces.iter().map(|p| p.len() as i64).collect();
    Ok(vec![
        strings(&shape, out)?,
        Tensor::from_vec(DataType::Int64, x.shape(), counts)?,
    ])
}

fn eval_normalizer(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let shape = x.shape();
    let two_d = match shape {
        [_] => false,
        [1, _] => true,
        _ => return Err(ctx.error(format!("X {shape:?} is not [C] or [1, C]"))),
    };
    let case = ctx
        .node
        .attr_string("case_change_action")?
        .unwrap_or("NONE");
    if !matches!(case, "NONE" | "LOWER" | "UPPER") {
        return Err(ctx.error(format!(
            "case_change_action '{case}' is not NONE, LOWER or UPPER"
        )));
    }
    let sensitive = ctx.node.attr_int("is_case_sensitive", 0)? != 0;
    let stops: Vec<String> = match ctx.node.attr("stopwords") {
        Some(crate::ir::AttrValue::Strings(s)) => s
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect(),
        _ => Vec::new(),
    };
    let is_stop = |w: &str| {
        stops.iter().any(|s| {
            if sensitive {
                s == w
            } else {
                s.to_lowercase() == w.to_lowercase()
            }
        })
    };
    let mut out: Vec<Vec<u8>> = texts(x)?
        .into_iter()
        .filter(|w| !is_stop(w))
        .map(|w| match case {
            "LOWER" => w.to_lowercase(),
            "UPPER" => w.to_uppercase(),
            _ => w.to_owned(),
        })
        .map(String::into_bytes)
        .collect();
    if out.is_empty() {
        out.push(Vec::new());
    }
    let n = out.len();
    let out_shape: Vec<usize> = if two_d { vec![1, n] } else { vec![n] };
    Ok(vec![strings(&out_shape, out)?])
}

fn eval_regex(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let pattern = ctx.node.attr_string("pattern")?.unwrap_or("");
    let re = regex::Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| ctx.error(format!("pattern '{pattern}' is not a valid regex: {e}")))?;
    let matches: Vec<u8> = texts(x)?
        .into_iter()
        .map(|s| u8::from(re.is_match(s)))
        .collect();
    Ok(vec![Tensor::from_vec(DataType::Bool, x.shape(), matches)?])
}

fn infer_regex(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims: Option<Vec<Dim>> = ctx
        .input(0)
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dims.clone());
    Ok(vec![TensorType {
        elem: Some(DataType::Bool),
        shape: dims.map(crate::ir::Shape::new),
    }])
}

/// The dims of input `i`, when its rank is known.
fn dims_of<'a>(ctx: &'a InferCtx<'_>, i: usize) -> Option<&'a [Dim]> {
    ctx.input(i)
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dims.as_slice())
}

fn typed(elem: DataType, dims: Option<Vec<Dim>>) -> TensorType {
    TensorType {
        elem: Some(elem),
        shape: dims.map(crate::ir::Shape::new),
    }
}

/// The broadcast of the two inputs' dims.
fn infer_concat(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = match (dims_of(ctx, 0), dims_of(ctx, 1)) {
        (Some(a), Some(b)) => {
            let rank = a.len().max(b.len());
            let at = |d: &[Dim], i: usize| -> Dim {
                (i + d.len())
                    .checked_sub(rank)
                    .map_or(Dim::Known(1), |k| d[k].clone())
            };
            Some(
                (0..rank)
                    .map(|i| crate::ir::broadcast_dim(&at(a, i), &at(b, i)))
                    .collect(),
            )
        }
        _ => None,
    };
    Ok(vec![typed(DataType::String, dims)])
}

/// The pieces: the input's dims and one more of unknown width; the counts: the input's dims.
fn infer_split(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let dims = dims_of(ctx, 0).map(<[Dim]>::to_vec);
    let pieces = dims.clone().map(|mut d| {
        d.push(Dim::Unknown);
        d
    });
    Ok(vec![
        typed(DataType::String, pieces),
        typed(DataType::Int64, dims),
    ])
}

/// `[C']` or `[1, C']`: `C' = C` when no stop word can drop an element (and `C > 0`; an empty
/// input gives one empty string), else unknown.
fn infer_normalizer(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let keeps = ctx.node.attr("stopwords").is_none();
    let width = |c: &Dim| match c.known() {
        Some(c) if keeps && c > 0 => Dim::Known(c),
        _ => Dim::Unknown,
    };
    let dims = match dims_of(ctx, 0) {
        Some([c]) => Some(vec![width(c)]),
        Some([one, c]) => Some(vec![one.clone(), width(c)]),
        _ => None,
    };
    Ok(vec![typed(DataType::String, dims)])
}

/// Float counts: `[W]` for a scalar or 1-D input, `[B, W]` for `[B, C]`, with `W` one past the
/// largest of `ngram_indexes`.
fn infer_tfidf(ctx: &InferCtx<'_>) -> Result<Vec<TensorType>> {
    let indexes = ctx.node.attr_ints("ngram_indexes")?.unwrap_or(&[]);
    let width = Dim::Known(indexes.iter().copied().max().map_or(0, |m| m.max(-1) + 1));
    let dims = match dims_of(ctx, 0) {
        Some([] | [_]) => Some(vec![width]),
        Some([b, _]) => Some(vec![b.clone(), width]),
        _ => None,
    };
    Ok(vec![typed(DataType::Float, dims)])
}

/// One item of a `TfIdfVectorizer` row or pool.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Token {
    Int(i64),
    Text(Vec<u8>),
}

fn eval_tfidf(ctx: &EvalCtx<'_>, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    use std::collections::HashMap;
    let x = required(inputs, 0)?;
    let node = ctx.node;
    let int_attr = |name: &str| -> Result<usize> {
        usize::try_from(node.attr_int(name, 0)?)
            .map_err(|_| ctx.error(format!("{name} is negative")))
    };
    let (min_n, max_n, max_skip) = (
        int_attr("min_gram_length")?,
        int_attr("max_gram_length")?,
        int_attr("max_skip_count")?,
    );
    let mode = node.attr_string("mode")?.unwrap_or("TF");
    if !matches!(mode, "TF" | "IDF" | "TFIDF") || min_n == 0 || min_n > max_n {
        return Err(ctx.error(format!(
            "mode '{mode}' or gram lengths {min_n}..{max_n} are not valid"
        )));
    }
    let counts = node.attr_ints("ngram_counts")?.unwrap_or(&[]);
    let indexes = node.attr_ints("ngram_indexes")?.unwrap_or(&[]);
    let weights: Vec<f32> = match node.attr("weights") {
        Some(crate::ir::AttrValue::Floats(w)) => w.clone(),
        _ => Vec::new(),
    };
    let pool: Vec<Token> = match (node.attr_ints("pool_int64s")?, node.attr("pool_strings")) {
        (Some(p), _) => p.iter().map(|&v| Token::Int(v)).collect(),
        (None, Some(crate::ir::AttrValue::Strings(p))) => {
            p.iter().cloned().map(Token::Text).collect()
        }
        _ => return Err(ctx.error("pool_int64s or pool_strings is required")),
    };
    let width = indexes.iter().copied().max().map_or(0, |m| m.max(-1) + 1) as usize;
    // Every pooled n-gram of a size in range, mapped to its output column.
    let mut grams: HashMap<Vec<Token>, usize> = HashMap::new();
    let mut id = 0usize;
    for (i, &start) in counts.iter().enumerate() {
        let n = i + 1;
        let end = counts.get(i + 1).map_or(pool.len() as i64, |&e| e);
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
            return Err(ctx.error("ngram_counts holds a negative offset"));
        };
        if start > end || end > pool.len() {
            return Err(ctx.error("ngram_counts does not fit the pool"));
        }
        for gram in pool[start..end].chunks_exact(n) {
            if (min_n..=max_n).contains(&n) {
                let column = indexes
                    .get(id)
                    .and_then(|&c| usize::try_from(c).ok())
                    .ok_or_else(|| ctx.error(format!("n-gram {id} has no output column")))?;
                grams.entry(gram.to_vec()).or_insert(column);
            }
            id += 1;
        }
    }
    let tokens: Vec<Token> = if x.dtype() == DataType::String {
        x.as_strings()?.iter().cloned().map(Token::Text).collect()
    } else {
        crate::ops::util::to_i64s(x)?
            .into_iter()
            .map(Token::Int)
            .collect()
    };
    let (rows, row_len, out_shape) = match *x.shape() {
        [] => (1, 1, vec![width]),
        [c] => (1, c, vec![width]),
        [b, c] => (b, c, vec![b, width]),
        _ => return Err(ctx.error(format!("X {:?} is not [C] or [B, C]", x.shape()))),
    };
    let cells = rows
        .checked_mul(width)
        .ok_or_else(|| ctx.error("the output is too large"))?;
    let mut freq = crate::tensor::try_vec(cells, 0u32)?;
    let mut gram = Vec::new();
    for r in 0..rows {
        let row = &tokens[r * row_len..][..row_len];
        // A skip as long as the row leaves only unigrams, counted at skip 1.
        for skip in 1..=max_skip.saturating_add(1).min(row_len.max(1)) {
            for start in 0..row_len {
                let first_n = if skip == 1 { min_n } else { min_n.max(2) };
                for n in first_n..=max_n {
                    let last = skip.saturating_mul(n - 1).saturating_add(start);
                    if last >= row_len {
                        break;
                    }
                    gram.clear();
                    gram.extend((0..n).map(|k| row[start + k * skip].clone()));
                    if let Some(&col) = grams.get(&gram) {
                        freq[r * width + col] += 1;
                    }
                }
            }
        }
    }
    let y: Vec<f32> = freq
        .iter()
        .enumerate()
        .map(|(p, &f)| {
            let w = weights.get(p % width.max(1)).copied();
            match mode {
                "TF" => f as f32,
                "IDF" => {
                    if f > 0 {
                        w.unwrap_or(1.0)
                    } else {
                        0.0
                    }
                }
                _ => w.unwrap_or(1.0) * f as f32,
            }
        })
        .collect();
    Ok(vec![Tensor::from_vec(DataType::Float, &out_shape, y)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::ops::{eval_node, infer_node};

    fn texts_tensor(shape: &[usize], items: &[&str]) -> Tensor {
        strings(shape, items.iter().map(|s| s.as_bytes().to_vec()).collect()).unwrap()
    }

    /// Each shape function gives the dims it promises (`None`: unknown), and they are the
    /// kernel's where known.
    #[test]
    fn shape_functions_agree_with_the_kernels() {
        let row = texts_tensor(&[3], &["a b", "c", "the end"]);
        let col = texts_tensor(&[2, 1], &["x", "y"]);
        let batch = Tensor::from_vec(DataType::Int64, &[2, 3], vec![1i64, 2, 1, 2, 2, 3]).unwrap();
        let concat = Node::new("StringConcat", "c", ["a", "b"], ["y"]);
        let split = Node::new("StringSplit", "s", ["a"], ["y", "n"]);
        let normalize = Node::new("StringNormalizer", "n", ["a"], ["y"]);
        let stop = Node::new("StringNormalizer", "n", ["a"], ["y"])
            .with_attr("stopwords", AttrValue::Strings(vec![b"c".to_vec()]));
        let tfidf = Node::new("TfIdfVectorizer", "t", ["a"], ["y"])
            .with_attr("mode", AttrValue::String(b"TF".to_vec()))
            .with_attr("min_gram_length", AttrValue::Int(1))
            .with_attr("max_gram_length", AttrValue::Int(1))
            .with_attr("max_skip_count", AttrValue::Int(0))
            .with_attr("pool_int64s", AttrValue::Ints(vec![2, 3]))
            .with_attr("ngrams_counts", AttrValue::Ints(vec![0]))
            .with_attr("ngram_indexes", AttrValue::Ints(vec![0, 1]));
        type Case<'a> = (&'a Node, Vec<&'a Tensor>, &'a [Option<i64>]);
        let cases: [Case<'_>; 5] = [
            (&concat, vec![&row, &col], &[Some(2), Some(3)]),
            (&split, vec![&row], &[Some(3), None]),
            (&normalize, vec![&row], &[Some(3)]),
            (&stop, vec![&row], &[None]),
            (&tfidf, vec![&batch], &[Some(2), Some(2)]),
        ];
        for (node, inputs, want) in cases {
            let inputs: Vec<Option<&Tensor>> = inputs.into_iter().map(Some).collect();
            let types: Vec<Option<TensorType>> = inputs
                .iter()
                .flatten()
                .map(|t| {
                    let dims = t.shape().iter().map(|&d| Dim::Known(d as i64)).collect();
                    Some(TensorType::new(t.dtype(), dims))
                })
                .collect();
            let inferred = infer_node(node, 20, &types, &inputs);
            let out = eval_node(node, 20, &inputs).unwrap();
            let dims = &inferred[0].shape.as_ref().unwrap().dims;
            let got: Vec<Option<i64>> = dims.iter().map(Dim::known).collect();
            assert_eq!(got, want, "{}", node.op_type);
            for (d, &actual) in dims.iter().zip(out[0].shape()) {
                assert!(
                    d.known().is_none_or(|d| d == actual as i64),
                    "{}",
                    node.op_type
                );
            }
            assert_eq!(inferred[0].elem, Some(out[0].dtype()), "{}", node.op_type);
        }
    }

    #[test]
    fn whitespace_splitting_follows_python() {
        assert_eq!(split("  a  b c ", None, None), ["a", "b", "c"]);
        assert_eq!(
            split("the quick brown fox", None, Some(2)),
            ["the", "quick", "brown fox"]
        );
        assert_eq!(split("o-n--x-", Some("-"), None), ["o", "n", "", "x", ""]);
        assert!(split("   ", None, None).is_empty());
    }
}
