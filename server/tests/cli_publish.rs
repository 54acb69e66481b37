//! The operator workflow with the real binary: generate keys, sign, serve, publish (twice),
//! resolve; and `ferry sign` refusing a variant whose delegate is not in its bytes.

use std::path::{Path, PathBuf};

mod common;

use common::{TOKEN, ferry, fixtures, run_ok, serve};

fn write_variants(dir: &Path, vulkan_file: &str) -> PathBuf {
    for f in [
        "mlp-v1-xnnpack.pte",
        "mlp-v1-vulkan.pte",
        "mlp-v1-xnnpack.json",
    ] {
        std::fs::copy(fixtures().join(f), dir.join(f)).expect("copy fixture");
    }
    let toml = format!(
        r#"model = "cli-mlp"
version = "1.0.0"
notes = "from the CLI test"

[[variant]]
id = "vulkan-fp32"
file = "{vulkan_file}"
delegate = "vulkan"
quant = "fp32"
runtime = ">=1.5.0, <2.0.0"
app = "*"
platforms = ["android"]
min_ram_mb = 2048

[[variant]]
id = "xnnpack-fp32"
file = "mlp-v1-xnnpack.pte"
delegate = "xnnpack"
quant = "fp32"
runtime = ">=1.5.0, <2.0.0"
app = "*"
golden = "mlp-v1-xnnpack.json"
"#
    );
    let path = dir.join("VARIANTS.toml");
    std::fs::write(&path, toml).expect("write toml");
    path
}

#[test]
fn generate_sign_serve_publish_resolve() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).expect("mkdir");

    let out = run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(data.join("keys")),
    );
    assert!(out.contains("created release key"), "{out}");
    // Generating again must not overwrite.
    assert!(
        !ferry()
            .args(["keys", "generate", "--out"])
            .arg(data.join("keys"))
            .status()
            .expect("run")
            .success()
    );

    let variants = write_variants(&files, "mlp-v1-vulkan.pte");
    let release = tmp.path().join("release.json");
    let out = run_ok(
        ferry()
            .arg("sign")
            .arg(&variants)
            .arg("--key")
            .arg(data.join("keys/release.key"))
            .arg("-o")
            .arg(&release),
    );
    assert!(out.contains("signed cli-mlp 1.0.0"), "{out}");
    assert!(out.contains("VulkanBackend"), "{out}");

    let server = serve(&data);
    let publish = |extra: &[&str]| {
        let mut c = ferry();
        c.arg("publish")
            .arg(&release)
            .arg("--files")
            .arg(&files)
            .args(["--server", &server.url, "--token", TOKEN, "--quiet"])
            .args(extra);
        c
    };
    let out = run_ok(&mut publish(&[]));
    assert!(out.contains("published cli-mlp 1.0.0"), "{out}");
    assert!(out.contains("uploaded"), "{out}");
    let again = run_ok(&mut publish(&[]));
    assert!(again.contains("already on the server"), "{again}");
    assert!(again.contains("already published (identical)"), "{again}");

    // A wrong token fails with the server's code.
    let out = ferry()
        .arg("publish")
        .arg(&release)
        .arg("--files")
        .arg(&files)
        .args([
            "--server",
            &server.url,
            "--token",
            "nope-nope-nope-nope",
            "--quiet",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unauthorized"), "{err}");

    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let dev = serde_json::json!({
        "model": "cli-mlp", "install_id": "x", "app_version": "1.0.0", "runtime_version": "1.5.1",
        "backends": ["XnnpackBackend", "VulkanBackend"], "platform": "android", "os_version": "14",
        "device_model": "Pixel 8", "soc": "Tensor G3", "ram_mb": 8192
    });
    let mut resp = agent
        .post(format!("{}/v1/resolve", server.url))
        .header("content-type", "application/json")
        .send(serde_json::to_vec(&dev).expect("json").as_slice())
        .expect("resolve");
    assert_eq!(resp.status().as_u16(), 200);
    let body: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json");
    let payload = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        body["decision"]["payload"].as_str().expect("payload"),
    )
    .expect("base64");
    let decision: serde_json::Value = serde_json::from_slice(&payload).expect("decision");
    let ids: Vec<&str> = decision["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .filter_map(|c| c["variant"].as_str())
        .collect();
    assert_eq!(ids, ["vulkan-fp32", "xnnpack-fp32"]);
}

#[test]
fn sign_refuses_a_delegate_that_is_not_in_the_bytes() {
    let tmp = tempfile::tempdir().expect("tmp");
    run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(tmp.path().join("keys")),
    );
    // The "vulkan" variant points at the XNNPACK program.
    let variants = write_variants(tmp.path(), "mlp-v1-xnnpack.pte");
    let out = ferry()
        .arg("sign")
        .arg(&variants)
        .arg("--key")
        .arg(tmp.path().join("keys/release.key"))
        .arg("-o")
        .arg(tmp.path().join("release.json"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("never calls VulkanBackend"), "{err}");
    assert!(!tmp.path().join("release.json").exists());
}
