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
