use super::*;
use proptest::prelude::*;

fn plan(bp: u32) -> RolloutPlan {
    RolloutPlan {
        model: "m".into(),
        revision: 1,
        baseline: Some(Version::new(1, 0, 0)),
        staged: Some(Version::new(2, 0, 0)),
        basis_points: bp,
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

#[test]
fn percent_parsing() {
    assert_eq!(parse_percent("5"), Ok(500));
    assert_eq!(parse_percent("0.5"), Ok(50));
    assert_eq!(parse_percent("12.25"), Ok(1225));
    assert_eq!(parse_percent("100"), Ok(10_000));
    assert_eq!(parse_percent(".5"), Ok(50));
    assert_eq!(parse_percent("7%"), Ok(700));
    for bad in ["", "101", "0.001", "-1", "abc", "1.2.3", "99999999999"] {
        assert!(parse_percent(bad).is_err(), "{bad}");
    }
    assert_eq!(format_percent(50), "0.5");
    assert_eq!(format_percent(1225), "12.25");
    assert_eq!(format_percent(500), "5");
}

#[test]
fn a_hundred_thousand_devices() {
    let ids: Vec<String> = (0..100_000).map(|i| format!("install-{i:06}")).collect();
    let at = |bp: u32| -> Vec<bool> {
        ids.iter()
            .map(|id| plan(bp).cohort(id) == Cohort::Staged)
            .collect()
    };
    let five = at(500);
    let share = five.iter().filter(|x| **x).count() as f64 / ids.len() as f64;
    assert!((share - 0.05).abs() <= 0.003, "5% staged share was {share}");
    let twenty = at(2000);
    assert!(
        five.iter().zip(&twenty).all(|(a, b)| !a || *b),
        "raising 5% -> 20% moved a device out"
    );
    let share = twenty.iter().filter(|x| **x).count() as f64 / ids.len() as f64;
    assert!(
        (share - 0.20).abs() <= 0.006,
        "20% staged share was {share}"
    );
    let mut rolled_back = plan(2000);
    rolled_back.state = RolloutState::Halted;
    assert!(
        ids.iter()
            .all(|id| rolled_back.cohort(id) == Cohort::Baseline)
    );
}

#[test]
fn a_hundred_thousand_devices_through_a_ramp() {
    let ids: Vec<String> = (0..100_000).map(|i| format!("install-{i:06}")).collect();
    let mut p = plan(100);
    p.ramp = Some(Ramp {
        steps: vec![100, 500, 2500, 5000, 10_000],
        every_secs: 60,
        step: 0,
        step_started: "2026-12-03T00:00:00Z".into(),
    });
    let mut staged_before: Vec<bool> = vec![false; ids.len()];
    loop {
        let staged: Vec<bool> = ids
            .iter()
            .map(|id| p.cohort(id) == Cohort::Staged)
            .collect();
        let share = staged.iter().filter(|x| **x).count() as f64 / ids.len() as f64;
        let want = f64::from(p.basis_points) / f64::from(FULL);
        eprintln!(
            "ramp step {}%: staged share {share:.4}",
            format_percent(p.basis_points)
        );
        assert!((share - want).abs() <= 0.006, "step {want}: share {share}");
        assert!(
            staged_before.iter().zip(&staged).all(|(a, b)| !a || *b),
            "a device left the staged cohort while the ramp rose"
        );
        staged_before = staged;
        let Some(next) = p.ramp.as_ref().and_then(Ramp::next) else {
            break;
        };
        p = ramp::advance(&p, next, "2026-12-03T01:00:00Z");
    }
    assert!(staged_before.iter().all(|x| *x), "100% stages every device");
}

#[test]
fn changes_round_trip_and_accept_numbers_for_percent() {
    let start: RolloutChange = serde_json::from_str(
        r#"{"action":"start","release":"1.1.0","percent":0.5,"min_samples":10}"#,
    )
    .expect("start");
    match &start {
        RolloutChange::Start {
            release, percent, ..
        } => {
            assert_eq!(release, &Version::new(1, 1, 0));
            assert_eq!(percent.map(Percent::basis_points), Some(50));
        }
        other => panic!("parsed as {other:?}"),
    }
    let text = serde_json::to_string(&start).expect("serialize");
    assert_eq!(
        serde_json::from_str::<RolloutChange>(&text).expect("again"),
        start
    );
    for bad in [
        r#"{"action":"explode"}"#,
        r#"{"action":"set"}"#,
        r#"{"action":"set","percent":"101"}"#,
        r#"{"action":"pause","percent":"5"}"#,
        r#"{"action":"start","release":"x","percent":"5"}"#,
        r#"{"release":"1.0.0"}"#,
    ] {
        assert!(serde_json::from_str::<RolloutChange>(bad).is_err(), "{bad}");
    }
}

proptest! {
    #[test]
    fn raising_the_percentage_only_adds(id in ".{0,40}", salt in "[a-z0-9]{1,16}", a in 0u32..=10_000, b in 0u32..=10_000) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let mut p = plan(lo);
        p.salt = salt;
        let before = p.cohort(&id);
        p.basis_points = hi;
        if before == Cohort::Staged {
            prop_assert_eq!(p.cohort(&id), Cohort::Staged);
        }
    }

    #[test]
    fn buckets_are_in_range(id in ".{0,64}", salt in ".{0,16}") {
        prop_assert!(bucket(&salt, "model", &id) < FULL);
    }
}
