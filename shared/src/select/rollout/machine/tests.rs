use super::*;
use crate::manifest::Platform;
use crate::manifest::ReleaseManifest;
use crate::names::BackendId;
use crate::select::rollout::{live_releases, on_publish};
use crate::select::{Preference, no_deny, select};
use crate::wire::resolve::Cohort;
use proptest::prelude::*;

const RUNTIMES: [&str; 3] = [">=1.0.0", ">=1.5.0", ">=1.2.0, <1.6.0"];
const APPS: [&str; 3] = ["*", ">=2.0.0", "<3.0.0"];
const DELEGATES: [(&str, Option<&str>, &[&str]); 4] = [
    ("xnnpack", Some("XnnpackBackend"), &[]),
    ("vulkan", Some("VulkanBackend"), &["android", "linux"]),
    ("coreml", Some("CoreMLBackend"), &["ios", "macos"]),
    ("portable", None, &[]),
];

/// A release from compact choices: for each delegate, `None` (absent) or the index of its
/// runtime and app ranges.
fn release(version: u64, shape: &[Option<(usize, usize)>]) -> ReleaseManifest {
    let variants: Vec<serde_json::Value> = DELEGATES
        .iter()
        .zip(shape)
        .filter_map(|((d, backend, platforms), s)| {
            s.map(|(r, a)| {
                serde_json::json!({
                    "id": format!("{d}-fp32"), "delegate": d, "quant": "fp32",
                    "backends": backend.map(|b| vec![b]).unwrap_or_default(),
                    "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                    "size": 10, "runtime": RUNTIMES[r], "app": APPS[a],
                    "constraints": {"platforms": platforms},
                })
            })
        })
        .collect();
    let json = serde_json::json!({
        "model": "m", "version": format!("{version}.0.0"),
        "created": "2026-12-01T00:00:00Z", "variants": variants,
    });
    ReleaseManifest::from_json(&serde_json::to_vec(&json).expect("json")).expect("valid")
}

fn shape() -> impl Strategy<Value = Vec<Option<(usize, usize)>>> {
    proptest::collection::vec(proptest::option::of((0usize..3, 0usize..3)), 4)
        .prop_filter("a release has a variant", |s| s.iter().any(Option::is_some))
}

fn action() -> impl Strategy<Value = RolloutChange> {
    prop_oneof![
        (1u64..=4, 0u32..=10_000, any::<bool>()).prop_map(|(r, bp, supersede)| {
            RolloutChange::Start {
                release: Version::new(r, 0, 0),
                percent: Percent::from_basis_points(bp),
                steps: None,
                every_secs: None,
                max_failure_rate: None,
                max_fallback_rate: None,
                min_samples: None,
                max_regression: None,
                max_latency_ratio: None,
                max_crash_rate: None,
                sequential_gates: false,
                supersede,
                allow_strand: false,
                reason: None,
            }
        }),
        (0u32..=10_000).prop_map(|bp| RolloutChange::Set {
            percent: Percent::from_basis_points(bp).expect("bp"),
            allow_strand: false,
            reason: None
        }),
        Just(RolloutChange::Pause { reason: None }),
        Just(RolloutChange::Resume {
            allow_strand: false,
            reason: None
        }),
        Just(RolloutChange::Rollback { reason: None }),
        Just(RolloutChange::Complete {
            allow_strand: false,
            reason: None
        }),
        (1u64..=4).prop_map(|r| RolloutChange::Revert {
            to: Version::new(r, 0, 0),
            reason: "test".into()
        }),
    ]
}

fn device() -> impl Strategy<Value = ResolveRequestParts> {
    (
        0usize..4,
        proptest::collection::vec(any::<bool>(), 3),
        (1u64..=2, 0u64..=9),
        (1u64..=3, 0u64..=2),
    )
}

type ResolveRequestParts = (usize, Vec<bool>, (u64, u64), (u64, u64));

fn request(parts: &ResolveRequestParts) -> crate::wire::resolve::ResolveRequest {
    let (p, b, (rmaj, rmin), (amaj, amin)) = parts;
    let platforms = [
        Platform::Android,
        Platform::Ios,
        Platform::Linux,
        Platform::Macos,
    ];
    let names = ["XnnpackBackend", "VulkanBackend", "CoreMLBackend"];
    crate::wire::resolve::ResolveRequest {
        model: "m".parse().expect("name"),
        install_id: String::new(),
        app_version: Version::new(*amaj, *amin, 0),
        runtime_version: Version::new(*rmaj, *rmin, 0),
        backends: names
            .iter()
            .zip(b)
            .filter(|(_, on)| **on)
            .map(|(n, _)| BackendId::new(*n).expect("id"))
            .collect(),
        platform: platforms[*p].clone(),
        os_version: "14".into(),
        device_model: String::new(),
        soc: String::new(),
        ram_mb: 4096,
        nonce: None,
        operators_digest: None,
        operators: None,
        seal_schemes: Vec::new(),
    }
}

/// Whether `device` gets a variant in `cohort` under `plan`.
fn served(
    releases: &[&ReleaseManifest],
    plan: Option<&RolloutPlan>,
    cohort: Cohort,
    device: &crate::wire::resolve::ResolveRequest,
) -> bool {
    let mut published: Vec<Version> = releases.iter().map(|m| m.version.clone()).collect();
    published.sort_by(|a, b| b.cmp(a));
    let live = live_releases(&published, plan, cohort);
    let manifests: Vec<&ReleaseManifest> = live
        .iter()
        .filter_map(|v| releases.iter().find(|m| m.version == *v).copied())
        .collect();
    select(&manifests, device, &Preference::default(), &no_deny).is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Over random releases, action sequences and devices: a staged release is always newer
    /// than the baseline; the baseline moves back only through `revert`; and no device that
    /// had a variant (in any cohort) loses it (in any cohort) through an accepted move forward
    /// (`start`, a larger `set`, `resume`, `complete`). The way back (`pause`, `rollback`,
    /// `revert`, a smaller `set`) is never refused for stranding: it is always accepted when
    /// the plan's state allows the action at all.
    #[test]
    fn random_action_sequences_keep_the_invariants(
        shapes in proptest::collection::vec(shape(), 4),
        actions in proptest::collection::vec(action(), 1..24),
        devices in proptest::collection::vec(device(), 24),
    ) {
        let releases: Vec<ReleaseManifest> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| release(i as u64 + 1, s))
            .collect();
        let refs: Vec<&ReleaseManifest> = releases.iter().collect();
        let model: ModelName = "m".parse().expect("name");
        let ctx = Context { model: &model, published: &refs, salt: "s", actor: "t", at: "now", classes: None };
        let devices: Vec<_> = devices.iter().map(request).collect();
        let first = Version::new(1, 0, 0);
        let mut plan = on_publish(None, &first, false, &Context { published: &refs[..1], ..ctx });
        prop_assert_eq!(plan.as_ref().and_then(|p| p.baseline.clone()), Some(first));
        for a in &actions {
            let forward = match a {
                RolloutChange::Start { .. }
                | RolloutChange::Resume { .. }
                | RolloutChange::Complete { .. } => true,
                RolloutChange::Set { percent, .. } => {
                    plan.as_ref().is_some_and(|p| percent.basis_points() > p.basis_points)
                }
                _ => false,
            };
            let next = match transition(plan.as_ref(), a, &ctx) {
                Ok(next) => next,
                Err(TransitionError::Strands { .. }) => {
                    prop_assert!(forward, "the way back was refused for stranding: {a:?}");
                    continue;
                }
                Err(_) => continue,
            };
            if next.cohort_is_live() {
                prop_assert!(next.staged > next.baseline, "{next:?}");
            }
            let was = plan.as_ref().and_then(|p| p.baseline.clone());
            if next.baseline < was {
                prop_assert_eq!(next.action.as_str(), "revert");
            }
            if !forward {
                plan = Some(next);
                continue;
            }
            let ids: Vec<String> = (0..64).map(|i| format!("install-{i}")).collect();
            for d in &devices {
                let both = [Cohort::Baseline, Cohort::Staged];
                let before: Vec<bool> =
                    both.iter().map(|c| served(&refs, plan.as_ref(), *c, d)).collect();
                let after: Vec<bool> =
                    both.iter().map(|c| served(&refs, Some(&next), *c, d)).collect();
                let index = |c: Cohort| usize::from(c == Cohort::Staged);
                for id in &ids {
                    let cb = plan.as_ref().map_or(Cohort::Baseline, |p| p.cohort(id));
                    let ca = next.cohort(id);
                    prop_assert!(
                        !before[index(cb)] || after[index(ca)],
                        "{a:?} stranded {d:?} (install id {id}, {cb:?} -> {ca:?}): {plan:?} -> {next:?}"
                    );
                }
            }
            plan = Some(next);
        }
    }
}

#[test]
fn the_first_publish_is_live_and_later_ones_wait() {
    let v1 = release(1, &[Some((0, 0)), None, None, None]);
    let v2 = release(2, &[Some((0, 0)), None, None, None]);
    let model: ModelName = "m".parse().expect("name");
    let one = [&v1];
    let ctx = Context {
        model: &model,
        published: &[],
        salt: "s",
        actor: "t",
        at: "now",
        classes: None,
    };
    let first = on_publish(None, &v1.version, false, &ctx).expect("first is live");
    assert_eq!(first.baseline, Some(v1.version.clone()));
    let ctx = Context {
        published: &one,
        ..ctx
    };
    assert_eq!(on_publish(Some(&first), &v2.version, false, &ctx), None);
    let live = on_publish(Some(&first), &v2.version, true, &ctx).expect("goes live");
    assert_eq!(live.baseline, Some(v2.version.clone()));
    // A model published before plans existed keeps what devices had.
    let adopted = on_publish(None, &v2.version, false, &ctx).expect("adopts");
    assert_eq!(adopted.baseline, Some(v1.version.clone()));
}

#[test]
fn a_second_pause_says_the_rollout_is_already_paused() {
    let v1 = release(1, &[Some((0, 0)), None, None, None]);
    let v2 = release(2, &[Some((0, 0)), None, None, None]);
    let model: ModelName = "m".parse().expect("name");
    let both = [&v1, &v2];
    let one = [&v1];
    let ctx = Context {
        model: &model,
        published: &both,
        salt: "s",
        actor: "t",
        at: "now",
        classes: None,
    };
    let first = on_publish(
        None,
        &Version::new(1, 0, 0),
        false,
        &Context {
            published: &one,
            ..ctx
        },
    );
    let start = RolloutChange::Start {
        release: Version::new(2, 0, 0),
        percent: Percent::from_basis_points(500),
        steps: None,
        every_secs: None,
        max_failure_rate: None,
        max_fallback_rate: None,
        min_samples: None,
        max_regression: None,
        max_latency_ratio: None,
        max_crash_rate: None,
        sequential_gates: false,
        supersede: false,
        allow_strand: false,
        reason: None,
    };
    let active = transition(first.as_ref(), &start, &ctx).expect("start");
    let pause = RolloutChange::Pause { reason: None };
    let paused = transition(Some(&active), &pause, &ctx).expect("pause");
    let again = transition(Some(&paused), &pause, &ctx).expect_err("second pause");
    assert!(
        again.to_string().contains("already paused") && again.to_string().contains("resume"),
        "{again}"
    );
}
