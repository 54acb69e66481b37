//! Releases: building and signing a manifest from local files (`ferry sign`), and on the server
//! streamed blob uploads and the admission of a signed release.
//!
//! May import `fleet`, `keyring`, `snapshot`, `storage` and `ferry-shared`. [`decide`] is
//! resolve's decision as a pure function; [`publish`] admits releases and blob uploads;
//! [`sign`] builds and signs manifests; [`evaluate`] scores variants on a held-out set.

pub mod decide;
pub mod evaluate;
pub mod publish;
pub mod sign;
pub mod update_size;
