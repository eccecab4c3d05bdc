//! Canonical form of one `GatherMultiaxis` call.
//!
//! Every output dimension of size > 1 is one of two kinds:
//!
//! - an **index dimension** (`I`): the logical indices have the output's size there (an axis, or
//!   a non-axis dimension where the indices are not broadcast). Its coordinate selects the index
//!   tuple; if the input also has the dimension, its input offset is *folded* into the tuple's
//!   element offset by the index pre-pass;
//! - a **block dimension** (`B`): the logical indices have size 1 there (broadcast), so the
//!   coordinate only moves the input read position, by the input stride.
//!
//! So each output element reads `input[base(B coordinates) + T[t(I coordinates)]]`, where `T` is
//! the table of element offsets the pre-pass computes from the indices, one entry per logical
//! index tuple (dense, row-major over the I dimensions). Size-1 dimensions are dropped, and
//! neighbours of the same kind whose strides line up are merged, so an ONNX `Gather` becomes
//! `[B outer, I, B inner]`, a `GatherElements` a single `I`, a `GatherND` `[I, B rows]`.
//!
//! The pre-pass has its own canonical form over the logical indices shape: dimensions with their
//! fold strides, merged the same way, plus one `(size, stride)` per axis.

use super::super::{logical_indices_shape, GatherError, GatherSpec, OutOfRange};

/// One dimension of the output loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dim {
    pub size: usize,
    /// Input elements per step (block dimensions only; 0 for index dimensions).
    pub in_stride: usize,
    /// Offset-table entries per step (index dimensions only; 0 for block dimensions).
    pub t_stride: usize,
}

/// One dimension of the logical indices, for the pre-pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TDim {
    pub size: usize,
    /// Input elements per step folded into the offset (0 where the input is broadcast or the
    /// dimension is an axis).
    pub fold: usize,
}

/// One coordinate of the index tuples: the size of its input axis and the axis' input stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AxisInfo {
    pub dim: usize,
    pub stride: usize,
}

/// How the pre-pass turns the indices into the offset table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TLayout {
    /// Number of entries (logical index tuples).
    pub count: usize,
    /// Merged logical dimensions, outermost first; never empty.
    pub dims: Vec<TDim>,
    /// Index values per tuple in memory (`max(len(axes), 1)`).
    pub coordinate_size: usize,
    /// One per axis, in coordinate order; empty when the indices' values are not read.
    pub axes: Vec<AxisInfo>,
    pub mode: OutOfRange,
}

/// The canonical form of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Input element count.
    pub n_in: usize,
    /// Output element count (> 0).
    pub n_out: usize,
    /// Merged output dimensions, outermost first; never empty (a unit block dimension stands in
    /// for a scalar output).
    pub dims: Vec<Dim>,
    pub t: TLayout,
    /// Largest input offset the block dimensions contribute: `sum((size - 1) * in_stride)`.
    pub max_base: usize,
    /// True when every index dimension is outside every block dimension, so each offset-table
    /// entry is used by exactly one run of `block` consecutive output elements, in order.
    pub streamed: bool,
    /// Output elements per offset-table entry when `streamed`.
    pub block: usize,
}

impl Layout {
    /// The canonical form for these shapes; `output` is the checked output shape with at least
    /// one element.
    pub fn new(
        input: &[usize],
        indices: &[usize],
        spec: &GatherSpec,
        output: &[usize],
    ) -> Result<Layout, GatherError> {
        let logical = logical_indices_shape(indices, spec)?;
        let rank = input.len();
        let in_strides = row_major_strides(input);
        let t_strides = row_major_strides(&logical);

        let mut dims = Vec::with_capacity(rank);
        let mut tdims = Vec::with_capacity(rank);
        for d in 0..rank {
            let is_axis = spec.axes.contains(&d);
            if logical[d] != 1 {
                let fold = if !is_axis && input[d] != 1 {
                    in_strides[d]
                } else {
                    0
                };
                tdims.push(TDim {
                    size: logical[d],
                    fold,
                });
            }
            if output[d] == 1 {
                continue;
            }
            dims.push(if logical[d] != 1 {
                Dim {
                    size: output[d],
                    in_stride: 0,
                    t_stride: t_strides[d],
                }
            } else {
                Dim {
                    size: output[d],
                    in_stride: in_strides[d],
                    t_stride: 0,
                }
            });
        }
        let dims = merge(dims, |a, b| {
            (a.in_stride == b.in_stride * b.size && a.t_stride == b.t_stride * b.size).then_some(
                Dim {
                    size: a.size * b.size,
                    in_stride: b.in_stride,
                    t_stride: b.t_stride,
                },
            )
        });
        let mut dims = if dims.is_empty() {
            vec![Dim {
                size: 1,
                in_stride: 1,
                t_stride: 0,
            }]
        } else {
            dims
        };
        let tdims = merge(tdims, |a, b| {
            (a.fold == b.fold * b.size).then_some(TDim {
                size: a.size * b.size,
                fold: b.fold,
            })
        });
        let tdims = if tdims.is_empty() {
            vec![TDim { size: 1, fold: 0 }]
        } else {
            tdims
        };

        // An innermost index dimension always steps through the table one entry at a time: the
        // dimensions after it have logical size 1. A unit block dimension keeps the kernels'
        // assumptions simple if that ever changed.
        if let Some(inner) = dims.last() {
            if inner.t_stride > 1 {
                dims.push(Dim {
                    size: 1,
                    in_stride: 1,
                    t_stride: 0,
                });
            }
        }

        let max_base = dims.iter().map(|d| (d.size - 1) * d.in_stride).sum();
        let first_block = dims
            .iter()
            .position(|d| d.t_stride == 0)
            .unwrap_or(dims.len());
        let streamed = dims[first_block..].iter().all(|d| d.t_stride == 0);
        let block = dims[first_block..].iter().map(|d| d.size).product();
        let axes = spec
            .axes
            .iter()
            .map(|&a| AxisInfo {
                dim: input[a],
                stride: in_strides[a],
            })
            .collect();
        Ok(Layout {
            n_in: input.iter().product(),
            n_out: output.iter().product(),
            dims,
            t: TLayout {
                count: logical.iter().product(),
                dims: tdims,
                coordinate_size: spec.coordinate_size(),
                axes,
                mode: spec.mode,
            },
            max_base,
            streamed,
            block,
        })
    }
}

/// Row-major element strides of `shape`.
pub(crate) fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Merges neighbours (outer, inner) while `join` says they form one dimension.
fn merge<T: Copy>(dims: Vec<T>, join: impl Fn(&T, &T) -> Option<T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(dims.len());
    for d in dims {
        match out.last().and_then(|outer| join(outer, &d)) {
            Some(joined) => {
                if let Some(last) = out.last_mut() {
                    *last = joined;
                }
            }
            None => out.push(d),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gather::output_shape;

    /// The canonical output dimensions for one call, as `(kind, size, stride)` with kind `B` or
    /// `I`, plus whether the table is streamed.
    fn check(
        input: &[usize],
        indices: &[usize],
        axes: &[usize],
        expect: &[(char, usize, usize)],
        streamed: bool,
    ) {
        let spec = GatherSpec::new(axes.to_vec());
        let out = output_shape(input, indices, &spec).unwrap();
        let layout = Layout::new(input, indices, &spec, &out).unwrap();
        let got: Vec<(char, usize, usize)> = layout
            .dims
            .iter()
            .map(|d| {
                if d.t_stride > 0 {
                    ('I', d.size, d.t_stride)
                } else {
                    ('B', d.size, d.in_stride)
                }
            })
            .collect();
        assert_eq!(got, expect, "{input:?} {indices:?} {axes:?}");
        assert_eq!(layout.streamed, streamed);
    }

    #[test]
    fn families_canonicalise() {
        // ONNX Gather(data[64, 1000, 16], idx[500], axis=1) as planned: [B 64, I 500, B 16].
        check(
            &[64, 1000, 16],
            &[1, 500, 1],
            &[1],
            &[('B', 64, 16000), ('I', 500, 1), ('B', 16, 1)],
            false,
        );
        // Embedding lookup: [I 4096, B 768].
        check(
            &[30522, 1, 768],
            &[8, 512, 1],
            &[0],
            &[('I', 4096, 1), ('B', 768, 1)],
            true,
        );
        // GatherElements: one index dimension.
        check(
            &[4096, 1024],
            &[4096, 256],
            &[1],
            &[('I', 4096 * 256, 1)],
            true,
        );
        // GatherND points: [I n].
        check(&[512, 512], &[1000, 2], &[0, 1], &[('I', 1000, 1)], true);
        // Scalar output.
        check(&[], &[], &[], &[('B', 1, 1)], true);
        // Broadcast both ways with empty axes.
        check(&[3, 1], &[1, 4], &[], &[('B', 3, 1), ('I', 4, 1)], false);
    }
}
