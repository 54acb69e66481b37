//! Runs a browser script of `tests/ui/` (headless Chromium, Debian's, driven by the npm
//! package playwright-core that tests/setup.sh installs) and reads what it printed: one JSON
//! object per line.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where the browser tests leave their screenshots (kept as test artifacts).
pub fn screenshots() -> PathBuf {
    root().join("target/dashboard-screenshots")
}

/// Runs `tests/ui/{script}` with `args`; panics with its output when it fails; returns the
/// JSON lines it printed.
pub fn run(script: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let modules = root().join(".deps/ui/node_modules");
    assert!(
        modules.join("playwright-core").is_dir() && Path::new("/usr/bin/chromium").exists(),
        "run tests/setup.sh: it installs Debian's chromium and the npm packages of ui/"
    );
    let out = Command::new("node")
        .arg(root().join("tests/ui").join(script))
        .args(args)
        .env("FERRY_UI_MODULES", &modules)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "browser script {script} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The line of `lines` whose `step` is `name`.
pub fn step<'a>(lines: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    lines
        .iter()
        .find(|l| l["step"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {lines:?}"))
}
