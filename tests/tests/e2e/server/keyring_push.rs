//! A new release key trusted without a restart: the keyring version `ferry keys rotate` writes
//! on the offline machine is sent to one replica (`POST /v1/admin/keyring`, what `ferry keys
//! push` does), which checks it like devices do and stores it with an audit record; the other
//! replicas on the same S3 bucket (moto) adopt it within their refresh interval, a replica that
//! starts later adopts it before loading releases, a release signed by the new key publishes
//! through any replica, and a device pinned to the first trust.json walks to it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo};
use ferry_server::keys::{self, RotateRole};
use ferry_shared::manifest::Platform;
use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1};
use ferry_tests::moto::Moto;

fn fast(c: &mut ferry_server::app::config::Config) {
    c.ramp_check_secs = 1;
}

fn post(url: &str, path: &str, body: &[u8]) -> (u16, serde_json::Value) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut resp = agent
        .post(format!("{url}{path}"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .header("content-type", "application/json")
        .send(body)
        .expect("post");
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

fn get(url: &str, path: &str) -> serde_json::Value {
    let mut resp = ureq::get(format!("{url}{path}"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .expect("get");
    serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json")
}

fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).expect("copy");
        }
    }
}

#[test]
fn a_new_release_key_is_trusted_by_every_replica_without_a_restart() {
    let moto = Moto::start("ferry-keyring");
    let storage = moto.storage("ferry-keyring");
    let s = storage.clone();
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(move |c| {
            fast(c);
            c.storage = s;
        })),
    });
    app.publish(&mlp_v1());
    let replicas: Vec<_> = (0..2)
        .map(|_| app.replica_with(Some(storage.clone()), Box::new(fast)))
        .collect();
    let urls: Vec<String> = std::iter::once(app.url())
        .chain(replicas.iter().map(|r| r.url()))
        .collect();

    // The offline machine: a copy of the key folder, where the release key is rotated.
    let offline = tempfile::tempdir().expect("tmp");
    copy_dir(&app.dir.path().join("keys"), offline.path());
    let old_release = keys::load(&offline.path().join("release.key")).expect("old key");
    keys::rotate(offline.path(), RotateRole::Release, None).expect("rotate release");
    let new_release = keys::load(&offline.path().join("release.key")).expect("new key");
    let v2 = std::fs::read(offline.path().join("keyring/00000002.json")).expect("keyring 2");

    // Before the push: a release signed by the new key is refused everywhere.
    let mut next = mlp_v1();
    next.version = "1.1.0".parse().expect("version");
    let (_, by_new) = ferry_tests::app::signed_release(&next, &new_release);
    let body = serde_json::to_vec(&by_new).expect("json");
    for url in &urls {
        let (status, b) = post(url, "/v1/admin/models/mlp/releases", &body);
        assert_eq!(
            (status, b["code"].as_str()),
            (403, Some("key_unknown")),
            "{b}"
        );
    }

    wrong_pushes_refused(&app, &urls, &v2);
    // The push, to one replica: in force there at once, twice is the same.
    let (status, b) = post(&urls[1], "/v1/admin/keyring", &v2);
    assert_eq!((status, b["version"].as_u64()), (201, Some(2)), "{b}");
    let (status, b) = post(&urls[1], "/v1/admin/keyring", &v2);
    assert_eq!((status, b["new"].as_bool()), (200, Some(false)), "{b}");
    assert!(
        b.get("history").is_none(),
        "the audit needs the read scope: {b}"
    );
    // The audit record: who, which key came and which went.
    let b = get(&urls[1], "/v1/admin/keyring");
    let history = &b["history"][0];
    assert_eq!(history["version"], 2, "{b}");
    assert_eq!(history["actor"], "env:FERRY_ADMIN_TOKEN", "{b}");
    let has = |list: &serde_json::Value, id: &str| {
        list.as_array()
            .expect("list")
            .iter()
            .any(|k| k.as_str().is_some_and(|k| k.ends_with(id)))
    };
    assert!(
        has(&history["added"], &new_release.pair.id().to_string()),
        "{b}"
    );
    assert!(
        has(&history["removed"], &old_release.pair.id().to_string()),
        "{b}"
    );

    // A release signed by the new key publishes through another replica at once (it reads the
    // store before refusing an unknown key), and every replica names version 2 soon after.
    for v in &next.variants {
        let bytes =
            std::fs::read(ferry_tests::fixtures_dir().join("pte").join(&v.file)).expect("fixture");
        assert!(matches!(app.put_blob(&bytes), 200 | 201));
    }
    let (status, b) = post(&urls[2], "/v1/admin/models/mlp/releases", &body);
    assert_eq!(status, 201, "{b}");
    for url in &urls {
        until("every replica trusts keyring version 2", || {
            get(url, "/v1/keyring")["version"] == 2
        });
        assert_eq!(get(url, "/v1/admin/keyring")["version"], 2);
    }
    // Each keeps the version it adopted in its own key folder, so a restart walks no gap.
    let local_v2 = app.dir.path().join("keys/keyring/00000002.json");
    assert_eq!(std::fs::read(&local_v2).ok(), Some(v2.clone()));
    // A release signed by the retired key is refused now.
    let mut older = mlp_v1();
    older.version = "1.2.0".parse().expect("version");
    let (_, by_old) = ferry_tests::app::signed_release(&older, &old_release);
    let (status, b) = post(
        &urls[0],
        "/v1/admin/models/mlp/releases",
        &serde_json::to_vec(&by_old).expect("json"),
    );
    assert_eq!(
        (status, b["code"].as_str()),
        (403, Some("key_unknown")),
        "{b}"
    );

    // A replica provisioned before the push (only version 1 in its own folder) starts now:
    // it adopts version 2 from the store before it loads the releases, and keeps a copy.
    std::fs::remove_file(&local_v2).expect("provision as before the push");
    let late = app.replica_with(Some(storage.clone()), Box::new(fast));
    std::fs::write(&local_v2, &v2).expect("restore");
    assert_eq!(get(&late.url(), "/v1/keyring")["version"], 2);
    assert!(
        late.state
            .fleet()
            .ring
            .keys_dir
            .join("keyring/00000002.json")
            .exists()
    );
    let model = get(&late.url(), "/v1/admin/models/mlp");
    let versions: Vec<&str> = model["releases"]
        .as_array()
        .expect("releases")
        .iter()
        .filter_map(|r| r["version"].as_str())
        .collect();
    assert!(versions.contains(&"1.1.0"), "{model}");

    // Shipped, a device pinned to the first trust.json walks to version 2 and loads 1.1.0.
    app.ship("1.1.0");
    // The late replica learns of the shipped plan on its next tick (ramp_check_secs).
    until("the late replica serves 1.1.0 as the baseline", || {
        get(&late.url(), "/v1/admin/models")["models"][0]["baseline"] == "1.1.0"
    });
    let cache = tempfile::tempdir().expect("tmp");
    let c = ClientBuilder::new(late.url(), app.trust())
        .cache_dir(cache.path())
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .build()
        .expect("client");
    let device = DeviceInfo {
        install_id: "keyring-device".into(),
        platform: Platform::Linux,
        os_version: "6.1".into(),
        device_model: "board".into(),
        soc: "x86".into(),
        ram_mb: 4096,
        claimed_backends: Vec::new(),
    };
    let m = c
        .load("mlp", &device)
        .expect("loads the release the new key signed");
    assert_eq!(m.release, "1.1.0");
    assert_eq!(c.keyring_version(), 2);

    a_stray_file_blocks_only_its_version(&storage, &urls, offline.path());
}

/// A file that is not a keyring where version 3 goes blocks only that version, with a message
/// that says what to do; once it is removed the push works.
fn a_stray_file_blocks_only_its_version(
    storage: &ferry_server::storage::config::StorageConfig,
    urls: &[String],
    offline: &Path,
) {
    keys::rotate(offline, RotateRole::Release, None).expect("rotate again");
    let v3 = std::fs::read(offline.join("keyring/00000003.json")).expect("v3");
    store_put(storage, 3, Some(b"junk"));
    let (status, b) = post(&urls[0], "/v1/admin/keyring", &v3);
    assert_eq!(
        (status, b["code"].as_str()),
        (422, Some("keyring_invalid")),
        "{b}"
    );
    assert!(
        b["message"]
            .as_str()
            .unwrap_or_default()
            .contains("remove it and push again"),
        "{b}"
    );
    assert_eq!(get(&urls[0], "/v1/keyring")["version"], 2);
    store_put(storage, 3, None);
    let (status, b) = post(&urls[0], "/v1/admin/keyring", &v3);
    assert_eq!((status, b["version"].as_u64()), (201, Some(3)), "{b}");
}

/// Hostile or wrong keyrings are refused with their reason, version 1 again is nothing new,
/// and a read-only token may not push.
fn wrong_pushes_refused(app: &TestApp, urls: &[String], v2: &[u8]) {
    // Hostile or wrong keyrings are refused with their reason, and nothing is stored.
    let forged = {
        let mut env: ferry_shared::trust::dsse::Envelope = serde_json::from_slice(v2).expect("env");
        env.signatures[0].sig = env.signatures[0].sig.chars().rev().collect();
        serde_json::to_vec(&env).expect("json")
    };
    for (bad, code) in [
        (&b"not json"[..], "keyring_invalid"),
        (&forged[..], "keyring_invalid"),
    ] {
        let (status, b) = post(&urls[1], "/v1/admin/keyring", bad);
        assert_eq!(b["code"], code, "{status} {b}");
        assert!(status >= 400, "{b}");
    }
    // Version 1 again, byte for byte, is what the server holds: fine, nothing new.
    let held = std::fs::read(app.dir.path().join("keys/keyring/00000001.json")).expect("v1");
    let (status, b) = post(&urls[1], "/v1/admin/keyring", &held);
    assert_eq!((status, b["new"].as_bool()), (200, Some(false)), "{b}");
    // A read-only token may not change the keyring.
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let resp = agent
        .post(format!("{}/v1/admin/keyring", urls[0]))
        .header("authorization", format!("Bearer {READ_TOKEN}"))
        .header("content-type", "application/json")
        .send(v2)
        .expect("post");
    assert_eq!(resp.status().as_u16(), 403);
}

/// Puts `bytes` where keyring version `version` goes in the store, or deletes it (`None`).
fn store_put(
    storage: &ferry_server::storage::config::StorageConfig,
    version: u64,
    bytes: Option<&'static [u8]>,
) {
    let store =
        ferry_server::storage::open(storage, Path::new("/nonexistent"), Duration::from_secs(10))
            .expect("store");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        use object_store::ObjectStoreExt as _;
        let key = ferry_server::keyring::stored_key(version);
        match bytes {
            Some(b) => {
                store
                    .put(&key, object_store::PutPayload::from_static(b))
                    .await
                    .expect("put");
            }
            None => store.delete(&key).await.expect("delete"),
        }
    });
}
