//! `ferry evaluate` on the committed digits release (`tests/fixtures/eval/VARIANTS.toml`):
//! exit 8 and the damaged variant named when one fails, exit 0 when all pass, the JSON
//! contract; a `ferry` built without the runtime says how to get one.

use std::path::PathBuf;

use crate::common::ferry;

fn variants() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/eval/VARIANTS.toml")
}

#[cfg(feature = "executorch")]
#[test]
fn evaluate_exits_8_naming_the_variant_that_lost_accuracy() {
    let out = ferry()
        .arg("evaluate")
        .arg(variants())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("536 samples (4 dropped"), "{text}");
    assert!(text.contains("int8-damaged             FAIL"), "{text}");
    assert!(text.contains("above max_drop 1.00%"), "{text}");

    let out = ferry()
        .args(["evaluate", "--json"])
        .arg(variants())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(8));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = v["variants"].as_array().expect("variants");
    let ids: Vec<&str> = rows
        .iter()
        .map(|r| r["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["fp32", "int8", "int8-damaged"]);
    for r in rows {
        for key in ["evaluated", "metric", "value", "drop", "passed", "why_not"] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
    }
    assert_eq!(rows[1]["passed"], true);
    assert_eq!(rows[2]["passed"], false);

    // Without the damaged variant every evaluated one passes: exit 0.
    let dir = tempfile::tempdir().expect("tmp");
    let src = variants().parent().expect("dir").to_path_buf();
    for f in [
        "digits-fp32.pte",
        "digits-int8.pte",
        "digits-test.safetensors",
    ] {
        std::fs::copy(src.join(f), dir.path().join(f)).expect("copy");
    }
    let toml = std::fs::read_to_string(variants()).expect("toml");
    let kept = toml
        .split("[[variant]]")
        .filter(|part| !part.contains("int8-damaged"))
        .collect::<Vec<_>>()
        .join("[[variant]]");
    std::fs::write(dir.path().join("VARIANTS.toml"), kept).expect("write");
    let out = ferry()
        .arg("evaluate")
        .arg(dir.path().join("VARIANTS.toml"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[cfg(not(feature = "executorch"))]
#[test]
fn a_ferry_without_the_runtime_says_how_to_get_one() {
    let out = ferry()
        .arg("evaluate")
        .arg(variants())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--features executorch"), "{err}");
}

#[cfg(feature = "executorch")]
#[test]
fn sign_refuses_a_release_whose_variant_lost_accuracy_unless_told_why() {
    let dir = tempfile::tempdir().expect("tmp");
    crate::common::run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(dir.path().join("keys")),
    );
    let key = dir.path().join("keys/release.key");
    let out_file = dir.path().join("release.json");
    let out = ferry()
        .arg("sign")
        .arg(variants())
        .arg("--key")
        .arg(&key)
        .arg("-o")
        .arg(&out_file)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(8),
        "exit 8 like ferry evaluate: {out:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("accuracy_regression"), "{err}");
    assert!(err.contains("int8-damaged"), "{err}");
    assert!(!out_file.exists(), "nothing is signed");
    // A blank reason is a usage mistake, not an override.
    let out = ferry()
        .arg("sign")
        .arg(variants())
        .arg("--key")
        .arg(&key)
        .arg("-o")
        .arg(&out_file)
        .args(["--allow-regression", "  "])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!out_file.exists(), "nothing is signed");

    let json = crate::common::run_ok(
        ferry()
            .args(["--json", "sign"])
            .arg(variants())
            .arg("--key")
            .arg(&key)
            .arg("-o")
            .arg(&out_file)
            .args(["--allow-regression", "damaged build kept for the bisect"]),
    );
    let signed: serde_json::Value = serde_json::from_str(&json).expect("json");
    crate::common::assert_valid(&signed, "cli.schema.json#/$defs/sign");
    assert_eq!(signed["warnings"], serde_json::json!([]));
    assert_eq!(signed["variants"][2]["evaluation"]["passed"], false);
    assert_eq!(signed["variants"][0]["labels"], "digits-labels.txt");
    let env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_file).expect("release")).expect("json");
    use base64::Engine as _;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().expect("payload"))
        .expect("base64");
    let m: serde_json::Value = serde_json::from_slice(&payload).expect("manifest");
    let e = &m["evaluation"];
    assert_eq!(e["metric"], "top1");
    assert_eq!(e["samples"], 536);
    assert_eq!(e["results"]["int8"]["passed"], true);
    assert_eq!(e["results"]["int8-damaged"]["passed"], false);
    assert_eq!(e["override"]["reason"], "damaged build kept for the bisect");
    assert_eq!(e["override"]["failed"][0], "int8-damaged");
    // The release-wide metadata is signed into every variant, the labels file as an asset.
    for v in m["variants"].as_array().expect("variants") {
        assert_eq!(v["labels"], "digits-labels.txt");
        assert_eq!(v["assets"][0]["name"], "digits-labels.txt");
        assert_eq!(v["preprocess"]["color"], "gray");
        assert_eq!(v["preprocess"]["resize"]["filter"], "area");
    }

    // Published, the evaluation and its override show in `ferry releases` and the release API.
    // The server's data folder is the one holding the keys the release was signed with.
    let server = crate::common::serve(dir.path());
    let remote = [
        "--server",
        server.url.as_str(),
        "--token",
        crate::common::TOKEN,
    ];
    crate::common::run_ok(
        ferry()
            .arg("publish")
            .arg(&out_file)
            .arg("--files")
            .arg(variants().parent().expect("dir"))
            .args(remote),
    );
    let text = crate::common::run_ok(ferry().args(["releases", "digits"]).args(remote));
    assert!(text.contains("EVALUATION"), "{text}");
    assert!(
        text.contains("top1 FAILED int8-damaged (signed anyway: damaged build kept for the"),
        "{text}"
    );
    let json = crate::common::run_ok(ferry().args(["releases", "digits", "--json"]).args(remote));
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    crate::common::assert_valid(&v, "cli.schema.json#/$defs/releases");
    let row = &v["releases"][0]["evaluation"];
    assert_eq!(row["failed"], serde_json::json!(["int8-damaged"]));
    assert_eq!(row["override"], "damaged build kept for the bisect");
    assert_eq!(row["results"]["int8"]["passed"], true);
}

#[cfg(feature = "executorch")]
#[test]
fn evaluate_json_matches_its_schema() {
    let out = ferry()
        .args(["--json", "evaluate"])
        .arg(variants())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    crate::common::assert_valid(&v, "cli.schema.json#/$defs/evaluate");
    assert_eq!(v["samples"], 536);
    // The runtime's Info-level log (CPU probing on the first load) stays off stderr unless
    // asked for.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("I executorch:"), "{err}");
    let out = ferry()
        .args(["--json", "evaluate"])
        .arg(variants())
        .env("FERRY_EXECUTORCH_LOG", "info")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("I executorch:"), "{err}");
}

/// A VARIANTS.toml for the digits set in `dir`: `variants` as (id, file) pairs, with
/// `baseline` when given.
#[cfg(feature = "executorch")]
fn digits_release(version: &str, variants: &[(&str, &str)], baseline: Option<&str>) -> String {
    let mut t = format!(
        "model = \"digits\"\nversion = \"{version}\"\n\n[evaluation]\ndataset = \
         \"digits-test.safetensors\"\nmetric = \"top1\"\nreference = \"fp32\"\nmax_drop = 0.01\n"
    );
    if let Some(b) = baseline {
        t.push_str(&format!("baseline = \"{b}\"\n"));
    }
    for (id, file) in variants {
        t.push_str(&format!(
            "\n[[variant]]\nid = \"{id}\"\nfile = \"{file}\"\ndelegate = \"xnnpack\"\nquant = \
             \"int8\"\nruntime = \">=1.0.0\"\napp = \"*\"\n"
        ));
    }
    t
}

#[cfg(feature = "executorch")]
#[test]
fn a_release_that_lost_accuracy_against_the_one_in_force_is_refused_offline() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = variants().parent().expect("dir").to_path_buf();
    for f in [
        "digits-fp32.pte",
        "digits-int8.pte",
        "digits-int8-damaged.pte",
        "digits-test.safetensors",
    ] {
        std::fs::copy(src.join(f), dir.path().join(f)).expect("copy");
    }
    crate::common::run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(dir.path().join("keys")),
    );
    let key = dir.path().join("keys/release.key");
    let sign = |toml: &str, version: &str| {
        let spec = dir.path().join(format!("VARIANTS-{version}.toml"));
        std::fs::write(&spec, toml).expect("write");
        let out = ferry()
            .arg("sign")
            .arg(&spec)
            .arg("--key")
            .arg(&key)
            .arg("-o")
            .arg(dir.path().join(format!("release-{version}.json")))
            .output()
            .expect("run");
        (spec, out)
    };
    // The release in force: FP32 and the calibrated INT8, evaluated and signed.
    let v1 = digits_release(
        "1.0.0",
        &[("fp32", "digits-fp32.pte"), ("int8", "digits-int8.pte")],
        None,
    );
    let (_, out) = sign(&v1, "1.0.0");
    assert!(out.status.success(), "{out:?}");

    // A "fine-tune" that lost accuracy everywhere: every variant agrees with its own
    // reference, so only the release in force shows the loss.
    let v2 = digits_release(
        "1.1.0",
        &[
            ("fp32", "digits-int8-damaged.pte"),
            ("int8", "digits-int8-damaged.pte"),
        ],
        Some("release-1.0.0.json"),
    );
    let (spec, out) = sign(&v2, "1.1.0");
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("accuracy_regression"), "{err}");
    assert!(err.contains("recorded for the baseline release"), "{err}");
    assert!(!dir.path().join("release-1.1.0.json").exists());

    let out = ferry().arg("evaluate").arg(&spec).output().expect("run");
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("compared with the result recorded for baseline release 1.0.0"),
        "{text}"
    );
    assert!(text.contains("(baseline 0.9701, drop 72.50%)"), "{text}");

    // A baseline evaluated on another set cannot be compared: a clear error, not a pass.
    std::fs::copy(
        src.join("digits-test.safetensors"),
        dir.path().join("other.safetensors"),
    )
    .expect("copy");
    let mut bytes = std::fs::read(dir.path().join("other.safetensors")).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(dir.path().join("other.safetensors"), bytes).expect("write");
    let (_, out) = sign(
        &v2.replace("digits-test.safetensors", "other.safetensors"),
        "1.1.0",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("was evaluated on another dataset"), "{err}");
}
