//! Resolve: what a device gets. The pure [`decide`] (a device's request and one model's state
//! in, the unsigned decision out), the [`releases`] a device may get, its [`experiment`] arm,
//! the signed [`answers`]
//! kept for reuse, and the [`notes`] a resolve leaves in the fleet's census (one call per
//! request). The HTTP handler in `api/device.rs` reads the request and the views, calls
//! [`decide::decide`], signs, renders and hands the notes over.
//!
//! May import `fleet` (the notes' target), `plans`, `snapshot`, `storage` and `ferry-shared`.

pub mod answers;
pub mod decide;
pub mod experiment;
pub mod notes;
pub mod releases;
pub mod stance;

#[cfg(test)]
mod tests;
