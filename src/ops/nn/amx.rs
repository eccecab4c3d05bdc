//! Intel AMX for the 8-bit products: whether this process may use the tile registers, and the
//! few tile instructions the kernels need, as inline assembly (the AMX intrinsics are not
//! stable in Rust).
//!
//! A tile is up to 16 rows of 64 bytes. `tdpbusd` multiplies an A tile of 16 rows by 64
//! unsigned bytes with a B tile of 16 rows of 16 columns by four signed bytes (the layout the
//! VNNI kernels already read: four consecutive k of one column together) into a C tile of 16 x
//! 16 `i32`: 16 384 multiply-adds per instruction, where `vpdpbusd` does 64. The kernels use
//! eight tiles as one 32 x 32 block: four C tiles (`tmm0..tmm3`), two A (`tmm4`, `tmm5`) and
//! two B (`tmm6`, `tmm7`), each A and B tile read by two products.
//!
//! Linux gives a process the tile registers only on request (`arch_prctl` with
//! `ARCH_REQ_XCOMP_PERM`), once for all its threads; [`usable`] asks on first use and reports
//! whether the CPU has AMX-INT8 and the kernel granted it. Each thread loads the tile
//! configuration before its tiles ([`Block::begin`]) and releases the tiles after (the
//! [`Block`]'s drop), so a thread that has finished holds no tile state across context
//! switches.

use std::arch::asm;

/// Whether this CPU has AMX-INT8 and this process may use its tiles (asked once).
pub(super) fn usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        // CPUID leaf 7: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8.
        let leaf = std::arch::x86_64::__cpuid_count(7, 0);
        let cpu = (leaf.edx >> 24) & 3 == 3 && std::arch::is_x86_feature_detected!("avx512f");
        cpu && request_tiles()
    })
}

/// Asks the kernel for the tile data state (`XFEATURE_XTILEDATA`).
#[cfg(target_os = "linux")]
fn request_tiles() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: `arch_prctl` with this code only changes which state the kernel saves for the
    // process; it reads and writes no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn request_tiles() -> bool {
    false
}

/// The 64-byte operand of `ldtilecfg`: palette 1, each tile's rows and bytes per row.
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
    reserved2: [u8; 16],
}

/// The eight tiles of a 32 x 32 block, configured on one thread (so neither `Send` nor
/// `Sync`): every tile 16 rows of 64 bytes. Released when dropped.
///
/// One block per thread at a time: `begin` zeroes the tiles and the drop releases them, so
/// nothing run while a block lives (a kernel's sink) may start another on the same thread; the
/// sinks store rows and never call into the thread pool, where a task could be stolen.
pub(super) struct Block(std::marker::PhantomData<*const ()>);

impl Block {
    /// Loads the block's tile configuration on this thread.
    ///
    /// # Safety
    /// [`usable`] returned true.
    #[inline]
    pub unsafe fn begin() -> Block {
        let config = Config {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
            rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
            reserved2: [0; 16],
        };
        // SAFETY: the configuration is valid for palette 1, and the caller's promise says the
        // CPU and the kernel allow it.
        unsafe { asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly)) };
        Block(std::marker::PhantomData)
    }

    /// Clears the four sums.
    #[inline(always)]
    pub fn zero(&self) {
        // SAFETY: the tiles are configured (`begin`).
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nomem, nostack, preserves_flags)
            )
        };
    }

    /// Adds to the sums the products of 32 rows of 64 unsigned bytes of A (16 rows from `a`,
    /// 16 from `a1`, rows `lda` bytes apart) by 16 signed rows of 32 columns of four bytes of
    /// B (columns 0-15 from `b`, 16-31 from `b1`, rows `ldb` bytes apart): `tmm0` = rows 0-15
    /// by columns 0-15, `tmm1` rows 0-15 by 16-31, `tmm2` and `tmm3` rows 16-31.
    ///
    /// # Safety
    /// Each of the four operands is 16 readable rows of 64 bytes at its stride.
    #[inline(always)]
    pub unsafe fn multiply(
        &self,
        (a, a1, lda): (*const u8, *const u8, usize),
        (b, b1, ldb): (*const u8, *const u8, usize),
    ) {
        // SAFETY: the caller's promise.
        unsafe {
            asm!(
                "tileloadd tmm4, [{a} + {lda}*1]",
                "tileloadd tmm6, [{b} + {ldb}*1]",
                "tdpbusd tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b1} + {ldb}*1]",
                "tdpbusd tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a1} + {lda}*1]",
                "tdpbusd tmm2, tmm5, tmm6",
                "tdpbusd tmm3, tmm5, tmm7",
                a = in(reg) a,
                a1 = in(reg) a1,
                lda = in(reg) lda,
                b = in(reg) b,
                b1 = in(reg) b1,
                ldb = in(reg) ldb,
                options(nostack, readonly, preserves_flags)
            )
        };
    }

    /// Stores the 32 x 32 sums into columns `col..col + 32` of the 32 rows of `out`.
    #[inline(always)]
    pub fn store<const W: usize>(&self, out: &mut [[i32; W]; 32], col: usize) {
        assert!(col + 32 <= W);
        let at = out
            .as_mut_ptr()
            .cast::<i32>()
            .wrapping_add(col)
            .cast::<u8>();
        let stride = 4 * W;
        // SAFETY: the tiles are configured; each C tile is 16 rows of 64 bytes at a stride of
        // one row of `out`, from column `col` or `col + 16` (asserted to lie in the rows).
        unsafe {
            asm!(
                "tilestored [{p} + {s}*1], tmm0",
                "tilestored [{p1} + {s}*1], tmm1",
                "tilestored [{p2} + {s}*1], tmm2",
                "tilestored [{p3} + {s}*1], tmm3",
                p = in(reg) at,
                p1 = in(reg) at.add(64),
                p2 = in(reg) at.add(16 * stride),
                p3 = in(reg) at.add(16 * stride + 64),
                s = in(reg) stride,
                options(nostack, preserves_flags)
            )
        };
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: releasing the tiles is always allowed once they were configured.
        unsafe { asm!("tilerelease", options(nomem, nostack, preserves_flags)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One block against the plain sum of products, with bytes at both ends of their ranges.
    #[test]
    fn a_block_sums_the_products_of_its_tiles() {
        if !usable() {
            return;
        }
        let (lda, ldb) = (96, 160);
        let a: Vec<u8> = (0..32 * lda).map(|i| (i * 37 % 256) as u8).collect();
        let b: Vec<u8> = (0..16 * ldb).map(|i| (i * 101 % 256) as u8).collect();
        // Stored at a column of wider rows, as the GEMM stores into its strip.
        let mut got = [[7i32; 80]; 32];
        // SAFETY: `usable`; A is 32 rows of `lda >= 64` bytes, B 16 rows of `ldb >= 128`.
        unsafe {
            let block = Block::begin();
            block.zero();
            for _ in 0..2 {
                let ap = a.as_ptr();
                block.multiply(
                    (ap, ap.add(16 * lda), lda),
                    (b.as_ptr(), b.as_ptr().add(64), ldb),
                );
            }
            block.store(&mut got, 40);
        }
        for (i, row) in got.iter().enumerate() {
            let (before, after) = (&row[..40], &row[72..]);
            assert!(
                before.iter().chain(after).all(|&v| v == 7),
                "row {i} outside its columns"
            );
            for (j, &v) in row[40..72].iter().enumerate() {
                let want: i32 = (0..64)
                    .map(|k| {
                        i32::from(a[i * lda + k])
                            * i32::from(b[(k / 4) * ldb + 4 * j + k % 4] as i8)
                    })
                    .sum();
                assert_eq!(v, 2 * want, "row {i} column {j}");
            }
        }
    }
}
