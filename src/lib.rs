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
//! tensors (these two, with [`dtype`] and [`par`], from the `multigather-kernel` crate).

pub mod error;
pub mod infer;
pub mod interp;
pub mod io;
pub mod ir;
pub mod ops;
pub mod pass;
pub mod proto;
pub mod text;
pub mod verify;

// The lowest layers live in the `multigather-kernel` crate, which hosts that run only the
// operator depend on alone; they keep their paths here.
pub use multigather_kernel::{dtype, gather, par, tensor};

pub use dtype::DataType;
pub use error::{Error, Result};
pub use tensor::Tensor;
