//! What every signer source shares: the [`Signer`] trait, its error, and the conversions of
//! what tokens and programs hand back.

use ferry_shared::KeyId;
use ferry_shared::trust::dsse::KeyRole;
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
