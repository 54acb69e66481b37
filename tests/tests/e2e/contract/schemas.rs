//! The committed JSON Schemas describe what the server really sends and accepts.

use base64::Engine as _;
use ferry_tests::app::{READ_TOKEN, TestApp, mlp_v1, payload, profile};

use ferry_tests::schemas::{BASE, check, schema_files, validator, validator_for};

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
        // A reference inside the document (one definition per concept) must resolve in it.
        if let Some(pointer) = target.strip_prefix('#') {
            assert!(openapi.pointer(pointer).is_some(), "dangling $ref {target}");
            continue;
        }
        let file = target.split('#').next().unwrap_or_default();
        assert!(names.iter().any(|n| n == file), "dangling $ref {target}");
    }
}

#[test]
fn real_responses_match_the_schemas() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let dev = profile(
        "android",
        &["XnnpackBackend", "VulkanBackend"],
        "1.5.1",
        "1.0.0",
        8192,
    );
    check("resolve-request.schema.json", &dev);
    // A revocation list so the answer carries one: 0.9.0, published and revoked.
    let mut old = mlp_v1();
    old.version = "0.9.0".parse().expect("version");
    app.publish(&old);
    let list = serde_json::json!({"model": "mlp", "version": 1, "revoked": [
        {"release": "0.9.0", "reason": "withdrawn", "at": "2026-12-01T00:00:00Z"}]});
    let env = app.release_key().pair.sign(
        ferry_shared::trust::revocation::REVOCATIONS_PAYLOAD_TYPE,
        &serde_json::to_vec(&list).expect("json"),
    );
    let (status, b) = app.post_raw(
        "/v1/admin/models/mlp/revocations",
        &serde_json::to_vec(&env).expect("json"),
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    assert_eq!(status, 201, "{b}");

    let (status, body) = app.resolve(&dev, true);
    assert_eq!(status, 200);
    check("resolve-response.schema.json", &body);
    let env: ferry_shared::trust::dsse::Envelope =
        serde_json::from_value(body["decision"].clone()).expect("envelope");
    let decision: serde_json::Value = serde_json::from_slice(&payload(&env)).expect("decision");
    check("decision.schema.json", &decision);
    let env: ferry_shared::trust::dsse::Envelope =
        serde_json::from_value(body["revocations"].clone()).expect("revocations envelope");
    let list: serde_json::Value = serde_json::from_slice(&payload(&env)).expect("list");
    check("revocations.schema.json", &list);
    let env: ferry_shared::trust::dsse::Envelope =
        serde_json::from_value(body["release"].clone()).expect("envelope");
    let manifest: serde_json::Value = serde_json::from_slice(&payload(&env)).expect("manifest");
    check("release-manifest.schema.json", &manifest);
    // Without explain the answer refers to the release, served by its digest.
    let (status, plain) = app.resolve(&dev, false);
    assert_eq!(status, 200);
    check("resolve-response.schema.json", &plain);
    assert!(plain.get("release").is_none(), "{plain}");
    let (status, served) = app.get_json(plain["release_ref"]["url"].as_str().expect("url"), None);
    assert_eq!(status, 200);
    check("dsse-envelope.schema.json", &served);
    let manifest: serde_json::Value =
        serde_json::from_slice(&payload(&serde_json::from_value(served).expect("envelope")))
            .expect("manifest");
    check("release-manifest.schema.json", &manifest);

    let (status, keys) = app.get_json("/v1/keys", None);
    assert_eq!(status, 200);
    check("trust.schema.json", &keys);
    let (status, chain) = app.get_json("/v1/keyring", None);
    assert_eq!(status, 200);
    let mut wrapped = serde_json::json!({"$ref": "keyring.schema.json#/$defs/response"});
    wrapped["$schema"] = "https://json-schema.org/draft/2020-12/schema".into();
    wrapped["$id"] = format!("{BASE}keyring-check.json").into();
    check_value(&wrapped, &chain);
    for env in chain["keyrings"].as_array().expect("keyrings") {
        let env: ferry_shared::trust::dsse::Envelope =
            serde_json::from_value(env.clone()).expect("envelope");
        let keyring: serde_json::Value = serde_json::from_slice(&payload(&env)).expect("json");
        check("keyring.schema.json", &keyring);
    }
    let (status, answer) = app.get_json("/v1/time?nonce=AAECAwQFBgcICQoLDA0ODxAREhMUFRYX", None);
    assert_eq!(status, 200, "{answer}");
    let mut wrapped = serde_json::json!({"$ref": "time.schema.json#/$defs/response"});
    wrapped["$schema"] = "https://json-schema.org/draft/2020-12/schema".into();
    wrapped["$id"] = format!("{BASE}time-check.json").into();
    check_value(&wrapped, &answer);
    let env: ferry_shared::trust::dsse::Envelope =
        serde_json::from_value(answer["time"].clone()).expect("envelope");
    let signed: serde_json::Value = serde_json::from_slice(&payload(&env)).expect("json");
    check("time.schema.json", &signed);

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

    telemetry_and_fleet_views(&app);
}

/// Telemetry a client sends and its answer, a rollout revision, the model list and the
/// health view, against their schemas.
fn telemetry_and_fleet_views(app: &TestApp) {
    // Telemetry: what a client sends, and the answer.
    let event = serde_json::json!({
        "kind": "fallback", "model": "mlp", "release": "1.0.0", "variant": "vulkan-fp32",
        "delegate": "vulkan", "outcome": "failed", "error_code": "runtime_load_failed",
        "install_id": "i", "platform": "android", "soc": "SM8550", "device_model": "p",
        "os_version": "14", "app_version": "1.0.0", "runtime_version": "1.5.1",
        "at": time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).expect("time"),
        "to_variant": "xnnpack-fp32"
    });
    let mut no_target = event.clone();
    no_target
        .as_object_mut()
        .expect("object")
        .remove("to_variant");
    let batch = serde_json::json!({ "events": [event, no_target] });
    let v = validator("telemetry.schema.json");
    assert!(
        !v.is_valid(&batch),
        "the schema refuses a fallback without to_variant"
    );
    let (status, answer) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&batch).expect("json"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(answer["accepted"], 1);
    let mut wrapped = serde_json::json!({"$ref": "telemetry.schema.json#/$defs/answer"});
    wrapped["$schema"] = "https://json-schema.org/draft/2020-12/schema".into();
    wrapped["$id"] = format!("{BASE}answer-check.json").into();
    check_value(&wrapped, &answer);

    // A rollout revision.
    ferry_tests::app::TestApp::publish(app, &ferry_tests::app::mlp_v2());
    let (status, plan) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "start", "release": "2.0.0", "percent": "5"}"#,
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    assert_eq!(status, 200, "{plan}");
    check("rollout-plan.schema.json", &plan);

    // The model list (with a staged release) and the health view, whole and for a window.
    let (status, models) = app.get_json("/v1/admin/models", Some(READ_TOKEN));
    assert_eq!(status, 200, "{models}");
    check("models.schema.json", &models);
    assert_eq!(models["models"][0]["staged"], "2.0.0", "{models}");
    assert_eq!(models["models"][0]["percent"], "5", "{models}");
    let counted = serde_json::json!({"events": app.with_receipts(&[serde_json::json!({
        "kind": "load", "model": "mlp", "release": "1.0.0", "variant": "xnnpack-fp32",
        "delegate": "qnn", "outcome": "ok", "install_id": "schema-check",
        "platform": "android", "soc": "SM8550", "device_model": "p", "os_version": "14",
        "app_version": "1.0.0", "runtime_version": "1.5.1", "load_ms": 3.5,
        "at": time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).expect("time"),
    })])});
    let (status, answer) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&counted).expect("json"),
        None,
    );
    assert_eq!(
        (status, answer["unverified"].as_u64()),
        (200, Some(0)),
        "{answer}"
    );
    for query in ["", "?since=1h"] {
        let (status, health) = app.get_json(
            &format!("/v1/admin/models/mlp/health{query}"),
            Some(READ_TOKEN),
        );
        assert_eq!(status, 200, "{health}");
        check("health.schema.json", &health);
        assert_eq!(health["window"].is_object(), !query.is_empty(), "{health}");
        assert_eq!(
            health["releases"][0]["variants"][0]["load_ms"]["samples"], 1,
            "the variant view is checked too: {health}"
        );
        assert_eq!(
            health["releases"][0]["variants"][0]["delegate"], "xnnpack",
            "the signed delegate, not the one a device claimed: {health}"
        );
    }
}

fn check_value(schema: &serde_json::Value, instance: &serde_json::Value) {
    let v = validator_for(schema);
    let errors: Vec<String> = v.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}\n{instance}");
}

#[test]
fn schemas_reject_what_the_server_rejects() {
    // Each request the schema refuses, the real server refuses too (4xx with a catalogue code),
    // and the request the schema accepts, the server answers.
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let v = validator("resolve-request.schema.json");
    let good = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 1);
    assert!(v.is_valid(&good));
    let (status, body) = app.resolve(&good, false);
    assert_eq!(status, 200, "{body}");
    for (field, value) in [
        ("model", serde_json::json!("../x")),
        ("platform", serde_json::json!("Amiga OS")),
        ("app_version", serde_json::json!("1.0")),
        ("ram_mb", serde_json::json!(-1)),
    ] {
        let mut bad = good.clone();
        bad[field] = value;
        assert!(!v.is_valid(&bad), "the schema accepts a bad {field}");
        let (status, body) = app.resolve(&bad, false);
        assert_eq!(status, 400, "the server accepts a bad {field}: {body}");
        check("error.schema.json", &body);
    }
    let env = validator("dsse-envelope.schema.json");
    let sample = serde_json::json!({
        "payload": base64::engine::general_purpose::STANDARD.encode(b"x"),
        "payloadType": ferry_shared::manifest::RELEASE_PAYLOAD_TYPE,
        "signatures": [{"keyid": "a".repeat(64), "sig": "AA=="}]
    });
    assert!(env.is_valid(&sample));
    let mut bad = sample.clone();
    bad["signatures"] = serde_json::json!([]);
    assert!(!env.is_valid(&bad));
    // Posted as a release, the unsigned envelope is refused for what the schema says.
    let (status, body) = app.post_raw(
        "/v1/admin/models/mlp/releases",
        &serde_json::to_vec(&bad).expect("json"),
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "signature_missing", "{body}");
    check("error.schema.json", &body);
}
