//! The GatherMultiaxis conformance suite (`tests/gather_conformance/`, written by
//! `scripts/gen_gather_conformance.py`) through the command line, as another runtime would run
//! it: `multigather test` passes every test of `node/`, and every model of
//! `expected_failures/` fails with exit code 2 and the message its manifest line gives.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/gather_conformance")
}

fn multigather(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_multigather"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn every_conformance_test_passes() {
    let node = suite().join("node");
    let count = std::fs::read_dir(&node).unwrap().count();
    assert!(count >= 100, "the suite is missing ({count} tests)");
    let out = multigather(&["test".as_ref(), node.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.ends_with(&format!("{count} passed, 0 failed, 0 skipped\n")),
        "{stdout}"
    );
    assert!(out.status.success());
}

#[test]
fn every_expected_failure_fails_with_its_message() {
    let manifest = std::fs::read_to_string(suite().join("expected_failures.txt")).unwrap();
    let entries: Vec<(&str, &str)> = manifest
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once('\t').unwrap())
        .collect();
    let dirs: BTreeSet<String> = std::fs::read_dir(suite().join("expected_failures"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let listed: BTreeSet<String> = entries.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(dirs, listed, "the manifest and the directories disagree");
    for (name, message) in entries {
        let dir = suite().join("expected_failures").join(name);
        let out = multigather(&[
            "run".as_ref(),
            dir.join("model.onnx").as_os_str(),
            "--inputs".as_ref(),
            dir.join("test_data_set_0").as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        let expected = format!("node '{name}' (multigather.GatherMultiaxis): {message}");
        assert!(stderr.contains(&expected), "{name}: {stderr}");
    }
}
