//! `ferry rollout ...`.

use std::process::ExitCode;

use clap::Subcommand;

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
        release: String,
        /// Share of devices (decimals allowed: 0.5 = 50 basis points).
        #[arg(long)]
        percent: String,
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
        percent: String,
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
pub(crate) fn print_plan(p: &serde_json::Value) {
    println!(
        "{} rollout revision {}: {} {} -> staged {} at {}% (baseline {}), by {} at {}{}",
        p["model"].as_str().unwrap_or(""),
        p["revision"],
        p["action"].as_str().unwrap_or(""),
        p["state"].as_str().unwrap_or(""),
        p["staged"].as_str().unwrap_or("-"),
        ferry_shared::rollout::format_percent(p["basis_points"].as_u64().unwrap_or(0) as u32),
        p["baseline"].as_str().unwrap_or("-"),
        p["actor"].as_str().unwrap_or(""),
        p["at"].as_str().unwrap_or(""),
        p["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
}

pub(crate) fn rollout_cmd(cmd: RolloutCommand) -> anyhow::Result<ExitCode> {
    let (model, remote, body) = match cmd {
        RolloutCommand::Start {
            model,
            release,
            percent,
            max_failure_rate,
            max_fallback_rate,
            min_samples,
            reason,
            remote,
        } => {
            ferry_shared::rollout::parse_percent(&percent).map_err(|m| anyhow::anyhow!(m))?;
            let body = serde_json::json!({
                "action": "start", "release": release, "percent": percent,
                "max_failure_rate": max_failure_rate, "max_fallback_rate": max_fallback_rate,
                "min_samples": min_samples, "reason": reason,
            });
            (model, remote, body)
        }
        RolloutCommand::Set {
            model,
            percent,
            reason,
            remote,
        } => {
            ferry_shared::rollout::parse_percent(&percent).map_err(|m| anyhow::anyhow!(m))?;
            (
                model,
                remote,
                serde_json::json!({"action": "set", "percent": percent, "reason": reason}),
            )
        }
        RolloutCommand::Pause(a) => (
            a.model,
            a.remote,
            serde_json::json!({"action": "pause", "reason": a.reason}),
        ),
        RolloutCommand::Resume(a) => (
            a.model,
            a.remote,
            serde_json::json!({"action": "resume", "reason": a.reason}),
        ),
        RolloutCommand::Rollback(a) => (
            a.model,
            a.remote,
            serde_json::json!({"action": "rollback", "reason": a.reason}),
        ),
        RolloutCommand::Complete(a) => (
            a.model,
            a.remote,
            serde_json::json!({"action": "complete", "reason": a.reason}),
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
            } else if v["current"].is_null() {
                println!("{model} has no rollout");
            } else {
                for p in v["history"].as_array().into_iter().flatten() {
                    print_plan(p);
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    let v = admin_call(
        &remote,
        "POST",
        &format!("/v1/admin/models/{model}/rollout"),
        Some(body),
    )?;
    print_plan(&v);
    Ok(ExitCode::SUCCESS)
}
