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
        for undeclared in ["TRACE", "DELETE", "PATCH"]
            .into_iter()
            .filter(|m| !methods(allow).contains(*m))
        {
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

/// The document's `components.schemas.NAME`, compiled.
fn documented(name: &str) -> jsonschema::Validator {
    let schema = openapi()["components"]["schemas"][name].clone();
    assert!(schema.is_object(), "the document defines {name}");
    jsonschema::validator_for(&schema).expect("compiles")
}

/// Holds the documented `name` to the server's `rule`: on the `known` strings (which must
/// include both a valid and an invalid one) and on strings proptest draws from `chars`.
fn same_rule(name: &str, rule: fn(&str) -> bool, known: &[&str], chars: &str) {
    use proptest::prelude::*;
    let v = documented(name);
    let doc = |s: &str| v.is_valid(&serde_json::json!(s));
    for s in known {
        assert_eq!(doc(s), rule(s), "{name} {s:?}");
    }
    assert!(
        known.iter().any(|s| rule(s)) && known.iter().any(|s| !rule(s)),
        "{name}: the known strings reach both sides of the rule"
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 4000,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &proptest::string::string_regex(chars).expect("regex"),
            |s| {
                prop_assert_eq!(doc(&s), rule(&s), "{} {:?}", name, s);
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_documented_patterns_are_the_servers_rules() {
    same_rule(
        "ModelName",
        |s| s.parse::<ferry_shared::ModelName>().is_ok(),
        &[
            "demo-mlp",
            &"a".repeat(64),
            &"a".repeat(65),
            "-x",
            "z..0",
            "a.b",
            "A",
        ],
        "[abz09._A-Z \\u{e9}/-]{0,70}",
    );
    same_rule(
        "Sha256Hex",
        |s| ferry_server::api::extract::parse_digest(s).is_ok(),
        &[&"a".repeat(64), &"a".repeat(63), &"A".repeat(64)],
        "[0-9a-fA-G]{60,66}",
    );
    same_rule(
        "Nonce",
        |s| ferry_shared::wire::resolve::check_nonce(s).is_ok(),
        &[
            "AAAAAAAAAAAAAAAAAAAAAA",
            "AAAAAAAAAAAAAAAAAAAAAB",
            &"A".repeat(21),
            &"A".repeat(44),
        ],
        "[AQgwEIMaz09_+/=-]{20,46}",
    );
    same_rule(
        "Version",
        |s| s.len() <= 64 && s.parse::<semver::Version>().is_ok(),
        &[
            "1.0.0",
            "1.0.0-rc.1+b.2",
            "01.0.0",
            "1.0.0-01",
            "1.0.0-",
            &format!("1.0.0-{}", "a".repeat(60)),
            // Each number at most u64::MAX: what the server holds.
            "1.18446744073709551615.0",
            "1.18446744073709551616.0",
            "99999999999999999999.0.0",
            "0.0.10000000000000000000",
            "1.0.0-99999999999999999999999",
        ],
        "[0-9]{1,2}\\.[0-9]{1,2}\\.[0-9]{1,2}(-[0-9a-zA-Z.-]{0,6})?(\\+[0-9a-zA-Z.-]{0,4})?|[0-9.+aZ-]{0,12}",
    );
}

/// The seeds the schema-driven tester runs with.
const SCHEMATHESIS_SEEDS: [u64; 3] = [1, 2, 3];

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
    // Schemathesis keeps a cache of crashes in `.schemathesis/` under its working directory:
    // a directory of the test's own, never the checkout.
    let work = tempfile::tempdir().expect("temp dir");
    let doc = with_signed_examples(&app, work.path());
    let operations = openapi()["paths"]
        .as_object()
        .expect("paths")
        .values()
        .flat_map(|item| item.as_object().expect("item").keys())
        .filter(|k| ["get", "head", "post", "put", "delete", "patch"].contains(&k.as_str()))
        .count();
    // Several seeds, so that one draw cannot hide a class of mismatch; each is reproducible
    // (`st run --seed N`).
    for seed in SCHEMATHESIS_SEEDS {
        let out = std::process::Command::new(&st)
            .current_dir(work.path())
            // ferry's own check: each error answer's code is one its operation declares.
            .env("PYTHONPATH", root.join("tests/schemathesis_hooks"))
            .env("SCHEMATHESIS_HOOKS", "ferry_checks")
            .env("FERRY_OPENAPI", &doc)
            .arg("--no-color")
            .arg("--config-file")
            .arg(root.join("tests/schemathesis.toml"))
            .arg("run")
            .arg(&doc)
            .args(["--url", &app.url(), "--checks", "all"])
            .args(["--seed", &seed.to_string()])
            .args(["-H", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
            .output()
            .expect("run schemathesis");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "schemathesis (seed {seed}) found mismatches between schemas/openapi.json and the \
             server:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // It really ran every operation of the document and generated requests.
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
        assert!(
            generated > 500,
            "seed {seed}: {generated} test cases: {text}"
        );
    }
    // The signed examples reached the handlers: 9.0.0 is published and 8.0.0 revoked.
    let (s, b) = app.get_json(
        "/v1/admin/models/demo-mlp/releases/9.0.0",
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "the example release was not published: {b}");
    let (s, b) = app.get_json("/v1/admin/models/demo-mlp/revocations", Some(ADMIN_TOKEN));
    assert_eq!(
        (s, b["revoked"][0]["release"].as_str()),
        (200, Some("8.0.0")),
        "{b}"
    );
}

/// A copy of `schemas/` in `dir` whose `openapi.json` has, as the request examples of the
/// operations that take signed envelopes, envelopes this server accepts: demo-mlp 9.0.0 (its
/// files uploaded first) and a revocation list revoking demo-mlp 8.0.0 (published here). A
/// generator cannot forge a signature, so without them those operations would only ever meet
/// the signature checks. Returns the copy's path.
fn with_signed_examples(app: &TestApp, dir: &std::path::Path) -> std::path::PathBuf {
    use ferry_shared::trust::revocation::{REVOCATIONS_PAYLOAD_TYPE, RevocationList, Revoked};
    let release = |version: &str| {
        let mut spec = ferry_tests::app::mlp_v1();
        spec.model = "demo-mlp".parse().expect("model");
        spec.version = version.parse().expect("version");
        spec
    };
    app.publish(&release("8.0.0"));
    let spec = release("9.0.0");
    let (manifest, envelope) = ferry_tests::app::signed_release(&spec, &app.release_key());
    for v in &manifest.variants {
        let bytes = ferry_tests::app::fixture_bytes_by_digest(&v.sha256);
        assert!(matches!(app.put_blob(&bytes), 200 | 201), "upload {}", v.id);
    }
    let list = RevocationList {
        format: 1,
        model: "demo-mlp".parse().expect("model"),
        version: 1,
        revoked: vec![Revoked {
            release: "8.0.0".parse().expect("version"),
            reason: "the schema-driven test's example".into(),
            at: time::OffsetDateTime::now_utc(),
        }],
    };
    let revocations = app.release_key().pair.sign(
        REVOCATIONS_PAYLOAD_TYPE,
        &serde_json::to_vec(&list).expect("json"),
    );
    let schemas = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    for entry in std::fs::read_dir(&schemas).expect("schemas") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            std::fs::copy(&path, dir.join(path.file_name().expect("name"))).expect("copy");
        }
    }
    let mut doc = openapi();
    for (path, example) in [
        (
            "/v1/admin/models/{model}/releases",
            serde_json::to_value(&envelope),
        ),
        (
            "/v1/admin/models/{model}/revocations",
            serde_json::to_value(&revocations),
        ),
    ] {
        doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["example"] =
            example.expect("json");
    }
    let out = dir.join("openapi.json");
    std::fs::write(&out, serde_json::to_vec_pretty(&doc).expect("json")).expect("write");
    out
}

/// The operations of the document with their method, path and operation object.
fn operations(doc: &serde_json::Value) -> Vec<(String, String, serde_json::Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if ["get", "head", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                out.push((method.to_uppercase(), path.clone(), op.clone()));
            }
        }
    }
    out
}

/// Codes with an HTTP status that no operation of the document answers with.
const NO_OPERATION: &[&str] = &[
    // Unknown paths and methods: no operation is involved (docs/errors.md).
    "not_found",
    "method_not_allowed",
    // Reported inside answers, not as one: the inspector's findings in a release's report,
    // and the reason a variant was left out in `explain` and in the client's load report.
    "pte_truncated",
    "pte_not_a_program",
    "pte_bad_header",
    "pte_malformed",
    "pte_limit_exceeded",
    "operators_missing",
    // Checked where the threshold can be above one (devices, `ferry keys`); the server's
    // checks need one signature.
    "signature_threshold",
    // Answered by a site mirror (`ferry serve --mirror-of`), not by the origin this document
    // describes (docs/operations.md, "A site mirror").
    "origin_unavailable",
];

#[test]
fn every_error_answer_names_its_codes_and_the_catalogue_gives_them_that_status() {
    use ferry_server::api::error::status_of;
    use ferry_shared::errors::ErrorCode;
    let doc = openapi();
    let mut declared = BTreeSet::new();
    for (method, path, op) in operations(&doc) {
        for (status, answer) in op["responses"].as_object().expect("responses") {
            let st: u16 = status.parse().expect("a numeric status");
            if st < 400 {
                continue;
            }
            let codes = answer["x-ferry-codes"]
                .as_array()
                .unwrap_or_else(|| panic!("{method} {path} {status}: no x-ferry-codes"));
            assert!(!codes.is_empty(), "{method} {path} {status}: no codes");
            for c in codes {
                let text = c.as_str().expect("a string");
                let code = ErrorCode::parse(text)
                    .unwrap_or_else(|| panic!("{method} {path} {status}: {text} is not a code"));
                assert_eq!(
                    status_of(code).as_u16(),
                    st,
                    "{method} {path}: the server answers {text} with {}, not {st}",
                    status_of(code)
                );
                declared.insert(text.to_string());
            }
        }
    }
    // Each code the server answers with (any status but 500, and `internal`) is declared on
    // some operation, or is one a telemetry batch refuses events with inside its 200.
    let telemetry: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../schemas/telemetry.schema.json"),
        )
        .expect("read"),
    )
    .expect("json");
    let per_event: BTreeSet<String> = telemetry["$defs"]["answer"]["properties"]["rejected"]
        ["items"]["properties"]["code"]["enum"]
        .as_array()
        .expect("per-event codes")
        .iter()
        .map(|c| c.as_str().expect("code").to_string())
        .collect();
    let missing: Vec<&str> = ErrorCode::ALL
        .iter()
        .filter(|c| status_of(**c).as_u16() != 500 || **c == ErrorCode::Internal)
        .map(|c| c.as_str())
        .filter(|c| !declared.contains(*c) && !per_event.contains(*c))
        .filter(|c| !NO_OPERATION.contains(c))
        .collect();
    assert!(
        missing.is_empty(),
        "codes the server answers with that no operation declares: {missing:?}"
    );
}

#[test]
fn each_admin_operation_needs_the_scope_it_declares() {
    use ferry_server::tokens::Scope;
    let tokens: Vec<(Scope, String)> = Scope::ALL
        .iter()
        .map(|s| (*s, format!("scope-{s}-token-0123456789abcdef")))
        .collect();
    let secrets = tokens.clone();
    let app = TestApp::start_with(Options {
        demo: true,
        tweak: Some(Box::new(move |c| {
            for (scope, secret) in &secrets {
                c.tokens.push(ferry_server::tokens::TokenEntry::from_secret(
                    &format!("only-{scope}"),
                    secret,
                    vec![*scope],
                ));
            }
        })),
        ..Default::default()
    });
    let doc = openapi();
    let mut checked = 0;
    for (method, path, op) in operations(&doc) {
        let Some(roles) = op["security"][0]["bearer"].as_array() else {
            assert!(
                !path.starts_with("/v1/admin/"),
                "{method} {path} declares no token"
            );
            continue;
        };
        // No role: any valid token.
        let needs = roles.first().and_then(|r| r.as_str());
        let url = app.at(&path
            .replace("{model}", "demo-mlp")
            .replace("{version}", "1.0.0")
            .replace("{hex}", &"0".repeat(64)));
        for (scope, secret) in &tokens {
            // An empty body: a token with the scope gets past the check (to a 4xx of the
            // request's own), one without gets 403 forbidden before the body is read.
            let request = ureq::http::Request::builder()
                .method(method.as_str())
                .uri(&url)
                .header("authorization", format!("Bearer {secret}"))
                .header("content-type", "application/json")
                .body(())
                .expect("request");
            let r = app
                .agent
                .run(request)
                .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
            let status = r.status().as_u16();
            if needs.is_none_or(|n| scope.to_string() == n) {
                assert!(
                    status != 401 && status != 403,
                    "{method} {path} with a {scope} token: {status}"
                );
            } else {
                assert_eq!(status, 403, "{method} {path} with a {scope} token");
            }
        }
        checked += 1;
    }
    assert!(checked >= 15, "{checked} admin operations");
    // A 401 names the scheme; the scheme's name is case-insensitive.
    let r = app
        .agent
        .get(app.at("/v1/admin/models"))
        .call()
        .expect("no token");
    let scheme = r
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok());
    assert_eq!(r.status().as_u16(), 401);
    assert!(
        scheme.is_some_and(|v| v.starts_with("Bearer")),
        "{scheme:?}"
    );
    let r = app
        .agent
        .get(app.at("/v1/admin/models"))
        .header("authorization", format!("bearer {}", tokens[2].1))
        .call()
        .expect("lowercase scheme");
    assert_eq!(r.status().as_u16(), 200);
    // A token says what it may do.
    for (scope, secret) in &tokens {
        let mut r = app
            .agent
            .get(app.at("/v1/admin/token"))
            .header("authorization", format!("Bearer {secret}"))
            .call()
            .expect("whoami");
        let body: serde_json::Value =
            serde_json::from_reader(r.body_mut().as_reader()).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"name": format!("only-{scope}"), "scopes": [scope.to_string()]})
        );
    }
}
