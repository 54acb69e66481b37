//! The validation of one event (within the `[telemetry]` limits of [`TelemetryConfig`]).

use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::sources::{MAX_SOURCE_LEN, MAX_SOURCES};
use ferry_shared::wire::telemetry::{EventKind, TelemetryEvent};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::fleet::config::TelemetryConfig;

/// One rejected event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventError {
    /// Position in the batch.
    pub index: usize,
    /// Stable code (`event_invalid`, `event_out_of_range`, `rate_limited`).
    pub code: ErrorCode,
    /// What is wrong.
    pub message: String,
}

/// The largest device clock offset an event may report, in seconds (a century).
pub const MAX_CLOCK_OFFSET_S: u64 = 100 * 366 * 86_400;

pub(crate) const MAX_FIELD: usize = 128;
/// Largest byte count a download event may report (1 TiB: a variant of 16 GiB files, many
/// times over).
pub(crate) const MAX_EVENT_BYTES: u64 = 1 << 40;

/// The most failures one source may report in one download event.
const MAX_SOURCE_FAILURES: u32 = 10_000;
/// Longest receipt (a MAC and up to 64 variant ids).
pub(crate) const MAX_RECEIPT: usize = 8192;
/// Devices tracked per variant for the per-device event cap.
pub(crate) const MAX_DEVICES: usize = 200_000;

/// Validates one event (its JSON text, as it stood in the batch).
pub fn validate(
    raw: &str,
    now: OffsetDateTime,
    cfg: &TelemetryConfig,
) -> Result<TelemetryEvent, (ErrorCode, String)> {
    let invalid = |m: String| (ErrorCode::EventInvalid, m);
    // Parsed straight from the event's own text in the batch (no intermediate JSON tree).
    let e: TelemetryEvent = match serde_json::from_str(raw) {
        Ok(e) => e,
        // The reader keeps unknown fields aside for the flattened inference fields, and stops at
        // 128 levels there: read the event again without them (protocol v1 ignores unknown
        // fields at any depth within the body limit, as resolve does).
        Err(err) if err.to_string().starts_with("recursion limit exceeded") => {
            ferry_shared::wire::telemetry::without_unknown_fields(raw)
                .and_then(|known| serde_json::from_str(&known))
                .map_err(|e| invalid(e.to_string()))?
        }
        Err(err) => return Err(invalid(err.to_string())),
    };
    e.model
        .parse::<ModelName>()
        .map_err(|err| invalid(format!("model: {err}")))?;
    for (name, s) in [
        ("release", &e.release),
        ("variant", &e.variant),
        ("delegate", &e.delegate),
        ("install_id", &e.install_id),
        ("platform", &e.platform),
        ("soc", &e.soc),
        ("device_model", &e.device_model),
        ("os_version", &e.os_version),
        ("app_version", &e.app_version),
        ("runtime_version", &e.runtime_version),
    ] {
        if ferry_shared::names::longer_than(s, MAX_FIELD) || s.chars().any(char::is_control) {
            return Err(invalid(format!(
                "{name} is longer than {MAX_FIELD} characters or has control characters"
            )));
        }
    }
    if e.install_id.is_empty() {
        return Err(invalid("install_id is empty".into()));
    }
    // The same rule as a resolve request's: a known platform or a well-formed newer one.
    if !e.platform.is_empty()
        && let Err(why) = e.platform.parse::<ferry_shared::manifest::Platform>()
    {
        return Err(invalid(why));
    }
    if matches!(
        e.kind,
        EventKind::Load
            | EventKind::Fallback
            | EventKind::Download
            | EventKind::Inference
            | EventKind::Crash
            | EventKind::Metric
    ) && (e.release.is_empty() || e.variant.is_empty())
    {
        return Err(invalid(
            "release and variant are required for this kind".into(),
        ));
    }
    if e.kind == EventKind::Inference {
        crate::fleet::counts::latency::check(&e).map_err(invalid)?;
    }
    check_metric(&e).map_err(invalid)?;
    if e.kind == EventKind::Crash
        && (e.outcome != ferry_shared::wire::telemetry::Outcome::Failed
            || e.error_code.as_deref() != Some(ErrorCode::Crashed.as_str())
            || e.stage.as_deref().is_none_or(str::is_empty))
    {
        return Err(invalid(
            "a crash event has outcome failed, error_code crashed and the stage it crashed in"
                .into(),
        ));
    }
    if e.bytes_fetched
        .max(e.bytes_total)
        .is_some_and(|n| n > MAX_EVENT_BYTES)
    {
        return Err(invalid(format!(
            "bytes_fetched and bytes_total must be at most {MAX_EVENT_BYTES}"
        )));
    }
    if e.sources.len() > MAX_SOURCES
        || e.sources.iter().any(|u| {
            u.source.len() > MAX_SOURCE_LEN
                || u.bytes > MAX_EVENT_BYTES
                || u.failures > MAX_SOURCE_FAILURES
                || u.error.as_ref().is_some_and(|c| c.len() > 64)
                || u.encoded_bytes > u.bytes
                || u.encoding_failures > MAX_SOURCE_FAILURES
        })
    {
        return Err(invalid(format!(
            "sources holds at most {MAX_SOURCES} entries, each a source of at most \
             {MAX_SOURCE_LEN} bytes, at most {MAX_EVENT_BYTES} bytes (of them at most all \
             encoded), {MAX_SOURCE_FAILURES} failures and encoding failures and an error code \
             of at most 64 bytes"
        )));
    }
    if e.kind == EventKind::Fallback && e.to_variant.as_deref().is_none_or(str::is_empty) {
        return Err(invalid("a fallback event needs to_variant".into()));
    }
    if let Some(ms) = e.load_ms
        && !(ms.is_finite() && (0.0..=1e7).contains(&ms))
    {
        return Err(invalid("load_ms must be between 0 and 10,000,000".into()));
    }
    if e.receipt.as_ref().is_some_and(|r| r.len() > MAX_RECEIPT) {
        return Err(invalid(format!(
            "receipt is longer than {MAX_RECEIPT} bytes"
        )));
    }
    if e.error_code.as_ref().is_some_and(|c| {
        ferry_shared::names::longer_than(c, MAX_FIELD) || c.chars().any(char::is_control)
    }) {
        return Err(invalid(format!(
            "error_code is longer than {MAX_FIELD} characters or has control characters"
        )));
    }
    // A device's clock offset: within a century either way.
    if e.clock_offset_s
        .is_some_and(|o| o.unsigned_abs() > MAX_CLOCK_OFFSET_S)
    {
        return Err(invalid(format!(
            "clock_offset_s must be within {MAX_CLOCK_OFFSET_S} seconds either way"
        )));
    }
    // Stages are short snake_case names; newer clients may add stages, so any such name is
    // kept, but nothing else.
    if let Some(stage) = &e.stage
        && (stage.is_empty()
            || stage.len() > 32
            || !stage.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    {
        return Err(invalid(
            "stage must be 1 to 32 lowercase letters or underscores".into(),
        ));
    }
    let at = OffsetDateTime::parse(&e.at, &time::format_description::well_known::Rfc3339)
        .map_err(|err| invalid(format!("at: {err}")))?;
    if at > now + time::Duration::hours(1) || at < now - time::Duration::days(cfg.max_age_days) {
        return Err((
            ErrorCode::EventOutOfRange,
            format!(
                "at {} is more than {} days old or in the future",
                e.at, cfg.max_age_days
            ),
        ));
    }
    Ok(e)
}

/// The largest magnitude an app metric's value may have.
pub const MAX_METRIC_VALUE: f64 = 1e12;

/// A `metric` event names a well-formed metric and carries a finite value within
/// ±[`MAX_METRIC_VALUE`]; other kinds carry neither.
fn check_metric(e: &TelemetryEvent) -> Result<(), String> {
    let m = &e.metric;
    if e.kind != EventKind::Metric {
        return if m.name.is_none() && m.value.is_none() {
            Ok(())
        } else {
            Err("name and value belong to metric events only".into())
        };
    }
    let name = m.name.as_deref().ok_or("a metric event needs a name")?;
    ferry_shared::experiment::plan::check_metric_name(name)?;
    match m.value {
        Some(v) if v.is_finite() && v.abs() <= MAX_METRIC_VALUE => Ok(()),
        _ => Err(format!(
            "a metric event needs a finite value within +-{MAX_METRIC_VALUE:e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(extra: serde_json::Value) -> String {
        let mut e = serde_json::json!({
            "kind": "metric", "model": "m", "release": "1.0.0", "variant": "xnnpack-fp32",
            "delegate": "xnnpack", "outcome": "ok", "install_id": "d1", "platform": "android",
            "soc": "s", "device_model": "p", "os_version": "14", "app_version": "1.0.0",
            "runtime_version": "1.5.1",
            "at": OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .expect("time"),
            "name": "accepted", "value": 0.5,
        });
        for (k, v) in extra.as_object().expect("object") {
            if v.is_null() {
                e.as_object_mut().expect("object").remove(k);
            } else {
                e[k] = v.clone();
            }
        }
        e.to_string()
    }

    #[test]
    fn metric_events_carry_a_well_formed_name_and_a_bounded_finite_value() {
        let cfg = TelemetryConfig::default();
        let now = OffsetDateTime::now_utc();
        let e = validate(&metric(serde_json::json!({})), now, &cfg).expect("valid");
        assert_eq!(e.kind, EventKind::Metric);
        assert_eq!(
            (e.metric.name.as_deref(), e.metric.value),
            (Some("accepted"), Some(0.5))
        );
        for (hostile, why) in [
            (serde_json::json!({"name": null}), "needs a name"),
            (serde_json::json!({"value": null}), "finite value"),
            (serde_json::json!({"value": 1e13}), "finite value"),
            (serde_json::json!({"value": -1e300}), "finite value"),
            (serde_json::json!({"value": "1"}), "invalid type"),
            (serde_json::json!({"name": "Accepted"}), "metric name"),
            (serde_json::json!({"name": "a".repeat(65)}), "metric name"),
            (serde_json::json!({"name": "a\u{0}b"}), "metric name"),
            (serde_json::json!({"name": ["a"]}), "invalid type"),
            (serde_json::json!({"variant": ""}), "required"),
            (serde_json::json!({"kind": "load"}), "metric events only"),
        ] {
            let (code, message) =
                validate(&metric(hostile.clone()), now, &cfg).expect_err(&hostile.to_string());
            assert_eq!(code, ErrorCode::EventInvalid);
            assert!(message.contains(why), "{hostile}: {message}");
        }
        // A number too large for a double is no value at all.
        let huge = metric(serde_json::json!({})).replace("0.5", "1e999");
        assert!(validate(&huge, now, &cfg).is_err());
    }
}
