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
