//! Made-up SDK names cannot push the real SDKs out of the client census or the metrics
//! (issue 47, point 5): a name takes a row of its own only once receipted telemetry from
//! `telemetry.census_min_networks` client networks named it, and one address vouches for a
//! few names an hour. Client networks are real source addresses in 127.0.0.0/8
//! ([`ferry_tests::sourced`]); the fleet is three replicas on one store.

use std::net::IpAddr;

use ferry_server::fleet::config::{SDK_NAMES_PER_NETWORK_PER_HOUR, TelemetryConfig};
use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1};
use ferry_tests::kit::Event;
use ferry_tests::releases::profile;
use ferry_tests::sourced::post_json;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

/// The shipped vouching threshold, fast flushes.
fn vouching(c: &mut ferry_server::app::config::Config) {
    c.telemetry.census_min_networks = TelemetryConfig::default().census_min_networks;
    ferry_tests::fast_telemetry(c);
}

/// Resolves `mlp` at `base` as install `install` of SDK `sdk`, from `source`.
fn resolve_as(source: IpAddr, base: &str, install: &str, sdk: &str) {
    let mut dev = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    dev["install_id"] = install.into();
    let (s, body) = post_json(
        source,
        base,
        "/v1/resolve",
        &dev,
        &[("Ferry-Protocol", "1"), ("Ferry-Sdk", sdk)],
    );
    assert_eq!(s, 200, "{body}");
}

/// Sends one receipted load of install `install` to `base` from `source`, as SDK `sdk`.
fn report_as(app: &TestApp, source: IpAddr, base: &str, install: &str, sdk: &str) {
    let events = app.with_receipts(&[Event::load("mlp", "1.0.0", "portable-fp32")
        .install(install)
        .json()]);
    let (s, r) = post_json(
        source,
        base,
        "/v1/telemetry",
        &serde_json::json!({ "events": events }),
        &[("Ferry-Protocol", "1"), ("Ferry-Sdk", sdk)],
    );
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["accepted"], 1, "{r}");
    assert_eq!(r["unverified"], 0, "{r}");
}

/// The client census rows of `mlp` as `base` answers them.
fn client_rows(app: &TestApp, base: &str) -> Vec<serde_json::Value> {
    let mut resp = app
        .agent
        .get(format!("{base}/v1/admin/models/mlp/health"))
        .header("authorization", format!("Bearer {READ_TOKEN}"))
        .call()
        .expect("health");
    let h: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("text")).expect("json");
    h["clients"]["by_client"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The `/metrics` text of `base` (a replica: it knows the admin token alone).
fn metrics_of(base: &str) -> String {
    let mut r = ureq::get(format!("{base}/metrics"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .expect("metrics");
    r.body_mut().read_to_string().expect("text")
}

const REAL: &str = "acme-kit/2.0";

/// The rust client's label line for resolves of the real SDK.
fn real_label(metrics: &str) -> bool {
    metrics.contains(
        r#"ferry_device_requests_total{endpoint="resolve",protocol="1",sdk="acme-kit/2.0"}"#,
    )
}

#[test]
fn made_up_sdk_names_from_one_host_never_take_a_row_and_the_real_sdk_keeps_its_own() {
    assert_eq!(TelemetryConfig::default().census_min_networks, 3);
    let app = TestApp::start_with(Options {
        tweak: Some(Box::new(vouching)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    let replicas: Vec<_> = (0..2)
        .map(|_| app.replica_with(None, Box::new(vouching)))
        .collect();
    let urls: Vec<String> = std::iter::once(app.url())
        .chain(replicas.iter().map(|r| r.url()))
        .collect();

    // The attacker: 60 made-up names, each resolving and reporting with a real receipt, from
    // one address, spread over the three replicas.
    let attacker = ip("127.0.9.1");
    for i in 0..60 {
        let (install, sdk) = (format!("junk-{i}"), format!("junk-{i}/1.0"));
        let base = &urls[i % 3];
        resolve_as(attacker, base, &install, &sdk);
        report_as(&app, attacker, base, &install, &sdk);
    }
    // The real SDK: a device in each of three networks, each on its own replica.
    let sources = ["127.0.1.1", "127.0.2.1", "127.0.3.1"].map(ip);
    for (n, source) in sources.iter().enumerate() {
        let install = format!("acme-{n}");
        resolve_as(*source, &urls[n], &install, REAL);
        report_as(&app, *source, &urls[n], &install, REAL);
    }
    // Vouched fleet-wide within a few flushes: the first replica counts the real SDK's next
    // resolves under its own row and label.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !real_label(&app.metrics()) {
        assert!(
            std::time::Instant::now() < deadline,
            "never vouched: {}",
            app.metrics()
        );
        resolve_as(sources[0], &app.url(), "acme-0", REAL);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for (n, source) in sources.iter().enumerate() {
        resolve_as(*source, &app.url(), &format!("acme-{n}"), REAL);
    }
    let metrics = app.metrics();
    assert!(!metrics.contains("junk-"), "{metrics}");
    let others = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                r#"ferry_device_requests_total{endpoint="resolve",protocol="1",sdk="other"}"#,
            )
        })
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse::<f64>().ok());
    assert!(others.is_some_and(|n| n >= 20.0), "{metrics}");

    // The census: the real SDK has its row, the made-up names none (their devices are
    // counted, under `other`).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let row = |rows: &[serde_json::Value]| {
        rows.iter()
            .find(|r| r["sdk"] == "acme-kit" && r["sdk_version"] == "2.0")
            .map(|r| r["devices"].as_u64().unwrap_or(0))
    };
    let mut rows = client_rows(&app, &app.url());
    while row(&rows) != Some(3) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        rows = client_rows(&app, &app.url());
    }
    assert_eq!(row(&rows), Some(3), "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| !r["sdk"].as_str().unwrap_or("").starts_with("junk")),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r["protocol"] == "1"
            && r["sdk"] == "other"
            && r["devices"].as_u64() >= Some(60)),
        "{rows:?}"
    );

    // A new replica (a restart: nothing in memory) reads the vouches from the store.
    drop(replicas);
    let fresh = app.replica_with(None, Box::new(vouching));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        resolve_as(sources[1], &fresh.url(), "acme-1", REAL);
        if real_label(&metrics_of(&fresh.url())) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new replica never read the vouches"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(!metrics_of(&fresh.url()).contains("junk-"));
}

#[test]
fn three_networks_vouch_for_a_few_names_an_hour_each() {
    let app = TestApp::start_with(Options {
        tweak: Some(Box::new(vouching)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    // An attacker with three networks names 10 SDKs from each: only the first names of each
    // address count (SDK_NAMES_PER_NETWORK_PER_HOUR), so only those can reach three networks.
    let sources = ["127.0.4.1", "127.0.5.1", "127.0.6.1"].map(ip);
    for source in sources {
        for i in 0..10 {
            let (install, sdk) = (format!("{source}-{i}"), format!("spread-{i}/1.0"));
            report_as(&app, source, &app.url(), &install, &sdk);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let labelled = |m: &str| {
        (0..10)
            .filter(|i| {
                m.contains(&format!(
                    r#"ferry_device_requests_total{{endpoint="resolve",protocol="1",sdk="spread-{i}/1.0"}}"#
                ))
            })
            .count()
    };
    loop {
        for i in 0..10 {
            resolve_as(sources[0], &app.url(), "probe", &format!("spread-{i}/1.0"));
        }
        let n = labelled(&app.metrics());
        if n == SDK_NAMES_PER_NETWORK_PER_HOUR {
            break;
        }
        assert!(n < SDK_NAMES_PER_NETWORK_PER_HOUR, "{}", app.metrics());
        assert!(std::time::Instant::now() < deadline, "{}", app.metrics());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let m = app.metrics();
    assert!(
        m.contains(r#"sdk="spread-0/1.0""#) && !m.contains(r#"sdk="spread-9/1.0""#),
        "{m}"
    );
}
