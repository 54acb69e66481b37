//! `ferry keys rotate`: a new key for a role, signed into the next keyring version.

use super::*;

/// Which key `ferry keys rotate` replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RotateRole {
    /// The online key (on every server).
    Online,
    /// The release key (signs releases).
    Release,
    /// The root key (apps pin it; the new keyring is signed by the old and the new root).
    Root,
    /// The key-release key that sealed variants' file keys are wrapped to (on every server;
    /// the old one is kept, since releases sealed to it are still served).
    KeyRelease,
}

/// Where the keys of a rotation are, besides the key folder's files.
#[derive(Default)]
pub struct RotateKeys<'a> {
    /// The new key for the role, kept where its URI says (`--new-key`); `None`: a new key
    /// file is made.
    pub new_key: Option<&'a dyn signer::Signer>,
    /// The root key that signs the new keyring (`--root-key`); `None`: the folder's
    /// `root.key`.
    pub root_key: Option<&'a dyn signer::Signer>,
    /// The operator checked that every client in the field verifies ECDSA P-256
    /// (`--fleet-reads-p256`): needed for the first keyring that lists a P-256 key.
    pub fleet_reads_p256: bool,
}

/// Refuses the first keyring version that lists an ECDSA P-256 key unless `allowed`: clients
/// built before P-256 refuse such a keyring (docs/keys.md, "Moving to ECDSA P-256").
fn gate_p256(state: &TrustState, next: &Keyring, allowed: bool) -> anyhow::Result<()> {
    let p256 =
        |k: &TrustedKeyEntry| k.algorithm == ferry_shared::trust::key::Algorithm::EcdsaP256Sha256;
    let held = state.root().is_some_and(|r| r.keys.iter().any(p256))
        || state.keys().iter().any(|k| p256(&k.key));
    let next_has = next.root.keys.iter().any(p256) || next.keys.iter().any(|k| p256(&k.key));
    if next_has && !held && !allowed {
        bail!(
            "keyring version {} would list an ECDSA P-256 key, and the keyring in force lists \
             none: ferry clients \
             built before P-256 support refuse it (they keep their last model and take no \
             new one). Move when every app build in the field verifies P-256 \
             (docs/keys.md, \"Moving to ECDSA P-256\"), then run again with \
             --fleet-reads-p256; or use an Ed25519 key (EC:edwards25519 in a token)",
            next.version
        );
    }
    Ok(())
}

/// [`rotate_with`] with key files only: a new key file, signed by the folder's `root.key`.
pub fn rotate(
    dir: &Path,
    role: RotateRole,
    expires_in: Option<time::Duration>,
) -> anyhow::Result<Vec<String>> {
    rotate_with(dir, role, expires_in, &RotateKeys::default())
}

/// Replaces the `role` key in the key folder `dir` with a new one and writes the next keyring
/// version, signed with the root key (and, for root, with the new root key too; a new
/// `trust.json` for new app builds is written then, the old one kept in `retired/`). The old
/// key file moves to `retired/`. `expires_in` sets the new online key's expiry. Nothing
/// replaces the old files until the new keyring is written. Returns what to print.
pub fn rotate_with(
    dir: &Path,
    role: RotateRole,
    expires_in: Option<time::Duration>,
    with: &RotateKeys<'_>,
) -> anyhow::Result<Vec<String>> {
    let p = key_paths(dir);
    let root_file;
    let root: &dyn signer::Signer = match with.root_key {
        Some(r) => r,
        None => {
            let key = load(&p.root).with_context(|| {
                format!(
                    "rotation signs the new keyring with the root key; {} is needed (or give --root-key URI)",
                    p.root.display()
                )
            })?;
            root_file = signer::FileSigner::new(key, &p.root);
            &root_file
        }
    };
    let key_role = match role {
        RotateRole::Online => KeyRole::Online,
        RotateRole::Release => KeyRole::Release,
        RotateRole::Root => KeyRole::Root,
        RotateRole::KeyRelease => {
            if expires_in.is_some() || with.new_key.is_some() {
                bail!("--expires-in-days and --new-key do not apply to the key-release key");
            }
            return rotate_key_release(dir, root);
        }
    };
    let (trust_file, state, _) = load_trust(dir)?;
    let root_set = &check_root(root, &state, &p)?;
    if expires_in.is_some() && key_role != KeyRole::Online {
        bail!("--expires-in-days applies to online keys only");
    }
    if with.new_key.is_some() && key_role == KeyRole::Online {
        bail!(
            "--new-key: the online key signs every decision on every server, unattended; it \
             stays a key file (docs/keys.md, \"The online key\")"
        );
    }
    let fresh_file = match with.new_key {
        Some(_) => None,
        None => Some(signer::FileSigner::new(
            generate(key_role)?,
            &key_path_of(&p, key_role),
        )),
    };
    let fresh: &dyn signer::Signer = match (with.new_key, &fresh_file) {
        (Some(k), _) => k,
        (None, Some(f)) => f,
        (None, None) => unreachable!("a new key file is made when none is given"),
    };
    let fresh_entry = TrustedKeyEntry::of(key_role, &fresh.public());
    if state
        .keys()
        .iter()
        .any(|k| k.key.keyid == fresh_entry.keyid)
        || root_set.keys.iter().any(|k| k.keyid == fresh_entry.keyid)
    {
        bail!(
            "{} (key {}) is already in keyring version {}: give a new key",
            fresh.describe(),
            fresh_entry.keyid,
            state.version()
        );
    }
    let next = next_keyring(&state, root_set, key_role, fresh_entry.clone(), expires_in);
    gate_p256(&state, &next, with.fleet_reads_p256)?;
    let env = if key_role == KeyRole::Root {
        sign_keyring(&next, &[root, fresh])?
    } else {
        sign_keyring(&next, &[root])?
    };
    // Check it the way a client will before anything is written.
    let mut check = state.clone();
    check
        .advance(&env)
        .context("the new keyring does not verify")?;
    let key_path = &key_path_of(&p, key_role);
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
    if let Some(f) = &fresh_file {
        if is_sealed(key_path) {
            // The key it replaces was encrypted: so is the new one.
            let pass = crate::keys::sealed::passphrase(key_path, true)?;
            save_sealed(f.key(), &staged, &pass)?;
        } else {
            save(f.key(), &staged)?;
        }
    }
    write_json(&path, &env, ferry_fs::Mode::Public)?;
    let mut notes: Vec<String> = retire(&p, key_role, key_path)?.into_iter().collect();
    if fresh_file.is_some() {
        ferry_fs::commit(&staged, key_path)
            .with_context(|| format!("cannot move {} into place", staged.display()))?;
        notes.push(format!(
            "created {key_role} key {} at {}",
            fresh.id(),
            key_path.display()
        ));
    } else {
        if key_path.exists() {
            // The retired copy is kept above; no file key of this role stays in use.
            std::fs::remove_file(key_path)
                .with_context(|| format!("cannot remove {}", key_path.display()))?;
        }
        notes.push(format!(
            "the {key_role} key is now {} (key {}, {}); no secret was written",
            fresh.describe(),
            fresh.id(),
            fresh.public().algorithm()
        ));
    }
    notes.push(format!(
        "wrote keyring version {} at {}",
        next.version,
        path.display()
    ));
    if key_role == KeyRole::Root {
        notes.push(write_root_trust(
            &p,
            &trust_file,
            state.version(),
            next.version,
            fresh_entry,
        )?);
    }
    Ok(notes)
}

/// The root set in force, after checking that `root` is one of its keys and can sign the next
/// keyring alone.
pub(super) fn check_root(
    root: &dyn signer::Signer,
    state: &TrustState,
    p: &KeyPaths,
) -> anyhow::Result<RootSet> {
    if let Some(r) = root.role()
        && r != KeyRole::Root
    {
        bail!("{} is a {r} key, not a root key", root.describe());
    }
    let Some(root_set) = state.root().cloned() else {
        bail!(
            "{} pins no root key: a fixed trust file cannot rotate (apps need a trust file from \
             `ferry keys generate`)",
            p.trust.display()
        );
    };
    if !root_set.keys.iter().any(|k| k.keyid == root.id()) {
        bail!(
            "{} (key {}) is not a root key of keyring version {}",
            root.describe(),
            root.id(),
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
    Ok(root_set)
}

/// Copies the key file a rotation replaces to `retired/` (byte for byte: an encrypted key
/// stays encrypted); returns the note to print.
fn retire(p: &KeyPaths, key_role: KeyRole, key_path: &Path) -> anyhow::Result<Option<String>> {
    std::fs::create_dir_all(&p.retired)
        .with_context(|| format!("cannot create {}", p.retired.display()))?;
    if !key_path.exists() {
        return Ok(None);
    }
    let (_, old_id) = file_id(key_path)?;
    let retired = p.retired.join(format!("{key_role}-{old_id}.key"));
    if !retired.exists() {
        let bytes = std::fs::read(key_path)
            .with_context(|| format!("cannot read {}", key_path.display()))?;
        ferry_fs::write(&retired, &bytes, ferry_fs::Mode::OwnerOnly)
            .with_context(|| format!("cannot write {}", retired.display()))?;
    }
    Ok(Some(format!(
        "retired {key_role} key {old_id} (kept at {})",
        retired.display()
    )))
}

/// Keyring version N+1: version N with the `key_role` key replaced by `fresh`.
fn next_keyring(
    state: &TrustState,
    root_set: &RootSet,
    key_role: KeyRole,
    fresh_entry: TrustedKeyEntry,
    expires_in: Option<time::Duration>,
) -> Keyring {
    let now = OffsetDateTime::now_utc();
    let mut next = Keyring {
        format: 1,
        version: state.version() + 1,
        created: now,
        root: root_set.clone(),
        keys: state.keys().to_vec(),
        key_release: state.key_release().to_vec(),
    };
    if key_role == KeyRole::Root {
        next.root = RootSet {
            threshold: 1,
            keys: vec![fresh_entry],
        };
    } else {
        next.keys.retain(|k| k.key.role != key_role);
        next.keys.push(KeyringKey {
            key: fresh_entry,
            expires_at: expires_in.map(|d| now + d),
        });
    }
    next
}

/// After a root rotation: keeps the old `trust.json` as `retired/trust-<held>.json` and writes
/// the new one (the new root, from keyring `version` on).
fn write_root_trust(
    p: &KeyPaths,
    trust_file: &TrustFile,
    held: u64,
    version: u64,
    fresh_entry: TrustedKeyEntry,
) -> anyhow::Result<String> {
    let old_copy = p.retired.join(format!("trust-{}.json", held));
    write_json(&old_copy, &trust_file, ferry_fs::Mode::Public)?;
    let fresh_trust = TrustFile {
        threshold: Some(1),
        keys: vec![fresh_entry],
        first_keyring: Some(version),
    };
    write_json(&p.trust, &fresh_trust, ferry_fs::Mode::Public)?;
    Ok(format!(
        "wrote {} for new app builds (keyring version {} on); apps pinned to the old one \
         (kept at {}) keep working",
        p.trust.display(),
        version,
        old_copy.display()
    ))
}

fn key_path_of(p: &KeyPaths, role: KeyRole) -> PathBuf {
    match role {
        KeyRole::Root => p.root.clone(),
        KeyRole::Release => p.release.clone(),
        KeyRole::Online => p.online.clone(),
    }
}
