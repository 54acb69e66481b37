//! Trust: what a device believes and why. This file holds the trust file, the public keys a
//! client (or a server) trusts, with their roles; the rooms below hold [`dsse`] envelopes and
//! [`dsse::Verified`], versioned [`keyring`]s signed by the pinned root keys (key rotation),
//! release-key-signed [`revocation`] lists, and the signed time ([`clock`]) a device learns its
//! clock from.
//!
//! `keys/trust.json` in a server's data directory and `GET /v1/keys` use this format; apps pin
//! it. Each entry's key id must be the SHA-256 of its public key, so a typo cannot silently
//! trust another key.

pub mod clock;
pub mod dsse;
pub mod key;
pub mod key_release;
pub mod keyring;
pub mod revocation;

use crate::errors::ErrorCode;
use serde::{Deserialize, Serialize};

use crate::names::KeyId;
use crate::trust::dsse::{KeyRing, KeyRole};
use crate::trust::key::{Algorithm, PublicKey};

/// One trusted public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedKeyEntry {
    /// Hex SHA-256 of the public key.
    pub keyid: KeyId,
    /// What it may sign.
    pub role: KeyRole,
    /// The signature algorithm (absent: `ed25519`; see [`crate::trust::key`]).
    #[serde(default, skip_serializing_if = "Algorithm::is_ed25519")]
    pub algorithm: Algorithm,
    /// The public key, hex: 32 raw bytes for ed25519, the 33-byte SEC1 compressed point for
    /// P-256.
    pub public: String,
}

impl TrustedKeyEntry {
    /// The entry for `key` with `role`.
    pub fn of(role: KeyRole, key: &PublicKey) -> Self {
        TrustedKeyEntry {
            keyid: key.id(),
            role,
            algorithm: key.algorithm(),
            public: hex::encode(key.to_bytes()),
        }
    }

    /// The public key, after checking that the key id is its SHA-256.
    pub fn public_key(&self) -> Result<PublicKey, TrustError> {
        let key = PublicKey::from_hex(&self.algorithm, &self.public)
            .map_err(|e| TrustError(format!("key {}: {e}", self.keyid)))?;
        if key.id() != self.keyid {
            return Err(TrustError(format!(
                "key {}: key id does not match its public key",
                self.keyid
            )));
        }
        Ok(key)
    }
}

/// A list of trusted keys: root keys (with a threshold; their keyrings name the current
/// release and online keys, see [`crate::trust::keyring`]), or, in the fixed form, release and online
/// keys directly.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustFile {
    /// How many distinct root keys must sign a keyring (default 1; root keys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u32>,
    /// The first keyring version these root keys sign (default 1). A trust file written by
    /// `ferry keys rotate root` names the version that made its root set current, so an app
    /// pinning the new root starts walking there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_keyring: Option<u64>,
    /// The keys.
    pub keys: Vec<TrustedKeyEntry>,
}

/// A trust file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid trust file: {0}")]
pub struct TrustError(pub String);

impl TrustError {
    /// Stable machine-readable code.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::TrustInvalid
    }
}

impl TrustFile {
    /// Adds an ed25519 key.
    pub fn push(&mut self, role: KeyRole, public: &[u8; 32]) {
        self.keys.push(TrustedKeyEntry {
            keyid: KeyId::of_public_key(public),
            role,
            algorithm: Algorithm::Ed25519,
            public: hex::encode(public),
        });
    }

    /// Parses JSON.
    pub fn from_json(bytes: &[u8]) -> Result<Self, TrustError> {
        serde_json::from_slice(bytes).map_err(|e| TrustError(e.to_string()))
    }

    /// Builds a key ring, checking every key id against its key. A key of an algorithm this
    /// build does not know is left out (it cannot verify anything here); a known one that is
    /// malformed is an error.
    pub fn to_keyring(&self) -> Result<KeyRing, TrustError> {
        let mut ring = KeyRing::new();
        for k in &self.keys {
            if matches!(k.algorithm, Algorithm::Other(_)) {
                continue;
            }
            ring.insert(k.role, k.public_key()?);
        }
        Ok(ring)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::dsse::KeyPair;

    #[test]
    fn round_trip_and_mismatch() {
        let k = KeyPair::from_seed(&[4; 32]);
        let mut t = TrustFile::default();
        t.push(KeyRole::Release, &k.public());
        let json = serde_json::to_vec(&t).expect("json");
        let back = TrustFile::from_json(&json).expect("parse");
        let ring = back.to_keyring().expect("ring");
        assert_eq!(ring.get(&k.id()).map(|x| x.role), Some(KeyRole::Release));

        let mut bad = back.clone();
        bad.keys[0].keyid = KeyPair::from_seed(&[5; 32]).id();
        assert!(bad.to_keyring().is_err());
        let mut bad = back;
        bad.keys[0].public = "zz".into();
        assert!(bad.to_keyring().is_err());
        assert!(TrustFile::from_json(b"{").is_err());
    }
}
