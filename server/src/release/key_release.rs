//! Releasing the keys of sealed variants: who may have them, and how they are handed over.
//!
//! A device asks with the receipt of the resolve that chose the variant (it binds the install
//! id, model, release, device class and the variants offered), a fresh X25519 public key, and,
//! where the app has one, a platform attestation. The policy:
//! - a receipt this server (or any replica: receipts derive from the online key) issued for
//!   this install, release and device class, naming the variant, is required;
//! - the release must not be stopped (`ferry release seal-stop`) or revoked;
//! - an attestation verifier, when configured, must accept the token, and with
//!   `require_attestation` a request without one is refused;
//! - every install and client address is rate-limited;
//! - every key handed out is audited (who, which variant, when) before it leaves.
//!
//! The file key is unwrapped with the key-release key the release names and wrapped again to
//! the device's public key for its install id (`ferry_fs::sealed::keys::release`).

use std::sync::Arc;

use ferry_fs::sealed::keys as seal_keys;
use ferry_shared::manifest::Variant;
use ferry_shared::wire::keys::{Attestation, KeyRequest, ReleasedKey};

use ferry_shared::ModelName;
use semver::Version;

use crate::fleet::intake::limits::{IpKey, Limiter};
use crate::keys::KeyReleaseSecret;

/// Checks a platform attestation token (Play Integrity, App Attest, a TPM quote): the app asks
/// its platform for a token over the request's [`KeyRequest::binding`], and the server's verifier decides.
pub trait AttestationVerifier: Send + Sync {
    /// `Ok(())` when `attestation` vouches for a genuine app on a genuine device for this
    /// request; the reason otherwise.
    fn verify(&self, attestation: &Attestation, request: &KeyRequest) -> Result<(), String>;
}

/// Why a key request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request is malformed or names something that is not a sealed variant's file.
    Invalid(String),
    /// No valid receipt, or the attestation policy said no.
    Refused(String),
    /// The release is stopped or revoked.
    Stopped(String),
    /// This server cannot unwrap the keys.
    Unavailable(String),
    /// Over the rate limit.
    Limited,
}

/// The key-release service of one server.
pub struct KeyService {
    held: Vec<KeyReleaseSecret>,
    /// The releases whose keys are stopped, as this replica last read them from the store (what
    /// resolve answers tell devices; key requests read the store itself).
    stopped: std::sync::Mutex<std::collections::BTreeMap<ModelName, Vec<String>>>,
    /// Whether any release is stopped: resolve skips the lock while none is.
    any_stopped: std::sync::atomic::AtomicBool,
    limiter: Limiter,
    verifier: Option<Arc<dyn AttestationVerifier>>,
    require_attestation: bool,
}

impl std::fmt::Debug for KeyService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyService")
            .field("held", &self.held)
            .field("verifier", &self.verifier.is_some())
            .field("require_attestation", &self.require_attestation)
            .finish()
    }
}

impl KeyService {
    /// A service with the `held` keys, letting each client address make `per_address` and
    /// each install `per_install` requests a minute.
    pub fn new(held: Vec<KeyReleaseSecret>, per_address: u32, per_install: u32) -> Self {
        Self {
            held,
            stopped: Default::default(),
            any_stopped: Default::default(),
            limiter: Limiter::new(per_address, per_install),
            verifier: None,
            require_attestation: false,
        }
    }

    /// Checks attestations with `verifier`; with `required`, a request without one is refused.
    pub fn with_attestation(
        mut self,
        verifier: Option<Arc<dyn AttestationVerifier>>,
        required: bool,
    ) -> Self {
        self.verifier = verifier;
        self.require_attestation = required;
        self
    }

    /// Replaces the stopped releases with `stopped` (read from the store).
    pub fn set_stopped(&self, stopped: impl IntoIterator<Item = (ModelName, Version)>) {
        let mut by_model: std::collections::BTreeMap<ModelName, Vec<String>> = Default::default();
        for (m, v) in stopped {
            by_model.entry(m).or_default().push(v.to_string());
        }
        let mut all = ferry_shared::sync::lock(&self.stopped);
        *all = by_model;
        self.note_any(&all);
    }

    fn note_any(&self, all: &std::collections::BTreeMap<ModelName, Vec<String>>) {
        self.any_stopped.store(
            all.values().any(|v| !v.is_empty()),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Marks one release stopped (`true`) or not, at once on this replica.
    pub fn note_stop(&self, model: &ModelName, version: &Version, stopped: bool) {
        let mut all = ferry_shared::sync::lock(&self.stopped);
        let list = all.entry(model.clone()).or_default();
        list.retain(|v| *v != version.to_string());
        if stopped {
            list.push(version.to_string());
        }
        self.note_any(&all);
    }

    /// The versions of `model` whose keys are stopped, as resolve answers list them.
    pub fn stopped_of(&self, model: &ModelName) -> Vec<String> {
        if !self.any_stopped.load(std::sync::atomic::Ordering::Relaxed) {
            return Vec::new();
        }
        ferry_shared::sync::lock(&self.stopped)
            .get(model)
            .cloned()
            .unwrap_or_default()
    }

    /// The key-release keys held (publish refuses a sealed release wrapped to another).
    pub fn held(&self) -> &[KeyReleaseSecret] {
        &self.held
    }

    /// Takes one request from the allowance of the client `address` (before anything else).
    pub fn admit_address(&self, address: Option<std::net::IpAddr>) -> Result<(), Refusal> {
        if self.limiter.address(IpKey::of(address)) {
            Ok(())
        } else {
            Err(Refusal::Limited)
        }
    }

    /// Takes one request from the allowance of an install whose receipt verified (so nobody
    /// can spend another device's allowance with its install id alone).
    pub fn admit_install(&self, install_id: &str) -> Result<(), Refusal> {
        let install = {
            use std::hash::{Hash as _, Hasher as _};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            install_id.hash(&mut h);
            h.finish()
        };
        if self.limiter.install(install, 1) {
            Ok(())
        } else {
            Err(Refusal::Limited)
        }
    }

    /// The attestation policy.
    pub fn check_attestation(&self, request: &KeyRequest) -> Result<(), Refusal> {
        match (&request.attestation, &self.verifier) {
            (None, _) if self.require_attestation => Err(Refusal::Refused(
                "this server requires a platform attestation with every key request".into(),
            )),
            (Some(_), None) if self.require_attestation => Err(Refusal::Refused(
                "attestation is required but no verifier is configured".into(),
            )),
            (Some(a), Some(v)) => v
                .verify(a, request)
                .map_err(|why| Refusal::Refused(format!("attestation refused: {why}"))),
            _ => Ok(()),
        }
    }

    /// The keys of `variant`'s files `request` asks for, wrapped to its public key.
    pub fn release(
        &self,
        request: &KeyRequest,
        variant: &Variant,
    ) -> Result<Vec<ReleasedKey>, Refusal> {
        let Some(sealing) = &variant.sealed else {
            return Err(Refusal::Invalid(format!(
                "variant {} is not sealed",
                variant.id
            )));
        };
        let device = seal_keys::decode::<32>(&request.public_key).map_err(|_| {
            Refusal::Invalid("public_key is not 32 bytes of base64url (no padding)".into())
        })?;
        let Some(key) = self.held.iter().find(|k| k.id() == sealing.key_release) else {
            return Err(Refusal::Unavailable(format!(
                "this server does not hold key-release key {}",
                sealing.key_release
            )));
        };
        let wanted: Vec<_> = if request.files.is_empty() {
            sealing.files.iter().collect()
        } else {
            request
                .files
                .iter()
                .map(|d| {
                    sealing.file(d).ok_or_else(|| {
                        Refusal::Invalid(format!("{d} is not a file of variant {}", variant.id))
                    })
                })
                .collect::<Result<_, _>>()?
        };
        let mut out = Vec::with_capacity(wanted.len());
        for f in wanted {
            let fail = |e: ferry_fs::sealed::SealError| {
                Refusal::Unavailable(format!("the key of {}: {e}", f.sha256))
            };
            let wrapped = seal_keys::decode::<{ seal_keys::WRAPPED }>(&f.key).map_err(fail)?;
            let file_key =
                seal_keys::unwrap(key.secret(), &wrapped, f.sha256.as_bytes()).map_err(fail)?;
            let mut ephemeral = [0u8; 32];
            getrandom::fill(&mut ephemeral)
                .map_err(|e| Refusal::Unavailable(format!("no randomness: {e}")))?;
            let released = seal_keys::release(
                &device,
                &ephemeral,
                &file_key,
                f.sha256.as_bytes(),
                &request.install_id,
            )
            .map_err(|_| {
                Refusal::Invalid(
                    "public_key is a weak X25519 key (a low-order point): send the public key \
                     of a fresh key pair"
                        .into(),
                )
            })?;
            out.push(ReleasedKey {
                sha256: f.sha256,
                key: seal_keys::encode(&released),
            });
        }
        Ok(out)
    }
}
