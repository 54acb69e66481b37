//! Seeded simulations of whole experiments: the error rate under constant peeking, the power
//! at the sample the docs quote, and what CUPED buys.

use crate::experiment::analysis::{ALPHA, Verdict, analyse, verdict};
use crate::experiment::metrics::{DeviceRecord, LATENCY, Period};
use crate::experiment::plan::{Arm, ArmName, Better, ClassKey, ExperimentPlan, ExperimentState};
use crate::experiment::stats::{Unit, compare, devices_needed};

/// splitmix64: a seeded generator good enough for simulations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

fn plan(effect: f64, classes: Vec<ClassKey>) -> ExperimentPlan {
    ExperimentPlan {
        model: "m".into(),
        revision: 1,
        id: "e1".into(),
        salt: "s".into(),
        control: Arm {
            release: semver::Version::new(1, 0, 0),
            variant: None,
        },
        treatment: Arm {
            release: semver::Version::new(1, 1, 0),
            variant: None,
        },
        basis_points: 10_000,
        metrics: Vec::new(),
        classes,
        effect,
        started_at: "2026-12-01T00:00:00Z".into(),
        lookback_days: 7,
        state: ExperimentState::Running,
        action: "start".into(),
        actor: "sim".into(),
        at: "2026-12-01T00:00:00Z".into(),
        reason: String::new(),
    }
}

/// A device whose warm p95 latency is `level` (ms) with its own noise per event.
struct SimDevice {
    arm: ArmName,
    soc: usize,
    level: f64,
    sum: f64,
    n: u64,
}

/// 500 experiments without any difference, each looked at after every batch of events (new
/// devices join, known devices report again): at most 5% ever call a difference.
#[test]
fn an_a_a_experiment_watched_after_every_batch_calls_a_difference_in_at_most_5_percent() {
    let mut rng = Rng(0x5eed_0001);
    let (experiments, batches) = (500, 20);
    let (mut wrongly_called, mut naive_called) = (0, 0);
    for _ in 0..experiments {
        let mut devices: Vec<SimDevice> = Vec::new();
        let (mut called, mut naive) = (false, false);
        for _ in 0..batches {
            for i in 0..40 {
                let arm = if i % 2 == 0 {
                    ArmName::Control
                } else {
                    ArmName::Treatment
                };
                // Device levels vary a lot (30%), events around them less (10%).
                let level = 50.0 * (1.0 + 0.3 * rng.normal()).max(0.2);
                devices.push(SimDevice {
                    arm,
                    soc: 0,
                    level,
                    sum: 0.0,
                    n: 0,
                });
            }
            for d in devices.iter_mut() {
                d.sum += d.level * (1.0 + 0.1 * rng.normal());
                d.n += 1;
            }
            let unit = |d: &SimDevice| Unit {
                y: d.sum / d.n as f64,
                x: None,
            };
            let c: Vec<Unit> = devices
                .iter()
                .filter(|d| d.arm == ArmName::Control)
                .map(unit)
                .collect();
            let t: Vec<Unit> = devices
                .iter()
                .filter(|d| d.arm == ArmName::Treatment)
                .map(unit)
                .collect();
            let cmp = compare(&c, &t, 0.05, ALPHA);
            if verdict(&cmp, Better::Lower) != Verdict::Unknown {
                called = true;
            }
            // The fixed-sample interval (d ± 1.96·sqrt(V)), looked at just as often.
            let (_, vc, nc) = crate::experiment::stats::mean_var(c.iter().map(|u| u.y));
            let (_, vt, nt) = crate::experiment::stats::mean_var(t.iter().map(|u| u.y));
            let se = (vc / nc as f64 + vt / nt as f64).sqrt();
            if cmp.difference.abs() > 1.96 * se {
                naive = true;
            }
        }
        wrongly_called += usize::from(called);
        naive_called += usize::from(naive);
    }
    eprintln!("A/A, the fixed-sample interval looked at as often: {naive_called} called");
    // What the always-valid interval is for: the usual one, watched, fails far more often.
    assert!(naive_called * 10 > experiments, "{naive_called}");
    eprintln!("A/A: {wrongly_called} of {experiments} called a difference");
    assert!(
        wrongly_called * 20 <= experiments,
        "{wrongly_called} of {experiments} A/A experiments called a difference"
    );
}

fn records(devices: &[SimDevice]) -> Vec<DeviceRecord> {
    devices
        .iter()
        .map(|d| DeviceRecord {
            arm: Some(d.arm),
            soc: format!("soc-{}", d.soc),
            device_model: "phone".into(),
            pre: Period::default(),
            during: Period {
                events: d.n,
                latency_n: d.n,
                latency_sum: d.sum,
                ..Period::default()
            },
        })
        .collect()
}

/// Four SoCs, a real 10% latency regression on one: at the devices per arm the sample-size
/// function says that SoC needs (its Bonferroni share of 5%), it is called worse in at least
/// 80% of experiments, and the other SoCs are called either way in at most 5%.
#[test]
fn a_10_percent_regression_on_one_soc_is_called_worse_there_only_at_the_quoted_sample() {
    let mut rng = Rng(0x5eed_0002);
    let (socs, level, spread) = (4usize, 40.0_f64, 0.25_f64);
    let effect = 0.10;
    // One device's mean of a few events: its level's spread dominates.
    let var = (level * spread).powi(2);
    let needed =
        devices_needed(var, effect * level, ALPHA / socs as f64).expect("a sample") as usize;
    let experiments = 200;
    let (mut caught, mut elsewhere) = (0, 0);
    for _ in 0..experiments {
        let mut devices: Vec<SimDevice> = Vec::new();
        let (mut hit, mut other) = (false, false);
        let per_batch = needed.div_ceil(10);
        while devices.len() < needed * 2 * socs {
            for i in 0..per_batch * 2 * socs {
                let soc = i % socs;
                let arm = if (i / socs) % 2 == 0 {
                    ArmName::Control
                } else {
                    ArmName::Treatment
                };
                let mut base = level * (1.0 + spread * rng.normal()).max(0.1);
                if soc == 0 && arm == ArmName::Treatment {
                    base *= 1.0 + effect;
                }
                devices.push(SimDevice {
                    arm,
                    soc,
                    level: base,
                    sum: 0.0,
                    n: 0,
                });
            }
            for d in devices.iter_mut() {
                d.sum += d.level * (1.0 + 0.05 * rng.normal());
                d.n += 1;
            }
            let results = analyse(&plan(effect, vec![ClassKey::Soc]), &records(&devices));
            let latency = results
                .iter()
                .find(|r| r.metric == LATENCY)
                .expect("latency");
            for c in &latency.classes {
                match (c.value.as_str(), c.decision) {
                    ("soc-0", Verdict::Worse) => hit = true,
                    ("soc-0", _) | (_, Verdict::Unknown) => {}
                    _ => other = true,
                }
            }
        }
        caught += usize::from(hit);
        elsewhere += usize::from(other);
    }
    eprintln!("power: {caught} of {experiments} at {needed} per arm; elsewhere {elsewhere}");
    assert!(
        caught * 10 >= experiments * 8,
        "called worse in {caught} of {experiments} at {needed} devices per arm"
    );
    assert!(
        elsewhere * 20 <= experiments,
        "another SoC was called in {elsewhere} of {experiments}"
    );
}

/// Devices whose past predicts their present: the interval with CUPED is narrower than
/// without, and both are centred on the same effect.
#[test]
fn cuped_narrows_the_interval_on_data_with_a_pre_period() {
    let mut rng = Rng(0x5eed_0003);
    let (mut c, mut t) = (Vec::new(), Vec::new());
    for i in 0..2_000 {
        let level = 50.0 * (1.0 + 0.3 * rng.normal());
        let x = level + 3.0 * rng.normal();
        let mut y = level + 3.0 * rng.normal();
        if i % 2 == 1 {
            y += 1.0;
        }
        let u = Unit { y, x: Some(x) };
        if i % 2 == 0 { c.push(u) } else { t.push(u) }
    }
    let with = compare(&c, &t, 0.05, ALPHA);
    let strip = |v: &[Unit]| {
        v.iter()
            .map(|u| Unit { y: u.y, x: None })
            .collect::<Vec<_>>()
    };
    let without = compare(&strip(&c), &strip(&t), 0.05, ALPHA);
    let width = |r: &crate::experiment::stats::Comparison| r.interval[1] - r.interval[0];
    assert!(with.cuped && !without.cuped);
    assert!(
        width(&with) < 0.5 * width(&without),
        "with {:?} without {:?}",
        with.interval,
        without.interval
    );
    assert!(with.variance_reduction > 0.8, "{}", with.variance_reduction);
    assert!((with.difference - 1.0).abs() < 0.3, "{}", with.difference);
    assert!(with.interval[0] < 1.0 && 1.0 < with.interval[1]);
}

/// The sample-size table of `docs/experiments.md` is what [`devices_needed`] says: devices per
/// arm for 80% power, by the spread of the metric between devices (its coefficient of
/// variation), the effect, and the classes the error rate is shared by.
#[test]
fn the_docs_sample_size_table_is_the_functions() {
    let docs = include_str!("../../../docs/experiments.md");
    let mut rows = 0;
    for line in docs
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains('%'))
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Ok(cv), Some(Ok(effect)), Ok(classes)) = (
            cells[1].parse::<f64>(),
            cells[2].strip_suffix('%').map(str::parse::<f64>),
            cells[3].parse::<u32>(),
        ) else {
            continue;
        };
        let want: u64 = cells[4].replace(',', "").parse().expect("devices");
        let got =
            devices_needed(cv * cv, effect / 100.0, ALPHA / f64::from(classes)).expect("a sample");
        assert_eq!(got, want, "{line}");
        rows += 1;
    }
    assert!(rows >= 8, "the table has {rows} rows");
}

/// Prints the table's figures (run with --ignored --nocapture when the table changes).
#[test]
#[ignore = "prints the docs table"]
fn print_the_sample_size_table() {
    for cv in [0.1, 0.25, 0.5, 1.0] {
        for effect in [5.0, 10.0] {
            for classes in [1u32, 4] {
                let n = devices_needed(cv * cv, effect / 100.0, ALPHA / f64::from(classes));
                eprintln!("| {cv} | {effect}% | {classes} | {} |", n.unwrap_or(0));
            }
        }
    }
}

/// Ramps watched after every 20 loads up to 2,000, with a 5% load-failure gate and 100
/// samples: a staged release at 4% (healthy) is halted by the fixed threshold in many of them
/// and by the sequential gate in at most 5%; at 10% (a real regression) the sequential gate
/// halts at least 80% of them.
#[test]
fn sequential_gates_halt_on_real_regressions_not_on_noise() {
    use crate::experiment::gates::rate_above;
    let mut rng = Rng(0x5eed_0004);
    let run = |rng: &mut Rng, p: f64, sequential: bool| {
        let (mut x, mut n) = (0u64, 0u64);
        while n < 2_000 {
            for _ in 0..20 {
                x += u64::from(rng.uniform() < p);
                n += 1;
            }
            let over = n >= 100 && x as f64 / n as f64 > 0.05;
            if over && (!sequential || rate_above(x, n, 0.05)) {
                return true;
            }
        }
        false
    };
    let ramps = 500;
    let count = |rng: &mut Rng, p: f64, seq: bool| (0..ramps).filter(|_| run(rng, p, seq)).count();
    let (fixed_healthy, seq_healthy) = (count(&mut rng, 0.04, false), count(&mut rng, 0.04, true));
    let seq_regressed = count(&mut rng, 0.10, true);
    eprintln!(
        "gates: healthy 4% halted fixed {fixed_healthy}, sequential {seq_healthy}; 10% halted \
         sequential {seq_regressed} of {ramps}"
    );
    assert!(fixed_healthy * 5 > ramps, "{fixed_healthy}");
    assert!(seq_healthy * 20 <= ramps, "{seq_healthy}");
    assert!(seq_regressed * 10 >= ramps * 8, "{seq_regressed}");
}
