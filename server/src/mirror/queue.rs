//! The telemetry a site mirror's devices send, queued on disk and forwarded to the origin in
//! order: a batch is written (aside, synced, renamed) before the device is answered, so nothing
//! accepted is lost across a restart or a kill of the mirror; one thread sends the oldest batch
//! to the origin until it is taken, with the device's address in `X-Forwarded-For` and its
//! `Ferry-Sdk` and `Ferry-Protocol` headers, the events (and their receipts) byte for byte.
//!
//! Bounded: at most [`MAX_BATCHES`] batches and [`MAX_BYTES`] bytes wait; past that a device is
//! told to come back later (429) and keeps its events. A batch the origin refuses for what it
//! is (a 4xx other than 408 and 429) is dropped and counted, never retried for ever; anything
//! else (no answer, 5xx, 408, 429) is retried with a growing pause, up to 10 seconds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Most batches waiting.
pub const MAX_BATCHES: usize = 100_000;
/// Most bytes waiting.
pub const MAX_BYTES: u64 = 512 << 20;

/// One queued batch.
#[derive(Debug, Serialize, Deserialize)]
struct Queued {
    /// The device's address, as the mirror saw it (or its proxy reported it).
    from: Option<String>,
    /// The device's `Ferry-Sdk` header.
    sdk: Option<String>,
    /// The device's `Ferry-Protocol` header.
    protocol: Option<String>,
    /// The request body, as the device sent it.
    body: String,
}

/// Counts for `GET /v1/admin/mirror`.
#[derive(Debug, Default)]
pub struct QueueCounts {
    /// Batches forwarded and taken by the origin.
    pub forwarded: AtomicU64,
    /// Batches the origin refused (dropped).
    pub dropped: AtomicU64,
    /// Events of forwarded batches the origin refused one by one (its answer's `rejected`).
    pub rejected_events: AtomicU64,
}

/// What is queued, in memory (the folder is read once, at open).
#[derive(Debug, Default)]
struct Pending {
    /// The next batch's sequence number.
    next: u64,
    /// The queued batches, oldest first: sequence number and size.
    batches: std::collections::VecDeque<(u64, u64)>,
    /// Their total size.
    bytes: u64,
}

/// The queue on disk.
#[derive(Debug)]
pub struct Queue {
    dir: PathBuf,
    pending: Mutex<Pending>,
    wake: Condvar,
    stopped: std::sync::atomic::AtomicBool,
    /// Forwarded and dropped batches.
    pub counts: QueueCounts,
}

/// Why a batch was not queued.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue is at its bound.
    #[error("the mirror's telemetry queue is full ({0}); send again later")]
    Full(String),
    /// The disk failed.
    #[error("the mirror could not keep the batch: {0}")]
    Disk(String),
}

fn sequence_of(name: &str) -> Option<u64> {
    name.strip_suffix(".json")?.parse().ok()
}

impl Queue {
    /// Opens the queue in `dir` (what a previous run left is sent first).
    pub fn open(dir: &Path) -> anyhow::Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        let mut pending = Pending::default();
        for (n, path) in Self::files(dir) {
            let len = std::fs::metadata(&path).map_or(0, |m| m.len());
            pending.batches.push_back((n, len));
            pending.bytes += len;
            pending.next = n + 1;
        }
        pending.next = pending.next.max(1);
        Ok(Arc::new(Queue {
            dir: dir.to_path_buf(),
            pending: Mutex::new(pending),
            wake: Condvar::new(),
            stopped: std::sync::atomic::AtomicBool::new(false),
            counts: QueueCounts::default(),
        }))
    }

    /// The queued files, oldest first.
    fn files(dir: &Path) -> Vec<(u64, PathBuf)> {
        let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let n = sequence_of(&e.file_name().to_string_lossy())?;
                Some((n, e.path()))
            })
            .collect();
        out.sort();
        out
    }

    /// Batches and bytes waiting.
    pub fn depth(&self) -> (usize, u64) {
        let p = ferry_shared::sync::lock(&self.pending);
        (p.batches.len(), p.bytes)
    }

    fn path_of(&self, n: u64) -> PathBuf {
        self.dir.join(format!("{n:020}.json"))
    }

    /// Queues one batch (durably) and wakes the forwarder.
    pub fn push(
        &self,
        body: String,
        from: Option<String>,
        sdk: Option<String>,
        protocol: Option<String>,
    ) -> Result<(), QueueError> {
        let q = Queued {
            from,
            sdk,
            protocol,
            body,
        };
        let bytes = serde_json::to_vec(&q).map_err(|e| QueueError::Disk(e.to_string()))?;
        let size = bytes.len() as u64;
        // The bound and the write under one lock: concurrent batches cannot overshoot it.
        let mut p = ferry_shared::sync::lock(&self.pending);
        if p.batches.len() >= MAX_BATCHES || p.bytes + size > MAX_BYTES {
            return Err(QueueError::Full(format!(
                "{} batches, {} bytes",
                p.batches.len(),
                p.bytes
            )));
        }
        let n = p.next;
        super::kept::write_atomic(&self.path_of(n), &bytes)
            .map_err(|e| QueueError::Disk(e.to_string()))?;
        p.next += 1;
        p.batches.push_back((n, size));
        p.bytes += size;
        drop(p);
        self.wake.notify_all();
        Ok(())
    }

    /// Removes the oldest batch (sent or dropped).
    fn pop(&self, n: u64) {
        let _ = std::fs::remove_file(self.path_of(n));
        let mut p = ferry_shared::sync::lock(&self.pending);
        if p.batches.front().is_some_and(|(m, _)| *m == n)
            && let Some((_, size)) = p.batches.pop_front()
        {
            p.bytes = p.bytes.saturating_sub(size);
        }
    }

    /// Stops the forwarder (after the batch it is sending, if any).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_all();
    }

    /// Forwards batches to `origin` until [`Queue::stop`] (a thread of its own).
    pub fn forward(self: Arc<Self>, origin: String, agent: ureq::Agent, contact: Arc<Contact>) {
        let mut pause = Duration::from_millis(250);
        while !self.stopped.load(Ordering::Acquire) {
            let front = ferry_shared::sync::lock(&self.pending)
                .batches
                .front()
                .copied();
            let Some((n, _)) = front else {
                let guard = ferry_shared::sync::lock(&self.pending);
                let _ = self
                    .wake
                    .wait_timeout(guard, Duration::from_secs(1))
                    .map(|(g, _)| drop(g));
                continue;
            };
            let path = self.path_of(n);
            match self.send(&origin, &agent, &path) {
                Sent::Taken(rejected) => {
                    contact.reached();
                    self.counts.forwarded.fetch_add(1, Ordering::Relaxed);
                    if let Some((n, first)) = rejected {
                        self.counts.rejected_events.fetch_add(n, Ordering::Relaxed);
                        tracing::warn!(batch = %path.display(), "the origin took a queued telemetry batch but refused {n} of its events, the first: {first}");
                    }
                    self.pop(n);
                    pause = Duration::from_millis(250);
                }
                Sent::Refused(why) => {
                    contact.reached();
                    tracing::warn!(batch = %path.display(), "the origin refused a queued telemetry batch: {why}; dropped");
                    self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                    self.pop(n);
                }
                Sent::Later(why) => {
                    contact.failed(&why);
                    let guard = ferry_shared::sync::lock(&self.pending);
                    let _ = self.wake.wait_timeout(guard, pause).map(|(g, _)| drop(g));
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    fn send(&self, origin: &str, agent: &ureq::Agent, path: &Path) -> Sent {
        let q: Queued = match std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(q) => q,
            Err(e) => return Sent::Refused(format!("unreadable: {e}")),
        };
        let mut req = agent
            .post(format!("{origin}/v1/telemetry"))
            .header("content-type", "application/json");
        if let Some(from) = &q.from {
            req = req.header("x-forwarded-for", from);
        }
        if let Some(sdk) = &q.sdk {
            req = req.header(ferry_shared::wire::protocol::SDK_HEADER, sdk);
        }
        if let Some(p) = &q.protocol {
            req = req.header(ferry_shared::wire::protocol::PROTOCOL_HEADER, p);
        }
        match req.send(q.body.as_bytes()) {
            Ok(mut resp) => match resp.status().as_u16() {
                200..=299 => Sent::Taken(refused_events(&mut resp)),
                408 | 429 | 500..=599 => Sent::Later(format!("HTTP {}", resp.status())),
                s => Sent::Refused(format!("HTTP {s}")),
            },
            Err(e) => Sent::Later(e.to_string()),
        }
    }
}

/// How many events of a taken batch the origin refused, and the first one's code and reason.
fn refused_events(resp: &mut ureq::http::Response<ureq::Body>) -> Option<(u64, String)> {
    let text = resp
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .ok()?;
    let answer: serde_json::Value = serde_json::from_str(&text).ok()?;
    let rejected = answer["rejected"].as_array().filter(|r| !r.is_empty())?;
    let first = &rejected[0];
    Some((
        rejected.len() as u64,
        format!(
            "{} ({})",
            first["code"].as_str().unwrap_or("?"),
            first["message"].as_str().unwrap_or("")
        ),
    ))
}

enum Sent {
    /// Taken, with the events it refused one by one (how many, the first's reason).
    Taken(Option<(u64, String)>),
    Refused(String),
    Later(String),
}

/// When the mirror last reached the origin, and the last failure since.
#[derive(Debug, Default)]
pub struct Contact {
    state: Mutex<(Option<time::OffsetDateTime>, Option<String>)>,
}

impl Contact {
    /// The origin answered (said once, at WARN, when it is back after a failure).
    pub fn reached(&self) {
        let mut s = ferry_shared::sync::lock(&self.state);
        if let Some(why) = &s.1 {
            tracing::warn!("the origin is reachable again (it was not: {why})");
        }
        *s = (Some(time::OffsetDateTime::now_utc()), None);
    }

    /// The origin could not be reached (`why`; said once at WARN until it is back).
    pub fn failed(&self, why: &str) {
        let mut s = ferry_shared::sync::lock(&self.state);
        if s.1.is_none() {
            tracing::warn!(
                "the origin cannot be reached: {why}; the mirror serves what it holds and \
                 keeps, and queues telemetry"
            );
        }
        s.1 = Some(why.to_string());
    }

    /// When it last answered, and the failure since, if any.
    pub fn get(&self) -> (Option<time::OffsetDateTime>, Option<String>) {
        ferry_shared::sync::lock(&self.state).clone()
    }

    /// True while the last attempt failed.
    pub fn is_down(&self) -> bool {
        ferry_shared::sync::lock(&self.state).1.is_some()
    }
}
