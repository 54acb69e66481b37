//! The dashboard (`/ui`) in a real browser: headless Chromium (Debian's) driven by
//! playwright-core (`tests/ui/dashboard.cjs`) against a real server with real fixtures and
//! telemetry. Signed out the page shows only the sign-in form and the admin API gives it
//! nothing; signed in it lists the models, shows a release's delegation report, moves a
//! rollout from 5% to 20% (and resolve answers follow), shows a halt triggered by telemetry
//! with its reason, charts the rates with the gates, overrides a deny entry, and explains what
//! a device would get. Each step leaves a screenshot in `target/dashboard-screenshots/`.

use std::path::PathBuf;

use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1, mlp_v2};
use ferry_tests::browser::step;
use ferry_tests::kit::Event;

fn shots() -> PathBuf {
    ferry_tests::browser::screenshots()
}

/// Runs one phase of the browser script; returns the JSON lines it printed.
fn browse(phase: &str, app: &TestApp) -> Vec<serde_json::Value> {
    let shots = shots();
    ferry_tests::browser::run(
        "dashboard.cjs",
        &[phase, &app.url(), ADMIN_TOKEN, &shots.display().to_string()],
    )
}

fn dev(install: &str, soc: &str) -> serde_json::Value {
    serde_json::json!({
        "model": "mlp", "install_id": install, "app_version": "2.0.0", "runtime_version": "1.5.1",
        "backends": ["XnnpackBackend", "VulkanBackend"], "platform": "android", "os_version": "14",
        "device_model": "Pixel 8", "soc": soc, "ram_mb": 8192
    })
}

/// Share of `n` install ids that resolve to release 2.0.0.
fn staged_share(app: &TestApp, n: usize) -> f64 {
    let mut staged = 0;
    for i in 0..n {
        let (status, body) = app.resolve(&dev(&format!("ui-dev-{i}"), "SM8550"), false);
        assert_eq!(status, 200, "{body}");
        let (d, _) = app.verify_response(&body);
        if d.release.to_string() == "2.0.0" {
            staged += 1;
        }
    }
    staged as f64 / n as f64
}

fn event(kind: &str, outcome: &str, variant: &str, install: &str, soc: &str) -> serde_json::Value {
    let mut e = Event::new(kind, "mlp", "2.0.0", variant)
        .outcome(outcome)
        .install(install)
        .soc(soc)
        .set("device_model", "Pixel 8")
        .set("load_ms", 14.0);
    if outcome == "failed" {
        e = e
            .set("error_code", "runtime_load_failed")
            .set("stage", "load_method");
    }
    if kind == "fallback" {
        e = e.set("to_variant", "xnnpack-fp32");
    }
    e.json()
}

/// Release 2.0.0 with notes that look like markup, signed metadata, and an evaluation (made up
/// here: the page shows what is signed) whose override reason looks like markup too.
fn publish_v2(app: &TestApp) {
    // Release notes are the publisher's text: the page must show them as text.
    let mut v2 = mlp_v2();
    v2.notes = "<img src=x onerror=alert(1)> new weights".into();
    v2.labels = Some("../eval/digits-labels.txt".into());
    v2.preprocess = Some(
        toml::from_str(
            "resize = { width = 4, height = 4, filter = \"bilinear\" }\ncolor = \"rgb\"",
        )
        .expect("toml"),
    );
    app.publish_with(&v2, |m| {
        let ids: Vec<String> = m.variants.iter().map(|v| v.id.to_string()).collect();
        m.evaluation = Some(
            serde_json::from_value(serde_json::json!({
                "dataset_sha256": "ab".repeat(32), "samples": 500, "metric": "top1",
                "reference": ids[0], "max_drop": 0.01, "runtime_version": "1.5.1",
                "results": ids.iter().enumerate().map(|(i, id)| (id.clone(), serde_json::json!({
                    "id": id, "evaluated": true, "metric": "top1", "value": 0.9 - 0.3 * i as f64,
                    "drop": 0.33 * i as f64, "passed": i == 0,
                    "why_not": (i > 0).then_some("<b>dropped</b> too far"),
                }))).collect::<serde_json::Map<_, _>>(),
                "override": {"reason": "<script>kept</script> for the bisect", "failed": ids[1..]},
            }))
            .expect("evaluation"),
        );
    });
}

#[test]
fn an_operator_runs_a_rollout_from_the_dashboard() {
    let app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(|c| {
            c.telemetry.deny_min_samples = 30;
            c.telemetry.flush_secs = 1;
            c.telemetry.raw_roll_secs = 1;
            c.telemetry.evaluate_ms = 0;
        })),
    });
    let _ = std::fs::remove_dir_all(shots());
    std::fs::create_dir_all(shots()).expect("screenshot folder");
    app.publish(&mlp_v1());
    publish_v2(&app);
    let (s, plan) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(&serde_json::json!({"action": "start", "release": "2.0.0",
            "percent": "5", "max_failure_rate": 0.5, "max_fallback_rate": 0.2,
            "min_samples": 60}))
        .expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{plan}");
    let before = staged_share(&app, 2000);
    assert!((0.03..0.07).contains(&before), "{before}");

    let lines = browse("rollout", &app);
    first_pass(&app, &lines, before);
    let reason = fail_on_one_soc(&app);
    let mut screenshots: Vec<String> = lines
        .iter()
        .filter(|l| l["step"] == "screenshot")
        .map(|l| l["file"].as_str().expect("file").to_string())
        .collect();
    let lines = browse("halted", &app);
    screenshots.extend(
        lines
            .iter()
            .filter(|l| l["step"] == "screenshot")
            .map(|l| l["file"].as_str().expect("file").to_string()),
    );
    let halted = step(&lines, "halted");
    assert_eq!(halted["reason"], format!("Halted: {reason}"), "{halted}");
    assert!(
        halted["models"][0][5]
            .as_str()
            .unwrap_or_default()
            .starts_with("halted"),
        "{halted}"
    );
    let health = step(&lines, "health");
    assert_eq!(
        health["titles"],
        serde_json::json!(["Load failure rate (UTC)", "Fallback rate (UTC)"])
    );
    // Only 2.0.0 reported in the window: it and the gate are drawn.
    for legend in ["2.0.0 (staged)", "halt threshold"] {
        assert!(
            health["legends"]
                .as_array()
                .expect("legends")
                .iter()
                .any(|l| l == legend),
            "{legend}: {health}"
        );
    }
    let heat = health["heat"].as_array().expect("heat");
    let sm8350 = heat.iter().find(|r| r[0] == "SM8350").expect("SM8350 row");
    // Every load on SM8350 fell back; none on SM8550.
    assert_eq!(sm8350, &serde_json::json!(["SM8350", "100%"]), "{heat:?}");
    assert!(
        heat.iter()
            .any(|r| r == &serde_json::json!(["SM8550", "0%"])),
        "{heat:?}"
    );
    // The devices that resolved sent no Ferry-Protocol header (the test's plain requests): they
    // are listed as clients from before protocol v1.
    let clients = health["clients"].as_array().expect("clients");
    assert!(
        clients
            .iter()
            .any(|r| r[0] == "legacy (before v1)" && r[1] == "unknown" && r[4] == "100%"),
        "{clients:?}"
    );
    health_tables(health);
    // The page said what the override does to which devices before sending it, and only
    // then did it reach the server.
    let override_row = step(&lines, "deny_override");
    let effect = override_row["effect"].as_str().unwrap_or_default();
    assert!(
        effect.contains("SoC SM8350") && effect.contains("offered") && effect.contains("again"),
        "{override_row}"
    );
    assert_eq!(override_row["before"], "deny", "{override_row}");
    assert!(
        override_row["row"]
            .as_str()
            .unwrap_or_default()
            .contains("allow"),
        "{override_row}"
    );
    let (_, d) = app.get_json("/v1/admin/models/mlp/deny", Some(READ_TOKEN));
    assert!(
        d["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .any(|e| e["state"] == "allow" && e["value"] == "SM8350"),
        "{d}"
    );
    // Explain gives what the resolve API answers for the same profile.
    let explain = step(&lines, "explain");
    let mut profile = dev("explain-device-1", "SM8550");
    profile["device_model"] = "Pixel 8".into();
    let (s, body) = app.resolve(&profile, true);
    assert_eq!(s, 200, "{body}");
    let chosen = body["explain"]
        .as_array()
        .expect("explain")
        .iter()
        .filter(|e| e.get("rank").is_some())
        .min_by_key(|e| e["rank"].as_u64())
        .expect("a chosen variant")
        .clone();
    let said = explain["chosen"].as_str().expect("chosen");
    assert!(
        said.starts_with(&format!(
            "Gets {} {}",
            chosen["release"].as_str().expect("release"),
            chosen["variant"].as_str().expect("variant")
        )),
        "{said} vs {chosen}"
    );
    assert_eq!(step(&lines, "unknown_route")["models_shown"], false);
    assert_eq!(step(&lines, "signed_out_again")["stored"], 0);
    // Every step left a screenshot: a PNG in the test output.
    assert_eq!(screenshots.len(), 10, "{screenshots:?}");
    for f in &screenshots {
        let png = std::fs::read(f).expect("screenshot");
        assert!(png.starts_with(b"\x89PNG") && png.len() > 1000, "{f}");
    }
}

/// The first pass through the page: signing in, the models table, the release page with its
/// notes as text and its delegation report, and the rollout moved from 5% to 20%.
fn first_pass(app: &TestApp, lines: &[serde_json::Value], before: f64) {
    // Signed out: the page asked the admin API nothing; a wrong token got nothing.
    assert_eq!(step(lines, "signed_out")["admin_requests"], 0);
    let wrong = step(lines, "wrong_token");
    assert!(
        wrong["message"]
            .as_str()
            .unwrap_or_default()
            .contains("unauthorized"),
        "{wrong}"
    );
    assert_eq!(wrong["tables"], 0);
    assert!(
        wrong["admin"]
            .as_array()
            .expect("admin")
            .iter()
            .all(|r| r["status"] == 401),
        "{wrong}"
    );
    // The models table.
    let models = step(lines, "models")["rows"]
        .as_array()
        .expect("rows")
        .clone();
    assert_eq!(models.len(), 1, "{models:?}");
    assert_eq!(models[0][0], "mlp");
    assert_eq!(models[0][1], "1.0.0");
    assert_eq!(models[0][2], "2.0.0 at 5%");
    // The release page: notes as text, and each variant's delegation report as the inspector
    // recorded it at publish.
    let release = step(lines, "release");
    assert_eq!(
        release["notes"], "<img src=x onerror=alert(1)> new weights",
        "{release}"
    );
    let (s, stored) = app.get_json("/v1/admin/models/mlp/releases/2.0.0", Some(READ_TOKEN));
    assert_eq!(s, 200);
    // The signed evaluation and metadata, shown as text (the publisher's words are not markup).
    let rows = release["evaluation"].as_array().expect("evaluation rows");
    let results = stored["evaluation"]["results"]
        .as_object()
        .expect("results");
    assert_eq!(rows.len(), results.len(), "{release}");
    assert_eq!(rows[0][3], "pass", "{release}");
    assert_eq!(rows[1][3], "FAIL: <b>dropped</b> too far", "{release}");
    assert!(
        release["override"]
            .as_str()
            .is_some_and(|o| o.ends_with(": <script>kept</script> for the bisect")),
        "{release}"
    );
    assert!(
        release["metadata"].as_str().is_some_and(
            |m| m.contains("preprocess: resize 4×4 bilinear, rgb; labels digits-labels.txt")
        ),
        "{release}"
    );
    let report = release["report"].as_array().expect("report");
    assert_eq!(
        report.len(),
        stored["variants"].as_array().expect("variants").len()
    );
    for section in report {
        let id = section["variant"].as_str().expect("id");
        let m = &stored["inspection"][id]["methods"][0];
        let row = &section["rows"][0];
        assert_eq!(row[0], m["name"], "{section}");
        assert_eq!(row[1], m["summary"], "{section}");
        let portable: Vec<String> = m["kernel_calls"]
            .as_object()
            .expect("kernel calls")
            .iter()
            .map(|(op, n)| format!("{op} ×{n}"))
            .collect();
        let want = if portable.is_empty() {
            "none".to_string()
        } else {
            portable.join(", ")
        };
        assert_eq!(row[3], want.as_str(), "{section}");
    }
    // The rollout moved from 5% to 20% through the page, after a preview of the share.
    let rollout = step(lines, "rollout");
    assert!(
        rollout["before"]
            .as_str()
            .unwrap_or_default()
            .contains("at 5%"),
        "{rollout}"
    );
    assert!(
        rollout["share"]
            .as_str()
            .unwrap_or_default()
            .contains("set the staged share to 20%: 15% of install ids change release"),
        "{rollout}"
    );
    assert!(
        rollout["stale"]
            .as_str()
            .unwrap_or_default()
            .contains("The form changed since the preview"),
        "{rollout}"
    );
    let (s, r) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    assert_eq!(s, 200);
    assert_eq!(r["current"]["basis_points"], 2000, "{r}");
    assert_eq!(r["current"]["reason"], "dashboard test: widen to 20%");
    let after = staged_share(app, 2000);
    assert!((0.17..0.23).contains(&after), "{before} -> {after}");
}

/// The health page's deny list and field-latency tables, as the browser read them.
fn health_tables(health: &serde_json::Value) {
    // The crashes: counted on the variant, and the staged release against the baseline.
    let variants = health["variants"].as_array().expect("variants");
    assert!(
        variants
            .iter()
            .any(|r| r[1] == "vulkan-fp32" && r[6] == "2 on 2 devices"),
        "{variants:?}"
    );
    let crashes = health["crashes"].as_str().unwrap_or_default();
    assert!(
        crashes.starts_with("Native crashes: staged 2 of ") && crashes.contains("baseline 0 of"),
        "{crashes}"
    );
    let deny = health["deny"].as_array().expect("deny");
    assert!(
        deny.iter().any(|r| r[2] == "SoC SM8350"
            && r[3] == "fallback (not offered)"
            && r[4].as_str().unwrap_or_default().contains("fallback of")),
        "the learned deny entry is listed: {deny:?}"
    );
    assert!(
        deny.iter().any(|r| r[2] == "SoC SM8550"
            && r[3]
                .as_str()
                .unwrap_or_default()
                .starts_with("slow in field")),
        "the hand-made slow_in_field entry is listed: {deny:?}"
    );
    // Field latency: the 45 devices' warm p95s, staged against baseline, and by SoC.
    let latency = health["latency"].as_array().expect("latency");
    let row: Vec<&str> = latency[0]
        .as_array()
        .expect("row")
        .iter()
        .map(|c| c.as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        row[..4],
        ["2.0.0 (staged)", "vulkan-fp32", "vulkan", "45"],
        "{latency:?}"
    );
    // Within the sketches' 1%: 12 ms median and p95 of the devices' p95s, 30 ms cold.
    for (i, want) in [(4, "12."), (5, "12."), (6, "30.")] {
        assert!(row[i].starts_with(want), "{i}: {row:?}");
    }
    let by_soc = health["latency_by_soc"].as_array().expect("by SoC");
    assert!(
        by_soc.iter().any(|r| {
            let cell = r[1].as_str().unwrap_or_default();
            r[0] == "SM8550" && cell.starts_with("12.") && cell.ends_with(" ms (45 devices)")
        }),
        "{by_soc:?}"
    );
}

/// Staged devices report Vulkan failing on one SoC: the rollout halts, that SoC is denied.
/// Returns the halt's reason.
fn fail_on_one_soc(app: &TestApp) -> String {
    // Staged devices report Vulkan failing on one SoC: the rollout halts, that SoC is denied.
    let mut events = Vec::new();
    for i in 0..90 {
        let id = format!("ui-staged-{i}");
        if i % 2 == 0 {
            events.push(event("load", "failed", "vulkan-fp32", &id, "SM8350"));
            events.push(event("fallback", "failed", "vulkan-fp32", &id, "SM8350"));
        } else {
            events.push(event("load", "ok", "vulkan-fp32", &id, "SM8550"));
            // The devices where it loads time their runs: 12 ms warm p95 (13 for the last).
            let mut run = event("inference", "ok", "vulkan-fp32", &id, "SM8550");
            let p95 = if i == 89 { 13.0 } else { 12.0 };
            for (k, v) in [("p50_ms", 9.0), ("p95_ms", p95), ("max_ms", 20.0)] {
                run[k] = v.into();
            }
            run["runs"] = 40.into();
            run["method"] = "forward".into();
            run["first_ms"] = 30.0.into();
            events.push(run);
        }
    }
    let events = app.with_receipts(&events);
    let (s, body) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json"),
        None,
    );
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["rejected"], serde_json::json!([]), "{body}");
    app.settle();
    let (_, r) = app.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
    assert_eq!(r["current"]["state"], "halted", "{r}");
    // An operator demotes Vulkan on SM8550 by hand: listed after the learned entry.
    let (s, body) = app.post_raw(
        "/v1/admin/models/mlp/deny",
        br#"{"action": "deny", "release": "2.0.0", "variant": "vulkan-fp32", "class": "soc",
             "value": "SM8550", "kind": "slow_in_field"}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{body}");
    // Two staged devices on SM8350 report that Vulkan crashed the app natively.
    let crashes: Vec<_> = (0..2)
        .map(|i| {
            event(
                "crash",
                "failed",
                "vulkan-fp32",
                &format!("ui-crash-{i}"),
                "SM8350",
            )
            .as_object()
            .cloned()
            .map(|mut e| {
                e.remove("load_ms");
                e.insert("error_code".into(), "crashed".into());
                serde_json::Value::Object(e)
            })
            .expect("object")
        })
        .collect();
    let (s, body) = app.post_raw(
        "/v1/telemetry",
        &serde_json::to_vec(&serde_json::json!({ "events": app.with_receipts(&crashes) }))
            .expect("json"),
        None,
    );
    assert_eq!(
        (s, &body["rejected"]),
        (200, &serde_json::json!([])),
        "{body}"
    );
    app.settle();

    r["current"]["reason"].as_str().expect("reason").to_string()
}

#[test]
fn the_dashboards_files_are_served_with_a_strict_policy_and_hold_no_data() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    // The server's root sends a browser to the dashboard.
    let agent = ureq::Agent::config_builder()
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .new_agent();
    let root = agent.get(app.at("/")).call().expect("get /");
    assert_eq!(root.status().as_u16(), 302);
    assert_eq!(
        root.headers().get("location").and_then(|v| v.to_str().ok()),
        Some("/ui")
    );
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/uPlot.iife.min.js", "text/javascript"),
        ("/ui/uPlot.min.css", "text/css"),
    ] {
        let mut resp = ureq::get(app.at(path)).call().expect("get");
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        assert!(header("content-type").starts_with(kind), "{path}");
        let csp = header("content-security-policy");
        assert!(
            csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert_eq!(header("x-content-type-options"), "nosniff");
        let body = resp.body_mut().read_to_string().expect("body");
        // Static files: no model, release or token in them.
        assert!(!body.contains("mlp-v1"), "{path}");
        assert!(!body.contains(ADMIN_TOKEN), "{path}");
    }
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    for path in ["/ui/nosuch.js", "/ui/..%2Fsrc%2Fmain.rs", "/ui/%00"] {
        let resp = agent.get(app.at(path)).call().expect("get");
        assert_eq!(resp.status().as_u16(), 404, "{path}");
    }
    // The series the charts read: a token is needed, and its parameters are checked.
    let series = |query: &str, token: Option<&str>| {
        app.get_json(&format!("/v1/admin/models/mlp/health/series{query}"), token)
    };
    assert_eq!(series("", None).0, 401);
    let (s, body) = series("", Some(READ_TOKEN));
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["step_secs"], 60, "6 hours fit in 1,440 minutes");
    assert!(body["points"].as_array().is_some(), "{body}");
    for (query, says) in [
        ("?step_secs=10", "from 60 to 2592000"),
        ("?step_secs=60&step_secs=120", "more than once"),
        ("?step_secs=sixty", "from 60 to 2592000"),
        ("?step_secs=9223372036854775807", "(30 days)"),
        ("?since=30d&step_secs=60", "more than 1440 points"),
        // Further back than 1,440 steps of 30 days: no step could hold it.
        ("?since=1800-01-01T00:00:00Z", "too far back"),
        (
            "?since=1800-01-01T00:00:00Z&step_secs=2592000",
            "too far back",
        ),
        ("?since=yesterday", "since \"yesterday\""),
        ("?since=6h&steps=60", "unknown query parameter"),
    ] {
        let (s, body) = series(query, Some(READ_TOKEN));
        assert_eq!(
            (s, body["code"].as_str()),
            (400, Some("request_invalid")),
            "{query}: {body}"
        );
        assert!(
            body["message"].as_str().unwrap_or_default().contains(says),
            "{query}: {body}"
        );
    }
    let (s, body) = series("?since=30d", Some(READ_TOKEN));
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["step_secs"], 1800, "30 days in at most 1,440 steps");
    assert_eq!(series("x", Some(READ_TOKEN)).0, 404);
}
