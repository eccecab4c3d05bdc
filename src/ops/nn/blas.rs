//! The one entry to the `gemm` crate: strided matrix views whose bounds are checked once, a
//! checked GEMM on them, and [`gemm_raw`], the strided product every kernel family (matrix
//! products, convolutions, recurrent cells) goes through.
//!
//! Large products run on the current thread pool (the session's intra-op threads); the split
//! depends only on the shapes and the thread count, so a product computes the same bits on
//! every run with the same options.

use crate::error::{Error, Result};
use crate::ops::num::Real;
use crate::ops::vector::ColumnBlocks;

/// Products with at least this many multiply-adds are split across threads.
const PARALLEL_FLOPS: usize = 1 << 20;

/// A read-only `rows x cols` matrix inside a slice, element `(i, j)` at `i * rs + j * cs`.
#[derive(Clone, Copy, Debug)]
pub(in crate::ops) struct Mat<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a, T> Mat<'a, T> {
    /// A view, checked to stay inside `data`.
    pub fn new(data: &'a [T], rows: usize, cols: usize, rs: usize, cs: usize) -> Result<Self> {
        if rows > 0 && cols > 0 {
            let last = (rows - 1)
                .checked_mul(rs)
                .and_then(|r| (cols - 1).checked_mul(cs).and_then(|c| r.checked_add(c)));
            if last.is_none_or(|l| l >= data.len())
                || rs > isize::MAX as usize
                || cs > isize::MAX as usize
            {
                return Err(Error::Eval(format!(
                    "a {rows}x{cols} matrix with strides ({rs}, {cs}) does not fit in {} elements",
                    data.len()
                )));
            }
        }
        Ok(Mat {
            data,
            rows,
            cols,
            rs,
            cs,
        })
    }

    /// A contiguous row-major view.
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Result<Self> {
        Mat::new(data, rows, cols, cols, 1)
    }

    /// The transpose (a view of the same elements).
    pub fn t(self) -> Self {
        Mat {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Row `i` (which must exist) as `cols` values: borrowed when the row is contiguous.
    pub fn row(&self, i: usize) -> std::borrow::Cow<'a, [T]>
    where
        T: Copy,
    {
        if self.cs == 1 {
            return std::borrow::Cow::Borrowed(&self.data[i * self.rs..][..self.cols]);
        }
        (0..self.cols)
            .map(|j| self.data[i * self.rs + j * self.cs])
            .collect()
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }
}

impl<T: Real> ColumnBlocks<'_, T> {
    /// Columns `col0..col0 + b.cols` of every row `= alpha * a * b + beta * themselves`, on
    /// the calling thread; with `beta == 0` they are not read.
    ///
    /// # Safety
    /// No concurrent task may touch these columns, and with `beta != 0` they must have been
    /// written.
    pub unsafe fn product(
        &self,
        alpha: T,
        a: Mat<'_, T>,
        b: Mat<'_, T>,
        beta: T,
        col0: usize,
    ) -> Result<()> {
        let (m, k, n) = (a.rows, a.cols, b.cols);
        if b.rows != k || m != self.rows || col0.checked_add(n).is_none_or(|end| end > self.ld) {
            return Err(Error::Eval(format!(
                "a {m}x{k} by {}x{n} product into columns {col0}.. of a {}x{} matrix",
                b.rows, self.rows, self.ld
            )));
        }
        // SAFETY: the block is inside the matrix (checked above), which `new` checked lies in
        // its slice; the caller owns these columns and wrote them if they are read.
        crate::par::serial(|| unsafe {
            product_at(alpha, a, b, beta, self.ptr.add(col0), self.ld)
        });
        Ok(())
    }
}

/// `C = alpha * A * B + beta * C`, with C the row-major `A.rows x B.cols` block of `c` whose rows
/// start `ldc` elements apart. With `beta == 0` the old contents of C are ignored.
pub(in crate::ops) fn gemm<T: Real>(
    alpha: T,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    beta: T,
    c: &mut [T],
    ldc: usize,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k {
        return Err(Error::Eval(format!(
            "matrix product of {m}x{k} and {}x{n} operands",
            b.rows
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let needed = (m - 1)
        .checked_mul(ldc)
        .and_then(|r| r.checked_add(n))
        .filter(|_| ldc >= n && ldc <= isize::MAX as usize);
    if needed.is_none_or(|l| l > c.len()) {
        return Err(Error::Eval(format!(
            "a {m}x{n} product does not fit in {} elements with row stride {ldc}",
            c.len()
        )));
    }
    gemm_serial(alpha, a, b, beta, c, ldc);
    Ok(())
}

/// One product; the shapes and bounds were checked by [`gemm`].
fn gemm_serial<T: Real>(alpha: T, a: Mat<'_, T>, b: Mat<'_, T>, beta: T, c: &mut [T], ldc: usize) {
    // SAFETY: `gemm` checked that `(m - 1) * ldc + n <= c.len()` with `ldc >= n`, so every
    // element of C is inside `c` and distinct, and written (it is a `&mut [T]`).
    unsafe { product_at(alpha, a, b, beta, c.as_mut_ptr(), ldc) }
}

/// `C = alpha * A * B + beta * C`, C the row-major `A.rows x B.cols` matrix at `c` with rows
/// `ldc` apart; with `beta == 0`, C is not read.
///
/// # Safety
/// Every element of C must lie in one allocation, be written when `beta != 0`, and be touched
/// by nothing else during the call; `ldc` must fit in `isize`.
unsafe fn product_at<T: Real>(
    alpha: T,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    beta: T,
    c: *mut T,
    ldc: usize,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: inside C, written when read (the caller's contract).
                unsafe {
                    let v = c.add(i * ldc + j);
                    v.write(if beta == T::ZERO {
                        T::ZERO
                    } else {
                        beta * v.read()
                    });
                }
            }
        }
        return;
    }
    // SAFETY: `Mat::new` checked that every element of A and B the strides address lies inside
    // their slices, C is the caller's; all strides fit in `isize`.
    unsafe {
        gemm_raw(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr(),
            b.rs as isize,
            b.cs as isize,
            beta,
            c,
            ldc as isize,
            1,
        );
    }
}

/// `C = alpha * A * B + beta * C` over raw strided `m x k` (A), `k x n` (B) and `m x n` (C)
/// matrices, in BLAS's argument order (row stride, then column stride); with `beta == 0`, C is
/// not read. Products of at least [`PARALLEL_FLOPS`] multiply-adds use the current thread pool.
///
/// # Safety
/// Every element the strides address inside A, B and C must lie inside the allocations behind
/// the pointers, and C's elements must not alias each other or A and B.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_raw<T: Real>(
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: *const T,
    rsa: isize,
    csa: isize,
    b: *const T,
    rsb: isize,
    csb: isize,
    beta: T,
    c: *mut T,
    rsc: isize,
    csc: isize,
) {
    let threads = crate::par::threads();
    let parallelism = if m.saturating_mul(n).saturating_mul(k) >= PARALLEL_FLOPS && threads > 1 {
        ::gemm::Parallelism::Rayon(threads)
    } else {
        ::gemm::Parallelism::None
    };
    // SAFETY: forwarded from the caller. The `gemm` crate computes `dst = a * dst + b * lhs rhs`
    // (its `alpha` scales C), takes column stride before row stride, and reads C only when told.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            c,
            csc,
            rsc,
            beta != T::default(),
            a,
            csa,
            rsa,
            b,
            csb,
            rsb,
            beta,
            alpha,
            false,
            false,
            false,
            parallelism,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_follow_the_strides() {
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2x3
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0]; // 3x2
        let mut c = [0.0f32; 4];
        let (ma, mb) = (
            Mat::row_major(&a, 2, 3).unwrap(),
            Mat::row_major(&b, 3, 2).unwrap(),
        );
        gemm(1.0, ma, mb, 0.0, &mut c, 2).unwrap();
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
        // (B^T A^T) = (AB)^T, read through transposed views.
        let mut ct = [0.0f32; 4];
        gemm(1.0, mb.t(), ma.t(), 0.0, &mut ct, 2).unwrap();
        assert_eq!(ct, [58.0, 139.0, 64.0, 154.0]);
        // beta keeps a scaled C.
        gemm(1.0, ma, mb, 0.5, &mut c, 2).unwrap();
        assert_eq!(c, [87.0, 96.0, 208.5, 231.0]);
    }

    #[test]
    fn large_products_split_rows_and_agree() {
        let (m, k, n) = (64, 128, 160);
        let a: Vec<f64> = (0..m * k).map(|i| (i % 7) as f64 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i % 5) as f64 - 2.0).collect();
        let mut c = vec![0.0; m * n];
        gemm(
            1.0,
            Mat::row_major(&a, m, k).unwrap(),
            Mat::row_major(&b, k, n).unwrap(),
            0.0,
            &mut c,
            n,
        )
        .unwrap();
        for (i, j) in [(0, 0), (63, 159), (17, 80)] {
            let want: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            assert_eq!(c[i * n + j], want);
        }
    }

    #[test]
    fn views_and_products_are_bounds_checked() {
        let a = [1.0f32; 5];
        let err = Mat::row_major(&a, 2, 3).unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
        let ma = Mat::row_major(&a[..4], 2, 2).unwrap();
        let mut c = [0.0f32; 3];
        let err = gemm(1.0, ma, ma, 0.0, &mut c, 2).unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
        let mb = Mat::row_major(&a[..3], 3, 1).unwrap();
        assert!(gemm(1.0, ma, mb, 0.0, &mut c, 2).is_err());
    }
}
