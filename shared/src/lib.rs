//! `ferry-shared`: the pure core shared by ferry's server and client.
//!
//! Nothing here does I/O, spawns tasks or reads the clock: callers pass `now` where time
//! matters. The rooms:
//! - [`names`]: validated newtypes (model names, variant ids, digests, key ids);
//! - [`manifest`]: the release manifest that ops sign and devices verify, with its files'
//!   chunk indexes ([`manifest::chunks`]);
//! - [`pte`]: the `.pte` and `.ptd` inspector that reads what a program really delegates;
//! - [`trust`]: the trust file (pinned public keys with roles), DSSE envelopes and
//!   [`trust::dsse::Verified`], versioned keyrings (key rotation), revocation lists, and the
//!   signed time a device learns its clock from;
//! - [`wire`]: what crosses the device path: protocol v1's versions, headers and tolerant-reader
//!   helpers, the resolve request and signed decision, the telemetry events;
//! - [`select`]: the pure decisions: variant selection, rollout plans and cohort bucketing,
//!   deny entries, operator sets and what a runtime lacks;
//! - [`errors`]: the error catalogue (every stable code, the one list both sides map from);
//! - [`sync`]: locks that outlive a panicked holder (the one place that rule is written).
//!
//! Imports no other ferry crate: the server and the client import it. Every room may import
//! `names`, `errors` and `sync`; rooms name each other's types where a concept is shared
//! (`manifest` verifies with `trust::dsse` and reads formats with `wire::protocol`; `wire`
//! validates operator names with `select::operators`; `select` ranks a `wire::resolve`
//! request), and no two files import each other in a circle (`tests/circles`).

pub mod errors;
pub mod experiment;
pub mod manifest;
pub mod names;
pub mod pte;
pub mod select;
pub mod sync;
pub mod trust;
pub mod wire;

pub use names::{BackendId, KeyId, ModelName, NameError, Sha256Digest, VariantId};
