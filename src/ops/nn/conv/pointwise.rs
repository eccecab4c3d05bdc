//! 1x1 convolutions with unit strides and no padding: the input multiplied directly, in column
//! tiles of positions when threads share it.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::super::super::vector::{add_scalar, ColumnBlocks};
use super::super::blas::Mat;
use super::{ConvShape, Post, LANES};
use crate::error::Result;
use crate::ops::num::Real;

impl ConvShape {
    /// `y = post(wg * xg + bias)` for a 1x1 convolution over more than a few positions, in
    /// column tiles of positions when threads share it: each tile's product lands in its
    /// columns of `y` without reading them, then one pass per row adds the bias and applies
    /// `post`. Filling `y` with the bias first and adding the product onto it wrote and read `y`
    /// once more; on Zen 3 at 1 thread the generated conv-net went from 8.16-8.28 to 7.88-8.04
    /// ms (the lowest five of fifteen interleaved `run --repeat 50` minima, on a busy host).
    /// Smaller tiles, to keep the output in cache for that pass, measured the same.
    pub(super) fn pointwise<T: Real>(
        &self,
        xg: &[T],
        wg: Mat<'_, T>,
        bias: Option<&[T]>,
        post: Post<'_, T>,
        y: &mut [MaybeUninit<T>],
        parallel: bool,
    ) -> Result<()> {
        let p = self.geo.out_plane();
        let (kc, mg) = (wg.cols(), wg.rows());
        let tiles = match parallel {
            true => column_tiles(p, &[kc, mg]),
            false => vec![(0, p)],
        };
        let blocks = ColumnBlocks::new(y, mg, p)?;
        let tile = |&(p0, t): &(usize, usize)| -> Result<()> {
            let b = Mat::new(&xg[p0..], kc, t, p, 1)?;
            // SAFETY: the tiles are disjoint columns of `y`, one task each; with beta 0 the
            // product does not read them, and the pass after it reads what it wrote.
            unsafe {
                blocks.product(T::ONE, wg, b, T::ZERO, p0)?;
                if bias.is_some() || post.is_some() {
                    blocks.for_each_row(p0, t, |m, row| {
                        if let Some(b) = bias {
                            add_scalar(row, b[m]);
                        }
                        if let Some(post) = post {
                            post(row);
                        }
                    });
                }
            }
            Ok(())
        };
        if parallel && tiles.len() > 1 {
            tiles.par_iter().try_for_each(tile)
        } else {
            tiles.iter().try_for_each(tile)
        }
    }
}

/// Column tiles `(first, count)` of a product over `p` positions, two per thread, each a whole
/// number of [`LANES`] but the last, when a tile of work (`cost` per position) is worth a task;
/// else one tile. Measured on Zen 5 (`multigather run --repeat 500`, medians), a 1x1
/// convolution of 24 to 96 channels over 80x80 at 2 threads: 0.166 ms as one product split by
/// the `gemm` crate after a serial bias fill, 0.089 ms in column tiles (0.154 ms at 1 thread).
fn column_tiles(p: usize, cost: &[usize]) -> Vec<(usize, usize)> {
    let threads = crate::par::threads();
    if crate::par::min_len(p, cost) == usize::MAX || threads < 2 {
        return vec![(0, p)];
    }
    let tile = p.div_ceil(2 * threads).next_multiple_of(LANES).max(LANES);
    (0..p)
        .step_by(tile)
        .map(|p0| (p0, tile.min(p - p0)))
        .collect()
}
