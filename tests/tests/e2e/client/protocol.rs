//! The real client against protocol v1: it names its protocol and SDK on every request, and a
//! signed answer in a newer format keeps its last known good model with a typed code.

use std::sync::Arc;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo, Source};
use ferry_shared::trust::TrustFile;
use ferry_tests::app::{Options, TestApp};
use ferry_tests::kit::{DeviceExt as _, device};
use ferry_tests::proxy::{Fault, FaultProxy};
use ferry_tests::vectors;

/// The Linux board this file's tests load on.
fn board() -> DeviceInfo {
    device("protocol-device")
        .os("6.1")
        .model("vector-board")
        .soc("RK3588")
}

/// An app 1.0.0 client of `app` with the real runtime, caching in `cache`.
fn client_of(app: &TestApp, cache: &std::path::Path) -> ferry_client::Client {
    app.client(cache).build().expect("client")
}

#[test]
fn a_newer_signed_format_keeps_the_last_known_good_model() {
    // A server on the vector keys with the vector release.
    let app = TestApp::start_with(Options {
        keys: Some(vectors::dir().join("keys")),
        ..Default::default()
    });
    vectors::publish(&app);
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("cache");
    let trust = TrustFile::from_json(
        &std::fs::read(vectors::dir().join("keys/trust.json")).expect("trust"),
    )
    .expect("trust file");
    let client = || {
        ClientBuilder::new(proxy.url(), trust.clone())
            .cache_dir(cache.path())
            .app_version(semver::Version::new(1, 0, 0))
            .runtime(Arc::new(ExecuTorchRuntime::new()))
            .build()
            .expect("client")
    };

    let first = client().load("vec", &board()).expect("first load");
    assert_eq!(first.source, Source::Downloaded);
    assert_eq!(first.variant, "xnnpack-fp32");

    // Every request named the protocol and the SDK.
    let metrics = app.metrics();
    let sdk = ferry_client::RUST_SDK;
    for endpoint in ["resolve", "blobs", "releases"] {
        assert!(
            metrics.contains(&format!(
                "ferry_device_requests_total{{endpoint=\"{endpoint}\",protocol=\"1\",sdk=\"{sdk}\"}}"
            )),
            "{endpoint}: {metrics}"
        );
    }
    assert!(!metrics.contains("protocol=\"legacy\""), "{metrics}");

    // A newer server answers with a decision in format 2: the client cannot read it, says so
    // with a typed code, and keeps loading what it verified before.
    let future = std::fs::read(vectors::dir().join("answer-format-2.json")).expect("vector");
    proxy.resolve_faults([Fault::Replace(future)]);
    let second = client().load("vec", &board()).expect("last known good");
    match &second.source {
        Source::LastKnownGood { code, reason } => {
            assert_eq!(code, "format_unsupported", "{reason}");
            assert!(reason.contains("format 2"), "{reason}");
        }
        other => panic!("expected the last known good model, got {other:?}"),
    }
    assert_eq!(second.variant, "xnnpack-fp32");
    assert_eq!(second.path, first.path);
    assert_eq!(second.report.attempts[0].error_code, "format_unsupported");
}

#[test]
fn the_client_tells_the_app_when_its_protocol_is_being_retired() {
    let app = TestApp::start_with(Options {
        demo: true,
        tweak: Some(Box::new(|c| {
            c.protocol_v1_sunset =
                Some(time::Date::from_calendar_date(2029, time::Month::June, 30).expect("date"));
        })),
        ..Default::default()
    });
    let cache = tempfile::tempdir().expect("cache");
    let client = client_of(&app, cache.path());
    assert_eq!(client.protocol_sunset(), None, "nothing announced yet");
    let loaded = client.load("demo-mlp", &board()).expect("load");
    assert_eq!(loaded.report.protocol_sunset.as_deref(), Some("2029-06-30"));
    assert_eq!(client.protocol_sunset().as_deref(), Some("2029-06-30"));
    let report = serde_json::to_value(&loaded.report).expect("json");
    assert_eq!(report["protocol_sunset"], "2029-06-30");
}

#[test]
fn a_candidate_for_a_backend_the_runtime_lacks_falls_back_like_any_unregistered_backend() {
    let app = TestApp::start();
    let mut spec = ferry_tests::app::mlp_v1();
    spec.variants.push(ferry_tests::app::variant(
        "openvino-fp32",
        "mlp-v1-openvino.pte",
        "OpenvinoBackend".parse().expect("delegate"),
        ">=1.0.0",
        "*",
    ));
    app.publish(&spec);
    let cache = tempfile::tempdir().expect("cache");
    let client = client_of(&app, cache.path());
    // The app claims OpenVINO; the runtime it links registers XNNPACK only.
    let mut dev = board();
    dev.claimed_backends = vec!["OpenvinoBackend".into()];
    let loaded = client.load("mlp", &dev).expect("load");
    let first = &loaded.report.attempts[0];
    assert_eq!(first.variant, "openvino-fp32");
    assert_eq!(first.delegate, "OpenvinoBackend");
    assert_eq!(first.stage.as_str(), "load_method");
    assert!(
        first
            .message
            .contains("needs OpenvinoBackend, which this runtime does not register"),
        "{}",
        first.message
    );
    assert_eq!(loaded.delegate, "xnnpack");
    assert_eq!(loaded.report.registered_backends, ["XnnpackBackend"]);
}
