//! What multigather promises about files, checked through the binary: a failed run writes
//! nothing and changes nothing (no partial output, no temporary file left, no file replaced), the
//! input and the files it reads its data from are never overwritten, and the same input with the
//! same options gives the same bytes.
//!
//! Failures are made real rather than mocked: a directory nothing may write to (`/proc`, or one
//! made immutable with `chattr +i`, which binds root too), a device that is always full, a file
//! size limit (`ulimit -f`, with `SIGXFSZ` ignored so the write fails with `EFBIG` instead of
//! killing the process), and an output file made immutable so the final rename fails. Where the
//! machine cannot make one of these (no `chattr`, no `mknod`), the test says so on stderr and
//! checks the rest.

#[path = "malformed/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use harness::{multigather, run_in, snapshot, Run};
use multigather::io::{ExternalPolicy, SaveOptions};
use multigather::ir::{Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
use multigather::DataType;

/// An embedding lookup over a `rows` x 4 float table whose values start at `first`, plus
/// `padding` small unused initializers (to make the model itself large).
fn embedding_model(rows: usize, first: f32, padding: usize) -> Model {
    let mut g = Graph::new("embed");
    g.inputs.push(ValueInfo::new(
        "ids",
        Type::tensor(DataType::Int64, vec![Dim::Known(3)]),
    ));
    g.outputs.push(ValueInfo::new(
        "rows",
        Type::tensor(DataType::Float, vec![Dim::Known(3), Dim::Known(4)]),
    ));
    let table: Vec<u8> = (0..rows * 4)
        .flat_map(|i| (first + i as f32).to_le_bytes())
        .collect();
    g.initializers.push(StoredTensor::raw(
        Some("table"),
        DataType::Float,
        &[rows as i64, 4],
        Bytes::from(table),
    ));
    for i in 0..padding {
        let name = format!("pad_{i}");
        g.initializers
            .push(StoredTensor::from_i64s(Some(&name), &[8], &[i as i64; 8]));
    }
    g.add_node(Node::new("Gather", "lookup", ["table", "ids"], ["rows"]));
    Model::new(g, 13)
}

/// Saves `model` as `dir/model.onnx`, its table in `dir/weights.bin` when `external`.
fn save_input(dir: &Path, model: &Model, external: bool) {
    let external = if external {
        ExternalPolicy::File {
            file: "weights.bin".into(),
            threshold: 1024,
        }
    } else {
        ExternalPolicy::Inline
    };
    multigather::io::save_with(model, &dir.join("model.onnx"), &SaveOptions { external }).unwrap();
}

/// A scratch directory with `model.onnx` (a 64-row table) inline, or with `weights.bin`.
fn scratch(external: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    save_input(dir.path(), &embedding_model(64, 0.0, 0), external);
    dir
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(name)
        .join("model.onnx")
}

/// Runs multigather in `dir` and checks it failed with `expected` and changed nothing there.
fn assert_refused_in(dir: &Path, args: &[&str], expected: &[&str]) -> Run {
    let before = snapshot(dir);
    let run = run_in(dir, args);
    run.assert_error(expected);
    assert_eq!(snapshot(dir), before, "a failed run changes nothing");
    run
}

/// A file or directory made immutable with `chattr +i` (which binds root too) until dropped.
struct Immutable(PathBuf);

impl Immutable {
    /// `None` (with a note on stderr) where the machine cannot do it.
    fn set(path: &Path) -> Option<Immutable> {
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "note: `chattr +i {}` failed here; that part is not checked",
                path.display()
            );
        }
        ok.then(|| Immutable(path.to_owned()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// Runs multigather under a file size limit of `kib` KiB, so writing past it fails with EFBIG.
fn run_limited(dir: &Path, kib: u64, args: &[&str]) -> Run {
    // `ulimit -f` counts 512-byte blocks; an ignored SIGXFSZ makes the write return EFBIG.
    let prelude = format!("trap '' XFSZ; ulimit -f {}", kib * 2);
    harness::run_under(dir, &prelude, args)
}

// ---------------------------------------------------------------------------------------------

/// `rewrite model.onnx -o OUT` with every tensor of 16 bytes or more moved into `w.bin`.
fn rewrite_external(out: &str) -> [&str; 8] {
    [
        "rewrite",
        "model.onnx",
        "-o",
        out,
        "--external-data",
        "w.bin",
        "--external-threshold",
        "16",
    ]
}

#[test]
fn unwritable_output_directory() {
    let dir = scratch(false);
    // /proc takes no new files, whoever asks.
    let run = assert_refused_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "/proc/multigather-test.onnx"],
        &["saving /proc/multigather-test.onnx"],
    );
    assert!(
        !Path::new("/proc/multigather-test.onnx").exists(),
        "{}",
        run.stderr
    );

    // A directory of our own that nobody may write to.
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    let Some(_guard) = Immutable::set(&locked) else {
        return;
    };
    assert_refused_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "locked/out.onnx"],
        &["saving locked/out.onnx", "locked"],
    );
    assert_refused_in(
        dir.path(),
        &rewrite_external("locked/out.onnx"),
        &["saving locked/out.onnx"],
    );
}

#[test]
fn output_in_a_missing_directory() {
    let dir = scratch(false);
    assert_refused_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "missing/out.onnx"],
        &["saving missing/out.onnx", "No such file or directory"],
    );
}

#[test]
fn output_equal_to_input_needs_in_place() {
    let dir = scratch(false);
    std::os::unix::fs::symlink("model.onnx", dir.path().join("link.onnx")).unwrap();
    let absolute = dir.path().join("model.onnx");
    for output in [
        "model.onnx",
        "./model.onnx",
        "link.onnx",
        absolute.to_str().unwrap(),
    ] {
        assert_refused_in(
            dir.path(),
            &["rewrite", "model.onnx", "-o", output],
            &["is the input file; pass --in-place to overwrite it"],
        );
        assert_refused_in(
            dir.path(),
            &["lower", "model.onnx", "-o", output],
            &["is the input file; pass --in-place to overwrite it"],
        );
    }
    run_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "model.onnx", "--in-place"],
    )
    .assert_success();
    let rewritten = multigather::io::load(&absolute).unwrap();
    assert_eq!(
        rewritten.op_histogram().get("multigather.GatherMultiaxis"),
        Some(&1)
    );
    let names: Vec<String> = snapshot(dir.path()).into_keys().collect();
    assert_eq!(
        names,
        ["link.onnx", "model.onnx"],
        "no temporary file is left"
    );
}

#[test]
fn output_that_is_a_directory() {
    let dir = scratch(false);
    std::fs::create_dir(dir.path().join("out.onnx")).unwrap();
    std::fs::write(dir.path().join("out.onnx/keep.txt"), "mine").unwrap();
    assert_refused_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "out.onnx"],
        &["saving out.onnx", "is a directory"],
    );
    assert_refused_in(
        dir.path(),
        &rewrite_external("out.onnx"),
        &["saving out.onnx", "is a directory"],
    );
    // The external data file may not be a directory either.
    std::fs::create_dir(dir.path().join("w.bin")).unwrap();
    assert_refused_in(
        dir.path(),
        &rewrite_external("new.onnx"),
        &["saving new.onnx", "w.bin", "not a regular file"],
    );
}

#[test]
fn never_overwrites_the_data_the_model_reads() {
    let dir = scratch(true);
    let original = multigather::io::load(dir.path().join("model.onnx")).unwrap();
    assert_refused_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "weights.bin"],
        &["saving weights.bin", "reads tensor data from this file"],
    );
    assert_refused_in(
        dir.path(),
        &[
            "rewrite",
            "model.onnx",
            "-o",
            "out.onnx",
            "--external-data",
            "weights.bin",
        ],
        &[
            "saving out.onnx",
            "weights.bin",
            "reads tensor data from this file",
        ],
    );
    assert_refused_in(
        dir.path(),
        &[
            "rewrite",
            "model.onnx",
            "-o",
            "out.onnx",
            "--external-data",
            "out.onnx",
        ],
        &["saving out.onnx", "would be the output model itself"],
    );
    let again = multigather::io::load(dir.path().join("model.onnx")).unwrap();
    assert_eq!(again, original);
}

#[test]
fn external_data_is_never_written_through_a_symlink() {
    let dir = scratch(false);
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("precious.bin");
    std::fs::write(&target, "precious").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("w.bin")).unwrap();
    assert_refused_in(
        dir.path(),
        &rewrite_external("out.onnx"),
        &["saving out.onnx", "w.bin", "symbolic link"],
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
}

/// Rewrites `model.onnx` in `dir` into `out.onnx` and returns its bytes.
fn rewritten_bytes(dir: &Path) -> Vec<u8> {
    run_in(dir, &["rewrite", "model.onnx", "-o", "out.onnx"]).assert_success();
    let bytes = std::fs::read(dir.join("out.onnx")).unwrap();
    std::fs::remove_file(dir.join("out.onnx")).unwrap();
    bytes
}

#[test]
fn a_pipe_output_is_written_into_not_replaced() {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let dir = scratch(false);
    let expected = rewritten_bytes(dir.path());
    let pipe = dir.path().join("pipe");
    let made = Command::new("mkfifo").arg(&pipe).status().unwrap();
    assert!(made.success());
    // Opened for reading without blocking, so the binary's open for writing finds a reader, and
    // a binary that wrongly replaced the pipe leaves this test reading nothing instead of hanging.
    const O_NONBLOCK: i32 = 0o4000;
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(&pipe)
        .unwrap();
    // The model is far smaller than a pipe's buffer, so the binary never waits for the reader.
    assert!(expected.len() < 16 * 1024);
    run_in(dir.path(), &["rewrite", "model.onnx", "-o", "pipe"]).assert_success();
    let mut received = Vec::new();
    reader.read_to_end(&mut received).unwrap();
    assert_eq!(received, expected);
    let meta = std::fs::symlink_metadata(&pipe).unwrap();
    assert!(meta.file_type().is_fifo(), "the pipe is still a pipe");
    let names: Vec<String> = snapshot(dir.path()).into_keys().collect();
    assert_eq!(names, ["model.onnx", "pipe"], "no temporary file is left");
}

#[test]
fn a_full_device() {
    use std::os::unix::fs::FileTypeExt;
    let dir = scratch(false);
    // Our own node for /dev/full (major 1, minor 7) where the machine lets us make one, so a
    // regression could only ever replace a file in the scratch directory; /dev/full otherwise.
    let own = dir.path().join("full");
    let made = Command::new("mknod")
        .arg(&own)
        .args(["c", "1", "7"])
        .status()
        .is_ok_and(|s| s.success());
    let full = if made {
        own
    } else {
        eprintln!("note: mknod failed here; writing to /dev/full itself");
        PathBuf::from("/dev/full")
    };
    let target = full.to_str().unwrap();
    assert_refused_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", target],
        &["No space left on device"],
    );
    let meta = std::fs::symlink_metadata(&full).unwrap();
    assert!(
        meta.file_type().is_char_device(),
        "the device is still a device"
    );
    // External data needs a directory to put the data file in.
    assert_refused_in(
        dir.path(),
        &[
            "rewrite",
            "model.onnx",
            "-o",
            target,
            "--external-data",
            "w.bin",
        ],
        &["external data needs the output to be a regular file"],
    );
}

#[test]
fn file_size_limit_during_the_write() {
    // A 1 MiB table, written inline, under a 128 KiB limit.
    let dir = tempfile::tempdir().unwrap();
    save_input(dir.path(), &embedding_model(65536, 0.0, 0), false);
    let before = snapshot(dir.path());
    let run = run_limited(
        dir.path(),
        128,
        &["rewrite", "model.onnx", "-o", "out.onnx"],
    );
    run.assert_error(&["saving out.onnx", "File too large"]);
    assert_eq!(
        snapshot(dir.path()),
        before,
        "no partial output, no temporary file"
    );
}

/// A scratch directory whose `out.onnx` + `w.bin` come from an earlier, successful rewrite of
/// a different model, and whose `model.onnx` is `model`.
fn earlier_output(model: &Model) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    save_input(dir.path(), &embedding_model(64, 1000.0, 0), false);
    run_in(dir.path(), &EXTERNAL).assert_success();
    save_input(dir.path(), model, false);
    dir
}

const EXTERNAL: [&str; 6] = [
    "rewrite",
    "model.onnx",
    "-o",
    "out.onnx",
    "--external-data",
    "w.bin",
];

#[test]
fn file_size_limit_keeps_the_earlier_output() {
    // The new data file does not fit: the earlier output and its data stay as they were.
    let dir = earlier_output(&embedding_model(65536, 0.0, 0));
    let before = snapshot(dir.path());
    run_limited(dir.path(), 128, &EXTERNAL).assert_error(&["File too large"]);
    assert_eq!(snapshot(dir.path()), before);

    // The data file fits but the model does not: still nothing changes, since both are written
    // in full before either is renamed into place.
    let dir = earlier_output(&embedding_model(512, 0.0, 4000));
    let before = snapshot(dir.path());
    run_limited(dir.path(), 128, &EXTERNAL).assert_error(&["saving out.onnx", "File too large"]);
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_failed_rename_puts_back_the_previous_data_file() {
    let dir = earlier_output(&embedding_model(64, 0.0, 0));
    let before = snapshot(dir.path());
    let out = dir.path().join("out.onnx");
    {
        let Some(_guard) = Immutable::set(&out) else {
            return;
        };
        let run = run_in(dir.path(), &EXTERNAL);
        run.assert_error(&["saving out.onnx", "Operation not permitted"]);
        assert_eq!(
            snapshot(dir.path()),
            before,
            "w.bin is the earlier one again; no temporary or backup file is left"
        );
        // With no earlier data file, the new one is removed again.
        std::fs::remove_file(dir.path().join("w.bin")).unwrap();
        let before = snapshot(dir.path());
        run_in(dir.path(), &EXTERNAL).assert_error(&["Operation not permitted"]);
        assert_eq!(snapshot(dir.path()), before);
    }
    // Once the output may be replaced, the same command succeeds.
    run_in(dir.path(), &EXTERNAL).assert_success();
    let model = multigather::io::load(&out).unwrap();
    let table = model.graph.initializer("table").unwrap();
    assert_eq!(&table.le_bytes().unwrap()[4..8], &1f32.to_le_bytes());
}

#[test]
fn same_input_and_options_give_the_same_bytes() {
    let options: [&[&str]; 3] = [
        &[],
        &["--with-function-body"],
        &["--external-data", "w.bin", "--external-threshold", "16"],
    ];
    for name in [
        "kitchen_sink",
        "gather_in_function",
        "gather_in_if",
        "gather_in_loop",
        "gathernd_batch2",
        "gather_symbolic_dims",
        "gather_elements_symbolic",
    ] {
        let input = fixture(name);
        for extra in options {
            let outputs: Vec<_> = (0..2)
                .map(|_| {
                    let dir = tempfile::tempdir().unwrap();
                    let mut args = vec!["rewrite", input.to_str().unwrap(), "-o", "out.onnx"];
                    args.extend_from_slice(extra);
                    run_in(dir.path(), &args).assert_success();
                    run_in(dir.path(), &["lower", "out.onnx", "-o", "lowered.onnx"]);
                    snapshot(dir.path())
                })
                .collect();
            assert!(outputs[0].contains_key("out.onnx"));
            assert_eq!(outputs[0], outputs[1], "{name} {extra:?}");
        }
    }
}

#[test]
fn a_model_can_be_read_from_a_pipe() {
    let dir = scratch(false);
    let bytes = std::fs::read(dir.path().join("model.onnx")).unwrap();
    let from_file = run_in(dir.path(), &["inspect", "model.onnx", "--json"]);
    from_file.assert_success();
    let mut cmd = multigather(dir.path(), &["inspect", "/dev/stdin", "--json"]);
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &bytes));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, from_file.stdout);
}

// ---------------------------------------------------------------------------------------------
// Hostile names and file-system tricks.

#[test]
fn external_data_naming_the_input_model() {
    let dir = scratch(false);
    assert_refused_in(
        dir.path(),
        &[
            "rewrite",
            "model.onnx",
            "-o",
            "out.onnx",
            "--external-data",
            "model.onnx",
        ],
        &[
            "saving out.onnx",
            "this is the model being rewritten; not overwriting it",
        ],
    );
    // From another directory, through a path with a `.` in it.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    assert_refused_in(
        dir.path(),
        &[
            "rewrite",
            "./sub/../model.onnx",
            "-o",
            "out.onnx",
            "--external-data",
            "./model.onnx",
        ],
        &["this is the model being rewritten"],
    );
}

#[test]
fn external_data_in_a_symlinked_directory() {
    let dir = scratch(false);
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("keep.txt"), "mine").unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("sub")).unwrap();
    let outside = snapshot(elsewhere.path());
    assert_refused_in(
        dir.path(),
        &[
            "rewrite",
            "model.onnx",
            "-o",
            "out.onnx",
            "--external-data",
            "sub/w.bin",
            "--external-threshold",
            "16",
        ],
        &[
            "saving out.onnx",
            "sub' is a symbolic link",
            "inside the output's directory",
        ],
    );
    assert_eq!(
        snapshot(elsewhere.path()),
        outside,
        "nothing is written outside"
    );
    // A real directory is fine, and the model loads back.
    std::fs::create_dir(dir.path().join("real")).unwrap();
    run_in(
        dir.path(),
        &[
            "rewrite",
            "model.onnx",
            "-o",
            "out.onnx",
            "--external-data",
            "real/w.bin",
        ],
    )
    .assert_success();
    multigather::io::load(dir.path().join("out.onnx")).unwrap();
}

/// Runs multigather in `dir` with standard output sent to `dir/captured`.
fn run_to_file(dir: &Path, args: &[&str]) -> Run {
    let mut cmd = multigather(dir, args);
    let logs = tempfile::tempdir().unwrap();
    let err_path = logs.path().join("stderr");
    let status = cmd
        .stdout(std::fs::File::create(dir.join("captured")).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .status()
        .unwrap();
    Run {
        code: status.code(),
        stdout: Vec::new(),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
    }
}

#[test]
fn output_to_dev_stdout_with_stdout_redirected() {
    let dir = scratch(false);
    let expected = rewritten_bytes(dir.path());
    std::os::unix::fs::symlink("/proc/self/fd/1", dir.path().join("to_stdout")).unwrap();
    for output in ["/dev/stdout", "-", "to_stdout", "/proc/self/fd/1"] {
        let run = run_to_file(dir.path(), &["rewrite", "model.onnx", "-o", output]);
        run.assert_success();
        let captured = std::fs::read(dir.path().join("captured")).unwrap();
        assert_eq!(captured, expected, "{output}");
        std::fs::remove_file(dir.path().join("captured")).unwrap();
    }
    let link = std::fs::symlink_metadata("/dev/stdout").unwrap();
    assert!(link.file_type().is_symlink(), "/dev/stdout is still a link");
    let names: Vec<String> = snapshot(dir.path()).into_keys().collect();
    assert_eq!(
        names,
        ["model.onnx", "to_stdout"],
        "the link is still there"
    );
    // The report goes to stderr; `--json` would mix with the model, so it is refused.
    run_in(dir.path(), &["rewrite", "model.onnx", "-o", "-", "--json"])
        .assert_error(&["--json prints the report on standard output"]);
    // External data needs a directory beside the output.
    run_in(
        dir.path(),
        &[
            "rewrite",
            "model.onnx",
            "-o",
            "-",
            "--external-data",
            "w.bin",
        ],
    )
    .assert_error(&["external data needs the output to be a regular file"]);
}

#[test]
fn output_that_is_a_symlink_to_a_file() {
    let dir = scratch(false);
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("target.onnx"), "earlier").unwrap();
    std::os::unix::fs::symlink(
        elsewhere.path().join("target.onnx"),
        dir.path().join("out.onnx"),
    )
    .unwrap();
    std::os::unix::fs::symlink("nowhere.onnx", dir.path().join("dangling.onnx")).unwrap();
    let outside = snapshot(elsewhere.path());
    assert_refused_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "out.onnx"],
        &["saving out.onnx", "is a symbolic link; not replacing it"],
    );
    assert_refused_in(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "dangling.onnx"],
        &["saving dangling.onnx", "is a symbolic link to nothing"],
    );
    assert_eq!(snapshot(elsewhere.path()), outside);
}

#[test]
fn a_fifo_in_the_inputs_directory() {
    let dir = scratch(false);
    let inputs = dir.path().join("inputs");
    std::fs::create_dir(&inputs).unwrap();
    let made = Command::new("mkfifo")
        .arg(inputs.join("ids.pb"))
        .status()
        .unwrap();
    assert!(made.success());
    assert_refused_in(
        dir.path(),
        &["run", "model.onnx", "--inputs", "inputs"],
        &["inputs/ids.pb", "is a named pipe"],
    );
}

#[test]
fn an_input_that_is_dev_zero() {
    let dir = scratch(false);
    assert_refused_in(
        dir.path(),
        &["run", "model.onnx", "--input", "ids=/dev/zero"],
        &["/dev/zero: is a device, not a file"],
    );
    assert_refused_in(
        dir.path(),
        &["inspect", "/dev/zero"],
        &["loading /dev/zero", "is a device, not a file"],
    );
}

#[test]
fn a_test_data_input_symlinked_to_dev_zero() {
    let dir = tempfile::tempdir().unwrap();
    let test = dir.path().join("test_embed");
    std::fs::create_dir_all(test.join("test_data_set_0")).unwrap();
    save_input(&test, &embedding_model(64, 0.0, 0), false);
    std::os::unix::fs::symlink("/dev/zero", test.join("test_data_set_0/input_0.pb")).unwrap();
    let before = snapshot(dir.path());
    let run = run_in(dir.path(), &["test", "test_embed"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(out.contains("FAIL test_embed"), "{out}");
    assert!(out.contains("input_0.pb: is a device, not a file"), "{out}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn external_data_truncated_after_loading() {
    // The loader maps the data; a file cut short afterwards would fault at the first read past
    // its new end (SIGBUS). Saving checks first and names the file.
    let dir = scratch(true);
    let model = multigather::io::load(dir.path().join("model.onnx")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("weights.bin"))
        .unwrap()
        .set_len(0)
        .unwrap();
    let before = snapshot(dir.path());
    let err = multigather::io::save_with(
        &model,
        &dir.path().join("out.onnx"),
        &SaveOptions {
            external: ExternalPolicy::Inline,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("weights.bin"), "{err}");
    assert!(
        err.contains("shrank to 0 bytes after the model was loaded"),
        "{err}"
    );
    assert_eq!(snapshot(dir.path()), before);
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Runs multigather in `dir` under umask 022.
fn run_umask_022(dir: &Path, args: &[&str]) -> Run {
    harness::run_under(dir, "umask 022", args)
}

#[test]
fn output_files_have_ordinary_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch(false);
    run_umask_022(dir.path(), &rewrite_external("out.onnx")).assert_success();
    assert_eq!(mode(&dir.path().join("out.onnx")), 0o644);
    assert_eq!(mode(&dir.path().join("w.bin")), 0o644);
    run_umask_022(dir.path(), &["lower", "out.onnx", "-o", "lowered.onnx"]).assert_success();
    assert_eq!(mode(&dir.path().join("lowered.onnx")), 0o644);
    // A file that is replaced keeps its mode; so does the input rewritten in place.
    for name in ["lowered.onnx", "model.onnx"] {
        std::fs::set_permissions(
            dir.path().join(name),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
    }
    run_umask_022(dir.path(), &["lower", "out.onnx", "-o", "lowered.onnx"]).assert_success();
    assert_eq!(mode(&dir.path().join("lowered.onnx")), 0o640);
    run_umask_022(
        dir.path(),
        &["rewrite", "model.onnx", "-o", "model.onnx", "--in-place"],
    )
    .assert_success();
    assert_eq!(mode(&dir.path().join("model.onnx")), 0o640);
    // Outputs of `run` too.
    let inputs = dir.path().join("inputs");
    std::fs::create_dir(&inputs).unwrap();
    let ids = multigather::Tensor::from_vec(DataType::Int64, &[3], vec![0i64, 1, 2]).unwrap();
    multigather::io::files::write_tensor_pb(&inputs.join("ids.pb"), "ids", &ids).unwrap();
    run_umask_022(
        dir.path(),
        &[
            "run",
            "out.onnx",
            "--inputs",
            "inputs",
            "--output-dir",
            "outs",
        ],
    )
    .assert_success();
    assert_eq!(mode(&dir.path().join("outs/output_0.pb")), 0o644);
}

/// Every entry under `dir` with its size and a checksum of its bytes: [`snapshot`] for files
/// too large to print.
fn listing(dir: &Path) -> Vec<(String, u64, u64)> {
    use std::hash::{Hash, Hasher};
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let bytes = std::fs::read(e.path()).unwrap();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            let name = e.file_name().to_string_lossy().into_owned();
            (name, bytes.len() as u64, h.finish())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn sigbus_during_a_save_leaves_no_temporary_file() {
    // A mapped external data file truncated by another process while a save reads it raises
    // SIGBUS in the middle of the save, with temporary files beside the outputs. The signal is
    // sent here the moment a temporary file appears (the same handler runs); the handler must
    // remove them before it exits. The table is large enough that the save is still writing
    // when the signal lands; should it finish first, the attempt is repeated with a larger one.
    for rows in [1 << 21, 1 << 23] {
        let dir = tempfile::tempdir().unwrap();
        save_input(dir.path(), &embedding_model(rows, 0.0, 0), true);
        let before = listing(dir.path());
        let logs = tempfile::tempdir().unwrap();
        let err_path = logs.path().join("stderr");
        let mut child = multigather(dir.path(), &EXTERNAL)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let mut signalled = false;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(start.elapsed().as_secs() < 120, "the save hangs");
            let staging = std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".tmp"));
            if staging && !signalled {
                // A moment for the file to be registered (it is, right after it is created).
                std::thread::sleep(std::time::Duration::from_millis(2));
                // SAFETY: kill(2) on the child's pid, which has not been waited for yet.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGBUS) };
                signalled = true;
            }
        };
        if !signalled || status.success() {
            eprintln!("note: the save of {rows} rows ended before the signal; trying larger");
            continue;
        }
        let err = std::fs::read_to_string(&err_path).unwrap();
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(err.contains("truncated by another process"), "{err}");
        assert_eq!(listing(dir.path()), before, "no file left or changed");
        return;
    }
    panic!("every save finished before the signal could land");
}
