//! The command line in two stages, in the manner of ripgrep: clap parses it into the raw flags
//! of `flags.rs`, and one conversion (`options.rs`, [`Options::from_args`]) validates and types
//! them before anything is loaded. Each subcommand lives in its own file, takes its options and
//! returns an [`Outcome`]; errors carry context naming the file they concern.

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

use anyhow::Result;

pub use flags::Args;
use options::Options;

/// What a successful run of a subcommand concluded.
pub enum Outcome {
    /// Everything succeeded (exit 0).
    Success,
    /// The command ran but a check it performs failed (exit 1).
    CheckFailed,
}

/// Runs one parsed command line: validates it into [`Options`], then runs the command.
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
/// handler is installed ([`map_files`]), because a mapped file truncated by another process
/// faults at the next read of a lost page. The command line run inside another process (the
/// Python package's console script) reads them.
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
