//! The library's error type.
//!
//! Every fallible public function returns [`Result`]. Messages are one line and name what is
//! wrong: the file, the tensor, the node (by name and op type), the attribute. The binary adds the
//! file being processed and prints the whole chain.

use std::path::PathBuf;

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while loading, rewriting, running or saving a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read, written, renamed or mapped.
    ///
    /// The cause is part of the message (not a separate `source`), so a printed chain reads as
    /// one line without repeating it.
    #[error("{}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The bytes are not a protobuf `ModelProto`.
    #[error("not a valid ONNX model: {0}")]
    Decode(String),
    /// The model decodes but breaks a structural rule of ONNX.
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// A tensor's declared type, dims or payload are inconsistent.
    #[error("tensor '{tensor}': {reason}")]
    InvalidTensor { tensor: String, reason: String },
    /// A tensor's external data reference is unsafe or inconsistent.
    #[error("tensor '{tensor}': external data: {reason}")]
    ExternalData { tensor: String, reason: String },
    /// A node is malformed: wrong arity, missing or mistyped attribute, bad attribute value.
    #[error("node '{node}' ({op}): {reason}")]
    InvalidNode {
        node: String,
        op: String,
        reason: String,
    },
    /// The graph breaks an invariant checked by [`crate::ir::Graph::validate`].
    #[error("graph '{graph}': {reason}")]
    InvalidGraph { graph: String, reason: String },
    /// A construct this version does not handle; the message says what and where.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A configured limit (file size, tensor size, node count, nesting depth) was exceeded.
    #[error("limit exceeded: {0}")]
    Limit(String),
    /// The GatherMultiaxis operator or a gather mapping rejected its operands.
    #[error(transparent)]
    Gather(#[from] crate::gather::GatherError),
    /// A runtime tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] crate::tensor::TensorError),
    /// A kernel rejected its inputs or attributes at run time (shape mismatch, bad value).
    #[error("{0}")]
    Eval(String),
    /// Running a node failed; names the node (quoted, or by its first output when it has no
    /// name) and its operator.
    #[error("node {node} ({op}): {cause}")]
    AtNode {
        node: String,
        op: String,
        /// What went wrong; part of this error's message rather than a separate cause, so the
        /// message reads as one line.
        cause: Box<Error>,
    },
    /// A pass failed; the pass's name is part of the message.
    #[error("pass {pass}: {cause}")]
    Pass {
        pass: &'static str,
        cause: Box<Error>,
    },
    /// A step of proving a rewrite failed (`running the original model`, `drawing random
    /// inputs`); the step is part of the message (see `verify::prove`).
    #[error("{step}: {cause}")]
    Proof { step: String, cause: Box<Error> },
}

impl Error {
    /// Shorthand for [`Error::InvalidNode`].
    pub fn node(node: &str, op: &str, reason: impl Into<String>) -> Error {
        Error::InvalidNode {
            node: node.to_owned(),
            op: op.to_owned(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::InvalidTensor`].
    pub fn tensor(tensor: &str, reason: impl Into<String>) -> Error {
        Error::InvalidTensor {
            tensor: tensor.to_owned(),
            reason: reason.into(),
        }
    }

    /// This error as the cause of a failed step of a proof ([`Error::Proof`]).
    pub fn in_step(self, step: impl Into<String>) -> Error {
        Error::Proof {
            step: step.into(),
            cause: Box::new(self),
        }
    }

    /// Whether this error says the interpreter lacks an operator or construct, directly or as
    /// the cause of a step of a proof: the model may be right, it cannot be run here.
    ///
    /// # Example
    /// ```
    /// use multigather::Error;
    /// let e = Error::Unsupported("operator NoSuchOp".into());
    /// let e = e.in_step("running the original model");
    /// assert!(e.is_unsupported());
    /// assert_eq!(e.to_string(), "running the original model: unsupported: operator NoSuchOp");
    /// assert!(!Error::Eval("bad".into()).in_step("running the rewritten model").is_unsupported());
    /// ```
    pub fn is_unsupported(&self) -> bool {
        match self {
            Error::Unsupported(_) => true,
            Error::Proof { cause, .. } => cause.is_unsupported(),
            _ => false,
        }
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            cause: source,
        }
    }
}
