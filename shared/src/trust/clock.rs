//! The signed time answer (`GET /v1/time?nonce=…`): the server's time, bound to one request's
//! nonce and signed by the online key. A device learns the time from it before anything else
//! needs a clock, the certificate check of an HTTPS connection included: its integrity comes
//! from the signature and the nonce, so it may be fetched over a connection whose certificate
//! dates were not checked (`docs/protocol.md`, freshness without the device's clock).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::trust::dsse::Envelope;

/// The DSSE payload type of a signed time.
pub const TIME_PAYLOAD_TYPE: &str = "application/vnd.ferry.time+json";

/// The signed payload: the server's time when it answered one nonce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedTime {
    /// The payload's format (absent: 1; see [`crate::wire::protocol::FORMAT`]).
    #[serde(
        default = "crate::wire::protocol::format_one",
        skip_serializing_if = "crate::wire::protocol::is_format_one"
    )]
    pub format: u32,
    /// The request's nonce ([`crate::wire::resolve::check_nonce`]).
    pub nonce: String,
    /// The server's time when it signed.
    #[serde(with = "time::serde::rfc3339")]
    pub time: OffsetDateTime,
    /// The keyring version whose online key signed it (0 for a fixed trust file): a device
    /// holding an older one walks `GET /v1/keyring` first.
    #[serde(default)]
    pub keyring_version: u64,
}

impl SignedTime {
    /// Parses a signed time payload: its `format` first, then the fields; unknown fields are
    /// ignored.
    pub fn from_json(bytes: &[u8]) -> Result<SignedTime, String> {
        crate::wire::protocol::check_format("time", bytes).map_err(|e| e.to_string())?;
        serde_json::from_slice(bytes).map_err(|e| format!("signed time: {e}"))
    }
}

/// The answer to `GET /v1/time`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeResponse {
    /// The DSSE envelope of a [`SignedTime`] ([`TIME_PAYLOAD_TYPE`], online key).
    pub time: Envelope,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_time_reads_with_unknown_fields_and_refuses_a_newer_format() {
        let t = SignedTime::from_json(
            br#"{"nonce":"AAAAAAAAAAAAAAAAAAAAAA","time":"2026-12-05T10:00:00Z","keyring_version":3,"later":1}"#,
        )
        .expect("reads");
        assert_eq!(t.format, 1);
        assert_eq!(t.keyring_version, 3);
        assert_eq!(t.time.unix_timestamp(), 1_796_464_800);
        let newer = SignedTime::from_json(br#"{"format":2,"nonce":"x"}"#).expect_err("newer");
        assert!(newer.contains("format"), "{newer}");
        assert!(SignedTime::from_json(br#"{"nonce":"x","time":"yesterday"}"#).is_err());
        assert!(SignedTime::from_json(b"{").is_err());
    }
}
