//! Sealing at signing: the files of every variant with `sealed = true` are encrypted
//! (`ferry_fs::sealed`, scheme `ferry-seal-1`) into `<name>.<digest>.sealed` files, and the
//! manifest then signs the sealed bytes (their digest, size and chunk index), each file's key
//! wrapped to the server's key-release key, and the inspection of the plaintext program.
//!
//! The key folder gives the key-release public key (from its trust.json and keyring/, checked
//! like a device checks them) and the seal secret (`seal.secret`, made on first use): the
//! secret derives each chunk's key from its content, so a chunk unchanged between releases
//! seals to the same bytes and delta updates still send only what changed. Losing it costs
//! only that (the next release's chunks are all new); whoever holds it and a plaintext chunk
//! can tell whether a sealed release contains that chunk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use ferry_shared::manifest::chunks::{CHUNKED_FILE_MIN, Chunk, ChunkIndex};
use ferry_shared::manifest::{SEAL_SCHEME, SealedFileKey, Sealing};
use ferry_shared::{KeyId, Sha256Digest};

use crate::release::sign::{Built, SignedFile, VariantsFile};

/// The seal secret's file name in a key folder.
pub const SEAL_SECRET_FILE: &str = "seal.secret";

/// What sealing needs from the key folder.
pub struct SealKeys {
    /// Derives chunk keys.
    secret: [u8; 32],
    /// The current key-release key.
    release_public: [u8; 32],
    /// Its id.
    release_id: KeyId,
}

impl std::fmt::Debug for SealKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealKeys(key-release {})", self.release_id.short())
    }
}

fn random32() -> anyhow::Result<[u8; 32]> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(b)
}

/// Reads the key folder `dir`: the current key-release key of its newest keyring, and its seal
/// secret (made when missing). Returns the keys and what to tell the operator.
pub fn seal_keys(dir: &Path) -> anyhow::Result<(SealKeys, Vec<String>)> {
    let (_, state, _) = crate::keys::load_trust(dir).with_context(|| {
        format!(
            "sealing wraps each file's key to the server's key-release key, read from the key \
             folder's trust.json and keyring/ ({}: from --keys, else the folder of --key)",
            dir.display()
        )
    })?;
    let Some((release_public, release_id)) = state.key_release().iter().find_map(|k| {
        k.x25519_public()
            .ok()
            .flatten()
            .map(|public| (public, k.keyid))
    }) else {
        bail!(
            "keyring version {} in {} lists no key-release key (the key folder predates \
             sealing): run `ferry keys rotate key-release --keys {}`, copy key-release.key and \
             keyring/ to each server and restart it, then sign again",
            state.version(),
            dir.display(),
            dir.display()
        );
    };
    let mut notes = Vec::new();
    let path = dir.join(SEAL_SECRET_FILE);
    let secret = if path.exists() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut secret = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut secret)
            .with_context(|| format!("{}: not 64 hex characters", path.display()))?;
        secret
    } else {
        let secret = random32()?;
        ferry_fs::write(
            &path,
            hex::encode(secret).as_bytes(),
            ferry_fs::Mode::OwnerOnly,
        )
        .with_context(|| format!("cannot write {}", path.display()))?;
        notes.push(format!(
            "created the seal secret {} (keep it with the release key: later releases sealed \
             with it share unchanged chunks, so devices download only what changed)",
            path.display()
        ));
        secret
    };
    Ok((
        SealKeys {
            secret,
            release_public,
            release_id,
        },
        notes,
    ))
}

/// One file sealed: where, what it is, and its key entry.
#[derive(Clone)]
struct SealedOne {
    path: PathBuf,
    sha256: Sha256Digest,
    size: u64,
    chunk_index: Option<ferry_shared::manifest::chunks::ChunkIndexRef>,
    key: SealedFileKey,
}

/// Seals `plain` into `out_dir`, or returns the sealing already made of it in this run.
fn seal_one(
    plain: &SignedFile,
    keys: &SealKeys,
    out_dir: &Path,
    done: &mut HashMap<Sha256Digest, SealedOne>,
) -> anyhow::Result<SealedOne> {
    if let Some(s) = done.get(&plain.sha256) {
        return Ok(s.clone());
    }
    let name = plain
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file")
        .to_string();
    let staging = out_dir.join(format!(".{name}.sealing"));
    let file_key = random32()?;
    let sealed = ferry_fs::sealed::seal_file(&plain.path, &staging, &keys.secret, &file_key)
        .with_context(|| {
            format!(
                "cannot seal {} into {}",
                plain.path.display(),
                out_dir.display()
            )
        })?;
    if sealed.plain_len != plain.size {
        let _ = std::fs::remove_file(&staging);
        bail!("{} changed while it was signed", plain.path.display());
    }
    let sha256 = Sha256Digest::from_bytes(sealed.sha256);
    let path = out_dir.join(format!("{name}.{}.sealed", &sha256.to_hex()[..12]));
    ferry_fs::commit(&staging, &path)
        .with_context(|| format!("cannot move {} into place", path.display()))?;
    let wrapped = ferry_fs::sealed::keys::wrap(
        &keys.release_public,
        &random32()?,
        &file_key,
        &sealed.sha256,
    )
    .map_err(|e| anyhow::anyhow!("cannot wrap the key of {}: {e}", path.display()))?;
    let chunk_index = (sealed.size >= CHUNKED_FILE_MIN).then(|| {
        ChunkIndex::new(
            sealed
                .index
                .iter()
                .map(|(size, d)| Chunk {
                    size: *size,
                    sha256: Sha256Digest::from_bytes(*d),
                })
                .collect(),
        )
        .reference()
    });
    let one = SealedOne {
        path,
        sha256,
        size: sealed.size,
        chunk_index,
        key: SealedFileKey {
            sha256,
            plain_size: sealed.plain_len,
            key: ferry_fs::sealed::keys::encode(&wrapped),
        },
    };
    done.insert(plain.sha256, one.clone());
    Ok(one)
}

/// Seals every variant of `built` that `spec` marks sealed, writing the sealed files into
/// `out_dir` and rewriting the manifest and file list to them. Returns the warnings.
pub fn seal_variants(
    built: &mut Built,
    spec: &VariantsFile,
    keys: &SealKeys,
    out_dir: &Path,
) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let mut done: HashMap<Sha256Digest, SealedOne> = HashMap::new();
    let mut plain_shared: Vec<(Sha256Digest, String)> = Vec::new();
    for (i, vs) in spec.variants.iter().enumerate() {
        let v = &mut built.manifest.variants[i];
        let f = &mut built.files[i];
        if !vs.is_sealed(spec) {
            continue;
        }
        if v.extra_files.len() > 1 {
            bail!(
                "variant {}: a sealed variant takes at most one data file (.ptd), since the \
                 runtime reads one data map through a loader; it has {}",
                v.id,
                v.extra_files.len()
            );
        }
        for d in std::iter::once(&*f).chain(&f.data).chain(&f.assets) {
            plain_shared.push((d.sha256, v.id.to_string()));
        }
        let mut entries = Vec::new();
        let program = seal_one(f, keys, out_dir, &mut done)?;
        (v.sha256, v.size, v.chunk_index) = (program.sha256, program.size, program.chunk_index);
        entries.push(program.key.clone());
        (f.path, f.sha256, f.size) = (program.path, program.sha256, program.size);
        let sides = v.extra_files.iter_mut().zip(f.data.iter_mut());
        for (x, s) in sides.chain(v.assets.iter_mut().zip(f.assets.iter_mut())) {
            let one = seal_one(s, keys, out_dir, &mut done)?;
            (x.sha256, x.size, x.chunk_index) = (one.sha256, one.size, one.chunk_index);
            if !entries
                .iter()
                .any(|e: &SealedFileKey| e.sha256 == one.sha256)
            {
                entries.push(one.key.clone());
            }
            (s.path, s.sha256, s.size) = (one.path, one.sha256, one.size);
        }
        v.sealed = Some(Sealing {
            scheme: SEAL_SCHEME.to_string(),
            key_release: keys.release_id,
            files: entries,
            inspection: Some(built.reports[i].clone()),
        });
    }
    let mut warnings = Vec::new();
    for (i, vs) in spec.variants.iter().enumerate() {
        if vs.is_sealed(spec) {
            continue;
        }
        let f = &built.files[i];
        for d in std::iter::once(f).chain(&f.data).chain(&f.assets) {
            if let Some((_, sealed)) = plain_shared.iter().find(|(p, _)| *p == d.sha256) {
                warnings.push(format!(
                    "variant {} is not sealed and serves {} in plaintext, which sealed variant \
                     {sealed} also holds",
                    vs.id,
                    d.path.display()
                ));
            }
        }
    }
    Ok(warnings)
}
