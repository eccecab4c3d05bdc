//! The `multigather` command line as a library: [`main`] is the whole program, which the
//! `multigather` binary (`src/main.rs`) and the Python package's console script both call, so
//! the two behave alike (arguments, messages, exit codes, `SIGBUS` and closed pipes).
//!
//! The command line runs in two stages, in the manner of ripgrep: clap parses it into the raw
//! flags of `flags.rs`, and one conversion (`options.rs`, `Options::from_args`) validates and
//! types them before anything is loaded. Each subcommand lives in its own file, takes its options
//! and returns an [`Outcome`]; errors carry context naming the file they concern.
//!
//! Exit codes: 0 success; 1 a check failed (verify mismatch, test failure); 2 an error (bad input,
//! unsupported construct, I/O). Errors are printed on one line with their cause chain.
//!
//! # Example
//! ```no_run
//! // `multigather inspect model.onnx`, as the binary runs it.
//! let code = multigather_cli::main(["multigather", "inspect", "model.onnx"]);
//! # let _ = code;
//! ```

mod flags;
mod inspect;
mod lower;
mod options;
pub mod output;
mod progress;
mod rewrite;
mod run;
mod test;
mod verify;

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

pub use flags::Args;
use options::Options;

/// The command line: parses `args` (the first is the program name), runs the command, prints
/// its error if any, and returns the exit code (0, 1 or 2, or clap's code for a command line it
/// rejects or answers itself, such as `--help`).
///
/// Installs a `SIGBUS` handler for the process (see [`map_files`]), so models and external data
/// are memory-mapped rather than read. A reader of standard output that goes away (`| head`)
/// ends the command quietly with 0, as a filter does.
///
/// # Example
/// ```no_run
/// use std::process::ExitCode;
///
/// fn main() -> ExitCode {
///     multigather_cli::main(std::env::args_os())
/// }
/// ```
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    ExitCode::from(main_status(args))
}

/// [`main`], returning the exit code as a number, for a host that hands it on itself (the
/// Python package's console script).
pub fn main_status<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    on_sigbus_exit();
    map_files();
    let args = match Args::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            // Usage errors on standard error, `--help` and `--version` on standard output.
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    match run(args) {
        Ok(Outcome::Success) => 0,
        Ok(Outcome::CheckFailed) => 1,
        // A reader that went away (`| head`) has all it wanted: end quietly, as a filter does.
        Err(e) if output::is_closed_pipe(&e) => 0,
        Err(e) => {
            output::eprintln(&format!("error: {e:#}"));
            2
        }
    }
}

/// Models and external data are memory-mapped; if another process truncates one while it is
/// read, the read faults with `SIGBUS`, which would kill the process without a word. This ends it
/// with the one-line error and exit code every other failure gets, after removing the temporary
/// files of a save under way. (Saving checks the files first, so a truncation before the save
/// starts is an ordinary error naming the file.)
fn on_sigbus_exit() {
    #[cfg(unix)]
    {
        extern "C" fn handler(_: libc::c_int) {
            const MESSAGE: &[u8] = b"error: a memory-mapped model or external data file was \
truncated by another process while it was being read\n";
            // The temporary files of a save under way would outlive `_exit`: remove them first.
            multigather::io::remove_temporary_files();
            // SAFETY: write(2) and _exit(2) are async-signal-safe; so is the removal above
            // (loads and unlink(2)); nothing else runs here.
            unsafe {
                libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
                libc::_exit(2);
            }
        }
        // SAFETY: installs a handler that only calls async-signal-safe functions.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    }
}

/// What a successful run of a subcommand concluded.
pub enum Outcome {
    /// Everything succeeded (exit 0).
    Success,
    /// The command ran but a check it performs failed (exit 1).
    CheckFailed,
}

/// Runs one parsed command line: validates it into its options, then runs the command.
pub fn run(args: Args) -> Result<Outcome> {
    match Options::from_args(args)? {
        Options::Inspect(options) => inspect::run(options),
        Options::Rewrite(options) => rewrite::run(options),
        Options::Lower(options) => lower::run(options),
        Options::Run(options) => run::run(options),
        Options::Verify(options) => verify::run(options),
        Options::Test(options) => test::run(options),
    }
}

/// Whether model and external data files are mapped rather than read: only once a `SIGBUS`
/// handler is installed ([`main`] installs it, then calls [`map_files`]), because a mapped file
/// truncated by another process faults at the next read of a lost page. [`run`] called on its
/// own, without the handler, reads them.
static MAP_FILES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets loads map files: the caller has installed a `SIGBUS` handler.
pub fn map_files() {
    MAP_FILES.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The options every load of the command line uses (see [`map_files`]).
fn load_options() -> multigather::io::LoadOptions {
    use multigather::io::FileAccess;
    multigather::io::LoadOptions {
        access: if MAP_FILES.load(std::sync::atomic::Ordering::Relaxed) {
            FileAccess::Map
        } else {
            FileAccess::Read
        },
        ..Default::default()
    }
}

/// Loads a model, with a spinner on a terminal for large files; errors name the file.
pub fn load(path: &std::path::Path) -> Result<multigather::ir::Model> {
    use anyhow::Context;
    progress::spin("loading", path, 0, || {
        multigather::io::load_with(path, &load_options())
    })
    .with_context(|| format!("loading {}", path.display()))
}

/// Saves a model atomically, with a spinner on a terminal for large models; errors name the file.
pub fn save(
    model: &multigather::ir::Model,
    path: &std::path::Path,
    options: &multigather::io::SaveOptions,
) -> Result<()> {
    use anyhow::Context;
    let hint = model
        .graph
        .initializers
        .iter()
        .map(|t| t.stored_len() as u64)
        .sum();
    let saved = progress::spin("saving", path, hint, || {
        multigather::io::save_with(model, path, options)
    });
    match saved {
        // A model sent to standard output, read by something that went away: see `main`.
        Err(multigather::Error::Io { cause, .. })
            if cause.kind() == std::io::ErrorKind::BrokenPipe
                && multigather::io::is_stdout_path(path) =>
        {
            Err(output::StdoutError(cause).into())
        }
        other => other.with_context(|| format!("saving {}", path.display())),
    }
}
