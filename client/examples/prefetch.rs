//! Resolves a model and downloads its best variant into the cache without loading it: what an
//! app does ahead of time (on Wi-Fi, at install). Needs no runtime, so it builds without the
//! `executorch` feature; the runtime version and backends are the ones given on the command
//! line. `bench/run` times it against `curl` and `openssl` on a 50 MB variant.
//!
//! ```sh
//! cargo run -p ferry-client --release --example prefetch -- \
//!   --server http://127.0.0.1:8080 --model demo-mlp --trust ferry-data/keys/trust.json \
//!   --cache /tmp/ferry-cache
//! ```
//!
//! Prints one JSON object: `release`, `variant`, `path`, `bytes` (the program file's size),
//! `seconds`, `rss_start_kb` (resident memory before the download) and `peak_rss_kb` (the
//! process's high-water resident memory), both from `/proc/self/status` where there is one.
//! `--no-delta` downloads files whole even when the cache holds chunks of them; `--no-compress`
//! downloads them as they are, never in the `ferry-grouped-zstd` encoding.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use ferry_client::cache::VerifiedBlob;
use ferry_client::{ClientBuilder, DeviceInfo, Program, Runtime, RuntimeError};
use ferry_shared::manifest::Platform;
use ferry_shared::trust::TrustFile;

#[derive(Parser)]
#[command(about = "Download a model's best variant into the client cache, without loading it")]
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
    /// Runtime version to announce.
    #[arg(long, default_value = "1.5.1")]
    runtime_version: semver::Version,
    /// Backends to announce (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "XnnpackBackend")]
    backends: Vec<String>,
    /// Platform: android, ios, linux, macos, windows, other.
    #[arg(long, default_value = "linux")]
    platform: String,
    /// Install id.
    #[arg(long, default_value = "prefetch-example")]
    install_id: String,
    /// Download every file whole, never from cached chunks (delta updates off).
    #[arg(long)]
    no_delta: bool,
    /// Never ask for the ferry-grouped-zstd encoding of a whole file.
    #[arg(long)]
    no_compress: bool,
}

/// A runtime that announces a version and backends but loads nothing.
struct Announce {
    version: semver::Version,
    backends: Vec<String>,
}

impl Runtime for Announce {
    fn version(&self) -> semver::Version {
        self.version.clone()
    }
    fn registered_backends(&self) -> Vec<String> {
        self.backends.clone()
    }
    fn open(&self, _blob: &VerifiedBlob) -> Result<Box<dyn Program>, RuntimeError> {
        Err(RuntimeError::load("this example only downloads"))
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("prefetch: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<serde_json::Value, String> {
    let started = Instant::now();
    let trust_bytes =
        std::fs::read(&args.trust).map_err(|e| format!("{}: {e}", args.trust.display()))?;
    let trust = TrustFile::from_json(&trust_bytes).map_err(|e| e.to_string())?;
    let platform: Platform =
        serde_json::from_value(serde_json::Value::String(args.platform.clone()))
            .map_err(|_| format!("unknown platform {}", args.platform))?;
    let client = ClientBuilder::new(&args.server, trust)
        .cache_dir(&args.cache)
        .app_version(args.app_version.clone())
        .download_limits(ferry_client::DownloadLimits {
            delta: !args.no_delta,
            compressed: !args.no_compress,
            ..ferry_client::DownloadLimits::default()
        })
        .runtime(Arc::new(Announce {
            version: args.runtime_version.clone(),
            backends: args.backends.clone(),
        }))
        .build()
        .map_err(|e| format!("{e} ({})", e.code()))?;
    let device = DeviceInfo {
        install_id: args.install_id.clone(),
        platform,
        os_version: String::new(),
        device_model: String::new(),
        soc: String::new(),
        ram_mb: 4096,
        claimed_backends: Vec::new(),
    };
    let rss_start_kb = status_kb("VmRSS");
    let got = client
        .prefetch(&args.model, &device)
        .map_err(|e| format!("{e} ({})", e.code()))?;
    let bytes = std::fs::metadata(&got.path).map(|m| m.len()).unwrap_or(0);
    Ok(serde_json::json!({
        "release": got.release,
        "variant": got.variant,
        "path": got.path,
        "bytes": bytes,
        "seconds": started.elapsed().as_secs_f64(),
        "rss_start_kb": rss_start_kb,
        "peak_rss_kb": status_kb("VmHWM"),
    }))
}

/// A KiB figure of this process's `/proc/self/status` (`VmRSS`, `VmHWM`), where there is one.
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
