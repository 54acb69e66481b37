//! `ferry release revoke MODEL VERSION`: signs the next revocation list with a release key and
//! sends it to the server; `ferry release seal-stop` and `key-releases` for sealed releases.

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use ferry_shared::trust::dsse::KeyRole;
use ferry_shared::trust::revocation::{REVOCATIONS_PAYLOAD_TYPE, RevocationList, Revoked};
use semver::Version;

use super::exit::Usage;
use super::remote::{Remote, admin_call};
use crate::keys;

/// `ferry release ...`.
#[derive(Debug, Subcommand)]
pub enum ReleaseCommand {
    /// Revoke a release for good: servers stop offering it and devices refuse to load it, also
    /// from their cache. Signs the model's next revocation list with the release key.
    Revoke {
        /// Model name.
        model: String,
        /// Release version to revoke (leave out with `--resign`).
        version: Option<String>,
        /// Sign the list in force again as its next version with this key, adding nothing
        /// (after the release key that signed it was rotated out).
        #[arg(long)]
        resign: bool,
        /// The release key (the one `ferry sign` uses): a key file, pkcs11:… or exec:…
        /// (docs/keys.md).
        #[arg(long, value_name = "KEY")]
        key: String,
        /// Why (shown to operators and in the device's error).
        #[arg(long, default_value = "")]
        reason: String,
        /// Where and who (a token with the `read` and `publish` scopes).
        #[command(flatten)]
        remote: Remote,
    },
    /// Stop releasing the keys of a sealed release (devices without its key can no longer load
    /// it; devices with one forget it at their next online load), or resume with --resume.
    SealStop {
        /// Model name.
        model: String,
        /// The sealed release.
        version: String,
        /// Resume key releases instead.
        #[arg(long, conflicts_with = "reason")]
        resume: bool,
        /// Why (kept with the stop).
        #[arg(long, default_value = "")]
        reason: String,
        /// Where and who (a token with the `rollout` scope).
        #[command(flatten)]
        remote: Remote,
    },
    /// Who got the keys of a sealed release: the newest audit records, and whether key releases
    /// are stopped.
    KeyReleases {
        /// Model name.
        model: String,
        /// The sealed release.
        version: String,
        /// Where and who (a token with the `read` scope).
        #[command(flatten)]
        remote: Remote,
    },
}

pub(crate) fn release_cmd(command: ReleaseCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        ReleaseCommand::Revoke {
            model,
            version,
            resign,
            key,
            reason,
            remote,
        } => match (version, resign) {
            (Some(v), false) => revoke(&model, Some(&v), &key, &reason, &remote, json),
            (None, true) => revoke(&model, None, &key, &reason, &remote, json),
            _ => Err(Usage("give either a VERSION to revoke or --resign, not both".into()).into()),
        },
        ReleaseCommand::SealStop {
            model,
            version,
            resume,
            reason,
            remote,
        } => seal_stop(&model, &version, resume, &reason, &remote, json),
        ReleaseCommand::KeyReleases {
            model,
            version,
            remote,
        } => key_releases(&model, &version, &remote, json),
    }
}

fn seal_stop(
    model: &str,
    version: &str,
    resume: bool,
    reason: &str,
    remote: &Remote,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let path = format!("/v1/admin/models/{model}/releases/{version}/seal-stop");
    let answer = if resume {
        admin_call(remote, "DELETE", &path, None)?
    } else {
        admin_call(
            remote,
            "PUT",
            &path,
            Some(serde_json::json!({ "reason": reason })),
        )?
    };
    if json {
        println!("{answer}");
    } else if resume {
        println!("key releases of {model} {version} resumed");
    } else {
        println!(
            "key releases of {model} {version} stopped: devices without its key cannot load \
             it, and devices holding one forget it when a resolve answer names the stop (each \
             replica reads stops every 30 s); a device that stays offline keeps loading until \
             it resolves again. Undo with --resume"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn key_releases(
    model: &str,
    version: &str,
    remote: &Remote,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let answer = admin_call(
        remote,
        "GET",
        &format!("/v1/admin/models/{model}/releases/{version}/key-releases"),
        None,
    )?;
    if json {
        println!("{answer}");
        return Ok(ExitCode::SUCCESS);
    }
    match answer.get("stopped").filter(|s| !s.is_null()) {
        Some(s) => println!(
            "{model} {version}: key releases STOPPED by {} at {} {}",
            s["by"].as_str().unwrap_or("?"),
            s["at"].as_str().unwrap_or("?"),
            s["reason"].as_str().unwrap_or_default()
        ),
        None => println!("{model} {version}: key releases open"),
    }
    println!(
        "{} key release(s) in all; newest first:",
        answer["total"].as_u64().unwrap_or(0)
    );
    for r in answer["records"].as_array().into_iter().flatten() {
        println!(
            "  {}  {:<12} install {}  {} {}  from {}",
            r["at"].as_str().unwrap_or("?"),
            r["variant"].as_str().unwrap_or("?"),
            r["install_id"].as_str().unwrap_or("?"),
            r["platform"].as_str().unwrap_or(""),
            r["device_model"].as_str().unwrap_or(""),
            r["address"].as_str().unwrap_or("?")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn revoke(
    model: &str,
    version: Option<&str>,
    key: &str,
    reason: &str,
    remote: &Remote,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let release: Option<Version> = version
        .map(|v| {
            v.parse().map_err(|e| {
                Usage(format!(
                    "version {v:?} is not a semantic version like 1.2.0: {e}"
                ))
            })
        })
        .transpose()?;
    let model_name: ferry_shared::ModelName = model
        .parse()
        .map_err(|e| Usage(format!("model {model:?}: {e}")))?;
    let key = keys::signer::open(key)?;
    if let Some(role) = key.role()
        && role != KeyRole::Release
    {
        return Err(Usage(format!(
            "key {} has the {role} role; revocations are signed with the release key",
            key.id(),
        ))
        .into());
    }
    let current = admin_call(
        remote,
        "GET",
        &format!("/v1/admin/models/{model}/revocations"),
        None,
    )?;
    // Build on the signed list itself (its payload), not on the server's summary of it.
    let held: Option<RevocationList> = match current.get("envelope") {
        Some(env) if !env.is_null() => {
            let env: ferry_shared::trust::dsse::Envelope = serde_json::from_value(env.clone())
                .context("the server's revocation envelope is not readable")?;
            let list = RevocationList::from_accepted_envelope(&env)?;
            if list.model != model_name {
                bail!(
                    "the server's revocation list is for {}, not {model}",
                    list.model
                );
            }
            Some(list)
        }
        _ => None,
    };
    let held_version = current["version"].as_u64().unwrap_or(0);
    let mut revoked: Vec<Revoked> = match &held {
        Some(l) => l.revoked.clone(),
        // A list signed by a rotated-out key is not sent as an envelope; its entries are.
        None => serde_json::from_value(current["revoked"].clone())
            .context("the server's revocation list is not readable")?,
    };
    if held.as_ref().is_some_and(|l| l.version != held_version) {
        bail!("the server's revocation list and its envelope disagree on the version");
    }
    match &release {
        Some(r) if revoked.iter().any(|x| x.release == *r) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"model": model, "release": r.to_string(),
                        "already_revoked": true, "version": held_version})
                );
                return Ok(ExitCode::SUCCESS);
            }
            println!("{model} {r} is already revoked (list version {held_version})");
            return Ok(ExitCode::SUCCESS);
        }
        Some(r) => revoked.push(Revoked {
            release: r.clone(),
            reason: reason.to_string(),
            at: time::OffsetDateTime::now_utc(),
        }),
        None if revoked.is_empty() => bail!("{model} has no revocation list to sign again"),
        None => {}
    }
    let next = RevocationList {
        format: 1,
        model: model_name,
        version: held_version + 1,
        revoked,
    };
    // The same checks the server and devices make, before anything is signed.
    RevocationList::from_json(&serde_json::to_vec(&next)?)?;
    let env = keys::signer::sign_envelope(
        key.as_ref(),
        REVOCATIONS_PAYLOAD_TYPE,
        &serde_json::to_vec(&next)?,
    )?;
    let answer = admin_call(
        remote,
        "POST",
        &format!("/v1/admin/models/{model}/revocations"),
        Some(serde_json::to_value(&env)?),
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(ExitCode::SUCCESS);
    }
    match release {
        Some(r) => println!(
            "revoked {model} {r} (revocation list version {}); devices refuse it from their next resolve",
            answer["version"]
        ),
        None => println!(
            "signed {model}'s revocation list again as version {} with key {}",
            answer["version"],
            key.id()
        ),
    }
    if let Some(x) = answer.get("experiment").filter(|x| !x.is_null()) {
        println!(
            "experiment {} stopped: {}",
            x["id"].as_str().unwrap_or("?"),
            x["reason"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}
