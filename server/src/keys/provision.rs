//! A server's key set: generating it (`ferry keys generate`, development keys), and loading
//! the online key, trust file and keyring chain at start.

use super::*;

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
    /// The key-release keys held (`key-release.key`, then retired ones): what unwraps sealed
    /// variants' file keys. Empty when the folder predates sealing.
    pub key_release: Vec<KeyReleaseSecret>,
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
    /// Unwraps sealed variants' file keys; on every server.
    pub key_release: PathBuf,
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
        key_release: dir.join("key-release.key"),
    }
}

/// Where keyring version `version` is kept in a key folder's `keyring/`.
pub fn keyring_file(dir: &Path, version: u64) -> PathBuf {
    dir.join(format!("{version:08}.json"))
}

/// Signs `keyring` with `signers` (each adds a signature, checked against its public key).
pub(super) fn sign_keyring(
    keyring: &Keyring,
    signers: &[&dyn signer::Signer],
) -> anyhow::Result<Envelope> {
    let bytes = serde_json::to_vec(keyring)?;
    let mut env = Envelope::unsigned(KEYRING_PAYLOAD_TYPE, &bytes);
    for s in signers {
        signer::add_signature(*s, &mut env)?;
    }
    Ok(env)
}

pub(super) fn write_json(
    path: &Path,
    value: &impl Serialize,
    mode: ferry_fs::Mode,
) -> anyhow::Result<()> {
    let json = serde_json::to_vec_pretty(value)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    ferry_fs::write(path, &json, mode).with_context(|| format!("cannot write {}", path.display()))
}

/// Creates a root key, a release key, an online key, `trust.json` (the root key, threshold 1)
/// and keyring version 1 in `dir`. Refuses when any of them exists. Returns what to print.
pub fn generate_keyset(dir: &Path) -> anyhow::Result<Vec<String>> {
    generate_keyset_sealed(dir, None)
}

/// [`generate_keyset`], with the root and release keys encrypted under `passphrase` when one
/// is given (the online key stays plain: a server starts unattended).
pub fn generate_keyset_sealed(dir: &Path, passphrase: Option<&str>) -> anyhow::Result<Vec<String>> {
    generate_keyset_with(dir, passphrase, &External::default())
}

/// Root and release keys kept outside the key folder (an HSM, a KMS) for
/// [`generate_keyset_with`].
#[derive(Default)]
pub struct External<'a> {
    /// The root key: its public key goes in `trust.json` and keyring version 1, which it signs.
    pub root: Option<&'a dyn signer::Signer>,
    /// The release key: its public key goes in keyring version 1.
    pub release: Option<&'a dyn signer::Signer>,
}

/// [`generate_keyset_sealed`], with the root and release keys of `external` used instead of
/// new key files (no secret of theirs is written).
pub fn generate_keyset_with(
    dir: &Path,
    passphrase: Option<&str>,
    external: &External<'_>,
) -> anyhow::Result<Vec<String>> {
    let p = key_paths(dir);
    for path in [
        &p.root,
        &p.release,
        &p.online,
        &p.trust,
        &p.keyring,
        &p.key_release,
    ] {
        if path.exists() {
            bail!("{} exists; refusing to overwrite keys", path.display());
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut notes = Vec::new();
    // Keys are made in memory and written only after the keyring is signed: a token or signer
    // that fails leaves the folder as it was.
    let mut made: Vec<(KeyRole, signer::FileSigner, Option<&str>)> = Vec::new();
    for (role, path, ext) in [
        (KeyRole::Root, &p.root, external.root),
        (KeyRole::Release, &p.release, external.release),
        (KeyRole::Online, &p.online, None),
    ] {
        if let Some(ext) = ext {
            notes.push(format!(
                "using {} as the {role} key {} ({}; no file written)",
                ext.describe(),
                ext.id(),
                ext.public().algorithm()
            ));
            continue;
        }
        let sealed = passphrase.filter(|_| role != KeyRole::Online);
        made.push((role, signer::FileSigner::new(generate(role)?, path), sealed));
    }
    let of = |role: KeyRole| -> &dyn signer::Signer {
        let ext = match role {
            KeyRole::Root => external.root,
            KeyRole::Release => external.release,
            KeyRole::Online => None,
        };
        ext.unwrap_or_else(|| {
            made.iter()
                .find(|(r, _, _)| *r == role)
                .map(|(_, s, _)| s as &dyn signer::Signer)
                .expect("every role has a key")
        })
    };
    let key_release = KeyReleaseSecret::generate()?;
    let root_entry = TrustedKeyEntry::of(KeyRole::Root, &of(KeyRole::Root).public());
    let trust = TrustFile {
        threshold: Some(1),
        keys: vec![root_entry.clone()],
        first_keyring: None,
    };
    let keyring = Keyring {
        format: 1,
        version: 1,
        created: OffsetDateTime::now_utc(),
        root: RootSet {
            threshold: 1,
            keys: vec![root_entry],
        },
        keys: [KeyRole::Release, KeyRole::Online]
            .into_iter()
            .map(|role| KeyringKey {
                key: TrustedKeyEntry::of(role, &of(role).public()),
                expires_at: None,
            })
            .collect(),
        key_release: vec![key_release.entry()],
    };
    let env = sign_keyring(&keyring, &[of(KeyRole::Root)])?;
    for (role, key, sealed) in &made {
        let path = match role {
            KeyRole::Root => &p.root,
            KeyRole::Release => &p.release,
            KeyRole::Online => &p.online,
        };
        match sealed {
            Some(pass) => save_sealed(key.key(), path, pass)?,
            None => save(key.key(), path)?,
        }
        notes.push(format!(
            "created {role} key {} at {}{}",
            key.key().pair.id(),
            path.display(),
            if sealed.is_some() { " (encrypted)" } else { "" }
        ));
    }
    key_release.save(&p.key_release)?;
    notes.push(format!(
        "created key-release key {} at {} (unwraps sealed variants' keys; on every server)",
        key_release.id(),
        p.key_release.display()
    ));
    write_json(&p.trust, &trust, ferry_fs::Mode::Public)?;
    notes.push(format!(
        "wrote {} (the root key apps pin)",
        p.trust.display()
    ));
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
    let key_release = load_key_release(dir)?;
    Ok(ServerKeys {
        online,
        trust,
        state,
        chain,
        key_release,
    })
}
