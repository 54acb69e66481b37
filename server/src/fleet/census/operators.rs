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

/// Most bytes of operator names kept in memory (a few hundred real runtimes take well under
/// a MiB; lists made up to fill memory stop here).
pub const MAX_BYTES: usize = 64 << 20;

/// Most new sets one replica stores per hour: a fleet has few distinct runtimes, so past this
/// a list is used for its own answer only (the device is asked for it again later), and
/// nobody can fill the store with made-up lists.
pub const NEW_SETS_PER_HOUR: u32 = 256;

/// One stored set.
#[derive(Debug, Serialize, Deserialize)]
struct StoredSet {
    #[serde(default = "ferry_shared::wire::protocol::format_one")]
    format: u32,
    operators: Vec<String>,
}

/// The known sets, and the digests recently found nowhere.
#[derive(Debug, Default)]
pub struct OperatorSets {
    known: Mutex<Known>,
    misses: Mutex<HashMap<Sha256Digest, Instant>>,
    /// The current hour's start and the sets stored in it.
    stored: Mutex<Option<(Instant, u32)>>,
}

/// The sets in memory and the bytes their names take.
#[derive(Debug, Default)]
struct Known {
    sets: HashMap<Sha256Digest, Arc<BTreeSet<String>>>,
    bytes: usize,
}

fn size_of(set: &BTreeSet<String>) -> usize {
    set.iter().map(|s| s.len() + 32).sum()
}

impl OperatorSets {
    /// The set with digest `d`: from memory, else from the store (unless it was missing there
    /// within [`MISS_TTL`]); `None` when no device has reported it yet.
    pub async fn lookup(&self, store: &Store, d: &Sha256Digest) -> Option<Arc<BTreeSet<String>>> {
        if let Some(set) = ferry_shared::sync::lock(&self.known).sets.get(d) {
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
                    .filter(|s| ferry_shared::select::operators::digest(&s.operators) == *d)
            }),
            Err(_) => None,
        };
        match found {
            Some(stored) => Some(self.keep(*d, stored.operators)),
            None => {
                let mut misses = ferry_shared::sync::lock(&self.misses);
                if misses.len() >= MAX_SETS
                    && let Some(oldest) = misses.iter().min_by_key(|(_, at)| **at).map(|(k, _)| *k)
                {
                    misses.remove(&oldest);
                }
                misses.insert(*d, Instant::now());
                None
            }
        }
    }

    /// Records the list a device sent (already checked against its digest) in the store, if
    /// no replica did, and in memory, within [`NEW_SETS_PER_HOUR`]; past it the set serves
    /// this answer only. A store that cannot take it now costs a device a second list later.
    pub async fn remember(&self, store: &Store, operators: &[String]) -> Arc<BTreeSet<String>> {
        let normal =
            ferry_shared::select::operators::normalize(operators.iter().map(String::as_str));
        let d = ferry_shared::select::operators::digest(&normal);
        if let Some(set) = ferry_shared::sync::lock(&self.known).sets.get(&d) {
            return set.clone();
        }
        if !self.take_store_budget() {
            return Arc::new(normal.into_iter().collect());
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

    /// Takes one new set from this hour's allowance; false when it is spent.
    fn take_store_budget(&self) -> bool {
        let mut stored = ferry_shared::sync::lock(&self.stored);
        let now = Instant::now();
        let (start, n) = stored.get_or_insert((now, 0));
        if now.duration_since(*start) >= Duration::from_secs(3600) {
            (*start, *n) = (now, 0);
        }
        if *n >= NEW_SETS_PER_HOUR {
            return false;
        }
        *n += 1;
        true
    }

    fn keep(&self, d: Sha256Digest, operators: Vec<String>) -> Arc<BTreeSet<String>> {
        let set = Arc::new(operators.into_iter().collect::<BTreeSet<String>>());
        let size = size_of(&set);
        let mut known = ferry_shared::sync::lock(&self.known);
        // Bounded in count and bytes: forget arbitrary ones (they are read from the store
        // again when asked).
        while !known.sets.is_empty()
            && (known.sets.len() >= MAX_SETS || known.bytes + size > MAX_BYTES)
        {
            let Some(k) = known.sets.keys().next().copied() else {
                break;
            };
            if let Some(gone) = known.sets.remove(&k) {
                known.bytes = known.bytes.saturating_sub(size_of(&gone));
            }
        }
        if let Some(old) = known.sets.insert(d, set.clone()) {
            known.bytes = known.bytes.saturating_sub(size_of(&old));
        }
        known.bytes += size;
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(i: usize) -> Vec<String> {
        vec![format!("x::op{i}.out"), "aten::add.out".to_string()]
    }

    #[tokio::test]
    async fn made_up_lists_cannot_fill_the_store_or_memory() {
        let store: Store = Arc::new(object_store::memory::InMemory::new());
        let sets = OperatorSets::default();
        for i in 0..(NEW_SETS_PER_HOUR as usize + 10) {
            let set = sets.remember(&store, &list(i)).await;
            assert!(
                set.contains("aten::add.out"),
                "each list serves its own answer"
            );
        }
        let stored = store
            .list_with_delimiter(Some(&object_store::path::Path::from("operators/sha256")))
            .await
            .expect("list")
            .objects
            .len();
        assert_eq!(stored, NEW_SETS_PER_HOUR as usize);
        // A stored set is found again by another replica (a fresh memory).
        let other = OperatorSets::default();
        let d = ferry_shared::select::operators::digest(&list(0));
        assert!(other.lookup(&store, &d).await.is_some());
        // One past the budget is not.
        let past = ferry_shared::select::operators::digest(&list(NEW_SETS_PER_HOUR as usize + 1));
        assert!(other.lookup(&store, &past).await.is_none());
    }

    #[test]
    fn memory_is_bounded_in_bytes() {
        let sets = OperatorSets::default();
        let big: Vec<String> = (0..4096).map(|i| format!("{:0>100}", i)).collect();
        for i in 0..400u32 {
            sets.keep(Sha256Digest::of(&i.to_be_bytes()), big.clone());
        }
        let known = ferry_shared::sync::lock(&sets.known);
        assert!(known.bytes <= MAX_BYTES, "{}", known.bytes);
        assert!(known.sets.len() < 400);
    }
}
