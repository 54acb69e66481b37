//! A child process for the shared-cache tests: one app process using a cache that others use
//! too. Prints one JSON line with what happened.
//!
//! - `load-child load SERVER TRUST_JSON CACHE_DIR MODEL [BUDGET_BYTES] [HOLD_MS]`: loads the
//!   model (budget 512 MiB by default), runs `forward` on the fixture's input when it is the
//!   demo MLP, then keeps the model loaded `HOLD_MS` milliseconds before it exits.
//!   With `FERRY_TEST_ROOT_CERT` set (a DER file), HTTPS trusts that CA alone.
//! - `load-child push CACHE_DIR COUNT TAG`: appends COUNT telemetry events (variant
//!   `TAG-<i>`) to the cache's queue, one append each.
//! - `load-child send SERVER CACHE_DIR`: sends the queued telemetry.
//! - `load-child hold-index CACHE_DIR`: takes the cache's index lock, leaves a half-written
//!   staging file, prints a line and sleeps (to be killed).

use std::process::ExitCode;
use std::sync::Arc;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo};
use ferry_shared::manifest::Platform;
use ferry_shared::trust::TrustFile;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

fn device() -> DeviceInfo {
    DeviceInfo {
        install_id: format!("child-{}", std::process::id()),
        platform: Platform::Linux,
        os_version: "6.1".into(),
        device_model: "board".into(),
        soc: "RK3588".into(),
        ram_mb: 4096,
        claimed_backends: Vec::new(),
    }
}

fn load(args: &[String]) -> serde_json::Value {
    let (server, trust, cache, model) = (&args[0], &args[1], &args[2], &args[3]);
    let budget: u64 = args
        .get(4)
        .and_then(|b| b.parse().ok())
        .unwrap_or(512 << 20);
    let hold: u64 = args.get(5).and_then(|h| h.parse().ok()).unwrap_or(0);
    let trust = match std::fs::read(trust)
        .map_err(|e| e.to_string())
        .and_then(|b| TrustFile::from_json(&b).map_err(|e| e.to_string()))
    {
        Ok(t) => t,
        Err(e) => return serde_json::json!({"ok": false, "code": "config", "message": e}),
    };
    let mut builder = ClientBuilder::new(server, trust);
    if let Some(der) = std::env::var_os("FERRY_TEST_ROOT_CERT").and_then(|p| std::fs::read(p).ok())
    {
        builder = builder.root_certificate_der(der);
    }
    let client = match builder
        .cache_dir(cache)
        .cache_budget(budget)
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return serde_json::json!({"ok": false, "code": e.code(), "message": e.to_string()});
        }
    };
    match client.load(model, &device()) {
        Ok(m) => {
            let path = m.path.display().to_string();
            let source = format!("{:?}", m.source);
            let out = serde_json::json!({"ok": true, "release": m.release, "variant": m.variant,
                "path": path, "source": source});
            println!("{out}");
            std::thread::sleep(std::time::Duration::from_millis(hold));
            drop(m);
            serde_json::json!({"done": true})
        }
        Err(e) => serde_json::json!({"ok": false, "code": e.code(), "message": e.to_string()}),
    }
}

fn event(tag: &str, i: usize) -> TelemetryEvent {
    TelemetryEvent {
        kind: EventKind::Load,
        model: "demo-mlp".into(),
        release: "1.0.0".into(),
        variant: format!("{tag}-{i}"),
        delegate: "xnnpack".into(),
        outcome: Outcome::Ok,
        error_code: None,
        load_ms: Some(1.0),
        install_id: format!("push-{tag}"),
        platform: "linux".into(),
        soc: String::new(),
        device_model: String::new(),
        os_version: String::new(),
        app_version: "1.0.0".into(),
        runtime_version: "1.5.1".into(),
        at: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        to_variant: None,
        receipt: None,
        stage: None,
        clock_offset_s: None,
        inference: Default::default(),
        bytes_fetched: None,
        bytes_total: None,
        sources: Vec::new(),
        metric: Default::default(),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = match args.first().map(String::as_str) {
        Some("load") if args.len() >= 5 => load(&args[1..]),
        Some("push") if args.len() == 4 => {
            let q = ferry_client::telemetry::TelemetryQueue::new(
                std::path::Path::new(&args[1]),
                100_000,
            );
            let n: usize = args[2].parse().unwrap_or(0);
            let mut failed = 0;
            for i in 0..n {
                if q.push(&[event(&args[3], i)]).is_err() {
                    failed += 1;
                }
            }
            serde_json::json!({"ok": failed == 0, "pushed": n - failed})
        }
        Some("hold-index") if args.len() == 2 => {
            // What a process killed while writing the index leaves: the index lock held and a
            // staging file half written, until the kernel drops the lock at its death.
            let dir = std::path::Path::new(&args[1]);
            let _ = std::fs::create_dir_all(dir);
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(dir.join(".lock"));
            match lock.and_then(|f| f.lock().map(|()| f)) {
                Ok(_held) => {
                    let _ =
                        std::fs::write(dir.join(".index.json.1.0.tmp"), b"{\"version\": 1, \"mod");
                    println!("{}", serde_json::json!({"ok": true, "held": true}));
                    std::thread::sleep(std::time::Duration::from_secs(600));
                    serde_json::json!({"ok": true})
                }
                Err(e) => serde_json::json!({"ok": false, "message": e.to_string()}),
            }
        }
        Some("send") if args.len() == 3 => {
            let q = ferry_client::telemetry::TelemetryQueue::new(
                std::path::Path::new(&args[2]),
                100_000,
            );
            let agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .new_agent();
            let r = q.send(&agent, &args[1]);
            serde_json::json!({"ok": true, "sent": r.sent, "queued": r.queued})
        }
        _ => {
            eprintln!("usage: see the module documentation");
            return ExitCode::from(2);
        }
    };
    println!("{out}");
    ExitCode::SUCCESS
}
