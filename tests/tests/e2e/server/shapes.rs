//! Request shapes (issue 47, point 8): one nesting rule for unknown fields on every device
//! endpoint, and a telemetry answer that stays small whatever the batch holds.

use ferry_tests::app::{TestApp, mlp_v1, profile};
use ferry_tests::kit::Event;

/// An unknown field nested `depth` arrays deep.
fn deep(depth: usize) -> serde_json::Value {
    let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    // Built as text: serde_json's own parser stops at 128 levels.
    serde_json::Value::String(text)
}

/// `value` with the field `future` replaced by the raw text held in it.
fn with_raw_future(value: &serde_json::Value) -> Vec<u8> {
    let raw = value["future"].as_str().expect("raw text").to_string();
    let mut v = value.clone();
    v["future"] = serde_json::Value::String("@@".into());
    serde_json::to_string(&v)
        .expect("json")
        .replace("\"@@\"", &raw)
        .into_bytes()
}

#[test]
fn unknown_fields_are_ignored_at_any_depth_in_telemetry_as_in_resolve() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    for depth in [10, 129, 10_000] {
        let mut event = Event::load("mlp", "1.0.0", "xnnpack-fp32").json();
        event["future"] = deep(depth);
        let body = format!(
            "{{\"events\":[{}]}}",
            String::from_utf8(with_raw_future(&event)).expect("utf-8")
        );
        let (s, r) = app.post_raw("/v1/telemetry", body.as_bytes(), None);
        assert_eq!(
            (s, r["accepted"].as_u64()),
            (200, Some(1)),
            "depth {depth}: {r}"
        );

        let mut device = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
        device["future"] = deep(depth);
        let (s, r) = app.post_raw("/v1/resolve", &with_raw_future(&device), None);
        assert_eq!(s, 200, "depth {depth}: {r}");
    }
    // Nesting in a known field is still an error where the field's type does not allow it.
    let mut event = Event::load("mlp", "1.0.0", "xnnpack-fp32").json();
    event["future"] = deep(3);
    let body = format!(
        "{{\"events\":[{}]}}",
        String::from_utf8(with_raw_future(&event))
            .expect("utf-8")
            .replace("\"model\":\"mlp\"", "\"model\":[[\"mlp\"]]")
    );
    let (s, r) = app.post_raw("/v1/telemetry", body.as_bytes(), None);
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["rejected"][0]["code"], "event_invalid", "{r}");
}

#[test]
fn a_batch_of_bad_events_gets_a_small_answer() {
    let app = TestApp::start();
    let body = format!("{{\"events\":[{}]}}", vec!["{}"; 500].join(","));
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut r = agent
        .post(app.at("/v1/telemetry"))
        .header("content-type", "application/json")
        .send(body.as_bytes())
        .expect("telemetry");
    assert_eq!(r.status().as_u16(), 200);
    let text = r.body_mut().read_to_string().expect("body");
    let answer: serde_json::Value = serde_json::from_str(&text).expect("json");
    let rejected = answer["rejected"].as_array().expect("rejected");
    assert_eq!(rejected.len(), 500, "every rejected event keeps its index");
    assert!(
        rejected
            .iter()
            .enumerate()
            .all(|(i, e)| e["index"] == i && e["code"] == "event_invalid"),
        "{text}"
    );
    let with_message = rejected
        .iter()
        .filter(|e| !e["message"].as_str().unwrap_or("").is_empty())
        .count();
    assert_eq!(with_message, 32, "the first 32 say why");
    assert!(
        text.len() < 32 << 10,
        "{} bytes for a {} byte batch",
        text.len(),
        body.len()
    );
}

#[test]
fn made_up_operator_digests_are_limited_per_address_and_known_ones_are_not() {
    let app = TestApp::start_with(ferry_tests::app::Options {
        tweak: Some(Box::new(|c| c.limits.unknown_digests_per_minute = 5)),
        ..Default::default()
    });
    app.publish(&mlp_v1());
    let request = |ops: &[String], with_list: bool| {
        let mut req = profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
        req["operators_digest"] = ferry_shared::select::operators::digest(ops).to_hex().into();
        if with_list {
            req["operators"] = serde_json::json!(ops);
        }
        req
    };
    // A real runtime sends its list once; its digest is known from then on.
    let real: Vec<String> = vec!["aten::add.out".into(), "aten::mm.out".into()];
    let (s, r) = app.resolve(&request(&real, true), false);
    assert_eq!(s, 200, "{r}");
    for i in 0..5 {
        let made_up = vec![format!("x::op{i}.out")];
        let (s, r) = app.resolve(&request(&made_up, false), false);
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["operators_wanted"], true, "{r}");
    }
    let (s, r) = app.resolve(&request(&["x::op99.out".to_string()], false), false);
    assert_eq!((s, r["code"].as_str()), (429, Some("rate_limited")), "{r}");
    // The known digest costs nothing: still answered, with no list wanted.
    let (s, r) = app.resolve(&request(&real, false), false);
    assert_eq!(s, 200, "{r}");
    assert!(r.get("operators_wanted").is_none_or(|w| w == false), "{r}");
    // An operator sees each outcome.
    let metrics = app.metrics();
    for line in [
        r#"ferry_operator_sets_total{outcome="stored"} 1"#,
        r#"ferry_operator_sets_total{outcome="unknown"} 5"#,
        r#"ferry_operator_sets_total{outcome="limited"} 1"#,
        r#"ferry_operator_sets_total{outcome="known"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
}

#[test]
fn a_flood_of_bad_requests_gets_a_bounded_number_of_log_lines() {
    let app = TestApp::start();
    for _ in 0..100 {
        let (s, _) = app.post_raw("/v1/resolve", b"[1, 2, 3]", None);
        assert_eq!(s, 400);
    }
    let metrics = app.metrics();
    let dropped = metrics
        .lines()
        .find(|l| l.starts_with("ferry_request_log_lines_dropped_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0);
    // 100 requests take at most a few seconds here: at most 20 lines in each.
    assert!(dropped >= 40.0, "{dropped}: {metrics}");
}
