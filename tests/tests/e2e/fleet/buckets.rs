//! Telemetry time buckets on a real server: windows count only what is recent, old minutes are
//! compacted into hours and hours into days without changing a single total, a part that
//! another compactor already wrote is never counted twice, retention deletes what is past it,
//! and a new process on the same store sees the same numbers.

use ferry_tests::until;

use ferry_server::fleet::counts::rollup::Rollup;
use ferry_server::fleet::persist::buckets::{BucketKey, Level, Part};
use ferry_shared::wire::telemetry::TelemetryEvent;
use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1};
use ferry_tests::kit::Event;

fn event(i: usize) -> TelemetryEvent {
    let e = Event::load("mlp", "1.0.0", "xnnpack-fp32")
        .install(&format!("old-{i}"))
        .soc("SOC-1")
        .set("device_model", "phone")
        .set("app_version", "1.0.0")
        .set("at", "2026-01-01T00:00:00Z")
        .set("load_ms", 2.0 + i as f64);
    if i.is_multiple_of(5) {
        e.failed("load_failed").typed()
    } else {
        e.typed()
    }
}

/// A rollup of `n` loads (every fifth failed).
fn rollup(n: usize, offset: usize) -> Rollup {
    let mut r = Rollup::default();
    for i in offset..offset + n {
        r.variant_mut("mlp", "1.0.0", "xnnpack-fp32")
            .add(&event(i), i as u64, 1);
    }
    r
}

fn plant(app: &TestApp, key: &BucketKey, bytes: &[u8]) {
    let path = app.store_dir().join(key.path().as_ref());
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    std::fs::write(path, bytes).expect("write");
}

fn minute(start: i64, writer: &str) -> BucketKey {
    BucketKey {
        level: Level::Minute,
        start,
        name: writer.into(),
    }
}

/// Loads of mlp 1.0.0's XNNPACK variant in `view` (a health answer).
fn loads(view: &serde_json::Value) -> u64 {
    view["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["variants"].as_array().into_iter().flatten())
        .map(|v| v["loads"].as_u64().unwrap_or(0))
        .sum()
}

fn health(app: &TestApp, query: &str) -> serde_json::Value {
    let (s, h) = app.get_json(
        &format!("/v1/admin/models/mlp/health{query}"),
        Some(READ_TOKEN),
    );
    assert_eq!(s, 200, "{h}");
    h
}

fn fast(c: &mut ferry_server::app::config::Config) {
    c.telemetry.flush_secs = 1;
    c.telemetry.raw_roll_secs = 1;
    c.telemetry.evaluate_ms = 0;
    c.telemetry.compact_secs = 1;
}

#[test]
fn windows_compaction_and_retention_keep_every_total() {
    // The planted buckets sit whole hours back from now and the windows are asked for a few
    // seconds later: a run that straddles the top of an hour would see them shifted by one.
    let into_hour = time::OffsetDateTime::now_utc()
        .unix_timestamp()
        .rem_euclid(3600);
    if into_hour > 3600 - 60 {
        std::thread::sleep(std::time::Duration::from_secs(
            (3600 - into_hour + 1) as u64,
        ));
    }
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(fast)),
    });
    app.publish(&mlp_v1());
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let Planted {
        old_hour,
        recent_hour,
        done_hour,
        merged_part,
        expired,
    } = plant_buckets(&app, now);
    // And live events now, through the API.
    let live: Vec<serde_json::Value> = (0..12)
        .map(|i| {
            serde_json::json!({
                "kind": "load", "model": "mlp", "release": "1.0.0", "variant": "xnnpack-fp32",
                "delegate": "xnnpack", "outcome": "ok", "install_id": format!("live-{i}"),
                "platform": "android", "soc": "SOC-1", "device_model": "phone",
                "os_version": "14", "app_version": "1.0.0", "runtime_version": "1.5.1",
                "at": time::OffsetDateTime::now_utc()
                    .format(&time::format_description::well_known::Rfc3339)
                    .expect("time"),
                "load_ms": 4.0,
            })
        })
        .collect();
    let (s, b) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({"events": app.with_receipts(&live)}))
            .expect("json"),
        None,
    );
    assert_eq!(s, 200, "{b}");

    // Everything but the expired day: 40 x 3 + 10 x 2 + 15 + 4 + 6 + 12.
    let total = 40 * 3 + 10 * 2 + 15 + 4 + 6 + 12;
    let buckets = |app: &TestApp| -> Vec<String> {
        app.stored_files()
            .into_iter()
            .filter(|f| f.starts_with("telemetry/buckets/") && !f.ends_with("lease.json"))
            .collect()
    };
    until("compaction settles", || {
        let files = buckets(&app);
        let minutes_left = files
            .iter()
            .filter(|f| f.starts_with("telemetry/buckets/minute/"))
            .count();
        // Every hour of the old days went into day parts: those whose day ended more than
        // HOURS_KEPT_SECS ago (an hour of the day before yesterday stays an hour until then,
        // which late in a UTC day holds hours older than two days).
        let old_hours = files.iter().any(|f| {
            BucketKey::parse(&object_store::path::Path::from(f.as_str())).is_some_and(|k| {
                k.level == Level::Hour
                    && Level::Day.floor(k.start)
                        + 86_400
                        + ferry_server::fleet::persist::buckets::HOURS_KEPT_SECS
                        <= now
            })
        });
        // Only this run's own live minute(s) stay as minutes.
        minutes_left <= 2 && !old_hours && loads(&health(&app, "")) == total
    });
    let files = buckets(&app);
    let day_prefix = format!(
        "telemetry/buckets/day/{}",
        time::OffsetDateTime::from_unix_timestamp(old_hour)
            .expect("time")
            .date()
    );
    assert!(
        files.iter().any(|f| f.starts_with(&day_prefix)),
        "{files:?}"
    );
    assert!(
        !files.contains(&merged_part.path().to_string()),
        "the late minute's part got a new name: {files:?}"
    );
    assert!(
        !files.contains(&expired.path().to_string()),
        "retention: {files:?}"
    );
    for h in [recent_hour, done_hour] {
        let part = BucketKey {
            level: Level::Hour,
            start: h,
            name: "part-000001".into(),
        };
        assert!(files.contains(&part.path().to_string()), "{files:?}");
    }
    let stored = app.stored_files();
    assert!(
        !stored.contains(&raw_day(now, 100)),
        "raw retention: {stored:?}"
    );
    assert!(stored.contains(&raw_day(now, 10)), "{stored:?}");
    assert!(
        !files.iter().any(|f| f.contains("/node-w.4")),
        "merged sources are deleted: {files:?}"
    );
    // Every figure survives compaction: failures too.
    let h = health(&app, "");
    let failures: u64 = h["releases"][0]["variants"][0]["load_failures"]
        .as_u64()
        .expect("failures");
    // Every fifth planted event failed: 40 + 10 + 3 + 1 + 2.
    assert_eq!(failures, 56, "{h}");

    // Windows: the last hour holds only the live events; the last three hours add the hour
    // part that overlaps them (counted whole: the window then starts at its hour); five hours
    // take both hour parts.
    let w = health(&app, "?since=1h");
    assert_eq!(loads(&w), 12, "{w}");
    assert!(w["window"]["since"].is_string(), "{w}");
    assert_eq!(loads(&health(&app, "?since=5h")), 12 + 20 + 15);
    let w = health(&app, "?since=3h");
    assert_eq!(loads(&w), 12 + 20, "{w}");
    let from = time::OffsetDateTime::parse(
        w["window"]["from"].as_str().expect("from"),
        &time::format_description::well_known::Rfc3339,
    )
    .expect("rfc3339")
    .unix_timestamp();
    assert_eq!(from, recent_hour, "{w}");
    assert_eq!(loads(&health(&app, "?since=30d")), total);

    // A new server on the same store: the same totals from its first answer.
    let fresh = app.replica_with(None, Box::new(fast));
    let mut r = app
        .agent
        .get(format!("{}/v1/admin/models/mlp/health", fresh.url()))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .expect("health");
    let h: serde_json::Value = serde_json::from_reader(r.body_mut().as_reader()).expect("json");
    assert_eq!(loads(&h), total, "{h}");
}

/// The planted raw Parquet file `days` before `now`.
fn raw_day(now: i64, days: i64) -> String {
    format!(
        "telemetry/events/date={}/node-x-1-0.parquet",
        time::OffsetDateTime::from_unix_timestamp(now - days * 86_400)
            .expect("time")
            .date()
    )
}

/// What was planted that the checks name.
struct Planted {
    old_hour: i64,
    recent_hour: i64,
    done_hour: i64,
    merged_part: BucketKey,
    expired: BucketKey,
}

/// Plants bucket objects and raw folders of every age around `now`, as earlier runs and
/// other compactors left them.
fn plant_buckets(app: &TestApp, now: i64) -> Planted {
    // Three days ago: 40 minutes from two replica runs (compacted into an hour, then a day).
    let old_hour = Level::Hour.floor(now - 3 * 86_400);
    for m in 0..20 {
        for w in ["node-x.1", "node-y.2"] {
            let r = rollup(3, m * 10);
            plant(
                app,
                &minute(old_hour + m as i64 * 60, w),
                &serde_json::to_vec(&r).expect("json"),
            );
        }
    }
    // Three hours ago: 10 minutes of one run (compacted into an hour part, kept as such).
    let recent_hour = Level::Hour.floor(now - 3 * 3600);
    for m in 0..10 {
        plant(
            app,
            &minute(recent_hour + m * 60, "node-z.3"),
            &serde_json::to_vec(&rollup(2, 0)).expect("json"),
        );
    }
    // An hour that another compactor already wrote a part for, its sources not yet deleted:
    // they must not count twice, and are cleaned up.
    let done_hour = Level::Hour.floor(now - 4 * 3600);
    let sources: Vec<BucketKey> = (0..3)
        .map(|m| minute(done_hour + m * 60, "node-w.4"))
        .collect();
    for k in &sources {
        plant(app, k, &serde_json::to_vec(&rollup(5, 0)).expect("json"));
    }
    let mut merged = Rollup::default();
    for _ in &sources {
        merged.merge(&rollup(5, 0));
    }
    plant(
        app,
        &BucketKey {
            level: Level::Hour,
            start: done_hour,
            name: "part-000001".into(),
        },
        &serde_json::to_vec(&Part {
            sources: sources.iter().map(|k| k.path().to_string()).collect(),
            rollup: merged,
        })
        .expect("json"),
    );
    // An hour that was compacted and then merged into its day (three days ago), and a minute
    // of it that arrives only now: it must count, under a part name never used before.
    let late_hour = Level::Hour.floor(now - 3 * 86_400) + 3600;
    let merged_part = BucketKey {
        level: Level::Hour,
        start: late_hour,
        name: "part-000001".into(),
    };
    plant(
        app,
        &BucketKey {
            level: Level::Day,
            start: Level::Day.floor(late_hour),
            name: "part-000003".into(),
        },
        &serde_json::to_vec(&Part {
            sources: vec![merged_part.path().to_string()],
            rollup: rollup(4, 0),
        })
        .expect("json"),
    );
    plant(
        app,
        &minute(late_hour + 120, "node-late.9-000000"),
        &serde_json::to_vec(&rollup(6, 0)).expect("json"),
    );
    // A day part past the 90-day retention.
    let expired = BucketKey {
        level: Level::Day,
        start: Level::Day.floor(now - 100 * 86_400),
        name: "part-000001".into(),
    };
    plant(
        app,
        &expired,
        &serde_json::to_vec(&Part {
            sources: vec![],
            rollup: rollup(7, 0),
        })
        .expect("json"),
    );
    // Raw Parquet folders: one past the 90-day raw retention, one within it.
    for days in [100, 10] {
        let path = app.store_dir().join(raw_day(now, days));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(&path, b"PAR1").expect("write");
    }
    Planted {
        old_hour,
        recent_hour,
        done_hour,
        merged_part,
        expired,
    }
}

#[test]
fn a_bad_window_is_a_clear_error() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    for (q, needle) in [
        ("?since=yesterday", "since"),
        ("?since=99999999999d", "since"),
        ("?since=1h&since=2h", "more than once"),
        // A misspelt parameter would otherwise answer for all time.
        ("?sinse=1h", "unknown query parameter"),
    ] {
        let (s, b) = app.get_json(&format!("/v1/admin/models/mlp/health{q}"), Some(READ_TOKEN));
        assert_eq!(
            (s, b["code"].as_str()),
            (400, Some("request_invalid")),
            "{q}: {b}"
        );
        assert!(
            b["message"].as_str().is_some_and(|m| m.contains(needle)),
            "{q}: {b}"
        );
    }
    let long = format!("?since={}", "9".repeat(5000));
    let (s, b) = app.get_json(
        &format!("/v1/admin/models/mlp/health{long}"),
        Some(READ_TOKEN),
    );
    assert_eq!(s, 400, "{b}");
    assert!(
        b["message"].as_str().is_some_and(|m| m.len() < 400),
        "the value is not echoed whole"
    );
    // `step` with a rollout: since the revision began.
    let mut v2 = ferry_tests::app::mlp_v2();
    v2.version = "1.1.0".parse().expect("v");
    app.publish(&v2);
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(
            &serde_json::json!({"action": "start", "release": "1.1.0", "percent": "10"}),
        )
        .expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    let (s, w) = app.get_json("/v1/admin/models/mlp/health?since=step", Some(READ_TOKEN));
    assert_eq!(s, 200, "{w}");
    assert!(w["window"]["since"].is_string(), "{w}");
}

#[test]
fn a_window_that_starts_in_the_future_is_empty_not_an_error() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    // A dashboard whose clock runs a day ahead asks for "since now" by its clock.
    let rfc3339 = &time::format_description::well_known::Rfc3339;
    let at = time::OffsetDateTime::now_utc() + time::Duration::days(1);
    let ahead = at.format(rfc3339).expect("time");
    for path in ["health", "health/series"] {
        let (s, b) = app.get_json(
            &format!("/v1/admin/models/mlp/{path}?since={ahead}"),
            Some(READ_TOKEN),
        );
        assert_eq!(s, 200, "{path}: {b}");
        if path == "health" {
            let since = b["window"]["since"].as_str().expect("since");
            let since = time::OffsetDateTime::parse(since, rfc3339).expect("rfc3339");
            assert_eq!(since.unix_timestamp(), at.unix_timestamp(), "{b}");
            assert_eq!(loads(&b), 0, "{b}");
        } else {
            assert!(b["points"].as_array().is_some_and(Vec::is_empty), "{b}");
        }
    }
}
