//! The index adjustments of the modes other than `error`: `clamp` clamps each coordinate into
//! `[-d, d-1]`, `zero` gathers from the input padded with a zero slot (floating-point data) or
//! masks the output where a coordinate was out of range.

use super::vals::zero_scalar;
use super::{Lowerer, Val};
use crate::gather::OutOfRange;
use crate::ir::{AttrValue, StoredTensor};
use crate::DataType;

impl Lowerer<'_, '_> {
    /// Mode adjustments of single-axis indices (every element is a coordinate): returns the
    /// indices to gather with and, in mode `zero`, the in-range mask (the logical indices'
    /// shape).
    pub(super) fn single_axis_modes(&mut self, i: &Val) -> (Val, Option<Val>) {
        if self.spec.mode == OutOfRange::Error {
            return (i.clone(), None);
        }
        let t = self.cast_to_i64(i);
        self.modes(t)
    }

    /// Mode adjustments of int64 indices whose last dimension holds the coordinates, or whose
    /// every element is a coordinate of the one axis: `clamp` clamps into `[-d, d-1]`,
    /// `zero` replaces what is out of range by 0 and returns the per-element in-range mask.
    pub(super) fn modes(&mut self, t: Val) -> (Val, Option<Val>) {
        let x = self.x.clone();
        let x = &x;
        let mode = self.spec.mode;
        if mode == OutOfRange::Error {
            return (t, None);
        }
        let axes: Vec<Option<usize>> = self.spec.axes.iter().map(|&a| Some(a)).collect();
        let sizes: Option<Vec<i64>> = self.spec.axes.iter().map(|&a| x.dims[a].known()).collect();
        let (d, hi, lo) = match sizes {
            Some(s) => {
                let hi: Vec<i64> = s.iter().map(|n| n - 1).collect();
                let lo: Vec<i64> = s.iter().map(|n| -n).collect();
                (
                    self.e.constant("axis_sizes", &s),
                    self.e.constant("axis_max", &hi),
                    self.e.constant("axis_min", &lo),
                )
            }
            None => {
                let d = self.dims_vector(x, &axes, "axis_sizes");
                let one = self.one();
                let hi = self.e.op("Sub", &[&d, &one], vec![], "axis_max");
                let lo = self.e.op("Neg", &[&d], vec![], "axis_min");
                (d, hi, lo)
            }
        };
        let bool_op =
            |l: &mut Self, op: &str, ins: &[&str], what: &str| l.e.op(op, ins, vec![], what);
        match mode {
            OutOfRange::Clamp => {
                let name = if self.e.opset >= 12 {
                    let upper = self.e.op("Min", &[&t.name, &hi], vec![], "clamped_above");
                    self.e.op("Max", &[&upper, &lo], vec![], "clamped")
                } else {
                    let above = bool_op(self, "Less", &[&hi, &t.name], "above");
                    let upper =
                        self.e
                            .op("Where", &[&above, &hi, &t.name], vec![], "clamped_above");
                    let below = bool_op(self, "Less", &[&upper, &lo], "below");
                    self.e
                        .op("Where", &[&below, &lo, &upper], vec![], "clamped")
                };
                (self.typed(name, DataType::Int64), None)
            }
            _ => {
                let below = bool_op(self, "Less", &[&t.name, &lo], "below");
                let not_below = bool_op(self, "Not", &[&below], "not_below");
                let under = bool_op(self, "Less", &[&t.name, &d], "under");
                let ok = bool_op(self, "And", &[&not_below, &under], "in_range");
                let zero = self
                    .e
                    .constant_tensor("index_zero", StoredTensor::from_i64s(None, &[], &[0]));
                if self.pad_zero {
                    // Out of range reads the zero slot at coordinate d of the padded input;
                    // negative indices must count from the end explicitly, the padded axis being
                    // one longer.
                    let safe = self
                        .e
                        .op("Where", &[&ok, &t.name, &d], vec![], "padded_index");
                    let negative = bool_op(self, "Less", &[&safe, &zero], "negative");
                    let wrapped = self.e.op("Add", &[&safe, &d], vec![], "wrapped");
                    let name = self
                        .e
                        .op("Where", &[&negative, &wrapped, &safe], vec![], "safe");
                    return (self.typed(name, DataType::Int64), None);
                }
                let name = self.e.op("Where", &[&ok, &t.name, &zero], vec![], "safe");
                let ok = self.typed(ok, DataType::Bool);
                (self.typed(name, DataType::Int64), Some(ok))
            }
        }
    }

    /// The per-tuple mask from the per-coordinate one: true where every coordinate of the tuple
    /// is in range. Without `keep`, the coordinate dimension goes.
    pub(super) fn all_coordinates(&mut self, ok: Val, keep: bool) -> Val {
        let last = ok.dims.len() - 1;
        let as_int = self.e.op(
            "Cast",
            &[&ok.name],
            vec![("to", AttrValue::Int(DataType::Int64.onnx() as i64))],
            "in_range_int",
        );
        let keepdims = AttrValue::Int(i64::from(keep));
        let reduced = if self.e.opset >= 18 {
            let axes = self.e.constant("coordinate_axis", &[last as i64]);
            self.e.op(
                "ReduceMin",
                &[&as_int, &axes],
                vec![("keepdims", keepdims)],
                "tuple_in_range_int",
            )
        } else {
            self.e.op(
                "ReduceMin",
                &[&as_int],
                vec![
                    ("axes", AttrValue::Ints(vec![last as i64])),
                    ("keepdims", keepdims),
                ],
                "tuple_in_range_int",
            )
        };
        let name = self.e.op(
            "Cast",
            &[&reduced],
            vec![("to", AttrValue::Int(DataType::Bool.onnx() as i64))],
            "tuple_in_range",
        );
        self.typed(name, DataType::Bool)
    }

    /// The input with a zero slot appended to every axis (`Pad`), read by out-of-range indices
    /// in mode `zero` (see the module's design note).
    pub(super) fn pad_axes(&mut self, x: &Val) -> Val {
        let rank = self.rank();
        let mut pads = vec![0i64; 2 * rank];
        for &a in &self.spec.axes {
            pads[rank + a] = 1;
        }
        let name = if self.e.opset >= 11 {
            let pads = self.e.constant("pads", &pads);
            self.e.op("Pad", &[&x.name, &pads], vec![], "padded")
        } else {
            let attrs = vec![("pads", AttrValue::Ints(pads))];
            self.e.op("Pad", &[&x.name], attrs, "padded")
        };
        self.typed(name, x.elem)
    }

    /// Mode `zero`: the output where the indices were in range, zero elsewhere (`And` for
    /// booleans).
    pub(super) fn mask_output(&mut self, out: Val, mask: Option<Val>) -> Val {
        let Some(mask) = mask else {
            return out;
        };
        let name = if out.elem == DataType::Bool {
            self.e.op("And", &[&mask.name, &out.name], vec![], "masked")
        } else {
            let zero = self.e.constant_tensor("zero", zero_scalar(out.elem));
            self.e
                .op("Where", &[&mask.name, &out.name, &zero], vec![], "masked")
        };
        self.typed(name, out.elem)
    }
}
