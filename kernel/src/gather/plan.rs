//! Rank-level recipes that express another gather as one `GatherMultiaxis` node.
//!
//! A [`GatherPlan`] says how to reshape the operands, which `axes` and `mode` to use, and how to
//! reshape the result. It is computed from ranks and static attributes only (see [`super::map`]),
//! never from sizes, so the rewrite pass can turn it into ONNX nodes (`Slice`, `Unsqueeze`,
//! `Squeeze`, `Reshape`, `GatherMultiaxis`) for a model with symbolic dimensions; and
//! [`GatherPlan::apply`] executes the very same recipe on concrete tensors, which is how the
//! library's mappings are tested. The graph rewrite and the library mapping are one recipe.
//!
//! The shape operations have ONNX semantics and are chosen so symbolic dimensions survive:
//! `Unsqueeze` and `Squeeze` wherever possible, `Reshape` only with `0` (copy) and at most one
//! `-1` (infer), and only where every other dimension is copied or 1.

use std::fmt;

use crate::tensor::{element_count, Tensor};

use super::fast::{gather_shaped, FastOptions};
use super::{reference, GatherError, GatherSpec};

/// A metadata-only shape operation, with ONNX semantics.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShapeOp {
    /// ONNX `Unsqueeze`: size-1 dimensions appear at these positions of the *result*
    /// (ascending, unique).
    Unsqueeze(Vec<usize>),
    /// ONNX `Squeeze`: these dimensions (ascending, unique), which must have size 1, disappear.
    Squeeze(Vec<usize>),
    /// ONNX `Reshape` with `allowzero = 0`: `0` copies the dimension at the same position, `-1`
    /// (at most one) takes whatever size is left, any other value is a literal size.
    Reshape(Vec<i64>),
}

impl ShapeOp {
    /// The rank after this operation on a tensor of rank `rank`.
    pub fn output_rank(&self, rank: usize) -> Result<usize, GatherError> {
        match self {
            ShapeOp::Unsqueeze(axes) => {
                let out = rank + axes.len();
                self.check_axes(axes, out, rank)?;
                Ok(out)
            }
            ShapeOp::Squeeze(axes) => {
                self.check_axes(axes, rank, rank)?;
                Ok(rank - axes.len())
            }
            ShapeOp::Reshape(spec) => {
                let copies_missing = spec.iter().enumerate().any(|(i, &d)| d == 0 && i >= rank);
                if copies_missing
                    || spec.iter().filter(|&&d| d == -1).count() > 1
                    || spec.iter().any(|&d| d < -1)
                {
                    return Err(self.error_rank(rank, "needs 0 only where the input has that dimension, at most one -1 and no other negative size"));
                }
                Ok(spec.len())
            }
        }
    }

    /// The shape after this operation.
    pub fn apply_to_shape(&self, shape: &[usize]) -> Result<Vec<usize>, GatherError> {
        self.output_rank(shape.len()).map_err(|e| match e {
            GatherError::ShapeOp { op, reason, .. } => GatherError::ShapeOp {
                op,
                shape: shape.to_vec(),
                reason,
            },
            other => other,
        })?;
        match self {
            ShapeOp::Unsqueeze(axes) => {
                let mut out = Vec::with_capacity(shape.len() + axes.len());
                let mut rest = shape.iter();
                for pos in 0..shape.len() + axes.len() {
                    if axes.contains(&pos) {
                        out.push(1);
                    } else if let Some(&d) = rest.next() {
                        out.push(d);
                    }
                }
                Ok(out)
            }
            ShapeOp::Squeeze(axes) => {
                if let Some(&a) = axes.iter().find(|&&a| shape[a] != 1) {
                    return Err(self.error(
                        shape,
                        &format!("dimension {a} has size {}, not 1", shape[a]),
                    ));
                }
                Ok(shape
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &d)| d)
                    .collect())
            }
            ShapeOp::Reshape(spec) => {
                let total = element_count(shape).ok_or_else(|| self.error(shape, "too large"))?;
                let mut out: Vec<usize> = spec
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| match d {
                        0 => shape[i],
                        -1 => 1,
                        d => d as usize,
                    })
                    .collect();
                let known = element_count(&out).ok_or_else(|| self.error(shape, "too large"))?;
                if let Some(infer) = spec.iter().position(|&d| d == -1) {
                    // As in ONNX and numpy, -1 cannot be inferred when the other dimensions
                    // multiply to 0.
                    if known == 0 || total % known != 0 {
                        return Err(self.error(shape, "cannot infer the -1 dimension"));
                    }
                    out[infer] = total / known;
                } else if known != total {
                    return Err(self.error(shape, "changes the element count"));
                }
                Ok(out)
            }
        }
    }

    fn check_axes(&self, axes: &[usize], bound: usize, rank: usize) -> Result<(), GatherError> {
        let sorted = axes.windows(2).all(|w| w[0] < w[1]);
        if !sorted || axes.iter().any(|&a| a >= bound) {
            return Err(self.error_rank(rank, "axes must be ascending, unique and in range"));
        }
        Ok(())
    }

    fn error(&self, shape: &[usize], reason: &str) -> GatherError {
        GatherError::ShapeOp {
            op: self.to_string(),
            shape: shape.to_vec(),
            reason: reason.to_string(),
        }
    }

    fn error_rank(&self, rank: usize, reason: &str) -> GatherError {
        GatherError::ShapeOp {
            op: self.to_string(),
            shape: vec![],
            reason: format!("rank {rank}: {reason}"),
        }
    }
}

impl fmt::Display for ShapeOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeOp::Unsqueeze(a) => write!(f, "Unsqueeze{a:?}"),
            ShapeOp::Squeeze(a) => write!(f, "Squeeze{a:?}"),
            ShapeOp::Reshape(s) => write!(f, "Reshape{s:?}"),
        }
    }
}

/// How to compute another gather with one `GatherMultiaxis`: crop, reshape the operands, gather,
/// reshape the result.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GatherPlan {
    /// `GatherElements`: slice the input to the indices' sizes on every axis except this one
    /// (the indices may be smaller than the data); `None` otherwise.
    pub crop_input_to_indices: Option<usize>,
    /// Shape operations on the (cropped) input, in order.
    pub input: Vec<ShapeOp>,
    /// Shape operations on the indices, in order.
    pub indices: Vec<ShapeOp>,
    /// Axes and mode of the `GatherMultiaxis` node.
    pub spec: GatherSpec,
    /// Shape operations on the gathered result, in order.
    pub output: Vec<ShapeOp>,
}

/// The shapes a plan goes through for concrete operand shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanShapes {
    /// The `GatherMultiaxis` input.
    pub input: Vec<usize>,
    /// The `GatherMultiaxis` indices (actual shape, coordinates folded into the last dimension).
    pub indices: Vec<usize>,
    /// The `GatherMultiaxis` output.
    pub gathered: Vec<usize>,
    /// The final result.
    pub output: Vec<usize>,
}

impl GatherPlan {
    /// The ranks of the `GatherMultiaxis` operands and of the final result, for operands of
    /// these ranks; checks everything that can be checked without sizes.
    pub fn ranks(
        &self,
        input_rank: usize,
        indices_rank: usize,
    ) -> Result<(usize, usize), GatherError> {
        let gather_rank = fold_ranks(&self.input, input_rank)?;
        let indices_rank = fold_ranks(&self.indices, indices_rank)?;
        super::check_ranks(gather_rank, indices_rank, &self.spec)?;
        Ok((gather_rank, fold_ranks(&self.output, gather_rank)?))
    }

    /// The shapes the plan goes through for operands of these shapes.
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::gather::map::onnx;
    /// // ONNX Gather(data[4, 3], indices[2, 2], axis=1): the proposal's third example.
    /// let plan = onnx::gather(2, 2, 1)?;
    /// let shapes = plan.shapes(&[4, 3], &[2, 2])?;
    /// assert_eq!(shapes.input, [4, 3, 1]);
    /// assert_eq!(shapes.indices, [1, 2, 2]);
    /// assert_eq!(shapes.gathered, [4, 2, 2]);
    /// assert_eq!(shapes.output, [4, 2, 2]);
    /// # Ok::<(), multigather_kernel::gather::GatherError>(())
    /// ```
    pub fn shapes(&self, input: &[usize], indices: &[usize]) -> Result<PlanShapes, GatherError> {
        let cropped = match self.crop_input_to_indices {
            Some(axis) => crop_shape(input, indices, axis)?,
            None => input.to_vec(),
        };
        let input = fold_shapes(&self.input, &cropped)?;
        let indices = fold_shapes(&self.indices, indices)?;
        let gathered = super::output_shape(&input, &indices, &self.spec)?;
        let output = fold_shapes(&self.output, &gathered)?;
        Ok(PlanShapes {
            input,
            indices,
            gathered,
            output,
        })
    }

    /// Runs the recipe with the fast kernel on the current rayon pool. Shape operations only
    /// relabel dimensions; the crop copies.
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::gather::map::onnx;
    /// use multigather_kernel::{DataType, Tensor};
    /// let data = Tensor::from_vec(DataType::Float, &[3, 2], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    /// let indices = Tensor::from_vec(DataType::Int64, &[2], vec![2i64, 0])?;
    /// let out = onnx::gather(2, 1, 0)?.apply(&data, &indices)?;
    /// assert_eq!(out.shape(), &[2, 2]);
    /// assert_eq!(out.as_slice::<f32>()?, &[5.0, 6.0, 1.0, 2.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply(&self, input: &Tensor, indices: &Tensor) -> Result<Tensor, GatherError> {
        self.apply_with(input, indices, &FastOptions::default())
    }

    /// [`GatherPlan::apply`] with explicit fast-kernel options.
    pub fn apply_with(
        &self,
        input: &Tensor,
        indices: &Tensor,
        options: &FastOptions,
    ) -> Result<Tensor, GatherError> {
        let cropped;
        let input = match self.crop_input_to_indices {
            Some(axis) => {
                let shape = crop_shape(input.shape(), indices.shape(), axis)?;
                if shape == input.shape() {
                    input
                } else {
                    cropped = input.crop(&shape)?;
                    &cropped
                }
            }
            None => input,
        };
        let input_shape = fold_shapes(&self.input, input.shape())?;
        let indices_shape = fold_shapes(&self.indices, indices.shape())?;
        let gathered = gather_shaped(
            input,
            &input_shape,
            indices,
            &indices_shape,
            &self.spec,
            options,
        )?;
        let output_shape = fold_shapes(&self.output, gathered.shape())?;
        Ok(gathered.into_shape(&output_shape)?)
    }

    /// Runs the recipe with the reference kernel (for tests).
    pub fn apply_reference(&self, input: &Tensor, indices: &Tensor) -> Result<Tensor, GatherError> {
        let input = match self.crop_input_to_indices {
            Some(axis) => input.crop(&crop_shape(input.shape(), indices.shape(), axis)?)?,
            None => input.clone(),
        };
        let input_shape = fold_shapes(&self.input, input.shape())?;
        let indices_shape = fold_shapes(&self.indices, indices.shape())?;
        let gathered = reference::gather_multiaxis(
            &input.into_shape(&input_shape)?,
            &indices.clone().into_shape(&indices_shape)?,
            &self.spec,
        )?;
        let output_shape = fold_shapes(&self.output, gathered.shape())?;
        Ok(gathered.into_shape(&output_shape)?)
    }
}

impl fmt::Display for GatherPlan {
    /// One line per step, e.g. `input: Unsqueeze[2]; indices: Unsqueeze[0, 3]; GatherMultiaxis
    /// axes=[1] mode=error; output: Squeeze[1]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ops = |ops: &[ShapeOp]| {
            if ops.is_empty() {
                "-".to_string()
            } else {
                ops.iter()
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        };
        if let Some(axis) = self.crop_input_to_indices {
            writeln!(f, "crop:    input to indices except axis {axis}")?;
        }
        writeln!(f, "input:   {}", ops(&self.input))?;
        writeln!(f, "indices: {}", ops(&self.indices))?;
        writeln!(
            f,
            "gather:  axes={:?} mode={}",
            self.spec.axes,
            self.spec.mode.name()
        )?;
        write!(f, "output:  {}", ops(&self.output))
    }
}

fn fold_ranks(ops: &[ShapeOp], rank: usize) -> Result<usize, GatherError> {
    ops.iter().try_fold(rank, |r, op| op.output_rank(r))
}

fn fold_shapes(ops: &[ShapeOp], shape: &[usize]) -> Result<Vec<usize>, GatherError> {
    ops.iter()
        .try_fold(shape.to_vec(), |s, op| op.apply_to_shape(&s))
}

/// The input shape cropped to the indices on every dimension but `axis`.
fn crop_shape(input: &[usize], indices: &[usize], axis: usize) -> Result<Vec<usize>, GatherError> {
    if input.len() != indices.len() {
        return Err(GatherError::RankMismatch {
            input: input.len(),
            indices: indices.len(),
        });
    }
    if axis >= input.len() {
        return Err(GatherError::AxisOutOfRange {
            axis: axis as i64,
            rank: input.len(),
        });
    }
    (0..input.len())
        .map(|d| {
            if d == axis {
                Ok(input[d])
            } else if indices[d] <= input[d] {
                Ok(indices[d])
            } else {
                Err(GatherError::IndicesLargerThanInput {
                    dim: d,
                    input: input[d],
                    indices: indices[d],
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One shape-operation case: the op, the input shape, the expected shape or error text.
    fn check(op: ShapeOp, shape: &[usize], expect: Result<&[usize], &str>) {
        let got = op.apply_to_shape(shape);
        match (got, expect) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{op} on {shape:?}"),
            (Err(got), Err(want)) => assert_eq!(got.to_string(), want, "{op} on {shape:?}"),
            (got, want) => panic!("{op} on {shape:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn shape_ops_follow_onnx() {
        use ShapeOp::*;
        check(Unsqueeze(vec![0, 3]), &[2, 3], Ok(&[1, 2, 3, 1]));
        check(Unsqueeze(vec![1]), &[], Err("Unsqueeze[1] cannot apply to shape []: rank 0: axes must be ascending, unique and in range"));
        check(Squeeze(vec![0, 2]), &[1, 4, 1], Ok(&[4]));
        check(
            Squeeze(vec![1]),
            &[1, 4, 1],
            Err("Squeeze[1] cannot apply to shape [1, 4, 1]: dimension 1 has size 4, not 1"),
        );
        check(Reshape(vec![0, -1]), &[2, 3, 4], Ok(&[2, 12]));
        check(Reshape(vec![-1]), &[0, 3], Ok(&[0]));
        check(Reshape(vec![-1, 1, 1]), &[2, 3], Ok(&[6, 1, 1]));
        check(
            Reshape(vec![0, -1]),
            &[0, 3],
            Err("Reshape[0, -1] cannot apply to shape [0, 3]: cannot infer the -1 dimension"),
        );
        check(Reshape(vec![-1, -1]), &[2], Err("Reshape[-1, -1] cannot apply to shape [2]: rank 1: needs 0 only where the input has that dimension, at most one -1 and no other negative size"));
    }
}
