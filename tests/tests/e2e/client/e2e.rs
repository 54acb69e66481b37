//! The client end to end: real server, real client, real fixtures, the real ExecuTorch runtime,
//! and a loopback proxy that breaks the network on purpose.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{Client, ClientBuilder, ClientError, DeviceInfo, Source, max_abs_diff};
use ferry_shared::Sha256Digest;
use ferry_shared::manifest::{Golden, Platform};
use ferry_shared::wire::telemetry::{EventKind, Outcome};
use ferry_tests::app::{Options, TestApp};
use ferry_tests::kit::{DeviceExt as _, device, quick_limits};
use ferry_tests::proxy::{Fault, FaultProxy};

pub(crate) fn demo() -> TestApp {
    TestApp::start_with(Options {
        demo: true,
        keys: None,
        store: None,
        tweak: None,
    })
}

pub(crate) fn client(app: &TestApp, server: &str, cache: &Path) -> Client {
    app.client_at(server, cache)
        .download_limits(quick_limits())
        .build()
        .expect("client")
}

/// A phone on `platform` claiming `claims` (the device of this folder's load tests).
pub(crate) fn phone(platform: Platform, claims: &[&str]) -> DeviceInfo {
    device("e2e-device")
        .platform(platform)
        .os("17.0")
        .model("test phone")
        .soc("SM8550")
        .ram(8192)
        .claims(claims)
}

pub(crate) fn sidecar(name: &str) -> Golden {
    let bytes = std::fs::read(ferry_tests::fixtures_dir().join("pte").join(name)).expect("sidecar");
    serde_json::from_slice(&bytes).expect("golden")
}

/// Every verified blob in the cache hashes to its name; nothing else is there but `.part`s.
pub(crate) fn assert_cache_clean(cache: &Path) {
    for e in std::fs::read_dir(cache.join("blobs/sha256"))
        .expect("blobs dir")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".part") || name.ends_with(".etag") {
            continue;
        }
        let bytes = std::fs::read(e.path()).expect("read");
        assert_eq!(
            Sha256Digest::of(&bytes).to_hex(),
            name,
            "corrupted file in the cache"
        );
    }
    let index = std::fs::read(cache.join("index.json")).expect("index");
    serde_json::from_slice::<serde_json::Value>(&index).expect("index is valid JSON");
}

/// The queue after a flush: the `events` already queued and the timings of the runs made
/// (one inference event).
fn with_run_timings(
    c: &ferry_client::Client,
    events: usize,
) -> Vec<ferry_shared::wire::telemetry::TelemetryEvent> {
    c.flush_inference();
    let queued = c.telemetry_pending();
    assert_eq!(
        queued.len(),
        events + 1,
        "{:?}",
        queued.iter().map(|e| e.kind).collect::<Vec<_>>()
    );
    assert_eq!(
        queued
            .iter()
            .filter(|e| e.kind == EventKind::Inference)
            .count(),
        1
    );
    queued
}

#[test]
fn claimed_delegates_fail_on_the_real_runtime_and_xnnpack_runs() {
    let app = demo();
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &app.url(), cache.path());
    assert_eq!(c.registered_backends(), ["XnnpackBackend"]);

    let mut loaded = c
        .load(
            "demo-mlp",
            &phone(Platform::Ios, &["CoreMLBackend", "VulkanBackend"]),
        )
        .expect("loads");
    assert_eq!(loaded.variant, "xnnpack-fp32");
    assert_eq!(loaded.source, Source::Downloaded);
    let tried: Vec<(&str, &str)> = loaded
        .attempts
        .iter()
        .map(|a| (a.variant.as_str(), a.error_code.as_str()))
        .collect();
    assert_eq!(
        tried,
        [
            ("coreml-fp32", "runtime_load_failed"),
            ("vulkan-fp32", "runtime_load_failed")
        ]
    );
    // The real runtime's error, with the missing delegate named.
    assert!(
        loaded.attempts[0].message.contains("NotFound (0x20)"),
        "{:?}",
        loaded.attempts[0]
    );
    assert!(
        loaded.attempts[0].message.contains("needs CoreMLBackend"),
        "{:?}",
        loaded.attempts[0]
    );
    assert!(loaded.attempts[1].message.contains("needs VulkanBackend"));

    // The load report says the same in one value: the stage, the missing backend, what the
    // runtime registers, and what the chosen program delegates.
    let r = &loaded.report;
    assert_eq!(
        (
            r.variant.as_deref(),
            r.delegate.as_deref(),
            r.source.as_str()
        ),
        (Some("xnnpack-fp32"), Some("xnnpack"), "downloaded")
    );
    assert_eq!(r.registered_backends, ["XnnpackBackend"]);
    let stages: Vec<(&str, &str)> = r
        .attempts
        .iter()
        .map(|a| (a.variant.as_str(), a.stage.as_str()))
        .collect();
    assert_eq!(
        stages,
        [
            ("coreml-fp32", "load_method"),
            ("vulkan-fp32", "load_method")
        ]
    );
    assert!(r.attempts[0].message.contains("needs CoreMLBackend"));
    assert!(r.attempts.iter().all(|a| a.duration_ms > 0.0));
    // Delegation from the verified program agrees with the exporter's own account.
    let truth: serde_json::Value = serde_json::from_slice(
        &std::fs::read(ferry_tests::fixtures_dir().join("pte/mlp-v1-xnnpack.json"))
            .expect("sidecar"),
    )
    .expect("json");
    let method = &truth["expected"]["methods"][0];
    assert_eq!(
        serde_json::to_value(&r.delegated).expect("json"),
        method["delegate_calls"]
    );
    assert_eq!(
        serde_json::to_value(&r.portable_kernels).expect("json"),
        method["kernel_calls"]
    );
    let json = serde_json::to_value(r).expect("the report serialises");
    assert_eq!(json["attempts"][1]["stage"], "load_method");
    // The demo manifest carries a golden check; it ran.
    assert!(loaded.golden_max_abs_diff.is_some_and(|d| d < 1e-5));

    // forward matches the exporter's eager output.
    let g = sidecar("mlp-v1-xnnpack.json");
    let out = loaded.run(&g.input).expect("forward");
    let diff = max_abs_diff(&out, &g.output).expect("same shapes");
    assert!(diff <= g.atol, "max |diff| {diff}");

    // Telemetry: the fallbacks and the final load are queued on disk.
    let events = c.telemetry_pending();
    let fallbacks: Vec<(String, Option<String>)> = events
        .iter()
        .filter(|e| e.kind == EventKind::Fallback)
        .map(|e| (e.variant.clone(), e.to_variant.clone()))
        .collect();
    assert_eq!(
        fallbacks,
        [
            ("coreml-fp32".to_string(), Some("vulkan-fp32".to_string())),
            ("vulkan-fp32".to_string(), Some("xnnpack-fp32".to_string()))
        ]
    );
    let ok = events
        .iter()
        .find(|e| e.kind == EventKind::Load && e.outcome == Outcome::Ok)
        .expect("load ok event");
    assert_eq!(
        (ok.variant.as_str(), ok.runtime_version.as_str()),
        ("xnnpack-fp32", "1.5.1")
    );
    assert!(events.iter().any(|e| e.kind == EventKind::Load
        && e.outcome == Outcome::Failed
        && e.error_code.as_deref() == Some("runtime_load_failed")));
    // Each failure says at which stage it happened (a missing delegate: loading the method),
    // as the load report does; the successful load names none.
    for e in events.iter().filter(|e| e.outcome == Outcome::Failed) {
        assert_eq!(e.stage.as_deref(), Some("load_method"), "{e:?}");
    }
    assert_eq!(ok.stage, None);
    // Sending delivers the queue to the server, which aggregates it into fleet health.
    // With the events, the send takes the timings of the runs above.
    let queued = with_run_timings(&c, events.len());
    let report = c.send_telemetry();
    assert_eq!((report.sent, report.queued), (queued.len(), 0));
    assert!(c.telemetry_pending().is_empty());
    let (status, health) = app.get_json(
        "/v1/admin/models/demo-mlp/health",
        Some(ferry_tests::app::READ_TOKEN),
    );
    assert_eq!(status, 200);
    let variants = health["releases"][0]["variants"]
        .as_array()
        .expect("variants");
    let coreml = variants
        .iter()
        .find(|v| v["variant"] == "coreml-fp32")
        .expect("coreml reported");
    assert_eq!(coreml["load_failures"], 1);
    assert_eq!(coreml["fallbacks_to"]["vulkan-fp32"], 1);
    let xnn = variants
        .iter()
        .find(|v| v["variant"] == "xnnpack-fp32")
        .expect("xnnpack reported");
    assert_eq!(
        (xnn["loads"].as_u64(), xnn["load_failures"].as_u64()),
        (Some(1), Some(0))
    );

    // A second load comes from the cache and re-verifies it.
    let again = c
        .load("demo-mlp", &phone(Platform::Linux, &[]))
        .expect("loads again");
    assert_eq!(
        (again.variant.as_str(), again.source.clone()),
        ("xnnpack-fp32", Source::Cached)
    );
    assert_cache_clean(cache.path());
}

#[test]
fn downloads_cut_at_many_offsets_resume_to_the_exact_file() {
    let app = demo();
    let proxy = FaultProxy::start(app.server.addr);
    let size = 6048;
    for (i, faults) in [
        vec![Fault::CutAt(1)],
        vec![Fault::CutAt(100), Fault::CutAt(2000)],
        vec![Fault::CutAt(4096), Fault::IgnoreRange],
        vec![Fault::CutAt(size - 1)],
        vec![Fault::Stall(3000, Duration::from_secs(4))],
        vec![Fault::CutAt(0), Fault::Unavailable, Fault::CutAt(10)],
    ]
    .into_iter()
    .enumerate()
    {
        let cache = tempfile::tempdir().expect("tmp");
        let c = client(&app, &proxy.url(), cache.path());
        let before = proxy.log().len();
        proxy.blob_faults(faults.clone());
        let loaded = c
            .load("demo-mlp", &phone(Platform::Linux, &[]))
            .unwrap_or_else(|e| panic!("case {i} {faults:?}: {e}"));
        assert_eq!(loaded.variant, "xnnpack-fp32");
        let bytes = std::fs::read(&loaded.path).expect("read");
        let want = std::fs::read(ferry_tests::fixtures_dir().join("pte/mlp-v1-xnnpack.pte"))
            .expect("fixture");
        assert_eq!(bytes, want, "case {i}");
        assert_cache_clean(cache.path());
        // After a cut the client asked for the rest, not the whole file again.
        let ranges: Vec<Option<String>> = proxy.log()[before..]
            .iter()
            .filter(|l| l.line.contains("/v1/blobs/"))
            .map(|l| l.range.clone())
            .collect();
        if let Fault::CutAt(n) = faults[0]
            && n > 0
        {
            assert_eq!(
                ranges.get(1).cloned().flatten(),
                Some(format!("bytes={n}-")),
                "case {i}: {ranges:?}"
            );
        }
    }
}

#[test]
fn corrupted_and_swapped_bytes_never_reach_the_cache_or_runtime() {
    let app = demo();
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &proxy.url(), cache.path());
    // Each candidate (only xnnpack on this Linux device) gets a flipped byte: a clear error.
    proxy.blob_faults([Fault::FlipByte(3000)]);
    let err = c
        .load("demo-mlp", &phone(Platform::Linux, &[]))
        .expect_err("flipped byte");
    let ClientError::AllCandidatesFailed { attempts } = &err else {
        panic!("unexpected {err}")
    };
    assert_eq!(attempts[0].error_code, "hash_mismatch");
    assert_cache_clean(cache.path());
    assert!(
        !cache
            .path()
            .join("blobs/sha256")
            .read_dir()
            .expect("dir")
            .flatten()
            .any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.len() == 64
            }),
        "no blob may be stored"
    );

    // A swapped blob (another valid program under this digest) is refused the same way.
    let other =
        std::fs::read(ferry_tests::fixtures_dir().join("pte/mlp-v2-xnnpack.pte")).expect("fixture");
    proxy.blob_faults([Fault::Replace(other)]);
    let err = c
        .load("demo-mlp", &phone(Platform::Linux, &[]))
        .expect_err("swapped");
    let ClientError::AllCandidatesFailed { attempts } = &err else {
        panic!("unexpected {err}")
    };
    assert_eq!(attempts[0].error_code, "hash_mismatch");
    assert_cache_clean(cache.path());

    // Then a clean download works.
    let loaded = c
        .load("demo-mlp", &phone(Platform::Linux, &[]))
        .expect("clean");
    assert_eq!(loaded.variant, "xnnpack-fp32");
}

#[test]
fn a_full_disk_is_a_clear_error_and_the_cache_stays_consistent() {
    let app = demo();
    let mount = tempfile::tempdir().expect("tmp");
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8k", "tmpfs"])
        .arg(mount.path())
        .status()
        .expect("run mount");
    assert!(
        status.success(),
        "mounting a small tmpfs needs root (CI and the dev machines run as root)"
    );
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _guard = Unmount(mount.path());
    let c = client(&app, &app.url(), mount.path());
    let e = c
        .load("demo-mlp", &phone(Platform::Linux, &[]))
        .expect_err("disk full");
    assert_eq!(e.code(), "disk_full", "{e}");
    // No partial file left, no blob, index still valid.
    let leftovers: Vec<String> = std::fs::read_dir(mount.path().join("blobs/sha256"))
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        leftovers.iter().all(|n| n.ends_with(".etag")),
        "{leftovers:?}"
    );
    assert_cache_clean(mount.path());
}

#[test]
fn a_download_killed_mid_way_resumes_in_the_next_process() {
    let app = demo();
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let trust_path = app.dir.path().join("keys/trust.json");
    // The blob trickles in 256-byte chunks so the child is mid-download when killed.
    proxy.blob_faults([Fault::Trickle(256, Duration::from_millis(60))]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_download-child"))
        .arg(proxy.url())
        .arg(&trust_path)
        .arg(cache.path())
        .arg("demo-mlp")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn child");
    let digest = "9b791329b3c3bc9d268a846df09d51489975c7a4ae57bd49f6402af15b25764a";
    let part = cache.path().join(format!("blobs/sha256/{digest}.part"));
    let mut waited = 0;
    while std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0) < 1024 {
        std::thread::sleep(Duration::from_millis(20));
        waited += 1;
        assert!(waited < 500, "the child never started downloading");
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let have = std::fs::metadata(&part)
        .map(|m| m.len())
        .expect("part survives the kill");
    assert!(have > 0 && have < 6048, "{have}");

    let before = proxy.log().len();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_download-child"))
        .arg(proxy.url())
        .arg(&trust_path)
        .arg(cache.path())
        .arg("demo-mlp")
        .output()
        .expect("second child");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let range = proxy.log()[before..]
        .iter()
        .find(|l| l.line.contains("/v1/blobs/"))
        .and_then(|l| l.range.clone());
    let start: u64 = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse().ok())
        .expect("the second process resumed with a Range request");
    assert!(
        start > 0 && start <= have,
        "resumed from {start}, had {have}"
    );
    let bytes =
        std::fs::read(cache.path().join(format!("blobs/sha256/{digest}"))).expect("complete blob");
    assert_eq!(Sha256Digest::of(&bytes).to_hex(), digest);
    assert!(!part.exists());
}

#[test]
fn eviction_keeps_the_budget_and_the_last_known_good() {
    let app = demo();
    let cache = tempfile::tempdir().expect("tmp");
    let c = ClientBuilder::new(app.url(), app.trust())
        .cache_dir(cache.path())
        .cache_budget(8 * 1024)
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .build()
        .expect("client");
    // Downloads Core ML (11 KB) and Vulkan (6 KB) that fail, then XNNPACK (6 KB).
    let loaded = c
        .load(
            "demo-mlp",
            &phone(Platform::Ios, &["CoreMLBackend", "VulkanBackend"]),
        )
        .expect("loads");
    assert_eq!(loaded.variant, "xnnpack-fp32");
    let blobs: Vec<String> = std::fs::read_dir(cache.path().join("blobs/sha256"))
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 64)
        .collect();
    assert_eq!(
        blobs,
        ["9b791329b3c3bc9d268a846df09d51489975c7a4ae57bd49f6402af15b25764a"]
    );
}

#[test]
fn telemetry_autosend_delivers_in_the_background() {
    let app = demo();
    let cache = tempfile::tempdir().expect("tmp");
    let c = ClientBuilder::new(app.url(), app.trust())
        .cache_dir(cache.path())
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .telemetry_autosend(true)
        .build()
        .expect("client");
    c.load("demo-mlp", &phone(Platform::Android, &["VulkanBackend"]))
        .expect("loads");
    let mut waited = 0;
    loop {
        let (_, h) = app.get_json(
            "/v1/admin/models/demo-mlp/health",
            Some(ferry_tests::app::READ_TOKEN),
        );
        let fallbacks = h["releases"][0]["variants"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["variant"] == "vulkan-fp32")
            .and_then(|v| v["fallbacks"].as_u64());
        if fallbacks == Some(1) && c.telemetry_pending().is_empty() {
            break;
        }
        waited += 1;
        assert!(waited < 100, "telemetry never arrived: {h}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
