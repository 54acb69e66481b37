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
}

/// The body of `POST /v1/telemetry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryBatch {
    /// The events.
    pub events: Vec<TelemetryEvent>,
}
