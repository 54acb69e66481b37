//! Releases: building and signing a manifest from local files (`ferry sign`), and on the server
//! streamed blob uploads and the admission of a signed release.

pub mod decide;
pub mod publish;
pub mod sign;
