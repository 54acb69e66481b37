//! The names of ferry's own experiment metrics.

/// Share of the device's loads that failed.
pub const LOAD_FAILURE: &str = "load_failure";
/// Whether the device fell back from a variant (0 or 1).
pub const FALLBACK: &str = "fallback";
/// Whether a variant crashed the app on the device (0 or 1).
pub const CRASH: &str = "crash";
/// The mean of the device's warm p95 latencies (ms).
pub const LATENCY: &str = "latency_p95_ms";
/// The bytes the device downloaded for the model.
pub const DOWNLOAD_BYTES: &str = "download_bytes";

/// ferry's own metrics, lower is better for each.
pub const OWN: [&str; 5] = [LOAD_FAILURE, FALLBACK, CRASH, LATENCY, DOWNLOAD_BYTES];
