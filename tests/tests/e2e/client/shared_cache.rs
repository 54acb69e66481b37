//! One cache, many processes: real OS processes (the `load-child` binary) sharing one cache
//! folder, as an app's UI process and background prefetch, or a camera's capture and analytics
//! services, do (docs/client.md, "Several processes, one cache").

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ferry_tests::app::{Options, TestApp};
use ferry_tests::proxy::{Fault, FaultProxy};

fn demo() -> TestApp {
    TestApp::start_with(Options {
        demo: true,
        ..Default::default()
    })
}

fn child(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_load-child"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn load-child")
}

/// The first JSON line a child printed, after it exited.
fn result(c: Child) -> serde_json::Value {
    let out = c.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().next().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|_| {
        panic!(
            "child printed {text:?} (stderr {})",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn blob_gets(proxy: &FaultProxy) -> usize {
    proxy
        .log()
        .iter()
        .filter(|l| l.line.starts_with("GET /v1/blobs/"))
        .count()
}

#[test]
fn processes_sharing_an_empty_cache_all_load_and_download_once() {
    let app = demo();
    let proxy = FaultProxy::start(app.server.addr);
    let trust = app.dir.path().join("keys/trust.json");
    let (trust, url) = (trust.to_str().expect("utf-8"), proxy.url());
    for round in 0..6 {
        let cache = tempfile::tempdir().expect("cache");
        let dir = cache.path().to_str().expect("utf-8");
        // The blob trickles in, so every process is there while it downloads.
        proxy.blob_faults((0..8).map(|_| Fault::Trickle(1024, Duration::from_millis(30))));
        let before = blob_gets(&proxy);
        let children: Vec<Child> = (0..4)
            .map(|_| child(&["load", &url, trust, dir, "demo-mlp"]))
            .collect();
        let results: Vec<serde_json::Value> = children.into_iter().map(result).collect();
        for r in &results {
            assert_eq!(r["ok"], true, "round {round}: {r}");
            assert_eq!(r["variant"], "xnnpack-fp32", "round {round}: {r}");
        }
        assert_eq!(
            blob_gets(&proxy) - before,
            1,
            "round {round}: one process downloads, the others wait for its file: {results:?}"
        );
        proxy.clear_faults();
    }
}

#[test]
fn a_process_killed_while_downloading_does_not_block_the_others() {
    let app = demo();
    let proxy = FaultProxy::start(app.server.addr);
    let trust = app.dir.path().join("keys/trust.json");
    let (trust, url) = (trust.to_str().expect("utf-8"), proxy.url());
    let cache = tempfile::tempdir().expect("cache");
    let dir = cache.path().to_str().expect("utf-8");
    // The first download crawls; its process is killed with SIGKILL mid-way, holding the
    // download lock, which the kernel releases.
    proxy.blob_faults([Fault::Trickle(256, Duration::from_millis(60))]);
    let mut victim = child(&["load", &url, trust, dir, "demo-mlp"]);
    let part = cache.path().join("blobs/sha256");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_dir(&part)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".part"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the download never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    victim.kill().expect("SIGKILL");
    let _ = victim.wait();
    let others: Vec<Child> = (0..3)
        .map(|_| child(&["load", &url, trust, dir, "demo-mlp"]))
        .collect();
    for r in others.into_iter().map(result) {
        assert_eq!(r["ok"], true, "{r}");
    }
}

#[test]
fn eviction_never_removes_a_program_another_process_holds() {
    let app = TestApp::start();
    let mut v1 = ferry_tests::app::mlp_v1();
    v1.model = "demo-mlp".parse().expect("name");
    app.publish(&v1);
    let trust = app.dir.path().join("keys/trust.json");
    let (trust, url) = (trust.to_str().expect("utf-8"), app.url());
    let cache = tempfile::tempdir().expect("cache");
    let dir = cache.path().to_str().expect("utf-8");
    // A holds 1.0.0 loaded for a while.
    let mut holder = child(&["load", &url, trust, dir, "demo-mlp", "536870912", "4000"]);
    let first = {
        use std::io::BufRead as _;
        let out = holder.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("line");
        serde_json::from_str::<serde_json::Value>(&line).expect("json")
    };
    assert_eq!(first["release"], "1.0.0", "{first}");
    let held = first["path"].as_str().expect("path").to_string();
    // 1.1.0 ships; B, with a budget of one byte, loads it: the model's last known good moves
    // to 1.1.0, so 1.0.0's file is protected only by A holding it.
    let mut v2 = ferry_tests::app::mlp_v2();
    v2.model = "demo-mlp".parse().expect("name");
    v2.version = "1.1.0".parse().expect("version");
    for v in &mut v2.variants {
        v.runtime = ">=1.0.0".parse().expect("range");
        v.app = "*".parse().expect("range");
    }
    app.publish(&v2);
    app.ship_model("demo-mlp", "1.1.0");
    let b = result(child(&["load", &url, trust, dir, "demo-mlp", "1"]));
    assert_eq!(
        (b["ok"].clone(), b["release"].clone()),
        (true.into(), "1.1.0".into()),
        "{b}"
    );
    assert!(
        Path::new(&held).exists(),
        "the program another process holds was evicted"
    );
    // A is killed while it holds the program (SIGKILL: the kernel drops its lock) and the next
    // eviction takes it.
    holder.kill().expect("SIGKILL");
    let _ = holder.wait();
    let c = result(child(&["load", &url, trust, dir, "demo-mlp", "1"]));
    assert_eq!(c["ok"], true, "{c}");
    assert!(
        !Path::new(&held).exists(),
        "an unheld old program is evicted"
    );
}

#[test]
fn the_telemetry_queue_loses_and_duplicates_nothing_with_concurrent_writers_and_senders() {
    let app = demo();
    let cache = tempfile::tempdir().expect("cache");
    let dir = cache.path().to_str().expect("utf-8");
    let writers: Vec<Child> = (0..6)
        .map(|i| child(&["push", dir, "40", &format!("w{i}")]))
        .collect();
    for r in writers.into_iter().map(result) {
        assert_eq!(r["ok"], true, "{r}");
    }
    let q = ferry_client::telemetry::TelemetryQueue::new(cache.path(), 100_000);
    let pending = q.pending();
    assert_eq!(pending.len(), 240, "no line lost or interleaved");
    let distinct: std::collections::BTreeSet<&str> =
        pending.iter().map(|e| e.variant.as_str()).collect();
    assert_eq!(distinct.len(), 240, "no line duplicated");
    // Three processes send at once: each event reaches the server once.
    let url = app.url();
    let senders: Vec<Child> = (0..3).map(|_| child(&["send", &url, dir])).collect();
    let sent: u64 = senders
        .into_iter()
        .map(result)
        .map(|r| r["sent"].as_u64().expect("sent"))
        .sum();
    assert_eq!(sent, 240, "each event sent by exactly one process");
    assert!(q.pending().is_empty());
    let m = app.metrics();
    let received: u64 = m
        .lines()
        .filter(|l| l.starts_with("ferry_telemetry_events_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(received, 240, "the server received each event once: {m}");
}

#[test]
fn processes_loading_different_models_under_a_tiny_budget_all_succeed() {
    let app = demo();
    app.publish(&ferry_tests::app::mlp_v1());
    let trust = app.dir.path().join("keys/trust.json");
    let (trust, url) = (trust.to_str().expect("utf-8"), app.url());
    let cache = tempfile::tempdir().expect("cache");
    let dir = cache.path().to_str().expect("utf-8");
    for round in 0..5 {
        // A budget of one byte: every load evicts whatever it may.
        let children: Vec<Child> = (0..6)
            .map(|i| {
                let model = if i % 2 == 0 { "demo-mlp" } else { "mlp" };
                child(&["load", &url, trust, dir, model, "1"])
            })
            .collect();
        for r in children.into_iter().map(result) {
            assert_eq!(r["ok"], true, "round {round}: {r}");
        }
    }
    // Each model's last known good survived every other process's eviction.
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cache.path().join("index.json")).expect("index"))
            .expect("json");
    for model in ["demo-mlp", "mlp"] {
        let hex = index["models"][model]["sha256"].as_str().expect("entry");
        assert!(
            cache.path().join("blobs/sha256").join(hex).exists(),
            "{model}'s last known good was evicted"
        );
    }
}

#[test]
fn a_process_killed_while_it_holds_the_index_lock_blocks_no_one_for_long() {
    let app = demo();
    let trust = app.dir.path().join("keys/trust.json");
    let (trust, url) = (trust.to_str().expect("utf-8"), app.url());
    let cache = tempfile::tempdir().expect("cache");
    let dir = cache.path().to_str().expect("utf-8");
    // A first load fills the cache; then a process holds the index lock mid-write.
    assert_eq!(
        result(child(&["load", &url, trust, dir, "demo-mlp"]))["ok"],
        true
    );
    let mut writer = child(&["hold-index", dir]);
    {
        use std::io::BufRead as _;
        let out = writer.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("line");
        assert!(line.contains("\"held\":true"), "{line}");
    }
    // Others wait on the lock while it lives...
    let waiting: Vec<Child> = (0..3)
        .map(|_| child(&["load", &url, trust, dir, "demo-mlp"]))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // ...and go on once it is killed: the kernel drops the lock, the index is intact.
    writer.kill().expect("SIGKILL");
    let _ = writer.wait();
    for r in waiting.into_iter().map(result) {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r["source"].as_str().unwrap_or("").contains("Cached"), "{r}");
    }
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cache.path().join("index.json")).expect("index"))
            .expect("the index is whole JSON");
    assert!(index["models"]["demo-mlp"].is_object(), "{index}");
}
