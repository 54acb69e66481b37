//! Delta downloads: a file whose release signs a chunk index is built from the chunks the cache
//! already holds (in any cached blob: another release, variant or model), and only the other
//! chunks are fetched, with `Range` requests on the blob itself (one per run of adjacent
//! missing chunks, so any static server or CDN serves them).
//!
//! Trust: the index is fetched by the digest the signed manifest gives and checked against
//! it; every chunk, copied or fetched, is checked against the index's SHA-256 before it is
//! written; the finished file is checked against the signed SHA-256 before it reaches the
//! cache. On anything unexpected (a server that ignores or misreports ranges, a wrong chunk, an
//! index that does not fit) the delta stops and the caller downloads the file whole, resuming
//! after the chunks already written (each was checked).
//!
//! The file is written in order into the same `.part` file a whole download uses, so after an
//! interruption (even SIGKILL) the next attempt keeps every complete chunk and fetches at most
//! the one that was in flight.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::chunks::{CHUNKED_FILE_MIN, Chunk, ChunkIndex, ChunkIndexRef};
use sha2::{Digest as _, Sha256};

use crate::error::ClientError;
use crate::transfer::download::{
    DownloadLimits, ProgressFn, Wanted, backoff, hash_prefix, open_at, parse_content_range,
    part_len, truncate,
};
use crate::transfer::sources::{Route, SourceBook, Tally};

mod sources;
pub(crate) use sources::remember;
use sources::{Source, forget, holds_candidates, local_sources};

/// What a delta download did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeltaOutcome {
    /// Bytes fetched from the server (the index and the missing chunks).
    pub fetched: u64,
    /// Bytes copied from files the cache held.
    pub reused: u64,
}

/// What [`DeltaJob::run`] did.
pub(crate) struct DeltaRun {
    /// `Ok`: the part file holds the verified file. `Err(why)`: no delta (nothing to reuse, or
    /// it stopped), so download the file whole; the part file holds only checked chunks, which
    /// a whole download resumes after.
    pub built: Result<DeltaOutcome, String>,
    /// The file's chunk index when it was fetched (checked against the signed reference), to
    /// keep for the blob once it is cached, so that a later update need not cut it again.
    pub index: Option<ChunkIndex>,
    /// The index was not fetched because the cache held nothing to reuse: fetch it after the
    /// whole download ([`index_for_later`]) rather than delay the first byte.
    pub fetch_later: bool,
}

/// Why a delta stopped before the file was complete.
enum Stop {
    /// A network failure or a short answer: try again, keeping what was written.
    Transient(String),
    /// Something a retry cannot fix: download the file whole instead.
    Refused(String),
    /// Bytes that do not hash to what the signed index says: the source lied (or broke).
    Lied(String),
    /// The source failed and the next one takes over at once.
    NextSource,
    /// The cache failed (a full disk): the download fails.
    Client(ClientError),
}

impl From<ClientError> for Stop {
    fn from(e: ClientError) -> Self {
        Stop::Client(e)
    }
}

/// Fetches the chunk index `r` describing a file of `file_size` bytes from `url`, checking its
/// size and digest against the signed reference.
fn fetch_index(
    agent: &ureq::Agent,
    url: &str,
    r: &ChunkIndexRef,
    file_size: u64,
    limits: &DownloadLimits,
    whole_request: Option<std::time::Duration>,
) -> Result<ChunkIndex, Stop> {
    let mut resp = agent
        .get(url)
        .config()
        .timeout_recv_body(Some(limits.min_body_time))
        .timeout_global(whole_request)
        .build()
        .call()
        .map_err(|e| Stop::Transient(format!("chunk index: {e}")))?;
    if resp.status().as_u16() != 200 {
        return Err(Stop::Refused(format!(
            "chunk index: HTTP {}",
            resp.status().as_u16()
        )));
    }
    let bytes = resp
        .body_mut()
        .with_config()
        .limit(r.size + 1)
        .read_to_vec()
        .map_err(|e| Stop::Transient(format!("chunk index: {e}")))?;
    if bytes.len() as u64 != r.size || Sha256Digest::of(&bytes) != r.sha256 {
        return Err(Stop::Lied(
            "the chunk index the server sent is not the signed one".into(),
        ));
    }
    ChunkIndex::parse(&bytes, file_size).map_err(|e| Stop::Refused(e.to_string()))
}

/// The stable code a source's failure is reported with.
fn code_of(stop: &Stop) -> &'static str {
    use ferry_shared::errors::ErrorCode;
    match stop {
        Stop::Transient(_) => ErrorCode::Network,
        Stop::Lied(_) => ErrorCode::HashMismatch,
        _ => ErrorCode::BadResponse,
    }
    .as_str()
}

/// The text of a stop that ends the delta.
fn why_of(stop: Stop) -> Result<String, ClientError> {
    match stop {
        Stop::Transient(w) | Stop::Refused(w) | Stop::Lied(w) => Ok(w),
        Stop::NextSource => Ok("every source failed".into()),
        Stop::Client(e) => Err(e),
    }
}

/// Fetches the chunk index `r` from `routes` in order: each once, the last with `retries`
/// retries of a transient failure. What each route did goes to `tally` and `book`.
#[allow(clippy::too_many_arguments)]
fn index_from(
    agent: &ureq::Agent,
    routes: &[Route],
    r: &ChunkIndexRef,
    file_size: u64,
    limits: &DownloadLimits,
    whole_request: Option<std::time::Duration>,
    retries: u32,
    (book, tally): (&SourceBook, &mut Tally),
) -> Result<ChunkIndex, Stop> {
    let mut last = Stop::Refused("no source for the chunk index".into());
    for (i, route) in routes.iter().enumerate() {
        let is_last = i + 1 == routes.len();
        let mut failures = 0u32;
        loop {
            match fetch_index(agent, &route.url, r, file_size, limits, whole_request) {
                Ok(index) => {
                    tally.served(route, r.size);
                    if let Some(s) = &route.source {
                        book.mark_good(s);
                    }
                    return Ok(index);
                }
                Err(Stop::Transient(_)) if is_last && failures < retries => {
                    failures += 1;
                    std::thread::sleep(backoff(limits, failures));
                }
                Err(Stop::Client(e)) => return Err(Stop::Client(e)),
                Err(stop) => {
                    tally.failed(route, code_of(&stop));
                    if let Some(s) = &route.source {
                        book.mark_bad(s);
                    }
                    last = stop;
                    break;
                }
            }
        }
    }
    Err(last)
}

/// The file being built: the `.part` file, the hash of what it holds, and the counts.
struct Builder<'a> {
    root: &'a Path,
    part: &'a Path,
    file: File,
    hasher: Sha256,
    written: u64,
    outcome: DeltaOutcome,
    buf: Vec<u8>,
    wanted: Wanted<'a>,
    progress: Option<&'a ProgressFn>,
}

impl Builder<'_> {
    /// Checks `self.buf` against chunk `c` and appends it.
    fn append(&mut self, c: &Chunk, what: &str) -> Result<(), Stop> {
        let digest = Sha256Digest::from_bytes(Sha256::digest(&self.buf).into());
        if digest != c.sha256 {
            return Err(Stop::Refused(format!(
                "{what} chunk at byte {} hashes to {digest}, the signed index says {}",
                self.written, c.sha256
            )));
        }
        self.file
            .write_all(&self.buf)
            .map_err(|e| ClientError::io(self.part, e))?;
        self.hasher.update(&self.buf);
        self.written += c.size;
        if let Some(p) = self.progress {
            p(self.wanted.id, self.written, self.wanted.size);
        }
        Ok(())
    }

    /// Copies chunk `c` from the cached file `src`.
    fn copy(&mut self, c: &Chunk, src: &Source) -> Result<(), Stop> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(c.size as usize, 0);
        let read = File::open(&src.path).and_then(|mut f| {
            f.seek(SeekFrom::Start(src.offset))?;
            f.read_exact(&mut buf)
        });
        self.buf = buf;
        let result = match read {
            Ok(()) => self.append(c, "a cached"),
            Err(e) => Err(Stop::Refused(format!(
                "cannot read cached {}: {e}",
                src.path.display()
            ))),
        };
        if let Err(Stop::Refused(_)) = &result {
            // The kept index promised a chunk the blob does not hold (changed, evicted or
            // damaged): cut it again next time rather than trust it.
            forget(self.root, &src.digest);
        }
        result?;
        self.outcome.reused += c.size;
        Ok(())
    }

    /// Fetches the chunks `run` (adjacent, in order) with one `Range` request.
    fn fetch(
        &mut self,
        agent: &ureq::Agent,
        url: &str,
        run: &[Chunk],
        limits: &DownloadLimits,
    ) -> Result<(), Stop> {
        let from = self.written;
        let len: u64 = run.iter().map(|c| c.size).sum();
        let to = from + len - 1;
        let body_time = limits.min_body_time
            + limits
                .body_time_per_mib
                .mul_f64(len as f64 / (1 << 20) as f64);
        let mut resp = agent
            .get(url)
            .config()
            .timeout_recv_body(Some(body_time))
            .build()
            .header("range", format!("bytes={from}-{to}"))
            .call()
            .map_err(|e| Stop::Transient(e.to_string()))?;
        let status = resp.status().as_u16();
        match status {
            206 => {}
            408 | 429 | 500..=599 => return Err(Stop::Transient(format!("HTTP {status}"))),
            200 => return Err(Stop::Refused("the server ignores Range requests".into())),
            other => return Err(Stop::Refused(format!("HTTP {other} to a Range request"))),
        }
        let range = resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_content_range);
        if range != Some((from, to, self.wanted.size)) {
            return Err(Stop::Refused(format!(
                "asked for bytes {from}-{to}/{}, the server answered {range:?}",
                self.wanted.size
            )));
        }
        let mut reader = resp.body_mut().with_config().limit(len).reader();
        for c in run {
            let mut buf = std::mem::take(&mut self.buf);
            buf.resize(c.size as usize, 0);
            reader
                .read_exact(&mut buf)
                .map_err(|e| Stop::Transient(format!("range body: {e}")))?;
            self.buf = buf;
            self.append(c, "a fetched").map_err(|e| match e {
                Stop::Refused(why) => Stop::Lied(why),
                other => other,
            })?;
            self.outcome.fetched += c.size;
        }
        Ok(())
    }
}

/// A delta download: what to build, from where.
pub(crate) struct DeltaJob<'a> {
    /// The HTTP agent.
    pub agent: &'a ureq::Agent,
    /// Where the file is, in the order to try (ranges are asked of one, then the next when it
    /// fails).
    pub routes: &'a [Route],
    /// Where its chunk index is, in the order to try.
    pub index_routes: &'a [Route],
    /// The signed reference to its chunk index.
    pub index: ChunkIndexRef,
    /// The cache's root folder (its blobs are the chunks' sources).
    pub cache_root: &'a Path,
    /// The partial file to build.
    pub part: &'a Path,
    /// The file, as signed.
    pub wanted: Wanted<'a>,
    /// Retry and time limits.
    pub limits: &'a DownloadLimits,
    /// Progress, as a whole download reports it.
    pub progress: Option<&'a ProgressFn>,
    /// The index when [`estimate`] fetched it already.
    pub prefetched: Option<ChunkIndex>,
    /// Sources that failed recently.
    pub book: &'a SourceBook,
    /// What each source did for this file.
    pub tally: std::cell::RefCell<Tally>,
    /// The route ranges are asked of now (an index into `routes`).
    pub current: std::cell::Cell<usize>,
}

impl DeltaJob<'_> {
    /// One pass over the file from the last complete chunk in the part file to its end.
    fn build_once(
        &self,
        index: &ChunkIndex,
        sources: &HashMap<Sha256Digest, Source>,
        outcome: &mut DeltaOutcome,
    ) -> Result<(), Stop> {
        let part = self.part;
        // Keep the complete chunks already written; the one in flight is fetched again.
        let have = part_len(part);
        let mut start = 0u64;
        let mut first = 0usize;
        for (offset, c) in index.with_offsets() {
            if offset + c.size > have {
                break;
            }
            start = offset + c.size;
            first += 1;
        }
        let hasher = hash_prefix(part, start)?;
        let file = open_at(part, start)?;
        let mut b = Builder {
            root: self.cache_root,
            part,
            file,
            hasher,
            written: start,
            outcome: std::mem::take(outcome),
            buf: Vec::new(),
            wanted: self.wanted,
            progress: self.progress,
        };
        let chunks = &index.chunks[first..];
        let mut i = 0;
        let mut result = Ok(());
        while i < chunks.len() && result.is_ok() {
            if let Some(src) = sources.get(&chunks[i].sha256) {
                result = b.copy(&chunks[i], src);
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chunks.len() && !sources.contains_key(&chunks[j].sha256) {
                j += 1;
            }
            result = self.fetch_run(&mut b, &chunks[i..j]);
            i = j;
        }
        *outcome = std::mem::take(&mut b.outcome);
        b.file.flush().map_err(|e| ClientError::io(part, e))?;
        result?;
        b.file.sync_all().map_err(|e| ClientError::io(part, e))?;
        let digest = Sha256Digest::from_bytes(b.hasher.finalize().into());
        if digest != self.wanted.sha256 {
            truncate(part)?;
            return Err(Stop::Refused(format!(
                "the built file hashes to {digest}, not the signed {}",
                self.wanted.sha256
            )));
        }
        Ok(())
    }

    /// Fetches the chunks `run` from the current route; when it fails and another route is
    /// left, notes the failure and moves on to that route (`Stop::NextSource`).
    fn fetch_run(&self, b: &mut Builder<'_>, run: &[Chunk]) -> Result<(), Stop> {
        let at = self.current.get().min(self.routes.len().saturating_sub(1));
        let Some(route) = self.routes.get(at) else {
            return Err(Stop::Refused("no source for the file".into()));
        };
        let before = b.outcome.fetched;
        let got = b.fetch(self.agent, &route.url, run, self.limits);
        let mut tally = self.tally.borrow_mut();
        tally.served(route, b.outcome.fetched - before);
        match got {
            Ok(()) => Ok(()),
            Err(Stop::Client(e)) => Err(Stop::Client(e)),
            Err(stop) if at + 1 < self.routes.len() => {
                tally.failed(route, code_of(&stop));
                if let Some(s) = &route.source {
                    self.book.mark_bad(s);
                }
                self.current.set(at + 1);
                Err(Stop::NextSource)
            }
            Err(Stop::Lied(why)) => Err(Stop::Refused(why)),
            Err(stop) => Err(stop),
        }
    }

    /// Builds the file into the part file from cached chunks and ranges of its URL, when the
    /// cache holds some of its chunks (see [`DeltaRun`]). `Err`: the cache failed.
    pub(crate) fn run(&self) -> Result<DeltaRun, ClientError> {
        let (limits, wanted) = (self.limits, self.wanted);
        let whole = |why: &str, index, fetch_later| DeltaRun {
            built: Err(why.to_string()),
            index,
            fetch_later,
        };
        if !limits.delta || wanted.size < CHUNKED_FILE_MIN {
            return Ok(whole("no delta for this file", None, false));
        }
        if !holds_candidates(self.cache_root, &wanted.sha256) {
            return Ok(whole(
                "the cache holds no file to take chunks from",
                None,
                true,
            ));
        }
        let index = match &self.prefetched {
            Some(i) => i.clone(),
            None => {
                // Only without an estimate's index: fetched here, with retries.
                let fetched = index_from(
                    self.agent,
                    self.index_routes,
                    &self.index,
                    wanted.size,
                    limits,
                    None,
                    limits.retries,
                    (self.book, &mut self.tally.borrow_mut()),
                );
                match fetched {
                    Ok(i) => i,
                    Err(stop) => return Ok(whole(&why_of(stop)?, None, false)),
                }
            }
        };
        let sources = local_sources(self.cache_root, &wanted.sha256, &index);
        if sources.is_empty() {
            return Ok(whole(
                "the cache holds none of its chunks",
                Some(index),
                false,
            ));
        }
        let mut outcome = DeltaOutcome {
            fetched: self.index.size,
            reused: 0,
        };
        let mut failures = 0u32;
        loop {
            match self.build_once(&index, &sources, &mut outcome) {
                Ok(()) => {
                    return Ok(DeltaRun {
                        built: Ok(outcome),
                        index: Some(index),
                        fetch_later: false,
                    });
                }
                Err(Stop::Transient(why)) => {
                    failures += 1;
                    if failures > limits.retries {
                        let why = format!("gave up after {failures} attempts: {why}");
                        return Ok(whole(&why, Some(index), false));
                    }
                    std::thread::sleep(backoff(limits, failures));
                }
                Err(Stop::NextSource) => {}
                Err(Stop::Refused(why) | Stop::Lied(why)) => {
                    return Ok(whole(&why, Some(index), false));
                }
                Err(Stop::Client(e)) => return Err(e),
            }
        }
    }
}

/// The chunk index `r` of a file of `file_size` bytes just downloaded whole, fetched once from
/// `url` (no retries, at most ten seconds; `None` on any failure) after the file is in the
/// cache, so that the cache knows the new blob's chunks without cutting it.
pub(crate) fn index_for_later(
    agent: &ureq::Agent,
    routes: &[Route],
    r: &ChunkIndexRef,
    file_size: u64,
    limits: &DownloadLimits,
) -> Option<ChunkIndex> {
    let quick = DownloadLimits {
        min_body_time: std::time::Duration::from_secs(10),
        ..*limits
    };
    index_from(
        agent,
        routes,
        r,
        file_size,
        &quick,
        Some(std::time::Duration::from_secs(10)),
        0,
        (&SourceBook::default(), &mut Tally::default()),
    )
    .ok()
}

/// What [`DeltaJob::run`] would fetch for file `wanted`, known before it starts (for a
/// download budget): its chunk index, fetched and checked (for the job to use), and the bytes
/// of the index and of the chunks no cached blob holds (all of them when none is cached: the
/// file then comes whole). `None` when the job would not fetch the index: delta updates off, a
/// small file, nothing cached to take chunks from, or no index to be had.
pub(crate) fn estimate(
    agent: &ureq::Agent,
    index_routes: &[Route],
    r: &ChunkIndexRef,
    wanted: &Wanted<'_>,
    cache_root: &Path,
    limits: &DownloadLimits,
) -> Option<(ChunkIndex, u64)> {
    if !limits.delta
        || wanted.size < CHUNKED_FILE_MIN
        || !holds_candidates(cache_root, &wanted.sha256)
    {
        return None;
    }
    let index = index_from(
        agent,
        index_routes,
        r,
        wanted.size,
        limits,
        None,
        limits.retries,
        (&SourceBook::default(), &mut Tally::default()),
    )
    .ok()?;
    let sources = local_sources(cache_root, &wanted.sha256, &index);
    let missing: u64 = index
        .chunks
        .iter()
        .filter(|c| !sources.contains_key(&c.sha256))
        .map(|c| c.size)
        .sum();
    Some((index, r.size + missing))
}
