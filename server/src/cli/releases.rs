//! `ferry releases MODEL`: every release of a model with its place in the lifecycle.

use std::process::ExitCode;

use comfy_table::Table;

use super::remote::{Remote, admin_call};

/// Lists the releases of `model`, newest first, as a table or (`json`) as the server's JSON.
pub(crate) fn releases_cmd(model: &str, json: bool, remote: &Remote) -> anyhow::Result<ExitCode> {
    let v = admin_call(remote, "GET", &format!("/v1/admin/models/{model}"), None)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header([
        "RELEASE",
        "STATE",
        "VARIANTS",
        "RUNTIMES",
        "EVALUATION",
        "NOTES",
    ]);
    for r in v["releases"].as_array().into_iter().flatten() {
        let variants: Vec<String> = r["variants"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| {
                let id = x["id"].as_str().unwrap_or("");
                // The full download: program, data files and assets (older servers: program).
                // With delta updates, what a device on the previous release downloads.
                let update = match (x["update_bytes"].as_u64(), x["update_from"].as_str()) {
                    (Some(n), Some(from)) => format!(", update {} from {from}", human_bytes(n)),
                    (Some(n), None) => format!(", update {}", human_bytes(n)),
                    _ => String::new(),
                };
                match x["download_bytes"].as_u64().or(x["size"].as_u64()) {
                    Some(n) => format!("{id} ({}{update})", human_bytes(n)),
                    None => id.to_string(),
                }
            })
            .collect();
        let notes: String = r["notes"].as_str().unwrap_or("").chars().take(60).collect();
        // Per variant, the share of the devices' reported runtimes that can execute it.
        let runnable: Vec<String> = r["runtimes"]["variants"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(id, c)| format!("{id} {:.0}%", c["share"].as_f64().unwrap_or(0.0) * 100.0))
            .collect();
        table.add_row([
            r["version"].as_str().unwrap_or(""),
            r["state"].as_str().unwrap_or(""),
            &variants.join(", "),
            &runnable.join(", "),
            &evaluation(&r["evaluation"]),
            notes.lines().next().unwrap_or(""),
        ]);
    }
    println!("{table}");
    Ok(ExitCode::SUCCESS)
}

/// A release's signed evaluation in a few words: the metric and the verdict, the variants that
/// failed (and the override that signed them anyway), how many were not evaluated; `-` for a
/// release signed without one.
fn evaluation(e: &serde_json::Value) -> String {
    let Some(metric) = e["metric"].as_str() else {
        return "-".into();
    };
    let list = |k: &str| -> Vec<&str> {
        e[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str())
            .collect()
    };
    let (failed, skipped) = (list("failed"), list("not_evaluated"));
    let mut out = if failed.is_empty() {
        format!("{metric} passed")
    } else {
        format!("{metric} FAILED {}", failed.join(", "))
    };
    if let Some(reason) = e["override"].as_str() {
        let reason: String = reason.chars().take(40).collect();
        out.push_str(&format!(" (signed anyway: {reason})"));
    }
    if !skipped.is_empty() {
        out.push_str(&format!("; {} not evaluated", skipped.len()));
    }
    out
}

/// A byte count for people: B, KiB, MiB or GiB with one decimal.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}
