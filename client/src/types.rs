//! The values apps hand to and get back from the [`Client`](crate::Client): device facts, where
//! a loaded model came from and the report of its load, cached and prefetched variants. The
//! loaded model itself is [`crate::run::model`]; the clock is [`crate::trust::timekeeping`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::Platform;

use crate::error::Attempt;

/// What the device tells the server about itself (the runtime version and registered backends
/// come from the [`Runtime`](crate::Runtime)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// A stable, app-scoped install id (decides rollout cohorts).
    pub install_id: String,
    /// Platform.
    pub platform: Platform,
    /// OS version.
    pub os_version: String,
    /// Device model.
    pub device_model: String,
    /// System on chip.
    pub soc: String,
    /// RAM in MiB.
    pub ram_mb: u64,
    /// Backends to claim beyond those the runtime registered (testing on a desktop what a
    /// phone would be offered); the runtime's real answer still decides what loads.
    pub claimed_backends: Vec<String>,
}

/// Where the loaded bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Downloaded now.
    Downloaded,
    /// Already in the cache (re-verified before loading).
    Cached,
    /// The server could not be used; the last known good verified variant was loaded.
    LastKnownGood {
        /// Why the server was not used (error code).
        code: String,
        /// Its message.
        reason: String,
    },
}

/// One load, start to end: what was chosen, what was tried before it and why each failed (with
/// the stage), what the runtime registers, and how the chosen program splits between delegates
/// and portable kernels.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoadReport {
    /// Model name.
    pub model: String,
    /// The release that loaded.
    pub release: Option<String>,
    /// The variant that loaded.
    pub variant: Option<String>,
    /// Its delegate, as the signed manifest says.
    pub delegate: Option<String>,
    /// `downloaded`, `cached` or `last_known_good`.
    pub source: String,
    /// The method loaded.
    pub method: String,
    /// Each candidate tried before the one that loaded, in order, with the stage that failed,
    /// its error code, message and time; for `last_known_good`, first the resolve failure
    /// that made the client fall back to the cache.
    pub attempts: Vec<Attempt>,
    /// Backends the runtime registers.
    pub registered_backends: Vec<String>,
    /// Calls of the loaded method into each delegate (backend id to count), from the verified
    /// program; `None` when its program table could not be read (over 16 MiB before the
    /// segments, or a layout the inspector does not know).
    pub delegated: Option<BTreeMap<String, u64>>,
    /// Operators the loaded method runs on portable or optimized kernels, not a delegate
    /// (operator to call count): what stayed on the CPU outside the delegate. `None` as for
    /// `delegated`.
    pub portable_kernels: Option<BTreeMap<String, u64>>,
    /// Time from the start of the load (before resolving) to the end, in milliseconds.
    pub duration_ms: f64,
    /// The day after which the server may stop answering this client's protocol, when it
    /// announced one (see [`crate::Client::protocol_sunset`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_sunset: Option<String>,
    /// How far the device's wall clock is from the server's time, in seconds (positive:
    /// ahead), when the client has learned it (see [`crate::Client::clock_offset_secs`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_s: Option<i64>,
    /// What the on-device probe did, when the load options asked for one
    /// ([`crate::LoadOptions::probe`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeReport>,
    /// How the runtime read the program and its data files: `mmap` (large programs: mapped
    /// from the cache, paged in on demand) or `file` (read into memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_mode: Option<String>,
    /// For a download, what each blob source the decision listed did (bytes served and kept,
    /// failures, the last failure's code); empty when the decision listed none or nothing was
    /// downloaded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ferry_shared::wire::sources::SourceUse>,
}

/// What the on-device probe did after a load.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProbeReport {
    /// Why it did not run (power-saving mode, or the release was probed before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Each candidate timed, best-ranked first, as its `inference` event reports it.
    pub timed: Vec<ProbeTiming>,
}

/// One candidate's probe.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProbeTiming {
    /// Variant id.
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// Runs timed (all warm: the load's golden check ran first).
    pub runs: u64,
    /// The warm runs' median.
    pub p50_ms: Option<f64>,
    /// The warm runs' 95th percentile.
    pub p95_ms: Option<f64>,
}

/// A model's cached, verified variant (for offline use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedModel {
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Delegate.
    pub delegate: String,
    /// File on disk.
    pub path: PathBuf,
    /// Digest.
    pub sha256: Sha256Digest,
}

/// What [`Client::prefetch`](crate::Client::prefetch) stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefetched {
    /// Release.
    pub release: String,
    /// Variant downloaded.
    pub variant: String,
    /// File.
    pub path: PathBuf,
}
