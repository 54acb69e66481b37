//! Explain is an operator's probe (issue 46, points 3 and 4): it counts in no census, cohort or
//! health figure, and it says where the install id stands in the rollout.

use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1, mlp_v2};

fn device(install: &str) -> serde_json::Value {
    serde_json::json!({
        "model": "mlp", "install_id": install, "app_version": "2.0.0",
        "runtime_version": "1.5.1", "backends": ["XnnpackBackend"], "platform": "linux",
        "os_version": "6.1", "device_model": "board", "soc": "RK3588", "ram_mb": 4096,
    })
}

#[test]
fn explain_probes_count_as_no_device_and_say_where_the_install_id_stands() {
    let app = TestApp::start_with(Options {
        tweak: Some(Box::new(ferry_tests::fast_telemetry)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "start", "release": "2.0.0", "percent": "10"}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    let mut cohorts = std::collections::BTreeMap::<String, usize>::new();
    for n in 0..70 {
        let (status, body) = app.resolve(&device(&format!("probe-{n}")), true);
        assert_eq!(status, 200, "{body}");
        ferry_tests::schemas::check("resolve-response.schema.json", &body);
        let (decision, _) = app.verify_response(&body);
        let r = &body["rollout"];
        let cohort = r["cohort"].as_str().expect("cohort").to_string();
        assert_eq!(r["staged"], "2.0.0", "{r}");
        assert_eq!(r["percent"], "10", "{r}");
        assert_eq!(r["state"], "active", "{r}");
        let summary = r["summary"].as_str().expect("summary");
        assert!(
            summary.starts_with("2.0.0 is staged at 10% (active); this install id is in the")
                && summary.contains(&format!(
                    "the {cohort} cohort and gets {}",
                    decision.release
                )),
            "{summary}"
        );
        *cohorts.entry(cohort).or_default() += 1;
    }
    assert!(cohorts.contains_key("baseline"), "{cohorts:?}");
    // One real device.
    let (status, _) = app.resolve(&device("real-device"), false);
    assert_eq!(status, 200);
    let mut last = serde_json::Value::Null;
    ferry_tests::until("the census has the real device", || {
        let (_, h) = app.get_json("/v1/admin/models/mlp/health?since=1h", Some(READ_TOKEN));
        last = h.clone();
        h["clients"]["devices"] == 1
    });
    // The probes are in no figure.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (_, h) = app.get_json("/v1/admin/models/mlp/health?since=1h", Some(READ_TOKEN));
    assert_eq!(h["clients"]["devices"], 1, "{}", h["clients"]);
    let sizes: u64 = h["cohort_sizes"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, n)| n.as_u64())
        .sum();
    assert_eq!(sizes, 1, "{}", h["cohort_sizes"]);
}
