//! The keys of sealed files: chunk keys derived from content, file keys wrapped to the server's
//! key-release key, and file keys released to one device.
//!
//! - **Chunk key** = HMAC-SHA-256(seal secret, `"ferry-seal-1 chunk"` ‖ SHA-256(chunk)): the
//!   same plaintext chunk of a model gets the same key and the same sealed bytes in every
//!   release (convergent), so delta updates still send only what changed. What that reveals:
//!   whoever holds two sealed files sees which chunks they share, and whoever has a guess at a
//!   chunk's plaintext cannot test it without the seal secret.
//! - **File key**: 32 random bytes per sealed file and release, which open the file's key
//!   table. It is wrapped to the key-release key (X25519): an ephemeral key pair, HKDF-SHA-256
//!   of the shared secret with both public keys and the sealed file's digest, AES-256-GCM of
//!   the file key. Only the server holding the key-release secret unwraps it, and a wrapped key
//!   moved to another file does not open.
//! - **Released key**: the server unwraps the file key and wraps it again to the ephemeral
//!   X25519 public key the device sent with its request, bound to the file's digest and the
//!   install id: a proxy that sees the exchange learns nothing it can open.

use base64::Engine as _;
use curve25519_dalek::montgomery::MontgomeryPoint;
use sha2::{Digest as _, Sha256};

use super::format::{KEY, SealError, TAG, aead_key};

/// Bytes of a wrapped or released key: the sender's ephemeral public key, the encrypted file
/// key and its tag.
pub const WRAPPED: usize = 32 + KEY + TAG;

/// The chunk key of `chunk` under the model's seal secret.
pub fn chunk_key(secret: &[u8; KEY], chunk: &[u8]) -> [u8; KEY] {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut ctx = ring::hmac::Context::with_key(&k);
    ctx.update(b"ferry-seal-1 chunk\0");
    ctx.update(&Sha256::digest(chunk));
    let mut out = [0u8; KEY];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

/// The X25519 public key of `secret`.
pub fn public_key(secret: &[u8; KEY]) -> [u8; 32] {
    MontgomeryPoint::mul_base_clamped(*secret).to_bytes()
}

/// The AES key both sides of a wrap derive: HKDF-SHA-256 over the X25519 shared secret, salted
/// with the sender's and the receiver's public keys, for `purpose` and `context`.
fn agreed_key(
    own_secret: &[u8; KEY],
    their_public: &[u8; 32],
    salt_keys: (&[u8; 32], &[u8; 32]),
    purpose: &[u8],
    context: &[&[u8]],
) -> Result<[u8; KEY], SealError> {
    let shared = MontgomeryPoint(*their_public)
        .mul_clamped(*own_secret)
        .to_bytes();
    // A low-order public key gives the all-zero secret: refuse it rather than derive a key
    // anyone could compute.
    if shared == [0u8; 32] {
        return Err(SealError::Tampered(
            "a key exchange with a weak public key".into(),
        ));
    }
    let mut salt = Vec::with_capacity(64);
    salt.extend_from_slice(salt_keys.0);
    salt.extend_from_slice(salt_keys.1);
    let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &salt).extract(&shared);
    let mut info: Vec<&[u8]> = vec![purpose];
    info.extend_from_slice(context);
    let mut out = [0u8; KEY];
    prk.expand(&info, ring::hkdf::HKDF_SHA256)
        .and_then(|okm| okm.fill(&mut out))
        .map_err(|_| SealError::Invalid("key derivation".into()))?;
    Ok(out)
}

fn seal_key(key: &[u8; KEY], file_key: &[u8; KEY], sender_public: &[u8; 32]) -> [u8; WRAPPED] {
    let mut body = *file_key;
    let tag = aead_key(key)
        .seal_in_place_separate_tag(
            ring::aead::Nonce::assume_unique_for_key([0; 12]),
            ring::aead::Aad::empty(),
            &mut body,
        )
        .expect("32 bytes seal");
    let mut out = [0u8; WRAPPED];
    out[..32].copy_from_slice(sender_public);
    out[32..32 + KEY].copy_from_slice(&body);
    out[32 + KEY..].copy_from_slice(tag.as_ref());
    out
}

fn open_key(key: &[u8; KEY], wrapped: &[u8; WRAPPED], what: &str) -> Result<[u8; KEY], SealError> {
    let mut body = [0u8; KEY + TAG];
    body.copy_from_slice(&wrapped[32..]);
    let plain = aead_key(key)
        .open_in_place(
            ring::aead::Nonce::assume_unique_for_key([0; 12]),
            ring::aead::Aad::empty(),
            &mut body,
        )
        .map_err(|_| SealError::Tampered(what.to_string()))?;
    let mut out = [0u8; KEY];
    out.copy_from_slice(plain);
    Ok(out)
}

const WRAP: &[u8] = b"ferry-seal-1 wrap\0";
const RELEASE: &[u8] = b"ferry-seal-1 release\0";

/// Wraps `file_key` of the sealed file `sealed_sha256` to the key-release public key
/// `release_public`, with the fresh random `ephemeral` secret.
pub fn wrap(
    release_public: &[u8; 32],
    ephemeral: &[u8; KEY],
    file_key: &[u8; KEY],
    sealed_sha256: &[u8; 32],
) -> Result<[u8; WRAPPED], SealError> {
    let epk = public_key(ephemeral);
    let k = agreed_key(
        ephemeral,
        release_public,
        (&epk, release_public),
        WRAP,
        &[sealed_sha256],
    )?;
    Ok(seal_key(&k, file_key, &epk))
}

/// Unwraps a file key wrapped by [`wrap`], with the key-release secret.
pub fn unwrap(
    release_secret: &[u8; KEY],
    wrapped: &[u8; WRAPPED],
    sealed_sha256: &[u8; 32],
) -> Result<[u8; KEY], SealError> {
    let mut epk = [0u8; 32];
    epk.copy_from_slice(&wrapped[..32]);
    let own = public_key(release_secret);
    let k = agreed_key(release_secret, &epk, (&epk, &own), WRAP, &[sealed_sha256])?;
    open_key(&k, wrapped, "the wrapped file key")
}

/// Wraps `file_key` again for one device: to its ephemeral public key `device_public`, bound to
/// the file and the install id; `ephemeral` is the server's fresh random secret.
pub fn release(
    device_public: &[u8; 32],
    ephemeral: &[u8; KEY],
    file_key: &[u8; KEY],
    sealed_sha256: &[u8; 32],
    install_id: &str,
) -> Result<[u8; WRAPPED], SealError> {
    let spk = public_key(ephemeral);
    let k = agreed_key(
        ephemeral,
        device_public,
        (&spk, device_public),
        RELEASE,
        &[sealed_sha256, install_id.as_bytes()],
    )?;
    Ok(seal_key(&k, file_key, &spk))
}

/// Opens a key released by [`release`] with the device's ephemeral secret.
pub fn receive(
    device_secret: &[u8; KEY],
    released: &[u8; WRAPPED],
    sealed_sha256: &[u8; 32],
    install_id: &str,
) -> Result<[u8; KEY], SealError> {
    let mut spk = [0u8; 32];
    spk.copy_from_slice(&released[..32]);
    let own = public_key(device_secret);
    let k = agreed_key(
        device_secret,
        &spk,
        (&spk, &own),
        RELEASE,
        &[sealed_sha256, install_id.as_bytes()],
    )?;
    open_key(&k, released, "the released file key")
}

/// base64url without padding, the form keys take in JSON.
pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Reads exactly `N` bytes of base64url (no padding).
pub fn decode<const N: usize>(text: &str) -> Result<[u8; N], SealError> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.as_bytes())
        .map_err(|_| SealError::Invalid("a key that is not base64url".into()))?;
    bytes
        .try_into()
        .map_err(|_| SealError::Invalid(format!("a key of another length than {N} bytes")))
}
