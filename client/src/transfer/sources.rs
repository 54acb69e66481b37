//! Blob sources on the device: the decision's signed list ([`ferry_shared::wire::sources`]),
//! tried in order for each file (and, for delta updates, for each range). A source that fails
//! (unreachable, an error status, too slow for the body-time floor, or bytes that do not hash)
//! is passed over and remembered as bad for [`BAD_FOR`], so the next download starts with one
//! that works; a bad source is still tried after every good one, as a last resort. No source is
//! trusted: every byte is checked against the signed digests wherever it came from.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferry_shared::wire::sources::SourceUse;

use crate::error::ClientError;
use crate::transfer::download::{self, DownloadLimits, ProgressFn, Wanted};

/// How long a source that failed is tried only after the others.
pub(crate) const BAD_FOR: Duration = Duration::from_secs(600);

/// Most sources remembered as bad (older entries go first).
const MAX_REMEMBERED: usize = 64;

/// The sources that failed recently, shared by every load of one client.
#[derive(Debug, Default)]
pub(crate) struct SourceBook {
    bad: Mutex<HashMap<String, Instant>>,
}

impl SourceBook {
    /// Remembers `source` as bad from now for [`BAD_FOR`].
    pub(crate) fn mark_bad(&self, source: &str) {
        let now = Instant::now();
        let mut bad = ferry_shared::sync::lock(&self.bad);
        bad.retain(|_, until| *until > now);
        if bad.len() >= MAX_REMEMBERED
            && let Some(oldest) = bad
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(s, _)| s.clone())
        {
            bad.remove(&oldest);
        }
        bad.insert(source.to_string(), now + BAD_FOR);
    }

    /// Forgets that `source` failed (it has just served a whole file or range).
    pub(crate) fn mark_good(&self, source: &str) {
        ferry_shared::sync::lock(&self.bad).remove(source);
    }

    /// `sources` in the order to try them: those not remembered as bad in their listed order,
    /// then the bad ones in their listed order.
    pub(crate) fn order<'a>(&self, sources: &'a [String]) -> Vec<&'a str> {
        let now = Instant::now();
        let bad = ferry_shared::sync::lock(&self.bad);
        let is_bad = |s: &str| bad.get(s).is_some_and(|until| *until > now);
        let (good, poor): (Vec<&str>, Vec<&str>) =
            sources.iter().map(String::as_str).partition(|s| !is_bad(s));
        good.into_iter().chain(poor).collect()
    }
}

/// One place to fetch a file from: its URL, and the decision's source it comes from (`None`
/// when the decision lists no sources: the candidate's URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// The source as the decision listed it.
    pub source: Option<String>,
    /// The file's URL there (absolute).
    pub url: String,
}

/// What each source did for one load's downloads, in the order they were first used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally(pub Vec<SourceUse>);

impl Tally {
    fn entry(&mut self, source: &str) -> &mut SourceUse {
        let i = match self.0.iter().position(|u| u.source == source) {
            Some(i) => i,
            None => {
                self.0.push(SourceUse {
                    source: source.to_string(),
                    bytes: 0,
                    failures: 0,
                    error: None,
                    encoded_bytes: 0,
                    encoding_failures: 0,
                });
                self.0.len() - 1
            }
        };
        &mut self.0[i]
    }

    /// `route` served `bytes` that were kept.
    pub(crate) fn served(&mut self, route: &Route, bytes: u64) {
        if let Some(s) = &route.source {
            let u = self.entry(s);
            u.bytes = u.bytes.saturating_add(bytes);
        }
    }

    /// What `route`'s answers in the `ferry-grouped-zstd` encoding came to.
    pub(crate) fn encoded(&mut self, route: &Route, fetched: download::Fetched) {
        if let Some(s) = &route.source
            && (fetched.encoded_bytes > 0 || fetched.encoding_failures > 0)
        {
            let u = self.entry(s);
            u.encoded_bytes = u.encoded_bytes.saturating_add(fetched.encoded_bytes);
            u.encoding_failures = u
                .encoding_failures
                .saturating_add(fetched.encoding_failures);
        }
    }

    /// The client gave up on `route` (`code`: the stable code of why).
    pub(crate) fn failed(&mut self, route: &Route, code: &str) {
        if let Some(s) = &route.source {
            let u = self.entry(s);
            u.failures = u.failures.saturating_add(1);
            u.error = Some(code.to_string());
        }
    }

    /// Adds `other`'s counts to these.
    pub(crate) fn merge(&mut self, other: &Tally) {
        for o in &other.0 {
            let u = self.entry(&o.source);
            u.bytes = u.bytes.saturating_add(o.bytes);
            u.encoded_bytes = u.encoded_bytes.saturating_add(o.encoded_bytes);
            u.encoding_failures = u.encoding_failures.saturating_add(o.encoding_failures);
            u.failures = u.failures.saturating_add(o.failures);
            if o.error.is_some() {
                u.error.clone_from(&o.error);
            }
        }
    }
}

/// The stable code of `e` when it is the source's doing (another source may serve the file),
/// `None` when it is this device's (a full disk, a file too large for it) and no other source
/// would change it.
pub(crate) fn source_fault(e: &ClientError) -> Option<String> {
    match e {
        ClientError::Network { .. }
        | ClientError::Certificate { .. }
        | ClientError::Server { .. }
        | ClientError::Rejected { .. }
        | ClientError::BadResponse { .. }
        | ClientError::HashMismatch { .. }
        | ClientError::SizeMismatch { .. } => Some(e.code().to_string()),
        _ => None,
    }
}

/// Where to fetch one file, and what to note of it.
pub(crate) struct WholeFetch<'a> {
    /// The HTTP agent.
    pub agent: &'a ureq::Agent,
    /// The places to try, in order.
    pub routes: &'a [Route],
    /// The partial file (resumed, whichever source wrote its bytes: they are hashed whole).
    pub part: &'a Path,
    /// The file, as signed.
    pub wanted: Wanted<'a>,
    /// Retry and time limits (the last route gets all the retries; others one).
    pub limits: &'a DownloadLimits,
    /// Progress.
    pub progress: Option<&'a ProgressFn>,
    /// Sources that failed recently.
    pub book: &'a SourceBook,
}

impl WholeFetch<'_> {
    /// Downloads the file whole from the first route that serves its signed bytes, noting in
    /// `tally` what each route did. The error is the last route's, or a device-side error
    /// (which no other route would change) at once.
    pub(crate) fn run(&self, tally: &mut Tally) -> Result<(), ClientError> {
        let mut last = None;
        for (i, r) in self.routes.iter().enumerate() {
            let is_last = i + 1 == self.routes.len();
            // Before the last route, give up on a source sooner: another one is waiting.
            let limits = if is_last {
                *self.limits
            } else {
                DownloadLimits {
                    retries: self.limits.retries.min(1),
                    ..*self.limits
                }
            };
            if i > 0 {
                // Another source's validator means nothing to this one.
                download::forget_validator(self.part);
            }
            let mut counts = download::Fetched::default();
            let got = download::fetch_counting(
                self.agent,
                &r.url,
                self.part,
                self.wanted,
                &limits,
                self.progress,
                &mut counts,
            );
            // What this route wrote that is in the part file now.
            let kept = download::part_len(self.part).saturating_sub(counts.inherited);
            match got {
                Ok(()) => {
                    tally.served(r, self.wanted.size.saturating_sub(counts.inherited));
                    tally.encoded(r, counts);
                    if let Some(s) = &r.source {
                        self.book.mark_good(s);
                    }
                    return Ok(());
                }
                Err(e) => {
                    let Some(code) = source_fault(&e) else {
                        return Err(e);
                    };
                    tally.served(r, kept);
                    tally.encoded(r, counts);
                    tally.failed(r, &code);
                    if let Some(s) = &r.source {
                        self.book.mark_bad(s);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Network {
            url: String::new(),
            message: format!("no source to fetch {} from", self.wanted.id),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_bad_source_is_tried_after_the_good_ones_until_it_serves_again() {
        let book = SourceBook::default();
        let sources = list(&["https://cdn/", "https://bucket/", "/v1/blobs/sha256/"]);
        assert_eq!(book.order(&sources), sources);
        book.mark_bad("https://cdn/");
        assert_eq!(
            book.order(&sources),
            ["https://bucket/", "/v1/blobs/sha256/", "https://cdn/"]
        );
        book.mark_bad("https://bucket/");
        assert_eq!(
            book.order(&sources),
            ["/v1/blobs/sha256/", "https://cdn/", "https://bucket/"]
        );
        book.mark_good("https://cdn/");
        assert_eq!(
            book.order(&sources),
            ["https://cdn/", "/v1/blobs/sha256/", "https://bucket/"]
        );
    }

    #[test]
    fn the_book_stays_bounded() {
        let book = SourceBook::default();
        for i in 0..1000 {
            book.mark_bad(&format!("https://m{i}/"));
        }
        assert!(ferry_shared::sync::lock(&book.bad).len() <= MAX_REMEMBERED);
        // The newest is still known as bad.
        let sources = list(&["https://m999/", "https://x/"]);
        assert_eq!(book.order(&sources), ["https://x/", "https://m999/"]);
    }

    #[test]
    fn a_tally_counts_per_source_and_ignores_routes_without_one() {
        let cdn = Route {
            source: Some("https://cdn/".into()),
            url: "https://cdn/ab".into(),
        };
        let plain = Route {
            source: None,
            url: "/v1/blobs/sha256/ab".into(),
        };
        let mut t = Tally::default();
        t.failed(&cdn, "network");
        t.served(&cdn, 10);
        t.served(&plain, 99);
        let mut more = Tally::default();
        more.served(&cdn, 5);
        more.encoded(
            &cdn,
            download::Fetched {
                inherited: 0,
                encoded_bytes: 5,
                encoding_failures: 1,
            },
        );
        t.merge(&more);
        assert_eq!(
            t.0,
            vec![SourceUse {
                source: "https://cdn/".into(),
                bytes: 15,
                failures: 1,
                error: Some("network".into()),
                encoded_bytes: 5,
                encoding_failures: 1,
            }]
        );
    }
}
