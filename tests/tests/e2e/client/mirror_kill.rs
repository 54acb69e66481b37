//! A site mirror as a process of its own (`serve-child`, the `ferry` binary's twin) in front
//! of an origin of three replicas on one store. Killed with SIGKILL while it holds telemetry it
//! queued during an outage, and started again pointed at another replica (the first one is
//! gone), it forwards the queue: the load reaches the origin's raw log once, its receipt
//! verified by a replica that did not sign it; devices resolve and load through it again.

use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp};
use ferry_tests::kit::device;
use ferry_tests::process::ServerProcess;

use super::delta::{client, noise};
use super::site_mirror::loads_of;

/// `GET /v1/admin/mirror` of the mirror at `url`.
fn state(url: &str) -> serde_json::Value {
    let mut r = ureq::get(format!("{url}/v1/admin/mirror"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .expect("mirror state");
    serde_json::from_str(&r.body_mut().read_to_string().expect("body")).expect("json")
}

#[test]
fn a_mirror_killed_with_queued_telemetry_forwards_it_to_another_replica_after_a_restart() {
    let mut origin = TestApp::start_with(Options {
        tweak: Some(Box::new(ferry_tests::fast_telemetry)),
        ..Default::default()
    });
    let replicas: Vec<_> = (0..2)
        .map(|_| origin.replica_with(None, Box::new(ferry_tests::fast_telemetry)))
        .collect();
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("weights.bin"), noise(1 << 20, 61)).expect("write");
    origin.publish(&ferry_tests::releases::portable_with_asset(
        "site",
        "1.0.0",
        &dir.path().join("weights.bin"),
    ));
    // Replicas learn of a release published through another within `ramp_check_secs`; until
    // then they refuse telemetry about it (docs/operations.md).
    for r in &replicas {
        ferry_tests::until("the replica knows the release", || {
            ureq::get(format!("{}/v1/admin/models/site", r.url()))
                .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
                .call()
                .is_ok()
        });
    }
    let trust = origin.dir.path().join("keys/trust.json");
    let trust = trust.to_str().expect("utf-8");
    let bin = env!("CARGO_BIN_EXE_serve-child");
    let data = dir.path().join("mirror");
    let first = ServerProcess::start(
        bin,
        &data,
        &["--mirror-of", &origin.url(), "--trust", trust],
    );

    // A device learns the time through the mirror and loads while the origin is up.
    let fresh = client(&first.url, &origin, &dir.path().join("fresh"));
    fresh
        .load("site", &device("site-fresh"))
        .expect("loads through the mirror");
    fresh
        .resolve("site", &device("site-fresh"))
        .expect("resolve");
    assert!(fresh.send_telemetry().sent >= 1);
    ferry_tests::until("the first load reached the origin", || {
        loads_of(&origin, "site-fresh") == 1
    });

    // The replica the mirror knows goes away; the device loads again and reports it.
    let placeholder = origin.try_replica_at("127.0.0.1:0").expect("placeholder");
    std::mem::replace(&mut origin.server, placeholder).stop();
    let again = client(&first.url, &origin, &dir.path().join("fresh"));
    again
        .load("site", &device("site-fresh"))
        .expect("loads from the mirror while the origin is away");
    assert!(again.send_telemetry().sent >= 1, "the mirror queues it");
    let queued = state(&first.url)["queue"]["batches"].as_u64().unwrap_or(0);
    assert!(queued >= 1, "{}", state(&first.url));

    // SIGKILL: no flush, no goodbye. Started again, pointed at another replica.
    first.kill9();
    let second = ServerProcess::start(
        bin,
        &data,
        &["--mirror-of", &replicas[0].url(), "--trust", trust],
    );
    ferry_tests::until("the queued load reached the origin", || {
        loads_of(&origin, "site-fresh") >= 2
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(loads_of(&origin, "site-fresh"), 2, "each load once");
    let s = state(&second.url);
    assert_eq!(s["queue"]["batches"], 0, "{s}");
    assert_eq!(s["queue"]["rejected_events"], 0, "{s}");
    assert_eq!(s["origin_up"], true, "{s}");

    // And the site works through it: a new device resolves and loads.
    let newcomer = client(&second.url, &origin, &dir.path().join("newcomer"));
    newcomer
        .load("site", &device("site-newcomer"))
        .expect("loads through the restarted mirror");
    drop(replicas);
}
