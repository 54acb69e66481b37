//! The committed bucketing test vectors (`tests/fixtures/bucket-vectors.json`) match the
//! implementation, and an independent implementation (Python's `hashlib`,
//! `tests/fixtures/bucket_vectors.py`) agrees with both. Other client languages check
//! themselves against the same file.

use ferry_shared::select::rollout::bucket;

fn vectors() -> serde_json::Value {
    let mut cases = Vec::new();
    for (salt, model) in [
        ("", "demo-mlp"),
        ("a1b2c3", "demo-mlp"),
        ("salt", "resnet50.v2"),
    ] {
        for id in [
            "",
            "install-000000",
            "install-000001",
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "ünïcode-id",
            "x",
        ] {
            cases.push(serde_json::json!({
                "salt": salt, "model": model, "install_id": id, "bucket": bucket(salt, model, id)
            }));
        }
    }
    serde_json::json!({
        "description": "bucket = u64::from_be_bytes(sha256(salt || 0x00 || model || 0x00 || install_id)[0..8]) % 10000; a device is staged when bucket < basis points",
        "cases": cases
    })
}

#[test]
fn committed_vectors_match() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bucket-vectors.json");
    let fresh = vectors();
    if std::env::var("FERRY_BLESS").is_ok() {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&fresh).expect("json") + "\n",
        )
        .expect("write");
    }
    let committed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("vectors committed")).expect("json");
    for case in committed["cases"].as_array().expect("cases") {
        let got = bucket(
            case["salt"].as_str().expect("salt"),
            case["model"].as_str().expect("model"),
            case["install_id"].as_str().expect("id"),
        );
        assert_eq!(
            u64::from(got),
            case["bucket"].as_u64().expect("bucket"),
            "{case}"
        );
    }
    assert_eq!(committed, fresh);
}

/// Runs the Python implementation over `cases` (salt, model, install_id) and returns its buckets.
fn python_buckets(cases: &[(String, String, String)]) -> Vec<u64> {
    use std::io::Write as _;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bucket_vectors.py");
    let input: Vec<serde_json::Value> = cases
        .iter()
        .map(|(s, m, i)| serde_json::json!({"salt": s, "model": m, "install_id": i}))
        .collect();
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the independent implementation");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&serde_json::to_vec(&input).expect("json"))
        .expect("write");
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    answer
        .iter()
        .map(|c| c["bucket"].as_u64().expect("bucket"))
        .collect()
}

#[test]
fn an_independent_implementation_agrees() {
    let committed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bucket-vectors.json"),
        )
        .expect("vectors committed"),
    )
    .expect("json");
    let mut cases: Vec<(String, String, String)> = committed["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            (
                c["salt"].as_str().expect("salt").to_string(),
                c["model"].as_str().expect("model").to_string(),
                c["install_id"].as_str().expect("id").to_string(),
            )
        })
        .collect();
    let committed_buckets: Vec<u64> = committed["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| c["bucket"].as_u64().expect("bucket"))
        .collect();
    // And many more: varied salts, models and ids, including multi-byte characters.
    for i in 0..2000u32 {
        cases.push((
            format!("{:x}", i.wrapping_mul(2_654_435_761)),
            ["demo-mlp", "resnet50.v2", "m"][i as usize % 3].to_string(),
            format!("install-{i}-é{}", "x".repeat(i as usize % 7)),
        ));
    }
    let python = python_buckets(&cases);
    assert_eq!(python.len(), cases.len());
    assert_eq!(
        &python[..committed_buckets.len()],
        &committed_buckets[..],
        "Python disagrees with the committed vectors"
    );
    for ((salt, model, id), want) in cases.iter().zip(&python) {
        assert_eq!(
            u64::from(bucket(salt, model, id)),
            *want,
            "{salt:?} {model:?} {id:?}"
        );
    }
}
