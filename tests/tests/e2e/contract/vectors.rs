//! Protocol v1 conformance: the recorded vectors in `schemas/vectors/v1/` (see
//! `ferry_tests::vectors` and `docs/protocol.md`) against the current code.
//!
//! - The code writes exactly the committed bytes: a change to a v1 message fails here until
//!   the vectors are regenerated on purpose.
//! - Every vector is valid under the committed JSON Schemas.
//! - The current client reads every vector with its recorded outcome (newer fields and values
//!   accepted, a newer format refused with `format_unsupported`).
//! - The current server answers every request and telemetry vector as recorded, signs the
//!   recorded decision for the v1 request, admits the v1 release and revocation list and
//!   refuses the newer signer's ones (admin inputs stay strict).

use base64::Engine as _;
use ferry_client::trust::verify::{verify_release, verify_response};
use ferry_shared::trust::TrustFile;
use ferry_shared::trust::dsse::Envelope;
use ferry_shared::trust::keyring::TrustState;
use ferry_shared::wire::resolve::{Decision, ResolveRequest, ResolveResponse};
use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp};
use ferry_tests::schemas::check;
use ferry_tests::vectors;
use serde_json::Value;

fn read(name: &str) -> Vec<u8> {
    std::fs::read(vectors::dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn json(name: &str) -> Value {
    serde_json::from_slice(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn index() -> Vec<Value> {
    json("index.json")["vectors"]
        .as_array()
        .expect("vectors")
        .clone()
}

fn of_kind(kind: &str) -> Vec<Value> {
    index().into_iter().filter(|v| v["kind"] == kind).collect()
}

fn payload_of(env: &Value) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().expect("payload"))
        .expect("base64");
    serde_json::from_slice(&bytes).expect("payload JSON")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().expect("string").to_string())
        .collect()
}

/// The pinned root walked through keyring version 1.
fn trust() -> TrustState {
    let file = TrustFile::from_json(&read("keys/trust.json")).expect("trust file");
    let mut t = TrustState::from_trust_file(&file).expect("trust");
    let k1: Envelope = serde_json::from_slice(&read("keyring-1.json")).expect("keyring");
    t.advance_all(&[k1]).expect("keyring 1");
    t
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::parse(vectors::NOW, &time::format_description::well_known::Rfc3339)
        .expect("now")
}

#[test]
fn the_committed_vectors_are_what_this_code_writes() {
    let mut differ = Vec::new();
    for (name, bytes) in vectors::generate().expect("generate") {
        if std::fs::read(vectors::dir().join(&name)).ok().as_deref() != Some(&bytes[..]) {
            differ.push(name);
        }
    }
    assert!(
        differ.is_empty(),
        "this code writes other bytes than the recorded v1 vectors {differ:?}: a v1 message \
         changed. Make the change additive (docs/protocol.md), or regenerate on purpose with \
         `cargo run -p ferry-tests --bin vectors` and give the reason in the commit"
    );
    // Every file of the folder is a vector in the index (or a key).
    let listed: Vec<String> = index()
        .iter()
        .map(|v| v["file"].as_str().expect("file").to_string())
        .collect();
    for e in std::fs::read_dir(vectors::dir()).expect("dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "index.json" && name != "keys" && name != "README.md" {
            assert!(listed.contains(&name), "{name} is not in index.json");
        }
    }
}

#[test]
fn every_vector_validates_against_the_schemas() {
    for v in index() {
        let name = v["file"].as_str().expect("file");
        let body = json(name);
        match v["kind"].as_str().expect("kind") {
            "release" | "keyring" | "revocations" => {
                check("dsse-envelope.schema.json", &body);
                if let Some(schema) = v["schema"].as_str() {
                    check(schema, &payload_of(&body));
                }
            }
            "answer" => {
                check("resolve-response.schema.json", &body);
                if let Some(schema) = v["payload_schema"].as_str() {
                    check(schema, &payload_of(&body["decision"]));
                }
            }
            "request" => check("resolve-request.schema.json", &body),
            "telemetry" => check("telemetry.schema.json", &body),
            "receipt" => {}
            other => panic!("{name}: unknown kind {other}"),
        }
    }
}

#[test]
fn the_client_reads_every_vector_as_recorded() {
    let trust = trust();
    let ring = trust.ring_at(now());
    let outcome = |r: Result<(), String>| r.err().unwrap_or_else(|| "ok".into());
    for v in of_kind("release") {
        let name = v["file"].as_str().expect("file");
        let env: Envelope = serde_json::from_slice(&read(name)).expect("envelope");
        // A release may be read after later keyrings (a key that keyring 1 does not list).
        let mut t = trust.clone();
        let later: Vec<Envelope> = strings(&v["keyrings"])
            .iter()
            .map(|c| serde_json::from_slice(&read(c)).expect("keyring"))
            .collect();
        t.advance_all(&later).expect("the release's keyrings");
        let got = verify_release(&env, &t.ring_at(now()));
        if !later.is_empty() {
            // Without them, the release is not trusted.
            assert!(
                verify_release(&env, &ring).is_err(),
                "{name} without its keyrings"
            );
        }
        let code = outcome(got.as_ref().map(|_| ()).map_err(|e| e.code().to_string()));
        assert_eq!(code, v["expect"]["client"], "{name}: {got:?}");
        if let Ok(m) = got {
            let ids: Vec<String> = m
                .value()
                .variants
                .iter()
                .map(|x| x.id.to_string())
                .collect();
            assert_eq!(ids, strings(&v["expect"]["variants"]), "{name}");
        }
    }
    for v in of_kind("answer") {
        let name = v["file"].as_str().expect("file");
        let resp: ResolveResponse = serde_json::from_slice(&read(name))
            .unwrap_or_else(|e| panic!("{name}: a v1 client cannot parse the answer: {e}"));
        let request: ResolveRequest =
            serde_json::from_slice(&read(v["request"].as_str().expect("request"))).expect("req");
        let release: Envelope =
            serde_json::from_slice(&read(v["release"].as_str().expect("release"))).expect("rel");
        let got = verify_response(&resp, &release, &request, &trust, now(), (0, 0));
        let code = outcome(got.as_ref().map(|_| ()).map_err(|e| e.code().to_string()));
        assert_eq!(code, v["expect"]["client"], "{name}: {got:?}");
        if let Ok(plan) = got {
            let ids: Vec<String> = plan
                .value()
                .candidates()
                .iter()
                .map(|c| c.variant().id.to_string())
                .collect();
            assert_eq!(ids, strings(&v["expect"]["candidates"]), "{name}");
        }
    }
    for v in of_kind("keyring") {
        let name = v["file"].as_str().expect("file");
        let file = TrustFile::from_json(&read("keys/trust.json")).expect("trust file");
        let mut t = TrustState::from_trust_file(&file).expect("trust");
        let mut chain: Vec<Envelope> = strings(&v["chain"])
            .iter()
            .map(|c| serde_json::from_slice(&read(c)).expect("envelope"))
            .collect();
        chain.push(serde_json::from_slice(&read(name)).expect("envelope"));
        let got = t.advance_all(&chain);
        let code = outcome(got.map_err(|e| e.code().as_str().to_string()));
        assert_eq!(code, v["expect"]["client"], "{name}");
        if code == "ok" {
            assert_eq!(t.version(), v["expect"]["version"], "{name}");
        }
    }
    for v in of_kind("revocations") {
        let name = v["file"].as_str().expect("file");
        let env: Envelope = serde_json::from_slice(&read(name)).expect("envelope");
        let got = ferry_shared::trust::revocation::verify_revocations(&env, &ring);
        let code = outcome(
            got.as_ref()
                .map(|_| ())
                .map_err(|e| e.code().as_str().to_string()),
        );
        assert_eq!(code, v["expect"]["client"], "{name}: {got:?}");
        if let Ok(list) = got {
            let revoked: Vec<String> = list
                .value()
                .revoked
                .iter()
                .map(|r| r.release.to_string())
                .collect();
            assert_eq!(revoked, strings(&v["expect"]["revoked"]), "{name}");
        }
    }
}

fn metrics(app: &TestApp) -> String {
    app.metrics()
}

fn post(app: &TestApp, path: &str, body: &[u8], headers: &Value) -> (u16, Value) {
    let mut req = app
        .agent
        .post(app.at(path))
        .header("content-type", "application/json");
    for (k, v) in headers.as_object().into_iter().flatten() {
        req = req.header(k.as_str(), v.as_str().expect("header"));
    }
    let mut resp = req.send(body).expect("request");
    let status = resp.status().as_u16();
    assert_eq!(
        resp.headers()
            .get("ferry-protocol")
            .map(|v| v.as_bytes().to_vec()),
        Some(b"1".to_vec()),
        "{path}: every answer says Ferry-Protocol: 1"
    );
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The decision without the instants a server fills in from its clock.
fn timeless(d: &Decision) -> Value {
    let mut v = serde_json::to_value(d).expect("json");
    v["issued_at"] = Value::Null;
    v["expires_at"] = Value::Null;
    v
}

#[test]
fn the_server_answers_every_vector_as_recorded() {
    let app = TestApp::start_with(Options {
        keys: Some(vectors::dir().join("keys")),
        ..Default::default()
    });
    // The fixture programs the vector release names.
    vectors::put_blobs(&app);
    for v in of_kind("release") {
        let name = v["file"].as_str().expect("file");
        if v["expect"]["publish"].is_null() {
            continue; // a device-side vector: publishing it would change what every request gets
        }
        let (status, body) = post(
            &app,
            "/v1/admin/models/vec/releases",
            &read(name),
            &serde_json::json!({"authorization": format!("Bearer {ADMIN_TOKEN}")}),
        );
        assert_eq!(status, v["expect"]["publish"], "{name}: {body}");
        if let Some(code) = v["expect"]["publish_code"].as_str() {
            assert_eq!(body["code"], code, "{name}: {body}");
        }
    }
    for v in of_kind("request") {
        let name = v["file"].as_str().expect("file");
        let (status, body) = post(&app, "/v1/resolve", &read(name), &v["headers"]);
        assert_eq!(status, v["expect"]["status"], "{name}: {body}");
        let (decision, manifest) = app.verify_response(&body);
        assert_eq!(
            manifest.version.to_string(),
            v["expect"]["release"],
            "{name}"
        );
        let ids: Vec<String> = decision
            .candidates
            .iter()
            .map(|c| c.variant.to_string())
            .collect();
        assert_eq!(ids, strings(&v["expect"]["candidates"]), "{name}");
        if let Some(recorded) = v["expect"]["decision"].as_str() {
            let answer = json(recorded);
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(answer["decision"]["payload"].as_str().expect("payload"))
                .expect("base64");
            let want = Decision::from_json(&bytes).expect("recorded decision");
            assert_eq!(
                timeless(&decision),
                timeless(&want),
                "{name}: the server signs another decision than the recorded {recorded}"
            );
            assert_eq!(body["release_ref"], answer["release_ref"], "{name}");
        }
        if v["expect"]["nonce"] == true {
            let sent = json(name);
            assert_eq!(
                decision.nonce.as_deref(),
                sent["nonce"].as_str(),
                "{name}: the decision carries the request's nonce"
            );
            assert!(decision.time.is_some(), "{name}: and the server's time");
        }
        let m = metrics(&app);
        for field in strings(&v["expect"]["unknown_fields"]) {
            assert!(
                m.contains(&format!(
                    "ferry_protocol_unknown_fields_total{{endpoint=\"resolve\",field=\"{field}\"}}"
                )),
                "{name}: {field} not counted"
            );
        }
    }
    // The receipt the server issues for the v1 request's answer is the recorded one.
    for v in of_kind("receipt") {
        let name = v["file"].as_str().expect("file");
        let r = json(name);
        let (_, body) = post(&app, "/v1/resolve", &read("request-v1.json"), &Value::Null);
        assert_eq!(body["receipt"], r["receipt"], "{name}");
    }
    let at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("time");
    for v in of_kind("telemetry") {
        let name = v["file"].as_str().expect("file");
        let text = String::from_utf8(read(name))
            .expect("utf-8")
            .replace(vectors::AT_PLACEHOLDER, &at);
        let (status, body) = post(&app, "/v1/telemetry", text.as_bytes(), &Value::Null);
        assert_eq!(status, v["expect"]["status"], "{name}: {body}");
        for field in ["accepted", "ignored", "rejected"] {
            assert_eq!(body[field], v["expect"][field], "{name}: {field} in {body}");
        }
        let m = metrics(&app);
        for field in strings(&v["expect"]["unknown_fields"]) {
            assert!(
                m.contains(&format!(
                    "ferry_protocol_unknown_fields_total{{endpoint=\"telemetry\",field=\"{field}\"}}"
                )),
                "{name}: {field} not counted"
            );
        }
    }
    // Revocation lists last: the v1 list revokes the release every vector is about.
    let mut lists = of_kind("revocations");
    lists.sort_by_key(|v| v["expect"]["submit"] == 201);
    for v in lists {
        let Some(want) = v["expect"]["submit"].as_u64() else {
            continue;
        };
        let name = v["file"].as_str().expect("file");
        let (status, body) = post(
            &app,
            "/v1/admin/models/vec/revocations",
            &read(name),
            &serde_json::json!({"authorization": format!("Bearer {ADMIN_TOKEN}")}),
        );
        assert_eq!(u64::from(status), want, "{name}: {body}");
        if let Some(code) = v["expect"]["submit_code"].as_str() {
            assert_eq!(body["code"], code, "{name}: {body}");
        }
    }
    let (status, body) = post(&app, "/v1/resolve", &read("request-v1.json"), &Value::Null);
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("no_compatible_variant")),
        "the revoked release is no longer offered: {body}"
    );
}
