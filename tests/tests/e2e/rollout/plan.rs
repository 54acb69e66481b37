//! Rollouts by percentage and racing writers (telemetry-driven deny lists and halts are in
//! `rollout/telemetry.rs`).

use std::collections::BTreeSet;

use ferry_tests::app::{ADMIN_TOKEN, READ_TOKEN, TestApp, mlp_v1, mlp_v2};

pub(crate) fn dev(install: &str, soc: &str) -> serde_json::Value {
    serde_json::json!({
        "model": "mlp", "install_id": install, "app_version": "2.0.0", "runtime_version": "1.5.1",
        "backends": ["XnnpackBackend", "VulkanBackend"], "platform": "android", "os_version": "14",
        "device_model": "phone", "soc": soc, "ram_mb": 8192
    })
}

pub(crate) fn change(app: &TestApp, body: serde_json::Value) -> (u16, serde_json::Value) {
    app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(&body).expect("json"),
        Some(ADMIN_TOKEN),
    )
}

fn served(app: &TestApp, install: &str) -> (String, String) {
    let (status, body) = app.resolve(&dev(install, "SM8550"), false);
    assert_eq!(status, 200, "{body}");
    let (d, _) = app.verify_response(&body);
    let cohort = serde_json::to_value(d.cohort)
        .expect("json")
        .as_str()
        .unwrap_or_default()
        .to_string();
    (d.release.to_string(), cohort)
}

#[test]
fn cohorts_follow_the_plan_through_every_transition() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let ids: Vec<String> = (0..1000).map(|i| format!("dev-{i:05}")).collect();
    // Publishing is not shipping: the first release is live, the second waits to be staged.
    app.publish(&mlp_v2());
    assert!(
        ids.iter()
            .take(100)
            .all(|id| served(&app, id) == ("1.0.0".into(), "baseline".into()))
    );

    let (status, plan) = change(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "5"}),
    );
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        (plan["baseline"].as_str(), plan["basis_points"].as_u64()),
        (Some("1.0.0"), Some(500))
    );
    let staged_at = |pct: &str| -> BTreeSet<String> {
        let (s, b) = change(&app, serde_json::json!({"action": "set", "percent": pct}));
        assert_eq!(s, 200, "{b}");
        ids.iter()
            .filter(|id| {
                let (release, cohort) = served(&app, id);
                assert_eq!(release == "2.0.0", cohort == "staged", "{id}");
                cohort == "staged"
            })
            .cloned()
            .collect()
    };
    let five = staged_at("5");
    assert!(
        (20..=85).contains(&five.len()),
        "5% of 1000 gave {}",
        five.len()
    );
    let twenty = staged_at("20");
    assert!(
        five.is_subset(&twenty),
        "raising the percentage moved devices out"
    );
    assert!(
        (140..=260).contains(&twenty.len()),
        "20% of 1000 gave {}",
        twenty.len()
    );

    // Paused: the percentage cannot move; staged devices keep the staged release.
    assert_eq!(change(&app, serde_json::json!({"action": "pause"})).0, 200);
    let (s, b) = change(&app, serde_json::json!({"action": "set", "percent": "50"}));
    assert_eq!((s, b["code"].as_str()), (409, Some("rollout_not_active")));
    let one = twenty.iter().next().expect("a staged device");
    assert_eq!(served(&app, one), ("2.0.0".into(), "staged".into()));
    assert_eq!(change(&app, serde_json::json!({"action": "resume"})).0, 200);

    // Rollback: everyone on the baseline.
    assert_eq!(
        change(
            &app,
            serde_json::json!({"action": "rollback", "reason": "bad numbers"})
        )
        .0,
        200
    );
    assert!(
        ids.iter()
            .take(200)
            .all(|id| served(&app, id) == ("1.0.0".into(), "baseline".into()))
    );

    // A new rollout, then complete: the staged release becomes everyone's baseline.
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": 10.5}),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["basis_points"], 1050);
    let (s, b) = change(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "1"}),
    );
    assert_eq!((s, b["code"].as_str()), (409, Some("rollout_in_progress")));
    assert_eq!(
        change(&app, serde_json::json!({"action": "complete"})).0,
        200
    );
    assert!(
        ids.iter()
            .take(100)
            .all(|id| served(&app, id) == ("2.0.0".into(), "baseline".into()))
    );

    // The history is the list of revisions, with who, what and why.
    let (s, h) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    assert_eq!(s, 200);
    let actions: Vec<&str> = h["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|p| p["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        [
            "publish", "start", "set", "set", "pause", "resume", "rollback", "start", "complete"
        ]
    );
    let revisions: Vec<u64> = h["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|p| p["revision"].as_u64())
        .collect();
    assert_eq!(revisions, (1..=9).collect::<Vec<_>>());
    assert_eq!(h["history"][6]["reason"], "bad numbers");
    assert_eq!(h["history"][6]["actor"], "env:FERRY_ADMIN_TOKEN");

    // Bad changes are clear 4xx.
    for (body, code) in [
        (
            serde_json::json!({"action": "start", "release": "9.9.9", "percent": "5"}),
            "release_not_found",
        ),
        (serde_json::json!({"action": "explode"}), "rollout_invalid"),
        (
            serde_json::json!({"action": "start", "release": "2.0.0", "percent": "150"}),
            "rollout_invalid",
        ),
        (
            serde_json::json!({"action": "set", "percent": "5", "extra": 1}),
            "rollout_invalid",
        ),
    ] {
        let (s, b) = change(&app, body);
        assert!((400..500).contains(&s), "{b}");
        assert_eq!(b["code"], code);
    }
    let (s, _) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        b"{\"action\":\"pause\"}",
        Some(READ_TOKEN),
    );
    assert_eq!(s, 403, "the read scope cannot change rollouts");
}

#[test]
fn racing_writers_lose_no_update() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    assert_eq!(
        change(
            &app,
            serde_json::json!({"action": "start", "release": "2.0.0", "percent": "1"})
        )
        .0,
        200
    );
    // A second server on the same data directory: another replica.
    let replica = app.replica(None);
    app.race_rollout(&[app.url(), replica.url()], 8, 10);
    replica.stop();
}

#[test]
fn the_history_limit_takes_any_integer_and_refuses_anything_else() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let get = |q: &str| {
        app.get_json(
            &format!("/v1/admin/models/mlp/rollout{q}"),
            Some(READ_TOKEN),
        )
    };
    // Too large for a number is clamped like any large limit (the document allows it).
    for q in [
        "?limit=0",
        "?limit=5",
        &format!("?limit={}", "9".repeat(29)),
    ] {
        let (s, b) = get(q);
        assert_eq!(s, 200, "{q}: {b}");
        assert_eq!(b["history"].as_array().map(Vec::len), Some(1), "{q}: {b}");
    }
    for q in ["?limit=-1", "?limit=1.5", "?limit=ten", "?limit="] {
        let (s, b) = get(q);
        assert_eq!(
            (s, b["code"].as_str()),
            (400, Some("request_invalid")),
            "{q}: {b}"
        );
    }
}
