use super::*;

fn spec(metric: Metric, max_drop: Option<f64>, max_error: Option<f64>) -> EvaluationSpec {
    EvaluationSpec {
        dataset: "set.safetensors".into(),
        metric,
        reference: "fp32".parse().expect("id"),
        max_drop,
        max_error,
        baseline: None,
        method: "forward".into(),
    }
}

fn run() -> Run {
    Run {
        dataset_sha256: "ab".repeat(32),
        samples: 1000,
        dropped: 4,
        runtime_version: "1.5.1".into(),
    }
}

fn ran(correct: u64, agree: u64, max_error: f64) -> Measured {
    Measured::Ran {
        correct,
        agree,
        max_error,
        samples: 1000,
    }
}

fn id(s: &str) -> VariantId {
    s.parse().expect("id")
}

#[test]
fn a_relative_drop_past_max_drop_fails_and_one_within_passes() {
    let s = spec(Metric::Top1, Some(0.01), None);
    let r = score(
        &s,
        &run(),
        vec![
            (id("fp32"), ran(970, 1000, 0.0)),
            // 0.962 against 0.970: a relative drop of 0.82%.
            (id("int8"), ran(962, 990, 0.0)),
            // 0.955: 1.55%.
            (id("int8-bad"), ran(955, 980, 0.0)),
            (
                id("coreml"),
                Measured::NotEvaluated("no CoreMLBackend".into()),
            ),
            (id("broken"), Measured::Failed("execute failed".into())),
        ],
        None,
    );
    let by = |k: &str| &r.evaluation.results[k];
    assert_eq!(by("fp32").passed, Some(true));
    assert_eq!(by("fp32").drop, Some(0.0));
    assert_eq!(by("int8").passed, Some(true));
    assert!((by("int8").drop.expect("drop") - 0.008_247).abs() < 1e-5);
    assert_eq!(by("int8-bad").passed, Some(false));
    assert!(
        by("int8-bad")
            .why_not
            .as_deref()
            .expect("why")
            .contains("a drop of 1.55%, above max_drop 1.00%")
    );
    assert_eq!(by("coreml").passed, None);
    assert!(!by("coreml").evaluated);
    assert_eq!(by("broken").passed, Some(false));
    assert_eq!(r.failed(), ["int8-bad", "broken"]);
    // The release order is kept, and the manifest's form validates.
    let order: Vec<&str> = r.variants.iter().map(|v| v.result.id.as_str()).collect();
    assert_eq!(order, ["fp32", "int8", "int8-bad", "coreml", "broken"]);
    r.evaluation.validate(64).expect("valid");
}

#[test]
fn a_drop_exactly_at_the_bound_passes() {
    // 0.99 of 1.0 is a drop of exactly 1%, which f64 cannot hold exactly.
    let s = spec(Metric::Agreement, Some(0.01), None);
    let r = score(
        &s,
        &run(),
        vec![(id("fp32"), ran(0, 1000, 0.0)), (id("q"), ran(0, 990, 0.0))],
        None,
    );
    assert_eq!(r.evaluation.results["q"].passed, Some(true));
}

#[test]
fn max_abs_error_is_an_absolute_bound_without_a_drop() {
    let s = spec(Metric::MaxAbsError, None, Some(0.05));
    let r = score(
        &s,
        &run(),
        vec![
            (id("fp32"), ran(0, 1000, 0.0)),
            (id("near"), ran(0, 1000, 0.04)),
            (id("far"), ran(0, 1000, 0.06)),
            (id("nan"), ran(0, 1000, f64::INFINITY)),
        ],
        None,
    );
    let by = |k: &str| &r.evaluation.results[k];
    assert_eq!(by("near").passed, Some(true));
    assert_eq!(by("near").drop, None);
    assert_eq!(by("far").passed, Some(false));
    // A difference that is not finite has no value and fails; the manifest stays valid JSON.
    assert_eq!(by("nan").value, None);
    assert_eq!(by("nan").passed, Some(false));
    r.evaluation.validate(64).expect("valid");
}

#[test]
fn a_baseline_catches_a_release_that_lost_accuracy_against_the_one_in_force() {
    let s = spec(Metric::Top1, Some(0.01), None);
    let old = score(
        &s,
        &run(),
        vec![
            (id("fp32"), ran(980, 1000, 0.0)),
            (id("int8"), ran(978, 990, 0.0)),
        ],
        None,
    );
    let manifest = ReleaseManifest {
        format: 1,
        model: "m".parse().expect("model"),
        version: semver::Version::new(1, 0, 0),
        notes: String::new(),
        created: time::OffsetDateTime::UNIX_EPOCH,
        variants: Vec::new(),
        evaluation: Some(old.evaluation),
    };
    check_baseline(&s, &run().dataset_sha256, &manifest).expect("same set");
    assert!(
        check_baseline(&s, &"cd".repeat(32), &manifest)
            .expect_err("another set")
            .to_string()
            .contains("another dataset")
    );
    // The fine-tune is consistent with its own reference but 2% below the release in force.
    let new = score(
        &s,
        &run(),
        vec![
            (id("fp32"), ran(960, 1000, 0.0)),
            (id("int8"), ran(958, 990, 0.0)),
            (id("new-variant"), ran(975, 990, 0.0)),
        ],
        Some(&manifest),
    );
    let by = |k: &str| &new.evaluation.results[k];
    assert_eq!(by("fp32").baseline_value, Some(0.98));
    assert_eq!(by("fp32").passed, Some(false));
    assert!(
        by("int8")
            .why_not
            .as_deref()
            .expect("why")
            .contains("baseline")
    );
    // A variant the baseline did not have is compared with the baseline's reference.
    assert_eq!(by("new-variant").baseline_value, Some(0.98));
    assert_eq!(by("new-variant").passed, Some(true));
    assert_eq!(
        new.evaluation.baseline.as_ref().expect("baseline").version,
        "1.0.0"
    );
}

#[test]
fn the_section_is_checked_against_the_release() {
    let ids = [id("fp32"), id("int8")];
    spec(Metric::Top1, Some(0.01), None)
        .check(&ids)
        .expect("ok");
    let mut other = spec(Metric::Top1, Some(0.01), None);
    other.reference = id("nope");
    assert!(other.check(&ids).is_err());
    assert!(spec(Metric::Top1, None, Some(0.1)).check(&ids).is_err());
    assert!(spec(Metric::Top1, Some(1.5), None).check(&ids).is_err());
    assert!(
        spec(Metric::Top1, Some(f64::NAN), None)
            .check(&ids)
            .is_err()
    );
    assert!(
        spec(Metric::MaxAbsError, Some(0.01), None)
            .check(&ids)
            .is_err()
    );
    spec(Metric::MaxAbsError, None, Some(0.1))
        .check(&ids)
        .expect("ok");
}
