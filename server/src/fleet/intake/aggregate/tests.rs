use super::*;

/// Device classes of `m` over the deny thresholds, fleet-wide (what the learner reads).
fn deny_candidates(
    t: &Telemetry,
    cfg: &TelemetryConfig,
) -> Vec<ferry_shared::select::deny::DenyEntry> {
    crate::fleet::actions::learn::fallbacks(&t.fleet("m"), "m", cfg)
}

#[test]
fn a_device_weighs_at_most_eight_events_an_hour() {
    let t = Telemetry::default();
    let cfg = TelemetryConfig::default();
    let batch: Vec<String> = (0..20).map(|_| ev("load", "failed").to_string()).collect();
    let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
    let at = now();
    for (when, want) in [
        (at, 8),
        (at + time::Duration::minutes(10), 8),
        (at + time::Duration::hours(1), 16),
    ] {
        ingest_at(&t, &refs, when, &cfg);
        assert_eq!(t.fleet("m").release_totals("m", "1.0.0").0, want, "{when}");
    }
}

#[test]
fn a_device_weighs_at_most_two_crashes_an_hour_apart_from_its_other_events() {
    let t = Telemetry::default();
    let cfg = TelemetryConfig::default();
    let mut crash = ev("crash", "failed");
    crash["error_code"] = "crashed".into();
    crash["stage"] = "load_method".into();
    // Twenty failed loads first: the crashes are still counted, two of them.
    let batch: Vec<String> = (0..20)
        .map(|_| ev("load", "failed").to_string())
        .chain((0..10).map(|_| crash.to_string()))
        .collect();
    let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
    ingest_at(&t, &refs, now(), &cfg);
    let fleet = t.fleet("m");
    let v = &fleet.models["m"]["1.0.0"]["vulkan"];
    assert_eq!((v.loads(), v.crashes), (8, 2));
    assert_eq!(v.crash_stages["load_method"], 2);
    assert_eq!(fleet.release_crash_devices("m", "1.0.0"), (1, 1));
}

#[test]
fn a_crash_event_that_does_not_say_it_crashed_is_refused() {
    let t = Telemetry::default();
    let cfg = TelemetryConfig::default();
    let mut good = ev("crash", "failed");
    good["error_code"] = "crashed".into();
    good["stage"] = "run".into();
    let with = |k: &str, v: serde_json::Value| {
        let mut e = good.clone();
        e[k] = v;
        e
    };
    let batch = [
        good.clone(),
        with("outcome", "ok".into()),
        with("error_code", "hash_mismatch".into()),
        with("error_code", serde_json::Value::Null),
        with("stage", serde_json::Value::Null),
    ];
    let report = ingest_values(&t, &batch, &cfg);
    let refused: Vec<usize> = report.rejected.iter().map(|r| r.index).collect();
    assert_eq!(refused, [1, 2, 3, 4], "{:?}", report.rejected);
    assert!(
        report
            .rejected
            .iter()
            .all(|r| r.code == ErrorCode::EventInvalid && r.message.contains("error_code crashed")),
        "{:?}",
        report.rejected
    );
    assert_eq!(t.fleet("m").models["m"]["1.0.0"]["vulkan"].crashes, 1);
}

use ferry_shared::select::deny::DeviceClass;

/// Ingests JSON values as a batch's event texts, every one counted as receipted.
fn ingest_values(
    t: &Telemetry,
    batch: &[serde_json::Value],
    cfg: &TelemetryConfig,
) -> IngestReport {
    let texts: Vec<String> = batch.iter().map(serde_json::Value::to_string).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    ingest_at(t, &refs, now(), cfg)
}

/// Ingests event texts received at `when`, every one receipted, and counts them at once.
fn ingest_at(
    t: &Telemetry,
    refs: &[&str],
    when: OffsetDateTime,
    cfg: &TelemetryConfig,
) -> IngestReport {
    let (report, batch) = t.ingest(refs, when, cfg, &|_| Ok(()), &|_| true, None);
    t.apply_in(batch, t.outbox().minute_of(when), 0, cfg);
    report
}

fn ev(kind: &str, outcome: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": kind, "model": "m", "release": "1.0.0", "variant": "vulkan", "delegate": "vulkan",
        "outcome": outcome, "install_id": "i1", "platform": "android", "soc": "SM8450",
        "device_model": "X", "os_version": "14", "app_version": "1.0.0", "runtime_version": "1.5.1",
        "at": "2026-12-02T10:00:00Z", "to_variant": "xnnpack", "error_code": "runtime_load_failed", "load_ms": 3.5,
        "future_field": {"ignored": true}
    })
}

fn now() -> OffsetDateTime {
    OffsetDateTime::parse(
        "2026-12-02T12:00:00Z",
        &time::format_description::well_known::Rfc3339,
    )
    .expect("time")
}

#[test]
fn validation_errors_are_per_event() {
    let t = Telemetry::default();
    let cfg = TelemetryConfig::default();
    let mut missing = ev("load", "ok");
    missing
        .as_object_mut()
        .expect("object")
        .remove("install_id");
    let mut no_target = ev("fallback", "failed");
    no_target
        .as_object_mut()
        .expect("object")
        .remove("to_variant");
    let mut old = ev("load", "ok");
    old["at"] = "2020-01-01T00:00:00Z".into();
    let mut bad_model = ev("load", "ok");
    bad_model["model"] = "../x".into();
    let mut nan = ev("load", "ok");
    nan["load_ms"] = serde_json::json!(-1);
    let batch = vec![
        ev("load", "ok"),
        missing,
        no_target,
        old,
        bad_model,
        nan,
        serde_json::json!(42),
        ev("fallback", "failed"),
    ];
    let r = ingest_values(&t, &batch, &cfg);
    assert_eq!(r.accepted, 2);
    let codes: Vec<(usize, &str)> = r
        .rejected
        .iter()
        .map(|e| (e.index, e.code.as_str()))
        .collect();
    assert_eq!(
        codes,
        [
            (1, "event_invalid"),
            (2, "event_invalid"),
            (3, "event_out_of_range"),
            (4, "event_invalid"),
            (5, "event_invalid"),
            (6, "event_invalid")
        ]
    );
    let (loads, failures, fallbacks) = t.release_totals("m", "1.0.0");
    assert_eq!((loads, failures, fallbacks), (1, 0, 1));
}

#[test]
fn per_install_rate_limit() {
    let t = Telemetry::default();
    let cfg = TelemetryConfig {
        per_install_per_minute: 3,
        ..TelemetryConfig::default()
    };
    let batch: Vec<_> = (0..5).map(|_| ev("load", "ok")).collect();
    let r = ingest_values(&t, &batch, &cfg);
    assert_eq!(r.accepted, 3);
    assert!(r.rejected.iter().all(|e| e.code == ErrorCode::RateLimited));
}

#[test]
fn deny_candidates_need_samples_and_rate() {
    let t = Telemetry::default();
    let cfg = TelemetryConfig {
        deny_min_samples: 10,
        per_install_per_minute: 100_000,
        // Every event of these tests comes from one network.
        deny_min_networks: 0,
        ..TelemetryConfig::default()
    };
    let mut batch = Vec::new();
    for i in 0..20 {
        let mut f = ev("load", "failed");
        f["install_id"] = format!("d{i}").into();
        let mut fb = ev("fallback", "failed");
        fb["install_id"] = format!("d{i}").into();
        batch.push(f);
        batch.push(fb);
    }
    ingest_values(&t, &batch, &cfg);
    let c = deny_candidates(&t, &cfg);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(
        c.iter()
            .any(|d| d.class == DeviceClass::Soc && d.value == "SM8450" && d.samples == 20)
    );
    assert_eq!(
        c[0].reason(),
        format!("denied by telemetry: 100% fallback on {}, n=20", c[0].value)
    );
    let h = t.health("m");
    assert_eq!(h["releases"][0]["variants"][0]["devices"], 20);
    assert_eq!(
        h["releases"][0]["variants"][0]["fallbacks_to"]["xnnpack"],
        20
    );
}

#[test]
fn one_device_cannot_deny_a_class_however_much_it_sends() {
    let cfg = TelemetryConfig {
        deny_min_samples: 10,
        per_install_per_minute: 100_000,
        // Every event of these tests comes from one network.
        deny_min_networks: 0,
        ..TelemetryConfig::default()
    };
    let batch = |devices: usize| -> Vec<serde_json::Value> {
        (0..200)
            .flat_map(|i| {
                let id = format!("d{}", i % devices);
                let mut f = ev("load", "failed");
                f["install_id"] = id.clone().into();
                let mut fb = ev("fallback", "failed");
                fb["install_id"] = id.into();
                [f, fb]
            })
            .collect()
    };
    let one = Telemetry::default();
    ingest_values(&one, &batch(1), &cfg);
    assert!(
        deny_candidates(&one, &cfg).is_empty(),
        "one device denied a class"
    );
    let (loads, failures, fallbacks) = one.release_totals("m", "1.0.0");
    assert_eq!(
        (loads, failures, fallbacks),
        (4, 4, 4),
        "one device weighs at most {PER_DEVICE_EVENTS} events per variant"
    );
    let few = Telemetry::default();
    ingest_values(&few, &batch(19), &cfg);
    assert!(
        deny_candidates(&few, &cfg).is_empty(),
        "19 devices denied a class"
    );
    let many = Telemetry::default();
    ingest_values(&many, &batch(20), &cfg);
    assert!(
        !deny_candidates(&many, &cfg).is_empty(),
        "20 devices are enough"
    );
}
