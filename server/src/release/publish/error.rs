//! Why a blob upload or a release was refused: [`PublishError`], each variant with its
//! catalogue code.

use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::ManifestError;
use ferry_shared::trust::dsse::DsseError;
use ferry_shared::{ModelName, Sha256Digest};

use crate::storage::StoreError;

/// Why a blob upload or a release was refused.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The upload body ended with an error; nothing was stored.
    #[error("the upload body ended with an error: {0}")]
    Interrupted(String),
    /// The upload sent nothing for `secs` seconds.
    #[error("the upload sent nothing for {secs} s")]
    Stalled {
        /// The idle limit.
        secs: u64,
    },
    /// The whole upload took longer than `secs` seconds.
    #[error("the upload took longer than {secs} s (limits.upload_timeout_secs)")]
    TooSlow {
        /// The limit.
        secs: u64,
    },
    /// The blob is over the size limit.
    #[error("blob is larger than the limit of {max} bytes")]
    BlobTooLarge {
        /// The limit.
        max: u64,
    },
    /// The bytes do not hash to the digest in the URL.
    #[error("body hashes to {actual}, not {expected}")]
    HashMismatch {
        /// The digest in the URL.
        expected: Sha256Digest,
        /// What the bytes hash to.
        actual: Sha256Digest,
    },
    /// An encoded upload does not decode (see `ferry_fs::grouped`).
    #[error("the body is not a valid ferry-grouped-zstd encoding: {0}")]
    EncodingInvalid(String),
    /// An encoded upload for a blob the server does not hold.
    #[error("blob {0} is not on the server: upload the file itself first")]
    EncodedWithoutBlob(Sha256Digest),
    /// An empty blob.
    #[error("an empty blob cannot be a model")]
    BlobEmpty,
    /// The body is not a DSSE envelope.
    #[error("body is not a DSSE envelope: {0}")]
    EnvelopeMalformed(String),
    /// The envelope does not verify against the trusted release keys.
    #[error(transparent)]
    Signature(DsseError),
    /// The signed manifest is not acceptable.
    #[error(transparent)]
    Manifest(ManifestError),
    /// The manifest is for another model than the URL.
    #[error("the manifest is for {manifest} but was posted to {url}")]
    ModelMismatch {
        /// The manifest's model.
        manifest: ModelName,
        /// The URL's model.
        url: ModelName,
    },
    /// The version exists; releases are immutable.
    #[error(
        "{model} {version} is already published; releases are immutable, publish a new version"
    )]
    Exists {
        /// Model.
        model: ModelName,
        /// Version.
        version: semver::Version,
    },
    /// A blob the release names is not uploaded.
    #[error("variant {variant}: {what} has not been uploaded")]
    BlobMissing {
        /// Variant.
        variant: String,
        /// Which blob.
        what: String,
    },
    /// A stored blob's size differs from the signed size.
    #[error("variant {variant}: {what} is {actual} bytes, the manifest says {signed}")]
    BlobSizeMismatch {
        /// Variant.
        variant: String,
        /// Which blob.
        what: String,
        /// Stored size.
        actual: u64,
        /// Signed size.
        signed: u64,
    },
    /// A file's signed chunk index does not fit its stored bytes.
    #[error("variant {variant}: {what}: {why}")]
    ChunkIndexMismatch {
        /// Variant.
        variant: String,
        /// Which file.
        what: String,
        /// What does not fit.
        why: String,
    },
    /// A blob is not an ExecuTorch program.
    #[error("blob {digest} is not a valid .pte: {why}")]
    NotAPte {
        /// The blob.
        digest: Sha256Digest,
        /// The inspector's reason.
        why: String,
    },
    /// A sealed variant the server cannot admit (see [`crate::release::publish::sealed`]).
    #[error("variant {variant}: {why}")]
    SealedInvalid {
        /// The variant.
        variant: String,
        /// What is wrong.
        why: String,
    },
    /// A sealed variant whose key-release key this server does not hold.
    #[error(
        "variant {variant} is sealed to key-release key {key}, which this server does not hold: \
         copy key-release.key (and retired/) from the key folder into the server's keys folder \
         and restart it, or sign with the key folder whose keyring the server holds"
    )]
    KeyReleaseUnavailable {
        /// The variant.
        variant: String,
        /// The key it names.
        key: String,
    },
    /// The declared delegate is not in the bytes.
    #[error("{0}")]
    DelegateMismatch(String),
    /// The program needs tensors that the variant's data files do not provide.
    #[error(
        "variant {variant}: its program keeps {} tensor(s) in a separate data file (.ptd) that \
         the variant's data files do not provide ({}{}): no device could load it",
        missing.len(),
        missing.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
        if missing.len() > 5 { ", ..." } else { "" }
    )]
    DataFilesMissing {
        /// Variant id.
        variant: String,
        /// The tensors no data file provides.
        missing: Vec<String>,
    },
    /// The variant's data files repeat a tensor, or hold one with another element type or
    /// shape than the program declares.
    #[error(
        "variant {variant}: its data files do not fit its program ({} problem(s)): {}",
        problems.len(),
        problems.first().map(String::as_str).unwrap_or("")
    )]
    DataFilesMismatch {
        /// Variant id.
        variant: String,
        /// What is wrong, for people.
        problems: Vec<String>,
    },
    /// A variant's data file is not a FlatTensor `.ptd`.
    #[error("variant {variant}: data file {name} ({digest}) is not a valid .ptd: {why}")]
    NotAPtd {
        /// Variant id.
        variant: String,
        /// The data file's name.
        name: String,
        /// The blob.
        digest: Sha256Digest,
        /// The inspector's reason.
        why: String,
    },
    /// The program's schema is newer than this server knows.
    #[error(
        "variant {variant} has program schema version {version}, newer than this server understands ({known})"
    )]
    SchemaUnsupported {
        /// Variant.
        variant: String,
        /// Its schema version.
        version: u32,
        /// The newest known.
        known: u32,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something that should not fail did (logged, not shown).
    #[error("{0}")]
    Internal(String),
}

impl PublishError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            PublishError::Interrupted(_) => ErrorCode::UploadInterrupted,
            PublishError::BlobTooLarge { .. } => ErrorCode::BlobTooLarge,
            PublishError::Stalled { .. } | PublishError::TooSlow { .. } => ErrorCode::BodyTimeout,
            PublishError::HashMismatch { .. } => ErrorCode::HashMismatch,
            PublishError::BlobEmpty => ErrorCode::BlobEmpty,
            PublishError::EncodingInvalid(_) => ErrorCode::RequestMalformed,
            PublishError::EncodedWithoutBlob(_) => ErrorCode::BlobNotFound,
            PublishError::EnvelopeMalformed(_) => ErrorCode::EnvelopeMalformed,
            PublishError::Signature(e) => e.code(),
            PublishError::Manifest(e) => e.code(),
            PublishError::ModelMismatch { .. } => ErrorCode::ModelMismatch,
            PublishError::Exists { .. } => ErrorCode::ReleaseExists,
            PublishError::BlobMissing { .. } => ErrorCode::BlobMissing,
            PublishError::BlobSizeMismatch { .. } => ErrorCode::BlobSizeMismatch,
            PublishError::ChunkIndexMismatch { .. } => ErrorCode::ChunkIndexMismatch,
            PublishError::NotAPte { .. } => ErrorCode::NotAPte,
            PublishError::DelegateMismatch(_) => ErrorCode::DelegateMismatch,
            PublishError::SealedInvalid { .. } => ErrorCode::SealedInvalid,
            PublishError::KeyReleaseUnavailable { .. } => ErrorCode::KeyReleaseUnavailable,
            PublishError::DataFilesMissing { .. } => ErrorCode::DataFilesMissing,
            PublishError::DataFilesMismatch { .. } => ErrorCode::DataFilesMismatch,
            PublishError::NotAPtd { .. } => ErrorCode::NotAPte,
            PublishError::SchemaUnsupported { .. } => ErrorCode::PteSchemaUnsupported,
            PublishError::Store(e) => e.code(),
            PublishError::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl From<object_store::Error> for PublishError {
    fn from(e: object_store::Error) -> Self {
        PublishError::Store(e.into())
    }
}
