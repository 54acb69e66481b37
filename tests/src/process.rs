//! A ferry server in a process of its own (`serve-child`, the `ferry` binary's twin): for tests
//! that kill it with SIGKILL or read its resident memory.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::app::ADMIN_TOKEN;

/// A `ferry serve` process, killed on drop.
pub struct ServerProcess {
    child: Option<Child>,
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Its data directory.
    pub data: PathBuf,
}

impl ServerProcess {
    /// Starts `bin` (the tests' `env!("CARGO_BIN_EXE_serve-child")`) as `ferry serve` on
    /// `data`, on a free loopback port unless `args` name one, with `args` added (`--demo`,
    /// `--config FILE`, `--listen ADDR`, `--mirror-of URL --trust FILE`); returns once it
    /// listens. The admin token is
    /// [`ADMIN_TOKEN`].
    pub fn start(bin: &str, data: &Path, args: &[&str]) -> ServerProcess {
        let mut cmd = Command::new(bin);
        cmd.arg("serve").arg("--data").arg(data);
        if !args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = cmd
            .args(args)
            .env("FERRY_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("FERRY_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start serve-child");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut said = Vec::new();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("the server exited before listening:\n{}", said.join("\n"));
            };
            // `ferry: listening on URL (...)`, or a mirror's `ferry: site mirror of ORIGIN
            // listening on URL, ...`.
            if let Some((_, rest)) = line
                .strip_prefix("ferry: ")
                .and_then(|l| l.split_once("listening on "))
            {
                let url = rest.split_whitespace().next().expect("url");
                break url.trim_end_matches(',').to_string();
            }
            said.push(line);
        };
        // Keep reading what it says (so that it never blocks on a full pipe) into `<data>.log`
        // beside the data directory, for a failing test's reader.
        let log = data.with_extension("log");
        std::thread::spawn(move || {
            use std::io::Write as _;
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .ok();
            for line in said.into_iter().chain(lines.map_while(Result::ok)) {
                if let Some(f) = out.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
            }
        });
        ServerProcess {
            child: Some(child),
            url,
            data: data.to_path_buf(),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Its `host:port`.
    pub fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_string()
    }

    /// Its resident memory in bytes (`VmRSS`).
    pub fn rss(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// Kills it with SIGKILL (no flush, no goodbye) and waits for it.
    pub fn kill9(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
