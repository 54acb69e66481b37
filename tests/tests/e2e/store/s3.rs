//! The scaled-out path on a real S3 emulator (moto): publish, resolve, ranged blobs, refusals
//! that leave nothing behind, and two replicas racing on one rollout without losing updates.

use ferry_shared::Sha256Digest;
use ferry_tests::app::{
    ADMIN_TOKEN, Options, READ_TOKEN, TestApp, mlp_v1, mlp_v2, profile, sign_manifest,
};
use ferry_tests::moto::Moto;

fn on_s3(moto: &Moto, bucket: &str) -> TestApp {
    let storage = moto.storage(bucket);
    TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(move |c| c.storage = storage)),
    })
}

#[test]
fn publish_resolve_and_download_on_s3() {
    let moto = Moto::start("ferry-a");
    let app = on_s3(&moto, "ferry-a");
    let (m, _) = app.publish(&mlp_v1());
    assert!(
        app.stored_files().is_empty(),
        "nothing may land in the local data directory"
    );

    let (status, body) = app.resolve(
        &profile(
            "android",
            &["XnnpackBackend", "VulkanBackend"],
            "1.5.1",
            "1.0.0",
            8192,
        ),
        false,
    );
    assert_eq!(status, 200, "{body}");
    let (d, _) = app.verify_response(&body);
    assert_eq!(
        d.candidates.last().map(|c| c.variant.as_str()),
        Some("xnnpack-fp32")
    );

    let v = m
        .variants
        .iter()
        .find(|v| v.id.as_str() == "xnnpack-fp32")
        .expect("variant");
    let url = app.at(&format!("/v1/blobs/sha256/{}", v.sha256.to_hex()));
    let mut whole = app.agent.get(&url).call().expect("get");
    assert_eq!(whole.status().as_u16(), 200);
    let full = whole.body_mut().read_to_vec().expect("body");
    assert_eq!(Sha256Digest::of(&full), v.sha256);
    let mut part = app
        .agent
        .get(&url)
        .header("range", "bytes=100-")
        .call()
        .expect("range");
    assert_eq!(part.status().as_u16(), 206);
    assert_eq!(part.body_mut().read_to_vec().expect("body"), full[100..]);

    // A refused release leaves nothing in the bucket; the existing one is immutable.
    let key = app.release_key();
    let mut missing = m.clone();
    missing.version = "1.0.1".parse().expect("version");
    missing.variants[0].sha256 = Sha256Digest::of(b"never uploaded");
    let (status, body) = app.post_release("mlp", &sign_manifest(&missing, &key));
    assert_eq!((status, body["code"].as_str()), (422, Some("blob_missing")));
    let (status, _) = app.get_json("/v1/admin/models/mlp/releases/1.0.1", Some(READ_TOKEN));
    assert_eq!(status, 404);
    let (status, body) = app.post_release("mlp", &sign_manifest(&m, &key));
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("release_exists"))
    );

    // A restarted replica loads the catalog from the bucket.
    let replica = app.replica(Some(moto.storage("ferry-a")));
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut resp = agent
        .get(format!("{}/v1/admin/models/mlp", replica.url()))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    let v: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json");
    assert_eq!(v["releases"][0]["version"], "1.0.0");
    replica.stop();
}

#[test]
fn two_replicas_race_on_one_rollout_in_s3() {
    let moto = Moto::start("ferry-b");
    let app = on_s3(&moto, "ferry-b");
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let (s, b) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        br#"{"action": "start", "release": "2.0.0", "percent": "1"}"#,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{b}");
    let replica = app.replica(Some(moto.storage("ferry-b")));
    app.race_rollout(&[app.url(), replica.url()], 6, 5);
    replica.stop();
}
