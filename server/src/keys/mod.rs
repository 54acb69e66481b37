//! Key files: secret keys on disk and the server's key set.
//!
//! A key file (`root.key`, `release.key`, `online.key`) is JSON `{role, keyid, public, secret}`
//! with hex keys, written with mode 0600; an encrypted one holds `sealed` instead of `secret`
//! ([`crate::keys::sealed`]). `trust.json` beside them holds the root keys apps pin
//! ([`ferry_shared::trust::TrustFile`]) and `keyring/<version>.json` the keyrings they sign
//! ([`ferry_shared::trust::keyring`]). A server needs `online.key`, `trust.json` and `keyring/`; the
//! root and release keys stay on the operator's offline machine.
//!
//! Bottom layer: imports only `ferry-shared` and `ferry-fs`.

mod key_release;
mod provision;
mod rotate;
pub mod sealed;
pub mod signer;

pub use key_release::*;
pub use provision::*;
pub use rotate::*;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use ferry_shared::KeyId;
use ferry_shared::trust::dsse::{Envelope, KeyPair, KeyRole};
use ferry_shared::trust::keyring::{
    KEYRING_PAYLOAD_TYPE, Keyring, KeyringKey, RootSet, TrustState,
};
use ferry_shared::trust::{TrustFile, TrustedKeyEntry};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// A secret key as stored on disk.
#[derive(Debug, Serialize, Deserialize)]
struct KeyFile {
    role: KeyRole,
    keyid: KeyId,
    public: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<crate::keys::sealed::Sealed>,
}

/// What an encrypted secret is bound to: its role and key id.
fn seal_context(role: KeyRole, keyid: &KeyId) -> Vec<u8> {
    format!("ferry key {role} {keyid}").into_bytes()
}

/// A key pair with its role.
#[derive(Debug)]
pub struct RoleKey {
    /// What it signs.
    pub role: KeyRole,
    /// The key pair.
    pub pair: KeyPair,
}

/// Generates a new key pair from the operating system's randomness.
pub fn generate(role: KeyRole) -> anyhow::Result<RoleKey> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(RoleKey {
        role,
        pair: KeyPair::from_seed(&seed),
    })
}

/// Writes `key` to `path` (mode 0600); refuses to overwrite an existing file.
pub fn save(key: &RoleKey, path: &Path) -> anyhow::Result<()> {
    write_key(key, path, None)
}

/// Writes `key` to `path` encrypted with `passphrase` (mode 0600); refuses to overwrite.
pub fn save_sealed(key: &RoleKey, path: &Path, passphrase: &str) -> anyhow::Result<()> {
    write_key(key, path, Some(passphrase))
}

fn write_key(key: &RoleKey, path: &Path, passphrase: Option<&str>) -> anyhow::Result<()> {
    if path.exists() {
        bail!("{} exists; refusing to overwrite a key", path.display());
    }
    let keyid = key.pair.id();
    let (secret, sealed) = match passphrase {
        None => (Some(hex::encode(key.pair.seed())), None),
        Some(p) => (
            None,
            Some(crate::keys::sealed::seal(
                &key.pair.seed(),
                p,
                &seal_context(key.role, &keyid),
            )?),
        ),
    };
    let file = KeyFile {
        role: key.role,
        keyid,
        public: hex::encode(key.pair.public()),
        secret,
        sealed,
    };
    let json = serde_json::to_vec_pretty(&file)?;
    ferry_fs::write(path, &json, ferry_fs::Mode::OwnerOnly)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a key file, checking that its key id and public key match the secret; an encrypted
/// one asks for its passphrase ([`crate::keys::sealed::passphrase`]).
pub fn load(path: &Path) -> anyhow::Result<RoleKey> {
    read_key(path, || crate::keys::sealed::passphrase(path, false))
}

/// [`load`], with the passphrase of an encrypted file given by `pass`.
fn read_key(path: &Path, pass: impl FnOnce() -> anyhow::Result<String>) -> anyhow::Result<RoleKey> {
    let text =
        std::fs::read(path).with_context(|| format!("cannot read key {}", path.display()))?;
    let file: KeyFile = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a ferry key file", path.display()))?;
    let seed = match (&file.secret, &file.sealed) {
        (Some(secret), None) => {
            let mut seed = [0u8; 32];
            hex::decode_to_slice(secret, &mut seed)
                .with_context(|| format!("{}: secret is not 64 hex characters", path.display()))?;
            seed
        }
        (None, Some(sealed)) => {
            crate::keys::sealed::open(sealed, &pass()?, &seal_context(file.role, &file.keyid))
                .with_context(|| format!("cannot decrypt {}", path.display()))?
        }
        _ => bail!(
            "{}: a key file holds either secret or sealed",
            path.display()
        ),
    };
    let pair = KeyPair::from_seed(&seed);
    if pair.id() != file.keyid || hex::encode(pair.public()) != file.public {
        bail!(
            "{}: key id or public key does not match the secret",
            path.display()
        );
    }
    Ok(RoleKey {
        role: file.role,
        pair,
    })
}

/// True when the key file at `path` is encrypted.
pub fn is_sealed(path: &Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|t| serde_json::from_slice::<KeyFile>(&t).ok())
        .is_some_and(|f| f.sealed.is_some())
}

/// The role and key id a key file names (without decrypting it).
pub fn file_id(path: &Path) -> anyhow::Result<(KeyRole, KeyId)> {
    let text =
        std::fs::read(path).with_context(|| format!("cannot read key {}", path.display()))?;
    let file: KeyFile = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a ferry key file", path.display()))?;
    Ok((file.role, file.keyid))
}

/// Encrypts the key file at `path` in place with a passphrase (from `FERRY_KEY_PASSPHRASE` or
/// asked twice on the terminal). Returns what to print.
pub fn encrypt_file(path: &Path) -> anyhow::Result<String> {
    if is_sealed(path) {
        bail!("{} is already encrypted", path.display());
    }
    let key = load(path)?;
    if key.role == KeyRole::Online {
        bail!(
            "{} is an online key: servers read it at start, unattended, so it stays plain (if \
             a server's host is lost, rotate it: ferry keys rotate online)",
            path.display()
        );
    }
    let pass = crate::keys::sealed::passphrase(path, true)?;
    let staged = path.with_extension("key.new");
    if staged.exists() {
        bail!(
            "{} exists (an encryption that did not finish?): remove it and run again",
            staged.display()
        );
    }
    save_sealed(&key, &staged, &pass)?;
    // Check it opens before the plain copy is replaced.
    let check = read_key(&staged, || Ok(pass.clone()))?;
    if check.pair.id() != key.pair.id() {
        bail!("the encrypted copy does not hold the same key");
    }
    ferry_fs::commit(&staged, path)
        .with_context(|| format!("cannot move {} into place", staged.display()))?;
    Ok(format!(
        "encrypted {} key {} at {}; commands that use it ask for the passphrase (or read {})",
        key.role,
        key.pair.id(),
        path.display(),
        crate::keys::sealed::PASSPHRASE_ENV
    ))
}
