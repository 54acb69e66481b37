//! The resolve decision as a pure function: a device's request, one model's state as the views
//! hold it, the server's policy and the time in; the release, its candidates and the unsigned
//! [`Decision`] out, or a [`Refusal`] that says why. No HTTP, no clock, no store: the handler
//! in `api/device.rs` reads the request and the views, calls [`decide`], signs and renders.
//!
//! May import `resolve::releases`, `snapshot` and `storage` types and `ferry-shared`.

use std::sync::Arc;

use ferry_shared::errors::ErrorCode;
use ferry_shared::experiment::ArmName;
use ferry_shared::manifest::{ReleaseManifest, Variant};
use ferry_shared::select::deny::DenyEntry;
use ferry_shared::select::rollout::{Pin, RolloutPlan};
use ferry_shared::select::{Preference, Rule};
use ferry_shared::wire::resolve::{
    Candidate, Cohort, CohortRule, Decision, Explanation, ResolveRequest,
};
use time::OffsetDateTime;

use crate::resolve::releases::offered;
use crate::snapshot::Revocations;
use crate::storage::catalog::Release;

/// One model's state as resolve reads it, taken from the views once per request.
#[derive(Debug, Clone, Copy)]
pub struct ModelState<'a> {
    /// How many releases of the model are published.
    pub published: usize,
    /// The rollout plan in force.
    pub plan: Option<&'a RolloutPlan>,
    /// The deny list in force and its revision.
    pub deny: &'a [DenyEntry],
    /// The deny list's revision (0 without one).
    pub deny_revision: u64,
    /// The revocation list in force.
    pub revocations: Option<&'a Revocations>,
    /// The experiment plan in force (running or stopped).
    pub experiment: Option<&'a ferry_shared::experiment::ExperimentPlan>,
}

pub use crate::resolve::answers::Generation;

impl ModelState<'_> {
    /// The model's state generation (a cached answer is reused only within one).
    pub fn generation(&self) -> Generation {
        (
            self.plan.map_or(0, |p| p.revision),
            self.deny_revision,
            self.published as u64,
            self.revocations.map_or(0, |r| r.list.version),
            self.revocations.is_some_and(|r| r.envelope.is_some()),
            self.experiment.map_or(0, |e| e.revision),
        )
    }

    /// The cohort the rollout plan puts `install_id` in.
    pub fn cohort_of(&self, install_id: &str) -> Cohort {
        self.plan.map_or(Cohort::Baseline, |p| p.cohort(install_id))
    }

    /// The pin in force for `install_id` at `now`: a test device tries its pinned release
    /// first, whatever its cohort.
    pub fn pin_of(&self, install_id: &str, now: OffsetDateTime) -> Option<Pin> {
        self.plan.and_then(|p| p.pinned(install_id, now)).cloned()
    }

    /// The revocation list version devices are told of (0 when no current release key
    /// signed the list).
    pub fn revocations_version(&self) -> u64 {
        let (_, _, _, version, signed, _) = self.generation();
        if signed { version } else { 0 }
    }

    /// The decision sequence: [`ferry_shared::wire::resolve::SEQUENCE_BASE`] plus the state
    /// generation. Every input only grows and comes from the store, so replicas that have
    /// caught up agree and no clock can push it ahead.
    pub fn sequence(&self) -> u64 {
        let (rollout, deny, releases, _, _, experiment) = self.generation();
        ferry_shared::wire::resolve::SEQUENCE_BASE
            + rollout
            + deny
            + releases
            + self.revocations_version()
            + experiment
    }

    /// Whom `device`'s answer is shared with: its request's digest, its cohort and its
    /// experiment arm by hash.
    pub fn share_key(
        &self,
        device: &ResolveRequest,
        now: OffsetDateTime,
    ) -> crate::resolve::answers::Key {
        (
            device.selection_digest(),
            self.cohort_of(&device.install_id),
            self.arm_of(&device.install_id, now),
        )
    }

    /// The experiment arm `install_id` would be in, by hash and cohort alone (whether the
    /// device can run both arms is known only once its request is read): the key its answer is
    /// shared under.
    pub fn arm_of(&self, install_id: &str, now: OffsetDateTime) -> Option<ArmName> {
        let plan = self.experiment.filter(|p| p.is_running())?;
        if self.cohort_of(install_id) != Cohort::Baseline || self.pin_of(install_id, now).is_some()
        {
            return None;
        }
        plan.bucket_arm(install_id)
    }
}

/// What the server's configuration adds to a decision.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    /// Delegate preference order.
    pub preference: &'a Preference,
    /// The base URL of blob URLs (empty: paths relative to the server).
    pub base_url: &'a str,
    /// The blob sources to list, in order (empty: none; candidates' URLs use `base_url`).
    pub sources: &'a [String],
    /// How long a decision stays valid, in seconds.
    pub ttl_secs: u64,
    /// The keyring version in force.
    pub keyring_version: u64,
    /// The operators the device's runtime registered, when the server knows its set: a
    /// variant needing one it lacks is left out (`operators_missing`).
    pub operators: Option<&'a std::collections::BTreeSet<String>>,
}

/// A decision made, before it is signed.
#[derive(Debug)]
pub struct Decided {
    /// The decision.
    pub decision: Decision,
    /// The chosen release.
    pub release: Arc<Release>,
    /// Why each variant considered was chosen or excluded (with the pin's reason).
    pub explain: Vec<Explanation>,
}

/// Why no decision was made.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// No release of the model is published.
    NotPublished(String),
    /// Every published release is revoked.
    AllRevoked(String),
    /// No variant of any release the device may get fits it.
    NoFit {
        /// The model.
        model: String,
        /// Why each variant was excluded.
        explain: Vec<Explanation>,
    },
    /// The selection named a release that is not among those offered (a bug).
    Inconsistent,
}

impl Refusal {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Refusal::NotPublished(_) => ErrorCode::ModelNotFound,
            Refusal::AllRevoked(_) | Refusal::NoFit { .. } => ErrorCode::NoCompatibleVariant,
            Refusal::Inconsistent => ErrorCode::Internal,
        }
    }

    /// The message for the device (or the operator who asked with `explain`).
    pub fn message(&self) -> String {
        match self {
            Refusal::NotPublished(model) => format!("no release of {model} is published"),
            Refusal::AllRevoked(model) => format!(
                "every published release of {model} is revoked; nothing can be offered until a \
                 new release is published and shipped"
            ),
            Refusal::NoFit { model, explain } => {
                let first: Vec<String> = explain
                    .iter()
                    .take(6)
                    .map(|e| format!("{}/{}: {}", e.release, e.variant, e.reasons.join(", ")))
                    .collect();
                format!(
                    "no variant of {model} fits this device: {}",
                    first.join("; ")
                )
            }
            Refusal::Inconsistent => "selected release vanished from the catalog".into(),
        }
    }
}

/// Decides what `device` gets of its model in `state` at `now`, from `releases` (every
/// published release of the model, newest first): the releases its cohort (or its pin) may
/// get, revoked ones never, the best release with a variant that fits, and the candidates
/// best first.
pub fn decide(
    device: &ResolveRequest,
    state: &ModelState<'_>,
    releases: &[Arc<Release>],
    policy: &Policy<'_>,
    now: OffsetDateTime,
) -> Result<Decided, Refusal> {
    let model = device.model.to_string();
    if releases.is_empty() {
        return Err(Refusal::NotPublished(model));
    }
    let releases_all = releases;
    let plan = state.plan;
    let wanted_cohort = state.cohort_of(&device.install_id);
    let pin = state.pin_of(&device.install_id, now);
    let releases = offered(
        releases,
        plan,
        state.revocations,
        wanted_cohort,
        pin.as_ref(),
    )
    .ok_or_else(|| Refusal::AllRevoked(model.clone()))?;
    let manifests: Vec<&ReleaseManifest> = releases.iter().map(|r| &r.manifest).collect();
    let deny = |m: &ReleaseManifest, v: &Variant, d: &ResolveRequest| {
        if let Some(have) = policy.operators {
            let missing = ferry_shared::select::operators::missing(v.operators_needed(), have);
            if !missing.is_empty() {
                return Some(Rule::Exclude(format!(
                    "operators_missing: the device's runtime does not register {}",
                    missing.join(", ")
                )));
            }
        }
        let release = m.version.to_string();
        let (id, soc, model) = (v.id.as_str(), &d.soc, &d.device_model);
        if let Some(e) = state
            .deny
            .iter()
            .find(|e| e.matches(&release, id, soc, model))
        {
            return Some(Rule::Exclude(e.reason()));
        }
        state
            .deny
            .iter()
            .find(|e| e.demotes(&release, id, soc, model))
            .map(|e| Rule::Demote(e.reason()))
    };
    let all = releases_all;
    let staged_or_pinned = if pin.is_some() {
        Some("it is pinned")
    } else if wanted_cohort == Cohort::Staged {
        Some("the rollout stages it")
    } else {
        None
    };
    let (experiment, selection) = crate::resolve::experiment::select_with(
        device,
        state.experiment,
        staged_or_pinned,
        (all, &manifests),
        state.revocations,
        policy.preference,
        &deny,
    )
    .map_err(|explain| Refusal::NoFit { model, explain })?;
    let release = all
        .iter()
        .find(|r| r.manifest.version == selection.manifest.version)
        .cloned()
        .ok_or(Refusal::Inconsistent)?;
    let pinned_here = pin
        .as_ref()
        .is_some_and(|p| p.release == selection.manifest.version);
    let cohort = match plan.and_then(|p| p.staged.as_ref()) {
        Some(staged)
            if (wanted_cohort == Cohort::Staged || pinned_here)
                && *staged == selection.manifest.version =>
        {
            Cohort::Staged
        }
        _ => Cohort::Baseline,
    };
    let decision = Decision {
        format: 1,
        model: device.model.clone(),
        release: selection.manifest.version.clone(),
        cohort,
        request: device.selection_digest(),
        cohort_rule: plan.filter(|p| p.cohort_is_live()).map(|p| CohortRule {
            salt: p.salt.clone(),
            basis_points: p.basis_points,
        }),
        pinned: pin.as_ref().map(|p| p.install_id.clone()),
        experiment,
        release_sha256: release.envelope_sha256,
        issued_at: now,
        expires_at: now + time::Duration::seconds(i64::try_from(policy.ttl_secs).unwrap_or(0)),
        keyring_version: policy.keyring_version,
        revocations_version: state.revocations_version(),
        sequence: state.sequence(),
        candidates: selection
            .candidates
            .iter()
            .map(|v| Candidate {
                variant: v.id.clone(),
                delegate: v.delegate.clone(),
                backends: v.backends.clone(),
                sha256: v.sha256,
                size: v.size,
                url: match policy.sources.first() {
                    Some(first) => ferry_shared::wire::sources::blob_url(first, &v.sha256.to_hex()),
                    None => format!("{}/v1/blobs/sha256/{}", policy.base_url, v.sha256.to_hex()),
                },
            })
            .collect(),
        sources: policy.sources.to_vec(),
        nonce: device.nonce.clone(),
        time: device.nonce.as_ref().map(|_| now),
    };
    let mut explain = selection.explain;
    if let Some(p) = &pin {
        let why = format!(
            "pinned: install id {} gets {} first{}",
            p.install_id,
            p.release,
            p.expires
                .as_ref()
                .map(|e| format!(" until {e}"))
                .unwrap_or_default()
        );
        for e in explain.iter_mut().filter(|e| e.release == p.release) {
            e.reasons.push(why.clone());
        }
    }
    Ok(Decided {
        decision,
        release,
        explain,
    })
}
