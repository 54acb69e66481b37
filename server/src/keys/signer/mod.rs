//! Signer sources: every offline signature ferry makes (a release, a revocation list, a
//! keyring) goes through one [`Signer`], chosen by the scheme of the key's URI, in the shape of
//! tough's `KeySource`:
//!
//! | `--key` | where the private key is | how ferry signs |
//! |---|---|---|
//! | a path (or `file:PATH`) | a ferry key file, maybe encrypted ([`crate::keys::sealed`]) | in this process |
//! | `pkcs11:token=…;object=…?module-path=…&pin-source=…` (RFC 7512) | an HSM, smart card or SoftHSM token | `C_Sign` in the token ([`pkcs11`]) |
//! | `exec:COMMAND ARGS…` | anywhere a program can reach (a cloud KMS, a hardware wallet) | `COMMAND sign` ([`exec`]) |
//!
//! Whatever the source, ferry checks each signature against the source's public key before
//! it is used, so a signer that answers with the wrong key or garbage fails here, never on a
//! device. Failures carry a [`SignerErrorKind`] that chooses the command's exit code.

pub mod exec;
pub mod pkcs11;

use std::path::Path;

use ferry_shared::KeyId;
use ferry_shared::trust::dsse::{Envelope, KeyRole};
use ferry_shared::trust::key::PublicKey;

/// Why a signer failed, by what the operator has to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignerErrorKind {
    /// The token refused the PIN, is locked, or no PIN was given (exit 3).
    Refused,
    /// The token, its library or the signer program cannot be reached (exit 7).
    Unreachable,
    /// Anything else: a missing object, a signer that failed or printed garbage (exit 1).
    Failed,
}

/// A signer that could not sign (or be opened). Nothing was signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SignerError {
    /// What kind of failure.
    pub kind: SignerErrorKind,
    /// What happened, for the operator.
    pub message: String,
}

impl SignerError {
    /// A failure of `kind`.
    pub fn new(kind: SignerErrorKind, message: impl Into<String>) -> Self {
        SignerError {
            kind,
            message: message.into(),
        }
    }
}

/// One signing key, wherever it is kept.
pub trait Signer {
    /// Its public key (which says the algorithm).
    fn public(&self) -> PublicKey;

    /// The role its key file names (`None` for keys kept outside ferry's files: the keyring
    /// says what they may sign).
    fn role(&self) -> Option<KeyRole> {
        None
    }

    /// Where the key is, for messages (never a secret: no PIN).
    fn describe(&self) -> String;

    /// Signs `message` (a DSSE pre-authentication encoding) and returns the signature in its
    /// wire form: 64 bytes for ed25519, DER for ECDSA P-256.
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignerError>;

    /// The key id.
    fn id(&self) -> KeyId {
        self.public().id()
    }
}

/// A ferry key file as a [`Signer`].
#[derive(Debug)]
pub struct FileSigner {
    key: crate::keys::RoleKey,
    public: PublicKey,
    path: String,
}

impl FileSigner {
    /// Wraps a loaded key file.
    pub fn new(key: crate::keys::RoleKey, path: &Path) -> Self {
        let public = key.pair.public_key();
        FileSigner {
            key,
            public,
            path: path.display().to_string(),
        }
    }
}

impl FileSigner {
    /// The key file's key.
    pub fn key(&self) -> &crate::keys::RoleKey {
        &self.key
    }
}

impl Signer for FileSigner {
    fn public(&self) -> PublicKey {
        self.public.clone()
    }

    fn role(&self) -> Option<KeyRole> {
        Some(self.key.role)
    }

    fn describe(&self) -> String {
        format!("key file {}", self.path)
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignerError> {
        Ok(self.key.pair.sign_message(message).to_vec())
    }
}

/// A loaded key file signs as itself too (tests and the demo hold them without a path).
impl Signer for crate::keys::RoleKey {
    fn public(&self) -> PublicKey {
        self.pair.public_key()
    }

    fn role(&self) -> Option<KeyRole> {
        Some(self.role)
    }

    fn describe(&self) -> String {
        format!("{} key {}", self.role, self.pair.id())
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignerError> {
        Ok(self.pair.sign_message(message).to_vec())
    }
}

/// Opens the signer `spec` names (see the module docs). A file key that is encrypted asks for
/// its passphrase here.
pub fn open(spec: &str) -> anyhow::Result<Box<dyn Signer>> {
    if let Some(rest) = spec.strip_prefix("pkcs11:") {
        return Ok(Box::new(pkcs11::Pkcs11Signer::open(rest)?));
    }
    if let Some(rest) = spec.strip_prefix("exec:") {
        return Ok(Box::new(exec::ExecSigner::open(rest)?));
    }
    let path = spec.strip_prefix("file:").unwrap_or(spec);
    let looks_like_uri = spec.split_once(':').is_some_and(|(scheme, _)| {
        scheme.len() > 1
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.')
    });
    if looks_like_uri && !spec.starts_with("file:") && !Path::new(spec).exists() {
        let scheme = spec.split_once(':').map(|(s, _)| s).unwrap_or_default();
        return Err(SignerError::new(
            SignerErrorKind::Failed,
            format!(
                "unknown key scheme {scheme:?} in {spec:?}: --key takes a key file path, a \
                 pkcs11: URI or exec:COMMAND (for a cloud KMS, use exec: with its CLI; \
                 docs/keys.md has recipes)"
            ),
        )
        .into());
    }
    let path = Path::new(path);
    let key = crate::keys::load(path)?;
    Ok(Box::new(FileSigner::new(key, path)))
}

/// Signs `payload` into a new envelope with `signer`'s signature, checked against its public
/// key first.
pub fn sign_envelope(
    signer: &dyn Signer,
    payload_type: &str,
    payload: &[u8],
) -> anyhow::Result<Envelope> {
    let mut env = Envelope::unsigned(payload_type, payload);
    add_signature(signer, &mut env)?;
    Ok(env)
}

/// Adds `signer`'s signature to `env`, after checking it against the signer's public key.
pub fn add_signature(signer: &dyn Signer, env: &mut Envelope) -> anyhow::Result<()> {
    let message = env.signing_input()?;
    let sig = signer.sign(&message)?;
    if signer.public().verify(&message, &sig).is_err() {
        return Err(SignerError::new(
            SignerErrorKind::Failed,
            format!(
                "{} answered with a signature that does not verify under its public key {} \
                 ({}); nothing was signed",
                signer.describe(),
                signer.id(),
                signer.public().algorithm()
            ),
        )
        .into());
    }
    env.push_signature(signer.id(), &sig);
    Ok(())
}

/// Turns an ECDSA P-256 signature given as DER or as the fixed 64-byte `r ‖ s` (what PKCS#11
/// and some KMSs return) into DER; `None` when it is neither.
pub fn p256_der(sig: &[u8]) -> Option<Vec<u8>> {
    if let Ok(s) = p256::ecdsa::Signature::from_der(sig) {
        return Some(s.to_der().as_bytes().to_vec());
    }
    p256::ecdsa::Signature::from_slice(sig)
        .ok()
        .map(|s| s.to_der().as_bytes().to_vec())
}

/// Reads a public key from PEM (SubjectPublicKeyInfo): ed25519 or P-256.
pub fn public_from_pem(pem: &str) -> Result<PublicKey, String> {
    use ed25519_dalek::pkcs8::DecodePublicKey as _;
    if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_pem(pem) {
        return PublicKey::from_bytes(&ferry_shared::trust::key::Algorithm::Ed25519, k.as_bytes())
            .map_err(|e| e.to_string());
    }
    match <p256::ecdsa::VerifyingKey as p256::pkcs8::DecodePublicKey>::from_public_key_pem(pem) {
        Ok(k) => Ok(PublicKey::P256(k)),
        Err(_) => Err(
            "not a PEM public key (SubjectPublicKeyInfo) of an ed25519 or P-256 key".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests;
