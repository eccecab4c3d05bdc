//! The 8- and 4-bit floating-point formats quantization produces and consumes: `float8e4m3fn`,
//! `float8e4m3fnuz`, `float8e5m2`, `float8e5m2fnuz`, `float4e2m1` and the exponent-only scale type
//! `float8e8m0`.
//!
//! Reference: <https://onnx.ai/onnx/technical/float8.html> and
//! <https://onnx.ai/onnx/technical/float4.html>.
//!
//! Encoding rounds to the nearest representable value, ties to the even code (what `ml_dtypes`
//! and the ONNX reference do). A value past the largest finite one saturates to it when asked;
//! otherwise it rounds like any other value against the first code past the largest, and landing
//! there is an overflow: infinity for `e5m2`, NaN for the formats without infinities.

use crate::DataType;

/// How a format spends its special codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Specials {
    /// IEEE-like: the top exponent holds infinities (mantissa 0) and NaNs.
    Ieee,
    /// No infinities; the all-ones code of each sign is NaN.
    Fn,
    /// No infinities and no negative zero; `0x80` is the only NaN.
    Fnuz,
    /// No infinities and no NaN (float4).
    Finite,
}

/// A small floating-point format: sign, `exp` exponent bits, `man` mantissa bits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Minifloat {
    exp: u32,
    man: u32,
    bias: i32,
    specials: Specials,
}

impl Minifloat {
    /// The format of `dtype`, if it is one of the small float types.
    pub fn of(dtype: DataType) -> Option<Minifloat> {
        let (exp, man, bias, specials) = match dtype {
            DataType::Float8E4M3FN => (4, 3, 7, Specials::Fn),
            DataType::Float8E4M3FNUZ => (4, 3, 8, Specials::Fnuz),
            DataType::Float8E5M2 => (5, 2, 15, Specials::Ieee),
            DataType::Float8E5M2FNUZ => (5, 2, 16, Specials::Fnuz),
            DataType::Float4E2M1 => (2, 1, 1, Specials::Finite),
            _ => return None,
        };
        Some(Minifloat {
            exp,
            man,
            bias,
            specials,
        })
    }

    fn sign_bit(&self) -> u8 {
        1 << (self.exp + self.man)
    }

    /// The largest finite positive code.
    fn max_code(&self) -> u8 {
        let all = self.sign_bit() - 1;
        match self.specials {
            Specials::Ieee => all - (1 << self.man), // top exponent reserved
            Specials::Fn => all - 1,                 // all ones is NaN
            Specials::Fnuz | Specials::Finite => all,
        }
    }

    fn nan(&self) -> u8 {
        match self.specials {
            Specials::Fnuz => 0x80,
            Specials::Finite => self.max_code(),
            _ => self.sign_bit() - 1,
        }
    }

    /// The value of a positive code, ignoring specials.
    fn magnitude(&self, code: u8) -> f32 {
        let e = i32::from(code >> self.man);
        let m = f32::from(code & ((1 << self.man) - 1));
        let scale = (1u32 << self.man) as f32;
        if e == 0 {
            m / scale * 2f32.powi(1 - self.bias)
        } else {
            (1.0 + m / scale) * 2f32.powi(e - self.bias)
        }
    }

    /// The value of `code`.
    pub fn decode(&self, code: u8) -> f32 {
        let sign = code & self.sign_bit() != 0;
        let body = code & (self.sign_bit() - 1);
        let top_exp = body >> self.man == (1 << self.exp) - 1;
        let special = match self.specials {
            Specials::Ieee if top_exp => Some(if body & ((1 << self.man) - 1) == 0 {
                f32::INFINITY
            } else {
                f32::NAN
            }),
            Specials::Fn if body == self.sign_bit() - 1 => Some(f32::NAN),
            Specials::Fnuz if code == 0x80 => Some(f32::NAN),
            _ => None,
        };
        let v = special.unwrap_or_else(|| self.magnitude(body));
        if sign {
            -v
        } else {
            v
        }
    }

    /// The code nearest to `v` (ties to the even code); see the module docs for overflow.
    pub fn encode(&self, v: f32, saturate: bool) -> u8 {
        if v.is_nan() {
            return self.nan();
        }
        let sign = if v.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        let max = self.max_code();
        let a = v.abs();
        let code = if a > self.magnitude(max) && (saturate || self.specials == Specials::Finite) {
            max
        } else if a.is_infinite() {
            max + 1
        } else {
            // Binary search for the first code whose value is >= a; the code after the largest
            // finite one stands for the next value up, so overflow rounds like anything else.
            let value = |c: u8| {
                if c > max {
                    self.magnitude(max) + self.ulp_at_max()
                } else {
                    self.magnitude(c)
                }
            };
            let (mut lo, mut hi) = (0u8, max + 1);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if value(mid) < a {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if lo == 0 {
                0
            } else {
                let (below, above) = (value(lo - 1), value(lo));
                let (db, da) = (a - below, above - a);
                if db < da || (db == da && (lo - 1) % 2 == 0) {
                    lo - 1
                } else {
                    lo
                }
            }
        };
        if code > max {
            return match self.specials {
                Specials::Ieee => sign | (max + 1), // infinity
                Specials::Fn => sign | self.nan(),
                _ => self.nan(),
            };
        }
        if code == 0 && self.specials == Specials::Fnuz {
            return 0; // no negative zero
        }
        sign | code
    }

    /// The spacing of codes at the largest finite value.
    fn ulp_at_max(&self) -> f32 {
        let max = self.max_code();
        self.magnitude(max) - self.magnitude(max - 1)
    }
}

/// The value of a `float8e8m0` code: `2^(code - 127)`, NaN for `0xFF`.
pub(super) fn decode_e8m0(code: u8) -> f32 {
    if code == 0xFF {
        f32::NAN
    } else {
        2f32.powi(i32::from(code) - 127)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3fn_round_trips_and_saturates() {
        let f = Minifloat::of(DataType::Float8E4M3FN).unwrap();
        assert_eq!(f.decode(0x7E), 448.0);
        assert!(f.decode(0x7F).is_nan());
        assert_eq!(f.decode(0x01), 2f32.powi(-9));
        for code in 0..0x7Fu8 {
            assert_eq!(f.encode(f.decode(code), true), code);
            assert_eq!(f.encode(-f.decode(code), true), code | 0x80);
        }
        assert_eq!(f.encode(1000.0, true), 0x7E);
        assert_eq!(f.encode(464.0, false), 0x7E); // tie with the overflow code goes to even
        assert_eq!(f.encode(465.0, false), 0x7F);
        assert_eq!(f.encode(f32::INFINITY, false), 0x7F);
        // 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39): ties to even.
        assert_eq!(f.encode(1.0625, true), 0x38);
    }

    #[test]
    fn e5m2_overflows_to_infinity_and_fnuz_has_no_negative_zero() {
        let f = Minifloat::of(DataType::Float8E5M2).unwrap();
        assert_eq!(f.decode(0x7B), 57344.0);
        assert_eq!(f.decode(0x7C), f32::INFINITY);
        assert_eq!(f.encode(1e6, false), 0x7C);
        assert_eq!(f.encode(-1e6, true), 0xFB);
        assert_eq!(f.encode(f32::NEG_INFINITY, false), 0xFC);
        let u = Minifloat::of(DataType::Float8E4M3FNUZ).unwrap();
        assert_eq!(u.decode(0x7F), 240.0);
        assert!(u.decode(0x80).is_nan());
        assert_eq!(u.encode(-0.0, true), 0);
        assert_eq!(u.encode(f32::NAN, true), 0x80);
    }

    #[test]
    fn float4_values() {
        let f = Minifloat::of(DataType::Float4E2M1).unwrap();
        let values: Vec<f32> = (0..8).map(|c| f.decode(c)).collect();
        assert_eq!(values, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(f.encode(100.0, false), 0x7);
        assert_eq!(f.encode(-2.5, true), 0x8 | 0x4); // tie between 2 and 3 goes to the even code
        assert_eq!(decode_e8m0(127), 1.0);
    }
}
