//! The application: configuration assembled from every module's section, start-up (keys,
//! store, catalog, TLS, listener), the background loops, and the built-in demo model.
//!
//! May import every module below it (`api` and everything under it); only `cli` imports it.

pub mod config;
pub mod demo;
pub mod guard;
pub mod listen;
pub mod startup;
