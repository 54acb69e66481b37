//! Signed resolve answers kept for reuse: sign once, serve many.
//!
//! A decision depends only on the model's state (named by its sequence), the request fields
//! selection uses ([`ferry_shared::wire::resolve::ResolveRequest::selection_digest`], which includes
//! the model) and the device's cohort, so devices that share those share one signed decision.
//! Each is kept with its answer pre-rendered up to the per-device receipt, and reused while the
//! model's state is unchanged (a [`Generation`]: each part of it, not only their sum, the
//! sequence) and at most a quarter of its lifetime has passed (a device
//! always gets at least three quarters of `decision_ttl_secs`). Pinned devices and `explain`
//! answers are never shared.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ferry_shared::Sha256Digest;
use ferry_shared::experiment::ArmName;
use ferry_shared::wire::resolve::Cohort;
use time::OffsetDateTime;

/// Most answers kept per shard (16 shards, so 16,384 answers of about 2.5 KB: 40 MiB at most);
/// a full shard starts over. Revocation lists are shared, not copied into each answer.
pub const MAX_PER_SHARD: usize = 1024;

/// What makes two answers for one request interchangeable: rollout revision, deny-list
/// revision, releases published, revocation list version, whether devices get that list, and
/// the experiment revision.
pub type Generation = (u64, u64, u64, u64, bool, u64);

/// One signed answer, rendered up to the receipt.
#[derive(Debug)]
pub struct Answer {
    /// The model's state it was made under.
    pub generation: Generation,
    /// Reused until then.
    pub reuse_until: OffsetDateTime,
    /// `{"decision":...,"release_ref":...`.
    pub head: bytes::Bytes,
    /// The model's revocation list as sent (shared with every answer about the model).
    pub revocations: Option<bytes::Bytes>,
    /// The release chosen, as text (for the receipt).
    pub release: String,
    /// The candidate variant ids (for the receipt).
    pub variants: Vec<String>,
    /// The cohort the decision names (for cohort sizes).
    pub cohort: Cohort,
    /// The experiment arm the decision names, as a receipt entry (`@<id>=<arm>`).
    pub arm: Option<String>,
}

/// Whom an answer is shared by: the request's digest, the cohort and the experiment arm the
/// device falls in by hash.
pub type Key = (Sha256Digest, Cohort, Option<ArmName>);

/// The answers, in shards by digest.
#[derive(Debug, Default)]
pub struct Answers {
    shards: [Mutex<HashMap<Key, Arc<Answer>>>; 16],
}

impl Answers {
    fn shard(&self, digest: &Sha256Digest) -> &Mutex<HashMap<Key, Arc<Answer>>> {
        &self.shards[usize::from(digest.as_bytes()[0] & 15)]
    }

    /// The answer for `key` if it is still good for `generation` at `now`.
    pub fn get(
        &self,
        key: &Key,
        generation: Generation,
        now: OffsetDateTime,
    ) -> Option<Arc<Answer>> {
        let shard = ferry_shared::sync::lock(self.shard(&key.0));
        shard
            .get(key)
            .filter(|a| a.generation == generation && now < a.reuse_until)
            .cloned()
    }

    /// Keeps `answer` for `key`.
    pub fn put(&self, key: Key, answer: Arc<Answer>) {
        let mut shard = ferry_shared::sync::lock(self.shard(&key.0));
        if shard.len() >= MAX_PER_SHARD {
            shard.clear();
        }
        shard.insert(key, answer);
    }
}
