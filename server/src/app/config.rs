//! Typed server configuration: a TOML file, then environment overrides, then CLI flags.
//!
//! Built once at start-up by [`Config::load`]; a bad value is an error naming the source and
//! the key, never a panic. Every field has a default, so `ferry serve` with nothing runs on
//! `./ferry-data` at `127.0.0.1:8080`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use ferry_shared::select::Preference;
use serde::Deserialize;

use crate::api::limits::Limits;
use crate::storage::config::StorageConfig;
use crate::tokens::{Scope, TokenEntry};

/// The whole server configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Data directory: the local object store (`store/`) and keys (`keys/`).
    pub data: PathBuf,
    /// Base URL clients should download blobs from (absolute URLs in decisions); when unset,
    /// decisions carry paths relative to the server.
    pub public_url: Option<String>,
    /// Where devices may fetch blobs, in the order to try them (`sources`, `FERRY_SOURCES`
    /// comma-separated): URL prefixes a blob's hex digest is appended to, `origin` for this
    /// server's own blob route. Signed into every decision; empty: none listed (each
    /// candidate's URL alone, as before).
    pub sources: Vec<String>,
    /// TLS certificate and key (PEM); HTTPS when set.
    pub tls: Option<TlsConfig>,
    /// Request limits.
    pub limits: Limits,
    /// Admin tokens.
    pub tokens: Vec<TokenEntry>,
    /// Delegate preference.
    pub preference: Preference,
    /// How long a signed decision stays valid, in seconds.
    pub decision_ttl_secs: u64,
    /// When true, publishing a release newer than the baseline makes it the baseline for every
    /// device, if nothing is staged for the model (`publish_goes_live` in the config file; off
    /// by default: a published release is live only once an operator stages it).
    pub publish_goes_live: bool,
    /// How often each replica checks its ramping rollouts, in seconds (`ramp_check_secs`,
    /// default 10).
    pub ramp_check_secs: u64,
    /// The day after which this server may stop answering protocol v1
    /// (`protocol_v1_sunset = "YYYY-MM-DD"`; unset: no retirement planned). While set, every
    /// device answer carries `Ferry-Protocol-Sunset` and `Sunset` so clients can tell their
    /// app (`docs/protocol.md`).
    pub protocol_v1_sunset: Option<time::Date>,
    /// Log format.
    pub log_json: bool,
    /// Which requests get an access-log line at INFO (`request_log`; default `sampled`).
    pub request_log: crate::api::state::RequestLog,
    /// A second listener serving `/metrics`, `/healthz` and `/readyz` without a token, for a
    /// scraper on a private network (`metrics_listen`, `FERRY_METRICS_LISTEN`; default none:
    /// `/metrics` is served on the main listener only, to a token with the read scope).
    pub metrics_listen: Option<SocketAddr>,
    /// Telemetry ingestion limits and thresholds.
    pub telemetry: crate::fleet::config::TelemetryConfig,
    /// The object store.
    pub storage: StorageConfig,
    /// This replica's stable name in the store (`node_id`, `FERRY_NODE_ID`): its telemetry
    /// rollup and raw files carry it, and a restart continues its rollup. `None`: a new random
    /// name per run (each run leaves its own rollup, which keeps counting). Give every replica
    /// its own; two live processes with one name overwrite each other's counts.
    pub node_id: Option<String>,
    /// A site mirror's disk budget for the files it holds, in bytes (`[mirror]
    /// max_held_bytes`, `FERRY_MIRROR_MAX_HELD_BYTES`; `None`: no bound). Past it, the files
    /// served longest ago are deleted (fetched again when asked for).
    pub mirror_max_held_bytes: Option<u64>,
    /// `[sealing]`: the key-release policy of sealed variants (the attestation verifier).
    pub sealing: crate::release::attest::SealingConfig,
}

/// `[mirror]`: settings of `ferry serve --mirror-of` only.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MirrorSection {
    max_held_bytes: Option<u64>,
}

/// TLS files.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    data: Option<PathBuf>,
    public_url: Option<String>,
    sources: Option<Vec<String>>,
    tls: Option<TlsConfig>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    tokens: Vec<FileToken>,
    preference: Option<Preference>,
    decision_ttl_secs: Option<u64>,
    #[serde(default)]
    publish_goes_live: bool,
    ramp_check_secs: Option<u64>,
    protocol_v1_sunset: Option<toml::Value>,
    log_format: Option<String>,
    request_log: Option<String>,
    metrics_listen: Option<String>,
    #[serde(default)]
    telemetry: crate::fleet::config::TelemetryConfig,
    storage: Option<StorageConfig>,
    node_id: Option<String>,
    mirror: Option<MirrorSection>,
    #[serde(default)]
    sealing: crate::release::attest::SealingConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToken {
    name: String,
    sha256: String,
    scopes: Vec<Scope>,
}

/// Values given on the command line (they win over everything).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--listen`.
    pub listen: Option<String>,
    /// `--data`.
    pub data: Option<PathBuf>,
}

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

impl Config {
    /// Builds the configuration from the file named by `flags.config` (if any), then the
    /// environment (through `env`, so tests need not touch the process environment), then
    /// the flags.
    pub fn load(flags: &Flags, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Config> {
        let file = match &flags.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read config file {}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .with_context(|| format!("config file {} is invalid", path.display()))?
            }
            None => FileConfig::default(),
        };
        let listen_text = flags
            .listen
            .clone()
            .or_else(|| env("FERRY_LISTEN"))
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let listen: SocketAddr = listen_text
            .parse()
            .with_context(|| format!("listen address {listen_text:?} is not HOST:PORT"))?;
        let data = flags
            .data
            .clone()
            .or_else(|| env("FERRY_DATA").map(PathBuf::from))
            .or(file.data)
            .unwrap_or_else(|| PathBuf::from("./ferry-data"));
        let public_url = env("FERRY_PUBLIC_URL").or(file.public_url);
        if let Some(u) = &public_url
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            bail!("public_url {u:?} must start with http:// or https://");
        }
        let sources = match env("FERRY_SOURCES") {
            Some(list) => blob_sources(list.split(',').map(str::trim).map(String::from))?,
            None => blob_sources(file.sources.unwrap_or_default().into_iter())?,
        };
        let tls = match (env("FERRY_TLS_CERT"), env("FERRY_TLS_KEY")) {
            (Some(cert), Some(key)) => Some(TlsConfig {
                cert: cert.into(),
                key: key.into(),
            }),
            (None, None) => file.tls,
            _ => bail!("set both FERRY_TLS_CERT and FERRY_TLS_KEY, or neither"),
        };
        let mut tokens = Vec::new();
        for t in file.tokens {
            tokens.push(
                TokenEntry::from_hash(&t.name, &t.sha256, t.scopes)
                    .with_context(|| format!("token {:?} in the config file", t.name))?,
            );
        }
        if let Some(secret) = env("FERRY_ADMIN_TOKEN") {
            if secret.len() < 16 {
                bail!("FERRY_ADMIN_TOKEN must be at least 16 characters");
            }
            tokens.push(TokenEntry::from_secret(
                "env:FERRY_ADMIN_TOKEN",
                &secret,
                Scope::ALL.to_vec(),
            ));
        }
        let log_json = match env("FERRY_LOG_FORMAT").or(file.log_format).as_deref() {
            None | Some("text") => false,
            Some("json") => true,
            Some(other) => bail!("log format {other:?} must be \"text\" or \"json\""),
        };
        let request_log = match env("FERRY_REQUEST_LOG").or(file.request_log).as_deref() {
            None | Some("sampled") => crate::api::state::RequestLog::Sampled,
            Some("all") => crate::api::state::RequestLog::All,
            Some("errors") => crate::api::state::RequestLog::Errors,
            Some(other) => {
                bail!("request_log {other:?} must be \"sampled\", \"all\" or \"errors\"")
            }
        };
        let metrics_listen = env("FERRY_METRICS_LISTEN")
            .or(file.metrics_listen)
            .map(|a| {
                a.parse::<SocketAddr>().map_err(|_| {
                    anyhow::anyhow!(
                        "metrics_listen {a:?} must be an address and port, like 10.0.0.5:9464"
                    )
                })
            })
            .transpose()?;
        let node_id = env("FERRY_NODE_ID").or(file.node_id.clone());
        if let Some(n) = &node_id
            && (n.is_empty()
                || n.len() > 63
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'))
        {
            bail!("node_id {n:?} must be 1 to 63 lowercase letters, digits or '-'");
        }
        let decision_ttl_secs = file.decision_ttl_secs.unwrap_or(3600);
        if !(10..=7 * 86400).contains(&decision_ttl_secs) {
            bail!("decision_ttl_secs must be between 10 and 604800");
        }
        let ramp_check_secs = file.ramp_check_secs.unwrap_or(10);
        if !(1..=3600).contains(&ramp_check_secs) {
            bail!("ramp_check_secs must be between 1 and 3600");
        }
        let protocol_v1_sunset = file
            .protocol_v1_sunset
            .as_ref()
            .map(sunset_date)
            .transpose()?;
        file.telemetry
            .validate()
            .map_err(|m| anyhow::anyhow!("telemetry.{m}"))?;
        file.limits
            .validate()
            .map_err(|m| anyhow::anyhow!("limits.{m}"))?;
        file.sealing
            .validate()
            .map_err(|m| anyhow::anyhow!("sealing.{m}"))?;
        let storage = StorageConfig::resolve(file.storage, env)?;
        let mirror_max_held_bytes = match env("FERRY_MIRROR_MAX_HELD_BYTES") {
            Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                anyhow::anyhow!("FERRY_MIRROR_MAX_HELD_BYTES {v:?} must be a number of bytes")
            })?),
            None => file.mirror.and_then(|m| m.max_held_bytes),
        };
        if mirror_max_held_bytes.is_some_and(|b| b < 1 << 20) {
            bail!("mirror.max_held_bytes must be at least 1048576 (1 MiB)");
        }
        Ok(Config {
            listen,
            data,
            public_url: public_url.map(|u| u.trim_end_matches('/').to_string()),
            sources,
            tls,
            limits: file.limits,
            tokens,
            preference: file.preference.unwrap_or_default(),
            decision_ttl_secs,
            publish_goes_live: file.publish_goes_live,
            ramp_check_secs,
            protocol_v1_sunset,
            log_json,
            request_log,
            metrics_listen,
            telemetry: file.telemetry,
            storage,
            node_id,
            mirror_max_held_bytes,
            sealing: file.sealing,
        })
    }

    /// The local object store's root.
    pub fn store_dir(&self) -> PathBuf {
        self.data.join("store")
    }

    /// The key folder.
    pub fn keys_dir(&self) -> PathBuf {
        self.data.join("keys")
    }

    /// The sections the HTTP layer reads.
    pub fn settings(&self) -> crate::api::state::Settings {
        crate::api::state::Settings {
            public_url: self.public_url.clone(),
            sources: self.sources.clone(),
            limits: self.limits.clone(),
            tokens: self.tokens.clone(),
            preference: self.preference.clone(),
            decision_ttl_secs: self.decision_ttl_secs,
            publish_goes_live: self.publish_goes_live,
            protocol_v1_sunset: self.protocol_v1_sunset,
            storage: self.storage.clone(),
            telemetry: self.telemetry,
            request_log: self.request_log,
            sealing: self.sealing.clone(),
        }
    }
}

/// Reads an environment variable (the binary's source for [`Config::load`]).
pub fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// `sources`: each `origin` (this server's blob route) or a URL prefix ending in `/`, at most
/// [`MAX_SOURCES`](ferry_shared::wire::sources::MAX_SOURCES), none twice.
fn blob_sources(listed: impl Iterator<Item = String>) -> anyhow::Result<Vec<String>> {
    use ferry_shared::wire::sources::{MAX_SOURCES, ORIGIN_SOURCE, why_unusable};
    let mut out: Vec<String> = Vec::new();
    for given in listed {
        let s = if given == "origin" {
            ORIGIN_SOURCE.to_string()
        } else {
            // A URL's scheme is case-insensitive; the wire form is lower case.
            let lower = given.to_ascii_lowercase();
            match ["https://", "http://"]
                .iter()
                .find(|p| lower.starts_with(**p))
            {
                Some(p) => format!("{p}{}", &given[p.len()..]),
                None => given.clone(),
            }
        };
        if let Some(why) = why_unusable(&s) {
            bail!(
                "source {given:?} {why}; a source is \"origin\" or a URL prefix like \
                 https://cdn.example.com/v1/blobs/sha256/"
            );
        }
        if out.contains(&s) {
            bail!("source {given:?} is listed twice");
        }
        out.push(s);
    }
    if out.len() > MAX_SOURCES {
        bail!("{} sources; at most {MAX_SOURCES} are allowed", out.len());
    }
    Ok(out)
}

/// `protocol_v1_sunset`: a date, written `2029-06-30` or as a TOML date (no time of day).
fn sunset_date(v: &toml::Value) -> anyhow::Result<time::Date> {
    let text = match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(d) if d.time.is_none() && d.offset.is_none() => d.to_string(),
        other => bail!("protocol_v1_sunset must be a date like 2029-06-30, not {other}"),
    };
    let well_formed = text.len() == 10
        && text.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    let parsed = well_formed
        .then(|| {
            time::Date::parse(&text, &time::format_description::well_known::Iso8601::DATE).ok()
        })
        .flatten();
    parsed.ok_or_else(|| {
        anyhow::anyhow!(
            "protocol_v1_sunset {text:?} must be a date like 2029-06-30 (year, month, day)"
        )
    })
}

#[cfg(test)]
mod tests;
