//! Releases: building and signing a manifest from local files (`ferry sign`), and on the server
//! streamed blob uploads and the admission of a signed release.
//!
//! May import `fleet`, `plans`, `keyring`, `snapshot`, `storage` and `ferry-shared`. [`publish`]
//! admits releases and blob uploads; [`sign`] builds and signs manifests; [`evaluate`] scores
//! variants on a held-out set; [`update_size`] says what a device on the previous release
//! downloads.

pub mod attest;
pub mod evaluate;
pub mod key_release;
pub mod publish;
pub mod sign;
pub mod update_size;
