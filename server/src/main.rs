//! The `ferry` command-line tool.

use std::process::ExitCode;

fn main() -> ExitCode {
    ferry_server::cli::main()
}
