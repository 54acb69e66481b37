//! Distinct devices: the hash an install id (or an address prefix) is counted and limited
//! under, and the mergeable estimator that counts them. The bottom of `fleet`: imports
//! nothing of the crate.

use cardinality_estimator::CardinalityEstimator;

/// Distinct devices, as a mergeable estimator over the hashed install id.
pub type Devices = CardinalityEstimator<u64>;

/// The hash of an address prefix (a rate-limit key).
pub(crate) fn hash_id_bytes(b: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// The hash of an install id (a rate-limit key, and what [`Devices`] count).
pub(crate) fn hash_id(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}
