//! Value types: element type plus a shape whose dims are known, symbolic or unknown.

use std::fmt;

use crate::DataType;

/// One dimension of a shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A known size (`dim_value`). A negative value (PaddlePaddle writes `-1` for a dynamic
    /// dimension) is kept for a lossless round trip but means nothing: [`Dim::known`] and
    /// [`Dim::is_unknown_value`] treat it as unknown.
    Known(i64),
    /// A named size shared by every value that uses the same name (`dim_param`).
    Symbolic(String),
    /// A size nothing is known about.
    Unknown,
}

impl Dim {
    /// The size if it is known (a negative `dim_value` is not a size).
    ///
    /// # Example
    /// ```
    /// use multigather::ir::Dim;
    /// assert_eq!(Dim::Known(3).known(), Some(3));
    /// assert_eq!(Dim::Known(-1).known(), None);
    /// ```
    pub fn known(&self) -> Option<i64> {
        match self {
            Dim::Known(v) if *v >= 0 => Some(*v),
            _ => None,
        }
    }

    /// True for a negative `dim_value`, which runtimes read as an unknown size.
    pub fn is_unknown_value(&self) -> bool {
        matches!(self, Dim::Known(v) if *v < 0)
    }

    /// The dim as inference sees it: a negative `dim_value` becomes [`Dim::Unknown`].
    pub fn normalized(&self) -> Dim {
        if self.is_unknown_value() {
            Dim::Unknown
        } else {
            self.clone()
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(v) => write!(f, "{v}"),
            Dim::Symbolic(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// The shape of a tensor type: `None` when even the rank is unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shape {
    pub dims: Vec<Dim>,
    /// `denotation` of each dim, kept only for a lossless round trip (empty when none is set).
    pub denotations: Vec<Option<String>>,
}

impl Shape {
    /// A shape of the given dims without denotations.
    pub fn new(dims: Vec<Dim>) -> Shape {
        Shape {
            dims,
            denotations: Vec::new(),
        }
    }

    /// A shape of known sizes.
    pub fn known(sizes: &[i64]) -> Shape {
        Shape::new(sizes.iter().map(|&v| Dim::Known(v)).collect())
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// All sizes, if every dim is known.
    pub fn sizes(&self) -> Option<Vec<i64>> {
        self.dims.iter().map(Dim::known).collect()
    }
}

/// A tensor (or sparse tensor) type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// `None` when the model leaves the element type unset.
    pub elem: Option<DataType>,
    /// `None` when the rank is unknown.
    pub shape: Option<Shape>,
}

impl TensorType {
    /// A tensor type with a known element type and shape.
    pub fn new(elem: DataType, dims: Vec<Dim>) -> TensorType {
        TensorType {
            elem: Some(elem),
            shape: Some(Shape::new(dims)),
        }
    }

    /// The rank, if known.
    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(Shape::rank)
    }
}

/// The type of a value (`TypeProto`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TypeKind {
    Tensor(TensorType),
    SparseTensor(TensorType),
    Sequence(Option<Box<Type>>),
    Map {
        key: Option<i32>,
        value: Option<Box<Type>>,
    },
    Optional(Option<Box<Type>>),
    Opaque {
        domain: String,
        name: String,
    },
    /// A `TypeProto` with no value set.
    Unset,
}

/// A `TypeProto`: the kind plus its optional denotation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    pub kind: TypeKind,
    pub denotation: Option<String>,
}

impl Type {
    /// A tensor type.
    pub fn tensor(elem: DataType, dims: Vec<Dim>) -> Type {
        Type::from(TypeKind::Tensor(TensorType::new(elem, dims)))
    }

    /// The tensor type, if this is one.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match &self.kind {
            TypeKind::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

impl From<TypeKind> for Type {
    fn from(kind: TypeKind) -> Type {
        Type {
            kind,
            denotation: None,
        }
    }
}

/// A named, possibly typed value declaration (`ValueInfoProto`).
#[derive(Clone, Debug, PartialEq)]
pub struct ValueInfo {
    pub name: String,
    pub ty: Option<Type>,
    pub doc_string: Option<String>,
    pub metadata_props: Vec<(String, String)>,
}

impl ValueInfo {
    /// A declaration with a type.
    pub fn new(name: impl Into<String>, ty: Type) -> ValueInfo {
        ValueInfo {
            name: name.into(),
            ty: Some(ty),
            doc_string: None,
            metadata_props: Vec::new(),
        }
    }

    /// A declaration with no type (function inputs and outputs).
    pub fn untyped(name: impl Into<String>) -> ValueInfo {
        ValueInfo {
            name: name.into(),
            ty: None,
            doc_string: None,
            metadata_props: Vec::new(),
        }
    }

    /// The tensor type, if the value is a typed tensor.
    pub fn tensor_type(&self) -> Option<&TensorType> {
        self.ty.as_ref().and_then(Type::as_tensor)
    }
}

/// Two dims that are provably the same size: equal known sizes or the same symbol.
///
/// # Example
/// ```
/// use multigather::ir::{same_dim, Dim};
/// assert!(same_dim(&Dim::Symbolic("n".into()), &Dim::Symbolic("n".into())));
/// assert!(!same_dim(&Dim::Unknown, &Dim::Unknown));
/// ```
pub fn same_dim(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => x == y && *x >= 0,
        (Dim::Symbolic(x), Dim::Symbolic(y)) => x == y,
        _ => false,
    }
}

/// What is known of the bidirectional broadcast of two dims (`1` gives way to the other side).
///
/// # Example
/// ```
/// use multigather::ir::{broadcast_dim, Dim};
/// let n = Dim::Symbolic("n".into());
/// assert_eq!(broadcast_dim(&Dim::Known(1), &n), n);
/// assert_eq!(broadcast_dim(&Dim::Known(3), &Dim::Unknown), Dim::Known(3));
/// ```
pub fn broadcast_dim(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (a, b) if same_dim(a, b) => b.clone(),
        (Dim::Known(1), b) => b.clone(),
        (a, Dim::Known(1)) => a.clone(),
        (Dim::Known(n), _) | (_, Dim::Known(n)) => Dim::Known(*n),
        _ => Dim::Unknown,
    }
}
