//! Counts: the mergeable aggregates every replica keeps, flushes and merges. Per-minute
//! [`rollup`]s of loads, failures, fallbacks and crashes per model, release, variant and device
//! class ([`classes`])
//! (carrying the census maps); field [`latency`] as DDSketches and the gates computed from it
//! ([`gates`]); load-time [`sketches`].
//!
//! May import `fleet::census`, `fleet::devices`, `fleet::config` and the layers below `fleet`.

pub mod classes;
pub mod gates;
pub mod latency;
pub mod rollup;
pub mod sketches;
