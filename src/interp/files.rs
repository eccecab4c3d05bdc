//! Tensors in files: serialized `TensorProto` (`.pb`, the ONNX test-data format) and numpy `.npy`,
//! and a directory of inputs matched to a graph's inputs.
//!
//! Inputs in a directory are matched by name first (`NAME.pb` / `NAME.npy`, or a `.pb` whose
//! tensor carries the name of a graph input), then by position: `input_K.pb` binds the K-th graph
//! input that has no initializer, as in the ONNX test-data layout.

use std::path::Path;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::tensor::Tensor;
use crate::DataType;

use super::{stored_to_tensor, tensor_to_stored};

/// Reads a tensor from a `.pb` (serialized `TensorProto`) or `.npy` file; returns the name the
/// file gives it (a `.pb` tensor's name, else none).
///
/// # Example
/// ```
/// use multigather::interp::files::{read_tensor, write_tensor_pb};
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
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let in_file = |e: Error| Error::InvalidTensor {
        tensor: path.display().to_string(),
        reason: e.to_string(),
    };
    if path.extension().is_some_and(|e| e == "npy") {
        return Ok((None, read_npy(&bytes).map_err(in_file)?));
    }
    let stored = crate::proto::decode_tensor(Bytes::from(bytes)).map_err(in_file)?;
    let tensor = stored_to_tensor(&stored).map_err(in_file)?;
    Ok((stored.name.filter(|n| !n.is_empty()), tensor))
}

/// Writes `t` as a serialized `TensorProto` named `name`, atomically.
pub fn write_tensor_pb(path: &Path, name: &str, t: &Tensor) -> Result<()> {
    let stored = tensor_to_stored(name, t)?;
    crate::io::write_atomic(path, &crate::proto::encode_tensor(&stored))
}

/// The inputs of `graph` found in `dir`, in the graph's input order.
pub fn read_inputs_dir(graph: &Graph, dir: &Path) -> Result<Vec<(String, Tensor)>> {
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
    let mut found: Vec<(String, Tensor)> = Vec::new();
    for path in entries {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if stem.starts_with("output_") {
            continue;
        }
        let (name, tensor) = read_tensor(&path)?;
        let by_position = stem
            .strip_prefix("input_")
            .and_then(|k| k.parse::<usize>().ok())
            .and_then(|k| feedable.get(k).copied());
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
        found.push((target.to_owned(), tensor));
    }
    found.sort_by_key(|(n, _)| graph.inputs.iter().position(|v| &v.name == n));
    Ok(found)
}

/// The expected outputs of an ONNX test-data set: `output_K.pb` in order.
pub fn read_outputs_dir(dir: &Path) -> Result<Vec<Tensor>> {
    let mut outputs = Vec::new();
    for k in 0.. {
        let path = dir.join(format!("output_{k}.pb"));
        if !path.exists() {
            break;
        }
        outputs.push(read_tensor(&path)?.1);
    }
    Ok(outputs)
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
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        Some(header[at..].trim_start().strip_prefix(':')?.trim_start())
    };
    let descr = field("descr")
        .and_then(|v| v.strip_prefix('\'')?.split('\'').next())
        .ok_or_else(|| bad("no descr"))?;
    if field("fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(Error::Unsupported(".npy files in Fortran order".into()));
    }
    let shape_text = field("shape")
        .and_then(|v| v.strip_prefix('(')?.split(')').next())
        .ok_or_else(|| bad("no shape"))?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad("bad shape")))
        .collect::<Result<_>>()?;
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
}
