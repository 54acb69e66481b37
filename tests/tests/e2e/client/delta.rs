//! Delta updates end to end: releases signed with chunk indexes by `ferry sign`'s builder,
//! published to the real server, and a real client (real ExecuTorch runtime) that builds the
//! new release's large file from the chunks its cache holds, fetching only the rest with
//! `Range` requests; a hostile server (a wrong chunk, a lying range answer, ranges ignored, an
//! index that is not the signed one) never gets a wrong byte into the cache; a download killed
//! part way keeps its complete chunks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_client::Client;
use ferry_server::release::sign::VariantsFile;
use ferry_shared::Sha256Digest;
use ferry_tests::app::TestApp;
use ferry_tests::kit::device;
use ferry_tests::proxy::{Fault, FaultProxy};

/// Size of the large asset (a stand-in for a `.ptd` of weights or a tokenizer).
pub(crate) const LARGE: usize = 24 << 20;

/// Pseudo-random bytes from a seed (xorshift): incompressible, like weights.
pub(crate) fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// `v1` with 5% of its bytes rewritten in one region (a fine-tune of the last layers).
pub(crate) fn fine_tuned(v1: &[u8]) -> Vec<u8> {
    let mut v2 = v1.to_vec();
    let from = v2.len() / 2;
    let to = from + v2.len() / 20;
    for (i, b) in v2[from..to].iter_mut().enumerate() {
        *b = b.wrapping_add(1 + (i % 7) as u8);
    }
    v2
}

/// Model `delta` at `version`: the portable MLP with `asset` as its `weights.bin`.
fn spec(version: &str, asset: &Path) -> VariantsFile {
    spec_of("delta", version, asset)
}

/// [`spec`] for another model.
fn spec_of(model: &str, version: &str, asset: &Path) -> VariantsFile {
    ferry_tests::releases::portable_with_asset(model, version, asset)
}

pub(crate) fn client(url: &str, app: &TestApp, cache: &Path) -> Arc<Client> {
    client_with(url, app, cache, 64 << 20)
}

/// [`client`] that keeps `headroom` bytes free on the cache's filesystem.
fn client_with(url: &str, app: &TestApp, cache: &Path, headroom: u64) -> Arc<Client> {
    let limits = ferry_client::DownloadLimits {
        retries: 2,
        backoff: std::time::Duration::from_millis(10),
        headroom,
        ..Default::default()
    };
    client_with_limits(url, app, cache, limits)
}

/// A client of `url` for `app` with its cache in `cache` and these download limits.
pub(crate) fn client_with_limits(
    url: &str,
    app: &TestApp,
    cache: &Path,
    limits: ferry_client::DownloadLimits,
) -> Arc<Client> {
    Arc::new(
        app.client_at(url, cache)
            .download_limits(limits)
            .build()
            .expect("client"),
    )
}

/// The server's count of blob bytes it served.
pub(crate) fn served(app: &TestApp) -> u64 {
    app.blob_bytes_served()
}

/// A test's world: a server with `delta` 1.0.0 (asset `v1`) published and loaded once by a
/// client into `cache`, and 2.0.0 (asset `v2`) published and shipped.
pub(crate) struct World {
    pub(crate) app: TestApp,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) v2: Vec<u8>,
}

impl World {
    pub(crate) fn new(v1: &[u8], v2: Vec<u8>) -> World {
        let app = TestApp::start_with(ferry_tests::app::Options {
            demo: false,
            keys: None,
            store: None,
            tweak: Some(Box::new(ferry_tests::fast_telemetry)),
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let (p1, p2) = (dir.path().join("v1"), dir.path().join("v2"));
        std::fs::create_dir_all(&p1).expect("dir");
        std::fs::create_dir_all(&p2).expect("dir");
        std::fs::write(p1.join("weights.bin"), v1).expect("write");
        std::fs::write(p2.join("weights.bin"), &v2).expect("write");
        let (m1, _) = app.publish(&spec("1.0.0", &p1.join("weights.bin")));
        let asset = &m1.variants[0].assets[0];
        assert!(
            asset.chunk_index.is_some(),
            "a {LARGE}-byte asset is signed with a chunk index"
        );
        let world = World { app, dir, v2 };
        let c = client(&world.app.url(), &world.app, &world.cache());
        c.load("delta", &device("delta-device"))
            .expect("1.0.0 loads");
        // A first install downloads the file whole, then keeps its signed index (fetched
        // after the file), so that an update need not cut the cached file again.
        assert_eq!(
            world.memo(&asset.sha256).map(|i| i.reference()),
            asset.chunk_index,
            "the cache keeps 1.0.0's chunk index"
        );
        let (m2, _) = world.app.publish(&spec("2.0.0", &p2.join("weights.bin")));
        assert_ne!(m2.variants[0].assets[0].sha256, asset.sha256);
        world.app.ship_model("delta", "2.0.0");
        world
    }

    pub(crate) fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// The chunk index the cache keeps for blob `d`, if any.
    pub(crate) fn memo(
        &self,
        d: &Sha256Digest,
    ) -> Option<ferry_shared::manifest::chunks::ChunkIndex> {
        let path = self
            .cache()
            .join("chunks")
            .join(format!("{}.json", d.to_hex()));
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Loads 2.0.0 through `url`; checks that the asset is exactly v2 and that no file in the
    /// cache holds other bytes than its name says.
    pub(crate) fn load_v2(&self, url: &str) -> Arc<Client> {
        let c = client(url, &self.app, &self.cache());
        let m = c
            .load("delta", &device("delta-device"))
            .expect("2.0.0 loads");
        assert_eq!(m.release, "2.0.0");
        let got = std::fs::read(m.asset("weights.bin").expect("asset")).expect("read");
        assert!(got == self.v2, "the asset is v2's bytes");
        self.assert_cache_verified();
        c
    }

    /// Every blob in the cache hashes to its name.
    fn assert_cache_verified(&self) {
        let blobs = self.cache().join("blobs/sha256");
        for e in std::fs::read_dir(&blobs).expect("blobs").flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Ok(d) = Sha256Digest::from_hex(&name) {
                let bytes = std::fs::read(e.path()).expect("blob");
                assert_eq!(Sha256Digest::of(&bytes), d, "cached blob {name}");
            }
        }
    }
}

#[test]
fn a_fine_tune_downloads_only_the_changed_chunks() {
    let v1 = noise(LARGE, 1);
    let world = World::new(&v1, fine_tuned(&v1));
    let before = served(&world.app);
    let c = world.load_v2(&world.app.url());
    let sent = served(&world.app) - before;
    // 5% of the file changed; the chunks around the change and the index come with it.
    assert!(
        sent <= LARGE as u64 / 10,
        "{sent} bytes sent for a {LARGE}-byte file with 5% changed"
    );
    assert!(sent >= LARGE as u64 / 20, "{sent}: the changed bytes came");
    // The download event says so, as DuckDB reads it from the raw log.
    assert!(c.send_telemetry().sent >= 1);
    let table = ferry_tests::duckdb::events_table(&world.app.store_dir());
    let mut rows = Vec::new();
    ferry_tests::until("the download event is in the raw log", || {
        let written = world
            .app
            .stored_files()
            .iter()
            .any(|f| f.starts_with("telemetry/events/"));
        if !written {
            return false;
        }
        rows = ferry_tests::duckdb::query(&format!(
            "SELECT bytes_fetched, bytes_total FROM {table} \
             WHERE kind = 'download' AND release = '2.0.0'"
        ));
        !rows.is_empty()
    });
    assert_eq!(rows[0]["bytes_total"].as_u64(), Some(LARGE as u64));
    let fetched = rows[0]["bytes_fetched"].as_u64().expect("bytes_fetched");
    assert!(
        fetched <= sent && fetched >= LARGE as u64 / 20,
        "{fetched} of {sent}"
    );
    // The server's figure of what a device on 1.0.0 downloads is what this one fetched.
    let (status, model) = world.app.get_json(
        "/v1/admin/models/delta",
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    assert_eq!(status, 200, "{model}");
    let variant = |version: &str| {
        model["releases"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["version"] == version))
            .map(|r| r["variants"][0].clone())
            .expect("release")
    };
    assert_eq!(variant("2.0.0")["update_bytes"].as_u64(), Some(fetched));
    assert_eq!(variant("2.0.0")["update_from"], "1.0.0");
    assert!(variant("1.0.0").get("update_bytes").is_none());
    // A release newer than the live one is measured from the live one (what devices run),
    // not from the release published just before it.
    let p3 = world.dir.path().join("v3");
    std::fs::create_dir_all(&p3).expect("dir");
    std::fs::write(p3.join("weights.bin"), noise(LARGE, 21)).expect("write");
    world.app.publish(&spec("3.0.0", &p3.join("weights.bin")));
    let p4 = world.dir.path().join("v4");
    std::fs::create_dir_all(&p4).expect("dir");
    std::fs::write(p4.join("weights.bin"), &world.v2).expect("write");
    world.app.publish(&spec("4.0.0", &p4.join("weights.bin")));
    let (_, model) = world.app.get_json(
        "/v1/admin/models/delta",
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    let variant = |version: &str| {
        model["releases"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["version"] == version))
            .map(|r| r["variants"][0].clone())
            .expect("release")
    };
    assert_eq!(variant("4.0.0")["update_from"], "2.0.0");
    assert_eq!(
        variant("4.0.0")["update_bytes"].as_u64(),
        Some(0),
        "4.0.0 has 2.0.0's bytes (and the same program)"
    );
    assert_eq!(variant("3.0.0")["update_from"], "2.0.0");
}

#[test]
fn an_unrelated_file_is_downloaded_whole_and_only_once() {
    let world = World::new(&noise(LARGE, 1), noise(LARGE, 2));
    let before = served(&world.app);
    world.load_v2(&world.app.url());
    let sent = served(&world.app) - before;
    // The index (small) and the file once: no chunk of it is in the cache.
    assert!(sent >= LARGE as u64, "{sent}");
    assert!(sent <= LARGE as u64 + LARGE as u64 / 100, "{sent}");
    // The index fetched for the delta is kept for the new blob.
    let v2 = Sha256Digest::of(&world.v2);
    assert_eq!(
        world.memo(&v2).map(|i| i.size),
        Some(LARGE as u64),
        "the cache keeps 2.0.0's chunk index"
    );
}

#[test]
fn a_hostile_server_never_gets_a_wrong_byte_into_the_cache() {
    let v1 = noise(LARGE, 3);
    // Each case: the faults on the blob answers after 2.0.0's release is fetched.
    let cases: Vec<(&str, Vec<Fault>)> = vec![
        // The index fetch answered with other bytes (not the signed index).
        (
            "index not signed",
            vec![Fault::Replace(b"{\"format\":1}".to_vec())],
        ),
        // A fetched chunk with one bit flipped.
        ("wrong chunk", vec![Fault::Pass, Fault::FlipByte(1000)]),
        // Other bytes under the Content-Range asked for.
        ("lying range", vec![Fault::Pass, Fault::LieRange]),
        // Ranges ignored: the whole blob comes back.
        ("ranges ignored", vec![Fault::Pass, Fault::IgnoreRange]),
    ];
    for (what, faults) in cases {
        let world = World::new(&v1, fine_tuned(&v1));
        let proxy = FaultProxy::start(world.app.server.addr);
        proxy.blob_faults(faults);
        world.load_v2(&proxy.url());
        let ranges: Vec<Option<String>> = proxy
            .log()
            .into_iter()
            .filter(|l| l.line.contains("/v1/blobs/"))
            .map(|l| l.range)
            .collect();
        // The delta stopped at the fault and the file came whole: from byte 0 when the index
        // was refused, else resuming after the chunks already checked (an open range).
        let last = ranges.last().cloned().flatten();
        if what == "index not signed" {
            assert_eq!(ranges, vec![None, None], "{what}");
        } else {
            assert!(
                ranges.len() == 3 && ranges[1].is_some(),
                "{what}: {ranges:?}"
            );
            assert!(last.is_some_and(|r| r.ends_with('-')), "{what}: {ranges:?}");
        }
    }
}

#[test]
fn an_interrupted_delta_keeps_its_complete_chunks() {
    let v1 = noise(LARGE, 5);
    let world = World::new(&v1, fine_tuned(&v1));
    let proxy = FaultProxy::start(world.app.server.addr);
    // The index, then the changed run cut 1.5 MiB in: the retry resumes after the last
    // complete chunk.
    proxy.blob_faults([Fault::Pass, Fault::CutAt(3 << 19)]);
    let before = served(&world.app);
    world.load_v2(&proxy.url());
    let sent = served(&world.app) - before;
    let ranges: Vec<String> = proxy.log().into_iter().filter_map(|l| l.range).collect();
    assert!(
        ranges.len() >= 2,
        "a second range request resumed: {ranges:?}"
    );
    // The cut cost at most one chunk again (2 MiB), beyond the 10% a clean delta takes.
    assert!(
        sent <= LARGE as u64 / 10 + (2 << 20),
        "{sent} bytes sent; ranges {ranges:?}"
    );
}

#[test]
fn a_file_is_built_from_chunks_of_several_cached_blobs() {
    // 2.0.0's file: the first half of 1.0.0's, then the second half of another model's.
    let a = noise(LARGE, 7);
    let b = noise(LARGE, 8);
    let mut v2 = a[..LARGE / 2].to_vec();
    v2.extend_from_slice(&b[LARGE / 2..]);
    let world = World::new(&a, v2);
    let other = world.dir.path().join("other");
    std::fs::create_dir_all(&other).expect("dir");
    std::fs::write(other.join("weights.bin"), &b).expect("write");
    world
        .app
        .publish(&spec_of("other", "1.0.0", &other.join("weights.bin")));
    client(&world.app.url(), &world.app, &world.cache())
        .load("other", &device("delta-device"))
        .expect("other loads");
    let before = served(&world.app);
    world.load_v2(&world.app.url());
    let sent = served(&world.app) - before;
    // Only the chunks around the seam (at most two of 2 MiB) and the index.
    assert!(
        sent <= 5 << 20,
        "{sent} bytes sent for a file both blobs hold"
    );
}

#[test]
fn too_little_free_space_is_refused_before_any_byte_and_the_last_good_serves() {
    let v1 = noise(LARGE, 9);
    let world = World::new(&v1, fine_tuned(&v1));
    let before = served(&world.app);
    // More headroom than any disk has: a fresh cache gets the typed error, having fetched
    // nothing and left no partial file.
    let fresh = world.dir.path().join("fresh");
    let err = client_with(&world.app.url(), &world.app, &fresh, 1 << 60)
        .load("delta", &device("delta-device"))
        .expect_err("no space");
    assert_eq!(err.code(), "insufficient_storage", "{err}");
    assert!(err.to_string().contains("bytes needed"), "{err}");
    assert_eq!(served(&world.app), before, "nothing was downloaded");
    let parts: Vec<_> = walk(&fresh)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "part"))
        .collect();
    assert!(parts.is_empty(), "{parts:?}");
    // The cache that holds 1.0.0 keeps serving it.
    let m = client_with(&world.app.url(), &world.app, &world.cache(), 1 << 60)
        .load("delta", &device("delta-device"))
        .expect("the last known good loads");
    assert_eq!(m.release, "1.0.0");
    assert!(
        matches!(&m.source, ferry_client::Source::LastKnownGood { code, .. } if code == "insufficient_storage"),
        "{:?}",
        m.source
    );
    let first = &m.report.attempts[0];
    assert_eq!(
        (
            first.variant.as_str(),
            first.error_code.as_str(),
            first.stage
        ),
        (
            "portable-fp32",
            "insufficient_storage",
            ferry_client::Stage::Download
        )
    );
    assert_eq!(served(&world.app), before);
}

/// Every file under `dir`.
pub(crate) fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
