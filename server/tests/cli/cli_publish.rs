//! The operator workflow with the real binary: generate keys, sign, serve, publish (twice),
//! resolve; `ferry sign` refusing a variant whose delegate is not in its bytes, and checking a
//! program's data files.

use std::path::{Path, PathBuf};

use crate::common;

use common::{TOKEN, assert_valid, ferry, fixtures, run_ok, serve};

pub(crate) fn write_variants(dir: &Path, vulkan_file: &str) -> PathBuf {
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

#[test]
fn sign_checks_a_programs_data_files_and_publish_uploads_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(data.join("keys")),
    );
    for f in [
        "mlp-external-portable.pte",
        "mlp-external-portable.ptd",
        "mlp-external-portable.json",
    ] {
        std::fs::copy(fixtures().join(f), files.join(f)).expect("copy fixture");
    }
    // A data file whose tensor is named differently: a valid .ptd that lacks fc1.weight.
    let ptd = std::fs::read(fixtures().join("mlp-external-portable.ptd")).expect("ptd");
    let at = ptd
        .windows(10)
        .position(|w| w == b"fc1.weight")
        .expect("the key is in the file");
    let mut other = ptd.clone();
    other[at + 2] = b'9';
    std::fs::write(files.join("other.ptd"), &other).expect("write");

    let variants = files.join("VARIANTS.toml");
    let release = tmp.path().join("release.json");
    let sign_with = |data_line: &str| {
        std::fs::write(
            &variants,
            format!(
                "model = \"ext-mlp\"\nversion = \"1.0.0\"\n\n[[variant]]\nid = \"portable-fp32\"\n\
                 file = \"mlp-external-portable.pte\"\ndelegate = \"portable\"\nquant = \"fp32\"\n\
                 runtime = \">=1.5.0\"\napp = \"*\"\ngolden = \"mlp-external-portable.json\"\n\
                 {data_line}\n"
            ),
        )
        .expect("write toml");
        ferry()
            .arg("sign")
            .arg(&variants)
            .arg("--key")
            .arg(data.join("keys/release.key"))
            .arg("-o")
            .arg(&release)
            .arg("--json")
            .output()
            .expect("run")
    };
    let refused = |data_line: &str| -> String {
        let out = sign_with(data_line);
        assert!(!out.status.success(), "{data_line}");
        assert!(!release.exists(), "nothing is written when sign refuses");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    // Without its data file: refused, naming the tensors and the fix.
    let err = refused("");
    assert!(
        err.contains("keeps 4 tensor(s) in a separate data file (.ptd): fc1.bias, fc1.weight"),
        "{err}"
    );
    assert!(err.contains("data = [\"NAME.ptd\"]"), "{err}");
    // A data file that is not a .ptd (the program itself).
    let err = refused("data = [\"mlp-external-portable.pte\"]");
    assert!(err.contains("is not a valid .ptd"), "{err}");
    // A .ptd that does not hold every tensor the program needs.
    let err = refused("data = [\"other.ptd\"]");
    assert!(
        err.contains("its data files do not provide 1 tensor(s)") && err.contains("fc1.weight"),
        "{err}"
    );
    // A data file that is missing.
    let err = refused("data = [\"nosuch.ptd\"]");
    assert!(err.contains("cannot read data file"), "{err}");
    // The same tensors from two files: the runtime would refuse the repeated names.
    std::fs::write(files.join("copy.ptd"), &ptd).expect("write");
    let err = refused("data = [\"mlp-external-portable.ptd\", \"copy.ptd\"]");
    assert!(
        err.contains("fc1.bias is in both mlp-external-portable.ptd and copy.ptd"),
        "{err}"
    );
    // A tensor with another element type than the program declares (float32 -> int32).
    let int32 = (0..ptd.len())
        .map(|i| {
            let mut b = ptd.clone();
            b[i] = 3;
            b
        })
        .find(|b| {
            ferry_shared::pte::inspect_ptd(b).is_ok_and(|r| {
                r.tensors
                    .iter()
                    .any(|t| t.key == "fc2.bias" && t.scalar_type == 3 && t.sizes == [8])
            })
        })
        .expect("a byte that makes fc2.bias int32");
    std::fs::write(files.join("int32.ptd"), &int32).expect("write");
    let err = refused("data = [\"int32.ptd\"]");
    assert!(
        err.contains("fc2.bias: the program declares float32 [8], int32.ptd holds int32 [8]"),
        "{err}"
    );
    // The data file given as the program.
    let out = {
        let v = std::fs::read_to_string(&variants).expect("toml");
        std::fs::write(
            &variants,
            v.replace(
                "file = \"mlp-external-portable.pte\"",
                "file = \"mlp-external-portable.ptd\"",
            ),
        )
        .expect("write");
        ferry()
            .arg("sign")
            .arg(&variants)
            .arg("--key")
            .arg(data.join("keys/release.key"))
            .arg("-o")
            .arg(&release)
            .output()
            .expect("run")
    };
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is a data file (.ptd), not a program"),
        "{err}"
    );
    // A program given as a data file says so.
    let err = refused("data = [\"mlp-external-portable.pte\"]");
    assert!(
        err.contains("expected \"FT01\" (a .ptd data file) (this is a program, .pte)"),
        "{err}"
    );

    // With it: signed, and the manifest names the data file.
    let out = sign_with("data = [\"mlp-external-portable.ptd\"]");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let signed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_valid(&signed, "cli.schema.json#/$defs/sign");
    let entry = &signed["variants"][0]["data"][0];
    assert_eq!(entry["name"], "mlp-external-portable.ptd", "{signed}");
    assert_eq!(entry["size"], ptd.len() as u64, "{signed}");

    publish_and_inspect_data_file(&data, &files, &release, &ptd);
}

/// Published through the CLI, the data file is uploaded with the program, once; `ferry inspect`
/// names the tensors the program needs and the ones the data file holds.
fn publish_and_inspect_data_file(data: &Path, files: &Path, release: &Path, ptd: &[u8]) {
    // Published through the CLI: the data file is uploaded with the program, once.
    let server = serve(data);
    let out = run_ok(
        ferry()
            .arg("publish")
            .arg(release)
            .arg("--files")
            .arg(files)
            .args(["--server", &server.url, "--token", TOKEN, "--json"]),
    );
    let published: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_valid(&published, "cli.schema.json#/$defs/publish");
    assert_eq!(published["state"], "published", "{published}");
    let blobs = published["blobs"].as_array().expect("blobs");
    assert_eq!(blobs.len(), 2, "{published}");
    let data_blob = blobs
        .iter()
        .find(|b| b["data_file"] == "mlp-external-portable.ptd")
        .expect("the data file was handled");
    assert_eq!(data_blob["uploaded"], true, "{published}");
    assert_eq!(data_blob["variant"], "portable-fp32", "{published}");
    let stored = data
        .join("store/blobs/sha256")
        .join(ferry_shared::Sha256Digest::of(ptd).to_hex());
    assert_eq!(std::fs::read(&stored).ok().as_deref(), Some(ptd));

    // `ferry inspect` names the tensors the program needs and the ones the data file holds.
    let out = run_ok(
        ferry()
            .arg("inspect")
            .arg(files.join("mlp-external-portable.pte")),
    );
    assert!(
        out.contains("4 tensors in a separate data file (.ptd)"),
        "{out}"
    );
    let out = run_ok(
        ferry()
            .arg("inspect")
            .arg(files.join("mlp-external-portable.ptd")),
    );
    assert!(out.contains("4 tensor(s)"), "{out}");
    for key in ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"] {
        assert!(out.contains(key), "{out}");
    }
    assert!(out.contains("float32   [32, 16]"), "{out}");
}
