//! One host cannot deny a device class its variant (issue 47, point 2), and behind a real
//! proxy (nginx) the limits and the network quorum see the devices, not the proxy.
//!
//! Client networks are real peer addresses: Linux routes all of 127.0.0.0/8 to the loopback
//! interface, so connections bound to 127.0.1.1, 127.0.2.1 and 127.0.3.1 come from three /24
//! networks ([`ferry_tests::sourced`]).

use std::net::IpAddr;

use ferry_server::fleet::config::TelemetryConfig;
use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1};
use ferry_tests::kit::Event;
use ferry_tests::nginx::Nginx;
use ferry_tests::reports::{deny_entries, model_health, variant_rows};
use ferry_tests::sourced::post_json;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

/// The attack of the issue: each made-up install (`<tag>-<i>`, `n` of them) sends 4 failed
/// loads of `vulkan-fp32` and 4 fallbacks to `portable-fp32` on `phone-SM8450`, with the
/// receipts a resolve would have given it.
fn made_up_devices(app: &TestApp, tag: &str, n: usize) -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    for i in 0..n {
        let install = format!("{tag}-{i}");
        for _ in 0..4 {
            let load = Event::load("mlp", "1.0.0", "vulkan-fp32")
                .install(&install)
                .soc("SM8450")
                .failed("runtime_load_failed");
            events.push(load.clone().json());
            events.push(
                load.set("kind", "fallback")
                    .set("to_variant", "portable-fp32")
                    .json(),
            );
        }
    }
    app.with_receipts(&events)
}

/// Sends `events` to `base` from `source` (through whatever `base` is), all accepted.
fn send(source: IpAddr, base: &str, events: &[serde_json::Value]) {
    for chunk in events.chunks(400) {
        let (s, r) = post_json(
            source,
            base,
            "/v1/telemetry",
            &serde_json::json!({ "events": chunk }),
            &[],
        );
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["accepted"].as_u64(), Some(chunk.len() as u64), "{r}");
    }
}

fn denied(app: &TestApp) -> Vec<String> {
    app.settle();
    deny_entries(&app.url(), "mlp", ADMIN_TOKEN)
        .iter()
        .map(|e| format!("{}@{}", e["variant"].as_str().unwrap_or(""), e["value"]))
        .collect()
}

/// A server with the shipped telemetry defaults (a network quorum of 3, 50 new installs per
/// address an hour), evaluating after every batch, and `limits` changed by `tweak`.
fn defaults(tweak: impl FnOnce(&mut ferry_server::app::config::Config) + 'static) -> TestApp {
    let app = TestApp::start_with(Options {
        tweak: Some(Box::new(move |c| {
            let shipped = TelemetryConfig::default();
            c.telemetry.deny_min_networks = shipped.deny_min_networks;
            c.telemetry.evidence_installs_per_address_per_hour =
                shipped.evidence_installs_per_address_per_hour;
            c.telemetry.evaluate_ms = 0;
            tweak(c);
        })),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    app
}

#[test]
fn one_host_with_made_up_devices_cannot_deny_a_device_class_by_default() {
    assert_eq!(TelemetryConfig::default().deny_min_networks, 3);
    let app = defaults(|_| {});
    // 30 devices, 240 events with receipts, 100% fallback of 120 loads: from one address,
    // nothing is learned.
    send(
        ip("127.0.0.1"),
        &app.url(),
        &made_up_devices(&app, "one-host", 30),
    );
    assert!(denied(&app).is_empty(), "{:?}", denied(&app));
    // The same failures from three networks are a real pattern: learned.
    for (n, source) in ["127.0.1.1", "127.0.2.1", "127.0.3.1"].iter().enumerate() {
        send(
            ip(source),
            &app.url(),
            &made_up_devices(&app, &format!("net{n}"), 10),
        );
    }
    let list = denied(&app);
    assert!(
        list.iter().any(|e| e.starts_with("vulkan-fp32@")),
        "{list:?}"
    );
}

#[test]
fn one_address_brings_at_most_50_new_devices_an_hour_into_the_evidence() {
    // The network quorum off, to see the allowance alone.
    let app = defaults(|c| c.telemetry.deny_min_networks = 0);
    send(
        ip("127.0.0.1"),
        &app.url(),
        &made_up_devices(&app, "nat", 120),
    );
    assert_eq!(
        vulkan_loads(&app),
        50 * 4,
        "120 devices from one address weigh as 50"
    );
    let metrics = app.metrics();
    assert!(
        metrics.contains("ferry_telemetry_events_total{outcome=\"unweighed\"} 560"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("ferry_telemetry_events"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Another address brings its own 50.
    send(
        ip("127.0.9.1"),
        &app.url(),
        &made_up_devices(&app, "other", 10),
    );
    assert_eq!(vulkan_loads(&app), 50 * 4 + 10 * 4);
}

/// Loads of `vulkan-fp32` in the model's health, as ops read it.
fn vulkan_loads(app: &TestApp) -> u64 {
    app.settle();
    let health = model_health(&app.url(), "mlp", READ_TOKEN);
    variant_rows(&health, None)
        .iter()
        .filter(|v| v["variant"] == "vulkan-fp32")
        .map(|v| v["loads"].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn behind_a_trusted_proxy_limits_and_the_quorum_see_the_devices() {
    let app = defaults(|c| {
        c.limits.trusted_proxies = vec!["127.0.0.1/32".parse().expect("net")];
        c.telemetry.per_address_per_minute = 20;
    });
    let nginx = Nginx::reverse_proxy(&app.url());
    // Three networks through one proxy: learned.
    for (n, source) in ["127.0.1.1", "127.0.2.1", "127.0.3.1"].iter().enumerate() {
        send(
            ip(source),
            &nginx.url,
            &made_up_devices(&app, &format!("p{n}"), 10),
        );
    }
    let list = denied(&app);
    assert!(
        list.iter().any(|e| e.starts_with("vulkan-fp32@")),
        "{list:?}"
    );

    // The per-address limit counts each device's address, not the proxy's.
    let empty = serde_json::json!({ "events": [] });
    let via = |source: &str, headers: &[(&str, &str)]| {
        post_json(ip(source), &nginx.url, "/v1/telemetry", &empty, headers)
    };
    for _ in 0..20 {
        assert_eq!(via("127.0.4.1", &[]).0, 200);
    }
    let (s, r) = via("127.0.4.1", &[]);
    assert_eq!(s, 429, "{r}");
    assert!(
        r["message"].as_str().unwrap_or("").contains("127.0.4.1"),
        "{r}"
    );
    assert_eq!(
        via("127.0.5.1", &[]).0,
        200,
        "another device is not limited"
    );
    // A device cannot pick its address by writing the header itself: nginx appends the real
    // one, and that is the hop believed.
    let (s, r) = via("127.0.4.1", &[("X-Forwarded-For", "127.0.6.1")]);
    assert_eq!(s, 429, "{r}");
    // Nor can a client that reaches the server directly (it is no trusted proxy).
    for i in 0..21 {
        let forged = format!("127.0.{}.1", 100 + i);
        let (s, r) = post_json(
            ip("127.0.7.1"),
            &app.url(),
            "/v1/telemetry",
            &empty,
            &[("X-Forwarded-For", &forged)],
        );
        assert_eq!(s, if i < 20 { 200 } else { 429 }, "request {i}: {r}");
    }
}

#[test]
fn behind_an_untrusted_proxy_every_device_is_the_proxy() {
    // The same three networks through nginx, but nginx is not listed: one network, nothing
    // learned (the reason to list a proxy in limits.trusted_proxies).
    let app = defaults(|_| {});
    let nginx = Nginx::reverse_proxy(&app.url());
    for (n, source) in ["127.0.1.1", "127.0.2.1", "127.0.3.1"].iter().enumerate() {
        send(
            ip(source),
            &nginx.url,
            &made_up_devices(&app, &format!("u{n}"), 10),
        );
    }
    assert!(denied(&app).is_empty(), "{:?}", denied(&app));
}
