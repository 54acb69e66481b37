//! Where and who for admin commands: the server URL, the token and the CA, from flags, the
//! environment or the profile file; the HTTP agent and error reporting they share.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use ferry_shared::wire::resolve::ErrorBody;

/// Text from the server with control characters (terminal escapes) made visible: what the
/// CLI prints of free text others wrote (reasons, install ids, device classes).
pub(crate) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
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
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub ca: Option<PathBuf>,
}

/// The profile file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Profile {
    server: Option<String>,
    token: Option<String>,
    ca: Option<PathBuf>,
}

pub(crate) fn profile_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FERRY_PROFILE") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("ferry/profile.toml"))
}

impl Remote {
    /// The profile file's settings (empty when there is none).
    fn profile() -> anyhow::Result<Profile> {
        match profile_path() {
            Some(p) if p.is_file() => {
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("cannot read profile {}", p.display()))?;
                toml::from_str::<Profile>(&text)
                    .with_context(|| format!("profile {} is invalid", p.display()))
            }
            _ => Ok(Profile::default()),
        }
    }

    /// Server URL and CA after applying the profile (for calls that need no token).
    pub fn server_and_ca(&self) -> anyhow::Result<(String, Option<PathBuf>)> {
        let (server, _, ca) = self.with_profile(Self::profile()?);
        Ok((server, ca))
    }

    /// Server URL, token and CA after applying the profile.
    pub fn resolve(&self) -> anyhow::Result<(String, String, Option<PathBuf>)> {
        let (server, token, ca) = self.with_profile(Self::profile()?);
        let token = token.ok_or_else(|| anyhow::Error::new(NoToken))?;
        Ok((server, token, ca))
    }

    /// Flags over the profile over the default server.
    fn with_profile(&self, profile: Profile) -> (String, Option<String>, Option<PathBuf>) {
        let server = self
            .server
            .clone()
            .or(profile.server)
            .unwrap_or_else(|| "http://127.0.0.1:8080".to_string());
        (
            server,
            self.token.clone().or(profile.token),
            self.ca.clone().or(profile.ca),
        )
    }
}

pub(crate) fn admin_call(
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
        ("PUT", b) => agent
            .put(&url)
            .header("authorization", &auth)
            .header("content-type", "application/json")
            .send(serde_json::to_vec(&b.unwrap_or_default())?.as_slice()),
        ("DELETE", _) => agent.delete(&url).header("authorization", &auth).call(),
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

/// No admin token was given by flag, environment or profile.
#[derive(Debug)]
pub struct NoToken;

impl std::fmt::Display for NoToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "no admin token: pass --token, set FERRY_TOKEN, or put token = \"...\" in ~/.config/ferry/profile.toml",
        )
    }
}

impl std::error::Error for NoToken {}

/// A non-2xx answer from the server: what was asked, the status, and the server's error body.
#[derive(Debug)]
pub struct Refusal {
    /// What the CLI asked (`POST /v1/admin/...`, `publish`, ...).
    pub what: String,
    /// HTTP status.
    pub status: u16,
    /// The catalogue code, when the body had one.
    pub code: Option<ferry_shared::errors::ErrorCode>,
    /// The message (or the start of a body that was not an error body).
    pub message: String,
    /// The server's request id, when given.
    pub request_id: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = ureq::http::StatusCode::from_u16(self.status)
            .map_or_else(|_| self.status.to_string(), |s| s.to_string());
        match &self.code {
            Some(c) => write!(
                f,
                "{}: {status} {}: {} (request {})",
                self.what,
                c.as_str(),
                self.message,
                self.request_id
            ),
            None => write!(f, "{}: {status} {}", self.what, self.message),
        }
    }
}

impl std::error::Error for Refusal {}

/// Turns a non-2xx response into a [`Refusal`] quoting the server's `{code, message,
/// request_id}`.
/// An answer's `Content-Length`, when it has a valid one.
pub(crate) fn content_length<B>(resp: &ureq::http::Response<B>) -> Option<u64> {
    resp.headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

pub(crate) fn http_error(what: &str, mut resp: ureq::http::Response<ureq::Body>) -> anyhow::Error {
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    let refusal = match serde_json::from_str::<ErrorBody>(&text) {
        Ok(e) => Refusal {
            what: what.to_string(),
            status,
            code: ferry_shared::errors::ErrorCode::parse(&e.code),
            message: e.message,
            request_id: e.request_id,
        },
        Err(_) => Refusal {
            what: what.to_string(),
            status,
            code: None,
            message: text.chars().take(200).collect(),
            request_id: String::new(),
        },
    };
    anyhow::Error::new(refusal)
}
