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

mod common;

use common::run_node_test as run_test;

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
