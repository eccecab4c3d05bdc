//! The protobuf boundary: the only module that sees the prost-generated ONNX types.
//!
//! Why one file: the boundary is sealed by being one module, the only one that includes the
//! generated code, with decoding and encoding mirroring each other field for field.
//!
//! [`decode`] turns the bytes of a `ModelProto` into an [`ir::Model`]; [`encode`] does the reverse.
//! Conversion is field for field, so a model decoded and encoded again yields an equal message.
//! Parts no pass looks into (training info, device configurations, sparse tensors) are carried as
//! their encoded bytes.
//!
//! Design note: proto2 fields are optional; the IR keeps `Option` where a user could tell "unset"
//! from "empty" (doc strings, producer fields, versions) and uses plain values where ONNX itself
//! treats the two alike (node and value names, domains of nodes).

use bytes::Bytes;
use prost::Message;

use crate::error::{Error, Result};
use crate::ir::{
    self, AttrValue, Attribute, Dim, ExternalData, Function, Graph, Node, OpsetImport, Payload,
    QuantAnnotation, Shape, SparseInitializer, StoredTensor, TensorType, Type, TypeKind, ValueInfo,
};
use crate::DataType;

#[allow(clippy::all, missing_docs)]
mod pb {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

use pb::attribute_proto::AttributeType as AT;

/// Limits applied while converting a decoded message.
#[derive(Clone, Copy, Debug)]
pub struct DecodeLimits {
    /// Deepest nesting of subgraphs allowed.
    pub max_depth: usize,
    /// Most nodes allowed in the whole model.
    pub max_nodes: usize,
}

impl Default for DecodeLimits {
    fn default() -> DecodeLimits {
        DecodeLimits {
            max_depth: 64,
            max_nodes: 10_000_000,
        }
    }
}

/// Decodes a serialized `ModelProto`. Raw tensor payloads stay slices of `bytes`.
pub fn decode(bytes: Bytes, limits: DecodeLimits) -> Result<ir::Model> {
    let m = pb::ModelProto::decode(bytes).map_err(|e| Error::Decode(e.to_string()))?;
    let mut cx = Decoder {
        limits,
        nodes: 0,
        depth: 0,
    };
    let graph = match m.graph {
        Some(g) => cx.graph(g)?,
        None => return Err(Error::InvalidModel("the model has no graph".into())),
    };
    let functions = m
        .functions
        .into_iter()
        .map(|f| cx.function(f))
        .collect::<Result<_>>()?;
    Ok(ir::Model {
        ir_version: m.ir_version,
        opset_imports: m.opset_import.into_iter().map(opset).collect(),
        producer_name: m.producer_name,
        producer_version: m.producer_version,
        domain: m.domain,
        model_version: m.model_version,
        doc_string: m.doc_string,
        metadata_props: props(m.metadata_props),
        graph,
        functions,
        training_info: m.training_info.iter().map(encoded).collect(),
        configuration: m.configuration.iter().map(encoded).collect(),
        base_dir: None,
        source_file: None,
    })
}

/// Chooses, per tensor, a payload to write instead of the stored one (`None`: write it as stored).
/// This is how saving moves tensors inline or to an external file without copying the model.
pub type Substitute<'a> = &'a dyn Fn(&StoredTensor) -> Option<Payload>;

/// Encodes a model as a `ModelProto`, every payload as stored (external payloads as references).
/// Fails without allocating when the message would exceed protobuf's 2 GiB limit.
pub fn encode(model: &ir::Model) -> Result<Vec<u8>> {
    encode_with(model, &|_| None)
}

/// Encodes a model as a `ModelProto`, with payloads chosen by `sub`.
pub fn encode_with(model: &ir::Model, sub: Substitute) -> Result<Vec<u8>> {
    let m = pb::ModelProto {
        ir_version: model.ir_version,
        opset_import: model.opset_imports.iter().map(opset_back).collect(),
        producer_name: model.producer_name.clone(),
        producer_version: model.producer_version.clone(),
        domain: model.domain.clone(),
        model_version: model.model_version,
        doc_string: model.doc_string.clone(),
        graph: Some(graph_back(&model.graph, sub)),
        metadata_props: props_back(&model.metadata_props),
        training_info: decoded_all(&model.training_info)?,
        functions: model
            .functions
            .iter()
            .map(|f| function_back(f, sub))
            .collect(),
        configuration: decoded_all(&model.configuration)?,
    };
    let len = m.encoded_len();
    if len > PROTOBUF_LIMIT {
        return Err(Error::Unsupported(format!(
            "the serialized model would be {len} bytes, over protobuf's 2 GiB limit; \
             store weights in an external file (--external-data FILE)"
        )));
    }
    Ok(m.encode_to_vec())
}

/// Protobuf messages cannot exceed 2 GiB.
const PROTOBUF_LIMIT: usize = (1 << 31) - 1;

/// Encodes a standalone tensor as a `TensorProto` (for `.pb` test data).
pub fn encode_tensor(t: &StoredTensor) -> Vec<u8> {
    tensor_back(t, &|_| None).encode_to_vec()
}

/// Decodes a standalone `TensorProto` (for `.pb` test data).
pub fn decode_tensor(bytes: Bytes) -> Result<StoredTensor> {
    let t = pb::TensorProto::decode(bytes).map_err(|e| Error::Decode(e.to_string()))?;
    let t = tensor(t)?;
    t.check_size()?;
    Ok(t)
}

/// Decodes a sparse initializer kept encoded ([`ir::SparseInitializer::encoded`]) into its
/// `values` (1-D, one per stored element) and `indices` (`[NNZ]` linear positions or
/// `[NNZ, rank]` coordinates) tensors.
pub fn decode_sparse(encoded: &[u8]) -> Result<(StoredTensor, StoredTensor)> {
    let s = pb::SparseTensorProto::decode(encoded).map_err(|e| Error::Decode(e.to_string()))?;
    let name = s
        .values
        .as_ref()
        .and_then(|v| v.name.clone())
        .unwrap_or_else(|| "<unnamed>".into());
    let part = |t: Option<pb::TensorProto>, what: &str| {
        let t = t.ok_or_else(|| Error::tensor(&name, format!("sparse tensor without {what}")))?;
        let t = tensor(t)?;
        t.check_size()?;
        if matches!(t.payload, Payload::External(_)) {
            return Err(Error::Unsupported(format!(
                "sparse tensor '{name}' with {what} in an external file"
            )));
        }
        Ok(t)
    };
    Ok((part(s.values, "values")?, part(s.indices, "indices")?))
}

/// `SequenceProto.DataType`'s `TENSOR` and `MAP`.
const SEQUENCE_OF_TENSORS: i32 = 1;
const SEQUENCE_OF_MAPS: i32 = 4;

/// Encodes a sequence of maps as a `SequenceProto` of `MapProto`s (the ONNX test-data form of a
/// `seq(map(K, float))` value, as `onnx.numpy_helper.from_list` writes it): each map's values
/// are a sequence of scalar float tensors, one per key.
///
/// # Example
/// ```
/// use multigather::ir::{MapKeys, SequenceOfMaps};
/// use multigather::proto::{decode_sequence_of_maps, encode_sequence_of_maps};
/// use multigather::{DataType, Tensor};
/// let values = Tensor::from_vec(DataType::Float, &[1, 2], vec![0.25f32, 0.75])?;
/// let maps = SequenceOfMaps::new(MapKeys::String(vec![b"a".to_vec(), b"b".to_vec()]), values)?;
/// let bytes = encode_sequence_of_maps("probabilities", &maps)?;
/// let (name, back) = decode_sequence_of_maps(bytes.into())?;
/// assert_eq!((name.as_deref(), back), (Some("probabilities"), maps));
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn encode_sequence_of_maps(name: &str, maps: &ir::SequenceOfMaps) -> Result<Vec<u8>> {
    let (key_type, keys, string_keys) = match maps.keys() {
        ir::MapKeys::Int64(k) => (DataType::Int64, k.clone(), Vec::new()),
        ir::MapKeys::String(k) => (DataType::String, Vec::new(), k.clone()),
    };
    let mut map_values = Vec::new();
    map_values
        .try_reserve(maps.len())
        .map_err(|_| too_large(name))?;
    for i in 0..maps.len() {
        let row = maps.row(i).unwrap_or_default();
        let mut tensor_values = Vec::new();
        tensor_values
            .try_reserve(row.len())
            .map_err(|_| too_large(name))?;
        tensor_values.extend(row.iter().map(|&v| pb::TensorProto {
            data_type: Some(DataType::Float.onnx()),
            float_data: vec![v],
            ..Default::default()
        }));
        map_values.push(pb::MapProto {
            name: None,
            key_type: Some(key_type.onnx()),
            keys: keys.clone(),
            string_keys: string_keys.clone(),
            values: Some(pb::SequenceProto {
                elem_type: Some(SEQUENCE_OF_TENSORS),
                tensor_values,
                ..Default::default()
            }),
        });
    }
    let sequence = pb::SequenceProto {
        name: (!name.is_empty()).then(|| name.to_owned()),
        elem_type: Some(SEQUENCE_OF_MAPS),
        map_values,
        ..Default::default()
    };
    Ok(sequence.encode_to_vec())
}

fn too_large(name: &str) -> Error {
    Error::Limit(format!("sequence of maps '{name}' is too large to encode"))
}

/// Decodes a `SequenceProto` of `MapProto`s with `int64` or `string` keys and scalar `float` (or
/// `double`, as numpy writes Python floats) values, whose maps all hold the same keys: the
/// sequence is returned in the keys' order of its first map, with its name.
pub fn decode_sequence_of_maps(bytes: Bytes) -> Result<(Option<String>, ir::SequenceOfMaps)> {
    let s = pb::SequenceProto::decode(bytes).map_err(|e| Error::Decode(e.to_string()))?;
    let name = s.name.clone().filter(|n| !n.is_empty());
    let shown = name.clone().unwrap_or_else(|| "<unnamed>".into());
    let bad = |reason: String| Error::tensor(&shown, reason);
    if s.elem_type != Some(SEQUENCE_OF_MAPS) {
        return Err(bad(format!(
            "a sequence of element type {} where a sequence of maps was expected",
            s.elem_type.unwrap_or(0)
        )));
    }
    let mut keys: Option<ir::MapKeys> = None;
    let mut values: Vec<f32> = Vec::new();
    for (i, m) in s.map_values.into_iter().enumerate() {
        let these = match m.key_type.and_then(DataType::from_onnx) {
            Some(DataType::Int64) => ir::MapKeys::Int64(m.keys),
            Some(DataType::String) => ir::MapKeys::String(m.string_keys),
            _ => {
                return Err(bad(format!(
                    "map {i} has key type {}; int64 and string keys are read",
                    m.key_type.unwrap_or(0)
                )))
            }
        };
        let row =
            map_values(m.values, these.len()).map_err(|why| bad(format!("map {i}: {why}")))?;
        let first = keys.get_or_insert_with(|| these.clone());
        let order = first
            .positions_of(&these)
            .ok_or_else(|| bad(format!("map {i} does not hold the keys of map 0")))?;
        let at = values.len();
        values
            .try_reserve(row.len())
            .map_err(|_| bad("too large".into()))?;
        values.resize(at + row.len(), 0.0);
        for (v, j) in row.into_iter().zip(order) {
            values[at + j] = v;
        }
    }
    let keys = keys.unwrap_or(ir::MapKeys::Int64(Vec::new()));
    let rows = values.len().checked_div(keys.len()).unwrap_or(0);
    let tensor = crate::tensor::Tensor::from_vec(DataType::Float, &[rows, keys.len()], values)?;
    Ok((name, ir::SequenceOfMaps::new(keys, tensor)?))
}

/// The values of one map: `count` scalar float or double tensors.
fn map_values(values: Option<pb::SequenceProto>, count: usize) -> Result<Vec<f32>, String> {
    let values = values.ok_or("no values")?;
    if values.elem_type != Some(SEQUENCE_OF_TENSORS) || values.tensor_values.len() != count {
        return Err(format!(
            "{count} keys need a sequence of {count} tensors as values, found {} of element type {}",
            values.tensor_values.len(),
            values.elem_type.unwrap_or(0)
        ));
    }
    values
        .tensor_values
        .into_iter()
        .map(|t| {
            let t = ir::stored_to_tensor(&tensor(t).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            let v = match t.dtype() {
                DataType::Float => t.as_slice::<f32>().ok().and_then(|v| v.first().copied()),
                DataType::Double => t
                    .as_slice::<f64>()
                    .ok()
                    .and_then(|v| v.first().map(|&v| v as f32)),
                _ => None,
            };
            match (t.len(), v) {
                (1, Some(v)) => Ok(v),
                _ => Err(format!(
                    "a value is {}{:?}, not one float",
                    t.dtype(),
                    t.shape()
                )),
            }
        })
        .collect()
}

/// `OptionalProto.DataType`'s `UNDEFINED` (an empty optional), `TENSOR` and `SEQUENCE`.
const OPTIONAL_EMPTY: i32 = 0;
const OPTIONAL_TENSOR: i32 = 1;
const OPTIONAL_SEQUENCE: i32 = 3;

/// Encodes a value as the ONNX test data holds one: a tensor as a `TensorProto`, a sequence as
/// a `SequenceProto` of tensors, an optional as an `OptionalProto` (an empty one with element
/// type `UNDEFINED`, as `onnx.numpy_helper.from_optional(None)` writes it), `ZipMap`'s maps as a
/// `SequenceProto` of `MapProto`s ([`encode_sequence_of_maps`]).
///
/// # Example
/// ```
/// use multigather::ir::{Sequence, Type, TypeKind, Value};
/// use multigather::proto::{decode_value, encode_value};
/// use multigather::{DataType, Tensor};
/// let t = Tensor::from_vec(DataType::Int32, &[2], vec![4i32, -1])?;
/// let seq = Value::Sequence(Sequence::new(None, vec![t.clone(), t])?);
/// let opt = Value::Optional(Some(Box::new(seq.clone())));
/// let declared = Type::from(TypeKind::Optional(None));
/// let (name, back) = decode_value(encode_value("o", &opt)?.into(), Some(&declared))?;
/// assert_eq!((name.as_deref(), back), (Some("o"), opt));
/// let declared = Type::from(TypeKind::Sequence(None));
/// assert_eq!(decode_value(encode_value("s", &seq)?.into(), Some(&declared))?.1, seq);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn encode_value(name: &str, value: &ir::Value) -> Result<Vec<u8>> {
    let bytes = match value {
        ir::Value::Tensor(t) => encode_tensor(&ir::tensor_to_stored(name, t)?),
        ir::Value::Maps(maps) => return encode_sequence_of_maps(name, maps),
        ir::Value::Sequence(seq) => sequence_back(name, seq)?.encode_to_vec(),
        ir::Value::Optional(o) => optional_back(name, o.as_deref())?.encode_to_vec(),
    };
    if bytes.len() > PROTOBUF_LIMIT {
        return Err(Error::Limit(format!(
            "value '{name}' takes more than the 2 GiB a protobuf message holds"
        )));
    }
    Ok(bytes)
}

fn sequence_back(name: &str, seq: &ir::Sequence) -> Result<pb::SequenceProto> {
    let mut tensor_values = Vec::new();
    tensor_values
        .try_reserve(seq.len())
        .map_err(|_| Error::Limit(format!("sequence '{name}' is too large to encode")))?;
    for t in seq.tensors() {
        tensor_values.push(tensor_back(&ir::tensor_to_stored("", t)?, &|_| None));
    }
    Ok(pb::SequenceProto {
        name: non_empty(name),
        elem_type: Some(SEQUENCE_OF_TENSORS),
        tensor_values,
        ..Default::default()
    })
}

fn optional_back(name: &str, inner: Option<&ir::Value>) -> Result<pb::OptionalProto> {
    let mut o = pb::OptionalProto {
        name: non_empty(name),
        elem_type: Some(OPTIONAL_EMPTY),
        ..Default::default()
    };
    match inner {
        None => {}
        Some(ir::Value::Tensor(t)) => {
            o.elem_type = Some(OPTIONAL_TENSOR);
            o.tensor_value = Some(tensor_back(&ir::tensor_to_stored("", t)?, &|_| None));
        }
        Some(ir::Value::Sequence(seq)) => {
            o.elem_type = Some(OPTIONAL_SEQUENCE);
            o.sequence_value = Some(sequence_back("", seq)?);
        }
        Some(other) => {
            return Err(Error::Unsupported(format!(
                "an optional holding a {}",
                other.kind()
            )))
        }
    }
    Ok(o)
}

/// Decodes a value of the declared type `declared` (a tensor when `None`): a `TensorProto`, a
/// `SequenceProto` of tensors (or, for `seq(map(...))`, of maps: [`decode_sequence_of_maps`]),
/// or an `OptionalProto` holding nothing, a tensor or a sequence of tensors. A protobuf file
/// does not say which message it holds, so the declared type decides. Returns the name the
/// message gives its value.
pub fn decode_value(bytes: Bytes, declared: Option<&Type>) -> Result<(Option<String>, ir::Value)> {
    let decode_error = |e: prost::DecodeError| Error::Decode(e.to_string());
    match declared.map(|t| &t.kind) {
        Some(TypeKind::Sequence(Some(inner))) if matches!(inner.kind, TypeKind::Map { .. }) => {
            let (name, maps) = decode_sequence_of_maps(bytes)?;
            Ok((name, ir::Value::Maps(maps)))
        }
        Some(TypeKind::Sequence(_)) => {
            let s = pb::SequenceProto::decode(bytes).map_err(decode_error)?;
            let name = s.name.clone().filter(|n| !n.is_empty());
            Ok((name, ir::Value::Sequence(sequence_value(s)?)))
        }
        Some(TypeKind::Optional(_)) => {
            let o = pb::OptionalProto::decode(bytes).map_err(decode_error)?;
            let name = o.name.clone().filter(|n| !n.is_empty());
            let shown = name.clone().unwrap_or_else(|| "<unnamed>".into());
            let inner = match o.elem_type.unwrap_or(OPTIONAL_EMPTY) {
                OPTIONAL_EMPTY => None,
                OPTIONAL_TENSOR => {
                    let t = o.tensor_value.ok_or_else(|| {
                        Error::tensor(&shown, "an optional tensor without its tensor")
                    })?;
                    Some(ir::Value::Tensor(tensor_value(t)?))
                }
                OPTIONAL_SEQUENCE => {
                    let s = o.sequence_value.ok_or_else(|| {
                        Error::tensor(&shown, "an optional sequence without its sequence")
                    })?;
                    Some(ir::Value::Sequence(sequence_value(s)?))
                }
                other => {
                    return Err(Error::Unsupported(format!(
                        "optional '{shown}' of element type {other}: optionals of tensors and \
                         sequences are read"
                    )))
                }
            };
            Ok((name, ir::Value::Optional(inner.map(Box::new))))
        }
        _ => {
            let t = decode_tensor(bytes)?;
            let name = t.name.clone().filter(|n| !n.is_empty());
            Ok((name, ir::Value::Tensor(ir::stored_to_tensor(&t)?)))
        }
    }
}

/// A decoded `TensorProto` as a runtime tensor.
fn tensor_value(t: pb::TensorProto) -> Result<crate::tensor::Tensor> {
    let t = tensor(t)?;
    t.check_size()?;
    ir::stored_to_tensor(&t)
}

/// A `SequenceProto` of tensors (an empty one may leave its element type undefined).
fn sequence_value(s: pb::SequenceProto) -> Result<ir::Sequence> {
    let shown = s.name.clone().unwrap_or_else(|| "<unnamed>".into());
    let elem = s.elem_type.unwrap_or(0);
    let others = !s.sequence_values.is_empty()
        || !s.map_values.is_empty()
        || !s.optional_values.is_empty()
        || !s.sparse_tensor_values.is_empty();
    if (elem != SEQUENCE_OF_TENSORS && elem != 0) || others {
        return Err(Error::Unsupported(format!(
            "sequence '{shown}' of element type {elem}: sequences of tensors are read"
        )));
    }
    let tensors = s
        .tensor_values
        .into_iter()
        .map(tensor_value)
        .collect::<Result<Vec<_>>>()?;
    ir::Sequence::new(None, tensors).map_err(|e| Error::tensor(&shown, e.to_string()))
}

struct Decoder {
    limits: DecodeLimits,
    nodes: usize,
    depth: usize,
}

impl Decoder {
    fn graph(&mut self, g: pb::GraphProto) -> Result<Graph> {
        let name = g.name.unwrap_or_default();
        if self.depth >= self.limits.max_depth {
            return Err(Error::Limit(format!(
                "graph '{name}' is nested more than {} levels deep",
                self.limits.max_depth
            )));
        }
        self.depth += 1;
        let mut out = Graph::new(name);
        out.doc_string = g.doc_string;
        out.inputs = g.input.into_iter().map(value_info).collect::<Result<_>>()?;
        out.outputs = g
            .output
            .into_iter()
            .map(value_info)
            .collect::<Result<_>>()?;
        out.value_info = g
            .value_info
            .into_iter()
            .map(value_info)
            .collect::<Result<_>>()?;
        out.initializers = g
            .initializer
            .into_iter()
            .map(tensor)
            .collect::<Result<_>>()?;
        out.sparse_initializers = g
            .sparse_initializer
            .iter()
            .map(|s| SparseInitializer {
                name: s
                    .values
                    .as_ref()
                    .and_then(|v| v.name.clone())
                    .unwrap_or_default(),
                dims: s.dims.clone(),
                encoded: encoded(s),
            })
            .collect();
        out.quantization_annotations = g
            .quantization_annotation
            .into_iter()
            .map(|a| QuantAnnotation {
                tensor_name: a.tensor_name.unwrap_or_default(),
                params: props(a.quant_parameter_tensor_names),
            })
            .collect();
        out.metadata_props = props(g.metadata_props);
        self.nodes += g.node.len();
        if self.nodes > self.limits.max_nodes {
            return Err(Error::Limit(format!(
                "the model has more than {} nodes",
                self.limits.max_nodes
            )));
        }
        for n in g.node {
            let node = self.node(n)?;
            out.add_node(node);
        }
        self.depth -= 1;
        Ok(out)
    }

    fn node(&mut self, n: pb::NodeProto) -> Result<Node> {
        let name = n.name.clone().unwrap_or_default();
        let op_type = n.op_type.unwrap_or_default();
        let mut attributes = Vec::with_capacity(n.attribute.len());
        for a in n.attribute {
            let attr = self
                .attribute(a)
                .map_err(|e| Error::node(&name, &op_type, e.to_string()))?;
            attributes.push(attr);
        }
        let explicit_empty = u8::from(name.is_empty() && n.name.is_some())
            | (u8::from(n.domain.as_deref() == Some("")) << 1);
        Ok(Node {
            explicit_empty,
            name,
            op_type,
            domain: n.domain.unwrap_or_default(),
            overload: n.overload,
            inputs: n.input,
            outputs: n.output,
            attributes,
            doc_string: n.doc_string,
            metadata_props: props(n.metadata_props),
            device_configurations: n.device_configurations.iter().map(encoded).collect(),
        })
    }

    fn attribute(&mut self, a: pb::AttributeProto) -> Result<Attribute> {
        let name = a.name.clone().unwrap_or_default();
        let bad = |reason: String| Error::InvalidModel(format!("attribute '{name}': {reason}"));
        let kind = a.r#type.map(AT::try_from).transpose().map_err(|_| {
            bad(format!(
                "unknown attribute type {}",
                a.r#type.unwrap_or_default()
            ))
        })?;
        let value = if let Some(r) = a.ref_attr_name {
            AttrValue::Ref {
                name: r,
                kind: a.r#type.unwrap_or_default(),
            }
        } else {
            // IR versions before 3 may omit the type; infer it from the field that is set.
            let kind = match kind {
                Some(k) if k != AT::Undefined => k,
                _ => infer_attr_type(&a).ok_or_else(|| bad("has no value".into()))?,
            };
            match kind {
                AT::Float => AttrValue::Float(a.f.unwrap_or_default()),
                AT::Int => AttrValue::Int(a.i.unwrap_or_default()),
                AT::String => AttrValue::String(a.s.unwrap_or_default()),
                AT::Tensor => match a.t {
                    Some(t) => AttrValue::Tensor(Box::new(tensor(t)?)),
                    None => return Err(bad("tensor attribute without a tensor".into())),
                },
                AT::Graph => match a.g {
                    Some(g) => AttrValue::Graph(Box::new(self.graph(g)?)),
                    None => return Err(bad("graph attribute without a graph".into())),
                },
                AT::SparseTensor => match &a.sparse_tensor {
                    Some(s) => AttrValue::SparseTensor(encoded(s)),
                    None => return Err(bad("sparse tensor attribute without a value".into())),
                },
                AT::TypeProto => match a.tp {
                    Some(t) => AttrValue::Type(Box::new(ty(t)?)),
                    None => return Err(bad("type attribute without a type".into())),
                },
                AT::Floats => AttrValue::Floats(a.floats),
                AT::Ints => AttrValue::Ints(a.ints),
                AT::Strings => AttrValue::Strings(a.strings),
                AT::Tensors => {
                    AttrValue::Tensors(a.tensors.into_iter().map(tensor).collect::<Result<_>>()?)
                }
                AT::Graphs => AttrValue::Graphs(
                    a.graphs
                        .into_iter()
                        .map(|g| self.graph(g))
                        .collect::<Result<_>>()?,
                ),
                AT::SparseTensors => {
                    AttrValue::SparseTensors(a.sparse_tensors.iter().map(encoded).collect())
                }
                AT::TypeProtos => {
                    AttrValue::Types(a.type_protos.into_iter().map(ty).collect::<Result<_>>()?)
                }
                AT::Undefined => return Err(bad("has no value".into())),
            }
        };
        Ok(Attribute {
            name,
            value,
            doc_string: a.doc_string,
        })
    }

    fn function(&mut self, f: pb::FunctionProto) -> Result<Function> {
        let name = f.name.unwrap_or_default();
        let mut body = Graph::new(name.clone());
        body.inputs = f.input.into_iter().map(ValueInfo::untyped).collect();
        body.outputs = f.output.into_iter().map(ValueInfo::untyped).collect();
        body.value_info = f
            .value_info
            .into_iter()
            .map(value_info)
            .collect::<Result<_>>()?;
        for n in f.node {
            let node = self.node(n)?;
            body.add_node(node);
        }
        let attribute_defaults = f
            .attribute_proto
            .into_iter()
            .map(|a| self.attribute(a))
            .collect::<Result<_>>()
            .map_err(|e| Error::InvalidModel(format!("function '{name}': {e}")))?;
        Ok(Function {
            name,
            domain: f.domain.unwrap_or_default(),
            overload: f.overload,
            attributes: f.attribute,
            attribute_defaults,
            opset_imports: f.opset_import.into_iter().map(opset).collect(),
            body,
            doc_string: f.doc_string,
            metadata_props: props(f.metadata_props),
        })
    }
}

fn infer_attr_type(a: &pb::AttributeProto) -> Option<AT> {
    Some(if a.f.is_some() {
        AT::Float
    } else if a.i.is_some() {
        AT::Int
    } else if a.s.is_some() {
        AT::String
    } else if a.t.is_some() {
        AT::Tensor
    } else if a.g.is_some() {
        AT::Graph
    } else if a.sparse_tensor.is_some() {
        AT::SparseTensor
    } else if a.tp.is_some() {
        AT::TypeProto
    } else if !a.floats.is_empty() {
        AT::Floats
    } else if !a.ints.is_empty() {
        AT::Ints
    } else if !a.strings.is_empty() {
        AT::Strings
    } else if !a.tensors.is_empty() {
        AT::Tensors
    } else if !a.graphs.is_empty() {
        AT::Graphs
    } else if !a.sparse_tensors.is_empty() {
        AT::SparseTensors
    } else if !a.type_protos.is_empty() {
        AT::TypeProtos
    } else {
        return None;
    })
}

fn encoded<M: Message>(m: &M) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

fn decoded_all<M: Message + Default>(all: &[Bytes]) -> Result<Vec<M>> {
    all.iter()
        .map(|b| M::decode(b.clone()).map_err(|e| Error::Decode(e.to_string())))
        .collect()
}

fn opset(o: pb::OperatorSetIdProto) -> OpsetImport {
    OpsetImport {
        domain: o.domain,
        version: o.version.unwrap_or_default(),
    }
}

fn opset_back(o: &OpsetImport) -> pb::OperatorSetIdProto {
    pb::OperatorSetIdProto {
        domain: o.domain.clone(),
        version: Some(o.version),
    }
}

fn props(p: Vec<pb::StringStringEntryProto>) -> Vec<(String, String)> {
    p.into_iter()
        .map(|e| (e.key.unwrap_or_default(), e.value.unwrap_or_default()))
        .collect()
}

fn props_back(p: &[(String, String)]) -> Vec<pb::StringStringEntryProto> {
    p.iter()
        .map(|(k, v)| pb::StringStringEntryProto {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

fn value_info(v: pb::ValueInfoProto) -> Result<ValueInfo> {
    let name = v.name.unwrap_or_default();
    let ty = v
        .r#type
        .map(ty)
        .transpose()
        .map_err(|e| Error::InvalidModel(format!("value '{name}': {e}")))?;
    Ok(ValueInfo {
        name,
        ty,
        doc_string: v.doc_string,
        metadata_props: props(v.metadata_props),
    })
}

fn elem_type(code: Option<i32>) -> Result<Option<DataType>> {
    match code {
        None | Some(0) => Ok(None),
        Some(c) => DataType::from_onnx(c)
            .map(Some)
            .ok_or_else(|| Error::InvalidModel(format!("unknown element type {c}"))),
    }
}

fn tensor_type(elem: Option<i32>, shape: Option<pb::TensorShapeProto>) -> Result<TensorType> {
    use pb::tensor_shape_proto::dimension::Value;
    let shape = shape.map(|s| {
        let denotations: Vec<Option<String>> = s.dim.iter().map(|d| d.denotation.clone()).collect();
        let dims = s
            .dim
            .into_iter()
            .map(|d| match d.value {
                Some(Value::DimValue(v)) => Dim::Known(v),
                Some(Value::DimParam(p)) => Dim::Symbolic(p),
                None => Dim::Unknown,
            })
            .collect();
        Shape {
            dims,
            denotations: if denotations.iter().any(Option::is_some) {
                denotations
            } else {
                Vec::new()
            },
        }
    });
    Ok(TensorType {
        elem: elem_type(elem)?,
        shape,
    })
}

fn ty(t: pb::TypeProto) -> Result<Type> {
    use pb::type_proto::Value as V;
    let boxed = |t: Option<pb::TypeProto>| t.map(ty).transpose().map(|t| t.map(Box::new));
    let kind = match t.value {
        None => TypeKind::Unset,
        Some(V::TensorType(x)) => TypeKind::Tensor(tensor_type(x.elem_type, x.shape)?),
        Some(V::SparseTensorType(x)) => TypeKind::SparseTensor(tensor_type(x.elem_type, x.shape)?),
        Some(V::SequenceType(s)) => TypeKind::Sequence(boxed(s.elem_type.map(|b| *b))?),
        Some(V::MapType(m)) => TypeKind::Map {
            key: m.key_type,
            value: boxed(m.value_type.map(|b| *b))?,
        },
        Some(V::OptionalType(o)) => TypeKind::Optional(boxed(o.elem_type.map(|b| *b))?),
        Some(V::OpaqueType(o)) => TypeKind::Opaque {
            domain: o.domain.unwrap_or_default(),
            name: o.name.unwrap_or_default(),
        },
    };
    Ok(Type {
        kind,
        denotation: t.denotation,
    })
}

fn tensor(t: pb::TensorProto) -> Result<StoredTensor> {
    let name = t.name.clone().unwrap_or_else(|| "<unnamed>".into());
    let bad = |reason: String| Error::tensor(&name, reason);
    let elem = match t.data_type {
        None | Some(0) => return Err(bad("element type is UNDEFINED".into())),
        Some(c) => {
            DataType::from_onnx(c).ok_or_else(|| bad(format!("unknown element type {c}")))?
        }
    };
    if let Some(d) = t.dims.iter().find(|&&d| d < 0) {
        return Err(bad(format!("negative dimension {d} in dims {:?}", t.dims)));
    }
    let external = t.data_location == Some(pb::tensor_proto::DataLocation::External as i32);
    let mut fields = Vec::new();
    if t.raw_data.is_some() {
        fields.push("raw_data");
    }
    for (present, field) in [
        (!t.float_data.is_empty(), "float_data"),
        (!t.int32_data.is_empty(), "int32_data"),
        (!t.string_data.is_empty(), "string_data"),
        (!t.int64_data.is_empty(), "int64_data"),
        (!t.double_data.is_empty(), "double_data"),
        (!t.uint64_data.is_empty(), "uint64_data"),
    ] {
        if present {
            fields.push(field);
        }
    }
    if external && !fields.is_empty() {
        return Err(bad(format!(
            "external data and {} are both set",
            fields.join(", ")
        )));
    }
    if fields.len() > 1 {
        return Err(bad(format!(
            "more than one data field set: {}",
            fields.join(", ")
        )));
    }
    if let Some(loc) = t.data_location {
        if loc != 0 && loc != 1 {
            return Err(bad(format!("unknown data_location {loc}")));
        }
    }
    let payload = if external {
        let entries = props(t.external_data);
        Payload::External(ExternalData {
            entries,
            location: String::new(),
            offset: 0,
            bytes: Bytes::new(),
        })
    } else if let Some(raw) = t.raw_data {
        Payload::Raw(raw)
    } else if !t.float_data.is_empty() {
        Payload::Float(t.float_data)
    } else if !t.int32_data.is_empty() {
        Payload::Int32(t.int32_data)
    } else if !t.string_data.is_empty() {
        Payload::String(t.string_data)
    } else if !t.int64_data.is_empty() {
        Payload::Int64(t.int64_data)
    } else if !t.double_data.is_empty() {
        Payload::Double(t.double_data)
    } else if !t.uint64_data.is_empty() {
        Payload::Uint64(t.uint64_data)
    } else {
        empty_payload(elem)
    };
    Ok(StoredTensor {
        name: t.name,
        elem,
        dims: t.dims,
        payload,
        doc_string: t.doc_string,
        metadata_props: props(t.metadata_props),
        segment: t.segment.map(|s| (s.begin, s.end)),
    })
}

/// The typed field a tensor with no data field set would use; it encodes to nothing.
fn empty_payload(elem: DataType) -> Payload {
    use DataType::*;
    match elem {
        Float | Complex64 => Payload::Float(Vec::new()),
        Double | Complex128 => Payload::Double(Vec::new()),
        Int64 => Payload::Int64(Vec::new()),
        Uint32 | Uint64 => Payload::Uint64(Vec::new()),
        String => Payload::String(Vec::new()),
        _ => Payload::Int32(Vec::new()),
    }
}

fn tensor_back(t: &StoredTensor, sub: Substitute) -> pb::TensorProto {
    let mut out = pb::TensorProto {
        dims: t.dims.clone(),
        data_type: Some(t.elem.onnx()),
        segment: t
            .segment
            .map(|(begin, end)| pb::tensor_proto::Segment { begin, end }),
        name: t.name.clone(),
        doc_string: t.doc_string.clone(),
        metadata_props: props_back(&t.metadata_props),
        ..Default::default()
    };
    let substituted = sub(t);
    match substituted.as_ref().unwrap_or(&t.payload) {
        Payload::Raw(b) => out.raw_data = Some(b.clone()),
        Payload::Float(v) => out.float_data = v.clone(),
        Payload::Int32(v) => out.int32_data = v.clone(),
        Payload::Int64(v) => out.int64_data = v.clone(),
        Payload::Double(v) => out.double_data = v.clone(),
        Payload::Uint64(v) => out.uint64_data = v.clone(),
        Payload::String(v) => out.string_data = v.clone(),
        Payload::External(e) => {
            out.data_location = Some(pb::tensor_proto::DataLocation::External as i32);
            out.external_data = props_back(&e.entries);
        }
    }
    out
}

fn type_back(t: &Type) -> pb::TypeProto {
    use pb::type_proto as tp;
    let boxed = |t: &Option<Box<Type>>| t.as_ref().map(|t| Box::new(type_back(t)));
    let value = match &t.kind {
        TypeKind::Unset => None,
        TypeKind::Tensor(x) => {
            let (elem_type, shape) = tensor_type_back(x);
            Some(tp::Value::TensorType(tp::Tensor { elem_type, shape }))
        }
        TypeKind::SparseTensor(x) => {
            let (elem_type, shape) = tensor_type_back(x);
            Some(tp::Value::SparseTensorType(tp::SparseTensor {
                elem_type,
                shape,
            }))
        }
        TypeKind::Sequence(e) => Some(tp::Value::SequenceType(Box::new(tp::Sequence {
            elem_type: boxed(e),
        }))),
        TypeKind::Map { key, value } => Some(tp::Value::MapType(Box::new(tp::Map {
            key_type: *key,
            value_type: boxed(value),
        }))),
        TypeKind::Optional(e) => Some(tp::Value::OptionalType(Box::new(tp::Optional {
            elem_type: boxed(e),
        }))),
        TypeKind::Opaque { domain, name } => Some(tp::Value::OpaqueType(tp::Opaque {
            domain: Some(domain.clone()),
            name: Some(name.clone()),
        })),
    };
    pb::TypeProto {
        denotation: t.denotation.clone(),
        value,
    }
}

fn tensor_type_back(t: &TensorType) -> (Option<i32>, Option<pb::TensorShapeProto>) {
    use pb::tensor_shape_proto::{dimension::Value, Dimension};
    let shape = t.shape.as_ref().map(|s| pb::TensorShapeProto {
        dim: s
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| Dimension {
                denotation: s.denotations.get(i).cloned().flatten(),
                value: match d {
                    Dim::Known(v) => Some(Value::DimValue(*v)),
                    Dim::Symbolic(p) => Some(Value::DimParam(p.clone())),
                    Dim::Unknown => None,
                },
            })
            .collect(),
    });
    (t.elem.map(DataType::onnx), shape)
}

fn value_info_back(v: &ValueInfo) -> pb::ValueInfoProto {
    pb::ValueInfoProto {
        name: Some(v.name.clone()),
        r#type: v.ty.as_ref().map(type_back),
        doc_string: v.doc_string.clone(),
        metadata_props: props_back(&v.metadata_props),
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn set_or_empty(s: &str, explicit: bool) -> Option<String> {
    (explicit || !s.is_empty()).then(|| s.to_owned())
}

fn node_back(n: &Node, sub: Substitute) -> pb::NodeProto {
    pb::NodeProto {
        input: n.inputs.clone(),
        output: n.outputs.clone(),
        name: set_or_empty(&n.name, n.explicit_empty & 1 != 0),
        op_type: Some(n.op_type.clone()),
        domain: set_or_empty(&n.domain, n.explicit_empty & 2 != 0),
        overload: n.overload.clone(),
        attribute: n
            .attributes
            .iter()
            .map(|a| attribute_back(a, sub))
            .collect(),
        doc_string: n.doc_string.clone(),
        metadata_props: props_back(&n.metadata_props),
        device_configurations: n
            .device_configurations
            .iter()
            .filter_map(|b| pb::NodeDeviceConfigurationProto::decode(b.clone()).ok())
            .collect(),
    }
}

fn attribute_back(a: &Attribute, sub: Substitute) -> pb::AttributeProto {
    let mut out = pb::AttributeProto {
        name: Some(a.name.clone()),
        doc_string: a.doc_string.clone(),
        ..Default::default()
    };
    let kind = match &a.value {
        AttrValue::Float(v) => {
            out.f = Some(*v);
            AT::Float
        }
        AttrValue::Int(v) => {
            out.i = Some(*v);
            AT::Int
        }
        AttrValue::String(v) => {
            out.s = Some(v.clone());
            AT::String
        }
        AttrValue::Tensor(t) => {
            out.t = Some(tensor_back(t, sub));
            AT::Tensor
        }
        AttrValue::Graph(g) => {
            out.g = Some(graph_back(g, sub));
            AT::Graph
        }
        AttrValue::SparseTensor(b) => {
            out.sparse_tensor = pb::SparseTensorProto::decode(b.clone()).ok();
            AT::SparseTensor
        }
        AttrValue::Type(t) => {
            out.tp = Some(type_back(t));
            AT::TypeProto
        }
        AttrValue::Floats(v) => {
            out.floats = v.clone();
            AT::Floats
        }
        AttrValue::Ints(v) => {
            out.ints = v.clone();
            AT::Ints
        }
        AttrValue::Strings(v) => {
            out.strings = v.clone();
            AT::Strings
        }
        AttrValue::Tensors(v) => {
            out.tensors = v.iter().map(|t| tensor_back(t, sub)).collect();
            AT::Tensors
        }
        AttrValue::Graphs(v) => {
            out.graphs = v.iter().map(|g| graph_back(g, sub)).collect();
            AT::Graphs
        }
        AttrValue::SparseTensors(v) => {
            out.sparse_tensors = v
                .iter()
                .filter_map(|b| pb::SparseTensorProto::decode(b.clone()).ok())
                .collect();
            AT::SparseTensors
        }
        AttrValue::Types(v) => {
            out.type_protos = v.iter().map(type_back).collect();
            AT::TypeProtos
        }
        AttrValue::Ref { name, kind } => {
            out.ref_attr_name = Some(name.clone());
            out.r#type = Some(*kind);
            return out;
        }
    };
    out.r#type = Some(kind as i32);
    out
}

fn graph_back(g: &Graph, sub: Substitute) -> pb::GraphProto {
    pb::GraphProto {
        node: g.nodes().map(|(_, n)| node_back(n, sub)).collect(),
        name: Some(g.name.clone()),
        initializer: g.initializers.iter().map(|t| tensor_back(t, sub)).collect(),
        sparse_initializer: g
            .sparse_initializers
            .iter()
            .filter_map(|s| pb::SparseTensorProto::decode(s.encoded.clone()).ok())
            .collect(),
        doc_string: g.doc_string.clone(),
        input: g.inputs.iter().map(value_info_back).collect(),
        output: g.outputs.iter().map(value_info_back).collect(),
        value_info: g.value_info.iter().map(value_info_back).collect(),
        quantization_annotation: g
            .quantization_annotations
            .iter()
            .map(|a| pb::TensorAnnotation {
                tensor_name: Some(a.tensor_name.clone()),
                quant_parameter_tensor_names: props_back(&a.params),
            })
            .collect(),
        metadata_props: props_back(&g.metadata_props),
    }
}

fn function_back(f: &Function, sub: Substitute) -> pb::FunctionProto {
    pb::FunctionProto {
        name: Some(f.name.clone()),
        input: f.body.inputs.iter().map(|v| v.name.clone()).collect(),
        output: f.body.outputs.iter().map(|v| v.name.clone()).collect(),
        attribute: f.attributes.clone(),
        attribute_proto: f
            .attribute_defaults
            .iter()
            .map(|a| attribute_back(a, sub))
            .collect(),
        node: f.body.nodes().map(|(_, n)| node_back(n, sub)).collect(),
        doc_string: f.doc_string.clone(),
        opset_import: f.opset_imports.iter().map(opset_back).collect(),
        domain: non_empty(&f.domain),
        overload: f.overload.clone(),
        value_info: f.body.value_info.iter().map(value_info_back).collect(),
        metadata_props: props_back(&f.metadata_props),
    }
}

/// Decodes two serialized models and reports whether the messages are equal, for round-trip
/// tests. Not part of the stable API.
#[doc(hidden)]
pub fn same_model_message(a: &[u8], b: &[u8]) -> Result<bool> {
    let a = pb::ModelProto::decode(a).map_err(|e| Error::Decode(e.to_string()))?;
    let b = pb::ModelProto::decode(b).map_err(|e| Error::Decode(e.to_string()))?;
    Ok(a == b)
}

/// Describes the first difference between two serialized models, for round-trip test messages.
#[doc(hidden)]
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<String> {
    let a = pb::ModelProto::decode(a).ok()?;
    let b = pb::ModelProto::decode(b).ok()?;
    let (da, db) = (format!("{a:#?}"), format!("{b:#?}"));
    da.lines()
        .zip(db.lines())
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| format!("line {i}: {x:?} != {y:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::Session;
    use crate::Tensor;

    fn int64s(name: Option<&str>, dims: &[i64], values: &[i64]) -> pb::TensorProto {
        pb::TensorProto {
            name: name.map(str::to_owned),
            dims: dims.to_vec(),
            data_type: Some(DataType::Int64.onnx()),
            int64_data: values.to_vec(),
            ..Default::default()
        }
    }

    /// Issue 12: a `Gather` reading a `sparse_initializer` failed with "input 'w' is not
    /// defined"; the interpreter densifies it, and saving keeps it sparse.
    #[test]
    fn gather_on_a_sparse_initializer() {
        let value = |name: &str, elem: DataType, dims: &[i64]| pb::ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(pb::TypeProto {
                value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                    elem_type: Some(elem.onnx()),
                    shape: Some(pb::TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&d| pb::tensor_shape_proto::Dimension {
                                value: Some(pb::tensor_shape_proto::dimension::Value::DimValue(d)),
                                ..Default::default()
                            })
                            .collect(),
                    }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
        // w is 3x2 with 7 at (0, 1) and 9 at (2, 0), given by coordinates.
        let sparse = pb::SparseTensorProto {
            values: Some(int64s(Some("w"), &[2], &[7, 9])),
            indices: Some(int64s(None, &[2, 2], &[0, 1, 2, 0])),
            dims: vec![3, 2],
        };
        let graph = pb::GraphProto {
            name: Some("g".into()),
            node: vec![pb::NodeProto {
                op_type: Some("Gather".into()),
                input: vec!["w".into(), "i".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![value("i", DataType::Int64, &[2])],
            output: vec![value("y", DataType::Int64, &[2, 2])],
            sparse_initializer: vec![sparse],
            ..Default::default()
        };
        let model = pb::ModelProto {
            ir_version: Some(8),
            opset_import: vec![pb::OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(13),
            }],
            graph: Some(graph),
            ..Default::default()
        };
        let bytes = Bytes::from(model.encode_to_vec());
        let model = decode(bytes.clone(), DecodeLimits::default()).unwrap();
        let i = Tensor::from_vec(DataType::Int64, &[2], vec![2i64, 0]).unwrap();
        let y = Session::new(&model).run(vec![("i".into(), i)]).unwrap();
        let expected = Tensor::from_vec(DataType::Int64, &[2, 2], vec![9i64, 0, 0, 7]).unwrap();
        assert_eq!(y[0].1, expected);
        let saved = pb::ModelProto::decode(Bytes::from(encode(&model).unwrap())).unwrap();
        let graph = saved.graph.unwrap();
        assert_eq!(graph.sparse_initializer.len(), 1);
        assert!(graph.initializer.is_empty());
    }

    #[test]
    fn a_sparse_index_out_of_range_is_an_error_naming_the_tensor() {
        let sparse = pb::SparseTensorProto {
            values: Some(int64s(Some("w"), &[1], &[7])),
            indices: Some(int64s(None, &[1], &[6])),
            dims: vec![3, 2],
        };
        let s = ir::SparseInitializer {
            name: "w".into(),
            dims: vec![3, 2],
            encoded: Bytes::from(sparse.encode_to_vec()),
        };
        let err = crate::interp::sparse_to_tensor(&s).unwrap_err().to_string();
        assert!(err.contains("'w'") && err.contains("index 6"), "{err}");
    }
}
