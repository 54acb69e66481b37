//! Telemetry that decides: a flood of failures denies one SoC and halts the staged release;
//! malformed, oversized, out-of-order and forged telemetry changes no decision.

use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1, mlp_v2};

use crate::rollout::plan::{change, dev};
use ferry_tests::kit::Event;

fn event(
    kind: &str,
    outcome: &str,
    release: &str,
    variant: &str,
    install: &str,
    soc: &str,
    to: Option<&str>,
) -> serde_json::Value {
    let mut e = Event::new(kind, "mlp", release, variant)
        .outcome(outcome)
        .install(install)
        .soc(soc)
        .set("load_ms", 12.5);
    if outcome == "failed" {
        e = e.set("error_code", "runtime_load_failed");
    }
    if let Some(t) = to {
        e = e.set("to_variant", t);
    }
    e.json()
}

/// Sends events as devices that resolved would: each with its receipt.
fn send(app: &TestApp, events: &[serde_json::Value]) -> serde_json::Value {
    let events = app.with_receipts(events);
    let (s, body) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json"),
        None,
    );
    assert_eq!(s, 200, "{body}");
    app.settle();
    body
}

#[test]
fn a_telemetry_flood_denies_one_soc_and_halts_the_staged_release() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.telemetry.deny_min_samples = 50;
            c.telemetry.flush_secs = 1;
            c.telemetry.raw_roll_secs = 1;
            c.telemetry.evaluate_ms = 0;
        })),
    });
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let (s, plan) = change(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "50",
            "max_failure_rate": 0.5, "max_fallback_rate": 0.2, "min_samples": 100}),
    );
    assert_eq!(s, 200, "{plan}");

    // Baseline 1.0.0: Vulkan fails and falls back on SM8450 only.
    let mut batch = Vec::new();
    for i in 0..120 {
        let id = format!("a-{i}");
        batch.push(event(
            "load",
            "failed",
            "1.0.0",
            "vulkan-fp32",
            &id,
            "SM8450",
            None,
        ));
        batch.push(event(
            "fallback",
            "failed",
            "1.0.0",
            "vulkan-fp32",
            &id,
            "SM8450",
            Some("xnnpack-fp32"),
        ));
        batch.push(event(
            "load",
            "ok",
            "1.0.0",
            "xnnpack-fp32",
            &id,
            "SM8450",
            None,
        ));
        let id = format!("b-{i}");
        batch.push(event(
            "load",
            "ok",
            "1.0.0",
            "vulkan-fp32",
            &id,
            "SM8550",
            None,
        ));
    }
    for chunk in batch.chunks(200) {
        let r = send(&app, chunk);
        assert_eq!(r["accepted"].as_u64(), Some(chunk.len() as u64), "{r}");
    }
    // Staged 2.0.0: Vulkan falls back on a third of loads (over the 20% threshold).
    let mut staged = Vec::new();
    for i in 0..150 {
        let id = format!("s-{i}");
        let soc = if i % 3 == 0 { "SM8350" } else { "SM8550" };
        if i % 3 == 0 {
            staged.push(event(
                "load",
                "failed",
                "2.0.0",
                "vulkan-fp32",
                &id,
                soc,
                None,
            ));
            staged.push(event(
                "fallback",
                "failed",
                "2.0.0",
                "vulkan-fp32",
                &id,
                soc,
                Some("xnnpack-fp32"),
            ));
        } else {
            staged.push(event("load", "ok", "2.0.0", "vulkan-fp32", &id, soc, None));
        }
    }
    send(&app, &staged);

    // Deny list: only SM8450, only for 1.0.0's Vulkan variant.
    let (s, h) = app.get_json("/v1/admin/models/mlp/health", Some(READ_TOKEN));
    assert_eq!(s, 200);
    let deny = h["deny"].as_array().expect("deny");
    let soc_denies: Vec<(&str, &str, &str)> = deny
        .iter()
        .filter(|d| d["class"] == "soc")
        .map(|d| {
            (
                d["release"].as_str().unwrap_or(""),
                d["variant"].as_str().unwrap_or(""),
                d["value"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        soc_denies.contains(&("1.0.0", "vulkan-fp32", "SM8450")),
        "{deny:?}"
    );
    assert!(!soc_denies.iter().any(|d| d.2 == "SM8550"), "{deny:?}");
    health_numbers(&h);
    halted_with_reason(&app, &h);
    resolve_after_the_halt(&app, &batch);
    // Raw events and minute buckets reach the store (flushed every second).
    let mut waited = 0;
    loop {
        let files = app.stored_files();
        let raw = files
            .iter()
            .any(|f| f.starts_with("telemetry/events/date=") && f.ends_with(".parquet"));
        let rollup = files
            .iter()
            .any(|f| f.starts_with("telemetry/buckets/minute/"));
        if raw && rollup {
            break;
        }
        waited += 1;
        assert!(waited < 100, "no flush: {files:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The health view's numbers for 1.0.0's Vulkan variant.
fn health_numbers(h: &serde_json::Value) {
    // Health numbers.
    let v1 = h["releases"]
        .as_array()
        .expect("releases")
        .iter()
        .find(|r| r["release"] == "1.0.0")
        .expect("1.0.0");
    let vk = v1["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["variant"] == "vulkan-fp32")
        .expect("vulkan");
    assert_eq!(vk["loads"], 240);
    assert_eq!(vk["load_failures"], 120);
    assert_eq!(vk["fallbacks_to"]["xnnpack-fp32"], 120);
    assert_eq!(vk["by_soc"]["SM8450"]["fallbacks"], 120);
    assert_eq!(vk["top_error_codes"][0]["code"], "runtime_load_failed");
    // Every load took 12.5 ms; the sketch answers within its 1% relative error.
    let p50 = vk["load_ms"]["p50"].as_f64().expect("p50");
    assert!((p50 - 12.5).abs() / 12.5 <= 0.01, "{p50}");
}

/// The staged release was halted, with the reason in the history.
fn halted_with_reason(app: &TestApp, h: &serde_json::Value) {
    // The staged release was halted, with the reason in the history.
    assert_eq!(h["rollout"]["state"], "halted", "{}", h["rollout"]);
    assert_eq!(h["rollout"]["action"], "auto-halt");
    assert!(
        h["rollout"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("fallback rate"),
        "{}",
        h["rollout"]
    );
    let (_, hist) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    assert_eq!(hist["history"].as_array().map(Vec::len), Some(3));
}

/// Staged devices are back on the baseline; SM8450 no longer gets Vulkan and explain says why;
/// SM8550 still does; an operator's override gives SM8450 Vulkan again.
fn resolve_after_the_halt(app: &TestApp, batch: &[serde_json::Value]) {
    // Resolve: staged devices are back on the baseline; SM8450 no longer gets Vulkan and
    // explain says why; SM8550 still does.
    let (s, body) = app.resolve(&dev("s-3", "SM8450"), true);
    assert_eq!(s, 200);
    let (d, _) = app.verify_response(&body);
    assert_eq!(d.release.to_string(), "1.0.0");
    assert_eq!(
        d.candidates
            .iter()
            .map(|c| c.variant.to_string())
            .collect::<Vec<_>>(),
        ["xnnpack-int8", "xnnpack-fp32"]
    );
    let why = body["explain"]
        .as_array()
        .expect("explain")
        .iter()
        .find(|e| e["variant"] == "vulkan-fp32")
        .expect("vulkan");
    let reason = why["reasons"][0].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("denied by telemetry: 100% fallback on SM8450, n="),
        "{reason}"
    );
    let n: u64 = reason
        .rsplit('=')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("n");
    assert!(n >= 50, "denied before the minimum sample: {reason}");
    let (_, body) = app.resolve(&dev("s-3", "SM8550"), false);
    let (d, _) = app.verify_response(&body);
    assert_eq!(d.candidates[0].variant.as_str(), "vulkan-fp32");

    // Ops override the entry: SM8450 gets Vulkan again; telemetry does not undo it.
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/deny",
        &serde_json::to_vec(&serde_json::json!({"action": "override", "release": "1.0.0", "variant": "vulkan-fp32", "class": "soc", "value": "SM8450"})).expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    send(app, &batch[..4]);
    let (s, body) = app.resolve(&dev("s-3", "SM8450"), false);
    assert_eq!(s, 200);
    let (d, _) = app.verify_response(&body);
    assert_eq!(d.candidates[0].variant.as_str(), "vulkan-fp32");
}

#[test]
fn malformed_oversized_and_out_of_order_telemetry() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let before = app.stored_files();
    // Malformed bodies.
    for (body, status, code) in [
        (b"not json".to_vec(), 400, "telemetry_malformed"),
        (b"{\"events\": 5}".to_vec(), 400, "telemetry_malformed"),
        (b"[]".to_vec(), 400, "telemetry_malformed"),
        // A struct read from an array (its fields in order) is not the envelope either.
        (b"[[]]".to_vec(), 400, "telemetry_malformed"),
        (
            b" \n[[{\"kind\": \"load\"}]]".to_vec(),
            400,
            "telemetry_malformed",
        ),
        (vec![b' '; 2 << 20], 413, "body_too_large"),
        (
            serde_json::to_vec(&serde_json::json!({"events": vec![serde_json::json!({}); 501]}))
                .expect("json"),
            413,
            "too_many_events",
        ),
    ] {
        let (s, b) = app.post_raw("/v1/telemetry", &body, None);
        assert_eq!((s, b["code"].as_str()), (status, Some(code)), "{b}");
    }
    // Per-event errors; good events around them are kept, in any time order.
    let now = time::OffsetDateTime::now_utc();
    let at = |mins: i64| {
        (now - time::Duration::minutes(mins))
            .format(&time::format_description::well_known::Rfc3339)
            .expect("time")
    };
    let mut e1 = event("load", "ok", "1.0.0", "xnnpack-fp32", "x1", "SM8550", None);
    e1["at"] = at(5).into();
    let mut e2 = event("load", "ok", "1.0.0", "xnnpack-fp32", "x2", "SM8550", None);
    e2["at"] = at(60).into();
    let mut e3 = event("load", "ok", "1.0.0", "xnnpack-fp32", "x3", "SM8550", None);
    e3["at"] = at(1).into();
    let mut missing = event("load", "ok", "1.0.0", "xnnpack-fp32", "x4", "SM8550", None);
    missing.as_object_mut().expect("object").remove("kind");
    let mut future = event("load", "ok", "1.0.0", "xnnpack-fp32", "x5", "SM8550", None);
    future["at"] = at(-24 * 60).into();
    let mut hostile = event("load", "ok", "1.0.0", "xnnpack-fp32", "x6", "SM8550", None);
    hostile["soc"] = "x".repeat(10_000).into();
    let r = send(
        &app,
        &[
            e1,
            missing,
            e2,
            future,
            hostile,
            e3,
            serde_json::json!("string"),
        ],
    );
    assert_eq!(r["accepted"], 3, "{r}");
    let rejected: Vec<(u64, &str)> = r["rejected"]
        .as_array()
        .expect("rejected")
        .iter()
        .map(|e| {
            (
                e["index"].as_u64().unwrap_or(99),
                e["code"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        rejected,
        [
            (1, "event_invalid"),
            (3, "event_out_of_range"),
            (4, "event_invalid"),
            (6, "event_invalid")
        ]
    );
    let (_, h) = app.get_json("/v1/admin/models/mlp/health", Some(READ_TOKEN));
    let xnn = h["releases"][0]["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["variant"] == "xnnpack-fp32")
        .expect("xnnpack");
    assert_eq!(xnn["loads"], 3);
    assert_eq!(xnn["devices"], 3);
    // Nothing but (eventually) telemetry files was written.
    let after: Vec<String> = app
        .stored_files()
        .into_iter()
        .filter(|f| !f.starts_with("telemetry/"))
        .collect();
    assert_eq!(after, before);
    // Resolve is unaffected.
    assert_eq!(app.resolve(&dev("r1", "SM8550"), false).0, 200);
}

#[test]
fn forged_telemetry_without_a_receipt_changes_no_decision() {
    // The attack that used to work: hundreds of unauthenticated "failed" events for one SoC
    // and phone model denied every such device its Vulkan variant and halted the rollout.
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.telemetry.deny_min_samples = 50;
            c.telemetry.evaluate_ms = 0;
        })),
    });
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let (s, plan) = change(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "50",
            "max_failure_rate": 0.1, "min_samples": 20}),
    );
    assert_eq!(s, 200, "{plan}");
    let mut forged = Vec::new();
    for i in 0..165 {
        let id = format!("forged-{i}");
        forged.push(event(
            "load",
            "failed",
            "1.0.0",
            "vulkan-fp32",
            &id,
            "SM8450",
            None,
        ));
        forged.push(event(
            "fallback",
            "failed",
            "1.0.0",
            "vulkan-fp32",
            &id,
            "SM8450",
            Some("xnnpack-fp32"),
        ));
        forged.push(event(
            "load",
            "failed",
            "2.0.0",
            "vulkan-fp32",
            &id,
            "SM8450",
            None,
        ));
    }
    // A receipt copied from another device does not help either.
    let stolen = app.with_receipts(&[event(
        "load",
        "ok",
        "1.0.0",
        "vulkan-fp32",
        "real-1",
        "SM8450",
        None,
    )]);
    for e in forged.iter_mut().step_by(2) {
        e["receipt"] = stolen[0]["receipt"].clone();
    }
    for chunk in forged.chunks(100) {
        let (s, r) = app.post_raw(
            "/v1/telemetry",
            &serde_json::to_vec(&serde_json::json!({ "events": chunk })).expect("json"),
            None,
        );
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["accepted"], r["unverified"], "{r}");
    }
    app.settle();
    let (_, h) = app.get_json("/v1/admin/models/mlp/health", Some(READ_TOKEN));
    assert!(
        h["deny"].as_array().is_none_or(Vec::is_empty),
        "no deny entry from forged events: {}",
        h["deny"]
    );
    assert_eq!(h["rollout"]["state"], "active", "{}", h["rollout"]);
    let (s, body) = app.resolve(&dev("victim", "SM8450"), false);
    assert_eq!(s, 200, "{body}");
    let (d, _) = app.verify_response(&body);
    assert_eq!(d.candidates[0].variant.as_str(), "vulkan-fp32");
}
