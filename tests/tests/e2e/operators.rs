//! Operators, with real programs from ExecuTorch's LLM recipe and the real runtime: a release
//! whose first variant calls kernels the runtime libraries do not register
//! (`llama::custom_sdpa.out`, `llama::update_cache.out`) and whose second uses standard
//! kernels only. The signed manifest names each variant's operators; the client compares them
//! with what its runtime registered before downloading anything.

use std::sync::Arc;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::runtime::{Program, Runtime, RuntimeError};
use ferry_client::{ClientBuilder, Source};
use ferry_shared::manifest::Platform;
use ferry_tests::app::{TestApp, tinyllm};
use ferry_tests::proxy::FaultProxy;

use crate::client_e2e::{device, quick_limits};

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
    ClientBuilder::new(server, app.trust())
        .cache_dir(cache)
        .app_version(semver::Version::new(1, 0, 0))
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

#[test]
fn a_variant_calling_kernels_the_runtime_lacks_is_skipped_before_its_download() {
    let app = TestApp::start();
    let spec = tinyllm();
    app.publish(&spec);
    let dev = device(Platform::Linux, &[]);

    // The signed manifest names the operators, from the programs themselves.
    let proxy = FaultProxy::start(app.server.addr);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client_with(
        proxy.url(),
        &app,
        cache.path(),
        Arc::new(ExecuTorchRuntime::new()),
    );
    let plan = c.resolve("tinyllm", &dev).expect("resolve");
    let custom = &plan.candidates()[0].variant().operators;
    assert!(
        custom.iter().any(|o| o == "llama::custom_sdpa.out"),
        "{custom:?}"
    );
    assert!(custom.iter().any(|o| o == "llama::update_cache.out"));
    let standard = &plan.candidates()[1].variant().operators;
    assert!(
        !standard.iter().any(|o| o.starts_with("llama::")),
        "{standard:?}"
    );

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
        .load("tinyllm", &device(Platform::Linux, &[]))
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
        .resolve("tinyllm", &device(Platform::Linux, &[]))
        .expect("plan");
    for v in plan.candidates() {
        let hex = v.variant().sha256.to_hex();
        assert!(blobs.iter().any(|l| l.contains(&hex)), "{hex}: {blobs:?}");
    }
}
