//! `ferry` itself (the same entry point and allocator as the `ferry` binary), built with the
//! tests so that they can run a server as a process of its own: to kill it with SIGKILL, or to
//! read its memory apart from the test's (`ferry_tests::process`).

use std::process::ExitCode;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ferry_server::cli::main()
}
