//! Making the vector files: one function per kind (releases, requests, answers, keyrings,
//! revocation lists, telemetry), each adding its files and index entries.

use super::*;

/// The vector files as they are made, with their index entries.
#[derive(Default)]
struct Out {
    files: Vec<(String, Vec<u8>)>,
    index: Vec<Value>,
}

impl Out {
    fn add(&mut self, name: &str, data: Vec<u8>, entry: Value) {
        let mut entry = entry;
        entry["file"] = name.into();
        self.index.push(entry);
        self.files.push((name.to_string(), data));
    }
}

/// What the later vectors are made against: the v1 release and its bytes.
struct V1Release {
    manifest: ferry_shared::manifest::ReleaseManifest,
    bytes: Vec<u8>,
    sha: ferry_shared::Sha256Digest,
}

/// Every vector file (name, bytes), `index.json` last.
pub fn generate() -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let k = keys()?;
    let mut out = Out::default();
    let release = releases(&mut out, &k)?;
    let (v1, future_req) = requests();
    request_vectors(&mut out, &v1, &future_req);
    answers(&mut out, &k, &release, &v1, &future_req)?;
    keyrings(&mut out, &k)?;
    revocation_lists(&mut out, &k);
    telemetry(&mut out, &k);
    p256_vectors(&mut out, &k, &release.manifest)?;
    let Out { mut files, index } = out;
    let mut index_bytes = serde_json::to_vec_pretty(&json!({
        "protocol": 1,
        "about": "Protocol v1 conformance vectors; see docs/protocol.md. Regenerate only on purpose: cargo run -p ferry-tests --bin vectors",
        "keys": "keys/ (trust.json is the pinned root; for these vectors only)",
        "vectors": index,
    }))?;
    index_bytes.push(b'\n');
    files.push(("index.json".into(), index_bytes));
    Ok(files)
}

/// Release manifests: today's, a newer signer's, a newer format.
fn releases(out: &mut Out, k: &Keys) -> anyhow::Result<V1Release> {
    // Release manifests.
    let read = |p: &Path| -> anyhow::Result<Vec<u8>> { Ok(std::fs::read(p)?) };
    let (manifest, _) = build_manifest(
        &release_spec(),
        &fixtures_dir().join("pte"),
        &read,
        time(ISSUED),
    )?;
    let release_env = sign(&manifest, &k.release)?;
    let release_bytes = bytes(&release_env);
    let release_sha = ferry_shared::Sha256Digest::of(&release_bytes);
    let all = ["xnnpack-fp32", "vulkan-fp32", "portable-fp32"];
    out.add(
        "release-v1.json",
        release_bytes.clone(),
        json!({"kind": "release", "schema": "release-manifest.schema.json",
               "expect": {"client": "ok", "variants": all, "publish": 201},
               "about": "a release manifest as `ferry sign` writes it today"}),
    );
    let mut future = serde_json::to_value(&manifest)?;
    future["version"] = "1.1.0".into();
    future["license"] = "Apache-2.0".into();
    future["variants"][0]["accelerator_hint"] = "big-cores".into();
    future["variants"][0]["constraints"]["min_gpu_driver"] = "615".into();
    let mut openvino = future["variants"][0].clone();
    openvino["id"] = "openvino-fp32".into();
    openvino["delegate"] = "OpenvinoBackend".into();
    openvino["backends"] = json!(["OpenvinoBackend"]);
    future["variants"]
        .as_array_mut()
        .expect("variants")
        .insert(0, openvino);
    out.add(
        "release-future.json",
        bytes(&signed(
            &k.release.pair,
            ferry_shared::manifest::RELEASE_PAYLOAD_TYPE,
            &future,
        )),
        json!({"kind": "release", "schema": "release-manifest.schema.json",
               "expect": {"client": "ok",
                          "variants": ["openvino-fp32", "xnnpack-fp32", "vulkan-fp32", "portable-fp32"],
                          "publish": 422, "publish_code": "manifest_unknown_field"},
               "about": "a newer signer's manifest: unknown fields at every level and a delegate outside the known set; devices read it, publishing to this server is refused (admin inputs stay strict)"}),
    );
    let mut format2 = serde_json::to_value(&manifest)?;
    format2["format"] = 2.into();
    format2["version"] = "1.2.0".into();
    format2["variants"] = json!({"renamed": "in format 2"});
    out.add(
        "release-format-2.json",
        bytes(&signed(
            &k.release.pair,
            ferry_shared::manifest::RELEASE_PAYLOAD_TYPE,
            &format2,
        )),
        json!({"kind": "release", "schema": null,
               "expect": {"client": "format_unsupported", "publish": 422, "publish_code": "format_unsupported"},
               "about": "a manifest in a newer format: refused by its format number before anything else is read"}),
    );

    Ok(V1Release {
        manifest,
        bytes: release_bytes,
        sha: release_sha,
    })
}

/// Resolve requests: a v1 client's, a legacy client's, a newer client's.
fn request_vectors(out: &mut Out, v1: &Value, future_req: &Value) {
    // Resolve requests.
    out.add(
        "request-v1.json",
        bytes(v1),
        json!({"kind": "request", "schema": "resolve-request.schema.json",
               "headers": {"Ferry-Protocol": "1", "Ferry-Sdk": "ferry-client-rust/0.1.0"},
               "expect": {"status": 200, "release": "1.0.0", "candidates": ["xnnpack-fp32"],
                          "decision": "answer-v1.json"},
               "about": "a v1 client's request"}),
    );
    let mut legacy = v1.clone();
    legacy["install_id"] = "vector-install-legacy".into();
    out.add(
        "request-legacy.json",
        bytes(&legacy),
        json!({"kind": "request", "schema": "resolve-request.schema.json", "headers": {},
               "expect": {"status": 200, "release": "1.0.0", "candidates": ["xnnpack-fp32"]},
               "about": "a client from before protocol v1: no Ferry-Protocol or Ferry-Sdk header"}),
    );
    out.add(
        "request-future.json",
        bytes(future_req),
        json!({"kind": "request", "schema": "resolve-request.schema.json",
               "headers": {"Ferry-Protocol": "2", "Ferry-Sdk": "ferry-client-kotlin/4.0.0"},
               "expect": {"status": 200, "release": "1.0.0",
                          "candidates": ["vulkan-fp32", "xnnpack-fp32"],
                          "unknown_fields": ["gpu_driver"], "nonce": true},
               "about": "a newer client's request: protocol 2 header, a nonce (the decision is made for this request alone and carries it with the server's time), an operators_digest the server has not seen (it answers operators_wanted), unknown fields, a platform and a backend this server does not know; answered in v1"}),
    );
}

/// Resolve answers (the decision signed by the online key), each judged at NOW against a
/// request vector and the v1 release.
fn answers(
    out: &mut Out,
    k: &Keys,
    release: &V1Release,
    v1: &Value,
    future_req: &Value,
) -> anyhow::Result<()> {
    let (manifest, release_sha) = (&release.manifest, release.sha);
    // Resolve answers (the decision signed by the online key), each judged at NOW against a
    // request vector and the v1 release.
    let size = release.bytes.len() as u64;
    let answer_meta = |request: &str, payload_schema: bool, expect: Value, about: &str| {
        json!({"kind": "answer", "schema": "resolve-response.schema.json",
               "payload_schema": if payload_schema { json!("decision.schema.json") } else { Value::Null },
               "request": request, "release": "release-v1.json", "now": NOW,
               "expect": expect, "about": about})
    };
    let online = &k.online.pair;
    let d1 = decision(v1, manifest, release_sha, &["xnnpack-fp32"]);
    let env = online.sign(DECISION_PAYLOAD_TYPE, &bytes(&d1));
    out.add(
        "answer-v1.json",
        bytes(&answer(&env, release_sha, size)),
        answer_meta(
            "request-v1.json",
            true,
            json!({"client": "ok", "candidates": ["xnnpack-fp32"]}),
            "a v1 server's answer to request-v1.json; today's server must sign the same decision (times aside)",
        ),
    );
    let df = decision(
        future_req,
        manifest,
        release_sha,
        &["vulkan-fp32", "xnnpack-fp32"],
    );
    let mut payload = serde_json::to_value(&df)?;
    payload["time"] = ISSUED.into();
    payload["hints"] = json!({"prefetch": true});
    payload["candidates"][0]["priority"] = 1.into();
    let env = signed(online, DECISION_PAYLOAD_TYPE, &payload);
    let mut ans = answer(&env, release_sha, size);
    ans["notices"] = json!([{"code": "sdk_outdated", "message": "update the SDK"}]);
    out.add(
        "answer-future.json",
        bytes(&ans),
        answer_meta(
            "request-future.json",
            true,
            json!({"client": "ok", "candidates": ["vulkan-fp32", "xnnpack-fp32"]}),
            "a newer server's answer: unknown fields in the answer, the decision and a candidate",
        ),
    );
    let mut payload = serde_json::to_value(&d1)?;
    payload["format"] = 2.into();
    payload["candidates"] = json!({"moved": true});
    let env = signed(online, DECISION_PAYLOAD_TYPE, &payload);
    out.add(
        "answer-format-2.json",
        bytes(&answer(&env, release_sha, size)),
        answer_meta(
            "request-v1.json",
            false,
            json!({"client": "format_unsupported"}),
            "a decision in a newer format: the client refuses it by number and keeps its last known good model",
        ),
    );
    let mut expired = d1.clone();
    expired.issued_at = time("2026-11-30T00:00:00Z");
    expired.expires_at = time("2026-11-30T01:00:00Z");
    let env = online.sign(DECISION_PAYLOAD_TYPE, &bytes(&expired));
    out.add(
        "answer-expired.json",
        bytes(&answer(&env, release_sha, size)),
        answer_meta(
            "request-v1.json",
            true,
            json!({"client": "expired"}),
            "a decision past its expiry (freeze protection)",
        ),
    );
    let env = online.sign(DECISION_PAYLOAD_TYPE, &bytes(&df));
    out.add(
        "answer-other-request.json",
        bytes(&answer(&env, release_sha, size)),
        answer_meta(
            "request-v1.json",
            true,
            json!({"client": "decision_mismatch"}),
            "a valid decision for another device's request",
        ),
    );

    Ok(())
}

/// Keyrings: version 1, a newer server's version 2, a newer format.
fn keyrings(out: &mut Out, k: &Keys) -> anyhow::Result<()> {
    // Keyrings.
    let k1 = std::fs::read(dir().join("keys/keyring/00000001.json"))?;
    let k1_env: Envelope = serde_json::from_slice(&k1)?;
    let k1_payload: Value = serde_json::from_slice(&ferry_shared::trust::dsse::decode_payload(
        &k1_env,
        &Default::default(),
    )?)?;
    out.add(
        "keyring-1.json",
        k1.clone(),
        json!({"kind": "keyring", "schema": "keyring.schema.json", "chain": [],
               "expect": {"client": "ok", "version": 1},
               "about": "keyring version 1, signed by the pinned root key"}),
    );
    let mut k2 = k1_payload.clone();
    k2["version"] = 2.into();
    k2["created"] = ISSUED.into();
    k2["transparency_log"] = "https://log.invalid/ferry".into();
    k2["keys"][0]["hardware_backed"] = true.into();
    out.add(
        "keyring-2-future.json",
        bytes(&signed(
            &k.root.pair,
            ferry_shared::trust::keyring::KEYRING_PAYLOAD_TYPE,
            &k2,
        )),
        json!({"kind": "keyring", "schema": "keyring.schema.json", "chain": ["keyring-1.json"],
               "expect": {"client": "ok", "version": 2},
               "about": "keyring version 2 from a newer server: unknown fields in the keyring and a key"}),
    );
    let mut k2f = k1_payload.clone();
    k2f["version"] = 2.into();
    k2f["format"] = 2.into();
    out.add(
        "keyring-2-format-2.json",
        bytes(&signed(
            &k.root.pair,
            ferry_shared::trust::keyring::KEYRING_PAYLOAD_TYPE,
            &k2f,
        )),
        json!({"kind": "keyring", "schema": null, "chain": ["keyring-1.json"],
               "expect": {"client": "format_unsupported"},
               "about": "a keyring in a newer format"}),
    );

    Ok(())
}

/// Revocation lists: today's, a newer signer's, a newer format.
fn revocation_lists(out: &mut Out, k: &Keys) {
    // Revocation lists.
    let rev = json!({"model": "vec", "version": 1,
                     "revoked": [{"release": "1.0.0", "reason": "vector: bad build", "at": ISSUED}]});
    let rev_type = ferry_shared::trust::revocation::REVOCATIONS_PAYLOAD_TYPE;
    out.add(
        "revocations-v1.json",
        bytes(&signed(&k.release.pair, rev_type, &rev)),
        json!({"kind": "revocations", "schema": "revocations.schema.json",
               "expect": {"client": "ok", "revoked": ["1.0.0"], "submit": 201},
               "about": "a revocation list as `ferry release revoke` signs it"}),
    );
    let mut rev_future = rev.clone();
    rev_future["issuer"] = "release-team".into();
    rev_future["revoked"][0]["cve"] = "CVE-2026-0001".into();
    out.add(
        "revocations-future.json",
        bytes(&signed(&k.release.pair, rev_type, &rev_future)),
        json!({"kind": "revocations", "schema": "revocations.schema.json",
               "expect": {"client": "ok", "revoked": ["1.0.0"], "submit": 422, "submit_code": "revocations_invalid"},
               "about": "a newer signer's list: devices read it; this server refuses to store fields it would drop"}),
    );
    let mut rev2 = rev.clone();
    rev2["format"] = 2.into();
    out.add(
        "revocations-format-2.json",
        bytes(&signed(&k.release.pair, rev_type, &rev2)),
        json!({"kind": "revocations", "schema": null,
               "expect": {"client": "format_unsupported"},
               "about": "a revocation list in a newer format"}),
    );
}

/// A telemetry receipt and telemetry batches: a v1 client's and a newer client's.
fn telemetry(out: &mut Out, k: &Keys) {
    let online = &k.online.pair;
    // A telemetry receipt (a MAC under a key derived from the online key).
    let receipt_key = ferry_server::fleet::intake::receipt::ReceiptKey::derive(online);
    let facts = json!({"install_id": "vector-install-1", "model": "vec", "release": "1.0.0",
                       "platform": "linux", "soc": "RK3588", "device_model": "vector-board",
                       "variants": ["xnnpack-fp32"]});
    let receipt = receipt_key.issue(
        &ferry_server::fleet::intake::receipt::Facts {
            install_id: "vector-install-1",
            model: "vec",
            release: "1.0.0",
            platform: "linux",
            soc: "RK3588",
            device_model: "vector-board",
        },
        &["xnnpack-fp32"],
    );
    out.add(
        "receipt-v1.json",
        bytes(&json!({"facts": facts, "receipt": receipt})),
        json!({"kind": "receipt", "schema": null,
               "expect": {"server": "verifies"},
               "about": "the receipt a v1 server issues for request-v1.json's answer; events that carry it count"}),
    );

    // Telemetry batches.
    let mut load = event("load", "xnnpack-fp32", "vector-install-1");
    load["load_ms"] = 12.5.into();
    load["receipt"] = receipt.clone().into();
    let mut fallback = event("fallback", "vulkan-fp32", "vector-install-1");
    fallback["outcome"] = "failed".into();
    fallback["to_variant"] = "xnnpack-fp32".into();
    fallback["error_code"] = "runtime_load_failed".into();
    fallback["stage"] = "load_method".into();
    out.add(
        "telemetry-v1.json",
        bytes(&json!({"events": [load, fallback]})),
        json!({"kind": "telemetry", "schema": "telemetry.schema.json",
               "expect": {"status": 200, "accepted": 2, "ignored": 0, "rejected": []},
               "about": "a v1 client's batch; `at` is a placeholder the tests replace with the current time"}),
    );
    let mut newer = event("load", "xnnpack-fp32", "vector-install-2");
    newer["battery_pct"] = 40.into();
    newer["clock_offset_s"] = (-3600).into();
    newer["stage"] = "warm_up".into();
    let mut energy = event("energy", "xnnpack-fp32", "vector-install-2");
    energy["joules"] = 8.25.into();
    out.add(
        "telemetry-future.json",
        bytes(&json!({"events": [newer, energy], "batch_id": "b-1"})),
        json!({"kind": "telemetry", "schema": "telemetry.schema.json",
               "expect": {"status": 200, "accepted": 1, "ignored": 1, "rejected": [],
                          "unknown_fields": ["battery_pct", "joules"]},
               "about": "a newer client's batch: a device clock offset, unknown fields and stage, and an event of a kind this server does not know"}),
    );
    let mut inference = event("inference", "xnnpack-fp32", "vector-install-3");
    for (k, v) in [
        ("method", json!("forward")),
        ("runs", json!(240)),
        ("first_ms", json!(41.5)),
        ("p50_ms", json!(7.75)),
        ("p95_ms", json!(9.5)),
        ("max_ms", json!(12.25)),
        ("sustained_s", json!(75.0)),
        ("thermal", json!("serious")),
    ] {
        inference[k] = v;
    }
    out.add(
        "telemetry-inference.json",
        bytes(&json!({"events": [inference]})),
        json!({"kind": "telemetry", "schema": "telemetry.schema.json",
               "expect": {"status": 200, "accepted": 1, "ignored": 0, "rejected": []},
               "about": "a client's run timings since its last flush: one inference event per model, method and variant"}),
    );
}

/// The release key on ECDSA P-256 (as an HSM or a KMS holds it): a fixed scalar, so the vectors
/// are the same at every run (ECDSA signatures here are deterministic, RFC 6979).
fn p256_release_key() -> anyhow::Result<p256::ecdsa::SigningKey> {
    let scalar = ferry_shared::Sha256Digest::of(b"ferry vectors: the release key on ECDSA P-256");
    Ok(p256::ecdsa::SigningKey::from_slice(scalar.as_bytes())?)
}

/// Keys on ECDSA P-256: a keyring that lists a P-256 release key beside the Ed25519 one, a
/// release signed by both (what a fleet moving to P-256 is sent), and one signed by P-256 alone.
fn p256_vectors(out: &mut Out, k: &Keys, manifest: &ReleaseManifest) -> anyhow::Result<()> {
    use ferry_shared::trust::key::PublicKey;
    use p256::ecdsa::signature::Signer as _;
    let sk = p256_release_key()?;
    let pk = PublicKey::P256(*sk.verifying_key());
    let k1: Envelope =
        serde_json::from_slice(&std::fs::read(dir().join("keys/keyring/00000001.json"))?)?;
    let mut ring: Value = serde_json::from_slice(&ferry_shared::trust::dsse::decode_payload(
        &k1,
        &Default::default(),
    )?)?;
    ring["version"] = 2.into();
    ring["created"] = ISSUED.into();
    ring["keys"]
        .as_array_mut()
        .expect("keys")
        .push(serde_json::to_value(
            ferry_shared::trust::TrustedKeyEntry::of(
                ferry_shared::trust::dsse::KeyRole::Release,
                &pk,
            ),
        )?);
    out.add(
        "keyring-2-p256.json",
        bytes(&signed(
            &k.root.pair,
            ferry_shared::trust::keyring::KEYRING_PAYLOAD_TYPE,
            &ring,
        )),
        json!({"kind": "keyring", "schema": "keyring.schema.json", "chain": ["keyring-1.json"],
               "expect": {"client": "ok", "version": 2},
               "about": "keyring version 2 adds a release key on ECDSA P-256 (`algorithm`; the public key is the 33-byte compressed SEC1 point, its key id that point's SHA-256); clients built before ferry read ECDSA P-256 refuse it (docs/keys.md, Moving to ECDSA P-256)"}),
    );
    let mut payload = serde_json::to_value(manifest)?;
    payload["version"] = "1.3.0".into();
    let payload = bytes(&payload);
    let release_type = ferry_shared::manifest::RELEASE_PAYLOAD_TYPE;
    let p256_signature = |env: &mut Envelope| -> anyhow::Result<()> {
        let sig: p256::ecdsa::Signature = sk.sign(&env.signing_input()?);
        env.push_signature(pk.id(), sig.to_der().as_bytes());
        Ok(())
    };
    let mut dual = Envelope::unsigned(release_type, &payload);
    let input = dual.signing_input()?;
    dual.push_signature(k.release.pair.id(), &k.release.pair.sign_message(&input));
    p256_signature(&mut dual)?;
    let all = ["xnnpack-fp32", "vulkan-fp32", "portable-fp32"];
    out.add(
        "release-dual.json",
        bytes(&dual),
        json!({"kind": "release", "schema": "release-manifest.schema.json",
               "expect": {"client": "ok", "variants": all},
               "about": "a release signed by the Ed25519 and the P-256 release keys: read by a client that knows keyring 1 alone (the signature of a key it does not know is passed over)"}),
    );
    let mut only = Envelope::unsigned(release_type, &payload);
    p256_signature(&mut only)?;
    out.add(
        "release-p256.json",
        bytes(&only),
        json!({"kind": "release", "schema": "release-manifest.schema.json",
               "keyrings": ["keyring-2-p256.json"],
               "expect": {"client": "ok", "variants": all},
               "about": "a release signed by the P-256 release key alone (DER signature), read after keyring-2-p256.json"}),
    );
    Ok(())
}
