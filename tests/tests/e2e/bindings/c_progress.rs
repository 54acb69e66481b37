//! Download progress through the C ABI and the JVM binding, and handles shared by threads: a
//! C program (and a Java one) loads a model with a large asset on a worker thread (the
//! download slowed by a proxy) while its main thread asks the same client handle for the
//! progress; a callback (listener) sees every step; two C threads then run one model handle at
//! once.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ferry_tests::app::TestApp;
use ferry_tests::proxy::{Fault, FaultProxy};

/// A server with model `big` (the portable MLP with a 12 MiB asset) and a proxy that passes the
/// program and slows the asset to about 0.4 s; returns them with the variant's total size.
pub(crate) fn slow_big_model(work: &Path) -> (TestApp, FaultProxy, u64) {
    let app = TestApp::start();
    let asset = work.join("weights.bin");
    let bytes: Vec<u8> = (0..12u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&asset, &bytes).expect("asset");
    let (manifest, _) = app.publish(&ferry_tests::releases::portable_with_asset(
        "big", "1.0.0", &asset,
    ));
    let total = manifest.variants[0].size + bytes.len() as u64;
    let proxy = FaultProxy::start(app.server.addr);
    // The program passes; the asset comes 256 KiB at a time with a pause after each.
    proxy.blob_faults([
        Fault::Pass,
        Fault::Trickle(256 << 10, Duration::from_millis(8)),
    ]);
    (app, proxy, total)
}

/// The `name=value` fields of a test program's output line.
pub(crate) fn fields(stdout: &str) -> std::collections::BTreeMap<String, String> {
    stdout
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_c_app_follows_a_download_from_another_thread_and_shares_a_model_handle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let work = tempfile::tempdir().expect("tmp");
    let exe = work.path().join("progress");
    ferry_tests::compile_c(
        &root.join("tests/c/progress.c"),
        &exe,
        &ferry_tests::ffi_library_dir(),
    );
    let (app, proxy, total) = slow_big_model(work.path());
    let run = Command::new(&exe)
        .arg(proxy.url())
        .arg(app.dir.path().join("keys/trust.json"))
        .arg(work.path().join("cache"))
        .arg("big")
        .arg(r#"{"install_id":"c-progress","platform":"linux"}"#)
        .output()
        .expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let f = fields(&stdout);
    let num = |name: &str| -> u64 { f[name].parse().expect("number") };
    // The callback saw the download move forward, never back, to the whole variant.
    assert!(num("callbacks") >= 20, "{stdout}");
    assert_eq!(num("backwards"), 0, "{stdout}");
    assert_eq!(f["last"], format!("{total}/{total}"), "{stdout}");
    // The main thread saw it part way, through the same handle, while the load ran.
    assert!(num("mid_polls") >= 3, "{stdout}");
    // 400 runs from two threads on one model handle, none failed.
    assert_eq!(num("run_errors"), 0, "{stdout}");
}

#[test]
fn a_jvm_app_follows_a_download_from_its_ui_thread() {
    let work = tempfile::tempdir().expect("tmp");
    let classes = crate::bindings::jvm::compile(work.path());
    let (app, proxy, total) = slow_big_model(work.path());
    let run = Command::new("java")
        .arg("-cp")
        .arg(format!(
            "{}:{}",
            classes.display(),
            crate::bindings::jvm::JNA
        ))
        .arg(format!(
            "-Djna.library.path={}",
            ferry_tests::ffi_library_dir().display()
        ))
        .arg("Progress")
        .arg(proxy.url())
        .arg(app.dir.path().join("keys/trust.json"))
        .arg(work.path().join("cache"))
        .arg("big")
        .output()
        .expect("run java");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let f = fields(&stdout);
    let num = |name: &str| -> u64 { f[name].parse().expect("number") };
    assert!(num("calls") >= 20, "{stdout}");
    assert_eq!(num("backwards"), 0, "{stdout}");
    assert_eq!(f["last"], format!("{total}/{total}"), "{stdout}");
    assert_eq!(f["variant"], "portable-fp32", "{stdout}");
    // The UI thread's calls went through while the load ran (they used to wait for it, so
    // no call could see the download part way).
    assert!(num("mid_polls") >= 3, "{stdout}");
}
