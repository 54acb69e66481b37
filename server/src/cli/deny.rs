//! `ferry deny ...`: the deny list of a model (learned from telemetry, or set by hand).

use std::process::ExitCode;

use clap::Subcommand;
use comfy_table::Table;
use ferry_shared::select::deny::{DenyAction, DenyChange, DenyKind, DeviceClass};

use super::remote::{Remote, admin_call};

/// `ferry deny ...`.
#[derive(Debug, Subcommand)]
pub enum DenyCommand {
    /// The entries in force: which variant is denied (or allowed by override) to which SoC or
    /// device model, and why.
    List {
        /// Model name.
        model: String,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Deny a variant to a SoC or device model by hand (with `--kind slow_in_field` or
    /// `--kind crashed_in_field`: rank it after the next candidate there instead).
    Add(Target),
    /// Allow a denied or demoted variant again (the entry must exist; telemetry will not
    /// re-add it).
    Override(Target),
    /// Remove an entry (it must exist; telemetry may add it again if the class keeps failing
    /// or stays slow).
    Clear(Target),
}

/// The entry a change names.
#[derive(Debug, Clone, clap::Args)]
#[group(id = "class", required = true, multiple = false, args = ["soc", "device_model"])]
pub struct Target {
    /// Model name.
    pub model: String,
    /// Release of the variant.
    #[arg(long)]
    pub release: String,
    /// Variant id.
    #[arg(long)]
    pub variant: String,
    /// The SoC (matched case-insensitively).
    #[arg(long)]
    pub soc: Option<String>,
    /// The device model (matched exactly).
    #[arg(long)]
    pub device_model: Option<String>,
    /// Which entry: `fallback` (not offered), `slow_in_field` or `crashed_in_field` (ranked
    /// after the next candidate). Without it, override and clear act on every entry of the target, and add
    /// denies.
    #[arg(long, value_parser = parse_kind)]
    pub kind: Option<DenyKind>,
    /// Where and who.
    #[command(flatten)]
    pub remote: Remote,
}

pub(crate) fn deny_cmd(cmd: DenyCommand, json: bool) -> anyhow::Result<ExitCode> {
    let (action, t) = match cmd {
        DenyCommand::List { model, remote } => return list(&model, json, &remote),
        DenyCommand::Add(t) => (DenyAction::Deny, t),
        DenyCommand::Override(t) => (DenyAction::Override, t),
        DenyCommand::Clear(t) => (DenyAction::Clear, t),
    };
    let (class, value) = match (t.soc, t.device_model) {
        (Some(s), _) => (DeviceClass::Soc, s),
        (None, Some(m)) => (DeviceClass::DeviceModel, m),
        (None, None) => anyhow::bail!("give --soc or --device-model"),
    };
    let change = DenyChange {
        action,
        release: t.release,
        variant: t.variant,
        class,
        value,
        kind: t.kind,
    };
    let v = admin_call(
        &t.remote,
        "POST",
        &format!("/v1/admin/models/{}/deny", t.model),
        Some(serde_json::to_value(&change)?),
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    // What a deny entry of a demoting kind does is rank the variant later, not deny it.
    let what = match (action.as_str(), change.kind) {
        ("deny", Some(DenyKind::SlowInField | DenyKind::CrashedInField)) => "demote",
        (a, _) => a,
    };
    println!(
        "{what} {} {} for {} {}: done",
        change.release,
        change.variant,
        class.as_str(),
        change.value
    );
    if v["entries"].as_array().is_none_or(Vec::is_empty) {
        println!("{}: the deny list is empty", t.model);
    } else {
        print_entries(&v["entries"]);
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_kind(s: &str) -> Result<DenyKind, String> {
    match s {
        "fallback" => Ok(DenyKind::Fallback),
        "slow_in_field" => Ok(DenyKind::SlowInField),
        "crashed_in_field" => Ok(DenyKind::CrashedInField),
        _ => Err(format!(
            "{s:?} is not a kind: fallback, slow_in_field or crashed_in_field"
        )),
    }
}

fn list(model: &str, json: bool, remote: &Remote) -> anyhow::Result<ExitCode> {
    let v = admin_call(
        remote,
        "GET",
        &format!("/v1/admin/models/{model}/deny"),
        None,
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    if v["entries"].as_array().is_none_or(Vec::is_empty) {
        println!("{model}: the deny list is empty");
        return Ok(ExitCode::SUCCESS);
    }
    print_entries(&v["entries"]);
    Ok(ExitCode::SUCCESS)
}

fn print_entries(entries: &serde_json::Value) {
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header([
        "RELEASE", "VARIANT", "CLASS", "VALUE", "STATE", "SOURCE", "KIND", "WHY",
    ]);
    for e in entries.as_array().into_iter().flatten() {
        let s = |k: &str| super::remote::sanitize(e[k].as_str().unwrap_or(""));
        let kind = e["kind"].as_str().unwrap_or("fallback");
        let l = &e["latency"];
        let why = match (kind, e["samples"].as_u64()) {
            ("slow_in_field", _) if l.is_object() => {
                let mut w = format!(
                    "p95 {:.1} ms on {} devices",
                    l["p95_ms"].as_f64().unwrap_or(0.0),
                    l["devices"].as_u64().unwrap_or(0)
                );
                if let Some(b) = l["budget_ms"].as_f64() {
                    w.push_str(&format!(", budget {b} ms"));
                }
                if let (Some(n), Some(ms)) = (l["next_variant"].as_str(), l["next_p95_ms"].as_f64())
                {
                    w.push_str(&format!(", {n} {ms:.1} ms"));
                }
                w
            }
            ("crashed_in_field", _) if e["crash"].is_object() => format!(
                "crashed on {} of {} devices",
                e["crash"]["devices"].as_u64().unwrap_or(0),
                e["crash"]["class_devices"].as_u64().unwrap_or(0)
            ),
            ("fallback", Some(n)) if n > 0 => format!(
                "{:.0}% fallback of {n}",
                e["fallback_rate"].as_f64().unwrap_or(0.0) * 100.0
            ),
            _ => "-".into(),
        };
        table.add_row([
            s("release"),
            s("variant"),
            s("class"),
            s("value"),
            // A deny entry of a demoting kind ranks the variant later: it does not deny it.
            match (e["state"].as_str(), kind) {
                (Some("deny"), "slow_in_field" | "crashed_in_field") => "demote".to_string(),
                _ => s("state"),
            },
            s("source"),
            kind.to_string(),
            why,
        ]);
    }
    println!("{table}");
}
