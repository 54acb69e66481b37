//! The HTTP API contract (issue 35): `schemas/openapi.json` lists exactly the routes the server
//! has, with the methods each answers; an undeclared method gets 405 with the `Allow` header
//! HTTP requires, and HEAD answers like GET without the body.

use std::collections::BTreeSet;

use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp};

fn openapi() -> serde_json::Value {
    serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/openapi.json"),
        )
        .expect("read"),
    )
    .expect("json")
}

/// `"GET, HEAD, POST"` as a set.
fn methods(list: &str) -> BTreeSet<String> {
    list.split(',').map(|m| m.trim().to_string()).collect()
}

#[test]
fn the_document_lists_every_route_with_the_methods_it_answers() {
    let doc = openapi();
    let paths = doc["paths"].as_object().expect("paths");
    let routes = ferry_server::api::router::allowed_methods();
    let documented: BTreeSet<&str> = paths.keys().map(String::as_str).collect();
    let served: BTreeSet<&str> = routes.iter().map(|(p, _)| *p).collect();
    assert_eq!(documented, served, "paths in the document vs the router");
    for (path, allow) in routes {
        let mut want: BTreeSet<String> = paths[path]
            .as_object()
            .expect("path item")
            .keys()
            .filter(|k| ["get", "head", "post", "put", "delete", "patch"].contains(&k.as_str()))
            .map(|k| k.to_uppercase())
            .collect();
        // HTTP requires HEAD wherever GET is; the document need not repeat it.
        if want.contains("GET") {
            want.insert("HEAD".into());
        }
        assert_eq!(methods(allow), want, "{path}");
    }
}

/// A concrete path for a route pattern.
fn concrete(pattern: &str) -> String {
    pattern
        .replace("{model}", "demo-mlp")
        .replace("{version}", "1.0.0")
        .replace(
            "{hex}",
            "9b791329b3c3bc9d268a846df09d51489975c7a4ae57bd49f6402af15b25764a",
        )
        .replace("{file}", "app.js")
}

#[test]
fn an_undeclared_method_gets_405_with_allow_and_head_answers_like_get() {
    let app = TestApp::start_with(Options {
        demo: true,
        ..Default::default()
    });
    let call = |method: &str, path: &str| {
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", app.url()))
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(())
            .expect("request");
        let mut resp = app.agent.run(req).expect("answer");
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let (allow, kind, len) = (
            header("allow"),
            header("content-type"),
            header("content-length"),
        );
        let body = resp.body_mut().read_to_vec().unwrap_or_default();
        (resp.status().as_u16(), allow, kind, len, body)
    };
    for (pattern, allow) in ferry_server::api::router::allowed_methods() {
        let path = concrete(pattern);
        for undeclared in ["TRACE", "DELETE", "PATCH"] {
            let (status, got_allow, kind, _, body) = call(undeclared, &path);
            assert_eq!(status, 405, "{undeclared} {path}");
            assert_eq!(methods(&got_allow), methods(allow), "{undeclared} {path}");
            assert!(kind.starts_with("application/json"), "{path}: {kind}");
            let v: serde_json::Value = serde_json::from_slice(&body).expect("error body");
            assert_eq!(v["code"], "method_not_allowed", "{path}");
        }
        if methods(allow).contains("GET") {
            let (get_status, _, get_kind, get_len, get_body) = call("GET", &path);
            let (head_status, _, head_kind, head_len, head_body) = call("HEAD", &path);
            assert_eq!(head_status, get_status, "HEAD {path}");
            assert_eq!(head_kind, get_kind, "HEAD {path}");
            assert!(head_body.is_empty(), "HEAD {path} sent a body");
            // A fixed-size answer says its size to HEAD too (streamed ones, like metrics, may
            // not know it).
            if !get_len.is_empty() && pattern != "/metrics" && pattern != "/v1/time" {
                assert_eq!(head_len, get_len, "HEAD {path}");
            }
            assert!(
                get_status == 405 || !get_body.is_empty() || get_status == 204,
                "{path}"
            );
        }
    }
}

/// A small deterministic generator of test strings (no dependency on a random source, so a
/// failure reproduces).
struct Strings(u64);

impl Strings {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A string of up to `max` characters from `alphabet`.
    fn from(&mut self, alphabet: &[char], max: u64) -> String {
        let len = self.next() % (max + 1);
        (0..len)
            .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize])
            .collect()
    }
}

/// Whether `value` is valid against the document's `components.schemas.NAME`.
fn documented(doc: &serde_json::Value, name: &str) -> jsonschema::Validator {
    let schema = doc["components"]["schemas"][name].clone();
    assert!(schema.is_object(), "the document defines {name}");
    jsonschema::validator_for(&schema).expect("compiles")
}

/// The server's own check of one concept.
type Rule = dyn Fn(&str) -> bool;

/// Random base64url-ish strings, and near-valid ones of every length around the limits.
fn nonces(g: &mut Strings, alphabet: &[char]) -> Vec<String> {
    let mut out: Vec<String> = (0..4000).map(|_| g.from(alphabet, 46)).collect();
    for i in 0..2000 {
        let len = 20 + i % 26;
        let mut s: String = (0..len)
            .map(|_| alphabet[(g.next() % 14) as usize])
            .collect();
        if i % 3 == 0 {
            s.truncate(len - 1);
            s.push('A');
        }
        out.push(s);
    }
    out
}

#[test]
fn the_documented_patterns_are_the_servers_rules() {
    let doc = openapi();
    let mut g = Strings(35);
    let name_chars: Vec<char> = "abz09._-AZ é/\u{0}".chars().collect();
    let hex_chars: Vec<char> = "0123456789abcdefABG".chars().collect();
    let b64_chars: Vec<char> = "AQgwEIMaz09_-+/=".chars().collect();
    let ver_chars: Vec<char> = "0123.-+aZ".chars().collect();
    let cases: [(&str, Vec<String>, &Rule); 4] = [
        (
            "ModelName",
            (0..4000)
                .map(|i| g.from(&name_chars, if i % 10 == 0 { 70 } else { 8 }))
                .chain([
                    "demo-mlp".into(),
                    "a".repeat(64),
                    "a".repeat(65),
                    "-x".into(),
                ])
                .collect(),
            &|s| s.parse::<ferry_shared::ModelName>().is_ok(),
        ),
        (
            "Sha256Hex",
            (0..2000)
                .map(|i| {
                    let mut s = g.from(&hex_chars[..16], 64);
                    while i % 2 == 0 && s.len() < 64 {
                        s.push('a');
                    }
                    if i % 7 == 0 {
                        s.replace_range(0..1.min(s.len()), "G");
                    }
                    s
                })
                .collect(),
            &|s| ferry_shared::Sha256Digest::from_hex(s).is_ok(),
        ),
        ("Nonce", nonces(&mut g, &b64_chars), &|s| {
            ferry_shared::resolve::check_nonce(s).is_ok()
        }),
        (
            "Version",
            (0..6000)
                .map(|_| g.from(&ver_chars, 14))
                .chain([
                    "1.0.0".into(),
                    "1.0.0-rc.1+b.2".into(),
                    "01.0.0".into(),
                    "1.0.0-01".into(),
                    "1.0.0-".into(),
                    format!("1.0.0-{}", "a".repeat(60)),
                ])
                .collect(),
            &|s| s.len() <= 64 && s.parse::<semver::Version>().is_ok(),
        ),
    ];
    for (name, corpus, server) in cases {
        let v = documented(&doc, name);
        let mut valid = 0;
        for s in &corpus {
            let by_doc = v.is_valid(&serde_json::json!(s));
            assert_eq!(
                by_doc,
                server(s),
                "{name} {s:?}: the document says {by_doc}"
            );
            valid += usize::from(by_doc);
        }
        // The corpus reaches both sides of each rule.
        assert!(
            valid > 0 && valid < corpus.len(),
            "{name}: {valid} of {}",
            corpus.len()
        );
    }
}

#[test]
fn the_schema_driven_tester_finds_no_mismatch() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let st = root.join(".deps/schemathesis/bin/st");
    assert!(
        st.is_file(),
        "{} is missing: run tests/setup.sh (Schemathesis from PyPI)",
        st.display()
    );
    // The demo published; limits raised so the generated requests meet no 429.
    let app = TestApp::start_with(Options {
        demo: true,
        tweak: Some(Box::new(|c| {
            c.limits.fresh_decisions_per_minute = 1_000_000;
            c.limits.max_connections_per_address = 10_000;
            c.telemetry.per_install_per_minute = 1_000_000;
            c.telemetry.per_address_per_minute = 1_000_000;
        })),
        ..Default::default()
    });
    let out = std::process::Command::new(&st)
        .arg("--no-color")
        .arg("--config-file")
        .arg(root.join("tests/schemathesis.toml"))
        .arg("run")
        .arg(root.join("schemas/openapi.json"))
        .args(["--url", &app.url(), "--checks", "all"])
        .args(["-H", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
        .output()
        .expect("run schemathesis");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found mismatches between schemas/openapi.json and the server:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It really ran every operation of the document and generated requests.
    let operations = openapi()["paths"]
        .as_object()
        .expect("paths")
        .values()
        .flat_map(|item| item.as_object().expect("item").keys())
        .filter(|k| ["get", "head", "post", "put", "delete", "patch"].contains(&k.as_str()))
        .count();
    assert!(text.contains(&format!("Tested: {operations}")), "{text}");
    let generated: u64 = text
        .lines()
        .find_map(|l| {
            l.trim()
                .split_once(" generated, ")
                .map(|(n, _)| n.trim().to_string())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(generated > 500, "{generated} test cases: {text}");
}
