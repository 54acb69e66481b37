//! The on-disk telemetry queue.
//!
//! Events are appended to `<cache>/telemetry/queue.ndjson` (one JSON object a line) so they
//! survive restarts, bounded to `max_events` (the oldest drop first). [`TelemetryQueue::send`]
//! posts them in batches to `POST /v1/telemetry` and removes what the server accepted. Sending
//! is separate from loading: a load only appends, so a slow or missing telemetry endpoint
//! never blocks or fails it.
//!
//! Several processes of an app may share the queue. Every change to `queue.ndjson` is made
//! under an exclusive OS lock on `telemetry/queue.lock`, so appends never interleave or get
//! lost. A sender claims the queued events by renaming the file to
//! `telemetry/sending-<pid>-<n>.ndjson` (under that lock) and holds a lock on the claimed file
//! while it sends, so one process sends a given event; what the server did not take goes back
//! into the queue. A claim whose sender died (its lock is free) is taken back into the queue
//! by the next sender, except the batches its progress file says were accepted. Every step
//! writes before it deletes, so a process killed at any point loses no event; a kill at the
//! wrong moment can make a batch, or the events it had not sent yet, be sent twice.
//!
//! Appending waits at most [`PUSH_WAIT`] for the queue lock (a frozen process may hold it):
//! telemetry never holds up a load.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ferry_shared::wire::telemetry::{TelemetryBatch, TelemetryEvent};

use crate::cache::locks;
use crate::cache::write_durable;
use crate::error::ClientError;

/// Default bound on queued events.
pub const DEFAULT_MAX_EVENTS: usize = 1000;
/// Events per request.
pub const BATCH: usize = 100;

/// Longest an append waits for another process holding the queue lock.
pub const PUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The queue.
#[derive(Debug)]
pub struct TelemetryQueue {
    path: PathBuf,
    max_events: usize,
    lock: Mutex<()>,
}

/// What a send did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendReport {
    /// Events the server accepted (or refused as malformed, which are dropped too).
    pub sent: usize,
    /// Events still queued.
    pub queued: usize,
}

/// The parseable event lines of the file at `path` (none when it is missing).
fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| {
            s.lines()
                .filter(|l| serde_json::from_str::<TelemetryEvent>(l).is_ok())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl TelemetryQueue {
    /// A queue in `dir`.
    pub fn new(dir: &Path, max_events: usize) -> Self {
        Self {
            path: dir.join("telemetry/queue.ndjson"),
            max_events: max_events.max(1),
            lock: Mutex::new(()),
        }
    }

    fn dir(&self) -> PathBuf {
        self.path
            .parent()
            .map_or_else(PathBuf::new, Path::to_path_buf)
    }

    /// The exclusive lock every change to the queue file is made under (this process's
    /// threads and other processes alike).
    fn locked(&self) -> Result<(std::sync::MutexGuard<'_, ()>, locks::FileLock), ClientError> {
        self.locked_within(None)
    }

    /// [`TelemetryQueue::locked`], giving up after `wait` when one is given.
    fn locked_within(
        &self,
        wait: Option<std::time::Duration>,
    ) -> Result<(std::sync::MutexGuard<'_, ()>, locks::FileLock), ClientError> {
        let g = ferry_shared::sync::lock(&self.lock);
        let dir = self.dir();
        std::fs::create_dir_all(&dir).map_err(|e| ClientError::io(&dir, e))?;
        let path = dir.join("queue.lock");
        let Some(wait) = wait else {
            return Ok((g, locks::exclusive(&path)?));
        };
        match locks::exclusive_within(&path, wait)? {
            Some(l) => Ok((g, l)),
            None => Err(ClientError::CacheIo {
                path,
                message: "another process held the telemetry queue too long; events dropped".into(),
            }),
        }
    }

    fn read_lines(&self) -> Vec<String> {
        lines_of(&self.path)
    }

    fn write_lines(&self, lines: &[String]) -> Result<(), ClientError> {
        let mut text = lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        write_durable(&self.path, text.as_bytes())
    }

    /// Appends events, dropping the oldest beyond the bound. Errors are returned but callers
    /// on the load path ignore them: telemetry never fails a load.
    pub fn push(&self, events: &[TelemetryEvent]) -> Result<(), ClientError> {
        if events.is_empty() {
            return Ok(());
        }
        let _held = self.locked_within(Some(PUSH_WAIT))?;
        let existing = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        // Cheap path: append; the bound is enforced when the file grows past it.
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| ClientError::io(&self.path, e))?;
        let mut text = String::new();
        // A process killed mid-append left a line without its end: end it, so this append
        // starts a line of its own (the torn one is skipped when read).
        if existing > 0 && !ends_with_newline(&f, existing) {
            text.push('\n');
        }
        for e in events {
            if let Ok(line) = serde_json::to_string(e) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        f.write_all(text.as_bytes())
            .map_err(|e| ClientError::io(&self.path, e))?;
        f.sync_data().map_err(|e| ClientError::io(&self.path, e))?;
        drop(f);
        if existing > 0 {
            let lines = self.read_lines();
            if lines.len() > self.max_events {
                let keep = lines[lines.len() - self.max_events..].to_vec();
                self.write_lines(&keep)?;
            }
        }
        Ok(())
    }

    /// The queued events, oldest first (not those another process is sending right now).
    pub fn pending(&self) -> Vec<TelemetryEvent> {
        let _held = self.locked();
        self.read_lines()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Puts the lines of claims whose sender died back at the head of the queue (the caller
    /// holds the queue lock), less the batches their progress files say were accepted.
    fn adopt_orphans(&self) {
        let Ok(rd) = std::fs::read_dir(self.dir()) else {
            return;
        };
        let mut back = Vec::new();
        let mut adopted = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !(name.starts_with("sending-") && name.ends_with(".ndjson")) {
                continue;
            }
            let path = e.path();
            // Held: its sender is alive and sending it.
            let Ok(locks::Exclusive::Locked(held)) = locks::try_exclusive_existing(&path) else {
                continue;
            };
            let progress = path.with_extension("progress");
            let sent: usize = std::fs::read_to_string(&progress)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            back.extend(lines_of(&path).into_iter().skip(sent));
            adopted.push((path, progress, held));
        }
        if !back.is_empty() {
            back.extend(self.read_lines());
            let keep = back.len().saturating_sub(self.max_events);
            // Written before the claims go: a failure leaves them to be adopted again.
            if self.write_lines(&back[keep..]).is_err() {
                return;
            }
        }
        for (path, progress, held) in adopted {
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&progress);
            drop(held);
        }
    }

    /// Sends queued events in batches. Stops at the first batch the server does not take
    /// (network error, 404 from a server without telemetry, 5xx) and keeps it queued.
    pub fn send(&self, agent: &ureq::Agent, server: &str) -> SendReport {
        let mut report = SendReport::default();
        // Claim what is queued now (under the queue lock), and hold the claim while sending.
        let (claim, held, lines) = {
            let Ok(_held) = self.locked() else {
                return report;
            };
            self.adopt_orphans();
            let lines = self.read_lines();
            if lines.is_empty() {
                return report;
            }
            static CLAIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let claim = self
                .dir()
                .join(format!("sending-{}-{n}.ndjson", std::process::id()));
            // A progress file left by an earlier process of the same id belongs to no claim.
            let _ = std::fs::remove_file(claim.with_extension("progress"));
            if std::fs::rename(&self.path, &claim).is_err() {
                return report;
            }
            let Ok(held) = locks::exclusive(&claim) else {
                return report;
            };
            (claim, held, lines)
        };
        let progress = claim.with_extension("progress");
        let mut sent = 0usize;
        while sent < lines.len() {
            let n = (lines.len() - sent).min(BATCH);
            let events: Vec<TelemetryEvent> = lines[sent..sent + n]
                .iter()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let Ok(body) = serde_json::to_vec(&TelemetryBatch { events }) else {
                break;
            };
            let status = agent
                .post(format!("{server}/v1/telemetry"))
                .header("content-type", "application/json")
                .send(&body[..])
                .map(|r| r.status().as_u16());
            match status {
                // Accepted, or refused as malformed (retrying cannot help): done with it.
                Ok(s) if (200..300).contains(&s) || s == 400 || s == 422 => {
                    sent += n;
                    report.sent += n;
                    let _ = write_durable(&progress, sent.to_string().as_bytes());
                }
                _ => break,
            }
        }
        // What was not taken goes back to the head of the queue.
        if let Ok(_q) = self.locked() {
            let mut back: Vec<String> = lines[sent..].to_vec();
            back.extend(self.read_lines());
            let keep = back.len().saturating_sub(self.max_events);
            // Written, then the claim removed, then its progress: a kill between two steps can
            // make events be sent twice, never lost.
            if self.write_lines(&back[keep..]).is_ok() {
                let _ = std::fs::remove_file(&claim);
                let _ = std::fs::remove_file(&progress);
            }
            report.queued = back.len() - keep;
        }
        drop(held);
        report
    }
}

/// Whether the file `f` of length `len` ends with a newline.
fn ends_with_newline(f: &std::fs::File, len: u64) -> bool {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut f = f;
    let mut last = [0u8; 1];
    f.seek(SeekFrom::Start(len - 1)).is_ok() && f.read_exact(&mut last).is_ok() && last[0] == b'\n'
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_shared::wire::telemetry::{EventKind, Outcome};

    fn event(i: usize) -> TelemetryEvent {
        TelemetryEvent {
            receipt: None,
            stage: None,
            clock_offset_s: None,
            inference: Default::default(),
            bytes_fetched: None,
            bytes_total: None,
            sources: Vec::new(),
            metric: Default::default(),
            kind: EventKind::Load,
            model: "m".into(),
            release: "1.0.0".into(),
            variant: format!("v{i}"),
            delegate: "xnnpack".into(),
            outcome: Outcome::Ok,
            error_code: None,
            load_ms: Some(1.0),
            install_id: "i".into(),
            platform: "linux".into(),
            soc: String::new(),
            device_model: String::new(),
            os_version: String::new(),
            app_version: "1.0.0".into(),
            runtime_version: "1.5.1".into(),
            at: "2026-12-02T00:00:00Z".into(),
            to_variant: None,
        }
    }

    #[test]
    fn bounded_oldest_dropped_and_survives_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        let q = TelemetryQueue::new(dir.path(), 5);
        for i in 0..8 {
            q.push(&[event(i)]).expect("push");
        }
        let again = TelemetryQueue::new(dir.path(), 5);
        let got: Vec<String> = again.pending().into_iter().map(|e| e.variant).collect();
        assert_eq!(got, ["v3", "v4", "v5", "v6", "v7"]);
        // A torn last line (crash mid-append) is skipped, not fatal.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("telemetry/queue.ndjson"))
            .and_then(|mut f| f.write_all(b"{\"kind\":\"lo"))
            .expect("tear");
        assert_eq!(again.pending().len(), 5);
    }
}
