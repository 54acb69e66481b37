//! The telemetry journal: an event answered `accepted` is on disk first, so it survives a
//! kill -9 of the server at any moment, and is counted and written to the store exactly once.
//!
//! Each accepted batch ([`Accepted`]) is appended to this run's current segment
//! ([`segment`]) by one writer thread, many batches per write and per `fdatasync` (group
//! commit), and only then counted into the outbox and answered. The record's number (`seq`)
//! and the minute it counts in are chosen by the writer thread, in order, so a minute's counts
//! always hold a run of consecutive records.
//!
//! What the flush writes carries the records it holds in its name: a minute's counts go to
//! `<writer>-j<first>-<last>` and a raw Parquet file to `<writer>-j<first>-<last>.parquet`.
//! Once both the counts and the raw events of a segment's records are written, the segment is
//! deleted. At the next start, [`replay`] reads the segments an earlier run left, finds which
//! records no stored name covers, and writes exactly those, under names made the same way (so
//! a replay cut short and run again writes nothing twice).
//!
//! The journal lives in the data directory (`<data>/journal/`): a replica whose disk does not
//! survive it (an ephemeral container) loses what it accepted since its last flush, as before;
//! docs/operations.md says so.

pub mod replay;
pub mod segment;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use crate::fleet::persist::accepted::Accepted;

/// The most bytes of records one write takes (the rest wait for the next).
const GROUP_BYTES: usize = 8 << 20;

/// Counts a batch in a minute as a journal record (see [`Hooks::apply`]).
pub type Apply = Box<dyn Fn(Accepted, i64, u64) + Send>;

/// What the writer thread does with a record it made durable.
pub struct Hooks {
    /// The minute a record written now counts in (never older than the last).
    pub minute: Box<dyn Fn() -> i64 + Send>,
    /// Counts the batch (in that minute, as record `seq`) and keeps its events.
    pub apply: Apply,
}

struct Job {
    batch: Accepted,
    reply: tokio::sync::oneshot::Sender<Result<(), String>>,
}

/// What the writer thread and the flushes share.
#[derive(Debug, Default)]
struct Segments {
    /// This run's segments no longer written to: (path, last record).
    closed: Vec<(PathBuf, u64)>,
    /// The one being written: path and last record (0: none yet).
    current: Option<(PathBuf, u64)>,
}

#[derive(Debug, Default)]
struct Shared {
    segments: Mutex<Segments>,
    /// Start a new segment at the next write.
    rotate: AtomicBool,
    /// Every record up to this one is in counts written to the store.
    counts_through: AtomicU64,
    /// Every record up to this one is in raw files written to the store.
    raw_through: AtomicU64,
    /// Segments earlier runs left, not replayed yet.
    old: Mutex<Vec<PathBuf>>,
}

/// This run's journal (see the module docs).
pub struct Journal {
    dir: PathBuf,
    writer: String,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    _lock: std::fs::File,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("dir", &self.dir).finish()
    }
}

impl Journal {
    /// Opens the journal in `dir` for this run (`writer`), with `sync` (fdatasync each group:
    /// durable against power loss too, not only a killed process). `None` when another running
    /// server holds it (two servers on one data directory): that one keeps it.
    pub fn open(
        dir: &Path,
        writer: &str,
        sync: bool,
        hooks: Hooks,
    ) -> std::io::Result<Option<Self>> {
        std::fs::create_dir_all(dir)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        let shared = Arc::new(Shared::default());
        *ferry_shared::sync::lock(&shared.old) = segment::list(dir)
            .into_iter()
            .filter(|(_, w, _)| w != writer)
            .map(|(p, _, _)| p)
            .collect();
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = {
            let (dir, writer, shared) = (dir.to_path_buf(), writer.to_string(), shared.clone());
            std::thread::Builder::new()
                .name("ferry-journal".into())
                .spawn(move || write_loop(&rx, &dir, &writer, sync, &shared, &hooks))?
        };
        Ok(Some(Self {
            dir: dir.to_path_buf(),
            writer: writer.to_string(),
            tx: Mutex::new(Some(tx)),
            shared,
            thread: Mutex::new(Some(thread)),
            _lock: lock,
        }))
    }

    /// This run's name (the prefix of what its flushes write).
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// Makes `batch` durable, then counts it; `Err` says why it could not be written (nothing
    /// was counted: the sender keeps its events and sends them again). The writer thread
    /// encodes it, off the threads that parse and validate telemetry.
    pub async fn commit(&self, batch: Accepted) -> Result<(), String> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let sent = ferry_shared::sync::lock(&self.tx)
            .as_ref()
            .is_some_and(|tx| tx.send(Job { batch, reply }).is_ok());
        if !sent {
            return Err("the telemetry journal is closed (the server is stopping)".into());
        }
        answer
            .await
            .unwrap_or_else(|_| Err("the telemetry journal stopped".into()))
    }

    /// Notes that every record up to `seq` is in counts written to the store.
    pub fn counts_written(&self, seq: u64) {
        self.shared.counts_through.fetch_max(seq, Ordering::Relaxed);
        self.settle();
    }

    /// Notes that every record up to `seq` is in raw files written to the store.
    pub fn raw_written(&self, seq: u64) {
        self.shared.raw_through.fetch_max(seq, Ordering::Relaxed);
        self.settle();
    }

    /// Deletes this run's segments whose records are all written; asks for a new segment when
    /// the current one is.
    fn settle(&self) {
        let through = self
            .shared
            .counts_through
            .load(Ordering::Relaxed)
            .min(self.shared.raw_through.load(Ordering::Relaxed));
        let mut s = ferry_shared::sync::lock(&self.shared.segments);
        s.closed.retain(|(path, last)| {
            if *last <= through {
                if let Err(e) = std::fs::remove_file(path)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!("journal segment {} not removed: {e}", path.display());
                    return true;
                }
                return false;
            }
            true
        });
        if s.current
            .as_ref()
            .is_some_and(|(_, last)| *last > 0 && *last <= through)
        {
            self.shared.rotate.store(true, Ordering::Relaxed);
        }
    }

    /// Starts a new segment at the next write (at every flush, so that a segment's records are
    /// all written, and the segment deleted, within about `telemetry.raw_roll_secs`).
    pub fn rotate(&self) {
        let s = ferry_shared::sync::lock(&self.shared.segments);
        if s.current.as_ref().is_some_and(|(_, last)| *last > 0) {
            self.shared.rotate.store(true, Ordering::Relaxed);
        }
    }

    /// Segments an earlier run left that are not replayed yet.
    pub fn old_segments(&self) -> Vec<PathBuf> {
        ferry_shared::sync::lock(&self.shared.old).clone()
    }

    /// Forgets replayed segments of earlier runs: deletes them, but those in `keep` (holding a
    /// record this version cannot read) stay on disk.
    pub fn replayed(&self, done: &[PathBuf], keep: &[PathBuf]) {
        let mut old = ferry_shared::sync::lock(&self.shared.old);
        for p in done {
            if keep.contains(p) {
                old.retain(|o| o != p);
                continue;
            }
            if let Err(e) = std::fs::remove_file(p)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!("replayed journal segment {} not removed: {e}", p.display());
                continue;
            }
            old.retain(|o| o != p);
        }
    }

    /// Stops taking records and waits for the writer thread (records already taken are
    /// written and answered first).
    pub fn close(&self) {
        drop(ferry_shared::sync::lock(&self.tx).take());
        if let Some(t) = ferry_shared::sync::lock(&self.thread).take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.close();
    }
}

/// About the bytes `batch` takes in the journal (how many batches one write takes).
fn estimate(batch: &Accepted) -> usize {
    64 + batch.events.len() * 512
}

/// The writer thread: takes every job waiting (up to [`GROUP_BYTES`]), appends their records
/// with one write (and one fdatasync), then counts them in order and answers each.
fn write_loop(
    rx: &mpsc::Receiver<Job>,
    dir: &Path,
    writer: &str,
    sync: bool,
    shared: &Shared,
    hooks: &Hooks,
) {
    let mut seq = 0u64;
    let mut file: Option<(std::fs::File, u64)> = None;
    // One buffer for every group: a fresh one each time costs page faults on every write.
    let mut out: Vec<u8> = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let mut bytes = estimate(&jobs[0].batch);
        while bytes < GROUP_BYTES {
            match rx.try_recv() {
                Ok(j) => {
                    bytes += estimate(&j.batch);
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        if shared.rotate.swap(false, Ordering::Relaxed) || file.is_none() {
            file = None;
            match segment::create(dir, writer, seq + 1) {
                Ok((path, f)) => {
                    let mut s = ferry_shared::sync::lock(&shared.segments);
                    match s.current.take() {
                        Some(done) if done.1 > 0 => s.closed.push(done),
                        // A segment that never took a record (its first write failed), unless
                        // it is the file just opened again (the same first record).
                        Some((empty, _)) if empty != path => drop(std::fs::remove_file(empty)),
                        _ => {}
                    }
                    s.current = Some((path, 0));
                    file = Some((f, 0));
                }
                Err(e) => {
                    let why = format!("the telemetry journal cannot start a segment: {e}");
                    tracing::error!("{why}");
                    for j in jobs {
                        let _ = j.reply.send(Err(why.clone()));
                    }
                    continue;
                }
            }
        }
        let Some((f, len)) = file.as_mut() else {
            continue;
        };
        out.clear();
        out.reserve(bytes + jobs.len() * segment::HEADER);
        let mut placed = Vec::with_capacity(jobs.len());
        let mut kept = Vec::with_capacity(jobs.len());
        let mut next = seq;
        for j in jobs {
            let minute = (hooks.minute)();
            if let Err(e) = segment::frame_batch(&mut out, next + 1, minute, &j.batch) {
                let _ = j
                    .reply
                    .send(Err(format!("telemetry could not be encoded: {e}")));
                continue;
            }
            next += 1;
            placed.push((next, minute));
            kept.push(j);
        }
        let jobs = kept;
        if jobs.is_empty() {
            continue;
        }
        if let Err(e) = segment::append(f, *len, &out, sync) {
            let why = format!("telemetry could not be written to the journal: {e}");
            tracing::error!("{why}");
            // Whatever the file holds now, the next records go to a new segment.
            shared.rotate.store(true, Ordering::Relaxed);
            for j in jobs {
                let _ = j.reply.send(Err(why.clone()));
            }
            continue;
        }
        *len += out.len() as u64;
        // A group far larger than usual does not keep its memory.
        if out.capacity() > GROUP_BYTES {
            out = Vec::new();
        }
        for (j, (s, minute)) in jobs.into_iter().zip(placed) {
            // The record is durable: whatever counting it does, it is answered (a replay after
            // a restart counts it if this did not).
            let counted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (hooks.apply)(j.batch, minute, s);
            }));
            if counted.is_err() {
                tracing::error!(
                    "journal record {s} could not be counted: it is written after a restart"
                );
            }
            seq = s;
            let _ = j.reply.send(Ok(()));
        }
        if let Some((_, last)) = ferry_shared::sync::lock(&shared.segments).current.as_mut() {
            *last = seq;
        }
    }
}
