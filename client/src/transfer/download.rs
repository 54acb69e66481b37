//! Resumable, verified blob downloads.
//!
//! Bytes stream into `<cache>/blobs/sha256/<hex>.part`, hashed as they arrive. After an
//! interruption the next attempt asks for `Range: bytes=<len>-` (with `If-Range` set to the
//! ETag seen before) and each answer is handled on purpose ([`classify`]):
//!
//! | answer | meaning | action |
//! |---|---|---|
//! | 206 starting at our length, total = signed size | resume | append |
//! | 206 anything else | confused server | start over |
//! | 200 | range ignored, or the ETag changed | start over from byte 0 |
//! | 416 | our part is not a prefix it knows | start over |
//! | 404 / 410 | gone | give up on this candidate |
//! | 5xx, network error, stall | transient | retry with backoff and jitter |
//!
//! Sizes and digests come only from the signed manifest: a server that sends more bytes than
//! the signed size is cut off, and after a resume the whole file is hashed, never just the new
//! part. A file whose hash does not match is deleted and never reaches the cache or runtime.

use ferry_shared::errors::ErrorCode;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::Variant;
use sha2::Digest as _;

use crate::error::ClientError;

mod copy;
mod part;
mod receive;
pub(crate) use part::{etag_path, forget_validator, hash_prefix, open_at, part_len, truncate};
use receive::{Body, Received, grouped_zstd, receive};

/// Download progress: the variant id, the bytes of its files on disk and their total (the
/// program and its data files together, so one bar covers the whole download).
pub type ProgressFn = Arc<dyn Fn(&str, u64, u64) + Send + Sync>;

/// Retry and size limits for downloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadLimits {
    /// Largest blob the client will download (default 16 GiB; sizes come from the signed
    /// manifest).
    pub max_bytes: u64,
    /// Attempts after the first one (default 5).
    pub retries: u32,
    /// First backoff (default 200 ms); doubles per attempt with ±50 % jitter.
    pub backoff: Duration,
    /// Longest backoff (default 5 s).
    pub backoff_cap: Duration,
    /// Time allowed for the body per MiB, on top of `min_body_time` (default 10 s/MiB,
    /// i.e. a 100 KiB/s floor): a stalled connection fails instead of hanging.
    pub body_time_per_mib: Duration,
    /// Least time allowed for any body (default 30 s).
    pub min_body_time: Duration,
    /// Longest a process waits for another process of the app that is downloading the same
    /// file into the shared cache (default 5 minutes); after that it downloads on its own,
    /// into a file of its own.
    pub shared_wait: Duration,
    /// Free space to leave on the cache's filesystem after a download (default 64 MiB): a
    /// download that would leave less is refused before it starts (`insufficient_storage`),
    /// after evicting unpinned files that nothing uses.
    pub headroom: u64,
    /// Build a file from chunks the cache already holds and fetch only the others, when its
    /// release signs a chunk index (default on; off downloads every file whole).
    pub delta: bool,
    /// Ask for a whole file in the `ferry-grouped-zstd` encoding (default on): a server that
    /// holds one sends fewer bytes (about 15% fewer for float32 weights), which the client
    /// decodes as they arrive and checks against the signed digest like any download. Off, or
    /// after an encoded answer that does not decode to the signed bytes, files come as they are.
    pub compressed: bool,
}

impl Default for DownloadLimits {
    fn default() -> Self {
        Self {
            max_bytes: 16 << 30,
            headroom: 64 << 20,
            delta: true,
            compressed: true,
            retries: 5,
            backoff: Duration::from_millis(200),
            backoff_cap: Duration::from_secs(5),
            body_time_per_mib: Duration::from_secs(10),
            min_body_time: Duration::from_secs(30),
            shared_wait: Duration::from_secs(300),
        }
    }
}

/// What a download did, for the per-source report: how much of the part file it found there
/// and kept, what came in the `ferry-grouped-zstd` encoding, and the encoded answers it
/// dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    /// Bytes of the part file that were there before the download and are still in it (a
    /// resumed download's head; 0 once the file was written again from its start).
    pub inherited: u64,
    /// Bytes in the part file that came encoded (counted as the file bytes they decoded to).
    pub encoded_bytes: u64,
    /// Encoded answers that were dropped: they did not decode to the signed bytes, or came
    /// where none was asked for (a cache that ignores `Vary` or `Range`).
    pub encoding_failures: u32,
}

impl Fetched {
    /// The part file was emptied or is being written again from its start.
    fn rewritten(&mut self) {
        self.inherited = 0;
        self.encoded_bytes = 0;
    }
}

/// What to do with a response to a (possibly ranged) request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// 206 continuing exactly where the part file ends.
    Append,
    /// Write the body from byte 0 (a 200).
    FromStart,
    /// Drop the part file and ask again.
    Restart(String),
    /// Transient: retry (resuming).
    Retry(String),
    /// Give up on this candidate.
    Fatal(u16, String),
}

/// Parses `Content-Range: bytes a-b/total`.
pub fn parse_content_range(v: &str) -> Option<(u64, u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    Some((
        a.trim().parse().ok()?,
        b.trim().parse().ok()?,
        total.trim().parse().ok()?,
    ))
}

/// Decides what a response means for a request made with `have` bytes already on disk.
pub fn classify(status: u16, content_range: Option<&str>, have: u64, size: u64) -> Reply {
    match status {
        200 => Reply::FromStart,
        206 => match content_range.and_then(parse_content_range) {
            Some((a, b, total)) if a == have && total == size && b < size && b >= a => {
                Reply::Append
            }
            Some((a, _, total)) => Reply::Restart(format!(
                "206 for bytes {a}.. of {total}, expected {have}.. of {size}"
            )),
            None => Reply::Restart("206 without a valid Content-Range".into()),
        },
        416 => Reply::Restart("416: the server does not know our partial file".into()),
        404 | 410 => Reply::Fatal(status, "the blob is not on the server".into()),
        408 | 429 | 500..=599 => Reply::Retry(format!("HTTP {status}")),
        other => Reply::Fatal(other, format!("unexpected HTTP {other}")),
    }
}

/// A cheap random number for jitter (no extra crates, no clock).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    (h.finish() % 1000) as f64 / 1000.0
}

/// The backoff before attempt `n` (1-based): `base * 2^(n-1)`, capped, times 0.5–1.5.
pub fn backoff(limits: &DownloadLimits, n: u32) -> Duration {
    let exp = limits
        .backoff
        .saturating_mul(1u32 << n.saturating_sub(1).min(16));
    exp.min(limits.backoff_cap).mul_f64(0.5 + jitter())
}

/// One file to download, as the signed manifest describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// How errors and progress name it: the variant id, or for a data file
    /// `<variant> data file <name>`.
    pub id: &'a str,
    /// Its signed digest.
    pub sha256: Sha256Digest,
    /// Its signed size.
    pub size: u64,
}

impl<'a> From<&'a Variant> for Wanted<'a> {
    fn from(v: &'a Variant) -> Self {
        Self {
            id: v.id.as_str(),
            sha256: v.sha256,
            size: v.size,
        }
    }
}

/// The whole file's length a reply announces: `Content-Length` of a 200 sent as is, the total
/// of a 206's `Content-Range`.
fn full_length(
    headers: &ureq::http::HeaderMap,
    status: u16,
    content_range: Option<&str>,
) -> Option<u64> {
    let identity = headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|e| e.eq_ignore_ascii_case("identity"));
    match status {
        200 if identity => headers
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok()),
        206 => content_range
            .and_then(parse_content_range)
            .map(|(_, _, total)| total),
        _ => None,
    }
}

/// The GET of the bytes from `have` on (resuming `part` when it holds some), with time for
/// the body in proportion to what is left; a whole file in the `ferry-grouped-zstd` encoding
/// when `encoded`.
fn request(
    agent: &ureq::Agent,
    url: &str,
    part: &Path,
    (have, size): (u64, u64),
    limits: &DownloadLimits,
    encoded: bool,
) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
    let body_time = limits.min_body_time
        + limits
            .body_time_per_mib
            .mul_f64((size - have) as f64 / (1 << 20) as f64);
    let mut req = agent
        .get(url)
        .config()
        .timeout_recv_body(Some(body_time))
        .build();
    if have > 0 {
        req = req.header("range", format!("bytes={have}-"));
        if let Ok(tag) = std::fs::read_to_string(etag_path(part)) {
            req = req.header("if-range", tag.trim());
        }
    } else if encoded {
        req = req.header("accept-encoding", ferry_fs::grouped::CODING);
    }
    req
}

/// The error for a reply no retry can fix.
fn rejected(url: &str, status: u16, why: &str) -> ClientError {
    ClientError::Rejected {
        code: if status == 404 || status == 410 {
            ErrorCode::BlobNotFound
        } else {
            ErrorCode::BadResponse
        }
        .as_str()
        .into(),
        message: format!("{url}: {why}"),
        status,
    }
}

/// Refuses a file over `limits.max_bytes`; makes the part file's folder.
fn prepare(part: &Path, wanted: Wanted<'_>, limits: &DownloadLimits) -> Result<(), ClientError> {
    if wanted.size > limits.max_bytes {
        return Err(ClientError::TooLarge {
            variant: wanted.id.to_string(),
            size: wanted.size,
            limit: limits.max_bytes,
        });
    }
    if let Some(dir) = part.parent() {
        std::fs::create_dir_all(dir).map_err(|e| ClientError::io(dir, e))?;
    }
    Ok(())
}

/// What the part file holds before a request.
enum Settled {
    /// This many bytes, fewer than the file's (a longer part was emptied).
    Partial(u64),
    /// The whole file, with the signed digest.
    Complete,
    /// The file's length with another digest (emptied now).
    Mismatch(Sha256Digest),
}

/// Looks at the part file before a request: cuts one longer than the file, and checks one as
/// long as the file.
fn settle(part: &Path, wanted: Wanted<'_>, counts: &mut Fetched) -> Result<Settled, ClientError> {
    let have = part_len(part);
    if have > wanted.size {
        truncate(part)?;
        counts.rewritten();
        return Ok(Settled::Partial(0));
    }
    if have < wanted.size {
        return Ok(Settled::Partial(have));
    }
    let digest = Sha256Digest::from_bytes(hash_prefix(part, have)?.finalize().into());
    if digest == wanted.sha256 {
        return Ok(Settled::Complete);
    }
    truncate(part)?;
    counts.rewritten();
    Ok(Settled::Mismatch(digest))
}

/// The error for a whole download that hashes to `actual`, not the signed digest.
fn mismatch(wanted: Wanted<'_>, actual: Sha256Digest) -> ClientError {
    ClientError::HashMismatch {
        variant: wanted.id.to_string(),
        expected: wanted.sha256.to_hex(),
        actual: actual.to_hex(),
    }
}

/// Downloads the `wanted` blob from `url` into `part` until the file is complete and its
/// SHA-256 equals the signed digest. On success `part` holds exactly the signed bytes (synced
/// to disk); the caller moves it into the cache. Says what it did ([`Fetched`]).
pub fn fetch(
    agent: &ureq::Agent,
    url: &str,
    part: &Path,
    wanted: Wanted<'_>,
    limits: &DownloadLimits,
    progress: Option<&ProgressFn>,
) -> Result<Fetched, ClientError> {
    let mut counts = Fetched::default();
    fetch_counting(agent, url, part, wanted, limits, progress, &mut counts).map(|()| counts)
}

/// [`fetch`], noting what it did in `counts` also when it fails.
pub(crate) fn fetch_counting(
    agent: &ureq::Agent,
    url: &str,
    part: &Path,
    wanted: Wanted<'_>,
    limits: &DownloadLimits,
    progress: Option<&ProgressFn>,
    counts: &mut Fetched,
) -> Result<(), ClientError> {
    let (size, id) = (wanted.size, wanted.id);
    prepare(part, wanted, limits)?;
    *counts = Fetched {
        inherited: part_len(part),
        ..Fetched::default()
    };
    let mut failures = 0u32;
    let mut last_problem = String::new();
    let mut restarted_after_mismatch = false;
    // Off for the rest of this download once an encoded answer failed to decode to the file.
    let mut encoded = limits.compressed;
    loop {
        if failures > limits.retries {
            return Err(ClientError::Network {
                url: url.to_string(),
                message: format!("gave up after {failures} attempts: {last_problem}"),
            });
        }
        if failures > 0 {
            std::thread::sleep(backoff(limits, failures));
        }
        let have = match settle(part, wanted, counts)? {
            Settled::Partial(have) => have,
            Settled::Complete => return Ok(()),
            Settled::Mismatch(_) if !restarted_after_mismatch => {
                restarted_after_mismatch = true;
                continue;
            }
            Settled::Mismatch(digest) => return Err(mismatch(wanted, digest)),
        };
        let mut resp = match request(agent, url, part, (have, size), limits, encoded).call() {
            Ok(r) => r,
            Err(e) => {
                if let Some(refused) = crate::transfer::tls::certificate_error(url, &e) {
                    return Err(refused);
                }
                failures += 1;
                last_problem = e.to_string();
                continue;
            }
        };
        let status = resp.status().as_u16();
        let content_range = resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // A server whose file has another length than the signed size holds other bytes: no
        // retry or resume can fix that, so it is a size mismatch at once (not after retries).
        if let Some(n) =
            full_length(resp.headers(), status, content_range.as_deref()).filter(|n| *n != size)
        {
            truncate(part)?;
            return Err(ClientError::SizeMismatch {
                variant: id.to_string(),
                message: format!("{url} holds {n} bytes; the signed manifest says {size}"),
            });
        }
        let coded = grouped_zstd(resp.headers());
        if coded && (status != 200 || have > 0 || !encoded) {
            // Only a whole file that was asked for comes encoded.
            truncate(part)?;
            encoded = false;
            counts.rewritten();
            counts.encoding_failures += 1;
            failures += 1;
            last_problem = format!("an encoded answer (HTTP {status}) to a request for bytes");
            continue;
        }
        let reply = classify(status, content_range.as_deref(), have, size);
        let append = match reply {
            Reply::Append => true,
            Reply::FromStart => false,
            Reply::Restart(why) => {
                truncate(part)?;
                counts.rewritten();
                failures += 1;
                last_problem = why;
                continue;
            }
            Reply::Retry(why) => {
                failures += 1;
                last_problem = why;
                continue;
            }
            Reply::Fatal(status, why) => return Err(rejected(url, status, &why)),
        };
        if !append {
            counts.rewritten();
        }
        if coded {
            // The encoded answer's validator names the encoding, not the bytes a later range
            // of the file would be resumed from.
            forget_validator(part);
        } else if let Some(tag) = resp.headers().get("etag").and_then(|v| v.to_str().ok()) {
            let _ = std::fs::write(etag_path(part), tag);
        }
        let got = receive(
            &mut resp,
            Body {
                part,
                have: if append { have } else { 0 },
                coded,
                size,
                id,
            },
            |written| {
                if let Some(p) = progress {
                    p(id, written, size);
                }
            },
        )?;
        let digest = match got {
            Received::Whole(digest) => digest,
            Received::Short(why) => {
                // Keep what arrived: the next attempt resumes from here.
                if coded {
                    counts.encoded_bytes = part_len(part);
                }
                failures += 1;
                last_problem = why;
                continue;
            }
            Received::Undecodable(why) => {
                // The encoding is bad, not the connection: the file comes as it is next time.
                // What was written of it is gone (the part is cut back to its start).
                counts.rewritten();
                if why.1 {
                    counts.encoding_failures += 1;
                }
                encoded &= !why.1;
                failures += 1;
                last_problem = why.0;
                continue;
            }
        };
        if digest == wanted.sha256 {
            let _ = std::fs::remove_file(etag_path(part));
            if coded {
                counts.encoded_bytes = size;
            }
            return Ok(());
        }
        truncate(part)?;
        let had_encoded = counts.encoded_bytes > 0;
        counts.rewritten();
        if coded || had_encoded {
            // An encoding that decodes to other bytes (whole, or the head of a file resumed
            // plain): once more, as the file is.
            counts.encoding_failures += 1;
            encoded = false;
            failures += 1;
            last_problem = format!("the encoded answer decodes to sha256 {digest}");
            continue;
        }
        if !append || restarted_after_mismatch {
            return Err(mismatch(wanted, digest));
        }
        // A resumed download can mix two representations; one clean retry from byte 0.
        restarted_after_mismatch = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range() {
        assert_eq!(parse_content_range("bytes 0-9/10"), Some((0, 9, 10)));
        assert_eq!(parse_content_range("bytes */10"), None);
        assert_eq!(parse_content_range("items 0-9/10"), None);
    }

    #[test]
    fn replies() {
        assert_eq!(classify(200, None, 5, 10), Reply::FromStart);
        assert_eq!(classify(206, Some("bytes 5-9/10"), 5, 10), Reply::Append);
        assert!(matches!(
            classify(206, Some("bytes 0-9/10"), 5, 10),
            Reply::Restart(_)
        ));
        assert!(matches!(
            classify(206, Some("bytes 5-9/11"), 5, 10),
            Reply::Restart(_)
        ));
        assert!(matches!(classify(206, None, 5, 10), Reply::Restart(_)));
        assert!(matches!(classify(416, None, 5, 10), Reply::Restart(_)));
        assert!(matches!(classify(503, None, 5, 10), Reply::Retry(_)));
        assert!(matches!(classify(404, None, 0, 10), Reply::Fatal(404, _)));
        assert!(matches!(classify(302, None, 0, 10), Reply::Fatal(302, _)));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let l = DownloadLimits::default();
        for n in 1..20 {
            let b = backoff(&l, n);
            assert!(b <= l.backoff_cap.mul_f64(1.5), "{n}: {b:?}");
            assert!(b >= l.backoff.mul_f64(0.5), "{n}: {b:?}");
        }
        assert!(backoff(&l, 10) > l.backoff);
    }
}
