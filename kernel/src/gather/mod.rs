//! `GatherMultiaxis`: one gather operator that does the work of ONNX `Gather`, `GatherElements`
//! and `GatherND` (and of numpy, PyTorch, TensorFlow, OpenVINO, DirectML and CoreML gathers).
//!
//! The operator is specified in `docs/gather-multiaxis.md` (domain `multigather`, since version
//! 1). In short: `input`, `indices` and `output` have the same rank; the coordinates of `axes`
//! are folded into the last dimension of `indices` (so its *logical* shape has the last dimension
//! divided by `max(len(axes), 1)`); every other dimension broadcasts bidirectionally between
//! `input` and the logical indices; each output element reads the input at its own coordinate,
//! with the coordinates of `axes` replaced by the index tuple.
//!
//! This module holds what every user of the operator shares:
//!
//! - [`GatherSpec`] (the attributes) and [`OutOfRange`] (the `mode` attribute);
//! - the shape function [`output_shape`], and [`check_ranks`] / [`output_dim_sources`] for graphs
//!   whose dimensions are symbolic;
//! - [`resolve_index`], the definition of how one index value selects a coordinate;
//! - [`GatherError`], the one error type of the gather code.
//!
//! The kernels live in [`reference`](mod@reference) (the scalar oracle, a transcription of the definition) and
//! [`fast`] (the kernel used in practice, bit-identical to the oracle). [`plan`] and [`map`]
//! express every other gather as a rank-level recipe around one `GatherMultiaxis`.

pub mod fast;
pub mod map;
pub mod plan;
pub mod reference;

use thiserror::Error;

use crate::tensor::{element_count, TensorError};
use crate::{DataType, Tensor};

pub use fast::{gather_multiaxis, gather_multiaxis_with, FastOptions, SimdLevel};
pub use plan::{GatherPlan, ShapeOp};

/// The operator's domain.
pub const DOMAIN: &str = "multigather";
/// The operator's type name.
pub const OP_TYPE: &str = "GatherMultiaxis";
/// The version of [`DOMAIN`] that introduced the operator.
pub const SINCE_VERSION: i64 = 1;

/// How messages name a node: `'NAME'`, or `producing 'OUTPUT'` for a node without a name (by
/// its first output). The interpreter and the onnxruntime library word their errors
/// `node LABEL (OP): REASON` with it, so one node is named alike in both.
///
/// # Example
/// ```
/// use multigather_kernel::gather::node_label;
/// assert_eq!(node_label("pick", Some("y")), "'pick'");
/// assert_eq!(node_label("", Some("y")), "producing 'y'");
/// assert_eq!(node_label("", None), "''");
/// ```
pub fn node_label(name: &str, first_output: Option<&str>) -> String {
    match (name, first_output) {
        ("", Some(out)) => format!("producing '{out}'"),
        (name, _) => format!("'{name}'"),
    }
}

/// What an index outside `[-d, d-1]` does (`d` is the size of its axis): the `mode` attribute.
///
/// In every mode a negative index `-d <= i <= -1` counts from the end (`i + d`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OutOfRange {
    /// `"error"` (the default): the operator fails, naming the first bad index.
    #[default]
    Error,
    /// `"zero"` (OpenVINO Gather-8): the output element is zero (all bits clear, or the empty
    /// string).
    Zero,
    /// `"clamp"` (DirectML): an index below `-d` reads coordinate 0, one above `d-1` reads
    /// `d-1`. An empty axis (`d = 0`) has nothing to clamp to and is an error.
    Clamp,
}

impl OutOfRange {
    /// The attribute value: `"error"`, `"zero"` or `"clamp"`.
    pub fn name(self) -> &'static str {
        match self {
            OutOfRange::Error => "error",
            OutOfRange::Zero => "zero",
            OutOfRange::Clamp => "clamp",
        }
    }

    /// The mode named by an attribute value.
    pub fn from_name(name: &str) -> Result<OutOfRange, GatherError> {
        match name {
            "error" => Ok(OutOfRange::Error),
            "zero" => Ok(OutOfRange::Zero),
            "clamp" => Ok(OutOfRange::Clamp),
            other => Err(GatherError::UnknownMode {
                mode: other.to_string(),
            }),
        }
    }
}

/// The attributes of one `GatherMultiaxis` node, normalised.
///
/// `axes` are non-negative and unique; their order is the order of the coordinates in each index
/// tuple. Use [`GatherSpec::from_attributes`] to normalise the attribute values of a node.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{GatherSpec, OutOfRange};
/// let spec = GatherSpec::from_attributes(&[-1, 0], "zero", 3)?;
/// assert_eq!(spec, GatherSpec::new(vec![2, 0]).with_mode(OutOfRange::Zero));
/// assert_eq!(spec.coordinate_size(), 2);
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GatherSpec {
    /// The input axes the index tuples address, in coordinate order.
    pub axes: Vec<usize>,
    /// What out-of-range indices do.
    pub mode: OutOfRange,
}

impl GatherSpec {
    /// A spec with these axes and the default mode (`error`).
    pub fn new(axes: Vec<usize>) -> GatherSpec {
        GatherSpec {
            axes,
            mode: OutOfRange::Error,
        }
    }

    /// The same spec with another mode.
    pub fn with_mode(mut self, mode: OutOfRange) -> GatherSpec {
        self.mode = mode;
        self
    }

    /// Normalises the attribute values of a node whose tensors have rank `rank`: negative axes
    /// count from the end (`a + rank`), and the result must be in range and unique.
    pub fn from_attributes(
        axes: &[i64],
        mode: &str,
        rank: usize,
    ) -> Result<GatherSpec, GatherError> {
        GatherSpec::normalized(axes, OutOfRange::from_name(mode)?, rank)
    }

    /// [`GatherSpec::from_attributes`] with the mode already parsed.
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::gather::{GatherSpec, OutOfRange};
    /// let spec = GatherSpec::normalized(&[-1, 0], OutOfRange::Clamp, 3)?;
    /// assert_eq!(spec, GatherSpec::new(vec![2, 0]).with_mode(OutOfRange::Clamp));
    /// assert!(GatherSpec::normalized(&[0, -3], OutOfRange::Error, 3).is_err());
    /// # Ok::<(), multigather_kernel::gather::GatherError>(())
    /// ```
    pub fn normalized(
        axes: &[i64],
        mode: OutOfRange,
        rank: usize,
    ) -> Result<GatherSpec, GatherError> {
        let axes = axes
            .iter()
            .map(|&a| normalize_axis(a, rank))
            .collect::<Result<Vec<_>, _>>()?;
        let spec = GatherSpec { axes, mode };
        spec.check_rank(rank)?;
        Ok(spec)
    }

    /// Number of index values per coordinate tuple: `max(len(axes), 1)`.
    pub fn coordinate_size(&self) -> usize {
        self.axes.len().max(1)
    }

    /// Checks that every axis is below `rank` and appears once.
    pub fn check_rank(&self, rank: usize) -> Result<(), GatherError> {
        for (i, &axis) in self.axes.iter().enumerate() {
            if axis >= rank {
                return Err(GatherError::AxisOutOfRange {
                    axis: axis as i64,
                    rank,
                });
            }
            if self.axes[..i].contains(&axis) {
                return Err(GatherError::DuplicateAxis { axis });
            }
        }
        Ok(())
    }
}

/// `axis` normalised for a tensor of rank `rank`: `[-rank, rank)` maps to `[0, rank)`.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, GatherError> {
    let r = rank as i64;
    if (-r..r).contains(&axis) {
        Ok(if axis < 0 { axis + r } else { axis } as usize)
    } else {
        Err(GatherError::AxisOutOfRange { axis, rank })
    }
}

/// One attribute of a `GatherMultiaxis` node as a runtime holds it, for
/// [`MultiaxisAttributes::parse`]: the interpreter reads it from the model, the onnxruntime
/// library from onnxruntime's kernel info.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RawAttr<'a> {
    /// An `ints` attribute.
    Ints(&'a [i64]),
    /// A `string` attribute, as its bytes (which may hold anything, NUL included).
    String(&'a [u8]),
    /// An attribute of another type, by its ONNX text-syntax name (`int`, `floats`, `tensor`, ...).
    Other(&'static str),
}

/// The attributes of a `GatherMultiaxis` node, checked against the operator's schema: `axes`
/// (required, `ints`) as written, and `mode` (`string`, default `"error"`). Every engine that
/// runs the operator parses them here, so that one model means one thing in all of them.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{MultiaxisAttributes, OutOfRange, RawAttr};
/// let attrs = MultiaxisAttributes::parse(Some(RawAttr::Ints(&[0, 1])), Some(RawAttr::String(b"zero")))?;
/// assert_eq!((attrs.axes.as_slice(), attrs.mode), (&[0, 1][..], OutOfRange::Zero));
/// let err = MultiaxisAttributes::parse(Some(RawAttr::Other("int")), None).unwrap_err();
/// assert_eq!(err.to_string(), "attribute 'axes': expected ints, found int");
/// assert!(MultiaxisAttributes::parse(Some(RawAttr::Ints(&[0])), Some(RawAttr::String(b"zero\0junk"))).is_err());
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiaxisAttributes {
    /// The axes as written (negative ones count from the end; see [`GatherSpec::normalized`]).
    pub axes: Vec<i64>,
    pub mode: OutOfRange,
}

impl MultiaxisAttributes {
    /// Checks the attributes as found (`None`: absent).
    pub fn parse(
        axes: Option<RawAttr<'_>>,
        mode: Option<RawAttr<'_>>,
    ) -> Result<MultiaxisAttributes, GatherError> {
        let wrong = |name: &'static str, expected: &str, found: &RawAttr| GatherError::Attribute {
            name,
            reason: format!(
                "expected {expected}, found {}",
                match found {
                    RawAttr::Ints(_) => "ints",
                    RawAttr::String(_) => "string",
                    RawAttr::Other(kind) => kind,
                }
            ),
        };
        let axes = match axes {
            Some(RawAttr::Ints(axes)) => axes.to_vec(),
            Some(other) => return Err(wrong("axes", "ints", &other)),
            None => {
                return Err(GatherError::Attribute {
                    name: "axes",
                    reason: "required but missing".into(),
                })
            }
        };
        let mode = match mode {
            None => OutOfRange::Error,
            Some(RawAttr::String(bytes)) => {
                let text = std::str::from_utf8(bytes).map_err(|_| GatherError::Attribute {
                    name: "mode",
                    reason: "not valid UTF-8".into(),
                })?;
                OutOfRange::from_name(text)?
            }
            Some(other) => return Err(wrong("mode", "string", &other)),
        };
        Ok(MultiaxisAttributes { axes, mode })
    }

    /// The normalised spec for operands of rank `rank`.
    pub fn spec(&self, rank: usize) -> Result<GatherSpec, GatherError> {
        GatherSpec::normalized(&self.axes, self.mode, rank)
    }
}

/// Everything that can go wrong in the gather code: shapes and attributes, index values, and the
/// plans that map other gathers onto `GatherMultiaxis`.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum GatherError {
    /// `input` and `indices` have different ranks.
    #[error("input has rank {input} but indices have rank {indices}; the ranks must be equal")]
    RankMismatch { input: usize, indices: usize },
    /// An axis outside `[-rank, rank)` (or outside `[0, rank)` once normalised).
    #[error("axis {axis} is out of range for rank {rank}")]
    AxisOutOfRange { axis: i64, rank: usize },
    /// The same axis twice in `axes`.
    #[error("axis {axis} appears more than once in axes")]
    DuplicateAxis { axis: usize },
    /// The last indices dimension does not hold a whole number of coordinate tuples.
    #[error(
        "last indices dimension {last} is not a multiple of the coordinate size {coordinate_size}"
    )]
    LastDimNotMultiple { last: usize, coordinate_size: usize },
    /// A non-axis dimension where `input` and the logical indices are neither equal nor 1.
    #[error(
        "dimension {dim} does not broadcast: input has {input}, logical indices have {indices}"
    )]
    NotBroadcastable {
        dim: usize,
        input: usize,
        indices: usize,
    },
    /// An index value outside `[-d, d-1]` in mode `error` (or any index into an empty axis in
    /// mode `clamp`). `position` is its coordinate in the (actual) indices tensor; it is the first
    /// bad index in row-major order.
    #[error("index {value} at indices position {position:?} is out of range for axis {axis} of size {dim}")]
    IndexOutOfRange {
        position: Vec<usize>,
        axis: usize,
        value: i64,
        dim: usize,
    },
    /// Indices that are not `int32` or `int64`.
    #[error("indices must be int32 or int64, not {dtype}")]
    IndicesType { dtype: DataType },
    /// A `mode` attribute that is not `error`, `zero` or `clamp`.
    #[error("unknown mode {mode:?}; expected \"error\", \"zero\" or \"clamp\"")]
    UnknownMode { mode: String },
    /// An attribute of a `GatherMultiaxis` node that is missing, of the wrong type or not text.
    #[error("attribute '{name}': {reason}")]
    Attribute { name: &'static str, reason: String },
    /// An output whose element count overflows.
    #[error("output shape {shape:?} is too large")]
    TooLarge { shape: Vec<usize> },
    /// A tensor could not be built, viewed or reshaped.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// An attribute of a mapped operator that the operator does not allow.
    #[error("{op}: {attr} = {value} is invalid: {reason}")]
    BadAttribute {
        op: &'static str,
        attr: &'static str,
        value: i64,
        reason: String,
    },
    /// A use of a mapped operator that `GatherMultiaxis` cannot express.
    #[error("{op}: {reason}")]
    Unsupported { op: &'static str, reason: String },
    /// A plan's shape operation does not apply to the shape it met.
    #[error("{op} cannot apply to shape {shape:?}: {reason}")]
    ShapeOp {
        op: String,
        shape: Vec<usize>,
        reason: String,
    },
    /// A consistency check of the fast kernel failed; this is a bug, reported instead of
    /// reading out of bounds.
    #[error("internal error in the gather kernel: {reason}")]
    Internal { reason: &'static str },
    /// `GatherElements` indices larger than the input on a non-axis dimension.
    #[error("indices dimension {dim} has size {indices} but the input has only {input}")]
    IndicesLargerThanInput {
        dim: usize,
        input: usize,
        indices: usize,
    },
}

/// Checks what can be checked without sizes: equal ranks and valid, unique axes.
///
/// The rewrite pass uses this on graphs whose dimensions are symbolic.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{check_ranks, GatherSpec, GatherError};
/// assert!(check_ranks(3, 3, &GatherSpec::new(vec![2, 0])).is_ok());
/// assert_eq!(
///     check_ranks(3, 2, &GatherSpec::new(vec![0])),
///     Err(GatherError::RankMismatch { input: 3, indices: 2 })
/// );
/// ```
pub fn check_ranks(
    input_rank: usize,
    indices_rank: usize,
    spec: &GatherSpec,
) -> Result<(), GatherError> {
    if input_rank != indices_rank {
        return Err(GatherError::RankMismatch {
            input: input_rank,
            indices: indices_rank,
        });
    }
    spec.check_rank(input_rank)
}

/// Where one output dimension comes from, for shape inference over symbolic dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimSource {
    /// Dimension `d` of the logical indices shape (an axis).
    Indices(usize),
    /// The broadcast of dimension `d` of the input and of the logical indices: equal, or one of
    /// them is 1 and the other wins.
    Broadcast(usize),
}

/// For each output dimension, where its size comes from; the logical indices shape is the actual
/// one with the last dimension divided by [`GatherSpec::coordinate_size`].
///
/// # Example
/// ```
/// use multigather_kernel::gather::{output_dim_sources, DimSource, GatherSpec};
/// let sources = output_dim_sources(3, 3, &GatherSpec::new(vec![1]))?;
/// assert_eq!(sources, [DimSource::Broadcast(0), DimSource::Indices(1), DimSource::Broadcast(2)]);
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
pub fn output_dim_sources(
    input_rank: usize,
    indices_rank: usize,
    spec: &GatherSpec,
) -> Result<Vec<DimSource>, GatherError> {
    check_ranks(input_rank, indices_rank, spec)?;
    Ok((0..input_rank)
        .map(|d| {
            if spec.axes.contains(&d) {
                DimSource::Indices(d)
            } else {
                DimSource::Broadcast(d)
            }
        })
        .collect())
}

/// The logical indices shape: the actual shape with the last dimension divided by the
/// coordinate size, which must divide it exactly.
pub fn logical_indices_shape(
    indices: &[usize],
    spec: &GatherSpec,
) -> Result<Vec<usize>, GatherError> {
    let c = spec.coordinate_size();
    let mut logical = indices.to_vec();
    if let Some(last) = logical.last_mut() {
        if *last % c != 0 {
            return Err(GatherError::LastDimNotMultiple {
                last: *last,
                coordinate_size: c,
            });
        }
        *last /= c;
    }
    Ok(logical)
}

/// The output shape of `GatherMultiaxis` for these input and indices shapes.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{output_shape, GatherSpec};
/// // The proposal's example: axis 1 comes from the indices, the rest broadcasts.
/// let spec = GatherSpec::new(vec![1]);
/// assert_eq!(output_shape(&[4, 2, 1, 2], &[1, 3, 2, 2], &spec)?, [4, 3, 2, 2]);
/// // Two axes: the coordinate pairs are folded into the last dimension (6 * 2).
/// let spec = GatherSpec::new(vec![1, 2]);
/// assert_eq!(output_shape(&[10, 9, 8], &[1, 5, 12], &spec)?, [10, 5, 6]);
/// # Ok::<(), multigather_kernel::gather::GatherError>(())
/// ```
pub fn output_shape(
    input: &[usize],
    indices: &[usize],
    spec: &GatherSpec,
) -> Result<Vec<usize>, GatherError> {
    check_ranks(input.len(), indices.len(), spec)?;
    let logical = logical_indices_shape(indices, spec)?;
    let shape = (0..input.len())
        .map(|d| {
            let (i, x) = (input[d], logical[d]);
            if spec.axes.contains(&d) || i == x || i == 1 {
                Ok(x)
            } else if x == 1 {
                Ok(i)
            } else {
                Err(GatherError::NotBroadcastable {
                    dim: d,
                    input: i,
                    indices: x,
                })
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if element_count(&shape).is_none() {
        return Err(GatherError::TooLarge { shape });
    }
    Ok(shape)
}

/// What one index value selects on an axis of size `dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Coordinate `i`, with `i < dim`.
    At(usize),
    /// Nothing: the output element is zero (mode `zero`).
    Zero,
    /// The index is an error (mode `error`, or mode `clamp` on an empty axis).
    OutOfRange,
}

/// The definition of one index lookup: `-d <= value <= -1` counts from the end, then the mode
/// decides what happens outside `[0, d-1]`.
///
/// # Example
/// ```
/// use multigather_kernel::gather::{resolve_index, OutOfRange, Resolved};
/// assert_eq!(resolve_index(-1, 5, OutOfRange::Error), Resolved::At(4));
/// assert_eq!(resolve_index(5, 5, OutOfRange::Error), Resolved::OutOfRange);
/// assert_eq!(resolve_index(-20, 5, OutOfRange::Zero), Resolved::Zero);
/// assert_eq!(resolve_index(-20, 5, OutOfRange::Clamp), Resolved::At(0));
/// assert_eq!(resolve_index(9, 5, OutOfRange::Clamp), Resolved::At(4));
/// assert_eq!(resolve_index(0, 0, OutOfRange::Clamp), Resolved::OutOfRange);
/// ```
pub fn resolve_index(value: i64, dim: usize, mode: OutOfRange) -> Resolved {
    let d = dim as i128;
    let v = i128::from(value);
    let wrapped = if v < 0 { v + d } else { v };
    if (0..d).contains(&wrapped) {
        return Resolved::At(wrapped as usize);
    }
    match mode {
        OutOfRange::Error => Resolved::OutOfRange,
        OutOfRange::Zero => Resolved::Zero,
        OutOfRange::Clamp if dim == 0 => Resolved::OutOfRange,
        OutOfRange::Clamp => Resolved::At(if wrapped < 0 { 0 } else { dim - 1 }),
    }
}

/// Checks the tensor-level constraints: index element type, and (through [`output_shape`]) ranks,
/// axes and shapes. Returns the output shape.
pub(crate) fn check_operands(
    input_shape: &[usize],
    indices: &Tensor,
    indices_shape: &[usize],
    spec: &GatherSpec,
) -> Result<Vec<usize>, GatherError> {
    if !indices.dtype().is_index() {
        return Err(GatherError::IndicesType {
            dtype: indices.dtype(),
        });
    }
    output_shape(input_shape, indices_shape, spec)
}

/// Row-major coordinate of flat position `flat` in `shape`.
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut coord = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            coord[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    coord
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One shape-function case: input shape, indices shape, axes, expected output shape or error.
    fn check(
        input: &[usize],
        indices: &[usize],
        axes: &[usize],
        expect: Result<&[usize], GatherError>,
    ) {
        let got = output_shape(input, indices, &GatherSpec::new(axes.to_vec()));
        assert_eq!(
            got.as_deref().map_err(|e| e.clone()),
            expect,
            "{input:?} {indices:?} {axes:?}"
        );
    }

    #[test]
    fn shape_rule() {
        // The proposal's examples.
        check(&[4, 2, 1, 2], &[1, 3, 2, 2], &[1], Ok(&[4, 3, 2, 2]));
        check(&[2, 3, 1], &[1, 1, 4], &[1], Ok(&[2, 1, 4]));
        check(&[10, 9, 8], &[1, 5, 12], &[1, 2], Ok(&[10, 5, 6]));
        // Rank 0, empty axes, zero-sized dimensions.
        check(&[], &[], &[], Ok(&[]));
        check(&[3, 1], &[1, 4], &[], Ok(&[3, 4]));
        check(&[0, 3], &[1, 2], &[1], Ok(&[0, 2]));
        check(&[1, 3], &[0, 2], &[1], Ok(&[0, 2]));
        check(&[4, 0], &[4, 3], &[1], Ok(&[4, 3]));
        check(&[4, 5], &[4, 0], &[0, 1], Ok(&[4, 0]));
        // Errors.
        check(
            &[2, 3],
            &[3],
            &[0],
            Err(GatherError::RankMismatch {
                input: 2,
                indices: 1,
            }),
        );
        check(
            &[2, 3],
            &[3, 1],
            &[2],
            Err(GatherError::AxisOutOfRange { axis: 2, rank: 2 }),
        );
        check(
            &[2, 3],
            &[3, 2],
            &[1, 1],
            Err(GatherError::DuplicateAxis { axis: 1 }),
        );
        check(
            &[2, 3],
            &[3, 3],
            &[0, 1],
            Err(GatherError::LastDimNotMultiple {
                last: 3,
                coordinate_size: 2,
            }),
        );
        // The proposal's "first wins" for [2,1] with [3,4] is rejected.
        check(
            &[2, 1],
            &[3, 4],
            &[],
            Err(GatherError::NotBroadcastable {
                dim: 0,
                input: 2,
                indices: 3,
            }),
        );
        check(
            &[0, 3],
            &[2, 1],
            &[1],
            Err(GatherError::NotBroadcastable {
                dim: 0,
                input: 0,
                indices: 2,
            }),
        );
        check(
            &[usize::MAX, 1],
            &[1, 3],
            &[],
            Err(GatherError::TooLarge {
                shape: vec![usize::MAX, 3],
            }),
        );
    }

    #[test]
    fn attributes_normalise() {
        let spec = GatherSpec::from_attributes(&[-3, 2], "clamp", 3).unwrap();
        assert_eq!(
            spec,
            GatherSpec::new(vec![0, 2]).with_mode(OutOfRange::Clamp)
        );
        assert_eq!(
            GatherSpec::from_attributes(&[-4], "error", 3),
            Err(GatherError::AxisOutOfRange { axis: -4, rank: 3 })
        );
        assert_eq!(
            GatherSpec::from_attributes(&[-1, 2], "error", 3),
            Err(GatherError::DuplicateAxis { axis: 2 })
        );
        assert_eq!(
            GatherSpec::from_attributes(&[], "wrap", 3)
                .unwrap_err()
                .to_string(),
            "unknown mode \"wrap\"; expected \"error\", \"zero\" or \"clamp\""
        );
    }

    #[test]
    fn index_resolution_edges() {
        use OutOfRange::*;
        let cases: &[(i64, usize, OutOfRange, Resolved)] = &[
            (0, 1, Error, Resolved::At(0)),
            (-1, 1, Error, Resolved::At(0)),
            (-2, 1, Error, Resolved::OutOfRange),
            (1, 1, Zero, Resolved::Zero),
            (i64::MIN, 3, Clamp, Resolved::At(0)),
            (i64::MAX, 3, Clamp, Resolved::At(2)),
            (-4, 3, Clamp, Resolved::At(0)),
            (-3, 3, Clamp, Resolved::At(0)),
            (0, 0, Zero, Resolved::Zero),
            (0, 0, Error, Resolved::OutOfRange),
            (-1, 0, Clamp, Resolved::OutOfRange),
        ];
        for &(value, dim, mode, expect) in cases {
            assert_eq!(
                resolve_index(value, dim, mode),
                expect,
                "{value} {dim} {mode:?}"
            );
        }
    }
}
