//! First-install bytes (issue 49): `ferry publish` (the real binary) stores each file's
//! `ferry-grouped-zstd` encoding beside it when that saves at least 5%, the server sends it for
//! whole-file downloads that ask for it, and the real client decodes it as it arrives and checks
//! the result against the signed digest. An encoding that does not decode to the blob is
//! refused at upload; one damaged in the store, or a download cut part way, still ends in the
//! signed bytes (the rest comes as the file's own bytes). Through Varnish, encoded and plain
//! answers are cached apart.

use std::path::Path;
use std::sync::Arc;

use ferry_client::{Client, DownloadLimits};
use ferry_shared::Sha256Digest;
use ferry_tests::app::{ADMIN_TOKEN, TestApp};
use ferry_tests::kit::device;
use ferry_tests::proxy::{Fault, FaultProxy};
use ferry_tests::signers::ferry;
use ferry_tests::varnish::Varnish;

use super::delta::noise;

/// Float32 weights as training leaves them: small values around zero (a seeded Box-Muller),
/// whose sign-and-exponent bytes repeat and whose mantissas do not.
fn weights(count: usize, seed: u64) -> Vec<u8> {
    let uniform = noise(count * 8, seed);
    uniform
        .chunks_exact(8)
        .flat_map(|c| {
            let u1 = (f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])) + 1.0) / 4.3e9;
            let u2 = f64::from(u32::from_le_bytes([c[4], c[5], c[6], c[7]])) / 4.3e9;
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            ((z * 0.02) as f32).to_le_bytes()
        })
        .collect()
}

/// A client of `url` for `app` with its cache in `cache`, asking for encoded files or not.
fn client(url: &str, app: &TestApp, cache: &Path, compressed: bool) -> Arc<Client> {
    super::delta::client_with_limits(
        url,
        app,
        cache,
        DownloadLimits {
            retries: 3,
            backoff: std::time::Duration::from_millis(10),
            compressed,
            ..Default::default()
        },
    )
}

/// Signs model `model` 1.0.0 (the portable program with `asset`) and publishes it with the
/// `ferry` binary; its `--json` answer.
fn publish(app: &TestApp, model: &str, asset: &[u8], dir: &Path) -> serde_json::Value {
    publish_with(app, &app.url(), model, asset, dir, &[])
}

/// [`publish`] to the server at `server` (a replica of `app`), with `env` set for `ferry`.
fn publish_with(
    app: &TestApp,
    server: &str,
    model: &str,
    asset: &[u8],
    dir: &Path,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let files = dir.join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    std::fs::write(files.join("weights.bin"), asset).expect("asset");
    let spec =
        ferry_tests::releases::portable_with_asset(model, "1.0.0", &files.join("weights.bin"));
    let (_, envelope, paths) =
        ferry_tests::releases::signed_release_files(&spec, &app.release_key());
    for p in &paths {
        let to = files.join(p.file_name().expect("name"));
        if !to.exists() {
            std::fs::copy(p, &to).expect("copy");
        }
    }
    let release = dir.join("release.json");
    std::fs::write(&release, serde_json::to_vec(&envelope).expect("json")).expect("release");
    let out = ferry()
        .arg("publish")
        .arg(&release)
        .arg("--files")
        .arg(&files)
        .args(["--server", server, "--token", ADMIN_TOKEN, "--json"])
        .envs(env.iter().copied())
        .output()
        .expect("ferry publish");
    assert!(
        out.status.success(),
        "publish: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("publish --json");
    // What `ferry publish --json` prints is what `schemas/cli.schema.json` describes.
    let mut schema = serde_json::json!({"$ref": "cli.schema.json#/$defs/publish"});
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema".into();
    schema["$id"] = format!("{}publish-check.json", ferry_tests::schemas::BASE).into();
    let errors: Vec<String> = ferry_tests::schemas::validator_for(&schema)
        .iter_errors(&report)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{report}");
    report
}

/// The `compressed` report of the published file `digest`.
fn compressed_of(report: &serde_json::Value, digest: &Sha256Digest) -> serde_json::Value {
    report["blobs"]
        .as_array()
        .expect("blobs")
        .iter()
        .find(|b| b["sha256"] == digest.to_hex())
        .unwrap_or_else(|| panic!("{digest} not in {report}"))["compressed"]
        .clone()
}

/// `PUT /v1/admin/blobs/sha256/<digest>/grouped-zstd` with `body`: the status and the error
/// code.
fn put_encoding(app: &TestApp, digest: &Sha256Digest, body: &[u8]) -> (u16, String) {
    let mut resp = app
        .agent
        .put(app.at(&format!(
            "/v1/admin/blobs/sha256/{}/grouped-zstd",
            digest.to_hex()
        )))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .send(body)
        .expect("upload");
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    (
        resp.status().as_u16(),
        v["code"].as_str().unwrap_or_default().to_string(),
    )
}

/// The encoding of `bytes`, made as `ferry publish` makes it.
fn encoding_of(bytes: &[u8], width: u8) -> Vec<u8> {
    ferry_fs::grouped::encode(bytes, bytes.len() as u64, width, Vec::new()).expect("encode")
}

/// The bytes of the loaded model's asset.
fn asset_of(m: &ferry_client::LoadedModel) -> Vec<u8> {
    std::fs::read(m.asset("weights.bin").expect("asset")).expect("read asset")
}

/// A server that signs its own blob route as the one source (so downloads report per source)
/// and writes telemetry at once.
fn sourced() -> TestApp {
    TestApp::start_with(ferry_tests::app::Options {
        tweak: Some(Box::new(|c| {
            ferry_tests::fast_telemetry(c);
            c.sources = vec!["/v1/blobs/sha256/".into()];
        })),
        ..Default::default()
    })
}

#[test]
fn ferry_publish_stores_an_encoding_and_devices_download_it_checked() {
    let app = sourced();
    let dir = tempfile::tempdir().expect("tmp");
    let asset = weights(1 << 20, 5); // 4 MiB
    let report = publish(&app, "packed", &asset, dir.path());
    let digest = Sha256Digest::of(&asset);
    let c = compressed_of(&report, &digest);
    assert_eq!(c["encoding"], "ferry-grouped-zstd", "{report}");
    assert_eq!(c["uploaded"], true);
    let encoded = c["size"].as_u64().expect("size");
    assert!(
        encoded * 100 < asset.len() as u64 * 90,
        "float weights save at least 10%: {encoded} of {}",
        asset.len()
    );
    // Publishing again finds the encoding there.
    let again = publish(&app, "packed", &asset, dir.path());
    assert_eq!(again["state"], "identical");
    assert_eq!(compressed_of(&again, &digest)["uploaded"], false);

    // A device downloads the encoded files: fewer bytes leave the server, the signed bytes
    // reach the cache.
    let before = app.blob_bytes_served();
    let c1 = client(&app.url(), &app, &dir.path().join("d1"), true);
    let m = c1.load("packed", &device("packed-1")).expect("loads");
    assert_eq!(asset_of(&m), asset);
    let sent = app.blob_bytes_served() - before;
    let program = std::fs::metadata(&m.path).expect("program").len();
    assert!(
        sent < program + encoded + 1024,
        "sent {sent}; program {program}, encoded asset {encoded}"
    );
    assert!(
        app.counter("ferry_blob_grouped_zstd_answers_total")
            .expect("the metric")
            >= 1
    );
    // The load report and the download event say what came encoded.
    let used = &m.report.sources;
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0].encoded_bytes, used[0].bytes, "{used:?}");
    assert_eq!(used[0].bytes, program + asset.len() as u64, "{used:?}");
    assert_eq!(used[0].encoding_failures, 0, "{used:?}");
    assert!(c1.send_telemetry().sent >= 1);
    let table = ferry_tests::duckdb::events_table(&app.store_dir());
    ferry_tests::until("the download event's sources reached the raw log", || {
        app.stored_files()
            .iter()
            .any(|f| f.starts_with("telemetry/events/"))
            && ferry_tests::duckdb::query(&format!(
                "SELECT sources FROM {table} WHERE kind = 'download' AND install_id = 'packed-1'"
            ))
            .iter()
            .any(|r| {
                r["sources"]
                    .as_str()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
                    .is_some_and(|v| v[0]["encoded_bytes"] == used[0].bytes)
            })
    });

    // A client that does not ask gets the files as they are.
    let before = app.blob_bytes_served();
    let plain = client(&app.url(), &app, &dir.path().join("d2"), false)
        .load("packed", &device("packed-2"))
        .expect("loads");
    assert_eq!(asset_of(&plain), asset);
    assert!(app.blob_bytes_served() - before >= asset.len() as u64);
}

#[test]
fn an_encoding_that_is_not_the_blob_is_refused_and_a_damaged_one_never_reaches_a_device() {
    let app = sourced();
    let dir = tempfile::tempdir().expect("tmp");
    let asset = weights(1 << 20, 9);
    let path = dir.path().join("weights.bin");
    std::fs::write(&path, &asset).expect("asset");
    app.publish(&ferry_tests::releases::portable_with_asset(
        "guarded", "1.0.0", &path,
    ));
    let digest = Sha256Digest::of(&asset);
    // Not an encoding; another file's encoding; a blob the server lacks; an encoding that
    // is not smaller than its blob; a truncated one.
    assert_eq!(
        put_encoding(&app, &digest, b"not zstd at all"),
        (400, "request_malformed".into())
    );
    let mut other = asset.clone();
    other[1000] ^= 1;
    assert_eq!(
        put_encoding(&app, &digest, &encoding_of(&other, 4)),
        (422, "hash_mismatch".into())
    );
    let stranger = weights(1000, 3);
    assert_eq!(
        put_encoding(
            &app,
            &Sha256Digest::of(&stranger),
            &encoding_of(&stranger, 4)
        ),
        (404, "blob_not_found".into())
    );
    let random = noise(256 << 10, 77);
    assert!(matches!(app.put_blob(&random), 200 | 201));
    assert_eq!(
        put_encoding(&app, &Sha256Digest::of(&random), &encoding_of(&random, 1)),
        (400, "request_malformed".into())
    );
    let good = encoding_of(&asset, 4);
    assert_eq!(
        put_encoding(&app, &digest, &good[..good.len() / 2]),
        (400, "request_malformed".into())
    );
    // Anything after the frame (devices would be served it).
    for tail in [&b"junk"[..], &noise(200 << 10, 5)] {
        let mut longer = good.clone();
        longer.extend_from_slice(tail);
        assert_eq!(
            put_encoding(&app, &digest, &longer),
            (400, "request_malformed".into()),
            "{} bytes after the frame",
            tail.len()
        );
    }
    let stored = app
        .store_dir()
        .join("encoded/grouped-zstd/sha256")
        .join(digest.to_hex());
    assert!(!stored.exists(), "nothing refused was stored");

    // A good one is kept; then its stored bytes are damaged.
    assert_eq!(put_encoding(&app, &digest, &good).0, 201);
    let mut bytes = std::fs::read(&stored).expect("stored encoding");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&stored, &bytes).expect("damage");
    let before = app.blob_bytes_served();
    let m = client(&app.url(), &app, &dir.path().join("d1"), true)
        .load("guarded", &device("guarded-1"))
        .expect("loads from the plain file");
    assert_eq!(asset_of(&m), asset);
    let used = &m.report.sources;
    assert_eq!(used[0].encoding_failures, 1, "{used:?}");
    assert!(used[0].encoded_bytes < used[0].bytes, "{used:?}");
    assert!(
        app.blob_bytes_served() - before >= asset.len() as u64,
        "the asset came as it is after the encoding failed"
    );
    // Uploading the encoding again replaces the damaged one (the local store checks it).
    assert_eq!(put_encoding(&app, &digest, &good).0, 201);
    assert_eq!(std::fs::read(&stored).expect("stored"), good);
}

#[test]
fn an_encoded_download_cut_part_way_resumes_with_the_files_own_bytes() {
    let app = TestApp::start();
    let dir = tempfile::tempdir().expect("tmp");
    let asset = weights(2 << 20, 11); // 8 MiB
    publish(&app, "cut", &asset, dir.path());
    let proxy = FaultProxy::start(app.server.addr);
    // The first two blob answers (the program's, whose body is far shorter, and the asset's)
    // are cut at 3 MiB.
    proxy.blob_faults([Fault::CutAt(3 << 20), Fault::CutAt(3 << 20)]);
    let m = client(&proxy.url(), &app, &dir.path().join("d1"), true)
        .load("cut", &device("cut-1"))
        .expect("loads after the cut");
    assert_eq!(asset_of(&m), asset);
    let asset_url = format!("/v1/blobs/sha256/{}", Sha256Digest::of(&asset).to_hex());
    let ranges: Vec<Option<String>> = proxy
        .log()
        .into_iter()
        .filter(|l| l.line.contains(&asset_url))
        .map(|l| l.range)
        .collect();
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[0], None);
    let resumed_at: u64 = ranges[1]
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("not a resume: {ranges:?}"));
    assert!(
        resumed_at > 0 && resumed_at.is_multiple_of(u64::from(ferry_fs::grouped::BLOCK)),
        "resumed from the decoded blocks kept: {resumed_at}"
    );
}

#[test]
fn a_file_written_again_plain_after_an_encoded_head_reports_no_encoded_bytes() {
    let app = sourced();
    let dir = tempfile::tempdir().expect("tmp");
    let asset = weights(2 << 20, 29); // 8 MiB
    publish(&app, "again", &asset, dir.path());
    let proxy = FaultProxy::start(app.server.addr);
    // The encoded asset is cut at 3 MiB (the program's answer is shorter than that); its resume
    // meets a cache that ignores Range and sends the plain file whole from its start.
    proxy.blob_faults([
        Fault::CutAt(3 << 20),
        Fault::CutAt(3 << 20),
        Fault::IgnoreRange,
    ]);
    let m = client(&proxy.url(), &app, &dir.path().join("d1"), true)
        .load("again", &device("again-1"))
        .expect("loads");
    assert_eq!(asset_of(&m), asset);
    let program = std::fs::metadata(&m.path).expect("program").len();
    let used = &m.report.sources;
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0].bytes, program + asset.len() as u64, "{used:?}");
    assert_eq!(
        used[0].encoded_bytes, program,
        "only the program came encoded: {used:?}"
    );
    assert_eq!(used[0].encoding_failures, 0, "{used:?}");
}

#[test]
fn varnish_caches_encoded_and_plain_answers_apart() {
    let app = TestApp::start();
    let dir = tempfile::tempdir().expect("tmp");
    let asset = weights(1 << 20, 13);
    publish(&app, "edge", &asset, dir.path());
    let cdn = Varnish::in_front_of(app.server.addr);
    let load = |name: &str, compressed: bool| {
        let m = client(&cdn.url, &app, &dir.path().join(name), compressed)
            .load("edge", &device(name))
            .expect("loads");
        assert_eq!(asset_of(&m), asset, "{name}");
    };
    load("e1", true);
    let after_first = app.blob_bytes_served();
    assert!(after_first < asset.len() as u64, "{after_first}");
    let hits = cdn.counter("MAIN.cache_hit");
    load("e2", true);
    assert_eq!(
        app.blob_bytes_served(),
        after_first,
        "e2 came from the cache"
    );
    let hits = cdn.counter_at_least("MAIN.cache_hit", hits + 2);
    // A device that does not ask gets the plain file, fetched once from ferry, then cached.
    load("p1", false);
    let after_plain = app.blob_bytes_served();
    assert!(after_plain - after_first >= asset.len() as u64);
    load("p2", false);
    assert_eq!(
        app.blob_bytes_served(),
        after_plain,
        "p2 came from the cache"
    );
    let hits = cdn.counter_at_least("MAIN.cache_hit", hits + 2);
    // A device that asks after them still gets the encoding from the cache.
    let sent = cdn.counter("MAIN.s_resp_bodybytes");
    load("e3", true);
    assert_eq!(
        app.blob_bytes_served(),
        after_plain,
        "e3 came from the cache"
    );
    let to_e3 = cdn.counter("MAIN.s_resp_bodybytes") - sent;
    assert!(
        to_e3 < asset.len() as u64,
        "e3 got the encoding: {to_e3} bytes"
    );
    cdn.counter_at_least("MAIN.cache_hit", hits + 2);
}

#[test]
fn publishing_goes_on_without_the_encoding_when_it_cannot_be_made() {
    let app = TestApp::start();
    let dir = tempfile::tempdir().expect("tmp");
    let asset = weights(1 << 18, 17);
    // No temporary file can be made: a warning, and the release is published.
    let report = publish_with(
        &app,
        &app.url(),
        "warned",
        &asset,
        dir.path(),
        &[("TMPDIR", "/nonexistent/ferry-tmp")],
    );
    assert_eq!(report["state"], "published", "{report}");
    let c = compressed_of(&report, &Sha256Digest::of(&asset));
    assert_eq!(c["encoding"], serde_json::Value::Null, "{report}");
    assert!(
        c["error"].as_str().is_some_and(|e| e.contains("TMPDIR")),
        "{report}"
    );
    let m = client(&app.url(), &app, &dir.path().join("d1"), true)
        .load("warned", &device("warned-1"))
        .expect("loads the plain file");
    assert_eq!(asset_of(&m), asset);
    // Running it again adds the encoding.
    let again = publish(&app, "warned", &asset, dir.path());
    assert_eq!(again["state"], "identical");
    assert_eq!(
        compressed_of(&again, &Sha256Digest::of(&asset))["uploaded"],
        true
    );
}

/// `GET` (or `HEAD`) of blob `digest` at `server` asking for the encoding: whether it came
/// encoded, and the body decoded when it did (as it is otherwise).
fn fetch_encoded(server: &str, digest: &Sha256Digest, head: bool) -> (bool, Vec<u8>) {
    let url = format!("{server}/v1/blobs/sha256/{}", digest.to_hex());
    let agent = ureq::Agent::new_with_defaults();
    let mut resp = if head {
        agent
            .head(&url)
            .header("accept-encoding", ferry_fs::grouped::CODING)
            .call()
    } else {
        agent
            .get(&url)
            .header("accept-encoding", ferry_fs::grouped::CODING)
            .call()
    }
    .expect("blob");
    let coded = resp
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v == ferry_fs::grouped::CODING);
    if head {
        return (coded, Vec::new());
    }
    let mut body = resp.body_mut().with_config().limit(64 << 20).reader();
    let mut out = Vec::new();
    if coded {
        use std::io::Read as _;
        ferry_fs::grouped::Decoder::new(std::io::BufReader::new(body))
            .and_then(|mut d| d.read_to_end(&mut out))
            .expect("decodes");
    } else {
        std::io::copy(&mut body, &mut out).expect("body");
    }
    (coded, out)
}

#[test]
fn three_replicas_on_s3_serve_the_encoding_one_of_them_stored_and_so_does_a_restarted_one() {
    let moto = ferry_tests::moto::Moto::start("ferry-encoded");
    let storage = moto.storage("ferry-encoded");
    let s = storage.clone();
    let app = TestApp::start_with(ferry_tests::app::Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(move |c| c.storage = s)),
    });
    let mut replicas: Vec<_> = (0..2).map(|_| app.replica(Some(storage.clone()))).collect();
    let dir = tempfile::tempdir().expect("tmp");
    let asset = weights(1 << 20, 23);
    let digest = Sha256Digest::of(&asset);
    // Published through the second replica.
    let report = publish_with(&app, &replicas[0].url(), "spread", &asset, dir.path(), &[]);
    assert_eq!(
        compressed_of(&report, &digest)["uploaded"],
        true,
        "{report}"
    );
    let urls = |replicas: &[ferry_server::app::startup::RunningServer]| {
        std::iter::once(app.url())
            .chain(replicas.iter().map(|r| r.url()))
            .collect::<Vec<_>>()
    };
    for url in urls(&replicas) {
        assert_eq!(
            fetch_encoded(&url, &digest, false),
            (true, asset.clone()),
            "{url}"
        );
        assert!(fetch_encoded(&url, &digest, true).0, "HEAD at {url}");
    }
    // A device on the third replica (which learns of the release from the store).
    let c = client(&replicas[1].url(), &app, &dir.path().join("d1"), true);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let m = loop {
        match c.load("spread", &device("spread-1")) {
            Ok(m) => break m,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(e) => panic!("the third replica never served the release: {e}"),
        }
    };
    assert_eq!(asset_of(&m), asset);
    // A replica started again serves the encoding from the store.
    replicas.pop();
    replicas.push(app.replica(Some(storage.clone())));
    let restarted = replicas[1].url();
    assert_eq!(fetch_encoded(&restarted, &digest, false), (true, asset));
}
