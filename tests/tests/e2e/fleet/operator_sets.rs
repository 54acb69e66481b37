//! Stored operator sets that no device has sent for `telemetry.operator_sets_unused_days` are
//! collected by the replica holding the compaction lease (issue 47, point 4); a set a device
//! still sends, and a set stored lately, stay.

use std::time::{Duration, SystemTime};

use ferry_tests::app::{Options, TestApp, mlp_v1};
use ferry_tests::releases::profile;

fn ops(tag: &str) -> Vec<String> {
    vec![format!("{tag}::add.out"), format!("{tag}::mm.out")]
}

fn digest(ops: &[String]) -> String {
    ferry_shared::select::operators::digest(ops).to_hex()
}

/// A resolve of `mlp` by a runtime with `ops`, its list sent along when `with_list`.
fn request(ops: &[String], with_list: bool) -> serde_json::Value {
    let mut req = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    req["operators_digest"] = digest(ops).into();
    if with_list {
        req["operators"] = serde_json::json!(ops);
    }
    req
}

fn set_file(app: &TestApp, ops: &[String]) -> std::path::PathBuf {
    app.store_dir()
        .join("operators/sha256")
        .join(format!("{}.json", digest(ops)))
}

fn age(path: &std::path::Path, days: u64) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_modified(SystemTime::now() - Duration::from_secs(days * 86_400))
        .expect("set mtime");
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn sets_no_device_sent_for_30_days_are_collected_and_the_others_kept() {
    assert_eq!(
        ferry_server::fleet::config::TelemetryConfig::default().operator_sets_unused_days,
        30
    );
    let (used, unused, recent) = (ops("used"), ops("gone"), ops("new"));
    // Three runtimes sent their lists once, long ago: the sets alone are on the store (their
    // census buckets are past the retention).
    let first = TestApp::start();
    first.publish(&mlp_v1());
    for set in [&used, &unused, &recent] {
        let (s, r) = first.resolve(&request(set, true), false);
        assert_eq!(s, 200, "{r}");
        assert!(set_file(&first, set).exists(), "{r}");
    }
    let sets = tempfile::tempdir().expect("tmp");
    ferry_tests::app::copy_tree(
        &first.store_dir().join("operators"),
        &sets.path().join("operators"),
    )
    .expect("copy");
    drop(first);

    let app = TestApp::start_with(Options {
        store: Some(sets.path().to_path_buf()),
        tweak: Some(Box::new(ferry_tests::fast_telemetry)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    // One host fills the runtime census's 64 keys of this minute with one set under made-up
    // app versions: what the census shows of later runtimes folds into `other other`.
    for i in 0..70 {
        let mut req = request(&recent, false);
        req["app_version"] = format!("1.0.{i}").into();
        assert_eq!(app.resolve(&req, false).0, 200);
    }
    // A device of the first runtime still resolves, with its digest alone: known, and noted
    // as sent, which reaches the store at the next flush.
    let (s, r) = app.resolve(&request(&used, false), false);
    assert_eq!(s, 200, "{r}");
    assert!(r.get("operators_wanted").is_none_or(|w| w == false), "{r}");
    let in_census = || {
        app.stored_files().iter().any(|f| {
            f.starts_with("telemetry/buckets")
                && std::fs::read_to_string(app.store_dir().join(f))
                    .is_ok_and(|t| t.contains(&digest(&used)))
        })
    };
    wait_for("the census note of the used set in the store", in_census);
    // 40 days pass for the used and the unused set; the third was stored yesterday.
    age(&set_file(&app, &used), 40);
    age(&set_file(&app, &unused), 40);
    age(&set_file(&app, &recent), 1);
    // A new replica (its lease holder gone) collects at its first compaction.
    let _ = std::fs::remove_file(app.store_dir().join("telemetry/buckets/lease.json"));
    let replica = app.replica_with(
        None,
        Box::new(|c| {
            ferry_tests::fast_telemetry(c);
            c.telemetry.compact_secs = 1;
        }),
    );
    wait_for("the unused set collected", || {
        !set_file(&app, &unused).exists()
    });
    assert!(set_file(&app, &used).exists(), "a set a device sent stays");
    assert!(
        set_file(&app, &recent).exists(),
        "a set stored lately stays"
    );
    // A device of the collected runtime is asked for its list again, and it is stored again.
    let ask = |with_list| {
        let mut resp = app
            .agent
            .post(format!("{}/v1/resolve", replica.url()))
            .header("content-type", "application/json")
            .send(request(&unused, with_list).to_string())
            .expect("resolve");
        assert_eq!(resp.status().as_u16(), 200);
        serde_json::from_str::<serde_json::Value>(&resp.body_mut().read_to_string().expect("text"))
            .expect("json")
    };
    assert_eq!(ask(false)["operators_wanted"], true);
    ask(true);
    assert!(set_file(&app, &unused).exists());
}
