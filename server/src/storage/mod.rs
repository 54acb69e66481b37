//! The object-store key layout, defined in one place.
//!
//! ```text
//! blobs/sha256/<hex>                                  .pte bytes, immutable
//! encoded/grouped-zstd/sha256/<hex>                   a blob's ferry-grouped-zstd encoding, immutable
//! releases/<model>/<version>.json                     DSSE-signed release manifest, immutable (create-if-absent)
//! inspections/<model>/<version>.json                  the inspector's report per variant, written first
//! state/<model>/rollout/<revision>.json               rollout plan revisions (create-if-absent)
//! state/<model>/deny/<revision>.json                  deny-list revisions (create-if-absent)
//! state/<model>/revocations/<revision>.json           signed revocation lists (create-if-absent)
//! telemetry/events/date=YYYY-MM-DD/<node>-<ns>-<n>.parquet raw telemetry events (Parquet, zstd)
//! telemetry/buckets/{minute,hour,day}/<time>/<name>.json  mergeable aggregates per time bucket (fleet::persist::buckets)
//! telemetry/buckets/lease.json                        which replica compacts the buckets, until when
//! telemetry/rollups/<node>.json                       per-replica rollups of earlier versions (read only)
//! keys/keyring/<version, 20 digits>.json              keyring versions taken through the API (create-if-absent)
//! keys/audit/<version, 20 digits>.json                who pushed each keyring version, and when
//! readyz-probe                                        never written: the readiness probe reads it
//! ```
//! Every key is built by [`StorageKey`]; no other module writes a key's text.
//! Model names and versions are validated newtypes, so a key can never escape its prefix.
//!
//! [`revisions`] keeps state that changes as a log of create-if-absent revisions; [`catalog`]
//! is the in-memory view of every admitted release.
//!
//! Bottom layer: imports only `ferry-shared` (and its own submodules).

pub mod catalog;
pub mod config;
pub mod revisions;

use std::sync::Arc;

use ferry_shared::errors::ErrorCode;
use ferry_shared::{ModelName, Sha256Digest};
use object_store::ObjectStore;
use object_store::path::Path as StorePath;
use semver::Version;

/// What can go wrong reading or writing the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist.
    #[error("no such object")]
    NotFound,
    /// The store did not answer (or answered with an error).
    #[error("storage is unavailable: {0}")]
    Unavailable(object_store::Error),
    /// The store has no room for a write (a full disk, an exceeded quota).
    #[error("the store is full: {0}")]
    Full(object_store::Error),
    /// A revision log changed under us too many times in a row.
    #[error("{prefix} changed {tries} times while this change was being made; try again")]
    Contended {
        /// The log.
        prefix: String,
        /// How many times we tried.
        tries: usize,
    },
    /// A value could not be encoded for storage.
    #[error("cannot encode a revision: {0}")]
    Encode(String),
    /// The newest record of a log was written by a newer ferry server in a form this one
    /// cannot write back without losing something (an unknown field, a newer `format`), so it
    /// refuses to derive the next revision from it (protocol v1's rolling-upgrade rule).
    #[error(
        "{key} was written by a newer ferry server ({what}); this replica (ferry {}) would drop \
         it if it made this change: make the change through an upgraded replica, or upgrade \
         this one",
        env!("CARGO_PKG_VERSION")
    )]
    NewerRecord {
        /// The record.
        key: String,
        /// What this server does not know (`field rollout.gates.max_latency_ratio`, `format 2`).
        what: String,
    },
}

impl StoreError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::NotFound => ErrorCode::NotFound,
            StoreError::Unavailable(_) => ErrorCode::StorageUnavailable,
            StoreError::Full(_) => ErrorCode::StorageFull,
            StoreError::Contended { .. } => ErrorCode::StateContended,
            StoreError::Encode(_) => ErrorCode::Internal,
            StoreError::NewerRecord { .. } => ErrorCode::StoreRecordNewer,
        }
    }
}

impl From<object_store::Error> for StoreError {
    fn from(e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { .. } => StoreError::NotFound,
            other if is_full(&other) => StoreError::Full(other),
            other => StoreError::Unavailable(other),
        }
    }
}

/// True when `e`, or an error it was caused by, is the operating system saying there is no
/// room: a full disk (`ENOSPC`) or an exceeded quota (`EDQUOT`).
pub fn is_full(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && (matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ) || matches!(io.raw_os_error(), Some(28 | 122)))
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The shared store handle.
pub type Store = Arc<dyn ObjectStore>;

/// Builders for every key the server uses.
pub struct StorageKey;

impl StorageKey {
    /// A blob's key.
    pub fn blob(digest: &Sha256Digest) -> StorePath {
        StorePath::from(format!("blobs/sha256/{}", digest.to_hex()))
    }

    /// The key of a blob's `ferry-grouped-zstd` encoding (`ferry_fs::grouped`).
    pub fn grouped_zstd(digest: &Sha256Digest) -> StorePath {
        StorePath::from(format!("encoded/grouped-zstd/sha256/{}", digest.to_hex()))
    }

    /// The prefix under which all releases live.
    pub fn releases_root() -> StorePath {
        StorePath::from("releases")
    }

    /// The prefix of every release of `model`.
    pub fn releases_of(model: &ModelName) -> StorePath {
        StorePath::from(format!("releases/{model}"))
    }

    /// A release's key.
    pub fn release(model: &ModelName, version: &Version) -> StorePath {
        StorePath::from(format!("releases/{model}/{version}.json"))
    }

    /// A release's inspection report key.
    pub fn inspection(model: &ModelName, version: &Version) -> StorePath {
        StorePath::from(format!("inspections/{model}/{version}.json"))
    }

    /// The record that stops key releases for a sealed release (present: stopped).
    pub fn seal_stop(model: &ModelName, version: &Version) -> StorePath {
        StorePath::from(format!("seal-stops/{model}/{version}.json"))
    }

    /// Where every stop record is (listed by each replica to tell devices).
    pub fn seal_stops() -> StorePath {
        StorePath::from("seal-stops")
    }

    /// The model and version a stop record's path names.
    pub fn parse_seal_stop(path: &StorePath) -> Option<(ModelName, Version)> {
        let mut parts = path.as_ref().strip_prefix("seal-stops/")?.split('/');
        let model = parts.next()?.parse().ok()?;
        let version = parts.next()?.strip_suffix(".json")?.parse().ok()?;
        parts.next().is_none().then_some((model, version))
    }

    /// The audit records of key releases for a release, one object each.
    pub fn key_audits(model: &ModelName, version: &Version) -> StorePath {
        StorePath::from(format!("sealing/{model}/{version}/released"))
    }

    /// One key release's audit record (`id` sorts by time).
    pub fn key_audit(model: &ModelName, version: &Version, id: &str) -> StorePath {
        StorePath::from(format!("sealing/{model}/{version}/released/{id}.json"))
    }

    /// The revision-log prefix of `model`'s rollout plans.
    pub fn rollout_log(model: &ModelName) -> String {
        format!("state/{model}/rollout")
    }

    /// The revision-log prefix of `model`'s experiment plans.
    pub fn experiment_log(model: &ModelName) -> String {
        format!("state/{model}/experiment")
    }

    /// The revision-log prefix of `model`'s revocation lists.
    pub fn revocations_log(model: &ModelName) -> String {
        format!("state/{model}/revocations")
    }

    /// The revision-log prefix of `model`'s deny list.
    pub fn deny_log(model: &ModelName) -> String {
        format!("state/{model}/deny")
    }

    /// A device runtime's operator set, by its digest (`fleet/census/operators.rs`).
    pub fn operator_set(digest: &Sha256Digest) -> StorePath {
        StorePath::from(format!("operators/sha256/{}.json", digest.to_hex()))
    }

    /// The prefix of every keyring version taken through the API.
    pub fn keyrings() -> StorePath {
        StorePath::from("keys/keyring")
    }

    /// Keyring version `version` (zero-padded, so listing order is version order).
    pub fn keyring(version: u64) -> StorePath {
        StorePath::from(format!("keys/keyring/{version:020}.json"))
    }

    /// The prefix of the keyring audit records.
    pub fn keyring_audits() -> StorePath {
        StorePath::from("keys/audit")
    }

    /// Who pushed keyring version `version`, and when.
    pub fn keyring_audit(version: u64) -> StorePath {
        StorePath::from(format!("keys/audit/{version:020}.json"))
    }

    /// The prefix of the raw telemetry log.
    pub fn raw_events() -> StorePath {
        StorePath::from("telemetry/events")
    }

    /// A file of raw events received on `day` (`YYYY-MM-DD`), written by `node` at `nanos` as
    /// its `n`th file.
    pub fn raw_events_file(day: &str, node: &str, nanos: i128, n: u64) -> StorePath {
        StorePath::from(format!(
            "telemetry/events/date={day}/{node}-{nanos}-{n}.parquet"
        ))
    }

    /// A file of raw events received on `day` holding journal records `first` to `last` of
    /// the run `writer` (see `fleet::persist::journal`).
    pub fn raw_events_journaled(day: &str, writer: &str, first: u64, last: u64) -> StorePath {
        StorePath::from(format!(
            "telemetry/events/date={day}/{writer}-j{first}-{last}.parquet"
        ))
    }

    /// The prefix of the telemetry buckets (their layout below it is `fleet::persist::buckets`').
    pub const BUCKETS: &'static str = "telemetry/buckets";

    /// A telemetry bucket object: `level` (`minute`, `hour`, `day`), the bucket's time stamp
    /// and the object's name (its writer, or `part-NNNNNN`).
    pub fn bucket(level: &str, stamp: &str, name: &str) -> StorePath {
        StorePath::from(format!("{}/{level}/{stamp}/{name}.json", Self::BUCKETS))
    }

    /// The compaction lease of the telemetry buckets.
    pub fn buckets_lease() -> StorePath {
        StorePath::from("telemetry/buckets/lease.json")
    }

    /// The prefix of the per-replica rollups earlier versions wrote (read, never written).
    pub const LEGACY_ROLLUPS: &'static str = "telemetry/rollups";

    /// A key that never exists, read by the readiness probe.
    pub fn readiness_probe() -> StorePath {
        StorePath::from("readyz-probe")
    }

    /// Parses `releases/<model>/<version>.json` back into its parts.
    pub fn parse_release(path: &StorePath) -> Option<(ModelName, Version)> {
        let parts: Vec<&str> = path.as_ref().split('/').collect();
        match parts.as_slice() {
            ["releases", model, file] => {
                let version = file.strip_suffix(".json")?;
                Some((model.parse().ok()?, version.parse().ok()?))
            }
            _ => None,
        }
    }
}

/// The longest one request to the object store may take in all (a blob streamed to a slow
/// device included; the device resumes with a range after a cut).
pub const STORE_REQUEST_CAP: std::time::Duration = std::time::Duration::from_secs(600);

/// Opens the configured store: `<data>/store` locally, or an S3 bucket or Azure container whose
/// requests fail when a read waits longer than `timeout` (retried twice, within three timeouts
/// in all).
pub fn open(
    cfg: &crate::storage::config::StorageConfig,
    data: &std::path::Path,
    timeout: std::time::Duration,
) -> anyhow::Result<Store> {
    use crate::storage::config::StorageConfig;
    match cfg {
        StorageConfig::Local => open_local(&data.join("store")),
        StorageConfig::S3 {
            bucket,
            endpoint,
            region,
            allow_http,
            access_key_id,
            secret_access_key,
        } => {
            // Client options first: they replace every client setting, allow_http included.
            let mut b = object_store::aws::AmazonS3Builder::new()
                .with_client_options(client_options(timeout))
                .with_bucket_name(bucket)
                .with_region(region)
                .with_allow_http(*allow_http)
                .with_retry(retry(timeout));
            if let Some(e) = endpoint {
                b = b.with_endpoint(e);
            }
            if let (Some(k), Some(s)) = (access_key_id, secret_access_key) {
                b = b.with_access_key_id(k).with_secret_access_key(s);
            }
            let s3 = b
                .build()
                .map_err(|e| anyhow::anyhow!("cannot open S3 bucket {bucket}: {e}"))?;
            Ok(Arc::new(s3))
        }
        StorageConfig::Azure {
            container,
            account,
            endpoint,
            allow_http,
            access_key,
        } => {
            // From the environment first (the usual AZURE_* credentials), then ferry's settings.
            let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_client_options(client_options(timeout))
                .with_account(account)
                .with_container_name(container)
                .with_allow_http(*allow_http)
                .with_retry(retry(timeout));
            if let Some(e) = endpoint {
                b = b.with_endpoint(e.clone());
            }
            if let Some(k) = access_key {
                b = b.with_access_key(k);
            }
            let azure = b.build().map_err(|e| {
                anyhow::anyhow!("cannot open Azure container {container} of {account}: {e}")
            })?;
            Ok(Arc::new(azure))
        }
    }
}

/// HTTP settings for the cloud stores. A store that stops answering is noticed by the read
/// timeout (each read, reset after every successful one), so large blobs still stream for as
/// long as they keep moving; the total cap only ends a transfer that crawls for ten minutes.
fn client_options(timeout: std::time::Duration) -> object_store::ClientOptions {
    object_store::ClientOptions::new()
        .with_timeout(STORE_REQUEST_CAP.max(timeout))
        .with_connect_timeout(timeout.min(std::time::Duration::from_secs(5)))
        .with_config(
            object_store::ClientConfigKey::ReadTimeout,
            format!("{}ms", timeout.as_millis()),
        )
}

/// Two retries, within three timeouts in all.
fn retry(timeout: std::time::Duration) -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig::default(),
        max_retries: 2,
        retry_timeout: timeout * 3,
    }
}

/// How long a staging file must be untouched before [`sweep_staging`] removes it at start
/// (uploads stall out after `limits.body_timeout_secs`, far less).
pub const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes what uploads killed mid-way left in the local store at `dir`: staging files
/// (`<key>#<n>`, written before the final rename) untouched for `older_than`. A younger one may
/// belong to an upload in flight in another process on the same folder, so it stays. Returns
/// how many files were removed.
pub fn sweep_staging(dir: &std::path::Path, older_than: std::time::Duration) -> usize {
    fn walk(dir: &std::path::Path, older_than: std::time::Duration, removed: &mut usize) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                walk(&path, older_than, removed);
                continue;
            }
            let staged = e
                .file_name()
                .to_str()
                .and_then(|n| n.rsplit_once('#'))
                .is_some_and(|(_, suffix)| {
                    !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit())
                });
            let stale = meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age >= older_than);
            if staged && stale && std::fs::remove_file(&path).is_ok() {
                *removed += 1;
            }
        }
    }
    let mut removed = 0;
    walk(dir, older_than, &mut removed);
    removed
}

/// Opens the local directory store at `dir` (created if missing).
pub fn open_local(dir: &std::path::Path) -> anyhow::Result<Store> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create store directory {}: {e}", dir.display()))?;
    // Every acknowledged write (a release, a rollout revision) must survive a power loss: the
    // local store fsyncs each file and its folder before a put returns.
    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| anyhow::anyhow!("cannot open store {}: {e}", dir.display()))?
        .with_fsync(true);
    Ok(Arc::new(fs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let m: ModelName = "demo-mlp".parse().expect("name");
        let v: Version = "1.2.3-rc.1".parse().expect("version");
        let k = StorageKey::release(&m, &v);
        assert_eq!(k.as_ref(), "releases/demo-mlp/1.2.3-rc.1.json");
        assert_eq!(StorageKey::parse_release(&k), Some((m, v)));
        assert_eq!(
            StorageKey::parse_release(&StorePath::from("releases/x.json")),
            None
        );
        assert_eq!(
            StorageKey::parse_release(&StorePath::from("releases/UP/1.0.0.json")),
            None
        );
    }
}
