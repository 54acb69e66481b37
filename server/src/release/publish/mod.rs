//! Publishing: streaming blob uploads ([`blobs`]) and release admission (here, with the
//! stored chunk-index checks in [`chunks`]).
//!
//! A release is admitted only after every check passes; the inspection report
//! is written first and the signed manifest last with a create-if-absent put, so a release is
//! visible exactly when it is complete, and a second publish of the same version loses.

pub mod blobs;
pub mod chunks;
pub mod encoded;
pub mod error;
pub mod sealed;

pub use blobs::{
    BlobOutcome, ExistingBlob, UPLOAD_PART_BYTES, UPLOAD_PARTS_IN_FLIGHT, UploadTime, put_blob,
};
pub use error::PublishError;

use std::collections::BTreeMap;

use ferry_shared::manifest::{ReleaseManifest, verify_release_envelope};
use ferry_shared::pte::{self, PteLimits, PteReport};
use ferry_shared::select::rollout::RolloutPlan;
use ferry_shared::trust::dsse::{Envelope, KeyRing};
use ferry_shared::{ModelName, Sha256Digest};
use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload};

use crate::plans::rollout;
use crate::storage::catalog::{Catalog, Release};
use crate::storage::{StorageKey, Store};

/// Reads just enough of a stored blob to inspect it.
async fn inspect_blob(
    store: &Store,
    digest: &Sha256Digest,
    size: u64,
) -> Result<PteReport, PublishError> {
    let key = StorageKey::blob(digest);
    let limits = PteLimits::default();
    let head_len = size.min(64);
    let head = store.get_range(&key, 0..head_len).await?;
    let need = pte::required_prefix(&head, &limits)
        .map_err(|e| PublishError::NotAPte {
            digest: *digest,
            why: e.to_string(),
        })?
        .min(size);
    let prefix = store.get_range(&key, 0..need).await?;
    pte::inspect_prefix(&prefix, size, &limits).map_err(|e| PublishError::NotAPte {
        digest: *digest,
        why: format!("({}) {e}", e.code()),
    })
}

/// Reads the header and named tensors of a data file in the store (not its data segments).
async fn inspect_data_blob(
    store: &Store,
    variant: &str,
    file: &ferry_shared::manifest::ExtraFile,
) -> Result<pte::PtdReport, PublishError> {
    let key = StorageKey::blob(&file.sha256);
    let refuse = |why: String| PublishError::NotAPtd {
        variant: variant.to_string(),
        name: file.name.clone(),
        digest: file.sha256,
        why,
    };
    let head = store.get_range(&key, 0..file.size.min(48)).await?;
    let need = pte::ptd_required_prefix(&head)
        .map_err(|e| refuse(format!("({}) {e}", e.code())))?
        .min(file.size);
    let prefix = store.get_range(&key, 0..need).await?;
    pte::inspect_ptd_prefix(&prefix, file.size).map_err(|e| refuse(format!("({}) {e}", e.code())))
}

/// Checks that what the variant declares is what its bytes contain.
fn check_delegation(
    variant: &ferry_shared::manifest::Variant,
    report: &PteReport,
) -> Result<(), PublishError> {
    if let Some(why) = ferry_shared::manifest::delegation_mismatch(
        variant.id.as_str(),
        &variant.delegate,
        &variant.backends,
        report,
    ) {
        return Err(PublishError::DelegateMismatch(why));
    }
    if report.schema_version > pte::KNOWN_SCHEMA_VERSION {
        return Err(PublishError::SchemaUnsupported {
            variant: variant.id.to_string(),
            version: report.schema_version,
            known: pte::KNOWN_SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// How a publish meets the rollout plan.
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle<'a> {
    /// The releases published so far.
    pub catalog: &'a Catalog,
    /// The server's `publish_goes_live` setting.
    pub goes_live: bool,
    /// Who publishes (kept in the plan's history).
    pub actor: &'a str,
    /// The key-release keys this server holds: a sealed variant wrapped to another is refused
    /// (the server could not release its keys).
    pub key_release: &'a [crate::keys::KeyReleaseSecret],
}

/// Parses a signed release and checks what can be checked before its blobs are uploaded: the
/// envelope verifies against the trusted release keys, the manifest is acceptable, and it is
/// for `url_model`.
pub fn verify_release(
    ring: &KeyRing,
    url_model: &ModelName,
    body: &[u8],
) -> Result<(Envelope, ReleaseManifest), PublishError> {
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| PublishError::EnvelopeMalformed(e.to_string()))?;
    let verified = verify_release_envelope(&envelope, ring).map_err(PublishError::Signature)?;
    let manifest =
        ReleaseManifest::from_json_strict(verified.value()).map_err(PublishError::Manifest)?;
    if &manifest.model != url_model {
        return Err(PublishError::ModelMismatch {
            manifest: manifest.model.clone(),
            url: url_model.clone(),
        });
    }
    Ok((envelope, manifest))
}

/// Parses, verifies and checks a signed release, writes the plan revision it calls for (the
/// first release of a model becomes live; see [`rollout::record_publish`]), then stores it.
/// Returns the admitted release and the plan revision written for it, if any.
pub async fn publish_release(
    store: &Store,
    ring: &KeyRing,
    url_model: &ModelName,
    body: &[u8],
    lifecycle: Lifecycle<'_>,
) -> Result<(Release, Option<RolloutPlan>), PublishError> {
    let (envelope, manifest) = verify_release(ring, url_model, body)?;
    let release_key = StorageKey::release(&manifest.model, &manifest.version);
    if store.head(&release_key).await.is_ok() {
        return Err(release_exists(&manifest));
    }
    let mut reports = BTreeMap::new();
    // Each (file, index) pair is checked once, however many variants name it.
    let mut checked = std::collections::HashSet::new();
    for v in &manifest.variants {
        let key = StorageKey::blob(&v.sha256);
        let meta = match store.head(&key).await {
            Ok(m) => m,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(PublishError::BlobMissing {
                    variant: v.id.to_string(),
                    what: format!("blob {}", v.sha256),
                });
            }
            Err(e) => return Err(e.into()),
        };
        if meta.size != v.size {
            return Err(PublishError::BlobSizeMismatch {
                variant: v.id.to_string(),
                what: format!("blob {}", v.sha256),
                actual: meta.size,
                signed: v.size,
            });
        }
        let report = match &v.sealed {
            None => inspect_blob(store, &v.sha256, v.size).await?,
            Some(s) => sealed::sealed_report(v, s, lifecycle.key_release)?,
        };
        check_delegation(v, &report)?;
        for f in v.side_files() {
            match store.head(&StorageKey::blob(&f.sha256)).await {
                Ok(m) if m.size == f.size => {}
                Ok(m) => {
                    return Err(PublishError::BlobSizeMismatch {
                        variant: v.id.to_string(),
                        what: format!("extra file {}", f.name),
                        actual: m.size,
                        signed: f.size,
                    });
                }
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(PublishError::BlobMissing {
                        variant: v.id.to_string(),
                        what: format!("extra file {} ({})", f.name, f.sha256),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
        chunks::check_variant(store, v, &mut checked).await?;
        if v.sealed.is_some() {
            // Its data files are ciphertext: `ferry sign` checked them against the program.
            reports.insert(v.id.to_string(), report);
            continue;
        }
        let mut data = Vec::new();
        for f in &v.extra_files {
            data.push((
                f.name.as_str(),
                inspect_data_blob(store, v.id.as_str(), f).await?,
            ));
        }
        let named: Vec<(&str, &pte::PtdReport)> = data.iter().map(|(n, r)| (*n, r)).collect();
        let problems = pte::check_data_files(&report, &named);
        if !problems.missing.is_empty() {
            return Err(PublishError::DataFilesMissing {
                variant: v.id.to_string(),
                missing: problems.missing,
            });
        }
        if !problems.conflicts.is_empty() {
            return Err(PublishError::DataFilesMismatch {
                variant: v.id.to_string(),
                problems: problems.conflicts,
            });
        }
        reports.insert(v.id.to_string(), report);
    }
    let inspection =
        serde_json::to_value(&reports).map_err(|e| PublishError::Internal(e.to_string()))?;
    let ins_bytes =
        serde_json::to_vec(&inspection).map_err(|e| PublishError::Internal(e.to_string()))?;
    store
        .put(
            &StorageKey::inspection(&manifest.model, &manifest.version),
            PutPayload::from(ins_bytes),
        )
        .await?;
    let plan = rollout::record_publish(
        store,
        lifecycle.catalog,
        &manifest.model,
        &manifest.version,
        lifecycle.goes_live,
        lifecycle.actor,
        &crate::storage::revisions::now_text(),
    )
    .await?;
    let env_bytes =
        serde_json::to_vec(&envelope).map_err(|e| PublishError::Internal(e.to_string()))?;
    match store
        .put_opts(
            &release_key,
            PutPayload::from(env_bytes),
            PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            },
        )
        .await
    {
        Ok(_) => {}
        Err(object_store::Error::AlreadyExists { .. }) => return Err(release_exists(&manifest)),
        Err(e) => return Err(e.into()),
    }
    Ok((Release::new(manifest, envelope, Some(inspection)), plan))
}

fn release_exists(m: &ReleaseManifest) -> PublishError {
    PublishError::Exists {
        model: m.model.clone(),
        version: m.version.clone(),
    }
}
