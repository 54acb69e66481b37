//! A child process for the kill-during-download test: prefetches a model through the given
//! server URL into the given cache, then prints the variant it stored.
//!
//! Usage: `download-child SERVER TRUST_JSON CACHE_DIR MODEL`

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
    match client.prefetch(&args[4], &device) {
        Ok(p) => {
            println!("{} {}", p.variant, p.path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{} ({})", e, e.code());
            ExitCode::FAILURE
        }
    }
}
