//! The raw telemetry log as an analyst sees it: events sent to a real server over HTTP land in
//! Parquet files under `telemetry/events/date=YYYY-MM-DD/`, and DuckDB (from PyPI, an
//! independent reader) finds every accepted event with its fields, and runs the queries in
//! `docs/telemetry.md` as written, giving the figures computed here from what was sent.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ferry_tests::app::{Options, TestApp, mlp_v1};
use ferry_tests::duckdb;

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("time")
}

/// The SQL blocks of `docs/telemetry.md`, by their `-- query: NAME` label, reading `root`'s
/// store instead of `data/store`.
pub(crate) fn documented_queries(root: &std::path::Path) -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/telemetry.md"),
    )
    .expect("docs/telemetry.md");
    let mut out = BTreeMap::new();
    for block in doc.split("```sql\n").skip(1) {
        let sql = block.split("```").next().expect("block");
        let name = sql
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("-- query: "))
            .expect("each query is labelled")
            .trim()
            .to_string();
        out.insert(
            name,
            sql.replace("'data/store/", &format!("'{}/", root.display())),
        );
    }
    out
}

/// The SoCs the test's devices report.
const SOCS: [&str; 3] = ["SM8650", "SM8450", "Tensor G3"];

/// The device models the test's devices report.
const MODELS: [&str; 2] = ["Pixel 8", "Galaxy S24"];

struct Sent {
    installs: BTreeSet<String>,
    counted: usize,
    /// (soc, delegate) -> (loads, fallbacks), counted events only.
    fallbacks: BTreeMap<(String, String), (u64, u64)>,
    /// device model -> successful load times.
    load_ms: BTreeMap<String, Vec<f64>>,
}

#[test]
fn every_accepted_event_is_in_parquet_and_the_documented_queries_run() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.telemetry.flush_secs = 1;
            c.telemetry.raw_roll_secs = 1;
        })),
    });
    app.publish(&mlp_v1());
    let sent = send_batches(&app);
    // Wait until DuckDB sees all 600 (the files are written within about two seconds).
    let root = app.store_dir();
    let table = duckdb::events_table(&root);
    let mut rows = Vec::new();
    for _ in 0..100 {
        let written = app
            .stored_files()
            .iter()
            .any(|f| f.starts_with("telemetry/events/"));
        if written {
            rows = duckdb::query(&format!("SELECT * FROM {table}"));
            if rows.len() >= 600 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(rows.len(), 600, "every accepted event, once");
    let found: BTreeSet<String> = rows
        .iter()
        .map(|r| r["install_id"].as_str().expect("install_id").to_string())
        .collect();
    assert_eq!(found, sent.installs);
    let today = time::OffsetDateTime::now_utc().date().to_string();
    for r in &rows {
        assert_eq!(r["date"].as_str(), Some(today.as_str()), "{r}");
        assert_eq!(r["model"], "mlp");
        assert_eq!(r["replica"].as_str(), Some(app.server.state.node()));
        let n: usize = r["install_id"].as_str().expect("id")[3..]
            .parse()
            .expect("n");
        assert_eq!(r["counted"], !n.is_multiple_of(5), "{r}");
        assert_eq!(r["soc"].as_str(), Some(SOCS[n % SOCS.len()]));
        if n.is_multiple_of(7) {
            assert_eq!(r["kind"], "fallback");
            assert_eq!(r["to_variant"], "portable-fp32");
            assert!(r["load_ms"].is_null(), "{r}");
        } else {
            assert_eq!(r["kind"], "load");
            assert_eq!(r["load_ms"].as_f64(), Some(5.0 + (n % 40) as f64 * 1.5));
        }
        assert_eq!(r["error_code"].is_null(), !n.is_multiple_of(11), "{r}");
        match r["stage"].as_str() {
            None => assert!(!n.is_multiple_of(11), "{r}"),
            Some(stage) => assert_eq!(
                stage,
                if n.is_multiple_of(2) {
                    "load_method"
                } else {
                    "golden"
                },
                "{r}"
            ),
        }
        assert!(
            r["received_at"]
                .as_str()
                .is_some_and(|t| t.starts_with(&today)),
            "{r}"
        );
        assert!(
            r["at"].as_str().is_some_and(|t| t.starts_with(&today)),
            "{r}"
        );
    }

    documented_queries_agree(&root, &sent);
}

/// The documented DuckDB queries, as written, agree with what was sent.
fn documented_queries_agree(root: &std::path::Path, sent: &Sent) {
    // The documented queries, as written.
    let queries = documented_queries(root);
    assert_eq!(
        queries.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "crashes_by_soc",
            "failures_by_stage",
            "fallback_by_soc",
            "load_p95_by_device",
            "per_day",
            "top_errors"
        ]
    );
    let per_day = duckdb::query(&queries["per_day"]);
    assert_eq!(per_day.len(), 1, "{per_day:?}");
    assert_eq!(per_day[0]["events"], 600);
    assert_eq!(per_day[0]["counted"], sent.counted);

    let by_soc = duckdb::query(&queries["fallback_by_soc"]);
    assert_eq!(by_soc.len(), sent.fallbacks.len(), "{by_soc:?}");
    for r in &by_soc {
        let key = (
            r["soc"].as_str().expect("soc").to_string(),
            r["delegate"].as_str().expect("delegate").to_string(),
        );
        let (loads, fallbacks) = sent.fallbacks[&key];
        assert_eq!(
            (r["loads"].as_u64(), r["fallbacks"].as_u64()),
            (Some(loads), Some(fallbacks))
        );
        let rate = (fallbacks as f64 / loads.max(1) as f64 * 1000.0).round() / 1000.0;
        assert_eq!(r["fallback_rate"].as_f64(), Some(rate), "{r}");
    }

    let by_device = duckdb::query(&queries["load_p95_by_device"]);
    assert_eq!(by_device.len(), MODELS.len(), "{by_device:?}");
    for r in &by_device {
        let mut ms = sent.load_ms[r["device_model"].as_str().expect("model")].clone();
        ms.sort_by(f64::total_cmp);
        assert_eq!(r["loads"].as_u64(), Some(ms.len() as u64));
        // Linear interpolation between closest ranks, as quantile_cont does.
        let q = |p: f64| {
            let pos = p * (ms.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            let v = ms[lo] + (ms[hi] - ms[lo]) * (pos - lo as f64);
            (v * 10.0).round() / 10.0
        };
        assert_eq!(r["p50_ms"].as_f64(), Some(q(0.5)), "{r}");
        assert_eq!(r["p95_ms"].as_f64(), Some(q(0.95)), "{r}");
    }

    let stages = duckdb::query(&queries["failures_by_stage"]);
    let failed: Vec<usize> = (0..600usize).filter(|n| n.is_multiple_of(11)).collect();
    let even = failed.iter().filter(|n| n.is_multiple_of(2)).count() as u64;
    let mut got: Vec<(String, u64)> = stages
        .iter()
        .map(|r| {
            (
                r["stage"].as_str().expect("stage").to_string(),
                r["events"].as_u64().expect("events"),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("golden".to_string(), failed.len() as u64 - even),
            ("load_method".to_string(), even)
        ],
        "{stages:?}"
    );

    let errors = duckdb::query(&queries["top_errors"]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["error_code"], "load_failed");
    assert_eq!(
        errors[0]["events"].as_u64(),
        Some((0..600usize).filter(|n| n.is_multiple_of(11)).count() as u64)
    );
}

/// Six batches of 100 events from many devices, some without a receipt; what was sent.
fn send_batches(app: &TestApp) -> Sent {
    let (socs, models) = (SOCS, MODELS);
    let variants = [("xnnpack-fp32", "xnnpack"), ("vulkan-fp32", "vulkan")];
    let mut sent = Sent {
        installs: BTreeSet::new(),
        counted: 0,
        fallbacks: BTreeMap::new(),
        load_ms: BTreeMap::new(),
    };
    for batch in 0..6 {
        let mut with_receipt = Vec::new();
        let mut without = Vec::new();
        for i in 0..100 {
            let n = batch * 100 + i;
            let soc = socs[n % socs.len()];
            let device_model = models[n % models.len()];
            let (variant, delegate) = variants[n % variants.len()];
            let install = format!("pq-{n}");
            let kind = if n.is_multiple_of(7) {
                "fallback"
            } else {
                "load"
            };
            let ok = !n.is_multiple_of(11);
            let mut e = serde_json::json!({
                "kind": kind, "model": "mlp", "release": "1.0.0", "variant": variant,
                "delegate": delegate, "outcome": if ok { "ok" } else { "failed" },
                "install_id": install, "platform": "android", "soc": soc,
                "device_model": device_model, "os_version": "14", "app_version": "1.0.0",
                "runtime_version": "1.5.1", "at": now_rfc3339(),
            });
            if !ok {
                e["error_code"] = "load_failed".into();
                e["stage"] = if n.is_multiple_of(2) {
                    "load_method"
                } else {
                    "golden"
                }
                .into();
            }
            if kind == "fallback" {
                e["to_variant"] = "portable-fp32".into();
            }
            let ms = 5.0 + (n % 40) as f64 * 1.5;
            if kind == "load" {
                e["load_ms"] = ms.into();
            }
            sent.installs.insert(install);
            // Every fifth event has no receipt: accepted, kept, counted nowhere.
            if n.is_multiple_of(5) {
                without.push(e);
                continue;
            }
            sent.counted += 1;
            let entry = sent
                .fallbacks
                .entry((soc.to_string(), delegate.to_string()))
                .or_default();
            match kind {
                "load" => entry.0 += 1,
                _ => entry.1 += 1,
            }
            with_receipt.push(e);
        }
        let mut events = app.with_receipts(&with_receipt);
        events.extend(without);
        for e in &events {
            if e["kind"] == "load" && e["outcome"] == "ok" {
                sent.load_ms
                    .entry(e["device_model"].as_str().expect("model").to_string())
                    .or_default()
                    .push(e["load_ms"].as_f64().expect("ms"));
            }
        }
        let (status, body) = app.post_raw(
            "/v1/telemetry",
            &serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json"),
            None,
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["accepted"], 100, "{body}");
    }
    assert_eq!(sent.installs.len(), 600);

    sent
}

#[test]
fn a_full_buffer_is_written_without_waiting_for_the_roll_timer() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.telemetry.flush_secs = 3600;
            c.telemetry.raw_roll_secs = 3600;
            c.telemetry.raw_buffer_events = 50;
        })),
    });
    app.publish(&mlp_v1());
    let event = |i: usize| {
        serde_json::json!({
            "kind": "load", "model": "mlp", "release": "1.0.0", "variant": "xnnpack-fp32",
            "delegate": "xnnpack", "outcome": "ok", "install_id": format!("roll-{i}"),
            "platform": "android", "soc": "SM8650", "device_model": "Pixel 8",
            "os_version": "14", "app_version": "1.0.0", "runtime_version": "1.5.1",
            "at": now_rfc3339(), "load_ms": 3.0,
        })
    };
    let send = |range: std::ops::Range<usize>| {
        let events: Vec<_> = range.map(event).collect();
        let (status, body) = app.post_raw(
            "/v1/telemetry",
            &serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json"),
            None,
        );
        assert_eq!(status, 200, "{body}");
    };
    let files = || -> Vec<String> {
        app.stored_files()
            .into_iter()
            .filter(|f| f.starts_with("telemetry/events/") && f.ends_with(".parquet"))
            .collect()
    };
    send(0..30);
    std::thread::sleep(Duration::from_millis(500));
    assert!(files().is_empty(), "30 of 50 buffered: nothing written yet");
    send(30..60);
    for _ in 0..50 {
        if !files().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let written = files();
    assert_eq!(written.len(), 1, "{written:?}");
    let rows = duckdb::query(&format!(
        "SELECT count(*) AS n, count(DISTINCT install_id) AS ids FROM {}",
        duckdb::events_table(&app.store_dir())
    ));
    assert_eq!(
        (rows[0]["n"].as_u64(), rows[0]["ids"].as_u64()),
        (Some(60), Some(60))
    );
}
