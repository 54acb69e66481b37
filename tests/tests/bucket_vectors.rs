//! The committed bucketing test vectors (`tests/fixtures/bucket-vectors.json`) match the
//! implementation. Other client languages check themselves against the same file.

use ferry_shared::rollout::bucket;

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
