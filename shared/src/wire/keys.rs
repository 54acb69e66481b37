//! Key requests for sealed variants (`POST /v1/keys/release`): a device that chose a sealed
//! variant asks for its files' keys with the receipt of the resolve that chose it, an ephemeral
//! X25519 public key the keys are wrapped to, and, where the app has one, a platform
//! attestation token. Both messages are v1: readers ignore fields they do not know.

use serde::{Deserialize, Serialize};

use crate::names::{ModelName, Sha256Digest, VariantId};
use crate::wire::resolve::{MAX_DEVICE_STRING, MAX_INSTALL_ID};

/// Most files a request names (a program, a data file and assets).
pub const MAX_KEY_FILES: usize = 40;
/// Longest receipt accepted.
pub const MAX_RECEIPT: usize = 4096;
/// Longest attestation token accepted (16 KiB: a Play Integrity token is about 1 KB, an App
/// Attest assertion a few hundred bytes).
pub const MAX_ATTESTATION_TOKEN: usize = 16 << 10;

/// A platform attestation the app obtained for this request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attestation {
    /// Which verifier reads it (`play_integrity`, `app_attest`, or another name the server's
    /// verifier knows; 1 to 32 of `[a-z0-9_]`).
    pub kind: String,
    /// The token, as the platform gave it.
    pub token: String,
}

/// The body of `POST /v1/keys/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRequest {
    /// The model.
    pub model: ModelName,
    /// The release (version) the resolve chose.
    pub release: String,
    /// The sealed variant.
    pub variant: VariantId,
    /// The install id the resolve was for.
    pub install_id: String,
    /// The platform as the resolve reported it.
    pub platform: String,
    /// The device model as the resolve reported it.
    #[serde(default)]
    pub device_model: String,
    /// The SoC as the resolve reported it.
    #[serde(default)]
    pub soc: String,
    /// The `receipt` of the resolve answer that chose the variant.
    pub receipt: String,
    /// The sealed files whose keys are wanted (empty: all of the variant's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<Sha256Digest>,
    /// An X25519 public key (32 bytes, base64url without padding), fresh for this request: the
    /// keys come back wrapped to it.
    pub public_key: String,
    /// A platform attestation, where the app provides one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<Attestation>,
}

impl KeyRequest {
    /// The value an app binds a platform attestation to (the nonce or client data hash it
    /// passes to Play Integrity or App Attest): SHA-256 over the install id, model, release,
    /// variant and public key, each length-prefixed, as 64 hex characters. The server's
    /// verifier checks the token names it.
    pub fn binding(&self) -> String {
        use sha2::{Digest as _, Sha256};
        let mut h = Sha256::new();
        for part in [
            "ferry key request v1",
            self.install_id.as_str(),
            self.model.as_str(),
            self.release.as_str(),
            self.variant.as_str(),
            self.public_key.as_str(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        hex::encode(h.finalize())
    }

    /// Checks the fields against the limits; a message on failure.
    pub fn validate(&self) -> Result<(), String> {
        let text = |what: &str, s: &str, max: usize| -> Result<(), String> {
            if crate::names::longer_than(s, max) {
                return Err(format!("{what} is longer than {max} characters"));
            }
            if s.chars().any(char::is_control) {
                return Err(format!("{what} contains control characters"));
            }
            Ok(())
        };
        text("install_id", &self.install_id, MAX_INSTALL_ID)?;
        if self.install_id.is_empty() {
            return Err("install_id is empty".into());
        }
        text("release", &self.release, 64)?;
        text("platform", &self.platform, 32)?;
        text("device_model", &self.device_model, MAX_DEVICE_STRING)?;
        text("soc", &self.soc, MAX_DEVICE_STRING)?;
        text("receipt", &self.receipt, MAX_RECEIPT)?;
        if self.files.len() > MAX_KEY_FILES {
            return Err(format!("more than {MAX_KEY_FILES} files"));
        }
        if self.public_key.len() != 43 {
            return Err("public_key is not 32 bytes of base64url".into());
        }
        if let Some(a) = &self.attestation {
            let kind_ok = (1..=32).contains(&a.kind.len())
                && a.kind
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !kind_ok {
                return Err("attestation kind is not 1 to 32 of [a-z0-9_]".into());
            }
            text("attestation token", &a.token, MAX_ATTESTATION_TOKEN)?;
        }
        Ok(())
    }
}

/// One file's key, released to the device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedKey {
    /// The sealed file.
    pub sha256: Sha256Digest,
    /// Its file key wrapped to the request's public key for this install (80 bytes,
    /// base64url without padding).
    pub key: String,
}

/// The answer of `POST /v1/keys/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyResponse {
    /// The keys, one per file asked for.
    pub keys: Vec<ReleasedKey>,
    /// The audit record's id (for support: "which release gave this device its key").
    pub audit_id: String,
}
