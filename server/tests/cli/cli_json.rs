//! `ferry --json` on every command that has something to say: its output is one JSON document
//! that validates against the committed schemas (`schemas/`), and text for people goes away.

use crate::common;

use std::path::Path;

use common::{TOKEN, ferry, run_ok, serve, validator};

/// Runs `ferry --json ARGS`, asserting success, and checks its output against `reference`.
fn json_of(args: &[&str], reference: &str) -> serde_json::Value {
    let out = run_ok(ferry().arg("--json").args(args));
    let v: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("ferry {args:?} --json printed more than JSON ({e}):\n{out}"));
    let errors: Vec<String> = validator(reference)
        .iter_errors(&v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{args:?} vs {reference}: {errors:?}\n{v}"
    );
    v
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn every_json_output_matches_its_schema() {
    let s = common::setup("jsonout");
    let tmp = tempfile::tempdir().expect("tmp");
    let keys = tmp.path().join("keys");
    let v = json_of(
        &["keys", "generate", "--out", path(&keys)],
        "cli.schema.json#/$defs/done",
    );
    assert!(v["done"].as_array().is_some_and(|d| d.len() >= 4), "{v}");
    json_of(
        &["keys", "rotate", "online", "--keys", path(&keys)],
        "cli.schema.json#/$defs/done",
    );
    let v = json_of(
        &["keys", "token", "--name", "ci", "--scopes", "publish,read"],
        "cli.schema.json#/$defs/token",
    );
    assert_eq!(v["scopes"], serde_json::json!(["publish", "read"]));

    // Sign a third release of the setup's model from its files.
    let variants = s.files.join("VARIANTS-2.0.0.toml");
    let release = tmp.path().join("again.json");
    let v = json_of(
        &[
            "sign",
            path(&variants),
            "--key",
            path(&s.data.join("keys/release.key")),
            "-o",
            path(&release),
        ],
        "cli.schema.json#/$defs/sign",
    );
    assert_eq!(v["version"], "2.0.0");

    let server = serve(&s.data);
    let remote = ["--server", server.url.as_str(), "--token", TOKEN];
    let publish = |file: &Path| {
        let mut args = vec!["publish", path(file), "--files", path(&s.files)];
        args.extend(remote);
        json_of(&args, "cli.schema.json#/$defs/publish")
    };
    assert_eq!(publish(&s.v1)["state"], "published");
    let v = publish(&s.v2);
    assert_eq!(v["state"], "published");
    assert_eq!(v["blobs"][0]["uploaded"], true);
    // The same release signed again: identical, nothing uploaded.
    let v = publish(&release);
    assert_eq!(v["state"], "identical");
    assert_eq!(v["blobs"][0]["uploaded"], false);

    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(remote.iter())
            .map(|a| a.to_string())
            .collect()
    };
    let run = |args: &[&str], reference: &str| {
        let owned = with(args);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        json_of(&refs, reference)
    };
    run(&["models"], "models.schema.json");
    let v = run(&["releases", "jsonout"], "cli.schema.json#/$defs/releases");
    assert_eq!(v["releases"][0]["version"], "2.0.0");
    let v = run(
        &[
            "rollout",
            "start",
            "jsonout",
            "--release",
            "2.0.0",
            "--percent",
            "5",
            "--dry-run",
        ],
        "rollout-plan.schema.json",
    );
    assert!(v["preview"].is_object(), "a dry run has its preview: {v}");
    run(
        &[
            "rollout",
            "start",
            "jsonout",
            "--release",
            "2.0.0",
            "--percent",
            "5",
        ],
        "rollout-plan.schema.json",
    );
    run(
        &["rollout", "set", "jsonout", "--percent", "10"],
        "rollout-plan.schema.json",
    );
    run(
        &["rollout", "status", "jsonout"],
        "cli.schema.json#/$defs/rollout_status",
    );
    let v = run(
        &[
            "deny",
            "add",
            "jsonout",
            "--release",
            "2.0.0",
            "--variant",
            "xnnpack-fp32",
            "--soc",
            "SM8450",
        ],
        "cli.schema.json#/$defs/deny",
    );
    assert_eq!(v["entries"][0]["value"], "SM8450");
    run(&["deny", "list", "jsonout"], "cli.schema.json#/$defs/deny");
    run(
        &["health", "jsonout", "--since", "1h"],
        "health.schema.json",
    );
    let owned: Vec<String> = [
        "resolve",
        "jsonout",
        "--platform",
        "linux",
        "--backends",
        "XnnpackBackend",
        "--runtime",
        "1.5.1",
        "--app",
        "1.0.0",
        "--server",
        &server.url,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
    json_of(&refs, "resolve-response.schema.json");
    // That was an operator's probe (explain): counted nowhere. A device's resolve is counted
    // among the model's clients (it sends no Ferry-Protocol).
    let device = serde_json::json!({"model": "jsonout", "install_id": "json-device",
        "app_version": "1.0.0", "runtime_version": "1.5.1", "backends": ["XnnpackBackend"],
        "platform": "linux", "os_version": "6.1", "device_model": "board", "soc": "RK3588",
        "ram_mb": 4096});
    let status = ureq::post(format!("{}/v1/resolve", server.url))
        .header("content-type", "application/json")
        .send(device.to_string())
        .expect("resolve")
        .status();
    assert_eq!(status.as_u16(), 200);
    let v = run(
        &["fleet", "clients", "jsonout", "--since", "1h"],
        "cli.schema.json#/$defs/fleet_clients",
    );
    assert!(v["devices"].as_u64().unwrap_or(0) >= 1, "{v}");
}
