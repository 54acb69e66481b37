//! Public keys of either signature algorithm ferry verifies, and the one place that checks a
//! signature against one.
//!
//! | algorithm | name in trust files and keyrings | public key (hex in `public`) | signature (base64 in `sig`) |
//! |---|---|---|---|
//! | Ed25519 | `ed25519` (also: no `algorithm` field) | the 32 raw bytes | the 64 bytes `R ‖ S`, `S` canonical |
//! | ECDSA P-256 with SHA-256 | `ecdsa-p256-sha256` | the 33-byte SEC1 compressed point | ASN.1 DER `SEQUENCE { r, s }`, as KMSs return it |
//!
//! A key id is the SHA-256 of the public bytes in the second column, whatever the algorithm.
//! Both verify the DSSE pre-authentication encoding itself (ECDSA hashes it with SHA-256).

use std::fmt;

use p256::ecdsa::signature::Verifier as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::names::KeyId;

/// A signature algorithm, as named in trust files and keyrings (`algorithm`).
///
/// A name this build does not know is kept ([`Algorithm::Other`]): a key with it is left out of
/// every key ring (it cannot verify anything here), and the document that lists it is still
/// read, so a newer signer's keyring does not strand a reader.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Algorithm {
    /// Ed25519 (RFC 8032); the default when a key names no algorithm.
    #[default]
    Ed25519,
    /// ECDSA over NIST P-256 with SHA-256 (FIPS 186-4), DER signatures.
    EcdsaP256Sha256,
    /// A name this build does not know (at most 64 characters kept).
    Other(String),
}

impl Algorithm {
    /// The name in documents.
    pub fn name(&self) -> &str {
        match self {
            Algorithm::Ed25519 => "ed25519",
            Algorithm::EcdsaP256Sha256 => "ecdsa-p256-sha256",
            Algorithm::Other(s) => s,
        }
    }

    /// Reads a name (an unknown one is kept as [`Algorithm::Other`]).
    pub fn from_name(name: &str) -> Algorithm {
        match name {
            "ed25519" => Algorithm::Ed25519,
            "ecdsa-p256-sha256" => Algorithm::EcdsaP256Sha256,
            other => Algorithm::Other(other.chars().take(64).collect()),
        }
    }

    /// True for Ed25519 (written by leaving the field out, as every ferry before P-256 did).
    pub fn is_ed25519(&self) -> bool {
        *self == Algorithm::Ed25519
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Algorithm {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Algorithm::from_name(&s))
    }
}

/// A public key this build can verify with.
#[derive(Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// An Ed25519 key.
    Ed25519(ed25519_dalek::VerifyingKey),
    /// An ECDSA P-256 key.
    P256(p256::ecdsa::VerifyingKey),
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm(), hex::encode(self.to_bytes()))
    }
}

/// A public key that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {algorithm} public key: {why}")]
pub struct BadPublicKey {
    /// The algorithm it was read for.
    pub algorithm: String,
    /// What is wrong.
    pub why: String,
}

/// Why a signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureFault {
    /// Not a well-formed signature of the key's algorithm.
    Malformed(String),
    /// Well formed, but not made by this key over this message.
    Invalid,
}

impl PublicKey {
    /// Reads the public bytes of `algorithm` (see the module docs).
    pub fn from_bytes(algorithm: &Algorithm, bytes: &[u8]) -> Result<Self, BadPublicKey> {
        let bad = |why: &str| BadPublicKey {
            algorithm: algorithm.to_string(),
            why: why.to_string(),
        };
        match algorithm {
            Algorithm::Ed25519 => {
                let raw: &[u8; 32] = bytes
                    .try_into()
                    .map_err(|_| bad(&format!("{} bytes, expected 32", bytes.len())))?;
                let key = ed25519_dalek::VerifyingKey::from_bytes(raw)
                    .map_err(|_| bad("not a point on the curve"))?;
                if key.is_weak() {
                    return Err(bad("a weak (small-order) key"));
                }
                Ok(PublicKey::Ed25519(key))
            }
            Algorithm::EcdsaP256Sha256 => {
                if bytes.len() != 33 || !matches!(bytes[0], 2 | 3) {
                    return Err(bad("expected the 33-byte SEC1 compressed point"));
                }
                p256::ecdsa::VerifyingKey::from_sec1_bytes(bytes)
                    .map(PublicKey::P256)
                    .map_err(|_| bad("not a point on the curve"))
            }
            Algorithm::Other(name) => Err(bad(&format!("this build does not know {name:?}"))),
        }
    }

    /// Reads hex public bytes (as trust files and keyrings carry them).
    pub fn from_hex(algorithm: &Algorithm, text: &str) -> Result<Self, BadPublicKey> {
        if text.len() > 200 {
            return Err(BadPublicKey {
                algorithm: algorithm.to_string(),
                why: format!("{} hex characters", text.len()),
            });
        }
        let bytes = hex::decode(text).map_err(|_| BadPublicKey {
            algorithm: algorithm.to_string(),
            why: "not hex".into(),
        })?;
        Self::from_bytes(algorithm, &bytes)
    }

    /// Builds a P-256 key from any SEC1 encoding (compressed or not), for signers that hand
    /// out the uncompressed point.
    pub fn p256_from_sec1(bytes: &[u8]) -> Result<Self, BadPublicKey> {
        p256::ecdsa::VerifyingKey::from_sec1_bytes(bytes)
            .map(PublicKey::P256)
            .map_err(|_| BadPublicKey {
                algorithm: Algorithm::EcdsaP256Sha256.to_string(),
                why: "not a SEC1 point on the curve".into(),
            })
    }

    /// Its algorithm.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            PublicKey::Ed25519(_) => Algorithm::Ed25519,
            PublicKey::P256(_) => Algorithm::EcdsaP256Sha256,
        }
    }

    /// The public bytes (32 raw bytes, or the 33-byte compressed point).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            PublicKey::Ed25519(k) => k.to_bytes().to_vec(),
            PublicKey::P256(k) => k.to_sec1_point(true).as_bytes().to_vec(),
        }
    }

    /// The key id: SHA-256 of [`PublicKey::to_bytes`].
    pub fn id(&self) -> KeyId {
        KeyId::of_public_key(&self.to_bytes())
    }

    /// Checks `signature` (raw bytes as decoded from base64) over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), SignatureFault> {
        match self {
            PublicKey::Ed25519(key) => {
                let bytes: [u8; 64] = signature.try_into().map_err(|_| {
                    SignatureFault::Malformed(format!("{} bytes, expected 64", signature.len()))
                })?;
                // An ed25519 signature is R || S with S < 2^253 in canonical form: the top
                // three bits of the last byte must be clear. verify_strict refuses such
                // signatures too; checking here tells a mangled signature apart from one that
                // is well formed but wrong.
                if bytes[63] & 0xe0 != 0 {
                    return Err(SignatureFault::Malformed("non-canonical scalar".into()));
                }
                key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(&bytes))
                    .map_err(|_| SignatureFault::Invalid)
            }
            PublicKey::P256(key) => {
                let sig = p256::ecdsa::Signature::from_der(signature).map_err(|_| {
                    SignatureFault::Malformed(format!(
                        "{} bytes, not an ECDSA P-256 signature in DER",
                        signature.len()
                    ))
                })?;
                key.verify(message, &sig)
                    .map_err(|_| SignatureFault::Invalid)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer as _;

    fn p256_pair(seed: u8) -> (p256::ecdsa::SigningKey, PublicKey) {
        let sk = p256::ecdsa::SigningKey::from_slice(&[seed; 32]).expect("scalar");
        let pk = PublicKey::P256(*sk.verifying_key());
        (sk, pk)
    }

    #[test]
    fn p256_keys_round_trip_compressed_and_verify_der() {
        let (sk, pk) = p256_pair(7);
        let bytes = pk.to_bytes();
        assert_eq!(bytes.len(), 33);
        let back = PublicKey::from_hex(&Algorithm::EcdsaP256Sha256, &hex::encode(&bytes))
            .expect("compressed point");
        assert_eq!(back, pk);
        assert_eq!(back.id(), KeyId::of_public_key(&bytes));
        let sig: p256::ecdsa::Signature = sk.sign(b"message");
        let der = sig.to_der();
        assert_eq!(pk.verify(b"message", der.as_bytes()), Ok(()));
        assert_eq!(
            pk.verify(b"other message", der.as_bytes()),
            Err(SignatureFault::Invalid)
        );
        // The fixed 64-byte form is not what the wire carries.
        assert!(matches!(
            pk.verify(b"message", &sig.to_bytes()),
            Err(SignatureFault::Malformed(_))
        ));
        let (_, other) = p256_pair(8);
        assert_eq!(
            other.verify(b"message", der.as_bytes()),
            Err(SignatureFault::Invalid)
        );
    }

    #[test]
    fn bad_public_keys_are_refused_with_the_reason() {
        let (_, pk) = p256_pair(9);
        let uncompressed = match &pk {
            PublicKey::P256(k) => k.to_sec1_point(false).as_bytes().to_vec(),
            PublicKey::Ed25519(_) => unreachable!(),
        };
        // Documents carry the compressed form only; signers may hand out either.
        assert!(PublicKey::from_bytes(&Algorithm::EcdsaP256Sha256, &uncompressed).is_err());
        assert_eq!(PublicKey::p256_from_sec1(&uncompressed), Ok(pk.clone()));
        let mut off_curve = pk.to_bytes();
        off_curve[1..].fill(0xff);
        assert!(PublicKey::from_bytes(&Algorithm::EcdsaP256Sha256, &off_curve).is_err());
        assert!(PublicKey::from_bytes(&Algorithm::Ed25519, &pk.to_bytes()).is_err());
        assert!(PublicKey::from_hex(&Algorithm::Ed25519, "zz").is_err());
        let unknown = Algorithm::from_name("ml-dsa-65");
        assert_eq!(unknown, Algorithm::Other("ml-dsa-65".into()));
        assert!(PublicKey::from_bytes(&unknown, &[0; 32]).is_err());
    }

    #[test]
    fn algorithm_names_round_trip_and_unknown_ones_are_kept() {
        for a in [Algorithm::Ed25519, Algorithm::EcdsaP256Sha256] {
            let json = serde_json::to_string(&a).expect("json");
            assert_eq!(serde_json::from_str::<Algorithm>(&json).expect("back"), a);
        }
        let other: Algorithm = serde_json::from_str("\"slh-dsa\"").expect("kept");
        assert_eq!(other.name(), "slh-dsa");
    }
}
