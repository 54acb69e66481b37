//! Protocol v1 against a real server: tolerant readers on the device path, the version on the
//! wire, and the counters that tell an operator what newer clients send.

use ferry_tests::app::{Options, TestApp, mlp_v1, profile};

/// POSTs `body` to `path` with extra headers; returns status, headers and body.
fn post(
    app: &TestApp,
    path: &str,
    body: &serde_json::Value,
    headers: &[(&str, &str)],
) -> (u16, ureq::http::HeaderMap, serde_json::Value) {
    let mut req = app
        .agent
        .post(app.at(path))
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req
        .send(&serde_json::to_vec(body).expect("json")[..])
        .expect("request");
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        h,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

fn metrics(app: &TestApp) -> String {
    app.metrics()
}

fn candidates(app: &TestApp, body: &serde_json::Value) -> Vec<String> {
    let (decision, _) = app.verify_response(body);
    decision
        .candidates
        .iter()
        .map(|c| c.variant.to_string())
        .collect()
}

#[test]
fn a_newer_client_s_request_is_answered_in_v1() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let good = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);

    // Unknown fields, as a newer client adds them: 200, and counted by name.
    let mut newer = good.clone();
    newer["gpu_driver"] = "Adreno 740 v615".into();
    newer["thermal_state"] = "nominal".into();
    let (status, h, body) = post(
        &app,
        "/v1/resolve",
        &newer,
        &[
            ("Ferry-Protocol", "2"),
            ("Ferry-Sdk", "ferry-client-swift/3.1.0"),
        ],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        h.get("ferry-protocol").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    // The answer is a v1 answer a v1 client verifies.
    assert_eq!(
        candidates(&app, &body),
        vec!["xnnpack-int8", "xnnpack-fp32"]
    );

    let m = metrics(&app);
    assert!(
        m.contains(
            r#"ferry_protocol_unknown_fields_total{endpoint="resolve",field="gpu_driver"} 1"#
        ),
        "{m}"
    );
    assert!(
        m.contains(r#"ferry_device_requests_total{endpoint="resolve",protocol="2",sdk="ferry-client-swift/3.1.0"} 1"#),
        "{m}"
    );

    // A client from before v1 (no headers) is counted as legacy and answered as before.
    let (status, h, _) = post(&app, "/v1/resolve", &good, &[]);
    assert_eq!(status, 200);
    assert_eq!(
        h.get("ferry-protocol").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert!(metrics(&app).contains(
        r#"ferry_device_requests_total{endpoint="resolve",protocol="legacy",sdk="unknown"} 1"#
    ));

    // A header that is not a number is answered too.
    let (status, _, _) = post(&app, "/v1/resolve", &good, &[("Ferry-Protocol", "two")]);
    assert_eq!(status, 200);
}

#[test]
fn unknown_platforms_and_backends_never_fail_a_request() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    // A platform this server does not know matches only variants without a platform
    // restriction: Vulkan (any platform) yes, Core ML (ios and macos only) no.
    let harmony = profile(
        "harmonyos",
        &["XnnpackBackend", "VulkanBackend", "CoreMLBackend"],
        "1.5.1",
        "1.0.0",
        8192,
    );
    let (status, body) = app.resolve(&harmony, true);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        candidates(&app, &body),
        vec!["vulkan-fp32", "xnnpack-int8", "xnnpack-fp32"]
    );
    let coreml = body["explain"]
        .as_array()
        .expect("explain")
        .iter()
        .find(|e| e["variant"] == "coreml-fp32")
        .expect("coreml explained");
    let why = coreml["reasons"][0].as_str().unwrap_or("");
    assert!(why.contains("harmonyos"), "{coreml}");

    // Backends a newer runtime registers (OpenVINO, Samsung's ENN) are kept and ignored.
    let newer = profile(
        "android",
        &["XnnpackBackend", "OpenvinoBackend", "EnnBackend"],
        "1.5.1",
        "1.0.0",
        8192,
    );
    let (status, body) = app.resolve(&newer, false);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        candidates(&app, &body),
        vec!["xnnpack-int8", "xnnpack-fp32"]
    );

    // Still limited: a platform that is not a platform name is refused with a clear error.
    let mut bad = harmony.clone();
    bad["platform"] = "Harmony OS\n".into();
    let (status, body) = app.resolve(&bad, false);
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("request_malformed"))
    );
    assert!(
        body["message"].as_str().unwrap_or("").contains("platform"),
        "{body}"
    );
}

#[test]
fn telemetry_from_a_newer_client_is_counted_not_refused() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let event = |kind: &str| {
        serde_json::json!({
            "kind": kind, "model": "mlp", "release": "1.0.0", "variant": "xnnpack-fp32",
            "delegate": "xnnpack", "outcome": "ok", "install_id": "i-1", "platform": "linux",
            "soc": "", "device_model": "", "os_version": "", "app_version": "1.0.0",
            "runtime_version": "1.5.1",
            "at": time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .expect("time"),
        })
    };
    let mut with_field = event("load");
    with_field["battery_pct"] = 40.into();
    // A kind this server does not know (inference became a v1 kind with issue 32).
    let mut inference = event("energy");
    inference["joules"] = 12.5.into();
    let mut bad_platform = event("load");
    bad_platform["platform"] = "BAD PLATFORM".into();
    let mut newer_platform = event("load");
    newer_platform["platform"] = "harmonyos".into();
    let batch = serde_json::json!({ "events": [with_field, inference, {"kind": "load"}, bad_platform, newer_platform] });
    let (status, h, body) = post(
        &app,
        "/v1/telemetry",
        &batch,
        &[
            ("Ferry-Protocol", "1"),
            ("Ferry-Sdk", "ferry-client-rust/0.9.0"),
        ],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        h.get("ferry-protocol").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    // The load event with a new field is accepted; the event of a new kind is ignored (the
    // client must not send it again); a malformed event is still refused.
    // A platform breaks the same rule as in resolve; a newer platform name is fine.
    assert_eq!(body["accepted"], 2, "{body}");
    assert_eq!(body["ignored"], 1, "{body}");
    assert_eq!(body["rejected"][0]["index"], 2, "{body}");
    assert_eq!(body["rejected"][1]["index"], 3, "{body}");
    assert!(
        body["rejected"][1]["message"]
            .as_str()
            .unwrap_or("")
            .contains("platform"),
        "{body}"
    );
    let m = metrics(&app);
    for field in ["battery_pct", "joules"] {
        assert!(
            m.contains(&format!(
                r#"ferry_protocol_unknown_fields_total{{endpoint="telemetry",field="{field}"}} 1"#
            )),
            "{field}: {m}"
        );
    }
}

#[test]
fn a_planned_retirement_is_announced_on_every_device_answer() {
    let app = TestApp::start_with(Options {
        tweak: Some(Box::new(|c| {
            c.protocol_v1_sunset =
                Some(time::Date::from_calendar_date(2029, time::Month::June, 30).expect("date"));
        })),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    let good = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    let (status, h, _) = post(&app, "/v1/resolve", &good, &[]);
    assert_eq!(status, 200);
    assert_eq!(
        h.get("ferry-protocol-sunset").map(|v| v.as_bytes()),
        Some(&b"2029-06-30"[..])
    );
    assert_eq!(
        h.get("sunset").map(|v| v.as_bytes()),
        Some(&b"Sun, 01 Jul 2029 00:00:00 GMT"[..])
    );
    // Errors on the device path carry it too; admin answers do not.
    let mut r = app
        .agent
        .get(app.at("/v1/blobs/sha256/zz"))
        .call()
        .expect("get");
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.headers().contains_key("ferry-protocol-sunset"));
    let _ = r.body_mut().read_to_string();
    let r = app
        .agent
        .get(app.at("/v1/admin/models"))
        .call()
        .expect("get");
    assert!(!r.headers().contains_key("ferry-protocol-sunset"));
}

#[test]
fn the_fleet_view_shows_who_resolves_by_protocol_and_sdk() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let sdks = [
        ("1", "ferry-client-rust/0.2.0"),
        ("1", "ferry-client-c/0.2.0"),
        ("1", "ferry-client-rust/0.2.0"),
    ];
    for (i, (protocol, sdk)) in sdks.iter().enumerate() {
        let mut dev = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
        dev["install_id"] = format!("census-{i}").into();
        // The same device twice counts once.
        for _ in 0..2 {
            let (status, _, body) = post(
                &app,
                "/v1/resolve",
                &dev,
                &[("Ferry-Protocol", protocol), ("Ferry-Sdk", sdk)],
            );
            assert_eq!(status, 200, "{body}");
        }
    }
    let mut dev = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    dev["install_id"] = "census-old".into();
    assert_eq!(post(&app, "/v1/resolve", &dev, &[]).0, 200);

    let (status, h) = app.get_json(
        "/v1/admin/models/mlp/health?since=1h",
        Some(ferry_tests::app::READ_TOKEN),
    );
    assert_eq!(status, 200, "{h}");
    let c = &h["clients"];
    assert_eq!(c["devices"], 4, "{c}");
    let rows = c["by_client"].as_array().expect("rows");
    assert_eq!(rows[0]["sdk"], "ferry-client-rust", "{c}");
    assert_eq!(rows[0]["sdk_version"], "0.2.0");
    assert_eq!(rows[0]["devices"], 2);
    assert_eq!(rows[0]["share"], 0.5);
    assert!(
        rows.iter()
            .any(|r| r["protocol"] == "legacy" && r["sdk"] == "unknown" && r["devices"] == 1),
        "{c}"
    );
}

#[test]
fn a_variant_for_a_backend_outside_the_known_set_is_signed_published_and_ranked() {
    let app = TestApp::start();
    let openvino: ferry_shared::manifest::Delegate = "OpenvinoBackend".parse().expect("delegate");
    assert!(!openvino.is_known());
    let mut spec = mlp_v1();
    spec.variants.push(ferry_tests::app::variant(
        "openvino-fp32",
        "mlp-v1-openvino.pte",
        openvino.clone(),
        ">=1.0.0",
        "*",
    ));
    // Signed with ferry sign's checks (the program really calls OpenvinoBackend) and admitted.
    let (manifest, _) = app.publish(&spec);
    let v = manifest.variant_named("openvino-fp32").expect("variant");
    assert_eq!(v.backends[0].as_str(), "OpenvinoBackend");

    // Ranked after the known GPU delegate and before XNNPACK.
    let both = profile(
        "android",
        &["XnnpackBackend", "VulkanBackend", "OpenvinoBackend"],
        "1.5.1",
        "1.0.0",
        8192,
    );
    let (status, body) = app.resolve(&both, false);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        candidates(&app, &body),
        vec![
            "vulkan-fp32",
            "openvino-fp32",
            "xnnpack-int8",
            "xnnpack-fp32"
        ]
    );
    let cpu = profile(
        "linux",
        &["XnnpackBackend", "OpenvinoBackend"],
        "1.5.1",
        "1.0.0",
        8192,
    );
    let (_, body) = app.resolve(&cpu, false);
    assert_eq!(
        candidates(&app, &body),
        vec!["openvino-fp32", "xnnpack-int8", "xnnpack-fp32"]
    );
    // A device without the backend is not offered it, and explain says why.
    let plain = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 8192);
    let (_, body) = app.resolve(&plain, true);
    let why = body["explain"]
        .as_array()
        .expect("explain")
        .iter()
        .find(|e| e["variant"] == "openvino-fp32")
        .expect("explained")["reasons"][0]
        .to_string();
    assert!(why.contains("needs backend OpenvinoBackend"), "{why}");

    // ferry sign still refuses a variant that claims the backend its program never calls.
    let mut lie = mlp_v1();
    lie.version = "1.0.1".parse().expect("version");
    lie.variants.push(ferry_tests::app::variant(
        "openvino-fp32",
        "mlp-v1-xnnpack.pte",
        openvino,
        ">=1.0.0",
        "*",
    ));
    let read = |p: &std::path::Path| -> anyhow::Result<Vec<u8>> { Ok(std::fs::read(p)?) };
    let err = ferry_server::release::sign::build_manifest(
        &lie,
        &ferry_tests::fixtures_dir().join("pte"),
        &read,
        time::OffsetDateTime::now_utc(),
    )
    .expect_err("delegate not in the bytes");
    assert!(
        err.to_string().contains("never calls OpenvinoBackend"),
        "{err:#}"
    );
}

#[test]
fn the_device_census_is_fleet_wide_across_three_replicas_and_a_restart() {
    let fast = |c: &mut ferry_server::app::config::Config| c.telemetry.flush_secs = 1;
    let mut app = TestApp::start_with(Options {
        tweak: Some(Box::new(fast)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    let replicas: Vec<_> = (0..2)
        .map(|_| app.replica_with(None, Box::new(fast)))
        .collect();
    let urls: Vec<String> = std::iter::once(app.url())
        .chain(replicas.iter().map(|r| r.url()))
        .collect();
    // Each replica answers devices of another SDK.
    for (i, url) in urls.iter().enumerate() {
        for d in 0..3 {
            let mut dev = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
            dev["install_id"] = format!("fleet-{i}-{d}").into();
            let mut resp = app
                .agent
                .post(format!("{url}/v1/resolve"))
                .header("content-type", "application/json")
                .header("Ferry-Protocol", "1")
                .header("Ferry-Sdk", format!("sdk-{i}/1.0"))
                .send(&serde_json::to_vec(&dev).expect("json")[..])
                .expect("resolve");
            assert_eq!(resp.status().as_u16(), 200);
            let _ = resp.body_mut().read_to_string();
        }
    }
    let rows = |app: &TestApp| -> serde_json::Value {
        let (_, h) = app.get_json(
            "/v1/admin/models/mlp/health",
            Some(ferry_tests::app::READ_TOKEN),
        );
        h["clients"].clone()
    };
    // Every replica's counts reach the store and the first replica's view within a few flushes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = rows(&app);
    while seen["devices"] != 9 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        seen = rows(&app);
    }
    assert_eq!(seen["devices"], 9, "{seen}");
    assert_eq!(
        seen["by_client"].as_array().map(Vec::len),
        Some(3),
        "{seen}"
    );
    assert_eq!(seen["by_protocol"][0]["devices"], 9, "{seen}");
    // Still there after the replicas stop and the first one restarts.
    drop(replicas);
    app.restart().expect("restart");
    let after = rows(&app);
    assert_eq!(after["devices"], 9, "{after}");
}
