//! Crash-safe loading with real processes and the real runtime: a native crash (SIGSEGV), an
//! OOM kill (SIGKILL) and a hang inside ExecuTorch's own load of one variant, raised by a
//! preloaded library of the tests' own (`tests/c/crash_preload.c`); a run that aborts; two
//! processes of one app on one cache. The app is `crash-child`.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferry_shared::manifest::Delegate;
use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp};
use ferry_tests::releases::{release, variant};

/// A server with `crashy` 1.0.0: two XNNPACK variants of the MLP (int8 and fp32).
fn server() -> TestApp {
    let xnn = |id: &str, file: &str| variant(id, file, Delegate::Xnnpack, ">=1.0.0", "*");
    server_with(vec![
        xnn("xnnpack-int8", "mlp-v1-xnnpack-int8.pte"),
        xnn("xnnpack-fp32", "mlp-v1-xnnpack.pte"),
    ])
}

fn server_with(variants: Vec<ferry_server::release::sign::VariantSpec>) -> TestApp {
    let app = TestApp::start_with(Options {
        tweak: Some(Box::new(ferry_tests::fast_telemetry)),
        ..Default::default()
    });
    app.publish(&release("crashy", "1.0.0", variants));
    app
}

/// How a launch of the app goes wrong: `(FERRY_CRASH_PATH, FERRY_CRASH_HOW)`.
type Fault<'a> = Option<(&'a str, &'a str)>;

fn launch(app: &TestApp, cache: &Path, fault: Fault<'_>, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_crash-child"));
    cmd.arg(app.url())
        .arg(app.dir.path().join("keys/trust.json"))
        .arg(cache)
        .arg("crashy")
        .env("CHILD_INSTALL", "device-1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((path, how)) = fault {
        cmd.env("LD_PRELOAD", ferry_tests::crash_preload())
            .env("FERRY_CRASH_PATH", path)
            .env("FERRY_CRASH_HOW", how);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn crash-child")
}

/// How a launch ended: the signal that killed it (if one did) and its first JSON line.
fn ended(c: Child) -> (Option<i32>, serde_json::Value) {
    let out = c.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().next().unwrap_or_default();
    let json = serde_json::from_str(line).unwrap_or(serde_json::Value::Null);
    if out.status.signal().is_none() {
        assert!(
            json.is_object(),
            "the app printed {text:?}; stderr {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (out.status.signal(), json)
}

fn run_app(
    app: &TestApp,
    cache: &Path,
    fault: Fault<'_>,
    env: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value) {
    ended(launch(app, cache, fault, env))
}

/// The digest of the loaded file (its name in the cache).
fn digest(line: &serde_json::Value) -> String {
    let path = line["path"].as_str().expect("path");
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name")
        .to_string()
}

/// The variant a clean launch loads first, and its digest.
fn first_choice(app: &TestApp) -> (String, String) {
    let cache = tempfile::tempdir().expect("cache");
    let (signal, line) = run_app(app, cache.path(), None, &[]);
    assert_eq!(signal, None);
    assert_eq!(line["ok"], true, "{line}");
    (
        line["variant"].as_str().expect("variant").to_string(),
        digest(&line),
    )
}

fn attempt_codes(line: &serde_json::Value) -> Vec<(String, String, String)> {
    line["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a["variant"].as_str().unwrap_or_default().to_string(),
                a["error_code"].as_str().unwrap_or_default().to_string(),
                a["stage"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// One launch that dies of `how` inside the runtime's load of `first` (at its first read of
/// the file, under `Program::load`; or with `segment`, at its first read of a segment, which
/// is XNNPACK's `init` reading its weights under `Method::load`), then the next, which passes
/// over it, loads the other variant, names the crash and its `stage`, and sends it.
fn crash_then_fallback(app: &TestApp, how: &str, signal: i32, segment: bool, stage: &str) {
    let (first, digest) = first_choice(app);
    let cache = tempfile::tempdir().expect("cache");
    let at = [("FERRY_CRASH_SEGMENT", if segment { "1" } else { "0" })];
    let (got, _) = run_app(app, cache.path(), Some((&digest, how)), &at);
    assert_eq!(got, Some(signal), "the first launch dies of {how}");
    // The driver bug is still there: the next launch must not call into it again.
    let env = [("CHILD_SEND", "1"), at[0]];
    let (got, line) = run_app(app, cache.path(), Some((&digest, how)), &env);
    assert_eq!(got, None, "the second launch survives: {line}");
    assert_eq!(line["ok"], true, "{line}");
    assert_ne!(line["variant"], first.as_str(), "{line}");
    assert_eq!(
        attempt_codes(&line),
        vec![(first.clone(), "crashed".into(), stage.into())],
        "{line}"
    );
    assert!(
        line["sent"].as_u64().unwrap_or(0) >= 2,
        "the crash was sent: {line}"
    );
    let crashes = line["crashes"].as_array().expect("crashes");
    assert_eq!(crashes.len(), 1, "{line}");
    assert_eq!(crashes[0]["variant"], first.as_str());
    assert!(
        crashes[0]["receipt"].is_string(),
        "the receipt of the resolve that chose it"
    );
    // The server counted it (the receipt made it count), at its stage.
    ferry_tests::until("the health view counts the crash", || {
        let (_, h) = app.get_json("/v1/admin/models/crashy/health", Some(ADMIN_TOKEN));
        h["releases"][0]["variants"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["variant"] == first.as_str() && v["crash_stages"][stage] == 1)
    });
}

#[test]
fn a_segfault_inside_the_runtime_load_is_not_repeated_on_the_next_launch() {
    crash_then_fallback(&server(), "segv", 11, false, "load_program");
}

#[test]
fn an_abort_inside_the_xnnpack_backend_init_is_recorded_at_the_method_load() {
    crash_then_fallback(&server(), "abort", 6, true, "load_method");
}

#[test]
fn an_oom_kill_mid_load_is_not_repeated_on_the_next_launch() {
    crash_then_fallback(&server(), "kill", 9, false, "load_program");
}

#[test]
fn a_load_that_hangs_until_a_watchdog_kills_it_is_not_repeated() {
    let app = &server();
    let (first, digest) = first_choice(app);
    let cache = tempfile::tempdir().expect("cache");
    let mut hung = launch(app, cache.path(), Some((&digest, "hang")), &[]);
    // The watchdog: the app does not come back from the load.
    std::thread::sleep(Duration::from_secs(3));
    assert!(hung.try_wait().expect("wait").is_none(), "the load hangs");
    hung.kill().expect("kill");
    let (got, _) = ended(hung);
    assert_eq!(got, Some(9));
    let (got, line) = run_app(app, cache.path(), Some((&digest, "hang")), &[]);
    assert_eq!(got, None);
    assert_eq!(line["ok"], true, "{line}");
    assert_eq!(
        attempt_codes(&line),
        vec![(first, "crashed".into(), "load_program".into())]
    );
}

#[test]
fn when_every_candidate_crashes_the_third_launch_fails_typed_and_an_update_retries_once() {
    let app = &server();
    let (first, _) = first_choice(app);
    let cache = tempfile::tempdir().expect("cache");
    let every = Some(("blobs/sha256/", "segv"));
    for launch_no in 1..=2 {
        let (got, line) = run_app(app, cache.path(), every, &[]);
        assert_eq!(
            got,
            Some(11),
            "launch {launch_no} crashes on its candidate: {line}"
        );
    }
    let (got, line) = run_app(app, cache.path(), every, &[]);
    assert_eq!(got, None, "the third launch makes no native call: {line}");
    assert_eq!(line["ok"], false);
    assert_eq!(line["code"], "crashed", "{line}");
    let codes = attempt_codes(&line);
    assert_eq!(codes.len(), 2, "{line}");
    assert!(codes.iter().all(|(_, c, _)| c == "crashed"), "{line}");
    // An OS update (the driver bug fixed): each crashed variant is tried again, and the
    // first that loads is taken off the list.
    let (got, line) = run_app(app, cache.path(), None, &[("CHILD_OS", "6.2")]);
    assert_eq!(got, None);
    assert_eq!(line["ok"], true, "{line}");
    assert_eq!(line["variant"], first.as_str(), "{line}");
    assert!(attempt_codes(&line).is_empty(), "{line}");
    assert_eq!(line["crashes"].as_array().map(Vec::len), Some(1), "{line}");
    // Without the update, forgetting is the app's call.
    let (_, line) = run_app(app, cache.path(), None, &[("CHILD_FORGET", "1")]);
    assert_eq!(line["variant"], first.as_str(), "{line}");
    assert_eq!(line["crashes"].as_array().map(Vec::len), Some(0), "{line}");
}

#[test]
fn a_live_load_in_another_process_is_never_taken_for_a_crash() {
    let app = &server();
    let (first, digest) = first_choice(app);
    let cache = tempfile::tempdir().expect("cache");
    let mut hung = launch(app, cache.path(), Some((&digest, "hang")), &[]);
    // Wait until it is inside the load (its flight is marked).
    let flights = cache.path().join("flights");
    let started = Instant::now();
    while std::fs::read_dir(&flights).map_or(0, |d| d.count()) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the load started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (got, line) = run_app(app, cache.path(), None, &[]);
    assert_eq!(got, None);
    assert_eq!(line["variant"], first.as_str(), "no false crash: {line}");
    assert!(attempt_codes(&line).is_empty(), "{line}");
    assert_eq!(line["crashes"].as_array().map(Vec::len), Some(0), "{line}");
    hung.kill().expect("kill");
    let _ = ended(hung);
    let (_, line) = run_app(app, cache.path(), None, &[]);
    assert_eq!(
        attempt_codes(&line),
        vec![(first, "crashed".into(), "load_program".into())],
        "once the other process is gone, its hang is a crash: {line}"
    );
}

#[test]
fn a_crash_during_a_run_is_caught_too() {
    let app = &server();
    let (first, digest) = first_choice(app);
    let cache = tempfile::tempdir().expect("cache");
    let (got, line) = run_app(app, cache.path(), None, &[("CHILD_ABORT_RUN", &digest)]);
    assert_eq!(
        got,
        Some(6),
        "the run aborts the app after the load: {line}"
    );
    assert_eq!(line["variant"], first.as_str());
    let (got, line) = run_app(app, cache.path(), None, &[("CHILD_ABORT_RUN", &digest)]);
    assert_eq!(got, None, "{line}");
    assert_eq!(
        attempt_codes(&line),
        vec![(first, "crashed".into(), "run".into())],
        "{line}"
    );
}

#[test]
fn a_corrupted_file_is_refetched_not_blamed() {
    let app = &server();
    let (first, digest) = first_choice(app);
    let cache = tempfile::tempdir().expect("cache");
    let (got, _) = run_app(app, cache.path(), Some((&digest, "segv")), &[]);
    assert_eq!(got, Some(11));
    // The crash came from a bad page of the file: its bytes no longer match the digest.
    let blob = cache.path().join("blobs/sha256").join(&digest);
    let mut bytes = std::fs::read(&blob).expect("blob");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&blob, bytes).expect("corrupt");
    let (got, line) = run_app(app, cache.path(), None, &[]);
    assert_eq!(got, None);
    assert_eq!(line["ok"], true, "{line}");
    assert_eq!(
        line["variant"],
        first.as_str(),
        "fetched again and loaded: {line}"
    );
    assert!(attempt_codes(&line).is_empty(), "{line}");
    assert_eq!(
        line["crashes"].as_array().map(Vec::len),
        Some(0),
        "not a crash: {line}"
    );
    assert_eq!(
        ferry_client::cache::hash_file(&blob)
            .expect("hash")
            .to_hex(),
        digest
    );
}

#[test]
fn when_a_new_release_crashes_on_every_candidate_the_last_known_good_serves() {
    let app = TestApp::start();
    let v = |id: &str, file: &str, d: Delegate| variant(id, file, d, ">=1.0.0", "*");
    app.publish(&release(
        "crashy",
        "1.0.0",
        vec![v(
            "portable-fp32",
            "mlp-v1-portable.pte",
            Delegate::Portable,
        )],
    ));
    let cache = tempfile::tempdir().expect("cache");
    let (_, line) = run_app(&app, cache.path(), None, &[]);
    assert_eq!(line["variant"], "portable-fp32", "{line}");
    // 2.0.0 ships: both its XNNPACK variants crash this device's driver.
    app.publish(&release(
        "crashy",
        "2.0.0",
        vec![
            v("xnnpack-int8", "mlp-v1-xnnpack-int8.pte", Delegate::Xnnpack),
            v("xnnpack-fp32", "mlp-v1-xnnpack.pte", Delegate::Xnnpack),
        ],
    ));
    app.ship_model("crashy", "2.0.0");
    let digest = |file: &str| {
        ferry_client::cache::hash_file(&ferry_tests::fixtures_dir().join("pte").join(file))
            .expect("hash")
            .to_hex()
    };
    let (int8, fp32) = (
        digest("mlp-v1-xnnpack-int8.pte"),
        digest("mlp-v1-xnnpack.pte"),
    );
    // Each launch crashes on the next candidate it tries (the one not yet passed over).
    for d in [&int8, &fp32] {
        let (got, line) = run_app(&app, cache.path(), Some((d, "segv")), &[]);
        assert_eq!(got, Some(11), "{line}");
    }
    let (got, line) = run_app(&app, cache.path(), Some((&int8, "segv")), &[]);
    assert_eq!(got, None, "{line}");
    assert_eq!(line["ok"], true, "{line}");
    assert_eq!(
        line["release"], "1.0.0",
        "the last known good serves: {line}"
    );
    assert_eq!(line["variant"], "portable-fp32", "{line}");
    assert!(
        line["source"]
            .as_str()
            .unwrap_or_default()
            .contains("LastKnownGood"),
        "{line}"
    );
    let codes = attempt_codes(&line);
    assert_eq!(codes.len(), 2, "{line}");
    assert!(codes.iter().all(|(_, c, _)| c == "crashed"), "{line}");
}

#[test]
fn a_kill_in_the_middle_of_later_runs_counts_only_twice_in_a_row() {
    let app = &server();
    let (first, digest) = first_choice(app);
    let cache = tempfile::tempdir().expect("cache");
    let killed = [
        ("CHILD_ABORT_RUN", digest.as_str()),
        ("CHILD_ABORT_AFTER", "5"),
        ("CHILD_RUNS", "50"),
    ];
    // Ended in the middle of its sixth run: as likely a kill by the user as a crash.
    let (got, _) = run_app(app, cache.path(), None, &killed);
    assert_eq!(got, Some(6));
    // A launch that ends well in between resets it.
    let (got, line) = run_app(app, cache.path(), None, &[("CHILD_RUNS", "3")]);
    assert_eq!(got, None);
    assert_eq!(line["variant"], first.as_str(), "not passed over: {line}");
    assert!(attempt_codes(&line).is_empty(), "{line}");
    for launch_no in 1..=2 {
        let (got, line) = run_app(app, cache.path(), None, &killed);
        assert_eq!(got, Some(6), "launch {launch_no}");
        assert_eq!(
            line["variant"],
            first.as_str(),
            "launch {launch_no}: {line}"
        );
    }
    // Twice in a row: the variant's.
    let (got, line) = run_app(app, cache.path(), None, &killed);
    assert_eq!(got, None, "{line}");
    assert_eq!(
        attempt_codes(&line),
        vec![(first, "crashed".into(), "run".into())],
        "{line}"
    );
    let crashes = line["crashes"].as_array().expect("crashes");
    assert_eq!(crashes[0]["count"], 2, "{line}");
    assert_eq!(crashes[0]["runs_before"], 5, "{line}");
}
