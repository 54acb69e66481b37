//! The values apps hand to and get back from the [`Client`](crate::Client): device facts, the
//! loaded model and where it came from, cached and prefetched variants, and the clock.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::{Platform, TensorValue};
use time::OffsetDateTime;

use crate::error::Attempt;
use crate::runtime::{Program, RuntimeError};

/// Where time comes from (injectable so tests can play an expired decision).
pub trait Clock: Send + Sync {
    /// The current UTC time.
    fn now(&self) -> OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

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

/// A model loaded into the runtime.
pub struct LoadedModel {
    /// Model name.
    pub model: String,
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// The verified file on disk.
    pub path: PathBuf,
    /// Where it came from.
    pub source: Source,
    /// Candidates tried before this one, and why each failed.
    pub attempts: Vec<Attempt>,
    /// Largest difference of the golden check, when the manifest had one.
    pub golden_max_abs_diff: Option<f64>,
    /// The method that was loaded.
    pub method: String,
    pub(crate) program: Box<dyn Program>,
    pub(crate) _guard: InUseGuard,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("model", &self.model)
            .field("release", &self.release)
            .field("variant", &self.variant)
            .field("delegate", &self.delegate)
            .field("path", &self.path)
            .field("source", &self.source)
            .field("attempts", &self.attempts)
            .finish()
    }
}

impl LoadedModel {
    /// Runs the loaded method.
    pub fn run(&mut self, inputs: &[TensorValue]) -> Result<Vec<TensorValue>, RuntimeError> {
        let method = self.method.clone();
        self.program.run(&method, inputs)
    }
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

/// Blobs held by live [`LoadedModel`]s (never evicted).
pub(crate) type InUse = Arc<Mutex<BTreeMap<Sha256Digest, usize>>>;

pub(crate) struct InUseGuard {
    set: InUse,
    digest: Sha256Digest,
}

impl InUseGuard {
    pub(crate) fn new(set: &InUse, digest: Sha256Digest) -> Self {
        if let Ok(mut g) = set.lock() {
            *g.entry(digest).or_default() += 1;
        }
        Self {
            set: set.clone(),
            digest,
        }
    }
}

impl Drop for InUseGuard {
    fn drop(&mut self) {
        if let Ok(mut g) = self.set.lock()
            && let Some(n) = g.get_mut(&self.digest)
        {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.digest);
            }
        }
    }
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
