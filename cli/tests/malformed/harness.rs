//! What `tests/malformed.rs` and `tests/file_guarantees.rs` share: running the binary as a user
//! would, with a time limit, and snapshotting a directory to prove a failed run changed nothing.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every entry under `dir` (relative path) with its kind, and for a file its mode and contents.
pub fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                format!("symlink to {}", target.display())
            } else if meta.is_dir() {
                walk(root, &path, out);
                "dir".to_owned()
            } else if meta.is_file() {
                use std::os::unix::fs::PermissionsExt;
                let mode = meta.permissions().mode() & 0o7777;
                format!("file {mode:o} {:?}", std::fs::read(&path).unwrap())
            } else {
                "special".to_owned()
            };
            out.insert(rel, what);
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// How a run of a command ended and what it printed.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Run {
    /// Checks the run failed the way every multigather error does (exit 2, one `error:` line)
    /// with every one of `expected` in the message.
    pub fn assert_error(&self, expected: &[&str]) {
        let err = &self.stderr;
        assert_eq!(self.code, Some(2), "exit code; stderr: {err}");
        assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
        assert!(err.starts_with("error: "), "{err}");
        for word in expected {
            assert!(err.contains(word), "expected {word:?} in: {err}");
        }
    }

    /// Checks the run succeeded.
    pub fn assert_success(&self) {
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
    }
}

/// The multigather binary, to run in `dir` with no standard input.
pub fn multigather(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_multigather"));
    cmd.args(args).current_dir(dir).stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to completion within two minutes (a hostile file must not make it hang), its
/// output captured through files so a chatty child cannot block on a full pipe.
pub fn run(mut cmd: Command) -> Run {
    let logs = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (logs.path().join("stdout"), logs.path().join("stderr"));
    let mut child = cmd
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("the command starts");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{cmd:?} did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: std::fs::read(&out_path).unwrap(),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
    }
}

/// Runs multigather in `dir` (see [`run`]).
pub fn run_in(dir: &Path, args: &[&str]) -> Run {
    run(multigather(dir, args))
}

/// Runs multigather in `dir` through `sh -c`, after the shell commands in `prelude` (a `ulimit`,
/// a `umask`, a `trap`), so the limits apply to the binary alone.
pub fn run_under(dir: &Path, prelude: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("{prelude}; exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_multigather"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null());
    run(cmd)
}
