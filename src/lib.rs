//! multigather
//!
//! Rewrites ONNX models so that one operator, `GatherMultiaxis`, does the work of ONNX `Gather`,
//! `GatherElements` and `GatherND`, and proves each rewrite by running the models.

pub mod dtype;
pub mod error;
pub mod io;
pub mod ir;
pub mod proto;
pub mod text;

pub use dtype::DataType;
pub use error::{Error, Result};
