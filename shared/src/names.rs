//! Validated newtypes for the names that cross trust boundaries.
//!
//! Every value here is checked when it is built (from a string, or by serde), so code that holds
//! a [`ModelName`] can put it into a storage key or a URL without further escaping: names are
//! short, lowercase ASCII and can never contain a path separator or `..`.

use crate::errors::ErrorCode;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Why a name or digest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The value was empty.
    #[error("{kind} is empty")]
    Empty {
        /// What was being parsed ("model name", "sha256 digest", ...).
        kind: &'static str,
    },
    /// The value was longer than allowed.
    #[error("{kind} is {len} characters long; at most {max} are allowed")]
    TooLong {
        /// What was being parsed.
        kind: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The value had a character outside the allowed set, or a bad shape.
    #[error("{kind} {value:?} is invalid: {why}")]
    Invalid {
        /// What was being parsed.
        kind: &'static str,
        /// The offending value (cut to 80 characters).
        value: String,
        /// What rule it broke.
        why: &'static str,
    },
}

impl NameError {
    /// Stable machine-readable code.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidName
    }
}

fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Whether `s` is longer than `max` characters (Unicode scalar values): the way JSON Schema's
/// `maxLength` counts, so a string the schemas in `schemas/` allow is one the checks written
/// with this allow. (A string of at most `max` bytes never is.)
pub fn longer_than(s: &str, max: usize) -> bool {
    s.len() > max && s.chars().count() > max
}

/// Checks the common "slug" rule used by model names and variant ids:
/// 1 to `max` characters of `[a-z0-9._-]`, starting with a letter or digit, no `..`.
fn check_slug(kind: &'static str, s: &str, max: usize) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty { kind });
    }
    if s.len() > max {
        return Err(NameError::TooLong {
            kind,
            len: s.len(),
            max,
        });
    }
    let invalid = |why| NameError::Invalid {
        kind,
        value: clip(s),
        why,
    };
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid(
            "only lowercase letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    if !s.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(invalid("must start with a letter or digit"));
    }
    if s.contains("..") {
        return Err(invalid("must not contain '..'"));
    }
    Ok(())
}

macro_rules! string_newtype {
    ($(#[$meta:meta])* $name:ident, $kind:literal, $check:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps `s`.
            pub fn new(s: impl Into<String>) -> Result<Self, NameError> {
                let s = s.into();
                let check: fn(&str) -> Result<(), NameError> = $check;
                check(&s)?;
                Ok(Self(s))
            }

            /// The validated string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// Maximum length of a model name.
pub const MAX_MODEL_NAME: usize = 64;
/// Maximum length of a variant id.
pub const MAX_VARIANT_ID: usize = 64;
/// Maximum length of a backend id.
pub const MAX_BACKEND_ID: usize = 64;

string_newtype!(
    /// A model's name: 1–64 characters of `[a-z0-9._-]`, starting with a letter or digit,
    /// without `..`. Safe to use as one path segment.
    ModelName,
    "model name",
    |s| check_slug("model name", s, MAX_MODEL_NAME)
);

string_newtype!(
    /// A variant's id inside a release (for example `xnnpack-fp32`), same rule as [`ModelName`].
    VariantId,
    "variant id",
    |s| check_slug("variant id", s, MAX_VARIANT_ID)
);

string_newtype!(
    /// An ExecuTorch backend id as registered in the runtime and written into `.pte` files
    /// (`XnnpackBackend`, `CoreMLBackend`, `VulkanBackend`, ...): 1–64 characters of
    /// `[A-Za-z0-9_]`.
    BackendId,
    "backend id",
    |s| {
        if s.is_empty() {
            return Err(NameError::Empty { kind: "backend id" });
        }
        if s.len() > MAX_BACKEND_ID {
            return Err(NameError::TooLong {
                kind: "backend id",
                len: s.len(),
                max: MAX_BACKEND_ID,
            });
        }
        if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(NameError::Invalid {
                kind: "backend id",
                value: clip(s),
                why: "only ASCII letters, digits and '_' are allowed",
            });
        }
        Ok(())
    }
);

/// A SHA-256 digest. Serialised as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256Digest([u8; 32]);

impl Sha256Digest {
    /// Wraps raw digest bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Hashes `data`.
    pub fn of(data: &[u8]) -> Self {
        Self(Sha256::digest(data).into())
    }

    /// Parses 64 hex characters (lowercase or uppercase).
    pub fn from_hex(s: &str) -> Result<Self, NameError> {
        const KIND: &str = "sha256 digest";
        if s.is_empty() {
            return Err(NameError::Empty { kind: KIND });
        }
        if s.len() != 64 {
            return Err(NameError::Invalid {
                kind: KIND,
                value: clip(s),
                why: "must be exactly 64 hex characters",
            });
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| NameError::Invalid {
            kind: KIND,
            value: clip(s),
            why: "must be exactly 64 hex characters",
        })?;
        Ok(Self(out))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

impl FromStr for Sha256Digest {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_hex(s)
    }
}

impl Serialize for Sha256Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Sha256Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

/// Identifies a public key: the hex SHA-256 of its public bytes (the 32 raw bytes of an ed25519
/// key, the 33-byte SEC1 compressed point of a P-256 key).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(Sha256Digest);

impl KeyId {
    /// The id of a public key given as its public bytes (see [`crate::trust::key::PublicKey`]).
    pub fn of_public_key(public: &[u8]) -> Self {
        Self(Sha256Digest::of(public))
    }

    /// Parses 64 hex characters.
    pub fn from_hex(s: &str) -> Result<Self, NameError> {
        Sha256Digest::from_hex(s).map(Self)
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        self.0.to_hex()
    }

    /// The first 16 hex characters, for logs and people.
    pub fn short(&self) -> String {
        self.to_hex()[..16].to_string()
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({})", self.short())
    }
}

impl FromStr for KeyId {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_hex(s)
    }
}

impl Serialize for KeyId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for KeyId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Sha256Digest::deserialize(d).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_count_characters_as_json_schema_does() {
        // 100 three-byte characters: 300 bytes, 100 characters.
        let korean = "한".repeat(100);
        assert!(!longer_than(&korean, 128));
        assert!(longer_than(&"한".repeat(129), 128));
        assert!(!longer_than(&"a".repeat(128), 128));
        assert!(longer_than(&"a".repeat(129), 128));
        // A resolve request with a non-ASCII device model of 100 characters is taken.
        let mut r: crate::wire::resolve::ResolveRequest =
            serde_json::from_value(serde_json::json!({
                "model": "m", "install_id": "i", "app_version": "1.0.0",
                "runtime_version": "1.0.0", "platform": "android"
            }))
            .expect("request");
        r.device_model = korean;
        assert_eq!(r.validate(), Ok(()));
        r.device_model = "한".repeat(129);
        assert!(r.validate().is_err());
    }

    #[test]
    fn model_names() {
        for ok in ["demo-mlp", "a", "resnet50.v2", "m_1", "0x"] {
            assert!(ModelName::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "../etc", "a/b", "A", ".hidden", "-x", "a..b", "a b", "é", "a\0", "a\\b",
        ] {
            assert!(ModelName::new(bad).is_err(), "{bad:?}");
        }
        assert!(ModelName::new("x".repeat(65)).is_err());
        assert!(ModelName::new("x".repeat(64)).is_ok());
    }

    #[test]
    fn model_name_serde_validates() {
        let r: Result<ModelName, _> = serde_json::from_str("\"../x\"");
        assert!(r.is_err());
        let m: ModelName = serde_json::from_str("\"ok\"").expect("valid");
        assert_eq!(m.as_str(), "ok");
    }

    #[test]
    fn digests() {
        let d = Sha256Digest::of(b"abc");
        assert_eq!(
            d.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Sha256Digest::from_hex(&d.to_hex()), Ok(d));
        assert_eq!(
            Sha256Digest::from_hex(&d.to_hex().to_uppercase()),
            Ok(d),
            "uppercase hex is accepted"
        );
        assert!(Sha256Digest::from_hex("zz").is_err());
        assert!(Sha256Digest::from_hex(&"g".repeat(64)).is_err());
        assert!(Sha256Digest::from_hex(&"a".repeat(63)).is_err());
        let json = serde_json::to_string(&d).expect("serialise");
        assert_eq!(json, format!("\"{}\"", d.to_hex()));
    }

    #[test]
    fn backend_ids() {
        assert!(BackendId::new("XnnpackBackend").is_ok());
        assert!(BackendId::new("Xnn pack").is_err());
        assert!(BackendId::new("").is_err());
    }
}
