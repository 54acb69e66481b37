//! A site mirror (`ferry serve --mirror-of URL --trust FILE`) between an origin and the real
//! clients of a site: the origin sends each file once for every device on the mirror; with the
//! origin stopped, a device with a time estimate and an empty cache resolves (a kept answer)
//! and loads what the mirror holds, and the telemetry of that load reaches the origin once it is
//! back (in its raw Parquet log, once), through a restart of the mirror; a file altered on the
//! mirror's disk is never served.

use std::path::Path;

use ferry_server::mirror::{MirrorOptions, RunningMirror};
use ferry_shared::Sha256Digest;
use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp};
use ferry_tests::kit::device;

use super::delta::{client, noise};

/// A mirror of `origin` on `data` (a fresh port), with the origin's read token.
fn mirror(origin: &str, trust: &Path, data: &Path) -> RunningMirror {
    mirror_with(origin, trust, data, |_, _| {})
}

/// [`mirror`] with a change to its configuration and options.
fn mirror_with(
    origin: &str,
    trust: &Path,
    data: &Path,
    tweak: impl FnOnce(&mut ferry_server::app::config::Config, &mut MirrorOptions),
) -> RunningMirror {
    let mut config = ferry_tests::app::test_config(data, "127.0.0.1:0");
    let mut opts = MirrorOptions {
        origin: origin.to_string(),
        trust: trust.to_path_buf(),
        origin_token: Some(ferry_tests::app::READ_TOKEN.to_string()),
        origin_ca: None,
    };
    tweak(&mut config, &mut opts);
    ferry_server::mirror::spawn(config, opts).expect("the mirror starts")
}

/// `GET /v1/admin/mirror` with the read token.
fn state(m: &RunningMirror) -> serde_json::Value {
    let mut r = ureq::get(format!("{}/v1/admin/mirror", m.url()))
        .header("authorization", format!("Bearer {READ_TOKEN}"))
        .call()
        .expect("mirror state");
    let text = r.body_mut().read_to_string().expect("body");
    serde_json::from_str(&text).expect("json")
}

/// The raw log's `kind = 'load'` events of `install`, as DuckDB reads them.
pub(crate) fn loads_of(origin: &TestApp, install: &str) -> usize {
    let table = ferry_tests::duckdb::events_table(&origin.store_dir());
    if !origin
        .stored_files()
        .iter()
        .any(|f| f.starts_with("telemetry/events/"))
    {
        return 0;
    }
    let rows = ferry_tests::duckdb::query(&format!(
        "SELECT count(*) AS n FROM {table} WHERE kind = 'load' AND install_id = '{install}'"
    ));
    rows[0]["n"].as_u64().unwrap_or(0) as usize
}

#[test]
fn a_site_mirror_serves_its_devices_from_one_fetch_and_while_the_origin_is_away() {
    // The origin lists a CDN first (one the site cannot reach): devices behind the mirror fetch
    // from the mirror first all the same.
    let cdn = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}/v1/blobs/sha256/", l.local_addr().expect("addr"))
    };
    let sources = vec![cdn.clone(), "/v1/blobs/sha256/".to_string()];
    let mut origin = TestApp::start_with(Options {
        tweak: Some(Box::new(move |c| {
            ferry_tests::fast_telemetry(c);
            c.sources = sources;
        })),
        ..Default::default()
    });
    let dir = tempfile::tempdir().expect("tmp");
    let asset_bytes = noise(2 << 20, 41);
    std::fs::write(dir.path().join("weights.bin"), &asset_bytes).expect("write");
    let (m, _) = origin.publish(&ferry_tests::releases::portable_with_asset(
        "site",
        "1.0.0",
        &dir.path().join("weights.bin"),
    ));
    let (program, asset) = (m.variants[0].size, m.variants[0].assets[0].size);
    let trust = origin.dir.path().join("keys/trust.json");
    let site = dir.path().join("mirror");
    let mut mirror_server = mirror(&origin.url(), &trust, &site);
    let url = mirror_server.url();

    // Three devices on the site: the origin sends each file once.
    let before = origin.blob_bytes_served();
    for i in 0..3 {
        let c = client(&url, &origin, &dir.path().join(format!("d{i}")));
        let loaded = c
            .load("site", &device(&format!("site-{i}")))
            .expect("loads");
        if i == 0 {
            let used: Vec<&str> = loaded
                .report
                .sources
                .iter()
                .map(|u| u.source.as_str())
                .collect();
            assert_eq!(
                used,
                ["/v1/blobs/sha256/"],
                "the mirror first, the CDN untried"
            );
        }
        assert_eq!(
            std::fs::read(loaded.asset("weights.bin").expect("asset")).expect("read"),
            asset_bytes
        );
        // A second resolve, with the time learned: the shared answer the mirror keeps.
        c.resolve("site", &device(&format!("site-{i}")))
            .expect("resolve");
        assert!(c.send_telemetry().sent >= 1);
    }
    assert_eq!(origin.blob_bytes_served() - before, program + asset);
    let s = state(&mirror_server);
    assert_eq!(s["misses"], 3, "program, asset and release manifest: {s}");
    assert!(s["hits"].as_u64().unwrap_or(0) >= 6, "{s}");
    assert_eq!(s["kept_answers"], 1, "{s}");
    assert_eq!(s["origin_up"], true, "{s}");
    ferry_tests::until("the devices' telemetry reached the origin", || {
        (0..3).all(|i| loads_of(&origin, &format!("site-{i}")) == 1)
    });

    // A device that learned the time through the mirror, with nothing cached yet.
    let fresh = client(&url, &origin, &dir.path().join("fresh"));
    fresh
        .resolve("site", &device("site-fresh"))
        .expect("learns the time");

    // The origin goes away.
    let addr = origin.server.addr.to_string();
    let placeholder = origin.try_replica_at("127.0.0.1:0").expect("placeholder");
    std::mem::replace(&mut origin.server, placeholder).stop();
    let loaded = fresh
        .load("site", &device("site-fresh"))
        .expect("loads from the mirror while the origin is away");
    assert_eq!(loaded.release, "1.0.0");
    drop(loaded);
    assert!(fresh.send_telemetry().sent >= 1, "the mirror queues it");
    // A device without a time estimate gets a clear error (and would keep its last known good).
    let stranger = client(&url, &origin, &dir.path().join("stranger"));
    let err = stranger
        .load("site", &device("site-stranger"))
        .expect_err("no fresh answer without the origin");
    assert!(err.to_string().contains("origin_unavailable"), "{err}");
    let s = state(&mirror_server);
    assert_eq!(s["origin_up"], false, "{s}");
    assert!(s["queue"]["batches"].as_u64().unwrap_or(0) >= 1, "{s}");

    // The mirror restarts during the outage: its queue is on disk.
    mirror_server.stop();
    mirror_server = mirror(&format!("http://{addr}"), &trust, &site);
    assert!(
        state(&mirror_server)["queue"]["batches"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    );

    // The origin is back on its address: the queued load arrives, once.
    let back = origin
        .try_replica_at_with(&addr, Box::new(ferry_tests::fast_telemetry))
        .expect("origin back");
    let _ = std::mem::replace(&mut origin.server, back);
    ferry_tests::until("the queued telemetry reached the origin", || {
        loads_of(&origin, "site-fresh") >= 1
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(loads_of(&origin, "site-fresh"), 1, "once");
    assert_eq!(state(&mirror_server)["queue"]["batches"], 0);
    assert_eq!(state(&mirror_server)["origin_up"], true);

    // A file altered on the mirror's disk is never served: found, deleted, fetched again.
    let digest: Sha256Digest = m.variants[0].assets[0].sha256;
    let held = site.join("mirror/blobs/sha256").join(digest.to_hex());
    let mut bytes = std::fs::read(&held).expect("held");
    bytes[1000] ^= 1;
    std::fs::write(&held, &bytes).expect("alter");
    let mut r = ureq::get(format!(
        "{}/v1/blobs/sha256/{}",
        mirror_server.url(),
        digest.to_hex()
    ))
    .call()
    .expect("get");
    let got = r
        .body_mut()
        .with_config()
        .limit(16 << 20)
        .read_to_vec()
        .expect("body");
    assert_eq!(Sha256Digest::of(&got), digest);
    assert_eq!(state(&mirror_server)["altered"], 1);
}

#[test]
fn ferry_mirror_sync_fills_a_mirror_before_its_devices_ask() {
    let origin = TestApp::start();
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("w.bin"), noise(1 << 20, 43)).expect("write");
    let (m, _) = origin.publish(&ferry_tests::releases::portable_with_asset(
        "fill",
        "1.0.0",
        &dir.path().join("w.bin"),
    ));
    let files = m.variants[0].size + m.variants[0].assets[0].size;
    let trust = origin.dir.path().join("keys/trust.json");
    let site = mirror(&origin.url(), &trust, &dir.path().join("mirror"));
    let sync = |model: &str| {
        ferry_tests::signers::ferry()
            .args(["--json", "mirror", "sync", model, "--server", &site.url()])
            .args(["--token", ADMIN_TOKEN])
            .output()
            .expect("ferry mirror sync")
    };
    let out = sync("fill");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(done["releases"], serde_json::json!(["1.0.0"]), "{done}");
    // The program, the asset and the signed release manifest, all fetched now.
    assert_eq!(done["files"], 3, "{done}");
    let manifest = done["bytes"].as_u64().expect("bytes") - files;
    assert!((100..65536).contains(&manifest), "{done}");
    assert_eq!(done["fetched_bytes"], done["bytes"], "{done}");
    // Filled: a device on the site costs the origin no blob byte.
    let before = origin.blob_bytes_served();
    let c = client(&site.url(), &origin, &dir.path().join("d"));
    c.load("fill", &device("fill-1")).expect("loads");
    assert_eq!(origin.blob_bytes_served(), before);
    // Again: nothing to fetch. An unknown model: not found (exit 4), said clearly.
    let again: serde_json::Value = serde_json::from_slice(&sync("fill").stdout).expect("json");
    assert_eq!(again["fetched_bytes"], 0, "{again}");
    // The mirror says of a batch what the origin would: the size bound, each bad event.
    let post = |body: String| {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let mut r = agent
            .post(format!("{}/v1/telemetry", site.url()))
            .header("content-type", "application/json")
            .send(body.as_bytes())
            .expect("post");
        let text = r.body_mut().read_to_string().expect("body");
        (
            r.status().as_u16(),
            serde_json::from_str::<serde_json::Value>(&text).expect("json"),
        )
    };
    let good = ferry_tests::kit::Event::load("fill", "1.0.0", "portable-fp32").json();
    let (status, body) = post(format!(r#"{{"events": [{good}, 1, {{"kind": "load"}}]}}"#));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["accepted"], 1, "{body}");
    let rejected: Vec<u64> = body["rejected"]
        .as_array()
        .expect("rejected")
        .iter()
        .map(|r| r["index"].as_u64().expect("index"))
        .collect();
    assert_eq!(rejected, [1, 2], "{body}");
    let many = vec![good.to_string(); 501].join(",");
    let (status, body) = post(format!(r#"{{"events": [{many}]}}"#));
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("too_many_events")),
        "{body}"
    );
    let out = sync("nothere");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothere"));
}

#[test]
fn a_mirror_serves_its_devices_over_https_from_an_https_origin() {
    use super::clock_https::{current, https_app};
    use super::e2e::phone;
    use base64::Engine as _;
    let origin_pki = current();
    let origin = https_app(&origin_pki, None);
    let dir = tempfile::tempdir().expect("tmp");
    // The mirror checks the origin against the origin's CA (FERRY_ORIGIN_CA, PEM).
    let ca_pem = dir.path().join("origin-ca.pem");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&origin_pki.ca_der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("ascii"))
        .collect();
    std::fs::write(
        &ca_pem,
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            lines.join("\n")
        ),
    )
    .expect("write");
    let site_pki = current();
    let (cert, key) = (site_pki.cert.clone(), site_pki.key.clone());
    let site = mirror_with(
        &origin.url(),
        &origin.dir.path().join("keys/trust.json"),
        &dir.path().join("mirror"),
        |config, opts| {
            config.tls = Some(ferry_server::app::config::TlsConfig { cert, key });
            opts.origin_ca = Some(ca_pem);
        },
    );
    assert!(site.url().starts_with("https://"));
    let c = origin
        .client_at(&site.url(), &dir.path().join("d"))
        .app_version(semver::Version::new(2, 0, 0))
        .download_limits(ferry_tests::kit::quick_limits())
        .root_certificate_der(site_pki.ca_der.clone())
        .build()
        .expect("client");
    let m = c
        .load(
            "mlp",
            &phone(ferry_shared::manifest::Platform::Linux, &["XnnpackBackend"]),
        )
        .expect("loads through the HTTPS mirror");
    assert_eq!(m.release, "1.0.0");
    assert!(site.mirror.state()["held"]["files"].as_u64().unwrap_or(0) >= 2);
}

#[test]
fn a_release_revoked_on_the_origin_is_not_served_from_the_mirror_in_an_outage() {
    use ferry_shared::trust::revocation::REVOCATIONS_PAYLOAD_TYPE;
    let mut origin = TestApp::start();
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("w.bin"), noise(64 << 10, 47)).expect("write");
    origin.publish(&ferry_tests::releases::portable_with_asset(
        "gone",
        "1.0.0",
        &dir.path().join("w.bin"),
    ));
    let trust = origin.dir.path().join("keys/trust.json");
    let site = mirror(&origin.url(), &trust, &dir.path().join("mirror"));
    let c = client(&site.url(), &origin, &dir.path().join("d"));
    c.resolve("gone", &device("gone-1"))
        .expect("learns the time");
    c.resolve("gone", &device("gone-1"))
        .expect("the shared answer");
    assert_eq!(state(&site)["kept_answers"], 1);
    // The release is revoked: the origin refuses the class, and the mirror forgets its answer.
    let list = ferry_tests::releases::revocation_list("gone", 1, &["1.0.0"], "bad build");
    let env = origin.release_key().pair.sign(
        REVOCATIONS_PAYLOAD_TYPE,
        &serde_json::to_vec(&list).expect("json"),
    );
    let (s, b) = origin.post_raw(
        "/v1/admin/models/gone/revocations",
        &serde_json::to_vec(&env).expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 201, "{b}");
    let refused = c.resolve("gone", &device("gone-1")).expect_err("revoked");
    assert_eq!(refused.code(), "no_compatible_variant", "{refused}");
    assert_eq!(state(&site)["kept_answers"], 0);
    // In the outage that follows, the mirror has nothing to serve for it.
    let placeholder = origin.try_replica_at("127.0.0.1:0").expect("placeholder");
    std::mem::replace(&mut origin.server, placeholder).stop();
    let err = c
        .resolve("gone", &device("gone-1"))
        .expect_err("nothing kept");
    assert_eq!(err.code(), "origin_unavailable", "{err}");
}

#[test]
fn a_mirror_keeps_within_its_disk_budget_by_evicting_what_was_served_longest_ago() {
    let origin = TestApp::start();
    let dir = tempfile::tempdir().expect("tmp");
    let mut assets = Vec::new();
    for (model, seed) in [("old", 51), ("new", 52)] {
        let path = dir.path().join(format!("{model}.bin"));
        std::fs::write(&path, noise(1 << 20, seed)).expect("write");
        let (m, _) = origin.publish(&ferry_tests::releases::portable_with_asset(
            model, "1.0.0", &path,
        ));
        assets.push(m.variants[0].assets[0].size);
    }
    let budget = (3 << 20) / 2;
    let site = mirror_with(
        &origin.url(),
        &origin.dir.path().join("keys/trust.json"),
        &dir.path().join("mirror"),
        |config, _| config.mirror_max_held_bytes = Some(budget),
    );
    let load = |model: &str, device_dir: &str| {
        let c = client(&site.url(), &origin, &dir.path().join(device_dir));
        c.load(model, &device(device_dir)).expect("loads");
    };
    load("old", "d1");
    load("new", "d2");
    let s = site.mirror.state();
    assert!(s["held"]["bytes"].as_u64().expect("bytes") <= budget, "{s}");
    assert!(s["evicted"].as_u64().unwrap_or(0) >= 1, "{s}");
    // The evicted asset is fetched again when a device asks for it.
    let before = origin.blob_bytes_served();
    load("old", "d3");
    assert!(origin.blob_bytes_served() - before >= assets[0]);
    assert!(
        site.mirror.state()["held"]["bytes"]
            .as_u64()
            .expect("bytes")
            <= budget
    );
}
