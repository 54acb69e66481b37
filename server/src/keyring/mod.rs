//! New keyring versions without a restart: `POST /v1/admin/keyring` (`ferry keys push`) takes
//! the next keyring version, signed offline by the root keys, checks that it follows the one in
//! force (root signatures, version N+1, and it still lists this server's online key), writes it
//! to the shared store (`keys/keyring/<version>.json`) with an audit record
//! (`keys/audit/<version>.json`: who, when, which keys came and went) and puts it in force.
//! Every replica adopts the versions it finds in the store when it starts, on its periodic
//! refresh, and before refusing a release signed by a key it does not know yet; devices walk
//! to it from the `keyring_version` their next answer names (`GET /v1/keyring`).
//!
//! May import `snapshot`, `storage`, `keys` and `ferry-shared`; returns a `KeyringError`
//! with its catalogue code (mapped to HTTP in `api::error` only).

use std::path::PathBuf;

use ferry_shared::KeyId;
use ferry_shared::errors::ErrorCode;
use ferry_shared::trust::dsse::Envelope;
use ferry_shared::trust::keyring::{Keyring, TrustState};
use futures_util::TryStreamExt as _;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore as _, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};

use crate::snapshot::{KeyView, Views};
use crate::storage::{Store, StoreError};

/// Why an operator's keyring was not taken; each has its catalogue code.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    /// Not a keyring envelope, or it does not verify as the next version.
    #[error("{0}")]
    Invalid(String),
    /// A version at or below the one in force, with other contents.
    #[error("{0}")]
    Rollback(String),
    /// A version beyond the next one.
    #[error("{0}")]
    Skipped(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record could not be encoded (a bug).
    #[error("{0}")]
    Internal(String),
}

impl KeyringError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid(_) => ErrorCode::KeyringInvalid,
            Self::Rollback(_) => ErrorCode::KeyringRollback,
            Self::Skipped(_) => ErrorCode::KeyringSkipped,
            Self::Store(e) => e.code(),
            Self::Internal(_) => ErrorCode::Internal,
        }
    }
}

/// What the keyring functions work on: the store, the views (whose keys they replace), this
/// server's online key and its key folder.
#[derive(Debug, Clone)]
pub struct Ring {
    /// The shared store (`keys/keyring/`, `keys/audit/`).
    pub store: Store,
    /// The views; [`Views::keys`] is what changes.
    pub views: std::sync::Arc<Views>,
    /// This server's online key.
    pub online: KeyId,
    /// The key folder (`keyring/` there keeps every version for restarts).
    pub keys_dir: PathBuf,
}

/// Where keyring version `version` is kept in the store.
pub fn stored_key(version: u64) -> StorePath {
    crate::storage::StorageKey::keyring(version)
}

fn audit_key(version: u64) -> StorePath {
    crate::storage::StorageKey::keyring_audit(version)
}

/// The keyring versions in the store newer than `after`, oldest first.
pub async fn stored_after(store: &Store, after: u64) -> anyhow::Result<Vec<(u64, Envelope)>> {
    let metas: Vec<_> = store
        .list(Some(&crate::storage::StorageKey::keyrings()))
        .try_collect()
        .await?;
    let mut versions: Vec<(u64, StorePath)> = metas
        .into_iter()
        .filter_map(|m| {
            let n = m
                .location
                .filename()?
                .strip_suffix(".json")?
                .parse::<u64>()
                .ok()?;
            Some((n, m.location))
        })
        .filter(|(n, _)| *n > after)
        .collect();
    versions.sort_by_key(|(n, _)| *n);
    let mut out = Vec::with_capacity(versions.len());
    for (n, key) in versions {
        let bytes = store.get(&key).await?.bytes().await?;
        match serde_json::from_slice::<Envelope>(&bytes) {
            Ok(env) => out.push((n, env)),
            Err(e) => {
                // The versions before it still count; this one and later ones wait until it
                // is replaced.
                tracing::warn!(
                    "{key} is not a keyring envelope ({e}): versions from {n} on are not \
                     adopted; remove it and push that version again"
                );
                break;
            }
        }
    }
    Ok(out)
}

/// `view` advanced over the versions in the store that follow it, up to the first that does
/// not verify (which is reported and left out). `None` when the store holds nothing newer.
pub async fn adopt_stored(
    store: &Store,
    view: &KeyView,
    online: &KeyId,
) -> anyhow::Result<Option<KeyView>> {
    let mut next = view.clone();
    for (n, env) in stored_after(store, view.version).await? {
        match next.advanced(&env, online) {
            Ok(v) => next = v,
            Err(why) => {
                tracing::warn!("keyring version {n} in the store is not adopted: {why}");
                break;
            }
        }
    }
    Ok((next.version != view.version).then_some(next))
}

/// Puts `next` in force and keeps its versions in the key folder. The caller reads the
/// catalog again under it, as a restart would (`fleet::reload_under_keys`).
fn put_in_force(ring: &Ring, next: KeyView) {
    keep_local(&ring.keys_dir, &next.chain);
    ring.views.set_keys(next);
}

/// Writes each version of `chain` that the key folder `keys_dir` lacks into its `keyring/`, so
/// that a restart walks the same chain without gaps even while the store is away.
pub fn keep_local(keys_dir: &std::path::Path, chain: &[Envelope]) {
    let dir = crate::keys::key_paths(keys_dir).keyring;
    for env in chain {
        let Some(v) = Keyring::peek_version(env) else {
            continue;
        };
        let path = crate::keys::keyring_file(&dir, v);
        if path.exists() {
            continue;
        }
        let written = serde_json::to_vec_pretty(env)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                ferry_fs::write(&path, &b, ferry_fs::Mode::Public).map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            tracing::warn!("cannot keep keyring version {v} in {}: {e}", path.display());
        }
    }
}

/// Adopts what the store holds beyond this replica's keyring; true when a newer version came
/// into force.
pub async fn refresh(ring: &Ring) -> bool {
    let view = ring.views.keys.get();
    match adopt_stored(&ring.store, &view, &ring.online).await {
        Ok(Some(next)) => {
            tracing::info!(
                version = next.version,
                "keyring version {} from the store is in force",
                next.version
            );
            put_in_force(ring, next);
            true
        }
        Ok(None) => false,
        Err(e) => {
            tracing::warn!("keyring refresh failed: {e}");
            false
        }
    }
}

/// The key ids and roles of a keyring's keys, for the audit record.
fn key_list(state: &TrustState) -> Vec<String> {
    state
        .keys()
        .iter()
        .map(|k| format!("{} {}", k.key.role, k.key.keyid))
        .collect()
}

/// Takes the next keyring version from an operator (`actor`): verifies it, stores it with its
/// audit record and puts it in force. Sending the version in force again is a no-op; another
/// envelope for a version that exists is a conflict. Returns the version and whether it is new.
pub async fn submit(ring: &Ring, body: &[u8], actor: &str) -> Result<(u64, bool), KeyringError> {
    let invalid = KeyringError::Invalid;
    let env: Envelope = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("not a keyring envelope: {e}")))?;
    let claimed = Keyring::peek_version(&env)
        .ok_or_else(|| invalid("the envelope holds no keyring version".into()))?;
    // Another replica may have stored newer versions: catch up first.
    refresh(ring).await;
    let view = ring.views.keys.get();
    if claimed <= view.version {
        let held = view
            .chain
            .iter()
            .find(|e| Keyring::peek_version(e) == Some(claimed));
        return match held {
            Some(h) if h == &env => Ok((claimed, false)),
            _ => Err(KeyringError::Rollback(format!(
                "this server trusts keyring version {} and its version {claimed} differs \
                     from the one sent: this key folder is not the one that made the keyrings \
                     in force (an older copy, or another `ferry keys generate`)",
                view.version
            ))),
        };
    }
    if claimed != view.version + 1 {
        return Err(KeyringError::Skipped(format!(
            "this server holds keyring version {}; send version {} first",
            view.version,
            view.version + 1
        )));
    }
    let next = view.advanced(&env, &ring.online).map_err(invalid)?;
    let bytes =
        serde_json::to_vec_pretty(&env).map_err(|e| KeyringError::Internal(e.to_string()))?;
    let created = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    match ring
        .store
        .put_opts(&stored_key(claimed), PutPayload::from(bytes), created)
        .await
    {
        Ok(_) => {}
        Err(object_store::Error::AlreadyExists { .. }) => {
            // Another replica stored this version meanwhile: in force if it is this one.
            refresh(ring).await;
            let now = ring.views.keys.get();
            let same = now
                .chain
                .iter()
                .any(|e| Keyring::peek_version(e) == Some(claimed) && e == &env);
            if same {
                return Ok((claimed, false));
            }
            // Stored by another push that won, or a file that does not verify.
            return Err(if now.version >= claimed {
                KeyringError::Rollback(format!(
                    "keyring version {claimed} was stored with other contents meanwhile \
                         (another push won); this server trusts version {}",
                    now.version
                ))
            } else {
                KeyringError::Invalid(format!(
                    "the store holds a keyring version {claimed} that does not verify \
                         ({}); remove it and push again",
                    stored_key(claimed)
                ))
            });
        }
        Err(e) => return Err(KeyringError::Store(StoreError::from(e))),
    }
    let before = key_list(&view.state);
    let after = key_list(&next.state);
    let roots = |s: &TrustState| -> Vec<String> {
        s.root()
            .map(|r| r.keys.iter().map(|k| format!("root {}", k.keyid)).collect())
            .unwrap_or_default()
    };
    let (old_roots, new_roots) = (roots(&view.state), roots(&next.state));
    let mut added: Vec<&String> = after.iter().filter(|k| !before.contains(k)).collect();
    let mut removed: Vec<&String> = before.iter().filter(|k| !after.contains(k)).collect();
    added.extend(new_roots.iter().filter(|k| !old_roots.contains(k)));
    removed.extend(old_roots.iter().filter(|k| !new_roots.contains(k)));
    let record = serde_json::json!({
        "version": claimed,
        "actor": actor,
        "at": crate::storage::revisions::now_text(),
        "added": added,
        "removed": removed,
    });
    let audit =
        serde_json::to_vec_pretty(&record).map_err(|e| KeyringError::Internal(e.to_string()))?;
    let create = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    if let Err(e) = ring
        .store
        .put_opts(&audit_key(claimed), PutPayload::from(audit), create)
        .await
    {
        tracing::warn!("keyring version {claimed} is stored but its audit record is not: {e}");
    }
    tracing::info!(actor, version = claimed, added = ?record["added"], removed = ?record["removed"], "keyring version {claimed} is in force");
    put_in_force(ring, next);
    Ok((claimed, true))
}

/// The audit records of keyring versions taken through the API, oldest first, for versions up
/// to `in_force` (a record for a version that is not in force is not shown).
pub async fn audit(store: &Store, in_force: u64) -> anyhow::Result<Vec<serde_json::Value>> {
    let metas: Vec<_> = store
        .list(Some(&crate::storage::StorageKey::keyring_audits()))
        .try_collect()
        .await?;
    let mut keys: Vec<StorePath> = metas.into_iter().map(|m| m.location).collect();
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let bytes = store.get(&k).await?.bytes().await?;
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes)
            && v["version"].as_u64().is_some_and(|n| n <= in_force)
        {
            out.push(v);
        }
    }
    Ok(out)
}
