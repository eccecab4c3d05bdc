//! The `GatherMultiaxis` operator of multigather and what it stands on, without the model
//! machinery: element types ([`dtype`]), runtime tensors and their memory budget ([`tensor`]),
//! how kernels share threads ([`par`]), and the operator itself ([`gather`]: the shape rule, the
//! scalar reference kernel, the fast kernel, and the mappings of every other gather family).
//!
//! A host that only runs the operator (the onnxruntime custom-op library, say) depends on this
//! crate alone: no protobuf, no graph, no interpreter. The `multigather` crate re-exports these
//! modules at its root under the same names.
//!
//! # Example
//! ```
//! use multigather_kernel::gather::{gather_multiaxis, GatherSpec};
//! use multigather_kernel::{DataType, Tensor};
//!
//! // Gather along axis 1 of a 2 x 3 matrix: each row picks its own column.
//! let input = Tensor::from_vec(DataType::Int32, &[2, 3], vec![1i32, 2, 3, 4, 5, 6])?;
//! let indices = Tensor::from_vec(DataType::Int64, &[2, 1], vec![2i64, 0])?;
//! let spec = GatherSpec::new(vec![1]);
//! let out = gather_multiaxis(&input, &indices, &spec)?;
//! assert_eq!(out.as_slice::<i32>()?, &[3, 4]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod dtype;
pub mod gather;
pub mod par;
pub mod tensor;

pub use dtype::DataType;
pub use tensor::Tensor;
