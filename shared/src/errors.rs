//! The catalogue of every error code ferry can emit: the server's `{code, message, request_id}`
//! answers, the per-event telemetry refusals, the CLI's messages, the client's [`code`]s and
//! the C ABI's `ferry_last_error_code`.
//!
//! Each code is a variant of [`ErrorCode`]; code anywhere in the workspace emits codes only
//! through this type, so a code cannot exist without an entry here. `schemas/error.schema.json`
//! lists the same set as an `enum`, and `docs/errors.md` says what an app developer or operator
//! should do about each; a test keeps the three equal.
//!
//! [`code`]: ErrorCode::as_str

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! catalogue {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, )*) => {
        /// A stable, machine-readable error code. Its text form ([`ErrorCode::as_str`]) is the
        /// wire contract; the variant names are Rust's.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )*
        }

        impl ErrorCode {
            /// Every code, in catalogue order.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$variant, )* ];

            /// The code as it appears on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( ErrorCode::$variant => $text, )*
                }
            }

            /// The code for `text`, if it is in the catalogue.
            pub fn parse(text: &str) -> Option<ErrorCode> {
                match text {
                    $( $text => Some(ErrorCode::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

catalogue! {
    /// The request body is not JSON of the expected shape. (server)
    RequestMalformed = "request_malformed",
    /// A request field or query parameter has an invalid value. (server)
    RequestInvalid = "request_invalid",
    /// The request body could not be read (the connection broke or the encoding is invalid). (server)
    BodyUnreadable = "body_unreadable",
    /// A blob range outside the blob was asked for. (server, client)
    RangeNotSatisfiable = "range_not_satisfiable",
    /// The request body did not arrive within the server's body deadline. (server)
    BodyTimeout = "body_timeout",
    /// The request body is larger than the endpoint's limit. (server)
    BodyTooLarge = "body_too_large",
    /// A model name, variant id or other name breaks the naming rule (1 to 64 of `[a-z0-9._-]`, starting with a letter or digit). (server, CLI)
    InvalidName = "invalid_name",
    /// A blob path is not 64 lowercase hex characters of a SHA-256. (server)
    InvalidDigest = "invalid_digest",
    /// A release version is not semantic versioning (at most 64 characters). (server)
    InvalidVersion = "invalid_version",
    /// No route matches the path. (server)
    NotFound = "not_found",
    /// The route exists but not with this HTTP method. (server)
    MethodNotAllowed = "method_not_allowed",
    /// An admin endpoint was called without a valid bearer token. (server, CLI)
    Unauthorized = "unauthorized",
    /// The token is valid but lacks the scope this endpoint needs. (server, CLI)
    Forbidden = "forbidden",
    /// An unexpected failure; the server log has the detail under the request id. (server, client, C ABI)
    Internal = "internal",
    /// The object store did not answer. (server)
    StorageUnavailable = "storage_unavailable",
    /// The object store has no room for the write (the disk is full or over its quota); nothing was stored. (server)
    StorageFull = "storage_full",
    /// A site mirror could not reach its origin for what only the origin gives: a fresh answer (the device has no time estimate), signed time, a file the mirror does not hold, or a resolve answer it has not kept; devices keep their last known good model. (server, client)
    OriginUnavailable = "origin_unavailable",
    /// The server's online key is past the expiry its keyring gives it; devices refuse what it signs. (server)
    OnlineKeyExpired = "online_key_expired",
    /// A rollout or deny-list change lost the race to other writers too many times. (server)
    StateContended = "state_contended",
    /// A rollout or deny-list change would rewrite a record a newer ferry server wrote, losing what this server does not know; it is refused. (server, CLI)
    StoreRecordNewer = "store_record_newer",
    /// Too many telemetry requests from one address, or events from one install. (server, client)
    RateLimited = "rate_limited",
    /// The server's TLS certificate was refused (expired or not yet valid at the time the client trusts, another name, an untrusted issuer); the message says which. Not retried; a cached model still serves. (client)
    ServerCertificateInvalid = "server_certificate_invalid",
    /// An input breaks the method's signed contract (its element type, number of dimensions, or a size above its bound or other than its fixed value); the message names the input, the dimension, the value and the bound. Nothing reached the runtime. (client)
    InputMismatch = "input_mismatch",
    /// `ferry sign`: a variant failed its accuracy bound in the release's `[evaluation]` (or
    /// could not execute); the message names it, its value and the bound. Nothing was signed. (cli)
    AccuracyRegression = "accuracy_regression",
    /// No release of the model is published. (server, client)
    ModelNotFound = "model_not_found",
    /// No variant of any live release fits the device (runtime, app, platform, OS, RAM, backends, deny list); `details.explain` says why per variant. (server, client)
    NoCompatibleVariant = "no_compatible_variant",
    /// The variant calls operators (kernels) the device's runtime did not register; the message names them. (server, client)
    OperatorsMissing = "operators_missing",
    /// No blob with this digest is stored. (server, client)
    BlobNotFound = "blob_not_found",
    /// An uploaded blob is larger than `[limits] max_blob_bytes`. (server)
    BlobTooLarge = "blob_too_large",
    /// An uploaded blob has no bytes. (server)
    BlobEmpty = "blob_empty",
    /// The upload body ended with an error; nothing was stored. (server)
    UploadInterrupted = "upload_interrupted",
    /// The bytes do not hash to the digest that names them (upload) or that the signed manifest gives (download). (server, client)
    HashMismatch = "hash_mismatch",
    /// A variant's blob is not an ExecuTorch program. (server)
    NotAPte = "not_a_pte",
    /// The variant declares a delegate that its program never calls (the partitioner declined the graph). (server, CLI)
    DelegateMismatch = "delegate_mismatch",
    /// The variant's program keeps tensors in a separate data file (.ptd) that none of its data files provides. (server, CLI)
    DataFilesMissing = "data_files_missing",
    /// A variant's data files give a tensor twice, or with another element type or shape than the program declares. (server, CLI)
    DataFilesMismatch = "data_files_mismatch",
    /// The program's schema version is newer than any runtime ferry knows. (server)
    PteSchemaUnsupported = "pte_schema_unsupported",
    /// The release names another model than the URL. (server)
    ModelMismatch = "model_mismatch",
    /// A release names a blob that is not uploaded. (server)
    BlobMissing = "blob_missing",
    /// A stored blob's size differs from the signed size. (server)
    BlobSizeMismatch = "blob_size_mismatch",
    /// A file's chunk index (for delta updates) is not the one its bytes give: it does not parse, does not add up to the file, or a chunk's SHA-256 differs from the stored bytes. Sign the release again with this ferry. (server, CLI)
    ChunkIndexMismatch = "chunk_index_mismatch",
    /// A sealed variant cannot be published: a scheme this server does not know, no signed inspection of its program, or a file key that does not unwrap with the key-release key it names. (server)
    SealedInvalid = "sealed_invalid",
    /// The server holds no key-release key for this sealed release (its key folder lacks key-release.key or the retired key the release was sealed to). (server, client)
    KeyReleaseUnavailable = "key_release_unavailable",
    /// A key request for a sealed variant was refused: no valid receipt of a resolve that chose this variant for this install, or the attestation verifier refused the device. (server, client)
    KeyReleaseRefused = "key_release_refused",
    /// Key releases for this sealed release were stopped by an operator (`ferry release seal-stop`) or the release is revoked. (server, client)
    KeyReleaseStopped = "key_release_stopped",
    /// The device holds no key for a sealed variant and could not get one (offline, or the server refused): it cannot load it. (client)
    SealedKeyMissing = "sealed_key_missing",
    /// The version is already published with other content; releases are immutable. (server, CLI)
    ReleaseExists = "release_exists",
    /// The release is not published. (server, CLI)
    ReleaseNotFound = "release_not_found",
    /// A signed envelope is not valid DSSE JSON. (server, client)
    EnvelopeMalformed = "envelope_malformed",
    /// A signed envelope is over the size limit. (server, client)
    EnvelopeTooLarge = "envelope_too_large",
    /// An envelope carries another payload type than expected (a decision where a release belongs). (server, client)
    PayloadTypeMismatch = "payload_type_mismatch",
    /// An envelope has no signature. (server, client)
    SignatureMissing = "signature_missing",
    /// An envelope has more signatures than allowed. (server, client)
    SignatureTooMany = "signature_too_many",
    /// One key signed the envelope twice. (server, client)
    SignatureDuplicate = "signature_duplicate",
    /// The signing key is not in the trusted keys. (server, client)
    KeyUnknown = "key_unknown",
    /// A key of another role signed (an online key signing a release). (server, client, CLI)
    KeyWrongRole = "key_wrong_role",
    /// A signature is not valid base64 of 64 bytes. (server, client)
    SignatureMalformed = "signature_malformed",
    /// A signature does not verify: the bytes were changed after signing, or another key signed. (server, client)
    SignatureInvalid = "signature_invalid",
    /// Fewer distinct trusted keys signed than required. (server, client)
    SignatureThreshold = "signature_threshold",
    /// A release manifest is not valid JSON of the manifest shape. (server, client, CLI)
    ManifestMalformed = "manifest_malformed",
    /// A manifest has a field this server does not know (made by a newer `ferry sign`). (server)
    ManifestUnknownField = "manifest_unknown_field",
    /// A manifest breaks a rule (duplicate variant ids, bad ranges, names). (server, client, CLI)
    ManifestInvalid = "manifest_invalid",
    /// A signed payload (decision, release manifest, keyring, revocation list) is in a newer format than this client or server reads: a client keeps its last known good model (update the app); a server refuses to publish it (upgrade the server). (server, client, C ABI)
    FormatUnsupported = "format_unsupported",
    /// A cached model's signed constraints (app or runtime range, backends, platform, OS, RAM, SoC) no longer admit this device, so the client does not load it; the message names each constraint and both values. (client, C ABI)
    CachedIncompatible = "cached_incompatible",
    /// The `.pte` file ends early. (server, CLI)
    PteTruncated = "pte_truncated",
    /// The file is not an ExecuTorch program (wrong identifier). (server, CLI)
    PteNotAProgram = "pte_not_a_program",
    /// The `.pte` extended header is invalid. (server, CLI)
    PteBadHeader = "pte_bad_header",
    /// The program's FlatBuffer is malformed. (server, CLI)
    PteMalformed = "pte_malformed",
    /// The program exceeds an inspector limit (tables, strings, work). (server, CLI)
    PteLimitExceeded = "pte_limit_exceeded",
    /// A revocation list is malformed, or does not follow the one held (next version, every entry kept). (server, client, CLI)
    RevocationsInvalid = "revocations_invalid",
    /// The release was revoked by its publisher; it is neither offered nor loaded, also from the cache. (client, C ABI)
    ReleaseRevoked = "release_revoked",
    /// A keyring is malformed or breaks a rule (threshold, key ids, roles), or the trust file pins no root to check it. (server, client, CLI)
    KeyringInvalid = "keyring_invalid",
    /// A keyring version was skipped: version N+1 must follow N. (client)
    KeyringSkipped = "keyring_skipped",
    /// A keyring is not newer than the one already trusted. (client)
    KeyringRollback = "keyring_rollback",
    /// The trust file cannot be used (no keys, bad key encoding). (client, C ABI)
    TrustInvalid = "trust_invalid",
    /// A rollout change is malformed (unknown action, missing release, bad percentage or rate). (server, CLI)
    RolloutInvalid = "rollout_invalid",
    /// The model has no rollout to change. (server, CLI)
    RolloutNotFound = "rollout_not_found",
    /// A rollout is already active or paused. (server, CLI)
    RolloutInProgress = "rollout_in_progress",
    /// The change needs an active rollout. (server, CLI)
    RolloutNotActive = "rollout_not_active",
    /// `resume` needs a paused or halted rollout. (server, CLI)
    RolloutNotPaused = "rollout_not_paused",
    /// The rollout is at another revision than the change was made for (`if_revision`), or changed while an automatic halt was being written; nothing was written. (server, CLI)
    RolloutChanged = "rollout_changed",
    /// A staged release must be newer than the baseline (and than the release it supersedes). (server, CLI)
    RolloutNotNewer = "rollout_not_newer",
    /// The change would leave a device class with no compatible variant; nothing changed. (server, CLI)
    RolloutStrandsDevices = "rollout_strands_devices",
    /// An experiment start or stop is malformed, or names arms that cannot be compared (an unpublished or revoked release, a missing variant, the same arm twice). (server, CLI)
    ExperimentInvalid = "experiment_invalid",
    /// An experiment of the model is already running. (server, CLI)
    ExperimentRunning = "experiment_running",
    /// The model has no experiment (running, for a stop). (server, CLI)
    ExperimentNotFound = "experiment_not_found",
    /// A deny-list change is malformed. (server, CLI)
    DenyInvalid = "deny_invalid",
    /// `clear` names an entry that does not exist. (server, CLI)
    DenyNotFound = "deny_not_found",
    /// A telemetry body is not `{"events": [...]}`. (server, client)
    TelemetryMalformed = "telemetry_malformed",
    /// A telemetry batch holds more events than allowed. (server, client)
    TooManyEvents = "too_many_events",
    /// One telemetry event breaks a rule (missing or oversized field); it is listed in `rejected`. (server)
    EventInvalid = "event_invalid",
    /// An event's time is too far in the past or the future. (server)
    EventOutOfRange = "event_out_of_range",
    /// The client was built with an unusable setting. (client, C ABI)
    ConfigInvalid = "config_invalid",
    /// A C ABI call got a null or non-UTF-8 argument. (C ABI)
    InvalidArgument = "invalid_argument",
    /// An output buffer is too small for the result. (C ABI)
    BufferTooSmall = "buffer_too_small",
    /// The server could not be reached after retries. (client)
    Network = "network",
    /// The server answered 5xx after retries. (client)
    ServerError = "server_error",
    /// A server answer is not what the protocol says. (client)
    BadResponse = "bad_response",
    /// The signed decision has expired (or the device clock is far off). (client)
    Expired = "expired",
    /// A decision older than one already seen was served (a replayed response). (client)
    Replay = "replay",
    /// The signed decision and the signed release disagree (a candidate's digest, size or delegate differs from what the release key signed). (client)
    DecisionMismatch = "decision_mismatch",
    /// The decision payload is not a valid decision. (client)
    DecisionInvalid = "decision_invalid",
    /// The decision's times cannot be right: issued in the future (beyond the allowed clock skew) or valid for longer than a decision may be. (client, C ABI)
    DecisionUntimely = "decision_untimely",
    /// The device's wall clock is far from the server's time (the server's `Date` header), no time estimate or decision made for this request could be had, and the answer failed a time check because of it; the message gives the offset. (client, C ABI)
    DeviceClockSkewed = "device_clock_skewed",
    /// The server sent more or fewer bytes than the signed size. (client)
    SizeMismatch = "size_mismatch",
    /// A blob is larger than the client's download limit. (client)
    TooLarge = "too_large",
    /// No space left while writing the cache. (client)
    DiskFull = "disk_full",
    /// The cache's filesystem has too little free space for the download (the file plus the cache's headroom), even after evicting unpinned files the app does not use; nothing was downloaded, and the message gives the figures. (client, C ABI)
    InsufficientStorage = "insufficient_storage",
    /// Another file-system error in the cache. (client)
    CacheIo = "cache_io",
    /// The client's cache folder is on a filesystem without working file locks (some network and FUSE mounts), which the processes sharing it need. (client, C ABI)
    CacheLockUnsupported = "cache_lock_unsupported",
    /// Every candidate failed to download, verify or load; `attempts` lists each. (client, C ABI)
    AllCandidatesFailed = "all_candidates_failed",
    /// A variant crashed the app natively (a signal in the runtime or a driver, an out-of-memory kill, a hang the OS ended) while it was loaded or run, on an earlier launch; it is not loaded again until the app, runtime or OS version changes. On an attempt it names that variant and the stage; as the error of a load, every candidate crashed. (client, C ABI)
    Crashed = "crashed",
    /// The server cannot be used and no verified copy is cached. (client, C ABI)
    OfflineNoCache = "offline_no_cache",
    /// The download policy did not allow a download now (metered network, not charging, or over the byte budget) and no verified copy is cached. (client, C ABI)
    DownloadDeferred = "download_deferred",
    /// The runtime refused to load the program (a missing delegate, operator or memory). (client)
    RuntimeLoadFailed = "runtime_load_failed",
    /// Running the loaded method failed. (client, C ABI)
    RuntimeExecuteFailed = "runtime_execute_failed",
    /// The variant loaded but its output on the signed golden input is off by more than the tolerance. (client)
    GoldenMismatch = "golden_mismatch",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ErrorCode::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_is_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert_eq!(ErrorCode::parse(c.as_str()), Some(*c));
            let json = serde_json::to_string(c).expect("serialize");
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).expect("parse"), *c);
            assert!(
                c.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{c} is not snake_case"
            );
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
    }
}
