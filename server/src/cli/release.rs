//! `ferry release revoke MODEL VERSION`: signs the next revocation list with a release key and
//! sends it to the server.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use ferry_shared::dsse::KeyRole;
use ferry_shared::revocation::{REVOCATIONS_PAYLOAD_TYPE, RevocationList, Revoked};
use semver::Version;

use super::remote::{Remote, admin_call};
use crate::app::keys;

/// `ferry release ...`.
#[derive(Debug, Subcommand)]
pub enum ReleaseCommand {
    /// Revoke a release for good: servers stop offering it and devices refuse to load it, also
    /// from their cache. Signs the model's next revocation list with the release key.
    Revoke {
        /// Model name.
        model: String,
        /// Release version to revoke.
        version: String,
        /// The release key file (the one `ferry sign` uses).
        #[arg(long)]
        key: PathBuf,
        /// Why (shown to operators and in the device's error).
        #[arg(long, default_value = "")]
        reason: String,
        /// Where and who (a token with the `read` and `publish` scopes).
        #[command(flatten)]
        remote: Remote,
    },
}

pub(crate) fn release_cmd(command: ReleaseCommand) -> anyhow::Result<ExitCode> {
    match command {
        ReleaseCommand::Revoke {
            model,
            version,
            key,
            reason,
            remote,
        } => revoke(&model, &version, &key, &reason, &remote),
    }
}

fn revoke(
    model: &str,
    version: &str,
    key: &Path,
    reason: &str,
    remote: &Remote,
) -> anyhow::Result<ExitCode> {
    let release: Version = version
        .parse()
        .map_err(|e| anyhow::anyhow!("version {version:?}: {e}"))?;
    let model_name: ferry_shared::ModelName = model
        .parse()
        .map_err(|e| anyhow::anyhow!("model {model:?}: {e}"))?;
    let key = keys::load(key)?;
    if key.role != KeyRole::Release {
        bail!(
            "{} is a {} key; revocations are signed with a release key",
            key.pair.id(),
            key.role
        );
    }
    let current = admin_call(
        remote,
        "GET",
        &format!("/v1/admin/models/{model}/revocations"),
        None,
    )?;
    let held_version = current["version"].as_u64().unwrap_or(0);
    let mut revoked: Vec<Revoked> = serde_json::from_value(current["revoked"].clone())
        .context("the server's revocation list is not readable")?;
    if revoked.iter().any(|r| r.release == release) {
        println!("{model} {release} is already revoked (list version {held_version})");
        return Ok(ExitCode::SUCCESS);
    }
    revoked.push(Revoked {
        release: release.clone(),
        reason: reason.to_string(),
        at: time::OffsetDateTime::now_utc(),
    });
    let next = RevocationList {
        model: model_name,
        version: held_version + 1,
        revoked,
    };
    // The same checks the server and devices make, before anything is signed.
    RevocationList::from_json(&serde_json::to_vec(&next)?)?;
    let env = key
        .pair
        .sign(REVOCATIONS_PAYLOAD_TYPE, &serde_json::to_vec(&next)?);
    let answer = admin_call(
        remote,
        "POST",
        &format!("/v1/admin/models/{model}/revocations"),
        Some(serde_json::to_value(&env)?),
    )?;
    println!(
        "revoked {model} {release} (revocation list version {}); devices refuse it from their next resolve",
        answer["version"]
    );
    Ok(ExitCode::SUCCESS)
}
