//! Getting the keys of a sealed variant: from the key store when held (an offline start works
//! then), else from the server (`POST /v1/keys/release`) with the receipt of the resolve that
//! chose the variant, wrapped to a key pair made for the request alone.

use ferry_shared::Sha256Digest;
use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::Sealing;
use ferry_shared::wire::keys::{KeyRequest, KeyResponse};

use crate::Client;
use crate::crash::flight::FlightRecord;
use crate::error::Stage;
use crate::run::golden::LoadFailure;
use crate::seal::keys::{FileKeys, entry_name};
use crate::types::DeviceInfo;

/// Most bytes of a key answer read.
const MAX_KEY_ANSWER: u64 = 256 << 10;

fn failure(code: ErrorCode, message: String) -> LoadFailure {
    LoadFailure {
        stage: Stage::Key,
        code,
        message,
    }
}

/// What a key request needs to say besides the variant.
pub(crate) struct KeyAsk<'a> {
    pub(crate) record: &'a FlightRecord,
    pub(crate) device: &'a DeviceInfo,
    /// The server's answer said an operator stopped this release's keys.
    pub(crate) stopped: bool,
}

impl Client {
    /// The keys of every file of sealed variant `v`: held ones from the key store, the others
    /// released by the server (and stored).
    pub(crate) fn file_keys(
        &self,
        v: &ferry_shared::manifest::Variant,
        sealing: &Sealing,
        ask: &KeyAsk<'_>,
    ) -> Result<FileKeys, LoadFailure> {
        let install = &ask.device.install_id;
        if ask.stopped {
            // Held keys go: the release no longer loads here.
            self.forget_keys(sealing, install);
            return Err(failure(
                ErrorCode::KeyReleaseStopped,
                format!(
                    "an operator stopped the keys of {} {} (sealed variant {}); its held keys \
                     were forgotten",
                    ask.record.model, ask.record.release, v.id
                ),
            ));
        }
        let mut keys = FileKeys::default();
        let mut missing: Vec<Sha256Digest> = Vec::new();
        for f in &sealing.files {
            match self.key_store.get(&entry_name(install, &f.sha256)) {
                Some(k) => keys.insert(f.sha256, k),
                None => missing.push(f.sha256),
            }
        }
        if missing.is_empty() {
            return Ok(keys);
        }
        let Some(receipt) = ask.record.receipt.as_deref() else {
            return Err(failure(
                ErrorCode::SealedKeyMissing,
                format!(
                    "variant {} is sealed and this device holds no key for it; a key is \
                     released with the receipt of a resolve, and this load has none (offline)",
                    v.id
                ),
            ));
        };
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| failure(ErrorCode::SealedKeyMissing, format!("no randomness: {e}")))?;
        let mut request = KeyRequest {
            model: v_model(ask.record)?,
            release: ask.record.release.clone(),
            variant: v.id.clone(),
            install_id: install.clone(),
            platform: ask.device.platform.as_str().to_string(),
            device_model: ask.device.device_model.clone(),
            soc: ask.device.soc.clone(),
            receipt: receipt.to_string(),
            files: missing.clone(),
            public_key: ferry_fs::sealed::keys::encode(&ferry_fs::sealed::keys::public_key(
                &secret,
            )),
            attestation: None,
        };
        if let Some(a) = &self.attest {
            request.attestation = a
                .attest(&request.binding())
                .map(|(kind, token)| ferry_shared::wire::keys::Attestation { kind, token });
        }
        let answer = self.post_key_request(&request).inspect_err(|f| {
            if f.code == ErrorCode::KeyReleaseStopped {
                // Stopped or revoked: no key of it is kept either.
                self.forget_keys(sealing, install);
            }
        })?;
        for file in &missing {
            let released = answer
                .keys
                .iter()
                .find(|k| k.sha256 == *file)
                .ok_or_else(|| {
                    failure(
                        ErrorCode::BadResponse,
                        format!("the key answer has no key for {file}"),
                    )
                })?;
            let bad = |e: ferry_fs::sealed::SealError| {
                failure(
                    ErrorCode::BadResponse,
                    format!("the released key of {file}: {e}"),
                )
            };
            let wrapped = ferry_fs::sealed::keys::decode::<{ ferry_fs::sealed::keys::WRAPPED }>(
                &released.key,
            )
            .map_err(bad)?;
            let key = ferry_fs::sealed::keys::receive(&secret, &wrapped, file.as_bytes(), install)
                .map_err(bad)?;
            // A store that fails only costs the next start a key request.
            let _ = self.key_store.put(&entry_name(install, file), &key);
            keys.insert(*file, key);
        }
        {
            use zeroize::Zeroize as _;
            secret.zeroize();
        }
        Ok(keys)
    }

    /// Forgets every key held for sealed variant `sealing`'s files on this install.
    pub(crate) fn forget_keys(&self, sealing: &Sealing, install_id: &str) {
        for f in &sealing.files {
            self.key_store.remove(&entry_name(install_id, &f.sha256));
        }
    }

    fn post_key_request(&self, request: &KeyRequest) -> Result<KeyResponse, LoadFailure> {
        let url = format!("{}/v1/keys/release", self.server);
        let body = serde_json::to_vec(request)
            .map_err(|e| failure(ErrorCode::SealedKeyMissing, e.to_string()))?;
        let unreachable = |e: String| {
            failure(
                ErrorCode::SealedKeyMissing,
                format!(
                    "variant {} is sealed and this device holds no key for it; the key server \
                     cannot be reached ({e})",
                    request.variant
                ),
            )
        };
        let mut resp = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(&body[..])
            .map_err(|e| unreachable(e.to_string()))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let (said, code) = crate::transfer::http::server_said_code(&mut resp);
            let code = code
                .filter(|c| {
                    matches!(
                        c,
                        ErrorCode::KeyReleaseRefused
                            | ErrorCode::KeyReleaseStopped
                            | ErrorCode::KeyReleaseUnavailable
                            | ErrorCode::RateLimited
                    )
                })
                .unwrap_or(ErrorCode::SealedKeyMissing);
            return Err(failure(
                code,
                format!(
                    "the server refused the key of sealed variant {} (HTTP {status}){said}",
                    request.variant
                ),
            ));
        }
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_KEY_ANSWER)
            .read_to_string()
            .map_err(|e| unreachable(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| {
            failure(
                ErrorCode::BadResponse,
                format!("the key answer is not valid: {e}"),
            )
        })
    }
}

fn v_model(record: &FlightRecord) -> Result<ferry_shared::ModelName, LoadFailure> {
    record
        .model
        .parse()
        .map_err(|e| failure(ErrorCode::SealedKeyMissing, format!("model: {e}")))
}
