//! `ferry keys generate`, `ferry keys rotate` and what `ferry serve` does with (and without)
//! keys, through the real binary.

mod common;

use std::path::Path;

use common::{ferry, run_ok, serve};

fn get_json(url: &str) -> serde_json::Value {
    let mut resp = ureq::get(url).call().expect("GET");
    serde_json::from_reader(resp.body_mut().as_reader()).expect("json")
}

/// Copies what a server needs (online key, trust file, keyrings) from `keys` to `data/keys`.
fn provision(keys: &Path, data: &Path) {
    let to = data.join("keys");
    std::fs::create_dir_all(to.join("keyring")).expect("mkdir");
    for f in ["online.key", "trust.json"] {
        std::fs::copy(keys.join(f), to.join(f)).expect("copy");
    }
    for e in std::fs::read_dir(keys.join("keyring")).expect("keyring") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join("keyring").join(e.file_name())).expect("copy");
    }
}

#[test]
fn serve_without_keys_stops_and_creates_none() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = ferry()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(tmp.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no keys in"), "{err}");
    assert!(err.contains("ferry keys generate"), "{err}");
    assert!(!tmp.path().join("keys/release.key").exists());
    assert!(!tmp.path().join("keys/online.key").exists());
}

#[test]
fn a_server_with_only_its_part_of_the_keys_runs_and_never_makes_a_release_key() {
    let tmp = tempfile::tempdir().expect("tmp");
    let keys = tmp.path().join("keys");
    let data = tmp.path().join("data");
    run_ok(ferry().args(["keys", "generate", "--out"]).arg(&keys));
    provision(&keys, &data);
    let server = serve(&data);
    let trust = get_json(&format!("{}/v1/keys", server.url));
    let roles: Vec<&str> = trust["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["root"], "{trust}");
    assert_eq!(
        get_json(&format!("{}/v1/keyring", server.url))["version"],
        1
    );
    drop(server);
    assert!(!data.join("keys/release.key").exists());
    assert!(!data.join("keys/root.key").exists());
}

#[test]
fn rotate_writes_the_next_keyring_and_the_server_serves_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let keys = tmp.path().join("keys");
    run_ok(ferry().args(["keys", "generate", "--out"]).arg(&keys));
    // Never overwrites.
    let again = ferry()
        .args(["keys", "generate", "--out"])
        .arg(&keys)
        .output()
        .expect("run");
    assert!(!again.status.success());
    let before = std::fs::read(keys.join("online.key")).expect("key");
    let out = run_ok(
        ferry()
            .args(["keys", "rotate", "online", "--keys"])
            .arg(&keys),
    );
    assert!(out.contains("keyring version 2"), "{out}");
    assert_ne!(std::fs::read(keys.join("online.key")).expect("key"), before);
    let retired: Vec<_> = std::fs::read_dir(keys.join("retired"))
        .expect("retired")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(retired.len(), 1);
    assert!(retired[0].starts_with("online-"), "{retired:?}");
    run_ok(
        ferry()
            .args(["keys", "rotate", "release", "--keys"])
            .arg(&keys),
    );
    let data = tmp.path().join("data");
    provision(&keys, &data);
    let server = serve(&data);
    let chain = get_json(&format!("{}/v1/keyring", server.url));
    assert_eq!(chain["version"], 3);
    assert_eq!(chain["keyrings"].as_array().map(Vec::len), Some(3));

    // Mistakes: an unknown role is a usage error; without the root key nothing is written.
    let bad = ferry()
        .args(["keys", "rotate", "everything", "--keys"])
        .arg(&keys)
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(2));
    std::fs::remove_file(keys.join("root.key")).expect("rm");
    let no_root = ferry()
        .args(["keys", "rotate", "online", "--keys"])
        .arg(&keys)
        .output()
        .expect("run");
    assert!(!no_root.status.success());
    assert!(
        String::from_utf8_lossy(&no_root.stderr).contains("root.key"),
        "{}",
        String::from_utf8_lossy(&no_root.stderr)
    );
    assert!(!keys.join("keyring/00000004.json").exists());
}
