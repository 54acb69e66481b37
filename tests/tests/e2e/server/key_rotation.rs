//! Key rotation end to end: a real server reading `<data>/keys/`, keyrings written by the same
//! code as `ferry keys rotate`, and the real client pinned to the first `trust.json` (the root
//! key) across every rotation. Hostile answers go through the loopback fault proxy.

use std::path::Path;
use std::sync::Arc;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{Client, ClientBuilder, DeviceInfo, Source};
use ferry_server::keys::{self, RotateRole};
use ferry_shared::trust::TrustFile;
use ferry_shared::wire::resolve::{DECISION_PAYLOAD_TYPE, Decision, ResolveResponse};
use ferry_tests::app::{TestApp, mlp_v1, payload};
use ferry_tests::kit::{DeviceExt as _, device};
use ferry_tests::proxy::{Fault, FaultProxy};

fn client(trust: &TrustFile, server: &str, cache: &Path) -> Client {
    ClientBuilder::new(server, trust.clone())
        .cache_dir(cache)
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .build()
        .expect("client")
}

/// The Linux board this file's tests load on.
fn board() -> DeviceInfo {
    device("rotating-device")
        .os("6.1")
        .model("test board")
        .soc("x86")
}

/// The server's answer for [`device`], its decision edited by `edit` and signed by `key`: what
/// a thief of that online key can send.
fn signed_by(app: &TestApp, key: &keys::RoleKey, edit: impl FnOnce(&mut Decision)) -> Vec<u8> {
    let (status, body) = app.resolve(
        &serde_json::json!({"model": "mlp", "install_id": "rotating-device",
            "app_version": "1.0.0", "runtime_version": "1.5.1", "backends": ["XnnpackBackend"],
            "platform": "linux", "os_version": "6.1", "device_model": "test board", "soc": "x86",
            "ram_mb": 4096, "seal_schemes": [ferry_shared::manifest::SEAL_SCHEME]}),
        false,
    );
    assert_eq!(status, 200, "{body}");
    let mut resp: ResolveResponse = serde_json::from_value(body).expect("response");
    let mut decision: Decision = serde_json::from_slice(&payload(&resp.decision)).expect("json");
    edit(&mut decision);
    resp.decision = key.pair.sign(
        DECISION_PAYLOAD_TYPE,
        &serde_json::to_vec(&decision).expect("json"),
    );
    serde_json::to_vec(&resp).expect("json")
}

/// Loads `mlp` and checks that the device kept its verified copy, refusing the answer with
/// `code`.
fn expect_last_good(c: &Client, code: &str) {
    let m = c.load("mlp", &board()).expect("the last known good copy");
    assert_eq!(last_good_code(&m.source), Some(code), "{:?}", m.source);
}

fn last_good_code(source: &Source) -> Option<&str> {
    match source {
        Source::LastKnownGood { code, .. } => Some(code),
        _ => None,
    }
}

#[test]
fn a_client_pinned_to_the_first_root_follows_two_online_rotations_and_a_release_rotation() {
    let mut app = TestApp::start();
    app.publish(&mlp_v1());
    let keys_dir = app.dir.path().join("keys");
    let pinned = app.trust();
    assert!(
        pinned
            .keys
            .iter()
            .all(|k| k.role == ferry_shared::trust::dsse::KeyRole::Root),
        "apps pin the root key only"
    );
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&pinned, &proxy.url(), cache.path());
    drop(c.load("mlp", &board()).expect("first load"));
    assert_eq!(c.keyring_version(), 1);

    for version in [2, 3] {
        let retired = keys::load(&keys_dir.join("online.key")).expect("online key");
        keys::rotate(&keys_dir, RotateRole::Online, None).expect("rotate online");
        app.restart().expect("restart");
        // The same device (same cache), its app restarted with the same pinned trust.json.
        let c = client(&pinned, &proxy.url(), cache.path());
        let m = c.load("mlp", &board()).expect("load after rotation");
        assert_eq!(m.source, Source::Cached, "online key rotation {version}");
        assert_eq!(c.keyring_version(), version);
        drop(m);
        // What the retired key signs is refused; the device keeps its verified model.
        proxy.resolve_faults([Fault::Replace(signed_by(&app, &retired, |_| {}))]);
        expect_last_good(&c, "key_unknown");
    }

    // Release key: a release signed by the retired key is refused by the server; one signed by
    // the new key is served and verified by the device.
    let retired_release = app.release_key();
    keys::rotate(&keys_dir, RotateRole::Release, None).expect("rotate release");
    app.restart().expect("restart");
    let mut next = mlp_v1();
    next.version = "1.1.0".parse().expect("version");
    let (_, stale) = ferry_tests::app::signed_release(&next, &retired_release);
    let (status, body) = app.post_release("mlp", &stale);
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "key_unknown", "{body}");
    app.publish(&next);
    app.ship("1.1.0");
    let c = client(&pinned, &proxy.url(), cache.path());
    let m = c
        .load("mlp", &board())
        .expect("load after release rotation");
    assert_eq!(m.release, "1.1.0");
    assert_eq!(c.keyring_version(), 4);
}

#[test]
fn a_poisoned_sequence_is_recovered_by_rotating_the_online_key() {
    let mut app = TestApp::start();
    app.publish(&mlp_v1());
    let keys_dir = app.dir.path().join("keys");
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app.trust(), &proxy.url(), cache.path());
    drop(c.load("mlp", &board()).expect("first load"));
    // The thief of the online key sends a decision with the highest sequence: the device takes
    // it (it is validly signed), and every honest answer after it looks like a replay.
    let stolen = keys::load(&keys_dir.join("online.key")).expect("online key");
    proxy.resolve_faults([Fault::Replace(signed_by(&app, &stolen, |d| {
        d.sequence = u64::MAX;
    }))]);
    drop(c.load("mlp", &board()).expect("poisoned answer accepted"));
    expect_last_good(&c, "replay");
    // A server-side change only: rotate the online key and restart.
    keys::rotate(&keys_dir, RotateRole::Online, None).expect("rotate");
    app.restart().expect("restart");
    let m = c.load("mlp", &board()).expect("honest answers again");
    assert_eq!(m.source, Source::Cached, "{:?}", m.source);
    assert_eq!(c.keyring_version(), 2);
    drop(m);
    // The stolen key cannot poison the new version: it is not in keyring 2.
    proxy.resolve_faults([Fault::Replace(signed_by(&app, &stolen, |d| {
        d.sequence = u64::MAX;
        d.keyring_version = 2;
    }))]);
    expect_last_good(&c, "key_unknown");
    assert_eq!(
        c.load("mlp", &board()).expect("honest").source,
        Source::Cached
    );
}

#[test]
fn a_skipped_or_older_keyring_version_is_refused() {
    let mut app = TestApp::start();
    app.publish(&mlp_v1());
    let keys_dir = app.dir.path().join("keys");
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app.trust(), &proxy.url(), cache.path());
    drop(c.load("mlp", &board()).expect("first load"));
    keys::rotate(&keys_dir, RotateRole::Online, None).expect("rotate");
    keys::rotate(&keys_dir, RotateRole::Online, None).expect("rotate again");
    app.restart().expect("restart");
    let (status, chain) = app.get_json("/v1/keyring", None);
    assert_eq!(status, 200);
    assert_eq!(chain["version"], 3);
    let all = chain["keyrings"].as_array().expect("keyrings").clone();
    assert_eq!(all.len(), 3);

    // A server that leaves out version 2: the device refuses version 3 and stays on 1.
    let gap = serde_json::json!({"version": 3, "keyrings": [all[0], all[2]]});
    proxy.keyring_faults([Fault::Replace(serde_json::to_vec(&gap).expect("json"))]);
    expect_last_good(&c, "keyring_skipped");
    assert_eq!(c.keyring_version(), 1);
    // Version 3 alone (skipping 2) is refused the same way.
    let only3 = serde_json::json!({"version": 3, "keyrings": [all[2]]});
    proxy.keyring_faults([Fault::Replace(serde_json::to_vec(&only3).expect("json"))]);
    expect_last_good(&c, "keyring_skipped");
    // The whole chain is accepted.
    assert_eq!(
        c.load("mlp", &board()).expect("load").source,
        Source::Cached
    );
    assert_eq!(c.keyring_version(), 3);
    // After that, a server serving only the older versions cannot move the device back: the
    // answer signed by the current key still verifies against version 3.
    let old = serde_json::json!({"version": 1, "keyrings": [all[0]]});
    proxy.keyring_faults([Fault::Replace(serde_json::to_vec(&old).expect("json"))]);
    assert_eq!(
        c.load("mlp", &board()).expect("load").source,
        Source::Cached
    );
    assert_eq!(c.keyring_version(), 3);

    // A server whose keyring folder has a gap refuses to start, saying why.
    std::fs::remove_file(keys_dir.join("keyring/00000002.json")).expect("remove");
    let err = app
        .try_replica_at("127.0.0.1:0")
        .err()
        .expect("a gap in the keyrings stops the server");
    assert!(
        format!("{err:#}").contains("version 2 is missing"),
        "{err:#}"
    );
}

#[test]
fn rotating_root_needs_both_roots_and_the_client_follows() {
    let mut app = TestApp::start();
    app.publish(&mlp_v1());
    let keys_dir = app.dir.path().join("keys");
    let pinned = app.trust();
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&pinned, &app.url(), cache.path());
    drop(c.load("mlp", &board()).expect("first load"));
    keys::rotate(&keys_dir, RotateRole::Root, None).expect("rotate root");
    // The new root alone signs the next keyring; the client, pinned to the old root, follows.
    keys::rotate(&keys_dir, RotateRole::Online, None).expect("rotate online");
    app.restart().expect("restart");
    let c = client(&pinned, &app.url(), cache.path());
    assert_eq!(
        c.load("mlp", &board()).expect("load").source,
        Source::Cached
    );
    assert_eq!(c.keyring_version(), 3);
    let v2: ferry_shared::trust::dsse::Envelope =
        serde_json::from_slice(&std::fs::read(keys_dir.join("keyring/00000002.json")).expect("v2"))
            .expect("envelope");
    assert_eq!(
        v2.signatures.len(),
        2,
        "old and new root both sign the root change"
    );
    // A new app build pinning the new trust.json (written by the root rotation) starts where
    // the new root took over.
    let new_trust = app.trust();
    assert_ne!(new_trust, pinned);
    assert_eq!(new_trust.first_keyring, Some(2));
    let fresh = tempfile::tempdir().expect("tmp");
    let c = client(&new_trust, &app.url(), fresh.path());
    assert_eq!(
        c.load("mlp", &board()).expect("load").source,
        Source::Downloaded
    );
    assert_eq!(c.keyring_version(), 3);
    assert!(keys_dir.join("retired/trust-1.json").exists());
}

#[test]
fn an_expired_online_key_fails_readiness_and_leaves_the_ring() {
    let mut app = TestApp::start();
    let keys_dir = app.dir.path().join("keys");
    keys::rotate(
        &keys_dir,
        RotateRole::Online,
        Some(time::Duration::seconds(2)),
    )
    .expect("rotate with expiry");
    app.restart().expect("restart");
    let (status, ready) = app.get_json("/readyz", None);
    assert_eq!(status, 200, "{ready}");
    assert!(ready["online_key_expires_at"].is_string(), "{ready}");
    let state = keys::load_trust(&keys_dir).expect("trust").1;
    let online = keys::load(&keys_dir.join("online.key")).expect("key");
    let now = time::OffsetDateTime::now_utc();
    assert!(state.ring_at(now).get(&online.pair.id()).is_some());
    assert!(
        state
            .ring_at(now + time::Duration::seconds(3))
            .get(&online.pair.id())
            .is_none(),
        "clients leave an expired online key out"
    );
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let (status, body) = app.get_json("/readyz", None);
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "online_key_expired");
    let err = app
        .try_replica_at("127.0.0.1:0")
        .err()
        .expect("the server refuses to start with an expired online key");
    assert!(format!("{err:#}").contains("expired"), "{err:#}");
}

/// Turns the server's keys into the older fixed form (release and online keys listed in
/// `trust.json`, no keyrings) and restarts it.
fn fixed_trust(app: &mut TestApp) -> TrustFile {
    let keys_dir = app.dir.path().join("keys");
    let mut fixed = TrustFile::default();
    for f in ["release.key", "online.key"] {
        let k = keys::load(&keys_dir.join(f)).expect("key");
        fixed.push(k.role, &k.pair.public());
    }
    std::fs::write(
        keys_dir.join("trust.json"),
        serde_json::to_vec(&fixed).expect("json"),
    )
    .expect("write");
    std::fs::remove_dir_all(keys_dir.join("keyring")).expect("rm keyring");
    app.restart().expect("restart");
    fixed
}

#[test]
fn a_fixed_trust_file_keeps_working_and_old_millisecond_floors_do_not_block() {
    let mut app = TestApp::start();
    app.publish(&mlp_v1());
    let fixed = fixed_trust(&mut app);
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&fixed, &proxy.url(), cache.path());
    drop(c.load("mlp", &board()).expect("first load"));
    assert_eq!(c.keyring_version(), 0);
    drop(c);
    // A device whose cache holds the floor an earlier server set (milliseconds since 1970).
    let index_path = cache.path().join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).expect("index")).expect("json");
    index["sequences"]["mlp"] = serde_json::json!(1_764_000_000_000u64);
    std::fs::write(&index_path, serde_json::to_vec(&index).expect("json")).expect("write");
    let c = client(&fixed, &proxy.url(), cache.path());
    let m = c.load("mlp", &board()).expect("load");
    assert_eq!(m.source, Source::Cached, "{:?}", m.source);
    drop(m);
    // Under a fixed trust file a decision naming a keyring version is refused (a stolen key
    // must not set a floor that survives a move to root keys).
    let online = keys::load(&app.dir.path().join("keys/online.key")).expect("key");
    proxy.resolve_faults([Fault::Replace(signed_by(&app, &online, |d| {
        d.keyring_version = 7;
        d.sequence = u64::MAX;
    }))]);
    expect_last_good(&c, "decision_mismatch");
    assert_eq!(
        c.load("mlp", &board()).expect("honest").source,
        Source::Cached
    );
}

#[test]
fn a_damaged_stored_keyring_keeps_the_versions_before_it() {
    let mut app = TestApp::start();
    app.publish(&mlp_v1());
    let keys_dir = app.dir.path().join("keys");
    for _ in 0..2 {
        keys::rotate(&keys_dir, RotateRole::Online, None).expect("rotate");
    }
    app.restart().expect("restart");
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app.trust(), &app.url(), cache.path());
    drop(c.load("mlp", &board()).expect("load"));
    assert_eq!(c.keyring_version(), 3);
    drop(c);
    let index_path = cache.path().join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).expect("index")).expect("json");
    assert_eq!(index["keyrings"].as_array().map(Vec::len), Some(3));
    index["keyrings"][2]["signatures"][0]["sig"] = serde_json::json!("AAAA");
    std::fs::write(&index_path, serde_json::to_vec(&index).expect("json")).expect("write");
    let c = client(&app.trust(), &app.url(), cache.path());
    assert_eq!(c.keyring_version(), 2, "versions 1 and 2 still verify");
    drop(c.load("mlp", &board()).expect("load"));
    assert_eq!(c.keyring_version(), 3, "the next resolve fetches the rest");
}
