//! Protocol v1 conformance vectors (`schemas/vectors/v1/`): how they are made.
//!
//! Every vector is bytes as they cross the wire (request bodies, resolve answers, signed
//! envelopes, telemetry batches), signed where signed by the fixed test keys committed in
//! `schemas/vectors/v1/keys/` for this purpose only, and listed in `index.json` with the outcome
//! it must have for the client and the server. Vectors named `*-future*` and `*-format-2*` come
//! "from the future": fields, values, headers and formats a newer peer sends, which v1 code
//! must read (or, for a newer format, refuse with `format_unsupported`).
//!
//! [`generate`] is deterministic: `tests/tests/e2e/contract/vectors.rs` checks that it writes exactly the
//! committed files, so a change to a v1 message fails the tests until the vectors are
//! regenerated on purpose (`cargo run -p ferry-tests --bin vectors`), with the reason in the
//! commit.

use std::path::{Path, PathBuf};

use ferry_server::keys::{self, RoleKey};
use ferry_server::release::sign::{VariantsFile, build_manifest, sign};
use ferry_shared::manifest::{Delegate, ReleaseManifest};
use ferry_shared::trust::dsse::{Envelope, KeyPair};
use ferry_shared::wire::resolve::{
    Candidate, Cohort, DECISION_PAYLOAD_TYPE, Decision, ReleaseRef, ResolveRequest, SEQUENCE_BASE,
};
use serde_json::{Value, json};

use crate::app::variant;
use crate::fixtures_dir;

/// The folder of the v1 vectors.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/vectors/v1")
}

/// The instant the recorded answers are judged at (a client's clock in the tests).
pub const NOW: &str = "2026-12-01T00:10:00Z";

/// When the recorded decisions were issued.
const ISSUED: &str = "2026-12-01T00:00:00Z";

/// The placeholder a telemetry vector's events carry in `at`: the tests put the current time
/// in its place (a server refuses events more than 30 days old).
pub const AT_PLACEHOLDER: &str = "2026-12-01T00:00:00Z";

/// The fixed test keys.
pub struct Keys {
    /// Signs keyrings.
    pub root: RoleKey,
    /// Signs releases and revocation lists.
    pub release: RoleKey,
    /// Signs decisions (and derives the receipt key).
    pub online: RoleKey,
}

/// Loads the committed test keys.
pub fn keys() -> anyhow::Result<Keys> {
    let d = dir().join("keys");
    Ok(Keys {
        root: keys::load(&d.join("root.key"))?,
        release: keys::load(&d.join("release.key"))?,
        online: keys::load(&d.join("online.key"))?,
    })
}

fn time(s: &str) -> time::OffsetDateTime {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// JSON text of `v`, compact, as the wire carries it.
fn bytes(v: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// An envelope over `payload` (any JSON, so future payloads can be written) signed by `key`.
fn signed(key: &KeyPair, payload_type: &str, payload: &Value) -> Envelope {
    key.sign(payload_type, &bytes(payload))
}

/// The release every vector is about: `vec` 1.0.0 with XNNPACK, Vulkan (2 GiB of RAM) and
/// portable variants from the fixture programs, as `ferry sign` makes it.
fn release_spec() -> VariantsFile {
    let mut vulkan = variant(
        "vulkan-fp32",
        "mlp-v1-vulkan.pte",
        Delegate::Vulkan,
        ">=1.0.0",
        "*",
    );
    vulkan.min_ram_mb = Some(2048);
    VariantsFile {
        model: "vec".parse().expect("name"),
        version: "1.0.0".parse().expect("version"),
        notes: "protocol v1 vectors".into(),
        evaluation: None,
        labels: None,
        assets: Vec::new(),
        preprocess: None,
        latency_budget_ms: None,
        sealed: None,
        variants: vec![
            variant(
                "xnnpack-fp32",
                "mlp-v1-xnnpack.pte",
                Delegate::Xnnpack,
                ">=1.0.0",
                "*",
            ),
            vulkan,
            variant(
                "portable-fp32",
                "mlp-v1-portable.pte",
                Delegate::Portable,
                ">=1.0.0",
                "*",
            ),
        ],
    }
}

/// The request bodies: v1 (as today's client sends it) and from the future.
fn requests() -> (Value, Value) {
    let v1 = json!({
        "model": "vec",
        "install_id": "vector-install-1",
        "app_version": "1.0.0",
        "runtime_version": "1.5.1",
        "backends": ["XnnpackBackend"],
        "platform": "linux",
        "os_version": "6.1",
        "device_model": "vector-board",
        "soc": "RK3588",
        "ram_mb": 4096
    });
    let future = json!({
        "model": "vec",
        "install_id": "vector-install-2",
        "app_version": "1.0.0",
        "runtime_version": "1.5.1",
        "backends": ["XnnpackBackend", "VulkanBackend", "OpenvinoBackend"],
        "platform": "harmonyos",
        "os_version": "5.0",
        "device_model": "vector-phone",
        "soc": "Kirin9000",
        "ram_mb": 8192,
        "gpu_driver": "Maleoon 910 r1p0",
        "operators_digest": "ab".repeat(32),
        "nonce": "AAECAwQFBgcICQoLDA0ODw"
    });
    (v1, future)
}

/// The decision a v1 server signs for `request` choosing `candidates` of the release.
fn decision(
    request: &Value,
    manifest: &ReleaseManifest,
    release_sha256: ferry_shared::Sha256Digest,
    candidates: &[&str],
) -> Decision {
    let req: ResolveRequest = serde_json::from_value(request.clone()).expect("request");
    let issued = time(ISSUED);
    Decision {
        format: 1,
        model: req.model.clone(),
        release: manifest.version.clone(),
        cohort: Cohort::Baseline,
        request: req.selection_digest(),
        cohort_rule: None,
        pinned: None,
        experiment: None,
        release_sha256,
        issued_at: issued,
        expires_at: issued + time::Duration::hours(1),
        keyring_version: 1,
        revocations_version: 0,
        nonce: None,
        time: None,
        // A model with one release published, which went live (rollout revision 1): what a
        // server answers.
        sequence: SEQUENCE_BASE + 2,
        candidates: candidates
            .iter()
            .map(|id| {
                let v = manifest.variant_named(id).expect("variant");
                Candidate {
                    variant: v.id.clone(),
                    delegate: v.delegate.clone(),
                    backends: v.backends.clone(),
                    sha256: v.sha256,
                    size: v.size,
                    url: format!("/v1/blobs/sha256/{}", v.sha256.to_hex()),
                }
            })
            .collect(),
        sources: Vec::new(),
    }
}

/// A resolve answer: the decision envelope and the release reference.
fn answer(env: &Envelope, release_sha256: ferry_shared::Sha256Digest, size: u64) -> Value {
    json!({
        "decision": env,
        "release_ref": ReleaseRef {
            sha256: release_sha256,
            size,
            url: format!("/v1/releases/sha256/{}", release_sha256.to_hex()),
        },
    })
}

/// A telemetry event about the vector release.
fn event(kind: &str, variant: &str, install: &str) -> Value {
    json!({
        "kind": kind, "model": "vec", "release": "1.0.0", "variant": variant,
        "delegate": if variant.starts_with("vulkan") { "vulkan" } else { "xnnpack" },
        "outcome": "ok", "install_id": install, "platform": "linux", "soc": "RK3588",
        "device_model": "vector-board", "os_version": "6.1", "app_version": "1.0.0",
        "runtime_version": "1.5.1", "at": AT_PLACEHOLDER,
    })
}

mod make;

pub use make::generate;

/// Uploads the fixture programs the vector release names to `app`.
pub fn put_blobs(app: &crate::app::TestApp) {
    for f in [
        "mlp-v1-xnnpack.pte",
        "mlp-v1-vulkan.pte",
        "mlp-v1-portable.pte",
    ] {
        let bytes = std::fs::read(fixtures_dir().join("pte").join(f)).expect("pte");
        assert!(matches!(app.put_blob(&bytes), 200 | 201), "{f}");
    }
}

/// Publishes the v1 vector release (`release-v1.json`, `vec` 1.0.0) on `app`, a server started
/// on the vector keys.
pub fn publish(app: &crate::app::TestApp) {
    put_blobs(app);
    let release = std::fs::read(dir().join("release-v1.json")).expect("release");
    let (status, body) = app.post_raw(
        "/v1/admin/models/vec/releases",
        &release,
        Some(crate::app::ADMIN_TOKEN),
    );
    assert_eq!(status, 201, "{body}");
}
