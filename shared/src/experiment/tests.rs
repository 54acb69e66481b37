//! Starting and stopping experiments, assignment and names: the refusals and the properties.

use proptest::prelude::*;

use crate::experiment::change::{
    ExperimentError, Made, StartExperiment, StopExperiment, start, stop,
};
use crate::experiment::plan::{
    ArmName, ArmTag, Better, ClassKey, ExperimentState, MetricSpec, assign,
};
use crate::manifest::ReleaseManifest;

fn manifest(version: &str, variants: &[&str]) -> ReleaseManifest {
    let variants: Vec<serde_json::Value> = variants
        .iter()
        .map(|id| {
            serde_json::json!({
                "id": id, "delegate": "xnnpack", "quant": "fp32",
                "backends": ["XnnpackBackend"],
                "sha256": crate::Sha256Digest::of(id.as_bytes()).to_hex(),
                "size": 10, "runtime": ">=1.0.0", "app": ">=1.0.0",
            })
        })
        .collect();
    let json = serde_json::json!({
        "model": "m", "version": version, "created": "2026-12-01T00:00:00Z",
        "variants": variants,
    });
    ReleaseManifest::from_json(&serde_json::to_vec(&json).expect("json")).expect("manifest")
}

fn made() -> Made<'static> {
    Made {
        model: "m",
        actor: "oncall",
        at: "2026-12-07T10:00:00Z",
        random: "0123456789abcdef0123456789abcdef",
    }
}

fn req(control: &str, treatment: &str) -> StartExperiment {
    StartExperiment {
        control: control.into(),
        treatment: treatment.into(),
        share: None,
        metrics: Vec::new(),
        classes: Vec::new(),
        effect: None,
        lookback_days: None,
        reason: String::new(),
    }
}

#[test]
fn a_start_names_published_unrevoked_arms_and_sane_settings() {
    let (a, b) = (
        manifest("1.0.0", &["fp32", "int8"]),
        manifest("1.1.0", &["fp32"]),
    );
    let published = [&b, &a];
    let none = |_: &semver::Version| false;
    let mut ok = req("1.0.0/fp32", "1.0.0/int8");
    ok.metrics = vec!["accepted".into(), "time_ms:lower".into()];
    ok.classes = vec!["soc".into(), "soc".into(), "device_model".into()];
    ok.share = Some(12.5);
    let plan = start(None, &ok, &published, &none, made()).expect("start");
    assert_eq!(plan.basis_points, 1250);
    assert_eq!(plan.classes, [ClassKey::Soc, ClassKey::DeviceModel]);
    assert_eq!(plan.metrics[0].better, Better::Higher);
    assert_eq!(plan.metrics[1].better, Better::Lower);
    assert_eq!((plan.revision, plan.action.as_str()), (1, "start"));
    assert!(plan.is_running() && plan.id.starts_with('x') && !plan.salt.is_empty());
    // A second start while it runs.
    assert!(matches!(
        start(Some(&plan), &ok, &published, &none, made()),
        Err(ExperimentError::Running(_))
    ));
    let revoked = |v: &semver::Version| *v == semver::Version::new(1, 1, 0);
    for (bad, why) in [
        (req("1.0.0", "1.0.0"), "the same"),
        (req("2.0.0", "1.0.0"), "not published"),
        (req("1.0.0", "1.0.0/fp16"), "no variant fp16"),
        (req("1.0.0", "latest"), "RELEASE"),
        (req("1.0.0", "1.0.0/Bad Id"), "variant id"),
        (
            StartExperiment {
                share: Some(0.0),
                ..req("1.0.0", "1.1.0")
            },
            "share",
        ),
        (
            StartExperiment {
                share: Some(100.5),
                ..req("1.0.0", "1.1.0")
            },
            "share",
        ),
        (
            StartExperiment {
                share: Some(f64::NAN),
                ..req("1.0.0", "1.1.0")
            },
            "share",
        ),
        (
            StartExperiment {
                effect: Some(0.0),
                ..req("1.0.0", "1.1.0")
            },
            "effect",
        ),
        (
            StartExperiment {
                effect: Some(2.0),
                ..req("1.0.0", "1.1.0")
            },
            "effect",
        ),
        (
            StartExperiment {
                lookback_days: Some(31),
                ..req("1.0.0", "1.1.0")
            },
            "lookback",
        ),
        (
            StartExperiment {
                classes: vec!["os".into()],
                ..req("1.0.0", "1.1.0")
            },
            "class",
        ),
        (
            StartExperiment {
                metrics: vec!["A".into()],
                ..req("1.0.0", "1.1.0")
            },
            "metric name",
        ),
        (
            StartExperiment {
                metrics: vec!["a:up".into()],
                ..req("1.0.0", "1.1.0")
            },
            "direction",
        ),
        (
            StartExperiment {
                metrics: vec!["crash:higher".into()],
                ..req("1.0.0", "1.1.0")
            },
            "ferry's own",
        ),
        (
            StartExperiment {
                metrics: vec!["a".into(), "a:lower".into()],
                ..req("1.0.0", "1.1.0")
            },
            "twice",
        ),
        (
            StartExperiment {
                metrics: vec!["m".into(); 17],
                ..req("1.0.0", "1.1.0")
            },
            "at most",
        ),
        (
            StartExperiment {
                reason: "x".repeat(1001),
                ..req("1.0.0", "1.1.0")
            },
            "reason",
        ),
        (
            StartExperiment {
                reason: "ok\n#9 fake".into(),
                ..req("1.0.0", "1.1.0")
            },
            "control characters",
        ),
        (
            StartExperiment {
                share: Some(0.001),
                ..req("1.0.0", "1.1.0")
            },
            "share",
        ),
        (req("1.0.0", "1.0.0/int8"), "compare two variants"),
        (req("1.0.0/fp32", "1.0.0"), "compare two variants"),
    ] {
        let e = start(None, &bad, &published, &none, made()).expect_err(why);
        assert_eq!(e.code(), crate::errors::ErrorCode::ExperimentInvalid);
        assert!(e.to_string().contains(why), "{e} should say {why}");
    }
    let e = start(None, &req("1.0.0", "1.1.0"), &published, &revoked, made()).expect_err("revoked");
    assert!(e.to_string().contains("revoked"), "{e}");
}

#[test]
fn a_stop_needs_a_running_experiment_and_a_roll_out_a_winner() {
    let a = manifest("1.0.0", &["fp32", "int8"]);
    let plan = start(
        None,
        &req("1.0.0/fp32", "1.0.0/int8"),
        &[&a],
        &|_| false,
        made(),
    )
    .expect("start");
    let no_winner = StopExperiment {
        roll_out: true,
        ..StopExperiment::default()
    };
    assert!(stop(Some(&plan), &no_winner, "stop", made()).is_err());
    let s = StopExperiment {
        winner: Some(ArmName::Treatment),
        roll_out: false,
        reason: "int8 holds".into(),
    };
    let stopped = stop(Some(&plan), &s, "stop", made()).expect("stop");
    assert_eq!(stopped.revision, 2);
    assert_eq!(
        stopped.state,
        ExperimentState::Stopped {
            winner: Some(ArmName::Treatment),
            rolled_out: false
        }
    );
    assert_eq!((&stopped.id, &stopped.salt), (&plan.id, &plan.salt));
    assert_eq!(
        stop(Some(&stopped), &s, "stop", made()),
        Err(ExperimentError::NotRunning)
    );
    assert_eq!(
        stop(None, &s, "stop", made()),
        Err(ExperimentError::NotRunning)
    );
}

#[test]
fn receipt_entries_round_trip_and_hostile_ones_are_nothing() {
    let tag = ArmTag {
        id: "x0123abcd".into(),
        arm: ArmName::Treatment,
    };
    assert_eq!(tag.receipt_entry(), "@x0123abcd=treatment");
    assert_eq!(ArmTag::from_receipt_entry(&tag.receipt_entry()), Some(tag));
    for junk in [
        "",
        "@",
        "@=",
        "@x=",
        "@=control",
        "x=control",
        "@X=control",
        "@x=winner",
        "@x=control=1",
        "@x y=control",
        "xnnpack-fp32",
        "@aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=control",
    ] {
        assert_eq!(ArmTag::from_receipt_entry(junk), None, "{junk:?}");
    }
}

#[test]
fn metric_specs_read_as_documented() {
    let spec = |s: &str| s.parse::<MetricSpec>();
    assert_eq!(spec("accepted").map(|m| m.better), Ok(Better::Higher));
    assert_eq!(spec("latency_p95_ms").map(|m| m.better), Ok(Better::Lower));
    assert_eq!(
        spec("time.to-answer_ms:lower").map(|m| m.better),
        Ok(Better::Lower)
    );
    for bad in [
        "",
        "1abc",
        "Accepted",
        "a b",
        "a:",
        ":lower",
        &"a".repeat(65),
    ] {
        assert!(spec(bad).is_err(), "{bad:?}");
    }
}

proptest! {
    /// A larger share only adds devices, and a device keeps its arm when the share grows;
    /// the arms split the share about evenly.
    #[test]
    fn assignment_is_sticky_and_monotone(salt in "[a-f0-9]{8,24}", small in 1u32..10_000, extra in 0u32..10_000) {
        let large = (small + extra).min(10_000);
        let mut arms = [0usize; 2];
        for i in 0..400 {
            let id = format!("install-{i}");
            let a = assign(&salt, small, "m", &id);
            let b = assign(&salt, large, "m", &id);
            if let Some(a) = a {
                prop_assert_eq!(Some(a), b);
            }
            if let Some(b) = b {
                arms[usize::from(b == ArmName::Treatment)] += 1;
            }
        }
        let total = arms[0] + arms[1];
        if total >= 200 {
            prop_assert!(arms[0] * 3 >= total && arms[1] * 3 >= total, "{:?}", arms);
        }
    }
}

#[test]
fn one_extreme_device_cannot_carry_a_mean_away() {
    use crate::experiment::analysis::{ALPHA, Verdict, verdict};
    use crate::experiment::stats::{Unit, compare};
    let arm = |base: f64| -> Vec<Unit> {
        (0..40)
            .map(|i| Unit {
                y: base + f64::from(i % 5) * 0.01,
                x: None,
            })
            .collect()
    };
    let (mut c, t) = (arm(0.5), arm(0.8));
    // A device with a real receipt sends the lowest value the server takes.
    c[0].y = -1e12;
    let r = compare(&c, &t, 0.05, ALPHA);
    assert!((r.control - 0.52).abs() < 0.01, "{r:?}");
    assert!(r.interval[0] > 0.2 && r.interval[1] < 0.4, "{r:?}");
    assert_eq!(verdict(&r, Better::Higher), Verdict::Better);
}
