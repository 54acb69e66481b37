//! Selection that follows field latency (issue 32, part 4): three replicas on one store learn
//! that the Vulkan variant is over its signed budget on one SoC from devices' receipted
//! `inference` events, and every replica ranks XNNPACK first there while another SoC keeps
//! Vulkan; telemetry without receipts moves nothing; an operator's override restores the
//! order, also after a restart.

use ferry_tests::fast_telemetry;
use ferry_tests::until;
use std::time::Duration;

use ferry_server::app::startup::RunningServer;
use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp, mlp_v1};

/// One device's window of runs of `variant` of 1.0.0 on `soc` with warm p95 `p95_ms`.
fn window(variant: &str, install: &str, soc: &str, p95_ms: f64) -> serde_json::Value {
    serde_json::json!({
        "kind": "inference", "model": "mlp", "release": "1.0.0", "variant": variant,
        "delegate": if variant == "vulkan-fp32" { "vulkan" } else { "xnnpack" },
        "outcome": "ok", "install_id": install, "platform": "android", "soc": soc,
        "device_model": format!("phone-{soc}"), "os_version": "14", "app_version": "1.0.0",
        "runtime_version": "1.5.1",
        "at": time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339).expect("time"),
        "method": "forward", "runs": 50, "p50_ms": p95_ms * 0.8, "p95_ms": p95_ms,
        "max_ms": p95_ms * 1.5,
    })
}

/// Resolves an Android device with Vulkan on `soc` at `url`: the candidates best first, and
/// the explain reasons of the Vulkan variant.
/// Posts `forged` (events without receipts): all accepted as unverified, and three seconds
/// later every replica at `urls` still ranks `soc`'s candidates as `before`.
pub(crate) fn forged_events_move_nothing(
    app: &TestApp,
    urls: &[String],
    soc: &str,
    before: &[String],
    forged: &[serde_json::Value],
) {
    let (status, body) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({ "events": forged })).expect("json"),
        None,
    );
    assert_eq!(
        (status, &body["unverified"]),
        (200, &serde_json::json!(forged.len()))
    );
    std::thread::sleep(Duration::from_secs(3));
    for url in urls {
        assert_eq!(ranked(app, url, soc).0, before, "{url}");
    }
}

pub(crate) fn ranked(app: &TestApp, url: &str, soc: &str) -> (Vec<String>, String) {
    let device = serde_json::json!({
        "model": "mlp", "install_id": format!("probe-{soc}"), "app_version": "1.0.0",
        "runtime_version": "1.5.1", "backends": ["XnnpackBackend", "VulkanBackend"],
        "platform": "android", "os_version": "14", "device_model": format!("phone-{soc}"),
        "soc": soc, "ram_mb": 8192,
    });
    let mut r = app
        .agent
        .post(format!("{url}/v1/resolve?explain=true"))
        .header("content-type", "application/json")
        .send(&serde_json::to_vec(&device).expect("json")[..])
        .expect("resolve");
    assert_eq!(r.status().as_u16(), 200);
    let body: serde_json::Value = serde_json::from_reader(r.body_mut().as_reader()).expect("json");
    ferry_tests::schemas::check("resolve-response.schema.json", &body);
    let (decision, _) = app.verify_response(&body);
    let ids = decision
        .candidates
        .iter()
        .map(|c| c.variant.as_str().to_string())
        .collect();
    let why = body["explain"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["variant"] == "vulkan-fp32")
        .map(|e| e["reasons"].to_string())
        .unwrap_or_default();
    (ids, why)
}

#[test]
fn a_soc_whose_gpu_variant_is_slow_in_the_field_gets_xnnpack_first_on_every_replica() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(fast_telemetry)),
    });
    let mut spec = mlp_v1();
    for v in &mut spec.variants {
        if v.id.as_str() == "vulkan-fp32" {
            v.latency_budget_ms = Some(20.0);
        }
    }
    app.publish(&spec);
    let replicas: Vec<RunningServer> = (0..3)
        .map(|_| app.replica_with(None, Box::new(fast_telemetry)))
        .collect();
    let urls: Vec<String> = replicas.iter().map(RunningServer::url).collect();
    let (before, _) = ranked(&app, &urls[0], "SOC-SLOW");
    assert_eq!(before[0], "vulkan-fp32", "{before:?}");

    // A forged flood without receipts: accepted, counted nowhere, moves nothing.
    let forged: Vec<serde_json::Value> = (0..60)
        .map(|n| window("vulkan-fp32", &format!("forged-{n}"), "SOC-SLOW", 500.0))
        .collect();
    forged_events_move_nothing(&app, &urls, "SOC-SLOW", &before, &forged);

    // The fleet, with receipts, through different replicas: on SOC-SLOW Vulkan runs in 50 ms
    // (over its 20 ms budget) and XNNPACK in 30 (the release lists xnnpack-int8 before
    // xnnpack-fp32, so int8 becomes the first candidate); on SOC-FAST Vulkan runs in 5 ms. 19 devices
    // are one too few.
    let slow_gpu: Vec<_> = (0..25)
        .map(|n| {
            window(
                "vulkan-fp32",
                &format!("g-{n}"),
                "SOC-SLOW",
                50.0 + f64::from(n),
            )
        })
        .collect();
    let cpu: Vec<_> = (0..25)
        .map(|n| window("xnnpack-fp32", &format!("c-{n}"), "SOC-SLOW", 30.0))
        .collect();
    let fast_gpu: Vec<_> = (0..25)
        .map(|n| window("vulkan-fp32", &format!("f-{n}"), "SOC-FAST", 5.0))
        .collect();
    app.post_receipted(&urls[0], &slow_gpu[..19]);
    app.post_receipted(&urls[1], &cpu);
    app.post_receipted(&urls[2], &fast_gpu);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ranked(&app, &urls[0], "SOC-SLOW").0, before, "19 devices");
    app.post_receipted(&urls[1], &slow_gpu[19..]);
    for url in &urls {
        until(&format!("{url} ranks XNNPACK first on SOC-SLOW"), || {
            ranked(&app, url, "SOC-SLOW").0[0].starts_with("xnnpack")
        });
        let (ids, why) = ranked(&app, url, "SOC-SLOW");
        assert_eq!(
            ids[1], "vulkan-fp32",
            "still a candidate, after XNNPACK: {ids:?}"
        );
        assert!(
            why.contains("slow_in_field") && why.contains("budget 20 ms"),
            "{why}"
        );
        assert!(why.contains("xnnpack-fp32 30."), "{why}");
        assert!(why.contains("n=25 devices"), "{why}");
        let (fast, why) = ranked(&app, url, "SOC-FAST");
        assert_eq!(fast[0], "vulkan-fp32", "another SoC keeps Vulkan: {why}");
    }

    // The entry is in the deny list's log, with its figures, once for all replicas.
    let (_, list) = app.get_json("/v1/admin/models/mlp/deny", Some(ADMIN_TOKEN));
    let entries = list["entries"].as_array().expect("entries");
    let slow: Vec<_> = entries
        .iter()
        .filter(|e| e["kind"] == "slow_in_field")
        .collect();
    assert_eq!(slow.len(), 2, "the SoC and its device model: {list:#}");
    let soc = slow
        .iter()
        .find(|e| e["class"] == "soc")
        .expect("soc entry");
    assert_eq!(soc["value"], "SOC-SLOW");
    assert_eq!(soc["source"], "telemetry");
    assert_eq!(soc["latency"]["devices"], 25);
    assert_eq!(soc["latency"]["next_variant"], "xnnpack-fp32");
    let learned = list["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|h| h["action"] == "telemetry")
        .count();
    assert_eq!(learned, 1, "one revision for three replicas: {list:#}");
    let (_, health) = app.get_json("/v1/admin/models/mlp/health", Some(ADMIN_TOKEN));
    ferry_tests::schemas::check("health.schema.json", &health);
    let vulkan = health["releases"][0]["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["variant"] == "vulkan-fp32")
        .expect("vulkan")
        .clone();
    assert_eq!(vulkan["inference"]["budget_ms"], 20.0);
    assert_eq!(
        vulkan["by_soc"]["SOC-SLOW"]["warm_p95_ms"]["over_budget"],
        1.0
    );
    assert_eq!(
        vulkan["by_soc"]["SOC-FAST"]["warm_p95_ms"]["over_budget"],
        0.0
    );

    // An operator overrides both entries of the SoC and its device model: the order is back on
    // every replica, and stays so after a restart.
    for (class, value) in [("soc", "SOC-SLOW"), ("device_model", "phone-SOC-SLOW")] {
        let change = serde_json::json!({"action": "override", "release": "1.0.0",
            "variant": "vulkan-fp32", "class": class, "value": value});
        let (s, b) = app.post_raw(
            "/v1/admin/models/mlp/deny",
            &serde_json::to_vec(&change).expect("json"),
            Some(ADMIN_TOKEN),
        );
        assert_eq!(s, 200, "{b}");
    }
    for url in &urls {
        until(&format!("{url} restores Vulkan first"), || {
            ranked(&app, url, "SOC-SLOW").0[0] == "vulkan-fp32"
        });
    }
    for r in replicas {
        r.stop();
    }
    let fresh = app.replica_with(None, Box::new(fast_telemetry));
    assert_eq!(
        ranked(&app, &fresh.url(), "SOC-SLOW").0,
        before,
        "after a restart"
    );
}
