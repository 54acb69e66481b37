//! Telemetry events devices report to `POST /v1/telemetry`.
//!
//! Each load attempt, download, verification failure and fallback becomes one event; clients
//! queue them on disk and send them in batches (`{"events": [...]}`). Unknown fields are
//! ignored by the server so newer clients can add fields.

use serde::{Deserialize, Serialize};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A blob download finished or failed.
    Download,
    /// A signature, expiry, sequence or hash check failed.
    Verify,
    /// A variant was loaded (or failed to load) into the runtime.
    Load,
    /// The client moved from one variant to the next.
    Fallback,
    /// A summary of one method's runs since the last flush ([`InferenceFields`]).
    Inference,
    /// A variant took the app down natively while it was loaded or run (reported on the next
    /// launch): `stage` says where, `at` when, `error_code` is `crashed`.
    Crash,
    /// A value the app recorded (`Client::record_metric`): `name` and `value` ([`MetricFields`]),
    /// about the model, release and variant it had loaded. Additive in v1.
    Metric,
}

/// What a `metric` event adds: the app's metric and its value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricFields {
    /// The metric's name (1–64 of `[a-z0-9_.-]`, starting with a letter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its value (a finite number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

/// The device's thermal state as the app reports it (Android's seven `PowerManager` states map
/// to four: none and light to `nominal`, moderate to `fair`, severe to `serious`, critical,
/// emergency and shutdown to `critical`; iOS's four map one to one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thermal {
    /// No throttling.
    Nominal,
    /// Slightly elevated.
    Fair,
    /// High: performance is reduced.
    Serious,
    /// Critical: the system is shedding work.
    Critical,
    /// A state a newer client named.
    #[serde(other)]
    Other,
}

impl Thermal {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Thermal::Nominal => "nominal",
            Thermal::Fair => "fair",
            Thermal::Serious => "serious",
            Thermal::Critical => "critical",
            Thermal::Other => "other",
        }
    }
}

/// What an `inference` event adds: one method's runs since the last flush, timed by the
/// client. The first call after the load is the cold one (`first_ms`); the percentiles and
/// maximum are of the other (warm) calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InferenceFields {
    /// The method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Calls in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
    /// The first call after the load (ms), when it fell in this window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_ms: Option<f64>,
    /// Median of the warm calls (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    /// 95th percentile of the warm calls (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_ms: Option<f64>,
    /// Slowest warm call (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    /// The longest stretch of calls with gaps under 2 s (seconds): sustained use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_s: Option<f64>,
    /// The most severe thermal state the app reported during the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thermal: Option<Thermal>,
    /// Timed by the on-device probe, not by the app's own calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<bool>,
}

/// Success or failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It worked.
    Ok,
    /// It did not.
    Failed,
}

/// One telemetry event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryEvent {
    /// What happened.
    pub kind: EventKind,
    /// Model name.
    pub model: String,
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Delegate of the variant.
    pub delegate: String,
    /// Outcome.
    pub outcome: Outcome,
    /// Stable error code when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Load time in milliseconds (load events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_ms: Option<f64>,
    /// The install id.
    pub install_id: String,
    /// Platform.
    pub platform: String,
    /// SoC.
    pub soc: String,
    /// Device model.
    pub device_model: String,
    /// OS version.
    pub os_version: String,
    /// App version.
    pub app_version: String,
    /// ExecuTorch runtime version.
    pub runtime_version: String,
    /// When (RFC 3339).
    pub at: String,
    /// For fallback events: the variant moved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_variant: Option<String>,
    /// The receipt of the resolve answer this event is about (copied from it by the client);
    /// only events with a valid receipt count toward halts, ramps, deny entries and health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// For a failure, the stage it happened at, as the client's load report names it:
    /// `resolve`, `download`, `verify`, `load_program`, `load_method`, `golden` or `execute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// How far the device's wall clock was from the server's time when the event was made, in
    /// seconds (positive: ahead), when the client knew it; `at` is then the corrected time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_s: Option<i64>,
    /// For `inference` events: the summary of the runs.
    #[serde(flatten)]
    pub inference: InferenceFields,
    /// For `download` events: the bytes fetched from the server for the variant's files
    /// (with delta updates, less than `bytes_total`). Additive in v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_fetched: Option<u64>,
    /// For `download` events: the size of the variant's files that were not already cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_total: Option<u64>,
    /// For `download` events: what each blob source the client tried did (bytes served,
    /// failures), when the decision listed sources. Additive in v1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<crate::wire::sources::SourceUse>,
    /// For `metric` events: the app's metric. Additive in v1.
    #[serde(flatten)]
    pub metric: MetricFields,
}

/// The body of `POST /v1/telemetry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryBatch {
    /// The events.
    pub events: Vec<TelemetryEvent>,
}

/// The fields of a v1 telemetry event this build knows.
pub const EVENT_FIELDS: [&str; 34] = [
    "kind",
    "model",
    "release",
    "variant",
    "delegate",
    "outcome",
    "error_code",
    "load_ms",
    "install_id",
    "platform",
    "soc",
    "device_model",
    "os_version",
    "app_version",
    "runtime_version",
    "at",
    "to_variant",
    "receipt",
    "stage",
    "clock_offset_s",
    "method",
    "runs",
    "first_ms",
    "p50_ms",
    "p95_ms",
    "max_ms",
    "sustained_s",
    "thermal",
    "probe",
    "bytes_fetched",
    "bytes_total",
    "sources",
    "name",
    "value",
];

/// The event kinds this build knows, as they appear on the wire.
pub const EVENT_KINDS: [&str; 7] = [
    "download",
    "verify",
    "load",
    "fallback",
    "inference",
    "crash",
    "metric",
];

/// What a cheap look at one event's JSON text shows before it is parsed: the fields this build
/// does not know, and whether its `kind` is one a newer client added (protocol v1: such events
/// are ignored, not refused, so the client does not send them again).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EventPeek {
    /// Unknown top-level fields (at most [`crate::wire::protocol::MAX_UNKNOWN_FIELDS`]).
    pub unknown_fields: Vec<String>,
    /// The event's `kind` is a well-formed name (1–32 of `[a-z0-9_]`) this build does not know.
    pub unknown_kind: bool,
    /// The event's `kind` is text that is not a kind name at all (refused).
    pub malformed_kind: bool,
}

/// Looks at one event's JSON text (see [`EventPeek`]); an event that is not a JSON object
/// gives an empty peek (the full parse then refuses it).
pub fn peek_event(raw: &str) -> EventPeek {
    let Ok(map) =
        serde_json::from_str::<std::collections::BTreeMap<&str, &serde_json::value::RawValue>>(raw)
    else {
        return EventPeek::default();
    };
    let kind: Option<String> = map
        .get("kind")
        .and_then(|k| serde_json::from_str::<String>(k.get()).ok());
    let well_formed = |n: &str| {
        !n.is_empty()
            && n.len() <= 32
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    let unknown_kind = kind
        .as_deref()
        .is_some_and(|n| well_formed(n) && !EVENT_KINDS.contains(&n));
    let malformed_kind = kind.as_deref().is_some_and(|n| !well_formed(n));
    EventPeek {
        unknown_fields: map
            .keys()
            .filter(|k| !EVENT_FIELDS.contains(k))
            .take(crate::wire::protocol::MAX_UNKNOWN_FIELDS)
            .map(|k| k.to_string())
            .collect(),
        unknown_kind,
        malformed_kind,
    }
}

/// The event `raw` with only the fields this version knows (for reading an event whose unknown
/// fields nest deeper than the JSON reader's 128 levels allows in a flattened struct; protocol
/// v1 ignores unknown fields at any depth).
pub fn without_unknown_fields(raw: &str) -> Result<String, serde_json::Error> {
    let mut map = serde_json::from_str::<
        std::collections::BTreeMap<String, &serde_json::value::RawValue>,
    >(raw)?;
    map.retain(|k, _| EVENT_FIELDS.contains(&k.as_str()));
    serde_json::to_string(&map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_of_any_depth_are_dropped_and_known_ones_kept() {
        let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
        let raw = format!(r#"{{"kind":"load","future":{deep},"model":"m","x":{{"y":[1]}}}}"#);
        let kept = without_unknown_fields(&raw).expect("read");
        assert_eq!(kept, r#"{"kind":"load","model":"m"}"#);
        assert!(without_unknown_fields("[1,2]").is_err());
        assert!(without_unknown_fields(r#"{"kind":"lo"#).is_err());
    }

    #[test]
    fn a_newer_kind_and_newer_fields_are_seen_before_parsing() {
        let p = peek_event(r#"{"kind":"energy","joules":3.5,"model":"m"}"#);
        assert!(p.unknown_kind);
        assert_eq!(p.unknown_fields, vec!["joules"]);
        let p = peek_event(r#"{"kind":"inference","p95_ms":3.5,"model":"m"}"#);
        assert_eq!(p, EventPeek::default(), "inference is a v1 kind");
        let p = peek_event(r#"{"kind":"load","model":"m"}"#);
        assert_eq!(p, EventPeek::default());
        assert!(!peek_event(r#"{"kind":"Not A Kind"}"#).unknown_kind);
        assert!(peek_event(r#"{"kind":"Not A Kind"}"#).malformed_kind);
        assert!(peek_event(r#"{"kind":"inference2"}"#).unknown_kind);
        assert!(!peek_event(r#"{"kind":"load"}"#).malformed_kind);
        assert!(!peek_event(r#"{"kind":7}"#).unknown_kind);
        assert_eq!(peek_event("[]"), EventPeek::default());
    }

    #[test]
    fn the_known_fields_are_the_struct_fields() {
        let e = TelemetryEvent {
            kind: EventKind::Fallback,
            model: "m".into(),
            release: "1.0.0".into(),
            variant: "v".into(),
            delegate: "vulkan".into(),
            outcome: Outcome::Failed,
            error_code: Some("x".into()),
            load_ms: Some(1.0),
            install_id: "i".into(),
            platform: "android".into(),
            soc: "s".into(),
            device_model: "d".into(),
            os_version: "14".into(),
            app_version: "1.0.0".into(),
            runtime_version: "1.5.1".into(),
            at: "2026-12-01T00:00:00Z".into(),
            to_variant: Some("w".into()),
            receipt: Some("r".into()),
            stage: Some("load_method".into()),
            clock_offset_s: Some(-3600),
            inference: InferenceFields {
                method: Some("forward".into()),
                runs: Some(3),
                first_ms: Some(9.0),
                p50_ms: Some(1.0),
                p95_ms: Some(2.0),
                max_ms: Some(2.5),
                sustained_s: Some(0.5),
                thermal: Some(Thermal::Fair),
                probe: Some(false),
            },
            bytes_fetched: Some(1),
            bytes_total: Some(2),
            sources: vec![crate::wire::sources::SourceUse {
                source: "/v1/blobs/sha256/".into(),
                bytes: 2,
                failures: 0,
                error: None,
                encoded_bytes: 0,
                encoding_failures: 0,
            }],
            metric: MetricFields {
                name: Some("accepted".into()),
                value: Some(1.0),
            },
        };
        let v = serde_json::to_value(&e).expect("json");
        let back: TelemetryEvent = serde_json::from_value(v.clone()).expect("round trip");
        assert_eq!(back, e);
        let mut keys: Vec<&str> = v
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut known = EVENT_FIELDS.to_vec();
        known.sort_unstable();
        assert_eq!(keys, known);
    }
}
