//! `ferry rollout ...`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use ferry_shared::select::rollout::{Percent, Preview, RolloutChange, RolloutPlan, format_percent};
use semver::Version;

use super::remote::{Remote, admin_call, sanitize};

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
        #[arg(long, required_unless_present = "steps", conflicts_with = "steps")]
        percent: Option<Percent>,
        /// A health-gated ramp instead of one share: percentages the rollout moves through by
        /// itself, for example 1,5,25,50,100 (needs --every).
        #[arg(long, value_delimiter = ',', requires = "every")]
        steps: Option<Vec<Percent>>,
        /// Least time each ramp step is in force before the next (30s, 15m, 6h, 2d).
        #[arg(long, value_parser = parse_duration, requires = "steps")]
        every: Option<u64>,
        /// Halt when the staged release's load-failure rate exceeds this (0–1, default 0.05).
        #[arg(long, value_parser = parse_rate)]
        max_failure_rate: Option<f64>,
        /// Halt when its fallback rate exceeds this (0–1, default 0.25).
        #[arg(long, value_parser = parse_rate)]
        max_fallback_rate: Option<f64>,
        /// Loads needed before the rates count (in a ramp: per step; default 100); they must
        /// come from at least an eighth as many devices.
        #[arg(long)]
        min_samples: Option<u64>,
        /// In a ramp, halt when a staged rate is over this multiple of the baseline's rate in
        /// the same window (1.5 = 50% worse; off unless given).
        #[arg(long, value_parser = parse_ratio)]
        max_regression: Option<f64>,
        /// In a ramp, halt when the staged release's field latency (the median of its devices'
        /// warm p95 run times on the SoCs both releases have data for) is over this multiple
        /// of the baseline's (1.3 = 30% slower; off unless given).
        #[arg(long, value_parser = parse_ratio)]
        max_latency_ratio: Option<f64>,
        /// Halt when more than this share of the staged release's devices crashed natively on
        /// it (0–1, default 0.01: 1%; counted once min-samples / 8 devices, at least 3,
        /// crashed).
        #[arg(long, value_parser = parse_rate)]
        max_crash_rate: Option<f64>,
        /// Gates decide with the always-valid test: a rate halts only once it is over its
        /// limit beyond chance, however often it is checked (docs/experiments.md); a rate over
        /// its limit but not yet beyond chance holds a ramp's step.
        #[arg(long)]
        sequential_gates: bool,
        /// Replace the rollout in progress with this newer release, keeping its cohorts.
        #[arg(long)]
        supersede: bool,
        /// Accept that device classes are left without a variant (needs --reason).
        #[arg(long, requires = "reason")]
        allow_strand: bool,
        /// Why (kept in the history).
        #[arg(long)]
        reason: Option<String>,
        /// Show what would change without changing anything.
        #[arg(long)]
        dry_run: bool,
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
        /// On a larger share: accept that device classes are left without a variant (needs
        /// --reason). A smaller share is always allowed.
        #[arg(long, requires = "reason")]
        allow_strand: bool,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// Show what would change without changing anything.
        #[arg(long)]
        dry_run: bool,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Freeze the rollout (staged devices keep the staged release).
    Pause(SimpleRollout),
    /// Continue a paused or halted rollout.
    Resume(ForwardRollout),
    /// Send every device back to the baseline.
    Rollback(SimpleRollout),
    /// Make the staged release the baseline for everyone.
    Complete(ForwardRollout),
    /// Pin a test device to a release: it gets that release first, whatever its cohort.
    Pin {
        /// Model name.
        model: String,
        /// The device's install id.
        #[arg(long)]
        install_id: String,
        /// The release.
        #[arg(long)]
        release: Version,
        /// How long the pin holds (30m, 7d; forever when absent, at most a year).
        #[arg(long, value_parser = parse_duration)]
        expires: Option<u64>,
        /// Why (kept in the history).
        #[arg(long)]
        reason: Option<String>,
        /// Show what would change without changing anything.
        #[arg(long)]
        dry_run: bool,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Remove a device's pin.
    Unpin {
        /// Model name.
        model: String,
        /// The device's install id.
        #[arg(long)]
        install_id: String,
        /// Why (kept in the history).
        #[arg(long)]
        reason: Option<String>,
        /// Show what would change without changing anything.
        #[arg(long)]
        dry_run: bool,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Move the baseline back to an older release (the only way to downgrade; recorded).
    Revert {
        /// Model name.
        model: String,
        /// The older published release that becomes the baseline.
        #[arg(long)]
        to: Version,
        /// Why (required: kept in the history).
        #[arg(long)]
        reason: String,
        /// Show what would change without changing anything.
        #[arg(long)]
        dry_run: bool,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// The plan in force and its history.
    Status {
        /// Model name.
        model: String,
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
    /// Show what would change without changing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Where and who.
    #[command(flatten)]
    pub remote: Remote,
}

/// `resume` and `complete`: moves forward, which may accept stranding device classes.
#[derive(Debug, clap::Args)]
pub struct ForwardRollout {
    /// The change.
    #[command(flatten)]
    pub change: SimpleRollout,
    /// Accept that device classes are left without a variant (needs --reason, kept in the
    /// history); without it such a move is refused, naming the class.
    #[arg(long, requires = "reason")]
    pub allow_strand: bool,
}

pub(crate) fn print_plan(p: &RolloutPlan) {
    let show = |v: &Option<Version>| v.as_ref().map_or("-".to_string(), Version::to_string);
    let what = match (&p.staged, p.state) {
        (Some(staged), state)
            if state != ferry_shared::select::rollout::RolloutState::Completed =>
        {
            format!(
                "{}, staged {staged} at {}% (baseline {})",
                state.as_str(),
                format_percent(p.basis_points),
                show(&p.baseline)
            )
        }
        _ => format!(
            "baseline {} for everyone, nothing staged",
            show(&p.baseline)
        ),
    };
    println!(
        "{} rollout revision {} ({} by {} at {}{}): {what}",
        p.model,
        p.revision,
        p.action,
        p.actor,
        p.at,
        if p.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", sanitize(&p.reason))
        }
    );
}

/// Prints the ramp part of `rollout status`: the step, what it waits for, the next step.
fn print_ramp(r: &serde_json::Value) {
    let steps: Vec<&str> = r["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str())
        .collect();
    println!(
        "ramp: step {} of {} ({}%), steps {}%, each at least {}s",
        r["step"],
        steps.len(),
        steps
            .get(r["step"].as_u64().unwrap_or(1).saturating_sub(1) as usize)
            .unwrap_or(&"?"),
        steps.join("%, "),
        r["every_secs"]
    );
    let h = &r["step_health"];
    println!(
        "  this step: {} staged loads, {} failures, {} fallbacks (baseline: {} loads, {} failures, {} fallbacks)",
        h["loads"],
        h["failures"],
        h["fallbacks"],
        h["baseline_loads"],
        h["baseline_failures"],
        h["baseline_fallbacks"]
    );
    if let (Some(s), Some(b)) = (
        h["latency"]["staged_ms"].as_f64(),
        h["latency"]["baseline_ms"].as_f64(),
    ) {
        println!(
            "  field latency: {:.2}x the baseline (median device warm p95 {s:.2} ms against {b:.2} ms) on {} common SoC(s), {} staged devices",
            h["latency"]["ratio"].as_f64().unwrap_or(0.0),
            h["latency"]["socs"],
            h["latency"]["devices"]
        );
    }
    if let Some(c) = h["crash"].as_object() {
        println!(
            "  crashes: {} of {} staged devices ({:.1}%), baseline {} of {} ({:.1}%)",
            c["staged_crashed"],
            c["staged_devices"],
            c["staged_rate"].as_f64().unwrap_or(0.0) * 100.0,
            c["baseline_crashed"],
            c["baseline_devices"],
            c["baseline_rate"].as_f64().unwrap_or(0.0) * 100.0
        );
    }
    match r["now"]["verdict"].as_str() {
        Some("wait") => {
            for w in r["now"]["waiting_for"].as_array().into_iter().flatten() {
                println!("  waiting for {}", w.as_str().unwrap_or(""));
            }
            if let Some(n) = r["next"].as_str() {
                println!("  next step: {n}%");
            }
        }
        Some("advance") => println!(
            "  advancing to {}% at the next check",
            r["next"].as_str().unwrap_or("?")
        ),
        Some("halt") => println!("  halting: {}", r["now"]["reason"].as_str().unwrap_or("")),
        Some("done") => {
            println!("  the last step is in force; `ferry rollout complete` makes it the baseline")
        }
        _ => println!("  not ramping (paused or halted)"),
    }
}

/// Parses a duration like `30s`, `15m`, `6h` or `2d` into seconds.
fn parse_duration(s: &str) -> Result<u64, String> {
    humantime::parse_duration(s)
        .map(|d| d.as_secs())
        .map_err(|e| format!("{s:?} is not a duration like 30s, 15m, 6h or 2d: {e}"))
}

pub(crate) fn print_preview(p: &Preview) {
    println!(
        "  install ids changing release: {:.2}%",
        p.share_changing * 100.0
    );
    for m in &p.moves {
        println!("  {m}");
    }
    for c in &p.stranded {
        println!("  stranded: {c}");
    }
}

pub(crate) fn rollout_cmd(cmd: RolloutCommand, json: bool) -> anyhow::Result<ExitCode> {
    let simple = |a: SimpleRollout, make: fn(Option<String>) -> RolloutChange| {
        (a.model, a.remote, a.dry_run, make(a.reason))
    };
    let (model, remote, dry_run, change) = match cmd {
        RolloutCommand::Start {
            model,
            release,
            percent,
            steps,
            every,
            max_failure_rate,
            max_fallback_rate,
            min_samples,
            max_regression,
            max_latency_ratio,
            max_crash_rate,
            sequential_gates,
            supersede,
            allow_strand,
            reason,
            dry_run,
            remote,
        } => (
            model,
            remote,
            dry_run,
            RolloutChange::Start {
                release,
                percent,
                steps,
                every_secs: every,
                max_failure_rate,
                max_fallback_rate,
                min_samples,
                max_regression,
                max_latency_ratio,
                max_crash_rate,
                sequential_gates,
                supersede,
                allow_strand,
                reason,
            },
        ),
        RolloutCommand::Set {
            model,
            percent,
            allow_strand,
            reason,
            dry_run,
            remote,
        } => (
            model,
            remote,
            dry_run,
            RolloutChange::Set {
                percent,
                allow_strand,
                reason,
            },
        ),
        RolloutCommand::Pause(a) => simple(a, |reason| RolloutChange::Pause { reason }),
        RolloutCommand::Resume(a) => (
            a.change.model,
            a.change.remote,
            a.change.dry_run,
            RolloutChange::Resume {
                allow_strand: a.allow_strand,
                reason: a.change.reason,
            },
        ),
        RolloutCommand::Rollback(a) => simple(a, |reason| RolloutChange::Rollback { reason }),
        RolloutCommand::Complete(a) => (
            a.change.model,
            a.change.remote,
            a.change.dry_run,
            RolloutChange::Complete {
                allow_strand: a.allow_strand,
                reason: a.change.reason,
            },
        ),
        RolloutCommand::Revert {
            model,
            to,
            reason,
            dry_run,
            remote,
        } => (model, remote, dry_run, RolloutChange::Revert { to, reason }),
        RolloutCommand::Pin {
            model,
            install_id,
            release,
            expires,
            reason,
            dry_run,
            remote,
        } => (
            model,
            remote,
            dry_run,
            RolloutChange::Pin {
                install_id,
                release,
                expires_secs: expires,
                reason,
            },
        ),
        RolloutCommand::Unpin {
            model,
            install_id,
            reason,
            dry_run,
            remote,
        } => (
            model,
            remote,
            dry_run,
            RolloutChange::Unpin { install_id, reason },
        ),
        RolloutCommand::Status { model, remote } => return rollout_status(&model, &remote, json),
    };
    let query = if dry_run { "?dry_run=true" } else { "" };
    let v = admin_call(
        &remote,
        "POST",
        &format!("/v1/admin/models/{model}/rollout{query}"),
        Some(serde_json::to_value(&change)?),
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let preview: Option<Preview> = serde_json::from_value(v["preview"].clone()).ok();
    for w in v["warnings"].as_array().into_iter().flatten() {
        eprintln!("warning: {}", w.as_str().unwrap_or_default());
    }
    let plan: RolloutPlan =
        serde_json::from_value(v).context("the server's answer is not a rollout plan")?;
    if dry_run {
        print!("dry run, nothing changed: ");
    }
    print_plan(&plan);
    if let Some(p) = preview {
        print_preview(&p);
    }
    Ok(ExitCode::SUCCESS)
}

/// `ferry rollout status MODEL`: the plan's history, the ramp and the pins.
fn rollout_status(model: &str, remote: &Remote, json: bool) -> anyhow::Result<ExitCode> {
    let v = admin_call(
        remote,
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
    let total = v["history_total"].as_u64().unwrap_or(0) as usize;
    if total > history.len() {
        println!("(the newest {} of {total} revisions)", history.len());
    }
    // What install ids get now, the gates of the plan in force, then its history (the newest
    // last).
    if let Some(p) = history.last() {
        println!("{}", now_line(p));
    }
    if let Some(p) = history.last().filter(|p| p.staged.is_some()) {
        println!("{}", gates_line(&p.thresholds));
    }
    for p in &history {
        print_plan(p);
    }
    if let Some(r) = v.get("ramp").filter(|r| !r.is_null()) {
        print_ramp(r);
    }
    for p in history
        .last()
        .map(|p| p.pins.as_slice())
        .unwrap_or_default()
    {
        println!(
            "pinned: {} -> {}{}",
            sanitize(&p.install_id),
            p.release,
            p.expires
                .as_ref()
                .map(|e| format!(" until {e}"))
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What install ids get under `p`, in words.
fn now_line(p: &RolloutPlan) -> String {
    let baseline = p
        .baseline
        .as_ref()
        .map_or("the newest release".to_string(), ToString::to_string);
    let pins = if p.pins.is_empty() {
        String::new()
    } else {
        format!("; {} pinned test device(s) get their pin", p.pins.len())
    };
    match (&p.staged, p.cohort_is_live()) {
        (Some(staged), true) => format!(
            "now: {staged} to {}% of install ids ({}), {baseline} to the rest{pins}",
            ferry_shared::select::rollout::format_percent(p.basis_points),
            p.state.as_str()
        ),
        _ => format!("now: every install id gets {baseline}{pins}"),
    }
}

/// The gates of a plan in words (what halts it).
fn gates_line(t: &ferry_shared::select::rollout::Thresholds) -> String {
    let pct = |r: Option<f64>| r.map_or("off".to_string(), |r| format!("{:.1}%", r * 100.0));
    let mut parts = vec![
        format!("load failures over {}", pct(t.max_failure_rate)),
        format!("fallbacks over {}", pct(t.max_fallback_rate)),
        format!("after {} loads", t.min_samples),
        format!(
            "devices crashed over {} (from {} crashed devices)",
            pct(t.max_crash_rate),
            ferry_shared::select::rollout::crash_devices_needed(t)
        ),
    ];
    if let Some(k) = t.max_regression {
        parts.push(format!("rates over {k}x the baseline's"));
    }
    if let Some(k) = t.max_latency_ratio {
        parts.push(format!("field latency over {k}x the baseline's"));
    }
    let how = if t.sequential {
        " (rates beyond chance: the always-valid test)"
    } else {
        ""
    };
    format!("gates: halts on {}{how}", parts.join(", "))
}

/// A rate flag: a finite number from 0 to 1 (`0.05` is 5%).
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a rate: a number from 0 to 1 (0.05 is 5%)"
        )),
    }
}

/// A ratio flag: a finite number from 1 to 1000 (`1.5` is 50% worse).
fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (1.0..=1000.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a ratio: a number from 1 to 1000 (1.5 is 50% worse)"
        )),
    }
}
