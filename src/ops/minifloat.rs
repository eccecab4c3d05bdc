//! Encoding and decoding of the floating-point types of 8 bits or fewer: `float8e4m3fn`,
//! `float8e4m3fnuz`, `float8e5m2`, `float8e5m2fnuz`, `float4e2m1` and `float8e8m0`, as `Cast` and
//! the quantization operators need them.
//!
//! Encoding rounds to nearest, ties to even. With `saturate` (the default), out-of-range values
//! and infinities become the largest finite value of their sign; without, they become infinity
//! (`e5m2`) or NaN (the others), following the tables of the `Cast` specification. `float4e2m1`
//! has neither infinity nor NaN and always saturates; NaN encodes as a zero of the opposite sign,
//! as the ONNX reference (ml_dtypes) does. `float8e8m0` (a bare exponent) follows the ONNX
//! reference's rounding modes.

use crate::DataType;

/// How a format spends its special codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Specials {
    /// IEEE-like: the top exponent holds infinities and NaNs (`e5m2`).
    Ieee,
    /// No infinity; all-ones exponent and mantissa is NaN (`e4m3fn`).
    Fn,
    /// No infinity, no negative zero; the negative-zero code is the one NaN (`fnuz`).
    Fnuz,
    /// No infinity and no NaN (`e2m1`).
    Finite,
}

/// A small binary floating-point format: sign, `exp` exponent bits, `mant` mantissa bits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MiniFloat {
    exp: u32,
    mant: u32,
    bias: i32,
    specials: Specials,
}

impl MiniFloat {
    /// The format of `dtype`, if it is one of the small float types with a sign and mantissa.
    pub(crate) fn of(dtype: DataType) -> Option<MiniFloat> {
        let (exp, mant, bias, specials) = match dtype {
            DataType::Float8E4M3FN => (4, 3, 7, Specials::Fn),
            DataType::Float8E4M3FNUZ => (4, 3, 8, Specials::Fnuz),
            DataType::Float8E5M2 => (5, 2, 15, Specials::Ieee),
            DataType::Float8E5M2FNUZ => (5, 2, 16, Specials::Fnuz),
            DataType::Float4E2M1 => (2, 1, 1, Specials::Finite),
            _ => return None,
        };
        Some(MiniFloat {
            exp,
            mant,
            bias,
            specials,
        })
    }

    fn sign_bit(&self) -> u8 {
        1 << (self.exp + self.mant)
    }

    /// The code of every magnitude bit set.
    fn all_ones(&self) -> u8 {
        self.sign_bit() - 1
    }

    /// The magnitude code of the largest finite value.
    fn max_finite(&self) -> u8 {
        match self.specials {
            Specials::Ieee => self.all_ones() - (1 << self.mant),
            Specials::Fn => self.all_ones() - 1,
            Specials::Fnuz | Specials::Finite => self.all_ones(),
        }
    }

    /// The magnitude code of infinity in an IEEE-like format: the top exponent, mantissa 0.
    fn infinity(&self) -> u8 {
        self.all_ones() >> self.mant << self.mant
    }

    /// The NaN code (quiet, keeping the sign where the format can).
    fn nan(&self, negative: bool) -> u8 {
        let sign = if negative { self.sign_bit() } else { 0 };
        match self.specials {
            Specials::Ieee => sign | self.infinity() | 1 << (self.mant - 1),
            Specials::Fn => sign | self.all_ones(),
            Specials::Fnuz => 0x80,
            Specials::Finite => {
                if negative {
                    0
                } else {
                    self.sign_bit()
                }
            }
        }
    }

    /// The code of `x`, rounded to nearest even.
    pub(crate) fn encode(&self, x: f64, saturate: bool) -> u8 {
        if x.is_nan() {
            return self.nan(x.is_sign_negative());
        }
        let negative = x.is_sign_negative();
        let sign = if negative { self.sign_bit() } else { 0 };
        let magnitude = if x.is_infinite() {
            None
        } else {
            self.round(x.abs())
        };
        let code = match magnitude {
            Some(c) => c,
            None if saturate || self.specials == Specials::Finite => self.max_finite(),
            None => {
                return match self.specials {
                    Specials::Ieee => sign | self.infinity(),
                    _ => self.nan(negative),
                }
            }
        };
        if code == 0 && self.specials == Specials::Fnuz {
            0
        } else {
            sign | code
        }
    }

    /// The magnitude code of a finite `a >= 0`, or `None` when it rounds past the largest finite
    /// value.
    fn round(&self, a: f64) -> Option<u8> {
        let m = self.mant as i32;
        let emin = 1 - self.bias;
        // The binary exponent of `a` (inputs are never f64 subnormals that matter: those round
        // to zero here), clamped to the subnormal range of the format.
        let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
        let q = (a / 2f64.powi(e - m)).round_ties_even() as u64;
        let (e, q) = if q >= 1 << (m + 1) {
            (e + 1, q / 2)
        } else {
            (e, q)
        };
        let code = if q < 1 << m {
            q
        } else {
            (((e - emin + 1) as u64) << m) | (q - (1 << m))
        };
        u8::try_from(code).ok().filter(|&c| c <= self.max_finite())
    }

    /// The value of `code`.
    pub(crate) fn decode(&self, code: u8) -> f64 {
        let negative = code & self.sign_bit() != 0;
        let magnitude = code & self.all_ones();
        let e = i32::from(magnitude >> self.mant);
        let f = i32::from(magnitude & ((1 << self.mant) - 1));
        let top_exponent = e == (1 << self.exp) - 1;
        let special = match self.specials {
            Specials::Ieee if top_exponent => Some(if f == 0 { f64::INFINITY } else { f64::NAN }),
            Specials::Fn if magnitude == self.all_ones() => Some(f64::NAN),
            Specials::Fnuz if code == 0x80 => Some(f64::NAN),
            _ => None,
        };
        let m = self.mant as i32;
        let v = special.unwrap_or_else(|| {
            if e == 0 {
                f64::from(f) * 2f64.powi(1 - self.bias - m)
            } else {
                f64::from((1 << m) + f) * 2f64.powi(e - self.bias - m)
            }
        });
        if negative {
            -v
        } else {
            v
        }
    }
}

/// How a value rounds to `float8e8m0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum E8M0Rounding {
    Up,
    Down,
    Nearest,
}

/// The `float8e8m0` code of `x` (its biased exponent), following the ONNX reference: NaN and
/// infinity give the NaN code 0xFF; `saturate` keeps rounding from reaching it.
pub(crate) fn encode_e8m0(x: f32, saturate: bool, rounding: E8M0Rounding) -> u8 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xFF;
    if exponent == 0xFF {
        return 0xFF;
    }
    let round_up = match rounding {
        E8M0Rounding::Up => bits & 0x7F_FFFF != 0,
        E8M0Rounding::Down => false,
        E8M0Rounding::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let rest = bits & 0x3F_FFFF != 0;
            guard && (rest || exponent > 0)
        }
    };
    let round_up = round_up && !(saturate && exponent == 0xFE);
    (exponent + u32::from(round_up)) as u8
}

/// The value of a `float8e8m0` code: `2^(code - 127)`, NaN for 0xFF.
pub(crate) fn decode_e8m0(code: u8) -> f64 {
    if code == 0xFF {
        f64::NAN
    } else {
        2f64.powi(i32::from(code) - 127)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(dtype: DataType) -> MiniFloat {
        MiniFloat::of(dtype).unwrap()
    }

    #[test]
    fn codes_match_ml_dtypes() {
        // From ml_dtypes: [0.25, 0.75, 1.25, 5, 7] in each format.
        let xs = [0.25, 0.75, 1.25, 5.0, 7.0];
        let cases = [
            (DataType::Float8E4M3FN, [40u8, 52, 58, 74, 78]),
            (DataType::Float8E4M3FNUZ, [48, 60, 66, 82, 86]),
            (DataType::Float8E5M2, [52, 58, 61, 69, 71]),
            (DataType::Float8E5M2FNUZ, [56, 62, 65, 73, 75]),
            (DataType::Float4E2M1, [0, 2, 2, 6, 7]),
        ];
        for (dtype, want) in cases {
            let got: Vec<u8> = xs.iter().map(|&x| fmt(dtype).encode(x, true)).collect();
            assert_eq!(got, want, "{dtype}");
        }
    }

    #[test]
    fn specials_follow_the_cast_tables() {
        let e4 = fmt(DataType::Float8E4M3FN);
        assert_eq!(e4.encode(f64::INFINITY, true), 0x7E);
        assert_eq!(e4.decode(0x7E), 448.0);
        assert_eq!(e4.encode(f64::INFINITY, false), 0x7F);
        assert_eq!(e4.encode(1e6, false), 0x7F);
        assert_eq!(e4.encode(-1e-7, true), 0x80);
        assert!(e4.decode(0xFF).is_nan());
        let e5 = fmt(DataType::Float8E5M2);
        assert_eq!(e5.encode(1e6, false), 0x7C);
        assert_eq!(e5.encode(f64::NAN, true), 0x7E);
        assert_eq!(e5.decode(0x7C), f64::INFINITY);
        assert_eq!(e5.decode(0x7B), 57344.0);
        let uz = fmt(DataType::Float8E4M3FNUZ);
        assert_eq!(uz.encode(-0.0, true), 0);
        assert_eq!(uz.encode(f64::NEG_INFINITY, false), 0x80);
        assert_eq!(uz.decode(0x7F), 240.0);
        let e2 = fmt(DataType::Float4E2M1);
        assert_eq!(e2.encode(1e6, false), 0x7);
        assert_eq!(e2.encode(f64::NAN, false), 0x8);
        assert_eq!(e2.decode(0xF), -6.0);
        assert_eq!(e2.decode(0x1), 0.5);
    }

    #[test]
    fn every_code_round_trips() {
        for dtype in [
            DataType::Float8E4M3FN,
            DataType::Float8E4M3FNUZ,
            DataType::Float8E5M2,
            DataType::Float8E5M2FNUZ,
        ] {
            let f = fmt(dtype);
            for code in 0..=255u8 {
                let v = f.decode(code);
                if v.is_finite() && !(v == 0.0 && code == 0x80) {
                    assert_eq!(f.encode(v, false), code, "{dtype} {code:#x}");
                }
            }
        }
    }

    #[test]
    fn e8m0_rounds_like_the_reference() {
        let up = |x| encode_e8m0(x, true, E8M0Rounding::Up);
        assert_eq!(up(0.0), 0);
        assert_eq!(decode_e8m0(up(0.124)), 0.125);
        assert_eq!(decode_e8m0(up(1.1)), 2.0);
        assert_eq!(up(f32::MAX), 0xFE);
        assert_eq!(encode_e8m0(f32::MAX, false, E8M0Rounding::Up), 0xFF);
        assert_eq!(decode_e8m0(encode_e8m0(1.9, true, E8M0Rounding::Down)), 1.0);
        assert_eq!(
            decode_e8m0(encode_e8m0(1.6, true, E8M0Rounding::Nearest)),
            2.0
        );
        assert_eq!(
            decode_e8m0(encode_e8m0(1.4, true, E8M0Rounding::Nearest)),
            1.0
        );
    }
}
