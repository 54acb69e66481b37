//! Request limits: the `[limits]` section of the server configuration, enforced by the
//! HTTP layer (body sizes and times, connections per address, concurrent uploads).

use serde::Deserialize;

use crate::api::forwarded::{ClientAddressHeader, TrustedProxies};

/// Request limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest blob accepted by `PUT /v1/admin/blobs/...` (default 8 GiB, at most 16 GiB).
    pub max_blob_bytes: u64,
    /// Largest JSON body (default 1 MiB; release manifests with golden data can be large).
    pub max_json_bytes: usize,
    /// Largest resolve request body (default 256 KiB: room for a runtime's operator list, up
    /// to 4096 names, sent once per runtime).
    pub max_resolve_bytes: usize,
    /// Longest time a client may take to send a JSON body, in seconds (default 10): a client
    /// that trickles its body is cut off instead of holding a connection.
    pub body_timeout_secs: u64,
    /// Open connections one client address (IPv4, or IPv6 /64) may hold (default 1024; 0 turns
    /// the limit off). Beyond it a connection's requests get 429. Connections from
    /// `trusted_proxies` are not limited.
    pub max_connections_per_address: u32,
    /// Longest a whole blob upload may take, in seconds (default 3600).
    pub upload_timeout_secs: u64,
    /// Blob uploads served at once (default 4; more are refused with 429 `rate_limited`). Each
    /// holds at most 15 MiB of memory.
    pub max_concurrent_uploads: usize,
    /// Longest a request to an object store (S3) may take, in seconds (default 10); with two
    /// quick retries a write fails with `503 storage_unavailable` within about three times this
    /// when the store does not answer, instead of holding the operator's command for minutes.
    pub store_timeout_secs: u64,
    /// Decisions made for one request (resolves with a `nonce`, sent by devices whose clock
    /// cannot be trusted) one client address (IPv4, or IPv6 /64) may ask for per minute
    /// (default 600; more are refused with 429 `rate_limited`, and the client then takes the
    /// shared answer). Each costs a signature; the shared answers the other devices get cost
    /// none. 0 turns the limit off. Behind a proxy, list it in `trusted_proxies` so that the
    /// devices' own networks are limited, not the proxy's.
    pub fresh_decisions_per_minute: u32,
    /// Operator digests (`operators_digest` in a resolve) this replica does not hold in memory
    /// that one client address (IPv4, or IPv6 /64) may ask about per minute (default 120;
    /// 0: no limit). Each may cost a store read and an answer signed for it alone; a fleet has
    /// few distinct runtimes, which are in memory after their first request. More are refused
    /// with 429 `rate_limited` (the client then uses the answer it has).
    pub unknown_digests_per_minute: u32,
    /// Key requests for sealed variants (`POST /v1/keys/release`) one client address may make
    /// per minute (default 60; each install may make 6). More are refused with 429
    /// `rate_limited`; a device asks once per sealed release it loads.
    pub key_requests_per_minute: u32,
    /// Longest a connection's answers may wait for its client to read them, in seconds
    /// (default 60): a connection whose client stopped reading is closed, and while an answer
    /// cannot go out, no further request on that connection is read (pipelined requests wait
    /// in the client's socket, not in the server's memory). A slow client that keeps reading
    /// is never cut.
    pub write_timeout_secs: u64,
    /// Networks of the proxies in front of this server (load balancers, a CDN's edges, nginx),
    /// as addresses or CIDR networks (default none). A request from one of them is counted
    /// against the address its forwarding header names (the rightmost hop that is not itself
    /// a trusted proxy): per-address limits and the network quorum of learned deny entries
    /// then see the devices behind the proxy. Their connections are not limited per address.
    #[serde(deserialize_with = "networks")]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The header the trusted proxies name their client in: `x-forwarded-for` (default) or
    /// `forwarded` (RFC 7239). Only this one is read.
    pub client_address_header: ClientAddressHeader,
}

/// Reads a list of networks, each an address (a network of one) or in CIDR notation.
fn networks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ipnet::IpNet>, D::Error> {
    let list = Vec::<String>::deserialize(d)?;
    list.iter()
        .map(|s| {
            let s = s.trim();
            let net = s
                .parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "trusted_proxies: {s:?} is not an address or a network such as \
                         10.0.0.0/8 or 2001:db8::/32"
                    ))
                })?;
            // A network written with host bits (10.1.2.3/8) is most likely a typo for one
            // host: trusting the whole network would let its every address pick its own.
            if net != net.trunc() {
                return Err(serde::de::Error::custom(format!(
                    "trusted_proxies: {s:?} has bits set past its prefix: write the network \
                     ({}) or the one address ({})",
                    net.trunc(),
                    net.addr()
                )));
            }
            Ok(net)
        })
        .collect()
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_blob_bytes: 8 << 30,
            max_json_bytes: 1 << 20,
            max_resolve_bytes: 256 << 10,
            body_timeout_secs: 10,
            max_connections_per_address: 1024,
            upload_timeout_secs: 3600,
            max_concurrent_uploads: 4,
            store_timeout_secs: 10,
            fresh_decisions_per_minute: 600,
            unknown_digests_per_minute: 120,
            key_requests_per_minute: 60,
            write_timeout_secs: 60,
            trusted_proxies: Vec::new(),
            client_address_header: ClientAddressHeader::default(),
        }
    }
}

/// The most `max_blob_bytes` may be: 16 GiB, the largest file a manifest signs.
pub const MAX_BLOB_BYTES: u64 = 16 << 30;

impl Limits {
    /// Checks every value is in its range; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_BLOB_BYTES).contains(&self.max_blob_bytes) {
            return Err(format!(
                "max_blob_bytes must be between 1 and {MAX_BLOB_BYTES} (16 GiB, the largest file \
                 a release manifest may sign)"
            ));
        }
        if !(1..=600).contains(&self.store_timeout_secs) {
            return Err("store_timeout_secs must be between 1 and 600".into());
        }
        if !(10..=86_400).contains(&self.upload_timeout_secs) {
            return Err("upload_timeout_secs must be between 10 and 86400".into());
        }
        if !(1..=1024).contains(&self.max_concurrent_uploads) {
            return Err("max_concurrent_uploads must be between 1 and 1024".into());
        }
        if !(1..=3600).contains(&self.write_timeout_secs) {
            return Err("write_timeout_secs must be between 1 and 3600".into());
        }
        if !(1..=600).contains(&self.body_timeout_secs) {
            return Err("body_timeout_secs must be between 1 and 600".into());
        }
        if self.unknown_digests_per_minute > 1_000_000 {
            return Err(
                "unknown_digests_per_minute must be between 0 (no limit) and 1000000".into(),
            );
        }
        if !(1..=1_000_000).contains(&self.key_requests_per_minute) {
            return Err("key_requests_per_minute must be between 1 and 1000000".into());
        }
        if self.fresh_decisions_per_minute > 1_000_000 {
            return Err(
                "fresh_decisions_per_minute must be between 0 (no limit) and 1000000".into(),
            );
        }
        if self.max_json_bytes < 1024 || self.max_resolve_bytes < 1024 {
            return Err("max_json_bytes and limits.max_resolve_bytes must be at least 1024".into());
        }
        Ok(())
    }

    /// The proxies whose forwarding header is believed.
    pub fn proxies(&self) -> TrustedProxies<'_> {
        TrustedProxies {
            networks: &self.trusted_proxies,
            header: self.client_address_header,
        }
    }

    /// The time limits of one blob upload.
    pub fn upload_time(&self) -> crate::release::publish::UploadTime {
        crate::release::publish::UploadTime {
            idle: std::time::Duration::from_secs(self.body_timeout_secs),
            total: std::time::Duration::from_secs(self.upload_timeout_secs),
        }
    }
}
