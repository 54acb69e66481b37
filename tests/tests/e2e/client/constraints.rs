//! The last known good copy honours what was signed: a cached program is loaded only while its
//! release's signed constraints admit the device as it is now (docs/client.md, "When a cached
//! program is used"). Real programs, the real ExecuTorch runtime, a real server.

use std::path::Path;
use std::sync::Arc;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::runtime::{Program, Runtime, RuntimeError};
use ferry_client::{Client, DeviceInfo, Source, VerifiedBlob};
use ferry_shared::manifest::Platform;
use ferry_tests::app::{TestApp, mlp_v1, mlp_v2};
use ferry_tests::kit::{DeviceExt as _, device};

/// The real runtime, reporting another version: an app that ships ExecuTorch `version`.
struct Versioned(ExecuTorchRuntime, semver::Version);

impl Runtime for Versioned {
    fn version(&self) -> semver::Version {
        self.1.clone()
    }
    fn registered_backends(&self) -> Vec<String> {
        self.0.registered_backends()
    }
    fn open(&self, blob: &VerifiedBlob) -> Result<Box<dyn Program>, RuntimeError> {
        self.0.open(blob)
    }
}

fn client(server: &str, app: &TestApp, cache: &Path, app_version: &str, runtime: &str) -> Client {
    app.client_at(server, cache)
        .app_version(app_version.parse().expect("version"))
        .runtime(Arc::new(Versioned(
            ExecuTorchRuntime::new(),
            runtime.parse().expect("version"),
        )))
        .download_limits(ferry_client::DownloadLimits {
            retries: 1,
            backoff: std::time::Duration::from_millis(10),
            ..Default::default()
        })
        .build()
        .expect("client")
}

/// The Linux board this file's tests load on, with `ram_mb` of memory.
fn board(ram_mb: u64) -> DeviceInfo {
    device("constraints-device")
        .os("6.1")
        .model("board")
        .soc("RK3588")
        .ram(ram_mb)
}

/// An address where nothing answers: the device is offline.
const OFFLINE: &str = "http://127.0.0.1:9";

/// `mlp` 1.0.0 signed for apps 1.x only (every variant).
fn for_apps_1x() -> ferry_server::release::sign::VariantsFile {
    let mut spec = mlp_v1();
    for v in &mut spec.variants {
        v.app = ">=1.0.0, <2.0.0".parse().expect("range");
    }
    spec
}

#[test]
fn an_app_update_beyond_the_signed_range_never_loads_the_cached_program() {
    let app = TestApp::start();
    app.publish(&for_apps_1x());
    let cache = tempfile::tempdir().expect("cache");
    let first = client(&app.url(), &app, cache.path(), "1.5.0", "1.5.1")
        .load("mlp", &board(8192))
        .expect("app 1.5.0 loads 1.0.0");
    assert_eq!(
        (first.release.as_str(), first.source.clone()),
        ("1.0.0", Source::Downloaded)
    );

    // An update inside the range keeps its cached program, offline too.
    let inside = client(OFFLINE, &app, cache.path(), "1.9.0", "1.5.1")
        .load("mlp", &board(8192))
        .expect("app 1.9.0 offline");
    assert!(
        matches!(inside.source, Source::LastKnownGood { .. }),
        "{:?}",
        inside.source
    );
    assert_eq!(inside.path, first.path);

    // App 2.0.0, online: the server finds nothing for it, and the app hears exactly that.
    let v2 = client(&app.url(), &app, cache.path(), "2.0.0", "1.5.1");
    let err = v2
        .load("mlp", &board(8192))
        .expect_err("no release for app 2.0.0");
    assert_eq!(err.code(), "no_compatible_variant", "{err}");
    assert!(
        err.to_string()
            .contains("needs app >=1.0.0, <2.0.0, app is 2.0.0"),
        "{err}"
    );
    assert!(
        v2.cached("mlp").is_none(),
        "cached() honours the app range too"
    );

    // Offline: the cached program is not loaded; the error names the constraint.
    let offline = client(OFFLINE, &app, cache.path(), "2.0.0", "1.5.1");
    let err = offline
        .load("mlp", &board(8192))
        .expect_err("offline app 2.0.0");
    assert_eq!(err.code(), "cached_incompatible", "{err}");
    assert!(
        err.to_string()
            .contains("needs app >=1.0.0, <2.0.0, app is 2.0.0"),
        "{err}"
    );

    // The update was noticed once and reported once.
    let reported: Vec<_> = offline
        .telemetry_pending()
        .into_iter()
        .filter(|e| e.error_code.as_deref() == Some("cached_incompatible"))
        .collect();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(reported[0].stage.as_deref(), Some("cache"));
    assert_eq!(reported[0].release, "1.0.0");
    let _ = offline.load("mlp", &board(8192));
    let again = offline
        .telemetry_pending()
        .into_iter()
        .filter(|e| {
            e.error_code.as_deref() == Some("cached_incompatible")
                && e.stage.as_deref() == Some("cache")
        })
        .count();
    assert_eq!(again, 1, "reported once");

    // A release made for app 2.x reaches it.
    let mut v2_release = mlp_v2();
    for v in &mut v2_release.variants {
        v.runtime = ">=1.0.0".parse().expect("range");
    }
    app.publish(&v2_release);
    app.ship("2.0.0");
    let got = v2.load("mlp", &board(8192)).expect("2.0.0 for app 2.0.0");
    assert_eq!(
        (got.release.as_str(), got.source),
        ("2.0.0", Source::Downloaded)
    );
}

#[test]
fn a_runtime_update_beyond_the_signed_range_never_loads_the_cached_program() {
    let app = TestApp::start();
    let mut spec = mlp_v1();
    for v in &mut spec.variants {
        v.runtime = ">=1.4.0, <1.5.0".parse().expect("range");
    }
    app.publish(&spec);
    let cache = tempfile::tempdir().expect("cache");
    let old = client(&app.url(), &app, cache.path(), "1.0.0", "1.4.2")
        .load("mlp", &board(8192))
        .expect("runtime 1.4.2 loads 1.0.0");
    assert_eq!(old.source, Source::Downloaded);
    let updated = client(OFFLINE, &app, cache.path(), "1.0.0", "1.5.1");
    let err = updated
        .load("mlp", &board(8192))
        .expect_err("runtime 1.5.1");
    assert_eq!(err.code(), "cached_incompatible", "{err}");
    assert!(
        err.to_string()
            .contains("needs ExecuTorch runtime >=1.4.0, <1.5.0, device has 1.5.1"),
        "{err}"
    );
}

#[test]
fn a_device_constraint_that_no_longer_holds_skips_the_entry() {
    let app = TestApp::start();
    let mut spec = mlp_v1();
    for v in &mut spec.variants {
        v.min_ram_mb = Some(4096);
        v.platforms = vec![Platform::Linux];
    }
    app.publish(&spec);
    let cache = tempfile::tempdir().expect("cache");
    client(&app.url(), &app, cache.path(), "1.0.0", "1.5.1")
        .load("mlp", &board(8192))
        .expect("8 GiB device");
    let offline = client(OFFLINE, &app, cache.path(), "1.0.0", "1.5.1");
    let err = offline.load("mlp", &board(2048)).expect_err("2 GiB");
    assert_eq!(err.code(), "cached_incompatible");
    assert!(
        err.to_string()
            .contains("needs 4096 MiB RAM, device has 2048"),
        "{err}"
    );
    let mut android = board(8192);
    android.platform = Platform::Android;
    let err = offline.load("mlp", &android).expect_err("another platform");
    assert!(err.to_string().contains("android"), "{err}");
    // The device as it was: still fine.
    let ok = offline.load("mlp", &board(8192)).expect("fits");
    assert!(matches!(ok.source, Source::LastKnownGood { .. }));
}

#[test]
fn another_cached_variant_of_the_release_that_still_fits_is_used() {
    let app = TestApp::start();
    // Two XNNPACK variants of one release: int8 for apps 1.x, fp32 for any app. A 1.x app
    // loads int8 (listed first) and, when the server later offers fp32 too, caches it.
    let mut spec = mlp_v1();
    spec.variants
        .retain(|v| v.id.as_str().starts_with("xnnpack"));
    for v in &mut spec.variants {
        if v.id.as_str() == "xnnpack-int8" {
            v.app = ">=1.0.0, <2.0.0".parse().expect("range");
        }
    }
    app.publish(&spec);
    let cache = tempfile::tempdir().expect("cache");
    let c1 = client(&app.url(), &app, cache.path(), "1.0.0", "1.5.1");
    // Both programs reach the cache: fp32 through a prefetch of a 2.x app's choice.
    let c2 = client(&app.url(), &app, cache.path(), "2.0.0", "1.5.1");
    c2.prefetch("mlp", &board(8192)).expect("prefetch fp32");
    let int8 = c1.load("mlp", &board(8192)).expect("int8");
    assert_eq!(int8.variant, "xnnpack-int8");
    // App 2.0.0 offline: the int8 entry is passed over, the cached fp32 of the same release
    // loads, and the report says why.
    let offline = client(OFFLINE, &app, cache.path(), "2.0.0", "1.5.1");
    let got = offline
        .load("mlp", &board(8192))
        .expect("fp32 from the cache");
    assert_eq!(got.variant, "xnnpack-fp32");
    assert!(matches!(got.source, Source::LastKnownGood { .. }));
    let skipped = got
        .report
        .attempts
        .iter()
        .find(|a| a.error_code == "cached_incompatible")
        .expect("the skipped entry is in the report");
    assert_eq!(skipped.variant, "xnnpack-int8");
    assert_eq!(skipped.stage.as_str(), "cache");
}
