//! Signed blob sources end to end: a server whose configuration lists a dead CDN, a CDN that
//! serves wrong bytes (a fault proxy flipping a bit of every blob) and the server itself signs
//! that list into its decisions; the real client (real ExecuTorch runtime) passes over the two
//! bad sources, loads the model with every byte checked, remembers the bad sources for its next
//! download, and reports what each source did in its download events (the server's
//! `ferry_source_*` counters and the raw Parquet log, read by DuckDB).

use std::path::Path;

use ferry_server::app::startup::RunningServer;
use ferry_tests::app::{Options, TestApp};
use ferry_tests::kit::device;
use ferry_tests::proxy::{Fault, FaultProxy};

use super::delta::{client, noise};

/// The server's own blob route, as a source.
const ORIGIN: &str = "/v1/blobs/sha256/";

/// A source on a loopback port nothing listens on.
fn dead_source() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    format!("http://127.0.0.1:{port}/v1/blobs/sha256/")
}

/// The value of the counter line `name{labels}` in `/metrics` text (0 when absent).
fn counter(text: &str, name_and_labels: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Publishes model `model` 1.0.0 (the portable MLP with a `len`-byte asset) on `app`; returns
/// the sizes of its program and asset.
fn publish(app: &TestApp, dir: &Path, model: &str, len: usize, seed: u64) -> (u64, u64) {
    let asset = dir.join(format!("{model}.bin"));
    std::fs::write(&asset, noise(len, seed)).expect("write");
    let (m, _) = app.publish(&ferry_tests::releases::portable_with_asset(
        model, "1.0.0", &asset,
    ));
    (m.variants[0].size, m.variants[0].assets[0].size)
}

/// An edge replica of `origin` (same store) that lists `sources`.
fn edge(origin: &TestApp, sources: &[String]) -> RunningServer {
    let sources = sources.to_vec();
    origin.replica_with(
        None,
        Box::new(move |c| {
            ferry_tests::fast_telemetry(c);
            c.sources = sources;
        }),
    )
}

#[test]
fn a_dead_cdn_and_a_lying_cdn_are_passed_over_every_byte_checked_and_reported() {
    let origin = TestApp::start_with(Options {
        tweak: Some(Box::new(ferry_tests::fast_telemetry)),
        ..Default::default()
    });
    let liar = FaultProxy::start(origin.server.addr);
    liar.blob_faults((0..64).map(|_| Fault::FlipByte(100)));
    let (dead, lying) = (dead_source(), format!("{}/v1/blobs/sha256/", liar.url()));
    let sources = vec![dead.clone(), lying.clone(), ORIGIN.to_string()];
    let dir = tempfile::tempdir().expect("tmp");
    let (program, asset) = publish(&origin, dir.path(), "src", 3 << 20, 7);
    let (program2, asset2) = publish(&origin, dir.path(), "src2", 1 << 20, 8);
    let edge = edge(&origin, &sources);
    let url = edge.url();

    // The decision signs the list, in order; each candidate's URL is the first source's.
    let c = client(&url, &origin, &dir.path().join("cache"));
    let plan = c.resolve("src", &device("src-1")).expect("resolve");
    assert_eq!(plan.value().decision().sources, sources);
    assert_eq!(plan.value().candidates()[0].sources(), &sources[..]);
    assert!(plan.value().candidates()[0].url().starts_with(&dead));

    let loaded = c.load("src", &device("src-1")).expect("the model loads");
    assert_eq!(loaded.release, "1.0.0");
    // The load report says what each source did, in the order they were tried.
    let report: Vec<(&str, u64, u32)> = loaded
        .report
        .sources
        .iter()
        .map(|u| (u.source.as_str(), u.bytes, u.failures))
        .collect();
    assert_eq!(
        report,
        [
            (dead.as_str(), 0, 1),
            (lying.as_str(), 0, 1),
            (ORIGIN, program + asset, 0)
        ]
    );
    let blob_requests = |p: &FaultProxy| {
        p.log()
            .iter()
            .filter(|l| l.line.contains("/v1/blobs/"))
            .count()
    };
    // The program was asked of the liar once; its flipped bytes never reached the cache (the
    // model loaded from the origin's), and the asset was not asked of it at all: the client
    // remembered it as bad.
    assert_eq!(blob_requests(&liar), 1, "{:?}", liar.log());

    // A second model, downloaded while the bad sources are remembered: the origin first.
    c.load("src2", &device("src-1"))
        .expect("the second model loads");
    assert_eq!(blob_requests(&liar), 1, "the liar is passed over");

    // What each source did, as the devices report it.
    assert!(c.send_telemetry().sent >= 2);
    let metrics = edge.state.metrics().render();
    let failures = |s: &str, e: &str| {
        counter(
            &metrics,
            &format!("ferry_source_failures_total{{source=\"{s}\",error=\"{e}\"}}"),
        )
    };
    assert_eq!(failures(&dead, "network"), 1, "{metrics}");
    assert_eq!(failures(&lying, "hash_mismatch"), 1, "{metrics}");
    assert_eq!(failures(ORIGIN, "network"), 0);
    let bytes = |s: &str| {
        counter(
            &metrics,
            &format!("ferry_source_bytes_total{{source=\"{s}\"}}"),
        )
    };
    // Both models run the same program: the second download fetched its asset alone.
    assert_eq!(program2, program);
    assert_eq!(bytes(ORIGIN), program + asset + asset2, "{metrics}");
    assert_eq!(bytes(&lying), 0, "no byte of the liar was kept");

    // The raw log holds each download's report, as an independent reader sees it.
    let table = ferry_tests::duckdb::events_table(&origin.store_dir());
    let mut rows = Vec::new();
    ferry_tests::until("the download events are in the raw log", || {
        if !origin
            .stored_files()
            .iter()
            .any(|f| f.starts_with("telemetry/events/"))
        {
            return false;
        }
        rows = ferry_tests::duckdb::query(&format!(
            "SELECT model, s.source AS source, s.bytes AS bytes, s.failures AS failures, \
             s.error AS error FROM {table}, \
             UNNEST(from_json(sources, '[{{\"source\":\"VARCHAR\",\"bytes\":\"UBIGINT\",\
             \"failures\":\"UINTEGER\",\"error\":\"VARCHAR\"}}]')) AS t(s) \
             WHERE kind = 'download' ORDER BY model, source"
        ));
        rows.len() >= 4
    });
    let row = |model: &str, source: &str| {
        rows.iter()
            .find(|r| r["model"] == model && r["source"] == source)
            .unwrap_or_else(|| panic!("{model} {source} in {rows:?}"))
            .clone()
    };
    assert_eq!(row("src", &dead)["failures"], 1);
    assert_eq!(row("src", &dead)["error"], "network");
    assert_eq!(row("src", &lying)["error"], "hash_mismatch");
    assert_eq!(row("src", ORIGIN)["bytes"], program + asset);
    assert_eq!(row("src2", ORIGIN)["bytes"], asset2);
    assert_eq!(
        rows.iter().filter(|r| r["model"] == "src2").count(),
        1,
        "the second download used the origin alone: {rows:?}"
    );
}

#[test]
fn a_delta_update_takes_the_next_source_for_the_ranges_a_lying_cdn_got_wrong() {
    use super::delta::{LARGE, World, fine_tuned};
    let v1 = noise(LARGE, 11);
    let world = World::new(&v1, fine_tuned(&v1));
    // The CDN serves the chunk index as it is, then flips a bit in the first range it serves.
    let liar = FaultProxy::start(world.app.server.addr);
    liar.blob_faults([Fault::Pass, Fault::FlipByte(1000)]);
    let lying = format!("{}/v1/blobs/sha256/", liar.url());
    let edge = edge(&world.app, &[lying.clone(), ORIGIN.to_string()]);
    let before = edge.state.metrics().render();
    let c = world.load_v2(&edge.url());
    let ranges: Vec<Option<String>> = liar
        .log()
        .into_iter()
        .filter(|l| l.line.contains("/v1/blobs/"))
        .map(|l| l.range)
        .collect();
    // The index, then one range, from the CDN; every later range from the origin.
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert!(ranges[0].is_none() && ranges[1].is_some(), "{ranges:?}");
    assert!(c.send_telemetry().sent >= 1);
    let after = edge.state.metrics().render();
    let grew = |line: &str| counter(&after, line) - counter(&before, line);
    assert_eq!(
        grew(&format!(
            "ferry_source_failures_total{{source=\"{lying}\",error=\"hash_mismatch\"}}"
        )),
        1,
        "{after}"
    );
    let from_origin = grew(&format!("ferry_source_bytes_total{{source=\"{ORIGIN}\"}}"));
    // Still a delta: the changed 5% and the chunks around it, not the whole file again.
    assert!(
        from_origin > 0 && from_origin <= LARGE as u64 / 10,
        "{from_origin} bytes from the origin for a {LARGE}-byte file with 5% changed"
    );
}
