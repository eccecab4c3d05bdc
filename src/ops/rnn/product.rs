//! The matrix products of the recurrences: through the `gemm` crate, with direct kernels for the
//! few rows of a small batch, and the recurrent weights laid out once per plan for the per-step
//! products.
//!
//! Design note: the `gemm` crate packs both operands on every call, which costs as much as the
//! product itself when `A` has one row (a batch of one, as in streaming speech models, where the
//! recurrent product of every step is a vector times a matrix). Products with a few rows
//! therefore run row by row: as sums of `B`'s rows scaled by `A`'s (when `B`'s rows are
//! contiguous, or `B` is in panels, as the recurrent weights are; up to [`AXPY_ROWS`] rows), or as
//! dot products (when `B`'s columns and `A`'s rows are contiguous, as for `X W^T`; up to
//! [`DOT_ROWS`] rows). The limits are where the `gemm` crate wins on 128 to 512 wide weights.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::ops::nn::blas::gemm_raw;
use crate::ops::num::{has_fma, Real};
use crate::ops::util::dot;
use multiversion::multiversion;

#[derive(Clone, Copy, Debug)]
pub(super) struct View<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a, T> View<'a, T> {
    /// A contiguous row-major matrix at the start of `data`.
    pub fn rows(data: &'a [T], rows: usize, cols: usize) -> Self {
        View {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// Columns `start..start + count` of the same rows (an empty view, which no product
    /// accepts, when `start` is past the data).
    pub fn columns(self, start: usize, count: usize) -> Self {
        let offset = start.saturating_mul(self.cs);
        View {
            data: self.data.get(offset..).unwrap_or(&[]),
            cols: count,
            ..self
        }
    }

    /// The transpose, a view of the same elements.
    pub fn t(self) -> Self {
        View {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// Whether a `rows x cols` matrix with strides `(rs, cs)` lies inside `len` elements, with
/// strides representable as `isize`.
fn fits(len: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> Option<(isize, isize)> {
    let strides = (isize::try_from(rs).ok()?, isize::try_from(cs).ok()?);
    if rows == 0 || cols == 0 {
        return Some(strides);
    }
    let last = (rows - 1)
        .checked_mul(rs)?
        .checked_add((cols - 1).checked_mul(cs)?)?;
    (last < len).then_some(strides)
}

/// Products with contiguous rows of `B` and at most this many rows skip the `gemm` crate.
const AXPY_ROWS: usize = 5;
/// Products with contiguous columns of `B` and at most this many rows skip the `gemm` crate.
const DOT_ROWS: usize = 2;

/// `C <- A B + beta C`, where `C` is the row-major block of `a.rows` rows of `b.cols` elements
/// with row stride `ldc` at the start of `c`.
pub(super) fn gemm<T: Real>(
    a: View<'_, T>,
    b: View<'_, T>,
    beta: T,
    c: &mut [T],
    ldc: usize,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let bad = || {
        Error::Eval(format!(
            "matrix product of {m}x{k} and {}x{n} out of bounds",
            b.rows
        ))
    };
    if b.rows != k || n > ldc {
        return Err(bad());
    }
    let sa = fits(a.data.len(), m, k, a.rs, a.cs).ok_or_else(bad)?;
    let sb = fits(b.data.len(), k, n, b.rs, b.cs).ok_or_else(bad)?;
    let sc = fits(c.len(), m, n, ldc, 1).ok_or_else(bad)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let scaled_rows = b.cs == 1 && m <= AXPY_ROWS;
    if k == 0 || scaled_rows || (b.rs == 1 && a.cs == 1 && m <= DOT_ROWS) {
        small_gemm(a, b, beta, c, ldc, scaled_rows);
        return Ok(());
    }
    // SAFETY: `fits` checked that every addressed element of A, B and C is inside its slice;
    // C's column stride is 1 and its row stride is at least its width, so no two elements alias.
    unsafe {
        gemm_raw(
            m,
            k,
            n,
            T::ONE,
            a.data.as_ptr(),
            sa.0,
            sa.1,
            b.data.as_ptr(),
            sb.0,
            sb.1,
            beta,
            c.as_mut_ptr(),
            sc.0,
            sc.1,
        );
    }
    Ok(())
}

/// [`gemm`] row by row, for views already checked to fit: each row of `C` is a sum of rows of
/// `B` scaled by `A`'s row (`scaled_rows`, which needs `B`'s rows contiguous) or a dot product
/// per element (which needs `B`'s columns and `A`'s rows contiguous).
fn small_gemm<T: Real>(
    a: View<'_, T>,
    b: View<'_, T>,
    beta: T,
    c: &mut [T],
    ldc: usize,
    scaled_rows: bool,
) {
    let (k, n) = (a.cols, b.cols);
    scale_rows(c, ldc, a.rows, n, beta);
    if k == 0 {
        return;
    }
    if scaled_rows {
        match has_fma() {
            true => add_scaled_rows::<T, true>(a, b, c, ldc),
            false => add_scaled_rows::<T, false>(a, b, c, ldc),
        }
        return;
    }
    for (i, row) in c.chunks_mut(ldc).take(a.rows).enumerate() {
        let a_row = &a.data[i * a.rs..i * a.rs + k];
        for (j, v) in row[..n].iter_mut().enumerate() {
            *v += dot(a_row, &b.data[j * b.cs..j * b.cs + k]);
        }
    }
}

/// `C <- beta C` for the `rows x n` block of row stride `ldc` at the start of `c`.
fn scale_rows<T: Real>(c: &mut [T], ldc: usize, rows: usize, n: usize, beta: T) {
    for row in c.chunks_mut(ldc).take(rows) {
        let row = &mut row[..n];
        if beta == T::ZERO {
            // Not `beta * c`: C may hold anything (even NaN) when beta is zero.
            row.fill(T::ZERO);
        } else if beta != T::ONE {
            row.iter_mut().for_each(|v| *v = beta * *v);
        }
    }
}

/// `C += A B` as sums of `B`'s (contiguous) rows scaled by `A`'s elements, by tiles of `C` held
/// in registers, so a step of a small batch reads the weights once. Each element of `C` sums
/// its terms in the order of `k`, as a row at a time would. With `FUSED` (the CPU has FMA, [`has_fma`]) each term is one fused multiply-add,
/// as in onnxruntime's kernels and the direct convolution: the loop is bound by its vector
/// instructions, and on an Intel Xeon (family 6 model 167) at 1 thread the LSTM of
/// `scripts/make_rnn.py` (batch 4, 256 hidden units, `run --profile`) went from 8.3 to 7.6 ms
/// (`check_deployed.py`: 1.69x to 1.37x onnxruntime; the GRU 1.43x to 1.26x).
/// Every CPU with FMA computes the same bits (multiversion's levels with FMA all fuse).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn add_scaled_rows<T: Real, const FUSED: bool>(
    a: View<'_, T>,
    b: View<'_, T>,
    c: &mut [T],
    ldc: usize,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    // Tiles of up to four rows and `TILE` columns of C summed in registers over the whole of
    // k: C is loaded and stored once per tile, where the row-at-a-time loop did so for every
    // four terms (the LSTM of `scripts/make_rnn.py`, Intel Xeon family 6 model 167, one
    // thread, medians of 30 runs in three alternations: 8.75 -> 8.2 ms; the GRU 6.45 ->
    // 5.9 ms). B's rows are 4 KiB apart there, so a tile's loads cross a page per row: the
    // recurrent weights therefore go in panels ([`add_scaled_panels`]).
    let full = n / TILE * TILE;
    let mut i0 = 0;
    while i0 < m {
        let rows = (m - i0).min(4);
        match rows {
            4 => add_tiles::<T, FUSED, 4>(&a, &b, c, ldc, i0, full),
            3 => add_tiles::<T, FUSED, 3>(&a, &b, c, ldc, i0, full),
            2 => add_tiles::<T, FUSED, 2>(&a, &b, c, ldc, i0, full),
            _ => add_tiles::<T, FUSED, 1>(&a, &b, c, ldc, i0, full),
        }
        i0 += rows;
    }
    // The last columns, a row of C at a time.
    if full == n {
        return;
    }
    for p in 0..k {
        let b_row = &b.data[p * b.rs + full..p * b.rs + n];
        for (i, row) in c.chunks_mut(ldc).take(m).enumerate() {
            let scale = a.data[i * a.rs + p * a.cs];
            for (v, &x) in row[full..n].iter_mut().zip(b_row) {
                *v = term::<T, FUSED>(*v, scale, x);
            }
        }
    }
}

/// Columns of C per tile of [`add_scaled_rows`]: two 512-bit registers of `f32` per row (four
/// spilled, and were slower).
const TILE: usize = 32;

/// One term of a sum: fused or a product then a sum.
#[inline(always)]
fn term<T: Real, const FUSED: bool>(sum: T, s: T, x: T) -> T {
    match FUSED {
        true => s.mul_add(x, sum),
        false => sum + s * x,
    }
}

/// `C[i0..i0 + R, ..full] += A B` by tiles of `R x TILE` kept in registers.
#[inline(always)]
fn add_tiles<T: Real, const FUSED: bool, const R: usize>(
    a: &View<'_, T>,
    b: &View<'_, T>,
    c: &mut [T],
    ldc: usize,
    i0: usize,
    full: usize,
) {
    for j0 in (0..full).step_by(TILE) {
        let mut acc = [[T::ZERO; TILE]; R];
        for (r, acc) in acc.iter_mut().enumerate() {
            acc.copy_from_slice(&c[(i0 + r) * ldc + j0..][..TILE]);
        }
        for p in 0..a.cols {
            let b_row = &b.data[p * b.rs + j0..][..TILE];
            for (r, acc) in acc.iter_mut().enumerate() {
                let s = a.data[(i0 + r) * a.rs + p * a.cs];
                for (v, &x) in acc.iter_mut().zip(b_row) {
                    *v = term::<T, FUSED>(*v, s, x);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            c[(i0 + r) * ldc + j0..][..TILE].copy_from_slice(acc);
        }
    }
}

/// The recurrent weights `R` (row-major, `rows` gate units of `cols` hidden inputs) as the
/// `cols x rows` matrix `R^T` that multiplies the hidden state every step, for a batch of
/// `batch` rows. [`gemm`] reads `R` itself through a transposed view when it takes dot products
/// (up to [`DOT_ROWS`] rows) or hands the product to the `gemm` crate (more than [`AXPY_ROWS`]);
/// in between it sums scaled rows of `R^T`, which are then laid out in panels of [`TILE`]
/// columns (once per plan when `R` is constant: `Problem::step_weights`).
pub(super) enum StepWeights<'a, T: Clone> {
    /// `R` itself, read through a transposed view.
    Direct {
        r: &'a [T],
        rows: usize,
        cols: usize,
    },
    /// `R^T` in panels ([`panelled`]).
    Panels {
        data: Cow<'a, [T]>,
        rows: usize,
        cols: usize,
    },
}

impl<'a, T: Copy + Default> StepWeights<'a, T> {
    /// Whether products with `batch` rows read `R^T` in panels rather than `R`.
    pub fn uses_panels(batch: usize) -> bool {
        batch > DOT_ROWS && batch <= AXPY_ROWS
    }

    /// `R` read through a transposed view.
    pub fn direct(r: &'a [T], rows: usize, cols: usize) -> Self {
        StepWeights::Direct { r, rows, cols }
    }

    /// `R^T` in panels, as [`panelled`] makes them from `R` (`rows x cols`).
    pub fn panels(data: Cow<'a, [T]>, rows: usize, cols: usize) -> Self {
        StepWeights::Panels { data, rows, cols }
    }

    /// `R^T` as the right operand of a step's product.
    pub fn view(&self) -> StepView<'_, T> {
        match self {
            StepWeights::Direct { r, rows, cols } => {
                StepView::Strided(View::rows(r, *rows, *cols).t())
            }
            StepWeights::Panels { data, rows, cols } => StepView::Panels {
                data,
                k: *cols,
                n: *rows,
                start: 0,
                count: *rows,
            },
        }
    }
}

/// `R^T` for the `rows x cols` row-major `R`, in panels of [`TILE`] columns: panel `j` holds
/// rows `j * TILE..` of `R` as `cols` runs of `TILE` values (`R^T`'s rows cut to the panel's
/// columns; zeros past `rows`), so a tile of a step's product reads one contiguous block where
/// `R^T`'s rows, each a few KiB long, put every row of a tile on a page of its own.
pub(super) fn panelled<T: Copy + Default>(r: &[T], rows: usize, cols: usize) -> Result<Vec<T>> {
    let panels = rows.div_ceil(TILE);
    let len = panels
        .checked_mul(TILE * cols)
        .filter(|_| r.len() >= rows * cols)
        .ok_or_else(|| Error::Eval(format!("R of {rows} x {cols} does not fit")))?;
    let mut out = crate::tensor::try_vec(len, T::default())?;
    for (j, panel) in out
        .chunks_exact_mut(TILE * cols.max(1))
        .enumerate()
        .take(panels)
    {
        for (t, unit) in r
            .chunks_exact(cols.max(1))
            .skip(j * TILE)
            .take(TILE)
            .enumerate()
        {
            for (p, &v) in unit.iter().enumerate() {
                panel[p * TILE + t] = v;
            }
        }
    }
    Ok(out)
}

/// `R^T`, or some of its columns, as a step's product reads it.
#[derive(Clone, Copy, Debug)]
pub(super) enum StepView<'a, T> {
    /// A strided view (of `R` itself).
    Strided(View<'a, T>),
    /// Columns `start..start + count` of the `k x n` matrix laid out by [`panelled`].
    Panels {
        data: &'a [T],
        k: usize,
        n: usize,
        start: usize,
        count: usize,
    },
}

impl<T: Real> StepView<'_, T> {
    /// Columns `start..start + count` of the view.
    pub fn columns(self, start: usize, count: usize) -> Self {
        match self {
            StepView::Strided(v) => StepView::Strided(v.columns(start, count)),
            StepView::Panels {
                data,
                k,
                n,
                start: s,
                ..
            } => StepView::Panels {
                data,
                k,
                n,
                start: s.saturating_add(start),
                count,
            },
        }
    }

    /// `C <- H R^T + beta C` (as [`gemm`]), `C` the `h.rows x count` block of row stride `ldc`
    /// at the start of `c`.
    pub fn multiply(self, h: View<'_, T>, beta: T, c: &mut [T], ldc: usize) -> Result<()> {
        match self {
            StepView::Strided(b) => gemm(h, b, beta, c, ldc),
            StepView::Panels {
                data,
                k,
                n,
                start,
                count,
            } => panel_gemm(
                h,
                (data, k, n),
                start..start.saturating_add(count),
                beta,
                c,
                ldc,
            ),
        }
    }
}

/// [`gemm`] of `a` and columns `cols` of the `k x n` matrix `b` laid out by [`panelled`].
fn panel_gemm<T: Real>(
    a: View<'_, T>,
    (b, k, n): (&[T], usize, usize),
    cols: std::ops::Range<usize>,
    beta: T,
    c: &mut [T],
    ldc: usize,
) -> Result<()> {
    let (m, count) = (a.rows, cols.len());
    let bad = || {
        Error::Eval(format!(
            "matrix product of {m}x{} and {k}x{count} out of bounds",
            a.cols
        ))
    };
    let panels_fit = n.div_ceil(TILE).checked_mul(TILE * k) == Some(b.len());
    if a.cols != k || !panels_fit || cols.end > n || count > ldc {
        return Err(bad());
    }
    fits(a.data.len(), m, k, a.rs, a.cs).ok_or_else(bad)?;
    fits(c.len(), m, count, ldc, 1).ok_or_else(bad)?;
    if m == 0 || count == 0 {
        return Ok(());
    }
    scale_rows(c, ldc, m, count, beta);
    if k > 0 {
        match has_fma() {
            true => add_scaled_panels::<T, true>(a, b, cols, c, ldc),
            false => add_scaled_panels::<T, false>(a, b, cols, c, ldc),
        }
    }
    Ok(())
}

/// [`add_scaled_rows`] with B in panels ([`panelled`]): `C[.., cols] += A B[.., cols]`, tiles of
/// up to four rows by two vector registers of columns (a whole panel of `f32` with 512-bit
/// registers, half of one with 256-bit ones: with sixteen accumulators the broadcast and the
/// loads spill), each element summed in the order of `k` (the same bits as
/// [`add_scaled_rows`]). A tile that `cols` cuts is summed whole and stored in part.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn add_scaled_panels<T: Real, const FUSED: bool>(
    a: View<'_, T>,
    panels: &[T],
    cols: std::ops::Range<usize>,
    c: &mut [T],
    ldc: usize,
) {
    let vector_bytes: usize = multiversion::target::match_target! {
        "x86_64+avx512f" => 64,
        "x86_64+avx2" => 32,
        _ => 16,
    };
    let width = (2 * vector_bytes / std::mem::size_of::<T>()).clamp(8, TILE);
    let mut i0 = 0;
    while i0 < a.rows {
        let rows = (a.rows - i0).min(4);
        let tiles =
            |w: usize| (cols.start / w..cols.end.div_ceil(w)).map(move |t| t * w..(t + 1) * w);
        macro_rules! run {
            ($r:literal, $w:literal) => {
                for tile in tiles($w) {
                    add_panel_tile::<T, FUSED, $r, $w>(&a, panels, (&cols, tile), c, ldc, i0);
                }
            };
        }
        match (rows, width) {
            (4, 32) => run!(4, 32),
            (3, 32) => run!(3, 32),
            (2, 32) => run!(2, 32),
            (_, 32) => run!(1, 32),
            (4, 16) => run!(4, 16),
            (3, 16) => run!(3, 16),
            (2, 16) => run!(2, 16),
            (_, 16) => run!(1, 16),
            (4, _) => run!(4, 8),
            (3, _) => run!(3, 8),
            (2, _) => run!(2, 8),
            (_, _) => run!(1, 8),
        }
        i0 += rows;
    }
}

/// `C[i0..i0 + R, cols] += A B[.., cols]` on the columns `tile` (`W` of them, inside one panel)
/// of B in panels, summed in registers.
#[inline(always)]
fn add_panel_tile<T: Real, const FUSED: bool, const R: usize, const W: usize>(
    a: &View<'_, T>,
    panels: &[T],
    (cols, tile): (&std::ops::Range<usize>, std::ops::Range<usize>),
    c: &mut [T],
    ldc: usize,
    i0: usize,
) {
    let k = a.cols;
    let (j, off) = (tile.start / TILE, tile.start % TILE);
    let panel = &panels[j * TILE * k..(j + 1) * TILE * k];
    // The tile's columns in `cols`, and where they go in C.
    let (lo, hi) = (cols.start.max(tile.start), cols.end.min(tile.end));
    let (from, to) = (lo - tile.start, hi - tile.start);
    let at = lo - cols.start;
    // The tile's part of C is copied through `edge` and the sums run on `acc`, an array only
    // ever indexed by constants: with a cut tile's ranges on `acc` itself, the compiler kept
    // it in memory and assembled each row of B from pieces (an Intel Xeon, family 6 model
    // 167, one thread: the LSTM of `scripts/make_rnn.py` 13.1 -> 7.0 ms, the GRU 9.7 -> 5.3).
    let mut edge = [[T::ZERO; W]; R];
    for (r, edge) in edge.iter_mut().enumerate() {
        edge[from..to].copy_from_slice(&c[(i0 + r) * ldc + at..][..to - from]);
    }
    let acc = sum_panel::<T, FUSED, R, W>(edge, a, panel, off, i0);
    for (r, acc) in acc.iter().enumerate() {
        c[(i0 + r) * ldc + at..][..to - from].copy_from_slice(&acc[from..to]);
    }
}

/// `acc + A[i0..i0 + R, ..] B[.., off..off + W]` for a panel of B, in the order of `k`.
#[inline(always)]
fn sum_panel<T: Real, const FUSED: bool, const R: usize, const W: usize>(
    mut acc: [[T; W]; R],
    a: &View<'_, T>,
    panel: &[T],
    off: usize,
    i0: usize,
) -> [[T; W]; R] {
    for (p, b_row) in panel.chunks_exact(TILE).enumerate() {
        let b_row = &b_row[off..off + W];
        for (r, acc) in acc.iter_mut().enumerate() {
            let s = a.data[(i0 + r) * a.rs + p * a.cs];
            for (v, &x) in acc.iter_mut().zip(b_row) {
                *v = term::<T, FUSED>(*v, s, x);
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `A B + beta C` computed naively.
    fn naive(a: &[f64], b: &[f64], c: &[f64], m: usize, k: usize, n: usize, beta: f64) -> Vec<f64> {
        (0..m * n)
            .map(|ij| {
                let (i, j) = (ij / n, ij % n);
                beta * c[ij] + (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum::<f64>()
            })
            .collect()
    }

    /// The transpose of the row-major `rows x cols` matrix `data`.
    fn transposed<T: Copy>(data: &[T], rows: usize, cols: usize) -> Vec<T> {
        (0..rows * cols)
            .map(|ji| data[(ji % rows) * cols + ji / rows])
            .collect()
    }

    #[test]
    fn panels_sum_each_element_in_the_order_of_k() {
        // R of `n` gate units by `k` inputs; products with every count of rows a tile takes,
        // on all of R^T's columns and on column ranges that start and end inside a panel.
        let vals = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 37.0 - 13.0)
                .collect()
        };
        for (m, k, n) in [(4, 40, 64), (3, 7, 70), (5, 19, 95), (1, 33, 40), (2, 1, 8)] {
            let r = vals(n * k, 2);
            let data = panelled(&r, n, k).unwrap();
            let weights = StepWeights::panels(Cow::Borrowed(&data[..]), n, k);
            let ranges = [
                (0, n),
                (5, n.saturating_sub(9)),
                (n / 2, n - n / 2),
                (17, 1),
            ];
            for (start, count) in ranges.into_iter().filter(|&(s, c)| c > 0 && s + c <= n) {
                for beta in [0.0f32, 1.0, 0.5] {
                    let (a, c0) = (vals(m * k, 1), vals(m * count, 3));
                    let mut c = c0.clone();
                    let view = weights.view().columns(start, count);
                    view.multiply(View::rows(&a, m, k), beta, &mut c, count)
                        .unwrap();
                    for (ij, (&got, &c0)) in c.iter().zip(&c0).enumerate() {
                        let (i, j) = (ij / count, ij % count);
                        let first = if beta == 0.0 { 0.0 } else { beta * c0 };
                        let want = (0..k).fold(first, |sum, p| {
                            let (s, x) = (a[i * k + p], r[(start + j) * k + p]);
                            if has_fma() {
                                s.mul_add(x, sum)
                            } else {
                                sum + s * x
                            }
                        });
                        let at = format!("m={m} k={k} n={n} cols {start}+{count} at {i},{j}");
                        assert_eq!(got.to_bits(), want.to_bits(), "{at}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_product_path_agrees_with_the_definition() {
        let (k, n) = (11, 6);
        for m in [1, 2, 3, 5, 9] {
            let a: Vec<f64> = (0..m * k).map(|v| (v % 7) as f64 - 3.0).collect();
            let b: Vec<f64> = (0..k * n).map(|v| (v % 5) as f64 * 0.5).collect();
            let c0: Vec<f64> = (0..m * n).map(|v| v as f64).collect();
            let bt = transposed(&b, k, n);
            for beta in [0.0, 1.0, 0.5] {
                let want = naive(&a, &b, &c0, m, k, n, beta);
                // B with contiguous rows, then B as the transpose of a row-major matrix.
                for view in [View::rows(&b, k, n), View::rows(&bt, n, k).t()] {
                    let mut c = c0.clone();
                    gemm(View::rows(&a, m, k), view, beta, &mut c, n).unwrap();
                    assert_eq!(c, want, "m={m} beta={beta}");
                }
            }
        }
    }

    #[test]
    fn register_tiles_sum_each_element_in_the_order_of_k() {
        // Widths with whole tiles and a tail, every count of rows a tile takes, and more.
        for (m, k, n) in [
            (4, 40, 64),
            (1, 7, 70),
            (2, 40, 33),
            (3, 1, 32),
            (5, 19, 95),
        ] {
            let vals = |len: usize, seed: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 37.0 - 13.0)
                    .collect()
            };
            let (a, b, c0) = (vals(m * k, 1), vals(k * n, 2), vals(m * n, 3));
            let mut c = c0.clone();
            gemm(View::rows(&a, m, k), View::rows(&b, k, n), 1.0, &mut c, n).unwrap();
            let fused = has_fma();
            for (ij, (&got, &start)) in c.iter().zip(&c0).enumerate() {
                let (i, j) = (ij / n, ij % n);
                let want = (0..k).fold(start, |sum, p| {
                    let (s, x) = (a[i * k + p], b[p * n + j]);
                    if fused {
                        s.mul_add(x, sum)
                    } else {
                        sum + s * x
                    }
                });
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "m={m} k={k} n={n} at {i},{j}"
                );
            }
        }
    }

    #[test]
    fn products_write_a_column_block_and_ignore_c_when_beta_is_zero() {
        // B = [I | 2I] (2x4); the product with its last two columns lands in a 2-wide block.
        let b = [1.0, 0.0, 2.0, 0.0, 0.0, 1.0, 0.0, 2.0];
        let right = View::rows(&b[..], 2, 4).columns(2, 2);
        let mut c = [f64::NAN, f64::NAN, 9.0];
        gemm(View::rows(&[3.0, 4.0][..], 1, 2), right, 0.0, &mut c, 3).unwrap();
        assert_eq!(c, [6.0, 8.0, 9.0]);
    }

    #[test]
    fn products_that_do_not_fit_fail() {
        let a = [1.0f32; 4];
        let mut c = [0.0f32; 2];
        let err = gemm(
            View::rows(&a[..], 2, 2),
            View::rows(&a[..], 2, 2),
            0.0,
            &mut c,
            2,
        )
        .unwrap_err();
        assert!(err.to_string().contains("out of bounds"), "{err}");
        let past = View::rows(&a[..], 2, 2).columns(5, 1);
        let err = gemm(View::rows(&a[..], 1, 2), past, 0.0, &mut c, 1).unwrap_err();
        assert!(err.to_string().contains("out of bounds"), "{err}");
    }
}
