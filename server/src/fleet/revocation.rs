//! Revocation lists in the store: each model's list is a revision log of signed envelopes
//! (`state/<model>/revocations/<n>.json`, see [`StorageKey::revocations_log`]). A new list is
//! accepted only when a release key signed it and it follows the one in force (the next
//! version, every entry kept; [`RevocationList::follows`]), checked again on every retry of a
//! lost race.

use ferry_shared::ModelName;
use ferry_shared::dsse::{Envelope, KeyRing};
use ferry_shared::errors::ErrorCode;
use ferry_shared::revocation::{RevocationError, RevocationList, verify_revocations};

use crate::storage::{StorageKey, Store, StoreError, revisions};

/// Why a revocation list was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The list itself (signature, rules, succession).
    #[error(transparent)]
    Revocation(#[from] RevocationError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SubmitError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            SubmitError::Revocation(e) => e.code(),
            SubmitError::Store(e) => e.code(),
        }
    }
}

/// The list in force for `model` (the newest stored one that verifies against `ring`).
pub async fn load(
    store: &Store,
    ring: &KeyRing,
    model: &ModelName,
) -> Result<Option<(RevocationList, Envelope)>, StoreError> {
    let all = revisions::all::<Envelope>(store, &StorageKey::revocations_log(model)).await?;
    for (n, env) in all.into_iter().rev() {
        match verify_revocations(&env, ring) {
            Ok(list) if list.model == *model => return Ok(Some((list.into_inner(), env))),
            Ok(_) => tracing::warn!(%model, "revocation revision {n} names another model"),
            Err(e) => tracing::warn!(%model, "revocation revision {n} does not verify: {e}"),
        }
    }
    Ok(None)
}

/// Stores `env` as `model`'s list if a release key in `ring` signed it and it follows the list
/// in force. Returns the list.
pub async fn submit(
    store: &Store,
    ring: &KeyRing,
    model: &ModelName,
    env: &Envelope,
) -> Result<RevocationList, SubmitError> {
    let list = verify_revocations(env, ring)?.into_inner();
    if list.model != *model {
        return Err(RevocationError::Invalid(format!(
            "the list is for {}, not {model}",
            list.model
        ))
        .into());
    }
    revisions::append::<Envelope, SubmitError>(
        store,
        &StorageKey::revocations_log(model),
        |cur, _| {
            let held = match cur {
                Some((_, e)) => Some(verify_revocations(e, ring)?.into_inner()),
                None => None,
            };
            list.follows(held.as_ref())?;
            Ok(env.clone())
        },
    )
    .await?;
    Ok(list)
}
