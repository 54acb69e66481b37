//! Stored formats across a rolling upgrade (`docs/protocol.md`): the store a protocol-v1
//! server wrote (`tests/fixtures/store-v1/`, see `ferry_tests::store_snapshot`) is read by this
//! code, and records a newer server wrote are read for what this one knows and never rewritten
//! with fields dropped.

use std::path::Path;

use ferry_tests::app::{ADMIN_TOKEN, Options, READ_TOKEN, TestApp, copy_tree};
use ferry_tests::store_snapshot::{self, expect};
use ferry_tests::vectors;
use serde_json::{Value, json};

fn start_on(store: &Path) -> TestApp {
    TestApp::start_with(Options {
        keys: Some(vectors::dir().join("keys")),
        store: Some(store.to_path_buf()),
        // The recorded buckets stay countable whatever today's date is.
        tweak: Some(Box::new(|c| {
            c.telemetry.retention_days = 36_500;
            c.telemetry.raw_retention_days = 36_500;
        })),
        ..Default::default()
    })
}

fn loads_of(app: &TestApp, release: &str, variant: &str) -> u64 {
    let (status, health) = app.get_json("/v1/admin/models/vec/health", Some(READ_TOKEN));
    assert_eq!(status, 200, "{health}");
    health["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["release"] == release)
        .flat_map(|r| r["variants"].as_array().cloned().unwrap_or_default())
        .filter(|v| v["variant"] == variant)
        .map(|v| v["loads"].as_u64().unwrap_or(0))
        .sum()
}

/// Resolves `request-v1.json`; the answer must be 200.
fn resolve_v1(app: &TestApp) -> Value {
    let (status, body) = app.post_raw(
        "/v1/resolve",
        &std::fs::read(vectors::dir().join("request-v1.json")).expect("request"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    body
}

fn rollout(app: &TestApp) -> Value {
    let (status, body) = app.get_json("/v1/admin/models/vec/rollout", Some(READ_TOKEN));
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn a_store_written_by_a_protocol_v1_server_is_read() {
    let app = start_on(&store_snapshot::dir());
    // The catalog: every release, in the state it was left in.
    let (status, model) = app.get_json("/v1/admin/models/vec", Some(READ_TOKEN));
    assert_eq!(status, 200, "{model}");
    let state_of = |v: &str| {
        model["releases"]
            .as_array()
            .expect("releases")
            .iter()
            .find(|r| r["version"] == v)
            .map(|r| r["state"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    assert_eq!(
        state_of(expect::STAGED.0),
        format!("staged {}%", expect::STAGED.1)
    );
    assert!(state_of(expect::REVOKED).starts_with("revoked"), "{model}");
    // The rollout revisions.
    let r = rollout(&app);
    assert_eq!(r["current"]["baseline"], expect::BASELINE, "{r}");
    assert_eq!(r["current"]["basis_points"], expect::STAGED.1 * 100, "{r}");
    // The deny log.
    let (_, deny) = app.get_json("/v1/admin/models/vec/deny", Some(READ_TOKEN));
    let (rel, variant, soc) = expect::DENY;
    assert!(
        deny.to_string().contains(soc) && deny.to_string().contains(variant),
        "{deny}"
    );
    let _ = rel;
    // The keyring version pushed into the store (2) is in force.
    let (_, ring) = app.get_json("/v1/keyring", None);
    assert_eq!(ring["version"], 2, "{ring}");
    // The telemetry buckets.
    assert_eq!(
        loads_of(&app, expect::BASELINE, "xnnpack-fp32"),
        expect::LOADS
    );
    // And it serves: a device gets a decision under keyring 2.
    let body = resolve_v1(&app);
    let (decision, _) = app.verify_response(&body);
    assert_eq!(decision.keyring_version, 2);
    assert!([expect::BASELINE, expect::STAGED.0].contains(&decision.release.to_string().as_str()));
}

/// Writes `value` as revision `n` of a log, sealed with its checksum as a server writes it.
fn write_revision(log: &Path, n: u64, value: &Value) {
    use sha2::Digest as _;
    let digest = hex(&sha2::Sha256::digest(
        serde_json::to_vec(value).expect("json"),
    ));
    let sealed = json!({"sha256": digest, "revision": value});
    std::fs::write(
        log.join(format!("{n:020}.json")),
        serde_json::to_vec_pretty(&sealed).expect("json"),
    )
    .expect("write");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn only_file(dir: &Path) -> std::path::PathBuf {
    let mut files: Vec<_> = walk(dir);
    assert_eq!(files.len(), 1, "{files:?}");
    files.remove(0)
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

#[test]
fn records_a_newer_server_wrote_are_read_and_never_rewritten() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = tmp.path().join("store");
    copy_tree(&store_snapshot::dir(), &store).expect("copy");
    // A newer replica moved the rollout to 50% and added a gate this version does not know.
    let log = store.join("state/vec/rollout");
    let bytes = std::fs::read(log.join(format!("{:020}.json", 2))).expect("revision 2");
    let mut plan: Value =
        serde_json::from_slice::<Value>(&bytes).expect("json")["revision"].clone();
    plan["revision"] = 3.into();
    plan["action"] = "set".into();
    plan["basis_points"] = 5000.into();
    plan["thresholds"]["max_energy_ratio"] = 1.5.into();
    write_revision(&log, 3, &plan);
    let newest = std::fs::read(log.join(format!("{:020}.json", 3))).expect("revision 3");
    // And wrote a counter bucket with a section this version does not know.
    let bucket = only_file(&store.join("telemetry/buckets"));
    let mut counts: Value =
        serde_json::from_slice(&std::fs::read(&bucket).expect("bucket")).expect("json");
    counts["inference"] = json!({"vec": {"1.0.0": {"xnnpack-fp32": {"runs": 40}}}});
    std::fs::write(&bucket, serde_json::to_vec(&counts).expect("json")).expect("write");

    let app = start_on(&store);
    // Read for what it knows: the new share, and the counts of the newer bucket.
    let r = rollout(&app);
    assert_eq!(r["current"]["basis_points"], 5000, "{r}");
    assert_eq!(r["current"]["revision"], 3, "{r}");
    assert_eq!(
        loads_of(&app, expect::BASELINE, "xnnpack-fp32"),
        expect::LOADS
    );
    resolve_v1(&app);

    // Never rewritten: a change derived from revision 3 would drop the gate.
    let (status, body) = app.post_raw(
        "/v1/admin/models/vec/rollout",
        &serde_json::to_vec(&json!({"action": "set", "percent": "60"})).expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("store_record_newer")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap_or("");
    assert!(
        message.contains("thresholds.max_energy_ratio") && message.contains("upgraded replica"),
        "{message}"
    );
    let files = walk(&app.store_dir().join("state/vec/rollout"));
    assert_eq!(files.len(), 3, "no revision was added: {files:?}");
    assert_eq!(
        std::fs::read(
            app.store_dir()
                .join(format!("state/vec/rollout/{:020}.json", 3))
        )
        .expect("revision 3"),
        newest
    );
    // What the newer server did not touch still changes as usual.
    let (status, body) = app.post_raw(
        "/v1/admin/models/vec/deny",
        &serde_json::to_vec(&json!({"action": "deny", "release": "1.0.0",
            "variant": "vulkan-fp32", "class": "soc", "value": "SM0001"}))
        .expect("json"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(status, 200, "{body}");
}
