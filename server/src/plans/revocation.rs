//! Revocation lists in the store: each model's list is a revision log of signed envelopes
//! (`state/<model>/revocations/<n>.json`, see [`StorageKey::revocations_log`]). A new list is
//! accepted only when a release key signed it and it follows the one in force (the next
//! version, every entry kept; [`RevocationList::follows`]), checked again on every retry of a
//! lost race.

use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::trust::dsse::{Envelope, KeyRing};
use ferry_shared::trust::revocation::{RevocationError, RevocationList, verify_revocations};

use crate::storage::{StorageKey, Store, StoreError, revisions};

/// What [`submit`] did with a list.
#[derive(Debug)]
pub enum Submitted {
    /// The list is the new one in force.
    Stored(RevocationList),
    /// The very same signed envelope was already the list in force (a retried request):
    /// nothing was written.
    AlreadyInForce(RevocationList),
}

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

/// The list in force for `model`: the newest stored revision (its signature was checked when
/// it was written), and whether that signature still verifies against `ring` (after a release
/// key rotation it may not: the list stays in force, but is not sent to devices until it is
/// signed again).
pub async fn load(
    store: &Store,
    ring: &KeyRing,
    model: &ModelName,
) -> Result<Option<(RevocationList, Envelope, bool)>, StoreError> {
    let Some((n, env)) =
        revisions::latest::<Envelope>(store, &StorageKey::revocations_log(model)).await?
    else {
        return Ok(None);
    };
    let Some(list) = stored_list(&env).filter(|l| l.model == *model) else {
        tracing::error!(%model, "revocation revision {n} is unreadable; the revision before it is not used");
        return Ok(None);
    };
    let signed = verify_revocations(&env, ring).is_ok();
    if !signed {
        tracing::warn!(
            %model,
            "revocation list version {} is no longer signed by a current release key: it stays in \
             force here but devices do not get it until it is signed again (`ferry release \
             revoke {model} --resign`)",
            list.version
        );
    }
    Ok(Some((list, env, signed)))
}

/// A stored list's payload (its signature was verified when it was stored).
fn stored_list(env: &Envelope) -> Option<RevocationList> {
    RevocationList::from_accepted_envelope(env).ok()
}

/// Stores `env` as `model`'s list if a release key in `ring` signed it and it follows the list
/// in force. Returns the list.
pub async fn submit(
    store: &Store,
    ring: &KeyRing,
    model: &ModelName,
    env: &Envelope,
) -> Result<Submitted, SubmitError> {
    let list = verify_revocations(env, ring)?.into_inner();
    // An admin input stays strict: a field this server does not know would be dropped.
    let payload = ferry_shared::trust::dsse::decode_payload(env, &Default::default())
        .map_err(RevocationError::from)?;
    if let Some(field) = ferry_shared::wire::protocol::unknown_field_path(&payload, &list) {
        return Err(RevocationError::Invalid(format!(
            "unknown field {field}: this server does not know it (sign with the `ferry` of this \
             server's version, or upgrade the server)"
        ))
        .into());
    }
    if list.model != *model {
        return Err(RevocationError::Invalid(format!(
            "the list is for {}, not {model}",
            list.model
        ))
        .into());
    }
    // A retry of the request that stored this very envelope succeeds without a new revision.
    if let Some((_, held)) =
        revisions::latest::<Envelope>(store, &StorageKey::revocations_log(model)).await?
        && held == *env
    {
        return Ok(Submitted::AlreadyInForce(list));
    }
    revisions::append::<Envelope, SubmitError>(
        store,
        &StorageKey::revocations_log(model),
        |cur, _| {
            // The list in force was verified when it was stored; its key may have been rotated
            // out since, which must not stop the next version.
            let held = cur.and_then(|(_, e)| stored_list(e));
            list.follows(held.as_ref())?;
            Ok(env.clone())
        },
    )
    .await?;
    Ok(Submitted::Stored(list))
}
