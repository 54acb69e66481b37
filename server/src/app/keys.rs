//! Key files: secret keys on disk and the server's key set.
//!
//! A key file (`release.key`, `online.key`) is JSON `{role, keyid, public, secret}` with hex
//! keys, written with mode 0600. `trust.json` beside them lists the public keys a client
//! should trust ([`ferry_shared::trust::TrustFile`]).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use ferry_shared::KeyId;
use ferry_shared::dsse::{KeyPair, KeyRole};
use ferry_shared::trust::TrustFile;
use serde::{Deserialize, Serialize};

/// A secret key as stored on disk.
#[derive(Debug, Serialize, Deserialize)]
struct KeyFile {
    role: KeyRole,
    keyid: KeyId,
    public: String,
    secret: String,
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
    if path.exists() {
        bail!("{} exists; refusing to overwrite a key", path.display());
    }
    let file = KeyFile {
        role: key.role,
        keyid: key.pair.id(),
        public: hex::encode(key.pair.public()),
        secret: hex::encode(key.pair.seed()),
    };
    let json = serde_json::to_vec_pretty(&file)?;
    ferry_fs::write(path, &json, ferry_fs::Mode::OwnerOnly)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a key file, checking that its key id and public key match the secret.
pub fn load(path: &Path) -> anyhow::Result<RoleKey> {
    let text =
        std::fs::read(path).with_context(|| format!("cannot read key {}", path.display()))?;
    let file: KeyFile = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a ferry key file", path.display()))?;
    let mut seed = [0u8; 32];
    hex::decode_to_slice(&file.secret, &mut seed)
        .with_context(|| format!("{}: secret is not 64 hex characters", path.display()))?;
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

/// The key material a server runs with.
#[derive(Debug)]
pub struct ServerKeys {
    /// Signs resolve decisions.
    pub online: RoleKey,
    /// The keys trusted to sign releases and decisions (published at `GET /v1/keys`).
    pub trust: TrustFile,
}

/// Paths of a key folder.
pub fn key_paths(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        dir.join("release.key"),
        dir.join("online.key"),
        dir.join("trust.json"),
    )
}

/// Creates a release key, an online key and `trust.json` in `dir` if they do not exist yet.
/// Returns the lines to print about what was created (fingerprints).
pub fn ensure_dev_keys(dir: &Path) -> anyhow::Result<Vec<String>> {
    let (release_path, online_path, trust_path) = key_paths(dir);
    let mut notes = Vec::new();
    for (path, role) in [
        (&release_path, KeyRole::Release),
        (&online_path, KeyRole::Online),
    ] {
        if !path.exists() {
            let k = generate(role)?;
            save(&k, path)?;
            notes.push(format!(
                "created {role} key {} at {}",
                k.pair.id(),
                path.display()
            ));
        }
    }
    if !trust_path.exists() {
        let mut trust = TrustFile::default();
        for path in [&release_path, &online_path] {
            let k = load(path)?;
            trust.push(k.role, &k.pair.public());
        }
        let json = serde_json::to_vec_pretty(&trust)?;
        ferry_fs::write(&trust_path, &json, ferry_fs::Mode::Public)
            .with_context(|| format!("cannot write {}", trust_path.display()))?;
        notes.push(format!(
            "wrote {} (give this to clients)",
            trust_path.display()
        ));
    }
    Ok(notes)
}

/// Loads the online key and trust file from `dir`, checking that the trust file lists the
/// online key.
pub fn load_server_keys(dir: &Path) -> anyhow::Result<ServerKeys> {
    let (_, online_path, trust_path) = key_paths(dir);
    let online = load(&online_path)?;
    if online.role != KeyRole::Online {
        bail!(
            "{} is a {} key, not an online key",
            online_path.display(),
            online.role
        );
    }
    let text = std::fs::read(&trust_path)
        .with_context(|| format!("cannot read {}", trust_path.display()))?;
    let trust = TrustFile::from_json(&text).with_context(|| trust_path.display().to_string())?;
    trust
        .to_keyring()
        .with_context(|| trust_path.display().to_string())?;
    if !trust
        .keys
        .iter()
        .any(|k| k.keyid == online.pair.id() && k.role == KeyRole::Online)
    {
        bail!(
            "{} does not list the online key {}",
            trust_path.display(),
            online.pair.id()
        );
    }
    Ok(ServerKeys { online, trust })
}
