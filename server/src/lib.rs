//! `ferry-server`: the HTTP server that hosts signed `.pte` variants, and the `ferry` CLI.
//!
//! Modules by concern:
//!
//! | module | what |
//! |---|---|
//! | [`app`] | the shared state, the router and middleware, start-up (keys, store, TLS), config, metrics, the demo |
//! | [`api`] | thin HTTP handlers (device, blobs, admin, fleet, ops), extractors, auth, and the one mapping from domain errors to HTTP |
//! | [`fleet`] | telemetry ingestion and aggregates, rate limits, the deny list, halts, rollout plans |
//! | [`storage`] | the object-store key layout, revision logs, the catalog |
//! | [`release`] | building and signing release manifests, blob uploads, release admission |
//! | [`cli`] | the `ferry` command line, one module per command group |
//!
//! Dependencies point one way: `cli → app → api → {fleet, release} → storage`.

pub mod api;
pub mod app;
pub mod cli;
pub mod fleet;
pub mod release;
pub mod storage;
