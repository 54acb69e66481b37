//! Admission of sealed variants: the server cannot read their programs, so it takes the
//! inspection `ferry sign` signed, and checks it can release their keys (it holds the
//! key-release key they are wrapped to, and each wraps a key for its own file).

use ferry_shared::manifest::{SEAL_SCHEME, Sealing, Variant};
use ferry_shared::pte::PteReport;

use crate::keys::KeyReleaseSecret;
use crate::release::publish::PublishError;

/// The key-release key `sealing` names, among the `held` ones.
pub fn key_for<'a>(
    sealing: &Sealing,
    held: &'a [KeyReleaseSecret],
) -> Option<&'a KeyReleaseSecret> {
    held.iter().find(|k| k.id() == sealing.key_release)
}

/// Checks a sealed variant and returns the inspection its release signs.
pub fn sealed_report(
    v: &Variant,
    sealing: &Sealing,
    held: &[KeyReleaseSecret],
) -> Result<PteReport, PublishError> {
    let invalid = |why: String| PublishError::SealedInvalid {
        variant: v.id.to_string(),
        why,
    };
    if sealing.scheme != SEAL_SCHEME {
        return Err(invalid(format!(
            "it is sealed with {}, a scheme this server does not know ({SEAL_SCHEME} only)",
            sealing.scheme
        )));
    }
    let Some(report) = &sealing.inspection else {
        return Err(invalid(
            "its manifest carries no inspection of the program (ferry sign makes one)".into(),
        ));
    };
    let Some(key) = key_for(sealing, held) else {
        return Err(PublishError::KeyReleaseUnavailable {
            variant: v.id.to_string(),
            key: sealing.key_release.to_string(),
        });
    };
    for f in &sealing.files {
        let wrapped = ferry_fs::sealed::keys::decode::<{ ferry_fs::sealed::keys::WRAPPED }>(&f.key)
            .map_err(|e| invalid(format!("the key of {}: {e}", f.sha256)))?;
        ferry_fs::sealed::keys::unwrap(key.secret(), &wrapped, f.sha256.as_bytes()).map_err(
            |_| {
                invalid(format!(
                    "the key of {} does not unwrap with key-release key {}",
                    f.sha256,
                    key.id().short()
                ))
            },
        )?;
    }
    if report.file_size != sealing.file(&v.sha256).map_or(0, |f| f.plain_size) {
        return Err(invalid(
            "its inspection describes a program of another size than the sealed one".into(),
        ));
    }
    Ok(report.clone())
}
