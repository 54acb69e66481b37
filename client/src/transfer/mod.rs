//! Transfer: what crosses the network. Asking the server what to load (`resolve`),
//! resumable verified downloads ([`download`]), delta downloads built from cached chunks
//! (`delta`), and HTTPS whose certificate checks do not rest on the wall clock (`tls`).

pub(crate) mod delta;
pub mod download;
pub(crate) mod http;
pub(crate) mod resolve;
pub(crate) mod sources;
pub(crate) mod tls;
