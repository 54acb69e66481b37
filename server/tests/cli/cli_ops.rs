//! Everyday operator commands against a real server: `ferry models`, `ferry health` with a
//! window and for a model that does not exist, and shell completions.

use crate::common;

use common::{TOKEN, ferry, run_ok, serve};

fn remote(url: &str) -> [&str; 4] {
    ["--server", url, "--token", TOKEN]
}

#[test]
fn models_health_windows_and_completions() {
    let s = common::setup("ops");
    let server = serve(&s.data);
    for release in [&s.v1, &s.v2] {
        run_ok(
            ferry()
                .arg("publish")
                .arg(release)
                .arg("--files")
                .arg(&s.files)
                .args(remote(&server.url))
                .arg("--quiet"),
        );
    }
    run_ok(
        ferry()
            .args([
                "rollout",
                "start",
                "ops",
                "--release",
                "2.0.0",
                "--percent",
                "5",
            ])
            .args(remote(&server.url)),
    );
    let table = run_ok(ferry().arg("models").args(remote(&server.url)));
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("ops"))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        ["ops", "1.0.0", "2.0.0", "5%", "active"],
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&run_ok(
        ferry().args(["models", "--json"]).args(remote(&server.url)),
    ))
    .expect("json");
    assert_eq!(
        json["models"][0]["releases"],
        serde_json::json!(["1.0.0", "2.0.0"])
    );

    let out = run_ok(
        ferry()
            .args(["health", "ops", "--since", "1h"])
            .args(remote(&server.url)),
    );
    assert!(out.contains("window: since"), "{out}");
    // Mistakes get the right exit code and a message that says what to give instead.
    let out = ferry()
        .args(["health", "ops", "--since", "yesterday"])
        .args(remote(&server.url))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(6), "refused by the server's rules");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("request_invalid") && err.contains("30m, 1h, 7d"),
        "{err}"
    );
    let out = ferry()
        .args(["health", "nosuch"])
        .args(remote(&server.url))
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("model_not_found"));

    resolve_from_flags_and_profiles(&server.url, s.tmp.path());
    completions_and_help();
}

/// Which variant a device would get, and why, from flags or a profile file.
fn resolve_from_flags_and_profiles(url: &str, tmp: &std::path::Path) {
    // Which variant a device would get, and why, from flags or a profile file.
    let out = run_ok(ferry().args([
        "resolve",
        "ops",
        "--server",
        url,
        "--platform",
        "linux",
        "--backends",
        "XnnpackBackend",
        "--runtime",
        "1.5.1",
        "--app",
        "1.0.0",
    ]));
    // The rollout's salt is random, so the CLI's install id is in the 5% staged cohort one
    // time in twenty: either line is right.
    assert!(
        out.contains("ops 1.0.0 (baseline cohort): tries xnnpack-fp32")
            || out.contains("ops 2.0.0 (staged cohort): tries xnnpack-fp32"),
        "{out}"
    );
    let profile = tmp.join("old-phone.json");
    std::fs::write(
        &profile,
        r#"{"platform": "android", "runtime_version": "1.4.0", "app_version": "1.0.0",
            "backends": ["XnnpackBackend"], "soc": "SM8150", "ram_mb": 3000}"#,
    )
    .expect("profile");
    let out = ferry()
        .args(["resolve", "ops", "--server", url, "--profile"])
        .arg(&profile)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "no variant fits: {text}");
    assert!(text.contains("needs ExecuTorch runtime >=1.5.0"), "{text}");
    // The profile's runtime overridden by a flag: now it fits.
    let out = run_ok(
        ferry()
            .args([
                "resolve",
                "ops",
                "--server",
                url,
                "--runtime",
                "1.5.1",
                "--json",
                "--profile",
            ])
            .arg(&profile),
    );
    let answer: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(answer["decision"]["payload"].is_string(), "{answer}");
    let out = ferry()
        .args([
            "resolve",
            "nosuch",
            "--server",
            url,
            "--platform",
            "linux",
            "--runtime",
            "1.5.1",
            "--app",
            "1.0.0",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("model_not_found"));
    let out = ferry()
        .args(["resolve", "ops", "--server", url, "--runtime", "1.5.1"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing platform is a usage error"
    );
}

/// Shell completions, and examples at the end of every command's help.
fn completions_and_help() {
    for shell in ["bash", "zsh", "fish"] {
        let script = run_ok(ferry().args(["completions", shell]));
        assert!(
            script.contains("rollout") && script.contains("since"),
            "{shell}"
        );
    }
    let out = ferry().args(["completions", "tcsh"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    // Every command's help ends with examples.
    let help = run_ok(ferry().args(["rollout", "pin", "--help"]));
    assert!(help.contains("Examples:\n  ferry rollout pin "), "{help}");
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // The reader goes away before the command writes (as `ferry ... | head -1` does once it
    // has its line): no panic, no backtrace, killed by SIGPIPE like other tools.
    let mut child = common::ferry()
        .arg("inspect")
        .arg(common::fixtures().join("partial-xnnpack.pte"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        assert!(
            out.status.success() || out.status.signal() == Some(libc_sigpipe()),
            "{:?}: {err}",
            out.status
        );
    }
}

/// SIGPIPE's number on Linux and the BSDs.
#[cfg(unix)]
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn ops_lists_what_an_apps_runtime_needs_for_selective_build() {
    // Release 1.0.0 (an XNNPACK MLP) and 3.0.0 (the LLM recipe's programs: one variant calling
    // the recipe's custom kernels, one with standard kernels only), signed by `ferry sign`.
    let s = common::setup("tinyllm");
    let server = serve(&s.data);
    for f in ["llm-custom-kernels.pte", "llm-standard.pte"] {
        std::fs::copy(common::fixtures().join(f), s.files.join(f)).expect("copy");
    }
    let spec = s.files.join("VARIANTS-3.0.0.toml");
    std::fs::write(
        &spec,
        "model = \"tinyllm\"\nversion = \"3.0.0\"\n\n\
         [[variant]]\nid = \"custom-kernels\"\nfile = \"llm-custom-kernels.pte\"\n\
         delegate = \"portable\"\nquant = \"8da4w\"\nruntime = \">=1.5.0\"\napp = \">=2.0.0\"\n\n\
         [[variant]]\nid = \"standard\"\nfile = \"llm-standard.pte\"\n\
         delegate = \"portable\"\nquant = \"8da4w\"\nruntime = \">=1.5.0\"\napp = \"*\"\n",
    )
    .expect("write");
    let v3 = s.files.join("release-3.0.0.json");
    run_ok(
        ferry()
            .arg("sign")
            .arg(&spec)
            .arg("--key")
            .arg(s.data.join("keys/release.key"))
            .arg("-o")
            .arg(&v3),
    );
    for release in [&s.v1, &v3] {
        run_ok(
            ferry()
                .arg("publish")
                .arg(release)
                .arg("--files")
                .arg(&s.files)
                .args(remote(&server.url))
                .arg("--quiet"),
        );
    }
    let ops = |args: &[&str]| {
        run_ok(
            ferry()
                .args(["ops", "tinyllm"])
                .args(args)
                .args(remote(&server.url)),
        )
    };

    // One release: every variant's operators, one comma-separated line.
    let list = ops(&["--release", "3.0.0"]);
    let names: Vec<&str> = list.trim().split(',').collect();
    assert!(names.contains(&"llama::custom_sdpa.out"), "{list}");
    assert!(names.contains(&"aten::bmm.out"), "{list}");
    assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {list}");
    // One variant.
    let standard = ops(&["--release", "3.0.0", "--variant", "standard"]);
    assert!(!standard.contains("llama::"), "{standard}");
    // What an app 1.x may receive: the MLP release and the standard LLM variant (the custom
    // one needs app 2.0), as YAML entries.
    let yaml = ops(&["--app-version", "1.5.0", "--format", "yaml"]);
    assert!(yaml.lines().any(|l| l == "- op: aten::bmm.out"), "{yaml}");
    assert!(!yaml.contains("llama::"), "{yaml}");
    assert!(
        yaml.contains("1.0.0/xnnpack-fp32") && yaml.contains("3.0.0/standard"),
        "{yaml}"
    );
    let app2 = ops(&["--app-version", "2.0.0", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&app2).expect("json");
    assert!(
        v["operators"]
            .as_array()
            .expect("operators")
            .iter()
            .any(|o| o == "llama::update_cache.out"),
        "{v}"
    );

    // Mistakes are clear errors.
    let out = ferry()
        .args(["ops", "tinyllm"])
        .args(remote(&server.url))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--release"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ferry()
        .args(["ops", "tinyllm", "--release", "3.0.0", "--variant", "nope"])
        .args(remote(&server.url))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no variant"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
