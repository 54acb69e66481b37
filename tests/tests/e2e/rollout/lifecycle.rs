//! Operator truth (issue 46): a release's whole lifecycle (publish, start, set, pause, resume,
//! complete, rollback, revoke of the staged release and of the baseline, revert, pin), and
//! after every action every view of the admin API (what `ferry models`, `ferry releases`,
//! `ferry rollout status` and the dashboard show) against what resolve gives a sample of
//! install ids.

use std::collections::BTreeMap;

use ferry_shared::trust::revocation::REVOCATIONS_PAYLOAD_TYPE;
use ferry_tests::app::{ADMIN_TOKEN, READ_TOKEN, TestApp, mlp_v1, mlp_v2};

const SAMPLE: usize = 400;

fn device(i: usize) -> serde_json::Value {
    serde_json::json!({
        "model": "mlp", "install_id": format!("life-{i:04}"), "app_version": "2.0.0",
        "runtime_version": "1.5.1", "backends": ["XnnpackBackend"], "platform": "linux",
        "os_version": "6.1", "device_model": "board", "soc": "RK3588", "ram_mb": 4096,
    })
}

/// What the sample gets: release → install ids.
fn served(app: &TestApp) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for i in 0..SAMPLE {
        let (s, body) = app.resolve(&device(i), false);
        assert_eq!(s, 200, "{body}");
        *out.entry(app.verify_response(&body).0.release.to_string())
            .or_default() += 1;
    }
    out
}

fn change(app: &TestApp, body: serde_json::Value) {
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(&body).expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{body}: {b}");
}

fn revoke(app: &TestApp, version: u64, releases: &[&str]) {
    let list = ferry_tests::releases::revocation_list("mlp", version, releases, "lifecycle test");
    let env = app.release_key().pair.sign(
        REVOCATIONS_PAYLOAD_TYPE,
        &serde_json::to_vec(&list).expect("json"),
    );
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/revocations",
        &serde_json::to_vec(&env).expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 201, "{b}");
}

fn publish(app: &TestApp, version: &str, from: ferry_server::release::sign::VariantsFile) {
    let mut r = from;
    r.version = version.parse().expect("version");
    app.publish(&r);
}

/// Every view against what the sample gets, after `step`.
fn views_agree(app: &TestApp, step: &str) {
    let got = served(app);
    let (_, models) = app.get_json("/v1/admin/models", Some(READ_TOKEN));
    ferry_tests::schemas::check("models.schema.json", &models);
    let m = &models["models"][0];
    let (_, rollout) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    let plan = &rollout["current"];
    let (_, model) = app.get_json("/v1/admin/models/mlp", Some(READ_TOKEN));
    let states: BTreeMap<String, String> = model["releases"]
        .as_array()
        .expect("releases")
        .iter()
        .map(|r| {
            (
                r["version"].as_str().unwrap_or_default().to_string(),
                r["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let live = m["live"].as_str().expect("live").to_string();
    // The staged release is one devices get only while its cohort is live.
    let staged_live = plan["staged"].is_string()
        && matches!(plan["state"].as_str(), Some("active" | "paused"))
        && plan["basis_points"].as_u64().unwrap_or(0) > 0;
    let mut want: Vec<String> = vec![live.clone()];
    if staged_live {
        want.push(plan["staged"].as_str().unwrap_or_default().to_string());
    }
    want.sort();
    let mut have: Vec<String> = got.keys().cloned().collect();
    have.sort();
    assert_eq!(
        have, want,
        "{step}: served {got:?}; models {m}; plan {plan}"
    );
    // The staged share is what the views say it is (within sampling error).
    if staged_live {
        let share = got[plan["staged"].as_str().unwrap_or_default()] as f64 / SAMPLE as f64;
        let said = plan["basis_points"].as_f64().unwrap_or(0.0) / 10_000.0;
        assert!(
            (share - said).abs() < 0.08,
            "{step}: {share} served, {said} said"
        );
        assert_eq!(m["staged"], plan["staged"], "{step}");
        assert!(
            states[plan["staged"].as_str().unwrap_or_default()].starts_with("staged"),
            "{step}: {states:?}"
        );
    }
    // Exactly one release is live in the release list, and it is what devices get; no
    // revoked release is served.
    let lives: Vec<&String> = states
        .iter()
        .filter(|(_, s)| s.starts_with("live"))
        .map(|(v, _)| v)
        .collect();
    assert_eq!(lives, [&live], "{step}: {states:?}");
    for (v, s) in &states {
        if s.starts_with("revoked") {
            assert!(!got.contains_key(v), "{step}: revoked {v} is served");
        }
    }
}

#[test]
fn after_every_lifecycle_action_every_view_says_what_devices_get() {
    let app = TestApp::start();
    publish(&app, "0.9.0", mlp_v1());
    views_agree(&app, "first publish");
    app.publish(&mlp_v1());
    views_agree(&app, "a later publish is not live");
    change(
        &app,
        serde_json::json!({"action": "start", "release": "1.0.0", "percent": "20"}),
    );
    views_agree(&app, "start 1.0.0 at 20%");
    change(&app, serde_json::json!({"action": "set", "percent": "50"}));
    views_agree(&app, "set 50%");
    change(&app, serde_json::json!({"action": "pause"}));
    views_agree(&app, "pause");
    change(&app, serde_json::json!({"action": "resume"}));
    views_agree(&app, "resume");
    change(&app, serde_json::json!({"action": "complete"}));
    views_agree(&app, "complete 1.0.0");
    app.publish(&mlp_v2());
    change(
        &app,
        serde_json::json!({"action": "start", "release": "2.0.0", "percent": "30"}),
    );
    views_agree(&app, "start 2.0.0 at 30%");
    change(&app, serde_json::json!({"action": "rollback"}));
    views_agree(&app, "rollback");
    change(&app, serde_json::json!({"action": "resume"}));
    views_agree(&app, "resume after the rollback");
    revoke(&app, 1, &["2.0.0"]);
    views_agree(&app, "revoke the staged 2.0.0");
    publish(&app, "3.0.0", mlp_v2());
    change(
        &app,
        serde_json::json!({"action": "start", "release": "3.0.0", "percent": "50"}),
    );
    views_agree(&app, "start 3.0.0 at 50%");
    change(&app, serde_json::json!({"action": "complete"}));
    views_agree(&app, "complete 3.0.0");
    change(
        &app,
        serde_json::json!({"action": "revert", "to": "1.0.0", "reason": "3.0.0 drains batteries"}),
    );
    views_agree(&app, "revert to 1.0.0");
    change(
        &app,
        serde_json::json!({"action": "pin", "install_id": "qa-board", "release": "3.0.0"}),
    );
    views_agree(&app, "pin a test device");
    let mut qa = device(0);
    qa["install_id"] = "qa-board".into();
    let (_, body) = app.resolve(&qa, false);
    assert_eq!(app.verify_response(&body).0.release.to_string(), "3.0.0");
    revoke(&app, 2, &["2.0.0", "1.0.0"]);
    views_agree(&app, "revoke the baseline 1.0.0");
}
