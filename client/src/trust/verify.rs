//! Verifying a resolve response before anything is downloaded.
//!
//! Order: the decision envelope against the trusted online keys (the current keyring's,
//! without expired ones); that it names the keyring version the client holds; its times against the
//! client's clock (issued no later than now plus [`MAX_CLOCK_SKEW`], valid no longer than
//! [`MAX_DECISION_LIFETIME`], not expired); its keyring version and sequence against the newest
//! accepted for the model (replay); that it answers this install id; the release envelope against the trusted release
//! keys; then every candidate against the signed manifest (same variant, delegate, backends,
//! digest and size) and against this device (every constraint the release key signed). Only [`verify_response`]
//! builds a [`Plan`], and only through [`Verified`].

use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::{ReleaseManifest, Variant, verify_release_envelope};
use ferry_shared::select::incompatibilities;
use ferry_shared::trust::dsse::{DsseLimits, Envelope, KeyRing, KeyRole, Verified, verify};
use ferry_shared::trust::keyring::TrustState;
use ferry_shared::trust::revocation::{RevocationList, verify_revocations};
use ferry_shared::wire::resolve::{
    Cohort, DECISION_PAYLOAD_TYPE, Decision, ResolveRequest, ResolveResponse,
};
use time::OffsetDateTime;

use crate::error::ClientError;

/// A candidate the client may download: the signed manifest's variant and where to get it.
#[derive(Debug, Clone)]
pub struct PlannedVariant {
    pub(crate) variant: Variant,
    pub(crate) url: String,
    /// The decision's blob sources this build can use, in the signed order (empty: `url`).
    pub(crate) sources: std::sync::Arc<[String]>,
}

impl PlannedVariant {
    /// The variant, from the signed manifest (sizes and digests come from here only).
    pub fn variant(&self) -> &Variant {
        &self.variant
    }

    /// Download URL (absolute, or relative to the server).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The blob sources the signed decision lists for its files, in the order they are tried
    /// (URL prefixes a file's hex SHA-256 is appended to; empty: [`PlannedVariant::url`]
    /// alone).
    pub fn sources(&self) -> &[String] {
        &self.sources
    }
}

/// What a verified response says to do. Only [`verify_response`] makes one.
#[derive(Debug, Clone)]
pub struct Plan {
    pub(crate) decision: Decision,
    pub(crate) manifest: ReleaseManifest,
    pub(crate) release_envelope: Envelope,
    pub(crate) candidates: Vec<PlannedVariant>,
    pub(crate) receipt: Option<String>,
    /// Releases whose sealed keys an operator stopped, as the answer named them.
    pub(crate) sealed_stopped: Vec<String>,
}

impl Plan {
    /// Puts the server's own blob route first in every candidate's sources (added when the
    /// decision lists none): the answer came through a site mirror, which serves the site's
    /// devices from near by. Only the order changes what is tried; every byte is still checked
    /// against the signed digests.
    pub(crate) fn prefer_server(&mut self) {
        use ferry_shared::wire::sources::ORIGIN_SOURCE;
        for c in &mut self.candidates {
            let rest = c.sources.iter().filter(|s| *s != ORIGIN_SOURCE).cloned();
            c.sources = std::iter::once(ORIGIN_SOURCE.to_string())
                .chain(rest)
                .take(ferry_shared::wire::sources::MAX_SOURCES)
                .collect();
        }
    }

    /// The signed decision.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The signed release manifest.
    pub fn manifest(&self) -> &ReleaseManifest {
        &self.manifest
    }

    /// The release envelope as received (kept in the cache for offline re-verification).
    pub fn release_envelope(&self) -> &Envelope {
        &self.release_envelope
    }

    /// Candidates, best first.
    pub fn candidates(&self) -> &[PlannedVariant] {
        &self.candidates
    }

    /// The telemetry receipt of the answer (opaque; sent back with each event about it).
    pub fn receipt(&self) -> Option<&str> {
        self.receipt.as_deref()
    }
}

fn dsse_error(e: ferry_shared::trust::dsse::DsseError) -> ClientError {
    ClientError::Verify {
        code: e.code(),
        message: e.to_string(),
    }
}

/// Verifies a release envelope against the trusted release keys (also used offline).
pub fn verify_release(
    env: &Envelope,
    trust: &KeyRing,
) -> Result<Verified<ReleaseManifest>, ClientError> {
    let v = verify_release_envelope(env, trust).map_err(dsse_error)?;
    v.try_map(|bytes| ReleaseManifest::from_json(&bytes))
        .map_err(|e| ClientError::Verify {
            code: match e.code() {
                ErrorCode::FormatUnsupported => ErrorCode::FormatUnsupported,
                _ => ErrorCode::ManifestInvalid,
            },
            message: e.to_string(),
        })
}

/// Longest a decision may be valid for (the server's `decision_ttl_secs` is at most this).
pub const MAX_DECISION_LIFETIME: time::Duration = time::Duration::days(7);

/// How far ahead of the device's clock a decision's `issued_at` may be.
pub const MAX_CLOCK_SKEW: time::Duration = time::Duration::minutes(5);

/// The time a decision's time checks use: the server's signed time when the decision was
/// made for this request alone (it carries the request's nonce), so it is fresh whatever this
/// device's clock says; else `now`. A decision with another request's nonce is refused.
fn judging_time(
    request: &ResolveRequest,
    decision: &Decision,
    now: OffsetDateTime,
) -> Result<OffsetDateTime, ClientError> {
    match (&request.nonce, &decision.nonce, decision.time) {
        (Some(ours), Some(theirs), Some(time)) if ours == theirs => Ok(time),
        (_, Some(_), _) => Err(ClientError::DecisionMismatch(
            "the decision answers another request (its nonce is not this request's)".into(),
        )),
        _ => Ok(now),
    }
}

/// The time at which the online keys' `expires_at` is judged for `decision`: its own signed
/// time when it claims to answer this request's nonce (a device without a trusted time has no
/// better one: its wall clock may be decades off), else `now`. The claim is read before the
/// signature is checked; it only picks which keys are tried, and the same bytes are verified
/// with them. A holder of an expired online key could still answer such a device's nonce with
/// a time before the expiry: retire a leaked online key by rotating it (`docs/keys.md`).
pub(crate) fn key_time(
    request: &ResolveRequest,
    decision: &Envelope,
    now: OffsetDateTime,
) -> OffsetDateTime {
    let Some(ours) = &request.nonce else {
        return now;
    };
    ferry_shared::trust::dsse::decode_payload(decision, &DsseLimits::default())
        .ok()
        .and_then(|b| Decision::from_json(&b).ok())
        .and_then(|d| match (d.nonce, d.time) {
            (Some(theirs), Some(time)) if theirs == *ours => Some(time),
            _ => None,
        })
        .unwrap_or(now)
}

/// Whether `decision` was made for `request`'s profile ([`ResolveRequest::selection_digest`]).
/// A server from before operators ignores the request's `operators_digest` and names the
/// profile without it: accepted too (the client still checks each candidate's signed
/// operators against its runtime before downloading it).
fn names_this_profile(decision: &Decision, request: &ResolveRequest) -> bool {
    if decision.request == request.selection_digest() {
        return true;
    }
    request.operators_digest.is_some() && {
        let mut plain = request.clone();
        plain.operators_digest = None;
        plain.operators = None;
        decision.request == plain.selection_digest()
    }
}

/// Verifies a whole resolve response to `request` with what the client trusts now (`trust`:
/// the pinned root walked through the keyrings it accepted, or a fixed trust file). `last` is
/// the keyring version and sequence of the newest decision accepted for the model (zeros if
/// none).
pub fn verify_response(
    resp: &ResolveResponse,
    release: &Envelope,
    request: &ResolveRequest,
    trust: &TrustState,
    now: OffsetDateTime,
    last: (u64, u64),
) -> Result<Verified<Plan>, ClientError> {
    let model = request.model.as_str();
    let ring = trust.ring_at(key_time(request, &resp.decision, now));
    let decision = verify(
        &resp.decision,
        DECISION_PAYLOAD_TYPE,
        &ring,
        KeyRole::Online,
        1,
        &DsseLimits::default(),
    )
    .map_err(dsse_error)?
    .try_map(|bytes| Decision::from_json(&bytes))
    .map_err(|e| ClientError::Verify {
        code: e.code(),
        message: e.to_string(),
    })?;
    let now = judging_time(request, &decision, now)?;
    let untimely = |message: String| ClientError::Verify {
        code: ErrorCode::DecisionUntimely,
        message,
    };
    if decision.issued_at > now + MAX_CLOCK_SKEW {
        return Err(untimely(format!(
            "the decision was issued at {}, after this device's time {now} (plus {} minutes of skew)",
            decision.issued_at,
            MAX_CLOCK_SKEW.whole_minutes()
        )));
    }
    if decision.expires_at - decision.issued_at > MAX_DECISION_LIFETIME {
        return Err(untimely(format!(
            "the decision is valid from {} to {}, longer than the {} days a decision may last",
            decision.issued_at,
            decision.expires_at,
            MAX_DECISION_LIFETIME.whole_days()
        )));
    }
    if now > decision.expires_at {
        return Err(ClientError::Expired {
            expires_at: decision.expires_at.to_string(),
            now: now.to_string(),
        });
    }
    // With root keys, the decision must be for the keyring the client holds; a fixed trust
    // file has no keyrings, so only version 0 (else a stolen key could set a floor that
    // survives a later move to root keys).
    if decision.keyring_version != trust.version() {
        return Err(ClientError::DecisionMismatch(format!(
            "the decision names keyring version {}; this device holds version {}",
            decision.keyring_version,
            trust.version()
        )));
    }
    // Sequences compare within one keyring version: rotating the online key (a new version)
    // resets a floor that a stolen key pushed up.
    if (decision.keyring_version, decision.sequence) < last {
        return Err(ClientError::Replay {
            got: decision.sequence,
            seen: last.1,
        });
    }
    // The decision is shared by devices with the same profile and cohort: it must be for this
    // request's profile, this device's cohort, and (when pinned) this device.
    if !names_this_profile(decision.value(), request) {
        return Err(ClientError::DecisionMismatch(
            "the decision was made for another request (device profile, versions or backends)"
                .into(),
        ));
    }
    if let Some(pinned) = &decision.pinned
        && *pinned != request.install_id
    {
        return Err(ClientError::DecisionMismatch(
            "the decision was made for another install id".into(),
        ));
    }
    if decision.cohort == Cohort::Staged && decision.pinned.is_none() {
        let staged_here = decision.cohort_rule.as_ref().is_some_and(|r| {
            ferry_shared::select::rollout::bucket(
                &r.salt,
                decision.model.as_str(),
                &request.install_id,
            ) < r.basis_points
        });
        if !staged_here {
            return Err(ClientError::DecisionMismatch(
                "the decision is for the staged cohort, which this device is not in".into(),
            ));
        }
    }
    // An experiment arm must be this device's own by the experiment's hash (an arm name this
    // build does not know is a newer server's, and tolerated).
    if let Some(x) = &decision.experiment
        && let Some(named) = ferry_shared::experiment::ArmName::parse(&x.arm)
        && ferry_shared::experiment::plan::assign(
            &x.salt,
            x.basis_points,
            decision.model.as_str(),
            &request.install_id,
        ) != Some(named)
    {
        return Err(ClientError::DecisionMismatch(format!(
            "the decision is for the {} arm of experiment {}, which this device is not in",
            x.arm, x.id
        )));
    }
    if decision.release_sha256 != resp.release_ref.sha256 {
        return Err(ClientError::DecisionMismatch(format!(
            "the decision names release manifest {}, the answer refers to {}",
            decision.release_sha256, resp.release_ref.sha256
        )));
    }
    if decision.model.as_str() != model {
        return Err(ClientError::DecisionMismatch(format!(
            "asked for {model}, the decision is for {}",
            decision.model
        )));
    }
    let manifest = verify_release(release, &ring)?;
    let mismatch = |m: String| Err(ClientError::DecisionMismatch(m));
    if manifest.model != decision.model || manifest.version != decision.release {
        return mismatch(format!(
            "decision names {} {} but the signed release is {} {}",
            decision.model, decision.release, manifest.model, manifest.version
        ));
    }
    if decision.candidates.is_empty() {
        return mismatch("the decision lists no candidate".into());
    }
    let candidates = planned(&decision, &manifest, request)?;
    let release_envelope = release.clone();
    let decision_value = decision.into_inner();
    manifest.try_map(|manifest| {
        Ok::<_, ClientError>(Plan {
            decision: decision_value,
            manifest,
            release_envelope,
            candidates,
            receipt: resp.receipt.clone(),
            sealed_stopped: resp.sealed_stopped.clone(),
        })
    })
}

/// The decision's candidates checked against the signed manifest and this device, each with
/// the decision's usable blob sources.
fn planned(
    decision: &Decision,
    manifest: &ReleaseManifest,
    request: &ResolveRequest,
) -> Result<Vec<PlannedVariant>, ClientError> {
    let mismatch = |m: String| Err(ClientError::DecisionMismatch(m));
    let mut candidates = Vec::new();
    let sources: std::sync::Arc<[String]> = ferry_shared::wire::sources::usable(&decision.sources)
        .into_iter()
        .map(String::from)
        .collect();
    for c in &decision.candidates {
        let Some(v) = manifest.variant(&c.variant) else {
            return mismatch(format!(
                "candidate {} is not in the signed release",
                c.variant
            ));
        };
        if v.sha256 != c.sha256
            || v.size != c.size
            || v.delegate != c.delegate
            || v.backends != c.backends
        {
            return mismatch(format!(
                "candidate {} differs from the signed release (digest, size, delegate or backends)",
                c.variant
            ));
        }
        // What the release key signed about the variant must fit this device, whatever the
        // online key says: platforms, OS, RAM, SoC lists, runtime and app ranges, backends.
        let unfit = incompatibilities(v, request);
        if !unfit.is_empty() {
            return mismatch(format!(
                "candidate {} does not fit this device: {}",
                c.variant,
                unfit.join("; ")
            ));
        }
        candidates.push(PlannedVariant {
            variant: v.clone(),
            url: c.url.clone(),
            sources: sources.clone(),
        });
    }
    Ok(candidates)
}

/// The revocation list to go by for `model`, and the envelope to keep when the answer brought
/// a newer one.
///
/// - The list kept (`held`, with the keyring version it was verified under) stays in force
///   without being verified again: it was verified when it was accepted, and a later rotation
///   of its signing key must not lift its revocations.
/// - The list in the answer (`received`) must verify against the current release keys (`ring`,
///   keyring version `keyring`). It replaces the kept one when it is newer: a higher keyring
///   version, or the same keyring version and a higher list version, in which case it must keep
///   every revocation of the kept one. Within one keyring version a list is never replaced by
///   one that drops an entry; a new keyring version (after a release key rotation) starts over.
/// - The decision names the list version it was made with (`named`); an answer without that
///   list (or a newer one) is refused.
pub fn effective_revocations(
    model: &str,
    held: Option<(&Envelope, u64)>,
    received: Option<&Envelope>,
    named: u64,
    ring: &KeyRing,
    keyring: u64,
) -> Result<(Option<RevocationList>, Option<Envelope>), ClientError> {
    let held = held.and_then(|(env, kv)| {
        RevocationList::from_accepted_envelope(env)
            .ok()
            .filter(|l| l.model.as_str() == model)
            .map(|l| (l, kv))
    });
    let invalid = |message: String| ClientError::Verify {
        code: ErrorCode::RevocationsInvalid,
        message,
    };
    let mut keep = None;
    let mut best = held.as_ref().map(|(l, _)| l.clone());
    if let Some(env) = received {
        let list = verify_revocations(env, ring)
            .map_err(|e| ClientError::Verify {
                code: e.code(),
                message: e.to_string(),
            })?
            .into_inner();
        if list.model.as_str() != model {
            return Err(ClientError::DecisionMismatch(format!(
                "the answer's revocation list is for {}, not {model}",
                list.model
            )));
        }
        let newer = match &held {
            None => true,
            Some((h, kv)) => (keyring, list.version) > (*kv, h.version),
        };
        if newer {
            if let Some((h, kv)) = &held
                && *kv == keyring
                && let Some(dropped) = h
                    .revoked
                    .iter()
                    .find(|r| list.revokes(&r.release).is_none())
            {
                return Err(invalid(format!(
                    "revocation list version {} drops the revocation of {} in version {}",
                    list.version, dropped.release, h.version
                )));
            }
            keep = Some(env.clone());
            best = Some(list);
        }
    }
    let have = best.as_ref().map_or(0, |l| l.version);
    if named > have {
        return Err(ClientError::DecisionMismatch(format!(
            "the decision was made with revocation list version {named}; the answer carries \
             version {have}"
        )));
    }
    Ok((best, keep))
}

/// The error for a `release` of `model` that `list` revokes, if it does.
pub fn revoked(model: &str, release: &str, list: Option<&RevocationList>) -> Option<ClientError> {
    let version: semver::Version = release.parse().ok()?;
    list?.revokes(&version).map(|r| ClientError::Revoked {
        model: model.to_string(),
        release: release.to_string(),
        reason: r.reason.clone(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ferry_shared::trust::dsse::{KeyPair, KeyRole};
    use ferry_shared::trust::revocation::{REVOCATIONS_PAYLOAD_TYPE, Revoked};

    /// Version `version` of mlp's revocation list revoking `releases`, signed by `key`.
    pub(crate) fn signed(key: &KeyPair, version: u64, releases: &[&str]) -> Envelope {
        let list = RevocationList {
            format: 1,
            model: "mlp".parse().expect("model"),
            version,
            revoked: releases
                .iter()
                .map(|r| Revoked {
                    release: r.parse().expect("version"),
                    reason: String::new(),
                    at: OffsetDateTime::UNIX_EPOCH,
                })
                .collect(),
        };
        key.sign(
            REVOCATIONS_PAYLOAD_TYPE,
            &serde_json::to_vec(&list).expect("json"),
        )
    }

    #[test]
    fn an_older_list_never_replaces_a_newer_one() {
        let key = KeyPair::from_seed(&[9; 32]);
        let mut ring = KeyRing::new();
        ring.add(KeyRole::Release, &key.public()).expect("key");
        let v1 = signed(&key, 1, &["1.0.0"]);
        let v2 = signed(&key, 2, &["1.0.0", "1.1.0"]);
        // Held v2, the answer replays v1: v2 stays, nothing new to keep.
        let (list, keep) =
            effective_revocations("mlp", Some((&v2, 1)), Some(&v1), 1, &ring, 1).expect("ok");
        assert_eq!(list.as_ref().map(|l| l.version), Some(2));
        assert!(keep.is_none());
        assert!(revoked("mlp", "1.1.0", list.as_ref()).is_some());
        // Held v1, the answer brings v2: v2 is kept.
        let (list, keep) =
            effective_revocations("mlp", Some((&v1, 1)), Some(&v2), 2, &ring, 1).expect("ok");
        assert_eq!(list.map(|l| l.version), Some(2));
        assert_eq!(keep, Some(v2));
        // The decision names version 2, the answer carries only version 1.
        let e = effective_revocations("mlp", None, Some(&v1), 2, &ring, 1).expect_err("stripped");
        assert_eq!(e.code(), "decision_mismatch");
        // Another model's list is refused; a held list for another model is ignored.
        let e = effective_revocations("other", None, Some(&v1), 0, &ring, 1).expect_err("model");
        assert_eq!(e.code(), "decision_mismatch");
        let (list, _) =
            effective_revocations("other", Some((&v1, 1)), None, 0, &ring, 1).expect("ok");
        assert!(list.is_none());
    }

    #[test]
    fn a_newer_list_must_keep_every_revocation_within_a_keyring_version() {
        let key = KeyPair::from_seed(&[9; 32]);
        let mut ring = KeyRing::new();
        ring.add(KeyRole::Release, &key.public()).expect("key");
        let held = signed(&key, 1, &["1.0.0"]);
        // A stolen release key signs version 2 without the revocation: refused.
        let dropping = signed(&key, 2, &["1.1.0"]);
        let e = effective_revocations("mlp", Some((&held, 3)), Some(&dropping), 0, &ring, 3)
            .expect_err("drops an entry");
        assert_eq!(e.code(), "revocations_invalid");
        // After a rotation (keyring 4) the new key's list starts over.
        let (list, keep) =
            effective_revocations("mlp", Some((&held, 3)), Some(&dropping), 0, &ring, 4)
                .expect("new keyring");
        assert_eq!(list.map(|l| l.version), Some(2));
        assert!(keep.is_some());
        // A kept list whose key was rotated out stays in force without verifying.
        let other_ring = KeyRing::new();
        let (list, _) =
            effective_revocations("mlp", Some((&held, 3)), None, 0, &other_ring, 4).expect("ok");
        assert!(revoked("mlp", "1.0.0", list.as_ref()).is_some());
    }
}
