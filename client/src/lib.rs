//! `ferry-client`: the library apps embed to fetch, verify, cache and load ExecuTorch models.
//!
//! Work in progress: today it re-exports the verified wire types of [`ferry_shared`]; the
//! resolve/download/cache/load pipeline lands with the client issue.

pub use ferry_shared::{dsse, manifest};
