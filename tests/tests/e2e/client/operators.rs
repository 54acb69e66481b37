//! Operators, with real programs from ExecuTorch's LLM recipe and the real runtime: a release
//! whose first variant calls kernels the runtime libraries do not register
//! (`llama::custom_sdpa.out`, `llama::update_cache.out`) and whose second uses standard
//! kernels only. The signed manifest names each variant's operators; the client compares them
//! with what its runtime registered before downloading anything.

use std::sync::Arc;

use ferry_client::Source;
use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::runtime::{Program, Runtime, RuntimeError};
use ferry_shared::manifest::Platform;
use ferry_tests::app::{TestApp, tinyllm};
use ferry_tests::proxy::{Fault, FaultProxy};

use crate::client::e2e::phone;
use ferry_tests::kit::quick_limits;

/// The real runtime, except that it cannot say which operators it has (as a runtime binding
/// from before the operator list): what every client did before.
struct Unlisted(ExecuTorchRuntime);

impl Runtime for Unlisted {
    fn version(&self) -> semver::Version {
        self.0.version()
    }

    fn registered_backends(&self) -> Vec<String> {
        self.0.registered_backends()
    }

    fn open(
        &self,
        blob: &ferry_client::cache::VerifiedBlob,
    ) -> Result<Box<dyn Program>, RuntimeError> {
        self.0.open(blob)
    }
}

fn client_with(
    server: String,
    app: &TestApp,
    cache: &std::path::Path,
    runtime: Arc<dyn Runtime>,
) -> ferry_client::Client {
    app.client_at(&server, cache)
        .runtime(runtime)
        .download_limits(quick_limits())
        .build()
        .expect("client")
}

/// The blob requests the proxy saw.
fn blob_requests(proxy: &FaultProxy) -> Vec<String> {
    proxy
        .log()
        .into_iter()
        .filter(|l| l.line.contains("/v1/blobs/"))
        .map(|l| l.line)
        .collect()
}

#[test]
fn the_real_runtime_lists_its_operators_and_lacks_the_llm_kernels() {
    let ops = ExecuTorchRuntime::new()
        .registered_operators()
        .expect("the real runtime lists its operators");
    assert!(ops.len() > 100, "{} operators", ops.len());
    assert!(ops.windows(2).all(|w| w[0] < w[1]), "sorted, each once");
    for standard in ["aten::add.out", "aten::linear.out", "aten::embedding.out"] {
        assert!(ops.iter().any(|o| o == standard), "{standard}");
    }
    for custom in ["llama::custom_sdpa.out", "llama::update_cache.out"] {
        assert!(!ops.iter().any(|o| o == custom), "{custom}");
    }
}

/// The answer a server from before operators gives the client's request (no operator
/// fields: it would ignore them), as a relay could replay it.
fn old_server_answer(app: &TestApp) -> Vec<u8> {
    let runtime = ExecuTorchRuntime::new();
    let dev = phone(Platform::Linux, &[]);
    let req = serde_json::json!({
        "model": "tinyllm",
        "install_id": dev.install_id,
        "app_version": "1.0.0",
        "runtime_version": runtime.version().to_string(),
        "backends": runtime.registered_backends(),
        // What the real client sends: its runtime opens sealed variants.
        "seal_schemes": [ferry_shared::manifest::SEAL_SCHEME],
        "platform": "linux",
        "os_version": dev.os_version,
        "device_model": dev.device_model,
        "soc": dev.soc,
        "ram_mb": dev.ram_mb,
    });
    let (status, body) = app.resolve(&req, false);
    assert_eq!(status, 200, "{body}");
    serde_json::to_vec(&body).expect("json")
}

#[test]
fn facing_a_server_from_before_operators_the_client_skips_the_variant_before_its_download() {
    let app = TestApp::start();
    app.publish(&tinyllm());
    let dev = phone(Platform::Linux, &[]);
    // The server ignores the operator digest (it predates it) and offers both variants; the
    // client accepts its decision (made for the profile without the digest) and checks each
    // candidate's signed operators itself.
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client_with(
        proxy.url(),
        &app,
        cache.path(),
        Arc::new(ExecuTorchRuntime::new()),
    );
    proxy.resolve_faults([Fault::Replace(old_server_answer(&app))]);
    let plan = c.resolve("tinyllm", &dev).expect("an old server's answer");
    let custom = plan.candidates()[0].variant().operators_needed();
    assert!(
        custom.iter().any(|o| o == "llama::custom_sdpa.out"),
        "{custom:?}"
    );
    assert!(custom.iter().any(|o| o == "llama::update_cache.out"));
    let standard = plan.candidates()[1].variant().operators_needed();
    assert!(
        !standard.iter().any(|o| o.starts_with("llama::")),
        "{standard:?}"
    );

    proxy.resolve_faults([Fault::Replace(old_server_answer(&app))]);
    let m = c.load("tinyllm", &dev).expect("the standard variant loads");
    assert_eq!(m.variant, "standard");
    assert!(matches!(m.source, Source::Downloaded));
    let skipped = &m.attempts[0];
    assert_eq!(skipped.variant, "custom-kernels");
    assert_eq!(skipped.error_code, "operators_missing");
    assert_eq!(skipped.stage.as_str(), "select");
    assert!(
        skipped.message.contains("llama::custom_sdpa.out")
            && skipped.message.contains("llama::update_cache.out"),
        "{}",
        skipped.message
    );
    // Only the standard program's bytes crossed the network.
    let blobs = blob_requests(&proxy);
    let standard_digest = plan.candidates()[1].variant().sha256.to_hex();
    assert!(!blobs.is_empty());
    assert!(
        blobs.iter().all(|l| l.contains(&standard_digest)),
        "{blobs:?}"
    );
    // The fallback is reported: telemetry says which variant was passed over and why.
    let events = c.telemetry_pending();
    assert!(
        events.iter().any(|e| e.variant == "custom-kernels"
            && e.error_code.as_deref() == Some("operators_missing")
            && e.stage.as_deref() == Some("select")),
        "{events:?}"
    );
}

#[test]
fn a_runtime_that_cannot_list_its_operators_downloads_both_as_before() {
    // What the check saves: without it, the custom-kernel program is downloaded whole and
    // fails `load_method` (OperatorMissing), then the standard one is downloaded.
    let app = TestApp::start();
    app.publish(&tinyllm());
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client_with(
        proxy.url(),
        &app,
        cache.path(),
        Arc::new(Unlisted(ExecuTorchRuntime::new())),
    );
    let m = c
        .load("tinyllm", &phone(Platform::Linux, &[]))
        .expect("loads after a failed attempt");
    assert_eq!(m.variant, "standard");
    assert_eq!(m.attempts[0].variant, "custom-kernels");
    assert_eq!(
        m.attempts[0].stage.as_str(),
        "load_method",
        "{:?}",
        m.attempts
    );
    let blobs = blob_requests(&proxy);
    let plan = c
        .resolve("tinyllm", &phone(Platform::Linux, &[]))
        .expect("plan");
    for v in plan.candidates() {
        let hex = v.variant().sha256.to_hex();
        assert!(blobs.iter().any(|l| l.contains(&hex)), "{hex}: {blobs:?}");
    }
}

/// A resolve request for `tinyllm` from a device whose runtime registered `ops`: with the
/// digest, and the list too when `with_list`.
fn llm_request(ops: &[String], with_list: bool) -> serde_json::Value {
    let mut req = ferry_tests::app::profile("linux", &[], "1.5.1", "1.0.0", 4096);
    req["model"] = "tinyllm".into();
    req["operators_digest"] = ferry_shared::select::operators::digest(ops).to_hex().into();
    if with_list {
        req["operators"] = serde_json::json!(ops);
    }
    req
}

fn candidate_ids(app: &TestApp, body: &serde_json::Value) -> Vec<String> {
    let (decision, _) = app.verify_response(body);
    decision
        .candidates
        .iter()
        .map(|c| c.variant.as_str().to_string())
        .collect()
}

#[test]
fn the_server_learns_a_runtimes_operators_once_and_every_replica_selects_by_them() {
    let app = TestApp::start();
    app.publish(&tinyllm());
    let proxy = FaultProxy::start(app.server.addr);
    let runtime = ExecuTorchRuntime::new();
    let ops = runtime.registered_operators().expect("operators");

    // A new client: the server does not know its digest, asks for the list once, and the
    // decision it then makes offers only the standard variant.
    let cache = tempfile::tempdir().expect("tmp");
    let c = client_with(proxy.url(), &app, cache.path(), Arc::new(runtime));
    let plan = c
        .resolve("tinyllm", &phone(Platform::Linux, &[]))
        .expect("resolve");
    let ids: Vec<&str> = plan
        .candidates()
        .iter()
        .map(|p| p.variant().id.as_str())
        .collect();
    assert_eq!(ids, ["standard"]);
    let resolves = |p: &FaultProxy| {
        p.log()
            .iter()
            .filter(|l| l.line.contains("/v1/resolve"))
            .count()
    };
    assert_eq!(resolves(&proxy), 2, "the digest, then the list once");
    c.resolve("tinyllm", &phone(Platform::Linux, &[]))
        .expect("again");
    assert_eq!(resolves(&proxy), 3, "known now: the digest alone");

    // Another replica (a restart, say) reads the set from the store: the digest alone is
    // enough, and explain names what the runtime lacks.
    let replica = app.try_replica_at("127.0.0.1:0").expect("replica");
    let mut other = app
        .agent
        .post(format!("{}/v1/resolve?explain=true", replica.url()));
    other = other.header("content-type", "application/json");
    let mut resp = other
        .send(&serde_json::to_vec(&llm_request(&ops, false)).expect("json")[..])
        .expect("resolve");
    assert_eq!(resp.status().as_u16(), 200);
    let body: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json");
    assert!(body.get("operators_wanted").is_none(), "{body}");
    assert_eq!(candidate_ids(&app, &body), ["standard"]);
    let why = body["explain"]
        .as_array()
        .expect("explain")
        .iter()
        .find(|e| e["variant"] == "custom-kernels")
        .expect("custom-kernels explained")["reasons"]
        .to_string();
    assert!(
        why.contains("operators_missing")
            && why.contains("llama::custom_sdpa.out")
            && why.contains("llama::update_cache.out"),
        "{why}"
    );
    replica.stop();
}

#[test]
fn old_clients_unknown_digests_and_runtimes_with_the_kernels_get_what_they_should() {
    let app = TestApp::start();
    app.publish(&tinyllm());
    let ops = ExecuTorchRuntime::new()
        .registered_operators()
        .expect("operators");

    // A client from before operators: both variants, as before, and nothing asked of it.
    let mut old = ferry_tests::app::profile("linux", &[], "1.5.1", "1.0.0", 4096);
    old["model"] = "tinyllm".into();
    let (status, body) = app.resolve(&old, false);
    assert_eq!(status, 200, "{body}");
    assert!(body.get("operators_wanted").is_none(), "{body}");
    assert_eq!(candidate_ids(&app, &body), ["custom-kernels", "standard"]);

    // A digest no replica knows: answered without the check, and the list is asked for.
    let (status, body) = app.resolve(&llm_request(&ops, false), false);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["operators_wanted"], true, "{body}");
    assert_eq!(candidate_ids(&app, &body), ["custom-kernels", "standard"]);

    // A runtime that links the recipe's kernels (as an app that builds them in): the faster
    // variant first.
    let mut with_llm = ops.clone();
    with_llm.extend([
        "llama::custom_sdpa.out".into(),
        "llama::update_cache.out".into(),
    ]);
    let with_llm = ferry_shared::select::operators::normalize(with_llm);
    let (status, body) = app.resolve(&llm_request(&with_llm, true), false);
    assert_eq!(status, 200, "{body}");
    assert_eq!(candidate_ids(&app, &body), ["custom-kernels", "standard"]);

    // A selective build that left out an operator both need: no variant, and the answer says
    // which operators to link.
    let lean: Vec<String> = ops
        .iter()
        .filter(|o| o.as_str() != "aten::linear.out")
        .cloned()
        .collect();
    let (status, body) = app.resolve(&llm_request(&lean, true), false);
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "no_compatible_variant");
    assert!(
        body["details"].to_string().contains("aten::linear.out"),
        "{body}"
    );
}

#[test]
fn operator_lists_that_do_not_match_their_digest_or_the_limits_are_refused() {
    let app = TestApp::start();
    app.publish(&tinyllm());
    let ops: Vec<String> = vec!["aten::add.out".into(), "aten::mul.out".into()];
    let mut cases = Vec::new();
    let mut wrong = llm_request(&ops, true);
    wrong["operators"] = serde_json::json!(["aten::add.out"]);
    cases.push(("a list that is not the digest's", wrong));
    let mut no_digest = llm_request(&ops, true);
    no_digest
        .as_object_mut()
        .expect("object")
        .remove("operators_digest");
    cases.push(("a list without a digest", no_digest));
    let many: Vec<String> = (0..5000).map(|i| format!("x::op{i}.out")).collect();
    cases.push(("5000 operators", llm_request(&many, true)));
    let hostile = vec!["aten::add.out\n../../etc".to_string()];
    cases.push(("a name with a newline", llm_request(&hostile, true)));
    let mut bad_digest = llm_request(&ops, false);
    bad_digest["operators_digest"] = "not-hex".into();
    cases.push(("a digest that is not hex", bad_digest));
    for (what, req) in cases {
        let (status, body) = app.resolve(&req, false);
        assert_eq!(status, 400, "{what}: {body}");
        assert!(
            ["request_invalid", "request_malformed"].contains(&body["code"].as_str().unwrap_or("")),
            "{what}: {body}"
        );
    }
    // Nothing was recorded for the refused lists.
    let stored = app.dir.path().join("store/operators");
    assert!(!stored.exists(), "{}", stored.display());
}

fn fast(c: &mut ferry_server::app::config::Config) {
    c.telemetry.flush_secs = 1;
    c.telemetry.raw_roll_secs = 1;
}

/// `POST path` on `url` with `body` as the admin.
fn admin_post(app: &TestApp, url: &str, path: &str, body: &serde_json::Value) -> serde_json::Value {
    let mut resp = app
        .agent
        .post(format!("{url}{path}"))
        .header(
            "authorization",
            format!("Bearer {}", ferry_tests::app::ADMIN_TOKEN),
        )
        .header("content-type", "application/json")
        .send(&serde_json::to_vec(body).expect("json")[..])
        .expect("post");
    let status = resp.status().as_u16();
    let v: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json");
    assert_eq!(status, 200, "{v}");
    v
}

fn model_view(app: &TestApp, url: &str) -> serde_json::Value {
    let mut resp = app
        .agent
        .get(format!("{url}/v1/admin/models/tinyllm"))
        .header(
            "authorization",
            format!("Bearer {}", ferry_tests::app::ADMIN_TOKEN),
        )
        .call()
        .expect("get");
    serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json")
}

#[test]
fn the_runtime_census_and_the_pre_ramp_warning_hold_across_three_replicas_and_a_restart() {
    let app = TestApp::start_with(ferry_tests::app::Options {
        tweak: Some(Box::new(fast)),
        ..Default::default()
    });
    app.publish(&tinyllm());
    // 2.0.0 ships only the custom-kernel variant (published, not live: devices get 1.0.0).
    let mut v2 = tinyllm();
    v2.version = "2.0.0".parse().expect("version");
    v2.variants.retain(|v| v.id.as_str() == "custom-kernels");
    app.publish(&v2);
    let mut replicas: Vec<_> = (0..3)
        .map(|_| app.replica_with(None, Box::new(fast)))
        .collect();
    let ops = ExecuTorchRuntime::new()
        .registered_operators()
        .expect("operators");
    let mut with_llm = ops.clone();
    with_llm.extend([
        "llama::custom_sdpa.out".into(),
        "llama::update_cache.out".into(),
    ]);
    let with_llm = ferry_shared::select::operators::normalize(with_llm);
    // Six devices on app 1.0.0 with the wheel's runtime and two on app 2.0.0 whose runtime
    // links the recipe's kernels, spread over the replicas; the first of each sends its list.
    let mut sent = 0;
    for (i, (app_version, set)) in std::iter::repeat_n(("1.0.0", &ops), 6)
        .chain(std::iter::repeat_n(("2.0.0", &with_llm), 2))
        .enumerate()
    {
        let mut req = llm_request(set, i == 0 || i == 6);
        req["install_id"] = format!("census-{i}").into();
        req["app_version"] = app_version.into();
        let url = replicas[i % 3].url();
        let mut resp = app
            .agent
            .post(format!("{url}/v1/resolve"))
            .header("content-type", "application/json")
            .send(&serde_json::to_vec(&req).expect("json")[..])
            .expect("resolve");
        assert_eq!(resp.status().as_u16(), 200);
        let body = resp.body_mut().read_to_string().expect("body");
        assert!(!body.contains("operators_wanted"), "device {i}: {body}");
        sent += 1;
    }
    assert_eq!(sent, 8);

    // Every replica comes to see the whole census: the standard variant runs on all eight,
    // the custom-kernel one on the two.
    let settled = |url: &str| {
        let v = model_view(&app, url);
        let r = &v["releases"][1]["runtimes"];
        r["known_devices"] == 8
            && r["variants"]["standard"]["runnable_devices"] == 8
            && r["variants"]["custom-kernels"]["runnable_devices"] == 2
    };
    for r in &replicas {
        let url = r.url();
        let mut ok = false;
        for _ in 0..100 {
            if settled(&url) {
                ok = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(ok, "{url}: {}", model_view(&app, &url));
    }

    // Starting the ramp of 2.0.0 warns that the six
    // devices on app 1.0.0 run none of it, naming what their runtime lacks.
    let start = serde_json::json!({"action": "start", "release": "2.0.0", "percent": "5"});
    let answer = admin_post(
        &app,
        &replicas[1].url(),
        "/v1/admin/models/tinyllm/rollout?dry_run=true",
        &start,
    );
    let warnings = answer["warnings"].to_string();
    assert!(
        warnings.contains("6 devices on app 1.0.0")
            && warnings.contains("llama::custom_sdpa.out")
            && !warnings.contains("app 2.0.0"),
        "{answer}"
    );

    // After a restart the replica reads the census and the sets from the store again.
    let restarted = replicas.remove(0);
    restarted.stop();
    let again = app.replica_with(None, Box::new(fast));
    let mut ok = false;
    for _ in 0..100 {
        if settled(&again.url()) {
            ok = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(ok, "{}", model_view(&app, &again.url()));
    let answer = admin_post(
        &app,
        &again.url(),
        "/v1/admin/models/tinyllm/rollout?dry_run=true",
        &start,
    );
    assert!(
        answer["warnings"]
            .to_string()
            .contains("6 devices on app 1.0.0"),
        "{answer}"
    );
}
