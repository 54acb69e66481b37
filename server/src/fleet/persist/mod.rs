//! Persist: the fleet's counts and events in the store. What waits to be written
//! ([`outbox`]) and what this run has seen of the store ([`seen`]), time [`buckets`] and their
//! keys,
//! reading stored objects behind limits ([`stored`]), the periodic [`flush`] of this run's
//! minutes and raw events, [`compact`]ion under a lease (with the [`collect`]ion of unused operator sets), and the raw event log as Parquet
//! ([`events`]).
//!
//! May import `fleet::counts`, `fleet::census`, `fleet::devices`, `fleet::config`, the
//! [`crate::fleet::Fleet`] handle its jobs take, and the layers below `fleet`. The flush works
//! on the [`outbox::Outbox`] and [`seen::Seen`] that [`crate::fleet::intake::aggregate::Telemetry`]
//! holds (handed out by its `outbox()` and `seen()`), never on intake's own state; what it read
//! of the store between flushes is the [`store_cache::StoreCache`] the `Fleet` holds.

pub mod accepted;
pub mod buckets;
pub mod collect;
pub mod compact;
pub mod events;
pub mod flush;
pub mod journal;
pub mod outbox;
pub mod seen;
pub mod store_cache;
pub mod stored;
