//! The operator sets devices' runtimes reported, by digest (`operators_digest` in a resolve
//! request). A device sends its list once, when no replica knew the digest; it is stored at
//! `operators/sha256/<digest>.json` (created if absent: the same digest is the same set), so
//! every replica can read it from then on, and kept in memory (bounded).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_shared::Sha256Digest;
use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::storage::{StorageKey, Store};

/// Most sets kept in memory (a fleet has a few runtimes per app version; past this, sets are
/// read from the store again when asked).
pub const MAX_SETS: usize = 4096;

/// How long a digest found in no store is not looked up again (random digests must not turn
/// into store reads).
pub const MISS_TTL: Duration = Duration::from_secs(60);

/// One stored set.
#[derive(Debug, Serialize, Deserialize)]
struct StoredSet {
    #[serde(default = "ferry_shared::protocol::format_one")]
    format: u32,
    operators: Vec<String>,
}

/// The known sets, and the digests recently found nowhere.
#[derive(Debug, Default)]
pub struct OperatorSets {
    known: Mutex<HashMap<Sha256Digest, Arc<BTreeSet<String>>>>,
    misses: Mutex<HashMap<Sha256Digest, Instant>>,
}

impl OperatorSets {
    /// The set with digest `d`: from memory, else from the store (unless it was missing there
    /// within [`MISS_TTL`]); `None` when no device has reported it yet.
    pub async fn lookup(&self, store: &Store, d: &Sha256Digest) -> Option<Arc<BTreeSet<String>>> {
        if let Some(set) = ferry_shared::sync::lock(&self.known).get(d) {
            return Some(set.clone());
        }
        {
            let mut misses = ferry_shared::sync::lock(&self.misses);
            misses.retain(|_, at| at.elapsed() < MISS_TTL);
            if misses.contains_key(d) {
                return None;
            }
        }
        let found = match store.get(&StorageKey::operator_set(d)).await {
            Ok(got) => got.bytes().await.ok().and_then(|b| {
                serde_json::from_slice::<StoredSet>(&b)
                    .ok()
                    .filter(|s| ferry_shared::operators::digest(&s.operators) == *d)
            }),
            Err(_) => None,
        };
        match found {
            Some(stored) => Some(self.keep(*d, stored.operators)),
            None => {
                let mut misses = ferry_shared::sync::lock(&self.misses);
                if misses.len() < MAX_SETS {
                    misses.insert(*d, Instant::now());
                }
                None
            }
        }
    }

    /// Records the list a device sent (already checked against its digest) in the store, if
    /// no replica did, and in memory. A store that cannot take it now costs a device a second
    /// list later; the set is used for this answer either way.
    pub async fn remember(&self, store: &Store, operators: &[String]) -> Arc<BTreeSet<String>> {
        let normal = ferry_shared::operators::normalize(operators.iter().map(String::as_str));
        let d = ferry_shared::operators::digest(&normal);
        if let Some(set) = ferry_shared::sync::lock(&self.known).get(&d) {
            return set.clone();
        }
        let stored = StoredSet {
            format: 1,
            operators: normal.clone(),
        };
        if let Ok(bytes) = serde_json::to_vec(&stored) {
            let create = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            match store
                .put_opts(
                    &StorageKey::operator_set(&d),
                    PutPayload::from(bytes),
                    create,
                )
                .await
            {
                Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => tracing::warn!("cannot store operator set {d}: {e}"),
            }
        }
        ferry_shared::sync::lock(&self.misses).remove(&d);
        self.keep(d, normal)
    }

    fn keep(&self, d: Sha256Digest, operators: Vec<String>) -> Arc<BTreeSet<String>> {
        let set = Arc::new(operators.into_iter().collect::<BTreeSet<String>>());
        let mut known = ferry_shared::sync::lock(&self.known);
        if known.len() >= MAX_SETS {
            // Bounded: forget an arbitrary one (it is read from the store again when asked).
            if let Some(k) = known.keys().next().copied() {
                known.remove(&k);
            }
        }
        known.insert(d, set.clone());
        set
    }
}
