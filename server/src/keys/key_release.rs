//! The key-release key: the server's X25519 key that sealed variants' file keys are wrapped to
//! (`ferry sign`), and that it unwraps them with when a device asks with a receipt.
//!
//! `key-release.key` in a key folder is JSON `{role: "key-release", alg: "x25519", keyid,
//! public, secret}` (hex, mode 0600), kept on every server like `online.key`. Its public key
//! is listed in the keyring's `key_release`, current first. A rotation (`ferry keys rotate
//! key-release`) makes a new one and keeps the old in `retired/key-release-<id>.key`: servers
//! load those too, since releases sealed to the old key are still served.

use super::*;

use ferry_shared::trust::key_release::{KeyReleaseKey, X25519};

/// The role name in a key-release key file.
pub const KEY_RELEASE_ROLE: &str = "key-release";

#[derive(Debug, Serialize, Deserialize)]
struct KeyReleaseFile {
    role: String,
    alg: String,
    keyid: KeyId,
    public: String,
    secret: String,
}

/// A key-release key pair.
#[derive(Clone)]
pub struct KeyReleaseSecret {
    secret: [u8; 32],
    public: [u8; 32],
}

impl std::fmt::Debug for KeyReleaseSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyReleaseSecret({})", self.id().short())
    }
}

impl KeyReleaseSecret {
    /// A new key from the operating system's randomness.
    pub fn generate() -> anyhow::Result<Self> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        Ok(Self::from_secret(secret))
    }

    fn from_secret(secret: [u8; 32]) -> Self {
        Self {
            public: ferry_fs::sealed::keys::public_key(&secret),
            secret,
        }
    }

    /// Its id ([`KeyReleaseKey::id_of`]).
    pub fn id(&self) -> KeyId {
        KeyReleaseKey::id_of(&self.public)
    }

    /// The keyring entry of its public key.
    pub fn entry(&self) -> KeyReleaseKey {
        KeyReleaseKey::x25519(&self.public)
    }

    /// The secret, for unwrapping.
    pub fn secret(&self) -> &[u8; 32] {
        &self.secret
    }

    /// Writes it to `path` (mode 0600); refuses to overwrite.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        if path.exists() {
            bail!("{} exists; refusing to overwrite a key", path.display());
        }
        let file = KeyReleaseFile {
            role: KEY_RELEASE_ROLE.into(),
            alg: X25519.into(),
            keyid: self.id(),
            public: hex::encode(self.public),
            secret: hex::encode(self.secret),
        };
        write_json(path, &file, ferry_fs::Mode::OwnerOnly)
    }

    /// Reads a key-release key file, checking its id and public key against the secret.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read(path).with_context(|| format!("cannot read key {}", path.display()))?;
        let file: KeyReleaseFile = serde_json::from_slice(&text)
            .with_context(|| format!("{} is not a key-release key file", path.display()))?;
        if file.role != KEY_RELEASE_ROLE || file.alg != X25519 {
            bail!(
                "{} is a {} {} key, not an x25519 key-release key",
                path.display(),
                file.alg,
                file.role
            );
        }
        let mut secret = [0u8; 32];
        hex::decode_to_slice(&file.secret, &mut secret)
            .with_context(|| format!("{}: secret is not 64 hex characters", path.display()))?;
        let key = Self::from_secret(secret);
        if key.id() != file.keyid || hex::encode(key.public) != file.public {
            bail!(
                "{}: key id or public key does not match the secret",
                path.display()
            );
        }
        Ok(key)
    }
}

/// Every key-release key a key folder holds: `key-release.key` first, then the retired ones.
pub fn load_key_release(dir: &Path) -> anyhow::Result<Vec<KeyReleaseSecret>> {
    let p = key_paths(dir);
    let mut out = Vec::new();
    if p.key_release.exists() {
        out.push(KeyReleaseSecret::load(&p.key_release)?);
    }
    let Ok(entries) = std::fs::read_dir(&p.retired) else {
        return Ok(out);
    };
    let mut retired: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("key-release-") && n.ends_with(".key"))
        })
        .collect();
    retired.sort();
    for path in retired {
        out.push(KeyReleaseSecret::load(&path)?);
    }
    Ok(out)
}

/// `ferry keys rotate key-release`: a new key-release key, listed first in the next keyring
/// version (the old ones stay listed, and their files move to `retired/`, because releases
/// sealed to them are still served). Signed by `root`. Returns what to print.
pub fn rotate_key_release(dir: &Path, root: &dyn signer::Signer) -> anyhow::Result<Vec<String>> {
    let p = key_paths(dir);
    let (_, state, _) = load_trust(dir)?;
    let root_set = super::rotate::check_root(root, &state, &p)?;
    let fresh = KeyReleaseSecret::generate()?;
    let mut next = Keyring {
        format: 1,
        version: state.version() + 1,
        created: OffsetDateTime::now_utc(),
        root: root_set,
        keys: state.keys().to_vec(),
        key_release: vec![fresh.entry()],
    };
    next.key_release.extend(state.key_release().iter().cloned());
    let env = sign_keyring(&next, &[root])?;
    let mut check = state.clone();
    check
        .advance(&env)
        .context("the new keyring does not verify")?;
    let path = keyring_file(&p.keyring, next.version);
    if path.exists() {
        bail!(
            "{} exists but does not follow the keyrings before it: remove it and run again",
            path.display()
        );
    }
    let staged = p.key_release.with_extension("key.new");
    if staged.exists() {
        bail!(
            "{} exists (a rotation that did not finish?): remove it and run again",
            staged.display()
        );
    }
    fresh.save(&staged)?;
    write_json(&path, &env, ferry_fs::Mode::Public)?;
    let mut notes = Vec::new();
    if p.key_release.exists() {
        let old = KeyReleaseSecret::load(&p.key_release)?;
        let retired = p
            .retired
            .join(format!("key-release-{}.key", old.id().short()));
        std::fs::create_dir_all(&p.retired)
            .with_context(|| format!("cannot create {}", p.retired.display()))?;
        if !retired.exists() {
            old.save(&retired)?;
        }
        notes.push(format!(
            "retired key-release key {} (kept at {}: servers still unwrap releases sealed to it)",
            old.id(),
            retired.display()
        ));
    }
    ferry_fs::commit(&staged, &p.key_release)
        .with_context(|| format!("cannot move {} into place", staged.display()))?;
    notes.push(format!(
        "created key-release key {} at {}",
        fresh.id(),
        p.key_release.display()
    ));
    notes.push(format!(
        "wrote keyring version {} at {}",
        next.version,
        path.display()
    ));
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_round_trip_and_refuse_mismatches() {
        let dir = tempfile::tempdir().expect("dir");
        let k = KeyReleaseSecret::generate().expect("key");
        let path = dir.path().join("key-release.key");
        k.save(&path).expect("save");
        assert!(k.save(&path).is_err(), "never overwrites");
        let back = KeyReleaseSecret::load(&path).expect("load");
        assert_eq!(back.id(), k.id());
        assert_eq!(back.entry().x25519_public(), Ok(Some(k.public)));
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        v["public"] = serde_json::json!(hex::encode([1u8; 32]));
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, serde_json::to_vec(&v).expect("json")).expect("write");
        assert!(KeyReleaseSecret::load(&bad).is_err());
        std::fs::write(&bad, b"{}").expect("write");
        assert!(KeyReleaseSecret::load(&bad).is_err());
    }
}
