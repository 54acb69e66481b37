//! Release revocation end to end: a release-key-signed list that the server honours at once
//! (never offering a revoked release) and devices honour for good, also for their cached copy.

use std::path::Path;

use ferry_client::{Client, DeviceInfo, Source};
use ferry_server::keys::{self, RoleKey};
use ferry_shared::trust::dsse::Envelope;
use ferry_shared::trust::revocation::{REVOCATIONS_PAYLOAD_TYPE, RevocationList};
use ferry_tests::app::{ADMIN_TOKEN, READ_TOKEN, TestApp, mlp_v1, mlp_v2};
use ferry_tests::kit::{DeviceExt as _, device};
use ferry_tests::proxy::{Fault, FaultProxy};

fn client(app: &TestApp, server: &str, cache: &Path) -> Client {
    app.client_at(server, cache)
        .app_version(semver::Version::new(2, 0, 0))
        .download_limits(ferry_client::DownloadLimits {
            retries: 1,
            backoff: std::time::Duration::from_millis(5),
            backoff_cap: std::time::Duration::from_millis(10),
            ..Default::default()
        })
        .build()
        .expect("client")
}

/// The Linux board this file's tests load on.
fn board() -> DeviceInfo {
    device("revocation-device")
        .os("6.1")
        .model("test board")
        .soc("x86")
}

fn list(version: u64, releases: &[&str]) -> RevocationList {
    ferry_tests::releases::revocation_list("mlp", version, releases, "crashes on start")
}

fn signed(list: &RevocationList, key: &RoleKey) -> Envelope {
    key.pair.sign(
        REVOCATIONS_PAYLOAD_TYPE,
        &serde_json::to_vec(list).expect("json"),
    )
}

/// Sends `list`, signed with the server's release key, and checks it is stored.
fn revoke(app: &TestApp, list: RevocationList) {
    let (s, b) = post(
        app,
        "mlp",
        &signed(&list, &app.release_key()),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 201, "{b}");
}

fn post(
    app: &TestApp,
    model: &str,
    env: &Envelope,
    token: Option<&str>,
) -> (u16, serde_json::Value) {
    app.post_raw(
        &format!("/v1/admin/models/{model}/revocations"),
        &serde_json::to_vec(env).expect("json"),
        token,
    )
}

#[test]
fn a_revoked_release_is_never_offered_and_never_loaded_even_from_the_cache() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    app.ship("2.0.0");
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &proxy.url(), cache.path());
    let m = c.load("mlp", &board()).expect("load 2.0.0");
    assert_eq!(m.release, "2.0.0");
    drop(m);

    revoke(&app, list(1, &["2.0.0"]));
    // The server stops offering it at once, and says which list it used.
    let (s, answer) = app.resolve(
        &ferry_tests::app::profile("linux", &["XnnpackBackend"], "1.5.1", "2.0.0", 4096),
        false,
    );
    assert_eq!(s, 200, "{answer}");
    let (d, _) = app.verify_response(&answer);
    assert_eq!(d.release.to_string(), "1.0.0");
    assert_eq!(d.revocations_version, 1);
    assert!(answer["revocations"].is_object());

    // The device learns the list from that answer; its downloads of 1.0.0 fail, so it keeps
    // its last known good copy for now: 2.0.0, now revoked.
    proxy.blob_faults(std::iter::repeat_n(Fault::Unavailable, 40));
    let e = c.load("mlp", &board()).expect_err("downloads fail");
    assert_eq!(e.code(), "all_candidates_failed", "{e}");
    // Offline, the revoked copy is not served.
    proxy.resolve_faults([Fault::Unavailable, Fault::Unavailable, Fault::Unavailable]);
    let e = c.load("mlp", &board()).expect_err("offline");
    assert_eq!(e.code(), "release_revoked", "{e}");
    assert!(c.cached("mlp").is_none(), "the cached copy is not offered");
    // Back online, it loads the release that is not revoked.
    proxy.clear_faults();
    let m = c.load("mlp", &board()).expect("load 1.0.0");
    assert_eq!(m.release, "1.0.0");
    assert_eq!(m.source, Source::Downloaded);
}

#[test]
fn an_answer_without_the_list_its_decision_names_is_refused() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    revoke(&app, list(1, &["2.0.0"]));
    let (s, mut answer) = app.resolve(
        &serde_json::json!({"model": "mlp", "install_id": "revocation-device",
            "app_version": "2.0.0", "runtime_version": "1.5.1", "backends": ["XnnpackBackend"],
            "platform": "linux", "os_version": "6.1", "device_model": "test board", "soc": "x86",
            "ram_mb": 4096}),
        false,
    );
    assert_eq!(s, 200);
    answer
        .as_object_mut()
        .expect("object")
        .remove("revocations");
    let proxy = FaultProxy::start(app.server.addr);
    proxy.resolve_faults([Fault::Replace(serde_json::to_vec(&answer).expect("json"))]);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &proxy.url(), cache.path());
    let e = c.load("mlp", &board()).expect_err("stripped list");
    assert_eq!(e.code(), "decision_mismatch", "{e}");
    assert!(
        !proxy.log().iter().any(|l| l.line.contains("/v1/blobs/")),
        "nothing is downloaded"
    );
}

/// What is sent, with which token, to which model, and the expected status and code.
type Case<'a> = (&'a str, Vec<u8>, Option<&'a str>, &'a str, u16, &'a str);

#[test]
fn the_server_accepts_only_signed_successor_lists() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let release = app.release_key();
    let online = keys::load(&app.dir.path().join("keys/online.key")).expect("online key");
    let stranger = keys::generate(ferry_shared::trust::dsse::KeyRole::Release).expect("key");
    let first = signed(&list(1, &["1.0.0"]), &release);
    let cases: Vec<Case> = vec![
        (
            "no token",
            serde_json::to_vec(&first).expect("json"),
            None,
            "mlp",
            401,
            "unauthorized",
        ),
        (
            "read-only token",
            serde_json::to_vec(&first).expect("json"),
            Some(READ_TOKEN),
            "mlp",
            403,
            "forbidden",
        ),
        (
            "unknown model",
            serde_json::to_vec(&first).expect("json"),
            Some(ADMIN_TOKEN),
            "nosuch",
            404,
            "model_not_found",
        ),
        (
            "not an envelope",
            b"{".to_vec(),
            Some(ADMIN_TOKEN),
            "mlp",
            400,
            "envelope_malformed",
        ),
        (
            "signed by the online key",
            serde_json::to_vec(&signed(&list(1, &["1.0.0"]), &online)).expect("json"),
            Some(ADMIN_TOKEN),
            "mlp",
            403,
            "key_wrong_role",
        ),
        (
            "signed by an untrusted key",
            serde_json::to_vec(&signed(&list(1, &["1.0.0"]), &stranger)).expect("json"),
            Some(ADMIN_TOKEN),
            "mlp",
            403,
            "key_unknown",
        ),
        (
            "version 2 first",
            serde_json::to_vec(&signed(&list(2, &["1.0.0"]), &release)).expect("json"),
            Some(ADMIN_TOKEN),
            "mlp",
            422,
            "revocations_invalid",
        ),
        (
            "another model's list",
            serde_json::to_vec(&first).expect("json"),
            Some(ADMIN_TOKEN),
            "mlp2",
            404,
            "model_not_found",
        ),
    ];
    for (what, body, token, model, status, code) in cases {
        let (s, b) = app.post_raw(
            &format!("/v1/admin/models/{model}/revocations"),
            &body,
            token,
        );
        assert_eq!((s, b["code"].as_str()), (status, Some(code)), "{what}: {b}");
    }
    let (s, b) = app.get_json("/v1/admin/models/mlp/revocations", Some(READ_TOKEN));
    assert_eq!(
        (s, b["version"].as_u64()),
        (200, Some(0)),
        "nothing stored: {b}"
    );

    let (s, b) = post(&app, "mlp", &first, Some(ADMIN_TOKEN));
    assert_eq!(s, 201, "{b}");
    // The same request again (a retry after a lost answer) is answered 200, and writes nothing.
    let (s, b) = post(&app, "mlp", &first, Some(ADMIN_TOKEN));
    assert_eq!((s, b["version"].as_u64()), (200, Some(1)), "{b}");
    // Another version 1, or a version 2 that drops the first entry, is refused.
    for (what, env) in [
        ("another version 1", signed(&list(1, &["2.0.0"]), &release)),
        (
            "a revocation dropped",
            signed(&list(2, &["2.0.0"]), &release),
        ),
    ] {
        let (s, b) = post(&app, "mlp", &env, Some(ADMIN_TOKEN));
        assert_eq!(
            (s, b["code"].as_str()),
            (422, Some("revocations_invalid")),
            "{what}: {b}"
        );
    }
    let (s, b) = post(
        &app,
        "mlp",
        &signed(&list(2, &["1.0.0", "2.0.0"]), &release),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 201, "{b}");
    let (_, b) = app.get_json("/v1/admin/models/mlp/revocations", Some(READ_TOKEN));
    assert_eq!(b["version"], 2);
    assert_eq!(b["revoked"].as_array().map(Vec::len), Some(2));
    // Version 1 replayed once version 2 is in force is refused.
    let (s, b) = post(&app, "mlp", &first, Some(ADMIN_TOKEN));
    assert_eq!(
        (s, b["code"].as_str()),
        (422, Some("revocations_invalid")),
        "a replay of version 1: {b}"
    );
    // The release list says which are revoked.
    let (_, m) = app.get_json("/v1/admin/models/mlp", Some(READ_TOKEN));
    let states: Vec<&str> = m["releases"]
        .as_array()
        .expect("releases")
        .iter()
        .map(|r| r["state"].as_str().unwrap_or(""))
        .collect();
    assert!(states.iter().all(|s| s.starts_with("revoked")), "{m}");
    // Every release revoked: nothing is offered, and the answer says why.
    let (s, b) = app.resolve(
        &ferry_tests::app::profile("linux", &["XnnpackBackend"], "1.5.1", "2.0.0", 4096),
        false,
    );
    assert_eq!(
        (s, b["code"].as_str()),
        (404, Some("no_compatible_variant")),
        "{b}"
    );
    assert!(
        b["message"]
            .as_str()
            .unwrap_or("")
            .contains("every published release"),
        "{b}"
    );
}

#[test]
fn revocations_survive_a_restart() {
    let mut app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    app.ship("2.0.0");
    revoke(&app, list(1, &["2.0.0"]));
    app.restart().expect("restart");
    let (s, answer) = app.resolve(
        &ferry_tests::app::profile("linux", &["XnnpackBackend"], "1.5.1", "2.0.0", 4096),
        false,
    );
    assert_eq!(s, 200, "{answer}");
    let (d, _) = app.verify_response(&answer);
    assert_eq!(d.release.to_string(), "1.0.0");
    assert_eq!(d.revocations_version, 1);
}

#[test]
fn revocations_outlive_a_release_key_rotation_and_are_signed_again() {
    let mut app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    app.ship("2.0.0");
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &proxy.url(), cache.path());
    revoke(&app, list(1, &["2.0.0"]));
    assert_eq!(c.load("mlp", &board()).expect("load").release, "1.0.0");

    // The key that signed the list (and the releases) is rotated out. The list stays in force
    // on the server, but devices are not sent a list no current key signed.
    keys::rotate(
        &app.dir.path().join("keys"),
        keys::RotateRole::Release,
        None,
    )
    .expect("rotate");
    app.restart().expect("restart");
    let mut next = mlp_v1();
    next.version = "2.1.0".parse().expect("version");
    app.publish(&next);
    app.ship("2.1.0");
    let dev = ferry_tests::app::profile("linux", &["XnnpackBackend"], "1.5.1", "2.0.0", 4096);
    let (s, answer) = app.resolve(&dev, false);
    assert_eq!(s, 200, "{answer}");
    let (d, _) = app.verify_response(&answer);
    assert_eq!(d.release.to_string(), "2.1.0");
    assert_eq!(d.revocations_version, 0);
    assert!(answer.get("revocations").is_none());
    let (_, held) = app.get_json("/v1/admin/models/mlp/revocations", Some(READ_TOKEN));
    assert_eq!(held["signed_by_current_key"], false, "{held}");
    assert_eq!(held["version"], 1);

    // The new key signs version 2, carrying the entry over (2.0.0 is no longer loaded: its
    // signature was by the retired key). Before, the rotation blocked every later version.
    revoke(&app, list(2, &["2.0.0"]));
    let (_, answer) = app.resolve(&dev, false);
    let (d, _) = app.verify_response(&answer);
    assert_eq!(d.revocations_version, 2);
    let m = c.load("mlp", &board()).expect("load");
    assert_eq!(m.release, "2.1.0");
}

#[test]
fn a_revoked_release_cannot_be_staged_or_pinned() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    revoke(&app, list(1, &["2.0.0"]));
    for body in [
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "10"}),
        serde_json::json!({"action": "pin", "install_id": "x", "release": "2.0.0"}),
    ] {
        let (s, b) = app.post_raw(
            "/v1/admin/models/mlp/rollout",
            &serde_json::to_vec(&body).expect("json"),
            Some(ADMIN_TOKEN),
        );
        assert_eq!(b["code"], "rollout_invalid", "{s} {b}");
        assert!(
            b["message"].as_str().unwrap_or("").contains("revoked"),
            "{b}"
        );
    }
}

#[test]
fn only_published_releases_can_be_revoked() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let (s, b) = post(
        &app,
        "mlp",
        &signed(&list(1, &["1.0.1"]), &app.release_key()),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        (s, b["code"].as_str()),
        (404, Some("release_not_found")),
        "{b}"
    );
    let (_, held) = app.get_json("/v1/admin/models/mlp/revocations", Some(READ_TOKEN));
    assert_eq!(held["version"], 0);
}

/// Issue 46, point 1: every view says what devices get when a release is revoked.
#[test]
fn revoking_the_staged_release_ends_its_stage_and_every_view_says_what_devices_get() {
    let app = TestApp::start();
    let mut v09 = mlp_v1();
    v09.version = "0.9.0".parse().expect("version");
    app.publish(&v09);
    app.publish(&mlp_v1());
    app.ship("1.0.0");
    app.publish(&mlp_v2());
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "start", "release": "2.0.0", "percent": "10"}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    let served = |n: usize| -> std::collections::BTreeMap<String, usize> {
        let mut out = std::collections::BTreeMap::new();
        for i in 0..n {
            let mut d = serde_json::json!({
                "model": "mlp", "install_id": format!("view-{i}"), "app_version": "2.0.0",
                "runtime_version": "1.5.1", "backends": ["XnnpackBackend"],
                "platform": "linux", "os_version": "6.1", "ram_mb": 4096});
            d["device_model"] = "board".into();
            let (s, body) = app.resolve(&d, false);
            assert_eq!(s, 200, "{body}");
            *out.entry(app.verify_response(&body).0.release.to_string())
                .or_default() += 1;
        }
        out
    };
    assert!(served(300).contains_key("2.0.0"));
    // Revoke the staged release: its stage ends at once, with a rollback naming it.
    revoke(&app, list(1, &["2.0.0"]));
    let (_, r) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    let current = &r["current"];
    assert_eq!(
        (current["action"].as_str(), current["state"].as_str()),
        (Some("rollback"), Some("halted")),
        "{current}"
    );
    assert!(
        current["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("2.0.0 was revoked: crashes on start"),
        "{current}"
    );
    assert_eq!(served(300).keys().collect::<Vec<_>>(), ["1.0.0"]);
    // It moves no further forward.
    for change in [
        r#"{"action": "resume"}"#,
        r#"{"action": "set", "percent": "50"}"#,
    ] {
        let (s, b) = app.post_raw(
            "/v1/admin/models/mlp/rollout",
            change.as_bytes(),
            Some(ADMIN_TOKEN),
        );
        assert_eq!(s, 400, "{change}: {b}");
        assert!(
            b["message"]
                .as_str()
                .unwrap_or_default()
                .contains("is revoked"),
            "{b}"
        );
    }
    let (_, models) = app.get_json("/v1/admin/models", Some(READ_TOKEN));
    ferry_tests::schemas::check("models.schema.json", &models);
    assert_eq!(models["models"][0]["live"], "1.0.0", "{models}");
    // Revoke the baseline too: devices get 0.9.0, and the views say so.
    revoke(&app, list(2, &["2.0.0", "1.0.0"]));
    assert_eq!(served(100).keys().collect::<Vec<_>>(), ["0.9.0"]);
    let (_, models) = app.get_json("/v1/admin/models", Some(READ_TOKEN));
    let m = &models["models"][0];
    assert_eq!(
        (m["live"].as_str(), m["baseline"].as_str()),
        (Some("0.9.0"), Some("1.0.0"))
    );
    let (_, model) = app.get_json("/v1/admin/models/mlp", Some(READ_TOKEN));
    let states: std::collections::BTreeMap<String, String> = model["releases"]
        .as_array()
        .expect("releases")
        .iter()
        .map(|r| {
            (
                r["version"].as_str().unwrap_or_default().to_string(),
                r["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        states["0.9.0"], "live (the baseline is revoked)",
        "{states:?}"
    );
    assert!(states["1.0.0"].starts_with("revoked"), "{states:?}");
    assert!(states["2.0.0"].starts_with("revoked"), "{states:?}");
}

#[test]
fn revoking_an_arm_stops_the_experiment_and_a_revoked_release_is_no_arm() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let start = |control: &str, treatment: &str| {
        app.post_raw(
            "/v1/admin/models/mlp/experiment",
            &serde_json::to_vec(&serde_json::json!({
                "control": control, "treatment": treatment, "reason": "v2 weights"
            }))
            .expect("json"),
            Some(ADMIN_TOKEN),
        )
    };
    let (s, b) = start("1.0.0", "2.0.0");
    assert_eq!(s, 201, "{b}");
    revoke(&app, list(1, &["2.0.0"]));
    let (s, b) = app.get_json("/v1/admin/models/mlp/experiment/history", Some(READ_TOKEN));
    assert_eq!(s, 200, "{b}");
    let last = b["revisions"]
        .as_array()
        .and_then(|r| r.last())
        .cloned()
        .expect("a revision");
    assert_eq!(
        (&last["action"], &last["state"]),
        (&"revoked".into(), &"stopped".into())
    );
    assert!(
        last["reason"].as_str().unwrap_or("").contains("2.0.0"),
        "{last}"
    );
    let (s, b) = start("1.0.0", "2.0.0");
    assert_eq!(
        (s, b["code"].as_str()),
        (400, Some("experiment_invalid")),
        "{b}"
    );
    assert!(
        b["message"].as_str().unwrap_or("").contains("revoked"),
        "{b}"
    );
}
