//! `ferry-client`: the library apps embed to fetch, verify, cache and load ExecuTorch models.
//!
//! ```text
//! load(model, device)
//!   resolve ──(unreachable / 5xx / refused)──────────────► last known good from the cache
//!     │ verify decision (online key, expiry, sequence) and release (release key)
//!     ▼
//!   for each candidate, best first:
//!     crashed this app before (same versions)? ── yes ──► passed over, attempt `crashed`
//!     cached and intact? ── no ──► resumable download into .part, hashed while streaming
//!     open program → compare method backends with the registered ones → load method
//!     golden check (when the manifest has one); each native step marked in flight
//!     ok ──► record as last known good, queue telemetry, return
//!     failed ──► queue telemetry (load failed, fallback from → to), next candidate
//! ```
//!
//! The client is blocking (no async runtime), talks HTTP through `ureq` with rustls, and never
//! hands the runtime a byte whose SHA-256 has not matched the signed manifest. Build one with
//! [`ClientBuilder`]. The real ExecuTorch runtime is behind the `executorch` feature
//! ([`executorch_runtime`]); any other runtime implements [`Runtime`].
//!
//! The rooms: [`Client`] (`client.rs`) and its [`ClientBuilder`]; `load/` (the load core: the
//! candidate walk as a pure plan, and the shell that fetches and loads what it says); [`trust`]
//! (verifying answers and releases, time the device can trust); [`transfer`] (resolve,
//! downloads, deltas, HTTPS); [`cache`] (the content-addressed cache, its locks, the last known
//! good); [`crash`] (the flight recorder around native steps and the crashes it found);
//! [`run`] (the loaded model, golden checks, field latency, signed metadata);
//! [`telemetry`] (the on-disk event queue); [`ffi`] (the C ABI, feature `ffi`). This file only
//! declares and re-exports.

mod builder;
pub mod cache;
mod client;
pub mod crash;
pub mod error;
#[cfg(feature = "executorch")]
pub mod executorch_runtime;
#[cfg(feature = "ffi")]
pub mod ffi;
mod load;
pub mod policy;
pub mod run;
pub mod runtime;
pub mod seal;
pub mod telemetry;
pub mod transfer;
pub mod trust;
mod types;

pub use crate::builder::{ClientBuilder, RUST_SDK};
pub use crate::cache::{Cache, ModelEntry, VerifiedBlob};
pub use crate::client::Client;
pub use crate::crash::ledger::CrashRecord;
pub use crate::error::{Attempt, ClientError, Stage};
pub use crate::policy::{Conditions, DownloadPlan, DownloadPolicy, LoadMode, LoadOptions, Probe};
pub use crate::run::model::LoadedModel;
pub use crate::runtime::{
    MethodSignature, Program, Runtime, RuntimeError, TensorSpec, max_abs_diff,
};
pub use crate::telemetry::SendReport;
pub use crate::transfer::download::{DownloadLimits, ProgressFn};
pub use crate::trust::timekeeping::{Clock, SystemClock};
pub use crate::trust::verify::{Plan, PlannedVariant};
pub use crate::types::{
    CachedModel, DeviceInfo, LoadReport, Prefetched, ProbeReport, ProbeTiming, Source,
};
/// The signed model metadata types a [`LoadedModel`] hands out (see
/// [`LoadedModel::preprocess`]).
pub use ferry_shared::manifest::{ColorOrder, Layout, Preprocess, Resize, ResizeFilter};
