//! Persist: the fleet's counts and events in the store. What waits to be written
//! ([`outbox`]) and what this run has seen of the store ([`seen`]), time [`buckets`] and their
//! keys,
//! reading stored objects behind limits ([`stored`]), the periodic [`flush`] of this run's
//! minutes and raw events, [`compact`]ion under a lease, and the raw event log as Parquet
//! ([`events`]).
//!
//! May import `fleet::counts`, `fleet::intake::ingest` (the `[telemetry]` config) and the
//! layers below `fleet`; the flush works on the [`outbox::Outbox`] and [`seen::Seen`] a
//! [`crate::fleet::Fleet`] holds, never on intake's state.

pub mod buckets;
pub mod compact;
pub mod events;
pub mod flush;
pub mod outbox;
pub mod seen;
pub mod stored;
