//! Hostile input: oversized bodies, malformed JSON, traversal in names, huge versions,
//! malformed platform names. Each gets a clear 4xx with a JSON error, nothing panics, nothing is
//! stored. (Unknown fields and well-formed unknown platforms are protocol v1's business: they are
//! accepted, see `contract/protocol.rs`.)

use ferry_tests::app::{ADMIN_TOKEN, TestApp, mlp_v1, profile};

#[test]
fn hostile_resolve_requests() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let before = app.stored_files();
    let good = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        f(&mut v);
        serde_json::to_vec(&v).expect("json")
    };
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("empty body", vec![], 400, "request_malformed"),
        (
            "not json",
            b"{\"model\":".to_vec(),
            400,
            "request_malformed",
        ),
        ("array", b"[]".to_vec(), 400, "request_malformed"),
        ("oversized", vec![b' '; 320 * 1024], 413, "body_too_large"),
        (
            "traversal in model",
            with(&|v| v["model"] = "../../etc/passwd".into()),
            400,
            "invalid_name",
        ),
        (
            "uppercase model",
            with(&|v| v["model"] = "MLP".into()),
            400,
            "invalid_name",
        ),
        (
            "huge version",
            with(&|v| v["app_version"] = format!("1.0.0-{}", "a".repeat(4000)).into()),
            400,
            "invalid_version",
        ),
        (
            "not a version",
            with(&|v| v["runtime_version"] = "one.two".into()),
            400,
            "invalid_version",
        ),
        (
            "bad platform",
            with(&|v| v["platform"] = "Amiga OS".into()),
            400,
            "request_malformed",
        ),
        (
            "negative ram",
            with(&|v| v["ram_mb"] = (-1).into()),
            400,
            "request_malformed",
        ),
        (
            "empty install id",
            with(&|v| v["install_id"] = "".into()),
            400,
            "request_invalid",
        ),
        (
            "control chars",
            with(&|v| v["soc"] = "SM\u{0}8550".into()),
            400,
            "request_invalid",
        ),
        (
            "bad backend id",
            with(&|v| v["backends"] = serde_json::json!(["Xnn pack"])),
            400,
            "request_malformed",
        ),
        (
            "too many backends",
            with(&|v| v["backends"] = serde_json::json!(vec!["B"; 100])),
            400,
            "request_invalid",
        ),
        (
            "deep nesting",
            format!("{}{}", "[".repeat(5_000), "]".repeat(5_000)).into_bytes(),
            400,
            "request_malformed",
        ),
    ];
    for (name, body, status, code) in cases {
        let (got, resp) = app.post_raw("/v1/resolve", &body, None);
        assert_eq!(
            (got, resp["code"].as_str()),
            (status, Some(code)),
            "{name}: {resp}"
        );
        assert!(
            resp["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{name}"
        );
    }
    let (got, resp) = app.post_raw(
        "/v1/resolve?explain=maybe",
        &serde_json::to_vec(&good).expect("json"),
        None,
    );
    assert_eq!((got, resp["code"].as_str()), (400, Some("request_invalid")));
    // The server is still fine and nothing was written.
    assert_eq!(app.resolve(&good, false).0, 200);
    assert_eq!(app.stored_files(), before);
}

#[test]
fn hostile_admin_requests() {
    let app = TestApp::start();
    let before = app.stored_files();
    for path in [
        "/v1/admin/models/..%2F..%2Fetc/releases",
        "/v1/admin/models/%2e%2e/releases",
        "/v1/admin/models/UPPER/releases",
        "/v1/admin/models/a%00b/releases",
    ] {
        let (status, body) = app.post_raw(path, b"{}", Some(ADMIN_TOKEN));
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("invalid_name")),
            "{path}: {body}"
        );
    }
    let (status, body) = app.get_json(
        &format!("/v1/admin/models/mlp/releases/1.0.0-{}", "x".repeat(5000)),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_version"))
    );
    // The pre-upload check refuses what publishing would, and stores nothing.
    for (body, code) in [
        (&b"not json"[..], "envelope_malformed"),
        (&b"{\"payload\": 1}"[..], "envelope_malformed"),
        (&b"{}"[..], "envelope_malformed"),
    ] {
        let (status, answer) = app.post_raw(
            "/v1/admin/models/mlp/releases?check=true",
            body,
            Some(ADMIN_TOKEN),
        );
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some(code)),
            "{answer}"
        );
    }
    let (status, _) = app.post_raw("/v1/admin/models/mlp/releases?check=true", b"{}", None);
    assert_eq!(status, 401);
    // Only `check=true` checks; anything else that is not `false` is refused, never published.
    for q in ["check=1", "check=yes", "check=true&check=true", "check="] {
        let (status, answer) = app.post_raw(
            &format!("/v1/admin/models/mlp/releases?{q}"),
            b"{}",
            Some(ADMIN_TOKEN),
        );
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some("request_invalid")),
            "{q}: {answer}"
        );
    }
    // An oversized release body.
    let big = vec![b'x'; 2 << 20];
    let (status, body) = app.post_raw("/v1/admin/models/mlp/releases", &big, Some(ADMIN_TOKEN));
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("body_too_large"))
    );
    // A chunked (no length) upload over the limit is cut off mid-stream.
    let small = TestApp::start_with(ferry_tests::app::Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| c.limits.max_blob_bytes = 10_000)),
    });
    let data = vec![1u8; 50_000];
    let digest = ferry_shared::Sha256Digest::of(&data);
    let mut reader = std::io::Cursor::new(data);
    let resp = small
        .agent
        .put(small.at(&format!("/v1/admin/blobs/sha256/{}", digest.to_hex())))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .send(ureq::SendBody::from_reader(&mut reader));
    if let Ok(r) = resp {
        assert_eq!(r.status().as_u16(), 413);
    }
    assert!(
        small.stored_files().is_empty(),
        "{:?}",
        small.stored_files()
    );
    assert_eq!(app.stored_files(), before);
}

#[test]
fn hostile_rollout_and_deny_changes() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let before = app.stored_files();
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "/v1/admin/models/mlp/rollout",
            b"{".to_vec(),
            400,
            "rollout_invalid",
        ),
        (
            "/v1/admin/models/mlp/rollout",
            b"[]".to_vec(),
            400,
            "rollout_invalid",
        ),
        (
            "/v1/admin/models/mlp/rollout",
            br#"{"action":"start","release":"1.0.0","percent":"5","admin":true}"#.to_vec(),
            400,
            "rollout_invalid",
        ),
        (
            "/v1/admin/models/mlp/rollout",
            br#"{"action":"start","release":"1.0.0","percent":"5","max_failure_rate":7}"#.to_vec(),
            400,
            "rollout_invalid",
        ),
        (
            "/v1/admin/models/mlp/rollout",
            br#"{"action":"start","release":"x.y","percent":"5"}"#.to_vec(),
            400,
            "rollout_invalid",
        ),
        (
            "/v1/admin/models/mlp/rollout",
            vec![b' '; 100 * 1024],
            413,
            "body_too_large",
        ),
        (
            "/v1/admin/models/..%2Fetc/rollout",
            br#"{"action":"pause"}"#.to_vec(),
            400,
            "invalid_name",
        ),
        (
            "/v1/admin/models/mlp/rollout",
            br#"{"action":"pause"}"#.to_vec(),
            409,
            "rollout_not_active",
        ),
        (
            "/v1/admin/models/mlp/deny",
            b"nope".to_vec(),
            400,
            "deny_invalid",
        ),
        (
            "/v1/admin/models/mlp/deny",
            br#"{"action":"deny","release":"1.0.0","variant":"v","class":"galaxy","value":"x"}"#
                .to_vec(),
            400,
            "deny_invalid",
        ),
        (
            "/v1/admin/models/mlp/deny",
            br#"{"action":"burn","release":"1.0.0","variant":"v","class":"soc","value":"x"}"#
                .to_vec(),
            400,
            "deny_invalid",
        ),
        (
            "/v1/admin/models/mlp/deny",
            format!(
                r#"{{"action":"deny","release":"1.0.0","variant":"v","class":"soc","value":"{}"}}"#,
                "x".repeat(500)
            )
            .into_bytes(),
            400,
            "deny_invalid",
        ),
        (
            // A terminal escape in a device class: it would reach operators' terminals through
            // `ferry deny list`, and could never match a device anyway.
            "/v1/admin/models/mlp/deny",
            br#"{"action":"deny","release":"1.0.0","variant":"v","class":"device_model","value":"\u001b[2JPWNED\r\n"}"#
                .to_vec(),
            400,
            "deny_invalid",
        ),
        (
            "/v1/admin/models/mlp/deny",
            br#"{"action":"clear","release":"1.0.0","variant":"v","class":"soc","value":"x"}"#
                .to_vec(),
            404,
            "deny_not_found",
        ),
    ];
    for (path, body, status, code) in cases {
        let (got, resp) = app.post_raw(path, &body, Some(ADMIN_TOKEN));
        assert_eq!(
            (got, resp["code"].as_str()),
            (status, Some(code)),
            "{path}: {resp}"
        );
    }
    assert_eq!(app.stored_files(), before, "refused changes write nothing");
    // Without a token, nothing at all.
    let (got, _) = app.post_raw("/v1/admin/models/mlp/deny", b"{}", None);
    assert_eq!(got, 401);
}

#[test]
fn bodies_trickled_byte_by_byte_are_cut_off_and_resolve_keeps_answering() {
    use std::io::{Read as _, Write as _};
    let app = TestApp::start_with(ferry_tests::app::Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| c.limits.body_timeout_secs = 1)),
    });
    app.publish(&mlp_v1());
    // 200 connections send their headers and one byte of a 1,000-byte body, then stall.
    let started = std::time::Instant::now();
    let mut slow: Vec<std::net::TcpStream> = (0..200)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(app.server.addr).expect("connect");
            s.write_all(
                b"POST /v1/resolve HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{",
            )
            .expect("write");
            s
        })
        .collect();
    // Meanwhile devices are served.
    let good = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    let (status, body) = app.resolve(&good, false);
    assert_eq!(status, 200, "{body}");
    // Each stalled request is answered 408 body_timeout and its connection closed.
    for s in &mut slow {
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "cut off after the deadline, not after the client gave up: {:?}",
        started.elapsed()
    );
}

#[test]
fn the_wrong_method_on_an_operations_endpoint_is_a_json_405() {
    let app = TestApp::start();
    for path in ["/metrics", "/healthz", "/readyz"] {
        let (s, b) = app.post_raw(path, b"{}", None);
        assert_eq!(
            (s, b["code"].as_str()),
            (405, Some("method_not_allowed")),
            "{path}: {b}"
        );
    }
}

#[test]
fn a_blob_upload_that_stops_sending_is_cut_off() {
    use std::io::{Read as _, Write as _};
    let app = TestApp::start_with(ferry_tests::app::Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| c.limits.body_timeout_secs = 1)),
    });
    let before = app.stored_files();
    let mut s = std::net::TcpStream::connect(app.server.addr).expect("connect");
    let head = format!(
        "PUT /v1/admin/blobs/sha256/{} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_TOKEN}\r\ncontent-length: 100\r\n\r\nabc",
        "ab".repeat(32)
    );
    s.write_all(head.as_bytes()).expect("write");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
    assert_eq!(
        app.stored_files(),
        before,
        "nothing of the stalled upload is kept"
    );
}

/// A request and the answer it must get: path, body, token, status, code.
type Case<'a> = (&'a str, &'a [u8], Option<&'a str>, u16, &'a str);

#[test]
fn a_json_array_is_never_read_as_a_request_object() {
    // serde reads a struct from an array of its fields in order: that would bypass the
    // unknown-field checks and tie a request's meaning to the server's field order.
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let before = app.stored_files();
    let device = serde_json::to_vec(&profile(
        "linux",
        &["XnnpackBackend"],
        "1.5.1",
        "1.0.0",
        4096,
    ))
    .expect("json");
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(&device);
    let cases: [Case<'_>; 9] = [
        (
            "/v1/resolve",
            br#"["mlp","me","1.0.0","1.5.1",["XnnpackBackend"],"android"]"#,
            None,
            400,
            "request_malformed",
        ),
        ("/v1/resolve", b" \n[]", None, 400, "request_malformed"),
        ("/v1/resolve", &bom, None, 400, "request_malformed"),
        (
            "/v1/admin/models/mlp/rollout",
            br#"["pin","zz","1.0.0"]"#,
            Some(ADMIN_TOKEN),
            400,
            "rollout_invalid",
        ),
        (
            "/v1/admin/models/mlp/deny",
            br#"["deny","1.0.0","vulkan-fp32","soc","ARR"]"#,
            Some(ADMIN_TOKEN),
            400,
            "deny_invalid",
        ),
        ("/v1/telemetry", b"[[]]", None, 400, "telemetry_malformed"),
        (
            "/v1/admin/models/mlp/releases",
            br#"["payload","type",[]]"#,
            Some(ADMIN_TOKEN),
            400,
            "envelope_malformed",
        ),
        (
            "/v1/admin/models/mlp/revocations",
            br#"["payload","type",[]]"#,
            Some(ADMIN_TOKEN),
            400,
            "envelope_malformed",
        ),
        (
            "/v1/admin/keyring",
            br#"["payload","type",[]]"#,
            Some(ADMIN_TOKEN),
            422,
            "keyring_invalid",
        ),
    ];
    for (path, body, token, status, code) in cases {
        let (s, b) = app.post_raw(path, body, token);
        assert_eq!((s, b["code"].as_str()), (status, Some(code)), "{path}: {b}");
    }
    let (_, b) = app.post_raw("/v1/resolve", &bom, None);
    assert!(
        b["message"]
            .as_str()
            .is_some_and(|m| m.contains("byte order mark")),
        "{b}"
    );
    assert_eq!(app.stored_files(), before, "nothing was written");
    // The same bodies as objects are taken.
    let (s, b) = app.post_raw("/v1/resolve", &device, None);
    assert_eq!(s, 200, "{b}");
}

#[test]
fn a_deny_change_with_a_query_parameter_changes_nothing() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let change = serde_json::to_vec(&serde_json::json!({"action": "deny", "release": "1.0.0",
        "variant": "vulkan-fp32", "class": "soc", "value": "X"}))
    .expect("json");
    for q in ["?dry_run=true", "?preview=1", "?x"] {
        let (s, b) = app.post_raw(
            &format!("/v1/admin/models/mlp/deny{q}"),
            &change,
            Some(ADMIN_TOKEN),
        );
        assert_eq!(
            (s, b["code"].as_str()),
            (400, Some("deny_invalid")),
            "{q}: {b}"
        );
    }
    let (_, list) = app.get_json("/v1/admin/models/mlp/deny", Some(ADMIN_TOKEN));
    assert!(
        list["entries"].as_array().is_some_and(Vec::is_empty),
        "{list}"
    );
}

#[test]
fn a_version_too_long_is_an_invalid_version() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let long = format!("1.0.0-{}", "a".repeat(70));
    for field in ["app_version", "runtime_version"] {
        let mut device = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
        device[field] = long.clone().into();
        let (s, b) = app.post_raw(
            "/v1/resolve",
            &serde_json::to_vec(&device).expect("json"),
            None,
        );
        assert_eq!(
            (s, b["code"].as_str()),
            (400, Some("invalid_version")),
            "{field}: {b}"
        );
        assert!(
            b["message"].as_str().is_some_and(|m| m.contains(field)),
            "{b}"
        );
    }
}
