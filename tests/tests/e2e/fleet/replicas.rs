//! Fleet state across replicas: three servers on one store (the local folder store, the moto
//! S3 emulator and the Azurite Azure Blob emulator) each see the whole fleet's telemetry, keep it across restarts,
//! and write one halt for a condition all three see.

use ferry_tests::fast_telemetry;
use ferry_tests::until;
use std::time::Duration;

use ferry_server::app::startup::RunningServer;
use ferry_server::storage::config::StorageConfig;
use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1, mlp_v2};
use ferry_tests::azurite::Azurite;
use ferry_tests::kit::Event;
use ferry_tests::moto::Moto;

fn event(outcome: &str, release: &str, install: &str, soc: &str, ms: f64) -> serde_json::Value {
    let e = Event::load("mlp", release, "xnnpack-fp32")
        .outcome(outcome)
        .install(install)
        .soc(soc)
        .set("load_ms", ms);
    if outcome == "failed" {
        e.set("error_code", "runtime_load_failed").json()
    } else {
        e.json()
    }
}

fn post_events(app: &TestApp, url: &str, events: &[serde_json::Value]) {
    app.post_receipted(url, events);
}

/// (loads, failures, devices, p50) of release 1.0.0's XNNPACK variant as `url` reports it.
fn numbers(url: &str) -> (u64, u64, u64, f64) {
    let h = ferry_tests::reports::model_health(url, "mlp", ADMIN_TOKEN);
    let v = h["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["release"] == "1.0.0")
        .and_then(|r| {
            r["variants"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["variant"] == "xnnpack-fp32")
                .cloned()
        })
        .unwrap_or_default();
    (
        v["loads"].as_u64().unwrap_or(0),
        v["load_failures"].as_u64().unwrap_or(0),
        v["devices"].as_u64().unwrap_or(0),
        v["load_ms"]["p50"].as_f64().unwrap_or(0.0),
    )
}

/// A server that publishes (and stays up) and three replicas on `storage` (None: the first
/// server's own folder store).
fn three(storage: Option<StorageConfig>) -> (TestApp, Vec<RunningServer>) {
    let s = storage.clone();
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(move |c| {
            fast_telemetry(c);
            if let Some(s) = s {
                c.storage = s;
            }
        })),
    });
    let replicas = (0..3)
        .map(|_| app.replica_with(storage.clone(), Box::new(fast_telemetry)))
        .collect();
    (app, replicas)
}

fn spread_and_restart(storage: Option<StorageConfig>) {
    let (app, replicas) = three(storage.clone());
    app.publish(&mlp_v1());
    let urls: Vec<String> = replicas.iter().map(RunningServer::url).collect();
    // 150 events to each replica: 50 devices each (150 in all), every 10th load failed, load
    // times 1..=150 ms.
    let mut expected_failures = 0;
    for (r, url) in urls.iter().enumerate() {
        let events: Vec<serde_json::Value> = (0..150)
            .map(|i| {
                let n = r * 150 + i;
                let outcome = if n % 10 == 0 { "failed" } else { "ok" };
                event(
                    outcome,
                    "1.0.0",
                    &format!("dev-{r}-{}", i % 50),
                    &format!("SOC-{}", n % 3),
                    1.0 + (n % 150) as f64,
                )
            })
            .collect();
        expected_failures += events.iter().filter(|e| e["outcome"] == "failed").count() as u64;
        post_events(&app, url, &events);
    }
    for url in &urls {
        until(
            &format!(
                "{url} sees the whole fleet: {:?}",
                ferry_tests::reports::model_health(url, "mlp", ADMIN_TOKEN)
            ),
            || numbers(url).0 == 450,
        );
    }
    let first = numbers(&urls[0]);
    assert_eq!(first.1, expected_failures);
    // Distinct devices: a HyperLogLog++ estimate, within its stated error of 150.
    assert!(
        (first.2 as f64 - 150.0).abs() / 150.0 < 0.03,
        "devices: {}",
        first.2
    );
    let mut exact: Vec<f64> = (0..450)
        .filter(|n| n % 10 != 0)
        .map(|n| 1.0 + (n % 150) as f64)
        .collect();
    exact.sort_by(f64::total_cmp);
    let median = exact[(exact.len() - 1) / 2];
    assert!(
        (first.3 - median).abs() / median <= 0.011,
        "p50 of the successful loads: {} (exact {median})",
        first.3
    );
    for url in &urls[1..] {
        assert_eq!(numbers(url), first, "{url} agrees");
    }
    // The server that only published sees the same, from the store alone (at its next
    // flush: it may not have read the others' last buckets yet).
    until(
        "a replica that received nothing sees the whole fleet",
        || numbers(&app.url()) == first,
    );
    // All three stop (gracefully); three new ones on the same store see the same numbers
    // from their first request.
    for r in replicas {
        r.stop();
    }
    let fresh: Vec<RunningServer> = (0..3)
        .map(|_| app.replica_with(storage.clone(), Box::new(fast_telemetry)))
        .collect();
    for r in &fresh {
        assert_eq!(numbers(&r.url()), first, "after restarting all three");
    }
}

#[test]
fn three_replicas_on_one_folder_store_share_health_across_restarts() {
    spread_and_restart(None);
}

#[test]
fn three_replicas_on_one_s3_bucket_share_health_across_restarts() {
    let moto = Moto::start("ferry-fleet");
    spread_and_restart(Some(moto.storage("ferry-fleet")));
}

#[test]
fn three_replicas_on_one_azurite_container_share_health_across_restarts() {
    let azurite = Azurite::start("ferry-fleet");
    spread_and_restart(Some(azurite.storage("ferry-fleet")));
}

#[test]
fn a_halt_seen_by_three_replicas_is_written_once() {
    halt_written_once(None);
}

#[test]
fn a_halt_seen_by_three_replicas_on_s3_is_written_once() {
    let moto = Moto::start("ferry-halt");
    halt_written_once(Some(moto.storage("ferry-halt")));
}

#[test]
fn a_halt_seen_by_three_replicas_on_azurite_is_written_once() {
    let azurite = Azurite::start("ferry-halt");
    halt_written_once(Some(azurite.storage("ferry-halt")));
}

fn halt_written_once(storage: Option<StorageConfig>) {
    let s = storage.clone();
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(move |c| {
            fast_telemetry(c);
            if let Some(s) = s {
                c.storage = s;
            }
        })),
    });
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let (s, plan) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(&serde_json::json!({"action": "start", "release": "2.0.0",
            "percent": "50", "max_failure_rate": 0.2, "min_samples": 90}))
        .expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{plan}");
    // The replicas start with the active plan in memory, so all three would halt it.
    let replicas: Vec<RunningServer> = (0..2)
        .map(|_| app.replica_with(storage.clone(), Box::new(fast_telemetry)))
        .collect();
    let urls: Vec<String> = std::iter::once(app.url())
        .chain(replicas.iter().map(RunningServer::url))
        .collect();
    // 40 failing loads of 2.0.0 to each replica: no replica alone reaches min_samples (90),
    // the fleet does (120), so each replica halts once it has read the others' rollups.
    for (r, url) in urls.iter().enumerate() {
        let events: Vec<serde_json::Value> = (0..40)
            .map(|i| event("failed", "2.0.0", &format!("h-{r}-{i}"), "SOC-1", 5.0))
            .collect();
        post_events(&app, url, &events);
    }
    until("the rollout halts", || {
        let (_, p) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
        p["current"]["state"] == "halted"
    });
    // More batches make every replica evaluate again after the halt.
    for url in &urls {
        post_events(&app, url, &[event("failed", "2.0.0", "late", "SOC-1", 5.0)]);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let (_, p) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    let halts = p["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|h| h["action"] == "auto-halt")
        .count();
    assert_eq!(halts, 1, "one halt revision: {}", p["history"]);

    // Resumed once the cause is fixed, it is not halted again by the loads that halted it.
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(&serde_json::json!({"action": "resume", "reason": "fixed"}))
            .expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    std::thread::sleep(Duration::from_millis(3000));
    let (_, p) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    assert_eq!(p["current"]["state"], "active", "{}", p["current"]);
}

#[test]
fn a_damaged_rollup_in_the_store_is_skipped_and_the_server_keeps_going() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(fast_telemetry)),
    });
    app.publish(&mlp_v1());
    let events: Vec<serde_json::Value> = (0..20)
        .map(|i| event("ok", "1.0.0", &format!("d-{i}"), "SOC-1", 5.0))
        .collect();
    post_events(&app, &app.url(), &events);
    let minutes = app.store_dir().join("telemetry/buckets/minute");
    // A bucket file in a minute's folder (the folder can appear a moment before its file).
    let bucket = || {
        std::fs::read_dir(&minutes).ok()?.flatten().find_map(|m| {
            std::fs::read_dir(m.path())
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "json"))
        })
    };
    until("the minute bucket is flushed", || bucket().is_some());
    let own = bucket().expect("a bucket");
    let minute_dir = own.parent().expect("its minute").to_path_buf();
    let mut evil: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&own).expect("read")).expect("json");
    // A sketch that claims samples its bins do not hold, over a huge key range.
    let sketch = &mut evil["models"]["mlp"]["1.0.0"]["xnnpack-fp32"]["load_ms"]["store"];
    assert!(sketch.is_object(), "{evil}");
    sketch["bins"] = serde_json::json!([]);
    sketch["count"] = 5.into();
    sketch["min_key"] = (-100_000).into();
    sketch["max_key"] = 100_000.into();
    std::fs::write(
        minute_dir.join("node-evil.0.json"),
        serde_json::to_vec(&evil).expect("json"),
    )
    .expect("write");
    std::fs::write(minute_dir.join("node-garbage.0.json"), b"{\"models\": 7").expect("write");
    // A compacted part and an earlier version's rollup, damaged too.
    let hour = app.store_dir().join("telemetry/buckets/hour/2026-01-01T00");
    std::fs::create_dir_all(&hour).expect("dir");
    std::fs::write(hour.join("part-000001.json"), b"[1,2,3]").expect("write");
    let legacy = app.store_dir().join("telemetry/rollups");
    std::fs::create_dir_all(&legacy).expect("dir");
    std::fs::write(legacy.join("node-old.json"), b"{\"models\": {\"mlp\": 1}}").expect("write");
    std::thread::sleep(Duration::from_millis(2500));
    post_events(&app, &app.url(), &events[..1]);
    std::thread::sleep(Duration::from_millis(1500));
    // The server is alive, its views answer, and the damaged objects count for nothing.
    let (loads, _, _, _) = numbers(&app.url());
    assert_eq!(loads, 21, "only this replica's own events");
    let (s, _) = app.resolve(
        &ferry_tests::app::profile("android", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096),
        false,
    );
    assert_eq!(s, 200);
}

#[test]
fn restarts_of_one_replica_keep_every_run_s_counts() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(fast_telemetry)),
    });
    app.publish(&mlp_v1());
    let named = |c: &mut ferry_server::app::config::Config| {
        fast_telemetry(c);
        c.node_id = Some("replica-a".into());
    };
    for round in 0..3 {
        let replica = app.replica_with(None, Box::new(named));
        let events: Vec<serde_json::Value> = (0..10)
            .map(|i| event("ok", "1.0.0", &format!("r{round}-{i}"), "SOC-1", 5.0))
            .collect();
        post_events(&app, &replica.url(), &events);
        let want = 10 * (round + 1);
        until(&format!("round {round}"), || numbers(&app.url()).0 == want);
        replica.stop();
    }
    // Each run wrote its own objects (never rewritten, so a restart within the same minute
    // overwrites nothing), all named after the replica.
    let writers: std::collections::BTreeSet<String> = app
        .stored_files()
        .into_iter()
        .filter(|f| f.starts_with("telemetry/buckets/minute/"))
        .filter_map(|f| f.rsplit('/').next().map(str::to_string))
        .filter(|f| f.starts_with("replica-a."))
        // `<node>.<run>-<n>.json`: the run's name.
        .filter_map(|f| f.rsplit_once('-').map(|(run, _)| run.to_string()))
        .collect();
    assert_eq!(writers.len(), 3, "{writers:?}");
}
