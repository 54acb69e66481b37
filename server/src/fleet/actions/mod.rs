//! Automatic actions: what the fleet's counts make the server do. Halting a staged release
//! ([`evaluate`], fed by the [`queue`]), driving health-gated ramps ([`ramp`], counting from
//! the [`marks`] where each step began), and learning deny entries from fallbacks and slow
//! loads ([`learn`]). Each reads counts, asks a pure
//! decision in `ferry-shared`, and writes a revision to a plan (`crate::plans`).
//!
//! May import everything else in `fleet` (the `Fleet` handle its jobs take too), `crate::plans`
//! and the layers below.

pub mod evaluate;
pub mod learn;
pub mod marks;
pub mod queue;
pub mod ramp;
