//! multigather
//!
//! Rewrites ONNX models so that one operator, `GatherMultiaxis`, does the work of ONNX `Gather`,
//! `GatherElements` and `GatherND`, and proves each rewrite by running the models.

pub mod dtype;
pub mod error;
pub mod gather;
pub mod infer;
pub mod io;
pub mod ir;
pub mod pass;
pub mod proto;
pub mod tensor;
pub mod text;

pub use dtype::DataType;
pub use error::{Error, Result};
pub use tensor::Tensor;
