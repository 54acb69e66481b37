//! The object store goes away mid-run (the S3 or Azure emulator frozen with SIGSTOP, so requests hang
//! as with a real outage) and comes back: resolve keeps answering from memory, writes fail
//! with `503 storage_unavailable` instead of hanging, readiness says so, and every telemetry
//! event accepted during the outage reaches the store afterwards.

use std::collections::BTreeSet;
use std::time::Duration;

use ferry_tests::app::{
    ADMIN_TOKEN, Options, TestApp, fixture_bytes_by_digest, mlp_v1, mlp_v2, profile,
};
use ferry_tests::azurite::Azurite;
use ferry_tests::kit::Event;
use ferry_tests::moto::Moto;
use futures_util::TryStreamExt as _;
use object_store::ObjectStoreExt as _;

fn event(install: &str) -> serde_json::Value {
    Event::load("mlp", "1.0.0", "xnnpack-fp32")
        .install(install)
        .set("device_model", "phone")
        .set("app_version", "1.0.0")
        .set("load_ms", 10.0)
        .json()
}

/// Every install id in the raw telemetry files of `storage`, as DuckDB reads them (the Parquet
/// files are copied out of the emulator as they are, partition folders included).
fn stored_installs(storage: &ferry_server::storage::config::StorageConfig) -> BTreeSet<String> {
    let tmp = tempfile::tempdir().expect("tmp");
    let store =
        ferry_server::storage::open(storage, tmp.path(), Duration::from_secs(5)).expect("store");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let copy = tmp.path().join("copy");
    let n = rt.block_on(async {
        let metas: Vec<_> = store
            .list(Some(&object_store::path::Path::from("telemetry/events")))
            .try_collect()
            .await
            .expect("list");
        for m in &metas {
            let bytes = store
                .get(&m.location)
                .await
                .expect("get")
                .bytes()
                .await
                .expect("bytes");
            let to = copy.join(m.location.as_ref());
            std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            std::fs::write(&to, &bytes).expect("write");
        }
        metas.len()
    });
    if n == 0 {
        return BTreeSet::new();
    }
    ferry_tests::duckdb::query(&format!(
        "SELECT DISTINCT install_id FROM {}",
        ferry_tests::duckdb::events_table(&copy)
    ))
    .into_iter()
    .map(|r| r["install_id"].as_str().unwrap_or("").to_string())
    .collect()
}

#[test]
fn a_store_outage_keeps_resolve_answering_fails_writes_and_loses_no_event() {
    let moto = Moto::start("ferry-outage");
    outage(moto.storage("ferry-outage"), &|| moto.pause(), &|| {
        moto.resume()
    });
}

#[test]
fn an_azure_outage_keeps_resolve_answering_fails_writes_and_loses_no_event() {
    let azurite = Azurite::start("ferry-outage");
    outage(
        azurite.storage("ferry-outage"),
        &|| azurite.pause(),
        &|| azurite.resume(),
    );
}

/// Runs the outage on `storage`, frozen by `pause` and thawed by `resume`.
fn outage(
    storage: ferry_server::storage::config::StorageConfig,
    pause: &dyn Fn(),
    resume: &dyn Fn(),
) {
    let s = storage.clone();
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(move |c| {
            c.storage = s;
            c.limits.store_timeout_secs = 1;
            c.telemetry.flush_secs = 1;
            c.telemetry.raw_roll_secs = 1;
        })),
    });
    app.publish(&mlp_v1());
    let dev = profile("android", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);

    pause();
    // Resolve never touches the store.
    for _ in 0..20 {
        let (status, body) = app.resolve(&dev, false);
        assert_eq!(status, 200, "{body}");
    }
    // Telemetry is accepted and buffered.
    let events: Vec<serde_json::Value> = (0..60).map(|i| event(&format!("outage-{i}"))).collect();
    let (status, body) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({"events": app.with_receipts(&events)}))
            .expect("json"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["accepted"], 60);
    // Writes fail with a clear code instead of hanging.
    let v2 = mlp_v2();
    let (m2, _) = ferry_tests::app::signed_release(&v2, &app.release_key());
    let status = app.put_blob(&fixture_bytes_by_digest(&m2.variants[0].sha256));
    assert_eq!(status, 503, "a blob upload during the outage");
    let (status, body) = app.post_raw(
        "/v1/admin/models/mlp/deny",
        &serde_json::to_vec(&serde_json::json!({"action": "deny", "release": "1.0.0",
            "variant": "vulkan-fp32", "class": "soc", "value": "SM0000"}))
        .expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("storage_unavailable")),
        "{body}"
    );
    // The answer says when to come back.
    let r = app
        .agent
        .get(app.at("/v1/admin/models/mlp/deny"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .expect("deny list");
    let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok());
    assert_eq!(
        (r.status().as_u16(), retry),
        (503, Some(ferry_server::api::error::STORE_RETRY_AFTER_SECS)),
        "a 503 storage_unavailable says when to retry"
    );
    // Still ready (it resolves from memory), and says what is wrong.
    let (status, body) = app.get_json("/readyz", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "degraded");
    assert_eq!(body["store"], "storage_unavailable");

    resume();
    // Every accepted event reaches the store once it answers again.
    let wanted: BTreeSet<String> = (0..60).map(|i| format!("outage-{i}")).collect();
    let mut seen = BTreeSet::new();
    for _ in 0..100 {
        seen = stored_installs(&storage);
        if wanted.is_subset(&seen) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        wanted.is_subset(&seen),
        "missing after the outage: {:?}",
        wanted.difference(&seen).collect::<Vec<_>>()
    );
    let (status, body) = app.get_json("/readyz", None);
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("ready")),
        "{body}"
    );
    // And writes work again.
    let (status, body) = app.post_raw(
        "/v1/admin/models/mlp/deny",
        &serde_json::to_vec(&serde_json::json!({"action": "deny", "release": "1.0.0",
            "variant": "vulkan-fp32", "class": "soc", "value": "SM0000"}))
        .expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(status, 200, "{body}");
}
