//! Admin bearer tokens with scopes.
//!
//! Tokens are stored as SHA-256 hashes (the config never holds a secret); a presented token is
//! hashed and compared in constant time against every entry.

use ferry_shared::errors::ErrorCode;
use std::fmt;

use actix_web::HttpRequest;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

use crate::api::error::ApiError;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Upload blobs and publish releases.
    Publish,
    /// Change rollouts.
    Rollout,
    /// Read admin views.
    Read,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 3] = [Scope::Publish, Scope::Rollout, Scope::Read];
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Publish => "publish",
            Scope::Rollout => "rollout",
            Scope::Read => "read",
        })
    }
}

/// One accepted token.
#[derive(Clone)]
pub struct TokenEntry {
    /// A name for logs and audit.
    pub name: String,
    hash: [u8; 32],
    /// Scopes it grants.
    pub scopes: Vec<Scope>,
}

impl fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenEntry")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// Hex SHA-256 of a token secret (what goes into the config file).
pub fn hash_token(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

impl TokenEntry {
    /// From a secret (hashed immediately).
    pub fn from_secret(name: &str, secret: &str, scopes: Vec<Scope>) -> Self {
        Self {
            name: name.to_string(),
            hash: Sha256::digest(secret.as_bytes()).into(),
            scopes,
        }
    }

    /// From a hex SHA-256 hash.
    pub fn from_hash(name: &str, hex_hash: &str, scopes: Vec<Scope>) -> anyhow::Result<Self> {
        let mut hash = [0u8; 32];
        hex::decode_to_slice(hex_hash, &mut hash)
            .map_err(|_| anyhow::anyhow!("sha256 must be 64 hex characters"))?;
        Ok(Self {
            name: name.to_string(),
            hash,
            scopes,
        })
    }
}

/// Who made an admin request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name.
    pub name: String,
}

/// Checks the request's `Authorization: Bearer` token for `scope`.
pub fn authorize(
    req: &HttpRequest,
    tokens: &[TokenEntry],
    scope: Scope,
) -> Result<Caller, ApiError> {
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
    let secret = value
        .strip_prefix("Bearer ")
        .ok_or_else(|| unauthorized("the Authorization header must be \"Bearer TOKEN\""))?
        .trim();
    let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
    let mut found = None;
    for t in tokens {
        if bool::from(t.hash.ct_eq(&presented)) {
            found = Some(t);
        }
    }
    let t = found.ok_or_else(|| unauthorized("unknown token"))?;
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
