//! The crashes this device had: which variant took the process down, at which stage, under
//! which app, runtime and OS versions. A load passes over a variant listed here while those
//! versions are the same ([`CrashRecord::holds_for`]) and the crash stands
//! ([`CrashRecord::stands`]: a crash during a run must happen twice in a row, because an
//! ordinary kill of the app during a run leaves the same mark); after a version changes, the
//! variant is tried once more (a driver or runtime update often fixes a crash), and a load that
//! succeeds takes it off the list.
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

/// The largest crash list read; a larger file is not this client's and is started afresh.
const MAX_LEDGER_BYTES: u64 = 256 << 10;

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
    /// Crashes of the variant in a row at this stage under these versions.
    #[serde(default = "one")]
    pub count: u32,
    /// Runs the loaded model had completed before a crash during a run.
    #[serde(default)]
    pub runs_before: u64,
}

fn one() -> u32 {
    1
}

impl CrashRecord {
    /// Whether the crash still stands for a device running these versions: any change (an app,
    /// runtime or OS update) earns the variant one more try.
    pub fn holds_for(&self, app: &str, runtime: &str, os: &str) -> bool {
        self.app_version == app && self.runtime_version == runtime && self.os_version == os
    }

    /// Whether the crash is the variant's beyond doubt: a crash while loading (no app is killed
    /// by its user in the middle of a load often), the first run after a load, or a crash during
    /// a run twice in a row (an ordinary kill of the app, by its user or the OS, during a run
    /// leaves the same mark as a crash).
    pub fn stands(&self) -> bool {
        self.stage != Stage::Run.as_str() || self.runs_before == 0 || self.count >= 2
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
        use std::io::Read as _;
        let mut bytes = Vec::new();
        let read = std::fs::File::open(&self.path)
            .and_then(|f| f.take(MAX_LEDGER_BYTES + 1).read_to_end(&mut bytes));
        if read.is_err() || bytes.len() as u64 > MAX_LEDGER_BYTES {
            return LedgerFile::default();
        }
        serde_json::from_slice(&bytes).unwrap_or_default()
    }

    /// The crashes recorded (an unreadable list is empty).
    pub(crate) fn read(&self) -> Vec<CrashRecord> {
        self.read_file()
            .crashes
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect()
    }

    /// Changes the list under the lock: drops the records `drop` says (records this version
    /// cannot read are kept), then adds what `add` makes of the records left (replacing any of
    /// the same digest). Returns how many were dropped.
    pub(crate) fn update(
        &self,
        drop: &dyn Fn(&CrashRecord) -> bool,
        add: impl FnOnce(&[CrashRecord]) -> Vec<CrashRecord>,
    ) -> Result<usize, ClientError> {
        let _held = locks::exclusive(&self.lock)?;
        let mut file = self.read_file();
        let before = file.crashes.len();
        file.crashes.retain(|v| {
            serde_json::from_value::<CrashRecord>(v.clone()).map_or(true, |r| !drop(&r))
        });
        let removed = before - file.crashes.len();
        let known: Vec<CrashRecord> = file
            .crashes
            .iter()
            .filter_map(|v| serde_json::from_value(v.clone()).ok())
            .collect();
        let added = add(&known);
        if removed == 0 && added.is_empty() {
            return Ok(0);
        }
        file.crashes.retain(|v| {
            let digest = v
                .get("sha256")
                .and_then(|d| d.as_str())
                .and_then(|d| d.parse::<Sha256Digest>().ok());
            digest.is_none_or(|d| !added.iter().any(|a| a.sha256 == d))
        });
        for a in added {
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
