//! Every version of every operator.
//!
//! `tests/old_opsets/op_versions.txt` (written by `scripts/gen_op_versions.py` from onnx's schema
//! history) lists each version of each operator of the default domain and `ai.onnx.ml`; each one
//! that is not deprecated is either registered (`ops::registry`) or listed with a reason in the
//! table of `docs/conformance.md` under "Operator versions not run", and nothing registered is
//! listed there.
//!
//! `tests/old_opsets/node/` (written by `scripts/gen_old_opset_tests.py legacy`) holds node tests
//! of the attributes older versions had (`broadcast`/`axis`, `is_test`, `spatial`,
//! `consumed_inputs`, shapes and sizes as attributes), with expected outputs transcribed from
//! each version's specification in numpy; every one must pass.

use std::collections::BTreeMap;
use std::path::Path;

use multigather::ops::registry;

mod common;

/// One version of one operator: (domain, op type, first opset).
type Version = (String, String, i64);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The versions of onnx's schema history, with whether each is deprecated.
fn schema_versions() -> Vec<(Version, bool)> {
    let text = std::fs::read_to_string(root().join("tests/old_opsets/op_versions.txt")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let since = f[2].parse().unwrap();
            let version = (f[0].to_owned(), f[1].to_owned(), since);
            (version, f.get(3) == Some(&"deprecated"))
        })
        .collect()
}

/// The rows of the table of versions not run in `docs/conformance.md`, with their reasons.
fn documented_gaps() -> BTreeMap<Version, String> {
    let doc = std::fs::read_to_string(root().join("docs/conformance.md")).unwrap();
    let start = doc
        .find("<!-- versions-not-run -->")
        .expect("docs/conformance.md lacks the table of versions not run");
    let end = start + doc[start..].find("<!-- end -->").unwrap();
    doc[start..end]
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Domain") && !l.starts_with("|--"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let op = cells[1].trim_matches('`').to_owned();
            let since = cells[2].parse().unwrap();
            ((cells[0].to_owned(), op, since), cells[3].to_owned())
        })
        .collect()
}

#[test]
fn every_operator_version_runs_or_is_documented() {
    let versions = schema_versions();
    assert!(
        versions.len() > 600,
        "the list of operator versions is missing"
    );
    let gaps = documented_gaps();
    let mut problems = Vec::new();
    for ((domain, op, since), deprecated) in &versions {
        let domain_key = if domain == "ai.onnx" { "" } else { domain };
        let runs = registry().lookup(domain_key, op, *since).is_some();
        let key = (domain.clone(), op.clone(), *since);
        match (runs, gaps.get(&key)) {
            (true, Some(_)) => problems.push(format!("{domain} {op}-{since}: runs but is listed")),
            (false, None) if !deprecated => {
                problems.push(format!("{domain} {op}-{since}: neither runs nor is listed"))
            }
            (false, Some(reason)) if reason.is_empty() => {
                problems.push(format!("{domain} {op}-{since}: listed without a reason"))
            }
            _ => {}
        }
    }
    for key in gaps.keys() {
        if !versions.iter().any(|(v, _)| v == key) {
            problems.push(format!(
                "{} {}-{}: listed but not in onnx's history",
                key.0, key.1, key.2
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn legacy_node_tests_pass() {
    let dir = root().join("tests/old_opsets/node");
    let mut tests: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    tests.sort();
    assert!(tests.len() >= 60, "the legacy node tests are missing");
    let failures: Vec<String> = tests
        .iter()
        .filter_map(|t| {
            let name = t.file_name().unwrap().to_string_lossy().into_owned();
            common::run_node_test(t)
                .err()
                .map(|why| format!("{name}: {why}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
