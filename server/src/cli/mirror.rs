//! `ferry mirror sync`: fills a site mirror ahead of a rollout (docs/operations.md, "A site
//! mirror").

use std::process::ExitCode;

use clap::Subcommand;

use super::remote::{Remote, admin_call};

/// `ferry mirror ...`.
#[derive(Debug, Subcommand)]
pub enum MirrorCommand {
    /// Fetch a release's files into a site mirror now, so that its devices get them from the
    /// site even if the uplink is down when they ask. Without --release: the releases devices
    /// may get from the origin now (the live one and the staged one). An admin call on the
    /// mirror (--server is the mirror, --token one of its tokens with the publish scope).
    Sync {
        /// Model name.
        model: String,
        /// The release to fetch.
        #[arg(long)]
        release: Option<String>,
        /// Where and who (the mirror).
        #[command(flatten)]
        remote: Remote,
    },
}

pub(crate) fn mirror_cmd(cmd: MirrorCommand, json: bool) -> anyhow::Result<ExitCode> {
    let MirrorCommand::Sync {
        model,
        release,
        remote,
    } = cmd;
    let body = serde_json::json!({"model": model, "release": release});
    let done = admin_call(&remote, "POST", "/v1/admin/mirror/sync", Some(body))?;
    if json {
        println!("{done}");
        return Ok(ExitCode::SUCCESS);
    }
    let releases: Vec<&str> = done["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str())
        .collect();
    println!(
        "{} {}: the mirror holds {} files ({} bytes); {} bytes fetched from the origin now",
        done["model"].as_str().unwrap_or_default(),
        releases.join(", "),
        done["files"],
        done["bytes"],
        done["fetched_bytes"]
    );
    Ok(ExitCode::SUCCESS)
}
