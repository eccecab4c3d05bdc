//! Values as a run holds them and users see them at a graph's edge: a tensor, a sequence of
//! tensors, an optional, or the sequence of maps that `ZipMap` (`ai.onnx.ml`) returns.
//!
//! Design note: the interpreter's frames hold [`Value`]s, so a sequence or an optional flows
//! through any edge of any graph (a loop-carried value, an `If` output, a function's argument)
//! as a tensor does; kernels of tensor operators still see `&Tensor`s, unwrapped once per input.
//! `ZipMap`'s output, `seq(map(K, float))` in ONNX, is carried inside a run as the `[N, C]`
//! float tensor of its map values (column `j` for the node's `j`-th class label), since every
//! map of the sequence has the same keys. Only where a value leaves the library
//! (`Session::run_values`, the files `multigather run` writes and `multigather test` reads,
//! the Python package, `verify`) does it become a [`SequenceOfMaps`]: the keys travel with the
//! values, so no value changes meaning on the way out.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::DataType;

/// The keys of every map of a [`SequenceOfMaps`], in the order of the value columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapKeys {
    /// `map(int64, float)`.
    Int64(Vec<i64>),
    /// `map(string, float)`; keys are byte strings, as ONNX strings are.
    String(Vec<Vec<u8>>),
}

impl MapKeys {
    /// How many keys (columns) there are.
    pub fn len(&self) -> usize {
        match self {
            MapKeys::Int64(k) => k.len(),
            MapKeys::String(k) => k.len(),
        }
    }

    /// True when there is no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key type's ONNX name: `int64` or `string`.
    pub fn type_name(&self) -> &'static str {
        match self {
            MapKeys::Int64(_) => "int64",
            MapKeys::String(_) => "string",
        }
    }

    /// Key `j` as text (a string key lossily decoded), for messages.
    pub fn key_text(&self, j: usize) -> String {
        match self {
            MapKeys::Int64(k) => k.get(j).map_or_else(String::new, i64::to_string),
            MapKeys::String(k) => k
                .get(j)
                .map_or_else(String::new, |s| format!("{:?}", String::from_utf8_lossy(s))),
        }
    }

    /// Where each of `other`'s keys is among `self`'s, when both hold the same keys of the same
    /// type (in any order); `None` otherwise.
    pub fn positions_of(&self, other: &MapKeys) -> Option<Vec<usize>> {
        fn find<K: Eq + std::hash::Hash>(mine: &[K], theirs: &[K]) -> Option<Vec<usize>> {
            if mine.len() != theirs.len() {
                return None;
            }
            // Each of `mine`'s keys once, so a repeated key on either side fails.
            let mut at: std::collections::HashMap<&K, usize> = std::collections::HashMap::new();
            for (j, k) in mine.iter().enumerate() {
                if at.insert(k, j).is_some() {
                    return None;
                }
            }
            theirs.iter().map(|k| at.remove(k)).collect()
        }
        match (self, other) {
            (MapKeys::Int64(a), MapKeys::Int64(b)) => find(a, b),
            (MapKeys::String(a), MapKeys::String(b)) => find(a, b),
            _ => None,
        }
    }
}

/// A sequence of `N` maps that share their `C` keys, with `float` values: the `[N, C]` float
/// tensor of the values, column `j` for key `j`.
///
/// # Example
/// ```
/// use multigather::ir::{MapKeys, SequenceOfMaps};
/// use multigather::{DataType, Tensor};
/// let values = Tensor::from_vec(DataType::Float, &[2, 2], vec![0.25f32, 0.75, 1.0, 0.0])?;
/// let maps = SequenceOfMaps::new(MapKeys::Int64(vec![4, 7]), values)?;
/// assert_eq!(maps.len(), 2);
/// assert_eq!(maps.type_text(), "seq(map(int64, float))");
/// assert!(SequenceOfMaps::new(MapKeys::Int64(vec![4]), maps.values().clone()).is_err());
/// # Ok::<(), multigather::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceOfMaps {
    keys: MapKeys,
    values: Tensor,
}

impl SequenceOfMaps {
    /// The maps whose values are the rows of `values`, a `[N, C]` float tensor with one column
    /// per key.
    pub fn new(keys: MapKeys, values: Tensor) -> Result<SequenceOfMaps> {
        let fits = values.dtype() == DataType::Float
            && matches!(values.shape(), [_, c] if *c == keys.len());
        if !fits {
            return Err(Error::Eval(format!(
                "the values of a sequence of maps with {} keys must be float[N, {}], found {}{:?}",
                keys.len(),
                keys.len(),
                values.dtype(),
                values.shape()
            )));
        }
        Ok(SequenceOfMaps { keys, values })
    }

    /// The keys every map holds, in column order.
    pub fn keys(&self) -> &MapKeys {
        &self.keys
    }

    /// The `[N, C]` float tensor of the values.
    pub fn values(&self) -> &Tensor {
        &self.values
    }

    /// The values of map `i`, in key order (`None` past the end).
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        let c = self.keys.len();
        self.values.as_slice::<f32>().ok()?.get(i * c..(i + 1) * c)
    }

    /// How many maps the sequence holds.
    pub fn len(&self) -> usize {
        self.values.shape().first().copied().unwrap_or(0)
    }

    /// True when the sequence holds no map.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ONNX type: `seq(map(int64, float))` or `seq(map(string, float))`.
    pub fn type_text(&self) -> String {
        format!("seq(map({}, float))", self.keys.type_name())
    }
}

/// An ONNX sequence of tensors (`seq(tensor(T))`): tensors of one element type, in order,
/// each with a shape of its own.
///
/// The element type is kept even when the sequence is empty (from `SequenceEmpty`'s `dtype`,
/// `SplitToSequence`'s input, or the declared type of a graph input), so that inserting a
/// tensor of another type is refused as onnxruntime refuses it; it is `None` only where nothing
/// said it (an empty `SequenceProto` with no declared type).
///
/// # Example
/// ```
/// use multigather::ir::Sequence;
/// use multigather::{DataType, Tensor};
/// let a = Tensor::from_vec(DataType::Float, &[2], vec![1.0f32, 2.0])?;
/// let b = Tensor::from_vec(DataType::Float, &[1], vec![3.0f32])?;
/// let seq = Sequence::new(Some(DataType::Float), vec![a, b.clone()])?;
/// assert_eq!(seq.len(), 2);
/// assert_eq!(seq.get(1), Some(&b));
/// assert_eq!(seq.type_text(), "seq(tensor(float))");
/// let ints = Tensor::from_vec(DataType::Int64, &[1], vec![3i64])?;
/// assert!(Sequence::new(Some(DataType::Float), vec![ints]).is_err());
/// # Ok::<(), multigather::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Sequence {
    elem: Option<DataType>,
    tensors: Vec<Tensor>,
}

impl Sequence {
    /// The sequence of `tensors`, whose element type must be `elem` (or, when `elem` is
    /// `None`, the first tensor's, which then becomes the sequence's).
    pub fn new(elem: Option<DataType>, tensors: Vec<Tensor>) -> Result<Sequence> {
        let elem = elem.or_else(|| tensors.first().map(Tensor::dtype));
        if let (Some(want), Some(other)) = (elem, tensors.iter().find(|t| Some(t.dtype()) != elem))
        {
            return Err(Error::Eval(format!(
                "a sequence of {want} tensors cannot hold a {} tensor",
                other.dtype()
            )));
        }
        Ok(Sequence { elem, tensors })
    }

    /// An empty sequence of `elem` tensors.
    pub fn empty(elem: Option<DataType>) -> Sequence {
        Sequence {
            elem,
            tensors: Vec::new(),
        }
    }

    /// The element type of the tensors, when known.
    pub fn elem(&self) -> Option<DataType> {
        self.elem
    }

    /// The tensors, in order.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// The tensors, taken out.
    pub fn into_tensors(self) -> Vec<Tensor> {
        self.tensors
    }

    /// Tensor `i` (`None` past the end).
    pub fn get(&self, i: usize) -> Option<&Tensor> {
        self.tensors.get(i)
    }

    /// How many tensors the sequence holds.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the sequence holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The ONNX type: `seq(tensor(float))`, or `seq(tensor)` when the element type is unknown.
    pub fn type_text(&self) -> String {
        match self.elem {
            Some(elem) => format!("seq(tensor({elem}))"),
            None => "seq(tensor)".into(),
        }
    }
}

/// A value of a run: what a graph takes, computes and returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Tensor(Tensor),
    /// `ZipMap`'s output, as it leaves a run (inside one it is the tensor of its values).
    Maps(SequenceOfMaps),
    /// A sequence of tensors.
    Sequence(Sequence),
    /// An optional: `None` is the empty optional, `Some` holds a tensor or a sequence.
    Optional(Option<Box<Value>>),
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}

impl From<Sequence> for Value {
    fn from(s: Sequence) -> Value {
        Value::Sequence(s)
    }
}

impl Value {
    /// The tensor, when the value is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The tensor, taken out, when the value is one; the value itself otherwise.
    pub fn into_tensor(self) -> std::result::Result<Tensor, Value> {
        match self {
            Value::Tensor(t) => Ok(t),
            other => Err(other),
        }
    }

    /// The sequence, when the value is one.
    pub fn as_sequence(&self) -> Option<&Sequence> {
        match self {
            Value::Sequence(s) => Some(s),
            _ => None,
        }
    }

    /// The element type that type constraints see: a tensor's, or the tensor's of a present
    /// optional (a sequence, a map or an empty optional has none).
    pub fn elem_type(&self) -> Option<DataType> {
        match self {
            Value::Tensor(t) => Some(t.dtype()),
            Value::Optional(Some(v)) => v.elem_type(),
            _ => None,
        }
    }

    /// What kind of value this is, for messages: `tensor`, `sequence`, `optional`,
    /// `sequence of maps`.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "tensor",
            Value::Maps(_) => "sequence of maps",
            Value::Sequence(_) => "sequence",
            Value::Optional(_) => "optional",
        }
    }

    /// The value's type as text: `float[2, 3]`, `seq(map(string, float))[2]`,
    /// `seq(tensor(float))[3]`, `optional(float[2])`, `optional()` (empty).
    ///
    /// # Example
    /// ```
    /// use multigather::ir::{Sequence, Value};
    /// use multigather::{DataType, Tensor};
    /// let t = Tensor::from_vec(DataType::Int64, &[2], vec![1i64, 2])?;
    /// assert_eq!(Value::Tensor(t.clone()).type_text(), "int64[2]");
    /// let seq = Value::Sequence(Sequence::new(None, vec![t.clone(), t])?);
    /// assert_eq!(seq.type_text(), "seq(tensor(int64))[2]");
    /// assert_eq!(Value::Optional(Some(Box::new(seq))).type_text(), "optional(seq(tensor(int64))[2])");
    /// assert_eq!(Value::Optional(None).type_text(), "optional()");
    /// # Ok::<(), multigather::Error>(())
    /// ```
    pub fn type_text(&self) -> String {
        match self {
            Value::Tensor(t) => format!("{}{:?}", t.dtype(), t.shape()),
            Value::Maps(m) => format!("{}[{}]", m.type_text(), m.len()),
            Value::Sequence(s) => format!("{}[{}]", s.type_text(), s.len()),
            Value::Optional(Some(v)) => format!("optional({})", v.type_text()),
            Value::Optional(None) => "optional()".into(),
        }
    }
}
