//! Sealed releases over time (issue 50): an update of a sealed model sends about what changed
//! (convergent chunk keys: an unchanged chunk seals to the same bytes), and a rotated
//! key-release key keeps the releases sealed to the old one loading on new devices.

use std::path::{Path, PathBuf};

use ferry_tests::app::TestApp;
use ferry_tests::kit::device;
use ferry_tests::signers::ferry;

use super::delta::{noise, served};
use super::sealed::sign_and_publish;

const SIZE: usize = 12 << 20;

/// A release folder for `sealed` `version`: the demo's XNNPACK program and a `weights.bin`
/// asset of `weights`, all sealed.
fn release(dir: &Path, version: &str, weights: &[u8]) -> PathBuf {
    let files = dir.join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    std::fs::copy(
        ferry_tests::fixtures_dir().join("pte/mlp-v1-xnnpack.pte"),
        files.join("mlp-v1-xnnpack.pte"),
    )
    .expect("program");
    std::fs::write(files.join("weights.bin"), weights).expect("weights");
    std::fs::write(
        files.join("VARIANTS.toml"),
        format!(
            "model = \"sealed\"\nversion = \"{version}\"\nsealed = true\n\n[[variant]]\n\
             id = \"xnnpack-fp32\"\nfile = \"mlp-v1-xnnpack.pte\"\ndelegate = \"xnnpack\"\n\
             quant = \"fp32\"\nruntime = \">=1.0.0\"\napp = \"*\"\nassets = [\"weights.bin\"]\n"
        ),
    )
    .expect("toml");
    files
}

fn key_release_of(signed: &serde_json::Value, app: &TestApp, version: &str) -> String {
    let _ = signed;
    let (_, r) = app.get_json(
        &format!("/v1/admin/models/sealed/releases/{version}"),
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    let text = r.to_string();
    let at = text.find("\"key_release\":\"").expect("a sealed variant") + 15;
    text[at..at + 64].to_string()
}

#[test]
fn a_sealed_update_sends_what_changed_and_a_rotated_key_keeps_old_releases_loading() {
    let mut app = TestApp::start();
    let v1 = noise(SIZE, 5);
    let d1 = tempfile::tempdir().expect("tmp");
    let signed1 = sign_and_publish(&app, d1.path(), &release(d1.path(), "1.0.0", &v1));
    let cache = tempfile::tempdir().expect("cache");
    let c = app.client(cache.path()).build().expect("client");
    let m = c.load("sealed", &device("updating")).expect("1.0.0 loads");
    assert_eq!(m.release, "1.0.0");
    drop(m);

    // The key-release key is rotated; the server restarts with the new key and the retired one.
    let out = ferry()
        .args(["keys", "rotate", "key-release", "--keys"])
        .arg(app.keys_dir())
        .output()
        .expect("rotate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    app.restart().expect("restart");
    // A new device still gets the keys of 1.0.0, sealed to the retired key.
    let fresh = tempfile::tempdir().expect("cache");
    let other = app.client(fresh.path()).build().expect("client");
    let m = other
        .load("sealed", &device("new-device"))
        .expect("a release sealed to the retired key loads");
    assert_eq!(m.release, "1.0.0");
    drop(m);

    // 2.0.0: 5% of the weights rewritten, sealed to the new key.
    let mut v2 = v1.clone();
    let edit = noise(SIZE / 20, 77);
    v2[SIZE / 2..SIZE / 2 + edit.len()].copy_from_slice(&edit);
    let d2 = tempfile::tempdir().expect("tmp");
    let signed2 = sign_and_publish(&app, d2.path(), &release(d2.path(), "2.0.0", &v2));
    assert_ne!(
        key_release_of(&signed1, &app, "1.0.0"),
        key_release_of(&signed2, &app, "2.0.0"),
        "2.0.0 is sealed to the new key"
    );
    app.ship_model("sealed", "2.0.0");
    let c = app.client(cache.path()).build().expect("client");
    let before = served(&app);
    let m = c.load("sealed", &device("updating")).expect("2.0.0 loads");
    assert_eq!(m.release, "2.0.0");
    let sent = served(&app) - before;
    let asset = &signed2["variants"][0]["assets"][0];
    let size = asset["size"].as_u64().expect("size");
    assert!(
        sent * 100 <= size * 15,
        "a 5% change of a sealed {size}-byte asset sent {sent} bytes"
    );
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut m.open_asset("weights.bin").expect("asset"), &mut text)
        .expect("reads");
    assert!(text == v2, "the updated weights read back");
}
