//! The crashes this device had: which variant took the process down, at which stage, under
//! which app, runtime and OS versions. A load passes over a variant listed here while those
//! versions are the same ([`CrashRecord::holds_for`]); after one changes, the variant is tried
//! once more (a driver or runtime update often fixes a crash), and a load that succeeds takes it
//! off the list.
//!
//! `<root>/crashes.json`, changed under the exclusive lock on `<root>/crashes.lock` and written
//! durably, shared by the app's processes like the rest of the cache.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use ferry_shared::Sha256Digest;

use crate::cache::locks;
use crate::error::{ClientError, Stage};

/// Most crashes kept (the oldest go first).
pub const MAX_CRASHES: usize = 64;

/// One variant that crashed the app on this device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashRecord {
    /// Model name.
    pub model: String,
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// The program's digest (what is passed over).
    pub sha256: Sha256Digest,
    /// The step that was in flight: `load_program`, `load_method`, `golden`, `probe`, `run`.
    pub stage: String,
    /// When that step began (RFC 3339, corrected to the server's time when it was known).
    pub at: String,
    /// The receipt of the resolve answer that chose the variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// The app's version then.
    pub app_version: String,
    /// The runtime's version then.
    pub runtime_version: String,
    /// The OS version then.
    pub os_version: String,
}

impl CrashRecord {
    /// Whether the crash still stands for a device running these versions: any change (an app,
    /// runtime or OS update) earns the variant one more try.
    pub fn holds_for(&self, app: &str, runtime: &str, os: &str) -> bool {
        self.app_version == app && self.runtime_version == runtime && self.os_version == os
    }

    /// The stage it crashed in (`execute` for a name this version does not know).
    pub fn stage(&self) -> Stage {
        Stage::parse(&self.stage).unwrap_or(Stage::Execute)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct LedgerFile {
    version: u32,
    /// Kept as JSON values so a record a newer client wrote (a stage this one does not know)
    /// is carried over untouched.
    #[serde(default)]
    crashes: Vec<serde_json::Value>,
}

/// The crash list of the cache at `root`.
pub(crate) struct Ledger {
    path: PathBuf,
    lock: PathBuf,
}

impl Ledger {
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            path: root.join("crashes.json"),
            lock: root.join("crashes.lock"),
        }
    }

    fn read_file(&self) -> LedgerFile {
        std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The crashes recorded (an unreadable list is empty).
    pub(crate) fn read(&self) -> Vec<CrashRecord> {
        self.read_file()
            .crashes
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect()
    }

    /// Changes the list under the lock: `f` gets the records this version can read and says
    /// which records to drop (by digest) and which to add (replacing any of the same digest).
    pub(crate) fn update(
        &self,
        f: impl FnOnce(&[CrashRecord]) -> (Vec<Sha256Digest>, Vec<CrashRecord>),
    ) -> Result<usize, ClientError> {
        let _held = locks::exclusive(&self.lock)?;
        let mut file = self.read_file();
        let known: Vec<CrashRecord> = file
            .crashes
            .iter()
            .filter_map(|v| serde_json::from_value(v.clone()).ok())
            .collect();
        let (drop, add) = f(&known);
        if drop.is_empty() && add.is_empty() {
            return Ok(0);
        }
        let digest_of = |v: &serde_json::Value| {
            v.get("sha256")
                .and_then(|d| d.as_str())
                .and_then(|d| d.parse::<Sha256Digest>().ok())
        };
        let before = file.crashes.len();
        file.crashes.retain(|v| {
            digest_of(v).is_none_or(|d| !drop.contains(&d) && !add.iter().any(|a| a.sha256 == d))
        });
        let removed = before - file.crashes.len();
        for a in add {
            file.crashes
                .push(serde_json::to_value(a).map_err(|e| ClientError::Config(e.to_string()))?);
        }
        let excess = file.crashes.len().saturating_sub(MAX_CRASHES);
        file.crashes.drain(..excess);
        file.version = 1;
        let bytes =
            serde_json::to_vec_pretty(&file).map_err(|e| ClientError::Config(e.to_string()))?;
        crate::cache::write_durable(&self.path, &bytes)?;
        Ok(removed)
    }
}
