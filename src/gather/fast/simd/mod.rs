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
//! a last-axis gather of 1M elements from 16 KiB rows 1.6 ms against 3.2 ms. So
//! [`SimdLevel::preferred`] (the default) is the widest level on Intel and scalar on AMD;
//! `FastOptions::simd` can force any level up to [`SimdLevel::detected`]. The index pre-pass is
//! compiled for AVX2 where the CPU has it, whatever the gather level.

#[cfg(target_arch = "x86_64")]
mod x86;

use super::elem::{GatherFn, SimdLevel, Word};

impl SimdLevel {
    /// The widest level this CPU supports (detected once, then cached).
    ///
    /// # Example
    /// ```
    /// use multigather::gather::SimdLevel;
    /// assert!(SimdLevel::detected() >= SimdLevel::Scalar);
    /// ```
    pub fn detected() -> SimdLevel {
        static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
        *LEVEL.get_or_init(detect)
    }

    /// The level element gathers use by default: [`SimdLevel::detected`], except on AMD CPUs,
    /// whose hardware gathers are slower than the scalar loop (see the module docs).
    ///
    /// # Example
    /// ```
    /// use multigather::gather::SimdLevel;
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

/// Whether the CPU's hardware gathers lose to scalar loads: true on AMD.
#[cfg(target_arch = "x86_64")]
fn slow_gathers() -> bool {
    // SAFETY: `cpuid` leaf 0 exists on every x86-64 CPU.
    #[allow(unused_unsafe)]
    let id = unsafe { std::arch::x86_64::__cpuid(0) };
    // The vendor string "AuthenticAMD" in ebx, edx, ecx.
    (id.ebx, id.edx, id.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163)
}

#[cfg(not(target_arch = "x86_64"))]
fn slow_gathers() -> bool {
    false
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
