//! Helpers shared by the CLI tests: the real `ferry` binary, a server child process.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The admin token the test servers accept.
pub const TOKEN: &str = "cli-test-admin-token-0123";

/// The binary.
pub fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

/// The committed fixtures.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pte")
}

/// Runs a command, asserting success; returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run ferry");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `ferry serve` child process, killed on drop.
pub struct Server {
    child: Child,
    /// Its URL.
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `ferry serve` on a free port for `data`.
pub fn serve(data: &Path) -> Server {
    let mut child = ferry()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("FERRY_ADMIN_TOKEN", TOKEN)
        .env("FERRY_LOG", "warn")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn server");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("server exited before listening")
            .expect("read");
        if let Some(rest) = line.strip_prefix("ferry: listening on ") {
            break rest.split_whitespace().next().expect("url").to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, url }
}
