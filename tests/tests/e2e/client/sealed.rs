//! Sealed variants (issue 50), end to end with the real `ferry` binary, the real server and the
//! real ExecuTorch runtime: `ferry sign` seals a program, its `.ptd` and its labels, `ferry
//! publish` uploads only ciphertext, a client that can open the scheme resolves, downloads,
//! gets the keys with its receipt and loads through the decrypting data loader, with the
//! exporter's outputs; no 32-byte block of the plaintext program or data file is anywhere in
//! the store or the client's cache; key requests without a valid receipt are refused; a copy
//! of the cache under another install id cannot load it offline; a client from before sealing
//! never gets the variant; an operator's stop holds on every replica and after a restart.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_client::{Client, ClientError};
use ferry_shared::manifest::TensorValue;
use ferry_tests::app::{ADMIN_TOKEN, TestApp};
use ferry_tests::kit::device;
use ferry_tests::signers::ferry;

const PROGRAM: &str = "mlp-external-portable.pte";
const DATA: &str = "mlp-external-portable.ptd";
const SIDECAR: &str = "mlp-external-portable.json";
const LABELS: &str = "labels.txt";

fn fixture(name: &str) -> PathBuf {
    ferry_tests::fixtures_dir().join("pte").join(name)
}

fn tensors(v: &serde_json::Value) -> Vec<TensorValue> {
    serde_json::from_value(v.clone()).expect("tensors")
}

/// A release folder for `model` `version`: the program, its data file, the golden and a
/// labels file, with a VARIANTS.toml sealing them (and, with `plain_too`, an unsealed copy of
/// the variant).
fn release_dir(dir: &Path, model: &str, version: &str, plain_too: bool) -> PathBuf {
    let files = dir.join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    for f in [PROGRAM, DATA, SIDECAR] {
        std::fs::copy(fixture(f), files.join(f)).expect("copy");
    }
    std::fs::write(files.join(LABELS), "zero\none\ntwo\n").expect("labels");
    let variant = |id: &str, sealed: bool| {
        format!(
            "[[variant]]\nid = \"{id}\"\nfile = \"{PROGRAM}\"\ndelegate = \"portable\"\n\
             quant = \"fp32\"\nruntime = \">=1.0.0\"\napp = \"*\"\ndata = [\"{DATA}\"]\n\
             golden = \"{SIDECAR}\"\nlabels = \"{LABELS}\"\nsealed = {sealed}\n"
        )
    };
    let mut toml = format!("model = \"{model}\"\nversion = \"{version}\"\n\n");
    toml.push_str(&variant("sealed-fp32", true));
    if plain_too {
        toml.push('\n');
        toml.push_str(&variant("portable-fp32", false));
    }
    std::fs::write(files.join("VARIANTS.toml"), toml).expect("toml");
    files
}

/// Signs and publishes the release in `files` with the `ferry` binary (sealed files go to
/// `dir/sealed`); the signed manifest's JSON.
pub(crate) fn sign_and_publish(app: &TestApp, dir: &Path, files: &Path) -> serde_json::Value {
    let sealed = dir.join("sealed");
    let release = dir.join("release.json");
    let out = ferry()
        .arg("sign")
        .arg(files.join("VARIANTS.toml"))
        .arg("--key")
        .arg(app.keys_dir().join("release.key"))
        .arg("-o")
        .arg(&release)
        .arg("--sealed-out")
        .arg(&sealed)
        .arg("--json")
        .output()
        .expect("ferry sign");
    assert!(
        out.status.success(),
        "sign: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let signed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("sign --json");
    let out = ferry()
        .arg("publish")
        .arg(&release)
        .args(["--files"])
        .arg(&sealed)
        .args(["--files"])
        .arg(files)
        .args(["--server", &app.url(), "--token", ADMIN_TOKEN, "--quiet"])
        .output()
        .expect("ferry publish");
    assert!(
        out.status.success(),
        "publish: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    signed
}

/// `ferry release seal-stop sealed 1.0.0 ARGS` against `url`, which must succeed.
fn seal_stop(url: &str, args: &[&str]) {
    let out = ferry()
        .args(["release", "seal-stop", "sealed", "1.0.0"])
        .args(args)
        .args(["--server", url, "--token", ADMIN_TOKEN])
        .output()
        .expect("seal-stop");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn client(app: &TestApp, url: &str, cache: &Path) -> Arc<Client> {
    Arc::new(app.client_at(url, cache).build().expect("client"))
}

/// Every aligned 32-byte block of the plaintext program and data file: any 64-byte window of
/// either holds one of them.
fn plaintext_blocks() -> HashSet<Vec<u8>> {
    let mut out = HashSet::new();
    for f in [PROGRAM, DATA] {
        let bytes = std::fs::read(fixture(f)).expect("fixture");
        out.extend(bytes.chunks_exact(32).map(<[u8]>::to_vec));
    }
    out
}

/// The files under `root` that contain a block of `blocks` (at any offset).
fn leaks(root: &Path, blocks: &HashSet<Vec<u8>>) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p)
                && bytes.windows(32).any(|w| blocks.contains(w))
            {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

#[test]
fn a_sealed_release_loads_with_the_exporters_outputs_and_no_plaintext_rests_anywhere() {
    let app = TestApp::start();
    let dir = tempfile::tempdir().expect("tmp");
    let files = release_dir(dir.path(), "sealed", "1.0.0", false);
    let signed = sign_and_publish(&app, dir.path(), &files);
    assert_eq!(signed["variants"][0]["sealed"], "ferry-seal-1", "{signed}");
    let side: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture(SIDECAR)).expect("sidecar")).expect("json");

    let cache = tempfile::tempdir().expect("cache");
    let c = client(&app, &app.url(), cache.path());
    let mut model = c
        .load("sealed", &device("sealed-device"))
        .expect("a sealed variant loads");
    assert_eq!(model.variant, "sealed-fp32");
    assert!(model.is_sealed());
    assert_eq!(model.report.load_mode.as_deref(), Some("source"));
    let got = model.run(&tensors(&side["input"])).expect("runs");
    let diff = ferry_client::max_abs_diff(&got, &tensors(&side["output"])).expect("shapes");
    assert!(diff < 1e-4, "off the exporter's output by {diff}");
    // The labels were sealed too, and read through the key.
    assert_eq!(
        model.labels(),
        Some(&["zero".to_string(), "one".into(), "two".into()][..])
    );
    let mut text = String::new();
    std::io::Read::read_to_string(&mut model.open_asset(LABELS).expect("asset"), &mut text)
        .expect("reads");
    assert_eq!(text, "zero\none\ntwo\n");
    let cached_labels = std::fs::read(model.asset(LABELS).expect("path")).expect("read");
    assert!(!cached_labels.windows(4).any(|w| w == b"zero"));
    drop(model);

    // No 64-byte window of the program or data file in the store, the cache or the key store.
    let blocks = plaintext_blocks();
    assert_eq!(leaks(&app.store_dir(), &blocks), Vec::<String>::new());
    assert_eq!(leaks(cache.path(), &blocks), Vec::<String>::new());
    // Nor in what the server serves: every blob the manifest names, fetched over HTTP.
    let v = &signed["variants"][0];
    let mut digests = vec![v["sha256"].as_str().expect("sha").to_string()];
    for side in ["data", "assets"] {
        for f in v[side].as_array().into_iter().flatten() {
            digests.push(f["sha256"].as_str().expect("sha").to_string());
        }
    }
    assert_eq!(digests.len(), 3, "{signed}");
    for d in &digests {
        let bytes = ureq::get(app.at(&format!("/v1/blobs/sha256/{d}")))
            .call()
            .expect("blob")
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .expect("bytes");
        assert!(!bytes.windows(32).any(|w| blocks.contains(w)), "blob {d}");
    }
    // The key release was audited.
    let (status, audit) = app.get_json(
        "/v1/admin/models/sealed/releases/1.0.0/key-releases",
        Some(ADMIN_TOKEN),
    );
    assert_eq!(status, 200, "{audit}");
    assert_eq!(audit["total"], 1, "{audit}");
    assert_eq!(audit["records"][0]["install_id"], "sealed-device");
    assert_eq!(audit["records"][0]["variant"], "sealed-fp32");

    // Offline, the same install loads with the key it holds.
    let dead = "http://127.0.0.1:1".to_string();
    let offline = client(&app, &dead, cache.path());
    let mut model = offline
        .load("sealed", &device("sealed-device"))
        .expect("loads offline with the held key");
    assert_eq!(
        model.run(&tensors(&side["input"])).expect("runs"),
        got,
        "the same outputs offline"
    );
    drop(model);

    // The C ABI loads it with no change, and reads the sealed labels through the key.
    let target = ferry_tests::ffi_library_dir();
    let exe = dir.path().join("sealed_asset");
    ferry_tests::compile_c(
        &ferry_tests::fixtures_dir().join("../c/sealed_asset.c"),
        &exe,
        &target,
    );
    let trust = dir.path().join("trust.json");
    std::fs::copy(app.keys_dir().join("trust.json"), &trust).expect("trust");
    let c_cache = tempfile::tempdir().expect("c cache");
    let out = std::process::Command::new(&exe)
        .arg(app.url())
        .arg(&trust)
        .arg(c_cache.path())
        .args(["sealed", LABELS])
        .env("LD_LIBRARY_PATH", &target)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("variant=sealed-fp32"), "{stdout}");
    assert!(
        stdout.contains("asset<<<zero\none\ntwo\n>>>\nsize=13"),
        "{stdout}"
    );
    assert!(stdout.contains("absent: not_found"), "{stdout}");
    assert!(
        !c_cache.path().join("sealed-keys").exists(),
        "with sealed_key_store memory no key is written"
    );

    // A copy of the cache under another install id has no key, and none can be released.
    let copy = tempfile::tempdir().expect("copy");
    ferry_tests::app::copy_tree(cache.path(), copy.path()).expect("copy cache");
    let other = client(&app, &dead, copy.path());
    match other.load("sealed", &device("another-install")) {
        Err(ClientError::AllCandidatesFailed { attempts }) => {
            assert_eq!(attempts.len(), 1, "{attempts:?}");
            assert_eq!(attempts[0].error_code, "sealed_key_missing", "{attempts:?}");
            assert_eq!(attempts[0].stage, ferry_client::Stage::Key);
        }
        other => panic!("loaded from a copied cache: {:?}", other.map(|m| m.variant)),
    }

    // An operator stops the release: the device holding its keys forgets them at its next
    // online load (the answer names the stop), and nothing loads it any more.
    seal_stop(&app.url(), &["--reason", "test"]);
    let held = || {
        std::fs::read_dir(cache.path().join("sealed-keys"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert_eq!(held(), 3, "the program's, data file's and labels' keys");
    let online = client(&app, &app.url(), cache.path());
    let e = online
        .load("sealed", &device("sealed-device"))
        .expect_err("a stopped release does not load");
    assert!(e.to_string().contains("key_release_stopped"), "{e}");
    assert_eq!(held(), 0, "the held keys were forgotten");
}

/// `POST /v1/keys/release` with `body`: the status and the answer.
fn ask(app: &TestApp, url: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let mut resp = ureq::post(format!("{url}/v1/keys/release"))
        .config()
        .http_status_as_error(false)
        .build()
        .header("content-type", "application/json")
        .send(&serde_json::to_vec(body).expect("json")[..])
        .expect("request");
    let _ = app;
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or_default())
}

/// A resolve answer from `url` for `install` (listing the scheme when `sealing`).
fn resolve(url: &str, install: &str, sealing: bool) -> serde_json::Value {
    let schemes: &[&str] = if sealing { &["ferry-seal-1"] } else { &[] };
    let mut resp = ureq::post(format!("{url}/v1/resolve"))
        .header("content-type", "application/json")
        .send(
            &serde_json::to_vec(&serde_json::json!({
                "model": "sealed", "install_id": install, "app_version": "1.0.0",
                "runtime_version": "1.5.1", "backends": [], "platform": "linux",
                "seal_schemes": schemes
            }))
            .expect("json")[..],
        )
        .expect("resolve");
    assert_eq!(resp.status().as_u16(), 200);
    serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json")
}

/// The receipt of [`resolve`].
fn receipt(app: &TestApp, url: &str, install: &str, sealing: bool) -> String {
    let _ = app;
    resolve(url, install, sealing)["receipt"]
        .as_str()
        .expect("receipt")
        .to_string()
}

fn key_request(install: &str, receipt: &str) -> serde_json::Value {
    serde_json::json!({
        "model": "sealed", "release": "1.0.0", "variant": "sealed-fp32",
        "install_id": install, "platform": "linux", "receipt": receipt,
        "public_key": ferry_fs::sealed::keys::encode(&ferry_fs::sealed::keys::public_key(&[9; 32])),
    })
}

#[test]
fn keys_need_a_receipt_old_clients_never_get_sealed_variants_and_stops_hold_on_every_replica() {
    let mut app = TestApp::start();
    let dir = tempfile::tempdir().expect("tmp");
    let files = release_dir(dir.path(), "sealed", "1.0.0", true);
    sign_and_publish(&app, dir.path(), &files);

    // A client from before sealing lists no scheme: it is offered the unsealed variant only,
    // and explain says why.
    let (status, answer) = app.resolve(
        &serde_json::json!({
            "model": "sealed", "install_id": "old", "app_version": "1.0.0",
            "runtime_version": "1.5.1", "backends": [], "platform": "linux"
        }),
        true,
    );
    assert_eq!(status, 200, "{answer}");
    let (decision, _) = app.verify_response(&answer);
    let ids: Vec<String> = decision
        .candidates
        .iter()
        .map(|c| c.variant.to_string())
        .collect();
    assert_eq!(ids, vec!["portable-fp32"], "{answer}");
    let why = answer["explain"]
        .as_array()
        .expect("explain")
        .iter()
        .find(|e| e["variant"] == "sealed-fp32")
        .expect("sealed explained")["reasons"]
        .to_string();
    assert!(why.contains("cannot open sealed variants"), "{why}");

    // Key requests: a good one, then forged, foreign and malformed ones.
    let url = app.url();
    let good = receipt(&app, &url, "dev-1", true);
    // The receipt of a resolve that did not offer the sealed variant (an old client's).
    let plain_only = receipt(&app, &url, "dev-1", false);
    let (status, body) = ask(&app, &url, &key_request("dev-1", &good));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["keys"].as_array().map(Vec::len), Some(3), "{body}");
    let mut unsealed = key_request("dev-1", &good);
    unsealed["variant"] = "portable-fp32".into();
    for (body, code) in [
        (key_request("dev-2", &good), "key_release_refused"),
        (
            key_request("dev-1", "v1.sealed-fp32.AAAA"),
            "key_release_refused",
        ),
        (key_request("dev-1", ""), "key_release_refused"),
        (key_request("dev-1", &plain_only), "key_release_refused"),
        (unsealed, "request_invalid"),
        (serde_json::json!({"model": "sealed"}), "request_malformed"),
    ] {
        let (status, answer) = ask(&app, &url, &body);
        assert_eq!(answer["code"], code, "{status} {answer} for {body}");
        assert!(answer.get("keys").is_none());
    }
    let mut weak = key_request("dev-1", &good);
    weak["public_key"] = ferry_fs::sealed::keys::encode(&[0u8; 32]).into();
    assert_eq!(ask(&app, &url, &weak).0, 400);

    // Each install may ask 6 times a minute (refused receipts spend nothing of it).
    let codes: Vec<u16> = (0..6)
        .map(|_| ask(&app, &url, &key_request("dev-1", &good)).0)
        .collect();
    assert_eq!(codes, [200, 200, 200, 429, 429, 429], "{codes:?}");

    // Three replicas on one store: a stop made through one holds on all, and after a restart.
    let good = receipt(&app, &url, "dev-3", true);
    let r2 = app.replica(None);
    let r3 = app.replica(None);
    let r2_url = format!("http://{}", r2.addr);
    let r3_url = format!("http://{}", r3.addr);
    seal_stop(&r3_url, &["--reason", "leak"]);
    for u in [&url, &r2_url, &r3_url] {
        let (status, answer) = ask(&app, u, &key_request("dev-3", &good));
        assert_eq!(
            (status, answer["code"].as_str()),
            (410, Some("key_release_stopped"))
        );
    }
    // The replica that took the stop names it in its resolve answers at once; a restarted
    // one reads it from the store.
    let stopped_in = |u: &str| resolve(u, "dev-4", true)["sealed_stopped"].clone();
    assert_eq!(stopped_in(&r3_url), serde_json::json!(["1.0.0"]));
    app.restart().expect("restart");
    let url = app.url();
    let (status, _) = ask(&app, &url, &key_request("dev-3", &good));
    assert_eq!(status, 410, "the stop outlives a restart");
    assert_eq!(stopped_in(&url), serde_json::json!(["1.0.0"]));
    seal_stop(&r2_url, &["--resume"]);
    let (status, body) = ask(&app, &r3_url, &key_request("dev-3", &good));
    assert_eq!(status, 200, "{body}");
    let out = ferry()
        .args(["release", "key-releases", "sealed", "1.0.0", "--json"])
        .args(["--server", &r2_url, "--token", ADMIN_TOKEN])
        .output()
        .expect("key-releases");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    // Four for dev-1 (the first, then three before its allowance ran out), one for dev-3.
    assert_eq!(listed["total"], 5, "{listed}");
    assert!(listed["stopped"].is_null(), "{listed}");
}

/// An app's platform attestation: the token its platform gave for the request's binding.
struct TestAttest(&'static str);

impl ferry_client::seal::Attest for TestAttest {
    fn attest(&self, binding: &str) -> Option<(String, String)> {
        let token = match self.0 {
            "good" => format!("ok:{binding}"),
            other => other.to_string(),
        };
        Some(("test".into(), token))
    }
}

#[test]
fn with_attestation_required_only_devices_the_operators_verifier_allows_get_keys() {
    let verifier = ferry_tests::fixtures_dir().join("../attest/verifier.py");
    let app = TestApp::start_with(ferry_tests::app::Options {
        tweak: Some(Box::new(move |c| {
            c.sealing = ferry_server::release::attest::SealingConfig {
                attestation_verifier: Some(format!("exec:python3 {}", verifier.display())),
                require_attestation: true,
            };
        })),
        ..Default::default()
    });
    let dir = tempfile::tempdir().expect("tmp");
    let files = release_dir(dir.path(), "sealed", "1.0.0", false);
    sign_and_publish(&app, dir.path(), &files);
    let load = |attest: Option<&'static str>, install: &str| {
        let cache = tempfile::tempdir().expect("cache");
        let mut b = app.client(cache.path());
        if let Some(a) = attest {
            b = b.attestation(Arc::new(TestAttest(a)));
        }
        let c = b.build().expect("client");
        c.load("sealed", &device(install)).map(|m| m.variant)
    };
    let refused = |outcome: Result<String, ClientError>| match outcome {
        Err(ClientError::AllCandidatesFailed { attempts }) => attempts[0].error_code.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        load(Some("good"), "attested").expect("an attested device loads"),
        "sealed-fp32"
    );
    assert_eq!(refused(load(None, "no-token")), "key_release_refused");
    assert_eq!(
        refused(load(Some("ok:forged"), "forged")),
        "key_release_refused"
    );
    // A verifier that fails refuses: it fails closed.
    assert_eq!(
        refused(load(Some("crash"), "crashing")),
        "key_release_refused"
    );
    let (_, audit) = app.get_json(
        "/v1/admin/models/sealed/releases/1.0.0/key-releases",
        Some(ADMIN_TOKEN),
    );
    assert_eq!(audit["total"], 1, "{audit}");
    assert_eq!(audit["records"][0]["attestation"], "test", "{audit}");
}
