//! The release manifest: what ops sign offline and every device verifies.
//!
//! A release is one version of one model. It lists *variants*: the same model exported for
//! different delegates, quantisations and runtime/app ranges. Each variant names its blob by
//! sha256 and size, so the blob itself may come from any mirror.
//!
//! Parsing is lenient about unknown fields (an older client can read a newer manifest), but
//! [`ReleaseManifest::validate`] enforces every structural rule and limit, and publishing
//! additionally refuses unknown fields (see [`ReleaseManifest::from_json_strict`]).

pub mod chunks;
mod delegate;
mod error;
mod evaluation;
mod metadata;
mod sealing;
mod types;
mod validate;

pub use delegate::{Delegate, HardwareClass, Platform, delegation_mismatch};
pub use error::{ManifestError, ManifestLimits};
pub use evaluation::{
    BaselineRef, Evaluation, EvaluationOverride, EvaluationResult, MAX_EVALUATION_TEXT,
};
pub use metadata::{
    ColorOrder, Layout, MAX_CHANNELS, MAX_LABELS, MAX_LABELS_BYTES, MAX_PREPROCESS_VALUE,
    MAX_RESIZE, MIN_STD, Preprocess, Resize, ResizeFilter,
};
pub use sealing::{SEAL_SCHEME, SealedFileKey, Sealing, WRAPPED_KEY_BYTES};
pub use types::*;

/// The DSSE payload type of a signed release manifest.
pub const RELEASE_PAYLOAD_TYPE: &str = "application/vnd.ferry.release+json";

/// Verifies a release envelope: payload type, and one valid signature by a trusted release key
/// (default limits). The bytes still need [`ReleaseManifest::from_json`] or `_strict`.
pub fn verify_release_envelope(
    env: &crate::trust::dsse::Envelope,
    ring: &crate::trust::dsse::KeyRing,
) -> Result<crate::trust::dsse::Verified<Vec<u8>>, crate::trust::dsse::DsseError> {
    crate::trust::dsse::verify(
        env,
        RELEASE_PAYLOAD_TYPE,
        ring,
        crate::trust::dsse::KeyRole::Release,
        1,
        &crate::trust::dsse::DsseLimits::default(),
    )
}

/// Finds a key present in `original` but absent from `canonical` (the re-serialised value).
#[cfg(test)]
pub(crate) mod tests;
