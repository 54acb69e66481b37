//! Field latency (issue 32): the client times every run through the real ExecuTorch runtime
//! and sends one `inference` event per model, method and variant at each flush (with its
//! resolve receipt, offline-tolerant); three replicas on one store aggregate the devices'
//! summaries per variant and device class and each answers the same `health`, also after a
//! restart.

use ferry_tests::fast_telemetry;
use ferry_tests::until;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo};
use ferry_server::app::startup::RunningServer;
use ferry_shared::manifest::{Platform, TensorValue};
use ferry_shared::wire::telemetry::{EventKind, Thermal};
use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp, mlp_v1};
use ferry_tests::kit::{DeviceExt as _, device};

/// An Android phone `install` with `soc` (its model `phone-<soc>`).
fn phone(install: &str, soc: &str) -> DeviceInfo {
    device(install)
        .platform(Platform::Android)
        .os("14")
        .model(&format!("phone-{soc}"))
        .soc(soc)
        .ram(8192)
}

fn golden_input() -> Vec<TensorValue> {
    let side: serde_json::Value = serde_json::from_slice(
        &std::fs::read(ferry_tests::fixtures_dir().join("pte/mlp-v1-xnnpack.json"))
            .expect("sidecar"),
    )
    .expect("json");
    serde_json::from_value(side["input"].clone()).expect("input")
}

/// The `inference` figures of release 1.0.0's variant `variant` as `url` reports them.
fn inference(url: &str, variant: &str) -> serde_json::Value {
    let h = ferry_tests::reports::model_health(url, "mlp", ADMIN_TOKEN);
    ferry_tests::schemas::check("health.schema.json", &h);
    ferry_tests::reports::variant_rows(&h, Some("1.0.0"))
        .into_iter()
        .find(|v| v["variant"] == variant)
        .map(|v| {
            serde_json::json!({
                "all": v["inference"],
                "soc": v["by_soc"].as_object().map(|m| m.iter()
                    .map(|(k, c)| (k.clone(), c["warm_p95_ms"].clone()))
                    .collect::<serde_json::Map<_, _>>()),
            })
        })
        .unwrap_or_default()
}

#[test]
fn runs_are_timed_on_the_device_and_aggregated_by_three_replicas() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(fast_telemetry)),
    });
    app.publish(&mlp_v1());
    let replicas: Vec<RunningServer> = (0..3)
        .map(|_| app.replica_with(None, Box::new(fast_telemetry)))
        .collect();
    let urls: Vec<String> = replicas.iter().map(RunningServer::url).collect();

    // One real device: 200 runs through the runtime, timed here too.
    let work = tempfile::tempdir().expect("tmp");
    let client = Arc::new(
        ClientBuilder::new(urls[0].clone(), app.trust())
            .cache_dir(work.path().join("cache"))
            .app_version(semver::Version::new(1, 0, 0))
            .runtime(Arc::new(ExecuTorchRuntime::new()))
            .build()
            .expect("client"),
    );
    let dev = phone("real-device", "SM8550");
    let mut model = client.load("mlp", &dev).expect("loads");
    let variant = model.variant.clone();
    let input = golden_input();
    let mut outside = Vec::new();
    client.set_thermal_state(Some(Thermal::Fair));
    for i in 0..200 {
        if i == 150 {
            client.set_thermal_state(Some(Thermal::Serious));
        }
        let t = Instant::now();
        model.run(&input).expect("runs");
        outside.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    client.set_thermal_state(Some(Thermal::Nominal));
    client.flush_inference();
    let events: Vec<_> = client
        .telemetry_pending()
        .into_iter()
        .filter(|e| e.kind == EventKind::Inference)
        .collect();
    assert_eq!(events.len(), 1, "one event per model, method and variant");
    let e = &events[0];
    let i = &e.inference;
    assert_eq!(i.method.as_deref(), Some("forward"));
    assert_eq!(i.runs, Some(200));
    assert_eq!(
        i.thermal,
        Some(Thermal::Serious),
        "the most severe state of the window"
    );
    assert!(e.receipt.is_some(), "sent with its resolve receipt");
    assert_eq!(
        (e.variant.as_str(), e.soc.as_str()),
        (variant.as_str(), "SM8550")
    );
    // The client's own timing is inside the app's: never slower than what the app saw (bucket
    // rounding is at most 2.5%).
    let mut warm = outside[1..].to_vec();
    warm.sort_by(f64::total_cmp);
    let p50 = i.p50_ms.expect("p50");
    let p95 = i.p95_ms.expect("p95");
    let max = i.max_ms.expect("max");
    assert!(p50 <= p95 && p95 <= max, "{i:?}");
    assert!(
        p50 <= warm[warm.len() / 2] * 1.03,
        "{p50} vs {:?}",
        &warm[..5]
    );
    assert!(max <= warm[warm.len() - 1] * 1.03, "{max} vs {warm:?}");
    assert!(i.first_ms.expect("cold") <= outside[0] * 1.001);
    assert!(i.sustained_s.expect("sustained") > 0.0);
    // A second flush with no runs in between sends nothing new.
    client.flush_inference();
    let again = client
        .telemetry_pending()
        .into_iter()
        .filter(|e| e.kind == EventKind::Inference)
        .count();
    assert_eq!(again, 1);
    let sent = client.send_telemetry();
    assert_eq!(sent.queued, 0, "{sent:?}");

    // The fleet: 30 devices on a slow SoC through replica 1, 30 on a fast one through replica
    // 2, with their resolve receipts.
    for (r, soc, p95) in [(1, "SLOW-SOC", 40.0), (2, "FAST-SOC", 4.0)] {
        let events: Vec<serde_json::Value> = (0..30)
            .map(|n| {
                serde_json::json!({
                    "kind": "inference", "model": "mlp", "release": "1.0.0",
                    "variant": variant, "delegate": "xnnpack", "outcome": "ok",
                    "install_id": format!("{soc}-{n}"), "platform": "android", "soc": soc,
                    "device_model": format!("phone-{soc}"), "os_version": "14",
                    "app_version": "1.0.0", "runtime_version": "1.5.1",
                    "at": time::OffsetDateTime::now_utc()
                        .format(&time::format_description::well_known::Rfc3339).expect("time"),
                    "method": "forward", "runs": 100, "first_ms": p95 * 3.0,
                    "p50_ms": p95 * 0.8, "p95_ms": p95 + n as f64 * 0.1, "max_ms": p95 * 2.0,
                    "sustained_s": if n % 2 == 0 { 90.0 } else { 5.0 }, "thermal": "nominal",
                })
            })
            .collect();
        post(&app, &urls[r], &events);
    }
    for url in &urls {
        until(&format!("{url} sees all 61 devices' summaries"), || {
            inference(url, &variant)["all"]["events"] == 61
        });
    }
    let first = inference(&urls[0], &variant);
    let all = &first["all"];
    assert_eq!(all["runs"], 200 + 60 * 100);
    assert_eq!(all["devices"], 61);
    assert_eq!(all["sustained_p95_ms"]["samples"], 30, "{all}");
    let slow = first["soc"]["SLOW-SOC"]["p50"].as_f64().expect("slow p50");
    let quick = first["soc"]["FAST-SOC"]["p50"].as_f64().expect("fast p50");
    // The medians of the devices' warm p95s: 41.45 and 5.45 ms (the sketch is within 1%).
    assert!((slow - 41.45).abs() / 41.45 < 0.02, "{slow}");
    assert!((quick - 5.45).abs() / 5.45 < 0.02, "{quick}");
    assert!(first["soc"]["SM8550"]["samples"] == 1, "{first}");
    assert_eq!(all["by_thermal"]["serious"]["samples"], 1, "{all}");
    for url in &urls[1..] {
        assert_eq!(inference(url, &variant), first, "{url} agrees");
    }
    // Restarted on the same store, the figures are all there from the first request.
    for r in replicas {
        r.stop();
    }
    let fresh = app.replica_with(None, Box::new(fast_telemetry));
    assert_eq!(inference(&fresh.url(), &variant), first, "after a restart");
}

/// One device's window of runs of `release` on `soc` with warm p95 `p95_ms`.
fn window(release: &str, install: &str, soc: &str, p95_ms: f64) -> serde_json::Value {
    serde_json::json!({
        "kind": "inference", "model": "mlp", "release": release, "variant": "xnnpack-fp32",
        "delegate": "xnnpack", "outcome": "ok", "install_id": install, "platform": "android",
        "soc": soc, "device_model": format!("phone-{soc}"), "os_version": "14",
        "app_version": "2.0.0", "runtime_version": "1.5.1",
        "at": time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339).expect("time"),
        "method": "forward", "runs": 50, "p50_ms": p95_ms * 0.8, "p95_ms": p95_ms,
        "max_ms": p95_ms * 1.5,
    })
}

fn post(app: &TestApp, url: &str, events: &[serde_json::Value]) {
    app.post_receipted(url, events);
}

#[test]
fn a_ramp_whose_staged_release_is_slower_in_the_field_halts_once() {
    let quick = |c: &mut ferry_server::app::config::Config| {
        fast_telemetry(c);
        c.ramp_check_secs = 1;
    };
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(quick)),
    });
    let replica = app.replica_with(None, Box::new(quick));
    app.publish(&mlp_v1());
    app.publish(&ferry_tests::app::mlp_v2());
    // A gate of 1.3x; a long step and many samples, so only the latency gate can move it.
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "start", "release": "2.0.0", "steps": ["1", "5", "25"],
             "every_secs": 3600, "min_samples": 100000, "max_latency_ratio": 1.3}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["thresholds"]["max_latency_ratio"], 1.3, "{b}");
    // Devices on two SoCs run both releases: 2.0.0 is 1.2x on one SoC (within the gate) at
    // first; a third SoC only the baseline has is left out of the comparison.
    let mut events = Vec::new();
    for n in 0..10 {
        events.push(window("1.0.0", &format!("a-{n}"), "SOC-A", 10.0));
        events.push(window("1.0.0", &format!("b-{n}"), "SOC-B", 10.0));
        events.push(window("1.0.0", &format!("c-{n}"), "SOC-C", 100.0));
        events.push(window("2.0.0", &format!("a2-{n}"), "SOC-A", 12.0));
        events.push(window("2.0.0", &format!("b2-{n}"), "SOC-B", 12.0));
    }
    post(&app, &app.url(), &events);
    std::thread::sleep(Duration::from_secs(3));
    let (_, v) = app.get_json("/v1/admin/models/mlp/rollout", Some(ADMIN_TOKEN));
    assert_eq!(
        v["current"]["state"], "active",
        "1.2x is within 1.3x: {v:#}"
    );
    let l = &v["ramp"]["now"];
    assert!(l.to_string().contains("waiting_for"), "{v:#}");
    // More devices report 2.0.0 at 16 ms on both SoCs, through both servers: the medians
    // are now 16 vs 10 ms, over the gate.
    for (url, part) in [(app.url(), 0), (replica.url(), 1)] {
        let slow: Vec<_> = (0..20)
            .flat_map(|n| {
                ["SOC-A", "SOC-B"]
                    .map(|soc| window("2.0.0", &format!("s{part}-{soc}-{n}"), soc, 16.0))
            })
            .collect();
        post(&app, &url, &slow);
    }
    until("the ramp halts on field latency", || {
        let (_, v) = app.get_json("/v1/admin/models/mlp/rollout", Some(ADMIN_TOKEN));
        v["current"]["state"] == "halted"
    });
    std::thread::sleep(Duration::from_secs(3));
    let (_, v) = app.get_json("/v1/admin/models/mlp/rollout", Some(ADMIN_TOKEN));
    let reason = v["current"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("field latency of 2.0.0"), "{reason}");
    assert!(
        reason.contains("on the 2 SoC(s) both have data for"),
        "{reason}"
    );
    let halts = v["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|p| p["action"] == "auto-halt")
        .count();
    assert_eq!(halts, 1, "one halt for both servers: {:#}", v["history"]);
    replica.stop();
}

#[test]
fn the_probe_times_the_top_candidates_once_never_in_power_saving_mode() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(fast_telemetry)),
    });
    // The probe runs each candidate's signed golden input: every variant gets its sidecar.
    let mut spec = mlp_v1();
    for v in &mut spec.variants {
        v.golden = Some(v.file.with_extension("json"));
    }
    app.publish(&spec);
    let work = tempfile::tempdir().expect("tmp");
    let client = Arc::new(
        ClientBuilder::new(app.url(), app.trust())
            .cache_dir(work.path().join("cache"))
            .app_version(semver::Version::new(1, 0, 0))
            .runtime(Arc::new(ExecuTorchRuntime::new()))
            .build()
            .expect("client"),
    );
    let dev = phone("probing-device", "NEW-SOC");
    let probe = ferry_client::Probe {
        candidates: 2,
        runs: 12,
        max_time: Duration::from_secs(5),
    };
    let saving = ferry_client::LoadOptions {
        probe: Some(probe),
        conditions: ferry_client::Conditions {
            power_saver: Some(true),
            ..Default::default()
        },
        ..Default::default()
    };
    let pending_probes = |c: &ferry_client::Client| {
        c.telemetry_pending()
            .into_iter()
            .filter(|e| e.kind == EventKind::Inference && e.inference.probe == Some(true))
            .collect::<Vec<_>>()
    };
    let m = client.load_with("mlp", &dev, &saving).expect("loads");
    let report = m.report.probe.clone().expect("a probe report");
    assert!(
        report
            .skipped
            .as_deref()
            .is_some_and(|s| s.contains("power-saving")),
        "{report:?}"
    );
    assert!(pending_probes(&client).is_empty());
    drop(m);

    // Not saving power: of the two best candidates, the one not loaded is timed on its golden
    // input (the loaded one is timed by the app's own runs).
    let plugged = ferry_client::LoadOptions {
        probe: Some(probe),
        ..Default::default()
    };
    let m = client.load_with("mlp", &dev, &plugged).expect("loads");
    let report = m.report.probe.clone().expect("a probe report");
    assert_eq!(report.skipped, None, "{report:?}");
    let plan = client.resolve("mlp", &dev).expect("plan");
    let top: Vec<String> = plan
        .value()
        .candidates()
        .iter()
        .take(2)
        .map(|c| c.variant().id.to_string())
        .collect();
    let timed: Vec<String> = report.timed.iter().map(|t| t.variant.clone()).collect();
    assert_eq!(top[0], m.variant, "the best candidate loaded");
    assert_eq!(timed, top[1..], "{report:?}");
    let events = pending_probes(&client);
    assert_eq!(events.len(), 1, "one event per candidate timed");
    for e in &events {
        let i = &e.inference;
        assert!(i.runs.is_some_and(|n| (1..=12).contains(&n)), "{i:?}");
        assert!(i.p95_ms.is_some(), "{i:?}");
        assert_eq!(i.first_ms, None, "after the golden check no run is cold");
        assert!(e.receipt.is_some(), "sent with the resolve receipt");
        assert_eq!(e.soc, "NEW-SOC");
    }
    drop(m);

    // Once per release: the next load does not probe again.
    let m = client.load_with("mlp", &dev, &plugged).expect("loads");
    let report = m.report.probe.clone().expect("a probe report");
    assert!(
        report
            .skipped
            .as_deref()
            .is_some_and(|s| s.contains("probed")),
        "{report:?}"
    );
    drop(m);
    assert_eq!(pending_probes(&client).len(), 1);

    // They count like the others, marked as probes.
    let sent = client.send_telemetry();
    assert_eq!(sent.queued, 0, "{sent:?}");
    let url = app.url();
    until("the server counts the probes", || {
        let probes: u64 = top
            .iter()
            .map(|v| inference(&url, v)["all"]["probes"].as_u64().unwrap_or(0))
            .sum();
        probes == 1
    });
}
