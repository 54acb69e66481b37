//! Where the object store lives: the `[storage]` section of the server configuration.

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
