//! multigather
//!
//! Rewrites ONNX models so that one operator, `GatherMultiaxis`, does the work of ONNX `Gather`,
//! `GatherElements` and `GatherND`, and proves each rewrite by running the models.

pub mod dtype;
pub mod gather;
pub mod tensor;

pub use dtype::DataType;
pub use tensor::Tensor;
