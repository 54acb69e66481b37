//! What a client refuses and what it falls back to, end to end with the real server and
//! runtime: tampered, untrusted, expired and replayed answers; the last known good when the
//! server is down; a cached entry its signed release does not list; and what the server's
//! online key alone can never make a device load.

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo, Source, max_abs_diff};
use ferry_shared::Sha256Digest;
use ferry_shared::manifest::Platform;
use ferry_shared::wire::telemetry::EventKind;
use ferry_tests::app::TestApp;
use ferry_tests::proxy::{Fault, FaultProxy};
use std::path::Path;
use std::sync::Arc;

use crate::client::e2e::{client, demo, phone, sidecar};
use ferry_tests::kit::quick_limits;

#[test]
fn tampered_untrusted_expired_and_replayed_responses_are_refused() {
    let app = demo();
    let proxy = FaultProxy::start(app.server.addr);
    let dev = phone(Platform::Linux, &[]);
    let mut codes = Vec::new();

    // Tampered manifest.
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &proxy.url(), cache.path());
    // A manifest changed in transit no longer hashes to the digest the signed decision names.
    proxy.release_faults([Fault::TamperRelease]);
    let e = c.load("demo-mlp", &dev).expect_err("tampered");
    codes.push(e.code().to_string());
    assert_eq!(e.code(), "decision_mismatch", "{e}");
    assert!(e.to_string().contains("hashes to"), "{e}");

    // Wrong key: the app pins keys the server does not have.
    let other = tempfile::tempdir().expect("tmp");
    let notes = ferry_server::keys::ensure_dev_keys(other.path()).expect("keys");
    assert!(!notes.is_empty());
    let trust = ferry_shared::trust::TrustFile::from_json(
        &std::fs::read(other.path().join("trust.json")).expect("read"),
    )
    .expect("trust");
    let cache = tempfile::tempdir().expect("tmp");
    let c2 = ClientBuilder::new(app.url(), trust)
        .cache_dir(cache.path())
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .build()
        .expect("client");
    let e = c2.load("demo-mlp", &dev).expect_err("untrusted");
    codes.push(e.code().to_string());
    assert_eq!(e.code(), "key_unknown", "{e}");

    // Expired: a decision past its expiry, served again by a proxy (also to the request the
    // client then makes with a nonce), is refused (freeze protection). A device whose own
    // clock is off gets a fresh decision instead (client/clock.rs).
    let past = time::OffsetDateTime::now_utc() - time::Duration::hours(3);
    let stale = forged(&app, |d| {
        d.issued_at = past;
        d.expires_at = past + time::Duration::hours(1);
    });
    proxy.resolve_faults([Fault::Replace(stale.clone()), Fault::Replace(stale)]);
    let cache = tempfile::tempdir().expect("tmp");
    let c3 = client(&app, &proxy.url(), cache.path());
    let e = c3.load("demo-mlp", &dev).expect_err("expired");
    proxy.clear_faults();
    codes.push(e.code().to_string());
    assert_eq!(e.code(), "expired", "{e}");

    // Replay: an old signed response, served again (by a proxy) to a client that has since
    // persisted a newer decision, is refused; the client keeps serving its verified copy.
    let cache = tempfile::tempdir().expect("tmp");
    let (first_status, first) = app.resolve(
        &serde_json::json!({"model": "demo-mlp", "install_id": "e2e-device", "app_version": "1.0.0",
            "runtime_version": "1.5.1", "backends": ["XnnpackBackend"], "platform": "linux"}),
        false,
    );
    assert_eq!(first_status, 200);
    // The model's state moves on (a deny entry for another device class): newer decisions carry
    // a higher sequence.
    let (s, b) = app.post_raw(
        "/v1/admin/models/demo-mlp/deny",
        &serde_json::to_vec(&serde_json::json!({"action": "deny", "release": "1.0.0",
            "variant": "vulkan-fp32", "class": "soc", "value": "SM0000"}))
        .expect("json"),
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    let c4 = client(&app, &proxy.url(), cache.path());
    c4.load("demo-mlp", &dev)
        .expect("a fresh load records a newer sequence");
    drop(c4);
    // A new client on the same cache: the sequence must have been persisted, not just held.
    let c4 = client(&app, &proxy.url(), cache.path());
    proxy.resolve_faults([Fault::Replace(serde_json::to_vec(&first).expect("json"))]);
    let replayed = c4
        .load("demo-mlp", &dev)
        .expect("the verified copy is still served");
    match &replayed.source {
        Source::LastKnownGood { code, .. } => {
            codes.push(code.clone());
            assert_eq!(code, "replay");
        }
        other => panic!("a replayed response was accepted: {other:?}"),
    }

    let unique: std::collections::BTreeSet<&String> = codes.iter().collect();
    assert_eq!(unique.len(), codes.len(), "{codes:?}");

    // With a last known good copy cached, a tampered response is refused but the app keeps
    // working on the verified copy, and says why.
    let cache = tempfile::tempdir().expect("tmp");
    let c5 = client(&app, &proxy.url(), cache.path());
    let good = c5.load("demo-mlp", &dev).expect("clean load");
    assert_eq!(good.variant, "xnnpack-fp32");
    // An answer whose release reference was changed in transit: the decision names another.
    proxy.resolve_faults([Fault::TamperRelease]);
    let lkg = c5.load("demo-mlp", &dev).expect("last known good");
    assert!(
        matches!(&lkg.source, Source::LastKnownGood { code, .. } if code == "decision_mismatch"),
        "{:?}",
        lkg.source
    );
    // The refusal is in the telemetry queue too.
    assert!(c5.telemetry_pending().iter().any(
        |e| e.kind == EventKind::Verify && e.error_code.as_deref() == Some("decision_mismatch")
    ));
}

#[test]
fn server_down_serves_the_last_known_good() {
    let app = demo();
    let cache = tempfile::tempdir().expect("tmp");
    let url = app.url();
    let c = client(&app, &url, cache.path());
    let dev = phone(Platform::Linux, &[]);
    assert!(c.cached("demo-mlp").is_none());
    let first = c.load("demo-mlp", &dev).expect("online");
    assert_eq!(first.variant, "xnnpack-fp32");
    drop(first);
    let cached = c.cached("demo-mlp").expect("cached after a load");
    assert_eq!(cached.variant, "xnnpack-fp32");

    // A nothing-cached client against the same dead server fails clearly.
    let TestApp { server, dir, .. } = app;
    server.stop();
    let mut offline = c.load("demo-mlp", &dev).expect("served from cache");
    match &offline.source {
        Source::LastKnownGood { code, .. } => assert_eq!(code, "network"),
        other => panic!("unexpected source {other:?}"),
    }
    // The report starts with why the server was not used.
    let r = &offline.report;
    assert_eq!(
        (r.source.as_str(), r.variant.as_deref()),
        ("last_known_good", Some("xnnpack-fp32"))
    );
    assert_eq!(
        (
            r.attempts[0].stage.as_str(),
            r.attempts[0].error_code.as_str()
        ),
        ("resolve", "network")
    );
    let g = sidecar("mlp-v1-xnnpack.json");
    let out = offline.run(&g.input).expect("forward");
    assert!(max_abs_diff(&out, &g.output).is_some_and(|d| d <= g.atol));

    let empty = tempfile::tempdir().expect("tmp");
    let trust = ferry_shared::trust::TrustFile::from_json(
        &std::fs::read(dir.path().join("keys/trust.json")).expect("trust"),
    )
    .expect("trust");
    let c2 = ClientBuilder::new(url, trust)
        .cache_dir(empty.path())
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .download_limits(quick_limits())
        .build()
        .expect("client");
    let e = c2.load("demo-mlp", &dev).expect_err("nothing cached");
    assert_eq!(e.code(), "offline_no_cache", "{e}");
}

#[test]
fn a_cached_entry_that_its_signed_release_does_not_list_is_never_offered() {
    // The index names the last known good variant next to its signed release envelope. Edit
    // the entry on disk (another variant id, another release, another size) and the client
    // must notice that the signed release does not list it: nothing is offered or loaded.
    let app = demo();
    let cache = tempfile::tempdir().expect("tmp");
    let url = app.url();
    let dev = phone(Platform::Linux, &[]);
    let first = client(&app, &url, cache.path())
        .load("demo-mlp", &dev)
        .expect("online");
    assert_eq!(first.variant, "xnnpack-fp32");
    drop(first);
    let index_path = cache.path().join("index.json");
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).expect("index")).expect("json");
    assert!(
        client(&app, &url, cache.path())
            .cached("demo-mlp")
            .is_some(),
        "the untouched entry is offered"
    );
    for (field, value) in [
        ("variant", serde_json::json!("portable-fp32")),
        ("release", serde_json::json!("9.9.9")),
        ("delegate", serde_json::json!("CoreMLBackend")),
        ("size", serde_json::json!(1)),
    ] {
        let mut tampered = original.clone();
        tampered["models"]["demo-mlp"][field] = value;
        std::fs::write(&index_path, serde_json::to_vec(&tampered).expect("json")).expect("write");
        let c = client(&app, "http://127.0.0.1:9", cache.path());
        assert!(
            c.cached("demo-mlp").is_none(),
            "a cached entry with another {field} is offered"
        );
        let e = c.load("demo-mlp", &dev).expect_err("offline load");
        assert_eq!(e.code(), "decision_mismatch", "{field}: {e}");
    }
}

/// A resolve answer for the test device, its decision edited by `edit` and re-signed with the
/// server's online key: what an attacker who stole only the online key can send.
fn forged(app: &TestApp, edit: impl FnOnce(&mut ferry_shared::wire::resolve::Decision)) -> Vec<u8> {
    // Exactly what the test client asks for `phone(Platform::Linux, &[])`, so that the
    // decision matches its request and only the edit can be refused.
    use ferry_client::Runtime as _;
    let runtime = ExecuTorchRuntime::new();
    let (status, body) = app.resolve(
        &serde_json::json!({"model": "demo-mlp", "install_id": "e2e-device", "app_version": "1.0.0",
            "runtime_version": runtime.version().to_string(),
            "backends": runtime.registered_backends(), "platform": "linux", "os_version": "17.0",
            "device_model": "test phone", "soc": "SM8550", "ram_mb": 8192,
            "seal_schemes": [ferry_shared::manifest::SEAL_SCHEME]}),
        false,
    );
    assert_eq!(status, 200);
    let mut resp: ferry_shared::wire::resolve::ResolveResponse =
        serde_json::from_value(body).expect("response");
    let payload = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        resp.decision.payload.as_bytes(),
    )
    .expect("base64");
    let mut decision: ferry_shared::wire::resolve::Decision =
        serde_json::from_slice(&payload).expect("decision");
    edit(&mut decision);
    let online =
        ferry_server::keys::load(&app.dir.path().join("keys/online.key")).expect("online key");
    resp.decision = online.pair.sign(
        ferry_shared::wire::resolve::DECISION_PAYLOAD_TYPE,
        &serde_json::to_vec(&decision).expect("json"),
    );
    serde_json::to_vec(&resp).expect("json")
}

#[test]
fn a_decision_re_signed_with_the_online_key_cannot_swap_a_digest() {
    // An attacker holding only the online key (a compromised server or replica) re-signs a
    // decision whose candidate points at other bytes: the release key never signed them.
    let app = demo();
    let proxy = FaultProxy::start(app.server.addr);
    let dev = phone(Platform::Linux, &[]);
    let other =
        std::fs::read(ferry_tests::fixtures_dir().join("pte/mlp-v2-xnnpack.pte")).expect("fixture");
    let bytes = forged(&app, |decision| {
        decision.candidates[0].sha256 = Sha256Digest::of(&other);
        decision.candidates[0].size = other.len() as u64;
        decision.candidates[0].url = format!(
            "/v1/blobs/sha256/{}",
            decision.candidates[0].sha256.to_hex()
        );
    });
    proxy.resolve_faults([Fault::Replace(bytes)]);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &proxy.url(), cache.path());
    let e = c.load("demo-mlp", &dev).expect_err("swapped digest");
    assert_eq!(e.code(), "decision_mismatch", "{e}");
    assert!(
        !proxy.log().iter().any(|l| l.line.contains("/v1/blobs/")),
        "nothing may be downloaded for a decision that does not match the signed release"
    );
}

#[test]
fn the_online_key_cannot_send_a_device_what_the_release_key_did_not_sign_for_it() {
    // Each forgery is re-signed with the real online key; each is refused before any download.
    let app = demo();
    let proxy = FaultProxy::start(app.server.addr);
    let dev = phone(Platform::Linux, &[]);
    let coreml = |d: &mut ferry_shared::wire::resolve::Decision| {
        // Core ML is signed for iOS and macOS only; this device is Linux.
        let signed = app
            .verify_response(
                &app.resolve(
                    &serde_json::json!({"model": "demo-mlp",
                "install_id": "i", "app_version": "1.0.0", "runtime_version": "1.5.1",
                "backends": ["XnnpackBackend", "CoreMLBackend"], "platform": "ios"}),
                    false,
                )
                .1,
            )
            .0;
        d.candidates.insert(0, signed.candidates[0].clone());
    };
    let far = time::OffsetDateTime::now_utc() + time::Duration::days(3650);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "the decision of another device profile",
            forged(&app, |d| d.request = Sha256Digest::of(b"another request")),
            "decision_mismatch",
        ),
        (
            "pinned to another install id",
            forged(&app, |d| d.pinned = Some("someone-else".into())),
            "decision_mismatch",
        ),
        (
            "a staged decision for a device outside the staged cohort",
            forged(&app, |d| {
                d.cohort = ferry_shared::wire::resolve::Cohort::Staged;
                d.cohort_rule = Some(ferry_shared::wire::resolve::CohortRule {
                    salt: "salt".into(),
                    basis_points: 0,
                });
            }),
            "decision_mismatch",
        ),
        (
            "an experiment arm the device is not in",
            forged(&app, |d| {
                // A share of 0: no device is in the experiment.
                d.experiment = Some(ferry_shared::wire::resolve::ExperimentArm {
                    id: "xforged".into(),
                    arm: "treatment".into(),
                    salt: "salt".into(),
                    basis_points: 0,
                });
            }),
            "decision_mismatch",
        ),
        (
            "another release manifest than the answer refers to",
            forged(&app, |d| {
                d.release_sha256 = Sha256Digest::of(b"another manifest")
            }),
            "decision_mismatch",
        ),
        (
            "an iOS-only Core ML candidate",
            forged(&app, coreml),
            "decision_mismatch",
        ),
        (
            "issued ten years from now",
            forged(&app, |d| {
                d.issued_at = far;
                d.expires_at = far + time::Duration::hours(1);
            }),
            "decision_untimely",
        ),
        (
            "valid for ten years",
            forged(&app, |d| d.expires_at = far),
            "decision_untimely",
        ),
    ];
    for (what, bytes, code) in cases {
        proxy.resolve_faults([Fault::Replace(bytes)]);
        let cache = tempfile::tempdir().expect("tmp");
        let c = client(&app, &proxy.url(), cache.path());
        let e = c.load("demo-mlp", &dev).expect_err(what);
        assert_eq!(e.code(), code, "{what}: {e}");
        assert!(
            !proxy.log().iter().any(|l| l.line.contains("/v1/blobs/")),
            "{what}: nothing may be downloaded"
        );
    }
    // Nor can it vouch for a manifest the release key did not sign: a decision naming the
    // digest of a tampered manifest, which is then served under that digest.
    let real = forged(&app, |_| {});
    let real: serde_json::Value = serde_json::from_slice(&real).expect("json");
    let mut fetched = app
        .agent
        .get(app.at(real["release_ref"]["url"].as_str().expect("url")))
        .call()
        .expect("release");
    let mut envelope: serde_json::Value =
        serde_json::from_slice(&fetched.body_mut().read_to_vec().expect("bytes")).expect("json");
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut manifest: serde_json::Value = serde_json::from_slice(
        &base64::Engine::decode(&b64, envelope["payload"].as_str().expect("payload"))
            .expect("base64"),
    )
    .expect("manifest");
    manifest["notes"] = "rewritten by the holder of the online key".into();
    envelope["payload"] =
        base64::Engine::encode(&b64, serde_json::to_vec(&manifest).expect("json")).into();
    let tampered = serde_json::to_vec(&envelope).expect("json");
    let tampered_digest = Sha256Digest::of(&tampered);
    let mut answer: serde_json::Value = serde_json::from_slice(&forged(&app, |d| {
        d.release_sha256 = tampered_digest;
    }))
    .expect("json");
    answer["release_ref"]["sha256"] = tampered_digest.to_hex().into();
    answer["release_ref"]["size"] = tampered.len().into();
    proxy.resolve_faults([Fault::Replace(serde_json::to_vec(&answer).expect("json"))]);
    proxy.release_faults([Fault::Replace(tampered)]);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &proxy.url(), cache.path());
    let e = c.load("demo-mlp", &dev).expect_err("tampered manifest");
    assert_eq!(e.code(), "signature_invalid", "{e}");
    assert!(
        !proxy.log().iter().any(|l| l.line.contains("/v1/blobs/")),
        "nothing may be downloaded for an unsigned manifest"
    );

    // A device that has a verified model keeps loading it when a forged or untimely decision
    // arrives, and the poisoned sequence is not kept.
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &proxy.url(), cache.path());
    drop(c.load("demo-mlp", &dev).expect("honest load"));
    // (Served again when the client asks once more with a nonce.)
    let untimely = forged(&app, |d| {
        d.sequence = u64::MAX;
        d.issued_at = far;
        d.expires_at = far + time::Duration::hours(1);
    });
    proxy.resolve_faults([Fault::Replace(untimely.clone()), Fault::Replace(untimely)]);
    let m = c.load("demo-mlp", &dev).expect("last known good");
    proxy.clear_faults();
    assert!(
        matches!(&m.source, Source::LastKnownGood { code, .. } if code == "decision_untimely"),
        "{:?}",
        m.source
    );
    drop(m);
    let again = c
        .load("demo-mlp", &dev)
        .expect("honest decisions still accepted");
    assert_eq!(again.source, Source::Cached);
}

#[test]
fn shared_decisions_answer_only_their_own_profile_and_cohort() {
    use ferry_client::Runtime as _;
    let app = TestApp::start();
    app.publish(&ferry_tests::app::mlp_v1());
    app.publish(&ferry_tests::app::mlp_v2());
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "start", "release": "2.0.0", "percent": "50"}"#,
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    let runtime = ExecuTorchRuntime::new();
    let profile = |install: &str, soc: &str| {
        serde_json::json!({"model": "mlp", "install_id": install, "app_version": "2.0.0",
            "runtime_version": runtime.version().to_string(),
            "backends": runtime.registered_backends(), "platform": "linux", "os_version": "17.0",
            "device_model": "test phone", "soc": soc, "ram_mb": 8192,
            "seal_schemes": [ferry_shared::manifest::SEAL_SCHEME]})
    };
    let dev = |install: &str, soc: &str| DeviceInfo {
        install_id: install.into(),
        soc: soc.into(),
        ..phone(Platform::Linux, &[])
    };
    // Answers for many devices of one profile: one signed decision per cohort, shared.
    let mut by_cohort: std::collections::BTreeMap<String, Vec<(String, serde_json::Value)>> =
        Default::default();
    for i in 0..60 {
        let id = format!("shared-{i}");
        let (s, body) = app.resolve(&profile(&id, "SM8550"), false);
        assert_eq!(s, 200, "{body}");
        let (d, _) = app.verify_response(&body);
        by_cohort
            .entry(format!("{:?}", d.cohort))
            .or_default()
            .push((id, body));
    }
    let staged = &by_cohort["Staged"];
    let baseline = &by_cohort["Baseline"];
    assert!(staged.len() > 5 && baseline.len() > 5, "{by_cohort:?}");
    for group in [staged, baseline] {
        let first = &group[0].1;
        for (_, other) in &group[1..] {
            assert_eq!(
                other["decision"], first["decision"],
                "one signature per cohort"
            );
            assert_ne!(
                other["receipt"], first["receipt"],
                "receipts stay per device"
            );
        }
    }
    let client_v2 = |server: &str, cache: &Path| {
        ClientBuilder::new(server, app.trust())
            .cache_dir(cache)
            .app_version(semver::Version::new(2, 0, 0))
            .runtime(Arc::new(ExecuTorchRuntime::new()))
            .download_limits(quick_limits())
            .build()
            .expect("client")
    };
    let proxy = FaultProxy::start(app.server.addr);
    let replay = |answer: &serde_json::Value, to: &DeviceInfo| {
        proxy.resolve_faults([Fault::Replace(serde_json::to_vec(answer).expect("json"))]);
        let cache = tempfile::tempdir().expect("tmp");
        client_v2(&proxy.url(), cache.path())
            .resolve("mlp", to)
            .map(|p| p.decision().release.to_string())
    };
    // Another baseline device of the same profile may use a shared baseline answer.
    assert_eq!(
        replay(&baseline[0].1, &dev(&baseline[1].0, "SM8550")).expect("shared answer"),
        "1.0.0"
    );
    // A staged answer replayed to a baseline device is refused.
    let e = replay(&staged[0].1, &dev(&baseline[0].0, "SM8550")).expect_err("not staged");
    assert_eq!(e.code(), "decision_mismatch", "{e}");
    assert!(e.to_string().contains("staged cohort"), "{e}");
    // An answer for another profile is refused.
    let e = replay(&baseline[0].1, &dev(&baseline[0].0, "SM8450")).expect_err("other profile");
    assert_eq!(e.code(), "decision_mismatch", "{e}");
    assert!(e.to_string().contains("another request"), "{e}");
    // A shared answer is still refused once it expired or when an older one is replayed.
    let cache = tempfile::tempdir().expect("tmp");
    let c = client_v2(&proxy.url(), cache.path());
    let me = dev(&baseline[2].0, "SM8550");
    c.resolve("mlp", &me).expect("fresh answer");
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "set", "percent": "60"}"#,
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    let newer = c.resolve("mlp", &me).expect("newer answer");
    assert!(newer.decision().sequence > 0);
    proxy.resolve_faults([Fault::Replace(
        serde_json::to_vec(&baseline[2].1).expect("json"),
    )]);
    let e = c.resolve("mlp", &me).expect_err("an older shared answer");
    assert_eq!(e.code(), "replay", "{e}");
}
