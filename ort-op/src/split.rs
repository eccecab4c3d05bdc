//! One call cut into independent tasks along output dimension 0, so onnxruntime's intra-op
//! thread pool runs them (`KernelContext_ParallelFor`) and the kernel never starts threads of
//! its own.
//!
//! Output rows `a..b` (dimension 0) read only input rows `a..b` when dimension 0 is not an axis
//! and the input is not broadcast there, else the whole input; and only rows `a..b` of the
//! logical indices when they are not broadcast there, else all of them. Row ranges of row-major
//! tensors are contiguous, so each task is one `GatherMultiaxis` on sub-slices, run serially by
//! the fast kernel. Packed sub-byte types are not cut (a row may end inside a byte).
//!
//! The first bad index of the whole call is the first bad index of the first task that fails,
//! with its position moved by the task's first row when the indices were cut.

use std::mem::MaybeUninit;
use std::ops::Range;

use multigather::gather::fast::{gather_multiaxis_into, FastOptions, Indices, RawTensor};
use multigather::gather::{GatherError, GatherSpec};
use multigather::DataType;

/// Each task writes at least this many output bytes.
pub const GRAIN_BYTES: usize = 256 * 1024;
/// At most this many tasks per call.
pub const MAX_TASKS: usize = 256;

/// How one call is cut into tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// Number of tasks (1: the call runs whole).
    pub tasks: usize,
    /// Output rows (size of output dimension 0).
    rows: usize,
    /// Input elements per row, when each task reads its own input rows.
    input_row: Option<usize>,
    /// Index values per output row, when each task reads its own indices rows.
    indices_row: Option<usize>,
    /// Output bytes per row.
    out_row_bytes: usize,
}

impl Split {
    /// The split of a call with these (valid) shapes and spec, for elements of `dtype`.
    ///
    /// # Example
    /// ```
    /// use multigather::gather::GatherSpec;
    /// use multigather::DataType;
    /// use multigather_ort::split::Split;
    /// // An embedding lookup of 8 x 512 rows of 768 floats: 12 MiB of output, 8 tasks.
    /// let spec = GatherSpec::new(vec![0]);
    /// let split = Split::plan(DataType::Float, &[30522, 1, 768], &[8, 512, 1], &spec, &[8, 512, 768]);
    /// assert_eq!(split.tasks, 8);
    /// ```
    pub fn plan(
        dtype: DataType,
        input: &[usize],
        indices: &[usize],
        spec: &GatherSpec,
        output: &[usize],
    ) -> Split {
        let whole = Split {
            tasks: 1,
            rows: output.first().copied().unwrap_or(1),
            input_row: None,
            indices_row: None,
            out_row_bytes: 0,
        };
        let Some(element_bytes) = dtype.byte_size() else {
            return whole;
        };
        let (Some(&rows), Some(&input_rows)) = (output.first(), input.first()) else {
            return whole;
        };
        let out_row: usize = output[1..].iter().product();
        let out_row_bytes = out_row * element_bytes;
        let total = rows * out_row_bytes;
        let tasks = (total / GRAIN_BYTES).min(rows).min(MAX_TASKS);
        if tasks < 2 {
            return whole;
        }
        let c = spec.coordinate_size();
        let input_row = (!spec.axes.contains(&0) && input_rows != 1)
            .then(|| input[1..].iter().product::<usize>());
        let logical_rows = if indices.len() == 1 {
            indices[0] / c
        } else {
            indices[0]
        };
        let indices_row = (logical_rows != 1).then(|| {
            if indices.len() == 1 {
                c
            } else {
                indices[1..].iter().product()
            }
        });
        Split {
            tasks,
            rows,
            input_row,
            indices_row,
            out_row_bytes,
        }
    }

    /// The output rows of task `k`.
    pub fn rows(&self, k: usize) -> Range<usize> {
        self.rows * k / self.tasks..self.rows * (k + 1) / self.tasks
    }

    /// The output bytes task `k` writes (disjoint between tasks, covering the output).
    pub fn out_bytes(&self, k: usize) -> Range<usize> {
        let r = self.rows(k);
        r.start * self.out_row_bytes..r.end * self.out_row_bytes
    }

    /// Runs task `k` serially: `out` is the output's `out_bytes(k)`. A bad index is reported with
    /// its position in the whole indices tensor.
    pub fn run(
        &self,
        k: usize,
        input: RawTensor<'_>,
        indices: Indices<'_>,
        indices_shape: &[usize],
        spec: &GatherSpec,
        out: &mut [MaybeUninit<u8>],
    ) -> Result<(), GatherError> {
        let options = FastOptions::serial();
        if self.tasks == 1 {
            return gather_multiaxis_into(input, indices, indices_shape, spec, &options, out);
        }
        let rows = self.rows(k);
        let n = rows.len();
        let element_bytes = input.dtype.byte_size().unwrap_or(1);
        let mut input_shape = input.shape.to_vec();
        let mut input = input;
        if let Some(r) = self.input_row {
            input_shape[0] = n;
            input.bytes =
                &input.bytes[rows.start * r * element_bytes..rows.end * r * element_bytes];
        }
        input.shape = &input_shape;
        let mut shape = indices_shape.to_vec();
        let mut indices = indices;
        let mut moved = 0;
        if let Some(r) = self.indices_row {
            let values = rows.start * r..rows.end * r;
            indices = match indices {
                Indices::I32(v) => Indices::I32(&v[values]),
                Indices::I64(v) => Indices::I64(&v[values]),
            };
            // Rank 1: the rows are tuples of the only dimension.
            let per_row = if shape.len() == 1 { r } else { 1 };
            shape[0] = n * per_row;
            moved = rows.start * per_row;
        }
        gather_multiaxis_into(input, indices, &shape, spec, &options, out).map_err(|e| match e {
            GatherError::IndexOutOfRange {
                mut position,
                axis,
                value,
                dim,
            } => {
                if let Some(p) = position.first_mut() {
                    *p += moved;
                }
                GatherError::IndexOutOfRange {
                    position,
                    axis,
                    value,
                    dim,
                }
            }
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    //! Every split runs task by task and must give the bytes (or the error) of the whole call.

    use super::*;
    use multigather::gather::{gather_multiaxis_with, output_shape, OutOfRange};
    use multigather::Tensor;

    fn floats(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        Tensor::from_vec(DataType::Uint32, shape, v).unwrap()
    }

    fn index_values(shape: &[usize], bound: i64, bad_at: Option<usize>) -> Vec<i64> {
        let n: usize = shape.iter().product();
        (0..n as i64)
            .map(|i| {
                if Some(i as usize) == bad_at {
                    bound + 3
                } else {
                    (i * 7919) % (2 * bound) - bound
                }
            })
            .collect()
    }

    /// Runs the split of one call task by task and compares with the whole call.
    fn check(
        input_shape: &[usize],
        indices_shape: &[usize],
        axes: &[usize],
        bad_at: Option<usize>,
    ) {
        let input = floats(input_shape);
        let bound = axes.first().map_or(1, |&a| input_shape[a] as i64);
        let values = index_values(indices_shape, bound, bad_at);
        let indices = Tensor::from_vec(DataType::Int64, indices_shape, values.clone()).unwrap();
        for mode in [OutOfRange::Error, OutOfRange::Zero] {
            let spec = GatherSpec::new(axes.to_vec()).with_mode(mode);
            let want = gather_multiaxis_with(&input, &indices, &spec, &FastOptions::serial());
            let out_shape = output_shape(input_shape, indices_shape, &spec).unwrap();
            let split = Split::plan(
                DataType::Uint32,
                input_shape,
                indices_shape,
                &spec,
                &out_shape,
            );
            assert!(
                split.tasks > 1,
                "{input_shape:?} {indices_shape:?} is not split"
            );
            let n: usize = out_shape.iter().product();
            let mut out = vec![MaybeUninit::<u32>::uninit(); n];
            // SAFETY: same layout; the tasks write every byte before it is read.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<MaybeUninit<u8>>(), n * 4)
            };
            let raw = RawTensor {
                dtype: DataType::Uint32,
                bytes: input.as_bytes().unwrap(),
                shape: input_shape,
            };
            let mut got = Ok(());
            for k in 0..split.tasks {
                let part = &mut bytes[split.out_bytes(k)];
                let r = split.run(k, raw, Indices::I64(&values), indices_shape, &spec, part);
                if got.is_ok() {
                    got = r;
                }
            }
            match want {
                Ok(t) => {
                    assert_eq!(got, Ok(()));
                    // SAFETY: every task succeeded, so every element was written.
                    let out: Vec<u32> = out.iter().map(|x| unsafe { x.assume_init() }).collect();
                    assert_eq!(out, t.to_vec::<u32>().unwrap(), "{input_shape:?} {mode:?}");
                }
                Err(e) => assert_eq!(got, Err(e), "{input_shape:?} {mode:?}"),
            }
        }
    }

    #[test]
    fn embedding_rows_split_by_indices() {
        // Dimension 0 is the axis: every task reads the whole input and its own index rows.
        check(&[3000, 1, 256], &[8, 64, 1], &[0], None);
        check(&[3000, 1, 256], &[8, 64, 1], &[0], Some(5 * 64 + 7));
    }

    #[test]
    fn element_gathers_split_both_operands() {
        check(&[512, 1024], &[512, 256], &[1], None);
        check(&[512, 1024], &[512, 256], &[1], Some(300 * 256 + 1));
    }

    #[test]
    fn broadcast_indices_are_shared_by_every_task() {
        // A last-axis Gather: one row of indices for every input row.
        check(&[512, 4096], &[1, 512], &[1], None);
        check(&[512, 4096], &[1, 512], &[1], Some(400));
    }

    #[test]
    fn rank_one_point_tuples_split_by_tuples() {
        // Rank 1, two coordinates per tuple is impossible (axes must be distinct), so one axis:
        // a flat take of 200k values.
        check(&[70_000], &[200_000], &[0], None);
        check(&[70_000], &[200_000], &[0], Some(150_001));
    }

    #[test]
    fn small_calls_and_packed_types_run_whole() {
        let spec = GatherSpec::new(vec![1]);
        assert_eq!(
            Split::plan(DataType::Float, &[4, 8], &[4, 2], &spec, &[4, 2]).tasks,
            1
        );
        assert_eq!(
            Split::plan(
                DataType::Int4,
                &[4096, 4096],
                &[4096, 512],
                &spec,
                &[4096, 512]
            )
            .tasks,
            1
        );
        assert_eq!(
            Split::plan(DataType::Float, &[], &[], &GatherSpec::new(vec![]), &[]).tasks,
            1
        );
    }
}
