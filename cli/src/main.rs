//! The `multigather` binary: the command line of [`multigather_cli::main`], with mimalloc as the
//! allocator.

use std::process::ExitCode;

/// Passes and the interpreter allocate many small strings and buffers, where glibc malloc spends
/// most of its time consolidating free lists.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    multigather_cli::main(std::env::args_os())
}
