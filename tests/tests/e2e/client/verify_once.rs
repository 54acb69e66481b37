//! Verify once, not at every start (docs/client.md): a cached variant whose files still have
//! the stamp recorded when they last matched their digests loads without hashing them whole,
//! and a file changed in the cache never reaches the runtime. With the real exporter's program
//! and `.ptd` data file (padded to 64 MiB, which the runtime never reads), the real server and
//! the real ExecuTorch runtime, wrapped in a witness that hashes every file it is handed.

use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ferry_client::cache::VerifiedBlob;
use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::runtime::{Program, Runtime, RuntimeError};
use ferry_client::{Client, Source};
use ferry_shared::Sha256Digest;
use ferry_shared::manifest::Delegate;
use ferry_shared::wire::telemetry::EventKind;
use ferry_tests::app::{TestApp, variant};
use ferry_tests::kit::device;

/// The real runtime, which first hashes every file it is handed and remembers whether each
/// matched the digest the cache handed it out under.
struct Witness {
    real: ExecuTorchRuntime,
    seen: Mutex<Vec<(Sha256Digest, bool)>>,
}

impl Runtime for Witness {
    fn version(&self) -> semver::Version {
        self.real.version()
    }

    fn registered_backends(&self) -> Vec<String> {
        self.real.registered_backends()
    }

    fn open(&self, blob: &VerifiedBlob) -> Result<Box<dyn Program>, RuntimeError> {
        let mut seen = self.seen.lock().expect("lock");
        for f in std::iter::once(blob).chain(blob.data_files()) {
            let bytes = std::fs::read(f.path()).expect("read");
            seen.push((*f.sha256(), Sha256Digest::of(&bytes) == *f.sha256()));
        }
        drop(seen);
        self.real.open(blob)
    }
}

const PROGRAM: &str = "mlp-external-portable.pte";
const DATA: &str = "mlp-external-portable.ptd";
const PADDING: usize = 64 << 20;

/// The exporter's `.ptd` followed by 64 MiB of noise: a real data file of 64 MiB.
fn padded_data(dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(ferry_tests::fixtures_dir().join("pte").join(DATA)).expect("ptd");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    bytes.reserve(PADDING);
    for _ in 0..PADDING / 8 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    let path = dir.join("weights.ptd");
    std::fs::write(&path, bytes).expect("write");
    path
}

struct Setup {
    app: TestApp,
    witness: Arc<Witness>,
    cache: tempfile::TempDir,
    program: Sha256Digest,
    data: (Sha256Digest, u64),
    /// The size of the data file's signed chunk index (fetched with it for a later delta).
    data_index: u64,
    _files: tempfile::TempDir,
}

fn setup() -> Setup {
    let app = TestApp::start();
    let files = tempfile::tempdir().expect("files");
    let data = padded_data(files.path());
    let mut v = variant("portable-fp32", PROGRAM, Delegate::Portable, ">=1.0.0", "*");
    v.data = vec![data.clone()];
    let (manifest, _) = app.publish(&ferry_tests::releases::release("verify", "1.0.0", vec![v]));
    let f = &manifest.variants[0].extra_files[0];
    Setup {
        witness: Arc::new(Witness {
            real: ExecuTorchRuntime::new(),
            seen: Mutex::default(),
        }),
        cache: tempfile::tempdir().expect("cache"),
        program: manifest.variants[0].sha256,
        data: (f.sha256, f.size),
        data_index: f.chunk_index.map_or(0, |r| r.size),
        app,
        _files: files,
    }
}

impl Setup {
    /// Whether `bytes` served is the data file fetched again (with its chunk index or not),
    /// and nothing else of size.
    fn refetched_data(&self, bytes: u64) -> bool {
        bytes == self.data.1 || bytes == self.data.1 + self.data_index
    }

    /// A client of the cache with the witness runtime; `hashed` counts the progress calls.
    fn client(&self, hashed: &Arc<Mutex<u64>>, reverify: std::time::Duration) -> Client {
        self.client_at(&self.app.url(), hashed, reverify)
    }

    /// [`Setup::client`] of the server at `url` (an unreachable one: offline).
    fn client_at(
        &self,
        url: &str,
        hashed: &Arc<Mutex<u64>>,
        reverify: std::time::Duration,
    ) -> Client {
        let hashed = hashed.clone();
        self.app
            .client_at(url, self.cache.path())
            .runtime(self.witness.clone())
            .reverify_after(reverify)
            .progress(Arc::new(move |_: &str, _: u64, _: u64| {
                *hashed.lock().expect("lock") += 1;
            }))
            .build()
            .expect("client")
    }

    fn blob(&self, d: &Sha256Digest) -> PathBuf {
        self.cache.path().join("blobs/sha256").join(d.to_hex())
    }

    /// Every file the runtime was handed matched its digest.
    fn runtime_saw_only_good_bytes(&self) {
        let seen = self.witness.seen.lock().expect("lock");
        assert!(!seen.is_empty());
        assert!(
            seen.iter().all(|(_, ok)| *ok),
            "the runtime was handed changed bytes: {seen:?}"
        );
    }
}

/// Flips the byte at `at` of `path` in place, putting the modification time back: a writer
/// that hides its write from the size and the modification time.
fn flip_byte(path: &Path, at: u64) {
    let mtime = std::fs::metadata(path)
        .expect("meta")
        .modified()
        .expect("mtime");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read");
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).expect("write");
    f.set_modified(mtime).expect("mtime back");
}

/// Writes the file's stamp now into the cache index, as if the file had not changed: what a
/// flipped bit on the medium looks like (no write through the file system).
fn forge_stamp(cache: &Path, d: &Sha256Digest) {
    forge_stamp_hashed_at(cache, d, None);
}

/// [`forge_stamp`], also setting when the file was last hashed whole (seconds since the epoch).
fn forge_stamp_hashed_at(cache: &Path, d: &Sha256Digest, hashed_at: Option<u64>) {
    let index_path = cache.join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).expect("index")).expect("json");
    let m = std::fs::metadata(cache.join("blobs/sha256").join(d.to_hex())).expect("meta");
    if let Some(at) = hashed_at {
        index["blobs"][d.to_hex()]["checked"]["hashed_at"] = serde_json::json!(at);
    }
    let stamp = &mut index["blobs"][d.to_hex()]["checked"]["stamp"];
    assert!(stamp.is_object(), "no stamp recorded: {index}");
    stamp["mtime_ns"] = serde_json::json!(m.mtime() * 1_000_000_000 + m.mtime_nsec());
    stamp["ctime_ns"] = serde_json::json!(m.ctime() * 1_000_000_000 + m.ctime_nsec());
    std::fs::write(&index_path, serde_json::to_vec(&index).expect("json")).expect("index");
}

fn verify_failures(c: &Client, before: usize) -> usize {
    c.telemetry_pending()[before..]
        .iter()
        .filter(|e| e.kind == EventKind::Verify && e.error_code.as_deref() == Some("hash_mismatch"))
        .count()
}

#[test]
fn a_cached_variant_loads_without_a_full_hash_and_changed_files_never_reach_the_runtime() {
    let s = setup();
    let d = device("verify-once");
    let hashed = Arc::new(Mutex::new(0u64));
    let c = s.client(&hashed, std::time::Duration::from_secs(3600));
    assert_eq!(
        c.load("verify", &d).expect("first load").source,
        Source::Downloaded
    );

    // A cached load: no byte fetched, no file hashed whole (no progress), the runtime handed
    // intact bytes.
    *hashed.lock().expect("lock") = 0;
    let served = s.app.blob_bytes_served();
    let m = c.load("verify", &d).expect("cached load");
    assert_eq!(m.source, Source::Cached);
    drop(m);
    assert_eq!(s.app.blob_bytes_served(), served);
    assert_eq!(
        *hashed.lock().expect("lock"),
        0,
        "a cached load hashed a file whole"
    );

    // A byte in the middle of the 64 MiB data file, changed with its modification time put
    // back: found at the next load, removed, reported, fetched again.
    flip_byte(&s.blob(&s.data.0), s.data.1 / 2);
    let before = c.telemetry_pending().len();
    let m = c
        .load("verify", &d)
        .expect("load after the data file changed");
    assert_eq!(m.source, Source::Downloaded, "{:?}", m.report);
    drop(m);
    let bytes = s.app.blob_bytes_served() - served;
    assert!(s.refetched_data(bytes), "the data file alone: {bytes}");
    assert_eq!(verify_failures(&c, before), 1, "reported once");
    assert!(
        *hashed.lock().expect("lock") > 0,
        "the whole hash showed progress"
    );

    // A byte of the program's header, the same way.
    let served = s.app.blob_bytes_served();
    flip_byte(&s.blob(&s.program), 10);
    let before = c.telemetry_pending().len();
    let m = c
        .load("verify", &d)
        .expect("load after the program changed");
    assert_eq!(m.source, Source::Downloaded);
    drop(m);
    assert!(s.app.blob_bytes_served() > served);
    assert_eq!(verify_failures(&c, before), 1);

    // A flipped bit no stamp shows, in the program's header: the head check finds it.
    forge_stamp_after_flip(&s, &s.program, 12);
    let before = c.telemetry_pending().len();
    let m = c.load("verify", &d).expect("load after the program rotted");
    assert_eq!(m.source, Source::Downloaded);
    drop(m);
    assert_eq!(verify_failures(&c, before), 1);
    s.runtime_saw_only_good_bytes();
    for f in [s.program, s.data.0] {
        assert_eq!(
            ferry_client::cache::hash_file(&s.blob(&f)).expect("hash"),
            f
        );
    }
}

fn forge_stamp_after_flip(s: &Setup, d: &Sha256Digest, at: u64) {
    flip_byte(&s.blob(d), at);
    forge_stamp(s.cache.path(), d);
}

#[test]
fn a_flipped_bit_in_a_data_file_is_found_in_the_background_and_fetched_before_the_next_load() {
    let s = setup();
    let d = device("verify-background");
    let hashed = Arc::new(Mutex::new(0u64));
    // Every load has its files hashed again in the background.
    let c = s.client(&hashed, std::time::Duration::ZERO);
    drop(c.load("verify", &d).expect("first load"));
    // A bit flips in the middle of the data file with no write the stamp shows.
    forge_stamp_after_flip(&s, &s.data.0, s.data.1 / 2);
    let before = c.telemetry_pending().len();
    // This load trusts the stamp and the intact head; the pass after it hashes the file whole.
    let m = c.load("verify", &d).expect("load");
    assert_eq!(m.source, Source::Cached);
    drop(m);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s.blob(&s.data.0).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the background pass did not remove the changed file"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Reported by the pass (with the load's receipt), fetched again at the next load.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while verify_failures(&c, before) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let reported: Vec<_> = c.telemetry_pending()[before..]
        .iter()
        .filter(|e| e.kind == EventKind::Verify)
        .cloned()
        .collect();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(reported[0].receipt.is_some(), "{reported:?}");
    let served = s.app.blob_bytes_served();
    let m = c.load("verify", &d).expect("next load");
    assert_eq!(m.source, Source::Downloaded);
    drop(m);
    let bytes = s.app.blob_bytes_served() - served;
    assert!(s.refetched_data(bytes), "the data file alone: {bytes}");
    assert_eq!(
        ferry_client::cache::hash_file(&s.blob(&s.data.0)).expect("hash"),
        s.data.0
    );
}

#[test]
fn a_first_check_offline_shows_progress_and_the_next_offline_load_hashes_nothing() {
    let s = setup();
    let d = device("verify-offline");
    let hashed = Arc::new(Mutex::new(0u64));
    let hour = std::time::Duration::from_secs(3600);
    drop(
        s.client(&hashed, hour)
            .load("verify", &d)
            .expect("first load"),
    );
    // The index as a client from before this check wrote it: nothing recorded.
    let index_path = s.cache.path().join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).expect("index")).expect("json");
    for (_, b) in index["blobs"].as_object_mut().expect("blobs").iter_mut() {
        b.as_object_mut().expect("blob").remove("checked");
    }
    std::fs::write(&index_path, serde_json::to_vec(&index).expect("json")).expect("index");
    let offline = s.client_at("http://127.0.0.1:1", &hashed, hour);
    // An offline load from the cache; the progress calls it made.
    let progress_of_a_load = || {
        *hashed.lock().expect("lock") = 0;
        let m = offline.load("verify", &d).expect("offline load");
        assert!(
            matches!(m.source, Source::LastKnownGood { .. }),
            "{:?}",
            m.source
        );
        drop(m);
        *hashed.lock().expect("lock")
    };
    assert!(progress_of_a_load() > 0, "the first check showed progress");
    assert_eq!(progress_of_a_load(), 0, "recorded: not hashed again");
    s.runtime_saw_only_good_bytes();
}

#[test]
fn a_runtime_failure_on_a_file_trusted_by_its_stamp_has_it_hashed_evicted_and_fetched_again() {
    // The XNNPACK program keeps its delegate's graph in a segment past its head.
    let app = TestApp::start();
    let (m, _) = app.publish(&ferry_tests::releases::release(
        "segment",
        "1.0.0",
        vec![variant(
            "xnnpack-fp32",
            "mlp-v1-xnnpack.pte",
            Delegate::Xnnpack,
            ">=1.0.0",
            "*",
        )],
    ));
    let program = m.variants[0].sha256;
    let cache = tempfile::tempdir().expect("cache");
    let d = device("verify-segment");
    let c = app.client(cache.path()).build().expect("client");
    drop(c.load("segment", &d).expect("first load"));
    // A flipped bit in the segment (in the XNNPACK graph's own header, past the program's
    // head), that no write explains, in a file last hashed long ago.
    let path = cache.path().join("blobs/sha256").join(program.to_hex());
    let bytes = std::fs::read(&path).expect("program");
    let base = u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes"));
    assert_eq!(
        &bytes[8..12],
        b"eh00",
        "an extended header names the segment base"
    );
    assert_eq!(&bytes[base as usize + 4..base as usize + 8], b"XH00");
    flip_byte(&path, base + 5);
    forge_stamp_hashed_at(cache.path(), &program, Some(0));
    let before = c.telemetry_pending().len();
    // The runtime fails on it: the file is hashed whole then, removed and reported ...
    let failed = c.load("segment", &d);
    assert!(failed.is_err(), "{:?}", failed.map(|m| m.report));
    assert_eq!(verify_failures(&c, before), 1);
    assert!(!path.exists(), "the damaged file was removed");
    // ... and the next load fetches it again.
    let m = c.load("segment", &d).expect("load after the eviction");
    assert_eq!(m.source, Source::Downloaded);
    drop(m);
    assert_eq!(
        ferry_client::cache::hash_file(&path).expect("hash"),
        program
    );
}
