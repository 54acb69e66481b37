//! Client options as `ferry_client_new_with` (and the JVM's `FerryClient` constructor) take
//! them: a JSON object, every field optional.

use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::ClientBuilder;

/// Most bytes of PEM read for the root certificates.
const MAX_PEM_BYTES: u64 = 1 << 20;

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ClientOptionsJson {
    #[serde(default)]
    cache_budget_bytes: Option<u64>,
    #[serde(default)]
    root_certificates_pem: Option<String>,
    #[serde(default)]
    root_certificates_file: Option<String>,
    #[serde(default)]
    connect_timeout_ms: Option<u64>,
    #[serde(default)]
    response_timeout_ms: Option<u64>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    max_telemetry_events: Option<usize>,
    #[serde(default)]
    telemetry_autosend: Option<bool>,
    #[serde(default)]
    time_runs: Option<bool>,
    #[serde(default)]
    storage_headroom_bytes: Option<u64>,
    #[serde(default)]
    delta_updates: Option<bool>,
    #[serde(default)]
    compressed_downloads: Option<bool>,
    #[serde(default)]
    reverify_after_secs: Option<u64>,
    /// Where the keys of sealed variants are kept: `files` (the default, in the cache's
    /// `sealed-keys/`) or `memory` (this process only: every start asks the server again, and
    /// no key is ever on disk).
    #[serde(default)]
    sealed_key_store: Option<String>,
}

/// The longest `reverify_after_secs` taken: ten years.
const MAX_REVERIFY_SECS: u64 = 10 * 365 * 24 * 3600;

/// The DER certificates in `pem` (at least one), or why not.
fn certificates(pem: &[u8], source: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for c in CertificateDer::pem_slice_iter(pem) {
        let c = c.map_err(|e| format!("{source}: {e}"))?;
        out.push(c.as_ref().to_vec());
    }
    if out.is_empty() {
        return Err(format!("{source}: no PEM CERTIFICATE block"));
    }
    Ok(out)
}

/// Checked options, ready to apply to a builder.
pub(super) struct ClientOptions {
    cache_budget: Option<u64>,
    roots: Vec<Vec<u8>>,
    timeouts: Option<(Duration, Duration)>,
    method: Option<String>,
    max_telemetry_events: Option<usize>,
    telemetry_autosend: Option<bool>,
    time_runs: Option<bool>,
    headroom: Option<u64>,
    delta: Option<bool>,
    compressed: Option<bool>,
    reverify: Option<Duration>,
    memory_keys: bool,
}

impl ClientOptionsJson {
    /// The options checked (certificates read and parsed), or the first one that is wrong.
    pub(super) fn check(self) -> Result<ClientOptions, String> {
        if self.cache_budget_bytes.is_some_and(|n| n < (1 << 20)) {
            return Err("cache_budget_bytes must be at least 1 MiB (1048576)".into());
        }
        let mut roots = Vec::new();
        if let Some(pem) = &self.root_certificates_pem {
            roots.extend(certificates(pem.as_bytes(), "root_certificates_pem")?);
        }
        if let Some(path) = &self.root_certificates_file {
            let len = std::fs::metadata(path)
                .map_err(|e| format!("root_certificates_file {path}: {e}"))?
                .len();
            if len > MAX_PEM_BYTES {
                return Err(format!(
                    "root_certificates_file {path}: {len} bytes; at most {MAX_PEM_BYTES}"
                ));
            }
            let pem =
                std::fs::read(path).map_err(|e| format!("root_certificates_file {path}: {e}"))?;
            roots.extend(certificates(
                &pem,
                &format!("root_certificates_file {path}"),
            )?);
        }
        let ms = |name: &str, v: Option<u64>, default: u64| match v {
            None => Ok(Duration::from_millis(default)),
            Some(n) if (100..=600_000).contains(&n) => Ok(Duration::from_millis(n)),
            Some(_) => Err(format!("{name} must be 100 to 600,000")),
        };
        let timeouts = match (self.connect_timeout_ms, self.response_timeout_ms) {
            (None, None) => None,
            (c, r) => Some((
                ms("connect_timeout_ms", c, 10_000)?,
                ms("response_timeout_ms", r, 30_000)?,
            )),
        };
        if let Some(m) = &self.method
            && (m.is_empty() || m.len() > 128 || m.chars().any(char::is_control))
        {
            return Err("method must be 1 to 128 characters without control characters".into());
        }
        if self
            .max_telemetry_events
            .is_some_and(|n| !(1..=1_000_000).contains(&n))
        {
            return Err("max_telemetry_events must be 1 to 1,000,000".into());
        }
        if self.storage_headroom_bytes.is_some_and(|n| n > (1 << 40)) {
            return Err("storage_headroom_bytes must be at most 1 TiB (1099511627776)".into());
        }
        if self
            .reverify_after_secs
            .is_some_and(|n| n > MAX_REVERIFY_SECS)
        {
            return Err(format!(
                "reverify_after_secs must be 0 to {MAX_REVERIFY_SECS} (ten years)"
            ));
        }
        Ok(ClientOptions {
            cache_budget: self.cache_budget_bytes,
            roots,
            timeouts,
            method: self.method,
            max_telemetry_events: self.max_telemetry_events,
            telemetry_autosend: self.telemetry_autosend,
            time_runs: self.time_runs,
            headroom: self.storage_headroom_bytes,
            delta: self.delta_updates,
            compressed: self.compressed_downloads,
            reverify: self.reverify_after_secs.map(Duration::from_secs),
            memory_keys: match self.sealed_key_store.as_deref() {
                None | Some("files") => false,
                Some("memory") => true,
                Some(other) => {
                    return Err(format!("sealed_key_store {other:?}: give files or memory"));
                }
            },
        })
    }
}

impl ClientOptions {
    /// `b` with these options.
    pub(super) fn apply(self, mut b: ClientBuilder) -> ClientBuilder {
        if let Some(n) = self.cache_budget {
            b = b.cache_budget(n);
        }
        for der in self.roots {
            b = b.root_certificate_der(der);
        }
        if let Some((c, r)) = self.timeouts {
            b = b.timeouts(c, r);
        }
        if let Some(m) = self.method {
            b = b.method(m);
        }
        if let Some(n) = self.max_telemetry_events {
            b = b.max_telemetry_events(n);
        }
        if let Some(on) = self.telemetry_autosend {
            b = b.telemetry_autosend(on);
        }
        if let Some(on) = self.time_runs {
            b = b.time_runs(on);
        }
        if let Some(d) = self.reverify {
            b = b.reverify_after(d);
        }
        if self.memory_keys {
            b = b.key_store(std::sync::Arc::new(crate::seal::MemoryKeyStore::default()));
        }
        if self.headroom.is_some() || self.delta.is_some() || self.compressed.is_some() {
            let defaults = crate::DownloadLimits::default();
            b = b.download_limits(crate::DownloadLimits {
                headroom: self.headroom.unwrap_or(defaults.headroom),
                delta: self.delta.unwrap_or(defaults.delta),
                compressed: self.compressed.unwrap_or(defaults.compressed),
                ..defaults
            });
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Result<ClientOptions, String> {
        serde_json::from_str::<ClientOptionsJson>(json)
            .map_err(|e| e.to_string())?
            .check()
    }

    #[test]
    fn options_are_bounded_and_unknown_keys_refused() {
        assert!(check("{}").is_ok());
        let o = check(
            r#"{"cache_budget_bytes": 1048576, "method": "encode", "connect_timeout_ms": 500}"#,
        )
        .expect("valid");
        assert_eq!(o.cache_budget, Some(1 << 20));
        assert_eq!(
            o.timeouts,
            Some((Duration::from_millis(500), Duration::from_secs(30)))
        );
        let o = check(r#"{"storage_headroom_bytes": 0, "delta_updates": false}"#).expect("valid");
        assert_eq!((o.headroom, o.delta), (Some(0), Some(false)));
        assert!(
            check(r#"{"sealed_key_store": "memory"}"#)
                .expect("valid")
                .memory_keys
        );
        assert!(
            !check(r#"{"sealed_key_store": "files"}"#)
                .expect("valid")
                .memory_keys
        );
        let o = check(r#"{"compressed_downloads": false}"#).expect("valid");
        assert_eq!(o.compressed, Some(false));
        let o = check(r#"{"reverify_after_secs": 0}"#).expect("valid");
        assert_eq!(o.reverify, Some(Duration::ZERO));
        for (bad, why) in [
            (r#"{"cache_budget_bytes": 10}"#, "at least 1 MiB"),
            (r#"{"connect_timeout_ms": 5}"#, "connect_timeout_ms must be"),
            (r#"{"method": ""}"#, "method must be"),
            (
                r#"{"max_telemetry_events": 0}"#,
                "max_telemetry_events must be",
            ),
            (
                r#"{"root_certificates_pem": "not a certificate"}"#,
                "no PEM CERTIFICATE block",
            ),
            (
                r#"{"root_certificates_file": "/nonexistent/ca.pem"}"#,
                "root_certificates_file /nonexistent/ca.pem",
            ),
            (r#"{"cache_budget": 1}"#, "unknown field"),
            (
                r#"{"storage_headroom_bytes": 2000000000000}"#,
                "storage_headroom_bytes must be",
            ),
            (r#"{"delta_updates": "yes"}"#, "invalid type"),
            (r#"{"compressed_downloads": 1}"#, "invalid type"),
            (
                r#"{"sealed_key_store": "keychain"}"#,
                "give files or memory",
            ),
            (
                r#"{"reverify_after_secs": 400000000}"#,
                "reverify_after_secs must be",
            ),
        ] {
            let e = check(bad).err().unwrap_or_default();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
