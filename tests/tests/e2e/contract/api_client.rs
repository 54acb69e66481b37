//! The OpenAPI document is usable, not only valid (issue 35): a Python client generated from
//! `schemas/openapi.bundled.json` by openapi-python-client (installed by tests/setup.sh)
//! carries a release from upload to telemetry against a real server
//! (tests/openapi_client/roundtrip.py).

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_server::release::sign::VariantsFile;
use ferry_tests::app::{ADMIN_TOKEN, TestApp, mlp_v1, mlp_v2, profile};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `cmd`, failing the test with its output when it fails.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `spec` built and signed with the app's release key, as `ferry sign` would: its version, the
/// envelope, and the files to upload (each once).
fn signed(app: &TestApp, spec: &VariantsFile) -> serde_json::Value {
    let (manifest, envelope, files) =
        ferry_tests::app::signed_release_files(spec, &app.release_key());
    serde_json::json!({
        "version": manifest.version.to_string(),
        "envelope": envelope,
        "files": files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    })
}

#[test]
fn a_generated_python_client_carries_a_release_from_upload_to_telemetry() {
    let bin = root().join(".deps/openapi-client/bin");
    assert!(
        bin.join("openapi-python-client").is_file(),
        "{} is missing: run tests/setup.sh (openapi-python-client from PyPI)",
        bin.display()
    );
    let work = tempfile::tempdir().expect("temp dir");
    let generated = run(
        Command::new(bin.join("openapi-python-client"))
            .current_dir(work.path())
            .args(["generate", "--meta", "none", "--output-path", "ferry_api"])
            .arg("--config")
            .arg(root().join("tests/openapi_client/generator.yml"))
            .arg("--path")
            .arg(root().join("schemas/openapi.bundled.json")),
        "openapi-python-client generate",
    );
    // Every schema and operation of the document became code: the generator names what it
    // had to leave out.
    assert!(
        !generated.contains("Warning"),
        "the generator left parts of the document out:\n{generated}"
    );

    let app = TestApp::start();
    // 1.0.0 becomes the baseline when it is published; 2.0.0 is rolled out.
    let releases: Vec<serde_json::Value> = [mlp_v1(), mlp_v2()]
        .iter()
        .map(|spec| signed(&app, spec))
        .collect();
    let files: usize = releases
        .iter()
        .map(|r| r["files"].as_array().expect("files").len())
        .sum();
    let job = serde_json::json!({
        "url": app.url(),
        "token": ADMIN_TOKEN,
        "model": "mlp",
        "releases": releases,
        "device": profile("linux", &["XnnpackBackend"], "1.5.1", "2.0.0", 4096),
    });
    let job_file = work.path().join("job.json");
    std::fs::write(&job_file, serde_json::to_vec(&job).expect("json")).expect("write job");
    let out = run(
        Command::new(bin.join("python"))
            .env("PYTHONPATH", work.path())
            .arg(root().join("tests/openapi_client/roundtrip.py"))
            .arg(&job_file),
        "the generated client's round trip",
    );
    let report: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or("")).expect("report");
    assert_eq!(report["uploaded"], files, "{report}");
    assert_eq!(
        report["unknown_release_code"], "release_not_found",
        "{report}"
    );
    assert_eq!(report["telemetry"]["accepted"], 1, "{report}");

    // The server saw what the generated client did: the release is the baseline through the
    // rollout it started and completed, and the load it reported counts in fleet health.
    let (s, rollout) = app.get_json("/v1/admin/models/mlp/rollout", Some(ADMIN_TOKEN));
    assert_eq!(s, 200, "{rollout}");
    assert_eq!(rollout["current"]["baseline"], "2.0.0", "{rollout}");
    let reason_seen = rollout["history"]
        .as_array()
        .expect("history")
        .iter()
        .any(|r| r["reason"] == "generated client");
    assert!(reason_seen, "{rollout}");
}
