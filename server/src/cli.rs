//! The `ferry` command line: argument parsing and the subcommands.

use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use clap::{Parser, Subcommand};
use ferry_shared::dsse::{Envelope, KeyRole};
use ferry_shared::manifest::ReleaseManifest;
use ferry_shared::resolve::ErrorBody;
use ferry_shared::{Sha256Digest, pte};

use crate::config::{Config, Flags, process_env};
use crate::{keys, server, sign};

/// ferry: deliver signed ExecuTorch models to devices.
#[derive(Debug, Parser)]
#[command(name = "ferry", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (HTTP API for devices and ops).
    Serve {
        /// TOML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on (default 127.0.0.1:8080).
        #[arg(long)]
        listen: Option<String>,
        /// Data directory (default ./ferry-data).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Publish the built-in demo model `demo-mlp` on start.
        #[arg(long)]
        demo: bool,
    },
    /// Key management.
    Keys {
        /// What to do with keys.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Build a release manifest from local `.pte` files and sign it with an offline release key.
    Sign {
        /// The VARIANTS.toml describing the release.
        variants: PathBuf,
        /// The release key file.
        #[arg(long)]
        key: PathBuf,
        /// Where to write the signed release.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Upload a signed release's blobs, then the release, to a server (idempotent on retry).
    Publish {
        /// The signed release (from `ferry sign`).
        release: PathBuf,
        /// Folder holding the release's `.pte` files.
        #[arg(long)]
        files: PathBuf,
        /// Where and who (a token with the `publish` scope).
        #[command(flatten)]
        remote: Remote,
        /// Do not draw progress bars.
        #[arg(long)]
        quiet: bool,
    },
    /// Staged rollouts: start, set, pause, resume, rollback, complete, status.
    Rollout {
        /// What to do.
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// Fleet health of a model: loads, failures, fallbacks per release, variant and device class.
    Health {
        /// Model name.
        model: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Show what a `.pte` program really contains: methods, delegate calls per backend and
    /// the kernel calls left on portable kernels.
    Inspect {
        /// The `.pte` file.
        file: PathBuf,
        /// Print the report as JSON (for tools) instead of a table (for people).
        #[arg(long)]
        json: bool,
    },
}

/// Server and token for admin commands: flags, then `FERRY_SERVER` / `FERRY_TOKEN`, then
/// the profile file (`$FERRY_PROFILE`, or `~/.config/ferry/profile.toml` with `server`,
/// `token` and optionally `ca`).
#[derive(Debug, Clone, clap::Args)]
pub struct Remote {
    /// Server URL (default from the profile, else http://127.0.0.1:8080).
    #[arg(long, env = "FERRY_SERVER")]
    pub server: Option<String>,
    /// Admin token (default from the profile).
    #[arg(long, env = "FERRY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Extra CA certificate (PEM) to trust for HTTPS.
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

/// The profile file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    server: Option<String>,
    token: Option<String>,
    ca: Option<PathBuf>,
}

fn profile_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FERRY_PROFILE") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("ferry/profile.toml"))
}

impl Remote {
    /// Server URL, token and CA after applying the profile.
    pub fn resolve(&self) -> anyhow::Result<(String, String, Option<PathBuf>)> {
        let profile = match profile_path() {
            Some(p) if p.is_file() => {
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("cannot read profile {}", p.display()))?;
                toml::from_str::<Profile>(&text)
                    .with_context(|| format!("profile {} is invalid", p.display()))?
            }
            _ => Profile::default(),
        };
        let server = self
            .server
            .clone()
            .or(profile.server)
            .unwrap_or_else(|| "http://127.0.0.1:8080".to_string());
        let token = self.token.clone().or(profile.token).ok_or_else(|| {
            anyhow::anyhow!("no admin token: pass --token, set FERRY_TOKEN, or put token = \"...\" in ~/.config/ferry/profile.toml")
        })?;
        Ok((server, token, self.ca.clone().or(profile.ca)))
    }
}

/// `ferry rollout ...`.
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Start rolling a release out to a percentage of devices.
    Start {
        /// Model name.
        model: String,
        /// The release to roll out.
        #[arg(long)]
        release: String,
        /// Share of devices (decimals allowed: 0.5 = 50 basis points).
        #[arg(long)]
        percent: String,
        /// Halt when the staged release's load-failure rate exceeds this (0–1).
        #[arg(long)]
        max_failure_rate: Option<f64>,
        /// Halt when its fallback rate exceeds this (0–1).
        #[arg(long)]
        max_fallback_rate: Option<f64>,
        /// Loads needed before the rates count.
        #[arg(long)]
        min_samples: Option<u64>,
        /// Why (kept in the history).
        #[arg(long)]
        reason: Option<String>,
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
        percent: String,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Freeze the rollout (staged devices keep the staged release).
    Pause(SimpleRollout),
    /// Continue a paused or halted rollout.
    Resume(SimpleRollout),
    /// Send every device back to the baseline.
    Rollback(SimpleRollout),
    /// Make the staged release the baseline for everyone.
    Complete(SimpleRollout),
    /// The plan in force and its history.
    Status {
        /// Model name.
        model: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
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
    /// Where and who.
    #[command(flatten)]
    pub remote: Remote,
}

/// `ferry keys ...`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a release key, an online key and trust.json in a folder.
    Generate {
        /// Folder to write into (created; existing keys are never overwritten).
        #[arg(long)]
        out: PathBuf,
    },
    /// Create an admin token: prints the secret once and the hash for the config file.
    Token {
        /// A name for logs.
        #[arg(long)]
        name: String,
        /// Comma-separated scopes: publish, rollout, read.
        #[arg(long, default_value = "publish,rollout,read")]
        scopes: String,
    },
}

/// Largest file `ferry inspect` reads whole (the inspector itself only needs the program part).
const MAX_INSPECT_FILE: u64 = 8 << 30;

/// Parses the process arguments, runs the command and maps errors to a one-line message.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let mut msg = format!("ferry: {e}");
            for cause in e.chain().skip(1) {
                msg.push_str(&format!(": {cause}"));
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one parsed command.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve {
            config,
            listen,
            data,
            demo,
        } => serve(
            Flags {
                config,
                listen,
                data,
            },
            demo,
        ),
        Command::Keys { command } => match command {
            KeysCommand::Generate { out } => keys_generate(&out),
            KeysCommand::Token { name, scopes } => keys_token(&name, &scopes),
        },
        Command::Sign {
            variants,
            key,
            output,
        } => sign_cmd(&variants, &key, &output),
        Command::Publish {
            release,
            files,
            remote,
            quiet,
        } => {
            let (server, token, ca) = remote.resolve()?;
            publish_cmd(&release, &files, &server, &token, ca.as_deref(), quiet)
        }
        Command::Inspect { file, json } => inspect(&file, json),
        Command::Rollout { command } => rollout_cmd(command),
        Command::Health {
            model,
            json,
            remote,
        } => health_cmd(&model, json, &remote),
    }
}

fn admin_call(
    remote: &Remote,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<serde_json::Value> {
    let (server, token, ca) = remote.resolve()?;
    let agent = http_agent(ca.as_deref())?;
    let url = format!("{}{path}", server.trim_end_matches('/'));
    let auth = format!("Bearer {token}");
    let resp = match (method, body) {
        ("POST", Some(b)) => agent
            .post(&url)
            .header("authorization", &auth)
            .header("content-type", "application/json")
            .send(serde_json::to_vec(&b)?.as_slice()),
        _ => agent.get(&url).header("authorization", &auth).call(),
    }
    .with_context(|| format!("cannot reach {server}"))?;
    if !resp.status().is_success() {
        return Err(http_error(&format!("{method} {path}"), resp));
    }
    let mut resp = resp;
    let text = resp
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()?;
    Ok(serde_json::from_str(&text)?)
}

fn print_plan(p: &serde_json::Value) {
    println!(
        "{} rollout revision {}: {} {} -> staged {} at {}% (baseline {}), by {} at {}{}",
        p["model"].as_str().unwrap_or(""),
        p["revision"],
        p["action"].as_str().unwrap_or(""),
        p["state"].as_str().unwrap_or(""),
        p["staged"].as_str().unwrap_or("-"),
        ferry_shared::rollout::format_percent(p["basis_points"].as_u64().unwrap_or(0) as u32),
        p["baseline"].as_str().unwrap_or("-"),
        p["actor"].as_str().unwrap_or(""),
        p["at"].as_str().unwrap_or(""),
        p["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
}

fn rollout_cmd(cmd: RolloutCommand) -> anyhow::Result<ExitCode> {
    let (model, remote, body) = match cmd {
        RolloutCommand::Start {
            model,
            release,
            percent,
            max_failure_rate,
            max_fallback_rate,
            min_samples,
            reason,
            remote,
        } => {
            ferry_shared::rollout::parse_percent(&percent).map_err(|m| anyhow::anyhow!(m))?;
            let body = serde_json::json!({
                "action": "start", "release": release, "percent": percent,
                "max_failure_rate": max_failure_rate, "max_fallback_rate": max_fallback_rate,
                "min_samples": min_samples, "reason": reason,
            });
            (model, remote, body)
        }
        RolloutCommand::Set {
            model,
            percent,
            reason,
            remote,
        } => {
            ferry_shared::rollout::parse_percent(&percent).map_err(|m| anyhow::anyhow!(m))?;
            (
                model,
                remote,
                serde_json::json!({"action": "set", "percent": percent, "reason": reason}),
            )
        }
        RolloutCommand::Pause(a) => (
            a.model,
            a.remote,
            serde_json::json!({"action": "pause", "reason": a.reason}),
        ),
        RolloutCommand::Resume(a) => (
            a.model,
            a.remote,
            serde_json::json!({"action": "resume", "reason": a.reason}),
        ),
        RolloutCommand::Rollback(a) => (
            a.model,
            a.remote,
            serde_json::json!({"action": "rollback", "reason": a.reason}),
        ),
        RolloutCommand::Complete(a) => (
            a.model,
            a.remote,
            serde_json::json!({"action": "complete", "reason": a.reason}),
        ),
        RolloutCommand::Status {
            model,
            json,
            remote,
        } => {
            let v = admin_call(
                &remote,
                "GET",
                &format!("/v1/admin/models/{model}/rollout"),
                None,
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if v["current"].is_null() {
                println!("{model} has no rollout");
            } else {
                for p in v["history"].as_array().into_iter().flatten() {
                    print_plan(p);
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    let v = admin_call(
        &remote,
        "POST",
        &format!("/v1/admin/models/{model}/rollout"),
        Some(body),
    )?;
    print_plan(&v);
    Ok(ExitCode::SUCCESS)
}

fn health_cmd(model: &str, json: bool, remote: &Remote) -> anyhow::Result<ExitCode> {
    let v = admin_call(
        remote,
        "GET",
        &format!("/v1/admin/models/{model}/health"),
        None,
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(p) = v.get("rollout").filter(|p| !p.is_null()) {
        print_plan(p);
    }
    println!("cohorts: {}", v["cohort_sizes"]);
    for r in v["releases"].as_array().into_iter().flatten() {
        println!("release {}", r["release"].as_str().unwrap_or(""));
        for x in r["variants"].as_array().into_iter().flatten() {
            println!(
                "  {:<16} {:<9} devices {:>6}  loads {:>7}  failures {:>5.1}%  fallbacks {:>5.1}%  p50 {} ms  p95 {} ms",
                x["variant"].as_str().unwrap_or(""),
                x["delegate"].as_str().unwrap_or(""),
                x["devices"],
                x["loads"],
                x["failure_rate"].as_f64().unwrap_or(0.0) * 100.0,
                x["fallback_rate"].as_f64().unwrap_or(0.0) * 100.0,
                x["load_ms"]["p50"],
                x["load_ms"]["p95"]
            );
        }
    }
    for d in v["deny"].as_array().into_iter().flatten() {
        println!(
            "  {} {} {} on {} {} ({}): {:.0}% fallback, n={}",
            d["state"].as_str().unwrap_or(""),
            d["release"].as_str().unwrap_or(""),
            d["variant"].as_str().unwrap_or(""),
            d["class"].as_str().unwrap_or(""),
            d["value"].as_str().unwrap_or(""),
            d["source"].as_str().unwrap_or(""),
            d["fallback_rate"].as_f64().unwrap_or(0.0) * 100.0,
            d["samples"]
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn serve(flags: Flags, demo: bool) -> anyhow::Result<ExitCode> {
    let config = Config::load(&flags, &process_env)?;
    init_logging(config.log_json);
    let sys = actix_web::rt::System::new();
    sys.block_on(async move {
        let (state, notes) = server::build_state(config).await?;
        for n in notes {
            eprintln!("ferry: {n}");
        }
        if demo {
            let line = crate::demo::publish_demo(&state).await?;
            eprintln!("ferry: {line}");
        }
        let (srv, addr) = server::bind(state.clone())?;
        let scheme = if state.config.tls.is_some() { "https" } else { "http" };
        eprintln!("ferry: listening on {scheme}://{addr} (data in {})", state.config.data.display());
        if demo {
            eprintln!(
                "ferry: try: curl -s {scheme}://{addr}/v1/resolve -H 'content-type: application/json' -d \
                 '{{\"model\":\"demo-mlp\",\"install_id\":\"me\",\"app_version\":\"1.0.0\",\"runtime_version\":\"1.5.1\",\
                 \"backends\":[\"XnnpackBackend\",\"VulkanBackend\"],\"platform\":\"android\",\"os_version\":\"14\",\
                 \"device_model\":\"Pixel 8\",\"soc\":\"Tensor G3\",\"ram_mb\":8192}}'"
            );
        }
        server::spawn_refresh(state);
        srv.await.context("server stopped with an error")
    })?;
    Ok(ExitCode::SUCCESS)
}

fn keys_generate(out: &Path) -> anyhow::Result<ExitCode> {
    let (release, online, _) = keys::key_paths(out);
    for p in [&release, &online] {
        if p.exists() {
            bail!("{} exists; refusing to overwrite keys", p.display());
        }
    }
    for line in keys::ensure_dev_keys(out)? {
        println!("{line}");
    }
    println!("keep release.key offline; give trust.json to app developers");
    Ok(ExitCode::SUCCESS)
}

fn keys_token(name: &str, scopes: &str) -> anyhow::Result<ExitCode> {
    let mut parsed = Vec::new();
    for s in scopes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let scope: crate::auth::Scope =
            serde_json::from_value(serde_json::Value::String(s.to_string()))
                .map_err(|_| anyhow::anyhow!("unknown scope {s:?}; use publish, rollout, read"))?;
        parsed.push(scope);
    }
    if parsed.is_empty() {
        bail!("give at least one scope");
    }
    let mut raw = [0u8; 24];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let secret = format!("ferry_{}", hex::encode(raw));
    println!("token (shown once): {secret}");
    println!();
    println!("[[tokens]]");
    println!("name = {:?}", name);
    println!("sha256 = \"{}\"", crate::auth::hash_token(&secret));
    println!(
        "scopes = [{}]",
        parsed
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

fn sign_cmd(variants: &Path, key: &Path, output: &Path) -> anyhow::Result<ExitCode> {
    let spec = sign::read_variants(variants)?;
    let key = keys::load(key)?;
    if key.role != KeyRole::Release {
        bail!(
            "{} is a {} key; releases are signed with a release key",
            key.pair.id(),
            key.role
        );
    }
    let base = variants.parent().unwrap_or(Path::new("."));
    let read = |p: &Path| -> anyhow::Result<Vec<u8>> { Ok(std::fs::read(p)?) };
    let (manifest, files) =
        sign::build_manifest(&spec, base, &read, time::OffsetDateTime::now_utc())?;
    let envelope = sign::sign(&manifest, &key)?;
    let json = serde_json::to_vec_pretty(&envelope)?;
    crate::fsutil::write_durable(output, &json, None)
        .with_context(|| format!("cannot write {}", output.display()))?;
    println!(
        "signed {} {} with release key {}",
        manifest.model,
        manifest.version,
        key.pair.id().short()
    );
    for (v, f) in manifest.variants.iter().zip(&files) {
        println!(
            "  {:<16} {:<9} {:>10} bytes  {}  [{}]",
            v.id,
            v.delegate,
            v.size,
            f.path.display(),
            v.backends
                .iter()
                .map(|b| b.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!("wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}

/// Builds a blocking HTTP agent that reports every status itself (for `publish`).
pub fn http_agent(ca: Option<&Path>) -> anyhow::Result<ureq::Agent> {
    let mut builder = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_recv_response(Some(Duration::from_secs(120)));
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).with_context(|| format!("cannot read CA {}", ca.display()))?;
        let mut roots = Vec::new();
        for item in ureq::tls::parse_pem(&pem) {
            if let ureq::tls::PemItem::Certificate(c) =
                item.with_context(|| format!("bad PEM in {}", ca.display()))?
            {
                roots.push(c);
            }
        }
        if roots.is_empty() {
            bail!("{} holds no certificate", ca.display());
        }
        builder = builder.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
                .build(),
        );
    }
    Ok(builder.build().new_agent())
}

/// Turns a non-2xx response into an error quoting the server's `{code, message, request_id}`.
fn http_error(what: &str, mut resp: ureq::http::Response<ureq::Body>) -> anyhow::Error {
    let status = resp.status();
    let text = resp
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    match serde_json::from_str::<ErrorBody>(&text) {
        Ok(e) => anyhow::anyhow!(
            "{what}: {status} {}: {} (request {})",
            e.code,
            e.message,
            e.request_id
        ),
        Err(_) => anyhow::anyhow!(
            "{what}: {status} {}",
            text.chars().take(200).collect::<String>()
        ),
    }
}

/// A reader that advances a progress bar.
struct Progress<R> {
    inner: R,
    bar: indicatif::ProgressBar,
}

impl<R: Read> Read for Progress<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

fn publish_cmd(
    release: &Path,
    files: &Path,
    server: &str,
    token: &str,
    ca: Option<&Path>,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    let server = server.trim_end_matches('/');
    let raw =
        std::fs::read(release).with_context(|| format!("cannot read {}", release.display()))?;
    let envelope: Envelope = serde_json::from_slice(&raw)
        .with_context(|| format!("{} is not a signed release", release.display()))?;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(envelope.payload.as_bytes())
        .context("the release payload is not base64")?;
    let manifest = ReleaseManifest::from_json(&payload)?;
    // Find each blob in the folder by size, then hash.
    let mut wanted: Vec<(Sha256Digest, u64, String)> = manifest
        .variants
        .iter()
        .map(|v| (v.sha256, v.size, v.id.to_string()))
        .collect();
    wanted.dedup_by_key(|w| w.0);
    let mut found: Vec<(Sha256Digest, PathBuf)> = Vec::new();
    for entry in
        std::fs::read_dir(files).with_context(|| format!("cannot list {}", files.display()))?
    {
        let path = entry?.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() || !wanted.iter().any(|w| w.1 == meta.len()) {
            continue;
        }
        let digest = hash_file(&path)?;
        if wanted.iter().any(|w| w.0 == digest) {
            found.push((digest, path));
        }
    }
    let agent = http_agent(ca)?;
    let auth = format!("Bearer {token}");
    for (digest, size, id) in &wanted {
        let Some((_, path)) = found.iter().find(|(d, _)| d == digest) else {
            bail!(
                "variant {id}: no file in {} has sha256 {digest}",
                files.display()
            );
        };
        let url = format!("{server}/v1/blobs/sha256/{}", digest.to_hex());
        let head = agent
            .head(&url)
            .call()
            .with_context(|| format!("cannot reach {server}"))?;
        if head.status() == 200 {
            println!("{id}: blob {} already on the server", digest.to_hex());
            continue;
        }
        let bar = if quiet {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(*size)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(id.clone());
        let file = std::fs::File::open(path)?;
        let mut reader = Progress {
            inner: file,
            bar: bar.clone(),
        };
        let put = format!("{server}/v1/admin/blobs/sha256/{}", digest.to_hex());
        let resp = agent
            .put(&put)
            .header("authorization", &auth)
            .header("content-type", "application/octet-stream")
            .header("content-length", &size.to_string())
            .send(ureq::SendBody::from_reader(&mut reader))
            .with_context(|| format!("uploading {}", path.display()))?;
        bar.finish_and_clear();
        if !resp.status().is_success() {
            return Err(http_error(&format!("upload of {}", path.display()), resp));
        }
        println!("{id}: uploaded {} ({size} bytes)", path.display());
    }
    let url = format!("{server}/v1/admin/models/{}/releases", manifest.model);
    let resp = agent
        .post(&url)
        .header("authorization", &auth)
        .header("content-type", "application/json")
        .send(&raw[..])
        .with_context(|| format!("cannot reach {server}"))?;
    if resp.status() == 201 {
        println!("published {} {}", manifest.model, manifest.version);
        return Ok(ExitCode::SUCCESS);
    }
    if resp.status() == 409 {
        // Idempotent retry: fine when the published release is this very envelope.
        let url = format!(
            "{server}/v1/admin/models/{}/releases/{}",
            manifest.model, manifest.version
        );
        let mut got = agent.get(&url).header("authorization", &auth).call()?;
        if got.status() == 200 {
            let text = got
                .body_mut()
                .with_config()
                .limit(16 << 20)
                .read_to_string()?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            if v["envelope"]["payload"].as_str() == Some(envelope.payload.as_str()) {
                println!(
                    "{} {} was already published (identical); nothing to do",
                    manifest.model, manifest.version
                );
                return Ok(ExitCode::SUCCESS);
            }
        }
        bail!(
            "{} {} is already published with different content; releases are immutable, bump the version",
            manifest.model,
            manifest.version
        );
    }
    Err(http_error("publish", resp))
}

fn hash_file(path: &Path) -> anyhow::Result<Sha256Digest> {
    use sha2::Digest as _;
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(Sha256Digest::from_bytes(h.finalize().into()))
}

fn inspect(file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let meta =
        std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", file.display());
    }
    if meta.len() > MAX_INSPECT_FILE {
        bail!(
            "{} is larger than {} bytes",
            file.display(),
            MAX_INSPECT_FILE
        );
    }
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let report = pte::inspect(&bytes).map_err(|e| {
        anyhow::anyhow!("{} is not a valid .pte ({}): {e}", file.display(), e.code())
    })?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.to_text())?;
    }
    Ok(ExitCode::SUCCESS)
}
