//! The client's errors. Every variant has a stable [`ClientError::code`] that apps and
//! telemetry switch on, and a message a developer can act on.

use ferry_shared::errors::ErrorCode;
use std::path::PathBuf;

/// The step of a load at which a candidate failed (later versions may add steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Asking the server which variants fit (only for the last-known-good path).
    Resolve,
    /// Checking a candidate against this device before downloading it (operators its
    /// runtime lacks).
    Select,
    /// Fetching the bytes (network, disk).
    Download,
    /// The bytes did not match the signed size or digest.
    Verify,
    /// The runtime could not open the program.
    LoadProgram,
    /// The runtime could not initialise the method (a delegate it lacks, say).
    LoadMethod,
    /// The golden check's output differed from the signed expected output.
    Golden,
    /// Running the method (for the golden check) failed.
    Execute,
    /// A cached program's signed constraints no longer admit this device (an app or runtime
    /// update, a changed device), so it was not used.
    Cache,
    /// Timing another candidate for the on-device probe (a crash there is the candidate's).
    Probe,
    /// A run of the loaded model (a crash there is the variant's).
    Run,
    /// Getting the key of a sealed variant (from the device's key store, or released by the
    /// server).
    Key,
}

impl Stage {
    /// The stage's name as it appears in reports (`load_method`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Resolve => "resolve",
            Stage::Select => "select",
            Stage::Download => "download",
            Stage::Verify => "verify",
            Stage::LoadProgram => "load_program",
            Stage::LoadMethod => "load_method",
            Stage::Golden => "golden",
            Stage::Execute => "execute",
            Stage::Cache => "cache",
            Stage::Probe => "probe",
            Stage::Run => "run",
            Stage::Key => "key",
        }
    }

    /// The stage named `name` ([`Stage::as_str`]); `None` for a name this version does not know.
    pub fn parse(name: &str) -> Option<Stage> {
        [
            Stage::Resolve,
            Stage::Select,
            Stage::Download,
            Stage::Verify,
            Stage::LoadProgram,
            Stage::LoadMethod,
            Stage::Golden,
            Stage::Execute,
            Stage::Cache,
            Stage::Probe,
            Stage::Run,
            Stage::Key,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// One failed candidate, as reported in [`ClientError::AllCandidatesFailed`] and in
/// [`crate::LoadedModel::attempts`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Attempt {
    /// Variant id.
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// The step that failed.
    pub stage: Stage,
    /// Stable error code of the failure.
    pub error_code: String,
    /// What happened.
    pub message: String,
    /// Time spent on this candidate, in milliseconds.
    pub duration_ms: f64,
}

/// Everything that can go wrong (later versions may add errors: match on [`ClientError::code`]
/// or keep a catch-all arm).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The builder was given something unusable.
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// The server could not be reached (after retries).
    #[error("cannot reach {url}: {message}")]
    Network {
        /// What was requested.
        url: String,
        /// Why it failed.
        message: String,
    },
    /// The server's TLS certificate was refused (not retried).
    #[error("the TLS certificate of {url} was refused: {message}")]
    Certificate {
        /// What was requested.
        url: String,
        /// rustls' reason.
        message: String,
    },
    /// The server answered 5xx (after retries).
    #[error("server error from {url}: HTTP {status}{said}")]
    Server {
        /// What was requested.
        url: String,
        /// The status.
        status: u16,
        /// What the server said of it, when it said something (` (code: message)`), else
        /// empty: a site mirror's `origin_unavailable` says why.
        said: String,
        /// The server's code when it is one an app may act on: `origin_unavailable` (a site
        /// mirror whose origin is away); `None` for any other 5xx.
        code: Option<ErrorCode>,
    },
    /// The server answered with an error of its own (`no_compatible_variant`, ...).
    #[error("{code}: {message}")]
    Rejected {
        /// The server's code.
        code: String,
        /// The server's message.
        message: String,
        /// HTTP status.
        status: u16,
    },
    /// The response was not what the protocol says.
    #[error("bad response from {url}: {message}")]
    BadResponse {
        /// What was requested.
        url: String,
        /// What was wrong.
        message: String,
    },
    /// A signature check failed (code from the DSSE verifier).
    #[error("verification failed ({code}): {message}")]
    Verify {
        /// `signature_invalid`, `key_unknown`, `key_wrong_role`, ...
        code: ErrorCode,
        /// Detail.
        message: String,
    },
    /// The decision has expired (or the device clock is far off).
    #[error("the server's decision expired at {expires_at}; it is now {now}")]
    Expired {
        /// Expiry in the decision.
        expires_at: String,
        /// The client's time.
        now: String,
    },
    /// The device's wall clock is far from the server's time and the answer failed a time
    /// check because of it (no time estimate, no decision made for this request could be
    /// had): the app should ask the user to set the clock.
    #[error("this device's clock is {offset_secs} s off the server's time: {message}")]
    ClockSkewed {
        /// How far the wall clock is from the server's `Date`, in seconds (positive: ahead).
        offset_secs: i64,
        /// The time check that failed.
        message: String,
    },
    /// The decision is older than one already seen (replay).
    #[error("decision sequence {got} is lower than {seen}, already seen: a replayed response")]
    Replay {
        /// Sequence in the response.
        got: u64,
        /// Highest seen.
        seen: u64,
    },
    /// The signed decision and the signed manifest disagree.
    #[error("the decision does not match the signed release: {0}")]
    DecisionMismatch(String),
    /// The release was revoked by its publisher (a release-key-signed revocation list).
    #[error("{model} {release} was revoked by its publisher: {reason}")]
    Revoked {
        /// The model.
        model: String,
        /// The revoked release.
        release: String,
        /// The reason in the list.
        reason: String,
    },
    /// Downloaded bytes do not hash to the signed digest.
    #[error("{variant}: downloaded bytes hash to {actual}, the signed manifest says {expected}")]
    HashMismatch {
        /// Variant.
        variant: String,
        /// Signed digest.
        expected: String,
        /// Actual digest.
        actual: String,
    },
    /// The server sent more or fewer bytes than the signed size.
    #[error("{variant}: {message}")]
    SizeMismatch {
        /// Variant.
        variant: String,
        /// Detail.
        message: String,
    },
    /// A blob is larger than the configured limit.
    #[error("{variant} is {size} bytes; the client's limit is {limit}")]
    TooLarge {
        /// Variant.
        variant: String,
        /// Signed size.
        size: u64,
        /// Limit.
        limit: u64,
    },
    /// Too little free space for a download, checked before it starts (after evicting what
    /// could be evicted): nothing was downloaded.
    #[error(
        "not enough free space in {path} for {variant}: {needed} bytes needed (the download plus \
         the cache's headroom), {available} free"
    )]
    InsufficientStorage {
        /// The cache folder.
        path: PathBuf,
        /// The variant being downloaded.
        variant: String,
        /// Bytes needed: what is left to download plus the headroom.
        needed: u64,
        /// Bytes free on its filesystem.
        available: u64,
    },
    /// The disk is full.
    #[error("no space left while writing {path}")]
    DiskFull {
        /// The file being written.
        path: PathBuf,
    },
    /// Another cache I/O failure.
    #[error("cache I/O on {path}: {message}")]
    CacheIo {
        /// The file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// The cache folder is on a filesystem without working file locks, so processes sharing it
    /// could not be kept from breaking each other's loads.
    #[error(
        "the cache at {path} cannot be locked ({message}): it is on a filesystem without file \
         locks (some network and FUSE mounts); put the cache on local storage"
    )]
    CacheLockUnsupported {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// Every candidate failed.
    #[error("no candidate could be loaded: {}", summary(.attempts))]
    AllCandidatesFailed {
        /// What was tried.
        attempts: Vec<Attempt>,
    },
    /// Every candidate this device could load crashed the app (a native crash, an OOM kill or
    /// a hang the OS ended) on an earlier launch: none was loaded again, and no native call was
    /// made. Each attempt has code `crashed` and the stage it crashed in. An app update, a
    /// runtime or OS update, or [`crate::Client::forget_crashes`] earns them another try.
    #[error(
        "every candidate crashed this app on an earlier launch and is not loaded again: {}",
        summary(.attempts)
    )]
    Crashed {
        /// What was passed over.
        attempts: Vec<Attempt>,
    },
    /// The download policy refused a download and nothing usable is cached.
    #[error("{model}: not downloading {variant} now: {reason}")]
    DownloadDeferred {
        /// The model.
        model: String,
        /// The variant that would have been downloaded.
        variant: String,
        /// Which condition refused.
        reason: String,
    },
    /// A verified copy of the model is cached, but what its release signed no longer admits
    /// this device (an app or runtime update, a changed device), so it is not used.
    #[error(
        "{reason}; the cached {model} {release} ({variant}) was signed for other devices: {why}"
    )]
    CachedIncompatible {
        /// The model.
        model: String,
        /// The cached release.
        release: String,
        /// The cached variant.
        variant: String,
        /// Each signed constraint that no longer holds, with both values.
        why: String,
        /// Why the server's answer was not used.
        reason: String,
    },
    /// Offline and nothing usable is cached.
    #[error("{reason}; and no verified copy of {model} is cached")]
    NothingCached {
        /// The model.
        model: String,
        /// Why the server could not be used.
        reason: String,
    },
}

fn summary(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(|a| format!("{} ({}): {}", a.variant, a.error_code, a.message))
        .collect::<Vec<_>>()
        .join("; ")
}

impl ClientError {
    /// What happened, without the code in front when the message would repeat it (a server's
    /// refusal reads `model_not_found: …` in [`std::fmt::Display`]): what the C ABI and the JVM
    /// give beside the code.
    pub fn detail(&self) -> String {
        match self {
            ClientError::Rejected { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }

    /// The candidates tried and why each failed, for [`ClientError::AllCandidatesFailed`] and
    /// [`ClientError::Crashed`]; empty for every other error.
    pub fn attempts(&self) -> &[Attempt] {
        match self {
            ClientError::AllCandidatesFailed { attempts } | ClientError::Crashed { attempts } => {
                attempts
            }
            _ => &[],
        }
    }

    /// Stable machine-readable code from the catalogue (`docs/errors.md`); for
    /// [`ClientError::Rejected`] the server's code as sent.
    pub fn code(&self) -> &str {
        match self {
            ClientError::Config(_) => ErrorCode::ConfigInvalid.as_str(),
            ClientError::Network { .. } => ErrorCode::Network.as_str(),
            ClientError::Certificate { .. } => ErrorCode::ServerCertificateInvalid.as_str(),
            ClientError::Server { code, .. } => code.unwrap_or(ErrorCode::ServerError).as_str(),
            ClientError::Rejected { code, .. } => code,
            ClientError::BadResponse { .. } => ErrorCode::BadResponse.as_str(),
            ClientError::Verify { code, .. } => code.as_str(),
            ClientError::Expired { .. } => ErrorCode::Expired.as_str(),
            ClientError::ClockSkewed { .. } => ErrorCode::DeviceClockSkewed.as_str(),
            ClientError::Replay { .. } => ErrorCode::Replay.as_str(),
            ClientError::DecisionMismatch(_) => ErrorCode::DecisionMismatch.as_str(),
            ClientError::Revoked { .. } => ErrorCode::ReleaseRevoked.as_str(),
            ClientError::HashMismatch { .. } => ErrorCode::HashMismatch.as_str(),
            ClientError::SizeMismatch { .. } => ErrorCode::SizeMismatch.as_str(),
            ClientError::TooLarge { .. } => ErrorCode::TooLarge.as_str(),
            ClientError::DiskFull { .. } => ErrorCode::DiskFull.as_str(),
            ClientError::InsufficientStorage { .. } => ErrorCode::InsufficientStorage.as_str(),
            ClientError::CacheIo { .. } => ErrorCode::CacheIo.as_str(),
            ClientError::CacheLockUnsupported { .. } => ErrorCode::CacheLockUnsupported.as_str(),
            ClientError::AllCandidatesFailed { .. } => ErrorCode::AllCandidatesFailed.as_str(),
            ClientError::Crashed { .. } => ErrorCode::Crashed.as_str(),
            ClientError::NothingCached { .. } => ErrorCode::OfflineNoCache.as_str(),
            ClientError::CachedIncompatible { .. } => ErrorCode::CachedIncompatible.as_str(),
            ClientError::DownloadDeferred { .. } => ErrorCode::DownloadDeferred.as_str(),
        }
    }

    /// True when the server could not be used at all (unreachable, 5xx), so a cached
    /// last-known-good copy should be served.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ClientError::Network { .. }
                | ClientError::Certificate { .. }
                | ClientError::Server { .. }
        )
    }

    /// Wraps an I/O error on `path`, telling a full disk apart.
    pub fn io(path: impl Into<PathBuf>, e: std::io::Error) -> ClientError {
        let path = path.into();
        if e.raw_os_error() == Some(28) || e.kind() == std::io::ErrorKind::StorageFull {
            ClientError::DiskFull { path }
        } else {
            ClientError::CacheIo {
                path,
                message: e.to_string(),
            }
        }
    }
}
