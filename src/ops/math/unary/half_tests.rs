//! The element-wise functions on every `float16` and `bfloat16` input: the vectorised path of
//! `map_half` against the `f64` evaluation rounded once.

use crate::tensor::Tensor;
use crate::DataType;

use super::{erf, map_half, sigmoid, vector};

/// Every `float16` and `bfloat16` input of each function with a vectorised form gives the
/// bits of the `f64` evaluation rounded once.
#[test]
fn half_inputs_give_the_f64_bits_for_every_value() {
    use half::{bf16, f16};
    /// A function's name, its `f64` definition and its vectorised `f32` form.
    type Case = (&'static str, fn(f64) -> f64, fn(f32) -> f32);
    let cases: Vec<Case> = vec![
        ("exp", f64::exp, vector::exp),
        ("tanh", f64::tanh, vector::tanh),
        ("sigmoid", sigmoid, vector::sigmoid),
        ("erf", erf, vector::erf),
        ("sqrt", f64::sqrt, f32::sqrt),
        ("reciprocal", f64::recip, |x: f32| 1.0 / x),
    ];
    let all: Vec<u16> = (0..=u16::MAX).collect();
    for (name, f, fast) in &cases {
        let h: Vec<f16> = all.iter().map(|&b| f16::from_bits(b)).collect();
        let x = Tensor::from_vec(DataType::Float16, &[h.len()], h.clone()).unwrap();
        let y = map_half::<f16>(&x, f, fast).unwrap();
        for (v, got) in h.iter().zip(y.as_slice::<f16>().unwrap()) {
            let want = crate::ops::halves::f16_from_f64(f(v.to_f64()));
            assert!(
                got.to_bits() == want.to_bits(),
                "{name} float16 {:#x}: {got} != {want}",
                v.to_bits()
            );
        }
        let b: Vec<bf16> = all.iter().map(|&b| bf16::from_bits(b)).collect();
        let x = Tensor::from_vec(DataType::Bfloat16, &[b.len()], b.clone()).unwrap();
        let y = map_half::<bf16>(&x, f, fast).unwrap();
        for (v, got) in b.iter().zip(y.as_slice::<bf16>().unwrap()) {
            let want = crate::ops::halves::bf16_from_f64(f(v.to_f64()));
            assert!(
                got.to_bits() == want.to_bits(),
                "{name} bfloat16 {:#x}: {got} != {want}",
                v.to_bits()
            );
        }
    }
}
