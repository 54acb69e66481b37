//! Request helpers shared by the handlers: bounded bodies, path parameters, and the common
//! start of admin views and changes.

use actix_web::{HttpRequest, web};
use bytes::{Bytes, BytesMut};
use ferry_shared::errors::ErrorCode;
use ferry_shared::{ModelName, Sha256Digest};
use futures_util::StreamExt as _;

use crate::api::AppState;
use crate::api::auth::authorize;
use crate::api::error::ApiError;
use crate::api::limits::Limits;
use crate::tokens::Scope;

/// Reads a request body up to `limit` bytes.
pub(crate) async fn read_body(
    payload: web::Payload,
    limits: &Limits,
    max: usize,
) -> Result<Bytes, ApiError> {
    let deadline = std::time::Duration::from_secs(limits.body_timeout_secs);
    match tokio::time::timeout(deadline, read_all(payload, max)).await {
        Ok(result) => result,
        Err(_) => Err(ApiError::new(
            ErrorCode::BodyTimeout,
            format!(
                "the body did not arrive within {} s",
                limits.body_timeout_secs
            ),
        )),
    }
}

async fn read_all(mut payload: web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(
                ErrorCode::BodyUnreadable,
                format!("cannot read the body: {e}"),
            )
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::new(
                ErrorCode::BodyTooLarge,
                format!("the body is larger than the limit of {limit} bytes"),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// The published release `model` `version` named in a path (`invalid_name`,
/// `invalid_version` or `release_not_found` otherwise).
pub(crate) fn published_release(
    state: &AppState,
    model: &str,
    version: &str,
) -> Result<
    (
        ModelName,
        semver::Version,
        std::sync::Arc<crate::storage::catalog::Release>,
    ),
    ApiError,
> {
    let model = parse_model(model)?;
    if version.len() > 64 {
        return Err(ApiError::new(
            ErrorCode::InvalidVersion,
            "a version is at most 64 characters",
        ));
    }
    let version: semver::Version = version
        .parse()
        .map_err(|e| ApiError::new(ErrorCode::InvalidVersion, format!("{e}")))?;
    let release = state.catalog().release(&model, &version).ok_or_else(|| {
        ApiError::new(
            ErrorCode::ReleaseNotFound,
            format!("{model} {version} is not published"),
        )
    })?;
    Ok((model, version, release))
}

pub(crate) fn parse_model(s: &str) -> Result<ModelName, ApiError> {
    s.parse()
        .map_err(|e: ferry_shared::NameError| ApiError::new(ErrorCode::InvalidName, e.to_string()))
}

/// A blob digest in a path: 64 lowercase hex characters (`invalid_digest` otherwise; the
/// OpenAPI document's `Sha256Hex` says the same, and a test holds the two together).
pub fn parse_digest(s: &str) -> Result<Sha256Digest, ApiError> {
    if s.len() != 64
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(ApiError::new(
            ErrorCode::InvalidDigest,
            "a blob is named by 64 lowercase hex characters of its sha256",
        ));
    }
    Sha256Digest::from_hex(s).map_err(|e| ApiError::new(ErrorCode::InvalidDigest, e.to_string()))
}
pub(crate) fn model_param(s: &str) -> Result<ModelName, ApiError> {
    s.parse()
        .map_err(|e: ferry_shared::NameError| ApiError::new(ErrorCode::InvalidName, e.to_string()))
}
/// The common start of an admin view: the `read` scope and the model from the path.
pub(crate) async fn read_view(
    req: &HttpRequest,
    state: &AppState,
    model: &str,
) -> Result<ModelName, ApiError> {
    authorize(req, &state.config().tokens, Scope::Read)?;
    known_model(state, model).await
}

/// The model in the path, which must have a published release: in this replica's catalog, or
/// in the store (published through another replica since this one last refreshed).
pub(crate) async fn known_model(state: &AppState, model: &str) -> Result<ModelName, ApiError> {
    use futures_util::TryStreamExt as _;
    let model = model_param(model)?;
    if state.catalog().has_model(&model) {
        return Ok(model);
    }
    let prefix = crate::storage::StorageKey::releases_of(&model);
    let first = state
        .store()
        .list(Some(&prefix))
        .try_next()
        .await
        .map_err(ApiError::unavailable)?;
    if first.is_none() {
        return Err(ApiError::new(
            ErrorCode::ModelNotFound,
            format!("no release of {model} is published"),
        ));
    }
    Ok(model)
}

/// Refuses a JSON body that is not an object (`code`, naming `what`): serde would read a struct
/// from an array too (its fields in order), which bypasses the unknown-field checks and makes
/// a request's meaning depend on the order of the server's fields. Leading JSON white space is
/// allowed; a byte order mark is named as such.
pub(crate) fn require_object(body: &[u8], code: ErrorCode, what: &str) -> Result<(), ApiError> {
    if body.starts_with(b"\xEF\xBB\xBF") {
        return Err(ApiError::new(
            code,
            format!("{what}: the body starts with a byte order mark; send plain UTF-8 JSON"),
        ));
    }
    match body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        Some(b'{') => Ok(()),
        _ => Err(ApiError::new(
            code,
            format!("{what}: expected a JSON object"),
        )),
    }
}

/// The common start of an admin change: the caller (with `scope`), the model from the path,
/// and the JSON body (at most 64 KiB) parsed as `T`, refusals coded `code`.
pub(crate) async fn admin_change<T: serde::de::DeserializeOwned>(
    req: &HttpRequest,
    state: &AppState,
    model: &str,
    payload: web::Payload,
    code: ErrorCode,
) -> Result<(crate::api::auth::Caller, ModelName, T), ApiError> {
    let caller = authorize(req, &state.config().tokens, Scope::Rollout)?;
    let model = known_model(state, model).await?;
    let body = read_body(payload, &state.config().limits, 64 * 1024).await?;
    require_object(&body, code, "change")?;
    let mut value: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::new(code, format!("change: {e}")))?;
    integral(&mut value);
    let change: T =
        serde_json::from_value(value).map_err(|e| ApiError::new(code, format!("change: {e}")))?;
    Ok((caller, model, change))
}

/// Turns every number written with a fraction of zero (`3600.0`) into the integer it is, so a
/// field typed as a count takes it as JSON Schema's `integer` does; other numbers stay.
fn integral(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) if n.as_u64().is_none() && n.as_i64().is_none() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                // Exact below 2^53: the cast keeps the value.
                #[allow(clippy::cast_possible_truncation)]
                let i = f as i64;
                *v = serde_json::Value::from(i);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral),
        serde_json::Value::Object(map) => map.values_mut().for_each(integral),
        _ => {}
    }
}

/// Reads the catalog again from the store when `releases` name one of `model` this replica has
/// not seen (published through another replica a moment ago: an operator ships right after
/// publishing), before a change is judged against it.
pub(crate) async fn catch_up(state: &AppState, model: &ModelName, releases: &[semver::Version]) {
    let catalog = state.catalog();
    if releases.iter().all(|v| catalog.release(model, v).is_some()) {
        return;
    }
    match crate::storage::catalog::Catalog::refresh(
        state.store(),
        &state.keys().release_ring,
        &catalog,
    )
    .await
    {
        Ok((c, _)) => state.replace_catalog(c),
        Err(e) => tracing::warn!("catalog reload failed: {e}"),
    }
}

#[cfg(test)]
mod integral_tests {
    #[test]
    fn integral_floats_become_integers_and_others_stay() {
        let mut v = serde_json::json!({"every_secs": 3600.0, "rate": 0.25, "n": [2.0, -4.0, 7],
            "huge": 1.0e300, "text": "1.0"});
        super::integral(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"every_secs": 3600, "rate": 0.25, "n": [2, -4, 7],
                "huge": 1.0e300, "text": "1.0"})
        );
    }
}
