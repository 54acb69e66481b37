//! Download policy and load modes through the real client, server and ExecuTorch runtime: a
//! metered network or an unplugged device defers a download and the cached copy serves; a
//! byte budget refuses before any byte is fetched; the cached copy can load without asking the
//! server, and the latest can arrive in the background for the next load.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_client::{Client, Conditions, DownloadPolicy, LoadMode, LoadOptions, Source};
use ferry_tests::app::{TestApp, mlp_v1, mlp_v2};
use ferry_tests::kit::{DeviceExt as _, device};

fn client(app: &TestApp, cache: &Path) -> Arc<Client> {
    Arc::new(
        app.client(cache)
            .app_version(semver::Version::new(2, 0, 0))
            .build()
            .expect("client"),
    )
}

/// Files in the cache's blob folder (complete and partial).
fn blob_files(cache: &Path) -> Vec<String> {
    let dir = cache.join("blobs/sha256");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A server with `mlp` 1.0.0 shipped, and a client that has loaded it once (cached).
fn with_v1_cached() -> (TestApp, tempfile::TempDir, Arc<Client>) {
    let app = TestApp::start();
    app.publish(&mlp_v1()); // the first release is the baseline
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, cache.path());
    let first = c
        .load("mlp", &device("policy-device").ram(8192))
        .expect("first load");
    assert_eq!(first.release, "1.0.0");
    drop(first);
    (app, cache, c)
}

#[test]
fn a_metered_network_defers_the_download_and_serves_the_cached_copy() {
    let (app, cache, c) = with_v1_cached();
    app.publish(&mlp_v2());
    app.ship("2.0.0");
    let files_before = blob_files(cache.path());
    let served_before = app.blob_bytes_served();

    let metered = LoadOptions {
        policy: DownloadPolicy {
            require_unmetered: true,
            ..DownloadPolicy::default()
        },
        conditions: Conditions {
            unmetered: Some(false),
            charging: Some(true),
            ..Conditions::default()
        },
        ..LoadOptions::default()
    };
    let loaded = c
        .load_with("mlp", &device("policy-device").ram(8192), &metered)
        .expect("served from cache");
    assert_eq!(loaded.release, "1.0.0");
    match &loaded.source {
        Source::LastKnownGood { code, reason } => {
            assert_eq!(code, "download_deferred");
            assert!(reason.contains("metered"), "{reason}");
        }
        other => panic!("unexpected source {other:?}"),
    }
    assert_eq!(loaded.report.attempts[0].stage.as_str(), "download");
    drop(loaded);
    // Nothing of 2.0.0 was fetched: no new file in the cache, no byte served.
    assert_eq!(blob_files(cache.path()), files_before);
    assert_eq!(app.blob_bytes_served(), served_before);

    // Not charging, when the policy asks for it: the same.
    let unplugged = LoadOptions {
        policy: DownloadPolicy {
            require_charging: true,
            ..DownloadPolicy::default()
        },
        conditions: Conditions {
            unmetered: Some(true),
            charging: Some(false),
            ..Conditions::default()
        },
        ..LoadOptions::default()
    };
    let loaded = c
        .load_with("mlp", &device("policy-device").ram(8192), &unplugged)
        .expect("cache");
    assert_eq!(loaded.release, "1.0.0");
    drop(loaded);

    // Conditions the app did not report do not satisfy the policy either.
    let unknown = LoadOptions {
        conditions: Conditions::default(),
        ..metered
    };
    let loaded = c
        .load_with("mlp", &device("policy-device").ram(8192), &unknown)
        .expect("cache");
    assert_eq!(loaded.release, "1.0.0");
    drop(loaded);
    assert_eq!(app.blob_bytes_served(), served_before);

    // On Wi-Fi the new release downloads.
    let wifi = LoadOptions {
        conditions: Conditions {
            unmetered: Some(true),
            charging: None,
            ..Conditions::default()
        },
        ..metered
    };
    let loaded = c
        .load_with("mlp", &device("policy-device").ram(8192), &wifi)
        .expect("downloads");
    assert_eq!(
        (loaded.release.as_str(), loaded.source.clone()),
        ("2.0.0", Source::Downloaded)
    );
}

#[test]
fn a_byte_budget_smaller_than_the_variant_refuses_before_any_byte_is_fetched() {
    let app = TestApp::start();
    app.publish(&mlp_v1()); // the first release is the baseline
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, cache.path());

    // The size is known before the download starts.
    let plan = c
        .plan_download("mlp", &device("policy-device").ram(8192))
        .expect("plan");
    // The best variant the runtime can run (XNNPACK int8 here, the smallest of them).
    assert_eq!(
        (plan.variant.as_str(), plan.delegate.as_str()),
        ("xnnpack-int8", "xnnpack")
    );
    assert!(plan.size > 1000, "{plan:?}");
    assert_eq!(plan.to_download, plan.size);

    let tight = LoadOptions {
        policy: DownloadPolicy {
            max_download_bytes: Some(plan.size - 1),
            ..DownloadPolicy::default()
        },
        ..LoadOptions::default()
    };
    let e = c
        .load_with("mlp", &device("policy-device").ram(8192), &tight)
        .expect_err("over budget");
    assert_eq!(e.code(), "download_deferred", "{e}");
    assert!(e.to_string().contains("over the budget"), "{e}");
    let e = c
        .prefetch_with("mlp", &device("policy-device").ram(8192), &tight)
        .expect_err("over budget");
    assert_eq!(e.code(), "download_deferred");
    assert!(blob_files(cache.path()).is_empty());
    assert_eq!(app.blob_bytes_served(), 0);

    // A budget of exactly the size is enough; afterwards nothing is left to download.
    let enough = LoadOptions {
        policy: DownloadPolicy {
            max_download_bytes: Some(plan.size),
            ..DownloadPolicy::default()
        },
        ..LoadOptions::default()
    };
    c.prefetch_with("mlp", &device("policy-device").ram(8192), &enough)
        .expect("prefetches");
    assert_eq!(app.blob_bytes_served(), plan.size);
    let plan = c
        .plan_download("mlp", &device("policy-device").ram(8192))
        .expect("plan");
    assert_eq!(plan.to_download, 0);
}

#[test]
fn cached_or_download_loads_the_cached_copy_without_the_server() {
    let (app, _cache, c) = with_v1_cached();
    let cached_first = LoadOptions {
        mode: LoadMode::CachedOrDownload,
        ..LoadOptions::default()
    };
    drop(app); // the server is gone
    let loaded = c
        .load_with("mlp", &device("policy-device").ram(8192), &cached_first)
        .expect("cached");
    assert_eq!(
        (loaded.release.as_str(), loaded.source.clone()),
        ("1.0.0", Source::Cached)
    );
    assert!(loaded.report.attempts.is_empty());
}

#[test]
fn cached_then_update_serves_the_cache_now_and_the_latest_next_time() {
    let (app, _cache, c) = with_v1_cached();
    app.publish(&mlp_v2());
    app.ship("2.0.0");
    let opts = LoadOptions {
        mode: LoadMode::CachedThenUpdate,
        ..LoadOptions::default()
    };
    let now = c
        .load_with("mlp", &device("policy-device").ram(8192), &opts)
        .expect("cached now");
    assert_eq!(
        (now.release.as_str(), now.source.clone()),
        ("1.0.0", Source::Cached)
    );
    // The update arrives in the background and becomes the last known good once it loaded.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.cached("mlp").is_none_or(|m| m.release != "2.0.0") {
        assert!(Instant::now() < deadline, "no background update");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(now);
    let next = c
        .load_with("mlp", &device("policy-device").ram(8192), &opts)
        .expect("next");
    assert_eq!(
        (next.release.as_str(), next.source.clone()),
        ("2.0.0", Source::Cached)
    );
}
