//! `ferry models`: every published model with its live and staged release.

use std::process::ExitCode;

use comfy_table::Table;

use super::remote::{Remote, admin_call};

/// Lists the models the server publishes, as a table or (`json`) as the server's JSON.
pub(crate) fn models_cmd(json: bool, remote: &Remote) -> anyhow::Result<ExitCode> {
    let v = admin_call(remote, "GET", "/v1/admin/models", None)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let models = v["models"].as_array().cloned().unwrap_or_default();
    if models.is_empty() {
        println!("no model is published yet (ferry publish RELEASE.json --files DIR)");
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header([
        "MODEL", "LIVE", "STAGED", "SHARE", "ROLLOUT", "RELEASES", "DENIED",
    ]);
    let text = |x: &serde_json::Value| x.as_str().unwrap_or("-").to_string();
    for m in &models {
        let staged = !m["staged"].is_null();
        let state = match (staged, m["rollout_state"].as_str(), m["ramp_step"].as_u64()) {
            (false, _, _) => "-".to_string(),
            (true, Some(s), Some(step)) => format!("{s}, ramp step {}", step + 1),
            (true, Some(s), None) => s.to_string(),
            (true, None, _) => "-".to_string(),
        };
        // What the baseline cohort really gets (the baseline, or the release before a revoked
        // one).
        let live = match (m["live"].as_str(), m["baseline"].as_str()) {
            (Some(l), Some(b)) if l != b => format!("{l} ({b} revoked)"),
            (Some(l), _) => l.to_string(),
            (None, _) => text(&m["baseline"]),
        };
        table.add_row([
            text(&m["model"]),
            live,
            text(&m["staged"]),
            match (staged, m["rollout_state"].as_str()) {
                // A halted rollout serves its staged release to no device.
                (true, Some("halted")) => format!("0% (was {}%)", text(&m["percent"])),
                (true, _) => format!("{}%", text(&m["percent"])),
                _ => "-".to_string(),
            },
            state,
            m["releases"].as_array().map_or(0, Vec::len).to_string(),
            m["deny_entries"].as_u64().unwrap_or(0).to_string(),
        ]);
    }
    println!("{table}");
    Ok(ExitCode::SUCCESS)
}
