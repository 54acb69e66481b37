//! A health-gated ramp driven by two `ferry serve` processes on one data directory, as an
//! operator runs it: `ferry rollout start --steps --every`, telemetry to both processes, and
//! `ferry rollout status` saying what the step waits for. Each step is written once.

use crate::common;

use std::time::{Duration, Instant};

use common::{TOKEN, ferry, run_ok, serve_with};

/// `n` healthy load events of staged devices, each with the receipt the server gives that
/// install id (computed with the server's online key from the data directory, as every replica
/// does).
fn load_events(keys: &std::path::Path, from: usize, n: usize) -> Vec<u8> {
    let online = ferry_server::keys::load(&keys.join("online.key")).expect("online key");
    let receipts = ferry_server::fleet::intake::receipt::ReceiptKey::derive(&online.pair);
    let at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("time");
    let events: Vec<serde_json::Value> = (from..from + n)
        .map(|i| {
            serde_json::json!({
                "kind": "load", "model": "ramp", "release": "2.0.0", "variant": "xnnpack-fp32",
                "delegate": "xnnpack", "outcome": "ok", "install_id": format!("dev-{i}"),
                "platform": "linux", "soc": "x86", "device_model": "pc", "os_version": "6",
                "app_version": "1.0.0", "runtime_version": "1.5.1", "load_ms": 5.0, "at": at,
                "receipt": receipts.issue(
                    &ferry_server::fleet::intake::receipt::Facts {
                        install_id: &format!("dev-{i}"),
                        model: "ramp",
                        release: "2.0.0",
                        platform: "linux",
                        soc: "x86",
                        device_model: "pc",
                    },
                    &["xnnpack-fp32"],
                ),
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json")
}

fn status_json(url: &str) -> serde_json::Value {
    let out = run_ok(ferry().args([
        "rollout", "status", "ramp", "--json", "--server", url, "--token", TOKEN,
    ]));
    serde_json::from_str(&out).expect("json")
}

#[test]
fn two_processes_drive_one_ramp_and_write_each_step_once() {
    let setup = common::setup("ramp");
    let tmp = &setup.tmp;
    let (data, files) = (setup.data.clone(), setup.files.clone());
    let (v1, v2) = (setup.v1.clone(), setup.v2.clone());
    let config = tmp.path().join("ferry.toml");
    std::fs::write(
        &config,
        // Every device of this test is on one host (deny_min_networks and the allowance of new
        // installs per address off, as ferry_tests::one_host_fleet does).
        "ramp_check_secs = 1\n[telemetry]\nevaluate_ms = 0\ndeny_min_networks = 0\n\
         evidence_installs_per_address_per_hour = 0\n",
    )
    .expect("config");
    let a = serve_with(&data, Some(&config));
    let b = serve_with(&data, Some(&config));
    for r in [&v1, &v2] {
        run_ok(
            ferry()
                .arg("publish")
                .arg(r)
                .arg("--files")
                .arg(&files)
                .args(["--server", &a.url, "--token", TOKEN, "--quiet"]),
        );
    }
    let out = run_ok(ferry().args([
        "rollout",
        "start",
        "ramp",
        "--release",
        "2.0.0",
        "--steps",
        "1,5,25",
        "--every",
        "1s",
        "--min-samples",
        "8",
        "--server",
        &a.url,
        "--token",
        TOKEN,
    ]));
    assert!(out.contains("staged 2.0.0 at 1%"), "{out}");
    // Both processes pick the plan up (their refresh) and look at the step.
    std::thread::sleep(Duration::from_millis(1500));
    let status = run_ok(ferry().args([
        "rollout", "status", "ramp", "--server", &a.url, "--token", TOKEN,
    ]));
    assert!(status.contains("ramp: step 1 of 3 (1%)"), "{status}");
    assert!(status.contains("waiting for samples: 0 of 8"), "{status}");
    assert!(status.contains("next step: 5%"), "{status}");

    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut sent = 0;
    for want in [500u64, 2500] {
        for url in [&a.url, &b.url] {
            let r = agent
                .post(format!("{url}/v1/telemetry"))
                .header("content-type", "application/json")
                .send(load_events(&data.join("keys"), sent, 10).as_slice())
                .expect("telemetry");
            assert_eq!(r.status().as_u16(), 200);
            sent += 10;
        }
        let until = Instant::now() + Duration::from_secs(20);
        while status_json(&a.url)["current"]["basis_points"].as_u64() != Some(want) {
            assert!(Instant::now() < until, "{:#}", status_json(&a.url));
            std::thread::sleep(Duration::from_millis(250));
        }
        std::thread::sleep(Duration::from_millis(2500));
    }
    let v = status_json(&b.url);
    let steps: Vec<u64> = v["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|p| p["action"] == "ramp")
        .filter_map(|p| p["basis_points"].as_u64())
        .collect();
    assert_eq!(steps, [500, 2500], "each step once: {:#}", v["history"]);
    let status = run_ok(ferry().args([
        "rollout", "status", "ramp", "--server", &b.url, "--token", TOKEN,
    ]));
    assert!(status.contains("the last step is in force"), "{status}");
}

#[test]
fn gate_flags_refuse_what_is_not_a_rate_or_a_ratio_before_asking_the_server() {
    for (flag, value, want) in [
        ("--max-crash-rate", "NaN", "is not a rate"),
        ("--max-crash-rate", "inf", "is not a rate"),
        ("--max-failure-rate", "1.5", "is not a rate"),
        ("--max-fallback-rate=-0.1", "", "is not a rate"),
        ("--max-latency-ratio", "0.5", "is not a ratio"),
        ("--max-regression", "NaN", "is not a ratio"),
    ] {
        let out = crate::common::ferry()
            .args([
                "rollout",
                "start",
                "m",
                "--release",
                "1.0.0",
                "--percent",
                "5",
            ])
            .args(std::iter::once(flag).chain((!value.is_empty()).then_some(value)))
            .args([
                "--server",
                "http://127.0.0.1:1",
                "--token",
                crate::common::TOKEN,
            ])
            .output()
            .expect("run ferry");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(want), "{flag} {value}: {stderr}");
    }
}
