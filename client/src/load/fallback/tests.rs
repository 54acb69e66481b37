use super::*;
use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::ReleaseManifest;

/// A release with Vulkan, XNNPACK and portable variants, best first.
fn manifest() -> ReleaseManifest {
    let variant = |id: &str, delegate: &str, backend: Option<&str>| {
        serde_json::json!({
            "id": id, "delegate": delegate, "quant": "fp32",
            "backends": backend.map(|b| vec![b]).unwrap_or_default(),
            "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "size": 10, "runtime": ">=1.5.0", "app": "*",
        })
    };
    let json = serde_json::json!({
        "model": "m", "version": "1.0.0", "created": "2026-12-01T00:00:00Z",
        "variants": [
            variant("vulkan-fp32", "vulkan", Some("VulkanBackend")),
            variant("xnnpack-fp32", "xnnpack", Some("XnnpackBackend")),
            variant("portable-fp32", "portable", None),
        ],
    });
    ReleaseManifest::from_json(&serde_json::to_vec(&json).expect("json")).expect("valid")
}

fn base(kind: EventKind, v: &Variant) -> TelemetryEvent {
    TelemetryEvent {
        kind,
        model: "m".into(),
        release: "1.0.0".into(),
        variant: v.id.to_string(),
        delegate: v.delegate.to_string(),
        outcome: Outcome::Ok,
        error_code: None,
        load_ms: None,
        install_id: "i".into(),
        platform: "linux".into(),
        soc: String::new(),
        device_model: String::new(),
        os_version: String::new(),
        app_version: "1.0.0".into(),
        runtime_version: "1.5.1".into(),
        at: "2026-12-05T00:00:00Z".into(),
        to_variant: None,
        receipt: None,
        stage: None,
        clock_offset_s: None,
        inference: Default::default(),
        bytes_fetched: None,
        bytes_total: None,
    }
}

#[test]
fn a_failure_falls_back_to_the_next_candidate_and_the_last_one_does_not() {
    let m = manifest();
    let mut walk = Walk::new(m.variants.iter().collect(), &base);
    walk.load_failed(
        0,
        LoadFailure {
            stage: Stage::LoadMethod,
            code: ErrorCode::RuntimeLoadFailed,
            message: "no VulkanBackend".into(),
        },
        3.0,
        4.0,
    );
    let events = walk.take_events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].kind, EventKind::Load);
    assert_eq!(events[0].outcome, Outcome::Failed);
    assert_eq!(events[0].load_ms, Some(3.0));
    assert_eq!(events[0].stage.as_deref(), Some("load_method"));
    assert_eq!(events[1].kind, EventKind::Fallback);
    assert_eq!(events[1].variant, "vulkan-fp32");
    assert_eq!(events[1].to_variant.as_deref(), Some("xnnpack-fp32"));
    assert_eq!(events[1].error_code.as_deref(), Some("runtime_load_failed"));
    // The last candidate has nothing to fall back to: an attempt, no fallback event.
    walk.failed(2, Stage::Download, "network", "reset".into(), 1.0);
    assert!(walk.take_events().is_empty());
    let attempts = walk.into_attempts();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].variant, "vulkan-fp32");
    assert_eq!(attempts[0].stage, Stage::LoadMethod);
    assert_eq!(attempts[0].duration_ms, 4.0);
    assert_eq!(attempts[1].variant, "portable-fp32");
}

#[test]
fn a_deferred_download_is_an_attempt_without_telemetry() {
    let m = manifest();
    let mut walk = Walk::new(m.variants.iter().collect(), &base);
    walk.deferred(1, "download_deferred", "needs unmetered".into(), 0.5);
    assert!(walk.take_events().is_empty());
    let attempts = walk.into_attempts();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].variant, "xnnpack-fp32");
    assert_eq!(attempts[0].stage, Stage::Download);
    assert_eq!(attempts[0].error_code, "download_deferred");
}

#[test]
fn downloads_and_loads_are_reported_in_order() {
    let m = manifest();
    let mut walk = Walk::new(m.variants.iter().collect(), &base);
    walk.download_failed(0, Stage::Verify, "hash_mismatch");
    walk.failed(
        0,
        Stage::Verify,
        "hash_mismatch",
        "bytes differ".into(),
        2.0,
    );
    walk.downloaded(
        1,
        crate::load::fetch::Transfer {
            fetched: 10,
            total: 100,
        },
    );
    walk.loaded(1, 7.5);
    let events = walk.take_events();
    assert_eq!(
        (events[2].bytes_fetched, events[2].bytes_total),
        (Some(10), Some(100))
    );
    assert_eq!(
        (events[3].bytes_fetched, events[3].bytes_total),
        (None, None)
    );
    let kinds: Vec<(EventKind, Outcome, String)> = events
        .into_iter()
        .map(|e| (e.kind, e.outcome, e.variant))
        .collect();
    assert_eq!(
        kinds,
        [
            (EventKind::Download, Outcome::Failed, "vulkan-fp32".into()),
            (EventKind::Fallback, Outcome::Failed, "vulkan-fp32".into()),
            (EventKind::Download, Outcome::Ok, "xnnpack-fp32".into()),
            (EventKind::Load, Outcome::Ok, "xnnpack-fp32".into()),
        ]
    );
}
