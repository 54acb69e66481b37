//! `ferry ops MODEL`: the operators an app's runtime needs for a model's releases, for
//! ExecuTorch's selective build (`EXECUTORCH_SELECT_OPS_LIST`, or a YAML of `- op:` entries
//! for `EXECUTORCH_SELECT_OPS_YAML`).

use std::collections::BTreeSet;
use std::process::ExitCode;

use anyhow::{Context, bail};

use super::remote::{Remote, admin_call};

/// How `ferry ops` prints the operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OpsFormat {
    /// One comma-separated line (`EXECUTORCH_SELECT_OPS_LIST`).
    List,
    /// A YAML list of `- op: NAME` entries (`EXECUTORCH_SELECT_OPS_YAML`).
    Yaml,
}

/// What to list the operators of.
pub(crate) struct OpsQuery<'a> {
    pub model: &'a str,
    pub release: Option<&'a str>,
    pub app_version: Option<&'a str>,
    pub variant: Option<&'a str>,
    pub skip_unknown: bool,
}

/// Prints the union of the operators of the chosen variants.
pub(crate) fn ops_cmd(
    q: &OpsQuery<'_>,
    format: OpsFormat,
    json: bool,
    remote: &Remote,
) -> anyhow::Result<ExitCode> {
    let versions: Vec<String> = match (q.release, q.app_version) {
        (Some(r), None) => vec![r.to_string()],
        (None, Some(_)) => {
            let v = admin_call(
                remote,
                "GET",
                &format!("/v1/admin/models/{}", q.model),
                None,
            )?;
            v["releases"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| !r["state"].as_str().unwrap_or("").starts_with("revoked"))
                .filter_map(|r| r["version"].as_str().map(str::to_string))
                .collect()
        }
        _ => bail!("give one of --release VERSION or --app-version VERSION"),
    };
    let app = q
        .app_version
        .map(semver::Version::parse)
        .transpose()
        .context("--app-version")?;
    let mut ops = BTreeSet::new();
    let mut used = Vec::new();
    let mut seen = Vec::new();
    for version in &versions {
        let r = admin_call(
            remote,
            "GET",
            &format!("/v1/admin/models/{}/releases/{version}", q.model),
            None,
        )?;
        for v in r["variants"].as_array().into_iter().flatten() {
            let id = v["id"].as_str().unwrap_or("");
            seen.push(format!("{version}/{id}"));
            if q.variant.is_some_and(|want| want != id) {
                continue;
            }
            if let Some(app) = &app {
                let range: semver::VersionReq = v["app"].as_str().unwrap_or("*").parse()?;
                if !range.matches(app) {
                    continue;
                }
            }
            let Some(names) = v["operators"].as_array() else {
                // Signed before ferry recorded operators: a selective build from what is
                // known would miss this variant's kernels.
                let what = format!(
                    "{} {version} variant {id} names no operators (signed before ferry recorded \
                     them; `ferry inspect` its program to see its kernel calls)",
                    q.model
                );
                if q.skip_unknown {
                    eprintln!("warning: {what}: left out");
                    continue;
                }
                bail!("{what}; pass --skip-unknown to leave such variants out");
            };
            ops.extend(names.iter().filter_map(|o| o.as_str()).map(str::to_string));
            used.push(format!("{version}/{id}"));
        }
    }
    if used.is_empty() {
        bail!(
            "no variant of {} matches{}{} (variants: {})",
            q.model,
            q.variant
                .map(|v| format!(" --variant {v}"))
                .unwrap_or_default(),
            q.app_version
                .map(|a| format!(" with an app range including {a}"))
                .unwrap_or_default(),
            seen.join(", ")
        );
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "model": q.model, "variants": used, "operators": ops,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    match format {
        OpsFormat::List => {
            println!("{}", ops.into_iter().collect::<Vec<_>>().join(","));
        }
        OpsFormat::Yaml => {
            println!("# The operators {} needs: {}", q.model, used.join(", "));
            println!("# (ferry ops; for ExecuTorch's selective build, EXECUTORCH_SELECT_OPS_YAML)");
            for op in ops {
                println!("- op: {op}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
