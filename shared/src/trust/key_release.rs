//! Key-release keys: the server's X25519 keys that the file keys of sealed variants are wrapped
//! to (`ferry sign` wraps, the server unwraps when a device asks with a receipt).
//!
//! A keyring lists them in `key_release` (an additive v1 field: a client ignores it, since
//! devices never use these keys; `ferry sign` and the server read it). The first entry is the
//! current one, which `ferry sign` wraps to; later entries are kept while releases sealed to
//! them are served. The role is not one of the keyring's closed set of signing roles (`root`,
//! `release`, `online`), which a v1 reader would refuse to extend.

use serde::{Deserialize, Serialize};

use crate::names::KeyId;

/// The only algorithm of a key-release key today.
pub const X25519: &str = "x25519";

/// One key-release public key, as a keyring lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyReleaseKey {
    /// [`KeyReleaseKey::id_of`] its public key.
    pub keyid: KeyId,
    /// [`X25519`] (a reader passes over entries of an algorithm it does not know).
    pub alg: String,
    /// The public key, 64 hex characters.
    pub public: String,
}

impl KeyReleaseKey {
    /// The id of an X25519 public key: SHA-256 of `x25519\0` and its bytes (never the id of a
    /// signing key with the same bytes).
    pub fn id_of(public: &[u8; 32]) -> KeyId {
        let mut bytes = b"x25519\0".to_vec();
        bytes.extend_from_slice(public);
        KeyId::of_public_key(&bytes)
    }

    /// The entry of an X25519 public key.
    pub fn x25519(public: &[u8; 32]) -> Self {
        Self {
            keyid: Self::id_of(public),
            alg: X25519.to_string(),
            public: hex::encode(public),
        }
    }

    /// The public key when the entry is an X25519 key whose id matches it; `None` for another
    /// algorithm; an error for a malformed entry.
    pub fn x25519_public(&self) -> Result<Option<[u8; 32]>, String> {
        if self.alg != X25519 {
            return Ok(None);
        }
        let bytes: [u8; 32] = hex::decode(&self.public)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("key-release key {} is not 32 hex bytes", self.keyid))?;
        if Self::id_of(&bytes) != self.keyid {
            return Err(format!(
                "key-release key {} does not match its public key",
                self.keyid
            ));
        }
        Ok(Some(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_keys_and_unknown_algorithms_are_passed_over() {
        let k = KeyReleaseKey::x25519(&[7; 32]);
        assert_eq!(k.x25519_public(), Ok(Some([7; 32])));
        let mut other = k.clone();
        other.public = hex::encode([8u8; 32]);
        assert!(other.x25519_public().is_err());
        let mut short = k.clone();
        short.public = "abcd".into();
        assert!(short.x25519_public().is_err());
        let mut future = k.clone();
        future.alg = "ml-kem-768".into();
        future.public = "anything".into();
        assert_eq!(future.x25519_public(), Ok(None));
        assert_ne!(k.keyid, KeyId::of_public_key(&[7; 32]));
    }
}
