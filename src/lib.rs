//! multigather rewrites ONNX models so that one operator, `GatherMultiaxis`, does the work of ONNX
//! `Gather`, `GatherElements` and `GatherND`, and proves each rewrite by running the models.
//!
//! Load a model, run the rewrite pass, save it:
//!
//! ```no_run
//! use multigather::pass::{GatherToMultiaxis, RewriteConfig};
//!
//! let mut model = multigather::io::load("model.onnx")?;
//! let report = GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default())?;
//! eprintln!("{}", report.summary());
//! multigather::io::save(&model, "model.rewritten.onnx")?;
//! # Ok::<(), multigather::Error>(())
//! ```
//!
//! The modules, from the file to the kernel: [`io`] reads and writes files, [`proto`] is the
//! protobuf boundary, [`ir`] the in-memory model, [`text`] its text form, [`infer`] static types,
//! [`pass`] the passes, [`gather`] the operator with its kernels and mappings, [`tensor`] runtime
//! tensors.

pub mod dtype;
pub mod error;
pub mod gather;
pub mod infer;
pub mod interp;
pub mod io;
pub mod ir;
pub mod ops;
pub mod par;
pub mod pass;
pub mod proto;
pub mod tensor;
pub mod text;
pub mod verify;

pub use dtype::DataType;
pub use error::{Error, Result};
pub use tensor::Tensor;
