//! Sliding-window geometry shared by the convolutions and the pools: the `kernel_shape`,
//! `strides`, `dilations`, `pads` and `auto_pad` attributes, and the output size and padding they
//! give for an input.
//!
//! Output sizes follow the ONNX formulas: with explicit pads
//! `out = floor_or_ceil((in + pad_begin + pad_end - ((k - 1) * d + 1)) / s) + 1`, where in ceil mode
//! a last window that would start past the input and the begin padding is dropped; with
//! `SAME_UPPER`/`SAME_LOWER` `out = ceil(in / s)` and the padding that needs is split with the odd
//! element at the end (upper) or the beginning (lower); `VALID` means no padding.

use crate::error::{Error, Result};
use crate::ir::{Dim, Node};

/// The `auto_pad` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

impl AutoPad {
    /// The attribute of `node` (`NOTSET` when absent).
    pub fn of(node: &Node) -> Result<AutoPad> {
        Ok(match node.attr_string("auto_pad")?.unwrap_or("NOTSET") {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => return Err(Error::Eval(format!("unknown auto_pad '{other}'"))),
        })
    }

    /// Splits a total padding into (begin, end) the way `SAME_UPPER` / `SAME_LOWER` do.
    pub fn split(self, total: usize) -> (usize, usize) {
        let small = total / 2;
        match self {
            AutoPad::SameLower => (total - small, small),
            _ => (small, total - small),
        }
    }
}

/// The window attributes of one node, for `rank` spatial dims.
#[derive(Clone, Debug)]
pub(super) struct Window {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Explicit pads: the begins of every dim, then the ends.
    pub pads: Vec<usize>,
    pub auto_pad: AutoPad,
}

/// A positive size attribute of `len` values, or all ones when absent.
fn positive(values: Option<&[i64]>, name: &str, len: usize) -> Result<Vec<usize>> {
    match values {
        None => Ok(vec![1; len]),
        Some(v) if v.len() == len && v.iter().all(|&x| x > 0) => {
            Ok(v.iter().map(|&x| x as usize).collect())
        }
        Some(v) => Err(Error::Eval(format!(
            "{name} {v:?} must be {len} positive values"
        ))),
    }
}

/// The window attributes of a node as written, before the number of spatial dims is known:
/// what a plan prepares once ([`crate::ops::Attributes`]).
#[derive(Clone, Debug)]
pub(super) struct WindowAttrs {
    kernel_shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    auto_pad: AutoPad,
}

impl WindowAttrs {
    /// The attributes of `node`.
    pub fn parse(node: &Node) -> Result<WindowAttrs> {
        let list = |name: &str| -> Result<Option<Vec<i64>>> {
            Ok(node.attr_ints(name)?.map(<[i64]>::to_vec))
        };
        Ok(WindowAttrs {
            kernel_shape: list("kernel_shape")?,
            strides: list("strides")?,
            dilations: list("dilations")?,
            pads: list("pads")?,
            auto_pad: AutoPad::of(node)?,
        })
    }

    /// The window for `rank` spatial dims. The kernel comes from `kernel_shape`, or from
    /// `weights` (the spatial dims of a convolution's weights) when the attribute is absent.
    pub fn window(&self, rank: usize, weights: Option<&[usize]>) -> Result<Window> {
        let kernel = match (&self.kernel_shape, weights) {
            (Some(k), _) => positive(Some(k), "kernel_shape", rank)?,
            (None, Some(w)) if w.len() == rank && w.iter().all(|&k| k > 0) => w.to_vec(),
            (None, Some(w)) => {
                return Err(Error::Eval(format!(
                    "weights with spatial dims {w:?} for {rank} spatial input dims"
                )))
            }
            (None, None) => return Err(Error::Eval("kernel_shape is required".into())),
        };
        if let (Some(w), Some(k)) = (weights, &self.kernel_shape) {
            if w.iter().zip(k).any(|(&a, &b)| a as i64 != b) || w.len() != k.len() {
                return Err(Error::Eval(format!(
                    "kernel_shape {k:?} differs from the weights' spatial dims {w:?}"
                )));
            }
        }
        let pads = match &self.pads {
            None => vec![0; 2 * rank],
            Some(p) if p.len() == 2 * rank && p.iter().all(|&x| x >= 0) => {
                p.iter().map(|&x| x as usize).collect()
            }
            Some(p) => {
                return Err(Error::Eval(format!(
                    "pads {p:?} must be {} non-negative values",
                    2 * rank
                )))
            }
        };
        Ok(Window {
            kernel,
            strides: positive(self.strides.as_deref(), "strides", rank)?,
            dilations: positive(self.dilations.as_deref(), "dilations", rank)?,
            pads,
            auto_pad: self.auto_pad,
        })
    }
}

impl Window {
    /// Reads the attributes of `node` for `rank` spatial dims (see [`WindowAttrs::window`]).
    pub fn of(node: &Node, rank: usize, weights: Option<&[usize]>) -> Result<Window> {
        WindowAttrs::parse(node)?.window(rank, weights)
    }

    /// The number of spatial dims.
    pub fn rank(&self) -> usize {
        self.kernel.len()
    }

    /// The extent of the dilated kernel along dim `i`.
    fn extent(&self, i: usize) -> Result<usize> {
        (self.kernel[i] - 1)
            .checked_mul(self.dilations[i])
            .and_then(|e| e.checked_add(1))
            .ok_or_else(|| Error::Eval("dilated kernel is too large".into()))
    }

    /// Output size and (begin, end) padding along dim `i` for an input of size `input`.
    fn resolve_dim(
        &self,
        i: usize,
        input: usize,
        ceil_mode: bool,
    ) -> Result<(usize, usize, usize)> {
        let (s, ext) = (self.strides[i], self.extent(i)?);
        let r = self.rank();
        let (pb, pe) = match self.auto_pad {
            AutoPad::NotSet => (self.pads[i], self.pads[r + i]),
            AutoPad::Valid => (0, 0),
            AutoPad::SameUpper | AutoPad::SameLower => {
                let out = input.div_ceil(s);
                let needed = (out.saturating_sub(1))
                    .checked_mul(s)
                    .and_then(|v| v.checked_add(ext))
                    .ok_or_else(|| Error::Eval("window is too large".into()))?;
                let (pb, pe) = self.auto_pad.split(needed.saturating_sub(input));
                return Ok((out, pb, pe));
            }
        };
        let padded = input
            .checked_add(pb)
            .and_then(|v| v.checked_add(pe))
            .filter(|&v| v <= i64::MAX as usize)
            .ok_or_else(|| Error::Eval("pads are too large".into()))?;
        if padded < ext {
            return Err(Error::Eval(format!(
                "a window of extent {ext} does not fit in a padded size of {padded} along spatial dim {i}"
            )));
        }
        let span = padded - ext;
        let mut out = if ceil_mode {
            span.div_ceil(s)
        } else {
            span / s
        } + 1;
        // In ceil mode the last window must start inside the input or its begin padding.
        if ceil_mode && (out - 1) * s >= input + pb {
            out -= 1;
        }
        Ok((out, pb, pe))
    }

    /// The geometry of the window over `input` (the spatial input dims).
    pub fn resolve(&self, input: &[usize], ceil_mode: bool) -> Result<Geometry> {
        if input.len() != self.rank() {
            return Err(Error::Eval(format!(
                "{} spatial input dims for a {}-D window",
                input.len(),
                self.rank()
            )));
        }
        let mut g = Geometry {
            input: input.to_vec(),
            output: Vec::new(),
            kernel: self.kernel.clone(),
            strides: self.strides.clone(),
            dilations: self.dilations.clone(),
            pad_begin: Vec::new(),
            pad_end: Vec::new(),
        };
        for (i, &d) in input.iter().enumerate() {
            let (out, pb, pe) = self.resolve_dim(i, d, ceil_mode)?;
            g.output.push(out);
            g.pad_begin.push(pb);
            g.pad_end.push(pe);
        }
        Ok(g)
    }

    /// The output dims over spatial input dims of which some may be unknown.
    pub fn output_dims(&self, input: &[Dim], ceil_mode: bool) -> Vec<Dim> {
        input
            .iter()
            .enumerate()
            .map(
                |(i, d)| match d.known().and_then(|v| usize::try_from(v).ok()) {
                    Some(v) if i < self.rank() => self
                        .resolve_dim(i, v, ceil_mode)
                        .map_or(Dim::Unknown, |(o, _, _)| Dim::Known(o as i64)),
                    _ => Dim::Unknown,
                },
            )
            .collect()
    }
}

/// A resolved window over one input: every spatial size, padding and step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Geometry {
    pub input: Vec<usize>,
    pub output: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub pad_end: Vec<usize>,
}

/// A geometry over exactly three spatial dims (depth, height, width): 1-D and 2-D windows get
/// leading dims of size 1, so kernels are written once for three dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Geometry3 {
    pub input: [usize; 3],
    pub output: [usize; 3],
    pub kernel: [usize; 3],
    pub strides: [usize; 3],
    pub dilations: [usize; 3],
    pub pad_begin: [usize; 3],
    pub pad_end: [usize; 3],
}

impl Geometry {
    /// The same geometry over three dims; more than three spatial dims are unsupported.
    pub fn to_3d(&self) -> Result<Geometry3> {
        let r = self.input.len();
        if r > 3 {
            return Err(Error::Unsupported(format!(
                "windows over {r} spatial dims (at most 3)"
            )));
        }
        let lift = |v: &[usize], fill: usize| -> [usize; 3] {
            let mut out = [fill; 3];
            out[3 - r..].copy_from_slice(v);
            out
        };
        Ok(Geometry3 {
            input: lift(&self.input, 1),
            output: lift(&self.output, 1),
            kernel: lift(&self.kernel, 1),
            strides: lift(&self.strides, 1),
            dilations: lift(&self.dilations, 1),
            pad_begin: lift(&self.pad_begin, 0),
            pad_end: lift(&self.pad_end, 0),
        })
    }
}

impl Geometry3 {
    /// Input elements per plane.
    pub fn in_plane(&self) -> usize {
        self.input.iter().product()
    }

    /// Output elements per plane.
    pub fn out_plane(&self) -> usize {
        self.output.iter().product()
    }

    /// Kernel taps.
    pub fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    /// For output index `o` along dim `i`, the kernel taps that land inside the input:
    /// `(first tap, number of taps, input position of the first tap)`.
    pub fn taps_inside(&self, i: usize, o: usize) -> (usize, usize, usize) {
        let (s, d, pb) = (self.strides[i], self.dilations[i], self.pad_begin[i]);
        let (k, n) = (self.kernel[i], self.input[i]);
        let start = o * s; // position of tap 0 in padded coordinates
                           // First tap j with start + j * d >= pb.
        let first = if start >= pb {
            0
        } else {
            (pb - start).div_ceil(d)
        };
        if first >= k {
            return (k, 0, 0);
        }
        let pos = start + first * d - pb;
        if pos >= n {
            return (first, 0, 0);
        }
        let count = ((n - 1 - pos) / d + 1).min(k - first);
        (first, count, pos)
    }

    /// The geometry of output rows `oy0..oy1` (along dim 1, the height) alone, and the input
    /// rows it reads: the band's input is those rows, and its top padding what of the padding
    /// lies under its first row's taps. A band whose taps all fall in the padding reads no
    /// rows.
    pub fn rows(&self, oy0: usize, oy1: usize) -> (Geometry3, std::ops::Range<usize>) {
        let (s, d, k, pb, n) = (
            self.strides[1],
            self.dilations[1],
            self.kernel[1],
            self.pad_begin[1],
            self.input[1],
        );
        // Padded coordinates of the band's first tap and one past its last.
        let top = oy0.saturating_mul(s);
        let bottom = oy1
            .saturating_sub(1)
            .max(oy0)
            .saturating_mul(s)
            .saturating_add((k.max(1) - 1).saturating_mul(d))
            .saturating_add(1);
        let first = top.saturating_sub(pb).min(n);
        let last = bottom.saturating_sub(pb).clamp(first, n);
        let pad_begin = pb.saturating_sub(top);
        let mut band = *self;
        band.input[1] = last - first;
        band.output[1] = oy1.saturating_sub(oy0);
        band.pad_begin[1] = pad_begin;
        band.pad_end[1] = (bottom - top).saturating_sub(pad_begin + (last - first));
        (band, first..last)
    }

    /// For output index `o` along dim `i`, how many kernel taps land inside the input or its
    /// explicit padding (what `count_include_pad` divides by).
    pub fn taps_padded(&self, i: usize, o: usize) -> usize {
        let (s, d, k) = (self.strides[i], self.dilations[i], self.kernel[i]);
        let padded = self.input[i] + self.pad_begin[i] + self.pad_end[i];
        let start = o * s;
        if start >= padded {
            0
        } else {
            ((padded - 1 - start) / d + 1).min(k)
        }
    }
}

/// The indices `o` in `0..count` for which position `o * s + off - pad` lies inside `0..limit`,
/// as a range `lo..hi` (empty when none does).
///
/// With `o` over output positions and `off = k * d` this is where kernel tap `k` of a
/// convolution reads the input; with `o` over input positions, where a transposed convolution
/// writes the output.
pub(super) fn inside(
    count: usize,
    limit: usize,
    s: usize,
    off: usize,
    pad: usize,
) -> (usize, usize) {
    // o * s + off >= pad  <=>  o >= ceil((pad - off) / s)
    let lo = if off >= pad {
        0
    } else {
        (pad - off).div_ceil(s)
    };
    // o * s + off < limit + pad  <=>  o < ceil((limit + pad - off) / s)
    let hi = (limit + pad).saturating_sub(off).div_ceil(s);
    let lo = lo.min(count);
    (lo, hi.clamp(lo, count))
}

#[cfg(test)]
mod tests {
    use crate::ir::AttrValue;

    use super::*;

    fn node(attrs: &[(&str, AttrValue)]) -> Node {
        attrs
            .iter()
            .fold(Node::new("MaxPool", "p", ["x"], ["y"]), |n, (k, v)| {
                n.with_attr(k, v.clone())
            })
    }

    #[test]
    fn a_band_of_rows_reads_the_rows_the_whole_plane_reads_there() {
        // Every output row of every band finds its taps on the same input rows as in the whole
        // plane, counted from the band's first input row: pads above and below, strides,
        // dilations, a kernel taller than the input and bands entirely in the padding.
        for (ih, k, s, d, pb, pe) in [
            (10, 3, 1, 1, 1, 1),
            (11, 3, 2, 1, 1, 1),
            (12, 5, 1, 2, 4, 0),
            (7, 4, 3, 1, 0, 3),
            (3, 5, 1, 1, 4, 4),
            (9, 1, 2, 1, 0, 0),
        ] {
            let oh = (ih + pb + pe - (k - 1) * d - 1) / s + 1;
            let g = Geometry3 {
                input: [1, ih, 6],
                output: [1, oh, 6],
                kernel: [1, k, 1],
                strides: [1, s, 1],
                dilations: [1, d, 1],
                pad_begin: [0, pb, 0],
                pad_end: [0, pe, 0],
            };
            for chunk in 1..=oh {
                for oy0 in (0..oh).step_by(chunk) {
                    let oy1 = (oy0 + chunk).min(oh);
                    let (band, rows) = g.rows(oy0, oy1);
                    assert_eq!(band.output[1], oy1 - oy0);
                    assert_eq!(band.input[1], rows.len());
                    for j in 0..oy1 - oy0 {
                        let (first, count, at) = g.taps_inside(1, oy0 + j);
                        let (bfirst, bcount, bat) = band.taps_inside(1, j);
                        let case = (ih, k, s, d, pb, pe, oy0, oy1, j);
                        assert_eq!((first, count), (bfirst, bcount), "{case:?}");
                        if count > 0 {
                            assert_eq!(at, rows.start + bat, "{case:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn explicit_pads_floor_and_ceil() {
        let n = node(&[
            ("kernel_shape", AttrValue::Ints(vec![3, 3])),
            ("strides", AttrValue::Ints(vec![2, 2])),
            ("pads", AttrValue::Ints(vec![1, 0, 1, 0])),
        ]);
        let w = Window::of(&n, 2, None).unwrap();
        let g = w.resolve(&[7, 5], false).unwrap();
        assert_eq!(g.output, vec![4, 2]);
        assert_eq!(
            (g.pad_begin.clone(), g.pad_end.clone()),
            (vec![1, 0], vec![1, 0])
        );
        // 4x4, kernel 3, stride 2, ceil: (4 - 3) / 2 rounds up to 1, so 2 outputs.
        let n = node(&[
            ("kernel_shape", AttrValue::Ints(vec![3, 3])),
            ("strides", AttrValue::Ints(vec![2, 2])),
        ]);
        let g = Window::of(&n, 2, None)
            .unwrap()
            .resolve(&[4, 4], true)
            .unwrap();
        assert_eq!(g.output, vec![2, 2]);
        // A last window starting in the end padding is dropped.
        let n = node(&[
            ("kernel_shape", AttrValue::Ints(vec![1])),
            ("strides", AttrValue::Ints(vec![2])),
            ("pads", AttrValue::Ints(vec![0, 1])),
        ]);
        let g = Window::of(&n, 1, None)
            .unwrap()
            .resolve(&[4], true)
            .unwrap();
        assert_eq!(g.output, vec![2]);
    }

    #[test]
    fn same_padding_puts_the_odd_element_at_the_chosen_end() {
        let same = |mode: &str| {
            let n = node(&[
                ("kernel_shape", AttrValue::Ints(vec![2])),
                ("auto_pad", AttrValue::String(mode.as_bytes().to_vec())),
            ]);
            let g = Window::of(&n, 1, None)
                .unwrap()
                .resolve(&[5], false)
                .unwrap();
            (g.output[0], g.pad_begin[0], g.pad_end[0])
        };
        assert_eq!(same("SAME_UPPER"), (5, 0, 1));
        assert_eq!(same("SAME_LOWER"), (5, 1, 0));
        assert_eq!(same("VALID"), (4, 0, 0));
    }

    #[test]
    fn taps_inside_clip_to_the_input() {
        let g = Geometry {
            input: vec![5],
            output: vec![3],
            kernel: vec![3],
            strides: vec![2],
            dilations: vec![1],
            pad_begin: vec![1],
            pad_end: vec![1],
        }
        .to_3d()
        .unwrap();
        assert_eq!(g.taps_inside(2, 0), (1, 2, 0));
        assert_eq!(g.taps_inside(2, 1), (0, 3, 1));
        assert_eq!(g.taps_inside(2, 2), (0, 2, 3));
    }

    #[test]
    fn inside_ranges_keep_positions_in_bounds() {
        // Input 5, stride 2, pad 1, tap 0: o * 2 - 1 in 0..5 for o in 1..3.
        assert_eq!(inside(3, 5, 2, 0, 1), (1, 3));
        // Tap 2 (offset 2): o * 2 + 1 in 0..5 for o in 0..2.
        assert_eq!(inside(3, 5, 2, 2, 1), (0, 2));
        // A tap past the end reads nothing.
        assert_eq!(inside(3, 2, 1, 5, 0), (0, 0));
    }

    #[test]
    fn bad_attributes_are_errors() {
        let n = node(&[("kernel_shape", AttrValue::Ints(vec![0, 3]))]);
        let err = Window::of(&n, 2, None).unwrap_err();
        assert!(err.to_string().contains("positive"), "{err}");
        let n = node(&[("kernel_shape", AttrValue::Ints(vec![5]))]);
        let err = Window::of(&n, 1, None)
            .unwrap()
            .resolve(&[3], false)
            .unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
        let n = node(&[]);
        assert!(Window::of(&n, 1, None).is_err());
    }
}
