//! Metrics about blob sources, from what devices report in their `download` events: how many
//! bytes each source served and how often devices gave up on one (for operators: "is the CDN
//! serving?").
//!
//! A source is labelled by its text when this server's configuration lists it, and `other`
//! otherwise (a device's report cannot grow the registry); the error label takes the client's
//! stable codes, any other text as `other`.

use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::sources::SourceUse;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The failure codes a client reports for a source, kept as label values.
const ERRORS: [ErrorCode; 6] = [
    ErrorCode::Network,
    ErrorCode::BlobNotFound,
    ErrorCode::HashMismatch,
    ErrorCode::SizeMismatch,
    ErrorCode::BadResponse,
    ErrorCode::ServerCertificateInvalid,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    source: String,
    error: &'static str,
}

/// The source counters.
#[derive(Debug)]
pub struct SourceMetrics {
    bytes: Family<SourceLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
}

impl SourceMetrics {
    /// Creates the counters and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let bytes = Family::<SourceLabels, Counter>::default();
        registry.register(
            "ferry_source_bytes",
            "Blob bytes devices report each source served them (checked against the signed digests), by source",
            bytes.clone(),
        );
        let failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "ferry_source_failures",
            "Times devices report giving up on a source during a download, by source and error code",
            failures.clone(),
        );
        Self { bytes, failures }
    }

    /// Counts one download's report `used`, labelling sources by `configured` (others as
    /// `other`).
    pub fn report(&self, used: &[SourceUse], configured: &[String]) {
        for u in used {
            let source = if configured.contains(&u.source) {
                u.source.clone()
            } else {
                "other".to_string()
            };
            if u.bytes > 0 {
                self.bytes
                    .get_or_create(&SourceLabels {
                        source: source.clone(),
                    })
                    .inc_by(u.bytes);
            }
            if u.failures > 0 {
                let error = u
                    .error
                    .as_deref()
                    .and_then(|e| ERRORS.iter().map(|k| k.as_str()).find(|k| *k == e))
                    .unwrap_or("other");
                self.failures
                    .get_or_create(&FailureLabels { source, error })
                    .inc_by(u64::from(u.failures));
            }
        }
    }
}
