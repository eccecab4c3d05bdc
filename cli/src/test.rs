//! `multigather test`: runs ONNX test-data directories (`model.onnx` + `test_data_set_N/` with
//! `input_K.pb` and `output_K.pb`) and compares the outputs within the usual tolerances (exact
//! for integers, booleans and strings; sequences and optionals, read from `SequenceProto` and
//! `OptionalProto` files, element by element; `ZipMap`'s sequences of maps, read from
//! `SequenceProto` files, key by key with the float tolerance).
//!
//! Each test prints one line — `ok`, `FAIL` with the reason, or `skip` when the model uses an
//! operator this build does not support — and the run ends with `N passed, M failed, K skipped`.
//! A model with a random operator (`ops::is_random`: `RandomUniformLike`, `Bernoulli`, `Dropout`
//! in training mode, ...) draws other values than the runtime that recorded its outputs: when the
//! values of an output that a draw reaches differ, only its element type, shape and finiteness
//! are compared, and the `ok` line says so; every other output is compared as usual.
//! A test passes only when it compared every output: a test with no `test_data_set_N`
//! directory, or a set missing an `output_K.pb` of the model's outputs, fails and says so.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::Result;
use multigather::interp::Session;
use multigather::io::files::{read_input_values, read_output_values};
use multigather::ir::Value;
use multigather::verify::close_enough_values;

use super::options::Test;
use super::{output, Outcome};

/// What became of one test.
enum Verdict {
    Pass,
    /// Passed on type and shape only: the model draws random values.
    PassRandom,
    Fail(String),
    Skip(String),
}

/// Runs every test directory under `options.dirs` and prints one line per test.
pub fn run(options: Test) -> Result<Outcome> {
    let mut tests = Vec::new();
    for dir in &options.dirs {
        collect(dir, &mut tests)?;
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for test in &tests {
        let name = test.file_name().map_or_else(
            || test.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        match run_one(test) {
            Verdict::Pass => {
                passed += 1;
                output::println(&format!("ok   {name}"))?;
            }
            Verdict::PassRandom => {
                passed += 1;
                output::println(&format!(
                    "ok   {name} (random draw: element type, shape and finiteness compared, not values)"
                ))?;
            }
            Verdict::Fail(why) => {
                failed += 1;
                output::println(&format!("FAIL {name}: {why}"))?;
            }
            Verdict::Skip(why) => {
                skipped += 1;
                output::println(&format!("skip {name}: {why}"))?;
            }
        }
    }
    output::println(&format!(
        "{passed} passed, {failed} failed, {skipped} skipped"
    ))?;
    Ok(if failed == 0 {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

/// The test directories under `dir` (itself, if it holds a `model.onnx`), sorted.
fn collect(dir: &Path, tests: &mut Vec<PathBuf>) -> Result<()> {
    if dir.join("model.onnx").is_file() {
        tests.push(dir.to_owned());
        return Ok(());
    }
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    if subdirs.is_empty() {
        anyhow::bail!(
            "{}: no model.onnx in it or its subdirectories",
            dir.display()
        );
    }
    subdirs.sort();
    tests.extend(subdirs);
    Ok(())
}

fn run_one(dir: &Path) -> Verdict {
    let model = match multigather::io::load_with(&dir.join("model.onnx"), &super::load_options()) {
        Ok(m) => m,
        Err(e) => return Verdict::Fail(format!("loading: {e}")),
    };
    let session = Session::new(&model);
    if let Err(e) = session.check() {
        return match e {
            multigather::Error::Unsupported(why) => Verdict::Skip(why),
            other => Verdict::Fail(other.to_string()),
        };
    }
    let sets = match data_sets(dir) {
        Ok(sets) => sets,
        Err(why) => return Verdict::Fail(why),
    };
    let random = random_outputs(&model);
    let mut drew = false;
    for set in &sets {
        if let Err(why) = run_set(&model, &session, set, &random, &mut drew) {
            return match why {
                SetError::Unsupported(w) => Verdict::Skip(w),
                SetError::Fail(w) => Verdict::Fail(w),
            };
        }
    }
    if drew {
        Verdict::PassRandom
    } else {
        Verdict::Pass
    }
}

/// The `test_data_set_N` directories of a test, sorted by N. A test with none compares nothing:
/// that is a failure that names what the directory holds instead, never a pass.
fn data_sets(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (mut sets, mut others) = (Vec::new(), Vec::new());
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if !path.is_dir() {
            continue;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name
            .strip_prefix("test_data_set_")
            .and_then(|k| k.parse::<usize>().ok())
        {
            Some(k) => sets.push((k, path)),
            None => others.push(name),
        }
    }
    if sets.is_empty() {
        others.sort();
        let found = if others.is_empty() {
            String::new()
        } else {
            format!(" (directories found: {})", others.join(", "))
        };
        return Err(format!(
            "no test_data_set_N directory, so nothing was compared{found}"
        ));
    }
    sets.sort();
    Ok(sets.into_iter().map(|(_, p)| p).collect())
}

/// The main graph's outputs that a random draw reaches: the outputs of a node that draws (or
/// whose subgraphs hold one that does), and everything computed from them. A `Dropout` draws only
/// in training: with a `training_mode` input that is not a constant false (opset 12 on), or
/// `is_test = 0`, that attribute's default (before opset 7); otherwise it is an identity and its
/// outputs are compared.
fn random_outputs(model: &multigather::ir::Model) -> HashSet<String> {
    use multigather::ir::{is_onnx_domain, Graph, Node};
    fn draws(node: &Node, graph: &Graph, opset: i64) -> bool {
        if !is_onnx_domain(&node.domain) || !multigather::ops::is_random(&node.op_type) {
            return node
                .subgraphs()
                .any(|g| g.nodes_unordered().any(|n| draws(n, g, opset)));
        }
        if node.op_type != "Dropout" {
            return true;
        }
        if opset < 7 && node.attr_int("is_test", 0).is_ok_and(|t| t == 0) {
            return true;
        }
        match node.inputs.get(2).filter(|i| !i.is_empty()) {
            None => false,
            Some(mode) => !graph
                .initializer(mode)
                .and_then(|t| t.to_i64s().ok())
                .is_some_and(|v| v.iter().all(|&x| x == 0)),
        }
    }
    let graph = &model.graph;
    let opset = model.opset("").unwrap_or(1);
    let mut tainted: HashSet<String> = HashSet::new();
    for (_, node) in graph.nodes() {
        let reached = draws(node, graph, opset) || node.inputs.iter().any(|i| tainted.contains(i));
        if reached {
            tainted.extend(node.outputs.iter().filter(|o| !o.is_empty()).cloned());
        }
    }
    graph
        .outputs
        .iter()
        .filter(|o| tainted.contains(&o.name))
        .map(|o| o.name.clone())
        .collect()
}

enum SetError {
    Unsupported(String),
    Fail(String),
}

/// Runs one data set. An output in `random` whose values differ passes when its element type
/// and shape match and its values are finite where the expected ones are; `drew` records that.
/// Every output of the model must have its `output_K.pb`.
fn run_set(
    model: &multigather::ir::Model,
    session: &Session,
    set: &Path,
    random: &HashSet<String>,
    drew: &mut bool,
) -> Result<(), SetError> {
    let set_name = set
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fail = |e: multigather::Error| match e {
        multigather::Error::Unsupported(w) => SetError::Unsupported(w),
        other => SetError::Fail(format!("{set_name}: {other}")),
    };
    let inputs = read_input_values(&model.graph, set).map_err(fail)?;
    let declared = session.output_types().map_err(fail)?;
    let expected = read_output_values(set, &declared).map_err(fail)?;
    if expected.is_empty() {
        return Err(SetError::Fail(format!(
            "{set_name}: no output_K.pb, so nothing was compared"
        )));
    }
    if let Some(unmatched) = model.graph.outputs.get(expected.len()) {
        return Err(SetError::Fail(format!(
            "{set_name}: no output_{}.pb for output '{}', so it was not compared",
            expected.len(),
            unmatched.name
        )));
    }
    let actual = session.run_values(inputs).map_err(fail)?;
    for (k, want) in expected.iter().enumerate() {
        let Some((name, got)) = actual.get(k) else {
            return Err(SetError::Fail(format!("{set_name}: output {k} is missing")));
        };
        match close_enough_values(want, got) {
            Ok(()) => {}
            Err(_) if random.contains(name) && same_kind(want, got) => *drew = true,
            Err(why) => {
                return Err(SetError::Fail(format!(
                    "{set_name}: output '{name}': {why}"
                )))
            }
        }
    }
    Ok(())
}

/// Whether two tensors have one element type and shape, and `got` is finite wherever `want` is
/// (sequences of maps are never drawn at random, so never of a kind).
fn same_kind(want: &Value, got: &Value) -> bool {
    let (Value::Tensor(want), Value::Tensor(got)) = (want, got) else {
        return false;
    };
    if want.dtype() != got.dtype() || want.shape() != got.shape() {
        return false;
    }
    let finite = |t: &multigather::Tensor| -> Option<Vec<bool>> {
        match t.dtype() {
            multigather::DataType::Float => Some(
                t.as_slice::<f32>()
                    .ok()?
                    .iter()
                    .map(|v| v.is_finite())
                    .collect(),
            ),
            multigather::DataType::Double => Some(
                t.as_slice::<f64>()
                    .ok()?
                    .iter()
                    .map(|v| v.is_finite())
                    .collect(),
            ),
            _ => None,
        }
    };
    match (finite(want), finite(got)) {
        (Some(w), Some(g)) => w.iter().zip(&g).all(|(&w, &g)| !w || g),
        _ => true,
    }
}
