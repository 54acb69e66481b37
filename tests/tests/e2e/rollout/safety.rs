//! Rollout commands that used to strand or downgrade devices are refused, each with its own
//! code and nothing changed; after every step a 1,000-device sweep finds no device without a
//! variant that it had before.

use ferry_tests::app::{ADMIN_TOKEN, READ_TOKEN, TestApp, mlp_v1, mlp_v2};

/// One device of a class: (platform, backends, runtime, app).
const CLASSES: [(&str, &[&str], &str, &str); 5] = [
    (
        "android",
        &["XnnpackBackend", "VulkanBackend"],
        "1.5.1",
        "2.0.0",
    ),
    ("android", &["XnnpackBackend"], "1.2.0", "1.0.0"),
    (
        "ios",
        &["XnnpackBackend", "CoreMLBackend"],
        "1.5.1",
        "2.1.0",
    ),
    ("linux", &["XnnpackBackend"], "1.5.1", "2.0.0"),
    ("linux", &[], "1.5.1", "2.0.0"),
];

fn dev(i: usize) -> serde_json::Value {
    let (platform, backends, runtime, app) = CLASSES[i % CLASSES.len()];
    serde_json::json!({
        "model": "mlp", "install_id": format!("sweep-{i:05}"), "app_version": app,
        "runtime_version": runtime, "backends": backends, "platform": platform,
        "os_version": "14", "device_model": "phone", "soc": "SM8550", "ram_mb": 8192
    })
}

/// Resolves 1,000 devices (every class, many cohorts); returns how many got each release and
/// fails if any device got no variant.
fn sweep(app: &TestApp) -> std::collections::BTreeMap<String, usize> {
    let mut got = std::collections::BTreeMap::new();
    for i in 0..1000 {
        let (status, body) = app.resolve(&dev(i), false);
        assert_eq!(
            status,
            200,
            "device {i} ({}) has no variant: {body}",
            dev(i)
        );
        let (d, _) = app.verify_response(&body);
        *got.entry(d.release.to_string()).or_default() += 1;
    }
    got
}

fn change(app: &TestApp, body: serde_json::Value) -> (u16, serde_json::Value) {
    app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(&body).expect("json"),
        Some(ADMIN_TOKEN),
    )
}

fn history_len(app: &TestApp) -> usize {
    let (s, h) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    assert_eq!(s, 200, "{h}");
    h["history"].as_array().map_or(0, Vec::len)
}

/// Sends a change that must be refused with `code`; checks that nothing was written.
fn refused(app: &TestApp, body: serde_json::Value, status: u16, code: &str) -> String {
    let before = history_len(app);
    let (s, b) = change(app, body.clone());
    assert_eq!(
        (s, b["code"].as_str()),
        (status, Some(code)),
        "{body} -> {b}"
    );
    assert_eq!(
        history_len(app),
        before,
        "{body} was refused but wrote a revision"
    );
    b["message"].as_str().unwrap_or("").to_string()
}

fn mlp_v3() -> ferry_server::release::sign::VariantsFile {
    let mut v = mlp_v2();
    v.version = "3.0.0".parse().expect("version");
    v.notes = "v3".into();
    v
}

#[test]
fn publishing_is_not_shipping_and_a_later_rollout_moves_only_its_share() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    app.publish(&mlp_v3());
    // Three releases and no rollout: every device keeps the first.
    assert_eq!(sweep(&app).get("1.0.0"), Some(&1000));
    let (s, releases) = app.get_json("/v1/admin/models/mlp", Some(READ_TOKEN));
    assert_eq!(s, 200);
    let states: Vec<(&str, &str)> = releases["releases"]
        .as_array()
        .expect("releases")
        .iter()
        .map(|r| {
            (
                r["version"].as_str().unwrap_or(""),
                r["state"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("3.0.0", "published"),
            ("2.0.0", "published"),
            ("1.0.0", "live")
        ]
    );
    // A dry run previews the share exactly and changes nothing.
    let before = history_len(&app);
    let (s, dry) = app.post_raw(
        "/v1/admin/models/mlp/rollout?dry_run=true",
        br#"{"action": "start", "release": "3.0.0", "percent": "10"}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["preview"]["share_changing"], 0.1, "{dry}");
    assert_eq!(history_len(&app), before);
    assert_eq!(sweep(&app).get("1.0.0"), Some(&1000));
    // Staging 10% moves about 10% (those devices that can run 3.0.0), not 90% back.
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "start", "release": "3.0.0", "percent": "10"}),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["preview"]["share_changing"], 0.1, "{b}");
    let got = sweep(&app);
    let moved = got.get("3.0.0").copied().unwrap_or(0);
    assert!((40..=160).contains(&moved), "{got:?}");
    assert_eq!(got.get("2.0.0"), None, "{got:?}");
}

#[test]
fn a_completed_release_cannot_be_undercut_and_the_baseline_cannot_be_restaged() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    for body in [
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "100"}),
        serde_json::json!({"action": "complete"}),
    ] {
        let (s, b) = change(&app, body);
        assert_eq!(s, 200, "{b}");
    }
    let after_complete = sweep(&app);
    // Starting the older release would move the baseline back: refused, and says how.
    let msg = refused(
        &app,
        serde_json::json!({"action": "start", "release": "1.0.0", "percent": "5"}),
        409,
        "rollout_not_newer",
    );
    assert!(msg.contains("ferry rollout revert"), "{msg}");
    assert_eq!(sweep(&app), after_complete);
    // Starting the release that already is the baseline: refused, so the rollback that used to
    // empty every answer has nothing to roll back.
    refused(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "5"}),
        409,
        "rollout_not_newer",
    );
    refused(
        &app,
        serde_json::json!({"action": "rollback"}),
        409,
        "rollout_not_active",
    );
    assert_eq!(sweep(&app), after_complete);
    // The explicit downgrade: needs a reason and an older release; recorded.
    refused(
        &app,
        serde_json::json!({"action": "revert", "to": "1.0.0", "reason": " "}),
        400,
        "rollout_invalid",
    );
    refused(
        &app,
        serde_json::json!({"action": "revert", "to": "2.0.0", "reason": "x"}),
        400,
        "rollout_invalid",
    );
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "revert", "to": "1.0.0", "reason": "2.0.0 drains batteries"}),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        (b["action"].as_str(), b["baseline"].as_str()),
        (Some("revert"), Some("1.0.0"))
    );
    assert_eq!(sweep(&app).get("1.0.0"), Some(&1000));
}

#[test]
fn the_way_back_is_never_refused_and_a_move_forward_that_strands_needs_allow_strand() {
    let app = TestApp::start();
    // 0.9.0 and 1.1.0 serve only Apple devices (Core ML); 1.0.0 serves everyone.
    let apple_only = |version: &str| {
        let mut r = mlp_v1();
        r.version = version.parse().expect("version");
        r.variants.retain(|v| v.id.as_str() == "coreml-fp32");
        r
    };
    app.publish(&apple_only("0.9.0"));
    app.publish(&mlp_v1());
    app.publish(&apple_only("1.1.0"));
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "start", "release": "1.0.0", "percent": "50"}),
    );
    assert_eq!(s, 200, "{b}");
    // Staged Android and Linux devices are served only by 1.0.0. In an incident the way back
    // is never blocked: pause, then a smaller share and a rollback go through, and say which
    // classes lose their variant.
    let (s, b) = change(&app, serde_json::json!({"action": "pause"}));
    assert_eq!(s, 200, "{b}");
    let (s, b) = change(&app, serde_json::json!({"action": "resume"}));
    assert_eq!(s, 200, "{b}");
    let (s, b) = change(&app, serde_json::json!({"action": "set", "percent": "10"}));
    assert_eq!(s, 200, "a smaller share: {b}");
    let said = |b: &serde_json::Value| {
        let stranded = b["preview"]["stranded"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let warnings = b["warnings"].to_string();
        (stranded, warnings)
    };
    let (stranded, warnings) = said(&b);
    assert!(!stranded.is_empty(), "{b}");
    assert!(warnings.contains("left with no variant"), "{b}");
    // Devices of those classes that loaded 1.0.0 (with receipts): the warning counts them.
    let loads: Vec<serde_json::Value> = (0..6)
        .flat_map(|n| {
            [
                "xnnpack-int8",
                "xnnpack-fp32",
                "vulkan-fp32",
                "portable-fp32",
            ]
            .map(|v| {
                ferry_tests::kit::Event::load("mlp", "1.0.0", v)
                    .install(&format!("stranded-{n}"))
                    .set("platform", if n % 2 == 0 { "android" } else { "linux" })
                    .json()
            })
        })
        .collect();
    app.post_receipted(&app.url(), &loads);
    let (s, b) = change(&app, serde_json::json!({"action": "rollback"}));
    assert_eq!(s, 200, "{b}");
    let (stranded, warnings) = said(&b);
    let counted = warnings
        .split(" device(s) in the fleet reported loading")
        .next()
        .and_then(|w| w.rsplit('(').next())
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert!(
        counted.is_some_and(|n| n > 0),
        "the devices are counted: {warnings}"
    );
    assert!(
        stranded
            .iter()
            .any(|c| c.as_str().unwrap_or_default().contains("1.0.0/")),
        "says what the class got: {b}"
    );
    assert!(
        ["android", "linux"].iter().any(|p| warnings.contains(p)),
        "names the class: {warnings}"
    );
    assert!(
        !warnings.contains("9999") && !warnings.contains("1073741824"),
        "no placeholder values: {warnings}"
    );
    let (s, b) = change(&app, serde_json::json!({"action": "resume"}));
    assert_eq!(s, 200, "{b}");
    // A move forward that would strand them (1.1.0 supersedes 1.0.0, which is withdrawn) is
    // refused, says what to do instead, and goes through only with allow_strand and a reason.
    let supersede = serde_json::json!({"action": "start", "release": "1.1.0", "percent": "50",
        "supersede": true});
    let msg = refused(&app, supersede.clone(), 409, "rollout_strands_devices");
    assert!(
        msg.contains("the way back") && msg.contains("allow_strand"),
        "{msg}"
    );
    let mut allow = supersede.clone();
    allow["allow_strand"] = true.into();
    let msg = refused(&app, allow.clone(), 400, "rollout_invalid");
    assert!(msg.contains("allow_strand needs a reason"), "{msg}");
    allow["reason"] = "1.0.0 crashes on every Android GPU; Apple first".into();
    let (s, b) = change(&app, allow);
    assert_eq!(s, 200, "{b}");
    let (stranded, _) = said(&b);
    assert!(!stranded.is_empty(), "{b}");
    assert_eq!(
        b["reason"],
        "1.0.0 crashes on every Android GPU; Apple first"
    );
}

#[test]
fn superseding_needs_the_flag_a_newer_release_and_keeps_the_cohort() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    app.publish(&mlp_v3());
    let (s, first) = change(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "20"}),
    );
    assert_eq!(s, 200, "{first}");
    let on_v2: Vec<usize> = (0..1000)
        .filter(|i| {
            let (_, body) = app.resolve(&dev(*i), false);
            app.verify_response(&body).0.release.to_string() == "2.0.0"
        })
        .collect();
    assert!(!on_v2.is_empty());
    refused(
        &app,
        serde_json::json!({"action": "start", "release": "3.0.0", "percent": "20"}),
        409,
        "rollout_in_progress",
    );
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "start", "release": "3.0.0", "percent": "20", "supersede": true}),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["salt"], first["salt"], "the cohort is kept");
    for i in &on_v2 {
        let (_, body) = app.resolve(&dev(*i), false);
        assert_eq!(
            app.verify_response(&body).0.release.to_string(),
            "3.0.0",
            "device {i}"
        );
    }
    refused(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "20", "supersede": true}),
        409,
        "rollout_not_newer",
    );
    sweep(&app);
}

#[test]
fn overriding_a_deny_entry_that_does_not_exist_is_refused() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/deny",
        br#"{"action": "override", "release": "1.0.0", "variant": "vulkan-fp32", "class": "soc", "value": "SM8450"}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        (s, b["code"].as_str()),
        (404, Some("deny_not_found")),
        "{b}"
    );
    let (s, list) = app.get_json("/v1/admin/models/mlp/deny", Some(READ_TOKEN));
    assert_eq!(s, 200);
    assert!(
        list["entries"].as_array().is_none_or(Vec::is_empty),
        "nothing was created: {list}"
    );
}

#[test]
fn a_pinned_test_device_gets_its_release_first_and_explain_says_so() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let tester = |id: &str| {
        let mut d = dev(0);
        d["install_id"] = id.into();
        d
    };
    let release_of = |id: &str| {
        let (s, body) = app.resolve(&tester(id), true);
        assert_eq!(s, 200, "{body}");
        (app.verify_response(&body).0.release.to_string(), body)
    };
    refused(
        &app,
        serde_json::json!({"action": "pin", "install_id": "tester-1", "release": "9.0.0"}),
        404,
        "release_not_found",
    );
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "pin", "install_id": "tester-1", "release": "2.0.0",
            "expires_secs": 7 * 86400, "reason": "QA build"}),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["pins"][0]["install_id"], "tester-1", "{b}");
    let (release, body) = release_of("tester-1");
    assert_eq!(
        release, "2.0.0",
        "the pinned release, though it is not live"
    );
    assert!(
        body["explain"]
            .to_string()
            .contains("pinned: install id tester-1 gets 2.0.0"),
        "{body}"
    );
    assert_eq!(release_of("someone-else").0, "1.0.0");
    assert_eq!(
        sweep(&app).get("1.0.0"),
        Some(&1000),
        "pins move no one else"
    );
    // Pins survive other changes, and `unpin` ends them.
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "1"}),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["pins"].as_array().map(Vec::len), Some(1), "{b}");
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "unpin", "install_id": "tester-1"}),
    );
    assert_eq!(s, 200, "{b}");
    refused(
        &app,
        serde_json::json!({"action": "unpin", "install_id": "tester-1"}),
        400,
        "rollout_invalid",
    );
    // A pin that lapses stops applying by itself.
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "pin", "install_id": "tester-2", "release": "1.0.0", "expires_secs": 1}),
    );
    assert_eq!(s, 200, "{b}");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (_, body) = release_of("tester-2");
    assert!(!body["explain"].to_string().contains("pinned"), "{body}");
}

#[test]
fn a_rolled_back_release_never_becomes_a_fallback() {
    // 1.0.0 serves every runtime; 2.0.0 (runtime >= 1.5) is staged and rolled back; 3.0.0
    // (runtime >= 1.6) completes. A runtime-1.5 device cannot use 3.0.0: it must fall back to
    // 1.0.0, which was live, not to the 2.0.0 that was rolled back.
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let mut v3 = mlp_v3();
    for v in &mut v3.variants {
        v.runtime = ">=1.6.0".parse().expect("range");
    }
    app.publish(&v3);
    for body in [
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "5"}),
        serde_json::json!({"action": "rollback", "reason": "crashes"}),
        serde_json::json!({"action": "start", "release": "3.0.0", "percent": "100"}),
        serde_json::json!({"action": "complete"}),
    ] {
        let (s, b) = change(&app, body);
        assert_eq!(s, 200, "{b}");
    }
    let runtime_15 = dev(0);
    let (s, body) = app.resolve(&runtime_15, false);
    assert_eq!(s, 200, "{body}");
    assert_eq!(app.verify_response(&body).0.release.to_string(), "1.0.0");
    let mut runtime_16 = dev(0);
    runtime_16["runtime_version"] = "1.6.0".into();
    let (_, body) = app.resolve(&runtime_16, false);
    assert_eq!(app.verify_response(&body).0.release.to_string(), "3.0.0");
    sweep(&app);
}
