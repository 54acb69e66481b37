//! Where a device keeps the keys of sealed variants, and how it gets them.
//!
//! The cache holds only ciphertext and the signed manifest, whose file keys are wrapped to the
//! server's key-release key (useless without the server). A key the server released is kept
//! unwrapped by a [`KeyStore`] only: the app's platform key store (Android Keystore, the iOS
//! Keychain, a TPM) through its own implementation, or [`FileKeyStore`], a folder of files
//! beside the cache that protects nothing against whoever copies both (for tests and
//! development; `docs/client.md`). Entries are named by install id and file, so a cache copied
//! to another install finds no key and must ask the server, which refuses without a receipt for
//! that install.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use ferry_shared::Sha256Digest;

/// Keeps the unwrapped file keys of sealed variants. Implementations must be safe to share
/// between threads and processes of one app.
pub trait KeyStore: Send + Sync {
    /// The key stored under `name`, if any.
    fn get(&self, name: &str) -> Option<[u8; 32]>;
    /// Stores `key` under `name` (replacing one there).
    fn put(&self, name: &str, key: &[u8; 32]) -> Result<(), String>;
    /// Forgets the key under `name` (a stopped or revoked release).
    fn remove(&self, name: &str);
}

/// The platform attestation an app adds to its key requests (Play Integrity, App Attest, a
/// TPM quote): given the request's binding ([`KeyRequest::binding`], the nonce to have the
/// platform sign), the attestation's kind and token, or `None` when it has none to give.
pub trait Attest: Send + Sync {
    /// The `(kind, token)` for `binding`.
    fn attest(&self, binding: &str) -> Option<(String, String)>;
}

/// The store entry name of the key of `file` for `install_id`: `ferry-seal-` and 64 hex
/// characters.
pub fn entry_name(install_id: &str, file: &Sha256Digest) -> String {
    let mut h = Sha256::new();
    h.update(b"ferry sealed key\0");
    h.update((install_id.len() as u64).to_be_bytes());
    h.update(install_id.as_bytes());
    h.update(file.as_bytes());
    format!("ferry-seal-{}", hex::encode(h.finalize()))
}

/// A [`KeyStore`] of files in a folder (mode 0600): the default, for tests and development.
/// It keeps keys in the clear on disk, so it protects nothing against whoever can read the
/// folder; an app that seals its models supplies its platform's key store instead.
#[derive(Debug, Clone)]
pub struct FileKeyStore {
    dir: PathBuf,
}

impl FileKeyStore {
    /// A store in `dir` (created when a key is first stored).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn path(&self, name: &str) -> Option<PathBuf> {
        let ok = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        ok.then(|| self.dir.join(name))
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl KeyStore for FileKeyStore {
    fn get(&self, name: &str) -> Option<[u8; 32]> {
        let text = std::fs::read_to_string(self.path(name)?).ok()?;
        let mut key = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut key).ok()?;
        Some(key)
    }

    fn put(&self, name: &str, key: &[u8; 32]) -> Result<(), String> {
        let path = self
            .path(name)
            .ok_or_else(|| format!("{name:?} is not a key name"))?;
        ferry_fs::write(
            &path,
            hex::encode(key).as_bytes(),
            ferry_fs::Mode::OwnerOnly,
        )
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    fn remove(&self, name: &str) {
        if let Some(p) = self.path(name) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A [`KeyStore`] in this process's memory only: no key is ever written anywhere, and every
/// start of the app asks the server again (an offline start cannot load a sealed variant).
#[derive(Default)]
pub struct MemoryKeyStore(std::sync::Mutex<std::collections::HashMap<String, [u8; 32]>>);

impl std::fmt::Debug for MemoryKeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryKeyStore(..)")
    }
}

impl KeyStore for MemoryKeyStore {
    fn get(&self, name: &str) -> Option<[u8; 32]> {
        ferry_shared::sync::lock(&self.0).get(name).copied()
    }

    fn put(&self, name: &str, key: &[u8; 32]) -> Result<(), String> {
        ferry_shared::sync::lock(&self.0).insert(name.to_string(), *key);
        Ok(())
    }

    fn remove(&self, name: &str) {
        if let Some(mut k) = ferry_shared::sync::lock(&self.0).remove(name) {
            use zeroize::Zeroize as _;
            k.zeroize();
        }
    }
}

/// The file keys of one sealed variant, by sealed digest (held in memory for the load).
#[derive(Default)]
pub struct FileKeys(Vec<(Sha256Digest, [u8; 32])>);

impl std::fmt::Debug for FileKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileKeys({} keys)", self.0.len())
    }
}

impl FileKeys {
    /// The key of `file`.
    pub fn get(&self, file: &Sha256Digest) -> Option<&[u8; 32]> {
        self.0.iter().find(|(d, _)| d == file).map(|(_, k)| k)
    }

    pub(crate) fn insert(&mut self, file: Sha256Digest, key: [u8; 32]) {
        self.0.retain(|(d, _)| *d != file);
        self.0.push((file, key));
    }
}

impl Drop for FileKeys {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        for (_, k) in &mut self.0 {
            k.zeroize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_store_round_trips() {
        let store = MemoryKeyStore::default();
        assert!(store.get("a").is_none());
        store.put("a", &[3; 32]).expect("put");
        assert_eq!(store.get("a"), Some([3; 32]));
        store.remove("a");
        assert!(store.get("a").is_none());
    }

    #[test]
    fn file_store_round_trips_and_refuses_odd_names() {
        let dir = tempfile::tempdir().expect("dir");
        let store = FileKeyStore::new(dir.path().join("keys"));
        let name = entry_name("me", &Sha256Digest::of(b"x"));
        assert!(store.get(&name).is_none());
        store.put(&name, &[7; 32]).expect("put");
        assert_eq!(store.get(&name), Some([7; 32]));
        store.remove(&name);
        assert!(store.get(&name).is_none());
        assert!(store.put("../escape", &[1; 32]).is_err());
        assert!(store.get("../escape").is_none());
        assert_ne!(name, entry_name("you", &Sha256Digest::of(b"x")));
        assert_ne!(name, entry_name("me", &Sha256Digest::of(b"y")));
    }
}
