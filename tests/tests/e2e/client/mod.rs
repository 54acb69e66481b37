//! The client against a real server: loads, fallbacks and the last known good, the cache shared by
//! processes, download policies, deltas and large files, device clocks, trust, constraints, data
//! files, tensors, metadata, runtime operators.

mod cdn;
pub(crate) mod clock;
pub(crate) mod clock_https;
mod compressed;
mod constraints;
mod crash;
mod data_files;
pub(crate) mod delta;
mod delta_limits;
pub(crate) mod e2e;
mod large_files;
mod mirror_kill;
mod model_metadata;
mod offline_start;
mod operators;
mod policy;
mod protocol;
mod sealed;
mod sealed_updates;
mod shared_cache;
pub(crate) mod site_mirror;
mod sources;
mod tensors;
mod trust;
mod verify_once;
