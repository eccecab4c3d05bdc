//! The fast kernel's element vocabulary: [`Offset`] (an entry of the offset table), [`Word`] (a
//! whole-byte element moved as one value), [`GatherFn`] (a hardware gather's signature) and
//! [`SimdLevel`] (the instruction-set level they are chosen by).
//!
//! A leaf: it imports nothing from the other files of `fast/`, which all import it, so the index
//! pre-pass (`offsets`), the hardware gathers (`simd`) and the row drivers (`rows`) form no
//! circle. `simd` implements [`Word`] for each width and [`SimdLevel`]'s detection.

/// A hardware gather of `t.len()` elements: `out[i] = *(start + t[i] * size_of::<W>())`.
///
/// # Safety
/// The CPU must support the function's target features; every `t[i]` must be at most
/// `i32::MAX`; at least `max(4, size_of::<W>())` bytes must be readable at every source address;
/// `out` must be writable for `t.len()` elements.
pub(crate) type GatherFn<W> = unsafe fn(*const u8, &[u32], *mut W);

/// The instruction-set level of the element gathers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// The unrolled scalar loop (every CPU).
    Scalar,
    /// AVX2 `vpgatherdd` / `vpgatherdq`, 256-bit.
    Avx2,
    /// AVX-512F gathers, 512-bit.
    Avx512,
}

/// An entry of the offset table.
pub(crate) trait Offset: Copy + Send + Sync + Default + PartialEq + 'static {
    /// Marks a tuple that reads nothing (mode `zero`); never a valid offset.
    const NONE: Self;
    fn from_usize(v: usize) -> Self;
    fn to_usize(self) -> usize;
    /// The table as 32-bit offsets, for hardware gathers; `None` for 64-bit tables.
    fn as_u32(t: &[Self]) -> Option<&[u32]>;
    /// The table as mutable 32-bit offsets, for the 32-bit pre-pass; `None` for 64-bit tables.
    fn as_u32_mut(t: &mut [Self]) -> Option<&mut [u32]>;
}

impl Offset for u32 {
    const NONE: u32 = u32::MAX;
    #[inline(always)]
    fn from_usize(v: usize) -> u32 {
        v as u32
    }
    #[inline(always)]
    fn to_usize(self) -> usize {
        self as usize
    }
    fn as_u32(t: &[u32]) -> Option<&[u32]> {
        Some(t)
    }
    fn as_u32_mut(t: &mut [u32]) -> Option<&mut [u32]> {
        Some(t)
    }
}

impl Offset for u64 {
    const NONE: u64 = u64::MAX;
    #[inline(always)]
    fn from_usize(v: usize) -> u64 {
        v as u64
    }
    #[inline(always)]
    fn to_usize(self) -> usize {
        self as usize
    }
    fn as_u32(_: &[u64]) -> Option<&[u32]> {
        None
    }
    fn as_u32_mut(_: &mut [u64]) -> Option<&mut [u32]> {
        None
    }
}

/// A whole-byte element type moved as one value.
pub(crate) trait Word: bytemuck::Pod + Default + Send + Sync {
    /// The hardware gather for this width at the enabled SIMD level, if any.
    fn simd_gather(level: SimdLevel) -> Option<GatherFn<Self>>;
}
