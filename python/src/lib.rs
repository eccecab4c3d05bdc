//! `multigather._native`: the Rust half of the Python package. The Python half
//! (`multigather/__init__.py`) converts between `onnx` / numpy objects and the bytes this module
//! takes and returns; this module loads, rewrites, lowers, runs and verifies with the library and
//! raises `multigather.Error` with the library's one-line message.
//!
//! The module also exports the onnxruntime entry point `RegisterCustomOps`: it links
//! `multigather-ort`, whose `#[no_mangle]` entry point every cdylib exports, so the module's file
//! is the custom-op library that `get_library_path()` returns (as onnxruntime-extensions does).
//! [`_native`] names the crate so the linker keeps it.

use std::collections::HashMap;
use std::path::PathBuf;

use multigather::interp::{RunOptions, Session};
use multigather::io::{ExternalPolicy, SaveOptions};
use multigather::ir::Model;
use multigather::ir::{stored_to_tensor, Type, TypeKind, Value};
use multigather::pass::{
    DefineMultiaxisFunctions, GatherKind, GatherToMultiaxis, LowerMultiaxis, RewriteConfig,
};
use multigather::verify::{prove, prove_rewrite, DrawOptions, Proof};
use multigather::{proto, Tensor};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

create_exception!(
    _native,
    Error,
    PyException,
    "A model, file or tensor that multigather rejects; the message is the library's one line."
);

/// A model given as serialized bytes or as a file path (which keeps external data in place).
#[derive(FromPyObject)]
enum Source {
    Bytes(Vec<u8>),
    Path(PathBuf),
}

fn err(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// Files are read, not mapped: a mapped file truncated by another process would kill the Python
/// interpreter with `SIGBUS` (the command line installs a handler in a process of its own; a
/// library inside another program cannot), where a read comes up short and fails with an error
/// naming the file.
fn load(source: &Source) -> Result<Model, multigather::Error> {
    match source {
        Source::Bytes(b) => multigather::io::load_bytes(b),
        Source::Path(p) => {
            let options = multigather::io::LoadOptions {
                access: multigather::io::FileAccess::Read,
                ..Default::default()
            };
            multigather::io::load_with(p, &options)
        }
    }
}

/// The model's bytes, saved to `output` first when given (as saved: external data references
/// included), with large tensors moved to `external_data` beside it when given. An output that is
/// the file the model came from is refused unless `in_place` allows it.
fn finish(
    py: Python<'_>,
    model: &Model,
    source: &Source,
    output: Option<PathBuf>,
    external_data: Option<String>,
    in_place: bool,
) -> PyResult<Py<PyBytes>> {
    let bytes = match output {
        Some(path) => {
            if let Source::Path(input) = source {
                if !in_place && multigather::io::same_file(input, &path) {
                    return Err(err(format!(
                        "output {} is the input file; pass in_place=True to overwrite it",
                        path.display()
                    )));
                }
            }
            let options = SaveOptions {
                external: match external_data {
                    Some(file) => ExternalPolicy::File {
                        file,
                        threshold: 1024,
                    },
                    None => ExternalPolicy::Keep,
                },
            };
            py.detach(|| multigather::io::save_encoded(model, &path, &options))
        }
        None => py.detach(|| multigather::io::to_bytes(model)),
    }
    .map_err(err)?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// Rewrites every gather; returns `(model bytes, report JSON)`.
#[pyfunction]
#[pyo3(signature = (source, ops, skip, with_function_body, output=None, external_data=None, in_place=false))]
#[allow(clippy::too_many_arguments)]
fn rewrite(
    py: Python<'_>,
    source: Source,
    ops: Option<Vec<String>>,
    skip: Vec<String>,
    with_function_body: bool,
    output: Option<PathBuf>,
    external_data: Option<String>,
    in_place: bool,
) -> PyResult<(Py<PyBytes>, String)> {
    let kinds = match ops {
        None => GatherKind::ONNX.to_vec(),
        Some(ops) => ops
            .iter()
            .map(|o| {
                GatherKind::from_name(o).ok_or_else(|| {
                    err(format!(
                        "unknown op kind '{o}' (expected Gather, GatherElements or GatherND)"
                    ))
                })
            })
            .collect::<PyResult<_>>()?,
    };
    let (model, report) = py
        .detach(|| -> Result<_, multigather::Error> {
            let mut model = load(&source)?;
            let report = GatherToMultiaxis::rewrite(&mut model, RewriteConfig { kinds, skip })?;
            if with_function_body {
                DefineMultiaxisFunctions::define(&mut model)?;
            }
            Ok((model, report))
        })
        .map_err(err)?;
    let json = serde_json::to_string(&report).map_err(err)?;
    Ok((
        finish(py, &model, &source, output, external_data, in_place)?,
        json,
    ))
}

/// Lowers every `GatherMultiaxis` to standard ONNX; returns `(model bytes, summary)`.
#[pyfunction]
#[pyo3(signature = (source, output=None, external_data=None, in_place=false))]
fn lower(
    py: Python<'_>,
    source: Source,
    output: Option<PathBuf>,
    external_data: Option<String>,
    in_place: bool,
) -> PyResult<(Py<PyBytes>, String)> {
    let (model, summary) = py
        .detach(|| -> Result<_, multigather::Error> {
            let mut model = load(&source)?;
            let report = LowerMultiaxis::lower(&mut model)?;
            Ok((model, report.summary()))
        })
        .map_err(err)?;
    Ok((
        finish(py, &model, &source, output, external_data, in_place)?,
        summary,
    ))
}

/// Tensors from `(name, TensorProto bytes)` pairs.
fn decode(inputs: Vec<(String, Vec<u8>)>) -> Result<Vec<(String, Tensor)>, multigather::Error> {
    inputs
        .into_iter()
        .map(|(name, b)| {
            let stored = proto::decode_tensor(bytes::Bytes::from(b))?;
            Ok((name, stored_to_tensor(&stored)?))
        })
        .collect()
}

/// Values from `(name, bytes, kind)` triples: `kind` is `tensor` (a `TensorProto`), `sequence`
/// (a `SequenceProto`) or `optional` (an `OptionalProto`).
fn decode_values(
    inputs: Vec<(String, Vec<u8>, String)>,
) -> Result<Vec<(String, Value)>, multigather::Error> {
    inputs
        .into_iter()
        .map(|(name, b, kind)| {
            let declared = match kind.as_str() {
                "tensor" => None,
                "sequence" => Some(Type::from(TypeKind::Sequence(None))),
                "optional" => Some(Type::from(TypeKind::Optional(None))),
                other => {
                    return Err(multigather::Error::Eval(format!(
                        "input '{name}' of unknown kind '{other}'"
                    )))
                }
            };
            let (_, value) = proto::decode_value(bytes::Bytes::from(b), declared.as_ref())?;
            Ok((name, value))
        })
        .collect()
}

/// Runs a model in the interpreter; inputs are `(name, bytes, kind)` (see [`decode_values`]),
/// outputs `(name, bytes, kind)`: `tensor` (a `TensorProto`), `sequence` (a `SequenceProto`),
/// `optional` (an `OptionalProto`) or `maps` (`ZipMap`'s output, a `SequenceProto` of
/// `MapProto`s).
#[pyfunction]
fn run(
    py: Python<'_>,
    source: Source,
    inputs: Vec<(String, Vec<u8>, String)>,
) -> PyResult<Vec<(String, Py<PyBytes>, &'static str)>> {
    let outputs = py
        .detach(|| -> Result<_, multigather::Error> {
            let model = load(&source)?;
            let outputs = Session::new(&model).run_values(decode_values(inputs)?)?;
            outputs
                .into_iter()
                .map(|(name, value)| {
                    let kind = match &value {
                        Value::Tensor(_) => "tensor",
                        Value::Maps(_) => "maps",
                        Value::Sequence(_) => "sequence",
                        Value::Optional(_) => "optional",
                    };
                    Ok((name.clone(), proto::encode_value(&name, &value)?, kind))
                })
                .collect::<Result<Vec<_>, multigather::Error>>()
        })
        .map_err(err)?;
    Ok(outputs
        .into_iter()
        .map(|(name, b, kind)| (name, PyBytes::new(py, &b).unbind(), kind))
        .collect())
}

/// Proves a rewrite with the library's `verify::prove` (or `prove_rewrite`, when `rewritten`
/// is not given), as `multigather verify` does: the same checks, draws, size search, memory
/// budget and comparison. Inputs not given are drawn with `seed` and the sizes in `dims`.
/// Returns the proof as JSON, the object `multigather verify --json` prints.
#[pyfunction]
#[pyo3(signature = (original, rewritten, inputs, seed, dims, max_memory=None))]
fn verify(
    py: Python<'_>,
    original: Source,
    rewritten: Option<Source>,
    inputs: Option<Vec<(String, Vec<u8>)>>,
    seed: u64,
    dims: HashMap<String, usize>,
    max_memory: Option<usize>,
) -> PyResult<String> {
    let proof = py
        .detach(|| -> Result<Proof, multigather::Error> {
            let original = load(&original)?;
            let rewritten = rewritten.as_ref().map(load).transpose()?;
            let given = decode(inputs.unwrap_or_default())?
                .into_iter()
                .map(|(name, t)| (name, Value::Tensor(t)))
                .collect();
            let draw = DrawOptions { seed, dims, given };
            let options = RunOptions {
                threads: None,
                max_memory,
                ..RunOptions::default()
            };
            match &rewritten {
                Some(rewritten) => prove(&original, rewritten, &draw, &options),
                None => prove_rewrite(&original, &draw, &options),
            }
        })
        .map_err(err)?;
    serde_json::to_string(&proof).map_err(err)
}

/// The command line (`multigather ARGS...`); returns the exit code. `argv[0]` is the program.
/// The binary's own `main`, with its `SIGBUS` handler and closed-pipe handling: the console
/// script is a process of its own, as the binary is.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(|| i32::from(multigather_cli::main_status(argv)))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Keeps `multigather-ort` (and with it `RegisterCustomOps`) in the module.
    std::hint::black_box(multigather_ort::RegisterCustomOps as *const ());
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_function(wrap_pyfunction!(rewrite, m)?)?;
    m.add_function(wrap_pyfunction!(lower, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    Ok(())
}
