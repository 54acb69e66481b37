//! HTTP errors: every failure becomes JSON `{code, message, request_id}` with the right status.
//!
//! A handler returns [`ApiError`]; its `code` is stable (clients switch on it), its `message`
//! is safe to show, and for 5xx the real cause goes to the log only (`internal`). The request
//! id is set per request by the middleware in [`crate::api`] through a task-local, so errors
//! made deep inside a handler still carry it.

use std::fmt;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use ferry_shared::resolve::ErrorBody;

tokio::task_local! {
    /// The id of the request being served (set by the request-id middleware).
    pub static REQUEST_ID: String;
}

/// The current request's id, or `-` outside a request.
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(Clone::clone)
        .unwrap_or_else(|_| "-".to_string())
}

/// An error as the HTTP API reports it.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Message for the caller.
    pub message: String,
    /// Detail for the log only (5xx).
    pub internal: Option<String>,
    /// Structured detail for the caller (for example an explanation per variant).
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            internal: None,
            details: None,
        }
    }

    /// 400 with `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 with `code`.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 422 with `code`.
    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// 500 that says little to the caller and logs `cause`.
    pub fn internal(cause: impl fmt::Display) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: "internal error; the server log has the detail for this request id".into(),
            internal: Some(cause.to_string()),
            details: None,
        }
    }

    /// 503 that says little and logs `cause`.
    pub fn unavailable(cause: impl fmt::Display) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "storage_unavailable",
            message: "storage is unavailable; try again later".into(),
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
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let request_id = current_request_id();
        if let Some(internal) = &self.internal {
            tracing::error!(
                request_id,
                code = self.code,
                status = self.status.as_u16(),
                "{internal}"
            );
        } else if self.status.is_server_error() {
            tracing::error!(request_id, code = self.code, "{}", self.message);
        }
        HttpResponse::build(self.status).json(ErrorBody {
            code: self.code.to_string(),
            message: self.message.clone(),
            request_id,
            details: self.details.clone(),
        })
    }
}

impl From<object_store::Error> for ApiError {
    fn from(e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { .. } => {
                ApiError::not_found("not_found", "no such object")
            }
            other => ApiError::unavailable(other),
        }
    }
}
