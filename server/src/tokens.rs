//! Admin bearer tokens with scopes: what the `[[tokens]]` config section holds.
//!
//! Tokens are stored as SHA-256 hashes (the config never holds a secret); a presented token is
//! hashed and compared in constant time against every entry. This module knows nothing of
//! HTTP: `api::auth` reads the header and answers.
//!
//! Bottom layer: imports only `ferry-shared`.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

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

/// The entry whose secret is `secret`, comparing against every entry in constant time.
pub fn find<'a>(tokens: &'a [TokenEntry], secret: &str) -> Option<&'a TokenEntry> {
    let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
    let mut found = None;
    for t in tokens {
        if bool::from(t.hash.ct_eq(&presented)) {
            found = Some(t);
        }
    }
    found
}
