//! `ferry keys generate`, `ferry keys rotate` and what `ferry serve` does with (and without)
//! keys, through the real binary.

use crate::common;

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
    // Without its online key the server stops and says which file to copy from where.
    std::fs::remove_file(data.join("keys/online.key")).expect("rm");
    let out = ferry()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("online.key is missing") && err.contains("ferry keys generate"),
        "{err}"
    );
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

    // An expiry that is already past, or absurd, is a usage error and writes nothing.
    for days in ["0", "99999999"] {
        let out = ferry()
            .args([
                "keys",
                "rotate",
                "online",
                "--expires-in-days",
                days,
                "--keys",
            ])
            .arg(&keys)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{days}: {out:?}");
    }
    assert!(!keys.join("keyring/00000004.json").exists());
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

#[test]
fn demo_starts_again_after_its_release_key_was_rotated() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    let run_demo = || {
        let mut child = ferry()
            .args(["serve", "--demo", "--listen", "127.0.0.1:0", "--data"])
            .arg(&data)
            .env("FERRY_ADMIN_TOKEN", common::TOKEN)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        use std::io::BufRead as _;
        let lines = std::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut seen = Vec::new();
        let mut up = false;
        for l in lines.map_while(Result::ok) {
            up = l.starts_with("ferry: listening on ");
            seen.push(l);
            if up {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        (up, seen)
    };
    let (up, seen) = run_demo();
    assert!(up, "{seen:?}");
    run_ok(
        ferry()
            .args(["keys", "rotate", "release", "--keys"])
            .arg(data.join("keys")),
    );
    let (up, seen) = run_demo();
    assert!(up, "the demo must start again: {seen:?}");
    assert!(
        seen.iter()
            .any(|l| l.contains("no current release key signed it")),
        "{seen:?}"
    );
}

#[test]
fn a_server_without_an_admin_token_says_so() {
    // Not --demo: a demo server always has its admin-token file.
    let tmp = tempfile::tempdir().expect("tmp");
    run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(tmp.path().join("keys")),
    );
    let mut child = ferry()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(tmp.path())
        .env_remove("FERRY_ADMIN_TOKEN")
        .env("FERRY_ADMIN_TOKEN", "")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    use std::io::BufRead as _;
    let mut seen = Vec::new();
    for l in std::io::BufReader::new(child.stderr.take().expect("stderr"))
        .lines()
        .map_while(Result::ok)
    {
        let done = l.starts_with("ferry: listening on ");
        seen.push(l);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.iter()
            .any(|l| l.contains("no admin token is configured")),
        "{seen:?}"
    );
}

#[test]
fn encrypted_keys_sign_only_with_their_passphrase_and_stay_encrypted_through_rotation() {
    let tmp = tempfile::tempdir().expect("tmp");
    let keys = tmp.path().join("keys");
    let pass = "a long passphrase for tests";
    let out = run_ok(
        ferry()
            .args(["keys", "generate", "--encrypt", "--out"])
            .arg(&keys)
            .env("FERRY_KEY_PASSPHRASE", pass),
    );
    assert!(out.contains("(encrypted)"), "{out}");
    let release = std::fs::read_to_string(keys.join("release.key")).expect("key");
    let file: serde_json::Value = serde_json::from_str(&release).expect("json");
    assert!(
        file.get("secret").is_none() && file.get("sealed").is_some(),
        "{file}"
    );
    // The online key stays plain (a server starts unattended).
    let online: serde_json::Value =
        serde_json::from_slice(&std::fs::read(keys.join("online.key")).expect("key"))
            .expect("json");
    assert!(online.get("secret").is_some());

    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    std::fs::copy(
        common::fixtures().join("mlp-v1-xnnpack.pte"),
        files.join("m.pte"),
    )
    .expect("copy");
    let spec = files.join("VARIANTS.toml");
    std::fs::write(
        &spec,
        "model = \"sealed\"\nversion = \"1.0.0\"\n\n[[variant]]\nid = \"xnnpack-fp32\"\n\
         file = \"m.pte\"\ndelegate = \"xnnpack\"\nquant = \"fp32\"\nruntime = \">=1.5.0\"\napp = \"*\"\n",
    )
    .expect("write");
    let sign = |passphrase: Option<&str>| {
        let mut cmd = ferry();
        cmd.arg("sign")
            .arg(&spec)
            .arg("--key")
            .arg(keys.join("release.key"))
            .arg("-o")
            .arg(tmp.path().join("release.json"))
            .env_remove("FERRY_KEY_PASSPHRASE")
            .stdin(std::process::Stdio::null());
        if let Some(p) = passphrase {
            cmd.env("FERRY_KEY_PASSPHRASE", p);
        }
        cmd.output().expect("run")
    };
    let no_pass = sign(None);
    assert!(!no_pass.status.success());
    let err = String::from_utf8_lossy(&no_pass.stderr);
    assert!(
        err.contains("is encrypted: set FERRY_KEY_PASSPHRASE"),
        "{err}"
    );
    let wrong = sign(Some("not the passphrase at all"));
    assert!(!wrong.status.success());
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(err.contains("wrong passphrase"), "{err}");
    assert!(!tmp.path().join("release.json").exists(), "nothing signed");
    let right = sign(Some(pass));
    assert!(
        right.status.success(),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
    assert!(tmp.path().join("release.json").exists());

    // Rotating an encrypted release key makes an encrypted one; the retired copy stays
    // encrypted too.
    let out = run_ok(
        ferry()
            .args(["keys", "rotate", "release", "--keys"])
            .arg(&keys)
            .env("FERRY_KEY_PASSPHRASE", pass),
    );
    assert!(out.contains("created release key"), "{out}");
    for e in std::fs::read_dir(keys.join("retired"))
        .expect("retired")
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).expect("read");
        assert!(
            !text.contains("\"secret\""),
            "{}: {text}",
            e.path().display()
        );
    }
    let now: serde_json::Value =
        serde_json::from_slice(&std::fs::read(keys.join("release.key")).expect("key"))
            .expect("json");
    assert!(now.get("sealed").is_some(), "{now}");

    // A plain key can be encrypted in place, and then needs the passphrase.
    let plain = tmp.path().join("plain");
    run_ok(ferry().args(["keys", "generate", "--out"]).arg(&plain));
    let out = run_ok(
        ferry()
            .args(["keys", "encrypt"])
            .arg(plain.join("release.key"))
            .env("FERRY_KEY_PASSPHRASE", pass),
    );
    assert!(out.contains("encrypted release key"), "{out}");
    let again = ferry()
        .args(["keys", "encrypt"])
        .arg(plain.join("release.key"))
        .env("FERRY_KEY_PASSPHRASE", pass)
        .output()
        .expect("run");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already encrypted"));
    let short = ferry()
        .args(["keys", "encrypt"])
        .arg(plain.join("root.key"))
        .env("FERRY_KEY_PASSPHRASE", "short")
        .output()
        .expect("run");
    assert!(!short.status.success());
    assert!(String::from_utf8_lossy(&short.stderr).contains("at least 12 characters"));
    // The online key stays plain: servers start unattended.
    let online = ferry()
        .args(["keys", "encrypt"])
        .arg(plain.join("online.key"))
        .env("FERRY_KEY_PASSPHRASE", pass)
        .output()
        .expect("run");
    assert!(!online.status.success());
    assert!(String::from_utf8_lossy(&online.stderr).contains("is an online key"));
}

#[test]
fn serve_logs_have_no_colour_in_pipes_and_are_all_json_when_asked() {
    use std::io::BufRead as _;
    for json in [false, true] {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut cmd = ferry();
        cmd.args(["serve", "--demo", "--listen", "127.0.0.1:0", "--data"])
            .arg(tmp.path())
            .env("FERRY_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if json {
            cmd.env("FERRY_LOG_FORMAT", "json");
        }
        let mut child = cmd.spawn().expect("spawn");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.expect("line");
            let done = line.contains("listening on");
            lines.push(line);
            if done {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(lines.len() >= 2, "{lines:?}");
        for line in &lines {
            assert!(
                !line.contains('\u{1b}'),
                "an escape code in a pipe: {line:?}"
            );
            if json {
                let v: serde_json::Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                assert!(v["fields"]["message"].is_string(), "{line}");
            }
        }
    }
}
