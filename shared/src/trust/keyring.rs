//! The keyring: which release and online keys are current, signed by the root keys that apps
//! pin, so that a stolen or lost key can be replaced with a server-side change only.
//!
//! # Documents
//! - **`trust.json`** (pinned in the app, [`TrustFile`]): the root keys and how many of them
//!   (`threshold`) must sign a keyring. A trust file without root keys is the older fixed form
//!   (release and online keys listed directly) and cannot rotate.
//! - **Keyring version N** (a DSSE envelope of type [`KEYRING_PAYLOAD_TYPE`], [`Keyring`]): the
//!   root set in force from version N on, and the current release and online keys (online keys
//!   may carry an expiry). The server serves every version at `GET /v1/keyring`.
//!
//! # Walking versions ([`TrustState::advance`])
//! A client starts at version 0 with the pinned root. Version N+1 is accepted only when
//! - it verifies against the root set of version N with that set's threshold, where each key
//!   id counts once (DSSE refuses an envelope that names a key twice);
//! - if it changes the root set, it also verifies against its own new root set and threshold
//!   (so rotating root needs the old and the new threshold);
//! - its version is exactly N+1: a skipped version ([`KeyringError::Skipped`]) or one not
//!   newer than N ([`KeyringError::Rollback`]) is refused;
//! - it is well formed: a threshold between 1 and the number of root keys, key ids that match
//!   their keys, only `release` and `online` keys outside the root set, at least one of each.
//!
//! Decisions name the keyring version whose online key signed them; a client accepts only
//! decisions for the version it holds, and compares decision sequences within one version, so
//! a sequence poisoned with a stolen online key stops mattering once the key is rotated.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::errors::ErrorCode;
use crate::names::KeyId;
use crate::trust::dsse::{DsseError, DsseLimits, Envelope, KeyRing, KeyRole, verify};
use crate::trust::key_release::KeyReleaseKey;
use crate::trust::{TrustError, TrustFile, TrustedKeyEntry};

/// DSSE payload type of a keyring.
pub const KEYRING_PAYLOAD_TYPE: &str = "application/vnd.ferry.keyring+json";

/// Most root keys in a root set (and most keys in a keyring), against endless data.
pub const MAX_KEYS: usize = 32;

/// The root keys and how many must sign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootSet {
    /// Valid signatures by distinct root keys that a keyring needs.
    pub threshold: u32,
    /// The root keys (role `root`).
    pub keys: Vec<TrustedKeyEntry>,
}

/// One current release or online key in a keyring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyringKey {
    /// The key, with role `release` or `online`.
    #[serde(flatten)]
    pub key: TrustedKeyEntry,
    /// After this instant clients refuse what the key signs (online keys only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub expires_at: Option<OffsetDateTime>,
}

/// The keyring document (the payload of a keyring envelope).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keyring {
    /// The payload's format (absent: 1; see [`crate::wire::protocol::FORMAT`]).
    #[serde(
        default = "crate::wire::protocol::format_one",
        skip_serializing_if = "crate::wire::protocol::is_format_one"
    )]
    pub format: u32,
    /// 1, 2, ...: each version is signed by the root set of the one before (version 1 by the
    /// pinned root).
    pub version: u64,
    /// When it was made (informational).
    #[serde(with = "time::serde::rfc3339")]
    pub created: OffsetDateTime,
    /// The root set from this version on.
    pub root: RootSet,
    /// The current release and online keys.
    pub keys: Vec<KeyringKey>,
    /// The server's key-release keys, current first (an additive v1 field; see
    /// [`crate::trust::key_release`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_release: Vec<KeyReleaseKey>,
}

/// The body of `GET /v1/keyring`: every keyring version, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyringResponse {
    /// The newest version (0: the server runs a fixed trust file and serves no keyring).
    pub version: u64,
    /// The envelopes, versions 1 to `version` in order.
    pub keyrings: Vec<Envelope>,
}

/// Why a keyring was refused. Each variant has its own [`KeyringError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// The signatures do not meet a root threshold.
    #[error("keyring version {version}: {source}")]
    Signature {
        /// The version it claims.
        version: u64,
        /// Why the signatures failed.
        source: DsseError,
    },
    /// The document is malformed or breaks a rule (threshold, key ids, roles).
    #[error("keyring version {version} is invalid: {why}")]
    Invalid {
        /// The version it claims (0 when unreadable).
        version: u64,
        /// What is wrong.
        why: String,
    },
    /// The keyring is in a format this build cannot read.
    #[error(transparent)]
    Format(#[from] crate::wire::protocol::FormatError),
    /// A version was skipped.
    #[error("keyring version {got} follows version {held}: version {} is missing", held + 1)]
    Skipped {
        /// The version held.
        held: u64,
        /// The version offered.
        got: u64,
    },
    /// The version is not newer than the one held.
    #[error("keyring version {got} is not newer than version {held}, already trusted")]
    Rollback {
        /// The version held.
        held: u64,
        /// The version offered.
        got: u64,
    },
    /// The trust file pins no root key, so keyrings cannot be used.
    #[error(
        "the trust file pins no root key; it cannot accept keyrings (rotation needs a trust file from `ferry keys generate`)"
    )]
    NoRoot,
}

impl KeyringError {
    /// Stable machine-readable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            KeyringError::Signature { source, .. } => source.code(),
            KeyringError::Invalid { .. } | KeyringError::NoRoot => ErrorCode::KeyringInvalid,
            KeyringError::Skipped { .. } => ErrorCode::KeyringSkipped,
            KeyringError::Format(_) => ErrorCode::FormatUnsupported,
            KeyringError::Rollback { .. } => ErrorCode::KeyringRollback,
        }
    }
}

impl Keyring {
    /// Parses a keyring payload and checks its rules (not its signatures).
    pub fn from_json(bytes: &[u8]) -> Result<Self, KeyringError> {
        crate::wire::protocol::check_format("keyring", bytes)?;
        let k: Keyring = serde_json::from_slice(bytes).map_err(|e| KeyringError::Invalid {
            version: 0,
            why: e.to_string(),
        })?;
        k.check()?;
        Ok(k)
    }

    fn check(&self) -> Result<(), KeyringError> {
        let invalid = |why: String| KeyringError::Invalid {
            version: self.version,
            why,
        };
        if self.version == 0 {
            return Err(invalid("versions start at 1".into()));
        }
        root_ring(&self.root).map_err(|e| invalid(e.0))?;
        if self.keys.len() > MAX_KEYS {
            return Err(invalid(format!("more than {MAX_KEYS} keys")));
        }
        let mut ids = BTreeSet::new();
        for k in &self.keys {
            if k.key.role == KeyRole::Root {
                return Err(invalid(format!(
                    "key {} is a root key outside the root set",
                    k.key.keyid
                )));
            }
            if !ids.insert(k.key.keyid) {
                return Err(invalid(format!("key {} is listed twice", k.key.keyid)));
            }
        }
        let file = TrustFile {
            keys: self.keys.iter().map(|k| k.key.clone()).collect(),
            ..TrustFile::default()
        };
        file.to_keyring().map_err(|e| invalid(e.0))?;
        for role in [KeyRole::Release, KeyRole::Online] {
            if !self.keys.iter().any(|k| k.key.role == role) {
                return Err(invalid(format!("no {role} key")));
            }
        }
        if self.key_release.len() > MAX_KEYS {
            return Err(invalid(format!("more than {MAX_KEYS} key-release keys")));
        }
        for k in &self.key_release {
            k.x25519_public().map_err(invalid)?;
        }
        Ok(())
    }

    /// The version an envelope claims, without checking anything: only to pass over
    /// envelopes already held (never to trust one).
    pub fn peek_version(env: &Envelope) -> Option<u64> {
        #[derive(Deserialize)]
        struct Peek {
            version: u64,
        }
        let bytes = crate::trust::dsse::decode_payload(env, &DsseLimits::default()).ok()?;
        serde_json::from_slice::<Peek>(&bytes)
            .ok()
            .map(|p| p.version)
    }
}

/// The root set as a key ring of role `root`, after checking the threshold and key ids.
fn root_ring(root: &RootSet) -> Result<KeyRing, TrustError> {
    if root.keys.is_empty() || root.keys.len() > MAX_KEYS {
        return Err(TrustError(format!(
            "a root set has 1 to {MAX_KEYS} keys, not {}",
            root.keys.len()
        )));
    }
    if root.threshold == 0 || root.threshold as usize > root.keys.len() {
        return Err(TrustError(format!(
            "root threshold {} is not between 1 and the {} root key(s)",
            root.threshold,
            root.keys.len()
        )));
    }
    if let Some(k) = root.keys.iter().find(|k| k.role != KeyRole::Root) {
        return Err(TrustError(format!(
            "key {} in the root set is a {} key",
            k.keyid, k.role
        )));
    }
    let distinct: BTreeSet<_> = root.keys.iter().map(|k| k.keyid).collect();
    if distinct.len() != root.keys.len() {
        return Err(TrustError("a root key is listed twice".into()));
    }
    TrustFile {
        keys: root.keys.clone(),
        ..TrustFile::default()
    }
    .to_keyring()
}

/// What a client (or a server) trusts now: the pinned root walked forward through keyrings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustState {
    version: u64,
    root: Option<RootSet>,
    keys: Vec<KeyringKey>,
    key_release: Vec<KeyReleaseKey>,
    created: Option<OffsetDateTime>,
}

impl TrustState {
    /// Starts from a pinned trust file: its root set, expecting keyring version `first_keyring`
    /// (default 1) next, or, for a trust file without root keys, its release and online keys
    /// (which never change; version 0).
    pub fn from_trust_file(file: &TrustFile) -> Result<Self, TrustError> {
        let roots: Vec<TrustedKeyEntry> = file
            .keys
            .iter()
            .filter(|k| k.role == KeyRole::Root)
            .cloned()
            .collect();
        if roots.is_empty() {
            file.to_keyring()?;
            return Ok(Self {
                version: 0,
                root: None,
                keys: file
                    .keys
                    .iter()
                    .map(|k| KeyringKey {
                        key: k.clone(),
                        expires_at: None,
                    })
                    .collect(),
                key_release: Vec::new(),
                created: None,
            });
        }
        if roots.len() != file.keys.len() {
            return Err(TrustError(
                "a trust file lists either root keys or release and online keys, not both".into(),
            ));
        }
        let root = RootSet {
            threshold: file.threshold.unwrap_or(1),
            keys: roots,
        };
        root_ring(&root)?;
        let first = file.first_keyring.unwrap_or(1);
        if first == 0 {
            return Err(TrustError("first_keyring starts at 1".into()));
        }
        Ok(Self {
            version: first - 1,
            root: Some(root),
            keys: Vec::new(),
            key_release: Vec::new(),
            created: None,
        })
    }

    /// The keyring version held (0: only the pinned file).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// True when the trust is rooted (keyrings can rotate its keys).
    pub fn is_rooted(&self) -> bool {
        self.root.is_some()
    }

    /// The root set in force (`None` for a fixed trust file).
    pub fn root(&self) -> Option<&RootSet> {
        self.root.as_ref()
    }

    /// The current release and online keys.
    pub fn keys(&self) -> &[KeyringKey] {
        &self.keys
    }

    /// The server's key-release keys in the keyring held, current first (none for a fixed
    /// trust file).
    pub fn key_release(&self) -> &[KeyReleaseKey] {
        &self.key_release
    }

    /// Accepts keyring version `version + 1` (see the module docs for every check).
    pub fn advance(&mut self, env: &Envelope) -> Result<(), KeyringError> {
        let root = self.root.as_ref().ok_or(KeyringError::NoRoot)?;
        let claimed = Keyring::peek_version(env).unwrap_or(0);
        let held_ring = root_ring(root).map_err(|e| KeyringError::Invalid {
            version: self.version,
            why: e.0,
        })?;
        let signature = |source| KeyringError::Signature {
            version: claimed,
            source,
        };
        let limits = DsseLimits::default();
        let bytes = verify(
            env,
            KEYRING_PAYLOAD_TYPE,
            &held_ring,
            KeyRole::Root,
            root.threshold as usize,
            &limits,
        )
        .map_err(signature)?
        .into_inner();
        let next = Keyring::from_json(&bytes)?;
        if next.version <= self.version {
            return Err(KeyringError::Rollback {
                held: self.version,
                got: next.version,
            });
        }
        if next.version != self.version + 1 {
            return Err(KeyringError::Skipped {
                held: self.version,
                got: next.version,
            });
        }
        if next.root != *root {
            let new_ring = root_ring(&next.root).map_err(|e| KeyringError::Invalid {
                version: next.version,
                why: e.0,
            })?;
            verify(
                env,
                KEYRING_PAYLOAD_TYPE,
                &new_ring,
                KeyRole::Root,
                next.root.threshold as usize,
                &limits,
            )
            .map_err(signature)?;
        }
        self.version = next.version;
        self.root = Some(next.root);
        self.keys = next.keys;
        self.key_release = next.key_release;
        self.created = Some(next.created);
        Ok(())
    }

    /// When the keyring version held was made (`None` before the first, or for a fixed trust
    /// file): no time a server vouches for can be earlier.
    pub fn created(&self) -> Option<OffsetDateTime> {
        self.created
    }

    /// Walks `chain` (versions in order; those already held are passed over). Stops at the
    /// first envelope refused, keeping every version accepted before it.
    pub fn advance_all(&mut self, chain: &[Envelope]) -> Result<(), KeyringError> {
        for env in chain {
            if Keyring::peek_version(env).is_some_and(|v| v <= self.version) {
                continue;
            }
            self.advance(env)?;
        }
        Ok(())
    }

    /// The release and online keys to verify with at `now`: online keys past their expiry are
    /// left out.
    pub fn ring_at(&self, now: OffsetDateTime) -> KeyRing {
        let mut ring = KeyRing::new();
        for k in &self.keys {
            if k.key.role == KeyRole::Online && k.expires_at.is_some_and(|e| e <= now) {
                continue;
            }
            if let Ok(key) = k.key.public_key() {
                ring.insert(k.key.role, key);
            }
        }
        ring
    }

    /// The expiry of a current online key, when it has one.
    pub fn expiry_of(&self, id: &KeyId) -> Option<OffsetDateTime> {
        self.keys
            .iter()
            .find(|k| k.key.keyid == *id)
            .and_then(|k| k.expires_at)
    }
}

#[cfg(test)]
mod tests;
