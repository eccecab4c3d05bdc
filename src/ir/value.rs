//! Values as users see them at a graph's edge: a tensor, or the sequence of maps that
//! `ZipMap` (`ai.onnx.ml`) returns.
//!
//! Design note: the interpreter's values are tensors. `ZipMap`'s output, `seq(map(K, float))`
//! in ONNX, is carried inside a run as the `[N, C]` float tensor of its map values (column `j`
//! for the node's `j`-th class label), since every map of the sequence has the same keys. Only
//! where a value leaves the library (`Session::run_values`, the files `multigather run` writes
//! and `multigather test` reads, the Python package, `verify`) does it become a
//! [`SequenceOfMaps`]: the keys travel with the values, so no value changes meaning on the way
//! out.

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

/// A graph output as users see it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Tensor(Tensor),
    /// `ZipMap`'s output.
    Maps(SequenceOfMaps),
}

impl Value {
    /// The value's type as text: `float[2, 3]`, `seq(map(string, float))[2]`.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::Value;
    /// use multigather::{DataType, Tensor};
    /// let t = Tensor::from_vec(DataType::Int64, &[2], vec![1i64, 2])?;
    /// assert_eq!(Value::Tensor(t).type_text(), "int64[2]");
    /// # Ok::<(), multigather::Error>(())
    /// ```
    pub fn type_text(&self) -> String {
        match self {
            Value::Tensor(t) => format!("{}{:?}", t.dtype(), t.shape()),
            Value::Maps(m) => format!("{}[{}]", m.type_text(), m.len()),
        }
    }
}
