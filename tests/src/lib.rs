//! Helpers for ferry's end-to-end tests: where the fixtures are and how to read their sidecars.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The committed fixtures folder (`tests/fixtures`).
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Ground truth the export script read from the exporter's program object, per method.
#[derive(Debug, Clone, Deserialize)]
pub struct ExpectedMethod {
    /// Method name.
    pub name: String,
    /// Input count.
    pub inputs: usize,
    /// Output count.
    pub outputs: usize,
    /// Value count.
    pub values: usize,
    /// Instructions over all chains.
    pub instructions: u64,
    /// Operator table size.
    pub operators: usize,
    /// Delegate backend ids in table order.
    pub delegates: Vec<String>,
    /// Delegate calls per backend id.
    pub delegate_calls: std::collections::BTreeMap<String, u64>,
    /// Kernel calls per `name.overload`.
    pub kernel_calls: std::collections::BTreeMap<String, u64>,
    /// Move, jump and free instructions.
    pub other_instructions: u64,
}

/// Ground truth for a whole program.
#[derive(Debug, Clone, Deserialize)]
pub struct Expected {
    /// `Program.version`.
    pub schema_version: u32,
    /// The methods in program order.
    pub methods: Vec<ExpectedMethod>,
}

/// A fixture's JSON sidecar, written by `tests/fixtures/export.py`.
#[derive(Debug, Clone, Deserialize)]
pub struct Sidecar {
    /// Fixture name (file stem).
    pub name: String,
    /// Model it stands for.
    pub model: String,
    /// Release it stands for.
    pub release: String,
    /// Delegate it was lowered to.
    pub delegate: String,
    /// Quantisation label.
    pub quant: String,
    /// sha256 of the `.pte`.
    pub sha256: String,
    /// Size of the `.pte`.
    pub size: u64,
    /// Golden input and eager output.
    pub input: Vec<ferry_shared::manifest::TensorValue>,
    /// Eager output for `input`.
    pub output: Vec<ferry_shared::manifest::TensorValue>,
    /// Tolerance.
    pub atol: f64,
    /// Exporter ground truth.
    pub expected: Expected,
    /// Per method, the tensors whose data the exporter put in a separate `.ptd` file (only
    /// for fixtures exported with external constants).
    #[serde(default)]
    pub external_tensors: std::collections::BTreeMap<String, Vec<String>>,
}

/// One committed `.pte` fixture with its sidecar.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Path of the `.pte`.
    pub pte: PathBuf,
    /// Parsed sidecar.
    pub sidecar: Sidecar,
}

/// Every committed `.pte` fixture, sorted by name.
pub fn pte_fixtures() -> Vec<Fixture> {
    let dir = fixtures_dir().join("pte");
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "pte") {
            let side = path.with_extension("json");
            let text = std::fs::read_to_string(&side)
                .unwrap_or_else(|e| panic!("{}: {e}", side.display()));
            let sidecar: Sidecar =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", side.display()));
            out.push(Fixture { pte: path, sidecar });
        }
    }
    out.sort_by(|a, b| a.pte.cmp(&b.pte));
    out
}

/// Builds `tests/c/crash_preload.c` (a driver bug on demand: preloaded into an app process, it
/// raises a signal or hangs inside the runtime's own read of one file; see its header) once
/// per test process, and returns the library's path.
pub fn crash_preload() -> &'static Path {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = root.join("../target/crash_preload.so");
        let status = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
            .arg(&out)
            .arg(root.join("c/crash_preload.c"))
            .arg("-ldl")
            .status()
            .expect("cc");
        assert!(status.success(), "the preload library builds");
        out
    })
}

/// Builds the C library of the client (`libferry_client_ffi`; `cargo test` builds rlibs, not
/// another package's cdylib) and returns the folder it is in (the profile folder of the running
/// test binary).
pub fn ffi_library_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "ferry-client-ffi"])
        .current_dir(&root)
        .status()
        .expect("cargo build");
    assert!(status.success(), "building ferry-client-ffi failed");
    let dir = std::env::current_exe()
        .expect("exe")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf();
    assert!(
        dir.join("libferry_client_ffi.so").is_file(),
        "no libferry_client_ffi.so in {}",
        dir.display()
    );
    dir
}

/// Polls `ok` every 100 ms for up to 20 s (replicas flush each second); panics naming `what`
/// when it never holds.
pub fn until(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..200 {
        if ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("never: {what}");
}

/// Telemetry settings for tests: each replica flushes and writes its raw log every second and
/// evaluates after every batch.
pub fn fast_telemetry(c: &mut ferry_server::app::config::Config) {
    c.telemetry.flush_secs = 1;
    c.telemetry.raw_roll_secs = 1;
    c.telemetry.evaluate_ms = 0;
}

/// The one switch for a test fleet on one host. Every test device reaches the server from
/// 127.0.0.1, so this turns off the network quorum of learned deny entries
/// (`telemetry.deny_min_networks`, default 3) and the allowance of new installs one address
/// brings into the evidence (`telemetry.evidence_installs_per_address_per_hour`, default 50),
/// and lets every SDK name take its own census row without networks vouching for it
/// (`telemetry.census_min_networks`, default 3). Every [`app::TestApp`] and its replicas start with it; a test of those defaults sets them
/// back in its tweak (`docs/rollouts.md`, "A test fleet on one host").
pub fn one_host_fleet(c: &mut ferry_server::app::config::Config) {
    // The same keys as ONE_HOST_FLEET_TOML, for servers started from a config file.
    c.telemetry.deny_min_networks = 0;
    c.telemetry.evidence_installs_per_address_per_hour = 0;
    c.telemetry.census_min_networks = 0;
}

/// [`one_host_fleet`] as the lines of a config file's `[telemetry]` section.
pub const ONE_HOST_FLEET_TOML: &str =
    "deny_min_networks = 0\nevidence_installs_per_address_per_hour = 0\ncensus_min_networks = 0\n";

/// Compiles the C program `source` against `client/include/ferry.h` and the library in
/// `lib_dir` (found at run time through an rpath) with `-Wall -Werror`, into `exe`.
pub fn compile_c(source: &Path, exe: &Path, lib_dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new("cc")
        .arg(source)
        .arg("-I")
        .arg(root.join("client/include"))
        .arg("-L")
        .arg(lib_dir)
        .arg("-lferry_client_ffi")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lm")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub mod app;
pub mod azurite;
pub mod browser;
pub mod duckdb;
mod emulator;
pub mod kit;
pub mod moto;
pub mod nginx;
pub mod process;
pub mod proxy;
pub mod releases;
pub mod reports;
pub mod schemas;
pub mod signers;
pub mod sourced;
pub mod store_snapshot;
pub mod varnish;
pub mod vectors;

/// The committed `.ptd` fixture with the element type of tensor `key` changed to
/// `scalar_type` (found by trying each byte, and checked with the reader), for tests of data
/// files that do not fit their program.
pub fn ptd_with_scalar_type(key: &str, scalar_type: i8) -> Vec<u8> {
    let ptd = std::fs::read(fixtures_dir().join("pte/mlp-external-portable.ptd")).expect("ptd");
    let want = ferry_shared::pte::inspect_ptd(&ptd).expect("fixture");
    for i in 0..ptd.len() {
        let mut b = ptd.clone();
        b[i] = scalar_type as u8;
        let Ok(r) = ferry_shared::pte::inspect_ptd(&b) else {
            continue;
        };
        let same_but = r.tensors.iter().zip(&want.tensors).all(|(got, was)| {
            if got.key == key {
                got.scalar_type == scalar_type && got.sizes == was.sizes
            } else {
                got == was
            }
        });
        if same_but
            && r.tensors.len() == want.tensors.len()
            && r.tensors.iter().any(|t| t.key == key)
        {
            return b;
        }
    }
    panic!("no single byte of the fixture gives {key} scalar type {scalar_type}")
}

/// Runs a test in a process of its own, for a test that measures the whole process (resident memory, open files) and would
/// count its neighbours' work in a shared one. Returns `true` inside that process: the caller
/// then does the work. Returns `false` in the test binary's own process after the child
/// passed; panics with the child's output when it failed.
///
/// `module` is the test's `module_path!()` and `test` its function's name, so that the test is
/// found wherever its module moves.
pub fn in_own_process(module: &str, test: &str) -> bool {
    const MARK: &str = "FERRY_TEST_OWN_PROCESS";
    // The harness names a test by its path inside the test crate (no crate name).
    let inside = module.split_once("::").map_or("", |(_, rest)| rest);
    let name = &if inside.is_empty() {
        test.to_string()
    } else {
        format!("{inside}::{test}")
    };
    if std::env::var_os(MARK).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(MARK, "1")
        .output()
        .expect("the test binary starts again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{name} in its own process failed:\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "{name} did not run in its own process:\n{text}"
    );
    false
}
