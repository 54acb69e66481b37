//! Signed model metadata and the evaluation, end to end with the committed digits release
//! (`tests/fixtures/eval`): the labels file and preprocessing declared in VARIANTS.toml and the
//! evaluation run through the real runtime are signed, published to a real server, fetched by
//! the client, and reach the app (labels, preprocessing, the labels file by path), also when it
//! loads offline from its cache; an asset altered in the cache is fetched again, never handed
//! to the app; the admin API shows the evaluation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_client::{Client, Source};
use ferry_server::release::sign::{build, read_variants, sign};
use ferry_shared::manifest::{ColorOrder, ReleaseManifest, ResizeFilter};
use ferry_tests::app::{ADMIN_TOKEN, TestApp};
use ferry_tests::kit::device;

fn eval_dir() -> PathBuf {
    ferry_tests::fixtures_dir().join("eval")
}

fn client(url: &str, app: &TestApp, cache: &Path) -> Arc<Client> {
    Arc::new(app.client_at(url, cache).build().expect("client"))
}

/// Signs the digits release without its damaged variant, with its evaluation, and publishes
/// it (blobs first); returns the manifest.
fn publish_digits(app: &TestApp) -> ReleaseManifest {
    let base = eval_dir();
    let mut spec = read_variants(&base.join("VARIANTS.toml")).expect("VARIANTS.toml");
    spec.variants.retain(|v| v.id.as_str() != "int8-damaged");
    let read = |p: &Path| -> anyhow::Result<Vec<u8>> { Ok(std::fs::read(p)?) };
    let built = build(&spec, &base, &read, time::OffsetDateTime::now_utc()).expect("builds");
    assert_eq!(built.warnings, Vec::<String>::new());
    let report = ferry_server::release::evaluate::run::evaluate(&spec, &base, &mut |_, _| {})
        .expect("evaluates");
    assert!(report.failed().is_empty(), "{:?}", report.evaluation);
    let mut manifest = built.manifest;
    manifest.evaluation = Some(report.evaluation);
    let envelope = sign(&manifest, &app.release_key()).expect("signs");
    for f in &built.files {
        for path in std::iter::once(&f.path)
            .chain(f.data.iter().map(|d| &d.path))
            .chain(f.assets.iter().map(|a| &a.path))
        {
            let status = app.put_blob(&std::fs::read(path).expect("file"));
            assert!(
                status == 200 || status == 201,
                "{}: {status}",
                path.display()
            );
        }
    }
    let (status, body) = app.post_release("digits", &envelope);
    assert_eq!(status, 201, "{body}");
    manifest
}

#[test]
fn labels_preprocessing_and_evaluation_reach_the_app_through_sign_publish_and_fetch() {
    let app = TestApp::start();
    let manifest = publish_digits(&app);
    let v = &manifest.variants[0];
    assert_eq!(v.labels.as_deref(), Some("digits-labels.txt"));
    assert_eq!(v.assets.len(), 1);

    let work = tempfile::tempdir().expect("tmp");
    let cache = work.path().join("cache");
    let c = client(&app.url(), &app, &cache);
    let model = c.load("digits", &device("metadata-device")).expect("loads");
    let want: Vec<String> = std::fs::read_to_string(eval_dir().join("digits-labels.txt"))
        .expect("labels")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(model.labels(), Some(want.as_slice()));
    assert_eq!(want.len(), 10);
    let p = model.preprocess().expect("preprocess");
    let resize = p.resize.as_ref().expect("resize");
    assert_eq!((resize.width, resize.height), (8, 8));
    assert_eq!(resize.filter, Some(ResizeFilter::Area));
    assert_eq!(p.color, Some(ColorOrder::Gray));
    assert_eq!(p.range, Some([0.0, 1.0]));
    let path = model.asset("digits-labels.txt").expect("asset path");
    assert!(path.starts_with(&cache), "{}", path.display());
    assert_eq!(
        std::fs::read(path).expect("asset"),
        std::fs::read(eval_dir().join("digits-labels.txt")).expect("labels")
    );
    assert_eq!(model.asset("nothing.txt"), None);

    // The evaluation arrives with the signed manifest on the device path, unchanged.
    let plan = c
        .resolve("digits", &device("metadata-device"))
        .expect("resolves");
    assert_eq!(plan.value().manifest().evaluation, manifest.evaluation);
    let e = manifest.evaluation.as_ref().expect("evaluation");
    assert_eq!(e.samples, 536);
    assert_eq!(e.results["int8"].passed, Some(true));

    // The admin API shows it: the release in full, the model's list in short.
    let (status, r) = app.get_json("/v1/admin/models/digits/releases/1.0.0", Some(ADMIN_TOKEN));
    assert_eq!(status, 200);
    assert_eq!(r["evaluation"]["metric"], "top1");
    assert_eq!(r["evaluation"]["results"]["int8"]["passed"], true);
    assert_eq!(r["variants"][0]["labels"], "digits-labels.txt");
    let (status, m) = app.get_json("/v1/admin/models/digits", Some(ADMIN_TOKEN));
    assert_eq!(status, 200);
    let row = &m["releases"][0]["evaluation"];
    assert_eq!(row["metric"], "top1");
    assert_eq!(row["failed"], serde_json::json!([]));
    assert_eq!(
        row["results"]["fp32"]["value"],
        e.results["fp32"].value.expect("v")
    );
    drop(model);

    // Offline (nothing listens at this address), the last known good keeps its metadata.
    let offline = client("http://127.0.0.1:9", &app, &cache);
    let model = offline
        .load("digits", &device("metadata-device"))
        .expect("loads from the cache");
    assert!(
        matches!(model.source, Source::LastKnownGood { .. }),
        "{:?}",
        model.source
    );
    assert_eq!(model.labels(), Some(want.as_slice()));
    assert_eq!(model.preprocess(), manifest.variants[0].preprocess.as_ref());
    let cached_asset = model
        .asset("digits-labels.txt")
        .expect("asset")
        .to_path_buf();
    drop(model);

    // An asset altered in the cache is never handed over: the next load fetches it again.
    std::fs::write(&cached_asset, b"zero\none\nTAMPERED\n").expect("tamper");
    let model = c.load("digits", &device("metadata-device")).expect("loads");
    assert_eq!(model.labels(), Some(want.as_slice()));
    assert_eq!(
        std::fs::read(model.asset("digits-labels.txt").expect("asset")).expect("read"),
        std::fs::read(eval_dir().join("digits-labels.txt")).expect("labels")
    );
}
