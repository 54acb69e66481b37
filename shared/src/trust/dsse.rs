//! DSSE envelopes signed with ed25519 or ECDSA P-256 ([`crate::trust::key`]).
//!
//! An envelope carries a payload type, the exact payload bytes (base64) and one or more
//! signatures, each naming its key by [`KeyId`]. Signatures cover the DSSE
//! pre-authentication encoding `"DSSEv1" SP len(type) SP type SP len(payload) SP payload`, so
//! the signed bytes are exactly the bytes that get parsed: no JSON canonicalisation.
//!
//! Verification ([`verify`]) checks, in this order: size limits, the payload type, duplicate
//! key ids, then every signature against a [`KeyRing`] of trusted keys with a role; it succeeds
//! when at least `threshold` distinct keys of the required role have valid signatures. Only a
//! successful verification builds a [`Verified`] value.

use crate::errors::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey};
use serde::{Deserialize, Serialize};

use crate::names::KeyId;
use crate::trust::key::{PublicKey, SignatureFault};

/// A DSSE envelope as it travels in JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Base64 (standard alphabet, padded) of the payload bytes.
    pub payload: String,
    /// What the payload is, for example [`crate::manifest::RELEASE_PAYLOAD_TYPE`].
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// The signatures.
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature in an [`Envelope`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    /// Hex key id of the signer (see [`KeyId`]).
    pub keyid: String,
    /// Base64 of the signature: 64 bytes for ed25519, DER for ECDSA P-256.
    pub sig: String,
}

/// What a trusted key may sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyRole {
    /// Signs keyrings (the trust root pinned in apps).
    Root,
    /// Offline key that signs release manifests.
    Release,
    /// Online key that signs resolve responses.
    Online,
}

impl fmt::Display for KeyRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyRole::Root => "root",
            KeyRole::Release => "release",
            KeyRole::Online => "online",
        })
    }
}

/// Documented limits on envelopes, against endless-data attacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DsseLimits {
    /// Largest decoded payload (default 4 MiB).
    pub max_payload: usize,
    /// Most signatures in one envelope (default 16).
    pub max_signatures: usize,
}

impl Default for DsseLimits {
    fn default() -> Self {
        Self {
            max_payload: 4 << 20,
            max_signatures: 16,
        }
    }
}

/// Why an envelope was refused. Each variant has its own [`DsseError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DsseError {
    /// The envelope itself could not be decoded.
    #[error("malformed envelope: {0}")]
    Malformed(String),
    /// The payload is larger than the limit.
    #[error("envelope payload is {size} bytes; at most {max} are allowed")]
    TooLarge {
        /// Decoded (or estimated) payload size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The payload type is not the one expected.
    #[error("payload type is {actual:?}, expected {expected:?}")]
    PayloadType {
        /// Expected type.
        expected: String,
        /// Type in the envelope.
        actual: String,
    },
    /// No signatures at all.
    #[error("envelope has no signatures")]
    NoSignatures,
    /// More signatures than the limit.
    #[error("envelope has {count} signatures; at most {max} are allowed")]
    TooManySignatures {
        /// Signatures present.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The same key id appears twice (it must not be counted twice toward a threshold).
    #[error("key {keyid} signs the envelope more than once")]
    DuplicateSignature {
        /// The repeated key id.
        keyid: String,
    },
    /// A signature names a key that is not trusted.
    #[error("signature by unknown key {keyid}")]
    UnknownKey {
        /// The key id as written in the envelope.
        keyid: String,
    },
    /// A signature is by a trusted key that may not sign this kind of payload.
    #[error("key {keyid} is a {actual} key; this payload must be signed by a {expected} key")]
    WrongRole {
        /// The signer.
        keyid: String,
        /// The role required.
        expected: KeyRole,
        /// The role the key has.
        actual: KeyRole,
    },
    /// A signature is not well formed for its key's algorithm.
    #[error("signature by {keyid} is malformed: {why}")]
    SignatureMalformed {
        /// The signer.
        keyid: String,
        /// What is wrong with it.
        why: String,
    },
    /// A signature does not verify over the payload.
    #[error("signature by {keyid} does not match the payload")]
    SignatureInvalid {
        /// The signer.
        keyid: String,
    },
    /// Fewer valid signatures than required.
    #[error("{valid} valid {role} signature(s), {needed} required")]
    Threshold {
        /// The role required.
        role: KeyRole,
        /// Valid signatures found.
        valid: usize,
        /// Required.
        needed: usize,
    },
}

impl DsseError {
    /// Stable machine-readable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            DsseError::Malformed(_) => ErrorCode::EnvelopeMalformed,
            DsseError::TooLarge { .. } => ErrorCode::EnvelopeTooLarge,
            DsseError::PayloadType { .. } => ErrorCode::PayloadTypeMismatch,
            DsseError::NoSignatures => ErrorCode::SignatureMissing,
            DsseError::TooManySignatures { .. } => ErrorCode::SignatureTooMany,
            DsseError::DuplicateSignature { .. } => ErrorCode::SignatureDuplicate,
            DsseError::UnknownKey { .. } => ErrorCode::KeyUnknown,
            DsseError::WrongRole { .. } => ErrorCode::KeyWrongRole,
            DsseError::SignatureMalformed { .. } => ErrorCode::SignatureMalformed,
            DsseError::SignatureInvalid { .. } => ErrorCode::SignatureInvalid,
            DsseError::Threshold { .. } => ErrorCode::SignatureThreshold,
        }
    }
}

/// The DSSE pre-authentication encoding of `payload_type` and `payload`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// An ed25519 key pair that signs envelopes.
pub struct KeyPair {
    id: KeyId,
    key: SigningKey,
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPair").field("id", &self.id).finish()
    }
}

impl KeyPair {
    /// Builds the key pair from a 32-byte secret seed (the caller supplies randomness).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        let key = SigningKey::from_bytes(seed);
        let id = KeyId::of_public_key(key.verifying_key().as_bytes());
        Self { id, key }
    }

    /// The key id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    /// The 32 public key bytes.
    pub fn public(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// The public key, as trust files and key rings hold it.
    pub fn public_key(&self) -> PublicKey {
        PublicKey::Ed25519(self.key.verifying_key())
    }

    /// The 32 secret seed bytes (handle with care).
    pub fn seed(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// Signs `message` as it is (for a signer source that builds the envelope itself).
    pub fn sign_message(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }

    /// Signs `payload` into a new envelope with one signature.
    pub fn sign(&self, payload_type: &str, payload: &[u8]) -> Envelope {
        let mut env = Envelope {
            payload: B64.encode(payload),
            payload_type: payload_type.to_string(),
            signatures: Vec::new(),
        };
        self.add_signature_raw(&mut env, payload);
        env
    }

    /// Adds this key's signature to an existing envelope (for thresholds above one).
    pub fn add_signature(&self, env: &mut Envelope) -> Result<(), DsseError> {
        let payload = B64
            .decode(env.payload.as_bytes())
            .map_err(|e| DsseError::Malformed(format!("payload is not base64: {e}")))?;
        self.add_signature_raw(env, &payload);
        Ok(())
    }

    fn add_signature_raw(&self, env: &mut Envelope, payload: &[u8]) {
        let sig = self.key.sign(&pae(&env.payload_type, payload));
        env.signatures.push(EnvelopeSignature {
            keyid: self.id.to_hex(),
            sig: B64.encode(sig.to_bytes()),
        });
    }
}

impl Envelope {
    /// A new envelope for `payload` with no signature yet (see [`Envelope::signing_input`]).
    pub fn unsigned(payload_type: &str, payload: &[u8]) -> Self {
        Envelope {
            payload: B64.encode(payload),
            payload_type: payload_type.to_string(),
            signatures: Vec::new(),
        }
    }

    /// The exact bytes a signer signs: the pre-authentication encoding of this envelope's type
    /// and payload.
    pub fn signing_input(&self) -> Result<Vec<u8>, DsseError> {
        let payload = B64
            .decode(self.payload.as_bytes())
            .map_err(|e| DsseError::Malformed(format!("payload is not base64: {e}")))?;
        Ok(pae(&self.payload_type, &payload))
    }

    /// Adds a signature made elsewhere (an HSM, a KMS) by the key `keyid` over
    /// [`Envelope::signing_input`]. Nothing is checked here: verify the result.
    pub fn push_signature(&mut self, keyid: KeyId, signature: &[u8]) {
        self.signatures.push(EnvelopeSignature {
            keyid: keyid.to_hex(),
            sig: B64.encode(signature),
        });
    }
}

/// A trusted public key and what it may sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// Its id.
    pub id: KeyId,
    /// Its role.
    pub role: KeyRole,
    key: PublicKey,
}

impl TrustedKey {
    /// The public key (its algorithm and bytes).
    pub fn key(&self) -> &PublicKey {
        &self.key
    }
}

/// The set of keys a verifier trusts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRing {
    keys: BTreeMap<KeyId, TrustedKey>,
}

pub use crate::trust::key::BadPublicKey;

impl KeyRing {
    /// An empty key ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the ed25519 key `public` for `role`; returns its id. A key has exactly one role:
    /// adding it again replaces the role.
    pub fn add(&mut self, role: KeyRole, public: &[u8; 32]) -> Result<KeyId, BadPublicKey> {
        let key = PublicKey::from_bytes(&crate::trust::key::Algorithm::Ed25519, public)?;
        Ok(self.insert(role, key))
    }

    /// Trusts `key` (of either algorithm) for `role`; returns its id.
    pub fn insert(&mut self, role: KeyRole, key: PublicKey) -> KeyId {
        let id = key.id();
        self.keys.insert(id, TrustedKey { id, role, key });
        id
    }

    /// The key with id `id`.
    pub fn get(&self, id: &KeyId) -> Option<&TrustedKey> {
        self.keys.get(id)
    }

    /// All keys, ordered by id.
    pub fn keys(&self) -> impl Iterator<Item = &TrustedKey> {
        self.keys.values()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A value that came out of a successful signature verification.
///
/// Only [`verify`] builds one (from the payload bytes); [`Verified::try_map`] derives another
/// from it, so holding a `Verified<T>` means `T` was computed from verified bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified<T> {
    value: T,
    signers: Vec<KeyId>,
}

impl<T> Verified<T> {
    /// The verified value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// Unwraps the value, dropping the proof of verification.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The keys whose valid signatures counted.
    pub fn signers(&self) -> &[KeyId] {
        &self.signers
    }

    /// Derives a new verified value from this one.
    pub fn try_map<U, E>(self, f: impl FnOnce(T) -> Result<U, E>) -> Result<Verified<U>, E> {
        Ok(Verified {
            value: f(self.value)?,
            signers: self.signers,
        })
    }
}

impl<T> std::ops::Deref for Verified<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// The payload bytes of `env`, within `limits`, without checking any signature: only for
/// reading a field that decides which keys to verify with (never for acting on the payload).
pub fn decode_payload(env: &Envelope, limits: &DsseLimits) -> Result<Vec<u8>, DsseError> {
    let estimated = env.payload.len() / 4 * 3;
    if estimated > limits.max_payload.saturating_add(3) {
        return Err(DsseError::TooLarge {
            size: estimated,
            max: limits.max_payload,
        });
    }
    B64.decode(env.payload.as_bytes())
        .map_err(|e| DsseError::Malformed(format!("payload is not base64: {e}")))
}

/// Verifies `env` against `ring`: the payload type must be `payload_type`, and at least
/// `threshold` (minimum 1) distinct trusted keys of `role` must have signed it.
///
/// Signatures by unknown keys are ignored when the threshold is met anyway (so a key ring can
/// be rotated); otherwise the first failure is reported when no signature was valid.
pub fn verify(
    env: &Envelope,
    payload_type: &str,
    ring: &KeyRing,
    role: KeyRole,
    threshold: usize,
    limits: &DsseLimits,
) -> Result<Verified<Vec<u8>>, DsseError> {
    // The base64 text is 4/3 of the payload: refuse before decoding anything large.
    let estimated = env.payload.len() / 4 * 3;
    if estimated > limits.max_payload.saturating_add(3) {
        return Err(DsseError::TooLarge {
            size: estimated,
            max: limits.max_payload,
        });
    }
    if env.payload_type != payload_type {
        return Err(DsseError::PayloadType {
            expected: payload_type.to_string(),
            actual: env.payload_type.chars().take(200).collect(),
        });
    }
    if env.signatures.is_empty() {
        return Err(DsseError::NoSignatures);
    }
    if env.signatures.len() > limits.max_signatures {
        return Err(DsseError::TooManySignatures {
            count: env.signatures.len(),
            max: limits.max_signatures,
        });
    }
    let mut seen = BTreeSet::new();
    for s in &env.signatures {
        if !seen.insert(s.keyid.to_ascii_lowercase()) {
            return Err(DsseError::DuplicateSignature {
                keyid: clip(&s.keyid),
            });
        }
    }
    let payload = B64
        .decode(env.payload.as_bytes())
        .map_err(|e| DsseError::Malformed(format!("payload is not base64: {e}")))?;
    if payload.len() > limits.max_payload {
        return Err(DsseError::TooLarge {
            size: payload.len(),
            max: limits.max_payload,
        });
    }
    let message = pae(&env.payload_type, &payload);
    let needed = threshold.max(1);
    let mut signers = Vec::new();
    let mut first_failure = None;
    for s in &env.signatures {
        match check_one(s, ring, role, &message) {
            Ok(id) => signers.push(id),
            Err(e) => {
                first_failure.get_or_insert(e);
            }
        }
    }
    if signers.len() >= needed {
        return Ok(Verified {
            value: payload,
            signers,
        });
    }
    match first_failure {
        Some(e) if signers.is_empty() => Err(e),
        _ => Err(DsseError::Threshold {
            role,
            valid: signers.len(),
            needed,
        }),
    }
}

fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

fn check_one(
    s: &EnvelopeSignature,
    ring: &KeyRing,
    role: KeyRole,
    message: &[u8],
) -> Result<KeyId, DsseError> {
    let keyid = clip(&s.keyid);
    let id = KeyId::from_hex(&s.keyid).map_err(|_| DsseError::UnknownKey {
        keyid: keyid.clone(),
    })?;
    let trusted = ring.get(&id).ok_or_else(|| DsseError::UnknownKey {
        keyid: keyid.clone(),
    })?;
    if trusted.role != role {
        return Err(DsseError::WrongRole {
            keyid,
            expected: role,
            actual: trusted.role,
        });
    }
    let raw = B64
        .decode(s.sig.as_bytes())
        .map_err(|e| DsseError::SignatureMalformed {
            keyid: keyid.clone(),
            why: format!("not base64: {e}"),
        })?;
    trusted.key.verify(message, &raw).map_err(|f| match f {
        SignatureFault::Malformed(why) => DsseError::SignatureMalformed { keyid, why },
        SignatureFault::Invalid => DsseError::SignatureInvalid { keyid },
    })?;
    Ok(id)
}

#[cfg(test)]
mod tests;
