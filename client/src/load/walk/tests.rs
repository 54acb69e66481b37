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
        sources: Vec::new(),
        metric: Default::default(),
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
            sources: Vec::new(),
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

/// The steps a walk asked for, its events, and its attempts' (variant, stage) pairs.
type Driven = (
    Vec<Next>,
    Vec<(EventKind, Outcome, String)>,
    Vec<(String, Stage)>,
);

/// Drives a walk over the manifest's three candidates (Vulkan, XNNPACK, portable) with one
/// scripted outcome per step, as the shell would, and returns the steps it asked for, the
/// events, and the attempts' (variant, stage) pairs.
fn drive(script: &[Step]) -> Driven {
    let m = manifest();
    let mut walk = Walk::new(m.variants.iter().collect(), &base);
    let mut steps = Vec::new();
    let mut script = script.iter();
    loop {
        let next = walk.next();
        steps.push(next);
        match next {
            Next::Fetch(i) => match script.next().expect("a fetch outcome") {
                Step::Fetch(f) => walk.fetched(i, f.clone(), 1.0),
                Step::Open(_) => panic!("the walk asked to fetch {i}, the script opens"),
            },
            Next::Open(i) => match script.next().expect("an open outcome") {
                Step::Open(o) => walk.opened(i, o.clone(), 2.0),
                Step::Fetch(_) => panic!("the walk asked to open {i}, the script fetches"),
            },
            Next::Loaded(_) | Next::LastKnownGood | Next::AllFailed | Next::Stop => break,
        }
    }
    assert!(script.next().is_none(), "the walk ended before the script");
    let events = walk
        .take_events()
        .into_iter()
        .map(|e| (e.kind, e.outcome, e.variant))
        .collect();
    let attempts = walk
        .into_attempts()
        .into_iter()
        .map(|a| (a.variant, a.stage))
        .collect();
    (steps, events, attempts)
}

#[derive(Clone)]
enum Step {
    Fetch(Fetched),
    Open(Opened),
}

fn cached() -> Step {
    Step::Fetch(Fetched::Ready(None))
}

fn downloaded() -> Step {
    Step::Fetch(Fetched::Ready(Some(crate::load::fetch::Transfer {
        fetched: 5,
        total: 5,
        sources: Vec::new(),
    })))
}

fn loads() -> Step {
    Step::Open(Opened::Loaded(3.0))
}

fn declines() -> Step {
    Step::Open(Opened::Failed(
        LoadFailure {
            stage: Stage::LoadMethod,
            code: ErrorCode::RuntimeLoadFailed,
            message: "the delegate declined".into(),
        },
        3.0,
    ))
}

fn deferred() -> Step {
    Step::Fetch(Fetched::Deferred {
        code: "download_deferred".into(),
        message: "needs an unmetered network".into(),
    })
}

fn download_fails(ends_walk: bool) -> Step {
    Step::Fetch(Fetched::Failed {
        stage: Stage::Download,
        code: if ends_walk { "disk_full" } else { "network" }.into(),
        message: "it broke".into(),
        ends_walk,
    })
}

const V: &str = "vulkan-fp32";
const X: &str = "xnnpack-fp32";
const P: &str = "portable-fp32";

fn ev(kind: EventKind, outcome: Outcome, v: &str) -> (EventKind, Outcome, String) {
    (kind, outcome, v.to_string())
}

#[test]
fn the_best_candidate_that_loads_is_handed_over_at_once() {
    let (steps, events, attempts) = drive(&[cached(), loads()]);
    assert_eq!(steps, [Next::Fetch(0), Next::Open(0), Next::Loaded(0)]);
    assert_eq!(events, [ev(EventKind::Load, Outcome::Ok, V)]);
    assert!(attempts.is_empty());
}

#[test]
fn a_declined_delegate_falls_back_to_xnnpack() {
    let (steps, events, attempts) = drive(&[downloaded(), declines(), cached(), loads()]);
    assert_eq!(
        steps,
        [
            Next::Fetch(0),
            Next::Open(0),
            Next::Fetch(1),
            Next::Open(1),
            Next::Loaded(1)
        ]
    );
    assert_eq!(
        events,
        [
            ev(EventKind::Download, Outcome::Ok, V),
            ev(EventKind::Load, Outcome::Failed, V),
            ev(EventKind::Fallback, Outcome::Failed, V),
            ev(EventKind::Load, Outcome::Ok, X),
        ]
    );
    assert_eq!(attempts, [(V.to_string(), Stage::LoadMethod)]);
}

#[test]
fn missing_operators_skip_a_candidate_before_its_download() {
    let (steps, events, attempts) = drive(&[
        Step::Fetch(Fetched::OperatorsMissing("no aten::gelu".into())),
        cached(),
        loads(),
    ]);
    assert_eq!(
        steps,
        [
            Next::Fetch(0),
            Next::Fetch(1),
            Next::Open(1),
            Next::Loaded(1)
        ]
    );
    assert_eq!(
        events,
        [
            ev(EventKind::Fallback, Outcome::Failed, V),
            ev(EventKind::Load, Outcome::Ok, X)
        ]
    );
    assert_eq!(attempts, [(V.to_string(), Stage::Select)]);
}

#[test]
fn a_deferred_download_lets_a_cached_candidate_after_it_load() {
    let (steps, events, attempts) = drive(&[deferred(), cached(), loads()]);
    assert_eq!(
        steps,
        [
            Next::Fetch(0),
            Next::Fetch(1),
            Next::Open(1),
            Next::Loaded(1)
        ]
    );
    // Not the variant's failure: no telemetry for it.
    assert_eq!(events, [ev(EventKind::Load, Outcome::Ok, X)]);
    assert_eq!(attempts, [(V.to_string(), Stage::Download)]);
}

#[test]
fn when_downloads_were_deferred_and_the_rest_failed_the_last_known_good_serves() {
    let (steps, _, attempts) = drive(&[deferred(), cached(), declines(), download_fails(false)]);
    assert_eq!(steps.last(), Some(&Next::LastKnownGood));
    assert_eq!(attempts.len(), 3);
}

#[test]
fn when_every_candidate_fails_the_attempts_say_why_in_order() {
    let (steps, events, attempts) = drive(&[
        cached(),
        declines(),
        download_fails(false),
        cached(),
        declines(),
    ]);
    assert_eq!(steps.last(), Some(&Next::AllFailed));
    assert_eq!(
        attempts,
        [
            (V.to_string(), Stage::LoadMethod),
            (X.to_string(), Stage::Download),
            (P.to_string(), Stage::LoadMethod),
        ]
    );
    // A fallback event from each to the next; none from the last.
    let fallbacks: Vec<&String> = events
        .iter()
        .filter(|e| e.0 == EventKind::Fallback)
        .map(|e| &e.2)
        .collect();
    assert_eq!(fallbacks, [V, X]);
}

#[test]
fn a_full_disk_stops_the_walk_with_its_download_event_only() {
    let (steps, events, attempts) = drive(&[download_fails(true)]);
    assert_eq!(steps, [Next::Fetch(0), Next::Stop]);
    assert_eq!(events, [ev(EventKind::Download, Outcome::Failed, V)]);
    assert!(attempts.is_empty());
}

#[test]
fn no_candidate_at_all_fails_at_once() {
    let walk = Walk::new(Vec::new(), &base);
    assert_eq!(walk.next(), Next::AllFailed);
}

#[test]
fn an_outcome_for_another_step_changes_nothing() {
    let m = manifest();
    let mut walk = Walk::new(m.variants.iter().collect(), &base);
    walk.opened(0, Opened::Loaded(1.0), 1.0);
    walk.fetched(2, Fetched::Ready(None), 1.0);
    assert_eq!(walk.next(), Next::Fetch(0));
    assert!(walk.take_events().is_empty());
}

#[test]
fn a_variant_that_crashed_before_is_passed_over_with_a_crashed_attempt_and_no_native_step() {
    let m = manifest();
    let mut walk = Walk::new(m.variants.iter().collect(), &base);
    assert_eq!(walk.next(), Next::Fetch(0));
    walk.fetched(
        0,
        Fetched::Crashed {
            stage: Stage::LoadMethod,
            message: "crashed before".into(),
        },
        0.0,
    );
    // The next candidate's turn: never Open(0) (no native call for the crashed one).
    assert_eq!(walk.next(), Next::Fetch(1));
    let events = walk.take_events();
    assert_eq!(
        events.len(),
        1,
        "one fallback event, no load event: {events:?}"
    );
    assert_eq!(events[0].kind, EventKind::Fallback);
    assert_eq!(events[0].error_code.as_deref(), Some("crashed"));
    assert_eq!(events[0].stage.as_deref(), Some("load_method"));
    assert_eq!(events[0].to_variant.as_deref(), Some("xnnpack-fp32"));
    // Every candidate crashed: the walk ends with all failed, each attempt `crashed`.
    for i in 1..3 {
        walk.fetched(
            i,
            Fetched::Crashed {
                stage: Stage::Run,
                message: "crashed before".into(),
            },
            0.0,
        );
    }
    assert_eq!(walk.next(), Next::AllFailed);
    let attempts = walk.into_attempts();
    assert_eq!(attempts.len(), 3);
    assert!(attempts.iter().all(|a| a.error_code == "crashed"));
    assert_eq!(attempts[0].stage, Stage::LoadMethod);
    assert_eq!(attempts[2].stage, Stage::Run);
}
