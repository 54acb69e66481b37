//! `ferry-shared`: the pure core shared by ferry's server and client.
//!
//! Nothing here does I/O, spawns tasks or reads the clock: callers pass `now` where time
//! matters. The modules:
//! - [`names`]: validated newtypes (model names, variant ids, digests, key ids);
//! - [`manifest`]: the release manifest that ops sign and devices verify;
//! - [`dsse`]: DSSE envelopes with ed25519, key rings with roles, and [`dsse::Verified`];
//! - [`operators`]: operator names, their digest, what a runtime lacks;
//! - [`pte`]: the `.pte` inspector that reads what a program really delegates;
//! - [`protocol`]: protocol v1's version numbers, headers and tolerant-reader helpers;
//! - [`resolve`]: the device-facing resolve request and signed decision;
//! - [`clock`]: the signed time a device learns its clock from;
//! - [`revocation`]: release-key-signed lists of revoked releases;
//! - [`select`]: the pure variant-selection function;
//! - [`rollout`]: rollout plans and cohort bucketing;
//! - [`trust`]: the trust file (pinned public keys with roles);
//! - [`keyring`]: versioned keyrings signed by the pinned root keys (key rotation);
//! - [`telemetry`]: the events devices report;
//! - [`sync`]: locks that outlive a panicked holder (the one place that rule is written).
//!
//! Imports no other ferry crate: the server and the client import it.

pub mod chunks;
pub mod clock;
pub mod deny;
pub mod dsse;
pub mod errors;
pub mod keyring;
pub mod manifest;
pub mod names;
pub mod operators;
pub mod protocol;
pub mod pte;
pub mod resolve;
pub mod revocation;
pub mod rollout;
pub mod select;
pub mod sync;
pub mod telemetry;
pub mod trust;

pub use names::{BackendId, KeyId, ModelName, NameError, Sha256Digest, VariantId};
