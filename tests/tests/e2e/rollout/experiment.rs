//! Experiments end to end: the real `ferry` CLI starts one on the demo server, real clients
//! with the real ExecuTorch runtime resolve into their arms, load, record an app metric and
//! send it with their receipts; `ferry experiment status --json` reports each metric's
//! interval and decision, the same on a second replica and after a restart; forged events
//! without a valid receipt change nothing; a stop and the history keep actor and reason.

use std::process::Output;

use ferry_client::Client;
use ferry_shared::experiment::ArmName;
use ferry_shared::experiment::plan::assign;
use ferry_shared::manifest::Platform;
use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp};
use ferry_tests::kit::{DeviceExt as _, Event, device, quick_limits};
use ferry_tests::signers::ferry;

pub(crate) const MODEL: &str = "demo-mlp";
/// Devices per arm: past the 30 a decision needs.
const PER_ARM: usize = 32;

fn cli(url: &str, args: &[&str]) -> Output {
    ferry()
        .args(args)
        .args(["--server", url, "--token", ADMIN_TOKEN])
        .output()
        .expect("ferry")
}

fn ok_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

fn status(url: &str) -> serde_json::Value {
    ok_json(&cli(url, &["experiment", "status", MODEL, "--json"]))
}

fn metric<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["metrics"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["metric"] == name))
        .unwrap_or_else(|| panic!("no {name} in {status}"))
}

/// Polls the status until both arms have `PER_ARM` devices reporting `accepted` (raw event
/// files are written about every second).
fn settled(url: &str) -> serde_json::Value {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let s = status(url);
        let devices = &metric(&s, "accepted")["devices"];
        if devices[0].as_u64() >= Some(PER_ARM as u64)
            && devices[1].as_u64() >= Some(PER_ARM as u64)
        {
            return s;
        }
        assert!(
            std::time::Instant::now() < until,
            "devices never arrived: {s}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// Candidate devices: more than both arms need whatever the salt (fewer than 32 of 120 in
/// one arm has a chance of about 2e-7).
const CANDIDATES: usize = 120;

/// How much device `n`'s users accept suggestions whatever the model (its level: it varies
/// between devices and persists, which is what CUPED takes out).
fn level(n: usize) -> f64 {
    (n % 7) as f64 * 0.04 - 0.12
}

/// The share of users who accept a suggestion, as the simulated app sees it: about 0.5 with
/// the control, 0.8 with the treatment, plus the device's level.
fn accepted(arm: ArmName, n: usize) -> f64 {
    match arm {
        ArmName::Control => 0.5 + level(n),
        ArmName::Treatment => 0.8 + level(n),
    }
}

/// Before the experiment: every candidate device reported the metric (with receipts, as
/// devices that resolved do) at its own level.
fn history(app: &TestApp) {
    let events: Vec<serde_json::Value> = (0..CANDIDATES)
        .map(|n| {
            Event::new("metric", MODEL, "1.0.0", "xnnpack-fp32")
                .install(&format!("exp-device-{n}"))
                .set("name", "accepted")
                .set("value", 0.5 + level(n))
                .json()
        })
        .collect();
    let events = app.with_receipts(&events);
    let (code, body) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["accepted"].as_u64(), Some(CANDIDATES as u64), "{body}");
    assert_eq!(body["unverified"].as_u64(), Some(0), "{body}");
}

/// One device: resolves (into its arm), loads with the real runtime (the treatment's Vulkan
/// variant fails on this machine's runtime and falls back to XNNPACK: it stays in its arm),
/// records the app metric three times and sends its telemetry.
pub(crate) fn run_device(
    app: &TestApp,
    dir: &std::path::Path,
    id: &str,
    soc: &str,
    values: [f64; 3],
) {
    let client: Client = app
        .client(&dir.join(id))
        .download_limits(quick_limits())
        .build()
        .expect("client");
    let phone = device(id)
        .platform(Platform::Android)
        .soc(soc)
        .claims(&["VulkanBackend"]);
    let loaded = client.load(MODEL, &phone).expect("load");
    assert_eq!(
        loaded.variant, "xnnpack-fp32",
        "{id}: {:?}",
        loaded.attempts
    );
    for v in values {
        assert_eq!(client.record_metric("accepted", v).expect("metric"), 1);
    }
    assert!(client.record_metric("Not A Name", 1.0).is_err());
    assert!(client.record_metric("accepted", f64::NAN).is_err());
    let report = client.send_telemetry();
    assert_eq!(report.queued, 0, "{id}: {report:?}");
    drop(loaded);
}

#[test]
fn two_arms_of_real_clients_give_an_always_valid_interval_and_a_decision_per_metric() {
    let mut app = TestApp::start_with(Options {
        demo: true,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.telemetry.raw_roll_secs = 1;
            c.telemetry.flush_secs = 1;
        })),
    });
    let url = app.url();
    // Received before the start: history, wherever its raw file is written.
    history(&app);
    let plan = ok_json(&cli(
        &url,
        &[
            "experiment",
            "start",
            MODEL,
            "--control",
            "1.0.0/xnnpack-fp32",
            "--treatment",
            "1.0.0/vulkan-fp32",
            "--metric",
            "accepted",
            "--classes",
            "soc",
            "--reason",
            "is vulkan worth it",
            "--json",
        ],
    ));
    let (salt, bp) = (
        plan["salt"].as_str().expect("salt").to_string(),
        u32::try_from(plan["basis_points"].as_u64().expect("bp")).expect("bp"),
    );
    // A second start while it runs is refused with its code.
    let again = cli(
        &url,
        &[
            "experiment",
            "start",
            MODEL,
            "--control",
            "1.0.0",
            "--treatment",
            "1.0.0/vulkan-fp32",
        ],
    );
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("experiment_running"));

    let dir = tempfile::tempdir().expect("tmp");
    let (mut control, mut treatment) = (Vec::new(), Vec::new());
    for n in 0..CANDIDATES {
        let id = format!("exp-device-{n}");
        match assign(&salt, bp, MODEL, &id) {
            Some(ArmName::Control) if control.len() < PER_ARM => control.push((n, id)),
            Some(ArmName::Treatment) if treatment.len() < PER_ARM => treatment.push((n, id)),
            _ => {}
        }
    }
    assert_eq!((control.len(), treatment.len()), (PER_ARM, PER_ARM));
    for (arm, ids) in [
        (ArmName::Control, &control),
        (ArmName::Treatment, &treatment),
    ] {
        for (i, (n, id)) in ids.iter().enumerate() {
            let soc = if i % 2 == 0 { "SM8550" } else { "SM8450" };
            let v = accepted(arm, *n);
            run_device(&app, dir.path(), id, soc, [v - 0.1, v, v + 0.1]);
        }
    }
    let treatment: Vec<String> = treatment.into_iter().map(|(_, id)| id).collect();

    let s = settled(&url);
    let acc = metric(&s, "accepted");
    let (c, t) = (
        acc["control"].as_f64().expect("c"),
        acc["treatment"].as_f64().expect("t"),
    );
    // The chosen devices' levels average 0 give or take 0.015 (one standard deviation).
    assert!((c - 0.5).abs() < 0.06 && (t - 0.8).abs() < 0.06, "{acc}");
    let diff = acc["difference"].as_f64().expect("difference");
    let [low, high] = [0, 1].map(|i| acc["interval"][i].as_f64().expect("interval"));
    assert!(low < diff && diff < high && low > 0.0, "{acc}");
    assert_eq!(acc["decision"], "better", "{acc}");
    // Every device had a history before the start that predicts its level: CUPED takes the
    // level out of the difference's variance.
    assert_eq!(
        s["devices"]["with_history"].as_u64(),
        Some(2 * PER_ARM as u64),
        "{s}"
    );
    assert_eq!(acc["cuped"], true, "{acc}");
    assert!(acc["variance_reduction"].as_f64() > Some(0.5), "{acc}");
    // ferry's own metrics: every treatment device fell back from Vulkan, no control device did.
    let fb = metric(&s, "fallback");
    assert_eq!(
        (fb["control"].as_f64(), fb["treatment"].as_f64()),
        (Some(0.0), Some(1.0))
    );
    assert_eq!(fb["decision"], "worse", "{fb}");
    assert_eq!(metric(&s, "load_failure")["decision"], "worse");
    // The breakdown by SoC, each with its share of the 5%.
    let classes = acc["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 2, "{acc}");
    assert!(classes.iter().all(|c| c["alpha"].as_f64() == Some(0.025)));

    forged_events_change_nothing(&app, &url, &s, plan["id"].as_str().expect("id"), &treatment);
    // Two more replicas on the same store (three in all), and this one after a restart, say
    // the same; a device resolving through another replica is in the arm its hash gives it.
    let replicas: Vec<_> = (0..2)
        .map(|_| app.try_replica_at("127.0.0.1:0").expect("replica"))
        .collect();
    for r in &replicas {
        let there = status(&r.url());
        assert_eq!(metric(&there, "accepted")["interval"], acc["interval"]);
        assert_eq!(metric(&there, "accepted")["decision"], "better");
        let receipt = receipt_through(&r.url(), &treatment[0]);
        assert!(
            receipt.contains(&format!("@{id}=treatment.", id = text_of(&plan["id"]))),
            "{receipt}"
        );
    }
    for r in replicas {
        r.stop();
    }
    app.restart().expect("restart");
    let url = app.url();
    let restarted = status(&url);
    assert_eq!(metric(&restarted, "accepted")["interval"], acc["interval"]);
    assert_eq!(metric(&restarted, "fallback")["decision"], "worse");

    a_stop_keeps_the_results_and_the_history(&app, &url, &treatment[0]);
}

fn text_of(v: &serde_json::Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// The receipt a server at `url` gives install `id` (a phone that can run both arms).
fn receipt_through(url: &str, id: &str) -> String {
    let body = serde_json::json!({"model": MODEL, "install_id": id, "app_version": "1.0.0",
        "runtime_version": "1.5.1", "backends": ["XnnpackBackend", "VulkanBackend"],
        "platform": "android", "os_version": "14", "device_model": "phone", "soc": "SM8550",
        "ram_mb": 4096});
    let mut resp = ureq::post(format!("{url}/v1/resolve"))
        .header("content-type", "application/json")
        .send(serde_json::to_vec(&body).expect("json").as_slice())
        .expect("resolve");
    let answer: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json");
    text_of(&answer["receipt"])
}

/// Metric events without a valid receipt (none, a made-up one naming the treatment arm) are
/// kept in the raw log and change no figure.
fn forged_events_change_nothing(
    app: &TestApp,
    url: &str,
    s: &serde_json::Value,
    experiment: &str,
    treatment: &[String],
) {
    let acc = metric(s, "accepted");
    // Forged metric events (no receipt, a made-up one, a real-looking arm tag) change nothing.
    let forged: Vec<serde_json::Value> = treatment
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut e = Event::new("metric", MODEL, "1.0.0", "xnnpack-fp32")
                .install(id)
                .set("name", "accepted")
                .set("value", -1000.0);
            if i % 2 == 0 {
                e = e.set(
                    "receipt",
                    format!("v1.xnnpack-fp32,@{experiment}=treatment.AAAA"),
                );
            }
            e.json()
        })
        .collect();
    let (code, body) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({ "events": forged })).expect("json"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["unverified"].as_u64(), Some(PER_ARM as u64), "{body}");
    let files = s["devices"]["files"].as_u64().expect("files");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let after = loop {
        let now = status(url);
        if now["devices"]["files"].as_u64() > Some(files) {
            break now;
        }
        assert!(
            std::time::Instant::now() < until,
            "the forged events were never written"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert_eq!(metric(&after, "accepted")["treatment"], acc["treatment"]);
    assert_eq!(metric(&after, "accepted")["interval"], acc["interval"]);
}

/// A stop keeps the results and says who and why; the history has both revisions; a stopped
/// experiment assigns no device.
fn a_stop_keeps_the_results_and_the_history(app: &TestApp, url: &str, device: &str) {
    // A stop keeps the results and says who and why; the history has both revisions.
    let stopped = ok_json(&cli(
        url,
        &[
            "experiment",
            "stop",
            MODEL,
            "--winner",
            "control",
            "--reason",
            "vulkan falls back",
            "--json",
        ],
    ));
    assert_eq!(stopped["state"], "stopped");
    assert_eq!(stopped["winner"], "control");
    assert_eq!(metric(&status(url), "accepted")["decision"], "better");
    let history = ok_json(&cli(url, &["experiment", "history", MODEL, "--json"]));
    let revisions = history["revisions"].as_array().expect("revisions");
    let actions: Vec<(&str, &str)> = revisions
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap_or(""),
                r["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("start", "is vulkan worth it"),
            ("stop", "vulkan falls back")
        ]
    );
    assert!(
        revisions
            .iter()
            .all(|r| r["actor"].as_str().is_some_and(|a| !a.is_empty()))
    );
    // A stopped experiment assigns no device: a new device resolves without an arm.
    let (code, answer) = app.resolve(
        &serde_json::json!({"model": MODEL, "install_id": device, "app_version": "1.0.0",
            "runtime_version": "1.5.1", "backends": ["XnnpackBackend", "VulkanBackend"],
            "platform": "android", "os_version": "14", "device_model": "phone", "soc": "SM8550",
            "ram_mb": 4096}),
        false,
    );
    assert_eq!(code, 200, "{answer}");
    assert!(
        !answer["receipt"].as_str().unwrap_or("").contains('@'),
        "{answer}"
    );
}

#[test]
fn hostile_experiment_requests_get_a_clear_error_and_change_nothing() {
    let app = TestApp::start_with(Options {
        demo: true,
        keys: None,
        store: None,
        tweak: None,
    });
    let post = |path: &str, body: &[u8], token: Option<&str>| {
        app.post_raw(&format!("/v1/admin/models/{MODEL}/{path}"), body, token)
    };
    let good = br#"{"control": "1.0.0/xnnpack-fp32", "treatment": "1.0.0/vulkan-fp32"}"#;
    for (body, token, status, code) in [
        (&good[..], None, 401, "unauthorized"),
        (&good[..], Some(ferry_tests::app::READ_TOKEN), 403, "forbidden"),
        (b"{", Some(ADMIN_TOKEN), 400, "experiment_invalid"),
        (b"[]", Some(ADMIN_TOKEN), 400, "experiment_invalid"),
        (br#"{"control": "1.0.0"}"#, Some(ADMIN_TOKEN), 400, "experiment_invalid"),
        (
            br#"{"control": "1.0.0/xnnpack-fp32", "treatment": "1.0.0/vulkan-fp32", "sharee": 5}"#,
            Some(ADMIN_TOKEN),
            400,
            "experiment_invalid",
        ),
        (
            br#"{"control": "1.0.0/xnnpack-fp32", "treatment": "1.0.0/vulkan-fp32", "share": 1e308}"#,
            Some(ADMIN_TOKEN),
            400,
            "experiment_invalid",
        ),
        (
            br#"{"control": "1.0.0/xnnpack-fp32", "treatment": "1.0.0/vulkan-fp32", "lookback_days": -1}"#,
            Some(ADMIN_TOKEN),
            400,
            "experiment_invalid",
        ),
    ] {
        let (s, b) = post("experiment", body, token);
        assert_eq!((s, b["code"].as_str()), (status, Some(code)), "{b}");
        assert!(!b["message"].as_str().unwrap_or("").is_empty(), "{b}");
    }
    let huge = format!(
        r#"{{"control": "1.0.0/xnnpack-fp32", "treatment": "1.0.0/vulkan-fp32", "reason": "{}"}}"#,
        "x".repeat(100 << 10)
    );
    let (s, b) = post("experiment", huge.as_bytes(), Some(ADMIN_TOKEN));
    assert_eq!(
        (s, b["code"].as_str()),
        (413, Some("body_too_large")),
        "{b}"
    );
    // Nothing was started: status and stop say so.
    let (s, b) = app.get_json(
        &format!("/v1/admin/models/{MODEL}/experiment"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        (s, b["code"].as_str()),
        (404, Some("experiment_not_found")),
        "{b}"
    );
    let (s, b) = post("experiment/stop", b"{}", Some(ADMIN_TOKEN));
    assert_eq!(
        (s, b["code"].as_str()),
        (404, Some("experiment_not_found")),
        "{b}"
    );
    let (s, b) = post(
        "experiment/stop",
        br#"{"winner": "both"}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        (s, b["code"].as_str()),
        (400, Some("experiment_invalid")),
        "{b}"
    );
    // An unknown model is the model's error.
    let (s, b) = app.post_raw("/v1/admin/models/nope/experiment", good, Some(ADMIN_TOKEN));
    assert_eq!(
        (s, b["code"].as_str()),
        (404, Some("model_not_found")),
        "{b}"
    );
}
