//! The admin endpoints' `Authorization: Bearer` check: the token found among the configured
//! ones ([`crate::tokens`]) must grant the endpoint's scope.

use ferry_shared::errors::ErrorCode;

use actix_web::HttpRequest;

use crate::api::error::ApiError;
use crate::tokens::{Scope, TokenEntry};

/// Who made an admin request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name.
    pub name: String,
}

/// The configured token the request's `Authorization: Bearer` header names.
fn identify<'a>(req: &HttpRequest, tokens: &'a [TokenEntry]) -> Result<&'a TokenEntry, ApiError> {
    let unauthorized = |msg: &str| ApiError::new(ErrorCode::Unauthorized, msg.to_string());
    let header = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .ok_or_else(|| {
            unauthorized("this endpoint needs an admin token: Authorization: Bearer TOKEN")
        })?;
    let value = header
        .to_str()
        .map_err(|_| unauthorized("the Authorization header is not text"))?;
    // The scheme is case-insensitive (RFC 9110): "Bearer", "bearer", "BEARER".
    let secret = value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .ok_or_else(|| unauthorized("the Authorization header must be \"Bearer TOKEN\""))?
        .1
        .trim();
    crate::tokens::find(tokens, secret).ok_or_else(|| unauthorized("unknown token"))
}

/// Checks the request's `Authorization: Bearer` token for `scope`.
pub fn authorize(
    req: &HttpRequest,
    tokens: &[TokenEntry],
    scope: Scope,
) -> Result<Caller, ApiError> {
    let t = identify(req, tokens)?;
    if !t.scopes.contains(&scope) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("token {:?} lacks the {scope} scope", t.name),
        ));
    }
    Ok(Caller {
        name: t.name.clone(),
    })
}

/// `GET /v1/admin/token` (any valid token): the token's name and scopes, so a tool (the
/// dashboard) can offer only what the token may do and say why the rest is off.
pub async fn whoami(
    req: HttpRequest,
    state: actix_web::web::Data<crate::api::AppState>,
) -> Result<actix_web::HttpResponse, ApiError> {
    let t = identify(&req, &state.config().tokens)?;
    let scopes: Vec<String> = Scope::ALL
        .iter()
        .filter(|s| t.scopes.contains(s))
        .map(ToString::to_string)
        .collect();
    Ok(actix_web::HttpResponse::Ok().json(serde_json::json!({
        "name": t.name,
        "scopes": scopes,
    })))
}
