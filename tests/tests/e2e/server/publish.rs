//! Every publish refusal has its own error code, and nothing half-published stays visible.

use base64::Engine as _;
use ferry_server::keys;
use ferry_shared::trust::dsse::KeyRole;
use ferry_shared::{BackendId, Sha256Digest};
use ferry_tests::app::{
    ADMIN_TOKEN, READ_TOKEN, TestApp, fixture_bytes_by_digest, mlp_v1, sign_manifest,
    signed_release,
};

/// Uploads the blobs of `mlp` 1.0.0 and returns its manifest (not published).
fn staged(app: &TestApp) -> ferry_shared::manifest::ReleaseManifest {
    let (m, _) = signed_release(&mlp_v1(), &app.release_key());
    for v in &m.variants {
        assert!(matches!(
            app.put_blob(&fixture_bytes_by_digest(&v.sha256)),
            200 | 201
        ));
    }
    m
}

fn assert_not_published(app: &TestApp, version: &str) {
    let (status, _) = app.get_json(
        &format!("/v1/admin/models/mlp/releases/{version}"),
        Some(READ_TOKEN),
    );
    assert_eq!(status, 404, "release {version} must not be visible");
    assert!(
        !app.stored_files()
            .iter()
            .any(|f| f.starts_with("releases/")),
        "no release object may be stored: {:?}",
        app.stored_files()
    );
}

fn refused(app: &TestApp, env: &ferry_shared::trust::dsse::Envelope, status: u16, code: &str) {
    let (got, body) = app.post_release("mlp", env);
    assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(body["request_id"].as_str().is_some_and(|m| !m.is_empty()));
    assert_not_published(app, "1.0.0");
}

#[test]
fn each_refusal_has_its_code() {
    let app = TestApp::start();
    let m = staged(&app);
    let key = app.release_key();

    // Signature invalid: payload changed after signing.
    let mut env = sign_manifest(&m, &key);
    let mut tampered = m.clone();
    tampered.notes = "tampered".into();
    env.payload = base64::engine::general_purpose::STANDARD.encode(tampered.to_json());
    refused(&app, &env, 403, "signature_invalid");

    // Key not trusted.
    let stranger = keys::generate(KeyRole::Release).expect("key");
    refused(&app, &sign_manifest(&m, &stranger), 403, "key_unknown");

    // Signed with the online key (trusted, wrong role).
    let online = keys::load(&app.dir.path().join("keys/online.key")).expect("online key");
    let env = online
        .pair
        .sign(ferry_shared::manifest::RELEASE_PAYLOAD_TYPE, &m.to_json());
    refused(&app, &env, 403, "key_wrong_role");

    // Blob missing.
    let mut missing = m.clone();
    missing.variants[0].sha256 = Sha256Digest::of(b"never uploaded");
    refused(&app, &sign_manifest(&missing, &key), 422, "blob_missing");

    // Blob of the wrong size.
    let mut size = m.clone();
    size.variants[0].size += 1;
    refused(&app, &sign_manifest(&size, &key), 422, "blob_size_mismatch");

    // A blob that is not a .pte.
    let junk = b"PK\x03\x04 definitely a zip file and not an ExecuTorch program".to_vec();
    assert_eq!(app.put_blob(&junk), 201);
    let mut not_pte = m.clone();
    not_pte.variants[0].sha256 = Sha256Digest::of(&junk);
    not_pte.variants[0].size = junk.len() as u64;
    refused(&app, &sign_manifest(&not_pte, &key), 422, "not_a_pte");

    // A variant declared Vulkan whose bytes are XNNPACK (the partitioner "failed open").
    let mut lie = m.clone();
    let xnn = lie
        .variants
        .iter()
        .position(|v| v.id.as_str() == "xnnpack-fp32")
        .expect("xnnpack");
    lie.variants[xnn].delegate = ferry_shared::manifest::Delegate::Vulkan;
    lie.variants[xnn].backends = vec![BackendId::new("VulkanBackend").expect("id")];
    let (status, body) = app.post_release("mlp", &sign_manifest(&lie, &key));
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("delegate_mismatch")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("never calls VulkanBackend"),
        "{body}"
    );
    assert_not_published(&app, "1.0.0");

    data_file_refusals(&app, &m, &key);
    // A variant that hides one of the backends its program calls.
    let mut hidden = m.clone();
    hidden.variants[xnn]
        .backends
        .push(BackendId::new("QnnBackend").expect("id"));
    refused(
        &app,
        &sign_manifest(&hidden, &key),
        422,
        "delegate_mismatch",
    );

    // Malformed: not an envelope; payload not a manifest; unknown field.
    let (status, body) = app.post_raw(
        "/v1/admin/models/mlp/releases",
        b"{not json",
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("envelope_malformed"))
    );
    let env = key
        .pair
        .sign(ferry_shared::manifest::RELEASE_PAYLOAD_TYPE, b"[1,2,3]");
    refused(&app, &env, 422, "manifest_malformed");
    let mut v: serde_json::Value = serde_json::from_slice(&m.to_json()).expect("json");
    v["surprise"] = serde_json::json!(true);
    let env = key.pair.sign(
        ferry_shared::manifest::RELEASE_PAYLOAD_TYPE,
        &serde_json::to_vec(&v).expect("json"),
    );
    refused(&app, &env, 422, "manifest_unknown_field");

    // Posted to another model's URL.
    let (status, body) = app.post_release("other", &sign_manifest(&m, &key));
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("model_mismatch"))
    );

    // Finally the honest release goes through, once.
    let good = sign_manifest(&m, &key);
    let (status, body) = app.post_release("mlp", &good);
    assert_eq!(status, 201, "{body}");
    assert!(
        body["inspection"]["xnnpack-fp32"]["methods"][0]["delegate_calls"]["XnnpackBackend"] == 1
    );
    let (status, body) = app.post_release("mlp", &good);
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("release_exists"))
    );
    let (status, body) = app.get_json("/v1/admin/models/mlp/releases/1.0.0", Some(READ_TOKEN));
    assert_eq!(status, 200);
    assert_eq!(
        body["inspection"]["portable-fp32"]["methods"][0]["kernel_calls"]["aten::relu.out"],
        1
    );
    // A server that loaded the release from the store reads its report when asked.
    let other = app.replica_with(None, Box::new(|_| {}));
    let mut r = app
        .agent
        .get(format!(
            "{}/v1/admin/models/mlp/releases/1.0.0",
            other.url()
        ))
        .header(
            "authorization",
            format!("Bearer {}", ferry_tests::app::ADMIN_TOKEN),
        )
        .call()
        .expect("get");
    let body: serde_json::Value = serde_json::from_reader(r.body_mut().as_reader()).expect("json");
    assert_eq!(
        body["inspection"]["portable-fp32"]["methods"][0]["kernel_calls"]["aten::relu.out"], 1,
        "{body}"
    );
}

/// Refusals about data files: one missing, one lacking a tensor or of another type, a program
/// given as data, the same file twice, two files with one name.
fn data_file_refusals(
    app: &TestApp,
    m: &ferry_shared::manifest::ReleaseManifest,
    key: &ferry_server::keys::RoleKey,
) {
    // A portable variant whose program keeps its weights in a .ptd the release does not carry.
    let ext = std::fs::read(ferry_tests::fixtures_dir().join("pte/mlp-external-portable.pte"))
        .expect("fixture");
    assert_eq!(app.put_blob(&ext), 201);
    let mut needs_data = m.clone();
    let portable = needs_data
        .variants
        .iter()
        .position(|v| v.id.as_str() == "portable-fp32")
        .expect("portable");
    needs_data.variants[portable].sha256 = Sha256Digest::of(&ext);
    needs_data.variants[portable].size = ext.len() as u64;
    let (status, body) = app.post_release("mlp", &sign_manifest(&needs_data, key));
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("data_files_missing")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("keeps 4 tensor(s) in a separate data file (.ptd)"),
        "{body}"
    );
    assert_not_published(app, "1.0.0");
    // With a data file that lacks one of the tensors (a valid .ptd, one key renamed), and with
    // a "data file" that is a program: both refused after reading only their headers.
    let ptd = std::fs::read(ferry_tests::fixtures_dir().join("pte/mlp-external-portable.ptd"))
        .expect("fixture");
    let at = ptd
        .windows(10)
        .position(|w| w == b"fc2.weight")
        .expect("key");
    let mut other = ptd.clone();
    other[at + 2] = b'7';
    let int32_bias = ferry_tests::ptd_with_scalar_type("fc2.bias", 3);
    for (file, code, says) in [
        (&other, "data_files_missing", "(fc2.weight)"),
        (&ext, "not_a_pte", "data file weights.ptd"),
        (
            &int32_bias,
            "data_files_mismatch",
            "fc2.bias: the program declares float32 [8], weights.ptd holds int32 [8]",
        ),
    ] {
        assert!(matches!(app.put_blob(file), 200 | 201));
        let mut with_data = needs_data.clone();
        with_data.variants[portable].extra_files = vec![ferry_shared::manifest::ExtraFile {
            name: "weights.ptd".into(),
            sha256: Sha256Digest::of(file),
            size: file.len() as u64,
            chunk_index: None,
        }];
        let (status, body) = app.post_release("mlp", &sign_manifest(&with_data, key));
        assert_eq!((status, body["code"].as_str()), (422, Some(code)), "{body}");
        assert!(
            body["message"].as_str().unwrap_or_default().contains(says),
            "{body}"
        );
        assert_not_published(app, "1.0.0");
    }
    // The same data file twice under two names (the runtime refuses repeated tensor names),
    // and two extra files with one name.
    assert!(matches!(app.put_blob(&ptd), 200 | 201));
    let entry = |name: &str| ferry_shared::manifest::ExtraFile {
        name: name.into(),
        sha256: Sha256Digest::of(&ptd),
        size: ptd.len() as u64,
        chunk_index: None,
    };
    for (names, code, says) in [
        (
            ["a.ptd", "b.ptd"],
            "data_files_mismatch",
            "fc1.bias is in both a.ptd and b.ptd",
        ),
        (
            ["a.ptd", "a.ptd"],
            "manifest_invalid",
            "two extra files are named \"a.ptd\"",
        ),
    ] {
        let mut twice = needs_data.clone();
        twice.variants[portable].extra_files = names.iter().map(|n| entry(n)).collect();
        let (status, body) = app.post_release("mlp", &sign_manifest(&twice, key));
        assert_eq!((status, body["code"].as_str()), (422, Some(code)), "{body}");
        assert!(
            body["message"].as_str().unwrap_or_default().contains(says),
            "{body}"
        );
        assert_not_published(app, "1.0.0");
    }
}

#[test]
fn a_catalog_refresh_reuses_what_it_holds_and_reads_only_new_releases() {
    use ferry_server::storage::catalog::Catalog;
    let app = TestApp::start();
    app.publish(&ferry_tests::app::mlp_v1());
    let state = &app.server.state;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (first, _) = rt
        .block_on(Catalog::load(state.store(), &state.keys().release_ring))
        .expect("load");
    let v1: semver::Version = "1.0.0".parse().expect("v");
    let model: ferry_shared::ModelName = "mlp".parse().expect("model");
    let held = first.release(&model, &v1).expect("1.0.0");
    // Damage the stored file: a refresh must not even read it again (releases never change).
    let path = app.store_dir().join("releases/mlp/1.0.0.json");
    let original = std::fs::read(&path).expect("read");
    std::fs::write(&path, b"not an envelope").expect("write");
    app.publish(&ferry_tests::app::mlp_v2());
    let (second, skipped) = rt
        .block_on(Catalog::refresh(
            state.store(),
            &state.keys().release_ring,
            &first,
        ))
        .expect("refresh");
    assert!(skipped.is_empty(), "{skipped:?}");
    let again = second.release(&model, &v1).expect("still there");
    assert!(
        std::sync::Arc::ptr_eq(&held, &again),
        "the same release, not read again"
    );
    assert!(
        second
            .release(&model, &"2.0.0".parse().expect("v"))
            .is_some(),
        "the new one read"
    );
    // A full load does read it, and refuses the damaged file.
    let (_, skipped) = rt
        .block_on(Catalog::load(state.store(), &state.keys().release_ring))
        .expect("load");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    std::fs::write(&path, original).expect("restore");
}

#[test]
fn blob_uploads_are_checked_and_leave_nothing_on_failure() {
    let app = TestApp::start_with(ferry_tests::app::Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| c.limits.max_blob_bytes = 64 * 1024)),
    });
    let bytes =
        std::fs::read(ferry_tests::fixtures_dir().join("pte/mlp-v1-xnnpack.pte")).expect("fixture");
    let digest = Sha256Digest::of(&bytes);
    let url = app.at(&format!("/v1/admin/blobs/sha256/{}", digest.to_hex()));
    let put = |token: Option<&str>, body: &[u8]| {
        let mut r = app.agent.put(&url);
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        let mut resp = r.send(body).expect("request");
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (
            status,
            serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default(),
        )
    };
    // No token, wrong token, read-only token.
    assert_eq!(put(None, &bytes).0, 401);
    assert_eq!(put(Some("wrong-token-wrong-token"), &bytes).0, 401);
    let (status, body) = put(Some(READ_TOKEN), &bytes);
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    // Bytes that do not hash to the name.
    let mut flipped = bytes.clone();
    flipped[100] ^= 1;
    let (status, body) = put(Some(ADMIN_TOKEN), &flipped);
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("hash_mismatch"))
    );
    // Over the limit.
    let big = vec![7u8; 100 * 1024];
    let big_url = app.at(&format!(
        "/v1/admin/blobs/sha256/{}",
        Sha256Digest::of(&big).to_hex()
    ));
    let resp = app
        .agent
        .put(&big_url)
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .send(&big[..])
        .expect("request");
    assert_eq!(resp.status().as_u16(), 413);
    assert!(
        app.stored_files().is_empty(),
        "nothing may be left: {:?}",
        app.stored_files()
    );
    // Then the real upload works, and again is idempotent.
    let (status, body) = put(Some(ADMIN_TOKEN), &bytes);
    assert_eq!((status, body["created"].as_bool()), (201, Some(true)));
    let (status, body) = put(Some(ADMIN_TOKEN), &bytes);
    assert_eq!((status, body["created"].as_bool()), (200, Some(false)));
    assert_eq!(
        app.stored_files(),
        [format!("blobs/sha256/{}", digest.to_hex())]
    );
}

#[test]
fn releases_survive_a_restart() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    // A second server on the same data directory loads the catalog from the store.
    let second = app.replica(None);
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut resp = agent
        .get(format!("{}/v1/admin/models", second.url()))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .expect("request");
    let v: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json");
    assert_eq!(v["models"][0]["model"], "mlp");
    assert_eq!(v["models"][0]["latest"], "1.0.0");
    second.stop();
}
