//! Blob sources: the places a device may fetch a file's bytes from, in the order the server
//! signed them into the decision ([`crate::wire::resolve::Decision::sources`]).
//!
//! A source is a URL prefix to which a file's hex SHA-256 is appended: an absolute `http://` or
//! `https://` prefix (a CDN, an object store's public URL, another ferry server) or a path
//! starting with `/`, relative to the server the device resolved with (`/v1/blobs/sha256/` is
//! that server itself, a site mirror for the devices of a site). No source is trusted: every
//! byte is checked against the signed digests, so a source list only says where to look.

use serde::{Deserialize, Serialize};

/// The most sources a decision may list; a reader uses the first this many.
pub const MAX_SOURCES: usize = 8;

/// The longest source a reader uses, in bytes.
pub const MAX_SOURCE_LEN: usize = 512;

/// The server's own blob route, as a source relative to the server.
pub const ORIGIN_SOURCE: &str = "/v1/blobs/sha256/";

/// Whether `source` is a prefix this build can fetch from (see [`why_unusable`]).
pub fn is_usable(source: &str) -> bool {
    why_unusable(source).is_none()
}

/// Why `source` is not a prefix this build can fetch from, or `None` when it is: `http://…/` or
/// `https://…/` with a host and no credentials, or a path from the server's root (`/…/`), of at
/// most [`MAX_SOURCE_LEN`] bytes, ending in `/` (the digest goes at the end), without spaces,
/// control characters, a query or a fragment.
pub fn why_unusable(source: &str) -> Option<&'static str> {
    if source.len() > MAX_SOURCE_LEN {
        return Some("longer than 512 bytes");
    }
    if source.len() < 2 || !source.ends_with('/') {
        return Some("must end in '/' (a blob's hex SHA-256 is appended to it)");
    }
    if !source.bytes().all(|b| b.is_ascii_graphic()) {
        return Some("holds a space or a control character");
    }
    if source.contains(['?', '#', '\\']) {
        return Some("holds a query or a fragment");
    }
    let rest = source
        .strip_prefix("https://")
        .or_else(|| source.strip_prefix("http://"));
    match rest {
        Some(rest) => {
            let authority = rest.split('/').next().unwrap_or_default();
            if authority.is_empty() {
                Some("names no host")
            } else if authority.contains('@') {
                Some("holds credentials (user@): every device would get them")
            } else {
                None
            }
        }
        None if source.starts_with('/') && !source.starts_with("//") => None,
        None => Some("must start with http://, https:// or / (a path on the server)"),
    }
}

/// The sources of `listed` a reader uses, in order: the usable ones ([`is_usable`]), each once,
/// at most [`MAX_SOURCES`]. An entry this build cannot use (a newer scheme, say) is passed over,
/// as protocol v1 asks of readers.
pub fn usable(listed: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in listed {
        if out.len() == MAX_SOURCES {
            break;
        }
        if is_usable(s) && !out.contains(&s.as_str()) {
            out.push(s);
        }
    }
    out
}

/// The address of the file with SHA-256 `hex` at `source`.
pub fn blob_url(source: &str, hex: &str) -> String {
    format!("{source}{hex}")
}

/// What one source did for one download, as a `download` event reports it
/// ([`crate::wire::telemetry::TelemetryEvent::sources`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceUse {
    /// The source, as the decision listed it.
    pub source: String,
    /// Bytes it served that were kept (checked against the signed digests).
    #[serde(default)]
    pub bytes: u64,
    /// Times the client gave up on it during the download (unreachable, an error status, too
    /// slow, or bytes that did not hash).
    #[serde(default)]
    pub failures: u32,
    /// The stable code of its last failure (`network`, `blob_not_found`, `hash_mismatch`,
    /// `size_mismatch`, `bad_response`, `server_certificate_invalid`), when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Of `bytes`, those that came in the `ferry-grouped-zstd` encoding (counted as the file's
    /// bytes they decoded to). Additive in v1: absent is none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub encoded_bytes: u64,
    /// Encoded answers from it that were dropped: they did not decode to the signed bytes, or
    /// came where none was asked for (a cache that ignores `Vary` or `Range`). Additive in v1:
    /// absent is none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub encoding_failures: u32,
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_sources_are_http_prefixes_or_server_paths() {
        for ok in [
            "/v1/blobs/sha256/",
            "https://cdn.example.com/v1/blobs/sha256/",
            "http://10.0.0.5:8080/v1/blobs/sha256/",
            "https://bucket.s3.amazonaws.com/ferry/blobs/sha256/",
        ] {
            assert!(is_usable(ok), "{ok}");
        }
        for bad in [
            "",
            "/",
            "//cdn.example.com/x/",
            "https:///x/",
            "https://cdn.example.com/v1/blobs/sha256",
            "ftp://cdn.example.com/x/",
            "ipfs://x/",
            "https://cdn.example.com/a b/",
            "https://cdn.example.com/x/?sig=1/",
            "https://cdn.example.com/x#/",
            "cdn.example.com/x/",
            "https://user:pass@cdn.example.com/b/",
        ] {
            assert!(!is_usable(bad), "{bad:?}");
        }
        assert!(is_usable(&format!("/{}/", "a".repeat(MAX_SOURCE_LEN - 2))));
        assert!(!is_usable(&format!("/{}/", "a".repeat(MAX_SOURCE_LEN - 1))));
    }

    #[test]
    fn a_reader_keeps_usable_sources_once_in_order_and_at_most_eight() {
        let listed: Vec<String> = [
            "ipfs://newer-scheme/",
            "https://a.example/",
            "/v1/blobs/sha256/",
            "https://a.example/",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain((0..20).map(|i| format!("https://m{i}.example/")))
        .collect();
        let got = usable(&listed);
        assert_eq!(got.len(), MAX_SOURCES);
        assert_eq!(
            &got[..3],
            [
                "https://a.example/",
                "/v1/blobs/sha256/",
                "https://m0.example/"
            ]
        );
        assert_eq!(blob_url(got[0], "ab"), "https://a.example/ab");
    }
}
