//! Protocol v1: the version numbers and headers of the device protocol, and the helpers that
//! make its readers tolerant (`docs/protocol.md` is the contract).
//!
//! - Devices send [`PROTOCOL_HEADER`]` = 1` and [`SDK_HEADER`] (`NAME/VERSION`); every device
//!   answer carries [`PROTOCOL_HEADER`]` = 1`. A device that speaks a newer protocol is
//!   answered in v1; one that sends no header is a client from before v1 ([`Protocol::Legacy`]).
//! - Signed payloads (decision, release manifest, keyring, revocation list) carry a `format`
//!   number, absent meaning [`FORMAT`]` = 1`. A reader meets a newer format with
//!   [`peek_format`] before it parses anything else, and refuses it with a typed code
//!   (`format_unsupported`) instead of misreading it.
//! - Readers ignore fields they do not know; [`unknown_fields`] lists them so a server can
//!   count them.

/// The device protocol version this build speaks.
pub const PROTOCOL: u32 = 1;

/// The header that carries the protocol version, on device requests and device answers.
pub const PROTOCOL_HEADER: &str = "Ferry-Protocol";

/// The header that names the device's SDK: `NAME/VERSION` (`ferry-client-rust/0.1.0`).
pub const SDK_HEADER: &str = "Ferry-Sdk";

/// The header a server adds to device answers while a protocol it still answers is being
/// retired: the date (`YYYY-MM-DD`, UTC) after which it may stop answering that protocol.
/// Sent with the standard `Sunset` header (RFC 8594) carrying the same instant.
pub const SUNSET_HEADER: &str = "Ferry-Protocol-Sunset";

/// The newest signed-payload format this build reads. Payloads without a `format` field are
/// format 1.
pub const FORMAT: u32 = 1;

/// Longest SDK name.
pub const MAX_SDK_NAME: usize = 40;
/// Longest SDK version.
pub const MAX_SDK_VERSION: usize = 24;

/// What a device said about its protocol in [`PROTOCOL_HEADER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// No header: a client from before protocol v1 (answered as v1; it reads v1 answers).
    Legacy,
    /// A version number (`1`, or a newer one answered in v1).
    V(u32),
    /// A header that is not a number (answered in v1, counted as such).
    Invalid,
}

impl Protocol {
    /// Reads the header's value (`None`: no header).
    pub fn from_header(value: Option<&[u8]>) -> Protocol {
        match value {
            None => Protocol::Legacy,
            Some(v) => std::str::from_utf8(v)
                .ok()
                .map(str::trim)
                .filter(|s| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse().ok())
                .filter(|n| *n >= 1)
                .map_or(Protocol::Invalid, Protocol::V),
        }
    }

    /// A short label for metrics and the census, from a small fixed set: `legacy`, `1` to
    /// `9`, `newer` (10 and above), `invalid`.
    pub fn label(self) -> String {
        match self {
            Protocol::Legacy => "legacy".into(),
            Protocol::V(n) if n <= 9 => n.to_string(),
            Protocol::V(_) => "newer".into(),
            Protocol::Invalid => "invalid".into(),
        }
    }
}

/// A device SDK as named in [`SDK_HEADER`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sdk {
    /// `ferry-client-rust`, `ferry-client-jvm`, `AcmeKit`, ... (`[A-Za-z0-9._-]`, 1–40
    /// characters).
    pub name: String,
    /// Its version (`[A-Za-z0-9.+-]`, 1–24 characters).
    pub version: String,
}

impl Sdk {
    /// Parses `NAME/VERSION`; `None` when the header is absent or malformed (such devices are
    /// counted as `unknown`, never refused).
    pub fn from_header(value: Option<&[u8]>) -> Option<Sdk> {
        let s = std::str::from_utf8(value?).ok()?.trim();
        let (name, version) = s.split_once('/')?;
        let name_ok = !name.is_empty()
            && name.len() <= MAX_SDK_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        let version_ok = !version.is_empty()
            && version.len() <= MAX_SDK_VERSION
            && version
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'));
        (name_ok && version_ok).then(|| Sdk {
            name: name.into(),
            version: version.into(),
        })
    }

    /// `NAME/VERSION`.
    pub fn header_value(&self) -> String {
        format!("{}/{}", self.name, self.version)
    }
}

/// The `format` of a signed payload: the number in its top-level `format` field, 1 when the
/// field is absent, `None` when `payload` is not a JSON object or `format` is not a whole
/// number. Reads nothing else, so it works on payloads of any future format.
pub fn peek_format(payload: &[u8]) -> Option<u64> {
    let fields: std::collections::BTreeMap<
        std::borrow::Cow<'_, str>,
        &serde_json::value::RawValue,
    > = serde_json::from_slice(payload).ok()?;
    match fields.get("format") {
        None => Some(1),
        Some(raw) => serde_json::from_str::<u64>(raw.get()).ok(),
    }
}

/// Checks that `payload` (of the kind `what`) is not in a format newer than this build reads;
/// the error message names both formats. A payload that is not an object, or whose `format`
/// is not a whole number, passes: the typed parse that follows refuses it as malformed.
pub fn check_format(what: &str, payload: &[u8]) -> Result<(), FormatError> {
    match peek_format(payload) {
        Some(f) if f > u64::from(FORMAT) => Err(FormatError {
            what: what.to_string(),
            found: f,
        }),
        _ => Ok(()),
    }
}

/// A signed payload in a format this build cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is in format {found}, this build reads formats 1 to {FORMAT}; update the app (its last known good model stays in use)"
)]
pub struct FormatError {
    /// What was read (`decision`, `release manifest`, ...).
    pub what: String,
    /// The format found.
    pub found: u64,
}

/// The serde default of a `format` field: 1.
pub fn format_one() -> u32 {
    1
}

/// Whether a `format` field holds 1 (and is then left out when writing, so format-1 payloads
/// keep the bytes they had before the field existed).
pub fn is_format_one(f: &u32) -> bool {
    *f == 1
}

/// Most unknown field names [`unknown_fields`] reports for one object.
pub const MAX_UNKNOWN_FIELDS: usize = 16;

/// The top-level field names of the JSON object `body` that are not in `known` (at most
/// [`MAX_UNKNOWN_FIELDS`], sorted); empty when `body` is not an object. Only the keys are
/// read: values are skipped without being built.
pub fn unknown_fields(body: &[u8], known: &[&str]) -> Vec<String> {
    use serde::de::IgnoredAny;
    use std::collections::BTreeMap;
    // Keys borrowed from the body (no allocation on the resolve path); a key with an escape
    // cannot be borrowed, so such a body is read again with owned keys.
    match serde_json::from_slice::<BTreeMap<&str, IgnoredAny>>(body) {
        Ok(map) => map
            .into_keys()
            .filter(|k| !known.contains(k))
            .take(MAX_UNKNOWN_FIELDS)
            .map(str::to_string)
            .collect(),
        Err(_) => serde_json::from_slice::<BTreeMap<String, IgnoredAny>>(body)
            .map(|map| {
                map.into_keys()
                    .filter(|k| !known.contains(&k.as_str()))
                    .take(MAX_UNKNOWN_FIELDS)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The first field of the JSON text `original` that is lost when it is read as `value` and
/// written again (a dotted path like `variants[0].gpu`), or `None` when `value` keeps
/// everything. Strict readers (admin inputs, `ferry sign`'s input) refuse such a field; a
/// replica refuses to *rewrite* a stored record that would lose one (it was written by a newer
/// server). Fields left out because they hold their default (empty lists, empty objects,
/// null) are not lost.
pub fn unknown_field_path<T: serde::Serialize>(original: &[u8], value: &T) -> Option<String> {
    let original: serde_json::Value = serde_json::from_slice(original).ok()?;
    let canonical = serde_json::to_value(value).ok()?;
    first_unknown_field(&original, &canonical, String::new())
}

fn first_unknown_field(
    original: &serde_json::Value,
    canonical: &serde_json::Value,
    path: String,
) -> Option<String> {
    use serde_json::Value;
    match (original, canonical) {
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match b.get(k) {
                None if v.is_null() => None,
                // Fields skipped because they hold their default are known, not unknown.
                None if is_empty_default(v) => None,
                None => Some(p),
                Some(w) => first_unknown_field(v, w, p),
            }
        }),
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (v, w))| first_unknown_field(v, w, format!("{path}[{i}]"))),
        _ => None,
    }
}

fn is_empty_default(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_header_values() {
        assert_eq!(Protocol::from_header(None), Protocol::Legacy);
        assert_eq!(Protocol::from_header(Some(b"1")), Protocol::V(1));
        assert_eq!(Protocol::from_header(Some(b" 2 ")), Protocol::V(2));
        assert_eq!(Protocol::from_header(Some(b"0")), Protocol::Invalid);
        assert_eq!(Protocol::from_header(Some(b"v1")), Protocol::Invalid);
        assert_eq!(
            Protocol::from_header(Some(b"99999999999")),
            Protocol::Invalid
        );
        assert_eq!(Protocol::V(10).label(), "newer");
        assert_eq!(Protocol::V(9).label(), "9");
        assert_eq!(Protocol::Legacy.label(), "legacy");
    }

    #[test]
    fn sdk_header_values() {
        let s = Sdk::from_header(Some(b"ferry-client-rust/0.1.0")).expect("ok");
        assert_eq!(
            (s.name.as_str(), s.version.as_str()),
            ("ferry-client-rust", "0.1.0")
        );
        assert_eq!(s.header_value(), "ferry-client-rust/0.1.0");
        assert!(Sdk::from_header(Some(b"AcmeKit/1.0")).is_some());
        for bad in [
            &b"noslash"[..],
            b"/1.0",
            b"name/",
            b"Na me/1",
            b"a/b/c",
            b"\xff/1",
        ] {
            assert_eq!(Sdk::from_header(Some(bad)), None, "{bad:?}");
        }
        assert_eq!(Sdk::from_header(Some(&[b'a'; 80])), None);
    }

    #[test]
    fn formats_are_peeked_before_anything_else_is_read() {
        assert_eq!(peek_format(br#"{"model":"m"}"#), Some(1));
        assert_eq!(
            peek_format(br#"{"format":2,"model":{"renamed":true}}"#),
            Some(2)
        );
        assert_eq!(peek_format(br#"{"format":"2"}"#), None);
        assert_eq!(peek_format(b"[1]"), None);
        assert!(check_format("decision", br#"{"format":1}"#).is_ok());
        let e = check_format("decision", br#"{"format":7}"#).expect_err("refused");
        assert_eq!(e.found, 7);
        // Not a format this build can judge: left to the typed parse, which refuses it.
        assert!(check_format("decision", br#"{"format":"2"}"#).is_ok());
        assert!(check_format("decision", b"[1]").is_ok());
        assert!(e.to_string().contains("format 7"), "{e}");
    }

    #[test]
    fn lost_fields_are_found_at_any_depth() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Inner {
            a: u32,
        }
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Outer {
            inner: Vec<Inner>,
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            list: Vec<u32>,
        }
        let text = br#"{"inner":[{"a":1},{"a":2,"b":3}],"list":[]}"#;
        let v: Outer = serde_json::from_slice(text).expect("parse");
        assert_eq!(unknown_field_path(text, &v).as_deref(), Some("inner[1].b"));
        let text = br#"{"inner":[{"a":1}],"list":[]}"#;
        let v: Outer = serde_json::from_slice(text).expect("parse");
        assert_eq!(unknown_field_path(text, &v), None);
    }

    #[test]
    fn unknown_fields_lists_only_unknown_top_level_keys() {
        let body = br#"{"model":"m","gpu_driver":"x","nested":{"model":1},"z":[1,2]}"#;
        assert_eq!(
            unknown_fields(body, &["model"]),
            vec!["gpu_driver", "nested", "z"]
        );
        assert!(unknown_fields(b"not json", &[]).is_empty());
        // A key written with an escape is read too.
        assert_eq!(
            unknown_fields(br#"{"model":"m","gpu\u005fdriver":1}"#, &["model"]),
            vec!["gpu_driver"]
        );
        let many: String = (0..100).map(|i| format!("\"f{i:03}\":0,")).collect();
        let body = format!("{{{}\"model\":1}}", many);
        assert_eq!(
            unknown_fields(body.as_bytes(), &["model"]).len(),
            MAX_UNKNOWN_FIELDS
        );
    }
}
