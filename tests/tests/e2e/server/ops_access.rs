//! Who may read `/metrics` (issue 47, point 6): the figures name every model, its rollout
//! share, failure rates and deny counts, so on the devices' listener they need a token with
//! the read scope; `metrics_listen` serves them without one on a listener of their own.

use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp};

fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut req = agent.get(url);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let mut r = req.call().expect("request");
    (
        r.status().as_u16(),
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

#[test]
fn metrics_on_the_devices_listener_need_a_read_token() {
    let app = TestApp::start();
    let (s, body) = get(&app.at("/metrics"), None);
    assert_eq!(s, 401, "{body}");
    assert!(
        body.contains("unauthorized")
            && body.contains("read scope")
            && body.contains("metrics_listen"),
        "{body}"
    );
    let (s, body) = get(&app.at("/metrics"), Some("not-a-token-at-all-0123"));
    assert_eq!(s, 401, "{body}");
    for token in [READ_TOKEN, ADMIN_TOKEN] {
        let (s, body) = get(&app.at("/metrics"), Some(token));
        assert_eq!(s, 200);
        assert!(body.contains("ferry_build_info"), "{body}");
    }
    // Liveness and readiness stay open (load balancers probe them without a token).
    assert_eq!(get(&app.at("/healthz"), None).0, 200);
    assert_eq!(get(&app.at("/readyz"), None).0, 200);
}

#[test]
fn metrics_listen_serves_metrics_without_a_token_and_nothing_else() {
    let app = TestApp::start_with(Options {
        tweak: Some(Box::new(|c| {
            c.metrics_listen = Some("127.0.0.1:0".parse().expect("addr"));
        })),
        ..Default::default()
    });
    let at = app.server.metrics_addr.expect("a metrics listener");
    assert_ne!(at, app.server.addr);
    let base = format!("http://{at}");
    let (s, body) = get(&format!("{base}/metrics"), None);
    assert_eq!(s, 200);
    assert!(body.contains("ferry_build_info"), "{body}");
    assert_eq!(get(&format!("{base}/healthz"), None).0, 200);
    assert_eq!(get(&format!("{base}/readyz"), None).0, 200);
    for path in ["/v1/admin/models", "/v1/keys", "/ui", "/v1/resolve"] {
        let (s, body) = get(&format!("{base}{path}"), Some(ADMIN_TOKEN));
        assert_eq!(s, 404, "{path}: {body}");
    }
    // The main listener still wants a token.
    assert_eq!(get(&app.at("/metrics"), None).0, 401);
}
