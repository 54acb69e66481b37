//! The attack suite: each test builds a hostile request, answer or key and asserts the exact
//! outcome (nothing loaded, nothing stored, the right error code, the device still served).
//!
//! Attack classes (TUF's names) and the findings of the hardening issue, with where each is
//! tested. Those not in this file keep the fixtures of their own area:
//!
//! | attack | test |
//! |---|---|
//! | arbitrary software (swapped or corrupted bytes) | `client::e2e::corrupted_and_swapped_bytes_never_reach_the_cache_or_runtime` |
//! | rollback (an older answer, an older keyring) | `client::trust::tampered_untrusted_expired_and_replayed_responses_are_refused`, `server::key_rotation::a_skipped_or_older_keyring_version_is_refused` |
//! | indefinite freeze (expired, far-future, too long-lived decisions) | `client::trust::tampered_untrusted_expired_and_replayed_responses_are_refused` |
//! | fast-forward (sequence `u64::MAX`) | `server::key_rotation::a_poisoned_sequence_is_recovered_by_rotating_the_online_key` |
//! | mix-and-match (another device's decision, a digest swapped by the online key, an iOS-only variant on Android) | `client::trust::a_decision_re_signed_with_the_online_key_cannot_swap_a_digest`, `client::trust::the_online_key_cannot_send_a_device_what_the_release_key_did_not_sign_for_it` |
//! | endless data | [`endless_answers_are_cut_off_and_nothing_is_loaded_or_cached`] |
//! | slow retrieval | `client::e2e::downloads_cut_at_many_offsets_resume_to_the_exact_file` (stall), `server::hostile::bodies_trickled_byte_by_byte_are_cut_off_and_resolve_keeps_answering` |
//! | key compromise (online, release, root) | `server::key_rotation::*`, `server::revocation::*` |
//! | 1. forged telemetry denies or halts | `rollout::telemetry::forged_telemetry_without_a_receipt_changes_no_decision` |
//! | 1. forged failures deny the last usable variant, one host or subnet drives a deny, the list grows without end | [`a_learned_deny_never_takes_the_xnnpack_floor_and_can_require_several_networks`], `ferry-server` `plans::deny` cap unit test |
//! | 1. events for models that do not exist create state | [`events_about_unpublished_models_releases_or_variants_are_refused`] |
//! | 2. unbounded telemetry memory, a limiter reset by random ids | [`random_names_and_made_up_devices_cannot_grow_telemetry_state`], `ferry-server` `fleet::intake::limits` unit tests |
//! | 3. slow request bodies hold every descriptor | `server::hostile::bodies_trickled_byte_by_byte_are_cut_off_and_resolve_keeps_answering`, [`one_address_cannot_hold_every_connection`] |
//! | 4. the HTTP method as a metrics label | [`random_methods_do_not_grow_the_metrics`] |
//! | 5. online-key compromise (replay floor, expiry 9999, another install, signed constraints, old releases, clock jumps) | `server::key_rotation::*`, `client::e2e::*` and `client::trust::*` above, `server::revocation::*`, `server::resolve::decisions_expire_and_sequences_follow_the_model_state` |
//! | 6. keys on the online host | `ferry-server` `cli_keys::*` |
//! | 7. torn writes | `store::integrity::*`, `ferry-server` `cli_durability::publish_again_repairs_a_torn_blob` |
//! | 8. staging leftovers, memory per upload | `store::integrity::staging_files_of_killed_uploads_are_removed_at_start`, [`uploads_are_capped_in_number_and_time`] |

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo, DownloadLimits};
use ferry_shared::manifest::Platform;
use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp, mlp_v1};
use ferry_tests::kit::Event;
use ferry_tests::proxy::{Fault, FaultProxy};

fn event(model: &str, release: &str, variant: &str, install: &str, soc: &str) -> serde_json::Value {
    // Always declared XNNPACK, whatever the variant: the forged events of these attacks.
    Event::load(model, release, variant)
        .set("delegate", "xnnpack")
        .install(install)
        .soc(soc)
        .failed("runtime_load_failed")
        .set("load_ms", 12.5)
        .json()
}

fn post_events(app: &TestApp, events: &[serde_json::Value]) -> serde_json::Value {
    let (s, r) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json"),
        None,
    );
    assert_eq!(s, 200, "{r}");
    r
}

/// A unique 120-character name.
fn junk(i: usize, what: &str) -> String {
    let h = ferry_shared::Sha256Digest::of(format!("{what}{i}").as_bytes()).to_hex();
    format!("{h}{h}")[..120].to_string()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

#[test]
fn events_about_unpublished_models_releases_or_variants_are_refused() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let mut fallback = event("mlp", "1.0.0", "vulkan-fp32", "d1", "SM8550");
    fallback["kind"] = "fallback".into();
    fallback["to_variant"] = "no-such-variant".into();
    let cases = [
        (
            event("nosuch", "1.0.0", "xnnpack-fp32", "d1", "SM8550"),
            "nosuch is not a published model",
        ),
        (
            event("mlp", "9.9.9", "xnnpack-fp32", "d1", "SM8550"),
            "mlp 9.9.9 is not published",
        ),
        (
            event("mlp", "1.0.0", "made-up", "d1", "SM8550"),
            "has no variant \"made-up\"",
        ),
        (fallback, "has no variant \"no-such-variant\""),
        (
            {
                let mut e = event("mlp", "1.0.0", "xnnpack-fp32", "d1", "SM8550");
                e["stage"] = "Load Method; DROP TABLE".into();
                e
            },
            "stage must be 1 to 32 lowercase letters",
        ),
        (
            {
                let mut e = event("mlp", "", "random-variant", "d1", "SM8550");
                e["kind"] = "verify".into();
                e
            },
            "must name its release",
        ),
    ];
    let events: Vec<_> = cases.iter().map(|(e, _)| e.clone()).collect();
    let r = post_events(&app, &events);
    assert_eq!(r["accepted"], 0, "{r}");
    let rejected = r["rejected"].as_array().expect("rejected");
    assert_eq!(rejected.len(), cases.len(), "{r}");
    for (i, (_, says)) in cases.iter().enumerate() {
        assert_eq!(rejected[i]["code"], "event_invalid", "{r}");
        let message = rejected[i]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{message} should say {says}");
    }
    // Nothing is buffered for the raw log, counted, or rate-limited per install.
    let f = app.server.state.telemetry().footprint();
    assert_eq!(
        (f.raw_events, f.rollup_variants, f.capped_variants),
        (0, 0, 0),
        "{f:?}"
    );
    // The same event about a published variant is kept.
    let good = post_events(
        &app,
        &[event("mlp", "1.0.0", "xnnpack-fp32", "d1", "SM8550")],
    );
    assert_eq!(good["accepted"], 1, "{good}");
    assert_eq!(app.server.state.telemetry().footprint().raw_events, 1);
}

#[test]
fn random_names_and_made_up_devices_cannot_grow_telemetry_state() {
    // Resident memory is the whole process's: measured where no other test runs.
    if !ferry_tests::in_own_process(
        module_path!(),
        "random_names_and_made_up_devices_cannot_grow_telemetry_state",
    ) {
        return;
    }
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let before = rss_bytes();
    // What used to take the server from 72 MB to 1 GB: 500 batches of 200 events with random
    // 120-character model, release, variant, SoC and install strings.
    for batch in 0..500 {
        let events: Vec<_> = (0..200)
            .map(|i| {
                let n = batch * 200 + i;
                event(
                    &format!("m{}", &junk(n, "model")[..60]),
                    &junk(n, "release"),
                    &junk(n, "variant"),
                    &junk(n, "install"),
                    &junk(n, "soc"),
                )
            })
            .collect();
        let r = post_events(&app, &events);
        assert_eq!(r["accepted"], 0, "{r}");
    }
    let f = app.server.state.telemetry().footprint();
    assert_eq!(
        (f.raw_events, f.rollup_variants, f.capped_variants),
        (0, 0, 0),
        "{f:?}"
    );
    assert!(f.limiter_buckets <= 2, "one address, no installs: {f:?}");
    // Made-up devices that resolve (resolve is open, so each gets a real receipt) with random
    // SoC and device-model names: the classes per variant stop at the cap, and only the
    // published variant gets an entry.
    let events: Vec<_> = (0..1500)
        .map(|n| {
            event(
                "mlp",
                "1.0.0",
                "xnnpack-fp32",
                &junk(n, "dev"),
                &junk(n, "soc2"),
            )
        })
        .collect();
    for chunk in app.with_receipts(&events).chunks(500) {
        let r = post_events(&app, chunk);
        assert_eq!(r["accepted"], 500, "{r}");
        assert_eq!(r["unverified"], 0, "{r}");
    }
    let f = app.server.state.telemetry().footprint();
    assert_eq!((f.rollup_variants, f.capped_variants), (1, 1), "{f:?}");
    assert_eq!(f.capped_devices, 1500, "{f:?}");
    assert!(f.limiter_buckets <= 1 + 1500, "{f:?}");
    // Health is read from the rollups as they are flushed: under load the last chunk may land
    // a moment later, so wait for it (bounded), then check the classes stopped at the cap.
    let classes_now = || {
        let (s, h) = app.get_json("/v1/admin/models/mlp/health", Some(ADMIN_TOKEN));
        assert_eq!(s, 200);
        h["releases"][0]["variants"]
            .as_array()
            .expect("variants")
            .iter()
            .find(|v| v["variant"] == "xnnpack-fp32")
            .and_then(|v| v["by_soc"].as_object().map(serde_json::Map::len))
            .unwrap_or(0)
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut classes = classes_now();
    while classes < ferry_server::fleet::counts::rollup::MAX_CLASSES
        && std::time::Instant::now() < until
    {
        std::thread::sleep(std::time::Duration::from_millis(200));
        classes = classes_now();
    }
    assert_eq!(
        classes,
        ferry_server::fleet::counts::rollup::MAX_CLASSES,
        "{classes}"
    );
    // 101,500 hostile events later the process has not grown by anything like the old 1 GB.
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 128 << 20, "resident memory grew by {grown} bytes");
}

#[test]
fn random_methods_do_not_grow_the_metrics() {
    let app = TestApp::start();
    let metrics_len = || app.metrics().len();
    let before = metrics_len();
    for i in 0..300 {
        let mut s = TcpStream::connect(app.server.addr).expect("connect");
        let method = format!("M{}", &junk(i, "method")[..20].to_uppercase());
        write!(
            s,
            "{method} /v1/resolve HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .expect("send");
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.1 4"),
            "an unknown method is a client error: {answer}"
        );
    }
    let text = app.metrics();
    assert!(!text.contains("method=\"M"), "a method name became a label");
    assert!(text.contains("method=\"other\""), "{text}");
    // One more label set (`other` for the route and status), not 300.
    assert!(
        metrics_len() < before + 4096,
        "{} -> {}",
        before,
        metrics_len()
    );
}

#[test]
fn one_address_cannot_hold_every_connection() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| c.limits.max_connections_per_address = 8)),
    });
    // Eight idle connections are allowed; each further one is shut down as it is accepted, long
    // before the 5 s a silent connection may otherwise wait for its request.
    let held: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(app.server.addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..20 {
        let mut extra = TcpStream::connect(app.server.addr).expect("connect");
        extra
            .set_read_timeout(Some(Duration::from_secs(4)))
            .expect("timeout");
        let t = Instant::now();
        let mut answer = Vec::new();
        let read = extra.read_to_end(&mut answer);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "an extra connection stayed open for {:?} ({read:?})",
            t.elapsed()
        );
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    }
    // The held ones are still served.
    let mut first = &held[0];
    write!(
        first,
        "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    let _ = first.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Once they close, the address is served again.
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let (s, _) = app.get_json("/healthz", None);
    assert_eq!(s, 200);
    assert_eq!(
        app.server.state.connections().addresses(),
        1,
        "only this one"
    );
}

#[test]
fn uploads_are_capped_in_number_and_time() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.limits.max_concurrent_uploads = 2;
            c.limits.upload_timeout_secs = 10;
            c.limits.body_timeout_secs = 3;
        })),
    });
    let digest = "ab".repeat(32);
    let slow_upload = || {
        let mut s = TcpStream::connect(app.server.addr).expect("connect");
        write!(
            s,
            "PUT /v1/admin/blobs/sha256/{digest} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_TOKEN}\r\ncontent-length: 1000000\r\n\r\n"
        )
        .expect("send");
        s
    };
    let started = Instant::now();
    let mut uploads: Vec<TcpStream> = (0..2).map(|_| slow_upload()).collect();
    std::thread::sleep(Duration::from_millis(300));
    // A third upload is refused at once while two run.
    let status = app.put_blob(b"a third blob");
    assert_eq!(status, 429);
    // The two trickle a byte a second (never idle for the 3 s limit), yet end at the 10 s
    // deadline for a whole upload.
    let mut answers = vec![String::new(); uploads.len()];
    for _ in 0..20 {
        for u in &mut uploads {
            let _ = u.write_all(b"x");
        }
        std::thread::sleep(Duration::from_secs(1));
        if started.elapsed() > Duration::from_secs(11) {
            break;
        }
    }
    for (u, a) in uploads.iter_mut().zip(&mut answers) {
        u.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let _ = u.read_to_string(a);
        assert!(a.starts_with("HTTP/1.1 408"), "{a}");
        assert!(a.contains("upload_timeout_secs"), "{a}");
    }
    // The slots are free again and nothing of the aborted uploads is stored.
    assert_eq!(app.put_blob(b"fits now"), 201);
    assert!(
        app.stored_files().iter().all(|f| !f.contains(&digest)),
        "{:?}",
        app.stored_files()
    );
}

#[test]
fn endless_answers_are_cut_off_and_nothing_is_loaded_or_cached() {
    let app = TestApp::start_with(Options {
        demo: true,
        keys: None,
        store: None,
        tweak: None,
    });
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let client = ClientBuilder::new(proxy.url(), app.trust())
        .cache_dir(cache.path())
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .download_limits(DownloadLimits {
            retries: 2,
            backoff: Duration::from_millis(10),
            backoff_cap: Duration::from_millis(20),
            ..DownloadLimits::default()
        })
        .build()
        .expect("client");
    let device = DeviceInfo {
        install_id: "endless".into(),
        platform: Platform::Linux,
        os_version: "6".into(),
        device_model: "box".into(),
        soc: "x86".into(),
        ram_mb: 8192,
        claimed_backends: vec![],
    };
    // A resolve answer that never ends: refused once it passes the client's response limit.
    proxy.resolve_faults(vec![Fault::Endless]);
    let t = Instant::now();
    let err = client
        .load("demo-mlp", &device)
        .expect_err("an endless answer loads nothing");
    assert_eq!(err.code(), "bad_response", "{err}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // Blobs that never end: each download stops one byte past the signed size and nothing
    // reaches the cache or the runtime.
    proxy.blob_faults(vec![Fault::Endless; 12]);
    let err = client
        .load("demo-mlp", &device)
        .expect_err("an endless blob loads nothing");
    assert!(err.to_string().contains("more than the signed"), "{err}");
    let blobs = cache.path().join("blobs/sha256");
    for e in std::fs::read_dir(&blobs).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            name.ends_with(".part") || name.ends_with(".etag"),
            "nothing verified was cached: {name}"
        );
        let len = e.metadata().map_or(0, |m| m.len());
        assert!(len <= 1 << 20, "{name} holds {len} bytes");
    }
    // With the network honest again the same client loads.
    proxy.clear_faults();
    let loaded = client.load("demo-mlp", &device).expect("loads");
    assert_eq!(loaded.variant, "xnnpack-fp32");
}

/// Fallback floods from receipted devices: `n` devices each report one failed load and one
/// fallback of `variant` (release 1.0.0) on SoC SM8450.
fn fallback_flood(app: &TestApp, variant: &str, n: usize) {
    let mut events = Vec::new();
    for i in 0..n {
        let id = format!("{variant}-{i}");
        events.push(event("mlp", "1.0.0", variant, &id, "SM8450"));
        let mut fb = event("mlp", "1.0.0", variant, &id, "SM8450");
        fb["kind"] = "fallback".into();
        fb["to_variant"] = "portable-fp32".into();
        events.push(fb);
    }
    for chunk in app.with_receipts(&events).chunks(400) {
        let r = post_events(app, chunk);
        assert_eq!(r["accepted"].as_u64(), Some(chunk.len() as u64), "{r}");
    }
    app.settle();
}

fn denied(app: &TestApp) -> Vec<String> {
    ferry_tests::reports::deny_entries(&app.url(), "mlp", ADMIN_TOKEN)
        .iter()
        .map(|e| e["variant"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_learned_deny_never_takes_the_xnnpack_floor_and_can_require_several_networks() {
    let quick = |networks: u64| Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(move |c| {
            c.telemetry.deny_min_samples = 50;
            c.telemetry.evaluate_ms = 0;
            c.telemetry.deny_min_networks = networks;
        })),
    };
    let app = TestApp::start_with(quick(0));
    app.publish(&mlp_v1());
    fallback_flood(&app, "vulkan-fp32", 60);
    fallback_flood(&app, "xnnpack-fp32", 60);
    let list = denied(&app);
    assert!(list.contains(&"vulkan-fp32".to_string()), "{list:?}");
    assert!(
        !list.contains(&"xnnpack-fp32".to_string()),
        "the XNNPACK floor was denied: {list:?}"
    );
    // SM8450 devices still get the floor.
    let (s, body) = app.resolve(
        &serde_json::json!({
            "model": "mlp", "install_id": "victim", "app_version": "2.0.0",
            "runtime_version": "1.5.1", "backends": ["XnnpackBackend", "VulkanBackend"],
            "platform": "android", "os_version": "14", "device_model": "phone-SM8450",
            "soc": "SM8450", "ram_mb": 8192
        }),
        false,
    );
    assert_eq!(s, 200, "{body}");
    let (d, _) = app.verify_response(&body);
    assert!(
        d.candidates
            .iter()
            .any(|c| c.variant.as_str() == "xnnpack-fp32"),
        "{:?}",
        d.candidates
    );

    // With two networks required, the same flood from one host denies nothing.
    let strict = TestApp::start_with(quick(2));
    strict.publish(&mlp_v1());
    fallback_flood(&strict, "vulkan-fp32", 60);
    assert!(denied(&strict).is_empty(), "{:?}", denied(&strict));
}
