//! A child process for the kill-during-download test: prefetches a model through the given
//! server URL into the given cache, then prints the variant it stored.
//!
//! Usage: `download-child SERVER TRUST_JSON CACHE_DIR MODEL`. After the variant it prints
//! `rss_start_kb=N hwm_kb=M`: the resident memory before the download and the process's peak.

use std::process::ExitCode;
use std::sync::Arc;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo};
use ferry_shared::manifest::Platform;
use ferry_shared::trust::TrustFile;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: download-child SERVER TRUST_JSON CACHE_DIR MODEL");
        return ExitCode::FAILURE;
    }
    let trust = match std::fs::read(&args[2])
        .map_err(|e| e.to_string())
        .and_then(|b| TrustFile::from_json(&b).map_err(|e| e.to_string()))
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("trust: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client = match ClientBuilder::new(&args[1], trust)
        .cache_dir(&args[3])
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let device = DeviceInfo {
        install_id: "child".into(),
        platform: Platform::Linux,
        os_version: String::new(),
        device_model: String::new(),
        soc: String::new(),
        ram_mb: 4096,
        claimed_backends: Vec::new(),
    };
    // The resident memory before the download (the client built, the runtime linked).
    let rss_start = status_kb("VmRSS");
    match client.prefetch(&args[4], &device) {
        Ok(p) => {
            println!("{} {}", p.variant, p.path.display());
            // The peak over the whole process, for tests that bound a download's memory.
            println!(
                "rss_start_kb={} hwm_kb={}",
                rss_start.unwrap_or(0),
                status_kb("VmHWM").unwrap_or(0)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{} ({})", e, e.code());
            ExitCode::FAILURE
        }
    }
}

/// A `kB` field of `/proc/self/status` (Linux), e.g. `VmRSS` or `VmHWM`.
fn status_kb(field: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .ok()
}
