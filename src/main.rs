//! The `multigather` command line: parses arguments, runs one subcommand, maps errors to exit codes.
//!
//! Exit codes: 0 success; 1 a check failed (verify mismatch, test failure); 2 an error (bad input,
//! unsupported construct, I/O). Errors are printed on one line with their cause chain.

mod cli;

use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    on_sigbus_exit();
    cli::map_files();
    let args = cli::Args::parse();
    match cli::run(args) {
        Ok(cli::Outcome::Success) => ExitCode::SUCCESS,
        Ok(cli::Outcome::CheckFailed) => ExitCode::from(1),
        // A reader that went away (`| head`) has all it wanted: end quietly, as a filter does.
        Err(e) if cli::output::is_closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            cli::output::eprintln(&format!("error: {e:#}"));
            ExitCode::from(2)
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
