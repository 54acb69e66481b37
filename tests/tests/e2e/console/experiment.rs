//! The experiment page (`/ui#/experiment/MODEL`) in a real browser (`tests/ui/experiment.cjs`)
//! against a real server, with 64 real clients in the two arms: the metrics with their
//! intervals and decisions as the API gives them, the classes, the history, a stop confirmed
//! from the page that the API then reports, and a phone width.

use ferry_shared::experiment::ArmName;
use ferry_shared::experiment::plan::assign;
use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp};
use ferry_tests::browser::step;

use crate::rollout::experiment::{MODEL, run_device};

fn text(v: &serde_json::Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[test]
fn the_experiment_page_shows_the_decisions_and_stops_it() {
    let app = TestApp::start_with(Options {
        demo: true,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.telemetry.raw_roll_secs = 1;
            c.telemetry.flush_secs = 1;
        })),
    });
    let (s, plan) = app.post_raw(
        &format!("/v1/admin/models/{MODEL}/experiment"),
        br#"{"control": "1.0.0/xnnpack-fp32", "treatment": "1.0.0/vulkan-fp32",
            "metrics": ["accepted"], "classes": ["soc"], "reason": "is vulkan worth it"}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 201, "{plan}");
    let (salt, bp) = (
        text(&plan["salt"]),
        plan["basis_points"].as_u64().expect("bp"),
    );
    let dir = tempfile::tempdir().expect("tmp");
    let mut per_arm = [0usize; 2];
    for n in 0.. {
        if per_arm.iter().all(|k| *k >= 32) {
            break;
        }
        let id = format!("ui-exp-{n}");
        let Some(arm) = assign(&salt, u32::try_from(bp).expect("bp"), MODEL, &id) else {
            continue;
        };
        let i = usize::from(arm == ArmName::Treatment);
        if per_arm[i] >= 32 {
            continue;
        }
        per_arm[i] += 1;
        let v = if i == 0 { 0.5 } else { 0.8 } + (n % 5) as f64 * 0.01;
        let soc = if n % 2 == 0 { "SM8550" } else { "SM8450" };
        run_device(&app, dir.path(), &id, soc, [v - 0.1, v, v + 0.1]);
    }
    // Until the raw files hold every device.
    let path = format!("/v1/admin/models/{MODEL}/experiment");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let api = loop {
        let (_, b) = app.get_json(&path, Some(READ_TOKEN));
        if b["devices"]["control"].as_u64() >= Some(32)
            && b["devices"]["treatment"].as_u64() >= Some(32)
        {
            break b;
        }
        assert!(std::time::Instant::now() < until, "{b}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    let shots = ferry_tests::browser::screenshots();
    let lines = ferry_tests::browser::run(
        "experiment.cjs",
        &[&app.url(), ADMIN_TOKEN, &shots.display().to_string()],
    );
    let status = step(&lines, "status");
    assert_eq!(status["hash"], format!("#/experiment/{MODEL}"));
    assert!(
        text(&status["state"])
            .contains("control 1.0.0/xnnpack-fp32 vs treatment 1.0.0/vulkan-fp32")
    );
    assert!(text(&status["state"]).contains("Devices: control 32, treatment 32"));
    // One row per metric, with the API's decision.
    let rows = status["metrics"].as_array().expect("rows");
    let api_metrics = api["metrics"].as_array().expect("metrics");
    assert_eq!(rows.len(), api_metrics.len());
    for (row, m) in rows.iter().zip(api_metrics) {
        assert_eq!(row[0], m["metric"], "{row}");
        assert_eq!(row[6], m["decision"], "{row}");
    }
    let accepted = rows.iter().find(|r| r[0] == "accepted").expect("accepted");
    assert_eq!(accepted[6], "better", "{accepted}");
    assert!(text(&accepted[5]).starts_with('['), "{accepted}");
    let fallback = rows.iter().find(|r| r[0] == "fallback").expect("fallback");
    assert_eq!(fallback[6], "worse", "{fallback}");
    // Two SoCs per metric, each with its share of the 5%.
    let classes = status["classes"].as_array().expect("classes");
    assert!(
        classes
            .iter()
            .any(|c| c[1] == "SoC SM8550" && c[5] == "2.5%"),
        "{classes:?}"
    );
    assert_eq!(status["history"][0][1], "start");
    assert_eq!(status["history"][0][5], "is vulkan worth it");
    // The stop, asked then confirmed; the API agrees.
    let stopped = step(&lines, "stopped");
    assert!(
        text(&stopped["asked"]).contains("winner control"),
        "{stopped}"
    );
    assert!(
        text(&stopped["result"]).starts_with("Stopped at revision 2"),
        "{stopped}"
    );
    assert!(
        text(&stopped["state"]).contains("stopped, winner control"),
        "{stopped}"
    );
    assert_eq!(stopped["history"][0][1], "stop");
    assert_eq!(
        stopped["history"][0][5],
        "dashboard test: vulkan falls back"
    );
    assert_eq!(stopped["stop_disabled"], true);
    let (_, after) = app.get_json(&path, Some(READ_TOKEN));
    assert_eq!(after["experiment"]["state"], "stopped", "{after}");
    assert_eq!(after["experiment"]["winner"], "control", "{after}");
    let phone = step(&lines, "phone");
    assert!(
        phone["scroll"].as_u64() <= phone["client"].as_u64(),
        "{phone}"
    );
}
