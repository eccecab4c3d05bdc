//! The 8-bit integer matrix product: `C = (A - za) @ (B - zb)` for `uint8` or `int8` A and B,
//! exactly, in `i32`, with zero points per tensor, per row of A or per column of B.
//!
//! Every level multiplies unsigned bytes by signed ones: at most levels a signed A is shifted
//! by 128 into `u8` (its zero point with it) and an unsigned B by -128 into `i8`; `Avx2Pairs`
//! takes the other roles ([`Shift`]). The zero points never touch the matrices: with `rs[i]`
//! the sums of the stored A's rows and `cs[j]` those of the stored B's columns,
//!
//! ```text
//! C[i,j] = sum_k A[i,k] B[k,j] - zb[j] (rs[i] - K za[i]) - za[i] cs[j]
//! ```
//!
//! in wrapping `i32` arithmetic, which is exact whenever the true result fits in `i32`
//! ([`EXACT_K`] bounds the contracted dim for that).
//!
//! B is packed once ([`PackedB`]) into panels of `NR` columns whose elements come in groups of
//! consecutive k (four bytes, or two `i16` for the portable level); a microkernel sums an
//! `MR x NR` tile in registers. The level is chosen at run time ([`Level::detect`]):
//!
//! - `Amx`: `tdpbusd` on AMX tiles (`amx.rs`), 32 x 32 tiles: the bytes of `Avx512Vnni`, k
//!   padded with zeros to whole chunks of 64 (one tile row), 16 groups of a panel one B tile;
//! - `Avx512Vnni`: `vpdpbusd` on 512-bit registers, 8 x 32 tiles;
//! - `AvxVnni`: the VEX `vpdpbusd` on 256-bit registers, 6 x 16 tiles;
//! - `Avx2`: `vpmaddwd` on `i16` (exact: `vpmaddubsw` would saturate 255 x -128 + 255 x -128
//!   in `i16`), 6 x 16 tiles summed as two 6 x 8 halves. A is packed widened to `i16`; B keeps
//!   the bytes of the VNNI levels and is widened in registers as it is read (`vpmovsxbw`), so
//!   packing an im2col matrix costs what it costs for VNNI and moves half the memory;
//! - `Avx2Pairs`: `vpmaddubsw` on B's unsigned bytes by A's signed ones, then `vpmaddwd` by
//!   ones, 6 x 16 tiles: as many multiplies as `Avx2` but two thirds of its instructions (no
//!   widening of B, half the additions and broadcasts). Exact because A is split: its stored
//!   part has every pair of adjacent k within `|a0| + |a1| <= 128` (so `255 |a0| + 255 |a1|`
//!   fits `i16`), and what a pair holds beyond that is a sparse residual ([`Residual`]) added
//!   to the strip's sums before they are corrected. For a constant A whose pairs rarely
//!   exceed the bound (trained weights: 0.07% of the pairs of a quantised ResNet-50), chosen
//!   by [`Level::for_a`], never by `detect`;
//! - `Avx2PairsB`: the same with the roles exchanged, for a constant B split by column
//!   (`PackedB::split_pairs`: a product's weights), A's bytes the unsigned operand as at the
//!   VNNI levels;
//! - `Portable`: the `i16` pairs of AVX2 in plain loops, 4 x 16 tiles.
//!
//! Every level computes the same exact integers; tests compare each with the `f64` product.
//!
//! Why one file: the packings and the tile loops are two halves of one layout contract (a
//! panel's width is the tile's, a group's depth the instruction's, the column sums the
//! epilogue's correction); kept together, a change of level or tile shape is one edit read in
//! one place, and the layouts stay private to the kernel that reads them.

use super::super::vector::{as_slots, assume_written, copy};
use crate::error::{Error, Result};
use crate::tensor::{try_vec, try_with_capacity, Scratch};
use std::mem::MaybeUninit;

/// The largest contracted dim whose products are exact in `i32`: `K x 255 x 255 <= i32::MAX`.
pub(in crate::ops) const EXACT_K: usize = (i32::MAX / (255 * 255)) as usize;

/// An instruction-set level of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::ops) enum Level {
    /// Plain loops.
    Portable,
    /// AVX2 `vpmaddwd` on `i16`: A packed widened, B widened in registers.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2 `vpmaddubsw` on unsigned B by signed A whose pairs are bounded, with a residual.
    #[cfg(target_arch = "x86_64")]
    Avx2Pairs,
    /// The same on unsigned A by signed B whose pairs are bounded, with a residual.
    #[cfg(target_arch = "x86_64")]
    Avx2PairsB,
    /// AVX-VNNI `vpdpbusd` on 256-bit registers.
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    /// AVX-512 VNNI `vpdpbusd` on 512-bit registers.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    /// AMX `tdpbusd` on tiles (`amx.rs`), where the CPU has AMX-INT8 and the kernel grants
    /// the tiles.
    #[cfg(target_arch = "x86_64")]
    Amx,
}

impl Level {
    /// The best level this CPU runs for any A, detected once.
    pub fn detect() -> Level {
        static LEVEL: std::sync::OnceLock<Level> = std::sync::OnceLock::new();
        *LEVEL.get_or_init(|| {
            Level::supported()
                .into_iter()
                .rfind(|l| !l.splits_a() && !l.splits_b())
                .unwrap_or(Level::Portable)
        })
    }

    /// The level for a product whose A (`a`, rows of `k`) is known before its B (a
    /// convolution's filters, packed once): `Avx2Pairs` instead of `Avx2` when at most one pair
    /// of A's in [`SPARSE_PAIRS`] exceeds the pair bound, so that the residual costs less than
    /// the instructions the level saves; else `self`.
    pub fn for_a(self, a: Bytes<'_>, k: usize) -> Level {
        #[cfg(target_arch = "x86_64")]
        if self == Level::Avx2 {
            let flip = Level::Avx2Pairs.a_shift(a.signed).flip;
            let mut pairs = 0usize;
            let mut over = 0usize;
            for row in a.data.chunks_exact(k.max(1)) {
                let (runs, last) = row.as_chunks::<2>();
                pairs += runs.len() + last.len();
                over += runs
                    .iter()
                    .filter(|&&[a0, a1]| beyond(&[a0 ^ flip, a1 ^ flip]))
                    .count();
            }
            if over.saturating_mul(SPARSE_PAIRS) <= pairs {
                return Level::Avx2Pairs;
            }
        }
        let _ = (a, k);
        self
    }

    /// Whether A is packed split into a bounded part and a [`Residual`].
    fn splits_a(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self == Level::Avx2Pairs {
            return true;
        }
        false
    }

    /// Whether B is packed split into a bounded part and a [`Residual`] (by column).
    fn splits_b(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self == Level::Avx2PairsB {
            return true;
        }
        false
    }

    /// How A's bytes are stored: as `u8`, or as `i8` for the level that splits them.
    fn a_shift(self, signed: bool) -> Shift {
        Shift::new(signed, !self.splits_a())
    }

    /// How B's bytes are stored: as `i8`, or as `u8` for the level that splits A.
    fn b_shift(self, signed: bool) -> Shift {
        Shift::new(signed, self.splits_a())
    }

    /// How B's `signed` (`int8`, else `uint8`) bytes are stored at this level: XORed with the
    /// first (0 or 0x80), which adds the second (0 or ±128) to their values and zero point.
    pub fn b_bytes(self, signed: bool) -> (u8, i32) {
        let shift = self.b_shift(signed);
        (shift.flip, shift.by)
    }

    /// Every level this CPU runs, worst first.
    pub fn supported() -> Vec<Level> {
        #[allow(unused_mut)]
        let mut levels = vec![Level::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                levels.push(Level::Avx2);
                levels.push(Level::Avx2Pairs);
                levels.push(Level::Avx2PairsB);
                if std::arch::is_x86_feature_detected!("avxvnni") {
                    levels.push(Level::AvxVnni);
                }
            }
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("avx512vnni")
            {
                levels.push(Level::Avx512Vnni);
                if super::amx::usable() {
                    levels.push(Level::Amx);
                }
            }
        }
        levels
    }

    /// Rows and columns of a tile, and the k of one group.
    fn shape(self) -> (usize, usize, usize) {
        match self {
            Level::Portable => (4, 16, 2),
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => (6, 16, 4),
            #[cfg(target_arch = "x86_64")]
            Level::Avx2Pairs | Level::Avx2PairsB => (6, 16, 4),
            #[cfg(target_arch = "x86_64")]
            Level::AvxVnni => (6, 16, 4),
            #[cfg(target_arch = "x86_64")]
            Level::Avx512Vnni => (8, 32, 4),
            #[cfg(target_arch = "x86_64")]
            Level::Amx => (32, 32, 4),
        }
    }

    /// `k` rounded up to what the packings hold: whole groups, and at `Amx` whole chunks of
    /// the 64 bytes a tile row reads (the rows past `k` are zeros in A and in B).
    fn depth(self, k: usize) -> usize {
        #[cfg(target_arch = "x86_64")]
        if self == Level::Amx {
            return k.div_ceil(64) * 64;
        }
        let g = self.shape().2;
        k.div_ceil(g) * g
    }

    /// Whether A is packed widened to `i16`.
    fn wide_a(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self == Level::Avx2 {
            return true;
        }
        self.wide_b()
    }

    /// Whether B is packed widened to `i16` pairs.
    fn wide_b(self) -> bool {
        self == Level::Portable
    }
}

/// A constant operand may exceed the pair bound in one pair of this many and still be split
/// (`Avx2Pairs`, `Avx2PairsB`). On an AMD EPYC (Zen 3) the `vpmaddubsw` tile saves about a
/// quarter of the `Avx2` tile's time (97 against 72 GMAC/s in L1), near `K / 96` cycles per
/// element of C at 3 GHz, and a residual entry costs at most half a cycle per element it
/// reaches (vector shifts and multiplies over a row of B), so the break-even lies near one pair
/// in 25; the quantised ResNet-50 of `check_deployed.py` has at most one in 125 in any layer.
const SPARSE_PAIRS: usize = 64;

/// Whether a pair of adjacent signed bytes of A, multiplied by any two unsigned bytes and
/// summed, stays within `i16`: `255 (|a0| + |a1|) <= 32_640`.
fn within_pair_bound(a0: i32, a1: i32) -> bool {
    a0.abs() + a1.abs() <= 128
}

/// How a level stores an operand's bytes: XORed with `flip` (0 or 0x80), read as `u8` or
/// `i8`, which adds `by` (0 or ±128) to each element's value and so to the zero points.
#[derive(Clone, Copy, Debug)]
struct Shift {
    flip: u8,
    by: i32,
    unsigned: bool,
}

impl Shift {
    /// The shift from `signed` (`int8`, else `uint8`) bytes to `unsigned` stored ones (else
    /// `int8`).
    fn new(signed: bool, unsigned: bool) -> Shift {
        match (signed, unsigned) {
            (true, true) => Shift {
                flip: 0x80,
                by: 128,
                unsigned,
            },
            (false, false) => Shift {
                flip: 0x80,
                by: -128,
                unsigned,
            },
            _ => Shift {
                flip: 0,
                by: 0,
                unsigned,
            },
        }
    }

    /// The stored value of byte `v`.
    #[inline(always)]
    fn value(self, v: u8) -> i32 {
        let v = v ^ self.flip;
        if self.unsigned {
            i32::from(v)
        } else {
            i32::from(v as i8)
        }
    }
}

/// An 8-bit matrix operand: its bytes, row-major, and whether they are `int8`.
#[derive(Clone, Copy, Debug)]
pub(in crate::ops) struct Bytes<'a> {
    /// The elements, as stored.
    pub data: &'a [u8],
    /// `int8` (else `uint8`).
    pub signed: bool,
}

/// Packed elements: bytes, or `i16` for the widened level, in the arena's pooled buffers (a
/// B packed on every run reuses the memory of the last one).
enum Packed {
    Narrow(Scratch<u8>),
    Wide(Scratch<i16>),
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Packed::Narrow(d) => write!(f, "Narrow({} bytes)", d.len()),
            Packed::Wide(d) => write!(f, "Wide({} values)", d.len()),
        }
    }
}

/// B (`K x N`) packed for one level: panels of `NR` columns, each `K` (rounded up to a group)
/// by `NR`, a group of consecutive k (2 or 4) per column together; shifted into `i8`; with its column
/// sums and the shift its zero points take.
#[derive(Debug)]
pub(in crate::ops) struct PackedB {
    level: Level,
    k: usize,
    n: usize,
    /// `k` rounded up to a whole group.
    kg: usize,
    data: Packed,
    /// The sums of the shifted columns (wrapping).
    col_sums: Vec<i32>,
    /// What the shift adds to B's elements, and so to its zero points: 0 or ±128.
    shift: i32,
    /// What the stored columns leave out, by column (the level that splits B; else empty).
    residual: Residual,
}

impl PackedB {
    /// B packed for `Avx2` taking `Avx2PairsB` instead, split, when at most one of its pairs
    /// of adjacent k in [`SPARSE_PAIRS`] exceeds the pair bound (a constant B, the weights of
    /// a product, packed once); else B as it is. The two levels store B's bytes alike.
    pub fn split_pairs(mut self) -> Result<PackedB> {
        #[cfg(target_arch = "x86_64")]
        if let (Level::Avx2, Packed::Narrow(d)) = (self.level, &mut self.data) {
            let over = d.as_chunks::<2>().0.iter().filter(|p| beyond(p)).count();
            if over.saturating_mul(SPARSE_PAIRS) <= self.k.div_ceil(2) * self.n {
                let nr = Level::Avx2PairsB.shape().1;
                self.residual = Residual::split_columns(d, (self.kg, nr, self.n))?;
                self.level = Level::Avx2PairsB;
            }
        }
        Ok(self)
    }

    /// The level B is packed for, which the A it multiplies is packed for too.
    pub fn level(&self) -> Level {
        self.level
    }

    /// The packing of a `k x n` B for `level` from its parts, split if the level splits B.
    fn assemble(
        level: Level,
        (k, n): (usize, usize),
        mut data: Packed,
        col_sums: Vec<i32>,
        shift: i32,
    ) -> Result<PackedB> {
        let nr = level.shape().1;
        let kg = level.depth(k);
        let residual = match &mut data {
            Packed::Narrow(d) if level.splits_b() => Residual::split_columns(d, (kg, nr, n))?,
            _ => Residual::default(),
        };
        Ok(PackedB {
            level,
            k,
            n,
            kg,
            data,
            col_sums,
            shift,
            residual,
        })
    }

    /// Packs the `k x n` matrix `b` for `level`.
    pub fn new(b: Bytes<'_>, k: usize, n: usize, level: Level) -> Result<PackedB> {
        if k.checked_mul(n).is_none_or(|len| b.data.len() < len) {
            return Err(Error::Eval("B is smaller than its shape".into()));
        }
        let (_, nr, g) = level.shape();
        let len = packed_len(k, n, level)?;
        if !level.wide_b() {
            let rows = &b.data[..k * n];
            return PackedB::from_rows(k, n, b.signed, level, |kk, out| {
                copy(out, &rows[kk * n..(kk + 1) * n]);
            });
        }
        let shift = level.b_shift(b.signed);
        let mut col_sums = try_vec(n, 0i32)?;
        add_rows(&b.data[..k * n], shift, &mut col_sums);
        // Stored values are bytes, so they fit `i16`.
        let at = |kk: usize, j: usize| shift.value(b.data[kk * n + j]) as i16;
        // SAFETY: `pack_columns` writes every element.
        let data =
            Packed::Wide(unsafe { Scratch::new_with(len, |d| pack_columns(d, k, n, nr, g, at)) }?);
        PackedB::assemble(level, (k, n), data, col_sums, shift.by)
    }

    /// Packs the `k x n` matrix whose transpose `bt` (`n x k`, row-major) holds, for `level`:
    /// a column of B is a row of `bt`, so each group is a run of consecutive bytes.
    pub fn from_transposed(bt: Bytes<'_>, k: usize, n: usize, level: Level) -> Result<PackedB> {
        if k.checked_mul(n).is_none_or(|len| bt.data.len() < len) {
            return Err(Error::Eval("B is smaller than its shape".into()));
        }
        let (_, nr, g) = level.shape();
        let len = packed_len(k, n, level)?;
        let shift = level.b_shift(bt.signed);
        let mut col_sums = try_vec(n, 0i32)?;
        for (s, row) in col_sums.iter_mut().zip(bt.data.chunks_exact(k.max(1))) {
            *s = row
                .iter()
                .fold(0i32, |s, &v| s.wrapping_add(shift.value(v)));
        }
        let at = |kk: usize, j: usize| bt.data[j * k + kk];
        // SAFETY: `pack_columns` writes every element.
        let data = if level.wide_b() {
            Packed::Wide(unsafe {
                Scratch::new_with(len, |d| {
                    // Stored values are bytes, so they fit `i16`.
                    pack_columns(d, k, n, nr, g, |kk, j| shift.value(at(kk, j)) as i16)
                })
            }?)
        } else {
            Packed::Narrow(unsafe {
                Scratch::new_with(len, |d| {
                    pack_columns(d, k, n, nr, g, |kk, j| at(kk, j) ^ shift.flip)
                })
            }?)
        };
        PackedB::assemble(level, (k, n), data, col_sums, shift.by)
    }

    /// Packs the `k x n` matrix whose row `kk` `row(kk, out)` writes into `out` (`n` bytes of
    /// the operand's type), for `level`, without B ever being whole in memory: rows are made
    /// four at a time into a buffer that stays in cache, summed, and interleaved into every
    /// panel (an im2col matrix is packed as it is made).
    pub fn from_rows(
        k: usize,
        n: usize,
        signed: bool,
        level: Level,
        row: impl Fn(usize, &mut [MaybeUninit<u8>]) + Sync,
    ) -> Result<PackedB> {
        let nr = level.shape().1;
        let len = packed_len(k, n, level)?;
        let kg = level.depth(k);
        let shift = level.b_shift(signed);
        let flip = shift.flip;
        if level.wide_b() {
            let mut whole = try_vec(k.saturating_mul(n), 0u8)?;
            for (kk, out) in whole.chunks_exact_mut(n.max(1)).take(k).enumerate() {
                // SAFETY: `row` writes only initialised bytes.
                row(kk, unsafe { as_slots(out) });
            }
            return PackedB::new(
                Bytes {
                    data: &whole,
                    signed,
                },
                k,
                n,
                level,
            );
        }
        // Groups of four rows split over the pool, each part with its own rows and sums (no
        // part when B has no rows).
        let groups = kg / 4;
        let parts = crate::par::threads()
            .min(groups)
            .min(groups.saturating_mul(n) / (1 << 16) + 1);
        let mut scratch = Vec::new();
        for _ in 0..parts {
            scratch.push((try_vec(n.saturating_mul(4), 0u8)?, try_vec(n, 0i32)?));
        }
        let write = |d: &mut [MaybeUninit<u8>]| {
            let panels = Panels {
                ptr: d.as_mut_ptr(),
                len: d.len(),
            };
            let fill = |(p, (rows, sums)): (usize, &mut (Vec<u8>, Vec<i32>))| {
                for q in groups * p / parts..groups * (p + 1) / parts {
                    let have = 4.min(k.saturating_sub(4 * q));
                    for (t, out) in rows.chunks_exact_mut(n.max(1)).enumerate() {
                        if t < have {
                            // SAFETY: `row` writes only initialised bytes.
                            row(4 * q + t, unsafe { as_slots(out) });
                        } else {
                            // Rows past K pack as zeros once flipped.
                            out.fill(flip);
                        }
                    }
                    add_rows(&rows[..have * n], shift, sums);
                    // SAFETY: group q of every panel is this part's alone.
                    unsafe { panels.interleave(rows, q, n, nr, kg, flip) };
                }
            };
            use rayon::prelude::*;
            if parts == 1 {
                scratch.iter_mut().enumerate().for_each(fill);
            } else {
                scratch.par_iter_mut().enumerate().for_each(fill);
            }
        };
        // SAFETY: every group of every panel is written by the part that owns the group.
        let d = unsafe { Scratch::new_with(len, write) }?;
        let data = Packed::Narrow(d);
        let mut col_sums = try_vec(n, 0i32)?;
        for (_, sums) in &scratch {
            for (s, &v) in col_sums.iter_mut().zip(sums) {
                *s = s.wrapping_add(v);
            }
        }
        PackedB::assemble(level, (k, n), data, col_sums, shift.by)
    }
}

/// Adds every row of `b` (rows of `sums.len()` bytes, each stored as `shift` says) to `sums`,
/// wrapping.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn add_rows(b: &[u8], shift: Shift, sums: &mut [i32]) {
    let flip = shift.flip;
    for row in b.chunks_exact(sums.len().max(1)) {
        if shift.unsigned {
            for (s, &v) in sums.iter_mut().zip(row) {
                *s = s.wrapping_add(i32::from(v ^ flip));
            }
        } else {
            for (s, &v) in sums.iter_mut().zip(row) {
                *s = s.wrapping_add(i32::from((v ^ flip) as i8));
            }
        }
    }
}

/// The elements of a `k x n` B packed for `level`: whole panels of whole groups.
fn packed_len(k: usize, n: usize, level: Level) -> Result<usize> {
    let nr = level.shape().1;
    n.div_ceil(nr)
        .checked_mul(level.depth(k))
        .and_then(|l| l.checked_mul(nr))
        .ok_or_else(|| Error::Eval(format!("B of {k} x {n} is too large")))
}

/// Writes the `k x n` matrix whose element `(kk, j)` is `at(kk, j)` into `d` as panels of `nr`
/// columns by groups of `g` rows: element `(kk, j)` goes to panel `j / nr`, group `kk / g`,
/// column `j % nr`, slot `kk % g`; `d` holds whole panels and groups, and every element is
/// written (zero where B has none).
fn pack_columns<T: Copy + Send + Default>(
    d: &mut [MaybeUninit<T>],
    k: usize,
    n: usize,
    nr: usize,
    g: usize,
    at: impl Fn(usize, usize) -> T + Sync,
) {
    each_panel(d, n, nr, g, |q, col0, cols, group| {
        for (c, slots) in group.chunks_exact_mut(g).enumerate() {
            for (t, slot) in slots.iter_mut().enumerate() {
                let kk = q * g + t;
                slot.write(if c < cols && kk < k {
                    at(kk, col0 + c)
                } else {
                    T::default()
                });
            }
        }
    });
}

/// The packed panels of B while parts of the pool write them, each part its own groups.
#[derive(Clone, Copy)]
struct Panels {
    ptr: *mut MaybeUninit<u8>,
    len: usize,
}

// SAFETY: the parts write disjoint groups (see `PackedB::from_rows`).
unsafe impl Send for Panels {}
unsafe impl Sync for Panels {}

impl Panels {
    /// Writes group `q` of every panel from `rows` (four rows of `n` bytes), each byte XORed
    /// with `flip`: column `j`'s four bytes go to panel `j / nr`, column `j % nr` of the group;
    /// columns past `n` are zeros.
    ///
    /// # Safety
    /// No other thread writes group `q`; the panels hold `kg` rows (a multiple of four, more
    /// than `4 q`) of `nr` columns each for `n` columns.
    unsafe fn interleave(self, rows: &[u8], q: usize, n: usize, nr: usize, kg: usize, flip: u8) {
        let r = [0, 1, 2, 3].map(|t| &rows[t * n..(t + 1) * n]);
        for p in 0..n.div_ceil(nr) {
            let at = p * kg * nr + q * nr * 4;
            assert!(at + nr * 4 <= self.len);
            // SAFETY: in bounds (asserted); group `q` of panel `p` is this caller's alone.
            let group = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), nr * 4) };
            let (col0, cols) = (p * nr, nr.min(n - p * nr));
            #[cfg(target_arch = "x86_64")]
            let done = {
                let done = cols / 16 * 16;
                for (c0, out) in (0..done).step_by(16).zip(group.chunks_exact_mut(64)) {
                    let c0 = col0 + c0;
                    interleave16(r.map(|r| &r[c0..c0 + 16]), flip, out);
                }
                done
            };
            #[cfg(not(target_arch = "x86_64"))]
            let done = 0;
            for (c, slots) in group.chunks_exact_mut(4).enumerate().skip(done) {
                for (t, slot) in slots.iter_mut().enumerate() {
                    slot.write(if c < cols { r[t][col0 + c] ^ flip } else { 0 });
                }
            }
        }
    }
}

/// Sixteen columns of four rows (each XORed with `flip`) as sixteen runs of four bytes, one run
/// per column, into `out` (64 bytes).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(super) fn interleave16(rows: [&[u8]; 4], flip: u8, out: &mut [MaybeUninit<u8>]) {
    use std::arch::x86_64::*;
    assert!(rows.iter().all(|r| r.len() >= 16) && out.len() >= 64);
    // SAFETY: SSE2 is part of x86-64; the assertion bounds the loads and stores.
    unsafe {
        let f = _mm_set1_epi8(flip as i8);
        let load = |r: &[u8]| _mm_xor_si128(_mm_loadu_si128(r.as_ptr().cast()), f);
        let [r0, r1, r2, r3] = rows.map(load);
        let (lo01, hi01) = (_mm_unpacklo_epi8(r0, r1), _mm_unpackhi_epi8(r0, r1));
        let (lo23, hi23) = (_mm_unpacklo_epi8(r2, r3), _mm_unpackhi_epi8(r2, r3));
        let p = out.as_mut_ptr().cast::<__m128i>();
        _mm_storeu_si128(p, _mm_unpacklo_epi16(lo01, lo23));
        _mm_storeu_si128(p.add(1), _mm_unpackhi_epi16(lo01, lo23));
        _mm_storeu_si128(p.add(2), _mm_unpacklo_epi16(hi01, hi23));
        _mm_storeu_si128(p.add(3), _mm_unpackhi_epi16(hi01, hi23));
    }
}

/// Calls `fill(q, col0, cols, group)` for every group `q` of `g` rows of every panel of `nr`
/// columns of a matrix of `n` columns packed into `d` (whole panels of the level's depth): the
/// group's `nr * g` elements start at column `col0`, of which `cols` exist. Panels are
/// independent and split over the pool when there are enough elements to move.
fn each_panel<T: Send>(
    d: &mut [MaybeUninit<T>],
    n: usize,
    nr: usize,
    g: usize,
    fill: impl Fn(usize, usize, usize, &mut [MaybeUninit<T>]) + Sync,
) {
    use rayon::prelude::*;
    // `d` holds whole panels of the level's depth.
    let panels = n.div_ceil(nr);
    let kg = d.len() / (panels * nr).max(1);
    if kg == 0 {
        return;
    }
    let min_len = crate::par::min_len(panels, &[kg, nr]);
    d.par_chunks_exact_mut(kg * nr)
        .enumerate()
        .with_min_len(min_len)
        .for_each(|(p, panel)| {
            let (col0, cols) = (p * nr, nr.min(n - p * nr));
            for (q, group) in panel.chunks_exact_mut(nr * g).enumerate() {
                fill(q, col0, cols, group);
            }
        });
}

/// A's rows, shifted into `u8`, padded to whole tiles and groups, with the per-row terms of the
/// zero-point correction.
#[derive(Debug)]
pub(in crate::ops) struct PackedA {
    level: Level,
    m: usize,
    k: usize,
    data: Packed,
    /// Elements per packed row.
    lda: usize,
    /// `rs[i] - K za[i]`, with the shifted row sums and zero points.
    row_terms: Vec<i32>,
    /// The shifted zero point of each row.
    row_zeros: Vec<i32>,
    /// What the stored rows leave out (the level that splits A; else empty).
    residual: Residual,
}

/// What a split operand's stored rows of A (or columns of B) leave out: per row, `(k, value)`
/// for each element whose pair exceeded the bound, in compressed rows (row `i`'s entries are
/// `entries[starts[i]..starts[i + 1]]`; no rows when the operand is not split).
#[derive(Clone, Debug, Default)]
pub(in crate::ops) struct Residual {
    starts: Vec<usize>,
    entries: Vec<(usize, i32)>,
}

impl Residual {
    /// Row (or column) `i`'s entries.
    pub(in crate::ops) fn row(&self, i: usize) -> &[(usize, i32)] {
        match self.starts.get(i..i + 2) {
            Some(&[start, end]) => &self.entries[start..end],
            _ => &[],
        }
    }

    /// Splits the first `m` of the stored rows `d` (`lda` signed bytes each, `lda` even) in
    /// place, each pair of adjacent k beyond the bound by [`split_pair`], whose rest becomes
    /// an entry of its row.
    fn split(d: &mut [u8], m: usize, lda: usize) -> Result<Residual> {
        let count = d
            .chunks_exact(lda.max(1))
            .take(m)
            .map(|row| row.as_chunks::<2>().0.iter().filter(|p| beyond(p)).count())
            .sum();
        let mut starts = try_vec(m + 1, 0usize)?;
        let mut entries = try_with_capacity(count)?;
        for (i, row) in d.chunks_exact_mut(lda.max(1)).take(m).enumerate() {
            for (q, pair) in row.as_chunks_mut::<2>().0.iter_mut().enumerate() {
                if let Some((t, v)) = split_pair(pair) {
                    entries.push((2 * q + t, v));
                }
            }
            starts[i + 1] = entries.len();
        }
        Ok(Residual { starts, entries })
    }

    /// Splits B's stored panels `d` (`kg` rows of `nr` columns each, `n` columns, groups of
    /// four k per column) in place as [`Residual::split`] splits rows: each column's pairs of
    /// adjacent k. The residual goes by column.
    fn split_columns(d: &mut [u8], (kg, nr, n): (usize, usize, usize)) -> Result<Residual> {
        let count = d.as_chunks::<2>().0.iter().filter(|p| beyond(p)).count();
        let mut starts = try_vec(n + 1, 0usize)?;
        let mut entries = try_with_capacity(count)?;
        for j in 0..n {
            let panel = &mut d[j / nr * kg * nr..(j / nr + 1) * kg * nr];
            for (q, group) in panel.chunks_exact_mut(4 * nr).enumerate() {
                let column = &mut group[j % nr * 4..j % nr * 4 + 4];
                for (h, pair) in column.as_chunks_mut::<2>().0.iter_mut().enumerate() {
                    if let Some((t, v)) = split_pair(pair) {
                        entries.push((4 * q + 2 * h + t, v));
                    }
                }
            }
            starts[j + 1] = entries.len();
        }
        Ok(Residual { starts, entries })
    }

    /// Whether any of the rows (or columns) `range` has an entry.
    fn any(&self, range: std::ops::Range<usize>) -> bool {
        match (self.starts.get(range.start), self.starts.get(range.end)) {
            (Some(start), Some(end)) => end > start,
            _ => false,
        }
    }
}

/// Whether a pair of stored signed bytes exceeds the pair bound.
fn beyond(&[a0, a1]: &[u8; 2]) -> bool {
    !within_pair_bound(i32::from(a0 as i8), i32::from(a1 as i8))
}

/// Splits a pair of stored signed bytes beyond the bound in place: the element of larger
/// magnitude stays, the other keeps what the bound leaves it (its sign, `128 - |larger|`);
/// returns that element's place in the pair and its rest (within `i8`: at most `|a0| + |a1| -
/// 128`). None for a pair within the bound.
fn split_pair(pair: &mut [u8; 2]) -> Option<(usize, i32)> {
    if !beyond(pair) {
        return None;
    }
    let [a0, a1] = pair.map(|v| i32::from(v as i8));
    let (keep, cut) = if a0.abs() >= a1.abs() { (0, 1) } else { (1, 0) };
    let [big, small] = [[a0, a1][keep], [a0, a1][cut]];
    // `128 - |big|` lies in `0..128` (the pair exceeds the bound, so `|big| >= 1`).
    let stored = small.signum() * (128 - big.abs());
    pair[cut] = stored as i8 as u8;
    Some((cut, small - stored))
}

impl PackedA {
    /// Packs the `m x k` matrix `a` with its zero points `za` (one, or one per row) for `level`:
    /// constant operands (a convolution's filters) are packed once and multiplied many times
    /// ([`gemm_packed_into`]).
    pub fn new(a: Bytes<'_>, m: usize, k: usize, za: &[i32], level: Level) -> Result<PackedA> {
        if !(za.len() == 1 || za.len() == m) {
            return Err(Error::Eval("zero points do not match the operands".into()));
        }
        pack_a(a, m, k, za, level)
    }

    /// The rows as bytes and the bytes per row, unless the level widens them.
    pub fn narrow(&self) -> Option<(&[u8], usize)> {
        match &self.data {
            Packed::Narrow(d) => Some((d, self.lda)),
            Packed::Wide(_) => None,
        }
    }

    /// The per-row terms of the zero-point correction, `rs[i] - K za[i]` and `za[i]` (shifted).
    pub fn row_terms(&self) -> (&[i32], &[i32]) {
        (&self.row_terms, &self.row_zeros)
    }

    /// What the stored rows leave out (empty unless the level splits A).
    pub fn residual(&self) -> &Residual {
        &self.residual
    }
}

fn pack_a(a: Bytes<'_>, m: usize, k: usize, za: &[i32], level: Level) -> Result<PackedA> {
    let mr = level.shape().0;
    let lda = level.depth(k);
    let rows = m.div_ceil(mr) * mr;
    let len = rows
        .checked_mul(lda)
        .ok_or_else(|| Error::Eval(format!("A of {m} x {k} is too large")))?;
    if a.data.len() < m * k {
        return Err(Error::Eval("A is smaller than its shape".into()));
    }
    let shift = level.a_shift(a.signed);
    let mut row_terms = try_vec(rows, 0i32)?;
    let mut row_zeros = try_vec(rows, 0i32)?;
    let kk = k as i32;
    let src = |i: usize| &a.data[i * k..(i + 1) * k];
    let mut finish = |i: usize, sum: i32| {
        let z = za[if za.len() == 1 { 0 } else { i }].wrapping_add(shift.by);
        row_zeros[i] = z;
        row_terms[i] = sum.wrapping_sub(kk.wrapping_mul(z));
    };
    let mut residual = Residual::default();
    let data = if level.wide_a() {
        let mut d = Scratch::new(len, 0i16)?;
        for i in 0..m {
            let mut sum = 0i32;
            for (o, &v) in d[i * lda..].iter_mut().zip(src(i)) {
                // Stored values are bytes, so they fit `i16`.
                *o = shift.value(v) as i16;
                sum = sum.wrapping_add(shift.value(v));
            }
            finish(i, sum);
        }
        Packed::Wide(d)
    } else {
        let mut d = Scratch::new(len, 0u8)?;
        for i in 0..m {
            let mut sum = 0i32;
            for (o, &v) in d[i * lda..].iter_mut().zip(src(i)) {
                *o = v ^ shift.flip;
                sum = sum.wrapping_add(shift.value(v));
            }
            finish(i, sum);
        }
        if level.splits_a() {
            residual = Residual::split(&mut d, m, lda)?;
        }
        Packed::Narrow(d)
    };
    Ok(PackedA {
        level,
        m,
        k,
        data,
        lda,
        row_terms,
        row_zeros,
        residual,
    })
}

/// Where the kernel puts the product: each finished row segment, the exact sums of row `i` for
/// columns `col0..col0 + sums.len()`, is handed to the sink as soon as its tile is summed (a
/// requantisation then reads the sums while they are in registers' reach, and no `int32`
/// product is ever stored whole).
pub(in crate::ops) trait Sink: Sync {
    /// Stores one row segment.
    ///
    /// # Safety
    /// Concurrent calls store disjoint segments; `i` and the columns lie in the product.
    unsafe fn store(&self, i: usize, col0: usize, sums: &[i32]);
}

/// The sink that writes the sums themselves: rows of `n` `i32`.
struct Sums32 {
    ptr: *mut MaybeUninit<i32>,
    n: usize,
}

// SAFETY: tasks store disjoint (row, column) segments (`Sink::store`'s contract).
unsafe impl Send for Sums32 {}
unsafe impl Sync for Sums32 {}

impl Sink for Sums32 {
    unsafe fn store(&self, i: usize, col0: usize, sums: &[i32]) {
        // SAFETY: the segment lies in the output (the caller's promise) and is this call's alone.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(self.ptr.add(i * self.n + col0), sums.len()) };
        copy(dst, sums);
    }
}

/// One task: rows `rows` (a multiple of the tile height from the start) and panels `panels`.
struct Task<'a> {
    a: &'a PackedA,
    b: &'a PackedB,
    /// The shifted zero point of each column (`n` values, one per column).
    col_zeros: &'a [i32],
    m: usize,
    sink: &'a dyn Sink,
}

/// Writes `(A - za) @ (B - zb)` for the `m x k` matrix `a` into `out` (`m x n`, row-major).
/// `za` holds one zero point or one per row, `zb` one or one per column.
///
/// The caller keeps `k <= EXACT_K` for exact results; beyond, the sums wrap. (The operators
/// hand their sums to a [`Sink`]; the tests read them whole.)
#[cfg(test)]
fn gemm(
    a: Bytes<'_>,
    m: usize,
    za: &[i32],
    b: &PackedB,
    zb: &[i32],
    out: &mut [i32],
) -> Result<()> {
    // SAFETY: the product writes only initialised values.
    gemm_into(a, m, za, b, zb, unsafe { as_slots(out) }).map(|_| ())
}

/// [`gemm`] into an output that may be uninitialised: every element is written, and returned
/// initialised.
pub(in crate::ops) fn gemm_into<'o>(
    a: Bytes<'_>,
    m: usize,
    za: &[i32],
    b: &PackedB,
    zb: &[i32],
    out: &'o mut [MaybeUninit<i32>],
) -> Result<&'o mut [i32]> {
    if out.len() != m * b.n {
        return Err(Error::Eval("the output does not hold its shape".into()));
    }
    if out.is_empty() {
        return Ok(&mut []);
    }
    let packed = PackedA::new(a, m, b.k, za, b.level)?;
    gemm_packed_into(&packed, b, zb, out)
}

/// [`gemm_into`] of an A packed beforehand (for B's level and contracted dim).
pub(in crate::ops) fn gemm_packed_into<'o>(
    packed: &PackedA,
    b: &PackedB,
    zb: &[i32],
    out: &'o mut [MaybeUninit<i32>],
) -> Result<&'o mut [i32]> {
    if out.len() != packed.m * b.n {
        return Err(Error::Eval("the output does not hold its shape".into()));
    }
    let sink = Sums32 {
        ptr: out.as_mut_ptr(),
        n: b.n,
    };
    gemm_packed_to(packed, b, zb, &sink)?;
    // SAFETY: the product stores every row segment of its `m x n` sums.
    Ok(unsafe { assume_written(out) })
}

/// [`gemm_packed_into`] into a [`Sink`], which receives every row segment of the `m x n`
/// product exactly once.
pub(in crate::ops) fn gemm_packed_to(
    packed: &PackedA,
    b: &PackedB,
    zb: &[i32],
    sink: &dyn Sink,
) -> Result<()> {
    let (m, k, n) = (packed.m, b.k, b.n);
    if packed.k != k || packed.level != b.level {
        return Err(Error::Eval(
            "A and B were packed for different products".into(),
        ));
    }
    if !(zb.len() == 1 || zb.len() == n) {
        return Err(Error::Eval("zero points do not match the operands".into()));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let level = b.level;
    let mut col_zeros = try_vec(n, 0i32)?;
    for (j, z) in col_zeros.iter_mut().enumerate() {
        *z = zb[if zb.len() == 1 { 0 } else { j }].wrapping_add(b.shift);
    }
    let (mr, nr, _) = level.shape();
    let task = Task {
        a: packed,
        b,
        col_zeros: &col_zeros,
        m,
        sink,
    };
    let blocks = m.div_ceil(mr);
    let panels = n.div_ceil(nr);
    let threads = crate::par::threads();
    let whole = crate::par::min_len(1, &[m, n, k]) == usize::MAX;
    if threads <= 1 || whole {
        // SAFETY: one task stores the whole product.
        unsafe { run(&task, 0..blocks, 0..panels) };
        return Ok(());
    }
    // Rows when there are enough row tiles for every thread, else panels.
    use rayon::prelude::*;
    if blocks >= 2 * threads || blocks >= panels {
        let parts = threads.min(blocks);
        (0..parts).into_par_iter().for_each(|p| {
            let r = blocks * p / parts..blocks * (p + 1) / parts;
            // SAFETY: each task stores the rows of its own row tiles.
            unsafe { run(&task, r, 0..panels) };
        });
    } else {
        let parts = threads.min(panels);
        (0..parts).into_par_iter().for_each(|p| {
            let c = panels * p / parts..panels * (p + 1) / parts;
            // SAFETY: each task stores the columns of its own panels.
            unsafe { run(&task, 0..blocks, c) };
        });
    }
    Ok(())
}

/// Runs the tiles of `blocks` (row tiles) by `panels` on the kernel of the task's level.
///
/// # Safety
/// No concurrent task writes these rows and columns of `out`, which holds `m x n` elements.
unsafe fn run(t: &Task<'_>, blocks: std::ops::Range<usize>, panels: std::ops::Range<usize>) {
    match (t.b.level, &t.a.data, &t.b.data) {
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512Vnni, Packed::Narrow(a), Packed::Narrow(b)) => unsafe {
            x86::run_avx512vnni(t, a, b, blocks, panels)
        },
        #[cfg(target_arch = "x86_64")]
        (Level::Amx, Packed::Narrow(a), Packed::Narrow(b)) => unsafe {
            x86::run_amx(t, a, b, blocks, panels)
        },
        #[cfg(target_arch = "x86_64")]
        (Level::AvxVnni, Packed::Narrow(a), Packed::Narrow(b)) => unsafe {
            x86::run_avxvnni(t, a, b, blocks, panels)
        },
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2, Packed::Wide(a), Packed::Narrow(b)) => unsafe {
            x86::run_avx2(t, a, b, blocks, panels)
        },
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2Pairs, Packed::Narrow(a), Packed::Narrow(b)) => unsafe {
            x86::run_avx2_pairs(t, a, b, blocks, panels)
        },
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2PairsB, Packed::Narrow(a), Packed::Narrow(b)) => unsafe {
            x86::run_avx2_pairs_b(t, a, b, blocks, panels)
        },
        (_, Packed::Wide(a), Packed::Wide(b)) => unsafe {
            let tile = via_array(|a, lda, b, groups, _, acc| portable_tile(a, lda, b, groups, acc));
            drive::<4, 16, i16, i16>(t, a, b, blocks, panels, tile)
        },
        // The packings of one level always agree.
        _ => {}
    }
}

/// Packed B that one strip of panels may hold: it stays in the L2 cache while every row tile
/// of the task passes over it.
const STRIP_BYTES: usize = 256 * 1024;

/// Columns in one strip at most: each row's sums reach the sink as one run of this many
/// columns, so the sink's per-call work (a dynamic call, the requantisation's dispatch) is
/// shared by many tiles.
const STRIP_COLS: usize = 256;

/// The sums of a strip's `MR` rows.
type Strip<const MR: usize> = [[i32; STRIP_COLS]; MR];

/// The tile loop every level shares: strips of panels outer (a strip of B stays in cache
/// across row tiles), row tiles inner; each tile summed by `tile` (told how many of its
/// columns lie in the product) into the strip's rows at its panel's column (`NR` columns,
/// which the strip always has room for), which then take A's or B's residual (if split) and
/// the zero-point correction and are stored, one run per row.
///
/// # Safety
/// As [`run`]; `MR`, `NR` are the level's tile shape and `a`, `b` its packings.
#[inline(always)]
unsafe fn drive<const MR: usize, const NR: usize, TA: Copy + Into<i32>, TB: Element>(
    t: &Task<'_>,
    a: &[TA],
    b: &[TB],
    blocks: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    tile: impl Fn(&[TA], usize, &[TB], usize, usize, &mut Strip<MR>, usize),
) {
    let (lda, kg, n) = (t.a.lda, t.b.kg, t.b.n);
    let g = t.b.level.shape().2;
    let groups = kg / g;
    let panel_bytes = (kg * NR * std::mem::size_of::<TB>()).max(1);
    let per_strip = (STRIP_BYTES / panel_bytes).clamp(1, STRIP_COLS / NR);
    let mut strip = [[0i32; STRIP_COLS]; MR];
    let mut p0 = panels.start;
    while p0 < panels.end {
        let p1 = (p0 + per_strip).min(panels.end);
        let col0 = p0 * NR;
        let cols = (p1 * NR).min(n) - col0;
        let zb = &t.col_zeros[col0..col0 + cols];
        let cs = &t.b.col_sums[col0..col0 + cols];
        for blk in blocks.clone() {
            let row0 = blk * MR;
            let rows = &a[row0 * lda..(row0 + MR) * lda];
            for p in p0..p1 {
                let at = (p - p0) * NR;
                let width = NR.min(n - p * NR);
                let panel = &b[p * kg * NR..(p + 1) * kg * NR];
                tile(rows, lda, panel, groups, width, &mut strip, at);
            }
            let live = MR.min(t.m - row0);
            if t.b.residual.any(col0..col0 + cols) {
                // Entries by column, each added to the tile's rows.
                for j in 0..cols {
                    for &(kk, v) in t.b.residual.row(col0 + j) {
                        for (r, sums) in strip.iter_mut().enumerate().take(live) {
                            let x: i32 = a[(row0 + r) * lda + kk].into();
                            sums[j] = sums[j].wrapping_add(v.wrapping_mul(x));
                        }
                    }
                }
            }
            for (r, sums) in strip.iter_mut().enumerate().take(live) {
                let i = row0 + r;
                let (ri, zi) = (t.a.row_terms[i], t.a.row_zeros[i]);
                let sums = &mut sums[..cols];
                let strip_b = &b[p0 * kg * NR..p1 * kg * NR];
                for &entry in t.a.residual.row(i) {
                    TB::add_row(strip_b, (kg, NR, g), entry, sums);
                }
                for ((v, &z), &s) in sums.iter_mut().zip(zb).zip(cs) {
                    *v = v
                        .wrapping_sub(z.wrapping_mul(ri))
                        .wrapping_sub(zi.wrapping_mul(s));
                }
                // SAFETY: row i < m and columns col0..col0 + cols <= n lie in the product, and
                // no other task stores them (the caller's promise).
                unsafe { t.sink.store(i, col0, sums) };
            }
        }
        p0 = p1;
    }
}

/// A tile kernel that sums into an `MR x NR` array, as [`drive`] takes it: the array is then
/// copied to the strip (a whole panel's width, a constant: moves, not a call to `memcpy`).
#[inline(always)]
fn via_array<const MR: usize, const NR: usize, TA, TB>(
    tile: impl Fn(&[TA], usize, &[TB], usize, usize, &mut [[i32; NR]; MR]),
) -> impl Fn(&[TA], usize, &[TB], usize, usize, &mut Strip<MR>, usize) {
    move |a, lda, b, groups, width, strip, at| {
        let mut acc = [[0i32; NR]; MR];
        tile(a, lda, b, groups, width, &mut acc);
        for (dst, src) in strip.iter_mut().zip(&acc) {
            dst[at..at + NR].copy_from_slice(src);
        }
    }
}

/// An element of packed B as a residual entry of A reads it.
trait Element: Copy + Into<i32> {
    /// Adds `v` times row `kk` of `panels` (each `kg` rows of `nr` columns, in groups of `g`
    /// consecutive k) to `sums`, the panels' columns that lie in the product.
    #[inline(always)]
    fn add_row(
        panels: &[Self],
        layout: (usize, usize, usize),
        entry: (usize, i32),
        sums: &mut [i32],
    ) {
        add_row_by_element(panels, layout, entry, sums);
    }
}

/// [`Element::add_row`] an element at a time, for any layout.
#[inline(always)]
fn add_row_by_element<T: Element>(
    panels: &[T],
    (kg, nr, g): (usize, usize, usize),
    (kk, v): (usize, i32),
    sums: &mut [i32],
) {
    let at = kk / g * nr * g + kk % g;
    for (j, s) in sums.iter_mut().enumerate() {
        let x: i32 = panels[j / nr * kg * nr + at + j % nr * g].into();
        *s = s.wrapping_add(v.wrapping_mul(x));
    }
}

impl Element for i16 {}

impl Element for u8 {
    /// A group of four bytes per column is one `u32` lane, from which a shift takes row `kk`'s
    /// byte: the loop compiles to vector shifts and multiplies.
    #[inline(always)]
    fn add_row(
        panels: &[u8],
        layout: (usize, usize, usize),
        entry: (usize, i32),
        sums: &mut [i32],
    ) {
        let ((kg, nr, g), (kk, v)) = (layout, entry);
        if g != 4 {
            return add_row_by_element(panels, layout, entry, sums);
        }
        let (group, shift) = (kk / 4 * nr * 4, 8 * (kk % 4) as u32);
        for (panel, out) in panels.chunks_exact(kg * nr).zip(sums.chunks_mut(nr)) {
            let lanes = panel[group..group + 4 * nr].as_chunks::<4>().0;
            for (s, lane) in out.iter_mut().zip(lanes) {
                let x = (u32::from_le_bytes(*lane) >> shift) & 0xff;
                *s = s.wrapping_add(v.wrapping_mul(x as i32));
            }
        }
    }
}

/// One `4 x 16` tile in plain loops: `a` holds 4 rows of `lda` values, `b` a panel of pairs
/// of rows (each 16 columns of two values); sums of two products that compile to `pmaddwd`
/// on x86-64 and to widening multiply-adds elsewhere.
#[inline(always)]
fn portable_tile(a: &[i16], lda: usize, b: &[i16], groups: usize, acc: &mut [[i32; 16]; 4]) {
    *acc = [[0; 16]; 4];
    for (q, bq) in b.chunks_exact(32).take(groups).enumerate() {
        let bq: &[i16; 32] = bq.try_into().unwrap_or(&[0; 32]);
        for (r, acc_row) in acc.iter_mut().enumerate() {
            let x0 = i32::from(a[r * lda + 2 * q]);
            let x1 = i32::from(a[r * lda + 2 * q + 1]);
            for (c, s) in acc_row.iter_mut().enumerate() {
                *s = s.wrapping_add(x0 * i32::from(bq[2 * c]) + x1 * i32::from(bq[2 * c + 1]));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The x86-64 levels: each a tile kernel of intrinsics and the shared tile loop compiled
    //! with its target features.

    use super::{drive, via_array, Strip, Task};
    use crate::ops::nn::amx;
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// The shared tile loop on the tile `$tile::<R>` of as many rows `R` as the arm of the
    /// product's row count says: a product of a few rows (a recurrent step of a small batch, a
    /// decoder's one token) takes a tile of as many rows, not a full tile with the rest zero
    /// (the packing pads A to whole tiles, so the first rows of its one row tile are all
    /// there is). Measured on an Intel Xeon (family 6 model 167) at 1 thread, the int8 LSTM of
    /// `check_deployed.py` (batch 4): 4.4 -> 4.0 ms.
    macro_rules! drive_rows {
        ($t:ident, $a:ident, $b:ident, $blocks:ident, $panels:ident,
         $tile:ident::<$ta:ty, $nr:literal>, [$($m:pat => $r:literal),+ $(,)?]) => {
            match $t.m {
                $($m => unsafe {
                    drive::<$r, $nr, $ta, u8>(
                        $t,
                        $a,
                        $b,
                        $blocks,
                        $panels,
                        via_array(|a, lda, b, groups, cols, acc| {
                            $tile::<$r>(a, lda, b, groups, cols, acc)
                        }),
                    )
                },)+
            }
        };
    }

    /// # Safety
    /// As `super::run`, on a CPU with AVX-512F, AVX-512BW and AVX-512 VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn run_avx512vnni(
        t: &Task<'_>,
        a: &[u8],
        b: &[u8],
        blocks: Range<usize>,
        panels: Range<usize>,
    ) {
        drive_rows!(t, a, b, blocks, panels, tile_avx512vnni::<u8, 32>, [
            1 => 1,
            2 => 2,
            3 | 4 => 4,
            _ => 8,
        ]);
    }

    /// # Safety
    /// As `super::run`, where `amx::usable` holds; A and B packed for `Amx`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    pub(super) unsafe fn run_amx(
        t: &Task<'_>,
        a: &[u8],
        b: &[u8],
        blocks: Range<usize>,
        panels: Range<usize>,
    ) {
        // SAFETY: the caller's promise.
        let block = unsafe { amx::Block::begin() };
        // SAFETY: as above.
        unsafe {
            drive::<32, 32, u8, u8>(
                t,
                a,
                b,
                blocks,
                panels,
                |a, lda, b, groups, _, strip, at| tile_amx(&block, a, lda, b, groups, (strip, at)),
            )
        };
    }

    /// A 32 x 32 tile on AMX: 32 rows of A (`lda` bytes apart) by a panel of 32 columns, 64
    /// k (16 groups) per step: the A tiles read 64 bytes of 16 rows, the B tiles 16 groups of
    /// the panel's 128-byte rows, columns 0-15 and 16-31.
    #[inline(always)]
    fn tile_amx(
        block: &amx::Block,
        a: &[u8],
        lda: usize,
        b: &[u8],
        groups: usize,
        (strip, at): (&mut Strip<32>, usize),
    ) {
        assert!(
            groups.is_multiple_of(16)
                && lda >= 4 * groups
                && a.len() >= 31 * lda + 4 * groups
                && b.len() >= groups * 128
        );
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        block.zero();
        for c in 0..groups / 16 {
            let (a0, b0) = (ap.wrapping_add(64 * c), bp.wrapping_add(2048 * c));
            // SAFETY: the assertion bounds the 16 rows of each operand.
            unsafe {
                block.multiply(
                    (a0, a0.wrapping_add(16 * lda), lda),
                    (b0, b0.wrapping_add(64), 128),
                )
            };
        }
        block.store(strip, at);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    fn tile_avx512vnni<const R: usize>(
        a: &[u8],
        lda: usize,
        b: &[u8],
        groups: usize,
        _cols: usize,
        acc: &mut [[i32; 32]; R],
    ) {
        assert!(R >= 1 && a.len() >= (R - 1) * lda + 4 * groups && b.len() >= groups * 128);
        let mut c = [[_mm512_setzero_si512(); 2]; R];
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        for q in 0..groups {
            // SAFETY: the assertion above bounds every read.
            unsafe {
                let b0 = _mm512_loadu_si512(bp.add(q * 128).cast());
                let b1 = _mm512_loadu_si512(bp.add(q * 128 + 64).cast());
                for (r, cr) in c.iter_mut().enumerate() {
                    let x = ap.add(r * lda + 4 * q).cast::<i32>().read_unaligned();
                    let av = _mm512_set1_epi32(x);
                    cr[0] = _mm512_dpbusd_epi32(cr[0], av, b0);
                    cr[1] = _mm512_dpbusd_epi32(cr[1], av, b1);
                }
            }
        }
        for (row, cr) in acc.iter_mut().zip(&c) {
            // SAFETY: a row holds 32 i32, two registers.
            unsafe {
                _mm512_storeu_si512(row.as_mut_ptr().cast(), cr[0]);
                _mm512_storeu_si512(row.as_mut_ptr().add(16).cast(), cr[1]);
            }
        }
    }

    /// # Safety
    /// As `super::run`, on a CPU with AVX2 and AVX-VNNI.
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn run_avxvnni(
        t: &Task<'_>,
        a: &[u8],
        b: &[u8],
        blocks: Range<usize>,
        panels: Range<usize>,
    ) {
        unsafe {
            let tile = via_array(|a, lda, b, groups, _, acc| tile_avxvnni(a, lda, b, groups, acc));
            drive::<6, 16, u8, u8>(t, a, b, blocks, panels, tile)
        }
    }

    #[target_feature(enable = "avx2,avxvnni")]
    #[inline]
    fn tile_avxvnni(a: &[u8], lda: usize, b: &[u8], groups: usize, acc: &mut [[i32; 16]; 6]) {
        assert!(a.len() >= 5 * lda + 4 * groups && b.len() >= groups * 64);
        let mut c = [[_mm256_setzero_si256(); 2]; 6];
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        for q in 0..groups {
            // SAFETY: the assertion above bounds every read.
            unsafe {
                let b0 = _mm256_loadu_si256(bp.add(q * 64).cast());
                let b1 = _mm256_loadu_si256(bp.add(q * 64 + 32).cast());
                for (r, cr) in c.iter_mut().enumerate() {
                    let x = ap.add(r * lda + 4 * q).cast::<i32>().read_unaligned();
                    let av = _mm256_set1_epi32(x);
                    cr[0] = _mm256_dpbusd_avx_epi32(cr[0], av, b0);
                    cr[1] = _mm256_dpbusd_avx_epi32(cr[1], av, b1);
                }
            }
        }
        store256(acc, &c);
    }

    /// An `R x 16` tile (`R <= 6`) as two `R x 8` halves (six rows of two accumulators per
    /// half, besides the two registers of B and A's broadcast, fill the sixteen registers). Per
    /// group, a half's 32 bytes of B (eight columns of four k) widen into two registers of four
    /// columns; A's four `i16` of the group are broadcast; `vpmaddwd` leaves each column's sum in
    /// two adjacent lanes, added pairwise once the tile is done.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn tile_avx2<const R: usize>(
        a: &[i16],
        lda: usize,
        b: &[u8],
        groups: usize,
        cols: usize,
        acc: &mut [[i32; 16]; R],
    ) {
        assert!(R >= 1 && a.len() >= (R - 1) * lda + 4 * groups && b.len() >= groups * 64);
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        // A panel of at most eight columns in the product (the last, narrow one) sums one half.
        for half in 0..cols.div_ceil(8).min(2) {
            let mut c = [[_mm256_setzero_si256(); 2]; R];
            for q in 0..groups {
                // SAFETY: the assertion above bounds every read.
                unsafe {
                    let at = bp.add(q * 64 + half * 32);
                    let b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(at.cast()));
                    let b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(at.add(16).cast()));
                    for (r, cr) in c.iter_mut().enumerate() {
                        let x = ap.add(r * lda + 4 * q).cast::<i64>().read_unaligned();
                        let av = _mm256_set1_epi64x(x);
                        cr[0] = _mm256_add_epi32(cr[0], _mm256_madd_epi16(av, b0));
                        cr[1] = _mm256_add_epi32(cr[1], _mm256_madd_epi16(av, b1));
                    }
                }
            }
            for (row, cr) in acc.iter_mut().zip(&c) {
                // Columns 0 1 4 5 | 2 3 6 7, then in order.
                let sums = _mm256_permute4x64_epi64::<0xD8>(_mm256_hadd_epi32(cr[0], cr[1]));
                // SAFETY: a row holds 16 i32; the half is 8 of them.
                unsafe { _mm256_storeu_si256(row.as_mut_ptr().add(half * 8).cast(), sums) };
            }
        }
    }

    /// [`tile_avx2_pairs`] with the roles of the operands exchanged: A's unsigned bytes by B's
    /// signed ones, whose pairs are bounded.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn tile_avx2_pairs_b<const R: usize>(
        a: &[u8],
        lda: usize,
        b: &[u8],
        groups: usize,
        cols: usize,
        acc: &mut [[i32; 16]; R],
    ) {
        if cols <= 8 {
            pairs_tile::<R, 1, true>(a, lda, b, groups, acc)
        } else {
            pairs_tile::<R, 2, true>(a, lda, b, groups, acc)
        }
    }

    /// An `R x 16` tile (`R <= 6`), two registers of eight columns per row (one for a last
    /// panel of at most eight columns in the product). Per group, a register of B holds eight
    /// columns of four unsigned k; A's four signed bytes of the group are broadcast;
    /// `vpmaddubsw` sums each column's two pairs into `i16` (exactly: A's pairs are bounded)
    /// and `vpmaddwd` by ones the two into the column's `i32` lane.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn tile_avx2_pairs<const R: usize>(
        a: &[u8],
        lda: usize,
        b: &[u8],
        groups: usize,
        cols: usize,
        acc: &mut [[i32; 16]; R],
    ) {
        if cols <= 8 {
            pairs_tile::<R, 1, false>(a, lda, b, groups, acc)
        } else {
            pairs_tile::<R, 2, false>(a, lda, b, groups, acc)
        }
    }

    /// [`tile_avx2_pairs`] of `W` registers per row, B's bytes the signed operand when
    /// `SIGNED_B`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn pairs_tile<const R: usize, const W: usize, const SIGNED_B: bool>(
        a: &[u8],
        lda: usize,
        b: &[u8],
        groups: usize,
        acc: &mut [[i32; 16]; R],
    ) {
        assert!(R >= 1 && W <= 2 && a.len() >= (R - 1) * lda + 4 * groups);
        assert!(b.len() >= groups * 64);
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let ones = _mm256_set1_epi16(1);
        let mut c = [[_mm256_setzero_si256(); W]; R];
        for q in 0..groups {
            // SAFETY: the assertions above bound every read.
            unsafe {
                let mut bq = [_mm256_setzero_si256(); W];
                for (h, bh) in bq.iter_mut().enumerate() {
                    *bh = _mm256_loadu_si256(bp.add(q * 64 + h * 32).cast());
                }
                for (r, cr) in c.iter_mut().enumerate() {
                    let x = ap.add(r * lda + 4 * q).cast::<i32>().read_unaligned();
                    let av = _mm256_set1_epi32(x);
                    for (ch, &bh) in cr.iter_mut().zip(&bq) {
                        let pairs = if SIGNED_B {
                            _mm256_maddubs_epi16(av, bh)
                        } else {
                            _mm256_maddubs_epi16(bh, av)
                        };
                        *ch = _mm256_add_epi32(*ch, _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
        }
        for (row, cr) in acc.iter_mut().zip(&c) {
            for (h, ch) in cr.iter().enumerate() {
                // SAFETY: a row holds 16 i32, two registers.
                unsafe { _mm256_storeu_si256(row.as_mut_ptr().add(h * 8).cast(), *ch) };
            }
        }
    }

    /// Defines the entry point of an AVX2 level: the shared tile loop on the level's tile, of
    /// as many rows as `drive_rows!` picks.
    macro_rules! avx2_level {
        ($name:ident, $ta:ty, $tile:ident) => {
            /// # Safety
            /// As `super::run`, on a CPU with AVX2.
            #[target_feature(enable = "avx2")]
            pub(super) unsafe fn $name(
                t: &Task<'_>,
                a: &[$ta],
                b: &[u8],
                blocks: Range<usize>,
                panels: Range<usize>,
            ) {
                drive_rows!(t, a, b, blocks, panels, $tile::<$ta, 16>, [
                    1 => 1,
                    2 => 2,
                    3 | 4 => 4,
                    _ => 6,
                ]);
            }
        };
    }

    avx2_level!(run_avx2, i16, tile_avx2);
    avx2_level!(run_avx2_pairs, u8, tile_avx2_pairs);
    avx2_level!(run_avx2_pairs_b, u8, tile_avx2_pairs_b);

    #[target_feature(enable = "avx2")]
    #[inline]
    fn store256(acc: &mut [[i32; 16]; 6], c: &[[__m256i; 2]; 6]) {
        for (row, cr) in acc.iter_mut().zip(c) {
            // SAFETY: a row holds 16 i32, two registers.
            unsafe {
                _mm256_storeu_si256(row.as_mut_ptr().cast(), cr[0]);
                _mm256_storeu_si256(row.as_mut_ptr().add(8).cast(), cr[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(data: &[u8], signed: bool) -> Bytes<'_> {
        Bytes { data, signed }
    }

    /// The reference: widened, zero points subtracted, summed in `i64`.
    fn reference(
        a: Bytes<'_>,
        m: usize,
        k: usize,
        za: &[i32],
        b: Bytes<'_>,
        n: usize,
        zb: &[i32],
    ) -> Vec<i64> {
        let val = |x: Bytes<'_>, i: usize| {
            if x.signed {
                i64::from(x.data[i] as i8)
            } else {
                i64::from(x.data[i])
            }
        };
        let mut out = vec![0i64; m * n];
        for i in 0..m {
            for j in 0..n {
                let zai = i64::from(za[if za.len() == 1 { 0 } else { i }]);
                let zbj = i64::from(zb[if zb.len() == 1 { 0 } else { j }]);
                out[i * n + j] = (0..k)
                    .map(|p| (val(a, i * k + p) - zai) * (val(b, p * n + j) - zbj))
                    .sum();
            }
        }
        out
    }

    /// Checks `(a - za) @ (b - zb)`, `a` of `m x k` and `b` of `k x n`, at every level, with B
    /// packed from its rows and from its transpose.
    fn check(a: Bytes<'_>, (m, k): (usize, usize), za: &[i32], b: Bytes<'_>, n: usize, zb: &[i32]) {
        let (sa, sb) = (a.signed, b.signed);
        let want = reference(a, m, k, za, b, n, zb);
        let bt: Vec<u8> = (0..n * k)
            .map(|i| b.data[(i % k.max(1)) * n + i / k.max(1)])
            .collect();
        for level in Level::supported() {
            let rows = PackedB::new(b, k, n, level).unwrap();
            let columns = PackedB::from_transposed(bytes(&bt, sb), k, n, level).unwrap();
            for (packed, from) in [(rows, "rows"), (columns, "transpose")] {
                let mut out = vec![0i32; m * n];
                gemm(a, m, za, &packed, zb, &mut out).unwrap();
                let got: Vec<i64> = out.iter().map(|&v| i64::from(v)).collect();
                assert_eq!(
                    got, want,
                    "{level:?} from {from} m={m} k={k} n={n} sa={sa} sb={sb}"
                );
            }
        }
    }

    #[test]
    fn worst_case_sums_are_exact_at_every_level() {
        // 255 x -128 everywhere, and 255 x 127, 0 - 255 zero points; k long enough that i16
        // pairs would saturate many times over.
        let (m, k, n) = (9, 1031, 33);
        for (sa, sb) in [(false, true), (false, false), (true, true), (true, false)] {
            for (va, vb, za, zb) in [
                (255u8, 0x80u8, 0, 0),
                (255, 127, 0, 0),
                (0, 255, 255, 0),
                (0x80, 0x80, 127, -128),
                (0, 0, 255, 255),
            ] {
                let clamp = |z: i32, s: bool| if s { (z as u8 as i8) as i32 } else { z & 255 };
                let za = [clamp(za, sa)];
                let zb = [clamp(zb, sb)];
                let (a, b) = (vec![va; m * k], vec![vb; k * n]);
                check(bytes(&a, sa), (m, k), &za, bytes(&b, sb), n, &zb);
            }
        }
    }

    #[test]
    fn products_of_one_to_five_rows_are_exact_in_their_short_tiles() {
        // One, two and four rows take tiles of as many rows at the VNNI level; five the
        // full tile. Three panels of columns, the last one partial.
        let (k, n) = (37, 70);
        for m in 1..=5 {
            let a: Vec<u8> = (0..m * k).map(|i| (i * 97 + 13) as u8).collect();
            let b: Vec<u8> = (0..k * n).map(|i| (i * 61 + 7) as u8).collect();
            check(bytes(&a, false), (m, k), &[131], bytes(&b, true), n, &[-3]);
        }
    }

    #[test]
    fn products_wider_than_a_strip_are_exact_in_every_strip() {
        // Strips bounded by their column count (short k) and by their bytes (long k), each
        // product ending in a partial strip whose last panel is narrower than half a tile.
        for (m, k, n) in [(7, 20, 3 * STRIP_COLS + 5), (3, 1100, 300)] {
            let a: Vec<u8> = (0..m * k).map(|i| (i * 89 + 5) as u8).collect();
            let b: Vec<u8> = (0..k * n).map(|i| (i * 53 + 11) as u8).collect();
            let zb: Vec<i32> = (0..n as i32).map(|j| j % 7 - 3).collect();
            check(bytes(&a, false), (m, k), &[17], bytes(&b, true), n, &zb);
        }
    }

    #[test]
    fn split_rows_keep_their_values_with_every_pair_within_the_bound() {
        // Every pair of signed bytes: row r pairs r with each of the 256 bytes.
        let (m, lda) = (256, 512);
        let mut d: Vec<u8> = (0..m * lda)
            .map(|i| {
                if i % 2 == 0 {
                    (i / lda) as u8
                } else {
                    (i % lda / 2) as u8
                }
            })
            .collect();
        let want: Vec<i32> = d.iter().map(|&v| i32::from(v as i8)).collect();
        let residual = Residual::split(&mut d, m, lda).unwrap();
        let mut entries = 0;
        for (i, row) in d.chunks_exact(lda).enumerate() {
            let mut got: Vec<i32> = row.iter().map(|&v| i32::from(v as i8)).collect();
            for pair in got.chunks_exact(2) {
                assert!(within_pair_bound(pair[0], pair[1]), "{pair:?}");
            }
            for &(k, v) in residual.row(i) {
                assert!(i8::try_from(v).is_ok(), "{v}");
                got[k] += v;
                entries += 1;
            }
            assert_eq!(got, want[i * lda..(i + 1) * lda], "row {i}");
        }
        // One entry per pair beyond the bound.
        let beyond = (-128i32..128)
            .flat_map(|a0| (-128i32..128).map(move |a1| a0.abs() + a1.abs()))
            .filter(|&sum| sum > 128)
            .count();
        assert_eq!(entries, beyond);
    }

    #[test]
    fn only_an_a_with_few_pairs_beyond_the_bound_is_split() {
        let k = 128;
        // One pair of 256 beyond the bound (-127, -127), then every pair.
        let mut sparse: Vec<u8> = (0..4 * k).map(|i| (i % 60) as u8).collect();
        sparse[..2].fill(0x81);
        let dense = vec![0x81u8; 4 * k];
        for level in Level::supported() {
            let split = |a: &[u8]| level.for_a(bytes(a, true), k).splits_a();
            #[cfg(target_arch = "x86_64")]
            if level == Level::Avx2 {
                assert!(split(&sparse) && !split(&dense));
                continue;
            }
            assert_eq!(split(&sparse), level.splits_a(), "{level:?}");
        }
    }

    #[test]
    fn only_a_b_with_few_pairs_beyond_the_bound_is_split() {
        // B of k x n: one pair of 256 beyond the bound (rows 0 and 1 of column 0), or all.
        let (k, n) = (32, 16);
        let mut sparse: Vec<u8> = (0..k * n).map(|i| (i % 60) as u8).collect();
        sparse[0] = 0x81;
        sparse[n] = 0x81;
        let dense = vec![0x81u8; k * n];
        for level in Level::supported() {
            let split = |b: &[u8]| {
                let packed = PackedB::new(bytes(b, true), k, n, level).unwrap();
                packed.split_pairs().unwrap().level().splits_b()
            };
            #[cfg(target_arch = "x86_64")]
            if level == Level::Avx2 {
                assert!(split(&sparse) && !split(&dense));
                continue;
            }
            assert_eq!(split(&sparse), level.splits_b(), "{level:?}");
        }
    }

    #[test]
    fn the_largest_exact_k_does_not_overflow() {
        let (m, k, n) = (1, EXACT_K, 3);
        let (a0, a1) = (vec![0; m * k], vec![255; m * k]);
        let (b0, b1) = (vec![0x7f; k * n], vec![0; k * n]);
        check(
            bytes(&a0, false),
            (m, k),
            &[255],
            bytes(&b0, true),
            n,
            &[-128],
        );
        check(
            bytes(&a1, false),
            (m, k),
            &[0],
            bytes(&b1, false),
            n,
            &[255],
        );
    }

    /// Packing a B with no rows (K = 0) cut its panels into empty chunks, which panics.
    #[test]
    fn b_with_no_rows_packs_and_sums_to_zero() {
        check(bytes(&[], false), (1, 0), &[3], bytes(&[], true), 1, &[-5]);
        check(
            bytes(&[], true),
            (7, 0),
            &[0],
            bytes(&[], false),
            40,
            &[255],
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 64,
            failure_persistence: None,
            ..Default::default()
        })]
        #[test]
        fn every_level_matches_the_reference(
            m in 1usize..20, k in 0usize..70, n in 1usize..70,
            sa: bool, sb: bool, per_row: bool, per_col: bool, seed: u64,
        ) {
            let mut s = seed | 1;
            let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
            let a: Vec<u8> = (0..m * k).map(|_| next() as u8).collect();
            let b: Vec<u8> = (0..k * n).map(|_| next() as u8).collect();
            let zero = |s: bool, x: u64| if s { i32::from(x as u8 as i8) } else { i32::from(x as u8) };
            let za: Vec<i32> = (0..if per_row { m } else { 1 }).map(|_| zero(sa, next())).collect();
            let zb: Vec<i32> = (0..if per_col { n } else { 1 }).map(|_| zero(sb, next())).collect();
            check(bytes(&a, sa), (m, k), &za, bytes(&b, sb), n, &zb);
        }
    }
}
