//! The dashboard as an operator console (issue 26), in headless Chromium
//! (`tests/ui/console.cjs`): three replicas on one store; a health-gated ramp started from the
//! browser on one, followed live by another; pause, resume, pin with expiry, unpin, a refusal
//! shown as the server gave it, rollback, a superseding start, complete and revert; the page
//! keeping its data and saying so while the server is unreachable; a read-only token; phone
//! and desktop widths without sideways scrolling, and the form reachable by keyboard. Every
//! action lands in the same history the CLI writes to, with its reason. Screenshots at 390 and
//! 1440 px are left in `target/console-screenshots/`.

use ferry_tests::app::{ADMIN_TOKEN, READ_TOKEN, TestApp, mlp_v1, mlp_v2};
use ferry_tests::browser::step;

#[test]
fn an_operator_runs_the_rollout_from_the_browser_across_replicas() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    // Three replicas on one store: the browser acts on A and B, the test reads C.
    let b = app.replica(None);
    let c = app.replica(None);
    let shots =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).expect("screenshot folder");
    let lines = ferry_tests::browser::run(
        "console.cjs",
        &[
            &app.url(),
            &b.url(),
            ADMIN_TOKEN,
            READ_TOKEN,
            &shots.display().to_string(),
        ],
    );
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();

    // The ramp: previewed, then shown as a timeline with its gates against their limits.
    let ramp = step(&lines, "ramp");
    assert!(
        text(&ramp["preview"])
            .contains("start 2.0.0 as a ramp 5% → 25% → 100%, each step at least 1 h"),
        "{ramp}"
    );
    let steps = ramp["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 3, "{ramp}");
    assert_eq!(steps[0][0], "step-current", "{ramp}");
    assert!(text(&steps[0][1]).contains("waiting for"), "{ramp}");
    let gates: Vec<String> = ramp["gates"]
        .as_array()
        .expect("gates")
        .iter()
        .map(|g| format!("{} | {}", text(&g[0]), text(&g[2])))
        .collect();
    for want in [
        "samples (staged loads) | at least 50",
        "load failure rate | at most 2%",
        "fallback rate | at most 5%",
        "failure rate over the baseline's | at most 1.5×",
        "fallback rate over the baseline's | at most 1.5×",
        "field latency over the baseline's | at most 1.3×",
        "devices crashed (native) | at most 0.5% (from 7 devices)",
    ] {
        assert!(gates.contains(&want.to_string()), "{want}: {gates:?}");
    }
    // Replica B showed the ramp and followed the pause made on A without a reload.
    let live = step(&lines, "live");
    assert!(
        text(&live["seen_on_b"]).contains("ramp step 1 of 3"),
        "{live}"
    );
    assert!(text(&live["b_after"]).starts_with("paused"), "{live}");
    assert_eq!(live["default_action"], "set", "{live}");
    assert!(text(&live["b_live"]).starts_with("live, updated"), "{live}");
    // A change previewed before another operator's is refused, not applied over it.
    let stale = step(&lines, "stale");
    assert!(
        text(&stale["text"]).starts_with("rollout_changed: the rollout is at revision"),
        "{stale}"
    );
    assert!(text(&stale["state"]).contains("at 10%"), "{stale}");
    // Pin with expiry, then unpin.
    let pins = step(&lines, "pins");
    assert_eq!(pins["pins"][0][0], "qa-phone-1", "{pins}");
    assert!(text(&pins["pins"][0][2]).ends_with("UTC"), "{pins}");
    assert_eq!(pins["after"], 0, "{pins}");
    // The server's refusal as it gave it: code and message.
    let refused = step(&lines, "refused");
    assert!(text(&refused["text"]).starts_with("rollout_"), "{refused}");
    // Revert moved the baseline back.
    let revert = step(&lines, "revert");
    assert!(
        text(&revert["state"]).contains("baseline 1.0.0"),
        "{revert}"
    );
    // A variant denied by hand on one SoC, after the page said what it does.
    let deny = step(&lines, "deny_add");
    assert!(
        text(&deny["effect"]).contains(
            "devices with SoC SM8450 get the next candidate ranked before vulkan-fp32 of 2.0.0"
        ),
        "{deny}"
    );
    assert_eq!(deny["rows"][0][2], "SoC SM8450", "{deny}");
    // Unreachable, and back.
    let down = step(&lines, "unreachable");
    assert!(
        text(&down["down"]).starts_with("server unreachable since"),
        "{down}"
    );
    assert!(text(&down["back"]).starts_with("live, updated"), "{down}");
    assert!(down["kept"].as_u64().unwrap_or(0) > 5, "{down}");
    // Read only: the controls are off and say why.
    let ro = step(&lines, "read_only");
    assert_eq!(ro["disabled"], true, "{ro}");
    assert_eq!(ro["deny_disabled"], true, "{ro}");
    assert!(
        text(&ro["note"]).contains("lacks the rollout scope"),
        "{ro}"
    );
    // No width scrolls sideways; the form is reachable by keyboard.
    for w in step(&lines, "widths")["widths"].as_array().expect("widths") {
        assert!(w["scroll"].as_u64() <= w["client"].as_u64(), "{w}");
    }
    assert_eq!(step(&lines, "keyboard")["reached"], true);
    let shots_taken: Vec<String> = lines
        .iter()
        .filter(|l| l["step"] == "screenshot")
        .map(|l| text(&l["name"]))
        .collect();
    for want in ["model-390", "model-1440", "health-390", "health-1440"] {
        assert!(
            shots_taken.iter().any(|s| s == want),
            "{want}: {shots_taken:?}"
        );
    }

    // Every action is in the history the CLI writes to, with its reason, as replica C reads it.
    let mut r = app
        .agent
        .get(format!("{}/v1/admin/models/mlp/rollout", c.url()))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .expect("rollout from replica C");
    assert_eq!(r.status().as_u16(), 200);
    let rollout: serde_json::Value =
        serde_json::from_reader(r.body_mut().as_reader()).expect("json");
    let reasons: Vec<String> = rollout["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|r| format!("{} {}", text(&r["action"]), text(&r["reason"])))
        .collect();
    for want in [
        "start console: ramp 2.0.0",
        "pause console: pause to look at SM8350",
        "resume console: resume",
        "pin ",
        "unpin ",
        "rollback console: rollback",
        "start console: all in",
        "complete console: done",
        "revert console: revert after complaints",
    ] {
        assert!(
            reasons.iter().any(|r| r.starts_with(want)),
            "{want}: {reasons:?}"
        );
    }
    assert_eq!(rollout["current"]["baseline"], "1.0.0", "{rollout}");
}
