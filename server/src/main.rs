//! The `ferry` command-line tool.

use std::process::ExitCode;

/// mimalloc instead of the system allocator: resolve makes many small, short-lived
/// allocations across worker threads, where glibc's malloc and free took about 9% of the CPU
/// (docs/performance.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ferry_server::cli::main()
}
