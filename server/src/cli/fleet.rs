//! `ferry fleet clients MODEL`: who is in the field, by protocol version and SDK.

use std::process::ExitCode;

use clap::Subcommand;

use super::health::health_of;
use super::remote::Remote;

/// `ferry fleet ...`.
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// The devices that resolved a model, by device protocol version (`legacy`: clients from
    /// before protocol v1, which send no `Ferry-Protocol` header) and SDK name and version, with
    /// each one's share: who a protocol retirement or an SDK bug would reach.
    Clients {
        /// Model name.
        model: String,
        /// Only devices that resolved in a window: a duration back from now (`30m`, `1h`,
        /// `7d`), an RFC 3339 time, or `step` (since the current rollout step began).
        #[arg(long, value_hint = clap::ValueHint::Other)]
        since: Option<String>,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
}

/// Runs a `ferry fleet` command.
pub(crate) fn fleet_cmd(command: FleetCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        FleetCommand::Clients {
            model,
            since,
            remote,
        } => clients(&model, since.as_deref(), json, &remote),
    }
}

fn clients(
    model: &str,
    since: Option<&str>,
    json: bool,
    remote: &Remote,
) -> anyhow::Result<ExitCode> {
    if let Err(e) = model.parse::<ferry_shared::ModelName>() {
        eprintln!("ferry: {e}");
        return Ok(ExitCode::from(2));
    }
    let v = health_of(model, since, remote)?;
    let clients = &v["clients"];
    if json {
        let mut out = clients.clone();
        out["model"] = model.into();
        out["window"] = v["window"].clone();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let total = clients["devices"].as_u64().unwrap_or(0);
    let window = since.map_or_else(
        || "in the resolve counts kept (telemetry.retention_days)".to_string(),
        |s| format!("since {s}"),
    );
    if total == 0 {
        println!("no device resolved {model} {window}");
        return Ok(ExitCode::SUCCESS);
    }
    let devices = |n: u64| {
        if n == 1 {
            "1 device".to_string()
        } else {
            format!("{n} devices")
        }
    };
    println!(
        "{} resolved {model} {window}; estimated from distinct install ids",
        devices(total)
    );
    println!();
    println!("{:<10} {:>9} {:>7}", "protocol", "devices", "share");
    for r in clients["by_protocol"].as_array().into_iter().flatten() {
        println!(
            "{:<10} {:>9} {:>6.1}%",
            r["protocol"].as_str().unwrap_or(""),
            r["devices"].as_u64().unwrap_or(0),
            r["share"].as_f64().unwrap_or(0.0) * 100.0
        );
    }
    println!();
    println!(
        "{:<10} {:<28} {:<14} {:>9} {:>7}",
        "protocol", "sdk", "version", "devices", "share"
    );
    for r in clients["by_client"].as_array().into_iter().flatten() {
        println!(
            "{:<10} {:<28} {:<14} {:>9} {:>6.1}%",
            r["protocol"].as_str().unwrap_or(""),
            r["sdk"].as_str().unwrap_or(""),
            r["sdk_version"].as_str().unwrap_or(""),
            r["devices"].as_u64().unwrap_or(0),
            r["share"].as_f64().unwrap_or(0.0) * 100.0
        );
    }
    let other = clients["by_client"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["sdk"] == "other");
    if other {
        println!(
            "other: devices of SDKs that no receipted telemetry from enough client networks \
             named yet when they resolved (telemetry.census_min_networks), and, in the last \
             row, the rows past the first 20 (docs/protocol.md)"
        );
    }
    let legacy = clients["by_protocol"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["protocol"] == "legacy");
    if legacy {
        println!(
            "legacy: clients from before protocol v1 (no Ferry-Protocol header); they cannot \
             read delegates or platforms outside the original set (docs/protocol.md)"
        );
    }
    Ok(ExitCode::SUCCESS)
}
