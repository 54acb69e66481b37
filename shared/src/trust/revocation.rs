//! Release revocations: a list per model, signed by a release key, of releases no device may
//! load any more (a bad build, a leaked model, a release signed by a compromised key).
//!
//! The list is versioned: version N+1 must keep every entry of version N (a revocation is
//! permanent) and add at least one. Servers never offer a revoked release and put the list
//! into every resolve answer; the decision names the list version it was made with, so an
//! answer that leaves the list out is detected. Clients keep the newest list they verified per
//! model, never go back to an older one, and refuse a revoked release, also from their cache
//! when offline.

use std::collections::BTreeSet;

use semver::Version;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ModelName;
use crate::errors::ErrorCode;
use crate::trust::dsse::{DsseError, DsseLimits, Envelope, KeyRing, KeyRole, Verified, verify};

/// DSSE payload type of a revocation list.
pub const REVOCATIONS_PAYLOAD_TYPE: &str = "application/vnd.ferry.revocations+json";

/// Most entries in one list.
pub const MAX_REVOKED: usize = 1000;

/// Longest reason, in bytes.
pub const MAX_REASON: usize = 500;

/// One revoked release. Unknown fields are ignored (protocol v1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// The release version.
    pub release: Version,
    /// Why (shown to operators and in the client's error).
    pub reason: String,
    /// When it was revoked.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// A model's revocation list (the payload of a revocation envelope). Unknown fields are
/// ignored (protocol v1); a newer `format` is refused with `format_unsupported`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevocationList {
    /// The payload's format (absent: 1; see [`crate::wire::protocol::FORMAT`]).
    #[serde(
        default = "crate::wire::protocol::format_one",
        skip_serializing_if = "crate::wire::protocol::is_format_one"
    )]
    pub format: u32,
    /// The model.
    pub model: ModelName,
    /// 1, 2, ...: each version keeps every entry of the one before.
    pub version: u64,
    /// The revoked releases.
    pub revoked: Vec<Revoked>,
}

/// Why a revocation list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevocationError {
    /// The signature does not verify against the release keys.
    #[error("revocation list: {0}")]
    Signature(#[from] DsseError),
    /// The list is malformed or breaks a rule.
    #[error("revocation list is invalid: {0}")]
    Invalid(String),
    /// The list is in a format this build cannot read.
    #[error(transparent)]
    Format(#[from] crate::wire::protocol::FormatError),
    /// The list does not follow the one held (not the next version, or an entry dropped).
    #[error("revocation list version {got} does not follow version {held}: {why}")]
    NotSuccessor {
        /// Version held.
        held: u64,
        /// Version offered.
        got: u64,
        /// What is wrong.
        why: String,
    },
}

impl RevocationError {
    /// Stable machine-readable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            RevocationError::Signature(e) => e.code(),
            RevocationError::Format(_) => ErrorCode::FormatUnsupported,
            RevocationError::Invalid(_) | RevocationError::NotSuccessor { .. } => {
                ErrorCode::RevocationsInvalid
            }
        }
    }
}

impl RevocationList {
    /// Parses a payload and checks its rules (not its signature).
    pub fn from_json(bytes: &[u8]) -> Result<Self, RevocationError> {
        crate::wire::protocol::check_format("revocation list", bytes)?;
        let list: RevocationList =
            serde_json::from_slice(bytes).map_err(|e| RevocationError::Invalid(e.to_string()))?;
        if list.version == 0 {
            return Err(RevocationError::Invalid("versions start at 1".into()));
        }
        if list.revoked.is_empty() || list.revoked.len() > MAX_REVOKED {
            return Err(RevocationError::Invalid(format!(
                "a list revokes 1 to {MAX_REVOKED} releases"
            )));
        }
        let mut seen = BTreeSet::new();
        for r in &list.revoked {
            if !seen.insert(&r.release) {
                return Err(RevocationError::Invalid(format!(
                    "{} is listed twice",
                    r.release
                )));
            }
            if r.reason.len() > MAX_REASON {
                return Err(RevocationError::Invalid(format!(
                    "the reason for {} is longer than {MAX_REASON} bytes",
                    r.release
                )));
            }
        }
        Ok(list)
    }

    /// The list an envelope carries, parsed and checked but with its signature NOT verified:
    /// only for a list that was verified when it was accepted (kept by a device, stored by a
    /// server) or that is about to be signed anew.
    pub fn from_accepted_envelope(env: &Envelope) -> Result<Self, RevocationError> {
        let bytes = crate::trust::dsse::decode_payload(env, &DsseLimits::default())?;
        Self::from_json(&bytes)
    }

    /// The entry revoking `release`, if any.
    pub fn revokes(&self, release: &Version) -> Option<&Revoked> {
        self.revoked.iter().find(|r| r.release == *release)
    }

    /// Checks that `self` may replace `held`: the same model, the next version, every entry of
    /// `held` kept.
    pub fn follows(&self, held: Option<&RevocationList>) -> Result<(), RevocationError> {
        let (held_version, held_entries) = held.map_or((0, &[][..]), |h| (h.version, &h.revoked));
        let refuse = |why: String| RevocationError::NotSuccessor {
            held: held_version,
            got: self.version,
            why,
        };
        if let Some(h) = held
            && h.model != self.model
        {
            return Err(refuse(format!("it is for {}, not {}", self.model, h.model)));
        }
        if self.version != held_version + 1 {
            return Err(refuse(format!("the next version is {}", held_version + 1)));
        }
        if let Some(dropped) = held_entries
            .iter()
            .find(|r| self.revokes(&r.release).is_none())
        {
            return Err(refuse(format!(
                "it drops the revocation of {} (revocations are permanent)",
                dropped.release
            )));
        }
        Ok(())
    }
}

/// Verifies a revocation envelope against the trusted release keys and parses it.
pub fn verify_revocations(
    env: &Envelope,
    ring: &KeyRing,
) -> Result<Verified<RevocationList>, RevocationError> {
    let limits = DsseLimits {
        max_payload: 1 << 20,
        ..DsseLimits::default()
    };
    verify(
        env,
        REVOCATIONS_PAYLOAD_TYPE,
        ring,
        KeyRole::Release,
        1,
        &limits,
    )?
    .try_map(|bytes| RevocationList::from_json(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::dsse::KeyPair;

    fn list(version: u64, releases: &[&str]) -> RevocationList {
        RevocationList {
            format: 1,
            model: "mlp".parse().expect("name"),
            version,
            revoked: releases
                .iter()
                .map(|r| Revoked {
                    release: r.parse().expect("version"),
                    reason: "bad build".into(),
                    at: OffsetDateTime::UNIX_EPOCH,
                })
                .collect(),
        }
    }

    #[test]
    fn signed_lists_verify_with_release_keys_only() {
        let release = KeyPair::from_seed(&[1; 32]);
        let online = KeyPair::from_seed(&[2; 32]);
        let mut ring = KeyRing::new();
        ring.add(KeyRole::Release, &release.public()).expect("key");
        ring.add(KeyRole::Online, &online.public()).expect("key");
        let bytes = serde_json::to_vec(&list(1, &["1.0.0"])).expect("json");
        let ok = release.sign(REVOCATIONS_PAYLOAD_TYPE, &bytes);
        let v = verify_revocations(&ok, &ring).expect("verifies");
        assert!(v.revokes(&"1.0.0".parse().expect("v")).is_some());
        assert!(v.revokes(&"1.1.0".parse().expect("v")).is_none());
        let by_online = online.sign(REVOCATIONS_PAYLOAD_TYPE, &bytes);
        assert_eq!(
            verify_revocations(&by_online, &ring)
                .expect_err("online key")
                .code(),
            ErrorCode::KeyWrongRole
        );
    }

    #[test]
    fn a_list_follows_only_with_the_next_version_and_every_entry_kept() {
        let one = list(1, &["1.0.0"]);
        assert!(one.follows(None).is_ok());
        assert!(list(2, &["1.0.0", "1.1.0"]).follows(Some(&one)).is_ok());
        for (bad, why) in [
            (list(3, &["1.0.0", "1.1.0"]), "skips a version"),
            (list(1, &["1.0.0", "1.1.0"]), "same version"),
            (list(2, &["1.1.0"]), "drops a revocation"),
        ] {
            assert_eq!(
                bad.follows(Some(&one)).expect_err(why).code(),
                ErrorCode::RevocationsInvalid,
                "{why}"
            );
        }
    }

    #[test]
    fn malformed_lists_are_refused() {
        for bad in [
            br#"{"model":"mlp","version":0,"revoked":[{"release":"1.0.0","reason":"","at":"2026-01-01T00:00:00Z"}]}"#.to_vec(),
            br#"{"model":"mlp","version":1,"revoked":[]}"#.to_vec(),
            br#"{"model":"mlp","version":1,"revoked":[{"release":"1.0.0","reason":"","at":"2026-01-01T00:00:00Z"},{"release":"1.0.0","reason":"","at":"2026-01-01T00:00:00Z"}]}"#.to_vec(),
            br#"{"model":"../x","version":1,"revoked":[{"release":"1.0.0","reason":"","at":"2026-01-01T00:00:00Z"}]}"#.to_vec(),
            format!(
                r#"{{"model":"mlp","version":1,"revoked":[{{"release":"1.0.0","reason":"{}","at":"2026-01-01T00:00:00Z"}}]}}"#,
                "x".repeat(MAX_REASON + 1)
            )
            .into_bytes(),
        ] {
            assert!(RevocationList::from_json(&bad).is_err(), "{}", String::from_utf8_lossy(&bad));
        }
    }

    #[test]
    fn a_newer_writer_s_fields_are_ignored_and_a_newer_format_refused() {
        let newer = br#"{"model":"mlp","version":1,"revoked":[{"release":"1.0.0","reason":"","at":"2026-01-01T00:00:00Z","by":"ops"}],"signed_by_team":"ml"}"#;
        let list = RevocationList::from_json(newer).expect("extra fields are ignored");
        assert_eq!(list.revoked.len(), 1);
        let future = br#"{"format":2,"model":"mlp","entries":[]}"#;
        let e = RevocationList::from_json(future).expect_err("format 2");
        assert_eq!(e.code(), ErrorCode::FormatUnsupported);
    }
}
