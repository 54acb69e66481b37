//! `ferry experiment ...`: start, status, stop, history.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use ferry_shared::experiment::ExperimentPlan;
use ferry_shared::experiment::change::{StartExperiment, StopExperiment};
use ferry_shared::experiment::{ArmName, ExperimentState};

use super::remote::{Remote, admin_call};

/// `ferry experiment ...`.
#[derive(Debug, Subcommand)]
pub enum ExperimentCommand {
    /// Start comparing two arms (releases, or variants of one release) on the model's devices.
    Start {
        /// Model name.
        model: String,
        /// What devices get today: RELEASE or RELEASE/VARIANT (for example 1.2.0/xnnpack-fp32).
        #[arg(long)]
        control: String,
        /// What is tried: RELEASE or RELEASE/VARIANT.
        #[arg(long)]
        treatment: String,
        /// Percent of the model's devices that take part (default 100); only devices in no
        /// staged cohort and no pin, and able to run both arms, do.
        #[arg(long, value_parser = finite)]
        share: Option<f64>,
        /// An app metric to compare (repeatable): NAME (higher is better), NAME:lower or
        /// NAME:higher. ferry's own (load_failure, fallback, crash, latency_p95_ms,
        /// download_bytes; lower is better) are always compared.
        #[arg(long = "metric")]
        metrics: Vec<String>,
        /// Break results down by device class: soc, device_model (comma-separated).
        #[arg(long, value_delimiter = ',')]
        classes: Vec<String>,
        /// The smallest effect worth finding, as a share of the control's mean (default 0.05):
        /// the interval is tightest and the sample needed is quoted for it.
        #[arg(long, value_parser = finite)]
        effect: Option<f64>,
        /// Days of each device's history before the start used to narrow the interval
        /// (CUPED; default 7, at most 30).
        #[arg(long)]
        lookback_days: Option<u32>,
        /// Why (kept in the history).
        #[arg(long)]
        reason: Option<String>,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// The experiment's results: per metric, each arm's mean per device, the difference with
    /// its always-valid 95% interval, and the decision (better, worse, unknown).
    Status {
        /// Model name.
        model: String,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Stop assigning devices; results stay readable.
    Stop {
        /// Model name.
        model: String,
        /// The arm that won: control or treatment.
        #[arg(long, value_parser = parse_arm)]
        winner: Option<ArmName>,
        /// Roll the winner's release out to every device (a rollout start at 100%; nothing
        /// stops if that is refused).
        #[arg(long, requires = "winner")]
        roll_out: bool,
        /// Why (kept in the history).
        #[arg(long)]
        reason: Option<String>,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Every start and stop of the model's experiments, with actor and reason.
    History {
        /// Model name.
        model: String,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
}

/// A number flag: finite (NaN and infinity would reach the server as null, its default).
fn finite(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} is not a finite number")),
    }
}

fn parse_arm(s: &str) -> Result<ArmName, String> {
    ArmName::parse(s).ok_or_else(|| format!("{s:?} is not control or treatment"))
}

/// Runs `ferry experiment ...`.
pub(crate) fn experiment_cmd(cmd: ExperimentCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        ExperimentCommand::Start {
            model,
            control,
            treatment,
            share,
            metrics,
            classes,
            effect,
            lookback_days,
            reason,
            remote,
        } => {
            let body = StartExperiment {
                control,
                treatment,
                share,
                metrics,
                classes,
                effect,
                lookback_days,
                reason: reason.unwrap_or_default(),
            };
            let path = format!("/v1/admin/models/{model}/experiment");
            if change(&remote, &path, serde_json::to_value(&body)?, json)?.is_some() {
                println!("status: ferry experiment status {model}");
            }
            Ok(ExitCode::SUCCESS)
        }
        ExperimentCommand::Status { model, remote } => {
            if let Some(v) = read(
                &remote,
                &format!("/v1/admin/models/{model}/experiment"),
                json,
            )? {
                print_status(&v)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ExperimentCommand::Stop {
            model,
            winner,
            roll_out,
            reason,
            remote,
        } => {
            let body = StopExperiment {
                winner,
                roll_out,
                reason: reason.unwrap_or_default(),
            };
            let path = format!("/v1/admin/models/{model}/experiment/stop");
            let answer = change(&remote, &path, serde_json::to_value(&body)?, json)?;
            if let Some(r) = answer
                .as_ref()
                .and_then(|v| v.get("rollout"))
                .filter(|r| !r.is_null())
            {
                println!(
                    "rollout started: {} to {}",
                    r["staged"].as_str().unwrap_or("?"),
                    r["basis_points"]
                        .as_u64()
                        .map_or("?".into(), |b| format!("{}%", b as f64 / 100.0))
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ExperimentCommand::History { model, remote } => {
            let path = format!("/v1/admin/models/{model}/experiment/history");
            let Some(v) = read(&remote, &path, json)? else {
                return Ok(ExitCode::SUCCESS);
            };
            let revisions: Vec<ExperimentPlan> = serde_json::from_value(v["revisions"].clone())
                .context("the server's history is not a list of plans")?;
            if revisions.is_empty() {
                println!("{model} has had no experiment");
            }
            for p in &revisions {
                let why = if p.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", p.reason)
                };
                println!(
                    "#{} {} {} by {}: {}{why}",
                    p.revision,
                    p.at,
                    p.action,
                    p.actor,
                    plan_line(p)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Reads `path`; prints it as JSON with `json` (then `None`), else hands it over to print.
fn read(remote: &Remote, path: &str, json: bool) -> anyhow::Result<Option<serde_json::Value>> {
    let v = admin_call(remote, "GET", path, None)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(None);
    }
    Ok(Some(v))
}

/// Posts a change and prints the plan the server wrote (its JSON with `json`); the answer,
/// when it was printed as text.
fn change(
    remote: &Remote,
    path: &str,
    body: serde_json::Value,
    json: bool,
) -> anyhow::Result<Option<serde_json::Value>> {
    let v = admin_call(remote, "POST", path, Some(body))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(None);
    }
    let p: ExperimentPlan = serde_json::from_value(v.clone())
        .context("the server's answer is not an experiment plan")?;
    println!("{}", plan_line(&p));
    Ok(Some(v))
}

/// One line for a plan: its id, arms, share and state.
fn plan_line(p: &ExperimentPlan) -> String {
    let state = match &p.state {
        ExperimentState::Running => "running".to_string(),
        ExperimentState::Stopped { winner, rolled_out } => format!(
            "stopped{}{}",
            winner
                .map(|w| format!(", winner {}", w.as_str()))
                .unwrap_or_default(),
            if *rolled_out { ", rolled out" } else { "" }
        ),
    };
    format!(
        "experiment {} of {}: control {} vs treatment {} on {}% of devices, {state}",
        p.id,
        p.model,
        p.control,
        p.treatment,
        p.basis_points as f64 / 100.0
    )
}

fn num(v: &serde_json::Value) -> String {
    match v.as_f64() {
        Some(x) if x.abs() >= 1000.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 1.0 => format!("{x:.3}"),
        Some(x) => format!("{x:.5}"),
        None => "-".into(),
    }
}

fn print_status(v: &serde_json::Value) -> anyhow::Result<()> {
    let p: ExperimentPlan = serde_json::from_value(v["experiment"].clone())
        .context("the server's status has no experiment plan")?;
    println!("{}", plan_line(&p));
    let d = &v["devices"];
    println!(
        "devices: control {}, treatment {} ({} with a history before their arm)",
        d["control"], d["treatment"], d["with_history"]
    );
    println!(
        "{:<22} {:>12} {:>12} {:>12}  {:<27} {:<8} needs",
        "metric", "control", "treatment", "difference", "95% interval (always valid)", "decision"
    );
    for m in v["metrics"].as_array().into_iter().flatten() {
        let interval = format!("[{}, {}]", num(&m["interval"][0]), num(&m["interval"][1]));
        let needs = match (m["decision"].as_str(), m["devices_more"].as_u64()) {
            (Some("better" | "worse"), _) => "decided".to_string(),
            (_, Some(0)) => "enough devices".to_string(),
            (_, Some(n)) => format!("{n} more per arm"),
            (_, None) => "-".into(),
        };
        let name = format!(
            "{}{}",
            m["metric"].as_str().unwrap_or("?"),
            if m["cuped"] == true { " (CUPED)" } else { "" }
        );
        println!(
            "{:<22} {:>12} {:>12} {:>12}  {:<27} {:<8} {needs}",
            name,
            num(&m["control"]),
            num(&m["treatment"]),
            num(&m["difference"]),
            interval,
            m["decision"].as_str().unwrap_or("?"),
        );
        for c in m["classes"].as_array().into_iter().flatten() {
            println!(
                "  {}={} ({} / {} devices): {} {} [{}, {}]",
                c["key"].as_str().unwrap_or("?"),
                c["value"].as_str().unwrap_or("?"),
                c["devices"][0],
                c["devices"][1],
                c["decision"].as_str().unwrap_or("?"),
                num(&c["difference"]),
                num(&c["interval"][0]),
                num(&c["interval"][1]),
            );
        }
    }
    println!(
        "(Means per device; (CUPED): adjusted by each device's history. better/worse: the \
         interval excludes 0 with 30 devices per arm; it stays valid however often you look. \
         Per class, 5% is divided among the classes shown. Telemetry counts once written to the \
         raw log: within telemetry.raw_roll_secs, 60 s by default.)"
    );
    Ok(())
}
