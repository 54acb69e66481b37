//! `ferry resolve MODEL`: which variant a device would get, and why (the server's explain).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use base64::Engine as _;
use comfy_table::Table;

use super::remote::{Remote, http_agent, http_error};

/// A device profile: a resolve request as JSON (`--profile`), flags on top.
#[derive(Debug, Clone, clap::Args)]
pub struct DeviceArgs {
    /// A JSON file with the device's resolve request (the fields below); flags override it.
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub profile: Option<PathBuf>,
    /// Platform: android, ios, macos, linux, windows.
    #[arg(long)]
    pub platform: Option<String>,
    /// Backends the app's runtime registers, comma-separated (XnnpackBackend,VulkanBackend).
    #[arg(long, value_delimiter = ',')]
    pub backends: Option<Vec<String>>,
    /// The ExecuTorch runtime version bundled in the app.
    #[arg(long)]
    pub runtime: Option<String>,
    /// The app version.
    #[arg(long)]
    pub app: Option<String>,
    /// The SoC.
    #[arg(long)]
    pub soc: Option<String>,
    /// The device model.
    #[arg(long)]
    pub device_model: Option<String>,
    /// The OS version.
    #[arg(long)]
    pub os_version: Option<String>,
    /// RAM in MiB.
    #[arg(long)]
    pub ram_mb: Option<u64>,
    /// The install id (decides the rollout cohort; default a fixed one).
    #[arg(long)]
    pub install_id: Option<String>,
}

/// The resolve request for `model` from `args`.
fn request(model: &str, args: &DeviceArgs) -> anyhow::Result<serde_json::Value> {
    let mut v = match &args.profile {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            serde_json::from_str::<serde_json::Value>(&text)
                .with_context(|| format!("{} is not a JSON device profile", p.display()))?
        }
        None => serde_json::json!({}),
    };
    if !v.is_object() {
        anyhow::bail!("a device profile is a JSON object of resolve request fields");
    }
    let mut set = |k: &str, x: Option<serde_json::Value>| {
        if let Some(x) = x {
            v[k] = x;
        }
    };
    set("model", Some(model.into()));
    set("platform", args.platform.clone().map(Into::into));
    set("backends", args.backends.clone().map(Into::into));
    set("runtime_version", args.runtime.clone().map(Into::into));
    set("app_version", args.app.clone().map(Into::into));
    set("soc", args.soc.clone().map(Into::into));
    set("device_model", args.device_model.clone().map(Into::into));
    set("os_version", args.os_version.clone().map(Into::into));
    set("ram_mb", args.ram_mb.map(Into::into));
    set("install_id", args.install_id.clone().map(Into::into));
    for (k, default) in [
        ("install_id", serde_json::json!("ferry-cli")),
        ("os_version", serde_json::json!("")),
        ("device_model", serde_json::json!("")),
        ("soc", serde_json::json!("")),
        ("ram_mb", serde_json::json!(0)),
        ("backends", serde_json::json!([])),
    ] {
        if v.get(k).is_none() {
            v[k] = default;
        }
    }
    for k in ["platform", "runtime_version", "app_version"] {
        if v.get(k).is_none() {
            return Err(anyhow::Error::new(super::exit::Usage(format!(
                "the device needs --{} (or \"{k}\" in --profile)",
                match k {
                    "runtime_version" => "runtime",
                    "app_version" => "app",
                    other => other,
                }
            ))));
        }
    }
    Ok(v)
}

/// Asks the server which variant the device would get, with the reasons for every variant.
pub(crate) fn resolve_cmd(
    model: &str,
    device: &DeviceArgs,
    json: bool,
    remote: &Remote,
) -> anyhow::Result<ExitCode> {
    let body = request(model, device)?;
    let (server, ca) = remote.server_and_ca()?;
    let agent = http_agent(ca.as_deref())?;
    let url = format!("{}/v1/resolve?explain=true", server.trim_end_matches('/'));
    let mut resp = agent
        .post(&url)
        .header("content-type", "application/json")
        .send(serde_json::to_vec(&body)?.as_slice())
        .with_context(|| format!("cannot reach {server}"))?;
    let status = resp.status().as_u16();
    if status != 200 && status != 404 {
        return Err(http_error("resolve", resp));
    }
    let answer: serde_json::Value =
        serde_json::from_reader(resp.body_mut().with_config().limit(16 << 20).reader())
            .context("the server's answer is not JSON")?;
    // A 404 other than "no variant fits" (an unknown model) is an error like any other.
    let code = answer["code"]
        .as_str()
        .and_then(ferry_shared::errors::ErrorCode::parse);
    if status == 404 && code != Some(ferry_shared::errors::ErrorCode::NoCompatibleVariant) {
        return Err(anyhow::Error::new(super::remote::Refusal {
            what: "resolve".into(),
            status,
            code,
            message: answer["message"].as_str().unwrap_or("").to_string(),
            request_id: answer["request_id"].as_str().unwrap_or("").to_string(),
        }));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(if status == 200 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(super::exit::NOT_FOUND)
        });
    }
    // A 404 with details is "no variant fits": its explain says why for each.
    let explain = if status == 200 {
        answer["explain"].clone()
    } else {
        answer["details"]["explain"].clone()
    };
    if status == 404 {
        println!(
            "no variant of {model} fits this device (no_compatible_variant); each variant and why:"
        );
    } else {
        let decision = answer["decision"]["payload"]
            .as_str()
            .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .unwrap_or_default();
        let order: Vec<&str> = decision["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["variant"].as_str())
            .collect();
        println!(
            "{model} {} ({} cohort): tries {}",
            decision["release"].as_str().unwrap_or("?"),
            decision["cohort"].as_str().unwrap_or("?"),
            order.join(", then ")
        );
        if let Some(s) = answer["rollout"]["summary"].as_str() {
            println!("rollout: {}", super::remote::sanitize(s));
        }
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(["RELEASE", "VARIANT", "DELEGATE", "RANK", "WHY"]);
    for e in explain.as_array().into_iter().flatten() {
        let reasons: Vec<&str> = e["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str())
            .collect();
        table.add_row([
            e["release"].as_str().unwrap_or("").to_string(),
            e["variant"].as_str().unwrap_or("").to_string(),
            e["delegate"].as_str().unwrap_or("").to_string(),
            e["rank"]
                .as_u64()
                .map_or("-".to_string(), |r| r.to_string()),
            if reasons.is_empty() {
                "offered".to_string()
            } else {
                reasons.join("; ")
            },
        ]);
    }
    println!("{table}");
    Ok(if status == 200 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::exit::NOT_FOUND)
    })
}
