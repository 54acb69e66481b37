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

use crate::fleet::intake::limits::IpKey;
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

/// Most new sets one replica stores per hour for one model: a fleet has few distinct runtimes,
/// so past this a list is used for its own answer only (the device is asked for it again
/// later), and nobody can fill the store with made-up lists.
pub const NEW_SETS_PER_MODEL_PER_HOUR: u32 = 256;

/// Most new sets one client address (IPv4 address, IPv6 /64) brings per hour: one address
/// cannot use up a model's allowance, so a real device's new set is still stored.
pub const NEW_SETS_PER_ADDRESS_PER_HOUR: u32 = 16;

/// Most addresses the hourly allowance tracks; past this, new addresses store nothing until
/// the hour turns (memory stays bounded; it is never cleared early).
const MAX_ADDRESSES: usize = 100_000;

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
    /// The sets stored this hour, per model and per address.
    stored: Mutex<Budget>,
}

/// The hour's new sets.
#[derive(Debug, Default)]
struct Budget {
    start: Option<Instant>,
    per_model: HashMap<String, u32>,
    per_address: HashMap<IpKey, u32>,
}

/// What [`OperatorSets::remember`] did with a list (the outcome in
/// `ferry_operator_sets_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remembered {
    /// The set was in memory already.
    Known,
    /// Stored (or found stored by another replica) and kept in memory.
    Stored,
    /// Not stored: the sender's address brought its hourly allowance of new sets.
    AddressSpent,
    /// Not stored: the model's hourly allowance of new sets is used up.
    ModelSpent,
}

impl Remembered {
    /// Its metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Known => "known",
            Self::Stored => "stored",
            Self::AddressSpent => "address_allowance_spent",
            Self::ModelSpent => "model_allowance_spent",
        }
    }
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
    /// The set with digest `d` if it is in memory (no store read).
    pub fn cached(&self, d: &Sha256Digest) -> Option<Arc<BTreeSet<String>>> {
        ferry_shared::sync::lock(&self.known).sets.get(d).cloned()
    }

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

    /// Records the list a device of `model` sent from `address` (already checked against its
    /// digest) in the store, if no replica did, and in memory, within
    /// [`NEW_SETS_PER_MODEL_PER_HOUR`] and [`NEW_SETS_PER_ADDRESS_PER_HOUR`]; past them the
    /// set serves this answer only. A store that cannot take it now costs a device a second
    /// list later.
    pub async fn remember(
        &self,
        store: &Store,
        operators: &[String],
        model: &str,
        address: IpKey,
    ) -> (Arc<BTreeSet<String>>, Remembered) {
        let normal =
            ferry_shared::select::operators::normalize(operators.iter().map(String::as_str));
        let d = ferry_shared::select::operators::digest(&normal);
        if let Some(set) = ferry_shared::sync::lock(&self.known).sets.get(&d) {
            return (set.clone(), Remembered::Known);
        }
        if let Err(spent) = self.take_store_budget(model, address) {
            return (Arc::new(normal.into_iter().collect()), spent);
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
        (self.keep(d, normal), Remembered::Stored)
    }

    /// Takes one new set from this hour's allowances of `model` and `address`; `Err` says
    /// which is spent. The first time a model's is in an hour, a warning says so.
    fn take_store_budget(&self, model: &str, address: IpKey) -> Result<(), Remembered> {
        let mut b = ferry_shared::sync::lock(&self.stored);
        let now = Instant::now();
        if b.start
            .is_none_or(|s| now.duration_since(s) >= Duration::from_secs(3600))
        {
            *b = Budget {
                start: Some(now),
                ..Budget::default()
            };
        }
        let by_address = b.per_address.get(&address).copied().unwrap_or(0);
        let by_model = b.per_model.get(model).copied().unwrap_or(0);
        if by_model >= NEW_SETS_PER_MODEL_PER_HOUR {
            if by_model == NEW_SETS_PER_MODEL_PER_HOUR {
                tracing::warn!(
                    "{model}: {NEW_SETS_PER_MODEL_PER_HOUR} new operator sets stored this hour, \
                     the most a replica stores; further lists serve their own answer only \
                     until the hour turns (ferry_operator_sets_total)"
                );
                b.per_model.insert(model.to_string(), by_model + 1);
            }
            return Err(Remembered::ModelSpent);
        }
        if by_address >= NEW_SETS_PER_ADDRESS_PER_HOUR
            || (by_address == 0 && b.per_address.len() >= MAX_ADDRESSES)
        {
            return Err(Remembered::AddressSpent);
        }
        b.per_address.insert(address, by_address + 1);
        b.per_model.insert(model.to_string(), by_model + 1);
        Ok(())
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

    async fn stored(store: &Store) -> usize {
        store
            .list_with_delimiter(Some(&object_store::path::Path::from("operators/sha256")))
            .await
            .expect("list")
            .objects
            .len()
    }

    fn address(i: u32) -> IpKey {
        IpKey::V4(i.to_be_bytes())
    }

    #[tokio::test]
    async fn made_up_lists_cannot_fill_the_store_or_memory() {
        let store: Store = Arc::new(object_store::memory::InMemory::new());
        let sets = OperatorSets::default();
        let per = NEW_SETS_PER_ADDRESS_PER_HOUR as usize;
        // Many addresses, each with its allowance: the model's allowance ends it.
        for i in 0..(NEW_SETS_PER_MODEL_PER_HOUR as usize + 10) {
            let from = address((i / per) as u32);
            let (set, _) = sets.remember(&store, &list(i), "m", from).await;
            assert!(
                set.contains("aten::add.out"),
                "each list serves its own answer"
            );
        }
        assert_eq!(stored(&store).await, NEW_SETS_PER_MODEL_PER_HOUR as usize);
        assert_eq!(
            sets.remember(&store, &list(90_000), "m", address(8_888))
                .await
                .1,
            Remembered::ModelSpent
        );
        // A stored set is found again by another replica (a fresh memory).
        let other = OperatorSets::default();
        let d = ferry_shared::select::operators::digest(&list(0));
        assert!(other.lookup(&store, &d).await.is_some());
        // One past the budget is not.
        let past = ferry_shared::select::operators::digest(&list(
            NEW_SETS_PER_MODEL_PER_HOUR as usize + 1,
        ));
        assert!(other.lookup(&store, &past).await.is_none());
        // Another model has its own allowance.
        sets.remember(&store, &list(100_000), "other", address(9_999))
            .await;
        assert_eq!(
            stored(&store).await,
            NEW_SETS_PER_MODEL_PER_HOUR as usize + 1
        );
    }

    #[tokio::test]
    async fn one_address_cannot_use_up_a_models_allowance() {
        let store: Store = Arc::new(object_store::memory::InMemory::new());
        let sets = OperatorSets::default();
        let flood = address(1);
        let mut outcomes = std::collections::BTreeMap::new();
        for i in 0..1000 {
            let (_, how) = sets.remember(&store, &list(i), "m", flood).await;
            *outcomes.entry(how.label()).or_insert(0) += 1;
        }
        assert_eq!(stored(&store).await, NEW_SETS_PER_ADDRESS_PER_HOUR as usize);
        assert_eq!(outcomes["stored"], NEW_SETS_PER_ADDRESS_PER_HOUR);
        assert_eq!(
            outcomes["address_allowance_spent"],
            1000 - NEW_SETS_PER_ADDRESS_PER_HOUR
        );
        assert_eq!(
            sets.remember(&store, &list(0), "m", flood).await.1,
            Remembered::Known
        );
        // A real device's new set, from its own address, is still stored.
        sets.remember(&store, &list(5_000), "m", address(2)).await;
        let d = ferry_shared::select::operators::digest(&list(5_000));
        assert!(OperatorSets::default().lookup(&store, &d).await.is_some());
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
