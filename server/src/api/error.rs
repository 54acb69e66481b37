//! HTTP errors: every failure becomes JSON `{code, message, request_id}` with the right status.
//!
//! Handlers return [`ApiError`]. Its [`ErrorCode`] comes from the one catalogue in
//! `ferry-shared` (see `docs/errors.md`), and [`status_of`] is the one place that decides the
//! HTTP status of each code. Domain modules return their own error enums (`StoreError`,
//! `PublishError`, `RolloutError`, `DenyError`, `KeyringError`, resolve's `Refusal`, revocation's
//! `SubmitError`), each with a `code()`; the `From` impls below
//! are the only bridge from them to HTTP. For 5xx the real cause goes to the log only; the
//! caller gets a short message and the request id to quote.

use std::fmt;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::resolve::ErrorBody;

use crate::plans::deny::DenyError;
use crate::plans::rollout::RolloutError;
use crate::release::publish::PublishError;
use crate::storage::StoreError;

tokio::task_local! {
    /// The id of the request being served (set by the request-id middleware).
    pub static REQUEST_ID: String;
    /// The server's store, as errors name it ("the local store at /var/lib/ferry/store"; set
    /// by the same middleware).
    pub static STORE_NAME: std::sync::Arc<str>;
}

/// The current request's id, or `-` outside a request.
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(Clone::clone)
        .unwrap_or_else(|_| "-".to_string())
}

/// The `Retry-After` of a `503 storage_unavailable` answer, in seconds.
pub const STORE_RETRY_AFTER_SECS: &str = "10";

/// The HTTP status the server answers with for `code`. Exhaustive over the catalogue, so a new
/// code cannot be added without deciding its status here.
pub fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::RequestMalformed
        | C::RequestInvalid
        | C::BodyUnreadable
        | C::InvalidName
        | C::InvalidDigest
        | C::InvalidVersion
        | C::BlobEmpty
        | C::UploadInterrupted
        | C::ModelMismatch
        | C::EnvelopeMalformed
        | C::EnvelopeTooLarge
        | C::RolloutInvalid
        | C::ExperimentInvalid
        | C::DenyInvalid
        | C::TelemetryMalformed
        | C::EventInvalid
        | C::EventOutOfRange => StatusCode::BAD_REQUEST,
        C::Unauthorized => StatusCode::UNAUTHORIZED,
        C::Forbidden
        | C::KeyReleaseRefused
        | C::PayloadTypeMismatch
        | C::SignatureMissing
        | C::SignatureTooMany
        | C::SignatureDuplicate
        | C::KeyUnknown
        | C::KeyWrongRole
        | C::SignatureMalformed
        | C::SignatureInvalid
        | C::SignatureThreshold => StatusCode::FORBIDDEN,
        C::NotFound
        | C::ModelNotFound
        | C::NoCompatibleVariant
        | C::OperatorsMissing
        | C::BlobNotFound
        | C::ReleaseNotFound
        | C::RolloutNotFound
        | C::ExperimentNotFound
        | C::DenyNotFound => StatusCode::NOT_FOUND,
        C::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        C::StateContended
        | C::StoreRecordNewer
        | C::ReleaseExists
        | C::RolloutInProgress
        | C::RolloutNotActive
        | C::RolloutNotPaused
        | C::RolloutChanged
        | C::RolloutNotNewer
        | C::RolloutStrandsDevices
        | C::ExperimentRunning => StatusCode::CONFLICT,
        C::BodyTooLarge | C::BlobTooLarge | C::TooManyEvents => StatusCode::PAYLOAD_TOO_LARGE,
        C::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
        C::RangeNotSatisfiable => StatusCode::RANGE_NOT_SATISFIABLE,
        C::HashMismatch
        | C::NotAPte
        | C::DelegateMismatch
        | C::DataFilesMissing
        | C::DataFilesMismatch
        | C::PteSchemaUnsupported
        | C::BlobMissing
        | C::BlobSizeMismatch
        | C::ChunkIndexMismatch
        | C::SealedInvalid
        | C::ManifestMalformed
        | C::ManifestUnknownField
        | C::ManifestInvalid
        | C::FormatUnsupported
        | C::RevocationsInvalid
        | C::PteTruncated
        | C::PteNotAProgram
        | C::PteBadHeader
        | C::PteMalformed
        | C::PteLimitExceeded => StatusCode::UNPROCESSABLE_ENTITY,
        C::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        C::KeyReleaseStopped => StatusCode::GONE,
        C::StorageUnavailable
        | C::OnlineKeyExpired
        | C::OriginUnavailable
        | C::KeyReleaseUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        C::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        // A keyring pushed to `POST /v1/admin/keyring`.
        C::KeyringInvalid => StatusCode::UNPROCESSABLE_ENTITY,
        C::KeyringSkipped | C::KeyringRollback => StatusCode::CONFLICT,
        C::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        // The server never answers with these (they are the client's, the C ABI's or the
        // trust file's); were one to reach here it would be a bug, hence 500.
        C::TrustInvalid
        | C::SealedKeyMissing
        | C::ReleaseRevoked
        | C::ConfigInvalid
        | C::InvalidArgument
        | C::BufferTooSmall
        | C::Network
        | C::ServerCertificateInvalid
        | C::InputMismatch
        | C::AccuracyRegression
        | C::ServerError
        | C::BadResponse
        | C::Expired
        | C::Replay
        | C::DecisionMismatch
        | C::DecisionInvalid
        | C::DecisionUntimely
        | C::DeviceClockSkewed
        | C::SizeMismatch
        | C::TooLarge
        | C::DiskFull
        | C::InsufficientStorage
        | C::CacheIo
        | C::CacheLockUnsupported
        | C::AllCandidatesFailed
        | C::Crashed
        | C::OfflineNoCache
        | C::CachedIncompatible
        | C::DownloadDeferred
        | C::RuntimeLoadFailed
        | C::RuntimeExecuteFailed
        | C::GoldenMismatch => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error as the HTTP API reports it.
#[derive(Debug)]
pub struct ApiError {
    /// Stable machine-readable code; decides the status.
    pub code: ErrorCode,
    /// Message for the caller.
    pub message: String,
    /// Detail for the log only (5xx).
    pub internal: Option<String>,
    /// Structured detail for the caller (for example an explanation per variant).
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    /// A new error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            internal: None,
            details: None,
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        status_of(self.code)
    }

    /// 500 that says little to the caller and logs `cause`.
    pub fn internal(cause: impl fmt::Display) -> Self {
        Self {
            code: ErrorCode::Internal,
            message: "internal error; the server log has the detail for this request id".into(),
            internal: Some(cause.to_string()),
            details: None,
        }
    }

    /// 503 that says little and logs `cause`.
    pub fn unavailable(cause: impl fmt::Display) -> Self {
        Self {
            code: ErrorCode::StorageUnavailable,
            message: "storage is unavailable; try again later".into(),
            internal: Some(cause.to_string()),
            details: None,
        }
    }

    /// 507 for a write the store had no room for: names the store, logs `cause`.
    pub fn full(cause: impl fmt::Display) -> Self {
        let store = STORE_NAME
            .try_with(|s| s.to_string())
            .unwrap_or_else(|_| "the store".to_string());
        Self {
            code: ErrorCode::StorageFull,
            message: format!(
                "{store} is full (no space left or over quota); nothing was stored: free space \
                 or grow it, then retry"
            ),
            internal: Some(cause.to_string()),
            details: None,
        }
    }

    /// Adds structured detail.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.status().as_u16(),
            self.code,
            self.message
        )
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status()
    }

    fn error_response(&self) -> HttpResponse {
        let request_id = current_request_id();
        let status = self.status();
        if let Some(internal) = &self.internal {
            tracing::error!(
                request_id,
                code = %self.code,
                status = status.as_u16(),
                "{internal}"
            );
        } else if self.code == ErrorCode::OriginUnavailable {
            // A site mirror during an outage answers this to every device: the mirror says
            // once when the origin goes away and comes back (mirror/queue.rs, Contact).
            tracing::debug!(request_id, code = %self.code, "{}", self.message);
        } else if status.is_server_error() {
            tracing::error!(request_id, code = %self.code, "{}", self.message);
        }
        let mut resp = HttpResponse::build(status);
        if status == StatusCode::TOO_MANY_REQUESTS {
            // Every limit here counts per minute: a minute from now the allowance is back.
            resp.insert_header((actix_web::http::header::RETRY_AFTER, "60"));
        } else if status == StatusCode::UNAUTHORIZED {
            // RFC 9110: a 401 names the scheme that would be accepted.
            resp.insert_header((
                actix_web::http::header::WWW_AUTHENTICATE,
                "Bearer realm=\"ferry admin\"",
            ));
        } else if self.code == ErrorCode::OriginUnavailable {
            resp.insert_header((actix_web::http::header::RETRY_AFTER, "60"));
        } else if self.code == ErrorCode::StorageUnavailable {
            // A store that did not answer is usually back within seconds (a restart, a
            // failover); callers that honour Retry-After come back then, not at once.
            resp.insert_header((actix_web::http::header::RETRY_AFTER, STORE_RETRY_AFTER_SECS));
        }
        resp.json(ErrorBody {
            code: self.code.as_str().to_string(),
            message: self.message.clone(),
            request_id,
            details: self.details.clone(),
        })
    }
}

impl From<crate::resolve::decide::Refusal> for ApiError {
    fn from(r: crate::resolve::decide::Refusal) -> Self {
        use crate::resolve::decide::Refusal;
        match &r {
            Refusal::Inconsistent => ApiError::internal(r.message()),
            Refusal::NoFit { explain, .. } => ApiError::new(r.code(), r.message())
                .with_details(serde_json::json!({ "explain": explain })),
            _ => ApiError::new(r.code(), r.message()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(cause) => ApiError::unavailable(cause),
            StoreError::Full(cause) => ApiError::full(cause),
            StoreError::Encode(cause) => ApiError::internal(cause),
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

impl From<PublishError> for ApiError {
    fn from(e: PublishError) -> Self {
        match e {
            PublishError::Store(s) => s.into(),
            PublishError::Internal(cause) => ApiError::internal(cause),
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

impl From<RolloutError> for ApiError {
    fn from(e: RolloutError) -> Self {
        match e {
            RolloutError::Store(s) => s.into(),
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

impl From<DenyError> for ApiError {
    fn from(e: DenyError) -> Self {
        match e {
            DenyError::Store(s) => s.into(),
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

impl From<crate::plans::revocation::SubmitError> for ApiError {
    fn from(e: crate::plans::revocation::SubmitError) -> Self {
        match e {
            crate::plans::revocation::SubmitError::Store(s) => s.into(),
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

impl From<crate::keyring::KeyringError> for ApiError {
    fn from(e: crate::keyring::KeyringError) -> Self {
        use crate::keyring::KeyringError as K;
        match e {
            K::Store(s) => s.into(),
            K::Internal(cause) => ApiError::internal(cause),
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

impl From<object_store::Error> for ApiError {
    fn from(e: object_store::Error) -> Self {
        StoreError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_status_and_5xx_only_where_meant() {
        for c in ErrorCode::ALL {
            let s = status_of(*c);
            assert!(s.is_client_error() || s.is_server_error(), "{c}: {s}");
        }
        assert_eq!(status_of(ErrorCode::StorageUnavailable).as_u16(), 503);
        assert_eq!(status_of(ErrorCode::NoCompatibleVariant).as_u16(), 404);
        assert_eq!(status_of(ErrorCode::ReleaseExists).as_u16(), 409);
    }
}
