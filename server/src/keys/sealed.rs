//! Secret keys encrypted at rest with a passphrase.
//!
//! A sealed key file holds, instead of `secret`, `sealed`: the 32-byte secret encrypted with
//! ChaCha20-Poly1305 under a key derived from the passphrase with scrypt (N = 2^17, r = 8,
//! p = 1: about 128 MiB and half a second per unlock), a random 16-byte salt and 12-byte
//! nonce. The key's role and id are authenticated with it, so a sealed secret moved into
//! another key file does not open. The passphrase comes from `FERRY_KEY_PASSPHRASE`, or is
//! asked for on the terminal.

use anyhow::{Context as _, bail};
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use serde::{Deserialize, Serialize};
use std::io::IsTerminal as _;
use std::path::Path;

/// The environment variable that holds the passphrase of encrypted keys.
pub const PASSPHRASE_ENV: &str = "FERRY_KEY_PASSPHRASE";

/// Shortest passphrase accepted for a new encryption.
pub const MIN_PASSPHRASE: usize = 12;

const LOG_N: u8 = 17;
const R: u32 = 8;
const P: u32 = 1;

/// An encrypted secret as stored in a key file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sealed {
    /// Always `scrypt-chacha20poly1305`.
    pub scheme: String,
    /// scrypt's cost: N = 2^log_n.
    pub log_n: u8,
    /// scrypt's block size.
    pub r: u32,
    /// scrypt's parallelism.
    pub p: u32,
    /// Hex salt.
    pub salt: String,
    /// Hex nonce.
    pub nonce: String,
    /// Hex ciphertext with its tag.
    pub ciphertext: String,
}

const SCHEME: &str = "scrypt-chacha20poly1305";

fn cipher(
    passphrase: &[u8],
    salt: &[u8],
    log_n: u8,
    r: u32,
    p: u32,
) -> anyhow::Result<ChaCha20Poly1305> {
    // Refuse costs an edited file could use to exhaust memory or time: at most
    // 128 B x r x 2^log_n = 256 MiB, twice the default.
    if !(10..=18).contains(&log_n) || !(1..=8).contains(&r) || !(1..=2).contains(&p) {
        bail!("unsupported scrypt parameters (log_n {log_n}, r {r}, p {p})");
    }
    let params = scrypt::Params::new(log_n, r, p).map_err(|e| anyhow::anyhow!("scrypt: {e}"))?;
    let mut key = [0u8; 32];
    scrypt::scrypt(passphrase, salt, &params, &mut key)
        .map_err(|e| anyhow::anyhow!("scrypt: {e}"))?;
    ChaCha20Poly1305::new_from_slice(&key).map_err(|e| anyhow::anyhow!("cipher key: {e}"))
}

/// Encrypts `secret` under `passphrase`, binding `context` (the key's role and id).
pub fn seal(secret: &[u8; 32], passphrase: &str, context: &[u8]) -> anyhow::Result<Sealed> {
    let mut salt = [0u8; 16];
    let mut nonce = [0u8; 12];
    getrandom::fill(&mut salt).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    getrandom::fill(&mut nonce).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let ciphertext = cipher(passphrase.as_bytes(), &salt, LOG_N, R, P)?
        .encrypt(
            &Nonce::from(nonce),
            Payload {
                msg: secret,
                aad: context,
            },
        )
        .map_err(|_| anyhow::anyhow!("encryption failed"))?;
    Ok(Sealed {
        scheme: SCHEME.into(),
        log_n: LOG_N,
        r: R,
        p: P,
        salt: hex::encode(salt),
        nonce: hex::encode(nonce),
        ciphertext: hex::encode(ciphertext),
    })
}

/// Decrypts a sealed secret; a wrong passphrase (or a secret moved from another key file) is
/// an error.
pub fn open(sealed: &Sealed, passphrase: &str, context: &[u8]) -> anyhow::Result<[u8; 32]> {
    if sealed.scheme != SCHEME {
        bail!("unknown encryption scheme {:?}", sealed.scheme);
    }
    let salt = hex::decode(&sealed.salt).context("salt is not hex")?;
    let mut nonce = [0u8; 12];
    hex::decode_to_slice(&sealed.nonce, &mut nonce).context("nonce is not 24 hex characters")?;
    let ciphertext = hex::decode(&sealed.ciphertext).context("ciphertext is not hex")?;
    let plain = cipher(
        passphrase.as_bytes(),
        &salt,
        sealed.log_n,
        sealed.r,
        sealed.p,
    )?
    .decrypt(
        &Nonce::from(nonce),
        Payload {
            msg: &ciphertext,
            aad: context,
        },
    )
    .map_err(|_| anyhow::anyhow!("wrong passphrase (or the file was altered)"))?;
    plain
        .try_into()
        .map_err(|_| anyhow::anyhow!("the decrypted secret is not 32 bytes"))
}

/// The passphrase for `path`: `FERRY_KEY_PASSPHRASE`, else asked on the terminal (twice when
/// `confirm`, for a new encryption). Without either, a clear error.
pub fn passphrase(path: &Path, confirm: bool) -> anyhow::Result<String> {
    let pass = if let Ok(p) = std::env::var(PASSPHRASE_ENV) {
        p
    } else if std::io::stdin().is_terminal() {
        let ask = if confirm {
            format!("new passphrase for {}: ", path.display())
        } else {
            format!("passphrase for {}: ", path.display())
        };
        let p = rpassword::prompt_password(ask).context("cannot read the passphrase")?;
        if confirm {
            let again = rpassword::prompt_password("the same passphrase again: ")
                .context("cannot read the passphrase")?;
            if again != p {
                bail!("the passphrases differ");
            }
        }
        p
    } else if confirm {
        bail!(
            "choosing a passphrase for {} needs {PASSPHRASE_ENV} or a terminal",
            path.display()
        );
    } else {
        bail!(
            "{} is encrypted: set {PASSPHRASE_ENV} or run in a terminal",
            path.display()
        );
    };
    if confirm && pass.chars().count() < MIN_PASSPHRASE {
        bail!("a passphrase needs at least {MIN_PASSPHRASE} characters");
    }
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_only_with_their_passphrase_and_context() {
        let secret = [7u8; 32];
        let s = seal(&secret, "correct horse battery", b"release:abc").expect("seal");
        assert_eq!(
            open(&s, "correct horse battery", b"release:abc").expect("open"),
            secret
        );
        assert!(open(&s, "wrong horse battery", b"release:abc").is_err());
        assert!(open(&s, "correct horse battery", b"root:abc").is_err());
        let mut flipped = s.clone();
        flipped.ciphertext.replace_range(0..2, "00");
        if flipped.ciphertext != s.ciphertext {
            assert!(open(&flipped, "correct horse battery", b"release:abc").is_err());
        }
        let mut costly = s;
        costly.log_n = 30;
        let err = open(&costly, "correct horse battery", b"release:abc").expect_err("refused");
        assert!(err.to_string().contains("unsupported scrypt"), "{err}");
    }
}
