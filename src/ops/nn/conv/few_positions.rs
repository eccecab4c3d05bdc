//! Convolutions over a plane of a few output positions (streaming audio): one dot product per
//! filter and position over the position's im2col column.

use super::super::super::util::dot;
use super::super::blas::Mat;
use super::super::window::Geometry3;
use super::{coord, ConvShape};
use crate::error::Result;
use crate::ops::num::Real;
use crate::tensor::try_vec;

impl ConvShape {
    /// `y += wg * im2col(xg)` for a plane of a few positions (streaming audio models convolve a
    /// handful of frames at a time): one dot product per filter and position, over the filter's
    /// row and the position's column of im2col, copied into a row. A matrix product would pack
    /// the whole weight matrix for a few columns of work.
    pub(super) fn few_positions<T: Real>(
        &self,
        xg: &[T],
        wg: Mat<'_, T>,
        y: &mut [T],
    ) -> Result<()> {
        let p = self.geo.out_plane();
        let kc = wg.cols();
        if p == 0 || kc == 0 {
            return Ok(());
        }
        let mut columns = try_vec(p * kc, T::ZERO)?;
        if self.is_pointwise() {
            for (r, row) in xg[..kc * p].chunks_exact(p).enumerate() {
                for (j, &v) in row.iter().enumerate() {
                    columns[j * kc + r] = v;
                }
            }
        } else {
            window_columns(xg, &self.geo, self.cg(), &mut columns);
        }
        for (m, ym) in y.chunks_mut(p).enumerate().take(wg.rows()) {
            let w = wg.row(m);
            for (v, c) in ym.iter_mut().zip(columns.chunks_exact(kc)) {
                *v += dot(&w, c);
            }
        }
        Ok(())
    }
}

/// The im2col column of every output position, one after the other (`columns[j * kc + r]` is
/// tap `r` of position `j`, taps in im2col's order: channel, then depth, height and width), for
/// the few positions of [`ConvShape::few_positions`]: a position's taps along the width are one
/// run of the input row when the dilation is 1, where im2col would write every tap's row of a
/// few positions in a loop of its own. Measured on an Intel Xeon (`multigather run --repeat
/// 2000 --threads 1`, medians, two interleaved pairs), silero-vad, whose STFT (256 taps) and
/// encoder (129 channels of 3 taps) convolve four frames: 0.100-0.105 -> 0.083 ms, and its
/// 16 kHz sequence model 0.100-0.103 -> 0.084-0.088 ms.
fn window_columns<T: Real>(xg: &[T], g: &Geometry3, cg: usize, columns: &mut [T]) {
    let [_, oh, ow] = g.output;
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, _] = g.strides;
    let [dd, dh, dw] = g.dilations;
    let [pd, ph, _] = g.pad_begin;
    let kc = cg * kd * kh * kw;
    for (j, column) in columns.chunks_exact_mut(kc.max(1)).enumerate() {
        let (ox, oy, oz) = (j % ow, (j / ow) % oh, j / ow / oh);
        // The taps along the width that fall inside the row, `lo..hi`, the first at `at`.
        let (lo, count, at) = g.taps_inside(2, ox);
        let hi = lo + count;
        let mut runs = column.chunks_exact_mut(kw.max(1));
        for c in 0..cg {
            for kz in 0..kd {
                for ky in 0..kh {
                    let Some(run) = runs.next() else { return };
                    let row = coord(oz, kz, sd, dd, pd, id)
                        .zip(coord(oy, ky, sh, dh, ph, ih))
                        .map(|(iz, iy)| ((c * id + iz) * ih + iy) * iw);
                    let Some(row) = row.filter(|_| lo < hi) else {
                        run.fill(T::ZERO);
                        continue;
                    };
                    run[..lo].fill(T::ZERO);
                    run[hi..].fill(T::ZERO);
                    let x0 = row + at;
                    if dw == 1 {
                        run[lo..hi].copy_from_slice(&xg[x0..x0 + (hi - lo)]);
                    } else {
                        for (k, v) in run[lo..hi].iter_mut().enumerate() {
                            *v = xg[x0 + k * dw];
                        }
                    }
                }
            }
        }
    }
}
