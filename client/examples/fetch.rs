//! Loads a model from a ferry server into the real ExecuTorch runtime, printing each step.
//!
//! ```sh
//! cargo run -p ferry-client --features executorch --example fetch -- \
//!   --server http://127.0.0.1:8080 --model demo-mlp --trust ferry-data/keys/trust.json \
//!   --cache /tmp/ferry-cache --platform ios --claim-backends CoreMLBackend \
//!   --input tests/fixtures/pte/mlp-v1-xnnpack.json
//! ```
//!
//! With `--json` it prints one JSON object: `release`, `variant`, `delegate`, `path`,
//! `data_files` (the verified `.ptd` files it was loaded with), `assets` (name to verified
//! file), `labels` and `preprocess` (the release's signed metadata, or null),
//! `attempts` (each `{variant, delegate, stage, error_code, message}`), `registered_backends`,
//! `source`, `report` (the load report, see `docs/client.md`),
//! `method`, its `signature` (inputs and outputs with element types and shapes) and, with
//! `--input`, `max_abs_diff` of the method's outputs against the sidecar's, and with
//! `--send-telemetry`, `telemetry` (`sent`, `queued`). A failed load prints `error`,
//! `message` and, when every candidate failed or crashed, `attempts` (and `telemetry`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo, Source, max_abs_diff};
use ferry_shared::manifest::{Golden, Platform};
use ferry_shared::trust::TrustFile;

#[derive(Parser)]
#[command(about = "Load a model from a ferry server into ExecuTorch")]
struct Args {
    /// Server URL.
    #[arg(long)]
    server: String,
    /// Model name.
    #[arg(long)]
    model: String,
    /// Trust file (a server's keys/trust.json).
    #[arg(long)]
    trust: PathBuf,
    /// Cache folder.
    #[arg(long)]
    cache: PathBuf,
    /// App version.
    #[arg(long, default_value = "1.0.0")]
    app_version: semver::Version,
    /// Platform: android, ios, linux, macos, windows, other.
    #[arg(long, default_value = "linux")]
    platform: String,
    /// OS version.
    #[arg(long, default_value = "")]
    os_version: String,
    /// Device model.
    #[arg(long, default_value = "")]
    device_model: String,
    /// SoC.
    #[arg(long, default_value = "")]
    soc: String,
    /// RAM in MiB.
    #[arg(long, default_value_t = 4096)]
    ram_mb: u64,
    /// Install id.
    #[arg(long, default_value = "fetch-example")]
    install_id: String,
    /// Backends to claim beyond those the runtime registered (comma-separated).
    #[arg(long, value_delimiter = ',')]
    claim_backends: Vec<String>,
    /// The method to load and run (`forward` unless given).
    #[arg(long, default_value = "forward")]
    method: String,
    /// A sidecar JSON (`input`, `output`, `atol`; for another method than `forward`, its own
    /// under `methods.NAME`) to run the method on.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Print one JSON object instead of steps.
    #[arg(long)]
    json: bool,
    /// Send the queued telemetry (load, fallback, crash and run-time events) before exiting,
    /// also when the load failed; with `--json` the object gets `telemetry: {sent, queued}`.
    #[arg(long)]
    send_telemetry: bool,
    /// Forget the crashes recorded for the model first, so variants that crashed this app
    /// natively on an earlier launch are tried again (docs/client.md, "Crash-safe loading").
    #[arg(long)]
    forget_crashes: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if args.json {
                let mut out = serde_json::json!({ "error": e.0, "message": e.1 });
                if !e.2.is_empty() {
                    out["attempts"] = serde_json::Value::Array(e.2);
                }
                if let Some((sent, queued)) = e.3 {
                    out["telemetry"] = serde_json::json!({"sent": sent, "queued": queued});
                }
                println!("{out}");
            } else {
                eprintln!("fetch: {} ({})", e.1, e.0);
                if let Some((sent, queued)) = e.3 {
                    eprintln!("telemetry: {sent} events sent, {queued} still queued");
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// What failed: the code, the message, the attempts of a load whose candidates all failed or
/// crashed, and the telemetry sent after it (`--send-telemetry`).
type Failure = (
    String,
    String,
    Vec<serde_json::Value>,
    Option<(usize, usize)>,
);

fn attempt_json(a: &ferry_client::Attempt) -> serde_json::Value {
    serde_json::json!({"variant": a.variant, "delegate": a.delegate, "stage": a.stage, "error_code": a.error_code, "message": a.message})
}

/// One line per asset: its verified file, or for a sealed variant its size through the
/// decrypting reader (the cached file is ciphertext).
fn print_assets(loaded: &ferry_client::LoadedModel) {
    for (name, path) in loaded.assets() {
        if !loaded.is_sealed() {
            println!("asset {name}: {}", path.display());
            continue;
        }
        let size = loaded
            .open_asset(name)
            .and_then(|mut r| {
                std::io::Seek::seek(&mut r, std::io::SeekFrom::End(0))
                    .map_err(|e| ferry_client::ClientError::Config(e.to_string()))
            })
            .map_or_else(|e| format!("unreadable: {e}"), |n| format!("{n} bytes"));
        println!("asset {name}: sealed, {size} through open_asset");
    }
}

fn run(args: &Args) -> Result<(), Failure> {
    let fail = |code: &str, m: String| (code.to_string(), m, Vec::new(), None);
    let trust_bytes = std::fs::read(&args.trust)
        .map_err(|e| fail("config_invalid", format!("{}: {e}", args.trust.display())))?;
    let trust =
        TrustFile::from_json(&trust_bytes).map_err(|e| fail("config_invalid", e.to_string()))?;
    let platform: Platform =
        serde_json::from_value(serde_json::Value::String(args.platform.clone())).map_err(|_| {
            fail(
                "config_invalid",
                format!("unknown platform {}", args.platform),
            )
        })?;
    let progress = progress_bar(args.json);
    let client = ClientBuilder::new(&args.server, trust)
        .cache_dir(&args.cache)
        .app_version(args.app_version.clone())
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .progress(progress)
        .method(args.method.clone())
        .build()
        .map_err(|e| fail(e.code(), e.to_string()))?;
    let registered = client.registered_backends();
    if !args.json {
        eprintln!("runtime registers: {}", registered.join(", "));
        if !args.claim_backends.is_empty() {
            eprintln!("device also claims: {}", args.claim_backends.join(", "));
        }
        eprintln!("resolving {} at {} ...", args.model, args.server);
    }
    let device = DeviceInfo {
        install_id: args.install_id.clone(),
        platform,
        os_version: args.os_version.clone(),
        device_model: args.device_model.clone(),
        soc: args.soc.clone(),
        ram_mb: args.ram_mb,
        claimed_backends: args.claim_backends.clone(),
    };
    if args.forget_crashes {
        let n = client
            .forget_crashes(Some(&args.model))
            .map_err(|e| fail(e.code(), e.to_string()))?;
        if !args.json {
            eprintln!("forgot {n} recorded crash(es) of {}", args.model);
        }
    }
    let mut loaded = client.load(&args.model, &device).map_err(|e| {
        let attempts = e.attempts().iter().map(attempt_json).collect();
        // What went wrong (a crash of an earlier launch among it) still reaches the server.
        let sent = args.send_telemetry.then(|| {
            let r = client.send_telemetry();
            (r.sent, r.queued)
        });
        (e.code().to_string(), e.to_string(), attempts, sent)
    })?;
    let mut diff = None;
    if let Some(path) = &args.input {
        let bytes = std::fs::read(path)
            .map_err(|e| fail("config_invalid", format!("{}: {e}", path.display())))?;
        let mut side: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| fail("config_invalid", format!("{}: {e}", path.display())))?;
        // Another method's inputs and outputs sit under `methods.NAME`; the tolerance is the
        // file's.
        if let Some(m) = side.pointer(&format!("/methods/{}", args.method)).cloned() {
            side["input"] = m["input"].clone();
            side["output"] = m["output"].clone();
        }
        let g: Golden = serde_json::from_value(side)
            .map_err(|e| fail("config_invalid", format!("{}: {e}", path.display())))?;
        let out = loaded
            .run(&g.input)
            .map_err(|e| fail(e.code.as_str(), e.message))?;
        diff = max_abs_diff(&out, &g.output);
    }
    // Telemetry goes after the run, with the run's timing: freeing the model queues it.
    let sent = args.send_telemetry.then(|| {
        client.flush_inference();
        client.send_telemetry()
    });
    let source = match &loaded.source {
        Source::Downloaded => "downloaded".to_string(),
        Source::Cached => "cached".to_string(),
        Source::LastKnownGood { code, .. } => format!("last_known_good ({code})"),
    };
    if args.json {
        let attempts: Vec<serde_json::Value> = loaded.attempts.iter().map(attempt_json).collect();
        let mut out = serde_json::json!({
            "release": loaded.release,
            "variant": loaded.variant,
            "delegate": loaded.delegate,
            "path": loaded.path,
            "data_files": loaded.data_files,
            "assets": loaded.assets(),
            "sealed": loaded.is_sealed(),
            "labels": loaded.labels(),
            "preprocess": loaded.preprocess(),
            "source": source,
            "attempts": attempts,
            "registered_backends": registered,
            "method": args.method,
            "signature": loaded.signature(&args.method).ok(),
            "report": loaded.report,
        });
        if let Some(d) = diff {
            out["max_abs_diff"] = serde_json::json!(d);
        }
        if let Some(r) = &sent {
            out["telemetry"] = serde_json::json!({"sent": r.sent, "queued": r.queued});
        }
        println!("{out}");
    } else {
        for a in &loaded.attempts {
            eprintln!(
                "  tried {} ({}): {} at {} — {}",
                a.variant,
                a.delegate,
                a.error_code,
                a.stage.as_str(),
                a.message
            );
        }
        println!(
            "loaded {} {} variant {} ({}) from {} [{source}]",
            loaded.model,
            loaded.release,
            loaded.variant,
            loaded.delegate,
            loaded.path.display()
        );
        if let Some(p) = loaded.preprocess() {
            println!(
                "preprocess (signed): {}",
                serde_json::to_string(p).unwrap_or_default()
            );
        }
        if let Some(l) = loaded.labels() {
            let shown: Vec<&str> = l.iter().take(5).map(String::as_str).collect();
            let more = if l.len() > shown.len() { ", ..." } else { "" };
            println!("labels: {} ({}{more})", l.len(), shown.join(", "));
        }
        print_assets(&loaded);
        if let Some(d) = diff {
            println!("forward matches the reference output: max |diff| = {d:e}");
        }
        if let Some(r) = &sent {
            println!(
                "telemetry: {} events sent, {} still queued",
                r.sent, r.queued
            );
        }
    }
    Ok(())
}

/// A progress bar on stderr, redrawn once per percent (nothing with `quiet`).
fn progress_bar(quiet: bool) -> ferry_client::ProgressFn {
    let shown = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    Arc::new(move |variant: &str, done: u64, total: u64| {
        if quiet || total == 0 {
            return;
        }
        let percent = done.saturating_mul(100) / total;
        if shown.swap(percent, std::sync::atomic::Ordering::Relaxed) == percent {
            return;
        }
        let filled = (percent / 4) as usize;
        // Small files in kB, so that a 20 kB model does not read "0.0/0.0 MB".
        let (scale, unit) = if total < 1_000_000 {
            (1e3, "kB")
        } else {
            (1e6, "MB")
        };
        eprint!(
            "\r  {variant} [{}{}] {percent:>3}% {:.1}/{:.1} {unit}",
            "#".repeat(filled),
            ".".repeat(25 - filled),
            done as f64 / scale,
            total as f64 / scale
        );
        if done == total {
            eprintln!();
        }
    })
}
