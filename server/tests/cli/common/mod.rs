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
    /// The process (killed on drop).
    pub child: Child,
    /// Its URL.
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Signs a one-variant (XNNPACK) release `version` of `model` from fixture `file`, copied into
/// `dir`, with the release key in `keys`; returns the signed release file.
#[allow(dead_code)]
pub fn signed_release(dir: &Path, keys: &Path, model: &str, version: &str, file: &str) -> PathBuf {
    std::fs::copy(fixtures().join(file), dir.join(file)).expect("copy");
    let toml = format!(
        "model = \"{model}\"\nversion = \"{version}\"\n\n[[variant]]\nid = \"xnnpack-fp32\"\n\
         file = \"{file}\"\ndelegate = \"xnnpack\"\nquant = \"fp32\"\nruntime = \">=1.5.0\"\napp = \"*\"\n"
    );
    let spec = dir.join(format!("VARIANTS-{version}.toml"));
    std::fs::write(&spec, toml).expect("write");
    let out = dir.join(format!("release-{version}.json"));
    run_ok(
        ferry()
            .arg("sign")
            .arg(&spec)
            .arg("--key")
            .arg(keys.join("release.key"))
            .arg("-o")
            .arg(&out),
    );
    out
}

/// A data directory with generated keys, and releases 1.0.0 and 2.0.0 of one model signed with
/// them (one XNNPACK variant each, from the mlp v1 and v2 fixtures).
#[allow(dead_code)]
pub struct Setup {
    /// Holds everything below.
    pub tmp: tempfile::TempDir,
    /// The server's data directory.
    pub data: PathBuf,
    /// Where the release's `.pte` files are.
    pub files: PathBuf,
    /// Signed release 1.0.0.
    pub v1: PathBuf,
    /// Signed release 2.0.0.
    pub v2: PathBuf,
}

/// Keys and two signed releases of `model` in a fresh temporary directory.
#[allow(dead_code)]
pub fn setup(model: &str) -> Setup {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(data.join("keys")),
    );
    let keys = data.join("keys");
    let v1 = signed_release(&files, &keys, model, "1.0.0", "mlp-v1-xnnpack.pte");
    let v2 = signed_release(&files, &keys, model, "2.0.0", "mlp-v2-xnnpack.pte");
    Setup {
        tmp,
        data,
        files,
        v1,
        v2,
    }
}

/// Starts `ferry serve` on a free port for `data`.
pub fn serve(data: &Path) -> Server {
    serve_with(data, None)
}

/// Starts `ferry serve` on a free port for `data`, with a config file.
pub fn serve_with(data: &Path, config: Option<&Path>) -> Server {
    serve_logged(data, config, "warn").0
}

/// The server's stderr lines so far (kept by a thread that drains the pipe).
pub type Log = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// Starts `ferry serve` on a free port for `data` (with a config file, at log level `level`),
/// keeping every line it writes on stderr.
pub fn serve_logged(data: &Path, config: Option<&Path>, level: &str) -> (Server, Log) {
    let mut cmd = ferry();
    if let Some(c) = config {
        cmd.arg("serve").arg("--config").arg(c);
    } else {
        cmd.arg("serve");
    }
    let mut child = cmd
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("FERRY_ADMIN_TOKEN", TOKEN)
        .env("FERRY_LOG", level)
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
    let log = Log::default();
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Ok(mut l) = keep.lock() {
                l.push(line);
            }
        }
    });
    (Server { child, url }, log)
}

const SCHEMA_BASE: &str = "https://ferry.invalid/schemas/";

/// A validator for `reference` (a schema file under `schemas/`, optionally with
/// `#/$defs/NAME`), with every committed schema registered for `$ref`s.
pub fn validator(reference: &str) -> jsonschema::Validator {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let mut registry = jsonschema::Registry::new();
    for e in std::fs::read_dir(dir).expect("schemas").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".schema.json") {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.path()).expect("read")).expect("json");
            registry = registry
                .add(format!("{SCHEMA_BASE}{name}"), v)
                .expect("uri");
        }
    }
    let registry = registry.prepare().expect("registry");
    let wrapper = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": format!("{SCHEMA_BASE}cli-check.json"),
        "$ref": reference,
    });
    jsonschema::options()
        .with_registry(&registry)
        .build(&wrapper)
        .unwrap_or_else(|e| panic!("{reference}: {e}"))
}

/// Panics with every error when `v` does not validate against `reference`.
pub fn assert_valid(v: &serde_json::Value, reference: &str) {
    let errors: Vec<String> = validator(reference)
        .iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{reference}: {errors:?}\n{v}");
}
