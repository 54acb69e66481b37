//! The committed JSON Schemas describe what the server really sends and accepts.

use base64::Engine as _;
use ferry_tests::app::{READ_TOKEN, TestApp, device, mlp_v1, payload};

const BASE: &str = "https://ferry.invalid/schemas/";

fn schema_files() -> Vec<(String, serde_json::Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).expect("schemas dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".schema.json") {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.path()).expect("read"))
                    .expect("schema is JSON");
            out.push((name, v));
        }
    }
    out
}

fn validator(name: &str) -> jsonschema::Validator {
    let files = schema_files();
    let mut builder = jsonschema::Registry::new();
    for (n, v) in &files {
        builder = builder
            .add(format!("{BASE}{n}"), v.clone())
            .expect("valid uri");
    }
    let registry = builder.prepare().expect("registry");
    let (_, schema) = files
        .iter()
        .find(|(n, _)| n == name)
        .expect("schema exists");
    jsonschema::options()
        .with_registry(&registry)
        .build(schema)
        .unwrap_or_else(|e| panic!("{name} does not compile: {e}"))
}

fn check(name: &str, instance: &serde_json::Value) {
    let v = validator(name);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:?}\n{instance}");
}

#[test]
fn every_schema_compiles() {
    for (name, _) in schema_files() {
        let _ = validator(&name);
    }
    let openapi: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/openapi.json"),
        )
        .expect("read"),
    )
    .expect("openapi is JSON");
    assert_eq!(openapi["openapi"], "3.1.0");
    // Every $ref in the OpenAPI document names a schema file that exists.
    let text = openapi.to_string();
    let names: Vec<String> = schema_files().into_iter().map(|(n, _)| n).collect();
    for part in text.split("\"$ref\":\"").skip(1) {
        let target = part.split('"').next().unwrap_or_default();
        let file = target.split('#').next().unwrap_or_default();
        assert!(names.iter().any(|n| n == file), "dangling $ref {target}");
    }
}

#[test]
fn real_responses_match_the_schemas() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let dev = device(
        "android",
        &["XnnpackBackend", "VulkanBackend"],
        "1.5.1",
        "1.0.0",
        8192,
    );
    check("resolve-request.schema.json", &dev);

    let (status, body) = app.resolve(&dev, true);
    assert_eq!(status, 200);
    check("resolve-response.schema.json", &body);
    let env: ferry_shared::dsse::Envelope =
        serde_json::from_value(body["decision"].clone()).expect("envelope");
    let decision: serde_json::Value = serde_json::from_slice(&payload(&env)).expect("decision");
    check("decision.schema.json", &decision);
    let env: ferry_shared::dsse::Envelope =
        serde_json::from_value(body["release"].clone()).expect("envelope");
    let manifest: serde_json::Value = serde_json::from_slice(&payload(&env)).expect("manifest");
    check("release-manifest.schema.json", &manifest);

    let (status, keys) = app.get_json("/v1/keys", None);
    assert_eq!(status, 200);
    check("trust.schema.json", &keys);

    // Errors, including the one with details.
    let mut old = dev.clone();
    old["runtime_version"] = "0.9.0".into();
    let (status, body) = app.resolve(&old, false);
    assert_eq!(status, 404);
    check("error.schema.json", &body);
    let (_, body) = app.post_raw("/v1/resolve", b"{", None);
    check("error.schema.json", &body);
    let (_, body) = app.get_json("/v1/admin/models", None);
    check("error.schema.json", &body);
    let (_, body) = app.get_json("/v1/admin/models/nope", Some(READ_TOKEN));
    check("error.schema.json", &body);
}

#[test]
fn schemas_reject_what_the_server_rejects() {
    let v = validator("resolve-request.schema.json");
    let good = device("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 1);
    assert!(v.is_valid(&good));
    for (field, value) in [
        ("model", serde_json::json!("../x")),
        ("platform", serde_json::json!("amiga")),
        ("app_version", serde_json::json!("1.0")),
        ("extra", serde_json::json!(1)),
        ("ram_mb", serde_json::json!(-1)),
    ] {
        let mut bad = good.clone();
        bad[field] = value;
        assert!(!v.is_valid(&bad), "{field}");
    }
    let env = validator("dsse-envelope.schema.json");
    let sample = serde_json::json!({
        "payload": base64::engine::general_purpose::STANDARD.encode(b"x"),
        "payloadType": "t",
        "signatures": [{"keyid": "a".repeat(64), "sig": "AA=="}]
    });
    assert!(env.is_valid(&sample));
    let mut bad = sample.clone();
    bad["signatures"] = serde_json::json!([]);
    assert!(!env.is_valid(&bad));
}
