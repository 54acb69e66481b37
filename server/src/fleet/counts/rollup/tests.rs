use super::*;

fn event(kind: EventKind, outcome: Outcome, soc: &str, ms: Option<f64>) -> TelemetryEvent {
    serde_json::from_value(serde_json::json!({
        "kind": kind, "outcome": outcome, "model": "m", "release": "1.0.0",
        "variant": "v", "delegate": "vulkan", "install_id": "i", "platform": "android",
        "soc": soc, "device_model": "phone", "os_version": "14", "app_version": "1.0.0",
        "runtime_version": "1.5.1", "at": "2026-12-01T00:00:00Z",
        "load_ms": ms,
    }))
    .expect("event")
}

#[test]
fn the_merge_of_parts_is_the_whole() {
    let mut whole = Rollup::default();
    let mut parts = [Rollup::default(), Rollup::default(), Rollup::default()];
    for i in 0..3000u64 {
        let e = if i % 7 == 0 {
            event(
                EventKind::Fallback,
                Outcome::Ok,
                &format!("soc-{}", i % 13),
                None,
            )
        } else if i % 5 == 0 {
            event(
                EventKind::Load,
                Outcome::Failed,
                &format!("soc-{}", i % 13),
                None,
            )
        } else {
            event(
                EventKind::Load,
                Outcome::Ok,
                &format!("soc-{}", i % 13),
                Some(1.0 + (i % 400) as f64),
            )
        };
        whole.variant_mut("m", "1.0.0", "v").add(&e, i % 900, 0);
        parts[(i % 3) as usize]
            .variant_mut("m", "1.0.0", "v")
            .add(&e, i % 900, 0);
        whole.note_cohort("m", "staged", i % 900);
        parts[(i % 3) as usize].note_cohort("m", "staged", i % 900);
    }
    let mut merged = Rollup::default();
    for p in &parts {
        // Through JSON, as replicas exchange them.
        let back: Rollup =
            serde_json::from_slice(&serde_json::to_vec(p).expect("json")).expect("parse");
        merged.merge(&back);
    }
    let (w, m) = (whole.health("m"), merged.health("m"));
    assert_eq!(w, m, "the merged view equals one server's view");
    let v = &m["releases"][0]["variants"][0];
    // 3000 events, of which every 7th (429) is a fallback: 2571 loads.
    assert_eq!(v["loads"], 2571, "{v}");
    let devices = v["devices"].as_u64().expect("devices") as f64;
    assert!((devices - 900.0).abs() / 900.0 < 0.03, "{devices}");
    // The sketch's p50 is within its 1% relative error of the exact median.
    let mut exact: Vec<f64> = (0..3000u64)
        .filter(|i| i % 7 != 0 && i % 5 != 0)
        .map(|i| 1.0 + (i % 400) as f64)
        .collect();
    exact.sort_by(f64::total_cmp);
    let median = exact[(exact.len() - 1) / 2];
    let p50 = v["load_ms"]["p50"].as_f64().expect("p50");
    assert!((p50 - median).abs() / median <= 0.011, "{p50} vs {median}");
}

#[test]
fn app_and_runtime_versions_are_counted_and_merged() {
    let mut a = Rollup::default();
    let mut b = Rollup::default();
    let mut e = event(EventKind::Load, Outcome::Failed, "S", Some(1.0));
    a.variant_mut("m", "1.0.0", "v").add(&e, 1, 1);
    e.app_version = "2.0.0".into();
    e.runtime_version = "1.6.0".into();
    b.variant_mut("m", "1.0.0", "v").add(&e, 2, 1);
    b.variant_mut("m", "1.0.0", "v").add(&e, 3, 1);
    a.merge(&b);
    let v = a.health("m")["releases"][0]["variants"][0].clone();
    assert_eq!(v["by_app_version"]["1.0.0"]["loads"], 1, "{v}");
    assert_eq!(v["by_app_version"]["2.0.0"]["load_failures"], 2, "{v}");
    assert_eq!(v["by_runtime_version"]["1.6.0"]["devices"], 2, "{v}");
    // Rollups written before these counters read as empty ones.
    let mut old = serde_json::to_value(&a).expect("json");
    let c = &mut old["models"]["m"]["1.0.0"]["v"];
    c.as_object_mut().expect("obj").remove("by_app_version");
    c.as_object_mut().expect("obj").remove("by_runtime_version");
    let back: Rollup = serde_json::from_value(old).expect("older rollup");
    assert!(back.models["m"]["1.0.0"]["v"].by_app_version.is_empty());
}

#[test]
fn a_rollup_without_load_times_round_trips() {
    let mut r = Rollup::default();
    r.variant_mut("m", "1.0.0", "v")
        .add(&event(EventKind::Load, Outcome::Failed, "s", None), 1, 0);
    let back: Rollup =
        serde_json::from_slice(&serde_json::to_vec(&r).expect("json")).expect("parse");
    assert_eq!(back.health("m"), r.health("m"));
}

#[test]
fn classes_error_codes_and_targets_are_capped() {
    let mut r = Rollup::default();
    for i in 0..(MAX_CLASSES as u64 + 500) {
        let mut e = event(EventKind::Load, Outcome::Failed, &format!("soc-{i}"), None);
        e.error_code = Some(format!("code-{i}"));
        e.device_model = format!("model-{i}");
        r.variant_mut("m", "1.0.0", "v").add(&e, i, 0);
    }
    let v = &r.models["m"]["1.0.0"]["v"];
    assert_eq!(v.by_soc.len(), MAX_CLASSES);
    assert_eq!(v.by_device_model.len(), MAX_CLASSES);
    assert_eq!(v.error_codes.len(), MAX_KEYS);
    assert_eq!(
        v.load_failures,
        MAX_CLASSES as u64 + 500,
        "every event still counts"
    );
}
