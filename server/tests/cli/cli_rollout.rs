//! Rollouts through the real CLI, against two server processes sharing one data directory:
//! concurrent changes from both lose no update, and `status` / `health` report them.

use crate::common;

use common::{TOKEN, ferry, run_ok, serve};

fn history_len(url: &str) -> usize {
    let status = run_ok(ferry().args([
        "rollout", "status", "race", "--json", "--server", url, "--token", TOKEN,
    ]));
    let v: serde_json::Value = serde_json::from_str(&status).expect("json");
    v["history"].as_array().map_or(0, Vec::len)
}

#[test]
fn two_server_processes_racing_on_one_rollout() {
    let setup = common::setup("race");
    let tmp = &setup.tmp;
    let (data, files) = (setup.data.clone(), setup.files.clone());
    let (v1, v2) = (setup.v1.clone(), setup.v2.clone());
    let a = serve(&data);
    let b = serve(&data);
    for r in [&v1, &v2] {
        run_ok(
            ferry()
                .arg("publish")
                .arg(r)
                .arg("--files")
                .arg(&files)
                .args(["--server", &a.url, "--token", TOKEN, "--quiet"]),
        );
    }
    let out = run_ok(ferry().args([
        "rollout",
        "start",
        "race",
        "--release",
        "2.0.0",
        "--percent",
        "0.5",
        "--min-samples",
        "20",
        "--server",
        &a.url,
        "--token",
        TOKEN,
    ]));
    assert!(out.contains("staged 2.0.0 at 0.5%"), "{out}");

    race_sets(&a.url, &b.url);
    lifecycle(&a.url, &b.url);
    deny_by_cli(&a.url);
    exit_codes(&a.url, tmp.path());
}

/// Thirty `rollout set` from six threads across both processes: every one is kept.
fn race_sets(a: &str, b: &str) {
    // 6 threads, alternating between the two processes, 5 changes each.
    let urls = [a.to_string(), b.to_string()];
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let url = urls[t % 2].clone();
            std::thread::spawn(move || {
                for i in 0..5 {
                    let pct = format!("{}.{}", 1 + t, i + 1);
                    run_ok(ferry().args([
                        "rollout",
                        "set",
                        "race",
                        "--percent",
                        &pct,
                        "--server",
                        &url,
                        "--token",
                        TOKEN,
                    ]));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let status = run_ok(ferry().args([
        "rollout", "status", "race", "--json", "--server", b, "--token", TOKEN,
    ]));
    let v: serde_json::Value = serde_json::from_str(&status).expect("json");
    let history = v["history"].as_array().expect("history");
    assert_eq!(
        history.len(),
        32,
        "the first publish, 1 start + 30 sets from two processes, none lost"
    );
    assert_eq!(history[0]["action"], "publish");
    let mut bps: Vec<u64> = history
        .iter()
        .skip(2)
        .filter_map(|p| p["basis_points"].as_u64())
        .collect();
    bps.sort();
    let mut want: Vec<u64> = (0..6u64)
        .flat_map(|t| (0..5u64).map(move |i| (1 + t) * 100 + (i + 1) * 10))
        .collect();
    want.sort();
    assert_eq!(bps, want);
}

/// Pause, resume and rollback; the release table, a dry run, and `start` of an older release refused.
fn lifecycle(a: &str, b: &str) {
    for action in ["pause", "resume", "rollback"] {
        run_ok(ferry().args(["rollout", action, "race", "--server", b, "--token", TOKEN]));
    }
    let status =
        run_ok(ferry().args(["rollout", "status", "race", "--server", a, "--token", TOKEN]));
    assert!(
        status
            .lines()
            .last()
            .is_some_and(|l| l.contains("(rollback by") && l.contains("): halted, staged")),
        "{status}"
    );
    // The lifecycle as a table and as JSON.
    let table = run_ok(ferry().args(["releases", "race", "--server", a, "--token", TOKEN]));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..2], ["RELEASE", "STATE"], "{table}");
    assert_eq!(rows[1][..2], ["2.0.0", "rolled"], "{table}");
    assert!(table.contains("rolled back (was staged"), "{table}");
    assert_eq!(rows[2][..2], ["1.0.0", "live"], "{table}");
    let json = run_ok(ferry().args([
        "releases", "race", "--json", "--server", a, "--token", TOKEN,
    ]));
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["releases"][1]["state"], "live");
    // A dry run prints the preview and writes nothing.
    let before = history_len(a);
    let dry = run_ok(ferry().args([
        "rollout",
        "resume",
        "race",
        "--dry-run",
        "--server",
        a,
        "--token",
        TOKEN,
    ]));
    assert!(dry.starts_with("dry run, nothing changed"), "{dry}");
    assert!(dry.contains("install ids changing release: "), "{dry}");
    assert_eq!(history_len(a), before);
    // Going back to an older baseline is only `revert`, with a reason.
    let refused = ferry()
        .args([
            "rollout",
            "start",
            "race",
            "--release",
            "1.0.0",
            "--percent",
            "5",
            "--server",
            a,
            "--token",
            TOKEN,
        ])
        .output()
        .expect("run");
    assert_eq!(
        refused.status.code(),
        Some(6),
        "refused by the rules: exit 6"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("rollout_not_newer"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// The deny list by CLI, then `health`.
fn deny_by_cli(url: &str) {
    // The deny list by CLI: no override of an entry that does not exist, no entry for a
    // variant that does not exist; add, list, override, clear.
    let target = |action: &str, variant: &str| target_with(url, action, variant, &[]);
    for (action, variant, code) in [
        ("override", "xnnpack-fp32", "deny_not_found"),
        ("clear", "xnnpack-fp32", "deny_not_found"),
        ("add", "nope", "deny_invalid"),
    ] {
        let out = target(action, variant);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(code),
            "{action} {variant}: {err}"
        );
    }
    for action in ["add", "override"] {
        let out = target(action, "xnnpack-fp32");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let list = run_ok(ferry().args(["deny", "list", "race", "--server", url, "--token", TOKEN]));
    let row: Vec<&str> = list
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..6],
        ["1.0.0", "xnnpack-fp32", "soc", "SM8450", "allow", "ops"],
        "{list}"
    );
    // A hand-made slow_in_field entry beside the fallback one; a kind that does not exist is a
    // usage error; clear without --kind removes both.
    let slow = target_with(url, "add", "xnnpack-fp32", &["--kind", "slow_in_field"]);
    assert!(
        slow.status.success(),
        "{}",
        String::from_utf8_lossy(&slow.stderr)
    );
    let bogus = target_with(url, "add", "xnnpack-fp32", &["--kind", "sluggish"]);
    assert_eq!(bogus.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bogus.stderr)
            .contains("fallback, slow_in_field or crashed_in_field")
    );
    let list = run_ok(ferry().args(["deny", "list", "race", "--server", url, "--token", TOKEN]));
    let kinds: Vec<(&str, &str)> = list
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[4], f[6])
        })
        .collect();
    assert_eq!(
        kinds,
        [("allow", "fallback"), ("demote", "slow_in_field")],
        "{list}"
    );
    assert!(target("clear", "xnnpack-fp32").status.success());
    let list = run_ok(ferry().args(["deny", "list", "race", "--server", url, "--token", TOKEN]));
    assert!(list.contains("the deny list is empty"), "{list}");
    let health = run_ok(ferry().args([
        "health", "race", "--json", "--server", url, "--token", TOKEN,
    ]));
    let h: serde_json::Value = serde_json::from_str(&health).expect("json");
    assert_eq!(h["model"], "race");
}

/// Runs `ferry deny ACTION race --release 1.0.0 --variant VARIANT --soc SM8450 EXTRA...`.
fn target_with(url: &str, action: &str, variant: &str, extra: &[&str]) -> std::process::Output {
    ferry()
        .args([
            "deny",
            action,
            "race",
            "--release",
            "1.0.0",
            "--variant",
            variant,
            "--soc",
            "SM8450",
            "--server",
            url,
            "--token",
            TOKEN,
        ])
        .args(extra)
        .output()
        .expect("run")
}

/// Exit codes by class, and a bad percent refused before anything is sent.
fn exit_codes(url: &str, tmp: &std::path::Path) {
    let no_token = ferry()
        .args(["rollout", "status", "race"])
        .env("FERRY_PROFILE", tmp.join("missing.toml"))
        .output()
        .expect("run");
    assert_eq!(no_token.status.code(), Some(3), "no token: exit 3");
    // Exit codes by class: not found, wrong token, unreachable server.
    let code = |args: &[&str]| ferry().args(args).output().expect("run").status.code();
    assert_eq!(
        code(&["releases", "nosuch", "--server", url, "--token", TOKEN]),
        Some(4)
    );
    assert_eq!(
        code(&[
            "releases",
            "race",
            "--server",
            url,
            "--token",
            "wrong-token-0123456789"
        ]),
        Some(3)
    );
    assert_eq!(
        code(&[
            "releases",
            "race",
            "--server",
            "http://127.0.0.1:9",
            "--token",
            TOKEN
        ]),
        Some(7)
    );
    assert_eq!(code(&["rollout", "start", "race"]), Some(2), "usage");
    assert!(String::from_utf8_lossy(&no_token.stderr).contains("no admin token"));
    // A bad percent is refused before anything is sent.
    let out = ferry()
        .args([
            "rollout",
            "set",
            "race",
            "--percent",
            "0.001",
            "--server",
            url,
            "--token",
            TOKEN,
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most two decimals"));
}
