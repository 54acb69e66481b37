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
mod source;

pub use source::*;

use std::path::Path;

use ferry_shared::trust::dsse::{Envelope, KeyRole};
use ferry_shared::trust::key::PublicKey;

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

/// `spec` with the value of any `pin-value` attribute hidden, for messages and hints.
pub fn redact(spec: &str) -> String {
    let mut out = String::with_capacity(spec.len());
    let mut rest = spec;
    while let Some(at) = rest.find("pin-value=") {
        let (before, after) = rest.split_at(at + "pin-value=".len());
        out.push_str(before);
        out.push_str("***");
        rest = after.find(['&', ';']).map_or("", |end| &after[end..]);
    }
    out.push_str(rest);
    out
}

/// The message every key check signs: no payload a device would accept.
const CHECK_MESSAGE: &[u8] = b"ferry signer check: this signature is never published";

/// Opens `spec` as [`open`] does, then has it sign a test message and checks that signature
/// against its public key: for a key that is about to be listed in a keyring or trust file, so
/// a signer that cannot sign (a wrong PIN a logged-in token did not check, a KMS the caller
/// may not use) is found now, not at the next `ferry sign`.
pub fn open_checked(spec: &str) -> anyhow::Result<Box<dyn Signer>> {
    let signer = open(spec)?;
    let sig = signer.sign(CHECK_MESSAGE)?;
    if signer.public().verify(CHECK_MESSAGE, &sig).is_err() {
        return Err(SignerError::new(
            SignerErrorKind::Failed,
            format!(
                "{}: a test signature does not verify under its public key {}; it was not \
                 written anywhere",
                signer.describe(),
                signer.id()
            ),
        )
        .into());
    }
    Ok(signer)
}

/// Opens the signer `spec` names (see the module docs). A file key that is encrypted asks for
/// its passphrase here. Errors never show a `pin-value` ([`redact`]).
pub fn open(spec: &str) -> anyhow::Result<Box<dyn Signer>> {
    let shown = redact(spec);
    open_unredacted(spec).map_err(|e| {
        if shown == spec {
            e
        } else {
            let text = format!("{e:#}").replace(spec, &shown);
            match e.downcast_ref::<SignerError>() {
                Some(s) => SignerError::new(s.kind, text).into(),
                None => anyhow::anyhow!(text),
            }
        }
    })
}

fn open_unredacted(spec: &str) -> anyhow::Result<Box<dyn Signer>> {
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
                "unknown key scheme {scheme:?} in {:?}: --key takes a key file path, a \
                 pkcs11: URI or exec:COMMAND (for a cloud KMS, use exec: with its CLI; \
                 docs/keys.md has recipes)",
                redact(spec)
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

#[cfg(test)]
mod tests;
