//! Persist: the fleet's counts and events in the store. Time [`buckets`] and their keys,
//! reading stored objects behind limits ([`stored`]), the periodic [`flush`] of this run's
//! minutes and raw events, [`compact`]ion under a lease, and the raw event log as Parquet
//! ([`events`]).
//!
//! May import `fleet::counts`, `fleet::intake` (the replica's aggregates it drains) and the
//! layers below `fleet`.

pub mod buckets;
pub mod compact;
pub mod events;
pub mod flush;
pub mod stored;
