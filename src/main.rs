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
