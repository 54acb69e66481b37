//! What the server acknowledges is on disk: a release and a rollout change survive a SIGKILL
//! right after their acknowledgement, and the local store really fsyncs each write (counted
//! with strace while a release is published and a rollout changed).

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Setup, TOKEN, ferry, run_ok, serve};

fn publish(s: &Setup, release: &Path, url: &str) -> String {
    run_ok(
        ferry()
            .arg("publish")
            .arg(release)
            .arg("--files")
            .arg(&s.files)
            .args(["--server", url, "--token", TOKEN, "--quiet"]),
    )
}

fn start_rollout(url: &str) -> String {
    run_ok(ferry().args([
        "rollout",
        "start",
        "durable",
        "--release",
        "2.0.0",
        "--percent",
        "5",
        "--server",
        url,
        "--token",
        TOKEN,
    ]))
}

#[test]
fn acknowledged_publish_and_rollout_survive_sigkill() {
    let s = common::setup("durable");
    let server = serve(&s.data);
    publish(&s, &s.v1, &server.url);
    let out = publish(&s, &s.v2, &server.url);
    assert!(out.contains("published durable 2.0.0"), "{out}");
    // A later release is not live until a rollout stages it, and the CLI says so.
    assert!(
        out.contains("durable 2.0.0 is not live yet") && out.contains("ferry rollout start"),
        "{out}"
    );
    let out = start_rollout(&server.url);
    assert!(out.contains("staged 2.0.0 at 5%"), "{out}");
    // The very next thing: SIGKILL (Child::kill), no shutdown path runs.
    drop(server);

    let server = serve(&s.data);
    let out = run_ok(ferry().args([
        "rollout",
        "status",
        "durable",
        "--json",
        "--server",
        &server.url,
        "--token",
        TOKEN,
    ]));
    let status: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(status["current"]["staged"], "2.0.0", "{out}");
    assert_eq!(status["current"]["basis_points"], 500, "{out}");
    assert_eq!(status["current"]["action"], "start", "{out}");
    // And it is in force from the first request after the restart (what resolve uses).
    let out = run_ok(ferry().args([
        "releases",
        "durable",
        "--json",
        "--server",
        &server.url,
        "--token",
        TOKEN,
    ]));
    let releases: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(releases["releases"][0]["state"], "staged 5%", "{out}");
    assert_eq!(releases["releases"][1]["state"], "live", "{out}");
    // The release is there, byte for byte: publishing it again is an identical retry.
    let out = publish(&s, &s.v2, &server.url);
    assert!(out.contains("already published (identical)"), "{out}");
}

/// `ferry serve` under `strace -f`, counting fsync and fdatasync calls into a file.
struct Traced {
    strace: std::process::Child,
    log: PathBuf,
    url: String,
}

impl Traced {
    fn start(data: &Path, log: PathBuf) -> Traced {
        let mut strace = Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=fsync,fdatasync", "-o"])
            .arg(&log)
            .arg(env!("CARGO_BIN_EXE_ferry"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .env("FERRY_ADMIN_TOKEN", TOKEN)
            .env("FERRY_LOG", "warn")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("strace is needed for this test; tests/setup.sh installs it");
        let stderr = strace.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("the traced server exited before listening")
                .expect("read");
            if let Some(rest) = line.strip_prefix("ferry: listening on ") {
                break rest.split_whitespace().next().expect("url").to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Traced { strace, log, url }
    }

    /// The count once strace's log stops growing (it may lag the acknowledgement a little).
    fn settled_fsyncs(&self) -> usize {
        let mut last = self.fsyncs();
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let now = self.fsyncs();
            if now == last {
                break;
            }
            last = now;
        }
        last
    }

    fn fsyncs(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("fsync(") || l.contains("fdatasync("))
            .count()
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        // Kill the traced server (strace's child) first; strace then exits by itself.
        let pid = self.strace.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for child in children.split_whitespace() {
            let _ = Command::new("kill").args(["-9", child]).status();
        }
        let _ = self.strace.kill();
        let _ = self.strace.wait();
    }
}

#[test]
fn the_local_store_fsyncs_every_acknowledged_write() {
    let s = common::setup("durable");
    let log = s.data.parent().expect("tmp").join("fsync.log");
    let traced = Traced::start(&s.data, log);
    publish(&s, &s.v1, &traced.url);
    let before = traced.settled_fsyncs();
    publish(&s, &s.v2, &traced.url);
    let after_publish = traced.settled_fsyncs();
    start_rollout(&traced.url);
    let after_rollout = traced.settled_fsyncs();
    // A publish writes the blob, the inspection report and the manifest; each durable write
    // syncs the file and its folder.
    let publish_syncs = after_publish - before;
    assert!(
        publish_syncs >= 6,
        "one publish made {publish_syncs} fsync calls"
    );
    let rollout_syncs = after_rollout - after_publish;
    eprintln!("fsync calls: one publish {publish_syncs}, one rollout revision {rollout_syncs}");
    assert!(
        rollout_syncs >= 2,
        "one rollout revision made {rollout_syncs} fsync calls"
    );
}

#[test]
fn publish_again_repairs_a_torn_blob() {
    // A blob cut short at its final name (a power cut before the data reached the disk) looks
    // present to a HEAD; `ferry publish` compares its size with the signed one and uploads it
    // again, and the server replaces the torn copy.
    let s = common::setup("torn");
    let server = serve(&s.data);
    publish(&s, &s.v1, &server.url);
    let blobs = s.data.join("store/blobs/sha256");
    let path = std::fs::read_dir(&blobs)
        .expect("blobs")
        .flatten()
        .map(|e| e.path())
        .next()
        .expect("one blob");
    let full = std::fs::read(&path).expect("blob");
    std::fs::write(&path, &full[..1000]).expect("truncate");
    let out = publish(&s, &s.v1, &server.url);
    assert!(out.contains("uploading it again"), "{out}");
    assert_eq!(
        std::fs::read(&path).expect("blob"),
        full,
        "the torn blob was replaced"
    );
}

#[test]
fn a_graceful_stop_writes_buffered_telemetry() {
    // Flushes are far apart (10 minutes): only the stop can have written the event.
    let s = common::setup("stop");
    let config = s.tmp.path().join("ferry.toml");
    std::fs::write(&config, "[telemetry]\nflush_secs = 600\n").expect("config");
    let mut child = ferry()
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(&s.data)
        .env("FERRY_ADMIN_TOKEN", TOKEN)
        .env("FERRY_LOG", "warn")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = lines.next().expect("started").expect("read");
        if let Some(rest) = line.strip_prefix("ferry: listening on ") {
            break rest.split_whitespace().next().expect("url").to_string();
        }
    };
    // Events are kept only about published releases.
    publish(&s, &s.v1, &url);
    let event = serde_json::json!({"events": [{
        "kind": "load", "model": "stop", "release": "1.0.0", "variant": "xnnpack-fp32",
        "delegate": "xnnpack", "outcome": "ok", "install_id": "graceful", "platform": "linux",
        "soc": "x86", "device_model": "box", "os_version": "6", "app_version": "1.0.0",
        "runtime_version": "1.5.1",
        "at": time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .expect("time")}]});
    let mut resp = ureq::post(format!("{url}/v1/telemetry"))
        .header("content-type", "application/json")
        .send(serde_json::to_vec(&event).expect("json"))
        .expect("post");
    let body: serde_json::Value =
        serde_json::from_reader(resp.body_mut().as_reader()).expect("json");
    assert_eq!(body["accepted"], 1, "{body}");
    let raw = |data: &Path| -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![data.join("store/telemetry/events")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p);
                }
            }
        }
        out
    };
    assert!(raw(&s.data).is_empty(), "nothing written before the stop");
    let status = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", child.id())])
        .status()
        .expect("kill");
    assert!(status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let exit = child.wait().expect("wait");
    assert!(exit.success(), "{exit:?}: {rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.contains("buffered telemetry written")),
        "{rest:?}"
    );
    let files = raw(&s.data);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0]
            .to_string_lossy()
            .contains("/telemetry/events/date=")
            && files[0].extension().is_some_and(|e| e == "parquet"),
        "{files:?}"
    );
    let bytes = std::fs::read(&files[0]).expect("read");
    let rows: Vec<_> = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        bytes::Bytes::from(bytes),
    )
    .expect("a Parquet file")
    .build()
    .expect("reader")
    .collect::<Result<_, _>>()
    .expect("rows");
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let ids = rows[0]
        .column_by_name("install_id")
        .expect("install_id")
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .expect("strings")
        .value(0)
        .to_string();
    assert_eq!(ids, "graceful");
}

/// Bytes that do not compress or repeat (xorshift), for large test blobs.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Signs release `version` of `s`'s model with one XNNPACK variant of `size` bytes (a real
/// program followed by noise); returns the release file and the variant's bytes' digest.
fn big_release(s: &Setup, model: &str, version: &str, size: usize, seed: u64) -> (PathBuf, String) {
    use sha2::Digest as _;
    let mut bytes = std::fs::read(common::fixtures().join("mlp-v1-xnnpack.pte")).expect("fixture");
    bytes.extend(noise(size - bytes.len(), seed));
    let file = format!("big-{version}.pte");
    std::fs::write(s.files.join(&file), &bytes).expect("write");
    let spec = s.files.join(format!("VARIANTS-{version}.toml"));
    std::fs::write(
        &spec,
        format!(
            "model = \"{model}\"\nversion = \"{version}\"\n\n[[variant]]\nid = \"xnnpack-fp32\"\n\
             file = \"{file}\"\ndelegate = \"xnnpack\"\nquant = \"fp32\"\nruntime = \">=1.5.0\"\napp = \"*\"\n"
        ),
    )
    .expect("spec");
    let out = s.files.join(format!("release-{version}.json"));
    run_ok(
        ferry()
            .arg("sign")
            .arg(&spec)
            .arg("--key")
            .arg(s.data.join("keys/release.key"))
            .arg("-o")
            .arg(&out),
    );
    (out, hex::encode(sha2::Sha256::digest(&bytes)))
}

/// Every file under `dir` with its size.
fn files_under(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(m) = e.metadata() {
                out.push((p, m.len()));
            }
        }
    }
    out
}

#[test]
fn sigkill_during_a_large_publish_leaves_the_release_whole_or_absent() {
    let s = common::setup("big");
    let size = 96 << 20;
    let blobs = s.data.join("store/blobs");
    {
        let server = serve(&s.data);
        publish(&s, &s.v1, &server.url);
    }
    // Killed twice: while the blob streams in, and as soon as the whole blob is stored (the
    // release document may or may not have been written by then).
    for (version, seed, mid_blob) in [("3.0.0", 7, true), ("4.0.0", 11, false)] {
        let (release, digest) = big_release(&s, "big", version, size, seed);
        let server = serve(&s.data);
        let mut publishing = ferry()
            .arg("publish")
            .arg(&release)
            .arg("--files")
            .arg(&s.files)
            .args(["--server", &server.url, "--token", TOKEN, "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("publish");
        let mut waited = 0;
        loop {
            let files = files_under(&blobs);
            let hit = if mid_blob {
                files.iter().any(|(p, n)| {
                    p.to_string_lossy().contains('#') && *n >= 16 << 20 && (*n as usize) < size
                })
            } else {
                files
                    .iter()
                    .any(|(p, n)| p.ends_with(&digest) && *n as usize == size)
            };
            if hit {
                break;
            }
            waited += 1;
            assert!(
                waited < 3000,
                "{version}: the upload never got there: {files:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(server); // SIGKILL
        let _ = publishing.wait();

        let server = serve(&s.data);
        let listed = |url: &str| -> bool {
            let out = run_ok(ferry().args([
                "releases", "big", "--json", "--server", url, "--token", TOKEN,
            ]));
            let v: serde_json::Value = serde_json::from_str(&out).expect("json");
            v["releases"]
                .as_array()
                .expect("releases")
                .iter()
                .any(|r| r["version"] == version)
        };
        let whole = |url: &str| {
            use sha2::Digest as _;
            let mut r = ureq::get(format!("{url}/v1/blobs/sha256/{digest}"))
                .call()
                .expect("blob");
            let body = r
                .body_mut()
                .with_config()
                .limit(size as u64 + 1)
                .read_to_vec()
                .expect("body");
            assert_eq!(body.len(), size, "{version}");
            assert_eq!(
                hex::encode(sha2::Sha256::digest(&body)),
                digest,
                "{version}"
            );
        };
        if listed(&server.url) {
            assert!(!mid_blob, "a release was admitted without its whole blob");
            whole(&server.url);
        } else if mid_blob {
            // Nothing half-written under the blob's final name.
            assert!(
                !files_under(&blobs)
                    .iter()
                    .any(|(p, _)| p.ends_with(&digest)),
                "{version}: a partial blob under its final name"
            );
        }
        // Publishing again succeeds and leaves it whole.
        let out = publish(&s, &release, &server.url);
        assert!(out.contains(&format!("big {version}")), "{out}");
        assert!(listed(&server.url), "{version} after publishing again");
        whole(&server.url);
    }
}
