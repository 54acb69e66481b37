//! `ferry-circles [--strict] [--allow FILE]... [ROOT...]`: prints the import circles between
//! the files of each crate whose root file is given (the workspace's crates by default) and
//! exits 1 when there is one. `--strict` also counts a parent's arrows to its own children (see
//! the library's `Rule`); `--allow FILE` lets a circle through that FILE (a known one, named in
//! `tests/run` with its reason) and still prints it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The roots checked when none is given, relative to the workspace.
const ROOTS: &[&str] = &[
    "shared/src/lib.rs",
    "shared/fs/src/lib.rs",
    "client/src/lib.rs",
    "client/runtime/src/lib.rs",
    "client/ffi/src/lib.rs",
    "server/src/lib.rs",
    "server/src/main.rs",
    "tests/src/lib.rs",
    "tests/circles/src/lib.rs",
];

fn main() -> ExitCode {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut strict = false;
    let mut allowed: Vec<PathBuf> = Vec::new();
    let mut args: Vec<PathBuf> = Vec::new();
    let mut given = std::env::args_os().skip(1);
    while let Some(a) = given.next() {
        if a == "--strict" {
            strict = true;
        } else if a == "--allow" {
            let Some(file) = given.next() else {
                eprintln!("ferry-circles: --allow needs a file");
                return ExitCode::from(2);
            };
            allowed.push(PathBuf::from(file));
        } else {
            args.push(PathBuf::from(a));
        }
    }
    let rule = if strict {
        ferry_circles::Rule::Strict
    } else {
        ferry_circles::Rule::Rooms
    };
    let roots: Vec<PathBuf> = if args.is_empty() {
        // Relative to the workspace, so that circles name files as the tree does.
        if let Err(e) = std::env::set_current_dir(&workspace) {
            eprintln!("ferry-circles: {}: {e}", workspace.display());
            return ExitCode::from(2);
        }
        ROOTS.iter().map(PathBuf::from).collect()
    } else {
        args
    };
    let (mut found, mut let_through) = (0, 0);
    for root in &roots {
        match ferry_circles::Crate::read(root) {
            Ok(krate) => {
                for c in krate.circles(rule) {
                    if c.files.iter().any(|f| allowed.contains(f)) {
                        eprint!("{} (allowed): {c}", root.display());
                        let_through += 1;
                        continue;
                    }
                    found += 1;
                    eprint!("{}: {c}", root.display());
                }
            }
            Err(e) => {
                eprintln!("ferry-circles: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if found > 0 {
        eprintln!(
            "{found} import circle(s): break each by moving the shared names to a file both may import (docs/architecture.md)"
        );
        return ExitCode::FAILURE;
    }
    let allowed_note = if let_through > 0 {
        format!(" ({let_through} allowed by name, printed above)")
    } else {
        String::new()
    };
    println!(
        "ok: no import circle between the files of {} crates{allowed_note}",
        roots.len()
    );
    ExitCode::SUCCESS
}
