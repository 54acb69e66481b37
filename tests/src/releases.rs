//! Fixture releases: the `mlp` model's manifests built from the exported programs, signed
//! with a test's keys, and the device profiles that resolve them.

use std::path::Path;

use base64::Engine as _;
use ferry_server::keys::RoleKey;
use ferry_server::release::sign::{VariantSpec, VariantsFile, build_manifest, sign};
use ferry_shared::manifest::{Delegate, Platform, ReleaseManifest};
use ferry_shared::trust::dsse::Envelope;

use crate::fixtures_dir;

/// Builds and signs a release from a spec whose files live in `tests/fixtures/pte`.
pub fn signed_release(spec: &VariantsFile, key: &RoleKey) -> (ReleaseManifest, Envelope) {
    let (manifest, envelope, _) = signed_release_files(spec, key);
    (manifest, envelope)
}

/// [`signed_release`] with the files to upload for it: every program, data file and asset
/// path, each once, in manifest order.
pub fn signed_release_files(
    spec: &VariantsFile,
    key: &RoleKey,
) -> (ReleaseManifest, Envelope, Vec<std::path::PathBuf>) {
    let read = |p: &Path| -> anyhow::Result<Vec<u8>> { Ok(std::fs::read(p)?) };
    let (manifest, built) = build_manifest(
        spec,
        &fixtures_dir().join("pte"),
        &read,
        time::OffsetDateTime::now_utc(),
    )
    .expect("manifest builds");
    let envelope = sign(&manifest, key).expect("signs");
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for f in &built {
        for s in std::iter::once(f).chain(&f.data).chain(&f.assets) {
            if !files.contains(&s.path) {
                files.push(s.path.clone());
            }
        }
    }
    (manifest, envelope, files)
}

/// Re-signs a (possibly altered) manifest, bypassing the local checks `ferry sign` makes.
pub fn sign_manifest(manifest: &ReleaseManifest, key: &RoleKey) -> Envelope {
    key.pair.sign(
        ferry_shared::manifest::RELEASE_PAYLOAD_TYPE,
        &manifest.to_json(),
    )
}

/// Decodes an envelope's payload.
pub fn payload(env: &Envelope) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(&env.payload)
        .expect("base64")
}

/// The bytes of the committed fixture (a `.pte` or a `.ptd`) with this digest.
pub fn fixture_bytes_by_digest(d: &ferry_shared::Sha256Digest) -> Vec<u8> {
    let dir = fixtures_dir().join("pte");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.extension().is_some_and(|e| e == "pte" || e == "ptd") {
            continue;
        }
        let b = std::fs::read(&path).expect("read");
        if &ferry_shared::Sha256Digest::of(&b) == d {
            return b;
        }
    }
    panic!("no fixture with digest {d}")
}

/// A variant spec for a fixture file.
pub fn variant(id: &str, file: &str, delegate: Delegate, runtime: &str, app: &str) -> VariantSpec {
    VariantSpec {
        id: id.parse().expect("id"),
        file: file.into(),
        delegate,
        quant: if id.contains("int8") {
            "int8".into()
        } else {
            "fp32".into()
        },
        runtime: runtime.parse().expect("runtime range"),
        app: app.parse().expect("app range"),
        platforms: Vec::new(),
        min_os_version: None,
        min_ram_mb: None,
        socs: Vec::new(),
        deny_socs: Vec::new(),
        golden: None,
        data: Vec::new(),
        labels: None,
        assets: Vec::new(),
        preprocess: None,
        latency_budget_ms: None,
        sealed: None,
    }
}

/// A VARIANTS.toml for `model` at `version` with `variants` and nothing else (no notes, labels,
/// assets, preprocessing, evaluation or latency budget): set fields on the result for more.
pub fn release(model: &str, version: &str, variants: Vec<VariantSpec>) -> VariantsFile {
    VariantsFile {
        model: model.parse().expect("model"),
        version: version.parse().expect("version"),
        notes: String::new(),
        evaluation: None,
        labels: None,
        assets: Vec::new(),
        preprocess: None,
        latency_budget_ms: None,
        sealed: None,
        variants,
    }
}

/// A release of `mlp` from the fixtures `mlp-<tag>-*.pte`: portable, optionally XNNPACK int8,
/// XNNPACK fp32, Core ML (Apple only) and Vulkan (needs 2 GiB of RAM).
fn mlp(
    version: &str,
    tag: &str,
    runtime: &str,
    app: &str,
    int8: bool,
    notes: &str,
) -> VariantsFile {
    let file = |d: &str| format!("mlp-{tag}-{d}.pte");
    let mut coreml = variant(
        "coreml-fp32",
        &file("coreml"),
        Delegate::Coreml,
        runtime,
        app,
    );
    coreml.platforms = vec![Platform::Ios, Platform::Macos];
    let mut vulkan = variant(
        "vulkan-fp32",
        &file("vulkan"),
        Delegate::Vulkan,
        runtime,
        app,
    );
    vulkan.min_ram_mb = Some(2048);
    let mut variants = vec![variant(
        "portable-fp32",
        &file("portable"),
        Delegate::Portable,
        runtime,
        app,
    )];
    if int8 {
        variants.push(variant(
            "xnnpack-int8",
            &file("xnnpack-int8"),
            Delegate::Xnnpack,
            runtime,
            app,
        ));
    }
    variants.push(variant(
        "xnnpack-fp32",
        &file("xnnpack"),
        Delegate::Xnnpack,
        runtime,
        app,
    ));
    variants.push(coreml);
    variants.push(vulkan);
    VariantsFile {
        notes: notes.into(),
        ..release("mlp", version, variants)
    }
}

/// Model `model` at `version`: one variant, `portable-fp32` (the portable MLP fixture, any
/// runtime from 1.0.0 and any app), with `asset` (a large file, for delta updates and
/// downloads of large models).
pub fn portable_with_asset(model: &str, version: &str, asset: &std::path::Path) -> VariantsFile {
    let mut v = variant(
        "portable-fp32",
        "mlp-v1-portable.pte",
        Delegate::Portable,
        ">=1.0.0",
        "*",
    );
    v.assets = vec![asset.to_path_buf()];
    release(model, version, vec![v])
}

/// `mlp` 1.0.0: every delegate including int8, runtime >=1.0.0, any app.
pub fn mlp_v1() -> VariantsFile {
    mlp("1.0.0", "v1", ">=1.0.0", "*", true, "v1")
}

/// `mlp` 2.0.0: new weights; needs runtime >=1.5.0 and app >=2.0.0.
pub fn mlp_v2() -> VariantsFile {
    mlp(
        "2.0.0",
        "v2",
        ">=1.5.0",
        ">=2.0.0",
        false,
        "v2: new weights",
    )
}

/// A device profile as resolve JSON (the body of `POST /v1/resolve`).
pub fn profile(
    platform: &str,
    backends: &[&str],
    runtime: &str,
    app: &str,
    ram_mb: u64,
) -> serde_json::Value {
    serde_json::json!({
        "model": "mlp",
        "install_id": "install-1",
        "app_version": app,
        "runtime_version": runtime,
        "backends": backends,
        "platform": platform,
        "os_version": "14.0",
        "device_model": "test-device",
        "soc": "SM8550",
        "ram_mb": ram_mb,
    })
}

/// `tinyllm` 1.0.0 from the LLM-recipe fixtures: `custom-kernels` first (KV cache with the
/// recipe's SDPA: calls `llama::custom_sdpa.out` and `llama::update_cache.out`), `standard`
/// second (standard kernels only); both portable, any runtime and app.
pub fn tinyllm() -> VariantsFile {
    let mut custom = variant(
        "custom-kernels",
        "llm-custom-kernels.pte",
        Delegate::Portable,
        ">=1.0.0",
        "*",
    );
    custom.quant = "8da4w".into();
    let mut standard = variant(
        "standard",
        "llm-standard.pte",
        Delegate::Portable,
        ">=1.0.0",
        "*",
    );
    standard.quant = "8da4w".into();
    VariantsFile {
        model: "tinyllm".parse().expect("name"),
        version: "1.0.0".parse().expect("version"),
        notes: "a small llama from ExecuTorch's LLM recipe".into(),
        evaluation: None,
        labels: None,
        assets: Vec::new(),
        preprocess: None,
        latency_budget_ms: None,
        sealed: None,
        variants: vec![custom, standard],
    }
}

/// A revocation list of `model`, numbered `version`, revoking each of `releases` now for
/// `reason` (unsigned: sign it with the release key to post it).
pub fn revocation_list(
    model: &str,
    version: u64,
    releases: &[&str],
    reason: &str,
) -> ferry_shared::trust::revocation::RevocationList {
    ferry_shared::trust::revocation::RevocationList {
        format: 1,
        model: model.parse().expect("model"),
        version,
        revoked: releases
            .iter()
            .map(|r| ferry_shared::trust::revocation::Revoked {
                release: r.parse().expect("version"),
                reason: reason.into(),
                at: time::OffsetDateTime::now_utc(),
            })
            .collect(),
    }
}
