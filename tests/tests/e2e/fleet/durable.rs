//! Accepted means durable (issue 47, point 3): telemetry answered `accepted` survives a kill -9
//! of the server at any moment, and after the restart every accepted event is in the health
//! counts and in the raw Parquet log (read by DuckDB), once; a second crash and restart count
//! nothing twice.

use std::time::{Duration, Instant};

use ferry_tests::app::ADMIN_TOKEN;
use ferry_tests::kit::Event;
use ferry_tests::process::ServerProcess;
use ferry_tests::reports::{model_health, with_receipts_of};

const DEVICES: usize = 250;
const PER_DEVICE: usize = 8;

/// Every event sent: `DEVICES` devices, `PER_DEVICE` loads each (the per-device cap), each
/// with its own `load_ms` so that every raw row can be told apart.
fn events(data: &std::path::Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for d in 0..DEVICES {
        for k in 0..PER_DEVICE {
            let variant = if d % 2 == 0 {
                "xnnpack-fp32"
            } else {
                "vulkan-fp32"
            };
            let e = Event::load("demo-mlp", "1.0.0", variant)
                .install(&format!("durable-{d}"))
                .set("load_ms", (d * PER_DEVICE + k) as f64);
            out.push(e.json());
        }
    }
    with_receipts_of(data, &out)
}

fn loads(url: &str) -> u64 {
    let h = model_health(url, "demo-mlp", ADMIN_TOKEN);
    ferry_tests::reports::variant_rows(&h, Some("1.0.0"))
        .iter()
        .map(|v| v["loads"].as_u64().unwrap_or(0))
        .sum()
}

/// (rows, distinct load_ms) of the raw log under the store.
fn raw_rows(store: &std::path::Path) -> (u64, u64) {
    let rows = ferry_tests::duckdb::query(&format!(
        "SELECT count(*) AS n, count(DISTINCT load_ms) AS d FROM {} WHERE install_id LIKE 'durable-%'",
        ferry_tests::duckdb::events_table(store)
    ));
    (
        rows[0]["n"].as_u64().expect("n"),
        rows[0]["d"].as_u64().expect("d"),
    )
}

#[test]
fn telemetry_answered_accepted_survives_kill_9_and_counts_once() {
    let bin = env!("CARGO_BIN_EXE_serve-child");
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let config = dir.path().join("ferry.toml");
    // Nothing is flushed on a timer before the kill: only the journal holds the events.
    std::fs::write(
        &config,
        format!(
            "[telemetry]\nflush_secs = 3600\nraw_roll_secs = 86400\n{}",
            ferry_tests::ONE_HOST_FLEET_TOML
        ),
    )
    .expect("config");
    let args = ["--demo", "--config", config.to_str().expect("utf-8")];
    let server = ServerProcess::start(bin, &data, &args);
    let sent = events(&data);
    let mut answered = Instant::now();
    for batch in sent.chunks(100) {
        let mut r = ureq::post(format!("{}/v1/telemetry", server.url))
            .header("content-type", "application/json")
            .send(serde_json::json!({ "events": batch }).to_string())
            .expect("telemetry");
        let body: serde_json::Value =
            serde_json::from_reader(r.body_mut().as_reader()).expect("json");
        answered = Instant::now();
        assert_eq!(
            (&body["accepted"], &body["unverified"]),
            (&100.into(), &0.into()),
            "{body}"
        );
    }
    let addr = server.addr();
    server.kill9();
    assert!(
        answered.elapsed() < Duration::from_millis(100),
        "killed {:?} after the last answer",
        answered.elapsed()
    );
    let expected = (DEVICES * PER_DEVICE) as u64;
    let mut listen = vec!["--listen", addr.as_str()];
    listen.extend(args);
    let server = ServerProcess::start(bin, &data, &listen);
    assert_eq!(
        loads(&server.url),
        expected,
        "every accepted event is counted"
    );
    assert_eq!(
        raw_rows(&data.join("store")),
        (expected, expected),
        "every accepted event is in the raw log, once"
    );
    // Killed again at once and started again: the replay wrote everything under names that
    // say so, and nothing counts twice.
    server.kill9();
    let server = ServerProcess::start(bin, &data, &listen);
    assert_eq!(loads(&server.url), expected, "nothing counted twice");
    assert_eq!(raw_rows(&data.join("store")), (expected, expected));
    let left = std::fs::read_dir(data.join("journal"))
        .expect("journal")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .count();
    assert!(left <= 1, "replayed segments are deleted ({left} left)");
}
