//! The deny list of each model, kept as a revision log in the store
//! (`state/<model>/deny/<revision>.json`, see [`StorageKey::deny_log`]).
//!
//! Entries and changes are the typed [`ferry_shared::select::deny`] values; [`apply_change`] is the pure
//! rule for an operator's change, and [`change`] / [`add_learned`] append a revision with it.

use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::select::deny::{DenyAction, DenyChange, DenyEntry, DenySource, DenyState};
use serde::{Deserialize, Serialize};

use crate::storage::{StorageKey, Store, StoreError, revisions};

/// Longest release, variant or value in a change.
pub const MAX_FIELD: usize = 128;

/// One revision of a model's deny list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DenyList {
    /// The entries in force.
    pub entries: Vec<DenyEntry>,
    /// What changed (`telemetry`, `override`, `clear`, `deny`).
    pub action: String,
    /// Who.
    pub actor: String,
    /// When.
    pub at: String,
}

/// Why a deny-list change was refused.
#[derive(Debug, thiserror::Error)]
pub enum DenyError {
    /// The change is malformed.
    #[error("{0}")]
    Invalid(String),
    /// `clear` or `override` of an entry that does not exist.
    #[error("no deny entry for {release} {variant} on {class} {value}")]
    NotFound {
        /// Release.
        release: String,
        /// Variant.
        variant: String,
        /// Class.
        class: &'static str,
        /// Value.
        value: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DenyError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            DenyError::Invalid(_) => ErrorCode::DenyInvalid,
            DenyError::NotFound { .. } => ErrorCode::DenyNotFound,
            DenyError::Store(e) => e.code(),
        }
    }
}

/// Checks a change's fields.
pub fn validate(change: &DenyChange) -> Result<(), DenyError> {
    if [&change.release, &change.variant, &change.value]
        .iter()
        .any(|s| {
            s.is_empty()
                || ferry_shared::names::longer_than(s, MAX_FIELD)
                || s.chars().any(char::is_control)
        })
    {
        return Err(DenyError::Invalid(format!(
            "release, variant and value are 1 to {MAX_FIELD} characters without control \
             characters"
        )));
    }
    Ok(())
}

/// The entries after an operator's `change` (pure). `deny` adds an entry of the change's kind
/// (`fallback` when absent) or turns that entry back into a deny; `override` and `clear` act
/// on the entry of the change's kind, or on every entry of the target when it names none.
pub fn apply_change(
    mut entries: Vec<DenyEntry>,
    change: &DenyChange,
) -> Result<Vec<DenyEntry>, DenyError> {
    let target = DenyEntry {
        release: change.release.clone(),
        variant: change.variant.clone(),
        class: change.class,
        value: change.value.clone(),
        fallback_rate: 0.0,
        samples: 0,
        source: DenySource::Ops,
        state: DenyState::Deny,
        kind: change.kind.unwrap_or_default(),
        latency: None,
        crash: None,
    };
    let hit = |e: &DenyEntry| match change.kind {
        Some(_) => e.same_target(&target),
        None => e.same_class(&target),
    };
    let missing = || DenyError::NotFound {
        release: change.release.clone(),
        variant: change.variant.clone(),
        class: change.class.as_str(),
        value: change.value.clone(),
    };
    match change.action {
        DenyAction::Deny => match entries.iter_mut().find(|e| e.same_target(&target)) {
            Some(e) => e.state = DenyState::Deny,
            None => entries.push(target),
        },
        DenyAction::Clear | DenyAction::Override => {
            if !entries.iter().any(hit) {
                return Err(missing());
            }
            if change.action == DenyAction::Clear {
                entries.retain(|e| !hit(e));
            } else {
                for e in entries.iter_mut().filter(|e| hit(e)) {
                    e.state = DenyState::Allow;
                }
            }
        }
    }
    Ok(entries)
}

/// Every revision of `model`'s deny list, oldest first.
pub async fn history(store: &Store, model: &ModelName) -> Result<Vec<DenyList>, StoreError> {
    Ok(
        revisions::all::<DenyList>(store, &StorageKey::deny_log(model))
            .await?
            .into_iter()
            .map(|(_, l)| l)
            .collect(),
    )
}

/// The deny list in force for `model` with its revision, if one was ever written.
pub async fn load(
    store: &Store,
    model: &ModelName,
) -> Result<Option<(u64, Vec<DenyEntry>)>, StoreError> {
    Ok(
        revisions::latest::<DenyList>(store, &StorageKey::deny_log(model))
            .await?
            .map(|(n, list)| (n, list.entries)),
    )
}

/// Appends an operator's change; returns the revision written and the entries now in force.
pub async fn change(
    store: &Store,
    model: &ModelName,
    change: &DenyChange,
    actor: &str,
    at: &str,
) -> Result<(u64, Vec<DenyEntry>), DenyError> {
    validate(change)?;
    let (revision, list) =
        revisions::append::<DenyList, DenyError>(store, &StorageKey::deny_log(model), |cur, _| {
            let entries = cur.map(|(_, l)| l.entries.clone()).unwrap_or_default();
            Ok(DenyList {
                entries: apply_change(entries, change)?,
                action: change.action.as_str().to_string(),
                actor: actor.to_string(),
                at: at.to_string(),
            })
        })
        .await?;
    Ok((revision, list.entries))
}

/// Most entries of one kind telemetry adds to one model's deny list; beyond it learned entries
/// are logged and not written (hand-made entries are not limited).
pub const MAX_LEARNED: usize = 256;

/// Why [`add_learned`] wrote nothing.
enum Unwritten {
    /// Every entry is listed already (another replica learned it first): the revision in force.
    Unchanged(u64, Vec<DenyEntry>),
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for Unwritten {
    fn from(e: StoreError) -> Self {
        Unwritten::Store(e)
    }
}

/// Adds entries learned from telemetry (skipping any target already listed, so an ops
/// override stays); returns the revision written and the entries now in force. When nothing
/// is new (another replica wrote it first) nothing is written and the revision in force is
/// returned.
pub async fn add_learned(
    store: &Store,
    model: &ModelName,
    fresh: &[DenyEntry],
    at: &str,
) -> Result<(u64, Vec<DenyEntry>), StoreError> {
    let written =
        revisions::append::<DenyList, Unwritten>(store, &StorageKey::deny_log(model), |cur, _| {
            let mut entries = cur.map(|(_, l)| l.entries.clone()).unwrap_or_default();
            let before = entries.len();
            // Each kind has its own cap.
            let learned = |entries: &[DenyEntry], kind| {
                entries
                    .iter()
                    .filter(|e| e.source == DenySource::Telemetry && e.kind == kind)
                    .count()
            };
            for c in fresh {
                if entries.iter().any(|e| e.same_target(c)) {
                    continue;
                }
                if learned(&entries, c.kind) >= MAX_LEARNED {
                    tracing::warn!(
                        %model,
                        "the deny list holds {MAX_LEARNED} learned entries; not adding {} {} for {}",
                        c.release,
                        c.variant,
                        c.value
                    );
                    continue;
                }
                entries.push(c.clone());
            }
            if entries.len() == before {
                return Err(Unwritten::Unchanged(cur.map_or(0, |(n, _)| *n), entries));
            }
            Ok(DenyList {
                entries,
                action: DenySource::Telemetry.as_str().to_string(),
                actor: "ferry".into(),
                at: at.to_string(),
            })
        })
        .await;
    match written {
        Ok((revision, list)) => Ok((revision, list.entries)),
        Err(Unwritten::Unchanged(revision, entries)) => Ok((revision, entries)),
        Err(Unwritten::Store(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_shared::select::deny::DeviceClass;

    fn change(action: DenyAction) -> DenyChange {
        DenyChange {
            action,
            release: "1.0.0".into(),
            variant: "vulkan-fp32".into(),
            class: DeviceClass::Soc,
            value: "SM8450".into(),
            kind: None,
        }
    }

    #[test]
    fn override_and_clear_need_an_entry_deny_adds_one() {
        for action in [DenyAction::Override, DenyAction::Clear] {
            let e = apply_change(Vec::new(), &change(action)).expect_err("missing");
            assert_eq!(e.code(), ErrorCode::DenyNotFound);
        }
        let added = apply_change(Vec::new(), &change(DenyAction::Deny)).expect("deny");
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].source, DenySource::Ops);
        let allowed = apply_change(added, &change(DenyAction::Override)).expect("override");
        assert_eq!(allowed[0].state, DenyState::Allow);
        let denied = apply_change(allowed, &change(DenyAction::Deny)).expect("deny again");
        assert_eq!(denied[0].state, DenyState::Deny);
        assert!(
            apply_change(denied, &change(DenyAction::Clear))
                .expect("clear")
                .is_empty()
        );
    }

    #[test]
    fn oversized_and_empty_fields_are_refused() {
        let mut c = change(DenyAction::Deny);
        c.value = "x".repeat(MAX_FIELD + 1);
        assert_eq!(
            validate(&c).expect_err("long").code(),
            ErrorCode::DenyInvalid
        );
        c.value = String::new();
        assert_eq!(
            validate(&c).expect_err("empty").code(),
            ErrorCode::DenyInvalid
        );
    }
}

#[cfg(test)]
mod learned_tests {
    use super::*;
    use ferry_shared::select::deny::{DenyState, DeviceClass};

    #[tokio::test]
    async fn learned_entries_stop_at_the_cap_and_hand_made_ones_do_not() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = crate::storage::open_local(dir.path()).expect("store");
        let model: ModelName = "m".parse().expect("name");
        let entry = |i: usize| DenyEntry {
            release: "1.0.0".into(),
            variant: "vulkan-fp32".into(),
            class: DeviceClass::Soc,
            value: format!("soc-{i}"),
            fallback_rate: 0.5,
            samples: 100,
            source: DenySource::Telemetry,
            state: DenyState::Deny,
            kind: ferry_shared::select::deny::DenyKind::Fallback,
            latency: None,
            crash: None,
        };
        let fresh: Vec<DenyEntry> = (0..MAX_LEARNED + 40).map(entry).collect();
        let (_, entries) = add_learned(&store, &model, &fresh, "now")
            .await
            .expect("write");
        assert_eq!(entries.len(), MAX_LEARNED);
        let (_, entries) = add_learned(&store, &model, &[entry(10_000)], "now")
            .await
            .expect("write");
        assert_eq!(entries.len(), MAX_LEARNED, "still capped");
    }
}
