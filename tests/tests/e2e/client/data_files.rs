//! Programs whose weights live in a separate `.ptd` data file, end to end with the real
//! exporter's files, the real server and the real ExecuTorch runtime: signed with their data
//! file, published, downloaded and verified as one unit, loaded with the data file and matched
//! against the exporter's eager output; a data file shared by two programs is downloaded once;
//! a data file that does not match its signed digest keeps the program from loading.

use std::path::Path;
use std::sync::Arc;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{Client, ClientBuilder, ClientError, Source, Stage, max_abs_diff};
use ferry_server::release::sign::VariantsFile;
use ferry_shared::Sha256Digest;
use ferry_shared::manifest::{Delegate, TensorValue};
use ferry_tests::app::{TestApp, variant};
use ferry_tests::kit::device;

const PROGRAM: &str = "mlp-external-portable.pte";
const DATA: &str = "mlp-external-portable.ptd";

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(ferry_tests::fixtures_dir().join("pte").join(name)).expect("fixture")
}

fn sidecar() -> serde_json::Value {
    serde_json::from_slice(&fixture("mlp-external-portable.json")).expect("sidecar")
}

fn tensors(v: &serde_json::Value) -> Vec<TensorValue> {
    serde_json::from_value(v.clone()).expect("tensors")
}

fn client(app: &TestApp, cache: &Path) -> Arc<Client> {
    Arc::new(app.client(cache).build().expect("client"))
}

/// `model` 1.0.0 with one portable variant: the external-weights program, its data file and
/// the exporter's golden.
fn spec(model: &str) -> VariantsFile {
    let mut v = variant("portable-fp32", PROGRAM, Delegate::Portable, ">=1.0.0", "*");
    v.data = vec![DATA.into()];
    v.golden = Some("mlp-external-portable.json".into());
    ferry_tests::releases::release(model, "1.0.0", vec![v])
}

#[test]
fn a_program_with_its_weights_in_a_ptd_is_published_fetched_and_matches_the_exporter() {
    let app = TestApp::start();
    let (manifest, _) = app.publish(&spec("ext"));
    let data = fixture(DATA);
    let program = fixture(PROGRAM);
    // The signed manifest carries the data file by name, digest and size.
    let v = &manifest.variants[0];
    assert_eq!(v.extra_files.len(), 1);
    assert_eq!(
        (
            v.extra_files[0].name.as_str(),
            v.extra_files[0].sha256,
            v.extra_files[0].size
        ),
        (DATA, Sha256Digest::of(&data), data.len() as u64)
    );
    // Operators see the full download (program and data file), not the program alone.
    let (_, m) = app.get_json("/v1/admin/models/ext", Some(ferry_tests::app::ADMIN_TOKEN));
    assert_eq!(
        m["releases"][0]["variants"][0]["download_bytes"],
        (program.len() + data.len()) as u64,
        "{m}"
    );

    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, cache.path());
    let plan = c
        .plan_download("ext", &device("data-file-device"))
        .expect("plan");
    let total = (program.len() + data.len()) as u64;
    assert_eq!(
        (plan.size, plan.to_download),
        (total, total),
        "the plan counts the program and its data file"
    );
    let served_before = app.blob_bytes_served();
    let mut loaded = c
        .load("ext", &device("data-file-device"))
        .expect("loads with its data file");
    assert_eq!(loaded.source, Source::Downloaded);
    assert_eq!(app.blob_bytes_served() - served_before, total);
    // The signed golden (the exporter's eager output) ran at load time and passed.
    assert!(
        loaded.golden_max_abs_diff.is_some(),
        "the golden check ran: {:?}",
        loaded.report
    );
    let side = sidecar();
    let got = loaded.run(&tensors(&side["input"])).expect("forward runs");
    let want = tensors(&side["output"]);
    let diff = max_abs_diff(&got, &want).expect("same types and shapes");
    assert!(
        diff <= side["atol"].as_f64().expect("atol"),
        "max |diff| {diff}"
    );
    // Both files are in the cache under their digests, and the app is told where.
    for d in [Sha256Digest::of(&program), Sha256Digest::of(&data)] {
        assert!(cache.path().join("blobs/sha256").join(d.to_hex()).is_file());
    }
    assert_eq!(
        loaded.data_files,
        [cache
            .path()
            .join("blobs/sha256")
            .join(Sha256Digest::of(&data).to_hex())]
    );
    drop(loaded);

    // Offline: the last known good comes back with its data file.
    let (url, trust) = (app.url(), app.trust());
    drop(c);
    drop(app);
    let offline = ClientBuilder::new(url, trust)
        .cache_dir(cache.path())
        .app_version(semver::Version::new(1, 0, 0))
        .runtime(Arc::new(ExecuTorchRuntime::new()))
        .build()
        .expect("client");
    let mut cached = offline
        .load("ext", &device("data-file-device"))
        .expect("the cached program and data file load offline");
    assert!(
        matches!(cached.source, Source::LastKnownGood { .. }),
        "{:?}",
        cached.source
    );
    let got = cached.run(&tensors(&side["input"])).expect("runs");
    assert!(max_abs_diff(&got, &want).expect("shapes") <= side["atol"].as_f64().expect("atol"));
}

#[test]
fn a_data_file_two_programs_share_is_downloaded_once() {
    let app = TestApp::start();
    app.publish(&spec("ext-a"));
    app.publish(&spec("ext-b"));
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, cache.path());
    let (program, data) = (fixture(PROGRAM).len() as u64, fixture(DATA).len() as u64);

    let before = app.blob_bytes_served();
    let a = c
        .load("ext-a", &device("data-file-device"))
        .expect("a loads");
    assert_eq!(app.blob_bytes_served() - before, program + data);
    drop(a);
    // The second model names the same files: the plan and the load fetch nothing.
    let plan = c
        .plan_download("ext-b", &device("data-file-device"))
        .expect("plan");
    assert_eq!((plan.size, plan.to_download), (program + data, 0));
    let before = app.blob_bytes_served();
    let b = c
        .load("ext-b", &device("data-file-device"))
        .expect("b loads");
    assert_eq!(
        app.blob_bytes_served(),
        before,
        "nothing was downloaded again"
    );
    assert_eq!(b.source, Source::Cached);
    let files: Vec<_> = std::fs::read_dir(cache.path().join("blobs/sha256"))
        .expect("dir")
        .flatten()
        .collect();
    assert_eq!(files.len(), 2, "one program and one data file: {files:?}");
}

#[test]
fn a_data_file_that_does_not_match_its_digest_keeps_the_program_from_loading() {
    let app = TestApp::start();
    let (manifest, _) = app.publish(&spec("ext"));
    // The store's copy of the data file goes bad after publishing (same size, one bit).
    let digest = manifest.variants[0].extra_files[0].sha256;
    let stored = app.store_dir().join("blobs/sha256").join(digest.to_hex());
    let mut bytes = std::fs::read(&stored).expect("stored data file");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&stored, &bytes).expect("tamper");

    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, cache.path());
    let err = c
        .load("ext", &device("data-file-device"))
        .expect_err("must not load");
    let ClientError::AllCandidatesFailed { attempts } = &err else {
        panic!("{err}");
    };
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].stage, Stage::Verify, "{attempts:?}");
    assert_eq!(attempts[0].error_code, "hash_mismatch", "{attempts:?}");
    assert!(
        attempts[0]
            .message
            .contains("data file mlp-external-portable.ptd"),
        "the message names the data file: {}",
        attempts[0].message
    );
    // The bad bytes never reached the cache, and nothing was remembered as good.
    assert!(
        !cache
            .path()
            .join("blobs/sha256")
            .join(digest.to_hex())
            .exists()
    );
    assert!(c.cached("ext").is_none());
}

#[test]
fn a_data_file_cut_short_in_the_store_is_a_size_mismatch_at_once() {
    let app = TestApp::start();
    let (manifest, _) = app.publish(&spec("ext"));
    let digest = manifest.variants[0].extra_files[0].sha256;
    let stored = app.store_dir().join("blobs/sha256").join(digest.to_hex());
    let bytes = std::fs::read(&stored).expect("stored data file");
    std::fs::write(&stored, &bytes[..bytes.len() - 100]).expect("truncate");

    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, cache.path());
    let err = c
        .load("ext", &device("data-file-device"))
        .expect_err("must not load");
    let ClientError::AllCandidatesFailed { attempts } = &err else {
        panic!("{err}");
    };
    // Settled by the server's first answer (its length), not a network error after retries.
    assert_eq!(attempts[0].stage, Stage::Verify, "{attempts:?}");
    assert_eq!(attempts[0].error_code, "size_mismatch", "{attempts:?}");
    assert!(
        attempts[0].message.contains(&format!(
            "holds {} bytes; the signed manifest says {}",
            bytes.len() - 100,
            bytes.len()
        )),
        "{attempts:?}"
    );
    assert!(c.cached("ext").is_none());
}

#[test]
fn a_mapped_program_and_data_file_load_and_match_the_exporter() {
    let app = TestApp::start();
    app.publish(&spec("mapped"));
    let side = sidecar();
    for (mmap_from, mode) in [(0, "mmap"), (u64::MAX, "file")] {
        let cache = tempfile::tempdir().expect("tmp");
        let c = Arc::new(
            ClientBuilder::new(app.url(), app.trust())
                .cache_dir(cache.path())
                .app_version(semver::Version::new(1, 0, 0))
                .runtime(Arc::new(ExecuTorchRuntime::new().mmap_from(mmap_from)))
                .build()
                .expect("client"),
        );
        let mut loaded = c
            .load("mapped", &device("data-file-device"))
            .expect("loads");
        assert_eq!(loaded.report.load_mode.as_deref(), Some(mode));
        // The golden ran at load, and forward matches the exporter's eager output.
        assert!(loaded.golden_max_abs_diff.is_some(), "{:?}", loaded.report);
        let got = loaded.run(&tensors(&side["input"])).expect("forward runs");
        let diff = max_abs_diff(&got, &tensors(&side["output"])).expect("comparable");
        assert!(
            diff <= side["atol"].as_f64().expect("atol"),
            "{mode}: {diff}"
        );
    }
}
