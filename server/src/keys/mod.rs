//! Key files: secret keys on disk and the server's key set.
//!
//! A key file (`root.key`, `release.key`, `online.key`) is JSON `{role, keyid, public, secret}`
//! with hex keys, written with mode 0600; an encrypted one holds `sealed` instead of `secret`
//! ([`crate::keys::sealed`]). `trust.json` beside them holds the root keys apps pin
//! ([`ferry_shared::trust::TrustFile`]) and `keyring/<version>.json` the keyrings they sign
//! ([`ferry_shared::keyring`]). A server needs `online.key`, `trust.json` and `keyring/`; the
//! root and release keys stay on the operator's offline machine.

pub mod sealed;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use ferry_shared::KeyId;
use ferry_shared::dsse::{Envelope, KeyPair, KeyRole};
use ferry_shared::keyring::{KEYRING_PAYLOAD_TYPE, Keyring, KeyringKey, RootSet, TrustState};
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

/// The key material a server runs with.
#[derive(Debug)]
pub struct ServerKeys {
    /// Signs resolve decisions.
    pub online: RoleKey,
    /// The pinned trust file (published at `GET /v1/keys`).
    pub trust: TrustFile,
    /// The trust walked through every keyring: the current release and online keys.
    pub state: TrustState,
    /// Every keyring version, oldest first (published at `GET /v1/keyring`).
    pub chain: Vec<Envelope>,
}

/// Where the files of a key folder live.
#[derive(Debug, Clone)]
pub struct KeyPaths {
    /// Signs keyrings; kept offline.
    pub root: PathBuf,
    /// Signs releases; kept offline.
    pub release: PathBuf,
    /// Signs decisions; on every server.
    pub online: PathBuf,
    /// What apps pin.
    pub trust: PathBuf,
    /// Keyring versions (`<version>.json`).
    pub keyring: PathBuf,
    /// Keys replaced by a rotation, kept for the record.
    pub retired: PathBuf,
}

/// Paths of a key folder.
pub fn key_paths(dir: &Path) -> KeyPaths {
    KeyPaths {
        root: dir.join("root.key"),
        release: dir.join("release.key"),
        online: dir.join("online.key"),
        trust: dir.join("trust.json"),
        keyring: dir.join("keyring"),
        retired: dir.join("retired"),
    }
}

/// Where keyring version `version` is kept in a key folder's `keyring/`.
pub fn keyring_file(dir: &Path, version: u64) -> PathBuf {
    dir.join(format!("{version:08}.json"))
}

/// Signs `keyring` with `signers` (each adds a signature).
fn sign_keyring(keyring: &Keyring, signers: &[&RoleKey]) -> anyhow::Result<Envelope> {
    let bytes = serde_json::to_vec(keyring)?;
    let mut env = signers[0].pair.sign(KEYRING_PAYLOAD_TYPE, &bytes);
    for s in &signers[1..] {
        s.pair.add_signature(&mut env)?;
    }
    Ok(env)
}

fn write_json(path: &Path, value: &impl Serialize, mode: ferry_fs::Mode) -> anyhow::Result<()> {
    let json = serde_json::to_vec_pretty(value)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    ferry_fs::write(path, &json, mode).with_context(|| format!("cannot write {}", path.display()))
}

fn entry(key: &RoleKey) -> TrustedKeyEntry {
    TrustedKeyEntry {
        keyid: key.pair.id(),
        role: key.role,
        public: hex::encode(key.pair.public()),
    }
}

/// Creates a root key, a release key, an online key, `trust.json` (the root key, threshold 1)
/// and keyring version 1 in `dir`. Refuses when any of them exists. Returns what to print.
pub fn generate_keyset(dir: &Path) -> anyhow::Result<Vec<String>> {
    generate_keyset_sealed(dir, None)
}

/// [`generate_keyset`], with the root and release keys encrypted under `passphrase` when one
/// is given (the online key stays plain: a server starts unattended).
pub fn generate_keyset_sealed(dir: &Path, passphrase: Option<&str>) -> anyhow::Result<Vec<String>> {
    let p = key_paths(dir);
    for path in [&p.root, &p.release, &p.online, &p.trust, &p.keyring] {
        if path.exists() {
            bail!("{} exists; refusing to overwrite keys", path.display());
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let root = generate(KeyRole::Root)?;
    let release = generate(KeyRole::Release)?;
    let online = generate(KeyRole::Online)?;
    let mut notes = Vec::new();
    for (key, path) in [
        (&root, &p.root),
        (&release, &p.release),
        (&online, &p.online),
    ] {
        match passphrase {
            Some(pass) if key.role != KeyRole::Online => save_sealed(key, path, pass)?,
            _ => save(key, path)?,
        }
        notes.push(format!(
            "created {} key {} at {}{}",
            key.role,
            key.pair.id(),
            path.display(),
            if passphrase.is_some() && key.role != KeyRole::Online {
                " (encrypted)"
            } else {
                ""
            }
        ));
    }
    let trust = TrustFile {
        threshold: Some(1),
        keys: vec![entry(&root)],
        first_keyring: None,
    };
    write_json(&p.trust, &trust, ferry_fs::Mode::Public)?;
    notes.push(format!(
        "wrote {} (the root key apps pin)",
        p.trust.display()
    ));
    let keyring = Keyring {
        format: 1,
        version: 1,
        created: OffsetDateTime::now_utc(),
        root: RootSet {
            threshold: 1,
            keys: vec![entry(&root)],
        },
        keys: vec![
            KeyringKey {
                key: entry(&release),
                expires_at: None,
            },
            KeyringKey {
                key: entry(&online),
                expires_at: None,
            },
        ],
    };
    let env = sign_keyring(&keyring, &[&root])?;
    let path = keyring_file(&p.keyring, 1);
    write_json(&path, &env, ferry_fs::Mode::Public)?;
    notes.push(format!("wrote keyring version 1 at {}", path.display()));
    Ok(notes)
}

/// Development keys for `ferry serve --demo`: [`generate_keyset`] when `dir` holds no key yet.
pub fn ensure_dev_keys(dir: &Path) -> anyhow::Result<Vec<String>> {
    let p = key_paths(dir);
    if p.online.exists() || p.trust.exists() {
        return Ok(Vec::new());
    }
    let mut notes = generate_keyset(dir)?;
    notes.push(
        "THESE ARE DEVELOPMENT KEYS, created by --demo next to the server: never ship an app \
         that trusts them (use `ferry keys generate` on an offline machine)"
            .into(),
    );
    Ok(notes)
}

/// Every keyring envelope in `dir`, in version order (file names are the versions).
pub fn read_chain(dir: &Path) -> anyhow::Result<Vec<Envelope>> {
    let mut numbered = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    for e in entries {
        let path = e?.path();
        let Some(n) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        numbered.push((n, path));
    }
    numbered.sort();
    let mut chain = Vec::with_capacity(numbered.len());
    for (_, path) in numbered {
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let env: Envelope = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a keyring envelope", path.display()))?;
        chain.push(env);
    }
    Ok(chain)
}

/// Reads `trust.json` and walks the keyrings in `keyring/`: the trust in force and the chain.
pub fn load_trust(dir: &Path) -> anyhow::Result<(TrustFile, TrustState, Vec<Envelope>)> {
    let p = key_paths(dir);
    let text =
        std::fs::read(&p.trust).with_context(|| format!("cannot read {}", p.trust.display()))?;
    let trust = TrustFile::from_json(&text).with_context(|| p.trust.display().to_string())?;
    let mut state =
        TrustState::from_trust_file(&trust).with_context(|| p.trust.display().to_string())?;
    let chain = read_chain(&p.keyring)?;
    if state.is_rooted() {
        state
            .advance_all(&chain)
            .with_context(|| format!("the keyrings in {} do not verify", p.keyring.display()))?;
        if state.version() == 0 {
            bail!(
                "{} pins root keys but {} holds no keyring: copy the keyring/ folder made by \
                 `ferry keys generate`",
                p.trust.display(),
                p.keyring.display()
            );
        }
    } else if !chain.is_empty() {
        bail!(
            "{} holds keyrings but {} pins no root key to check them",
            p.keyring.display(),
            p.trust.display()
        );
    }
    Ok((trust, state, chain))
}

/// Loads the online key, `trust.json` and the keyrings from `dir`, checking that the newest
/// keyring (or the fixed trust file) lists the online key and that it has not expired.
pub fn load_server_keys(dir: &Path) -> anyhow::Result<ServerKeys> {
    let p = key_paths(dir);
    if !p.online.exists() && !p.trust.exists() {
        bail!(
            "no keys in {}: run `ferry keys generate --out DIR` on an offline machine and copy \
             online.key, trust.json and keyring/ here (or `ferry serve --demo` for development \
             keys)",
            dir.display()
        );
    }
    if !p.online.exists() {
        bail!(
            "{} is missing: copy online.key from the folder `ferry keys generate` (or `ferry keys \
             rotate online`) wrote, beside {}",
            p.online.display(),
            p.trust.display()
        );
    }
    let online = load(&p.online)?;
    if online.role != KeyRole::Online {
        bail!(
            "{} is a {} key, not an online key",
            p.online.display(),
            online.role
        );
    }
    let (trust, state, chain) = load_trust(dir)?;
    let now = OffsetDateTime::now_utc();
    let listed = state
        .keys()
        .iter()
        .any(|k| k.key.keyid == online.pair.id() && k.key.role == KeyRole::Online);
    if !listed {
        bail!(
            "the online key {} in {} is not in keyring version {}: copy the online.key that \
             `ferry keys rotate online` made together with the keyring/ folder",
            online.pair.id(),
            p.online.display(),
            state.version()
        );
    }
    if state.ring_at(now).get(&online.pair.id()).is_none() {
        bail!(
            "the online key {} expired at {}: rotate it with `ferry keys rotate online`",
            online.pair.id(),
            state
                .expiry_of(&online.pair.id())
                .map(|e| e.to_string())
                .unwrap_or_default()
        );
    }
    Ok(ServerKeys {
        online,
        trust,
        state,
        chain,
    })
}

/// Which key `ferry keys rotate` replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RotateRole {
    /// The online key (on every server).
    Online,
    /// The release key (signs releases).
    Release,
    /// The root key (apps pin it; the new keyring is signed by the old and the new root).
    Root,
}

/// Replaces the `role` key in the key folder `dir` with a new one and writes the next keyring
/// version, signed with `root.key` (and, for root, with the new root key too; a new
/// `trust.json` for new app builds is written then, the old one kept in `retired/`). The old
/// key file moves to `retired/`. `expires_in` sets the new online key's expiry. Nothing
/// replaces the old files until the new keyring is written. Returns what to print.
pub fn rotate(
    dir: &Path,
    role: RotateRole,
    expires_in: Option<time::Duration>,
) -> anyhow::Result<Vec<String>> {
    let p = key_paths(dir);
    let root = load(&p.root).with_context(|| {
        format!(
            "rotation signs the new keyring with the root key; {} is needed",
            p.root.display()
        )
    })?;
    if root.role != KeyRole::Root {
        bail!(
            "{} is a {} key, not a root key",
            p.root.display(),
            root.role
        );
    }
    let (trust_file, state, _) = load_trust(dir)?;
    let Some(root_set) = state.root() else {
        bail!(
            "{} pins no root key: a fixed trust file cannot rotate (apps need a trust file from \
             `ferry keys generate`)",
            p.trust.display()
        );
    };
    if !root_set.keys.iter().any(|k| k.keyid == root.pair.id()) {
        bail!(
            "{} is not a root key of keyring version {}",
            p.root.display(),
            state.version()
        );
    }
    if root_set.threshold > 1 {
        bail!(
            "keyring version {} needs {} root signatures; sign it with the other root keys by \
             hand",
            state.version(),
            root_set.threshold
        );
    }
    let key_role = match role {
        RotateRole::Online => KeyRole::Online,
        RotateRole::Release => KeyRole::Release,
        RotateRole::Root => KeyRole::Root,
    };
    if expires_in.is_some() && key_role != KeyRole::Online {
        bail!("--expires-in-days applies to online keys only");
    }
    let fresh = generate(key_role)?;
    let now = OffsetDateTime::now_utc();
    let mut next = Keyring {
        format: 1,
        version: state.version() + 1,
        created: now,
        root: root_set.clone(),
        keys: state.keys().to_vec(),
    };
    if key_role == KeyRole::Root {
        next.root = RootSet {
            threshold: 1,
            keys: vec![entry(&fresh)],
        };
    } else {
        next.keys.retain(|k| k.key.role != key_role);
        next.keys.push(KeyringKey {
            key: entry(&fresh),
            expires_at: expires_in.map(|d| now + d),
        });
    }
    let env = if key_role == KeyRole::Root {
        sign_keyring(&next, &[&root, &fresh])?
    } else {
        sign_keyring(&next, &[&root])?
    };
    // Check it the way a client will before anything is written.
    let mut check = state.clone();
    check
        .advance(&env)
        .context("the new keyring does not verify")?;
    let key_path = match key_role {
        KeyRole::Root => &p.root,
        KeyRole::Release => &p.release,
        KeyRole::Online => &p.online,
    };
    // Order: the new secret beside the old one, then the keyring, then the swap. A failure
    // before the keyring is written leaves the folder as it was (plus a `.new` file).
    let staged = key_path.with_extension("key.new");
    if staged.exists() {
        bail!(
            "{} exists (a rotation that did not finish?): remove it and run again",
            staged.display()
        );
    }
    let path = keyring_file(&p.keyring, next.version);
    if path.exists() {
        bail!(
            "{} exists but does not follow the keyrings before it: remove it and run again",
            path.display()
        );
    }
    if is_sealed(key_path) {
        // The key it replaces was encrypted: so is the new one.
        let pass = crate::keys::sealed::passphrase(key_path, true)?;
        save_sealed(&fresh, &staged, &pass)?;
    } else {
        save(&fresh, &staged)?;
    }
    write_json(&path, &env, ferry_fs::Mode::Public)?;
    let mut notes = Vec::new();
    std::fs::create_dir_all(&p.retired)
        .with_context(|| format!("cannot create {}", p.retired.display()))?;
    if key_path.exists() {
        // Kept byte for byte: an encrypted key stays encrypted.
        let (_, old_id) = file_id(key_path)?;
        let retired = p.retired.join(format!("{key_role}-{old_id}.key"));
        if !retired.exists() {
            let bytes = std::fs::read(key_path)
                .with_context(|| format!("cannot read {}", key_path.display()))?;
            ferry_fs::write(&retired, &bytes, ferry_fs::Mode::OwnerOnly)
                .with_context(|| format!("cannot write {}", retired.display()))?;
        }
        notes.push(format!(
            "retired {key_role} key {old_id} (kept at {})",
            retired.display()
        ));
    }
    ferry_fs::commit(&staged, key_path)
        .with_context(|| format!("cannot move {} into place", staged.display()))?;
    notes.push(format!(
        "created {key_role} key {} at {}",
        fresh.pair.id(),
        key_path.display()
    ));
    notes.push(format!(
        "wrote keyring version {} at {}",
        next.version,
        path.display()
    ));
    if key_role == KeyRole::Root {
        let old_copy = p.retired.join(format!("trust-{}.json", state.version()));
        write_json(&old_copy, &trust_file, ferry_fs::Mode::Public)?;
        let fresh_trust = TrustFile {
            threshold: Some(1),
            keys: vec![entry(&fresh)],
            first_keyring: Some(next.version),
        };
        write_json(&p.trust, &fresh_trust, ferry_fs::Mode::Public)?;
        notes.push(format!(
            "wrote {} for new app builds (keyring version {} on); apps pinned to the old one \
             (kept at {}) keep working",
            p.trust.display(),
            next.version,
            old_copy.display()
        ));
    }
    Ok(notes)
}
