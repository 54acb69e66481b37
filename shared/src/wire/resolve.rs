//! The device-facing resolve exchange: what a device sends and the signed decision it gets.
//!
//! A device posts a [`ResolveRequest`] with its capabilities. The server answers with a
//! [`ResolveResponse`]: a DSSE envelope holding the [`Decision`] (signed by the server's online
//! key, with an expiry and a sequence number) and a reference to the release manifest envelope
//! exactly as ops signed it offline ([`ReleaseRef`]: its digest, which the decision also names,
//! and where to fetch it once). The client verifies both and checks that every candidate
//! matches the signed manifest, so a compromised server can only choose among releases ops
//! signed.
//!
//! A decision does not name the device: it names the digest of the request fields selection
//! used ([`ResolveRequest::selection_digest`]) and, while a rollout is live, the rule that
//! places devices in cohorts ([`CohortRule`]), so one signed decision serves every device with
//! the same profile and cohort, and each client still checks that it answers its own request.

use semver::Version;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::manifest::{Delegate, Platform};
use crate::names::{BackendId, ModelName, Sha256Digest, VariantId};
use crate::trust::dsse::Envelope;

/// The DSSE payload type of a signed resolve decision.
pub const DECISION_PAYLOAD_TYPE: &str = "application/vnd.ferry.decision+json";

/// Limits on a resolve request's free-form fields.
pub const MAX_INSTALL_ID: usize = 128;
/// Longest OS version, device model or SoC string.
pub const MAX_DEVICE_STRING: usize = 128;
/// Most backends a device may report.
pub const MAX_DEVICE_BACKENDS: usize = 32;

/// A device's capabilities, as posted to `POST /v1/resolve`.
///
/// Read tolerantly (protocol v1): fields this build does not know are ignored (the server
/// counts them by name, see [`crate::wire::protocol::unknown_fields`]), an unknown platform or backend id is kept as
/// sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolveRequest {
    /// The model wanted.
    pub model: ModelName,
    /// A stable, app-scoped install id (used for rollout cohorts).
    pub install_id: String,
    /// The app's version.
    pub app_version: Version,
    /// The bundled ExecuTorch runtime's version.
    pub runtime_version: Version,
    /// Backend ids the runtime really registered.
    #[serde(default)]
    pub backends: Vec<BackendId>,
    /// Platform.
    pub platform: Platform,
    /// OS version (dotted numbers).
    #[serde(default)]
    pub os_version: String,
    /// Device model (`Pixel 8`, `iPhone15,2`).
    #[serde(default)]
    pub device_model: String,
    /// System on chip (`SM8550`, `A16`).
    #[serde(default)]
    pub soc: String,
    /// RAM in MiB.
    #[serde(default)]
    pub ram_mb: u64,
    /// A fresh random value (16 to 32 bytes, base64url without padding) when the device asks
    /// for a decision made for this request alone: the signed decision then carries the same
    /// `nonce` and the server's `time`, so the device can trust it whatever its own clock says
    /// (see [`MIN_NONCE_BYTES`]). Absent: the shared, pre-signed answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// [`crate::select::operators::digest`] of the operators the runtime registered: variants needing
    /// one it lacks are left out once the server knows the set (absent: not checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operators_digest: Option<Sha256Digest>,
    /// The operators themselves, sent once when the server answered `operators_wanted` (it
    /// did not know the digest); they must hash to `operators_digest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operators: Option<Vec<String>>,
    /// The sealing schemes the client can open (`ferry-seal-1`): sealed variants of another
    /// scheme, or any sealed variant for a client that lists none (every client before
    /// sealing), are left out. Part of the selection digest when not empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seal_schemes: Vec<String>,
}

/// Most sealing schemes a request lists.
pub const MAX_SEAL_SCHEMES: usize = 8;

/// The fewest random bytes a request nonce carries.
pub const MIN_NONCE_BYTES: usize = 16;
/// The most random bytes a request nonce carries.
pub const MAX_NONCE_BYTES: usize = 32;

/// Checks a request nonce: base64url without padding, [`MIN_NONCE_BYTES`] to
/// [`MAX_NONCE_BYTES`] bytes.
pub fn check_nonce(nonce: &str) -> Result<(), String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(nonce)
        .map_err(|_| "nonce must be base64url without padding".to_string())?;
    if !(MIN_NONCE_BYTES..=MAX_NONCE_BYTES).contains(&bytes.len()) {
        return Err(format!(
            "nonce must be {MIN_NONCE_BYTES} to {MAX_NONCE_BYTES} bytes, not {}",
            bytes.len()
        ));
    }
    Ok(())
}

impl ResolveRequest {
    /// Why one of the request's versions is refused (longer than 64 characters), if it is: a
    /// refusal of its own (`invalid_version`); [`ResolveRequest::validate`] checks it first.
    pub fn version_error(&self) -> Option<String> {
        [
            ("app_version", &self.app_version),
            ("runtime_version", &self.runtime_version),
        ]
        .into_iter()
        .find(|(_, v)| v.to_string().len() > 64)
        .map(|(what, v)| {
            format!(
                "{what} is {} characters; versions are at most 64",
                v.to_string().len()
            )
        })
    }

    /// Checks the versions ([`ResolveRequest::version_error`]) and the other fields
    /// ([`ResolveRequest::check_fields`]) against the limits; returns a message on failure.
    pub fn validate(&self) -> Result<(), String> {
        match self.version_error() {
            Some(why) => Err(why),
            None => self.check_fields(),
        }
    }

    /// Checks every field but the versions against the limits; returns a message on failure.
    pub fn check_fields(&self) -> Result<(), String> {
        let check = |what: &str, s: &str, max: usize| -> Result<(), String> {
            if crate::names::longer_than(s, max) {
                return Err(format!(
                    "{what} is {} characters; at most {max} are allowed",
                    s.chars().count()
                ));
            }
            if s.chars().any(char::is_control) {
                return Err(format!("{what} contains control characters"));
            }
            Ok(())
        };
        if self.install_id.is_empty() {
            return Err("install_id is empty".into());
        }
        check("install_id", &self.install_id, MAX_INSTALL_ID)?;
        check("os_version", &self.os_version, MAX_DEVICE_STRING)?;
        check("device_model", &self.device_model, MAX_DEVICE_STRING)?;
        check("soc", &self.soc, MAX_DEVICE_STRING)?;
        if self.backends.len() > MAX_DEVICE_BACKENDS {
            return Err(format!(
                "{} backends; at most {MAX_DEVICE_BACKENDS} are allowed",
                self.backends.len()
            ));
        }
        if let Some(n) = &self.nonce {
            check_nonce(n)?;
        }
        if let Some(ops) = &self.operators {
            if ops.len() > crate::select::operators::MAX_OPERATORS {
                return Err(format!(
                    "{} operators; at most {} are allowed",
                    ops.len(),
                    crate::select::operators::MAX_OPERATORS
                ));
            }
            for op in ops {
                crate::select::operators::check_name(op)?;
            }
            match &self.operators_digest {
                Some(d) if *d == crate::select::operators::digest(ops) => {}
                Some(_) => {
                    return Err(
                        "operators do not hash to operators_digest (SHA-256 of the sorted, \
                         deduplicated names joined by newlines)"
                            .into(),
                    );
                }
                None => return Err("operators needs operators_digest".into()),
            }
        }
        if self.seal_schemes.len() > MAX_SEAL_SCHEMES {
            return Err(format!(
                "{} seal_schemes; at most {MAX_SEAL_SCHEMES} are allowed",
                self.seal_schemes.len()
            ));
        }
        for scheme in &self.seal_schemes {
            let ok = (1..=32).contains(&scheme.len())
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                return Err(format!(
                    "seal scheme {scheme:?} is not 1 to 32 of [a-z0-9-]"
                ));
            }
        }
        Ok(())
    }
}

/// The fields of a v1 resolve request this build knows, in the order [`ResolveRequest`]
/// declares them.
pub const REQUEST_FIELDS: [&str; 14] = [
    "model",
    "install_id",
    "app_version",
    "runtime_version",
    "backends",
    "platform",
    "os_version",
    "device_model",
    "soc",
    "ram_mb",
    "nonce",
    "operators_digest",
    "operators",
    "seal_schemes",
];

impl ResolveRequest {
    /// SHA-256 over every field selection uses (all but the install id, which only places the
    /// device in a cohort, and the operator list, which the digest stands for), each
    /// length-prefixed, in a fixed order. A decision names it, and a
    /// client accepts only a decision for its own digest.
    pub fn selection_digest(&self) -> Sha256Digest {
        use sha2::{Digest as _, Sha256};
        let mut h = Sha256::new();
        let mut part = |b: &[u8]| {
            h.update((b.len() as u64).to_be_bytes());
            h.update(b);
        };
        part(b"ferry selection v1");
        part(self.model.as_str().as_bytes());
        part(self.app_version.to_string().as_bytes());
        part(self.runtime_version.to_string().as_bytes());
        part(&(self.backends.len() as u64).to_be_bytes());
        for b in &self.backends {
            part(b.as_str().as_bytes());
        }
        part(self.platform.as_str().as_bytes());
        part(self.os_version.as_bytes());
        part(self.device_model.as_bytes());
        part(self.soc.as_bytes());
        part(&self.ram_mb.to_be_bytes());
        // Added in protocol v1 after the others: only when present, so the digest of a request
        // without it is what it always was.
        if let Some(d) = &self.operators_digest {
            part(b"operators");
            part(d.to_hex().as_bytes());
        }
        // Added later still, the same way: a client that opens no sealed variant keeps its
        // digest.
        if !self.seal_schemes.is_empty() {
            let mut schemes: Vec<&str> = self.seal_schemes.iter().map(String::as_str).collect();
            schemes.sort_unstable();
            schemes.dedup();
            part(b"seal");
            part(&(schemes.len() as u64).to_be_bytes());
            for scheme in schemes {
                part(scheme.as_bytes());
            }
        }
        Sha256Digest::from_bytes(h.finalize().into())
    }
}

/// How a live rollout places devices: staged when
/// [`crate::select::rollout::bucket`]`(salt, model, install id) < basis_points`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CohortRule {
    /// The rollout's salt.
    pub salt: String,
    /// The staged share in basis points (0 to 10,000).
    pub basis_points: u32,
}

/// The experiment arm a decision puts the device in (the additive `experiment` field): the
/// client checks that its own install id falls in that arm by
/// [`crate::experiment::plan::assign`]`(salt, basis_points, model, install id)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExperimentArm {
    /// The experiment's id.
    pub id: String,
    /// The arm (`control` or `treatment`; kept as text, so a newer arm name reads).
    pub arm: String,
    /// The experiment's assignment salt.
    pub salt: String,
    /// The share of the model's devices that take part, in basis points.
    pub basis_points: u32,
}

/// Where the signed release manifest of a resolve answer is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRef {
    /// SHA-256 of the envelope's bytes as served.
    pub sha256: Sha256Digest,
    /// Its size in bytes.
    pub size: u64,
    /// Where to fetch it (absolute, or relative to the server URL).
    pub url: String,
}

/// Which rollout cohort a device is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cohort {
    /// The baseline release.
    Baseline,
    /// A staged release being rolled out.
    Staged,
}

/// One variant the device should try, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    /// Variant id in the release manifest.
    pub variant: VariantId,
    /// Its delegate.
    pub delegate: Delegate,
    /// Backend ids it needs registered.
    pub backends: Vec<BackendId>,
    /// Blob digest (must equal the signed manifest's).
    pub sha256: Sha256Digest,
    /// Blob size (must equal the signed manifest's).
    pub size: u64,
    /// Where to download it (absolute, or relative to the server URL).
    pub url: String,
}

/// Where decision sequences start: above every sequence an earlier ferry server issued (those
/// were milliseconds since 1970, about 1.7e12 in 2026, below 2^41), so a device that kept one
/// as its floor accepts the sequences of today's servers. A model's sequence is this plus its
/// state generation.
pub const SEQUENCE_BASE: u64 = 1 << 50;

/// The signed answer to a resolve request (the DSSE payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The payload's format (absent: 1; see [`crate::wire::protocol::FORMAT`]).
    #[serde(
        default = "crate::wire::protocol::format_one",
        skip_serializing_if = "crate::wire::protocol::is_format_one"
    )]
    pub format: u32,
    /// The model.
    pub model: ModelName,
    /// The release version chosen.
    pub release: Version,
    /// The device's cohort.
    pub cohort: Cohort,
    /// [`ResolveRequest::selection_digest`] of the request this answers.
    pub request: Sha256Digest,
    /// The live rollout's cohort rule (absent without one): a client in the baseline by this
    /// rule refuses a staged decision, unless it is [`Decision::pinned`] to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort_rule: Option<CohortRule>,
    /// Set on a decision made for one pinned test device: its install id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<String>,
    /// The experiment arm the device is in, when it takes part in one (its release and
    /// candidates are that arm's). Additive in v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<ExperimentArm>,
    /// SHA-256 of the signed release envelope (see [`ReleaseRef`]).
    pub release_sha256: Sha256Digest,
    /// When the server made it.
    #[serde(with = "time::serde::rfc3339")]
    pub issued_at: OffsetDateTime,
    /// After this instant the client must not act on it (freeze protection).
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// The keyring version whose online key signed this (0 for a fixed trust file). A client
    /// accepts only decisions for the keyring version it holds.
    #[serde(default)]
    pub keyring_version: u64,
    /// The version of the model's revocation list this decision was made with (0: none). The
    /// answer carries that list (or a newer one); a client refuses an answer without it.
    #[serde(default)]
    pub revocations_version: u64,
    /// [`SEQUENCE_BASE`] plus the model's state generation in the store (rollout revision +
    /// deny-list revision + releases published + revocation list version), the same on every
    /// replica that has caught up: within one keyring version a client refuses a decision with
    /// a lower sequence than the last it accepted (a replayed older answer). No clock enters
    /// it.
    pub sequence: u64,
    /// Variants to try, best first; the XNNPACK fallback last where one is compatible.
    pub candidates: Vec<Candidate>,
    /// Where the candidates' files may be fetched, in the order to try them: URL prefixes to
    /// which a file's hex SHA-256 is appended (see [`crate::wire::sources`]). Absent: each
    /// candidate's `url`, and its data files beside it. Additive in v1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// The request's [`ResolveRequest::nonce`], when it had one: this decision was made for
    /// that request alone, so it is fresh whatever the device's clock says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// The server's time when it signed a decision with a [`Decision::nonce`]: a device may set
    /// its clock estimate by it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub time: Option<OffsetDateTime>,
}

impl Decision {
    /// Parses a decision payload: its `format` first (a newer one is a
    /// [`crate::wire::protocol::FormatError`], whatever else changed), then the fields. Unknown
    /// fields are ignored.
    pub fn from_json(bytes: &[u8]) -> Result<Decision, DecisionError> {
        crate::wire::protocol::check_format("decision", bytes)?;
        serde_json::from_slice(bytes).map_err(|e| DecisionError::Malformed(e.to_string()))
    }
}

/// Why a decision payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// In a format this build cannot read.
    #[error(transparent)]
    Format(#[from] crate::wire::protocol::FormatError),
    /// Not a decision.
    #[error("malformed decision: {0}")]
    Malformed(String),
}

impl DecisionError {
    /// Stable machine-readable code.
    pub fn code(&self) -> crate::errors::ErrorCode {
        match self {
            DecisionError::Format(_) => crate::errors::ErrorCode::FormatUnsupported,
            DecisionError::Malformed(_) => crate::errors::ErrorCode::DecisionInvalid,
        }
    }
}

/// Why one variant was chosen or excluded, for `?explain=true`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// The release it belongs to.
    pub release: Version,
    /// The variant.
    pub variant: VariantId,
    /// Its delegate.
    pub delegate: Delegate,
    /// Position in the candidate list when chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    /// Why it was excluded (empty when chosen), or a note on its rank.
    pub reasons: Vec<String>,
}

/// The body of a successful `POST /v1/resolve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolveResponse {
    /// The [`Decision`], signed by the server's online key.
    pub decision: Envelope,
    /// Where the release manifest (signed by an offline release key) is: clients fetch it once
    /// and keep it by digest.
    pub release_ref: ReleaseRef,
    /// The release manifest itself, when the server sends it inline (with `?explain=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<Envelope>,
    /// Present with `?explain=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Vec<Explanation>>,
    /// The model's revocation list, signed by a release key (see [`crate::trust::revocation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocations: Option<Envelope>,
    /// The telemetry receipt for this answer: an opaque server MAC over the install id, model,
    /// release and candidate variants, to copy into each telemetry event about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// The server does not know the request's `operators_digest`: the decision was made
    /// without checking operators, and the client should send the same request once more
    /// with `operators` (the list).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub operators_wanted: bool,
    /// With `?explain=true`: where this install id stands in the model's rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStance>,
    /// Releases of the model whose sealed variants' keys an operator stopped (`ferry release
    /// seal-stop`): a device holding such a key forgets it and loads another candidate. Not
    /// signed: dropping it only helps someone who holds a key already, adding it only denies a
    /// load, which blocking the answer does too. An additive v1 field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealed_stopped: Vec<String>,
}

/// Where an install id stands in a model's rollout, as `?explain=true` says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutStance {
    /// The rollout's state (`active`, `paused`, `halted`, `completed`); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The release staged, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<String>,
    /// Its share of install ids, in percent (`"10"`, `"0.5"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<String>,
    /// The cohort this install id is in (`staged` or `baseline`).
    pub cohort: Cohort,
    /// The release this install id is pinned to, if it is a pinned test device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<String>,
    /// The same, in one sentence for people.
    pub summary: String,
}

/// The JSON error body every ferry endpoint returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable machine-readable code (`no_compatible_variant`, ...).
    pub code: String,
    /// What happened, for a developer.
    pub message: String,
    /// The request's id (also in the `x-request-id` header), for support.
    pub request_id: String,
    /// Extra detail (for `no_compatible_variant`: the explanation per variant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}
