//! Publish the fixture releases over HTTP, then resolve for a table of device profiles.

use ferry_tests::app::{TestApp, mlp_v1, mlp_v2, profile};

fn candidates(app: &TestApp, body: &serde_json::Value) -> (String, Vec<String>) {
    let (decision, manifest) = app.verify_response(body);
    // Every candidate must be a variant of the signed manifest, with the same digest and size.
    for c in &decision.candidates {
        let v = manifest
            .variant(&c.variant)
            .expect("candidate is in the signed manifest");
        assert_eq!(
            (v.sha256, v.size, &v.delegate),
            (c.sha256, c.size, &c.delegate)
        );
        assert_eq!(c.url, format!("/v1/blobs/sha256/{}", c.sha256.to_hex()));
    }
    assert_eq!(decision.release, manifest.version);
    (
        decision.release.to_string(),
        decision
            .candidates
            .iter()
            .map(|c| c.variant.to_string())
            .collect(),
    )
}

#[test]
fn device_profiles_get_the_expected_ordered_candidates() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    app.ship("2.0.0");

    let table: Vec<(&str, serde_json::Value, &str, Vec<&str>)> = vec![
        (
            "Android with Vulkan",
            profile(
                "android",
                &["XnnpackBackend", "VulkanBackend"],
                "1.5.1",
                "2.1.0",
                8192,
            ),
            "2.0.0",
            vec!["vulkan-fp32", "xnnpack-fp32"],
        ),
        (
            "iPhone with Core ML",
            profile(
                "ios",
                &["XnnpackBackend", "CoreMLBackend"],
                "1.5.1",
                "2.0.0",
                6144,
            ),
            "2.0.0",
            vec!["coreml-fp32", "xnnpack-fp32"],
        ),
        (
            "Linux CPU only",
            profile("linux", &["XnnpackBackend"], "1.5.1", "2.0.0", 16384),
            "2.0.0",
            vec!["xnnpack-fp32"],
        ),
        (
            "old runtime gets the release it can load",
            profile(
                "android",
                &["XnnpackBackend", "VulkanBackend"],
                "1.2.0",
                "2.0.0",
                8192,
            ),
            "1.0.0",
            vec!["vulkan-fp32", "xnnpack-int8", "xnnpack-fp32"],
        ),
        (
            "old app gets the release meant for it",
            profile("linux", &["XnnpackBackend"], "1.5.1", "1.4.0", 8192),
            "1.0.0",
            vec!["xnnpack-int8", "xnnpack-fp32"],
        ),
        (
            "low RAM skips Vulkan",
            profile(
                "android",
                &["XnnpackBackend", "VulkanBackend"],
                "1.5.1",
                "2.0.0",
                1024,
            ),
            "2.0.0",
            vec!["xnnpack-fp32"],
        ),
        (
            "no XNNPACK registered: portable",
            profile("other", &[], "1.5.1", "2.0.0", 512),
            "2.0.0",
            vec!["portable-fp32"],
        ),
    ];
    for (name, dev, release, want) in table {
        let (status, body) = app.resolve(&dev, false);
        assert_eq!(status, 200, "{name}: {body}");
        let (got_release, got) = candidates(&app, &body);
        assert_eq!(got_release, release, "{name}");
        assert_eq!(got, want, "{name}");
        if got.iter().any(|v| v.starts_with("xnnpack")) {
            assert!(
                got.last().is_some_and(|v| v.starts_with("xnnpack")),
                "{name}: XNNPACK last"
            );
        }
    }
}

#[test]
fn explain_and_no_compatible_variant() {
    let app = TestApp::start();
    app.publish(&mlp_v2());
    let dev = profile(
        "android",
        &["XnnpackBackend", "VulkanBackend"],
        "1.5.1",
        "2.0.0",
        1024,
    );
    let (status, body) = app.resolve(&dev, true);
    assert_eq!(status, 200);
    let explain = body["explain"].as_array().expect("explain present");
    let vulkan = explain
        .iter()
        .find(|e| e["variant"] == "vulkan-fp32")
        .expect("vulkan explained");
    assert_eq!(vulkan["reasons"][0], "needs 2048 MiB RAM, device has 1024");
    let coreml = explain
        .iter()
        .find(|e| e["variant"] == "coreml-fp32")
        .expect("coreml explained");
    assert!(
        coreml["reasons"]
            .to_string()
            .contains("needs backend CoreMLBackend")
    );

    let old = profile("android", &["XnnpackBackend"], "1.4.2", "2.0.0", 8192);
    let (status, body) = app.resolve(&old, false);
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "no_compatible_variant");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("needs ExecuTorch runtime >=1.5.0, device has 1.4.2"),
        "{body}"
    );
    assert!(body["request_id"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(
        body["details"]["explain"]
            .as_array()
            .is_some_and(|a| a.len() == 4)
    );

    let mut unknown = dev.clone();
    unknown["model"] = "nope".into();
    let (status, body) = app.resolve(&unknown, false);
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("model_not_found"))
    );
}

#[test]
fn decisions_expire_and_sequences_follow_the_model_state() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let dev = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    let sequence = || {
        let (status, body) = app.resolve(&dev, false);
        assert_eq!(status, 200);
        let (d, _) = app.verify_response(&body);
        let ttl = d.expires_at - d.issued_at;
        assert_eq!(ttl.whole_seconds(), 3600);
        assert_eq!(d.cohort, ferry_shared::wire::resolve::Cohort::Baseline);
        let request: ferry_shared::wire::resolve::ResolveRequest =
            serde_json::from_value(dev.clone()).expect("request");
        assert_eq!(d.request, request.selection_digest());
        assert_eq!(d.pinned, None);
        assert_eq!(d.keyring_version, 1);
        d.sequence
    };
    // The same state gives the same sequence, however much time passes.
    let first = sequence();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(sequence(), first);
    // Every change to what devices may get raises it: a release, a rollout, a deny entry.
    app.publish(&ferry_tests::app::mlp_v2());
    let after_publish = sequence();
    assert!(after_publish > first);
    app.ship("2.0.0");
    let after_rollout = sequence();
    assert!(after_rollout > after_publish);
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/deny",
        &serde_json::to_vec(&serde_json::json!({"action": "deny", "release": "2.0.0",
            "variant": "vulkan-fp32", "class": "soc", "value": "SM0000"}))
        .expect("json"),
        Some(ferry_tests::app::ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    assert!(sequence() > after_rollout);
}

#[test]
fn demo_model_resolves() {
    let app = TestApp::start_with(ferry_tests::app::Options {
        demo: true,
        keys: None,
        store: None,
        tweak: None,
    });
    let mut dev = profile(
        "ios",
        &["XnnpackBackend", "CoreMLBackend"],
        "1.5.1",
        "1.0.0",
        4096,
    );
    dev["model"] = "demo-mlp".into();
    let (status, body) = app.resolve(&dev, false);
    assert_eq!(status, 200, "{body}");
    let (_, got) = candidates(&app, &body);
    assert_eq!(got, ["coreml-fp32", "xnnpack-fp32"]);
    let (_, manifest) = app.verify_response(&body);
    let golden = manifest.variants[0]
        .golden
        .as_ref()
        .expect("demo carries a golden check");
    assert_eq!(golden.input[0].shape, [2, 16]);
}

#[test]
fn release_manifests_are_served_by_digest_on_every_replica() {
    let app = TestApp::start();
    // A replica started before the release exists has not read it yet.
    let replica = app.replica(None);
    app.publish(&mlp_v1());
    let dev = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    let (status, body) = app.resolve(&dev, false);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.get("release").is_none(),
        "referred to, not inline: {body}"
    );
    let path = body["release_ref"]["url"]
        .as_str()
        .expect("url")
        .to_string();
    let want = body["release_ref"]["sha256"]
        .as_str()
        .expect("sha")
        .to_string();
    // The replica finds it at once (it reloads its catalog on a miss).
    let mut r = app
        .agent
        .get(format!("{}{path}", replica.url()))
        .call()
        .expect("release from the replica");
    assert_eq!(r.status().as_u16(), 200);
    let bytes = r.body_mut().read_to_vec().expect("bytes");
    assert_eq!(ferry_shared::Sha256Digest::of(&bytes).to_hex(), want);
    assert_eq!(
        body["release_ref"]["size"].as_u64(),
        Some(bytes.len() as u64)
    );
    // Immutable: a client that has it gets 304.
    let again = app
        .agent
        .get(app.at(&path))
        .header("if-none-match", format!("\"{want}\""))
        .call()
        .expect("conditional");
    assert_eq!(again.status().as_u16(), 304);
    // Unknown and malformed digests.
    let (s, e) = app.get_json(&format!("/v1/releases/sha256/{}", "0".repeat(64)), None);
    assert_eq!((s, e["code"].as_str()), (404, Some("release_not_found")));
    let (s, e) = app.get_json("/v1/releases/sha256/XYZ", None);
    assert_eq!((s, e["code"].as_str()), (400, Some("invalid_digest")));
    replica.stop();
}
