//! The files in `deploy/` do what they say: the image's health check command, run by hand
//! against a real server; the container's command line (Dockerfile entrypoint plus the
//! Kubernetes `args`) accepted by the real binary; the Kubernetes config loadable and valid
//! against the Kubernetes schemas.

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{ferry, run_ok, serve};

fn deploy(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The JSON array after `keyword` on its line of the Dockerfile (exec form).
fn dockerfile_array(keyword: &str) -> Vec<String> {
    let text = deploy("Dockerfile");
    let line = text
        .lines()
        .find(|l| l.starts_with(keyword))
        .unwrap_or_else(|| panic!("no {keyword} in the Dockerfile"));
    let json = line[line.find('[').expect("exec form")..].trim();
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{keyword}: {e}"))
}

fn data_dir_with_keys(root: &Path) -> PathBuf {
    let data = root.join("data");
    run_ok(
        ferry()
            .args(["keys", "generate", "--out"])
            .arg(data.join("keys")),
    );
    data
}

#[test]
fn the_image_health_check_passes_against_a_running_server_and_fails_without_one() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = data_dir_with_keys(tmp.path());
    let server = serve(&data);
    let port = server.url.rsplit(':').next().expect("port").to_string();
    let cmd = dockerfile_array("HEALTHCHECK CMD");
    assert_eq!(cmd[0], "/bin/bash", "/dev/tcp needs bash");
    let script = cmd[2].replace("/8080", &format!("/{port}"));
    let run = |script: &str| {
        Command::new(&cmd[0])
            .args([&cmd[1], script])
            .status()
            .expect("run the health check")
    };
    assert!(run(&script).success(), "healthy server reported unhealthy");
    drop(server);
    assert!(!run(&script).success(), "a stopped server reported healthy");
}

#[test]
fn the_container_command_line_starts_the_server() {
    let entry = dockerfile_array("ENTRYPOINT");
    assert_eq!(entry, ["ferry"]);
    let cmd = dockerfile_array("CMD");
    // Kubernetes `args` replace the image's CMD: both must be a valid command line.
    let manifest = deploy("kubernetes/ferry.yaml");
    let args_line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("args:"))
        .expect("args in the manifest");
    let k8s: Vec<String> =
        serde_json::from_str(args_line.trim_start().trim_start_matches("args:").trim())
            .expect("args as a flow sequence");
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/ferry.example.toml");
    for args in [cmd, k8s] {
        let tmp = tempfile::tempdir().expect("tmp");
        let data = data_dir_with_keys(tmp.path());
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if a == "/etc/ferry/ferry.toml" {
                    example.display().to_string()
                } else {
                    a.clone()
                }
            })
            .collect();
        let mut child = ferry()
            .args(&args)
            .env("FERRY_DATA", &data)
            .env("FERRY_LISTEN", "127.0.0.1:0")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn");
        let lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut seen = Vec::new();
        let mut listening = false;
        for line in lines.map_while(Result::ok) {
            if line.starts_with("ferry: listening on ") {
                listening = true;
                break;
            }
            seen.push(line);
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            listening,
            "`ferry {}` did not start: {seen:?}",
            args.join(" ")
        );
    }
}

#[test]
fn the_kubernetes_config_is_a_valid_ferry_config() {
    let manifest = deploy("kubernetes/ferry.yaml");
    let mut lines = manifest
        .lines()
        .skip_while(|l| !l.contains("ferry.toml: |"));
    lines.next();
    let toml: String = lines
        .take_while(|l| l.starts_with("    ") || l.trim().is_empty())
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    assert!(toml.contains("[storage]"), "{toml}");
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("ferry.toml");
    std::fs::write(&path, &toml).expect("write");
    let flags = ferry_server::app::config::Flags {
        config: Some(path),
        ..Default::default()
    };
    let c = ferry_server::app::config::Config::load(&flags, &|_| None).expect("loads");
    assert!(c.log_json);
    assert!(matches!(
        c.storage,
        ferry_server::storage::config::StorageConfig::S3 { .. }
    ));
}

#[test]
fn the_kubernetes_manifest_validates_against_the_kubernetes_schemas() {
    // kubernetes-validate from PyPI (the Kubernetes OpenAPI schemas, strict: unknown fields
    // are errors), installed by tests/setup.sh.
    let validator =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.deps/pytools/bin/kubernetes-validate");
    assert!(
        validator.is_file(),
        "{} is missing: run tests/setup.sh (tests/run does)",
        validator.display()
    );
    let validate = |file: &Path| {
        Command::new(&validator)
            .arg("--strict")
            .arg(file)
            .output()
            .expect("run kubernetes-validate")
    };
    let manifest =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/ferry.yaml");
    let out = validate(&manifest);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for kind in [
        "deployment/ferry",
        "service/ferry",
        "configmap/ferry-config",
    ] {
        assert!(
            text.contains(&format!("passed for resource {kind}")),
            "{kind}: {text}"
        );
    }
    // The validator does catch a mistake: a misspelt field.
    let tmp = tempfile::tempdir().expect("tmp");
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        deploy("kubernetes/ferry.yaml").replace("containerPort:", "containerPortt:"),
    )
    .expect("write");
    let out = validate(&bad);
    assert!(!out.status.success(), "a misspelt field passed");
}

/// Every `ferry_*` metric name in `text` (PromQL or JSON holding PromQL).
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("ferry_") {
        let start = i + pos;
        let mut end = start;
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase()
                || bytes[end] == b'_'
                || bytes[end].is_ascii_digit())
        {
            end += 1;
        }
        out.insert(text[start..end].to_string());
        i = end;
    }
    out
}

#[test]
fn the_alert_rules_and_the_dashboard_use_metrics_the_server_exports() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut child = ferry()
        .args(["serve", "--demo", "--listen", "127.0.0.1:0", "--data"])
        .arg(tmp.path())
        .env("FERRY_LOG", "warn")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = lines.next().expect("server output").expect("read");
        if let Some(rest) = line.strip_prefix("ferry: listening on ") {
            break rest.split_whitespace().next().expect("url").to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let device = |runtime: &str| {
        serde_json::json!({"model": "demo-mlp", "install_id": "m", "app_version": "1.0.0",
            "runtime_version": runtime, "backends": ["XnnpackBackend"], "platform": "android",
            "os_version": "14", "device_model": "p", "soc": "s", "ram_mb": 4096})
    };
    for (runtime, want) in [("1.5.1", 200), ("0.1.0", 404)] {
        let r = agent
            .post(format!("{url}/v1/resolve"))
            .header("content-type", "application/json")
            .send(
                serde_json::to_vec(&device(runtime))
                    .expect("json")
                    .as_slice(),
            )
            .expect("resolve");
        assert_eq!(r.status().as_u16(), want, "runtime {runtime}");
    }
    agent
        .post(format!("{url}/v1/telemetry"))
        .header("content-type", "application/json")
        .send(&b"{\"events\": []}"[..])
        .expect("telemetry");
    // The demo's admin token (metrics need a token with the read scope).
    let token = std::fs::read_to_string(tmp.path().join("admin-token")).expect("demo token");
    let mut r = agent
        .get(format!("{url}/metrics"))
        .header("authorization", format!("Bearer {}", token.trim()))
        .call()
        .expect("metrics");
    assert_eq!(r.status().as_u16(), 200);
    let exported = r.body_mut().read_to_string().expect("body");
    let _ = child.kill();
    let _ = child.wait();
    let samples: std::collections::BTreeSet<String> = exported
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next().map(str::to_string))
        .collect();
    for file in [
        "prometheus/ferry-alerts.yaml",
        "grafana/ferry-dashboard.json",
    ] {
        let text = deploy(file);
        let names = metric_names(&text);
        assert!(names.len() >= 4, "{file}: {names:?}");
        for n in &names {
            assert!(
                samples.contains(n),
                "{file} uses {n}, which /metrics does not export:\n{exported}"
            );
        }
    }
    // The dashboard is JSON Grafana can import (panels with Prometheus targets).
    let dash: serde_json::Value =
        serde_json::from_str(&deploy("grafana/ferry-dashboard.json")).expect("dashboard JSON");
    assert!(dash["panels"].as_array().is_some_and(|p| p.len() >= 8));
    // The rules file parses as YAML (PyYAML, installed with kubernetes-validate) into groups
    // of rules that each have an alert name, an expression and a summary.
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.deps/pytools/bin/python");
    let check = "import sys, yaml\n\
        doc = yaml.safe_load(open(sys.argv[1]))\n\
        rules = [r for g in doc['groups'] for r in g['rules']]\n\
        assert rules and all(r['alert'] and r['expr'] and r['annotations']['summary'] for r in rules)\n\
        print(len(rules))\n";
    let out = Command::new(&python)
        .args(["-c", check])
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../deploy/prometheus/ferry-alerts.yaml"),
        )
        .output()
        .expect("python (tests/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "4");
}
