//! The recorded store (`tests/fixtures/store-v1/`): what a ferry server of protocol v1 leaves in
//! its object store, kept so every later version is tested against it (`docs/protocol.md`,
//! "Stored formats").
//!
//! [`record`] runs a real server on the vector keys (`schemas/vectors/v1/keys/`) and leaves in
//! its store: two releases of `vec` (the catalog and the blobs), a rollout staging 1.1.0 to 25%
//! (rollout revisions), a deny entry (the deny log), a revocation list, telemetry with receipts
//! (counter buckets and raw Parquet), then stops it gracefully so everything is flushed.
//! Record again only on purpose (`cargo run -p ferry-tests --bin store-snapshot`), with the
//! reason in the commit.

use std::path::{Path, PathBuf};

use ferry_server::release::sign::{VariantsFile, build_manifest, sign};
use ferry_shared::manifest::Delegate;
use serde_json::json;

use crate::app::{ADMIN_TOKEN, Options, TestApp, copy_tree, variant};
use crate::{fixtures_dir, vectors};

/// The recorded store.
pub fn dir() -> PathBuf {
    fixtures_dir().join("store-v1")
}

/// What the recorded store holds, for the tests that read it.
pub mod expect {
    /// The model.
    pub const MODEL: &str = "vec";
    /// The baseline release.
    pub const BASELINE: &str = "1.0.0";
    /// The staged release and its share in percent.
    pub const STAGED: (&str, u32) = ("1.1.0", 25);
    /// The deny entry: release, variant, SoC.
    pub const DENY: (&str, &str, &str) = ("1.0.0", "vulkan-fp32", "SM8550");
    /// The revoked release.
    pub const REVOKED: &str = "0.9.0";
    /// Load events reported with receipts (all ok, XNNPACK, on release 1.0.0).
    pub const LOADS: u64 = 12;
}

fn release(version: &str, tag: &str) -> VariantsFile {
    VariantsFile {
        model: expect::MODEL.parse().expect("name"),
        version: version.parse().expect("version"),
        notes: format!("recorded store: {version}"),
        evaluation: None,
        labels: None,
        assets: Vec::new(),
        preprocess: None,
        latency_budget_ms: None,
        sealed: None,
        variants: vec![
            variant(
                "xnnpack-fp32",
                &format!("mlp-{tag}-xnnpack.pte"),
                Delegate::Xnnpack,
                ">=1.0.0",
                "*",
            ),
            variant(
                "vulkan-fp32",
                &format!("mlp-{tag}-vulkan.pte"),
                Delegate::Vulkan,
                ">=1.0.0",
                "*",
            ),
        ],
    }
}

fn ok(what: &str, (status, body): (u16, serde_json::Value)) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!((200..300).contains(&status), "{what}: {status} {body}");
    Ok(body)
}

/// Runs a server and records its store into `dest` (which must not exist).
pub fn record(dest: &Path) -> anyhow::Result<()> {
    let app = TestApp::start_with(Options {
        keys: Some(vectors::dir().join("keys")),
        tweak: Some(Box::new(|c| {
            c.telemetry.flush_secs = 1;
            c.telemetry.raw_roll_secs = 1;
        })),
        ..Default::default()
    });
    let keys = vectors::keys()?;
    let read = |p: &Path| -> anyhow::Result<Vec<u8>> { Ok(std::fs::read(p)?) };
    let created = time::OffsetDateTime::parse(
        "2026-12-01T00:00:00Z",
        &time::format_description::well_known::Rfc3339,
    )?;
    // 1.0.0 is the baseline (the first release is live at once); 0.9.0, a bad build, is
    // published and revoked; 1.1.0 is staged.
    let mut bad = release("0.9.0", "v1");
    bad.variants.truncate(1);
    for (spec, tag) in [
        (release("1.0.0", "v1"), "v1"),
        (bad, "v1"),
        (release("1.1.0", "v2"), "v2"),
    ] {
        for v in &spec.variants {
            let bytes = std::fs::read(fixtures_dir().join("pte").join(&v.file))?;
            anyhow::ensure!(matches!(app.put_blob(&bytes), 200 | 201), "blob {tag}");
        }
        let (manifest, _) = build_manifest(&spec, &fixtures_dir().join("pte"), &read, created)?;
        let env = sign(&manifest, &keys.release)?;
        ok("publish", app.post_release(expect::MODEL, &env))?;
        if spec.version.to_string() == "0.9.0" {
            let list = json!({"model": expect::MODEL, "version": 1, "revoked": [
                {"release": expect::REVOKED, "reason": "recorded store: bad build", "at": "2026-12-01T00:00:00Z"}]});
            let env = keys.release.pair.sign(
                ferry_shared::trust::revocation::REVOCATIONS_PAYLOAD_TYPE,
                &serde_json::to_vec(&list)?,
            );
            ok(
                "revoke",
                app.post_raw(
                    "/v1/admin/models/vec/revocations",
                    &serde_json::to_vec(&env)?,
                    Some(ADMIN_TOKEN),
                ),
            )?;
        }
    }
    // Keyring version 2 (the same keys), pushed as `ferry keys push` does: stored under keys/.
    let k1: ferry_shared::trust::dsse::Envelope =
        serde_json::from_slice(&std::fs::read(vectors::dir().join("keyring-1.json"))?)?;
    let mut k2: serde_json::Value = serde_json::from_slice(
        &ferry_shared::trust::dsse::decode_payload(&k1, &Default::default())?,
    )?;
    k2["version"] = 2.into();
    k2["created"] = "2026-12-01T00:00:00Z".into();
    let env = keys.root.pair.sign(
        ferry_shared::trust::keyring::KEYRING_PAYLOAD_TYPE,
        &serde_json::to_vec(&k2)?,
    );
    ok(
        "keyring",
        app.post_raw(
            "/v1/admin/keyring",
            &serde_json::to_vec(&env)?,
            Some(ADMIN_TOKEN),
        ),
    )?;
    let path = "/v1/admin/models/vec/rollout";
    ok(
        "stage",
        app.post_raw(
            path,
            &serde_json::to_vec(&json!({"action": "start", "release": expect::STAGED.0,
                "percent": expect::STAGED.1.to_string()}))?,
            Some(ADMIN_TOKEN),
        ),
    )?;
    let (r, v, soc) = expect::DENY;
    ok(
        "deny",
        app.post_raw(
            "/v1/admin/models/vec/deny",
            &serde_json::to_vec(&json!({"action": "deny", "release": r, "variant": v,
                "class": "soc", "value": soc}))?,
            Some(ADMIN_TOKEN),
        ),
    )?;
    // Devices in the baseline cohort report loads with their receipts.
    let mut events = Vec::new();
    let mut n = 0;
    while (events.len() as u64) < expect::LOADS {
        n += 1;
        let mut device = serde_json::from_slice::<serde_json::Value>(&std::fs::read(
            vectors::dir().join("request-v1.json"),
        )?)?;
        device["install_id"] = format!("recorded-device-{n}").into();
        let body = ok("resolve", app.resolve(&device, false))?;
        let (decision, _) = app.verify_response(&body);
        if decision.release.to_string() != expect::BASELINE {
            continue;
        }
        events.push(json!({
            "kind": "load", "model": expect::MODEL, "release": expect::BASELINE,
            "variant": "xnnpack-fp32", "delegate": "xnnpack", "outcome": "ok",
            "install_id": device["install_id"], "platform": "linux", "soc": "RK3588",
            "device_model": "vector-board", "os_version": "6.1", "app_version": "1.0.0",
            "runtime_version": "1.5.1", "load_ms": 10.0,
            "at": time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)?,
            "receipt": body["receipt"],
        }));
    }
    let answer = ok(
        "telemetry",
        app.post_raw(
            "/v1/telemetry",
            &serde_json::to_vec(&json!({ "events": events }))?,
            None,
        ),
    )?;
    anyhow::ensure!(
        answer["accepted"] == expect::LOADS && answer["unverified"] == 0,
        "telemetry: {answer}"
    );
    let store = app.store_dir();
    // The counters and the raw events reach the store within a few flush periods.
    let flushed = |sub: &str| walk(&store.join(sub)).is_some_and(|n| n > 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !(flushed("telemetry/buckets/minute") && flushed("telemetry/events")) {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "telemetry was not flushed to {}",
            store.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let TestApp { server, dir, .. } = app;
    server.stop();
    copy_tree(&store, dest)?;
    drop(dir);
    Ok(())
}

/// Files under `dir` (`None` when it does not exist).
fn walk(dir: &Path) -> Option<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if e.path().is_dir() {
            n += walk(&e.path()).unwrap_or(0);
        } else {
            n += 1;
        }
    }
    Some(n)
}
