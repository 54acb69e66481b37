//! Keys that never touch a disk (issue 48), through the real `ferry` binary as an operator runs
//! it: the release key moved into a SoftHSM2 token (Ed25519, signed with `C_Sign` in the token)
//! and then to an `exec:` signer holding a P-256 key, the root key rotated into the token
//! (P-256), a revocation signed there; each keyring pushed to a running server, each release
//! published and loaded by the real client and by a C program through the C ABI. Every refusal
//! (wrong PIN, unknown object, missing token or library, a signer that fails, lies or prints
//! garbage, an unknown scheme) exits with its documented code and leaves no release file.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{Client, ClientBuilder, DeviceInfo};
use ferry_shared::trust::TrustFile;
use ferry_tests::app::{ADMIN_TOKEN, TestApp, mlp_v1};
use ferry_tests::kit::{DeviceExt as _, device};
use ferry_tests::signers::{SoftHsm, ferry, files_under, openssl_p256_signer, script};

fn client(trust: &TrustFile, server: &str, cache: &Path) -> Client {
    ClientBuilder::new(server, trust.clone())
        .cache_dir(cache)
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .build()
        .expect("client")
}

fn board() -> DeviceInfo {
    device("hsm-device")
        .os("6.1")
        .model("test board")
        .soc("x86")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run(hsm: &SoftHsm, cmd: &mut Command) -> Output {
    hsm.env(cmd).output().expect("run ferry")
}

/// `ferry keys rotate ROLE --keys KEYS ARGS…` with the token's configuration.
fn rotate(hsm: &SoftHsm, role: &str, keys: &Path, args: &[&str]) -> Output {
    run(
        hsm,
        ferry()
            .args(["keys", "rotate", role, "--keys"])
            .arg(keys)
            .args(args),
    )
}

/// `ferry keys push` of the folder to the app.
fn push(hsm: &SoftHsm, app: &TestApp, keys: &Path) {
    ok(run(
        hsm,
        ferry().args(["keys", "push", "--keys"]).arg(keys).args([
            "--server",
            &app.url(),
            "--token",
            ADMIN_TOKEN,
        ]),
    ));
}

/// Writes a one-variant release `version` of `mlp` (the v1 program) into `work`.
fn variants(work: &Path, version: &str) -> std::path::PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pte");
    std::fs::copy(
        fixtures.join("mlp-v1-xnnpack.pte"),
        work.join("mlp-v1-xnnpack.pte"),
    )
    .expect("copy");
    let spec = work.join(format!("VARIANTS-{version}.toml"));
    std::fs::write(
        &spec,
        format!(
            "model = \"mlp\"\nversion = \"{version}\"\n\n[[variant]]\nid = \"xnnpack-fp32\"\n\
             file = \"mlp-v1-xnnpack.pte\"\ndelegate = \"xnnpack\"\nquant = \"fp32\"\n\
             runtime = \">=1.0.0\"\napp = \"*\"\n"
        ),
    )
    .expect("write");
    spec
}

/// `ferry sign` with `key`; returns the command's output and the release file's path.
fn sign(hsm: &SoftHsm, work: &Path, version: &str, key: &str) -> (Output, std::path::PathBuf) {
    let spec = variants(work, version);
    let out_file = work.join(format!("release-{version}.json"));
    let out = run(
        hsm,
        ferry()
            .arg("sign")
            .arg(&spec)
            .args(["--key", key, "-o"])
            .arg(&out_file),
    );
    (out, out_file)
}

/// Signs `version` with `key`, publishes it and ships it to every device.
fn ship_signed(hsm: &SoftHsm, app: &TestApp, work: &Path, version: &str, key: &str) {
    let (out, release) = sign(hsm, work, version, key);
    ok(out);
    ok(run(
        hsm,
        ferry()
            .arg("publish")
            .arg(&release)
            .arg("--files")
            .arg(work)
            .args(["--server", &app.url(), "--token", ADMIN_TOKEN, "--quiet"]),
    ));
    app.ship(version);
}

/// What the C ABI loads of `mlp` (the `load_model` program of the C binding's tests).
fn c_abi_load(app: &TestApp, work: &Path) -> String {
    let exe = work.join("load_model");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    ferry_tests::compile_c(
        &root.join("tests/c/load_model.c"),
        &exe,
        &ferry_tests::ffi_library_dir(),
    );
    let side: ferry_shared::manifest::Golden = serde_json::from_slice(
        &std::fs::read(root.join("tests/fixtures/pte/mlp-v1-xnnpack.json")).expect("sidecar"),
    )
    .expect("golden");
    for (name, values) in [
        ("in.f32", &side.input[0].data),
        ("want.f32", &side.output[0].data),
    ] {
        let bytes: Vec<u8> = values
            .iter()
            .flat_map(|v| (*v as f32).to_le_bytes())
            .collect();
        std::fs::write(work.join(name), bytes).expect("write");
    }
    let device = r#"{"install_id":"c-hsm","platform":"linux","os_version":"6.1","device_model":"board","soc":"x86","ram_mb":4096}"#;
    let out = Command::new(&exe)
        .arg(app.url())
        .arg(app.dir.path().join("keys/trust.json"))
        .arg(work.join("c-cache"))
        .arg("mlp")
        .arg(device)
        .arg(work.join("in.f32"))
        .arg(work.join("want.f32"))
        .arg(side.atol.to_string())
        .arg(side.input[0].shape[0].to_string())
        .arg(side.input[0].shape[1].to_string())
        .output()
        .expect("run the C program");
    ok(out)
}

#[test]
fn releases_signed_in_a_token_and_by_an_exec_p256_signer_load_in_the_client_and_the_c_abi() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let keys = app.dir.path().join("keys");
    let pinned = app.trust();
    let work = tempfile::tempdir().expect("tmp");
    let hsm = SoftHsm::new("ferry-release");
    hsm.keygen("release", "01", "EC:edwards25519");

    // The release key moves into the token: only a keyring version and the retired key file
    // are new in the key folder, and no file holds a secret it did not hold before.
    let before = files_under(&keys);
    ok(rotate(
        &hsm,
        "release",
        &keys,
        &["--new-key", &hsm.uri("release")],
    ));
    let after = files_under(&keys);
    let added: Vec<&String> = after.iter().filter(|f| !before.contains(f)).collect();
    assert_eq!(added.len(), 2, "{added:?}");
    assert!(added.iter().any(|f| f.starts_with("keyring/")), "{added:?}");
    assert!(
        added.iter().any(|f| f.starts_with("retired/release-")),
        "{added:?}"
    );
    assert!(
        !keys.join("release.key").exists(),
        "no file release key stays in use"
    );
    push(&hsm, &app, &keys);
    ship_signed(&hsm, &app, work.path(), "1.1.0", &hsm.uri("release"));
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&pinned, &app.url(), cache.path());
    let m = c
        .load("mlp", &board())
        .expect("a release signed in the token");
    assert_eq!(m.release, "1.1.0");
    assert_eq!(c.keyring_version(), 2);
    drop(m);

    // Then to a P-256 key behind an exec: signer (a KMS stand-in): ECDSA, DER signatures.
    let exec = openssl_p256_signer(work.path());
    let before = files_under(&keys);
    // The first P-256 key in a keyring strands clients built before P-256: the operator has
    // to say the fleet reads it.
    let refused = rotate(&hsm, "release", &keys, &["--new-key", &exec]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--fleet-reads-p256"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(
        files_under(&keys),
        before,
        "a refused rotation writes nothing"
    );
    ok(rotate(
        &hsm,
        "release",
        &keys,
        &["--fleet-reads-p256", "--new-key", &exec],
    ));
    let added: Vec<String> = files_under(&keys)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    assert_eq!(added.len(), 1, "only the keyring: {added:?}");
    let keyring = std::fs::read_to_string(keys.join(&added[0])).expect("keyring");
    let env: ferry_shared::trust::dsse::Envelope =
        serde_json::from_str(&keyring).expect("envelope");
    let payload = ferry_tests::app::payload(&env);
    assert!(
        String::from_utf8_lossy(&payload).contains("\"algorithm\":\"ecdsa-p256-sha256\""),
        "the keyring names the new key's algorithm"
    );
    push(&hsm, &app, &keys);
    ship_signed(&hsm, &app, work.path(), "1.2.0", &exec);
    let m = c
        .load("mlp", &board())
        .expect("a release signed with ECDSA P-256");
    assert_eq!(m.release, "1.2.0");
    assert_eq!(c.keyring_version(), 3);
    drop(m);
    let stdout = c_abi_load(&app, work.path());
    assert!(stdout.contains("variant=xnnpack-fp32"), "{stdout}");
    assert!(stdout.contains("source=downloaded"), "{stdout}");
}

#[test]
fn a_root_rotated_into_the_token_signs_keyrings_and_a_token_key_signs_revocations() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let keys = app.dir.path().join("keys");
    let pinned = app.trust();
    let work = tempfile::tempdir().expect("tmp");
    let hsm = SoftHsm::new("ferry-root");
    hsm.keygen("root", "01", "EC:prime256v1");
    hsm.keygen("release", "02", "EC:edwards25519");

    // Root: the old file root and the token's P-256 key both sign keyring version 2.
    ok(rotate(
        &hsm,
        "root",
        &keys,
        &["--fleet-reads-p256", "--new-key", &hsm.uri("root")],
    ));
    assert!(!keys.join("root.key").exists());
    let trust: serde_json::Value =
        serde_json::from_slice(&std::fs::read(keys.join("trust.json")).expect("trust"))
            .expect("json");
    assert_eq!(
        trust["keys"][0]["algorithm"], "ecdsa-p256-sha256",
        "{trust}"
    );
    // Release: keyring version 3 is signed by the root in the token alone.
    ok(rotate(
        &hsm,
        "release",
        &keys,
        &[
            "--root-key",
            &hsm.uri("root"),
            "--new-key",
            &hsm.uri("release"),
        ],
    ));
    push(&hsm, &app, &keys);
    ship_signed(&hsm, &app, work.path(), "1.1.0", &hsm.uri("release"));
    let cache = tempfile::tempdir().expect("tmp");
    // A device pinned to the first (Ed25519) root walks to the token's root and on.
    let c = client(&pinned, &app.url(), cache.path());
    let m = c
        .load("mlp", &board())
        .expect("load through the token's root");
    assert_eq!((m.release.as_str(), c.keyring_version()), ("1.1.0", 3));
    drop(m);
    // The C ABI walks the same chain from the first root and loads the token-signed release.
    let stdout = c_abi_load(&app, work.path());
    assert!(stdout.contains("source=downloaded"), "{stdout}");
    // A new app build pinning the token's P-256 root starts at version 2.
    let fresh_pin = TrustFile::from_json(&std::fs::read(keys.join("trust.json")).expect("trust"))
        .expect("trust");
    let cache2 = tempfile::tempdir().expect("tmp");
    let c2 = client(&fresh_pin, &app.url(), cache2.path());
    assert_eq!(c2.load("mlp", &board()).expect("load").release, "1.1.0");

    // A revocation signed in the token: devices stop loading 1.2.0 and go back to 1.1.0.
    ship_signed(&hsm, &app, work.path(), "1.2.0", &hsm.uri("release"));
    assert_eq!(c.load("mlp", &board()).expect("load").release, "1.2.0");
    ok(run(
        &hsm,
        ferry()
            .args([
                "release",
                "revoke",
                "mlp",
                "1.2.0",
                "--reason",
                "bad weights",
                "--key",
            ])
            .arg(hsm.uri("release"))
            .args(["--server", &app.url(), "--token", ADMIN_TOKEN]),
    ));
    let m = c
        .load("mlp", &board())
        .expect("the release before the revoked one");
    assert_eq!(m.release, "1.1.0", "{:?}", m.source);
    drop(m);
    // Offline, the revoked release (listed by the token-signed revocation list the device
    // verified) is not served from the cache.
    assert_ne!(
        c.cached("mlp").map(|m| m.release.clone()).as_deref(),
        Some("1.2.0")
    );
}

/// `ferry sign` with `key`: the exit code, stderr, and whether a release file was written.
fn sign_refused(hsm: &SoftHsm, work: &Path, key: &str) -> (i32, String, bool) {
    let (out, file) = sign(hsm, work, "9.9.9", key);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        file.exists(),
    )
}

#[test]
fn a_refused_pin_a_missing_key_and_failing_signers_sign_nothing_and_exit_with_their_code() {
    let work = tempfile::tempdir().expect("tmp");
    let hsm = SoftHsm::new("ferry-errors");
    hsm.keygen("release", "01", "EC:edwards25519");
    let pem = work.path().join("k.pem");
    let other = work.path().join("other.pem");
    for p in [&pem, &other] {
        ferry_tests::signers::p256_pem(p);
    }
    let module_gone = hsm
        .uri("release")
        .replace("libsofthsm2.so", "libnothere.so");
    let no_token = hsm
        .uri("release")
        .replace("token=ferry-errors", "token=elsewhere");
    let garbage = format!(
        "exec:/bin/sh {} {}",
        script("garbage.sh").display(),
        pem.display()
    );
    let liar = format!(
        "exec:/bin/sh {} {} {}",
        script("liar.sh").display(),
        pem.display(),
        other.display()
    );
    let cases: [(&str, String, i32, &str); 9] = [
        (
            "a wrong PIN",
            hsm.uri_with_pin("release", "0000"),
            3,
            "refused the PIN",
        ),
        (
            "no PIN at all",
            hsm.uri("release")
                .split("&pin-source")
                .next()
                .unwrap_or_default()
                .to_string(),
            3,
            "no PIN",
        ),
        ("an unknown object", hsm.uri("nothere"), 1, "no private key"),
        ("a missing library", module_gone, 7, "no PKCS#11 library"),
        ("a missing token", no_token, 7, "no such token"),
        (
            "a signer that fails",
            "exec:/bin/false".to_string(),
            1,
            "failed",
        ),
        (
            "a signer that is not there",
            "exec:/nonexistent/kms-signer".to_string(),
            7,
            "cannot start",
        ),
        ("a signer that prints garbage", garbage, 1, "not base64"),
        (
            "a signer whose signature is not its key's",
            liar,
            1,
            "does not verify",
        ),
    ];
    for (what, key, code, says) in cases {
        let (got, stderr, written) = sign_refused(&hsm, work.path(), &key);
        assert_eq!(got, code, "{what}: {stderr}");
        assert!(stderr.contains(says), "{what}: {stderr}");
        assert!(!written, "{what}: a release file was written");
        assert!(
            !stderr.contains(ferry_tests::signers::PIN),
            "{what}: the PIN shows: {stderr}"
        );
    }
    let (got, stderr, written) = sign_refused(&hsm, work.path(), "awskms:///alias/ferry");
    assert_eq!((got, written), (1, false), "{stderr}");
    assert!(stderr.contains("unknown key scheme"), "{stderr}");
    // The online key stays a file: --new-key is a usage error there.
    let keys = work.path().join("keys");
    ok(run(
        &hsm,
        ferry().args(["keys", "generate", "--out"]).arg(&keys),
    ));
    let out = rotate(&hsm, "online", &keys, &["--new-key", &hsm.uri("release")]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `VARIANTS.toml` for `mlp` `version` whose manifest is larger than a pipe's buffer (three
/// variants, each listing 500 SoCs), so that a signer that does not read its input makes
/// ferry's write fail every time, not only when it loses a race.
fn large_variants(work: &Path, version: &str) -> std::path::PathBuf {
    let small = variants(work, version);
    let socs: Vec<String> = (0..500)
        .map(|i| format!("\"vendor-soc-family-with-a-long-marketing-name-{i:04}\""))
        .collect();
    let mut text = format!("model = \"mlp\"\nversion = \"{version}\"\n");
    for id in ["xnnpack-fp32", "xnnpack-fp32-b", "xnnpack-fp32-c"] {
        text.push_str(&format!(
            "\n[[variant]]\nid = \"{id}\"\nfile = \"mlp-v1-xnnpack.pte\"\ndelegate = \
             \"xnnpack\"\nquant = \"fp32\"\nruntime = \">=1.0.0\"\napp = \"*\"\nsocs = [{}]\n",
            socs.join(", ")
        ));
    }
    std::fs::write(&small, text).expect("write");
    small
}

#[test]
fn signers_that_cannot_sign_and_pins_that_do_not_match_are_found_before_anything_is_written() {
    let work = tempfile::tempdir().expect("tmp");
    let hsm = SoftHsm::new("ferry-checks");
    hsm.keygen("root", "01", "EC:edwards25519");
    hsm.keygen("release", "02", "EC:edwards25519");
    let pem = work.path().join("k.pem");
    ferry_tests::signers::p256_pem(&pem);
    let exec = |name: &str| format!("exec:/bin/sh {} {}", script(name).display(), pem.display());

    // A signer that exits without reading the message: its exit status is the answer (exit 1
    // and its last words), never a signal that kills ferry.
    let spec = large_variants(work.path(), "7.0.0");
    let out_file = work.path().join("release-7.0.0.json");
    for _ in 0..3 {
        let out = run(
            &hsm,
            ferry()
                .arg("sign")
                .arg(&spec)
                .args(["--key", &exec("closes-input.sh"), "-o"])
                .arg(&out_file),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("login failed"), "{stderr}");
        assert!(!out_file.exists());
    }

    // A signer that never answers is stopped at FERRY_SIGNER_TIMEOUT_SECS with every process
    // it started.
    let pid_file = work.path().join("helper.pid");
    let hangs = format!(
        "exec:/bin/sh {} {} {}",
        script("hangs.sh").display(),
        pem.display(),
        pid_file.display()
    );
    let small = variants(work.path(), "7.1.0");
    let out = run(
        &hsm,
        ferry()
            .env("FERRY_SIGNER_TIMEOUT_SECS", "2")
            .arg("sign")
            .arg(&small)
            .args(["--key", &hangs, "-o"])
            .arg(work.path().join("release-7.1.0.json")),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("no answer within 2 s"), "{stderr}");
    let helper = std::fs::read_to_string(&pid_file).expect("the signer started its helper");
    ferry_tests::until("the signer's helper process is gone", || {
        !Path::new(&format!("/proc/{}", helper.trim())).exists()
    });

    // A key about to be listed in a keyring signs a test message first.
    let keys = work.path().join("keys");
    ok(run(
        &hsm,
        ferry().args(["keys", "generate", "--out"]).arg(&keys),
    ));
    let before = files_under(&keys);
    let out = rotate(
        &hsm,
        "release",
        &keys,
        &["--fleet-reads-p256", "--new-key", &exec("cannot-sign.sh")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("AccessDenied"), "{stderr}");
    assert_eq!(files_under(&keys), before, "nothing was written");
    let generated = work.path().join("generated");
    let out = run(
        &hsm,
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(&generated)
            .args(["--release-key", &exec("cannot-sign.sh")]),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(files_under(&generated).is_empty());

    // The root moves into the token; then a release key of the same token with a wrong PIN:
    // the token is already logged in for the root, so ferry checks the PIN itself.
    ok(rotate(
        &hsm,
        "root",
        &keys,
        &["--new-key", &hsm.uri("root")],
    ));
    let before = files_under(&keys);
    let wrong = hsm.uri_with_pin("release", "0000");
    let out = rotate(
        &hsm,
        "release",
        &keys,
        &["--root-key", &hsm.uri("root"), "--new-key", &wrong],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("PIN refused"), "{stderr}");
    assert_eq!(files_under(&keys), before, "nothing was written");

    // With the right PIN inline, nothing ferry prints shows it.
    let right = hsm.uri_with_pin("release", ferry_tests::signers::PIN);
    let out = rotate(
        &hsm,
        "release",
        &keys,
        &["--root-key", &hsm.uri("root"), "--new-key", &right],
    );
    let said = ok(out);
    assert!(said.contains("pin-value=***"), "{said}");
    assert!(
        !said.contains(&format!("pin-value={}", ferry_tests::signers::PIN)),
        "{said}"
    );
    let (code, stderr, _) = sign_refused(&hsm, work.path(), &format!("{right}&pin-value=1"));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("given twice"), "{stderr}");
    assert!(!stderr.contains(ferry_tests::signers::PIN), "{stderr}");
    let typo = right.replace("pkcs11:", "PKCS11:");
    let (code, stderr, _) = sign_refused(&hsm, work.path(), &typo);
    assert_eq!(code, 1, "{stderr}");
    assert!(!stderr.contains(ferry_tests::signers::PIN), "{stderr}");
}
