//! Node attributes, with typed accessors whose errors name the node, op and attribute.

use bytes::Bytes;

use super::{Graph, Node, StoredTensor, Type};
use crate::error::{Error, Result};

/// One attribute of a node or a function (`AttributeProto`).
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    pub name: String,
    pub value: AttrValue,
    pub doc_string: Option<String>,
}

/// An attribute's value. Graph-valued attributes hold [`Graph`]s that passes see and edit.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(Box<StoredTensor>),
    Graph(Box<Graph>),
    /// A sparse tensor, kept as its encoded `SparseTensorProto`.
    SparseTensor(Bytes),
    Type(Box<Type>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    Tensors(Vec<StoredTensor>),
    Graphs(Vec<Graph>),
    SparseTensors(Vec<Bytes>),
    Types(Vec<Type>),
    /// A reference to an attribute of the enclosing function (`ref_attr_name`), with the
    /// `AttributeType` number it declares.
    Ref {
        name: String,
        kind: i32,
    },
}

impl AttrValue {
    /// The ONNX text-syntax name of the value's type (`int`, `ints`, `graph`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            AttrValue::Float(_) => "float",
            AttrValue::Int(_) => "int",
            AttrValue::String(_) => "string",
            AttrValue::Tensor(_) => "tensor",
            AttrValue::Graph(_) => "graph",
            AttrValue::SparseTensor(_) => "sparse_tensor",
            AttrValue::Type(_) => "type_proto",
            AttrValue::Floats(_) => "floats",
            AttrValue::Ints(_) => "ints",
            AttrValue::Strings(_) => "strings",
            AttrValue::Tensors(_) => "tensors",
            AttrValue::Graphs(_) => "graphs",
            AttrValue::SparseTensors(_) => "sparse_tensors",
            AttrValue::Types(_) => "type_protos",
            AttrValue::Ref { .. } => "ref",
        }
    }
}

impl Attribute {
    /// An attribute with the given name and value.
    pub fn new(name: impl Into<String>, value: AttrValue) -> Attribute {
        Attribute {
            name: name.into(),
            value,
            doc_string: None,
        }
    }
}

impl Node {
    /// The attribute named `name`, if present.
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| &a.value)
    }

    fn attr_error(&self, name: &str, reason: impl std::fmt::Display) -> Error {
        Error::node(
            &self.name,
            &self.op_type,
            format!("attribute '{name}': {reason}"),
        )
    }

    fn wrong_type(&self, name: &str, expected: &str, found: &AttrValue) -> Error {
        match found {
            AttrValue::Ref { name: r, .. } => self.attr_error(
                name,
                format!("refers to function attribute '{r}', which only a function call binds"),
            ),
            _ => self.attr_error(
                name,
                format!("expected {expected}, found {}", found.type_name()),
            ),
        }
    }

    /// An `int` attribute, or `default` when absent.
    pub fn attr_int(&self, name: &str, default: i64) -> Result<i64> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Int(v)) => Ok(*v),
            Some(other) => Err(self.wrong_type(name, "int", other)),
        }
    }

    /// An `ints` attribute, if present.
    pub fn attr_ints(&self, name: &str) -> Result<Option<&[i64]>> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v)),
            Some(other) => Err(self.wrong_type(name, "ints", other)),
        }
    }

    /// A `float` attribute, or `default` when absent.
    pub fn attr_float(&self, name: &str, default: f32) -> Result<f32> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Float(v)) => Ok(*v),
            Some(other) => Err(self.wrong_type(name, "float", other)),
        }
    }

    /// A `floats` attribute, if present.
    pub fn attr_floats(&self, name: &str) -> Result<Option<&[f32]>> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Floats(v)) => Ok(Some(v)),
            Some(other) => Err(self.wrong_type(name, "floats", other)),
        }
    }

    /// A `strings` attribute (byte strings, as ONNX stores them), if present.
    pub fn attr_strings(&self, name: &str) -> Result<Option<&[Vec<u8>]>> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Strings(v)) => Ok(Some(v)),
            Some(other) => Err(self.wrong_type(name, "strings", other)),
        }
    }

    /// A `string` attribute decoded as UTF-8, if present.
    pub fn attr_string(&self, name: &str) -> Result<Option<&str>> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::String(v)) => std::str::from_utf8(v)
                .map(Some)
                .map_err(|_| self.attr_error(name, "not valid UTF-8")),
            Some(other) => Err(self.wrong_type(name, "string", other)),
        }
    }

    /// A `tensor` attribute, if present.
    pub fn attr_tensor(&self, name: &str) -> Result<Option<&StoredTensor>> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Tensor(t)) => Ok(Some(t)),
            Some(other) => Err(self.wrong_type(name, "tensor", other)),
        }
    }

    /// A required `graph` attribute.
    pub fn attr_graph(&self, name: &str) -> Result<&Graph> {
        match self.attr(name) {
            None => Err(self.attr_error(name, "required but missing")),
            Some(AttrValue::Graph(g)) => Ok(g),
            Some(other) => Err(self.wrong_type(name, "graph", other)),
        }
    }

    /// Sets an attribute, replacing one of the same name in place or appending it.
    pub fn set_attr(&mut self, name: &str, value: AttrValue) {
        match self.attributes.iter_mut().find(|a| a.name == name) {
            Some(a) => a.value = value,
            None => self.attributes.push(Attribute::new(name, value)),
        }
    }
}
