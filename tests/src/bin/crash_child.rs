//! An app process for the crash-safe loading tests: loads a model with the real ExecuTorch
//! runtime, runs it, and prints one JSON line with what happened. Its native crashes come from
//! outside: `tests/c/crash_preload.c` preloaded (a crash, a kill or a hang inside the
//! runtime's load), or a run that aborts (below).
//!
//! `crash-child SERVER TRUST_JSON CACHE_DIR MODEL`, set with the environment:
//!
//! - `CHILD_INSTALL`, `CHILD_SOC`, `CHILD_OS`, `CHILD_APP`: the device (defaults `child-<pid>`,
//!   `RK3588`, `6.1`, `1.0.0`);
//! - `CHILD_RUNS`: `forward` runs after the load (default 1);
//! - `CHILD_ABORT_RUN`: a digest prefix; a run of that program aborts the process (SIGABRT
//!   inside the runtime's call, as a crashing delegate kernel would, or as a kill by the user
//!   or the OS lands in the middle of a run); `CHILD_ABORT_AFTER`: the runs that complete
//!   first (default 0);
//! - `CHILD_FORGET=1`: forget the recorded crashes first;
//! - `CHILD_SEND=1`: send the telemetry after the load (and say how it went);
//! - `CHILD_HOLD_MS`: keep the model loaded that long after printing the line.
//!
//! The line: `{ok, release, variant, source, path, attempts, sent, queued, crashes}` or
//! `{ok: false, code, message, attempts, ...}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{
    ClientBuilder, DeviceInfo, MethodSignature, Program, Runtime, RuntimeError, VerifiedBlob,
};
use ferry_shared::manifest::{Platform, TensorValue};
use ferry_shared::trust::TrustFile;

/// Set once the load returned: runs after it are the app's own.
static LOADED: AtomicBool = AtomicBool::new(false);

/// The app's runs so far.
static RUNS: AtomicU64 = AtomicU64::new(0);

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The real runtime; a program whose digest starts with `CHILD_ABORT_RUN` aborts in `run`
/// after the load.
struct Runtime2 {
    real: ExecuTorchRuntime,
}

struct Aborting {
    real: Box<dyn Program>,
}

impl Runtime for Runtime2 {
    fn version(&self) -> semver::Version {
        self.real.version()
    }
    fn registered_backends(&self) -> Vec<String> {
        self.real.registered_backends()
    }
    fn registered_operators(&self) -> Option<Vec<String>> {
        self.real.registered_operators()
    }
    fn open(&self, blob: &VerifiedBlob) -> Result<Box<dyn Program>, RuntimeError> {
        let real = self.real.open(blob)?;
        let hex = blob.sha256().to_hex();
        match env("CHILD_ABORT_RUN") {
            Some(p) if hex.starts_with(&p) => Ok(Box::new(Aborting { real })),
            _ => Ok(real),
        }
    }
}

impl Program for Aborting {
    fn method_backends(&mut self, method: &str) -> Result<Vec<String>, RuntimeError> {
        self.real.method_backends(method)
    }
    fn signature(&mut self, method: &str) -> Result<MethodSignature, RuntimeError> {
        self.real.signature(method)
    }
    fn load_mode(&self) -> Option<&'static str> {
        self.real.load_mode()
    }
    fn load_method(&mut self, method: &str) -> Result<(), RuntimeError> {
        self.real.load_method(method)
    }
    fn run(
        &mut self,
        method: &str,
        inputs: &[TensorValue],
    ) -> Result<Vec<TensorValue>, RuntimeError> {
        if LOADED.load(Ordering::SeqCst) {
            let after: u64 = env("CHILD_ABORT_AFTER")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if RUNS.fetch_add(1, Ordering::SeqCst) >= after {
                std::process::abort();
            }
        }
        self.real.run(method, inputs)
    }
}

fn attempts(a: &[ferry_client::Attempt]) -> serde_json::Value {
    a.iter()
        .map(|a| {
            serde_json::json!({"variant": a.variant, "delegate": a.delegate,
                "stage": a.stage.as_str(), "error_code": a.error_code, "message": a.message})
        })
        .collect()
}

fn run(args: &[String]) -> serde_json::Value {
    let (server, trust, cache, model) = (&args[0], &args[1], &args[2], &args[3]);
    let trust = match std::fs::read(trust)
        .map_err(|e| e.to_string())
        .and_then(|b| TrustFile::from_json(&b).map_err(|e| e.to_string()))
    {
        Ok(t) => t,
        Err(e) => return serde_json::json!({"ok": false, "code": "config", "message": e}),
    };
    let app: semver::Version = env("CHILD_APP")
        .and_then(|v| v.parse().ok())
        .unwrap_or(semver::Version::new(1, 0, 0));
    let client = match ClientBuilder::new(server, trust)
        .cache_dir(cache)
        .app_version(app)
        .runtime(Arc::new(Runtime2 {
            real: ExecuTorchRuntime::new(),
        }))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return serde_json::json!({"ok": false, "code": e.code(), "message": e.to_string()});
        }
    };
    if env("CHILD_FORGET").is_some() {
        let _ = client.forget_crashes(None);
    }
    let device = DeviceInfo {
        install_id: env("CHILD_INSTALL").unwrap_or_else(|| format!("child-{}", std::process::id())),
        platform: Platform::Linux,
        os_version: env("CHILD_OS").unwrap_or_else(|| "6.1".into()),
        device_model: "board".into(),
        soc: env("CHILD_SOC").unwrap_or_else(|| "RK3588".into()),
        ram_mb: 4096,
        claimed_backends: Vec::new(),
    };
    let loaded = client.load(model, &device);
    LOADED.store(true, Ordering::SeqCst);
    let send = |out: &mut serde_json::Value| {
        if env("CHILD_SEND").is_some() {
            let r = client.send_telemetry();
            out["sent"] = r.sent.into();
            out["queued"] = r.queued.into();
        }
        out["crashes"] = serde_json::to_value(client.crashes()).unwrap_or_default();
    };
    match loaded {
        Ok(mut m) => {
            let mut out = serde_json::json!({"ok": true, "release": m.release,
                "variant": m.variant, "source": format!("{:?}", m.source),
                "path": m.path.display().to_string(), "attempts": attempts(&m.attempts),
                "report_attempts": attempts(&m.report.attempts)});
            send(&mut out);
            // Printed before the runs, so a run that crashes leaves the load's line.
            println!("{out}");
            let runs: usize = env("CHILD_RUNS").and_then(|r| r.parse().ok()).unwrap_or(1);
            let input = m
                .signature("forward")
                .map(|s| {
                    s.inputs
                        .iter()
                        .map(|t| TensorValue {
                            dtype: t.dtype.clone(),
                            shape: t.shape.clone(),
                            data: vec![0.5; t.shape.iter().product::<u64>() as usize],
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            let mut ok = 0;
            for _ in 0..runs {
                if m.run(&input).is_ok() {
                    ok += 1;
                }
            }
            if let Some(ms) = env("CHILD_HOLD_MS").and_then(|h| h.parse().ok()) {
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            serde_json::json!({"done": true, "runs_ok": ok})
        }
        Err(e) => {
            let mut out = serde_json::json!({"ok": false, "code": e.code(),
                "message": e.to_string(), "attempts": attempts(e.attempts())});
            send(&mut out);
            out
        }
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 4 {
        eprintln!("usage: crash-child SERVER TRUST_JSON CACHE_DIR MODEL (see the module docs)");
        return std::process::ExitCode::from(2);
    }
    println!("{}", run(&args));
    std::process::ExitCode::SUCCESS
}
