//! Metrics about the device protocol: which protocol versions and SDKs call the device
//! endpoints, and which request fields this server did not know (protocol v1's tolerant
//! readers ignore them; these counters show an operator what newer clients send).
//!
//! Label values come from the requests, so each label keeps at most [`MAX_VALUES`] distinct
//! values; any further value is counted as `other`.

use std::collections::HashSet;
use std::sync::Mutex;

use ferry_shared::wire::protocol::{Protocol, Sdk};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Most distinct values one request-derived label keeps (per endpoint for field names).
pub const MAX_VALUES: usize = 32;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    endpoint: &'static str,
    protocol: String,
    sdk: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FieldLabels {
    endpoint: &'static str,
    field: String,
}

/// A set of label values that stops growing at [`MAX_VALUES`].
#[derive(Debug, Default)]
struct Bounded(Mutex<HashSet<String>>);

impl Bounded {
    /// `value` itself while there is room for it (or it is already kept), else `other`.
    fn label(&self, value: &str) -> String {
        let mut set = ferry_shared::sync::lock(&self.0);
        if set.contains(value) || (set.len() < MAX_VALUES && set.insert(value.to_string())) {
            value.to_string()
        } else {
            "other".to_string()
        }
    }
}

/// The protocol counters.
#[derive(Debug)]
pub struct ProtocolMetrics {
    clients: Family<ClientLabels, Counter>,
    unknown: Family<FieldLabels, Counter>,
    sdks: Bounded,
    /// Field names, per endpoint: junk in one endpoint's requests cannot crowd out another's.
    resolve_fields: Bounded,
    telemetry_fields: Bounded,
}

impl ProtocolMetrics {
    /// Creates the counters and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let clients = Family::<ClientLabels, Counter>::default();
        registry.register(
            "ferry_device_requests",
            "Device requests by endpoint, Ferry-Protocol (legacy: none sent) and Ferry-Sdk",
            clients.clone(),
        );
        let unknown = Family::<FieldLabels, Counter>::default();
        registry.register(
            "ferry_protocol_unknown_fields",
            "Fields this server does not know, ignored in device requests and telemetry events, by name",
            unknown.clone(),
        );
        Self {
            clients,
            unknown,
            sdks: Bounded::default(),
            resolve_fields: Bounded::default(),
            telemetry_fields: Bounded::default(),
        }
    }

    /// Counts one request to `endpoint` (`resolve`, `telemetry`, `blobs`, ...). An SDK has a
    /// label of its own once `vouched` says devices vouched for its name (see
    /// `fleet::census::clients::Vouched`); until then it counts as `other`.
    pub fn client(
        &self,
        endpoint: &'static str,
        protocol: Protocol,
        sdk: Option<&Sdk>,
        vouched: &dyn Fn(&str) -> bool,
    ) {
        let sdk = sdk.map_or_else(
            || "unknown".to_string(),
            |s| {
                let name = s.header_value();
                if vouched(&name) {
                    self.sdks.label(&name)
                } else {
                    "other".to_string()
                }
            },
        );
        self.clients
            .get_or_create(&ClientLabels {
                endpoint,
                protocol: protocol.label(),
                sdk,
            })
            .inc();
    }

    /// Counts fields of a request to `endpoint` that this server does not know. Names that
    /// are not `[A-Za-z0-9_]`, 1–40 characters, are counted as `other`.
    pub fn unknown_fields(&self, endpoint: &'static str, fields: &[String]) {
        for f in fields {
            let plain = !f.is_empty()
                && f.len() <= 40
                && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            let kept = if endpoint == "telemetry" {
                &self.telemetry_fields
            } else {
                &self.resolve_fields
            };
            let field = if plain {
                kept.label(f)
            } else {
                "other".to_string()
            };
            self.unknown
                .get_or_create(&FieldLabels { endpoint, field })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_stay_bounded_whatever_clients_send() {
        let mut registry = Registry::default();
        let m = ProtocolMetrics::register(&mut registry);
        for i in 0..500 {
            let sdk = Sdk::from_header(Some(format!("sdk-{i}/1.0").as_bytes()));
            m.client("resolve", Protocol::V(i % 7 + 1), sdk.as_ref(), &|_| true);
            m.unknown_fields("resolve", &[format!("field_{i}"), "bad name!".into()]);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        let sdks: HashSet<&str> = out
            .lines()
            .filter(|l| l.starts_with("ferry_device_requests_total"))
            .filter_map(|l| l.split("sdk=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(sdks.len(), MAX_VALUES + 1, "{sdks:?}");
        assert!(sdks.contains("other"));
        let fields = out
            .lines()
            .filter(|l| l.starts_with("ferry_protocol_unknown_fields_total"))
            .count();
        assert_eq!(fields, MAX_VALUES + 1);
        assert!(out.contains("field=\"field_0\"} 1"), "{out}");
    }

    #[test]
    fn names_nobody_vouched_for_take_no_label() {
        let mut registry = Registry::default();
        let m = ProtocolMetrics::register(&mut registry);
        let real = |name: &str| name == "ferry-client-rust/0.3.0";
        for i in 0..100 {
            let junk = Sdk::from_header(Some(format!("junk-{i}/1").as_bytes()));
            m.client("resolve", Protocol::V(1), junk.as_ref(), &real);
        }
        let rust = Sdk::from_header(Some(b"ferry-client-rust/0.3.0"));
        m.client("resolve", Protocol::V(1), rust.as_ref(), &real);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        assert!(out.contains(r#"protocol="1",sdk="other"} 100"#), "{out}");
        assert!(
            out.contains(r#"protocol="1",sdk="ferry-client-rust/0.3.0"} 1"#),
            "{out}"
        );
        assert!(!out.contains("junk-"), "{out}");
    }
}
