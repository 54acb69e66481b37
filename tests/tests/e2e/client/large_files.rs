//! Large files, generated at test time (never committed): a 512 MiB asset is published with
//! the server's memory bounded (streamed upload, the chunk index checked at publish),
//! downloaded by a client process whose memory stays bounded, updated after a 5% rewrite by
//! a delta that fetches a small share of it, and a delta killed with SIGKILL part way resumes
//! in the next process after its last complete chunk.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::ReleaseManifest;
use ferry_tests::app::{ADMIN_TOKEN, TestApp};
use ferry_tests::proxy::{Fault, FaultProxy};

const SIZE: u64 = 512 << 20;
/// The rewritten region of the update: 5% of the file, from its middle.
const REWRITE: std::ops::Range<u64> = (SIZE / 2)..(SIZE / 2 + SIZE / 20);

/// Writes `SIZE` pseudo-random bytes (the same for the same seed) to `path`, a piece at a
/// time, with the bytes in `rewrite` changed; returns their SHA-256.
fn write_noise(path: &Path, seed: u64, rewrite: Option<std::ops::Range<u64>>) -> Sha256Digest {
    use sha2::Digest as _;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut hasher = sha2::Sha256::new();
    let mut x = seed | 1;
    let mut piece = vec![0u8; 1 << 20];
    for p in 0..SIZE / (1 << 20) {
        for (i, word) in piece.chunks_exact_mut(8).enumerate() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut v = x;
            let at = (p << 20) + (i as u64) * 8;
            if rewrite.as_ref().is_some_and(|r| r.contains(&at)) {
                v = !v;
            }
            word.copy_from_slice(&v.to_le_bytes());
        }
        hasher.update(&piece);
        f.write_all(&piece).expect("write");
    }
    f.flush().expect("flush");
    Sha256Digest::from_bytes(hasher.finalize().into())
}

/// A `kB` field of this process's `/proc/self/status`.
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("field")
}

/// Signs `large` as the asset of model `large` at `version` and publishes it, uploading the
/// asset from its file (streamed, never in memory); returns the manifest and the peak growth
/// of this process's resident memory (the server's) over the upload and publish, in MiB.
fn publish(app: &TestApp, version: &str, large: &Path) -> (ReleaseManifest, u64) {
    let spec = ferry_tests::releases::portable_with_asset("large", version, large);
    // Signing reads the files (the operator's machine); the server's bound is measured after.
    let (manifest, envelope, files) =
        ferry_tests::releases::signed_release_files(&spec, &app.release_key());
    let index = manifest.variants[0].assets[0]
        .chunk_index
        .expect("a large asset is signed with a chunk index");
    let baseline = status_kb("VmRSS");
    let peak = Arc::new(AtomicU64::new(baseline));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(status_kb("VmRSS"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    for path in &files {
        let digest = Sha256Digest::from_bytes(ferry_fs::sha256_file(path).expect("hash"));
        let status = ureq::put(app.at(&format!("/v1/admin/blobs/sha256/{}", digest.to_hex())))
            .header("authorization", &format!("Bearer {ADMIN_TOKEN}"))
            .header("content-type", "application/octet-stream")
            .send(ureq::SendBody::from_reader(
                &mut std::fs::File::open(path).expect("open"),
            ))
            .map(|r| r.status().as_u16())
            .unwrap_or_else(|e| panic!("upload {}: {e}", path.display()));
        assert!(matches!(status, 200 | 201), "{status}");
    }
    let made = ferry_server::release::sign::chunks::index_of_file(large).expect("index");
    assert_eq!(made.reference(), index);
    assert!(matches!(app.put_blob(&made.to_bytes()), 200 | 201));
    let (status, body) = app.post_release("large", &envelope);
    assert_eq!(status, 201, "{body}");
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let grew = peak.load(Ordering::Relaxed).saturating_sub(baseline) / 1024;
    (manifest, grew)
}

/// Runs the download child: prefetches `large` through `url` into `cache`; returns the path it
/// stored and its memory growth over the download in MiB.
fn download(url: &str, app: &TestApp, cache: &Path) -> (PathBuf, u64) {
    let out = Command::new(env!("CARGO_BIN_EXE_download-child"))
        .arg(url)
        .arg(app.dir.path().join("keys/trust.json"))
        .arg(cache)
        .arg("large")
        .output()
        .expect("child");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |k: &str| -> u64 {
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{k} in {stdout}"))
    };
    let program = stdout
        .split_whitespace()
        .nth(1)
        .map(PathBuf::from)
        .expect("path");
    let grew = field("hwm_kb").saturating_sub(field("rss_start_kb")) / 1024;
    (program, grew)
}

/// The cached copy of the blob `d` in `cache`, hashed.
fn cached_digest(cache: &Path, d: &Sha256Digest) -> Sha256Digest {
    let path = cache.join("blobs/sha256").join(d.to_hex());
    Sha256Digest::from_bytes(ferry_fs::sha256_file(&path).expect("cached blob"))
}

#[test]
fn half_a_gigabyte_is_published_downloaded_and_updated_in_bounded_memory() {
    if !ferry_tests::in_own_process(
        module_path!(),
        "half_a_gigabyte_is_published_downloaded_and_updated_in_bounded_memory",
    ) {
        return;
    }
    let work = tempfile::tempdir().expect("tmp");
    let (v1, v2) = (work.path().join("v1"), work.path().join("v2"));
    std::fs::create_dir_all(&v1).expect("dir");
    std::fs::create_dir_all(&v2).expect("dir");
    let d1 = write_noise(&v1.join("weights.bin"), 21, None);
    let d2 = write_noise(&v2.join("weights.bin"), 21, Some(REWRITE));
    let app = TestApp::start();
    let (_, server_mib) = publish(&app, "1.0.0", &v1.join("weights.bin"));
    println!("publish 1.0.0: server resident memory grew {server_mib} MiB");
    assert!(
        server_mib <= 128,
        "server grew {server_mib} MiB publishing 512 MiB"
    );

    let cache = work.path().join("cache");
    let before = app.blob_bytes_served();
    let (_, client_mib) = download(&app.url(), &app, &cache);
    println!("download 1.0.0: client resident memory grew {client_mib} MiB");
    assert!(
        client_mib <= 64,
        "client grew {client_mib} MiB downloading 512 MiB"
    );
    assert!(app.blob_bytes_served() - before >= SIZE);
    assert_eq!(cached_digest(&cache, &d1), d1);

    let (_, server_mib) = publish(&app, "2.0.0", &v2.join("weights.bin"));
    assert!(
        server_mib <= 128,
        "server grew {server_mib} MiB publishing 2.0.0"
    );
    app.ship_model("large", "2.0.0");
    // The update, killed part way through its changed region (slowed by a proxy), then
    // started again in a new process.
    let proxy = FaultProxy::start(app.server.addr);
    proxy.blob_faults([
        Fault::Pass,
        Fault::Trickle(1 << 20, Duration::from_millis(50)),
    ]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_download-child"))
        .arg(proxy.url())
        .arg(app.dir.path().join("keys/trust.json"))
        .arg(&cache)
        .arg("large")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("child");
    let part = cache.join(format!("blobs/sha256/{}.part", d2.to_hex()));
    ferry_tests::until(
        "the delta has written past the changed region's start",
        || std::fs::metadata(&part).is_ok_and(|m| m.len() > REWRITE.start + (4 << 20)),
    );
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let kept = std::fs::metadata(&part)
        .expect("the part file survives")
        .len();
    let logged = proxy.log().len();
    let before = app.blob_bytes_served();
    let (_, client_mib) = download(&proxy.url(), &app, &cache);
    assert!(client_mib <= 64, "client grew {client_mib} MiB updating");
    assert_eq!(cached_digest(&cache, &d2), d2, "the update is v2's bytes");
    // The new process asked for the changed region from at most one chunk before where the
    // killed one had written to.
    let resumed_at: u64 = proxy.log()[logged..]
        .iter()
        .filter_map(|l| l.range.as_deref())
        .filter_map(|r| r.strip_prefix("bytes=")?.split_once('-'))
        .filter_map(|(a, _)| a.parse().ok())
        .next()
        .expect("a range request after the restart");
    assert!(
        resumed_at <= kept && kept - resumed_at <= 2 << 20,
        "resumed at {resumed_at}, had {kept}"
    );
    // The whole update, both processes, sent a small share of the file.
    let sent = app.blob_bytes_served() - before;
    println!("update after the kill: {sent} bytes sent (kept {kept})");
    assert!(sent <= SIZE / 10, "{sent} bytes sent for a 5% rewrite");
}
