//! The server's Prometheus metrics, kept in a `prometheus-client` registry and rendered in the
//! OpenMetrics text format (which Prometheus scrapes as it does its own format).
//!
//! Kept per server instance (not a process-global registry), so several servers in one test
//! process do not share counts. Every label takes values from a bounded set (route patterns,
//! known HTTP methods, status codes, catalogue codes), so no request can grow the registry.
//!
//! Bottom layer: imports only `ferry-shared`.

pub mod protocol;
pub mod sources;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Latency buckets in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// HTTP methods kept as label values; any other method is counted as `other`.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CohortLabels {
    model: String,
    cohort: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The registry and handles to each metric in it.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RouteLabels, Histogram, fn() -> Histogram>,
    resolves: Family<OutcomeLabels, Counter>,
    fresh_decisions: Family<OutcomeLabels, Counter>,
    operator_sets: Family<OutcomeLabels, Counter>,
    log_lines_dropped: Counter,
    signed_times: Family<OutcomeLabels, Counter>,
    publishes: Family<OutcomeLabels, Counter>,
    telemetry_events: Family<OutcomeLabels, Counter>,
    telemetry_raw_dropped: Counter,
    blob_bytes: Counter,
    grouped_zstd_answers: Counter,
    key_releases: Family<OutcomeLabels, Counter>,
    resident_bytes: Gauge,
    open_fds: Gauge,
    rollout_basis_points: Family<ModelLabels, Gauge>,
    rollout_active: Family<ModelLabels, Gauge>,
    deny_entries: Family<ModelLabels, Gauge>,
    rollout_halted: Family<ModelLabels, Gauge>,
    ramp_step: Family<ModelLabels, Gauge>,
    failure_rate: Family<CohortLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    fallback_rate: Family<CohortLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    no_variant: Family<ModelLabels, Counter>,
    cpu_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    store_up: Gauge,
    /// Protocol versions and SDKs on the device endpoints, and unknown fields.
    pub protocol: crate::metrics::protocol::ProtocolMetrics,
    /// What devices report of the blob sources they fetched from.
    pub sources: crate::metrics::sources::SourceMetrics,
}

/// Fleet-wide figures of one model for [`Metrics::model_state`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelState {
    /// Share of devices offered the staged release (basis points, 0 without one).
    pub staged_basis_points: u32,
    /// A staged release is rolling out.
    pub active: bool,
    /// The rollout was halted (automatically or by an operator).
    pub halted: bool,
    /// Index of the current ramp step, if the rollout ramps.
    pub ramp_step: Option<u32>,
    /// Entries in the deny list.
    pub deny: usize,
    /// (load-failure rate, fallback rate) of the staged release, if any, from telemetry.
    pub staged_rates: Option<(f64, f64)>,
    /// The same for the baseline.
    pub baseline_rates: Option<(f64, f64)>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let protocol = crate::metrics::protocol::ProtocolMetrics::register(&mut registry);
        let sources = crate::metrics::sources::SourceMetrics::register(&mut registry);
        let mut m = Self {
            protocol,
            sources,
            registry,
            requests: Family::<RequestLabels, Counter>::default(),
            durations: Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            ),
            resolves: Family::<OutcomeLabels, Counter>::default(),
            fresh_decisions: Family::<OutcomeLabels, Counter>::default(),
            operator_sets: Family::<OutcomeLabels, Counter>::default(),
            log_lines_dropped: Counter::default(),
            signed_times: Family::<OutcomeLabels, Counter>::default(),
            publishes: Family::<OutcomeLabels, Counter>::default(),
            telemetry_events: Family::<OutcomeLabels, Counter>::default(),
            telemetry_raw_dropped: Counter::default(),
            blob_bytes: Counter::default(),
            grouped_zstd_answers: Counter::default(),
            key_releases: Family::<OutcomeLabels, Counter>::default(),
            resident_bytes: Gauge::default(),
            open_fds: Gauge::default(),
            rollout_basis_points: Family::<ModelLabels, Gauge>::default(),
            rollout_active: Family::<ModelLabels, Gauge>::default(),
            deny_entries: Family::<ModelLabels, Gauge>::default(),
            rollout_halted: Family::<ModelLabels, Gauge>::default(),
            ramp_step: Family::<ModelLabels, Gauge>::default(),
            failure_rate: Family::<CohortLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default(
            ),
            fallback_rate:
                Family::<CohortLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default(),
            no_variant: Family::<ModelLabels, Counter>::default(),
            cpu_seconds: Counter::<f64, std::sync::atomic::AtomicU64>::default(),
            store_up: Gauge::default(),
        };
        m.register_all();
        m.store_up.set(1);
        m
    }
}

impl Metrics {
    /// Registers every series with its name and help text.
    fn register_all(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "ferry_http_requests",
            "HTTP requests answered, by route pattern, method and status",
            self.requests.clone(),
        );
        registry.register(
            "ferry_http_request_duration_seconds",
            "Time from request to response, by route pattern",
            self.durations.clone(),
        );
        registry.register(
            "ferry_resolves",
            "Resolve requests, by outcome (ok or the error code)",
            self.resolves.clone(),
        );
        registry.register(
            "ferry_key_releases",
            "Key requests for sealed variants, by outcome (ok or the error code)",
            self.key_releases.clone(),
        );
        registry.register(
            "ferry_fresh_decisions",
            "Resolves that asked for a decision of their own (a nonce): signed, or refused by the per-address limit",
            self.fresh_decisions.clone(),
        );
        registry.register(
            "ferry_operator_sets",
            "Operator sets and digests in resolves, by outcome: known (in memory), found or unknown (a store read), limited (the per-address limit on unknown digests), stored, or not stored because an hourly allowance (address_allowance_spent, model_allowance_spent) is used up",
            self.operator_sets.clone(),
        );
        registry.register(
            "ferry_request_log_lines_dropped",
            "Access-log lines of client errors (4xx) not written because more than the log's budget a second came",
            self.log_lines_dropped.clone(),
        );
        registry.register(
            "ferry_signed_times",
            "Signed time answers (GET /v1/time): signed, or refused by the per-address limit it shares with decisions of their own",
            self.signed_times.clone(),
        );
        registry.register(
            "ferry_publishes",
            "Release publishes, by outcome (ok or the error code)",
            self.publishes.clone(),
        );
        registry.register(
            "ferry_telemetry_events",
            "Telemetry events received, accepted or rejected",
            self.telemetry_events.clone(),
        );
        registry.register(
            "ferry_telemetry_raw_dropped",
            "Raw telemetry events not archived because the store could not keep up",
            self.telemetry_raw_dropped.clone(),
        );
        registry.register(
            "ferry_blob_bytes_served",
            "Bytes of model blobs sent to clients (counted as they are sent)",
            self.blob_bytes.clone(),
        );
        registry.register(
            "ferry_blob_grouped_zstd_answers",
            "Whole-blob answers sent in the ferry-grouped-zstd encoding (the client asked for it \
             and ferry publish stored one)",
            self.grouped_zstd_answers.clone(),
        );
        registry.register(
            "ferry_process_resident_memory_bytes",
            "Resident memory of the server process",
            self.resident_bytes.clone(),
        );
        registry.register(
            "ferry_process_open_fds",
            "Open file descriptors of the server process (connections included)",
            self.open_fds.clone(),
        );
        registry.register(
            "ferry_rollout_staged_basis_points",
            "Share of devices offered the staged release, in basis points (0 without one)",
            self.rollout_basis_points.clone(),
        );
        registry.register(
            "ferry_rollout_active",
            "1 while a staged release is rolling out (active), else 0 (halted, paused, none)",
            self.rollout_active.clone(),
        );
        registry.register(
            "ferry_deny_entries",
            "Entries in the model's deny list",
            self.deny_entries.clone(),
        );
        registry.register(
            "ferry_rollout_halted",
            "1 while the model's rollout is halted (automatically or by an operator)",
            self.rollout_halted.clone(),
        );
        registry.register(
            "ferry_rollout_ramp_step",
            "Index of the current step of a health-gated ramp (models that ramp only)",
            self.ramp_step.clone(),
        );
        registry.register(
            "ferry_release_failure_rate",
            "Load-failure rate of the staged and baseline releases, fleet-wide (0-1)",
            self.failure_rate.clone(),
        );
        registry.register(
            "ferry_release_fallback_rate",
            "Fallback rate of the staged and baseline releases, fleet-wide (0-1)",
            self.fallback_rate.clone(),
        );
        registry.register(
            "ferry_no_compatible_variant",
            "Resolves answered no_compatible_variant, by model",
            self.no_variant.clone(),
        );
        registry.register(
            "ferry_process_cpu_seconds",
            "CPU time (user and system) the server process used",
            self.cpu_seconds.clone(),
        );
        registry.register(
            "ferry_store_up",
            "1 when the object store answered the last listing, 0 when it did not",
            self.store_up.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "ferry_build_info",
            "The running server's version (always 1)",
            build,
        );
    }
}

/// The label value for an HTTP method: itself when it is a standard method, else `other`.
fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

impl Metrics {
    /// Counts one answered request and its latency.
    pub fn http_request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_string(),
                method: method_label(method),
                status,
            })
            .inc();
        self.durations
            .get_or_create(&RouteLabels {
                route: route.to_string(),
            })
            .observe(seconds);
    }

    /// Counts one key request by outcome (`ok` or a catalogue code).
    pub fn key_release(&self, outcome: &'static str) {
        self.key_releases
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts one resolve by outcome (`ok` or a catalogue code).
    pub fn resolve(&self, outcome: &'static str) {
        self.resolves
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts one request for a decision of its own (`signed` or `limited`).
    pub fn fresh_decision(&self, outcome: &'static str) {
        self.fresh_decisions
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts one operator set or digest a resolve carried, by outcome (see the metric's help).
    pub fn operator_set(&self, outcome: &'static str) {
        self.operator_sets
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts access-log lines of client errors left out over the budget.
    pub fn log_lines_dropped(&self, n: u64) {
        self.log_lines_dropped.inc_by(n);
    }

    /// Counts one request for the signed time (`signed` or `limited`).
    pub fn signed_time(&self, outcome: &'static str) {
        self.signed_times
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts one publish by outcome (`ok` or a catalogue code).
    pub fn publish(&self, outcome: &'static str) {
        self.publishes
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts telemetry events accepted and rejected by one batch, and the accepted ones that
    /// weigh in nothing (`unweighed`: their address brought its allowance of new installs this
    /// hour).
    pub fn telemetry(&self, accepted: u64, rejected: u64, unweighed: u64) {
        if unweighed > 0 {
            self.telemetry_events
                .get_or_create(&OutcomeLabels {
                    outcome: "unweighed",
                })
                .inc_by(unweighed);
        }
        self.telemetry_events
            .get_or_create(&OutcomeLabels {
                outcome: "accepted",
            })
            .inc_by(accepted);
        self.telemetry_events
            .get_or_create(&OutcomeLabels {
                outcome: "rejected",
            })
            .inc_by(rejected);
    }

    /// The counter of blob bytes sent, for a body that adds its pieces as they go out (a cut
    /// download counts what was sent, not what was asked for).
    pub fn blob_bytes_counter(&self) -> Counter {
        self.blob_bytes.clone()
    }

    /// Counts one whole-blob answer sent in the `ferry-grouped-zstd` encoding.
    pub fn grouped_zstd_answer(&self) {
        self.grouped_zstd_answers.inc();
    }

    /// Brings the raw-telemetry drop counter up to `total` (kept by the telemetry writer).
    pub fn telemetry_raw_dropped(&self, total: u64) {
        let seen = self.telemetry_raw_dropped.get();
        if total > seen {
            self.telemetry_raw_dropped.inc_by(total - seen);
        }
    }

    /// Reads the process's resident memory and open descriptors (Linux `/proc`; left as they
    /// were elsewhere).
    pub fn sample_process(&self) {
        if let Ok(statm) = std::fs::read_to_string("/proc/self/statm")
            && let Some(pages) = statm
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<i64>().ok())
        {
            self.resident_bytes.set(pages * 4096);
        }
        if let Ok(rd) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(rd.count() as i64);
        }
        // utime and stime, fields 14 and 15 of /proc/self/stat, in clock ticks (100 a second
        // on Linux). The command name (field 2) may hold spaces: count from its closing ')'.
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
            && let Some((_, rest)) = stat.rsplit_once(')')
        {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
                let total = (user + system) as f64 / 100.0;
                let seen = self.cpu_seconds.get();
                if total > seen {
                    self.cpu_seconds.inc_by(total - seen);
                }
            }
        }
    }

    /// Sets one model's rollout, health and deny-list gauges.
    pub fn model_state(&self, model: &str, m: &ModelState) {
        let labels = ModelLabels {
            model: model.to_string(),
        };
        self.rollout_basis_points
            .get_or_create(&labels)
            .set(i64::from(m.staged_basis_points));
        self.rollout_active
            .get_or_create(&labels)
            .set(i64::from(m.active));
        self.rollout_halted
            .get_or_create(&labels)
            .set(i64::from(m.halted));
        match m.ramp_step {
            Some(step) => {
                self.ramp_step.get_or_create(&labels).set(i64::from(step));
            }
            None => {
                self.ramp_step.remove(&labels);
            }
        }
        self.deny_entries.get_or_create(&labels).set(m.deny as i64);
        for (cohort, rates) in [("staged", m.staged_rates), ("baseline", m.baseline_rates)] {
            let l = CohortLabels {
                model: model.to_string(),
                cohort,
            };
            match rates {
                Some((failures, fallbacks)) => {
                    self.failure_rate.get_or_create(&l).set(failures);
                    self.fallback_rate.get_or_create(&l).set(fallbacks);
                }
                None => {
                    self.failure_rate.remove(&l);
                    self.fallback_rate.remove(&l);
                }
            }
        }
    }

    /// Counts a `no_compatible_variant` answer for `model` (a published model: bounded).
    pub fn no_compatible_variant(&self, model: &str) {
        self.no_variant
            .get_or_create(&ModelLabels {
                model: model.to_string(),
            })
            .inc();
    }

    /// Notes whether the store answered the last listing.
    pub fn store_up(&self, up: bool) {
        self.store_up.set(i64::from(up));
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_help_types_and_bounded_labels() {
        let m = Metrics::default();
        m.http_request("/v1/resolve", "POST", 200, 0.003);
        m.http_request("/v1/resolve", "POST", 200, 0.2);
        m.http_request("unmatched", "XYZZY", 404, 0.001);
        m.publish("ok");
        let text = m.render();
        for want in [
            "# HELP ferry_http_requests HTTP requests answered",
            "# TYPE ferry_http_requests counter",
            "ferry_http_requests_total{route=\"/v1/resolve\",method=\"POST\",status=\"200\"} 2",
            "ferry_http_requests_total{route=\"unmatched\",method=\"other\",status=\"404\"} 1",
            "ferry_http_request_duration_seconds_bucket{le=\"0.005\",route=\"/v1/resolve\"} 1",
            "ferry_http_request_duration_seconds_count{route=\"/v1/resolve\"} 2",
            "ferry_publishes_total{outcome=\"ok\"} 1",
            "ferry_build_info{version=\"",
            "# EOF",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(!text.contains("XYZZY"), "{text}");
    }
}
