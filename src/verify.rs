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
//! when the model fails on the first draw ([`draw_runnable`]).

mod inputs;

use serde::Serialize;

pub use inputs::{
    draw_inputs, draw_runnable, random_inputs, Attempt, DimChoice, DrawOptions, Drawn, InputChoice,
};

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
