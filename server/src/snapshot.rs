//! What resolve reads without touching storage: the catalog, the rollout plans, the deny
//! lists, the revocation lists and the keyring in force. Each is a [`Snapshot`]: readers take
//! the version in force (an `Arc`, no lock held while they use it) and writers replace it
//! whole.
//!
//! Bottom of the server's views: imports only `storage` and `ferry-shared`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use ferry_shared::select::deny::DenyEntry;
use ferry_shared::select::rollout::RolloutPlan;
use ferry_shared::trust::dsse::{Envelope, KeyRing};
use ferry_shared::trust::keyring::TrustState;
use ferry_shared::trust::revocation::RevocationList;
use ferry_shared::{KeyId, ModelName};
use time::OffsetDateTime;

use crate::storage::catalog::Catalog;

/// A value read often and replaced whole. A writer that panicked mid-replace leaves the
/// previous value in force (the lock's poisoning is handled here, once).
#[derive(Debug, Default)]
pub struct Snapshot<T>(RwLock<Arc<T>>);

impl<T> Snapshot<T> {
    /// A snapshot holding `value`.
    pub fn new(value: T) -> Self {
        Self(RwLock::new(Arc::new(value)))
    }

    /// The value in force.
    pub fn get(&self) -> Arc<T> {
        ferry_shared::sync::read(&self.0).clone()
    }

    /// Puts `value` in force.
    pub fn replace(&self, value: T) {
        self.update(|_| Some(value));
    }

    /// Puts in force what `next` makes of the value in force, when it makes something; no
    /// other writer runs in between.
    pub fn update(&self, next: impl FnOnce(&T) -> Option<T>) {
        let mut g = ferry_shared::sync::write(&self.0);
        if let Some(v) = next(&g) {
            *g = Arc::new(v);
        }
    }
}

/// A model's deny list in force and the revision it came from.
#[derive(Debug, Clone, Default)]
pub struct DenyInForce {
    /// The deny-list revision (part of the decision sequence).
    pub revision: u64,
    /// The entries.
    pub entries: Vec<DenyEntry>,
}

/// A model's revocation list in force and the envelope it came in (sent with every answer).
#[derive(Debug, Clone)]
pub struct Revocations {
    /// The list (always in force on the server).
    pub list: Arc<RevocationList>,
    /// As signed, when a current release key signed it (sent to devices); `None` after the
    /// signing key was rotated out, until the list is signed again.
    pub envelope: Option<Arc<Envelope>>,
    /// [`Revocations::envelope`] rendered as JSON once, shared by every answer that sends it.
    pub json: Option<bytes::Bytes>,
}

/// The keys a server works with at one time: what the newest keyring it adopted says.
#[derive(Debug, Clone)]
pub struct KeyView {
    /// The trust walked through every keyring so far.
    pub state: TrustState,
    /// Keys trusted to sign releases (and this server's online key), as of adoption.
    pub release_ring: KeyRing,
    /// Every keyring version, oldest first (published at `GET /v1/keyring`).
    pub chain: Vec<Envelope>,
    /// The keyring version in force (named in every decision; 0 for a fixed trust file).
    pub version: u64,
    /// When the online key expires, if its keyring gives it an expiry.
    pub online_expires_at: Option<OffsetDateTime>,
}

impl KeyView {
    /// The view of `state` and its `chain` for the server whose online key is `online`.
    pub fn new(state: TrustState, chain: Vec<Envelope>, online: &KeyId) -> Self {
        Self {
            release_ring: state.ring_at(OffsetDateTime::now_utc()),
            version: state.version(),
            online_expires_at: state.expiry_of(online),
            state,
            chain,
        }
    }

    /// This view advanced by `env` (the next version): checked like devices check it, and it
    /// must still list `online` as an online key that has not expired (a keyring that retires
    /// this server's key needs the new online key and a restart).
    pub fn advanced(&self, env: &Envelope, online: &KeyId) -> Result<KeyView, String> {
        let mut state = self.state.clone();
        state.advance(env).map_err(|e| e.to_string())?;
        let now = OffsetDateTime::now_utc();
        let listed = state.keys().iter().any(|k| {
            k.key.keyid == *online && k.key.role == ferry_shared::trust::dsse::KeyRole::Online
        });
        if !listed || state.ring_at(now).get(online).is_none() {
            return Err(format!(
                "keyring version {} does not list this server's online key {} as a current \
                 online key: put the new online.key and keyring/ on every server and restart \
                 them instead",
                state.version(),
                online.short()
            ));
        }
        let mut chain = self.chain.clone();
        chain.push(env.clone());
        Ok(KeyView::new(state, chain, online))
    }
}

/// Every view resolve reads, shared by the handlers and the fleet jobs.
#[derive(Debug)]
pub struct Views {
    /// The catalog of published releases.
    pub catalog: Snapshot<Catalog>,
    /// The rollout plan in force per model (newest revision).
    pub rollouts: Snapshot<BTreeMap<ModelName, RolloutPlan>>,
    /// The experiment plan in force per model (newest revision, running or stopped).
    pub experiments: Snapshot<BTreeMap<ModelName, ferry_shared::experiment::ExperimentPlan>>,
    /// The deny list in force per model, with its revision.
    pub deny: Snapshot<BTreeMap<ModelName, DenyInForce>>,
    /// The revocation list in force per model, with its signed envelope.
    pub revocations: Snapshot<BTreeMap<ModelName, Revocations>>,
    /// The keyring in force.
    pub keys: Snapshot<KeyView>,
}

impl Views {
    /// Views of `catalog` and `keys`, with no rollout plans, deny lists or revocations yet.
    pub fn new(catalog: Catalog, keys: KeyView) -> Self {
        Self {
            catalog: Snapshot::new(catalog),
            rollouts: Snapshot::default(),
            experiments: Snapshot::default(),
            deny: Snapshot::default(),
            revocations: Snapshot::default(),
            keys: Snapshot::new(keys),
        }
    }

    /// Puts a newer keyring in force (an older or equal version is ignored).
    pub fn set_keys(&self, view: KeyView) {
        self.keys
            .update(|held| (view.version > held.version).then_some(view));
    }

    /// Puts `list` in force for its model, unless a newer version already is. `envelope` is
    /// what devices get (`None` when no current release key signed it).
    pub fn set_revocations(&self, list: RevocationList, envelope: Option<Envelope>) {
        self.revocations.update(|held| {
            if held
                .get(&list.model)
                .is_some_and(|r| r.list.version >= list.version)
            {
                return None;
            }
            let mut next = held.clone();
            next.insert(
                list.model.clone(),
                Revocations {
                    json: envelope
                        .as_ref()
                        .and_then(|e| serde_json::to_vec(e).ok())
                        .map(bytes::Bytes::from),
                    envelope: envelope.map(Arc::new),
                    list: Arc::new(list),
                },
            );
            Some(next)
        });
    }

    /// Puts one model's experiment plan in force, unless a newer revision already is.
    pub fn set_experiment(&self, plan: ferry_shared::experiment::ExperimentPlan) {
        let Ok(model) = plan.model.parse::<ModelName>() else {
            return;
        };
        self.experiments.update(|held| {
            if held
                .get(&model)
                .is_some_and(|h| h.revision >= plan.revision)
            {
                return None;
            }
            let mut next = held.clone();
            next.insert(model, plan);
            Some(next)
        });
    }

    /// Replaces one model's deny list (revision `revision`); an older revision than the one
    /// held is ignored.
    pub fn set_deny(&self, model: &ModelName, revision: u64, entries: Vec<DenyEntry>) {
        self.deny.update(|held| {
            if held.get(model).is_some_and(|h| h.revision > revision) {
                return None;
            }
            let mut next = held.clone();
            next.insert(model.clone(), DenyInForce { revision, entries });
            Some(next)
        });
    }

    /// Adds a release to the catalog.
    pub fn add_release(&self, release: crate::storage::catalog::Release) {
        self.catalog.update(|held| {
            let mut next = held.clone();
            next.insert(release);
            Some(next)
        });
    }
}
