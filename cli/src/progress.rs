//! A spinner for long operations, shown only when stderr is a terminal and the file is large.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Files below this size load and save in well under a second: no spinner.
const LARGE: u64 = 64 << 20;

/// Runs `f`, showing `what` with a spinner and the elapsed time while it runs, if stderr is a
/// terminal and `path` (or, when it does not exist yet, `size_hint`) is large.
pub fn spin<T>(what: &str, path: &Path, size_hint: u64, f: impl FnOnce() -> T) -> T {
    let size = std::fs::metadata(path)
        .map(|m| m.len())
        .unwrap_or(size_hint);
    if size < LARGE || !std::io::stderr().is_terminal() {
        return f();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(format!("{what} {} ({} MiB)", path.display(), size >> 20));
    bar.enable_steady_tick(Duration::from_millis(100));
    let out = f();
    bar.finish_and_clear();
    out
}
