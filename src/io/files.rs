//! Tensors in files: serialized `TensorProto` (`.pb`, the ONNX test-data format) and numpy `.npy`,
//! and a directory of inputs matched to a graph's inputs; sequences and optionals as serialized
//! `SequenceProto`s and `OptionalProto`s, and `ZipMap`'s sequences of maps as `SequenceProto`s
//! of `MapProto`s, as the ONNX test data holds them.
//!
//! Inputs in a directory are matched by name first (`NAME.pb` / `NAME.npy`, or a `.pb` whose
//! tensor carries the name of a graph input), then by position: `input_K.pb` binds the K-th graph
//! input that has no initializer, as in the ONNX test-data layout. A protobuf file does not say
//! which message it holds: a file whose name (`NAME.pb`, `input_K.pb`) binds it to an input
//! declared a sequence or an optional is read as one; every other file as a tensor.

use std::path::Path;

use bytes::Bytes;

use super::{read_input, write_atomic, LoadOptions, Origin};
use crate::error::{Error, Result};
use crate::ir::{stored_to_tensor, tensor_to_stored, Graph, Type, TypeKind, Value};
use crate::proto::{decode_tensor, decode_value, encode_tensor, encode_value};
use crate::tensor::Tensor;
use crate::DataType;

/// Reads a tensor from a `.pb` (serialized `TensorProto`) or `.npy` file; returns the name the
/// file gives it (a `.pb` tensor's name, else none).
///
/// # Example
/// ```
/// use multigather::io::files::{read_tensor, write_tensor_pb};
/// use multigather::{DataType, Tensor};
/// let dir = std::env::temp_dir().join(format!("mg-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let t = Tensor::from_vec(DataType::Int32, &[2], vec![4i32, -1])?;
/// write_tensor_pb(&dir.join("x.pb"), "x", &t)?;
/// let (name, back) = read_tensor(&dir.join("x.pb"))?;
/// assert_eq!((name.as_deref(), back), (Some("x"), t));
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn read_tensor(path: &Path) -> Result<(Option<String>, Tensor)> {
    read_tensor_from(path, Origin::Named)
}

/// Like [`read_tensor`], for a file named by the user or found in a directory (which must then be
/// a regular file: see [`read_input`]).
fn read_tensor_from(path: &Path, origin: Origin) -> Result<(Option<String>, Tensor)> {
    let bytes = read_input(path, max_tensor_file(), origin)?;
    let npy = path.extension().is_some_and(|e| e == "npy");
    tensor_from_bytes(bytes, npy).map_err(|e| Error::InvalidTensor {
        tensor: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// The largest tensor file read: the largest tensor the loader accepts, and room for a
/// `TensorProto`'s other fields.
fn max_tensor_file() -> u64 {
    LoadOptions::default()
        .max_tensor_bytes
        .saturating_add(1 << 20)
}

/// Decodes the contents of a tensor file: a numpy `.npy` file when `npy`, else a serialized
/// `TensorProto`; returns the name a `TensorProto` gives its tensor.
///
/// # Example
/// ```
/// use multigather::io::files::tensor_from_bytes;
/// let err = tensor_from_bytes(b"not numpy".to_vec(), true).unwrap_err();
/// assert!(err.to_string().contains("missing magic"));
/// ```
pub fn tensor_from_bytes(bytes: Vec<u8>, npy: bool) -> Result<(Option<String>, Tensor)> {
    if npy {
        return Ok((None, read_npy(&bytes)?));
    }
    let stored = decode_tensor(Bytes::from(bytes))?;
    let tensor = stored_to_tensor(&stored)?;
    Ok((stored.name.filter(|n| !n.is_empty()), tensor))
}

/// Writes `t` as a serialized `TensorProto` named `name`, atomically.
pub fn write_tensor_pb(path: &Path, name: &str, t: &Tensor) -> Result<()> {
    let stored = tensor_to_stored(name, t)?;
    write_atomic(path, &encode_tensor(&stored))
}

/// The inputs of `graph` found in `dir`, in the graph's input order, which must be tensors
/// ([`read_input_values`] reads sequences and optionals too).
pub fn read_inputs_dir(graph: &Graph, dir: &Path) -> Result<Vec<(String, Tensor)>> {
    read_input_values(graph, dir)?
        .into_iter()
        .map(|(name, v)| match v {
            Value::Tensor(t) => Ok((name, t)),
            other => Err(Error::InvalidTensor {
                tensor: dir.display().to_string(),
                reason: format!("input '{name}' is a {}, not a tensor", other.kind()),
            }),
        })
        .collect()
}

/// The inputs of `graph` found in `dir`, in the graph's input order: tensors, and the
/// sequences and optionals of the inputs declared so (see the module's documentation).
///
/// # Example
/// ```
/// use multigather::io::files::{read_input_values, write_value_pb};
/// use multigather::ir::{Graph, Sequence, Type, TypeKind, Value, ValueInfo};
/// use multigather::{DataType, Tensor};
/// let dir = std::env::temp_dir().join(format!("mg-doc-seq-in-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("s", Type::from(TypeKind::Sequence(None))));
/// let t = Tensor::from_vec(DataType::Float, &[1], vec![2.5f32])?;
/// let seq = Value::Sequence(Sequence::new(None, vec![t])?);
/// write_value_pb(&dir.join("input_0.pb"), "s", &seq)?;
/// assert_eq!(read_input_values(&g, &dir)?, vec![("s".to_string(), seq)]);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn read_input_values(graph: &Graph, dir: &Path) -> Result<Vec<(String, Value)>> {
    let feedable: Vec<&str> = graph
        .inputs
        .iter()
        .map(|v| v.name.as_str())
        .filter(|n| graph.initializer(n).is_none())
        .collect();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pb" || e == "npy"))
        .collect();
    entries.sort();
    let mut found: Vec<(String, Value)> = Vec::new();
    for path in entries {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if stem.starts_with("output_") {
            continue;
        }
        let by_position = stem
            .strip_prefix("input_")
            .and_then(|k| k.parse::<usize>().ok())
            .and_then(|k| feedable.get(k).copied());
        // A file its name binds to an input declared a sequence or an optional is read as one.
        let by_stem = graph
            .inputs
            .iter()
            .map(|v| v.name.as_str())
            .find(|n| *n == stem)
            .or(by_position);
        let container = by_stem
            .and_then(|n| graph.inputs.iter().find(|v| v.name == n))
            .and_then(|v| v.ty.as_ref())
            .filter(|t| is_container(t))
            .filter(|_| path.extension().is_some_and(|e| e == "pb"));
        let (name, value) = match container {
            Some(declared) => {
                let bytes = read_input(&path, max_tensor_file(), Origin::Listed)?;
                let (_, value) = decode_value(Bytes::from(bytes), Some(declared)).map_err(|e| {
                    Error::InvalidTensor {
                        tensor: path.display().to_string(),
                        reason: e.to_string(),
                    }
                })?;
                (by_stem.map(str::to_owned), value)
            }
            None => {
                let (name, tensor) = read_tensor_from(&path, Origin::Listed)?;
                (name, Value::Tensor(tensor))
            }
        };
        let target = [name.as_deref(), Some(stem.as_str())]
            .into_iter()
            .flatten()
            .find(|n| graph.inputs.iter().any(|v| v.name == *n))
            .or(by_position);
        let Some(target) = target else {
            return Err(Error::InvalidTensor {
                tensor: path.display().to_string(),
                reason: "matches no input of the model by name or position".into(),
            });
        };
        if found.iter().any(|(n, _)| n == target) {
            return Err(Error::InvalidTensor {
                tensor: path.display().to_string(),
                reason: format!("a second file for input '{target}'"),
            });
        }
        found.push((target.to_owned(), value));
    }
    found.sort_by_key(|(n, _)| graph.inputs.iter().position(|v| &v.name == n));
    Ok(found)
}

/// Whether a declared type is read from a `SequenceProto` or an `OptionalProto`.
fn is_container(t: &Type) -> bool {
    matches!(t.kind, TypeKind::Sequence(_) | TypeKind::Optional(_))
}

/// The expected outputs of an ONNX test-data set: `output_K.pb` in order. The numbers must run
/// from 0 without a gap: `output_1.pb` without `output_0.pb` is an error, not a set with no
/// outputs.
pub fn read_outputs_dir(dir: &Path) -> Result<Vec<Tensor>> {
    numbered_outputs(dir)?
        .iter()
        .map(|path| Ok(read_tensor_from(path, Origin::Listed)?.1))
        .collect()
}

/// Like [`read_outputs_dir`], for outputs of any kind: `output_K.pb` is read as the message of
/// `declared[K]`, the type of output `K` (a tensor where it is `None` or past the end): a
/// `SequenceProto` of tensors for a sequence, of `MapProto`s for a sequence of maps (`ZipMap`'s,
/// see `interp::Session::output_keys`), an `OptionalProto` for an optional.
///
/// # Example
/// ```
/// use multigather::io::files::{read_output_values, write_value_pb};
/// use multigather::ir::{MapKeys, SequenceOfMaps, Type, TypeKind, Value};
/// use multigather::{DataType, Tensor};
/// let dir = std::env::temp_dir().join(format!("mg-doc-maps-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let values = Tensor::from_vec(DataType::Float, &[1, 2], vec![0.25f32, 0.75])?;
/// let maps = Value::Maps(SequenceOfMaps::new(MapKeys::Int64(vec![4, 7]), values)?);
/// write_value_pb(&dir.join("output_0.pb"), "y", &maps)?;
/// let map = Type::from(TypeKind::Map { key: None, value: None });
/// let declared = Type::from(TypeKind::Sequence(Some(Box::new(map))));
/// assert_eq!(read_output_values(&dir, &[Some(declared)])?, vec![maps]);
/// assert!(read_output_values(&dir, &[None]).is_err());
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn read_output_values(dir: &Path, declared: &[Option<Type>]) -> Result<Vec<Value>> {
    numbered_outputs(dir)?
        .iter()
        .enumerate()
        .map(|(k, path)| {
            let Some(declared) = declared.get(k).and_then(Option::as_ref) else {
                return Ok(Value::Tensor(read_tensor_from(path, Origin::Listed)?.1));
            };
            let bytes = read_input(path, max_tensor_file(), Origin::Listed)?;
            let (_, value) = decode_value(Bytes::from(bytes), Some(declared)).map_err(|e| {
                Error::InvalidTensor {
                    tensor: path.display().to_string(),
                    reason: e.to_string(),
                }
            })?;
            Ok(value)
        })
        .collect()
}

/// Writes a value atomically, as the ONNX test data holds it: a tensor as a serialized
/// `TensorProto`, a sequence as a `SequenceProto`, an optional as an `OptionalProto`, a
/// sequence of maps as a `SequenceProto` of `MapProto`s.
pub fn write_value_pb(path: &Path, name: &str, value: &Value) -> Result<()> {
    write_atomic(path, &encode_value(name, value)?)
}

/// The `output_K.pb` files of `dir`, in order; a gap in the numbers is an error.
fn numbered_outputs(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut numbered: Vec<(usize, std::path::PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let k = name.strip_prefix("output_")?.strip_suffix(".pb")?;
            let k = k.parse::<usize>().ok().filter(|n| n.to_string() == k)?;
            Some((k, p))
        })
        .collect();
    numbered.sort();
    let mut paths = Vec::new();
    for (expected, (k, path)) in numbered.into_iter().enumerate() {
        if k != expected {
            return Err(Error::io(
                dir.join(format!("output_{expected}.pb")),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("missing, but output_{k}.pb is there"),
                ),
            ));
        }
        paths.push(path);
    }
    Ok(paths)
}

/// Parses a numpy `.npy` file (format 1.0 to 3.0, C order, little-endian or byte-sized types).
pub fn read_npy(bytes: &[u8]) -> Result<Tensor> {
    let bad = |reason: &str| Error::Eval(format!("not a valid .npy file: {reason}"));
    let rest = bytes
        .strip_prefix(b"\x93NUMPY")
        .ok_or_else(|| bad("missing magic"))?;
    let (major, rest) = rest.split_first().ok_or_else(|| bad("truncated"))?;
    let rest = rest.get(1..).ok_or_else(|| bad("truncated"))?;
    let (len, rest) = match major {
        1 => {
            let l = rest.get(..2).ok_or_else(|| bad("truncated"))?;
            (u16::from_le_bytes([l[0], l[1]]) as usize, &rest[2..])
        }
        2 | 3 => {
            let l = rest.get(..4).ok_or_else(|| bad("truncated"))?;
            (
                u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize,
                &rest[4..],
            )
        }
        v => return Err(bad(&format!("unknown version {v}"))),
    };
    let header = rest.get(..len).ok_or_else(|| bad("truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let data = &rest[len..];
    let NpyHeader {
        descr,
        fortran_order,
        shape,
    } = parse_npy_header(header).map_err(|why| bad(&why))?;
    if fortran_order {
        return Err(Error::Unsupported(".npy files in Fortran order".into()));
    }
    let descr = descr.as_str();
    let dtype = match descr.trim_start_matches(['<', '|', '=']) {
        "f4" => DataType::Float,
        "f8" => DataType::Double,
        "f2" => DataType::Float16,
        "i1" => DataType::Int8,
        "i2" => DataType::Int16,
        "i4" => DataType::Int32,
        "i8" => DataType::Int64,
        "u1" => DataType::Uint8,
        "u2" => DataType::Uint16,
        "u4" => DataType::Uint32,
        "u8" => DataType::Uint64,
        "b1" => DataType::Bool,
        "c8" => DataType::Complex64,
        "c16" => DataType::Complex128,
        other => return Err(Error::Unsupported(format!(".npy element type '{other}'"))),
    };
    Ok(Tensor::from_bytes(dtype, &shape, data)?)
}

/// The three fields of a `.npy` header.
struct NpyHeader {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses a `.npy` header, a Python dict literal such as
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`, the way numpy does: exactly the
/// three keys, each once (a repeated key is ambiguous: numpy takes the last, a naive reader the
/// first), and dimensions that fit the signed 64-bit dims of ONNX.
fn parse_npy_header(header: &str) -> std::result::Result<NpyHeader, String> {
    let mut p = header.trim_end_matches(['\n', ' ', '\0']).trim_start();
    fn eat(p: &mut &str, token: &str) -> bool {
        *p = p.trim_start();
        match p.strip_prefix(token) {
            Some(rest) => {
                *p = rest;
                true
            }
            None => false,
        }
    }
    if !eat(&mut p, "{") {
        return Err("the header is not a dict".into());
    }
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        if eat(&mut p, "}") {
            break;
        }
        let key = string_literal(&mut p)?;
        if !eat(&mut p, ":") {
            return Err(format!("no ':' after '{key}'"));
        }
        p = p.trim_start();
        let twice = || format!("the header gives '{key}' twice");
        match key.as_str() {
            "descr" => {
                if descr.replace(string_literal(&mut p)?).is_some() {
                    return Err(twice());
                }
            }
            "fortran_order" => {
                let value = if eat(&mut p, "True") {
                    true
                } else if eat(&mut p, "False") {
                    false
                } else {
                    return Err("fortran_order is not True or False".into());
                };
                if fortran.replace(value).is_some() {
                    return Err(twice());
                }
            }
            "shape" => {
                if shape.replace(shape_tuple(&mut p)?).is_some() {
                    return Err(twice());
                }
            }
            other => return Err(format!("unknown key '{other}'")),
        }
        if !eat(&mut p, ",") {
            if eat(&mut p, "}") {
                break;
            }
            return Err("expected ',' or '}' between fields".into());
        }
    }
    if !p.trim().is_empty() {
        return Err("text after the header dict".into());
    }
    Ok(NpyHeader {
        descr: descr.ok_or("no descr")?,
        fortran_order: fortran.ok_or("no fortran_order")?,
        shape: shape.ok_or("no shape")?,
    })
}

/// A Python string literal in single or double quotes, without escapes.
fn string_literal(p: &mut &str) -> std::result::Result<String, String> {
    *p = p.trim_start();
    let quote = p
        .chars()
        .next()
        .filter(|c| *c == '\'' || *c == '"')
        .ok_or("expected a quoted string")?;
    let body = &p[1..];
    let end = body.find(quote).ok_or("unterminated string")?;
    let text = &body[..end];
    if text.contains('\\') {
        return Err("escapes in header strings are not supported".into());
    }
    *p = &body[end + 1..];
    Ok(text.to_owned())
}

/// A tuple of dimensions: `()`, `(3,)`, `(2, 3)`.
fn shape_tuple(p: &mut &str) -> std::result::Result<Vec<usize>, String> {
    let body = p.strip_prefix('(').ok_or("shape is not a tuple")?;
    let end = body.find(')').ok_or("unterminated shape")?;
    let mut pieces: Vec<&str> = body[..end].split(',').map(str::trim).collect();
    if pieces.last() == Some(&"") {
        pieces.pop();
    }
    let dims = pieces
        .into_iter()
        .map(|s| {
            let dim = s
                .strip_suffix('L')
                .unwrap_or(s)
                .parse::<u64>()
                .map_err(|_| format!("bad dimension '{s}' in the shape"))?;
            if dim > i64::MAX as u64 {
                return Err(format!("dimension {dim} is larger than 2^63-1"));
            }
            usize::try_from(dim).map_err(|_| format!("dimension {dim} does not fit in memory"))
        })
        .collect::<std::result::Result<Vec<usize>, String>>()?;
    *p = &body[end + 1..];
    Ok(dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn npy_files_parse() {
        let data: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = read_npy(&npy("<f4", "(2,)", &data)).unwrap();
        assert_eq!(t.shape(), &[2]);
        assert_eq!(t.to_vec::<f32>().unwrap(), [1.5, -2.0]);
        let s = read_npy(&npy("<i8", "()", &7i64.to_le_bytes())).unwrap();
        assert_eq!(s.shape(), &[] as &[usize]);
    }

    #[test]
    fn npy_errors_are_clear() {
        assert!(read_npy(b"garbage")
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let short = npy("<f4", "(3,)", &[0u8; 4]);
        assert!(read_npy(&short).is_err());
        let err = read_npy(&npy("<U3", "(1,)", &[0u8; 12])).unwrap_err();
        assert!(err.to_string().contains("U3"), "{err}");
    }

    /// A `.npy` file with `header` as its header dict and no data.
    fn npy_header(header: &str) -> Vec<u8> {
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out
    }

    #[test]
    fn npy_duplicate_fortran_order_key() {
        // numpy takes the last of two equal keys: this file is Fortran order to numpy.
        let twice =
            "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), 'fortran_order': True}";
        let err = read_npy(&npy_header(twice)).unwrap_err().to_string();
        assert!(err.contains("'fortran_order' twice"), "{err}");
        for (header, why) in [
            (
                "{'descr': '<f4', 'descr': '<i8', 'fortran_order': False, 'shape': (0,)}",
                "'descr' twice",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), 'shape': (1,)}",
                "'shape' twice",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), 'extra': 1}",
                "unknown key 'extra'",
            ),
            ("{'descr': '<f4', 'shape': (0,)}", "no fortran_order"),
            (
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (0,)}",
                "True or False",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,3)}",
                "bad dimension",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (0,)} x",
                "after the header",
            ),
        ] {
            let err = read_npy(&npy_header(header)).unwrap_err().to_string();
            assert!(err.contains(why), "{header}: {err}");
        }
    }

    #[test]
    fn npy_dims_beyond_int64() {
        let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 18446744073709551615), }";
        let err = read_npy(&npy_header(huge)).unwrap_err().to_string();
        assert!(err.contains("larger than 2^63-1"), "{err}");
        // The largest dim ONNX can state, beside a zero, is an empty tensor.
        let widest =
            "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 9223372036854775807), }";
        let t = read_npy(&npy_header(widest)).unwrap();
        assert_eq!(t.shape(), &[0, i64::MAX as usize]);
        // Fortran order, given once, is still refused as unsupported.
        let fortran = "{'descr': '<f4', 'fortran_order': True, 'shape': (0,), }";
        let err = read_npy(&npy_header(fortran)).unwrap_err().to_string();
        assert!(err.contains("Fortran"), "{err}");
    }
}
