//! `ferry serve --demo`: publishes the demo model `demo-mlp` from programs built into the
//! binary (`server/demo/`: real `.pte` files from the ExecuTorch 1.5.1 exporter, written by
//! `tests/fixtures/export.py` next to the test fixtures), signed with the data directory's
//! release key, so a new user can resolve and download at once.

use std::path::Path;

use anyhow::Context as _;
use ferry_shared::ModelName;
use ferry_shared::manifest::{Delegate, Platform};
use futures_util::stream;

use crate::api::AppState;
use crate::app::config::Config;
use crate::keys;
use crate::release::publish::{Lifecycle, publish_release, put_blob};
use crate::release::sign::{VariantSpec, VariantsFile, build_manifest, sign};

/// The demo model's name.
pub const DEMO_MODEL: &str = "demo-mlp";
/// The demo release.
pub const DEMO_VERSION: &str = "1.0.0";

const FILES: &[(&str, &[u8])] = &[
    (
        "mlp-v1-xnnpack.pte",
        include_bytes!("../../demo/mlp-v1-xnnpack.pte"),
    ),
    (
        "mlp-v1-coreml.pte",
        include_bytes!("../../demo/mlp-v1-coreml.pte"),
    ),
    (
        "mlp-v1-vulkan.pte",
        include_bytes!("../../demo/mlp-v1-vulkan.pte"),
    ),
    (
        "mlp-v1-portable.pte",
        include_bytes!("../../demo/mlp-v1-portable.pte"),
    ),
    (
        "mlp-v1-xnnpack.json",
        include_bytes!("../../demo/mlp-v1-xnnpack.json"),
    ),
];

fn spec() -> anyhow::Result<VariantsFile> {
    let v = |id: &str,
             file: &str,
             delegate: Delegate,
             platforms: Vec<Platform>|
     -> anyhow::Result<VariantSpec> {
        Ok(VariantSpec {
            id: id.parse()?,
            file: file.into(),
            delegate,
            quant: "fp32".into(),
            runtime: ">=1.5.0, <2.0.0".parse()?,
            app: "*".parse()?,
            platforms,
            min_os_version: None,
            min_ram_mb: None,
            socs: Vec::new(),
            deny_socs: Vec::new(),
            golden: Some("mlp-v1-xnnpack.json".into()),
            data: Vec::new(),
            labels: None,
            assets: Vec::new(),
            preprocess: None,
            latency_budget_ms: None,
            sealed: None,
        })
    };
    Ok(VariantsFile {
        model: DEMO_MODEL.parse()?,
        version: DEMO_VERSION.parse()?,
        notes: "ferry demo: a 16-32-8 MLP exported with ExecuTorch 1.5.1".into(),
        evaluation: None,
        labels: None,
        assets: Vec::new(),
        preprocess: None,
        latency_budget_ms: None,
        sealed: None,
        variants: vec![
            v(
                "coreml-fp32",
                "mlp-v1-coreml.pte",
                Delegate::Coreml,
                vec![Platform::Ios, Platform::Macos],
            )?,
            v(
                "vulkan-fp32",
                "mlp-v1-vulkan.pte",
                Delegate::Vulkan,
                Vec::new(),
            )?,
            v(
                "xnnpack-fp32",
                "mlp-v1-xnnpack.pte",
                Delegate::Xnnpack,
                Vec::new(),
            )?,
            v(
                "portable-fp32",
                "mlp-v1-portable.pte",
                Delegate::Portable,
                Vec::new(),
            )?,
        ],
    })
}

fn read_builtin(path: &Path) -> anyhow::Result<Vec<u8>> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| b.to_vec())
        .ok_or_else(|| anyhow::anyhow!("no built-in demo file {name}"))
}

/// Publishes `demo-mlp` 1.0.0 unless it is already in the catalog. Returns a line to print.
pub async fn publish_demo(state: &AppState, config: &Config) -> anyhow::Result<String> {
    let model: ModelName = DEMO_MODEL.parse()?;
    let version = DEMO_VERSION.parse()?;
    if state.catalog().release(&model, &version).is_some() {
        return Ok(format!(
            "demo: {DEMO_MODEL} {DEMO_VERSION} is already published"
        ));
    }
    let key_path = config.keys_dir().join("release.key");
    let key = keys::signer::FileSigner::new(
        keys::load(&key_path).context("the demo signs with the data directory's release key")?,
        &key_path,
    );
    let (manifest, _) = build_manifest(
        &spec()?,
        Path::new(""),
        &read_builtin,
        time::OffsetDateTime::now_utc(),
    )?;
    for v in &manifest.variants {
        let bytes = FILES
            .iter()
            .find(|(_, b)| ferry_shared::Sha256Digest::of(b) == v.sha256)
            .map(|(_, b)| bytes::Bytes::from_static(b))
            .ok_or_else(|| anyhow::anyhow!("demo blob for {} missing", v.id))?;
        let body = stream::iter([Ok::<_, std::io::Error>(bytes)]);
        put_blob(
            state.store(),
            &v.sha256,
            body,
            state.config().limits.max_blob_bytes,
            state.config().limits.upload_time(),
            crate::release::publish::ExistingBlob::Verify,
        )
        .await
        .map_err(|e| anyhow::anyhow!("demo upload: {e}"))?;
    }
    let envelope = sign(&manifest, &key)?;
    let body = serde_json::to_vec(&envelope)?;
    let catalog = state.catalog();
    let lifecycle = Lifecycle {
        catalog: &catalog,
        key_release: state.key_service().held(),
        goes_live: state.config().publish_goes_live,
        actor: "demo",
    };
    let (release, plan) = match publish_release(
        state.store(),
        &state.keys().release_ring,
        &model,
        &body,
        lifecycle,
    )
    .await
    {
        Ok(done) => done,
        // Stored, but not in the catalog: signed by a release key rotated out since.
        Err(crate::release::publish::PublishError::Exists { .. }) => {
            return Ok(format!(
                "demo: warning: {DEMO_MODEL} {DEMO_VERSION} is stored but no current release \
                     key signed it (the release key was rotated), so it is not served; publish \
                     a new version signed with {}",
                config.keys_dir().join("release.key").display()
            ));
        }
        Err(e) => return Err(anyhow::anyhow!("demo publish: {e}")),
    };
    state.add_release(release);
    if let Some(p) = plan {
        state.set_rollout(&model, p);
    }
    Ok(format!(
        "demo: published {DEMO_MODEL} {DEMO_VERSION} with variants {}",
        manifest
            .variants
            .iter()
            .map(|v| v.id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_programs_are_the_exported_fixtures() {
        // The export script writes both; a hand-edited copy would drift from what the tests
        // check against the real runtime.
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pte");
        for (name, bytes) in FILES {
            let fixture = std::fs::read(fixtures.join(name)).expect("fixture");
            assert!(
                fixture == *bytes,
                "server/demo/{name} differs from the fixture"
            );
        }
    }
}
