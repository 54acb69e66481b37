//! Health-gated ramps with short steps: healthy telemetry from the staged cohort moves the
//! rollout 1% -> 5% -> 25% by itself; failing telemetry halts it at the first step with the
//! reason; two servers on one store drive one schedule and each step is written once.

use std::time::{Duration, Instant};

use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1, mlp_v2};

fn quick() -> Options {
    Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.ramp_check_secs = 1;
            c.telemetry.evaluate_ms = 0;
        })),
    }
}

fn load(release: &str, ok: bool, install: usize) -> serde_json::Value {
    let mut e = serde_json::json!({
        "kind": "load", "model": "mlp", "release": release, "variant": "xnnpack-fp32",
        "delegate": "xnnpack", "outcome": if ok { "ok" } else { "failed" },
        "install_id": format!("ramp-{install}"), "platform": "android", "soc": "SM8550",
        "device_model": "phone", "os_version": "14", "app_version": "2.0.0",
        "runtime_version": "1.5.1", "load_ms": 9.0,
        "at": time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .expect("time"),
    });
    if !ok {
        e["error_code"] = "runtime_load_failed".into();
    }
    e
}

/// Sends events to `url` as devices that resolved would: each with its receipt from `app`'s
/// keys (replicas share them).
fn send(app: &TestApp, url: &str, events: &[serde_json::Value]) {
    let events = app.with_receipts(events);
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut r = agent
        .post(format!("{url}/v1/telemetry"))
        .header("content-type", "application/json")
        .send(
            serde_json::to_vec(&serde_json::json!({ "events": events }))
                .expect("json")
                .as_slice(),
        )
        .expect("telemetry");
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.body_mut().read_to_string().unwrap_or_default()
    );
}

fn rollout(app: &TestApp) -> serde_json::Value {
    let (s, v) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    assert_eq!(s, 200, "{v}");
    v
}

/// Waits until the plan in force satisfies `done`; panics with the status after `within`.
fn wait_for(app: &TestApp, within: Duration, done: impl Fn(&serde_json::Value) -> bool) {
    let until = Instant::now() + within;
    loop {
        let v = rollout(app);
        if done(&v["current"]) {
            return;
        }
        assert!(Instant::now() < until, "timed out; rollout status: {v:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn start_ramp(app: &TestApp) {
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "start", "release": "2.0.0", "steps": ["1", "5", "25"], "every_secs": 1,
             "min_samples": 10, "max_failure_rate": 0.2, "max_regression": 2.0}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["basis_points"], 100, "{b}");
    assert_eq!(
        b["ramp"]["steps"],
        serde_json::json!([100, 500, 2500]),
        "{b}"
    );
}

fn ramp_steps(history: &serde_json::Value) -> Vec<u64> {
    history
        .as_array()
        .expect("history")
        .iter()
        .filter(|p| p["action"] == "ramp")
        .filter_map(|p| p["basis_points"].as_u64())
        .collect()
}

#[test]
fn healthy_telemetry_moves_the_ramp_step_by_step() {
    let app = TestApp::start_with(quick());
    start_ramp(&app);
    // No samples yet: the step waits, and says for what.
    std::thread::sleep(Duration::from_millis(1500));
    let status = rollout(&app);
    let waiting = status["ramp"]["now"]["waiting_for"].to_string();
    assert!(waiting.contains("samples: 0 of 10"), "{status:#}");
    assert_eq!(status["current"]["basis_points"], 100);
    let mut install = 0;
    for want in [500u64, 2500] {
        let events: Vec<_> = (0..12)
            .map(|_| {
                install += 1;
                load("2.0.0", true, install)
            })
            .collect();
        send(&app, &app.url(), &events);
        wait_for(&app, Duration::from_secs(15), |p| {
            p["basis_points"].as_u64() == Some(want)
        });
        // Let the next step be seen (its mark taken) before its telemetry arrives.
        std::thread::sleep(Duration::from_millis(1500));
    }
    let v = rollout(&app);
    assert_eq!(ramp_steps(&v["history"]), [500, 2500]);
    assert_eq!(v["ramp"]["now"]["verdict"], "done", "{v:#}");
    assert_eq!(v["current"]["actor"], "ferry");
}

#[test]
fn failing_telemetry_halts_the_ramp_at_its_first_step() {
    let app = TestApp::start_with(quick());
    start_ramp(&app);
    std::thread::sleep(Duration::from_millis(1500));
    let events: Vec<_> = (0..12).map(|i| load("2.0.0", i % 2 == 0, i)).collect();
    send(&app, &app.url(), &events);
    wait_for(&app, Duration::from_secs(15), |p| p["state"] == "halted");
    let v = rollout(&app);
    assert_eq!(
        v["current"]["basis_points"], 100,
        "halted at the first step"
    );
    assert!(
        v["current"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("load-failure rate 50.0%"),
        "{v:#}"
    );
    assert_eq!(ramp_steps(&v["history"]), Vec::<u64>::new());
    // Staged devices are back on the baseline.
    let (s, body) = app.resolve(
        &ferry_tests::app::profile("android", &["XnnpackBackend"], "1.5.1", "2.0.0", 4096),
        false,
    );
    assert_eq!(s, 200);
    assert_eq!(app.verify_response(&body).0.release.to_string(), "1.0.0");
}

#[test]
fn two_servers_on_one_store_write_each_step_once() {
    let app = TestApp::start_with(quick());
    let replica = app.replica_with(None, Box::new(|c| c.ramp_check_secs = 1));
    start_ramp(&app);
    std::thread::sleep(Duration::from_millis(1500));
    // Both replicas get healthy telemetry, so both decide every step.
    let mut install = 0;
    for want in [500u64, 2500] {
        for url in [app.url(), replica.url()] {
            let events: Vec<_> = (0..12)
                .map(|_| {
                    install += 1;
                    load("2.0.0", true, install)
                })
                .collect();
            send(&app, &url, &events);
        }
        wait_for(&app, Duration::from_secs(15), |p| {
            p["basis_points"].as_u64() == Some(want)
        });
        std::thread::sleep(Duration::from_millis(2500));
    }
    std::thread::sleep(Duration::from_secs(2));
    let v = rollout(&app);
    assert_eq!(ramp_steps(&v["history"]), [500, 2500], "{:#}", v["history"]);
    let revisions: Vec<u64> = v["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|p| p["revision"].as_u64())
        .collect();
    assert_eq!(revisions, (1..=revisions.len() as u64).collect::<Vec<_>>());
    replica.stop();
}
