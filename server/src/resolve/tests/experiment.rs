//! Experiment arms in the resolve decision: who takes part and what each arm offers.

use ferry_shared::experiment::{Arm, ArmName, ExperimentPlan, ExperimentState};
use ferry_shared::select::rollout::Pin;
use ferry_shared::trust::revocation::{RevocationList, Revoked};

use super::*;
use crate::snapshot::Revocations;

/// An experiment of `m` between two arms on `basis_points` of the devices.
fn experiment(control: &str, treatment: &str, basis_points: u32) -> ExperimentPlan {
    ExperimentPlan {
        model: "m".into(),
        revision: 1,
        id: "xtest".into(),
        salt: "exp-salt".into(),
        control: control.parse::<Arm>().expect("arm"),
        treatment: treatment.parse::<Arm>().expect("arm"),
        basis_points,
        metrics: Vec::new(),
        classes: Vec::new(),
        effect: 0.05,
        started_at: "2026-12-01T00:00:00Z".into(),
        lookback_days: 7,
        state: ExperimentState::Running,
        action: "start".into(),
        actor: "t".into(),
        at: "2026-12-01T00:00:00Z".into(),
        reason: String::new(),
    }
}

/// Release 1.1.0 (XNNPACK, Vulkan) over 1.0.0 (XNNPACK), both for every platform and runtime.
fn two_releases() -> Vec<Arc<Release>> {
    vec![
        release(&Version::new(1, 1, 0), &[(0, 0, 0, 0), (1, 0, 0, 0)]),
        release(&Version::new(1, 0, 0), &[(0, 0, 0, 0)]),
    ]
}

fn with<'a>(
    plan: Option<&'a RolloutPlan>,
    experiment: &'a ExperimentPlan,
    revocations: Option<&'a Revocations>,
) -> ModelState<'a> {
    ModelState {
        experiment: Some(experiment),
        revocations,
        ..state(2, plan)
    }
}

/// An install id the experiment puts in `arm` (and, with `staged`, that the rollout plan
/// stages or not as asked).
fn install_in(x: &ExperimentPlan, arm: ArmName, rollout: Option<(&RolloutPlan, bool)>) -> String {
    (0..10_000)
        .map(|i| format!("device-{i}"))
        .find(|id| {
            x.bucket_arm(id) == Some(arm)
                && rollout.is_none_or(|(p, staged)| (p.cohort(id) == Cohort::Staged) == staged)
        })
        .expect("an install id in the arm")
}

const BOTH: [bool; 4] = [true, true, false, false];

#[test]
fn each_arm_gets_its_own_offer_and_the_fallback_stays_last() {
    let releases = two_releases();
    let pref = Preference::default();
    let x = experiment("1.1.0/xnnpack", "1.1.0/vulkan", 10_000);
    let id = install_in(&x, ArmName::Treatment, None);
    let d = device(&id, 0, &BOTH, "1.5.1", 4096);
    let decided = decide(&d, &with(None, &x, None), &releases, &policy(&pref), now()).expect("ok");
    let arm = decided.decision.experiment.expect("in the experiment");
    assert_eq!((arm.id.as_str(), arm.arm.as_str()), ("xtest", "treatment"));
    let ids: Vec<&str> = decided
        .decision
        .candidates
        .iter()
        .map(|c| c.variant.as_str())
        .collect();
    assert_eq!(
        ids,
        ["vulkan", "xnnpack"],
        "the arm first, the tested fallback last"
    );
    let id = install_in(&x, ArmName::Control, None);
    let d = device(&id, 0, &BOTH, "1.5.1", 4096);
    let decided = decide(&d, &with(None, &x, None), &releases, &policy(&pref), now()).expect("ok");
    assert_eq!(decided.decision.experiment.expect("arm").arm, "control");
    let ids: Vec<&str> = decided
        .decision
        .candidates
        .iter()
        .map(|c| c.variant.as_str())
        .collect();
    assert_eq!(ids, ["xnnpack"], "the other arm's variant is left out");
}

#[test]
fn release_arms_give_each_arm_its_release() {
    let releases = two_releases();
    let pref = Preference::default();
    let x = experiment("1.0.0", "1.1.0", 10_000);
    for (arm, release) in [(ArmName::Control, "1.0.0"), (ArmName::Treatment, "1.1.0")] {
        let d = device(&install_in(&x, arm, None), 0, &BOTH, "1.5.1", 4096);
        let decided =
            decide(&d, &with(None, &x, None), &releases, &policy(&pref), now()).expect("ok");
        assert_eq!(decided.decision.release.to_string(), release);
        assert_eq!(decided.decision.cohort, Cohort::Baseline);
    }
}

#[test]
fn staged_pinned_unable_and_stopped_devices_take_no_part() {
    let releases = two_releases();
    let pref = Preference::default();
    let x = experiment("1.1.0/xnnpack", "1.1.0/vulkan", 10_000);
    // A device that cannot run the treatment (no Vulkan) is in neither arm.
    let id = install_in(&x, ArmName::Control, None);
    let cpu_only = device(&id, 0, &[true, false, false, false], "1.5.1", 4096);
    let decided = decide(
        &cpu_only,
        &with(None, &x, None),
        &releases,
        &policy(&pref),
        now(),
    )
    .expect("ok");
    assert!(decided.decision.experiment.is_none());
    // A device the rollout stages is not in the experiment; one it does not stage is.
    let rollout = plan(Some(Version::new(1, 0, 0)), Version::new(1, 1, 0), 5_000);
    let staged = install_in(&x, ArmName::Treatment, Some((&rollout, true)));
    let d = device(&staged, 0, &BOTH, "1.5.1", 4096);
    let s = with(Some(&rollout), &x, None);
    let decided = decide(&d, &s, &releases, &policy(&pref), now()).expect("ok");
    assert!(decided.decision.experiment.is_none());
    assert_eq!(decided.decision.cohort, Cohort::Staged);
    let baseline = install_in(&x, ArmName::Treatment, Some((&rollout, false)));
    let d = device(&baseline, 0, &BOTH, "1.5.1", 4096);
    let decided = decide(&d, &s, &releases, &policy(&pref), now()).expect("ok");
    assert_eq!(decided.decision.experiment.expect("arm").arm, "treatment");
    // A pinned device is not in it.
    let mut pinned = rollout.clone();
    pinned.pins.push(Pin {
        install_id: baseline.clone(),
        release: Version::new(1, 0, 0),
        expires: None,
    });
    let s = with(Some(&pinned), &x, None);
    let decided = decide(&d, &s, &releases, &policy(&pref), now()).expect("ok");
    assert!(decided.decision.experiment.is_none());
    // Nobody is, once it stopped.
    let mut stopped = x.clone();
    stopped.state = ExperimentState::Stopped {
        winner: None,
        rolled_out: false,
    };
    let d = device(
        &install_in(&x, ArmName::Treatment, None),
        0,
        &BOTH,
        "1.5.1",
        4096,
    );
    let decided = decide(
        &d,
        &with(None, &stopped, None),
        &releases,
        &policy(&pref),
        now(),
    )
    .expect("ok");
    assert!(decided.decision.experiment.is_none());
}

#[test]
fn a_revoked_arm_assigns_nobody() {
    let releases = two_releases();
    let pref = Preference::default();
    let x = experiment("1.0.0", "1.1.0", 10_000);
    let revocations = Revocations {
        list: Arc::new(RevocationList {
            format: 1,
            model: "m".parse().expect("model"),
            version: 1,
            revoked: vec![Revoked {
                release: Version::new(1, 1, 0),
                reason: "bad".into(),
                at: now(),
            }],
        }),
        envelope: None,
        json: None,
    };
    for arm in [ArmName::Control, ArmName::Treatment] {
        let d = device(&install_in(&x, arm, None), 0, &BOTH, "1.5.1", 4096);
        let s = with(None, &x, Some(&revocations));
        let decided = decide(&d, &s, &releases, &policy(&pref), now()).expect("ok");
        assert!(decided.decision.experiment.is_none());
        assert_eq!(decided.decision.release.to_string(), "1.0.0");
    }
}

#[test]
fn a_share_takes_only_its_devices_and_a_change_moves_the_sequence() {
    let releases = two_releases();
    let pref = Preference::default();
    let x = experiment("1.0.0", "1.1.0", 2_000);
    let mut taking = 0;
    for i in 0..1_000 {
        let d = device(&format!("share-{i}"), 0, &BOTH, "1.5.1", 4096);
        let decided =
            decide(&d, &with(None, &x, None), &releases, &policy(&pref), now()).expect("ok");
        assert_eq!(
            decided.decision.experiment.is_some(),
            x.bucket_arm(&d.install_id).is_some()
        );
        taking += usize::from(decided.decision.experiment.is_some());
    }
    assert!((150..250).contains(&taking), "{taking} of 1000 at 20%");
    let before = with(None, &x, None).sequence();
    let mut next = x.clone();
    next.revision = 2;
    assert_eq!(with(None, &next, None).sequence(), before + 1);
}

#[test]
fn explain_says_which_arm_or_why_none() {
    let releases = two_releases();
    let pref = Preference::default();
    let x = experiment("1.1.0/xnnpack", "1.1.0/vulkan", 10_000);
    let reasons = |d: &ResolveRequest, s: &ModelState<'_>| -> Vec<String> {
        decide(d, s, &releases, &policy(&pref), now())
            .expect("ok")
            .explain
            .into_iter()
            .flat_map(|e| e.reasons)
            .filter(|r| r.starts_with("experiment xtest"))
            .collect()
    };
    let d = device(
        &install_in(&x, ArmName::Treatment, None),
        0,
        &BOTH,
        "1.5.1",
        4096,
    );
    let said = reasons(&d, &with(None, &x, None));
    assert!(
        said.iter()
            .any(|r| r.contains("the treatment arm (vulkan, xnnpack)")),
        "{said:?}"
    );
    let cpu_only = device(
        &d.install_id,
        0,
        &[true, false, false, false],
        "1.5.1",
        4096,
    );
    let said = reasons(&cpu_only, &with(None, &x, None));
    assert!(
        said.iter()
            .any(|r| r.contains("takes no part: it cannot get its arm, 1.1.0/vulkan")),
        "{said:?}"
    );
    let mut pinned = plan(Some(Version::new(1, 0, 0)), Version::new(1, 1, 0), 0);
    pinned.pins.push(Pin {
        install_id: d.install_id.clone(),
        release: Version::new(1, 0, 0),
        expires: None,
    });
    let said = reasons(&d, &with(Some(&pinned), &x, None));
    assert!(
        said.iter()
            .any(|r| r.contains("takes no part: it is pinned")),
        "{said:?}"
    );
}
