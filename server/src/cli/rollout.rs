//! `ferry rollout ...`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use ferry_shared::rollout::{Percent, RolloutChange, RolloutPlan, format_percent};
use semver::Version;

use super::remote::{Remote, admin_call};

/// `ferry rollout ...`.
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Start rolling a release out to a percentage of devices.
    Start {
        /// Model name.
        model: String,
        /// The release to roll out.
        #[arg(long)]
        release: Version,
        /// Share of devices (decimals allowed: 0.5 = 50 basis points).
        #[arg(long)]
        percent: Percent,
        /// Halt when the staged release's load-failure rate exceeds this (0–1).
        #[arg(long)]
        max_failure_rate: Option<f64>,
        /// Halt when its fallback rate exceeds this (0–1).
        #[arg(long)]
        max_fallback_rate: Option<f64>,
        /// Loads needed before the rates count.
        #[arg(long)]
        min_samples: Option<u64>,
        /// Why (kept in the history).
        #[arg(long)]
        reason: Option<String>,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Change the percentage of an active rollout.
    Set {
        /// Model name.
        model: String,
        /// New share of devices.
        #[arg(long)]
        percent: Percent,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Freeze the rollout (staged devices keep the staged release).
    Pause(SimpleRollout),
    /// Continue a paused or halted rollout.
    Resume(SimpleRollout),
    /// Send every device back to the baseline.
    Rollback(SimpleRollout),
    /// Make the staged release the baseline for everyone.
    Complete(SimpleRollout),
    /// The plan in force and its history.
    Status {
        /// Model name.
        model: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
}

/// Arguments of the rollout commands that take only a model.
#[derive(Debug, Clone, clap::Args)]
pub struct SimpleRollout {
    /// Model name.
    pub model: String,
    /// Why (kept in the history).
    #[arg(long)]
    pub reason: Option<String>,
    /// Where and who.
    #[command(flatten)]
    pub remote: Remote,
}
pub(crate) fn print_plan(p: &RolloutPlan) {
    let show = |v: &Option<Version>| v.as_ref().map_or("-".to_string(), Version::to_string);
    println!(
        "{} rollout revision {}: {} {} -> staged {} at {}% (baseline {}), by {} at {}{}",
        p.model,
        p.revision,
        p.action,
        p.state.as_str(),
        show(&p.staged),
        format_percent(p.basis_points),
        show(&p.baseline),
        p.actor,
        p.at,
        if p.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", p.reason)
        }
    );
}

pub(crate) fn rollout_cmd(cmd: RolloutCommand) -> anyhow::Result<ExitCode> {
    let (model, remote, change) = match cmd {
        RolloutCommand::Start {
            model,
            release,
            percent,
            max_failure_rate,
            max_fallback_rate,
            min_samples,
            reason,
            remote,
        } => (
            model,
            remote,
            RolloutChange::Start {
                release,
                percent,
                max_failure_rate,
                max_fallback_rate,
                min_samples,
                reason,
            },
        ),
        RolloutCommand::Set {
            model,
            percent,
            reason,
            remote,
        } => (model, remote, RolloutChange::Set { percent, reason }),
        RolloutCommand::Pause(a) => (a.model, a.remote, RolloutChange::Pause { reason: a.reason }),
        RolloutCommand::Resume(a) => (
            a.model,
            a.remote,
            RolloutChange::Resume { reason: a.reason },
        ),
        RolloutCommand::Rollback(a) => (
            a.model,
            a.remote,
            RolloutChange::Rollback { reason: a.reason },
        ),
        RolloutCommand::Complete(a) => (
            a.model,
            a.remote,
            RolloutChange::Complete { reason: a.reason },
        ),
        RolloutCommand::Status {
            model,
            json,
            remote,
        } => {
            let v = admin_call(
                &remote,
                "GET",
                &format!("/v1/admin/models/{model}/rollout"),
                None,
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            let history: Vec<RolloutPlan> = serde_json::from_value(v["history"].clone())
                .context("the server's rollout history is not a list of plans")?;
            if history.is_empty() {
                println!("{model} has no rollout");
            }
            for p in &history {
                print_plan(p);
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    let v = admin_call(
        &remote,
        "POST",
        &format!("/v1/admin/models/{model}/rollout"),
        Some(serde_json::to_value(&change)?),
    )?;
    let plan: RolloutPlan =
        serde_json::from_value(v).context("the server's answer is not a rollout plan")?;
    print_plan(&plan);
    Ok(ExitCode::SUCCESS)
}
