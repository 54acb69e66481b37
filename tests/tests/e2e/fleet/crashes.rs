//! The fleet learns from native crashes (issue 45): 20 devices of one SoC report that the
//! Vulkan variant crashed the app; three replicas on one store rank the next candidate first
//! for that SoC (`crashed_in_field`, with the figures in explain) while another SoC keeps
//! Vulkan; the same reports without receipts move nothing; an override restores the order. A
//! ramp whose staged release crashes on one SoC halts on `max_crash_rate`, exactly once across
//! three servers. The fleet is simulated from one host, so the network quorum is set to 0
//! explicitly.

use std::time::Duration;

use ferry_server::app::startup::RunningServer;
use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp, mlp_v1, mlp_v2};
use ferry_tests::{fast_telemetry, until};

// The same probe the field-latency test makes: an Android phone with Vulkan on a SoC, its
// candidates best first and the Vulkan variant's explain reasons.
use super::field_selection::{forged_events_move_nothing, ranked};

/// One host plays the fleet: no network quorum.
fn one_host(c: &mut ferry_server::app::config::Config) {
    fast_telemetry(c);
    c.telemetry.deny_min_networks = 0;
    c.ramp_check_secs = 1;
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("time")
}

/// What a device of `soc` sends about `variant` of `release`: `crash` (its crash, reported on
/// the next launch) or `load` (a load that worked).
fn event(kind: &str, release: &str, variant: &str, install: &str, soc: &str) -> serde_json::Value {
    let mut e = serde_json::json!({
        "kind": kind, "model": "mlp", "release": release, "variant": variant,
        "delegate": if variant.starts_with("vulkan") { "vulkan" } else { "xnnpack" },
        "outcome": "ok", "install_id": install, "platform": "android", "soc": soc,
        "device_model": format!("phone-{soc}"), "os_version": "14", "app_version": "1.0.0",
        "runtime_version": "1.5.1", "at": now(),
    });
    if kind == "crash" {
        e["outcome"] = "failed".into();
        e["error_code"] = "crashed".into();
        e["stage"] = "load_method".into();
    } else {
        e["load_ms"] = 4.0.into();
    }
    e
}

#[test]
fn a_variant_that_crashes_on_one_soc_is_ranked_after_the_next_there_on_every_replica() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(one_host)),
    });
    app.publish(&mlp_v1());
    let replicas: Vec<RunningServer> = (0..3)
        .map(|_| app.replica_with(None, Box::new(one_host)))
        .collect();
    let urls: Vec<String> = replicas.iter().map(RunningServer::url).collect();
    let (before, _) = ranked(&app, &urls[0], "SOC-CRASH");
    assert_eq!(before[0], "vulkan-fp32", "{before:?}");

    // The same crashes without receipts: accepted, counted nowhere, move nothing.
    let forged: Vec<serde_json::Value> = (0..60)
        .map(|n| {
            event(
                "crash",
                "1.0.0",
                "vulkan-fp32",
                &format!("forged-{n}"),
                "SOC-CRASH",
            )
        })
        .collect();
    forged_events_move_nothing(&app, &urls, "SOC-CRASH", &before, &forged);

    // With receipts, through different replicas: on SOC-CRASH 20 of 60 devices crashed on
    // Vulkan (the others loaded it); on SOC-OK 60 devices loaded it. 19 crashed devices are one
    // too few (deny_min_devices is 20).
    let crashes: Vec<_> = (0..20)
        .map(|n| {
            event(
                "crash",
                "1.0.0",
                "vulkan-fp32",
                &format!("x-{n}"),
                "SOC-CRASH",
            )
        })
        .collect();
    let loads: Vec<_> = (0..40)
        .map(|n| {
            event(
                "load",
                "1.0.0",
                "vulkan-fp32",
                &format!("y-{n}"),
                "SOC-CRASH",
            )
        })
        .chain((0..60).map(|n| event("load", "1.0.0", "vulkan-fp32", &format!("z-{n}"), "SOC-OK")))
        .collect();
    app.post_receipted(&urls[0], &crashes[..19]);
    app.post_receipted(&urls[1], &loads);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ranked(&app, &urls[2], "SOC-CRASH").0, before, "19 devices");
    app.post_receipted(&urls[2], &crashes[19..]);
    for url in &urls {
        until(
            &format!("{url} ranks the next candidate first on SOC-CRASH"),
            || ranked(&app, url, "SOC-CRASH").0[0] != "vulkan-fp32",
        );
        let (ids, why) = ranked(&app, url, "SOC-CRASH");
        assert!(
            ids.contains(&"vulkan-fp32".to_string()),
            "demoted, not removed: {ids:?}"
        );
        assert!(
            why.contains("crashed_in_field") && why.contains("20 of 60 devices"),
            "{why}"
        );
        let (other, why) = ranked(&app, url, "SOC-OK");
        assert_eq!(other[0], "vulkan-fp32", "another SoC keeps Vulkan: {why}");
    }

    // One learned revision for three replicas; the health view counts the crashes.
    let (_, list) = app.get_json("/v1/admin/models/mlp/deny", Some(ADMIN_TOKEN));
    let learned: Vec<_> = list["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["kind"] == "crashed_in_field")
        .collect();
    assert_eq!(learned.len(), 2, "the SoC and its device model: {list:#}");
    assert!(
        learned.iter().all(|e| e["crash"]["devices"] == 20),
        "{list:#}"
    );
    let revisions = list["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|h| h["action"] == "telemetry")
        .count();
    assert_eq!(revisions, 1, "{list:#}");
    health_and_parquet_count_the_crashes(&app);

    // An operator overrides both entries: Vulkan is first again on every replica.
    for (class, value) in [("soc", "SOC-CRASH"), ("device_model", "phone-SOC-CRASH")] {
        let change = serde_json::json!({"action": "override", "release": "1.0.0",
            "variant": "vulkan-fp32", "class": class, "value": value,
            "kind": "crashed_in_field"});
        let (s, b) = app.post_raw(
            "/v1/admin/models/mlp/deny",
            &serde_json::to_vec(&change).expect("json"),
            Some(ADMIN_TOKEN),
        );
        assert_eq!(s, 200, "{b}");
    }
    for url in &urls {
        until(&format!("{url} restores Vulkan first"), || {
            ranked(&app, url, "SOC-CRASH").0[0] == "vulkan-fp32"
        });
    }
    for r in replicas {
        r.stop();
    }
}

/// The health view counts the 20 crashes (release, variant, SoC, stage), and DuckDB reads them
/// from the Parquet log with the documented query (the forged ones are there, not counted).
fn health_and_parquet_count_the_crashes(app: &TestApp) {
    until("the health view has every replica's crashes", || {
        let (_, h) = app.get_json("/v1/admin/models/mlp/health", Some(ADMIN_TOKEN));
        h["releases"][0]["crashes"] == 20
    });
    let (_, health) = app.get_json("/v1/admin/models/mlp/health", Some(ADMIN_TOKEN));
    ferry_tests::schemas::check("health.schema.json", &health);
    let release = &health["releases"][0];
    assert_eq!(release["crashes"], 20, "{release:#}");
    assert_eq!(release["crash_devices"], 20);
    let vulkan = release["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["variant"] == "vulkan-fp32")
        .expect("vulkan");
    assert_eq!(vulkan["by_soc"]["SOC-CRASH"]["crashes"], 20);
    assert_eq!(vulkan["by_soc"]["SOC-OK"]["crashes"], 0);
    assert_eq!(vulkan["crash_stages"]["load_method"], 20);
    // The raw events, read by DuckDB with the documented query: the 20 counted crashes (the
    // forged ones are there too, not counted).
    let query = &super::telemetry_parquet::documented_queries(&app.store_dir())["crashes_by_soc"];
    let mut rows = Vec::new();
    until("the crash events are in the Parquet log", || {
        rows = ferry_tests::duckdb::query(query);
        rows.first().is_some_and(|r| r["devices"] == 20)
    });
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (
            &rows[0]["soc"],
            &rows[0]["variant"],
            &rows[0]["stage"],
            &rows[0]["crashes"]
        ),
        (
            &serde_json::json!("SOC-CRASH"),
            &serde_json::json!("vulkan-fp32"),
            &serde_json::json!("load_method"),
            &serde_json::json!(20)
        )
    );
}

#[test]
fn a_ramp_whose_staged_release_crashes_on_one_soc_halts_once_across_three_servers() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(one_host)),
    });
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    // A long step, and 24 samples: the crash gate (its default) needs 3 crashed devices, as
    // the other gates need 3 reporting devices (24 / 8).
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "start", "release": "2.0.0", "steps": ["1", "5", "25"],
             "every_secs": 3600, "min_samples": 24}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["thresholds"]["max_crash_rate"], 0.01,
        "the default gate: {b}"
    );
    let replicas: Vec<RunningServer> = (0..2)
        .map(|_| app.replica_with(None, Box::new(one_host)))
        .collect();
    let urls: Vec<String> = std::iter::once(app.url())
        .chain(replicas.iter().map(RunningServer::url))
        .collect();
    // 100 devices load 2.0.0 fine; then devices of SOC-X crash on it, a few through each
    // server, until 3 of 103 (2.9%) have.
    let fine: Vec<_> = (0..100)
        .map(|n| event("load", "2.0.0", "vulkan-fp32", &format!("ok-{n}"), "SOC-OK"))
        .collect();
    app.post_receipted(&urls[0], &fine);
    app.post_receipted(
        &urls[1],
        &[event("crash", "2.0.0", "vulkan-fp32", "x-0", "SOC-X")],
    );
    app.post_receipted(
        &urls[2],
        &[event("crash", "2.0.0", "vulkan-fp32", "x-1", "SOC-X")],
    );
    std::thread::sleep(Duration::from_secs(3));
    let (_, v) = app.get_json("/v1/admin/models/mlp/rollout", Some(ADMIN_TOKEN));
    assert_eq!(
        v["current"]["state"], "active",
        "two crashes are not a pattern: {v:#}"
    );
    app.post_receipted(
        &urls[0],
        &[event("crash", "2.0.0", "vulkan-fp32", "x-2", "SOC-X")],
    );
    until("the rollout halts on its crash rate", || {
        let (_, v) = app.get_json("/v1/admin/models/mlp/rollout", Some(ADMIN_TOKEN));
        v["current"]["state"] == "halted"
    });
    // Late crashes, through every server, after the halt.
    for (i, url) in urls.iter().enumerate() {
        app.post_receipted(
            url,
            &[event(
                "crash",
                "2.0.0",
                "vulkan-fp32",
                &format!("late-{i}"),
                "SOC-X",
            )],
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    let (_, v) = app.get_json("/v1/admin/models/mlp/rollout", Some(ADMIN_TOKEN));
    let reason = v["current"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("crash rate") && reason.contains("max_crash_rate 1.0%"),
        "{reason}"
    );
    assert!(reason.contains("3 of 103 devices"), "{reason}");
    let halts = v["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|p| p["action"] == "auto-halt")
        .count();
    assert_eq!(halts, 1, "one halt for three servers: {:#}", v["history"]);
    let (_, health) = app.get_json("/v1/admin/models/mlp/health", Some(ADMIN_TOKEN));
    ferry_tests::schemas::check("health.schema.json", &health);
    assert_eq!(
        health["crash_compare"]["staged_crashed"], 6,
        "{:#}",
        health["crash_compare"]
    );
    for r in replicas {
        r.stop();
    }
}
