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
