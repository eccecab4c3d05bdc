//! The numbers of the recurrences besides their products: the gate activation functions, and
//! the `max` / `min` the clipping takes.

use crate::error::{Error, Result};
use crate::ops::num::Real;
use crate::ops::vector;

/// An activation function of a gate, with its alpha and beta.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Activation {
    Relu,
    Tanh,
    Sigmoid,
    Affine { alpha: f32, beta: f32 },
    LeakyRelu { alpha: f32 },
    ThresholdedRelu { alpha: f32 },
    ScaledTanh { alpha: f32, beta: f32 },
    HardSigmoid { alpha: f32, beta: f32 },
    Elu { alpha: f32 },
    Softsign,
    Softplus,
}

/// A stream of `activation_alpha` or `activation_beta` values, consumed in the order of the
/// activations by those that take the parameter (as onnxruntime reads them); an exhausted list
/// leaves the remaining activations their defaults.
struct Params<'a>(std::slice::Iter<'a, f32>);

impl Params<'_> {
    fn next_or(&mut self, default: f32) -> f32 {
        self.0.next().copied().unwrap_or(default)
    }

    fn required(&mut self, name: &str, param: &str) -> Result<f32> {
        self.0.next().copied().ok_or_else(|| {
            Error::Eval(format!(
                "activation {name} needs an {param} value, which has no default"
            ))
        })
    }
}

impl Activation {
    /// The activations `names`, with parameters taken from `alphas` and `betas` in order.
    pub fn parse_all(names: &[String], alphas: &[f32], betas: &[f32]) -> Result<Vec<Activation>> {
        let (mut alphas, mut betas) = (Params(alphas.iter()), Params(betas.iter()));
        names
            .iter()
            .map(|n| Activation::parse(n, &mut alphas, &mut betas))
            .collect()
    }

    /// The activation named `name` (case-insensitive, as onnxruntime accepts), taking its
    /// parameters from the streams. Defaults are those of the ONNX operators of the same name
    /// (`Affine`: 1 and 0, `LeakyRelu`: 0.01, `ThresholdedRelu`: 1, `HardSigmoid`: 0.2 and 0.5,
    /// `Elu`: 1); `ScaledTanh` has none, so its alpha and beta are required.
    fn parse(name: &str, alphas: &mut Params<'_>, betas: &mut Params<'_>) -> Result<Activation> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "relu" => Activation::Relu,
            "tanh" => Activation::Tanh,
            "sigmoid" => Activation::Sigmoid,
            "affine" => Activation::Affine {
                alpha: alphas.next_or(1.0),
                beta: betas.next_or(0.0),
            },
            "leakyrelu" => Activation::LeakyRelu {
                alpha: alphas.next_or(0.01),
            },
            "thresholdedrelu" => Activation::ThresholdedRelu {
                alpha: alphas.next_or(1.0),
            },
            "scaledtanh" => Activation::ScaledTanh {
                alpha: alphas.required(name, "alpha")?,
                beta: betas.required(name, "beta")?,
            },
            "hardsigmoid" => Activation::HardSigmoid {
                alpha: alphas.next_or(0.2),
                beta: betas.next_or(0.5),
            },
            "elu" => Activation::Elu {
                alpha: alphas.next_or(1.0),
            },
            "softsign" => Activation::Softsign,
            "softplus" => Activation::Softplus,
            _ => {
                return Err(Error::Unsupported(format!(
                    "recurrent activation function '{name}'"
                )))
            }
        })
    }

    /// `v[i] = f(v[i])`: Sigmoid and Tanh on `f32` through the vectorised functions of
    /// [`crate::ops::vector`] in their fused form (within 4 ulp of the exact values, the same
    /// bits at every SIMD level: `mul_add` is one rounding everywhere), every other function
    /// and type element by element. The fused form shortens the chain of dependent operations
    /// that bounds these loops: measured on an AMD EPYC (Zen 3), the int8 LSTM of
    /// `check_deployed.py` 8.0 -> 7.6 ms at one thread.
    pub fn apply<T: Real>(self, v: &mut [T]) {
        match (self, f32s_mut(v)) {
            (Activation::Sigmoid, Some(v)) => vector::map_in_place(v, vector::sigmoid_with::<true>),
            (Activation::Tanh, Some(v)) => vector::map_in_place(v, vector::tanh_with::<true>),
            (_, Some(v)) => v.iter_mut().for_each(|x| *x = self.eval(*x)),
            (_, None) => v.iter_mut().for_each(|x| *x = self.eval(*x)),
        }
    }

    /// The function's value at `x`.
    pub fn eval<T: Real>(self, x: T) -> T {
        let p = T::from_f32;
        match self {
            Activation::Relu => max(x, T::ZERO),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => T::ONE / (T::ONE + (-x).exp()),
            Activation::Affine { alpha, beta } => p(alpha) * x + p(beta),
            Activation::LeakyRelu { alpha } => {
                if x >= T::ZERO {
                    x
                } else {
                    p(alpha) * x
                }
            }
            Activation::ThresholdedRelu { alpha } => {
                if x > p(alpha) {
                    x
                } else {
                    T::ZERO
                }
            }
            Activation::ScaledTanh { alpha, beta } => p(alpha) * (p(beta) * x).tanh(),
            Activation::HardSigmoid { alpha, beta } => {
                min(max(p(alpha) * x + p(beta), T::ZERO), T::ONE)
            }
            Activation::Elu { alpha } => {
                if x >= T::ZERO {
                    x
                } else {
                    p(alpha) * (x.exp() - T::ONE)
                }
            }
            Activation::Softsign => x / (T::ONE + x.abs()),
            // `max(x, 0) + ln(1 + e^-|x|)`: `ln(1 + e^x)` without overflow for large `x`.
            Activation::Softplus => max(x, T::ZERO) + (-x.abs()).exp().ln_1p(),
        }
    }
}

/// `v` as `f32`s when `T` is `f32`.
fn f32s_mut<T: Real>(v: &mut [T]) -> Option<&mut [f32]> {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // SAFETY: `T` is `f32`, so the slice is one of `f32`s.
        Some(unsafe { &mut *(v as *mut [T] as *mut [f32]) })
    } else {
        None
    }
}

pub(super) fn max<T: Real>(a: T, b: T) -> T {
    if a < b {
        b
    } else {
        a
    }
}

pub(super) fn min<T: Real>(a: T, b: T) -> T {
    if b < a {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn activations_compute_their_onnx_definitions() {
        let cases: &[(Activation, f64, f64)] = &[
            (Activation::Relu, -2.0, 0.0),
            (Activation::Relu, 2.0, 2.0),
            (Activation::Tanh, 0.5, 0.5f64.tanh()),
            (Activation::Sigmoid, 0.0, 0.5),
            (
                Activation::Affine {
                    alpha: 2.0,
                    beta: 1.0,
                },
                3.0,
                7.0,
            ),
            (Activation::LeakyRelu { alpha: 0.5 }, -2.0, -1.0),
            (Activation::ThresholdedRelu { alpha: 1.0 }, 0.5, 0.0),
            (Activation::ThresholdedRelu { alpha: 1.0 }, 1.5, 1.5),
            (
                Activation::ScaledTanh {
                    alpha: 2.0,
                    beta: 0.5,
                },
                1.0,
                2.0 * 0.5f64.tanh(),
            ),
            (
                Activation::HardSigmoid {
                    alpha: 0.2,
                    beta: 0.5,
                },
                1.0,
                0.7,
            ),
            (
                Activation::HardSigmoid {
                    alpha: 0.2,
                    beta: 0.5,
                },
                5.0,
                1.0,
            ),
            (Activation::Elu { alpha: 1.0 }, -1.0, (-1.0f64).exp() - 1.0),
            (Activation::Softsign, -3.0, -0.75),
            (Activation::Softplus, 0.0, 2f64.ln()),
            // No overflow where e^x does.
            (Activation::Softplus, 1000.0, 1000.0),
        ];
        for &(f, x, want) in cases {
            let got = f.eval(x);
            assert!(
                (got - want).abs() < 1e-6,
                "{f:?}({x}) = {got}, expected {want}"
            );
        }
    }

    #[test]
    fn parameters_are_consumed_in_order_by_the_functions_that_take_them() {
        let acts = Activation::parse_all(
            &names(&["Tanh", "affine", "LeakyRelu", "HardSigmoid"]),
            &[0.5, 0.25],
            &[2.0],
        )
        .unwrap();
        assert_eq!(
            acts,
            vec![
                Activation::Tanh,
                Activation::Affine {
                    alpha: 0.5,
                    beta: 2.0
                },
                Activation::LeakyRelu { alpha: 0.25 },
                // Both lists are exhausted: the defaults of the ONNX operator.
                Activation::HardSigmoid {
                    alpha: 0.2,
                    beta: 0.5
                },
            ]
        );
    }

    #[test]
    fn unknown_or_underspecified_activations_fail() {
        let err = Activation::parse_all(&names(&["Swish"]), &[], &[]).unwrap_err();
        assert!(err.to_string().contains("'Swish'"), "{err}");
        let err = Activation::parse_all(&names(&["ScaledTanh"]), &[1.0], &[]).unwrap_err();
        assert!(err.to_string().contains("beta"), "{err}");
    }
}
