//! A sealed variant's signed description: which scheme its files are sealed with, the
//! key-release key their file keys are wrapped to, each file's wrapped key, and the inspection
//! `ferry sign` made of the plaintext program (the server only ever sees ciphertext).

use serde::{Deserialize, Serialize};

use crate::names::{KeyId, Sha256Digest};

/// The one sealing scheme this version knows (`ferry_fs::sealed::SCHEME`).
pub const SEAL_SCHEME: &str = "ferry-seal-1";

/// Bytes of a wrapped file key (`ferry_fs::sealed::keys::WRAPPED`).
pub const WRAPPED_KEY_BYTES: usize = 80;

/// How a variant is sealed (absent: not sealed). An additive v1 field: a client that does not
/// know it never gets the variant, because resolve offers sealed variants only to clients
/// that list the scheme in `seal_schemes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealing {
    /// The scheme ([`SEAL_SCHEME`]); a client opens only the schemes it lists.
    pub scheme: String,
    /// The key-release key the file keys are wrapped to.
    pub key_release: KeyId,
    /// One entry per file of the variant (program, data files, assets), by sealed digest.
    pub files: Vec<SealedFileKey>,
    /// The inspection of the plaintext program, made and signed by `ferry sign` (the server
    /// cannot read the program to make it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inspection: Option<crate::pte::PteReport>,
}

/// One sealed file's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedFileKey {
    /// The sealed file's digest (the `sha256` of the program or side file).
    pub sha256: Sha256Digest,
    /// The plaintext's length.
    pub plain_size: u64,
    /// The file key wrapped to the key-release key: base64url, no padding, of
    /// [`WRAPPED_KEY_BYTES`] bytes.
    pub key: String,
}

impl Sealing {
    /// The key entry of the file with digest `sha256`.
    pub fn file(&self, sha256: &Sha256Digest) -> Option<&SealedFileKey> {
        self.files.iter().find(|f| f.sha256 == *sha256)
    }

    /// Checks it against the variant's files (`files`: the program's digest, then the side
    /// files'): one entry per distinct file, no other, well-formed keys.
    pub fn check(&self, files: &[Sha256Digest], max_blob_size: u64) -> Result<(), String> {
        if self.scheme.is_empty() || self.scheme.len() > 64 {
            return Err("sealed: scheme must be 1 to 64 characters".into());
        }
        let mut wanted: Vec<Sha256Digest> = files.to_vec();
        wanted.sort();
        wanted.dedup();
        let mut listed: Vec<Sha256Digest> = self.files.iter().map(|f| f.sha256).collect();
        listed.sort();
        if listed != wanted {
            return Err(
                "sealed: the keys must name each of the variant's files exactly once".into(),
            );
        }
        for f in &self.files {
            if f.plain_size > max_blob_size {
                return Err(format!("sealed: file {} is too large", f.sha256));
            }
            let len = base64_len(&f.key);
            if len != Some(WRAPPED_KEY_BYTES) {
                return Err(format!(
                    "sealed: the key of {} is not {WRAPPED_KEY_BYTES} bytes of base64url",
                    f.sha256
                ));
            }
        }
        Ok(())
    }
}

/// The decoded length of unpadded base64url text, when it is that.
fn base64_len(text: &str) -> Option<usize> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.as_bytes())
        .ok()
        .map(|b| b.len())
}
