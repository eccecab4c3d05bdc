//! The gather family: ONNX `Gather` (opsets 1, 11, 13), `GatherElements` (11, 13), `GatherND`
//! (11, 12, 13) and `multigather.GatherMultiaxis`.
//!
//! Specs: <https://onnx.ai/onnx/operators/onnx__Gather.html>,
//! <https://onnx.ai/onnx/operators/onnx__GatherElements.html>,
//! <https://onnx.ai/onnx/operators/onnx__GatherND.html>, and `docs/gather-multiaxis.md`.
//!
//! This module is the one home of what the crate knows of the family at the node level:
//! [`GatherKind`] (which node is which gather, [`is_multiaxis`]), [`GatherAttributes`] (the
//! typed attributes, whose parse is the schema error every user gives) and
//! [`GatherKind::check_schema`] (the operator's schema, whatever the operands). The rewrite, the
//! lowering, the loader's checks, `verify`'s input draws and the interpreter all read nodes
//! through it; the kernel crate's [`gather::MultiaxisAttributes`] is the part the onnxruntime
//! library shares.
//!
//! The kernels: `onnx.rs` for the three ONNX gathers, `multiaxis.rs` for `GatherMultiaxis` (the
//! kernel crate's fast kernel) and its dim rule over symbolic dims.
//!
//! Design note: the three ONNX gathers are written directly from their ONNX definitions, as
//! block copies, and do **not** go through `GatherMultiaxis` or its mappings. Verifying a rewrite
//! compares the original model (these kernels) with the rewritten one (the `GatherMultiaxis`
//! kernel), so the two sides must not share the code under test. Negative indices count from the
//! end in every opset (opset 1 left them undefined; every runtime wraps them).

mod multiaxis;
mod onnx;

use serde::Serialize;

use super::{prepare, Attributes, OpDef};
use crate::error::{Error, Result};
use crate::gather;
use crate::ir::{is_onnx_domain, AttrValue, Node};

pub use multiaxis::{gather_multiaxis_dims, logical_indices_dims};

pub(super) const DEFS: &[OpDef] = &[
    GatherKind::Gather
        .def(onnx::eval_gather)
        .with_infer(onnx::infer_gather),
    GatherKind::GatherElements
        .def(onnx::eval_gather_elements)
        .with_infer(onnx::infer_gather_elements),
    GatherKind::GatherNd
        .def(onnx::eval_gather_nd)
        .with_infer(onnx::infer_gather_nd),
    GatherKind::Multiaxis
        .def(multiaxis::eval)
        .with_infer(multiaxis::infer),
];

/// The gather family: the three ONNX gathers and `multigather.GatherMultiaxis`, each known by
/// its domain and op type.
///
/// # Example
/// ```
/// use multigather::ir::Node;
/// use multigather::ops::GatherKind;
/// let nd = Node::new("GatherND", "g", ["x", "i"], ["y"]);
/// assert_eq!(GatherKind::of(&nd), Some(GatherKind::GatherNd));
/// let m = Node::new("GatherMultiaxis", "m", ["x", "i"], ["y"]).with_domain("multigather");
/// assert_eq!(GatherKind::of(&m), Some(GatherKind::Multiaxis));
/// // The op type alone does not make a gather: the domain must be the operator's.
/// assert_eq!(GatherKind::of(&Node::new("GatherMultiaxis", "m", ["x", "i"], ["y"])), None);
/// assert_eq!(GatherKind::from_name("GatherElements"), Some(GatherKind::GatherElements));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum GatherKind {
    Gather,
    GatherElements,
    #[serde(rename = "GatherND")]
    GatherNd,
    /// `multigather.GatherMultiaxis`, which the rewrite emits.
    #[serde(rename = "GatherMultiaxis")]
    Multiaxis,
}

impl GatherKind {
    /// The three ONNX gathers, which the rewrite replaces.
    pub const ONNX: [GatherKind; 3] = [
        GatherKind::Gather,
        GatherKind::GatherElements,
        GatherKind::GatherNd,
    ];

    /// Whether this is one of the three ONNX gathers (not `GatherMultiaxis`).
    pub fn is_onnx(self) -> bool {
        self != GatherKind::Multiaxis
    }

    /// The kind of a node, if it is a gather: one of the ONNX gathers in the default domain, or
    /// `GatherMultiaxis` in [`gather::DOMAIN`].
    pub fn of(node: &Node) -> Option<GatherKind> {
        if is_multiaxis(&node.domain, &node.op_type) {
            Some(GatherKind::Multiaxis)
        } else if is_onnx_domain(&node.domain) {
            GatherKind::from_name(&node.op_type)
        } else {
            None
        }
    }

    /// The ONNX gather named by an op type of the default domain (`Gather`, `GatherElements`,
    /// `GatherND`); `GatherMultiaxis` lives in another domain and is found by [`GatherKind::of`].
    pub fn from_name(name: &str) -> Option<GatherKind> {
        match name {
            "Gather" => Some(GatherKind::Gather),
            "GatherElements" => Some(GatherKind::GatherElements),
            "GatherND" => Some(GatherKind::GatherNd),
            _ => None,
        }
    }

    /// The op type.
    pub const fn name(self) -> &'static str {
        match self {
            GatherKind::Gather => "Gather",
            GatherKind::GatherElements => "GatherElements",
            GatherKind::GatherNd => "GatherND",
            GatherKind::Multiaxis => gather::OP_TYPE,
        }
    }

    /// The domain: `""` for the ONNX gathers, [`gather::DOMAIN`] for `GatherMultiaxis`.
    pub const fn domain(self) -> &'static str {
        match self {
            GatherKind::Multiaxis => gather::DOMAIN,
            _ => "",
        }
    }

    /// The opset version of [`GatherKind::domain`] that introduced the operator.
    pub const fn since(self) -> i64 {
        match self {
            GatherKind::Gather => 1,
            GatherKind::GatherElements | GatherKind::GatherNd => 11,
            GatherKind::Multiaxis => gather::SINCE_VERSION,
        }
    }

    /// The attributes the operator defines at `opset`.
    pub fn attribute_names(self, opset: i64) -> &'static [&'static str] {
        match self {
            GatherKind::Gather | GatherKind::GatherElements => &["axis"],
            GatherKind::GatherNd if opset >= 12 => &["batch_dims"],
            GatherKind::GatherNd => &[],
            GatherKind::Multiaxis => &["axes", "mode"],
        }
    }

    /// The operator's definition, with its typed attributes prepared at planning.
    const fn def(self, eval: super::EvalFn) -> OpDef {
        OpDef::new(self.name(), self.since(), 2..=2, 1..=1, eval)
            .with_prepare(prepare::<GatherAttributes>)
            .in_domain(self.domain())
    }

    /// The typed attributes of `node`, a node of this kind. The error is the one the node's
    /// operator gives for them: `node 'NAME' (OP): attribute 'A': REASON`.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::{AttrValue, Node};
    /// use multigather::ops::{GatherAttributes, GatherKind};
    /// let g = Node::new("Gather", "g", ["x", "i"], ["y"]).with_attr("axis", AttrValue::Int(-1));
    /// assert_eq!(GatherKind::Gather.attributes(&g)?, GatherAttributes::Gather { axis: -1 });
    /// let bad = Node::new("GatherND", "n", ["x", "i"], ["y"]).with_attr("batch_dims", AttrValue::Float(1.0));
    /// let err = GatherKind::GatherNd.attributes(&bad).unwrap_err();
    /// assert_eq!(err.to_string(), "node 'n' (GatherND): attribute 'batch_dims': expected int, found float");
    /// # Ok::<(), multigather::Error>(())
    /// ```
    pub fn attributes(self, node: &Node) -> Result<GatherAttributes> {
        Ok(match self {
            GatherKind::Gather => GatherAttributes::Gather {
                axis: node.attr_int("axis", 0)?,
            },
            GatherKind::GatherElements => GatherAttributes::GatherElements {
                axis: node.attr_int("axis", 0)?,
            },
            GatherKind::GatherNd => GatherAttributes::GatherNd {
                batch_dims: node.attr_int("batch_dims", 0)?,
            },
            GatherKind::Multiaxis => GatherAttributes::Multiaxis(
                multiaxis_attributes(node)
                    .map_err(|e| Error::node(&node.name, &node.op_type, e.to_string()))?,
            ),
        })
    }

    /// Checks what the operator's schema says about a node of this kind regardless of its
    /// operands' types: the operator exists at `opset` (the version of its domain), takes two
    /// inputs and gives one output, and has only the attributes it defines, of the right type.
    /// Returns the node's attributes.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::{AttrValue, Node};
    /// use multigather::ops::{GatherAttributes, GatherKind, SchemaError};
    /// let nd = Node::new("GatherND", "n", ["x", "i"], ["y"]).with_attr("batch_dims", AttrValue::Int(1));
    /// assert_eq!(GatherKind::GatherNd.check_schema(&nd, 12), Ok(GatherAttributes::GatherNd { batch_dims: 1 }));
    /// assert_eq!(
    ///     GatherKind::GatherNd.check_schema(&nd, 11),
    ///     Err(SchemaError::Invalid("attribute 'batch_dims' is not defined for GatherND in opset 11".into()))
    /// );
    /// ```
    pub fn check_schema(
        self,
        node: &Node,
        opset: i64,
    ) -> std::result::Result<GatherAttributes, SchemaError> {
        use SchemaError::{BoundByCall, Invalid};
        let since = self.since();
        if opset < since {
            return Err(Invalid(format!(
                "{} does not exist in opset {opset} (it arrived in opset {since})",
                self.name()
            )));
        }
        match node.inputs.as_slice() {
            [d, i] if !d.is_empty() && !i.is_empty() => {}
            _ => {
                return Err(Invalid(format!(
                    "takes 2 inputs, found {}",
                    node.inputs.iter().filter(|i| !i.is_empty()).count()
                )))
            }
        }
        match node.outputs.as_slice() {
            [o] if !o.is_empty() => {}
            _ => {
                return Err(Invalid(format!(
                    "has 1 output, found {}",
                    node.outputs.len()
                )))
            }
        }
        let allowed = self.attribute_names(opset);
        for a in &node.attributes {
            if !allowed.contains(&a.name.as_str()) {
                return Err(Invalid(format!(
                    "attribute '{}' is not defined for {} in opset {opset}",
                    a.name,
                    self.name()
                )));
            }
            match &a.value {
                AttrValue::Ref { name, .. } => {
                    return Err(BoundByCall(format!(
                        "its attribute '{}' refers to the function attribute '{name}', which each \
                         call site binds",
                        a.name
                    )))
                }
                AttrValue::Int(_) => {}
                _ if self == GatherKind::Multiaxis => {}
                other => {
                    return Err(Invalid(format!(
                        "attribute '{}' must be an int, found {}",
                        a.name,
                        other.type_name()
                    )))
                }
            }
        }
        match self {
            GatherKind::Multiaxis => multiaxis_attributes(node)
                .map(GatherAttributes::Multiaxis)
                .map_err(|e| Invalid(e.to_string())),
            _ => self.attributes(node).map_err(|e| Invalid(e.to_string())),
        }
    }
}

/// Whether a domain and an op type (or a function's name) name `multigather.GatherMultiaxis`:
/// the one test of "is this node the operator".
///
/// # Example
/// ```
/// assert!(multigather::ops::is_multiaxis("multigather", "GatherMultiaxis"));
/// assert!(!multigather::ops::is_multiaxis("", "GatherMultiaxis"));
/// ```
pub fn is_multiaxis(domain: &str, op_type: &str) -> bool {
    domain == gather::DOMAIN && op_type == gather::OP_TYPE
}

/// Why [`GatherKind::check_schema`] refuses a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaError {
    /// The operator's schema forbids the node (an opset, an arity, an attribute): the reason.
    Invalid(String),
    /// An attribute refers to a function attribute, which each call site binds: the node is
    /// what its calls make it, and cannot be judged alone.
    BoundByCall(String),
}

/// The attributes of a gather node, typed: what [`GatherKind::attributes`] parses.
///
/// Values are as written: axes are normalised where the rank is known, and a negative
/// `batch_dims` is refused by whoever needs it not to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GatherAttributes {
    /// `Gather`: `axis`, 0 when absent.
    Gather { axis: i64 },
    /// `GatherElements`: `axis`, 0 when absent.
    GatherElements { axis: i64 },
    /// `GatherND`: `batch_dims`, 0 when absent (opset 11 defines none).
    GatherNd { batch_dims: i64 },
    /// `GatherMultiaxis`: `axes` and `mode`, parsed by the rule every engine of the operator
    /// shares.
    Multiaxis(gather::MultiaxisAttributes),
}

impl GatherAttributes {
    /// The kind these attributes belong to.
    pub fn kind(&self) -> GatherKind {
        match self {
            GatherAttributes::Gather { .. } => GatherKind::Gather,
            GatherAttributes::GatherElements { .. } => GatherKind::GatherElements,
            GatherAttributes::GatherNd { .. } => GatherKind::GatherNd,
            GatherAttributes::Multiaxis(_) => GatherKind::Multiaxis,
        }
    }

    /// The `axis` of a `Gather` or `GatherElements`.
    pub fn axis(&self) -> Option<i64> {
        match self {
            GatherAttributes::Gather { axis } | GatherAttributes::GatherElements { axis } => {
                Some(*axis)
            }
            _ => None,
        }
    }

    /// The `batch_dims` of a `GatherND`.
    pub fn batch_dims(&self) -> Option<i64> {
        match self {
            GatherAttributes::GatherNd { batch_dims } => Some(*batch_dims),
            _ => None,
        }
    }

    /// The attributes of a `GatherMultiaxis`.
    pub fn multiaxis(&self) -> Option<&gather::MultiaxisAttributes> {
        match self {
            GatherAttributes::Multiaxis(m) => Some(m),
            _ => None,
        }
    }
}

impl Attributes for GatherAttributes {
    /// [`GatherKind::attributes`], and a `batch_dims` that is not negative: the interpreter
    /// refuses one when it plans the node.
    fn parse(node: &Node, _opset: i64) -> Result<GatherAttributes> {
        let kind = GatherKind::of(node).ok_or_else(|| {
            Error::node(
                &node.name,
                &node.op_type,
                "is not an operator of the gather family",
            )
        })?;
        let attrs = kind.attributes(node)?;
        if let Some(b) = attrs.batch_dims() {
            nonnegative_batch_dims(b)?;
        }
        Ok(attrs)
    }
}

/// `batch_dims` checked not to be negative.
fn nonnegative_batch_dims(b: i64) -> Result<usize> {
    usize::try_from(b).map_err(|_| Error::Eval("batch_dims must not be negative".into()))
}

/// The prepared attributes of the node a kernel or shape function of this module runs, as
/// `pick` reads them (`None`: a node of another kind, which the definitions never pass).
fn prepared<'a, T>(
    attrs: &'a GatherAttributes,
    pick: impl Fn(&'a GatherAttributes) -> Option<T>,
) -> Result<T> {
    pick(attrs).ok_or_else(|| {
        Error::Eval(format!(
            "internal error: attributes of {} where another gather's were expected",
            attrs.kind().name()
        ))
    })
}

/// The attributes of a `GatherMultiaxis` node, parsed by the one rule every engine shares
/// ([`gather::MultiaxisAttributes::parse`]): the [`GatherKind::Multiaxis`] case of
/// [`GatherKind::attributes`], with the kernel crate's error.
///
/// # Example
/// ```
/// use multigather::gather::OutOfRange;
/// use multigather::ir::{AttrValue, Node};
/// let m = Node::new("GatherMultiaxis", "m", ["x", "i"], ["y"])
///     .with_domain("multigather")
///     .with_attr("axes", AttrValue::Ints(vec![1]))
///     .with_attr("mode", AttrValue::String(b"clamp".to_vec()));
/// assert_eq!(multigather::ops::multiaxis_attributes(&m)?.mode, OutOfRange::Clamp);
/// # Ok::<(), multigather::gather::GatherError>(())
/// ```
pub fn multiaxis_attributes(
    node: &Node,
) -> std::result::Result<gather::MultiaxisAttributes, gather::GatherError> {
    let raw = |name: &str| {
        node.attr(name).map(|value| match value {
            AttrValue::Ints(v) => gather::RawAttr::Ints(v),
            AttrValue::String(s) => gather::RawAttr::String(s),
            other => gather::RawAttr::Other(other.type_name()),
        })
    };
    gather::MultiaxisAttributes::parse(raw("axes"), raw("mode"))
}
