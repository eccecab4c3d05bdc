//! Verification support: inputs drawn from a model's declared types, and bit-for-bit comparison of
//! two runs' outputs.
//!
//! A rewrite only moves data, so the rewritten model must produce exactly the bits the original
//! does; [`compare`] reports, per output, whether the bits agree and, if not, how many elements
//! differ and by how much.
//!
//! Random inputs are drawn deterministically from a seed, by rules that make them inputs the model
//! can take (module `inputs`, [`draw_inputs`]): symbolic dims sized as the graph requires, integer
//! inputs that reach gather indices drawn within the indexed dimension, and larger sizes searched
//! when the model fails on the first draw ([`draw_runnable`]). Where an `If` condition compares
//! a graph input with a constant, [`prove_branches`] runs a draw for each branch the constant
//! names and says which branches ran.
//!
//! [`prove`] is the whole proof of a rewrite (checks, draw, size search, budget, comparison)
//! that the command line and the Python package both call (module `prove`).

mod branches;
mod inputs;
mod prove;

use std::collections::{HashMap, HashSet};

use serde::Serialize;

pub use branches::{branch_candidates, prove_branches, BranchProof, IfBranches};
pub use inputs::{
    draw_inputs, draw_runnable, random_inputs, Attempt, DimChoice, DrawOptions, Drawn, InputChoice,
};
pub use prove::{prove, prove_rewrite, Proof};

use crate::ir::{SequenceOfMaps, Value};
use crate::tensor::Tensor;
use crate::DataType;

/// A small deterministic generator (SplitMix64): inputs only need to be reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `[low, high)`; `low` when the range is empty.
    pub fn range(&mut self, low: i64, high: i64) -> i64 {
        if high <= low {
            return low;
        }
        let span = (high - low) as u64;
        low + (self.next_u64() % span) as i64
    }

    /// A float in `[-1, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// Named inputs (tensors, and sequences or optionals given as they are), in the order a run
/// takes them.
pub type Feeds = Vec<(String, Value)>;

/// Inputs on which a symbolic dim that several inputs declare takes different sizes: the first
/// input that declares it has it at least 2 (a size of 1 is repeated to 2), the others have it
/// cut to 1, with the names of the dims so split; `None` when no dim is shared or the graph has
/// no operator whose meaning ties sizes across its operands (`GatherElements`, `GatherND`).
/// Repeating and cutting keep every value one the draw made, so indices stay in range. Inputs
/// that are not tensors are passed on as they are.
///
/// A shared `dim_param` is a declaration that runtimes do not enforce: onnxruntime and the
/// interpreter run a feed with `H = 3` in one input and `H = 1` in another. A rewrite must keep
/// the original's meaning (its result or its error) on such feeds too, so a proof runs them
/// beside the consistent draw.
///
/// # Example
/// ```
/// use multigather::ir::{Dim, Graph, Node, Type, ValueInfo};
/// use multigather::{DataType, Tensor};
/// let h = || Dim::Symbolic("H".into());
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(5), h()])));
/// g.inputs.push(ValueInfo::new("i", Type::tensor(DataType::Int64, vec![Dim::Known(2), h()])));
/// g.add_node(Node::new("GatherElements", "pick", ["x", "i"], ["y"]));
/// let feeds = vec![
///     ("x".to_string(), Tensor::zeros(DataType::Float, &[5, 3])?.into()),
///     ("i".to_string(), Tensor::zeros(DataType::Int64, &[2, 3])?.into()),
/// ];
/// let (apart, split) = multigather::verify::dims_fed_apart(&g, &feeds).unwrap();
/// let shape = |k: usize| apart[k].1.as_tensor().unwrap().shape().to_vec();
/// assert_eq!((shape(0), shape(1)), (vec![5, 3], vec![2, 1]));
/// assert_eq!(split, ["H"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn dims_fed_apart(
    graph: &crate::ir::Graph,
    inputs: &[(String, Value)],
) -> Option<(Feeds, Vec<String>)> {
    let ties = graph.nodes_unordered().any(|n| {
        crate::ir::is_onnx_domain(&n.domain)
            && matches!(n.op_type.as_str(), "GatherElements" | "GatherND")
    });
    if !ties {
        return None;
    }
    let declared = |name: &str| {
        graph
            .inputs
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.tensor_type())
            .and_then(|t| t.shape.as_ref())
            .map(|s| s.dims.as_slice())
    };
    // Each shared dim: the input (and axis) that declares it first.
    let mut first: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut shared: HashSet<&str> = HashSet::new();
    for (k, (name, value)) in inputs.iter().enumerate() {
        let Some(tensor) = value.as_tensor() else {
            continue;
        };
        let Some(dims) = declared(name).filter(|d| d.len() == tensor.rank()) else {
            continue;
        };
        for (axis, dim) in dims.iter().enumerate() {
            if let crate::ir::Dim::Symbolic(sym) = dim {
                match first.entry(sym) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        shared.insert(sym);
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert((k, axis));
                    }
                }
            }
        }
    }
    let mut split: Vec<String> = Vec::new();
    let mut out = Vec::with_capacity(inputs.len());
    for (k, (name, given)) in inputs.iter().enumerate() {
        let Value::Tensor(tensor) = given else {
            out.push((name.clone(), given.clone()));
            continue;
        };
        let mut value = tensor.clone();
        for (axis, dim) in declared(name).unwrap_or_default().iter().enumerate() {
            let crate::ir::Dim::Symbolic(sym) = dim else {
                continue;
            };
            if !shared.contains(sym.as_str()) || axis >= value.rank() {
                continue;
            }
            let mut shape = value.shape().to_vec();
            if first.get(sym.as_str()) == Some(&(k, axis)) {
                if shape[axis] == 1 {
                    value = repeat_axis(&value, axis, 2).ok()?;
                }
                continue;
            }
            let (at, first_axis) = first[sym.as_str()];
            let first_size = inputs[at].1.as_tensor().map(|t| t.shape()[first_axis]);
            if shape[axis] > 1 || first_size == Some(1) {
                shape[axis] = 1;
                value = value.crop(&shape).ok()?;
                if !split.contains(sym) {
                    split.push(sym.clone());
                }
            }
        }
        out.push((name.clone(), Value::Tensor(value)));
    }
    (!split.is_empty()).then_some((out, split))
}

/// `t` with its dim `axis` (of size 1) repeated to `size`.
fn repeat_axis(t: &Tensor, axis: usize, size: usize) -> crate::Result<Tensor> {
    let mut shape = t.shape().to_vec();
    shape[axis] = size;
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out = Tensor::zeros(t.dtype(), &shape)?;
    for dst in 0..out.len() {
        let outer = dst / (inner * size);
        let src = outer * inner + dst % inner;
        out.copy_element_from(dst, t, src)?;
    }
    Ok(out)
}

/// How one output of two runs compares.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutputComparison {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    /// True when element type, shape and every bit agree.
    pub identical: bool,
    /// Elements whose bits differ (all of them when shapes or types differ).
    pub mismatches: usize,
    /// Largest absolute difference for float outputs (NaN when one side is NaN).
    pub max_abs_diff: Option<f64>,
    /// Set when the element type or shape differ.
    pub problem: Option<String>,
}

/// Compares two runs output by output, bit for bit.
///
/// # Example
/// ```
/// use multigather::{DataType, Tensor};
/// let a = vec![("y".to_string(), Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.0])?)];
/// let b = vec![("y".to_string(), Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.5])?)];
/// let c = multigather::verify::compare(&a, &b);
/// assert!(!c[0].identical);
/// assert_eq!(c[0].mismatches, 1);
/// assert_eq!(c[0].max_abs_diff, Some(0.5));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn compare(
    expected: &[(String, Tensor)],
    actual: &[(String, Tensor)],
) -> Vec<OutputComparison> {
    expected
        .iter()
        .enumerate()
        .map(|(i, (name, want))| {
            let got = actual.get(i).map(|(_, t)| t);
            compare_one(name, want, got)
        })
        .collect()
}

/// Like [`compare`], for outputs as users see them (`Session::run_values`). A sequence is
/// identical to another when both hold as many tensors, of one element type, each identical
/// bit for bit to its counterpart; its comparison's `dtype` is its type
/// (`seq(tensor(float))`), its `shape` `[N]`, and `mismatches` and `max_abs_diff` add up
/// and take the largest over its tensors. An optional is identical to another when both are
/// empty or both hold identical values. A sequence of maps is identical to another when both
/// hold the same keys in the same order and their values agree bit for bit; its comparison's
/// `dtype` is its type (`seq(map(int64, float))`) and its `shape` the `[N, C]` of its values.
///
/// # Example
/// ```
/// use multigather::ir::{MapKeys, Sequence, SequenceOfMaps, Value};
/// use multigather::{DataType, Tensor};
/// let values = Tensor::from_vec(DataType::Float, &[1, 2], vec![0.25f32, 0.75])?;
/// let a = Value::Maps(SequenceOfMaps::new(MapKeys::Int64(vec![4, 7]), values.clone())?);
/// let b = Value::Maps(SequenceOfMaps::new(MapKeys::Int64(vec![4, 8]), values.clone())?);
/// let c = multigather::verify::compare_values(&[("y".into(), a.clone())], &[("y".into(), b)]);
/// assert!(!c[0].identical);
/// assert!(c[0].problem.as_deref().unwrap().contains("keys"));
/// let c = multigather::verify::compare_values(&[("y".into(), a.clone())], &[("y".into(), a)]);
/// assert!(c[0].identical);
/// // Sequences compare tensor by tensor.
/// let other = Tensor::from_vec(DataType::Float, &[1, 2], vec![0.25f32, 0.5])?;
/// let s = Value::Sequence(Sequence::new(None, vec![values.clone(), values.clone()])?);
/// let t = Value::Sequence(Sequence::new(None, vec![values, other])?);
/// let c = multigather::verify::compare_values(&[("s".into(), s)], &[("s".into(), t)]);
/// assert!(!c[0].identical);
/// assert_eq!((c[0].mismatches, c[0].dtype.as_str()), (1, "seq(tensor(float))"));
/// assert!(c[0].problem.as_deref().unwrap().contains("tensor 1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn compare_values(
    expected: &[(String, Value)],
    actual: &[(String, Value)],
) -> Vec<OutputComparison> {
    expected
        .iter()
        .enumerate()
        .map(|(i, (name, want))| compare_value(name, want, actual.get(i).map(|(_, v)| v)))
        .collect()
}

/// Runs `original` and `rewritten` on `feeds` and returns the outputs that differ, each named
/// `y (what)`; a rewritten model that fails where the original runs differs in every output.
/// The original's error when it fails on `feeds` (nothing to compare with).
///
/// # Example
/// ```
/// use multigather::interp::Session;
/// use multigather::ir::{Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::{DataType, Tensor};
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(2)])));
/// g.add_node(Node::new("Relu", "r", ["x"], ["y"]));
/// g.outputs.push(ValueInfo::untyped("y"));
/// let model = Model::new(g, 13);
/// let session = Session::new(&model);
/// let x = Tensor::from_vec(DataType::Float, &[2], vec![-1.0f32, 2.0])?;
/// let differ = multigather::verify::compare_fed(&session, &session, vec![("x".into(), x.into())], "x fed");
/// assert_eq!(differ.ok(), Some(vec![]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn compare_fed(
    original: &crate::interp::Session,
    rewritten: &crate::interp::Session,
    feeds: Feeds,
    what: &str,
) -> crate::Result<Vec<OutputComparison>> {
    let want = original.run_values(feeds.clone())?;
    let differ = match rewritten.run_values(feeds) {
        Ok(got) => compare_values(&want, &got),
        Err(e) => want
            .iter()
            .map(|(name, _)| OutputComparison {
                name: name.clone(),
                dtype: String::new(),
                shape: Vec::new(),
                identical: false,
                mismatches: 0,
                max_abs_diff: None,
                problem: Some(format!(
                    "the rewritten model fails where the original runs: {e}"
                )),
            })
            .collect(),
    };
    Ok(differ
        .into_iter()
        .filter(|c| !c.identical)
        .map(|mut c| {
            c.name = format!("{} ({what})", c.name);
            c
        })
        .collect())
}

/// One output of [`compare_values`].
fn compare_value(name: &str, want: &Value, got: Option<&Value>) -> OutputComparison {
    let differs = |mut c: OutputComparison, got: &Value| {
        c.identical = false;
        c.problem = Some(format!("{} vs {}", want.type_text(), got.type_text()));
        c
    };
    match (want, got) {
        (Value::Tensor(w), Some(Value::Tensor(g))) => compare_one(name, w, Some(g)),
        (Value::Tensor(w), None) => compare_one(name, w, None),
        (Value::Tensor(w), Some(g)) => differs(compare_one(name, w, None), g),
        (Value::Maps(w), got) => {
            let mut c = compare_one(name, w.values(), None);
            c.dtype = w.type_text();
            c.problem = match got {
                None => c.problem,
                Some(Value::Maps(g)) if g.keys() != w.keys() => {
                    Some(format!("keys {} vs {}", keys_text(w), keys_text(g)))
                }
                Some(Value::Maps(g)) => {
                    let dtype = std::mem::take(&mut c.dtype);
                    c = compare_one(name, w.values(), Some(g.values()));
                    c.dtype = dtype;
                    c.problem
                }
                Some(g) => Some(format!("{} vs {}", want.type_text(), g.type_text())),
            };
            c
        }
        (Value::Sequence(w), got) => {
            let mut c = OutputComparison {
                name: name.to_owned(),
                dtype: w.type_text(),
                shape: vec![w.len()],
                identical: false,
                mismatches: w.tensors().iter().map(Tensor::len).sum(),
                max_abs_diff: None,
                problem: None,
            };
            let g = match got {
                None => {
                    c.problem = Some("missing from the second run".into());
                    return c;
                }
                Some(Value::Sequence(g)) => g,
                Some(g) => return differs(c, g),
            };
            let elems_differ = matches!((w.elem(), g.elem()), (Some(a), Some(b)) if a != b);
            if w.len() != g.len() || elems_differ {
                c.problem = Some(format!(
                    "{}[{}] vs {}[{}]",
                    w.type_text(),
                    w.len(),
                    g.type_text(),
                    g.len()
                ));
                return c;
            }
            c.identical = true;
            c.mismatches = 0;
            for (k, (a, b)) in w.tensors().iter().zip(g.tensors()).enumerate() {
                let one = compare_one(name, a, Some(b));
                c.identical &= one.identical;
                c.mismatches += one.mismatches;
                c.max_abs_diff = match (c.max_abs_diff, one.max_abs_diff) {
                    (Some(x), Some(y)) if x.is_nan() || y.is_nan() => Some(f64::NAN),
                    (Some(x), Some(y)) => Some(x.max(y)),
                    (x, y) => x.or(y),
                };
                if c.problem.is_none() && !one.identical {
                    let why = one.problem.unwrap_or_else(|| {
                        format!("{} of {} elements differ", one.mismatches, a.len())
                    });
                    c.problem = Some(format!("tensor {k}: {why}"));
                }
            }
            c
        }
        (Value::Optional(w), got) => {
            let g = match got {
                Some(Value::Optional(g)) => g,
                None => {
                    let mut c = compare_value(name, want, Some(want));
                    c.identical = false;
                    c.problem = Some("missing from the second run".into());
                    return c;
                }
                Some(g) => {
                    let inner = w.as_deref().map(|w| compare_value(name, w, None));
                    let c = inner.unwrap_or_else(|| empty_optional(name));
                    return differs(c, g);
                }
            };
            match (w.as_deref(), g.as_deref()) {
                (None, None) => empty_optional(name),
                (Some(w), Some(g)) => {
                    let mut c = compare_value(name, w, Some(g));
                    c.dtype = format!("optional({})", c.dtype);
                    c
                }
                (Some(w), None) => {
                    let mut c = compare_value(name, w, None);
                    c.dtype = format!("optional({})", c.dtype);
                    c.problem = Some("present vs empty".into());
                    c
                }
                (None, Some(_)) => {
                    let mut c = empty_optional(name);
                    c.identical = false;
                    c.problem = Some("empty vs present".into());
                    c
                }
            }
        }
    }
}

/// The comparison of two empty optionals: identical.
fn empty_optional(name: &str) -> OutputComparison {
    OutputComparison {
        name: name.to_owned(),
        dtype: "optional()".into(),
        shape: Vec::new(),
        identical: true,
        mismatches: 0,
        max_abs_diff: None,
        problem: None,
    }
}

/// The keys of a sequence of maps for messages: `[4, 7]`, `["a", "b"]` (the first 8).
fn keys_text(maps: &SequenceOfMaps) -> String {
    const SHOWN: usize = 8;
    let keys = maps.keys();
    let mut items: Vec<String> = (0..keys.len().min(SHOWN))
        .map(|j| keys.key_text(j))
        .collect();
    if keys.len() > SHOWN {
        items.push("...".into());
    }
    format!("[{}]", items.join(", "))
}

/// Checks an output as users see it against the expected one: tensors by [`close_enough`];
/// sequences must hold as many tensors, each within [`close_enough`] of its counterpart (and of
/// one element type, where both sides know theirs); optionals must both be empty, or hold
/// values that pass; sequences of maps must hold as many maps, the same keys (in any order: a map has none), and
/// for each key a value within the float [`Tolerance`].
///
/// # Example
/// ```
/// use multigather::ir::{MapKeys, SequenceOfMaps, Value};
/// use multigather::verify::close_enough_values;
/// use multigather::{DataType, Tensor};
/// let maps = |keys: Vec<i64>, v: Vec<f32>| -> Result<Value, multigather::Error> {
///     let values = Tensor::from_vec(DataType::Float, &[1, 2], v)?;
///     Ok(Value::Maps(SequenceOfMaps::new(MapKeys::Int64(keys), values)?))
/// };
/// let want = maps(vec![4, 7], vec![0.25, 0.75])?;
/// assert!(close_enough_values(&want, &maps(vec![7, 4], vec![0.75, 0.25])?).is_ok());
/// let err = close_enough_values(&want, &maps(vec![4, 7], vec![0.75, 0.25])?).unwrap_err();
/// assert!(err.contains("map 0, key 4"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn close_enough_values(expected: &Value, actual: &Value) -> std::result::Result<(), String> {
    let (want, got) = match (expected, actual) {
        (Value::Tensor(w), Value::Tensor(g)) => return close_enough(w, g),
        (Value::Maps(w), Value::Maps(g)) => (w, g),
        (Value::Sequence(w), Value::Sequence(g)) => {
            let elems_differ = matches!((w.elem(), g.elem()), (Some(a), Some(b)) if a != b);
            if w.len() != g.len() || elems_differ {
                return Err(format!(
                    "expected {}[{}], got {}[{}]",
                    w.type_text(),
                    w.len(),
                    g.type_text(),
                    g.len()
                ));
            }
            for (k, (a, b)) in w.tensors().iter().zip(g.tensors()).enumerate() {
                close_enough(a, b).map_err(|why| format!("tensor {k}: {why}"))?;
            }
            return Ok(());
        }
        (Value::Optional(w), Value::Optional(g)) => {
            return match (w.as_deref(), g.as_deref()) {
                (None, None) => Ok(()),
                (Some(w), Some(g)) => close_enough_values(w, g),
                _ => Err(format!(
                    "expected {}, got {}",
                    expected.type_text(),
                    actual.type_text()
                )),
            }
        }
        _ => {
            return Err(format!(
                "expected {}, got {}",
                expected.type_text(),
                actual.type_text()
            ))
        }
    };
    if want.len() != got.len() {
        return Err(format!("expected {} maps, got {}", want.len(), got.len()));
    }
    if want.is_empty() {
        return Ok(());
    }
    let Some(order) = got.keys().positions_of(want.keys()) else {
        return Err(format!(
            "expected {} with keys {}, got {} with keys {}",
            want.type_text(),
            keys_text(want),
            got.type_text(),
            keys_text(got)
        ));
    };
    let tol = Tolerance::for_type(DataType::Float);
    for i in 0..want.len() {
        let (Some(w), Some(g)) = (want.row(i), got.row(i)) else {
            return Err(format!("map {i} is missing"));
        };
        for (j, (&w, &k)) in w.iter().zip(&order).enumerate() {
            let (w, g) = (w as f64, g.get(k).copied().unwrap_or(f32::NAN) as f64);
            if !tol.admits(w, g) {
                return Err(format!(
                    "map {i}, key {}: expected {w}, got {g}",
                    want.keys().key_text(j)
                ));
            }
        }
    }
    Ok(())
}

fn compare_one(name: &str, want: &Tensor, got: Option<&Tensor>) -> OutputComparison {
    let mut c = OutputComparison {
        name: name.to_owned(),
        dtype: want.dtype().to_string(),
        shape: want.shape().to_vec(),
        identical: false,
        mismatches: want.len(),
        max_abs_diff: None,
        problem: None,
    };
    let Some(got) = got else {
        c.problem = Some("missing from the second run".into());
        return c;
    };
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        c.problem = Some(format!(
            "{}{:?} vs {}{:?}",
            want.dtype(),
            want.shape(),
            got.dtype(),
            got.shape()
        ));
        return c;
    }
    c.identical = got == want;
    c.mismatches = count_mismatches(want, got);
    c.max_abs_diff = max_abs_diff(want, got);
    if c.identical {
        c.mismatches = 0;
    }
    c
}

fn count_mismatches(a: &Tensor, b: &Tensor) -> usize {
    if let (Ok(x), Ok(y)) = (a.as_strings(), b.as_strings()) {
        return x.iter().zip(y).filter(|(p, q)| p != q).count();
    }
    match (a.as_bytes(), b.as_bytes(), a.dtype().byte_size()) {
        (Ok(x), Ok(y), Some(w)) if w > 0 => {
            x.chunks(w).zip(y.chunks(w)).filter(|(p, q)| p != q).count()
        }
        _ => usize::from(a != b),
    }
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> Option<f64> {
    fn diff<T: bytemuck::Pod>(a: &Tensor, b: &Tensor, f: impl Fn(T) -> f64) -> Option<f64> {
        let (x, y) = (a.as_slice::<T>().ok()?, b.as_slice::<T>().ok()?);
        Some(
            x.iter()
                .zip(y)
                .map(|(&p, &q)| (f(p) - f(q)).abs())
                .fold(0.0, f64::max),
        )
    }
    match a.dtype() {
        DataType::Float => diff::<f32>(a, b, |v| v as f64),
        DataType::Double => diff::<f64>(a, b, |v| v),
        DataType::Float16 => diff::<half::f16>(a, b, |v| v.to_f64()),
        DataType::Bfloat16 => diff::<half::bf16>(a, b, |v| v.to_f64()),
        _ => None,
    }
}

/// Tolerances for comparing with a reference computed elsewhere (conformance tests), where
/// floating-point results may differ in the last bits: `|actual - expected| <= atol + rtol *
/// |expected|`. Integers, booleans and strings compare exactly; NaN matches NaN.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Tolerance {
    /// The tolerance for an element type: `rtol 1e-3, atol 1e-5` for float and double, ten times
    /// looser for the 16-bit and 8-bit float types.
    pub fn for_type(dtype: DataType) -> Tolerance {
        match dtype {
            DataType::Float | DataType::Double | DataType::Complex64 | DataType::Complex128 => {
                Tolerance {
                    rtol: 1e-3,
                    atol: 1e-5,
                }
            }
            _ => Tolerance {
                rtol: 1e-2,
                atol: 1e-3,
            },
        }
    }

    /// Whether `actual` is within tolerance of `expected` (NaN matches NaN).
    fn admits(self, expected: f64, actual: f64) -> bool {
        (expected.is_nan() && actual.is_nan())
            || expected == actual
            || (expected - actual).abs() <= self.atol + self.rtol * expected.abs()
    }
}

/// Checks `actual` against `expected` within the type's [`Tolerance`]; the error says what
/// differs (type, shape, or the first element out of tolerance).
///
/// # Example
/// ```
/// use multigather::{DataType, Tensor};
/// use multigather::verify::close_enough;
/// let a = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.0])?;
/// let b = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.0000001])?;
/// assert!(close_enough(&a, &b).is_ok());
/// let c = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.1])?;
/// assert!(close_enough(&a, &c).unwrap_err().contains("element 1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn close_enough(expected: &Tensor, actual: &Tensor) -> std::result::Result<(), String> {
    if expected.dtype() != actual.dtype() || expected.shape() != actual.shape() {
        return Err(format!(
            "expected {}{:?}, got {}{:?}",
            expected.dtype(),
            expected.shape(),
            actual.dtype(),
            actual.shape()
        ));
    }
    if expected == actual {
        return Ok(());
    }
    let values = |t: &Tensor| -> Option<Vec<f64>> {
        Some(match t.dtype() {
            DataType::Float | DataType::Complex64 => t
                .as_slice::<f32>()
                .ok()?
                .iter()
                .map(|&v| v as f64)
                .collect(),
            DataType::Double | DataType::Complex128 => t.as_slice::<f64>().ok()?.to_vec(),
            DataType::Float16 => t
                .as_slice::<half::f16>()
                .ok()?
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            DataType::Bfloat16 => t
                .as_slice::<half::bf16>()
                .ok()?
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            _ => return None,
        })
    };
    let (Some(want), Some(got)) = (values(expected), values(actual)) else {
        let first = (0..expected.len())
            .find(|&i| {
                let mut a = Tensor::zeros(expected.dtype(), &[1]).ok();
                let mut b = a.clone();
                let same = match (&mut a, &mut b) {
                    (Some(a), Some(b)) => {
                        a.copy_element_from(0, expected, i).is_ok()
                            && b.copy_element_from(0, actual, i).is_ok()
                            && a == b
                    }
                    _ => false,
                };
                !same
            })
            .unwrap_or(0);
        return Err(format!(
            "{} values differ from element {first}",
            expected.dtype()
        ));
    };
    let tol = Tolerance::for_type(expected.dtype());
    for (i, (&w, &g)) in want.iter().zip(&got).enumerate() {
        if !tol.admits(w, g) {
            return Err(format!("element {i}: expected {w}, got {g}"));
        }
    }
    Ok(())
}
