//! The `[telemetry]` config section: what every room of the fleet is configured by (intake's
//! limits, the deny and latency thresholds the actions apply, the flush, buffering, compaction
//! and retention of persist). The bottom of `fleet`: imports nothing of the crate.

use serde::Deserialize;

/// Most SDK names one client network (IPv4 /24, IPv6 /48) vouches for in an hour, on each
/// replica (see
/// [`TelemetryConfig::census_min_networks`]).
pub const SDK_NAMES_PER_NETWORK_PER_HOUR: usize = 4;

/// The `[telemetry]` section: ingestion limits, thresholds, flushing and retention.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Most events per request (default 500).
    pub max_events: usize,
    /// Largest body (default 1 MiB).
    pub max_body_bytes: usize,
    /// Events one install id may send per minute (default 600).
    pub per_install_per_minute: u32,
    /// Requests one client address may make per minute (default 6,000).
    pub per_address_per_minute: u32,
    /// A variant is denied to a SoC or device model whose fallback rate reaches this (default 0.25).
    pub deny_fallback_rate: f64,
    /// Attempts needed before a deny (default 100).
    pub deny_min_samples: u64,
    /// Distinct devices (with receipts) needed before a deny (default 20): one device, or a
    /// few, cannot deny a class its variant however many events they send.
    pub deny_min_devices: u64,
    /// Distinct client networks (IPv4 /24, IPv6 /48) the events of a learned entry (fallback,
    /// `slow_in_field`, `crashed_in_field`) must come from (default 3): one host or one subnet
    /// cannot deny a class its variant. Behind a proxy, list it in `limits.trusted_proxies` so
    /// the devices' own networks are seen. 0 turns the quorum off (a test fleet on one host).
    pub deny_min_networks: u64,
    /// New install ids one client address may bring into the evidence (the counts behind
    /// rates, halts, ramps and learned entries) per hour (default 50; 0: no limit). Events of
    /// further installs are accepted and kept in the raw log; their devices are served.
    pub evidence_installs_per_address_per_hour: u32,
    /// Distinct client networks whose receipted telemetry must name an SDK (its `Ferry-Sdk`
    /// value) before it takes a row of its own in the client census and a label of its own in
    /// `ferry_device_requests_total` (default 3): until then its devices count under `other`,
    /// so made-up names cannot push the real SDKs out. Each network vouches for at most
    /// [`SDK_NAMES_PER_NETWORK_PER_HOUR`] names an hour. 0: every name takes a row, first come
    /// (a test fleet on one host).
    pub census_min_networks: u64,
    /// Distinct devices (with receipts) on one SoC or device model whose `inference` events
    /// a variant needs before its field latency reorders the candidates there (default 20).
    pub latency_min_devices: u64,
    /// How often raw events and rollups are flushed to the store, in seconds (default 10).
    pub flush_secs: u64,
    /// Oldest accepted event age in days (default 30); newer than now + 1 hour is refused.
    pub max_age_days: i64,
    /// The aggregation interval: thresholds and the deny list are evaluated at most this often
    /// per model, in milliseconds (default 1000; 0 evaluates after every batch).
    pub evaluate_ms: u64,
    /// Raw events buffered before a flush is started early (default 20,000); at 5x this the
    /// oldest buffered events are dropped and counted.
    pub raw_buffer_events: usize,
    /// Longest a raw event waits in the buffer before its Parquet file is written, in seconds
    /// (default 60; a graceful stop writes at once).
    pub raw_roll_secs: u64,
    /// Whether the telemetry journal forces each group of batches to the disk (`fdatasync`)
    /// before answering (default false). Without it an accepted event survives a killed or
    /// crashed server (it is in the kernel's page cache); with it, a power cut too, at about a
    /// third of the ingest rate on this machine (`docs/performance.md`).
    pub journal_sync: bool,
    /// Days the compacted telemetry buckets (health, halts, windows) are kept (default 90).
    pub retention_days: u32,
    /// How often a replica tries to compact old telemetry buckets, in seconds (default 60; one
    /// replica at a time does, the holder of the lease).
    pub compact_secs: u64,
    /// Days after which a stored operator set (`operators/sha256/`) that no device sent in
    /// that time is deleted (default 30; `retention_days` when that is shorter: the counts it
    /// is judged by are kept that long). The replica holding the compaction lease looks once
    /// an hour.
    pub operator_sets_unused_days: u32,
    /// Days the raw Parquet files are kept (default 90): older `date=` folders are deleted by
    /// the replica that compacts.
    pub raw_retention_days: u32,
}

impl TelemetryConfig {
    /// Checks every value is in its range; the error names the key (`flush_secs must be ...`).
    pub fn validate(&self) -> Result<(), String> {
        let t = self;
        for (name, value, range) in [
            ("flush_secs", t.flush_secs, 1..=3600),
            (
                "latency_min_devices",
                t.latency_min_devices,
                1..=1_000_000_000,
            ),
            ("raw_roll_secs", t.raw_roll_secs, 1..=86_400),
            ("compact_secs", t.compact_secs, 1..=86_400),
            (
                "raw_buffer_events",
                t.raw_buffer_events as u64,
                1..=1_000_000,
            ),
            ("retention_days", u64::from(t.retention_days), 1..=36_500),
            (
                "raw_retention_days",
                u64::from(t.raw_retention_days),
                1..=36_500,
            ),
            ("max_events", t.max_events as u64, 1..=100_000),
            (
                "operator_sets_unused_days",
                u64::from(t.operator_sets_unused_days),
                1..=36_500,
            ),
        ] {
            if !range.contains(&value) {
                return Err(format!(
                    "{name} must be between {} and {}",
                    range.start(),
                    range.end()
                ));
            }
        }
        Ok(())
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            max_events: 500,
            max_body_bytes: 1 << 20,
            per_install_per_minute: 600,
            per_address_per_minute: 6000,
            deny_fallback_rate: 0.25,
            deny_min_samples: 100,
            deny_min_devices: 20,
            deny_min_networks: 3,
            evidence_installs_per_address_per_hour: 50,
            census_min_networks: 3,
            latency_min_devices: 20,
            flush_secs: 10,
            max_age_days: 30,
            evaluate_ms: 1000,
            raw_buffer_events: 20_000,
            raw_roll_secs: 60,
            journal_sync: false,
            retention_days: 90,
            compact_secs: 60,
            raw_retention_days: 90,
            operator_sets_unused_days: 30,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_retention_still_validates() {
        let c = TelemetryConfig {
            retention_days: 20,
            ..TelemetryConfig::default()
        };
        assert!(
            c.validate().is_ok(),
            "operator sets are then judged over 20 days"
        );
        let zero = TelemetryConfig {
            operator_sets_unused_days: 0,
            ..TelemetryConfig::default()
        };
        assert!(zero.validate().is_err());
    }
}
