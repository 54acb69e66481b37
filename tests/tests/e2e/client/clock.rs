//! Devices whose clocks are wrong, against the real server and runtime: fresh installs with
//! clocks from 1970 to 2040 get their model (the first resolve asks for a decision of its
//! own, with a nonce, and learns the server's time), later loads use the shared answers and
//! follow a new baseline, and a decision made for another request's nonce is refused.

use std::sync::Arc;
use std::time::Duration;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, ClientError, Clock, Source, SystemClock};
use ferry_shared::manifest::Platform;
use ferry_tests::app::{TestApp, mlp_v1, mlp_v2};
use time::OffsetDateTime;

use crate::client::e2e::phone;
use ferry_tests::kit::quick_limits;

/// A device clock `offset` away from the real time, with the real boot clock.
struct Skewed {
    offset: time::Duration,
}

impl Clock for Skewed {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc() + self.offset
    }

    fn since_boot(&self) -> Option<(String, Duration)> {
        SystemClock.since_boot()
    }
}

fn skewed_client(
    app: &TestApp,
    cache: &std::path::Path,
    offset: time::Duration,
) -> ferry_client::Client {
    client_at(app.url(), app, cache, offset)
}

/// A client of `app` through `server` (the app itself or a relay), its clock `offset` off.
fn client_at(
    server: String,
    app: &TestApp,
    cache: &std::path::Path,
    offset: time::Duration,
) -> ferry_client::Client {
    ClientBuilder::new(server, app.trust())
        .cache_dir(cache)
        .app_version(semver::Version::new(2, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .download_limits(quick_limits())
        .clock(Arc::new(Skewed { offset }))
        .build()
        .expect("client")
}

/// The server's count of decisions made for one request (`signed`).
fn fresh_signed(app: &TestApp) -> u64 {
    let text = app.metrics();
    text.lines()
        .find(|l| l.starts_with("ferry_fresh_decisions_total{outcome=\"signed\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Tells `app` the real runtime's operators (what the first client would otherwise send
/// after an `operators_wanted` answer, at the price of a second decision of its own).
pub(crate) fn teach_operators(app: &TestApp) {
    use ferry_client::Runtime as _;
    let ops = ExecuTorchRuntime::new()
        .registered_operators()
        .expect("operators");
    let mut req = ferry_tests::app::profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    req["operators_digest"] = ferry_shared::select::operators::digest(&ops)
        .to_hex()
        .into();
    req["operators"] = serde_json::json!(ops);
    let (status, body) = app.resolve(&req, false);
    assert_eq!(status, 200, "{body}");
}

/// Runs the real client (`load-child load`, loading `mlp`) under libfaketime's `fake` clock
/// (the boot clock untouched, as on a device) with `cache`; `ca`: the one CA HTTPS trusts.
/// Returns the child's first JSON line.
pub(crate) fn load_under_faketime(
    fake: &str,
    server: &str,
    trust: &std::path::Path,
    cache: &std::path::Path,
    ca: Option<&std::path::Path>,
) -> serde_json::Value {
    let mut cmd = std::process::Command::new("faketime");
    cmd.arg("-f")
        .arg(fake)
        .arg(env!("CARGO_BIN_EXE_load-child"))
        .arg("load")
        .arg(server)
        .arg(trust)
        .arg(cache)
        .arg("mlp")
        .env("DONT_FAKE_MONOTONIC", "1");
    if let Some(ca) = ca {
        cmd.env("FERRY_TEST_ROOT_CERT", ca);
    }
    let out = cmd
        .output()
        .expect("faketime runs (tests/setup.sh installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{fake}: {stdout} {}", String::from_utf8_lossy(&out.stderr)))
}

/// Offsets from the real time: 55 years, 400 days, 2 days and 90 minutes behind; 90
/// minutes, a day, 400 days and 14 years ahead.
fn skews() -> Vec<time::Duration> {
    let (m, d) = (time::Duration::minutes(1), time::Duration::days(1));
    vec![
        -d * (55 * 365),
        -d * 400,
        -d * 2,
        -m * 90,
        m * 90,
        d,
        d * 400,
        d * (14 * 365),
    ]
}

#[test]
fn fresh_installs_with_wrong_clocks_load_and_learn_the_servers_time() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    teach_operators(&app);
    let dev = phone(Platform::Linux, &[]);
    for offset in skews() {
        let cache = tempfile::tempdir().expect("tmp");
        let before = fresh_signed(&app);
        let c = skewed_client(&app, cache.path(), offset);
        let m = c.load("mlp", &dev).unwrap_or_else(|e| {
            panic!("a device {offset} off gets no model: {e}");
        });
        assert_eq!(m.release, "1.0.0");
        assert!(matches!(m.source, Source::Downloaded), "{offset}");
        assert_eq!(fresh_signed(&app), before + 1, "one decision of its own");
        // The estimate: the wall clock's offset, measured to within a minute.
        let measured = c
            .clock_offset_secs()
            .expect("the server's time was learned");
        assert!(
            (measured - offset.whole_seconds()).abs() < 60,
            "{offset}: measured {measured} s"
        );
        assert!((c.now() - OffsetDateTime::now_utc()).abs() < time::Duration::minutes(1));
        // Another process on the same cache (an app restart, same boot) trusts the learned
        // time: the shared answer, no new signature.
        let again = skewed_client(&app, cache.path(), offset);
        let m = again.load("mlp", &dev).expect("a restart loads");
        assert_eq!(m.release, "1.0.0");
        assert_eq!(fresh_signed(&app), before + 1, "{offset}: no second nonce");
    }
}

#[test]
fn a_device_with_a_wrong_clock_follows_a_new_baseline() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    teach_operators(&app);
    let dev = phone(Platform::Linux, &[]);
    let cache = tempfile::tempdir().expect("tmp");
    let slow = time::Duration::days(-400);
    let c = skewed_client(&app, cache.path(), slow);
    assert_eq!(c.load("mlp", &dev).expect("first load").release, "1.0.0");
    app.publish(&mlp_v2());
    app.ship("2.0.0");
    let c = skewed_client(&app, cache.path(), slow);
    let m = c.load("mlp", &dev).expect("the new baseline");
    assert_eq!(m.release, "2.0.0");
}

#[test]
fn a_decision_for_another_nonce_or_none_is_judged_as_such() {
    use base64::Engine as _;
    let app = TestApp::start();
    app.publish(&mlp_v1());
    teach_operators(&app);
    let mut req = ferry_tests::app::profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    let ours = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([7u8; 16]);
    req["nonce"] = ours.clone().into();
    let (status, body) = app.resolve(&req, true);
    assert_eq!(status, 200, "{body}");
    let (d, _) = app.verify_response(&body);
    assert_eq!(d.nonce.as_deref(), Some(ours.as_str()));
    let time = d.time.expect("the server's time");
    assert!((time - OffsetDateTime::now_utc()).abs() < time::Duration::minutes(1));
    // The same answer shown to a request with another nonce, or with none: refused.
    let resp: ferry_shared::wire::resolve::ResolveResponse =
        serde_json::from_value(body.clone()).expect("answer");
    let release = resp.release.clone().expect("release");
    let trust = app.trust_state();
    for other in [
        Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([8u8; 16])),
        None,
    ] {
        req["nonce"] = other.clone().map_or(serde_json::Value::Null, Into::into);
        let request: ferry_shared::wire::resolve::ResolveRequest =
            serde_json::from_value(req.clone()).expect("request");
        let got = ferry_client::trust::verify::verify_response(
            &resp,
            &release,
            &request,
            &trust,
            OffsetDateTime::now_utc(),
            (0, 0),
        );
        assert!(
            matches!(got, Err(ClientError::DecisionMismatch(_))),
            "{other:?}: {got:?}"
        );
    }
    // A malformed nonce is a clear 400.
    req["nonce"] = "short".into();
    let (status, body) = app.resolve(&req, false);
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("request_invalid")),
        "{body}"
    );
}

#[test]
fn decisions_with_a_nonce_are_limited_per_network() {
    use base64::Engine as _;
    let app = TestApp::start_with(ferry_tests::app::Options {
        tweak: Some(Box::new(|c| c.limits.fresh_decisions_per_minute = 2)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    let mut req = ferry_tests::app::profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    let mut statuses = Vec::new();
    for i in 0..3u8 {
        req["nonce"] = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode([i; 16])
            .into();
        let (status, body) = app.resolve(&req, false);
        statuses.push((status, body["code"].as_str().map(str::to_string)));
    }
    assert_eq!(
        statuses,
        [
            (200, None),
            (200, None),
            (429, Some("rate_limited".to_string()))
        ]
    );
    // Shared answers are not limited.
    req.as_object_mut().expect("object").remove("nonce");
    assert_eq!(app.resolve(&req, false).0, 200);
    assert_eq!(fresh_signed(&app), 2);
}

#[test]
fn telemetry_from_a_skewed_device_arrives_stamped_with_the_servers_time() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    teach_operators(&app);
    let dev = phone(Platform::Linux, &[]);
    let ahead = time::Duration::days(400);
    let skewed_cache = tempfile::tempdir().expect("tmp");
    let c = skewed_client(&app, skewed_cache.path(), ahead);
    let m = c.load("mlp", &dev).expect("loads");
    let offset = m.report.clock_offset_s.expect("the report says the offset");
    assert!((offset - ahead.whole_seconds()).abs() < 60, "{offset}");
    // Every event is stamped with the estimated time and carries the offset: none is refused
    // as out of range.
    let events = c.telemetry_pending();
    assert!(!events.is_empty());
    for e in &events {
        let at = OffsetDateTime::parse(&e.at, &time::format_description::well_known::Rfc3339)
            .expect("at");
        assert!(
            (at - OffsetDateTime::now_utc()).abs() < time::Duration::minutes(5),
            "{at}"
        );
        assert!(
            e.clock_offset_s.is_some_and(|o| (o - offset).abs() <= 1),
            "{e:?}"
        );
    }
    let report = c.send_telemetry();
    assert_eq!((report.sent, report.queued), (events.len(), 0));
    // A device whose clock is right reports too; health counts one of two off.
    let right_cache = tempfile::tempdir().expect("tmp");
    let mut other = dev.clone();
    other.install_id = "e2e-device-2".into();
    let c2 = skewed_client(&app, right_cache.path(), time::Duration::ZERO);
    c2.load("mlp", &other).expect("loads");
    assert_eq!(c2.send_telemetry().queued, 0);
    let (status, health) = app.get_json(
        "/v1/admin/models/mlp/health",
        Some(ferry_tests::app::READ_TOKEN),
    );
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["clocks"]["reporting"], 2, "{health}");
    assert_eq!(health["clocks"]["skewed"], 1, "{health}");
}

#[test]
fn a_real_client_process_under_another_wall_clock_loads_its_model() {
    // The whole process runs under libfaketime (its wall clock is what the system says; the
    // boot clock is untouched, as on a device): 1970, 400 and 2 days and 90 minutes behind,
    // 90 minutes, a day and 400 days ahead, and 2040.
    let app = TestApp::start();
    app.publish(&mlp_v1());
    teach_operators(&app);
    let trust = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(
        trust.path(),
        serde_json::to_vec(&app.trust()).expect("trust json"),
    )
    .expect("write trust");
    for fake in [
        "@1970-01-02 00:00:00",
        "-400d",
        "-2d",
        "-90m",
        "+90m",
        "+1d",
        "+400d",
        "@2040-06-01 00:00:00",
    ] {
        let cache = tempfile::tempdir().expect("tmp");
        let first = load_under_faketime(fake, &app.url(), trust.path(), cache.path(), None);
        assert_eq!(first["ok"], true, "{fake}: {first}");
        assert_eq!(first["release"], "1.0.0", "{fake}");
        assert!(
            cache.path().join("clock.json").exists(),
            "{fake}: the server's time is kept"
        );
    }
}

#[test]
fn a_decision_of_its_own_held_back_in_transit_expires_and_teaches_nothing() {
    // Decisions last 10 s; a relay holds the answer back 12 s. Judged by its signed
    // time alone it would pass; judged at the latest the true time can be (signed time plus
    // the round trip) it has expired, and the client learns no time from it.
    let app = TestApp::start_with(ferry_tests::app::Options {
        tweak: Some(Box::new(|c| c.decision_ttl_secs = 10)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    teach_operators(&app);
    let proxy = ferry_tests::proxy::FaultProxy::start(app.server.addr);
    proxy.resolve_faults([ferry_tests::proxy::Fault::Delay(Duration::from_secs(12))]);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client_at(proxy.url(), &app, cache.path(), time::Duration::ZERO);
    let e = c
        .load("mlp", &phone(Platform::Linux, &[]))
        .expect_err("held back");
    assert_eq!(e.code(), "expired", "{e}");
    assert_eq!(c.clock_offset_secs(), None, "no time learned from it");
}

#[test]
fn a_device_refused_a_decision_of_its_own_takes_the_shared_answer() {
    let app = TestApp::start_with(ferry_tests::app::Options {
        tweak: Some(Box::new(|c| c.limits.fresh_decisions_per_minute = 1)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    let dev = phone(Platform::Linux, &[]);
    for _ in 0..2 {
        // Each a fresh install: the first gets a decision of its own, the second (over the
        // limit) the shared answer, judged by its correct clock.
        let cache = tempfile::tempdir().expect("tmp");
        let c = skewed_client(&app, cache.path(), time::Duration::ZERO);
        assert_eq!(c.load("mlp", &dev).expect("loads").release, "1.0.0");
    }
    assert_eq!(fresh_signed(&app), 1);
}

#[test]
fn a_replayed_answer_without_the_nonce_is_refused_once_the_server_is_known_to_answer_nonces() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    teach_operators(&app);
    let dev = phone(Platform::Linux, &[]);
    // A shared answer for this device, as a relay could have recorded it.
    let cache = tempfile::tempdir().expect("tmp");
    let c = skewed_client(&app, cache.path(), time::Duration::ZERO);
    c.load("mlp", &dev).expect("loads");
    let plan = c.resolve("mlp", &dev).expect("shared answer");
    assert!(
        plan.decision().nonce.is_none(),
        "with a time estimate: shared"
    );
    let proxy = ferry_tests::proxy::FaultProxy::start(app.server.addr);
    let recorded = recorded_shared_answer(&app, &dev);
    // After a reboot (no estimate; the cache remembers that the server answers nonces) the
    // client asks with a nonce; the relay answers with the recorded shared answer.
    std::fs::write(
        cache.path().join("clock.json"),
        br#"{"server_echoes_nonce": true}"#,
    )
    .expect("write");
    proxy.resolve_faults([ferry_tests::proxy::Fault::Replace(recorded)]);
    let c2 = client_at(proxy.url(), &app, cache.path(), time::Duration::ZERO);
    let m = c2.load("mlp", &dev).expect("the last known good");
    assert!(
        matches!(&m.source, Source::LastKnownGood { code, reason }
            if code == "decision_mismatch" && reason.contains("answers nonces")),
        "{:?}",
        m.source
    );
}

/// The shared answer `app` gives `dev`, as a relay could have recorded it.
fn recorded_shared_answer(app: &TestApp, dev: &ferry_client::DeviceInfo) -> Vec<u8> {
    let mut resp = ureq::post(format!("{}/v1/resolve", app.url()))
        .header("content-type", "application/json")
        .send(&serde_json::to_vec(&shared_request_of(dev)).expect("json")[..])
        .expect("resolve");
    resp.body_mut().read_to_vec().expect("body")
}

/// The resolve request a client with the real runtime sends for `dev` without a nonce (what a
/// relay sees).
fn shared_request_of(dev: &ferry_client::DeviceInfo) -> serde_json::Value {
    use ferry_client::Runtime as _;
    let runtime = ExecuTorchRuntime::new();
    serde_json::json!({
        "model": "mlp",
        "install_id": dev.install_id,
        "app_version": "2.0.0",
        "runtime_version": runtime.version().to_string(),
        "backends": runtime.registered_backends(),
        // What the real client sends: its runtime opens sealed variants.
        "seal_schemes": [ferry_shared::manifest::SEAL_SCHEME],
        "platform": "linux",
        "os_version": dev.os_version,
        "device_model": dev.device_model,
        "soc": dev.soc,
        "ram_mb": dev.ram_mb,
    })
}

#[test]
fn a_server_that_cannot_vouch_for_the_time_leaves_a_clear_clock_error() {
    // A server from before nonces (a relay stands in: it answers the nonce request with the
    // shared answer), and a fresh install whose clock is 400 days ahead: the decision cannot
    // be judged, and the app is told that the clock is wrong, by how much.
    let app = TestApp::start();
    app.publish(&mlp_v1());
    teach_operators(&app);
    let dev = phone(Platform::Linux, &[]);
    let recorded = recorded_shared_answer(&app, &dev);
    let proxy = ferry_tests::proxy::FaultProxy::start(app.server.addr);
    proxy.resolve_faults([ferry_tests::proxy::Fault::Replace(recorded)]);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client_at(proxy.url(), &app, cache.path(), time::Duration::days(400));
    let e = c.load("mlp", &dev).expect_err("cannot be judged");
    assert_eq!(e.code(), "device_clock_skewed", "{e}");
    match e {
        ClientError::ClockSkewed { offset_secs, .. } => {
            assert!((offset_secs - 400 * 86_400).abs() < 60, "{offset_secs}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_device_far_ahead_still_trusts_an_online_key_that_expires_later_by_the_servers_time() {
    // The online key expires in 90 days; a fresh install whose clock runs 400 days ahead
    // would leave it out of its ring (and refuse every decision) if it judged the key's
    // expiry by its own clock. Its decision of its own carries the server's time, and the
    // key is judged at that.
    use ferry_server::keys::{self, RotateRole};
    let mut app = TestApp::start();
    let keys_dir = app.dir.path().join("keys");
    keys::rotate(
        &keys_dir,
        RotateRole::Online,
        Some(time::Duration::days(90)),
    )
    .expect("rotate with expiry");
    app.restart().expect("restart");
    app.publish(&mlp_v1());
    teach_operators(&app);
    let cache = tempfile::tempdir().expect("tmp");
    let c = skewed_client(&app, cache.path(), time::Duration::days(400));
    let m = c
        .load("mlp", &phone(Platform::Linux, &["XnnpackBackend"]))
        .expect("loads");
    assert_eq!(m.release, "1.0.0");
    assert_eq!(c.keyring_version(), 2);
    drop(m);
    // Once the time is learned, the key is judged at the learned time: later loads hold.
    let again = skewed_client(&app, cache.path(), time::Duration::days(400));
    again
        .resolve("mlp", &phone(Platform::Linux, &["XnnpackBackend"]))
        .expect("the shared answer, judged at the learned time");
}

#[test]
fn skewed_devices_honour_a_revocation_and_refuse_a_replayed_answer() {
    use ferry_shared::trust::revocation::{REVOCATIONS_PAYLOAD_TYPE, RevocationList, Revoked};
    let (m, d) = (time::Duration::minutes(1), time::Duration::days(1));
    for offset in [-d * (55 * 365), -d * 2, m * 90, d * (14 * 365)] {
        let app = TestApp::start();
        app.publish(&mlp_v1());
        teach_operators(&app);
        app.publish(&mlp_v2());
        app.ship("2.0.0");
        let dev = phone(Platform::Linux, &[]);
        let proxy = ferry_tests::proxy::FaultProxy::start(app.server.addr);
        let cache = tempfile::tempdir().expect("tmp");
        let c = client_at(proxy.url(), &app, cache.path(), offset);
        let loaded = c.load("mlp", &dev).expect("2.0.0");
        assert_eq!(loaded.release, "2.0.0", "{offset}");
        drop(loaded);
        // What a relay records now, and replays after the revocation.
        let recorded = recorded_shared_answer(&app, &dev);
        let list = RevocationList {
            format: 1,
            model: "mlp".parse().expect("model"),
            version: 1,
            revoked: vec![Revoked {
                release: "2.0.0".parse().expect("version"),
                reason: "crashes on start".into(),
                at: OffsetDateTime::now_utc(),
            }],
        };
        let env = app.release_key().pair.sign(
            REVOCATIONS_PAYLOAD_TYPE,
            &serde_json::to_vec(&list).expect("json"),
        );
        let (status, body) = app.post_raw(
            "/v1/admin/models/mlp/revocations",
            &serde_json::to_vec(&env).expect("json"),
            Some(ferry_tests::app::ADMIN_TOKEN),
        );
        assert_eq!(status, 201, "{body}");

        // A later process of the same boot: the revocation reaches it, the cached 2.0.0 is
        // not loaded again.
        let c = client_at(proxy.url(), &app, cache.path(), offset);
        let m1 = c.load("mlp", &dev).expect("1.0.0");
        assert_eq!(m1.release, "1.0.0", "{offset}");
        drop(m1);
        // The answer recorded before the revocation, replayed: refused (an older sequence),
        // and the device stays on what it last verified.
        proxy.resolve_faults([ferry_tests::proxy::Fault::Replace(recorded)]);
        let replayed = c.resolve("mlp", &dev).expect_err("a replay");
        assert_eq!(replayed.code(), "replay", "{offset}: {replayed}");
        let m2 = c.load("mlp", &dev).expect("still served");
        assert_eq!(m2.release, "1.0.0", "{offset}");
    }
}
