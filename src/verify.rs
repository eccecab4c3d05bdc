//! Verification support: inputs drawn from a model's declared types, and bit-for-bit comparison of
//! two runs' outputs.
//!
//! A rewrite only moves data, so the rewritten model must produce exactly the bits the original
//! does; [`compare`] reports, per output, whether the bits agree and, if not, how many elements
//! differ and by how much.
//!
//! Random inputs are drawn deterministically from a seed. Integer inputs that a gather uses as its
//! indices are drawn in the range that gather accepts, negative values included, so a random run
//! exercises the gathers instead of failing on the first index.

use std::collections::HashMap;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::infer::TypeEnv;
use crate::ir::{Dim, Graph, Model};
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

/// Random inputs for every graph input that is not an initializer.
///
/// Symbolic dimensions take their size from `dims` (default 1); unknown dimensions are 1.
///
/// # Example
/// ```
/// use multigather::ir::{Dim, Graph, Model, Type, ValueInfo};
/// use multigather::DataType;
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Symbolic("n".into()), Dim::Known(2)])));
/// let model = Model::new(g, 13);
/// let dims = [("n".to_string(), 3)].into_iter().collect();
/// let inputs = multigather::verify::random_inputs(&model, 7, &dims)?;
/// assert_eq!(inputs[0].0, "x");
/// assert_eq!(inputs[0].1.shape(), &[3, 2]);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn random_inputs(
    model: &Model,
    seed: u64,
    dims: &HashMap<String, usize>,
) -> Result<Vec<(String, Tensor)>> {
    let graph = &model.graph;
    let ranges = index_ranges(model, dims);
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for input in &graph.inputs {
        if graph.initializer(&input.name).is_some() {
            continue;
        }
        let ty = input.tensor_type().ok_or_else(|| {
            Error::Unsupported(format!(
                "input '{}' is not a tensor, so no random value can be drawn for it",
                input.name
            ))
        })?;
        let elem = ty.elem.ok_or_else(|| {
            Error::Unsupported(format!("input '{}' has no element type", input.name))
        })?;
        let shape: Vec<usize> = match &ty.shape {
            Some(s) => s.dims.iter().map(|d| resolve(d, dims)).collect(),
            None => {
                return Err(Error::Unsupported(format!(
                    "input '{}' has an unknown rank; give its value with --inputs",
                    input.name
                )))
            }
        };
        let range = ranges.get(&input.name);
        out.push((
            input.name.clone(),
            random_tensor(elem, &shape, range, &mut rng)?,
        ));
    }
    Ok(out)
}

fn resolve(d: &Dim, dims: &HashMap<String, usize>) -> usize {
    match d {
        Dim::Known(v) if *v >= 0 => *v as usize,
        Dim::Symbolic(s) => dims.get(s).copied().unwrap_or(1),
        Dim::Known(_) | Dim::Unknown => 1,
    }
}

/// For graph inputs used directly as gather indices: the valid range of each coordinate
/// (`[-d, d)` for an axis of size `d`), in the order coordinates appear in the last dimension.
fn index_ranges(model: &Model, dims: &HashMap<String, usize>) -> HashMap<String, Vec<(i64, i64)>> {
    let graph = &model.graph;
    let env = TypeEnv::infer(graph, &model.opset_imports, &TypeEnv::default());
    let mut ranges = HashMap::new();
    collect_ranges(graph, &env, dims, &mut ranges);
    ranges
}

fn collect_ranges(
    graph: &Graph,
    env: &TypeEnv,
    dims: &HashMap<String, usize>,
    ranges: &mut HashMap<String, Vec<(i64, i64)>>,
) {
    for (_, node) in graph.nodes() {
        for g in node.subgraphs() {
            collect_ranges(g, env, dims, ranges);
        }
        let (Some(data), Some(indices)) = (node.inputs.first(), node.inputs.get(1)) else {
            continue;
        };
        let Some(data_dims) = env.dims(data) else {
            continue;
        };
        let size = |axis: i64| -> Option<(i64, i64)> {
            let r = data_dims.len() as i64;
            let a = if axis < 0 { axis + r } else { axis };
            let d = resolve(data_dims.get(usize::try_from(a).ok()?)?, dims) as i64;
            Some((-d, d))
        };
        let coordinates: Option<Vec<(i64, i64)>> =
            match (node.domain.as_str(), node.op_type.as_str()) {
                ("" | "ai.onnx", "Gather" | "GatherElements") => node
                    .attr_int("axis", 0)
                    .ok()
                    .and_then(size)
                    .map(|r| vec![r]),
                ("" | "ai.onnx", "GatherND") => {
                    let batch = node.attr_int("batch_dims", 0).unwrap_or(0);
                    // The depth as the inputs will have it: known, or a symbolic dim resolved
                    // like every other.
                    let depth = env
                        .dims(indices)
                        .and_then(|d| d.last())
                        .map(|d| resolve(d, dims) as i64);
                    depth.and_then(|k| (0..k).map(|j| size(batch + j)).collect())
                }
                (crate::gather::DOMAIN, "GatherMultiaxis") => node
                    .attr_ints("axes")
                    .ok()
                    .flatten()
                    .and_then(|axes| axes.iter().map(|&a| size(a)).collect()),
                _ => None,
            };
        if let Some(c) = coordinates.filter(|c| !c.is_empty()) {
            ranges.entry(indices.clone()).or_insert(c);
        }
    }
}

fn random_tensor(
    elem: DataType,
    shape: &[usize],
    range: Option<&Vec<(i64, i64)>>,
    rng: &mut Rng,
) -> Result<Tensor> {
    Tensor::check_size(elem, shape)?;
    let count: usize = shape.iter().product();
    let mut int = |i: usize, low: i64, high: i64| -> i64 {
        match range {
            Some(r) => {
                let (lo, hi) = r[i % r.len()];
                rng.range(lo, hi)
            }
            None => rng.range(low, high),
        }
    };
    macro_rules! ints {
        ($t:ty, $low:expr, $high:expr) => {
            Tensor::from_vec(
                elem,
                shape,
                (0..count)
                    .map(|i| int(i, $low, $high) as $t)
                    .collect::<Vec<$t>>(),
            )?
        };
    }
    let t = match elem {
        DataType::Float => Tensor::from_vec(
            elem,
            shape,
            (0..count).map(|_| rng.unit() as f32).collect::<Vec<f32>>(),
        )?,
        DataType::Double => Tensor::from_vec(
            elem,
            shape,
            (0..count).map(|_| rng.unit()).collect::<Vec<f64>>(),
        )?,
        DataType::Float16 => Tensor::from_vec(
            elem,
            shape,
            (0..count)
                .map(|_| half::f16::from_f64(rng.unit()))
                .collect::<Vec<_>>(),
        )?,
        DataType::Bfloat16 => Tensor::from_vec(
            elem,
            shape,
            (0..count)
                .map(|_| half::bf16::from_f64(rng.unit()))
                .collect::<Vec<_>>(),
        )?,
        DataType::Int64 => ints!(i64, -100, 100),
        DataType::Int32 => ints!(i32, -100, 100),
        DataType::Int16 => ints!(i16, -100, 100),
        DataType::Int8 => ints!(i8, -100, 100),
        DataType::Uint64 => ints!(u64, 0, 200),
        DataType::Uint32 => ints!(u32, 0, 200),
        DataType::Uint16 => ints!(u16, 0, 200),
        DataType::Uint8 => ints!(u8, 0, 200),
        DataType::Bool => ints!(u8, 0, 2),
        DataType::String => Tensor::from_strings(
            shape,
            (0..count)
                .map(|_| format!("s{}", rng.range(0, 100)).into_bytes())
                .collect(),
        )?,
        other => {
            let bytes = other.storage_bytes(count).unwrap_or(0);
            let data: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
            Tensor::from_bytes(other, shape, &data)?
        }
    };
    Ok(t)
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
        let ok =
            (w.is_nan() && g.is_nan()) || w == g || (w - g).abs() <= tol.atol + tol.rtol * w.abs();
        if !ok {
            return Err(format!("element {i}: expected {w}, got {g}"));
        }
    }
    Ok(())
}
