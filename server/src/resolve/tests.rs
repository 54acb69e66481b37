//! The resolve decision without a server, a socket or a file: properties over generated
//! catalogs, rollout plans and devices, and the refusals.

use std::sync::Arc;

use ferry_shared::manifest::{Delegate, Platform, ReleaseManifest};
use ferry_shared::select::rollout::{RolloutPlan, RolloutState, Thresholds};
use ferry_shared::select::{Preference, fits};
use ferry_shared::trust::dsse::Envelope;
use ferry_shared::wire::resolve::{Cohort, ResolveRequest};
use ferry_shared::{BackendId, Sha256Digest};
use proptest::prelude::*;
use semver::Version;
use time::OffsetDateTime;

use crate::resolve::decide::{ModelState, Policy, Refusal, decide};
use crate::storage::catalog::Release;

/// The variants a generated release may hold: id and delegate, and the backend it calls.
const POOL: [(&str, Option<&str>); 5] = [
    ("xnnpack", Some("XnnpackBackend")),
    ("vulkan", Some("VulkanBackend")),
    ("coreml", Some("CoreMLBackend")),
    ("qnn", Some("QnnBackend")),
    ("portable", None),
];
const RUNTIMES: [&str; 4] = [">=1.0.0", ">=1.5.0", ">=2.0.0", ">=1.0.0, <1.5.0"];
const PLATFORMS: [&[&str]; 3] = [&[], &["android"], &["ios"]];
const RAM: [Option<u64>; 3] = [None, Some(2048), Some(8192)];

/// One generated variant: which of [`POOL`], and indexes into the constraint lists.
type VariantGen = (usize, usize, usize, usize);

fn release(version: &Version, variants: &[VariantGen]) -> Arc<Release> {
    let mut seen = std::collections::BTreeSet::new();
    let variants: Vec<serde_json::Value> = variants
        .iter()
        .filter(|(pool, ..)| seen.insert(*pool))
        .map(|&(pool, runtime, platforms, ram)| {
            let (id, backend) = POOL[pool];
            let mut constraints = serde_json::json!({ "platforms": PLATFORMS[platforms] });
            if let Some(mb) = RAM[ram] {
                constraints["min_ram_mb"] = mb.into();
            }
            serde_json::json!({
                "id": id, "delegate": id, "quant": "fp32",
                "backends": backend.map(|b| vec![b]).unwrap_or_default(),
                "sha256": Sha256Digest::of(format!("{version}/{id}").as_bytes()).to_hex(),
                "size": 10, "runtime": RUNTIMES[runtime], "app": ">=1.0.0",
                "constraints": constraints,
            })
        })
        .collect();
    let json = serde_json::json!({
        "model": "m", "version": version.to_string(), "created": "2026-12-01T00:00:00Z",
        "variants": variants,
    });
    let manifest =
        ReleaseManifest::from_json(&serde_json::to_vec(&json).expect("json")).expect("valid");
    let envelope = Envelope {
        payload: version.to_string(),
        payload_type: "test".into(),
        signatures: Vec::new(),
    };
    Arc::new(Release::new(manifest, envelope, None))
}

fn device(
    install_id: &str,
    platform: usize,
    backends: &[bool; 4],
    runtime: &str,
    ram_mb: u64,
) -> ResolveRequest {
    ResolveRequest {
        model: "m".parse().expect("name"),
        install_id: install_id.into(),
        app_version: Version::new(1, 2, 0),
        runtime_version: runtime.parse().expect("version"),
        backends: POOL
            .iter()
            .zip(backends)
            .filter(|(_, on)| **on)
            .filter_map(|((_, b), _)| b.map(|b| BackendId::new(b).expect("id")))
            .collect(),
        platform: [Platform::Android, Platform::Ios, Platform::Linux][platform].clone(),
        os_version: "14".into(),
        device_model: "x".into(),
        soc: "s".into(),
        ram_mb,
        nonce: None,
        operators_digest: None,
        operators: None,
        seal_schemes: Vec::new(),
    }
}

fn plan(baseline: Option<Version>, staged: Version, basis_points: u32) -> RolloutPlan {
    RolloutPlan {
        model: "m".into(),
        revision: 2,
        baseline,
        staged: Some(staged),
        basis_points,
        salt: "salt".into(),
        state: RolloutState::Active,
        thresholds: Thresholds::default(),
        ramp: None,
        pins: Vec::new(),
        withdrawn: Vec::new(),
        action: "start".into(),
        actor: "t".into(),
        at: "2026-12-02T00:00:00Z".into(),
        reason: String::new(),
    }
}

fn state<'a>(published: usize, plan: Option<&'a RolloutPlan>) -> ModelState<'a> {
    ModelState {
        published,
        plan,
        deny: &[],
        deny_revision: 0,
        revocations: None,
        experiment: None,
    }
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_796_515_200).expect("time")
}

fn policy(preference: &Preference) -> Policy<'_> {
    Policy {
        preference,
        base_url: "",
        sources: &[],
        ttl_secs: 300,
        keyring_version: 1,
        operators: None,
    }
}

/// A catalog of one to four releases (newest first) of generated variants.
fn catalog() -> impl Strategy<Value = Vec<Arc<Release>>> {
    prop::collection::vec(
        prop::collection::vec(
            (0..POOL.len(), 0..RUNTIMES.len(), 0..3usize, 0..3usize),
            1..6,
        ),
        1..5,
    )
    .prop_map(|releases| {
        let n = releases.len() as u64;
        releases
            .iter()
            .enumerate()
            .map(|(i, vs)| release(&Version::new(1, n - i as u64, 0), vs))
            .collect()
    })
}

type DeviceGen = (String, usize, [bool; 4], &'static str, u64);

fn devices() -> impl Strategy<Value = DeviceGen> {
    (
        "[a-z0-9-]{1,24}",
        0..3usize,
        any::<[bool; 4]>(),
        prop::sample::select(vec!["1.2.0", "1.5.1", "2.1.0"]),
        prop::sample::select(vec![1024u64, 4096, 16384]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Never a variant whose signed constraints exclude the device, all from the one release
    /// the decision names; the XNNPACK fallback always after every delegate; portable only
    /// where no XNNPACK variant fits.
    #[test]
    fn candidates_fit_the_device_and_the_fallback_comes_last(
        releases in catalog(),
        (id, platform, backends, runtime, ram) in devices(),
    ) {
        let d = device(&id, platform, &backends, runtime, ram);
        let pref = Preference::default();
        let Ok(decided) = decide(&d, &state(releases.len(), None), &releases, &policy(&pref), now())
        else {
            // Refused: then no variant of any release fits.
            for r in &releases {
                prop_assert!(r.manifest.variants.iter().all(|v| !fits(v, &d)));
            }
            return Ok(());
        };
        let manifest = &decided.release.manifest;
        prop_assert_eq!(&decided.decision.release, &manifest.version);
        prop_assert_eq!(decided.decision.release_sha256, decided.release.envelope_sha256);
        prop_assert!(!decided.decision.candidates.is_empty());
        for c in &decided.decision.candidates {
            let v = manifest.variants.iter().find(|v| v.id == c.variant);
            prop_assert!(v.is_some_and(|v| fits(v, &d)), "{} does not fit", c.variant);
            prop_assert_eq!(v.map(|v| v.sha256), Some(c.sha256));
        }
        let delegates: Vec<&Delegate> =
            decided.decision.candidates.iter().map(|c| &c.delegate).collect();
        if let Some(first) = delegates.iter().position(|d| **d == Delegate::Xnnpack) {
            prop_assert!(delegates[first..].iter().all(|d| **d == Delegate::Xnnpack), "{:?}", delegates);
            prop_assert!(!delegates.contains(&&Delegate::Portable), "{:?}", delegates);
        }
        // The newest release with a fitting variant wins (no plan: every release is live).
        let newest = releases
            .iter()
            .find(|r| r.manifest.variants.iter().any(|v| fits(v, &d)))
            .map(|r| r.manifest.version.clone());
        prop_assert_eq!(Some(manifest.version.clone()), newest);
    }

    /// One install id is always in the same cohort and gets the same answer; a device outside
    /// the staged share never gets the staged release, and one inside it is told so.
    #[test]
    fn the_same_install_id_gets_the_same_bucket_and_answer(
        releases in catalog(),
        (id, platform, backends, runtime, ram) in devices(),
        basis_points in 0u32..=10_000,
    ) {
        prop_assume!(releases.len() >= 2);
        let staged = releases[0].manifest.version.clone();
        let baseline = releases[1].manifest.version.clone();
        let p = plan(Some(baseline), staged.clone(), basis_points);
        let s = state(releases.len(), Some(&p));
        let pref = Preference::default();
        let d = device(&id, platform, &backends, runtime, ram);
        let first = decide(&d, &s, &releases, &policy(&pref), now());
        let again = decide(&d, &s, &releases, &policy(&pref), now());
        match (&first, &again) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(&a.decision.release, &b.decision.release);
                prop_assert_eq!(a.decision.cohort, b.decision.cohort);
                let ids = |x: &crate::resolve::decide::Decided| {
                    x.decision.candidates.iter().map(|c| c.variant.to_string()).collect::<Vec<_>>()
                };
                prop_assert_eq!(ids(a), ids(b));
                let bucket = p.cohort(&id);
                if a.decision.release == staged {
                    prop_assert_eq!(bucket, Cohort::Staged);
                    prop_assert_eq!(a.decision.cohort, Cohort::Staged);
                } else {
                    prop_assert_eq!(a.decision.cohort, Cohort::Baseline);
                }
                prop_assert!(a.decision.release <= staged);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            _ => prop_assert!(false, "two answers for one install id"),
        }
    }

    /// Raising the staged share never moves a device back out of the staged release.
    #[test]
    fn a_larger_share_keeps_every_staged_device_staged(
        releases in catalog(),
        (id, platform, backends, runtime, ram) in devices(),
        low in 0u32..=10_000,
        more in 0u32..=10_000,
    ) {
        prop_assume!(releases.len() >= 2);
        let staged = releases[0].manifest.version.clone();
        let baseline = releases[1].manifest.version.clone();
        let high = (low + more).min(10_000);
        let (pl, ph) = (
            plan(Some(baseline.clone()), staged.clone(), low),
            plan(Some(baseline), staged.clone(), high),
        );
        let pref = Preference::default();
        let d = device(&id, platform, &backends, runtime, ram);
        let at_low = decide(&d, &state(releases.len(), Some(&pl)), &releases, &policy(&pref), now());
        let at_high = decide(&d, &state(releases.len(), Some(&ph)), &releases, &policy(&pref), now());
        if at_low.as_ref().is_ok_and(|a| a.decision.release == staged) {
            prop_assert!(at_high.is_ok_and(|a| a.decision.release == staged));
        }
    }
}

#[test]
fn no_release_is_not_published() {
    let pref = Preference::default();
    let d = device("i", 0, &[true; 4], "1.5.1", 4096);
    let refused = decide(&d, &state(0, None), &[], &policy(&pref), now()).expect_err("refused");
    assert_eq!(refused, Refusal::NotPublished("m".into()));
}

#[test]
fn a_device_nothing_fits_is_told_why_for_each_variant() {
    let pref = Preference::default();
    let releases = [release(
        &Version::new(1, 0, 0),
        &[(1, 2, 0, 0), (0, 2, 0, 0)],
    )];
    let d = device("i", 0, &[true; 4], "1.5.1", 4096);
    match decide(&d, &state(1, None), &releases, &policy(&pref), now()) {
        Err(Refusal::NoFit { model, explain }) => {
            assert_eq!(model, "m");
            assert_eq!(explain.len(), 2);
            assert!(
                explain
                    .iter()
                    .all(|e| e.reasons.iter().any(|r| r.contains("runtime"))),
                "{explain:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_baseline_device_gets_the_baseline_and_a_staged_one_the_staged_release() {
    let pref = Preference::default();
    let releases = [
        release(&Version::new(1, 1, 0), &[(0, 0, 0, 0)]),
        release(&Version::new(1, 0, 0), &[(0, 0, 0, 0)]),
    ];
    let p = plan(Some(Version::new(1, 0, 0)), Version::new(1, 1, 0), 5_000);
    let (mut staged, mut baseline) = (0, 0);
    for n in 0..200 {
        let id = format!("device-{n}");
        let d = device(&id, 0, &[true; 4], "1.5.1", 4096);
        let got = decide(&d, &state(2, Some(&p)), &releases, &policy(&pref), now()).expect("ok");
        match p.cohort(&id) {
            Cohort::Staged => {
                staged += 1;
                assert_eq!(got.decision.release, Version::new(1, 1, 0));
            }
            Cohort::Baseline => {
                baseline += 1;
                assert_eq!(got.decision.release, Version::new(1, 0, 0));
            }
        }
    }
    assert!(
        staged > 50 && baseline > 50,
        "{staged} staged, {baseline} baseline"
    );
}

mod experiment;
