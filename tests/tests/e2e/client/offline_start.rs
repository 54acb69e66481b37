//! Offline starts (issue 46, point 5): with the server unreachable (the connection refused, the
//! host unknown) the last known good loads at once, not after the retries a flaky network
//! gets.

use std::time::{Duration, Instant};

use ferry_client::{DownloadLimits, Source};
use ferry_tests::app::{Options, TestApp};
use ferry_tests::kit::device;

/// Retries slow enough that one would show: the first waits at least 5 s.
fn slow_retries() -> DownloadLimits {
    DownloadLimits {
        retries: 5,
        backoff: Duration::from_secs(10),
        backoff_cap: Duration::from_secs(10),
        ..Default::default()
    }
}

#[test]
fn an_unreachable_server_is_not_retried_before_the_last_known_good_loads() {
    let app = TestApp::start_with(Options {
        demo: true,
        ..Default::default()
    });
    let cache = tempfile::tempdir().expect("cache");
    let d = device("offline-start");
    let first = app
        .client(cache.path())
        .build()
        .expect("client")
        .load("demo-mlp", &d)
        .expect("online load");
    assert_eq!(first.source, Source::Downloaded);
    drop(first);
    // A port nothing listens on (refused), and a host that does not resolve.
    for server in ["http://127.0.0.1:1", "http://ferry.invalid:8080"] {
        let client = app
            .client_at(server, cache.path())
            .download_limits(slow_retries())
            .build()
            .expect("client");
        let started = Instant::now();
        let loaded = client.load("demo-mlp", &d).expect("the last known good");
        let took = started.elapsed();
        assert!(
            matches!(&loaded.source, Source::LastKnownGood { code, .. } if code == "network"),
            "{server}: {:?}",
            loaded.source
        );
        assert!(
            took < Duration::from_secs(4),
            "{server}: no retry waited (one would take 5 s or more): {took:?}"
        );
    }
}

#[test]
fn a_corrupt_or_lost_index_keeps_the_last_known_good() {
    let app = TestApp::start_with(Options {
        demo: true,
        ..Default::default()
    });
    let d = device("healed");
    for damage in ["corrupt", "deleted"] {
        let cache = tempfile::tempdir().expect("cache");
        let first = app
            .client(cache.path())
            .build()
            .expect("client")
            .load("demo-mlp", &d)
            .expect("online load");
        let (release, variant) = (first.release.clone(), first.variant.clone());
        drop(first);
        let index = cache.path().join("index.json");
        match damage {
            "corrupt" => std::fs::write(&index, b"{\"garbage").expect("corrupt"),
            _ => std::fs::remove_file(&index).expect("delete"),
        }
        // Offline: the index is rebuilt from the verified files and signed envelopes.
        let loaded = app
            .client_at("http://127.0.0.1:1", cache.path())
            .build()
            .expect("client")
            .load("demo-mlp", &d)
            .unwrap_or_else(|e| panic!("{damage} index: {e}"));
        assert!(
            matches!(loaded.source, Source::LastKnownGood { .. }),
            "{damage}: {:?}",
            loaded.source
        );
        assert_eq!(
            (loaded.release, loaded.variant),
            (release, variant),
            "{damage}"
        );
    }
}

#[test]
fn offline_loads_and_corrupt_cached_files_are_reported_when_the_network_is_back() {
    let app = TestApp::start_with(Options {
        demo: true,
        ..Default::default()
    });
    let d = device("reported");
    let cache = tempfile::tempdir().expect("cache");
    let first = app
        .client(cache.path())
        .build()
        .expect("client")
        .load("demo-mlp", &d)
        .expect("online load");
    let path = first.path.clone();
    drop(first);
    let offline = app
        .client_at("http://127.0.0.1:1", cache.path())
        .build()
        .expect("client");
    let before = offline.telemetry_pending().len();
    offline.load("demo-mlp", &d).expect("offline load");
    let pending = offline.telemetry_pending();
    let load = pending[before..]
        .iter()
        .find(|e| e.kind == ferry_shared::wire::telemetry::EventKind::Load)
        .expect("the offline load is queued");
    assert_eq!(load.outcome, ferry_shared::wire::telemetry::Outcome::Ok);
    assert!(
        load.receipt.is_some(),
        "with the receipt of the answer that chose it"
    );
    // A cached file that fails its integrity check: reported, not only removed.
    let mut bytes = std::fs::read(&path).expect("blob");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, bytes).expect("corrupt");
    let before = offline.telemetry_pending().len();
    assert!(
        offline.load("demo-mlp", &d).is_err(),
        "nothing intact is cached"
    );
    let pending = offline.telemetry_pending();
    let verify = pending[before..]
        .iter()
        .find(|e| e.kind == ferry_shared::wire::telemetry::EventKind::Verify)
        .expect("the corrupt file is queued");
    assert_eq!(verify.error_code.as_deref(), Some("hash_mismatch"));
    assert_eq!(verify.stage.as_deref(), Some("cache"));
    // The network is back: both reach the server.
    let online = app.client(cache.path()).build().expect("client");
    let sent = online.send_telemetry();
    assert!(sent.sent >= 2 && sent.queued == 0, "{sent:?}");
}
