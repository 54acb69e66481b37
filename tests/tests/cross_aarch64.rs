//! The client on 64-bit ARM Linux (issue 33): the `fetch` example cross-built for
//! aarch64-unknown-linux-gnu, with the aarch64 ExecuTorch runtime, run under qemu against a
//! native server. It resolves, downloads (resuming after a SIGKILL mid-download), verifies,
//! caches, falls back from a delegate the ARM runtime lacks to XNNPACK's ARM kernels, matches
//! the reference output, and reports telemetry the server counts.
//!
//! Not part of `cargo test`: `tests/cross-aarch64.sh` (run by `tests/run`) builds the binary
//! and runs this with `FERRY_AARCH64_FETCH` set to it (`FERRY_AARCH64_RUNNER` overrides
//! `qemu-aarch64 -L /`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp};
use ferry_tests::proxy::{Fault, FaultProxy};

fn fetch_binary() -> PathBuf {
    let path = std::env::var("FERRY_AARCH64_FETCH")
        .expect("FERRY_AARCH64_FETCH names the cross-built fetch example (tests/cross-aarch64.sh)");
    let path = PathBuf::from(path);
    assert!(path.is_file(), "{} is not a file", path.display());
    path
}

/// `qemu-aarch64 -L / FETCH ARGS...` (or the runner the environment names).
fn fetch(proxy: &FaultProxy, app: &TestApp, cache: &Path) -> Command {
    let runner = std::env::var("FERRY_AARCH64_RUNNER").unwrap_or("qemu-aarch64 -L /".into());
    let mut words = runner.split_whitespace();
    let mut cmd = Command::new(words.next().expect("a runner"));
    cmd.args(words).arg(fetch_binary());
    let trust = app.dir.path().join("keys/trust.json");
    let golden = ferry_tests::fixtures_dir().join("pte/mlp-v1-xnnpack.json");
    cmd.args(["--server", &proxy.url(), "--model", "demo-mlp"])
        .arg("--trust")
        .arg(trust)
        .arg("--cache")
        .arg(cache)
        .args([
            "--platform",
            "linux",
            "--soc",
            "RK3588",
            "--device-model",
            "camera-x1",
        ])
        .args([
            "--install-id",
            "arm-camera-1",
            "--claim-backends",
            "VulkanBackend",
        ])
        .arg("--input")
        .arg(golden)
        .args(["--json", "--send-telemetry"]);
    cmd
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "fetch failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn blob_requests(proxy: &FaultProxy, from: usize) -> Vec<Option<String>> {
    proxy.log()[from..]
        .iter()
        .filter(|l| l.line.contains("/v1/blobs/"))
        .map(|l| l.range.clone())
        .collect()
}

#[test]
fn the_aarch64_client_loads_resumes_caches_falls_back_and_reports_under_qemu() {
    let app = TestApp::start_with(Options {
        demo: true,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.telemetry.flush_secs = 1;
            c.telemetry.evaluate_ms = 0;
        })),
    });
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");

    // First run: the blob trickles in, and the process is killed mid-download.
    proxy.blob_faults([Fault::Trickle(256, Duration::from_millis(60))]);
    let mut child = fetch(&proxy, &app, cache.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn qemu");
    let blobs = cache.path().join("blobs/sha256");
    let partial = || -> Option<(PathBuf, u64)> {
        std::fs::read_dir(&blobs).ok()?.flatten().find_map(|e| {
            let p = e.path();
            let len = e.metadata().ok()?.len();
            (p.extension().is_some_and(|x| x == "part") && len >= 1024).then_some((p, len))
        })
    };
    let mut waited = 0;
    while partial().is_none() {
        std::thread::sleep(Duration::from_millis(20));
        waited += 1;
        assert!(
            waited < 1500,
            "the aarch64 client never started downloading"
        );
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let (part, have) = partial().expect("the partial download survives the kill");

    // Second run: resumes with a Range request, falls back from Vulkan (the ARM runtime does
    // not register it) to XNNPACK, matches the reference, sends its telemetry.
    proxy.clear_faults();
    let before = proxy.log().len();
    let v = json_of(&fetch(&proxy, &app, cache.path()).output().expect("run"));
    let ranges = blob_requests(&proxy, before);
    let resumed_from: u64 = ranges
        .iter()
        .flatten()
        .find_map(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
        .unwrap_or_else(|| panic!("no Range request resumed the download: {ranges:?}"));
    assert!(
        resumed_from > 0 && resumed_from <= have,
        "{resumed_from} of {have}"
    );
    assert!(!part.exists(), "the partial file became the blob");
    assert_eq!(v["variant"], "xnnpack-fp32", "{v:#}");
    assert_eq!(v["source"], "downloaded");
    let attempts = v["attempts"].as_array().expect("attempts");
    assert_eq!(attempts[0]["variant"], "vulkan-fp32", "{v:#}");
    assert!(
        v["registered_backends"]
            .as_array()
            .is_some_and(|b| b.iter().any(|x| x == "XnnpackBackend")),
        "{v:#}"
    );
    let diff = v["max_abs_diff"]
        .as_f64()
        .expect("compared with the reference");
    assert!(diff < 1e-5, "aarch64 XNNPACK output differs by {diff}");
    assert_eq!(v["telemetry"]["queued"], 0, "{v:#}");
    assert!(
        v["telemetry"]["sent"].as_u64().is_some_and(|n| n >= 3),
        "{v:#}"
    );

    // Third run: everything from the verified cache, no blob fetched.
    let before = proxy.log().len();
    let v = json_of(&fetch(&proxy, &app, cache.path()).output().expect("run"));
    assert_eq!(v["source"], "cached", "{v:#}");
    assert!(blob_requests(&proxy, before).is_empty());

    // The server counted the ARM device's fallback and run times (receipted events).
    let mut seen = serde_json::Value::Null;
    for _ in 0..100 {
        let (_, h) = app.get_json("/v1/admin/models/demo-mlp/health", Some(ADMIN_TOKEN));
        let variants = h["releases"][0]["variants"].clone();
        let of = |id: &str| {
            variants
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| x["variant"] == id)
                .cloned()
                .unwrap_or_default()
        };
        let (vulkan, xnnpack) = (of("vulkan-fp32"), of("xnnpack-fp32"));
        if vulkan["by_soc"]["RK3588"]["fallbacks"].as_u64() >= Some(1)
            && xnnpack["inference"]["runs"].as_u64() >= Some(1)
        {
            return;
        }
        seen = h;
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the server never counted the aarch64 device's telemetry: {seen:#}");
}
