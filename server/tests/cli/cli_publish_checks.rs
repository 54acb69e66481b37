//! Publishing checks through the real CLI: an untrusted signer, a token without the scope, a
//! conflict and a rotated-out key are refused before a byte is uploaded; a keyring pushed with
//! `ferry keys push` makes a rotated release key trusted without a restart.

use std::path::{Path, PathBuf};

use crate::cli_publish::write_variants;
use crate::common;

use common::{TOKEN, assert_valid, ferry, fixtures, run_ok, serve};

/// Every file under `dir`.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn publish_checks_the_signer_the_token_and_the_version_before_uploading() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(data.join("keys")),
    );
    // A second set of keys the server does not trust.
    run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(tmp.path().join("other")),
    );
    let variants = write_variants(&files, "mlp-v1-vulkan.pte");
    let sign = |key: &Path, out: &Path, epoch: Option<&str>| {
        let mut c = ferry();
        c.arg("sign")
            .arg(&variants)
            .arg("--key")
            .arg(key)
            .arg("-o")
            .arg(out);
        match epoch {
            Some(e) => c.env("SOURCE_DATE_EPOCH", e),
            None => c.env_remove("SOURCE_DATE_EPOCH"),
        };
        run_ok(&mut c);
    };
    let untrusted = tmp.path().join("untrusted.json");
    sign(&tmp.path().join("other/release.key"), &untrusted, None);
    let config = tmp.path().join("ferry.toml");
    // A read-only token besides the admin one.
    let reader = "cli-test-read-token-000000";
    let hash = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(reader.as_bytes()))
    };
    std::fs::write(
        &config,
        format!("[[tokens]]\nname = \"reader\"\nsha256 = \"{hash}\"\nscopes = [\"read\"]\n"),
    )
    .expect("config");
    let server = common::serve_with(&data, Some(&config));
    let blobs = data.join("store/blobs");
    let publish = |release: &Path, token: &str| {
        ferry()
            .arg("publish")
            .arg(release)
            .arg("--files")
            .arg(&files)
            .args(["--server", &server.url, "--token", token, "--quiet"])
            .output()
            .expect("run")
    };
    // An untrusted signer: refused with key_unknown before a byte is uploaded.
    let out = publish(&untrusted, TOKEN);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("key_unknown"), "{err}");
    assert!(
        files_in(&blobs).is_empty(),
        "uploaded before the check: {:?}",
        files_in(&blobs)
    );
    // A token without the publish scope: refused the same way, exit code 3 (auth).
    let trusted = tmp.path().join("release.json");
    sign(&data.join("keys/release.key"), &trusted, None);
    let out = publish(&trusted, reader);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("forbidden"), "{err}");
    assert!(files_in(&blobs).is_empty(), "uploaded before the check");
    // Published; the same inputs signed again a second later are the same release.
    let out = publish(&trusted, TOKEN);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let resigned = tmp.path().join("resigned.json");
    sign(&data.join("keys/release.key"), &resigned, None);
    assert_ne!(
        std::fs::read(&trusted).expect("read"),
        std::fs::read(&resigned).expect("read"),
        "a fresh created stamp"
    );
    let out = publish(&resigned, TOKEN);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("already published (identical)"), "{text}");
    // With SOURCE_DATE_EPOCH, signing is reproducible to the byte.
    let (a, b) = (tmp.path().join("a.json"), tmp.path().join("b.json"));
    sign(&data.join("keys/release.key"), &a, Some("1764547200"));
    sign(&data.join("keys/release.key"), &b, Some("1764547200"));
    assert_eq!(std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
    conflict_uploads_nothing(tmp.path(), &data, &server.url, &blobs);

    // After the release key is rotated out, the published release is no longer served; the
    // same inputs signed with the new key are refused before uploading, and say why.
    drop(server);
    run_ok(
        ferry()
            .args(["keys", "rotate", "release", "--keys"])
            .arg(data.join("keys")),
    );
    let server = common::serve_with(&data, Some(&config));
    let rotated = tmp.path().join("rotated.json");
    sign(&data.join("keys/release.key"), &rotated, None);
    let out = ferry()
        .arg("publish")
        .arg(&rotated)
        .arg("--files")
        .arg(&files)
        .args(["--server", &server.url, "--token", TOKEN, "--quiet"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("no longer trusts") && err.contains("release_exists"),
        "{err}"
    );
}

/// Different content under a published version: a conflict (exit 5), nothing uploaded.
fn conflict_uploads_nothing(tmp: &Path, data: &Path, url: &str, blobs: &Path) {
    // Different content under a published version: a conflict (exit 5), nothing uploaded.
    let changed = tmp.join("changed");
    std::fs::create_dir_all(&changed).expect("mkdir");
    std::fs::copy(
        fixtures().join("mlp-v2-vulkan.pte"),
        changed.join("mlp-v2-vulkan.pte"),
    )
    .expect("copy");
    let v = write_variants(&changed, "mlp-v2-vulkan.pte");
    let other = tmp.join("other.json");
    run_ok(
        ferry()
            .arg("sign")
            .arg(&v)
            .arg("--key")
            .arg(data.join("keys/release.key"))
            .arg("-o")
            .arg(&other),
    );
    let before = files_in(blobs).len();
    let out = ferry()
        .arg("publish")
        .arg(&other)
        .arg("--files")
        .arg(&changed)
        .args(["--server", url, "--token", TOKEN, "--quiet"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("release_exists"), "{err}");
    assert_eq!(
        files_in(blobs).len(),
        before,
        "nothing uploaded for a conflict"
    );
}

#[test]
fn keys_push_makes_a_rotated_release_key_trusted_without_a_restart() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(data.join("keys")),
    );
    let server = serve(&data);
    // On the offline machine (here: a copy of the key folder), the release key is rotated.
    let offline = tmp.path().join("offline");
    run_ok(
        std::process::Command::new("cp")
            .arg("-r")
            .arg(data.join("keys"))
            .arg(&offline),
    );
    run_ok(
        ferry()
            .args(["keys", "rotate", "release", "--keys"])
            .arg(&offline),
    );
    let push = |extra: &[&str]| {
        let mut c = ferry();
        c.args(["keys", "push", "--keys"])
            .arg(&offline)
            .args(["--server", &server.url, "--token", TOKEN])
            .args(extra);
        c
    };
    let out = run_ok(&mut push(&[]));
    assert!(out.contains("sent keyring version(s) 2"), "{out}");
    assert!(out.contains("the server now trusts version 2"), "{out}");
    let again = run_ok(&mut push(&["--json"]));
    let v: serde_json::Value = serde_json::from_str(&again).expect("json");
    assert_valid(&v, "cli.schema.json#/$defs/keys_push");
    assert_eq!(v["sent"], serde_json::json!([]), "{v}");
    assert_eq!(v["version"], 2, "{v}");
    // The new release key signs, the running server accepts.
    let new_key = offline.join("release.key");
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    let variants = write_variants(&files, "mlp-v1-vulkan.pte");
    let release = tmp.path().join("release.json");
    run_ok(
        ferry()
            .arg("sign")
            .arg(&variants)
            .arg("--key")
            .arg(&new_key)
            .arg("-o")
            .arg(&release),
    );
    let out = run_ok(
        ferry()
            .arg("publish")
            .arg(&release)
            .arg("--files")
            .arg(&files)
            .args(["--server", &server.url, "--token", TOKEN, "--quiet"]),
    );
    assert!(out.contains("published cli-mlp 1.0.0"), "{out}");
    // Another key folder (another `keys generate`) is refused, not skipped.
    let other = tmp.path().join("other");
    run_ok(ferry().args(["keys", "generate", "--out"]).arg(&other));
    let out = ferry()
        .args(["keys", "push", "--keys"])
        .arg(&other)
        .args(["--server", &server.url, "--token", TOKEN])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("keyring_rollback") && err.contains("not the one that made the keyrings"),
        "{err}"
    );
    // A wrong folder says what is wrong.
    let out = ferry()
        .args(["keys", "push", "--keys"])
        .arg(tmp.path().join("nowhere"))
        .args(["--server", &server.url, "--token", TOKEN])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("holds no keyring"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
