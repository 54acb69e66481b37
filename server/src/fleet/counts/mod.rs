//! Counts: the mergeable aggregates every replica keeps, flushes and merges. Per-minute
//! [`rollup`]s of loads, failures and fallbacks per model, release, variant and device class;
//! field [`latency`] as DDSketches and the gates computed from it ([`gates`]); distinct
//! [`devices`] as HyperLogLog sketches over a pinned hash; load-time [`sketches`].
//!
//! May import `fleet::census` (the census counts a rollup carries) and the layers below
//! `fleet`.

pub mod devices;
pub mod gates;
pub mod latency;
pub mod rollup;
pub mod sketches;
