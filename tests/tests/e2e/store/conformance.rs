//! One storage conformance suite, run on every backend ferry supports: the local folder store,
//! S3 (the moto emulator) and Azure Blob Storage (the Azurite emulator). It checks what the
//! server relies on: whole and ranged reads, listing by prefix (Hive-style folders included),
//! create-if-absent under races (exactly one writer wins), the revision log under concurrent
//! writers (no update lost, no number used twice), and that replicas' telemetry rollups
//! written to the store merge into the same counts as one server's.

use std::sync::Arc;
use std::time::Duration;

use ferry_server::fleet::counts::rollup::Rollup;
use ferry_server::storage::config::StorageConfig;
use ferry_server::storage::{Store, revisions};
use ferry_shared::wire::telemetry::TelemetryEvent;
use ferry_tests::kit::Event;
use futures_util::TryStreamExt as _;
use object_store::path::Path;
use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload};

fn open(storage: &StorageConfig, data: &std::path::Path) -> Store {
    ferry_server::storage::open(storage, data, Duration::from_secs(10)).expect("open store")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn reads_and_lists(store: &Store) {
    let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    store
        .put(&Path::from("blobs/one"), PutPayload::from(data.clone()))
        .await
        .expect("put");
    let got = store
        .get(&Path::from("blobs/one"))
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(got.as_ref(), &data[..]);
    let part = store
        .get_range(&Path::from("blobs/one"), 99_000..100_000)
        .await
        .expect("ranged get");
    assert_eq!(part.as_ref(), &data[99_000..]);
    let head = store.head(&Path::from("blobs/one")).await.expect("head");
    assert_eq!(head.size, 100_000);
    match store.get(&Path::from("blobs/none")).await {
        Err(object_store::Error::NotFound { .. }) => {}
        other => panic!("a missing object is NotFound, got {:?}", other.map(|_| ())),
    }
    for key in [
        "telemetry/events/date=2026-12-01/a-1.parquet",
        "telemetry/events/date=2026-12-02/a-2.parquet",
        "telemetry/events/date=2026-12-02/b-1.parquet",
        "telemetry/eventsx/other",
    ] {
        store
            .put(&Path::from(key), PutPayload::from_static(b"x"))
            .await
            .expect("put");
    }
    let mut listed: Vec<String> = store
        .list(Some(&Path::from("telemetry/events")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    listed.sort();
    assert_eq!(
        listed,
        [
            "telemetry/events/date=2026-12-01/a-1.parquet",
            "telemetry/events/date=2026-12-02/a-2.parquet",
            "telemetry/events/date=2026-12-02/b-1.parquet",
        ],
        "a prefix lists whole path segments only"
    );
}

async fn create_if_absent_has_one_winner(store: &Store) {
    let key = Path::from("state/race/00000000000000000001.json");
    let tasks: Vec<_> = (0..16u8)
        .map(|i| {
            let store = store.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let opts = PutOptions {
                    mode: PutMode::Create,
                    ..PutOptions::default()
                };
                match store
                    .put_opts(&key, PutPayload::from(vec![i; 64]), opts)
                    .await
                {
                    Ok(_) => Some(i),
                    Err(object_store::Error::AlreadyExists { .. }) => None,
                    Err(e) => panic!("writer {i}: {e}"),
                }
            })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        if let Some(i) = t.await.expect("task") {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one create wins: {winners:?}");
    let got = store
        .get(&key)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(got.as_ref(), &[winners[0]; 64][..], "the winner's bytes");
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Counter {
    value: u64,
    writer: String,
}

async fn revision_log_loses_no_update(store: &Store) {
    let writers = 6;
    let each = 5;
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..each {
                    revisions::append(&store, "state/conformance/counter", |cur, _n| {
                        Ok::<_, ferry_server::storage::StoreError>(Counter {
                            value: cur.map_or(0, |(_, c): &(u64, Counter)| c.value) + 1,
                            writer: format!("w{w}"),
                        })
                    })
                    .await
                    .expect("append");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("writer");
    }
    let all: Vec<(u64, Counter)> = revisions::all(store, "state/conformance/counter")
        .await
        .expect("all");
    let total = (writers * each) as u64;
    assert_eq!(all.len() as u64, total, "every change is a revision");
    for (i, (n, c)) in all.iter().enumerate() {
        assert_eq!(*n, i as u64 + 1, "numbers are contiguous");
        assert_eq!(c.value, *n, "each change saw the one before it");
    }
    let (n, last) = revisions::latest::<Counter>(store, "state/conformance/counter")
        .await
        .expect("latest")
        .expect("some");
    assert_eq!((n, last.value), (total, total));
}

fn event(i: usize, soc: &str) -> TelemetryEvent {
    let e = Event::load("mlp", "1.0.0", "xnnpack-fp32")
        .install(&format!("dev-{i}"))
        .soc(soc)
        .set("device_model", "phone")
        .set("app_version", "1.0.0")
        .set("at", "2026-12-01T00:00:00Z")
        .set("load_ms", 1.0 + i as f64);
    if i.is_multiple_of(4) {
        e.failed("load_failed").typed()
    } else {
        e.typed()
    }
}

async fn rollups_merge_through_the_store(store: &Store) {
    // Three replicas each count a third of the events; one server counts them all.
    let mut whole = Rollup::default();
    for node in 0..3usize {
        let mut part = Rollup::default();
        for i in (node * 100)..(node * 100 + 100) {
            let e = event(i, ["SOC-A", "SOC-B"][i % 2]);
            part.variant_mut("mlp", "1.0.0", "xnnpack-fp32")
                .add(&e, i as u64, 7);
            whole
                .variant_mut("mlp", "1.0.0", "xnnpack-fp32")
                .add(&e, i as u64, 7);
        }
        store
            .put(
                &Path::from(format!("telemetry/rollups/node-{node}.json")),
                PutPayload::from(serde_json::to_vec(&part).expect("json")),
            )
            .await
            .expect("put rollup");
    }
    let metas: Vec<_> = store
        .list(Some(&Path::from("telemetry/rollups")))
        .try_collect()
        .await
        .expect("list");
    assert_eq!(metas.len(), 3);
    let mut merged = Rollup::default();
    for m in metas {
        let bytes = store
            .get(&m.location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        merged.merge(&serde_json::from_slice::<Rollup>(&bytes).expect("rollup"));
    }
    assert_eq!(
        merged.release_totals("mlp", "1.0.0"),
        whole.release_totals("mlp", "1.0.0")
    );
    assert_eq!(merged.release_totals("mlp", "1.0.0").0, 300);
    assert_eq!(merged.health("mlp"), whole.health("mlp"));
}

fn conformance(storage: StorageConfig) {
    let data = tempfile::tempdir().expect("tmp");
    let store = open(&storage, data.path());
    runtime().block_on(async {
        reads_and_lists(&store).await;
        create_if_absent_has_one_winner(&store).await;
        revision_log_loses_no_update(&store).await;
        rollups_merge_through_the_store(&store).await;
    });
    // What was written is there for another process opening the same store.
    let again = open(&storage, data.path());
    let n = runtime().block_on(async {
        revisions::all::<Counter>(&Arc::clone(&again), "state/conformance/counter")
            .await
            .expect("all")
            .len()
    });
    assert_eq!(n, 30);
}

#[test]
fn the_local_folder_store_conforms() {
    conformance(StorageConfig::Local);
}

#[test]
fn s3_on_moto_conforms() {
    let moto = ferry_tests::moto::Moto::start("ferry-conformance");
    conformance(moto.storage("ferry-conformance"));
}

#[test]
fn azure_blob_storage_on_azurite_conforms() {
    let azurite = ferry_tests::azurite::Azurite::start("ferry-conformance");
    conformance(azurite.storage("ferry-conformance"));
}
