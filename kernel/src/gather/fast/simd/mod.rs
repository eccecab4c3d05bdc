//! Hardware element gathers, with runtime detection and a scalar fallback everywhere else.
//!
//! On x86-64 the element-gather rows of 1-, 2-, 4- and 8-byte elements can use `vpgatherdd` /
//! `vpgatherdq` (AVX2, 8 or 4 lanes; AVX-512, 16 or 8 lanes). 1- and 2-byte elements are gathered
//! as 4-byte words and narrowed, which is why tensors keep at least 8 bytes of slack after their
//! payload. Other architectures (and CPUs without AVX2) use the unrolled scalar loop in
//! `super::rows`; aarch64 NEON has no gather instruction, so there is nothing to add there.
//!
//! Design note: hardware gathers are not always faster. Measured on the 2-core Sapphire Rapids
//! machine this was first written on, with a random gather of 1M elements: from a table in L1/L2
//! the AVX2 and AVX-512 gathers take 65-80% of the scalar loop's time; from a table larger than
//! L2 all three are bound by memory latency and within noise of each other. On AMD Zen 3 (a
//! 2-core EPYC) `vpgatherdd` is microcoded and the scalar loop wins: 1M elements in 256 random
//! picks per 4 KiB row take 1.6 ms scalar (with software prefetch) against 3.1 ms with AVX2, and
//! a last-axis gather of 1M elements from 16 KiB rows 1.6 ms against 3.2 ms.
//!
//! On AMD Zen 5 (family 0x1A: an "AMD EPYC" with AVX-512, 2 cores, 32 MiB L3) the hardware
//! gathers win again. `gather --simd-levels` (benches/gather.rs; best thread CPU time of 9-15
//! runs, levels interleaved, 1M elements, milliseconds as scalar / AVX2 / AVX-512 for 1-, 2-,
//! 4- and 8-byte elements, int32 indices; int64 within 10-30% of these, same order):
//!
//! - GatherND points from a table in L2 (256×256): 1.80 / 0.92 / 0.89, 1.82 / 1.01 / 0.95,
//!   1.91 / 1.00 / 1.04, 2.17 / 1.36 / 1.21;
//! - GatherND points from a 16-128 MiB table (4096×4096): 3.54 / 2.75 / 2.47,
//!   4.81 / 4.01 / 3.86, 4.79 / 3.73 / 3.73, 5.15 / 4.15 / 4.06;
//! - last-axis Gather of 1024 picks per 4096-element row: 0.25 / 0.27 / 0.26,
//!   0.41 / 0.29 / 0.27, 1.52 / 1.38 / 1.28, 2.58 / 2.29 / 2.17 (with the software prefetch of
//!   `rows` ahead of the hardware gathers from inputs of 16 MiB and more);
//! - GatherElements along the last axis (`rowwise`, whose hardware path is AVX-512 only):
//!   0.94 / - / 0.37, 0.96 / - / 0.40, 1.44 / - / 0.81, 4.70 / - / 2.47.
//!
//! On Zen 3 (family 0x19, AVX2; a 2-vCPU "AMD EPYC"), the same command with the defaults as a
//! third column (scalar gathers after the AVX2 index pre-pass), milliseconds as scalar / AVX2 /
//! default, int32 indices: GatherND points from the L2 table 3.34 / 2.36 / 2.03 (1-byte),
//! 3.35 / 2.30 / 2.30 (4-byte), 3.87 / 2.78 / 2.88 (8-byte); from the large table 7.78 / 7.50 /
//! 6.64, 11.06 / 10.81 / 10.80, 11.92 / 12.22 / 11.02; last-axis 0.78 / 0.98 / 0.80,
//! 2.88 / 3.28 / 2.89, 5.05 / 6.00 / 4.80. Forcing AVX2 wins over forcing scalar on the points
//! by the pre-pass alone: with the pre-pass vectorised in both, the hardware gathers gain
//! nothing on any shape, so no per-shape choice is made.
//!
//! So [`SimdLevel::preferred`] (the default) is the widest level on Intel and on AMD from Zen 5
//! on, and scalar on older AMD (Zen 2 to Zen 4 are families 0x17 and 0x19). A calibration at
//! first use was considered and not chosen: a few hundred microseconds of timing on a shared
//! machine swing by 40% from run to run (measured here while other builds ran), and a wrong
//! pick would hold for the whole process; per-family defaults are deterministic.
//! `FastOptions::simd` can force any level up to [`SimdLevel::detected`].
//!
//! The index pre-pass (`offsets::fill_block`) follows the vector level, not the gather level:
//! compiled for AVX-512 (F, BW, DQ, VL) it resolves 64-bit indices with the unsigned 64-bit
//! compares and narrowing moves AVX2 lacks. On Zen 5, `gathernd_points` (1M pairs of int64
//! coordinates into a 512×512 f32 table), `multigather run --repeat 200`, medians: 1.17 ms with
//! the AVX2 pre-pass, 0.82 ms AVX-512F only, 0.72 ms with BW/DQ/VL (1 thread); 0.58 against
//! 0.36 ms at 2 threads.
//!
//! Staged column gathers (`super::staged`) read their stage with [`column_gather`]: the same
//! 16-lane resolution and hardware gather as [`row_gather`], with the column added to each
//! lane's offset. `gather_elements_first` on Zen 5, 1 thread: 2.66 ms with the pre-pass and
//! scalar stage reads, 2.1 ms with the hardware gathers; 2 threads 1.35 against 1.0 ms. The
//! stage size then matters little: 256 KiB to 1 MiB within 5%.
//!
//! The module also has the block copies of the row kernels: non-temporal ([`stream_copy`]) for
//! outputs too large to stay in the caches, 64-byte vector loads and stores ([`vector_copy`])
//! for the others.

#[cfg(target_arch = "x86_64")]
mod x86;

use super::elem::{GatherFn, SimdLevel, Word};

/// A row-wise element gather over whole vectors of index values: resolves `values` on an axis
/// of `d` elements (mode `error` or `clamp`, chosen when the function is) and writes
/// `out[e] = *(row + coordinate(values[e]) * size_of::<W>())` for the first `k` values, where
/// `k` is the largest multiple of the vector width; returns `k` and whether any of those values
/// was out of range (mode `error`; the element written for it is then from inside the row).
///
/// # Safety
/// The CPU must support the function's target features; `0 < d <= i32::MAX`; `d` elements
/// readable at `row`, plus 3 bytes of slack after them when `W` is 1 or 2 bytes wide; `out`
/// writable for `values.len()` elements.
pub(crate) type RowGatherFn<W, I> = unsafe fn(*const u8, usize, &[I], *mut W) -> (usize, bool);

/// The row-wise gather for `W` elements and `I` (`i32` or `i64`) index values at `level`, if
/// there is one: AVX-512 only (16 coordinates resolved per step, then one 16-lane hardware
/// gather, two for 8-byte elements).
pub(crate) fn row_gather<W: Copy, I: Copy, const CLAMP: bool>(
    level: SimdLevel,
) -> Option<RowGatherFn<W, I>> {
    #[cfg(target_arch = "x86_64")]
    if resolved_gathers::<W, I>(level) {
        return Some(x86::row_gather_avx512::<W, I, CLAMP> as RowGatherFn<W, I>);
    }
    let _ = level;
    None
}

/// Whether the AVX-512 loops that resolve 16 index values and gather them run at `level` for
/// `W` elements and `I` index values.
#[cfg(target_arch = "x86_64")]
fn resolved_gathers<W, I>(level: SimdLevel) -> bool {
    level.min(SimdLevel::detected()) == SimdLevel::Avx512
        && matches!(size_of::<W>(), 1 | 2 | 4 | 8)
        && matches!(size_of::<I>(), 4 | 8)
}

/// A column gather over whole vectors of index values: resolves `values` on an axis of `d`
/// elements like [`RowGatherFn`] and writes `out[e] = table[coordinate(values[e]) * stride + e]`
/// (`table` as `W` elements): the element of column `e` in row `coordinate` of a table of `d`
/// rows `stride` elements apart. Returns how many values it resolved and whether any was out
/// of range.
///
/// # Safety
/// The CPU must support the function's target features; `0 < d`; `values.len() <= stride`;
/// `d * stride` elements readable at `table`, a count that fits `i32`, plus 3 bytes of slack
/// after them when `W` is 1 or 2 bytes wide; `out` writable for `values.len()` elements.
pub(crate) type ColumnGatherFn<W, I> =
    unsafe fn(*const u8, usize, usize, &[I], *mut W) -> (usize, bool);

/// The column gather for `W` elements and `I` index values at `level`, if there is one: AVX-512
/// only, as for [`row_gather`].
pub(crate) fn column_gather<W: Copy, I: Copy, const CLAMP: bool>(
    level: SimdLevel,
) -> Option<ColumnGatherFn<W, I>> {
    #[cfg(target_arch = "x86_64")]
    if resolved_gathers::<W, I>(level) {
        return Some(x86::column_gather_avx512::<W, I, CLAMP> as ColumnGatherFn<W, I>);
    }
    let _ = level;
    None
}

impl SimdLevel {
    /// The widest level this CPU supports (detected once, then cached).
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::gather::SimdLevel;
    /// assert!(SimdLevel::detected() >= SimdLevel::Scalar);
    /// ```
    pub fn detected() -> SimdLevel {
        static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
        *LEVEL.get_or_init(detect)
    }

    /// The level element gathers use by default: [`SimdLevel::detected`], except on AMD CPUs
    /// before Zen 5, whose hardware gathers are slower than the scalar loop (see the module docs).
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::gather::SimdLevel;
    /// assert!(SimdLevel::preferred() <= SimdLevel::detected());
    /// ```
    pub fn preferred() -> SimdLevel {
        static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
        *LEVEL.get_or_init(|| {
            if slow_gathers() {
                SimdLevel::Scalar
            } else {
                SimdLevel::detected()
            }
        })
    }
}

/// Whether the CPU's hardware gathers lose to scalar loads: true on AMD before Zen 5 (family
/// 0x1A), see the module docs.
fn slow_gathers() -> bool {
    amd_family().is_some_and(|family| family < ZEN5_FAMILY)
}

/// Whether the CPU is an AMD Zen 5 or later (family 0x1A and up).
pub(crate) fn zen5_or_later() -> bool {
    amd_family().is_some_and(|family| family >= ZEN5_FAMILY)
}

/// Whether the CPU is an AMD one.
pub(crate) fn amd() -> bool {
    amd_family().is_some()
}

/// The size of the last-level (L3) cache in bytes as `cpuid` leaf 4 describes it (Intel's
/// deterministic cache parameters), `None` where the leaf is absent or lists no L3 (AMD CPUs
/// describe their caches elsewhere).
#[cfg(target_arch = "x86_64")]
pub(crate) fn l3_bytes() -> Option<usize> {
    static BYTES: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        // SAFETY: leaf 0 exists on every x86-64 CPU, leaf 4 wherever leaf 0 lists it.
        #[allow(unused_unsafe)]
        if unsafe { __cpuid(0) }.eax < 4 {
            return None;
        }
        // Subleaves describe one cache each until one of type 0; a handful at most.
        for sub in 0..16 {
            #[allow(unused_unsafe)]
            let r = unsafe { __cpuid_count(4, sub) };
            if r.eax & 0x1F == 0 {
                break;
            }
            if (r.eax >> 5) & 0x7 == 3 {
                let ways = ((r.ebx >> 22) & 0x3FF) as usize + 1;
                let partitions = ((r.ebx >> 12) & 0x3FF) as usize + 1;
                let line = (r.ebx & 0xFFF) as usize + 1;
                let sets = r.ecx as usize + 1;
                return Some(ways * partitions * line * sets);
            }
        }
        None
    })
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn l3_bytes() -> Option<usize> {
    None
}

/// The display family of an AMD CPU, `None` on other vendors.
#[cfg(target_arch = "x86_64")]
fn amd_family() -> Option<u32> {
    static FAMILY: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *FAMILY.get_or_init(|| {
        // SAFETY: `cpuid` leaves 0 and 1 exist on every x86-64 CPU.
        #[allow(unused_unsafe)]
        let (id, version) = unsafe {
            (
                std::arch::x86_64::__cpuid(0),
                std::arch::x86_64::__cpuid(1).eax,
            )
        };
        // The vendor string "AuthenticAMD" in ebx, edx, ecx.
        let amd = (id.ebx, id.edx, id.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        amd.then(|| family(version))
    })
}

/// AMD's family number of Zen 5.
const ZEN5_FAMILY: u32 = 0x1A;

/// The display family of `cpuid` leaf 1's `eax`: the base family, plus the extended family when
/// the base family is 0xF.
#[cfg(target_arch = "x86_64")]
fn family(eax: u32) -> u32 {
    let base = (eax >> 8) & 0xF;
    if base == 0xF {
        base + ((eax >> 20) & 0xFF)
    } else {
        base
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn amd_family() -> Option<u32> {
    None
}

/// A copy of `n` bytes from the first pointer to the second. After a non-temporal one
/// ([`stream_copy`]), [`store_fence`] must follow the last copy before the bytes are handed to
/// another thread.
///
/// # Safety
/// The CPU must support the function's target features; the source readable and the
/// destination writable for `n` bytes, without overlap.
pub(crate) type CopyFn = unsafe fn(*const u8, *mut u8, usize);

/// The copy whose stores bypass the caches (non-temporal), for outputs too large to stay in
/// them, if `level` (capped at what the CPU has) has one: AVX2 and up. 64-byte non-temporal
/// stores measured no faster than these 32-byte ones on Zen 5 (`gather_embed_f16` 0.162
/// against 0.167 ms, `gathernd_batch` 0.219 against 0.212 ms, 1 thread, within noise).
pub(crate) fn stream_copy(level: SimdLevel) -> Option<CopyFn> {
    #[cfg(target_arch = "x86_64")]
    if level.min(SimdLevel::detected()) >= SimdLevel::Avx2 {
        return Some(x86::copy_stream_avx2 as CopyFn);
    }
    let _ = level;
    None
}

/// The copy with ordinary 64-byte vector loads and stores, if `level` (capped at what the CPU
/// has) is AVX-512. On Zen 5 it beats `memcpy` (glibc's AVX-512 `memmove`) on rows of 1536
/// bytes: `gather_embed_f16` at 1 thread 0.141 against 0.184 ms (medians of 7 interleaved runs
/// of `multigather run --repeat 300`).
pub(crate) fn vector_copy(level: SimdLevel) -> Option<CopyFn> {
    #[cfg(target_arch = "x86_64")]
    if level.min(SimdLevel::detected()) >= SimdLevel::Avx512 {
        return Some(x86::copy_avx512 as CopyFn);
    }
    let _ = level;
    None
}

/// Orders the non-temporal stores of [`StreamCopyFn`] before every later store.
#[inline]
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

/// Hints the CPU to bring the cache line holding `p` into L1. Never faults, whatever `p` is.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64, and a prefetch does not access memory architecturally.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(target_arch = "x86_64")]
fn detect() -> SimdLevel {
    if std::arch::is_x86_feature_detected!("avx512f") {
        SimdLevel::Avx512
    } else if std::arch::is_x86_feature_detected!("avx2") {
        SimdLevel::Avx2
    } else {
        SimdLevel::Scalar
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> SimdLevel {
    SimdLevel::Scalar
}

/// Implements [`Word`] for an element type, with the hardware gathers of its width.
macro_rules! word {
    ($t:ty, $avx2:ident, $avx512:ident) => {
        impl Word for $t {
            #[allow(unused_variables)]
            fn simd_gather(level: SimdLevel) -> Option<GatherFn<$t>> {
                // Never hand out a level above what the CPU has.
                #[cfg(target_arch = "x86_64")]
                match level.min(SimdLevel::detected()) {
                    SimdLevel::Avx512 => return Some(x86::$avx512 as GatherFn<$t>),
                    SimdLevel::Avx2 => return Some(x86::$avx2 as GatherFn<$t>),
                    SimdLevel::Scalar => {}
                }
                None
            }
        }
    };
}

word!(u8, gather8_avx2, gather8_avx512);
word!(u16, gather16_avx2, gather16_avx512);
word!(u32, gather32_avx2, gather32_avx512);
word!(u64, gather64_avx2, gather64_avx512);

impl Word for [u64; 2] {
    fn simd_gather(_: SimdLevel) -> Option<GatherFn<[u64; 2]>> {
        None
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn cpu_families_from_cpuid_signatures() {
        // (cpuid leaf 1 eax, family): Zen 5 (EPYC 9005), Zen 4 and Zen 3 (both 0x19), Zen 2,
        // an Intel Sapphire Rapids (family 6, no extended family).
        let cases = [
            (0x00B0_0F21, 0x1A),
            (0x00A1_0F11, 0x19),
            (0x00A0_0F11, 0x19),
            (0x0083_0F10, 0x17),
            (0x0008_06F8, 6),
        ];
        for (eax, want) in cases {
            assert_eq!(family(eax), want, "{eax:#x}");
        }
        assert!(family(0x00B0_0F21) >= ZEN5_FAMILY && family(0x00A1_0F11) < ZEN5_FAMILY);
    }
}
