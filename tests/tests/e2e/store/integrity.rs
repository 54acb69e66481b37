//! What a power cut or a SIGKILL leaves in the store is repaired or skipped, never served or
//! wedged: torn blobs, torn revisions, staging files of killed uploads.

use ferry_shared::Sha256Digest;
use ferry_tests::app::{ADMIN_TOKEN, TestApp, fixture_bytes_by_digest, mlp_v1, mlp_v2};

#[test]
fn a_torn_blob_is_replaced_by_the_next_upload() {
    let app = TestApp::start();
    let (manifest, _) = app.publish(&mlp_v1());
    let v = &manifest.variants[0];
    let path = app
        .store_dir()
        .join(format!("blobs/sha256/{}", v.sha256.to_hex()));
    let full = std::fs::read(&path).expect("blob");
    // What a power cut without fsync leaves: the final name with part of the bytes.
    std::fs::write(&path, &full[..full.len() / 3]).expect("truncate");
    let status = app.put_blob(&fixture_bytes_by_digest(&v.sha256));
    assert!(status == 200 || status == 201, "{status}");
    let repaired = std::fs::read(&path).expect("blob");
    assert_eq!(
        Sha256Digest::of(&repaired),
        v.sha256,
        "the upload replaced the torn blob"
    );
    // An intact blob is not rewritten: the same upload again reports it as existing.
    assert_eq!(app.put_blob(&fixture_bytes_by_digest(&v.sha256)), 200);
}

#[test]
fn a_release_is_refused_while_one_of_its_blobs_is_torn() {
    let app = TestApp::start();
    let (manifest, _) = app.publish(&mlp_v1());
    let spec = mlp_v2();
    let (m2, env) = ferry_tests::app::signed_release(&spec, &app.release_key());
    for v in &m2.variants {
        assert!(matches!(
            app.put_blob(&fixture_bytes_by_digest(&v.sha256)),
            200 | 201
        ));
    }
    let torn = &m2.variants[0];
    let path = app
        .store_dir()
        .join(format!("blobs/sha256/{}", torn.sha256.to_hex()));
    let bytes = std::fs::read(&path).expect("blob");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");
    let (status, body) = app.post_release(manifest.model.as_str(), &env);
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["code"], "blob_size_mismatch", "{body}");
}

#[test]
fn a_torn_newest_revision_is_skipped_and_the_log_moves_on() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    app.publish(&mlp_v2());
    let start = serde_json::json!({"action": "start", "release": "2.0.0", "percent": "5"});
    let (s, plan) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(&start).expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "{plan}");
    let revision = plan["revision"].as_u64().expect("revision");
    // An empty file under the next number: a revision whose bytes never reached the disk.
    let torn = app
        .store_dir()
        .join(format!("state/mlp/rollout/{:020}.json", revision + 1));
    std::fs::write(&torn, b"").expect("torn revision");
    let set = serde_json::json!({"action": "set", "percent": "10"});
    let (s, plan) = app.post_raw(
        "/v1/admin/models/mlp/rollout",
        &serde_json::to_vec(&set).expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(s, 200, "a torn revision must not wedge the log: {plan}");
    assert_eq!(plan["revision"].as_u64(), Some(revision + 2));
    assert_eq!(plan["basis_points"], 1000);
}

#[test]
fn staging_files_of_killed_uploads_are_removed_at_start() {
    let mut app = TestApp::start();
    let dir = app.store_dir().join("blobs/sha256");
    std::fs::create_dir_all(&dir).expect("dir");
    let stale = dir.join(format!("{}#7", "ab".repeat(32)));
    let fresh = dir.join(format!("{}#8", "cd".repeat(32)));
    for p in [&stale, &fresh] {
        std::fs::write(p, vec![0u8; 4096]).expect("staging file");
    }
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .expect("open")
        .set_modified(two_hours_ago)
        .expect("mtime");
    app.restart().expect("restart");
    assert!(
        !stale.exists(),
        "a staging file untouched for two hours is removed"
    );
    assert!(
        fresh.exists(),
        "a recent one may be an upload in flight in another process"
    );
}
