//! ONNX conformance: the committed subset of the ONNX backend node tests
//! (`tests/conformance/node/`, written by `scripts/gen_node_tests.py`) runs in the interpreter and
//! matches the recorded outputs.
//!
//! `tests/conformance/passing.txt` is the manifest of every node test of the full suite that
//! passes; CI regenerates the suite, runs it with `multigather test` and diffs the passing set
//! against the manifest, so a regression shows up as a diff. Here every committed test must be in
//! the manifest and pass.

use std::collections::BTreeSet;
use std::path::Path;

use multigather::interp::Session;
use multigather::io::files::{read_input_values, read_output_values};
use multigather::verify::close_enough_values;

/// Runs one test directory; the error says which data set and output failed. Sequences and
/// optionals are read from their `SequenceProto` / `OptionalProto` files and compared element
/// by element.
fn run_test(dir: &Path) -> Result<(), String> {
    let model = multigather::io::load(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let session = Session::new(&model);
    let declared = session.output_types().map_err(|e| e.to_string())?;
    let mut sets: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    for set in sets {
        let inputs = read_input_values(&model.graph, &set).map_err(|e| e.to_string())?;
        let expected = read_output_values(&set, &declared).map_err(|e| e.to_string())?;
        let actual = session.run_values(inputs).map_err(|e| e.to_string())?;
        for (k, want) in expected.iter().enumerate() {
            let (_, got) = actual.get(k).ok_or(format!("output {k} missing"))?;
            close_enough_values(want, got)
                .map_err(|why| format!("{}: output {k}: {why}", set.display()))?;
        }
    }
    Ok(())
}

#[test]
fn committed_node_tests_pass_and_are_in_the_manifest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
    let manifest: BTreeSet<String> = std::fs::read_to_string(root.join("passing.txt"))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let mut tests: Vec<_> = std::fs::read_dir(root.join("node"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    tests.sort();
    assert!(tests.len() >= 50, "the committed subset is missing");
    let mut failures = Vec::new();
    for dir in &tests {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !manifest.contains(&name) {
            failures.push(format!("{name}: committed but not in passing.txt"));
        } else if let Err(why) = run_test(dir) {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
