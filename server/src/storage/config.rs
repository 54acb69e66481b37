//! Where the object store lives: the `[storage]` section of the server configuration.

use anyhow::bail;
use serde::Deserialize;

/// Where the object store lives.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "lowercase")]
pub enum StorageConfig {
    /// A local directory: `<data>/store` (the default).
    Local,
    /// An S3 bucket (AWS or any S3-compatible service), shared by stateless replicas.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Endpoint URL for S3-compatible services (default: AWS for the region).
        #[serde(default)]
        endpoint: Option<String>,
        /// Region (default `us-east-1`).
        #[serde(default = "default_region")]
        region: String,
        /// Allow plain HTTP (emulators on loopback).
        #[serde(default)]
        allow_http: bool,
        /// Access key id (prefer `FERRY_S3_ACCESS_KEY_ID`).
        #[serde(default)]
        access_key_id: Option<String>,
        /// Secret key (prefer `FERRY_S3_SECRET_ACCESS_KEY`).
        #[serde(default)]
        secret_access_key: Option<String>,
    },
    /// An Azure Blob Storage container (or Azurite), shared by stateless replicas.
    Azure {
        /// Container name.
        container: String,
        /// Storage account name (Azurite: `devstoreaccount1`).
        account: String,
        /// Endpoint URL including the account for path-style services such as Azurite
        /// (`http://127.0.0.1:10000/devstoreaccount1`); default `https://<account>.blob.core.windows.net`.
        #[serde(default)]
        endpoint: Option<String>,
        /// Allow plain HTTP (emulators on loopback).
        #[serde(default)]
        allow_http: bool,
        /// Account access key (prefer `FERRY_AZURE_ACCESS_KEY`); without one the usual Azure
        /// credentials (`AZURE_*` environment, managed identity) are used.
        #[serde(default)]
        access_key: Option<String>,
    },
}

pub(crate) fn default_region() -> String {
    "us-east-1".into()
}

impl StorageConfig {
    /// The store as errors and logs name it, for the data directory `data`.
    pub fn describe(&self, data: &std::path::Path) -> String {
        match self {
            StorageConfig::Local => format!("the local store at {}", data.join("store").display()),
            StorageConfig::S3 { bucket, .. } => format!("the S3 bucket {bucket}"),
            StorageConfig::Azure {
                container, account, ..
            } => format!("the Azure container {container} (account {account})"),
        }
    }

    /// The store from the config file's `[storage]` (`file`), overridden by the environment
    /// (`FERRY_STORAGE`, `FERRY_S3_*`, `FERRY_AZURE_*`), with names, endpoints and plain-HTTP
    /// use checked.
    pub fn resolve(
        file: Option<StorageConfig>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<StorageConfig> {
        let mut storage = match env("FERRY_STORAGE").as_deref() {
            None => file.unwrap_or(StorageConfig::Local),
            Some("local") => StorageConfig::Local,
            Some("s3") => StorageConfig::S3 {
                bucket: env("FERRY_S3_BUCKET")
                    .ok_or_else(|| anyhow::anyhow!("FERRY_STORAGE=s3 needs FERRY_S3_BUCKET"))?,
                endpoint: env("FERRY_S3_ENDPOINT"),
                region: env("FERRY_S3_REGION").unwrap_or_else(default_region),
                allow_http: env("FERRY_S3_ALLOW_HTTP").is_some_and(|v| v == "1" || v == "true"),
                access_key_id: None,
                secret_access_key: None,
            },
            Some("azure") => StorageConfig::Azure {
                container: env("FERRY_AZURE_CONTAINER").ok_or_else(|| {
                    anyhow::anyhow!("FERRY_STORAGE=azure needs FERRY_AZURE_CONTAINER")
                })?,
                account: env("FERRY_AZURE_ACCOUNT").ok_or_else(|| {
                    anyhow::anyhow!("FERRY_STORAGE=azure needs FERRY_AZURE_ACCOUNT")
                })?,
                endpoint: env("FERRY_AZURE_ENDPOINT"),
                allow_http: env("FERRY_AZURE_ALLOW_HTTP").is_some_and(|v| v == "1" || v == "true"),
                access_key: None,
            },
            Some(other) => {
                bail!("FERRY_STORAGE {other:?} must be \"local\", \"s3\" or \"azure\"")
            }
        };
        if let StorageConfig::Azure {
            container,
            account,
            endpoint,
            access_key,
            ..
        } = &mut storage
        {
            // Azure's rules: 3-63 lower-case letters, digits and single dashes.
            let valid = (3..=63).contains(&container.len())
                && container
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !container.starts_with('-')
                && !container.ends_with('-')
                && !container.contains("--");
            if !valid {
                bail!(
                    "storage container {container:?} must be 3 to 63 lower-case letters, digits and single dashes"
                );
            }
            if account.is_empty() || !account.bytes().all(|b| b.is_ascii_alphanumeric()) {
                bail!("storage account {account:?} must be letters and digits");
            }
            if let Some(k) = env("FERRY_AZURE_ACCESS_KEY") {
                *access_key = Some(k);
            }
            if let Some(e) = endpoint
                && !(e.starts_with("http://") || e.starts_with("https://"))
            {
                bail!("storage endpoint {e:?} must be an http(s) URL");
            }
        }
        if let StorageConfig::S3 {
            bucket,
            access_key_id,
            secret_access_key,
            endpoint,
            ..
        } = &mut storage
        {
            if bucket.is_empty() || bucket.len() > 63 {
                bail!("storage bucket name must be 1 to 63 characters");
            }
            if let Some(k) = env("FERRY_S3_ACCESS_KEY_ID") {
                *access_key_id = Some(k);
            }
            if let Some(k) = env("FERRY_S3_SECRET_ACCESS_KEY") {
                *secret_access_key = Some(k);
            }
            if let Some(e) = endpoint
                && !(e.starts_with("http://") || e.starts_with("https://"))
            {
                bail!("storage endpoint {e:?} must be an http(s) URL");
            }
        }
        let (endpoint, allow_http) = match &storage {
            StorageConfig::S3 {
                endpoint,
                allow_http,
                ..
            }
            | StorageConfig::Azure {
                endpoint,
                allow_http,
                ..
            } => (endpoint.clone(), *allow_http),
            StorageConfig::Local => (None, false),
        };
        if let Some(e) = endpoint
            && e.starts_with("http://")
            && !allow_http
        {
            bail!(
                "storage endpoint {e:?} is plain HTTP: set allow_http = true in [storage] \
                 (FERRY_S3_ALLOW_HTTP=1 or FERRY_AZURE_ALLOW_HTTP=1) for an emulator on a \
                 trusted network, or use https"
            );
        }
        Ok(storage)
    }
}
