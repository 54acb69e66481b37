//! The on-disk telemetry queue.
//!
//! Events are appended to `<cache>/telemetry/queue.ndjson` (one JSON object a line) so they
//! survive restarts, bounded to `max_events` (the oldest drop first). [`TelemetryQueue::send`]
//! posts them in batches to `POST /v1/telemetry` and removes what the server accepted. Sending
//! is separate from loading: a load only appends, so a slow or missing telemetry endpoint
//! never blocks or fails it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ferry_shared::telemetry::{TelemetryBatch, TelemetryEvent};

use crate::cache::write_durable;
use crate::error::ClientError;

/// Default bound on queued events.
pub const DEFAULT_MAX_EVENTS: usize = 1000;
/// Events per request.
pub const BATCH: usize = 100;

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

impl TelemetryQueue {
    /// A queue in `dir`.
    pub fn new(dir: &Path, max_events: usize) -> Self {
        Self {
            path: dir.join("telemetry/queue.ndjson"),
            max_events: max_events.max(1),
            lock: Mutex::new(()),
        }
    }

    fn read_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path)
            .map(|s| {
                s.lines()
                    .filter(|l| serde_json::from_str::<TelemetryEvent>(l).is_ok())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
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
        let _g = self.lock.lock();
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| ClientError::io(dir, e))?;
        }
        let existing = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        // Cheap path: append; the bound is enforced when the file grows past it.
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| ClientError::io(&self.path, e))?;
        let mut text = String::new();
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

    /// The queued events, oldest first.
    pub fn pending(&self) -> Vec<TelemetryEvent> {
        let _g = self.lock.lock();
        self.read_lines()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Sends queued events in batches. Stops at the first batch the server does not take
    /// (network error, 404 from a server without telemetry, 5xx) and keeps it queued.
    pub fn send(&self, agent: &ureq::Agent, server: &str) -> SendReport {
        let _g = self.lock.lock();
        let mut lines = self.read_lines();
        let mut report = SendReport::default();
        while !lines.is_empty() {
            let n = lines.len().min(BATCH);
            let events: Vec<TelemetryEvent> = lines[..n]
                .iter()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let body = match serde_json::to_vec(&TelemetryBatch { events }) {
                Ok(b) => b,
                Err(_) => break,
            };
            let status = agent
                .post(format!("{server}/v1/telemetry"))
                .header("content-type", "application/json")
                .send(&body[..])
                .map(|r| r.status().as_u16());
            match status {
                // Accepted, or refused as malformed (retrying cannot help): drop the batch.
                Ok(s) if (200..300).contains(&s) || s == 400 || s == 422 => {
                    lines.drain(..n);
                    report.sent += n;
                    if self.write_lines(&lines).is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
        report.queued = lines.len();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_shared::telemetry::{EventKind, Outcome};

    fn event(i: usize) -> TelemetryEvent {
        TelemetryEvent {
            receipt: None,
            stage: None,
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
