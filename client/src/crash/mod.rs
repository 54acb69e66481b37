//! Crash-safe loading: the flight recorder marks each native step of a load or a run
//! ([`flight`]); the next start finds the marks of processes that died mid-step, re-checks the
//! variant's files (a file that no longer matches its digest is corruption, not a crash), lists
//! the crash ([`ledger`]) and queues a `crash` event; the load then passes over that variant
//! while the app, runtime and OS versions are the same.

pub(crate) mod flight;
pub mod ledger;

use ferry_shared::Sha256Digest;
use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

use crate::Client;
use crate::error::{Attempt, ClientError, Stage};
use crate::types::DeviceInfo;
use flight::{FlightRecord, Landed};
use ledger::CrashRecord;

impl Client {
    /// The variants that crashed this app on this device, oldest first, whether or not they
    /// still hold for the current versions.
    pub fn crashes(&self) -> Vec<CrashRecord> {
        self.crash_ledger.read()
    }

    /// Forgets the crashes of `model` (every model: `None`), so its crashed variants are tried
    /// again on the next load (after the app shipped a fix of its own, say). Returns how many
    /// were forgotten.
    pub fn forget_crashes(&self, model: Option<&str>) -> Result<usize, ClientError> {
        self.crash_ledger.update(|known| {
            let drop = known
                .iter()
                .filter(|c| model.is_none_or(|m| c.model == m))
                .map(|c| c.sha256)
                .collect();
            (drop, Vec::new())
        })
    }

    /// The crash that stands against the program `sha256` on `device` now, if any.
    pub(crate) fn crash_of<'c>(
        &self,
        crashes: &'c [CrashRecord],
        sha256: &Sha256Digest,
        device: &DeviceInfo,
    ) -> Option<&'c CrashRecord> {
        let (app, runtime) = (
            self.app_version.to_string(),
            self.runtime.version().to_string(),
        );
        crashes
            .iter()
            .find(|c| c.sha256 == *sha256 && c.holds_for(&app, &runtime, &device.os_version))
    }

    /// The attempt that stands for a variant passed over because of `crash`.
    pub(crate) fn crashed_attempt(crash: &CrashRecord) -> Attempt {
        Attempt {
            variant: crash.variant.clone(),
            delegate: crash.delegate.clone(),
            stage: crash.stage(),
            error_code: ErrorCode::Crashed.as_str().to_string(),
            message: crashed_message(crash),
            duration_ms: 0.0,
        }
    }

    /// A flight for `record` (`None`: the cache cannot hold one; the step goes on unrecorded).
    pub(crate) fn flight(&self, record: &FlightRecord) -> Option<flight::Flight> {
        if !self.record_flights {
            return None;
        }
        self.flights.begin(record)
    }

    /// What a flight of `v` of `release` records now.
    pub(crate) fn flight_record(
        &self,
        model: &str,
        release: &str,
        v: &ferry_shared::manifest::Variant,
        receipt: Option<&str>,
        device: &DeviceInfo,
    ) -> FlightRecord {
        FlightRecord {
            model: model.to_string(),
            release: release.to_string(),
            variant: v.id.to_string(),
            delegate: v.delegate.to_string(),
            sha256: v.sha256,
            data: v.side_files().map(|f| f.sha256).collect(),
            receipt: receipt.map(str::to_string),
            app_version: self.app_version.to_string(),
            runtime_version: self.runtime.version().to_string(),
            os_version: device.os_version.clone(),
            clock_offset_s: self.clock_offset_secs().unwrap_or(0),
        }
    }

    /// Takes the marks of processes that died mid-step, lists their crashes, queues their
    /// events. A failure here never fails a load.
    pub(crate) fn recover_crashes(&self, device: &DeviceInfo) {
        let landed = self.flights.landed();
        if !landed.is_empty() {
            let mut events = Vec::new();
            let mut crashes = Vec::new();
            for l in landed {
                if let Some(event) = self.corrupted(&l, device) {
                    events.push(event);
                    continue;
                }
                let crash = crash_record(&l);
                events.push(self.crash_event(&crash, device));
                crashes.push(crash);
            }
            let _ = self.crash_ledger.update(|_| (Vec::new(), crashes));
            let _ = self.telemetry.push(&events);
        }
    }

    /// Takes `sha256` off the crash list after it loaded (a retry after an update worked).
    pub(crate) fn crash_cleared(&self, crashes: &[CrashRecord], sha256: &Sha256Digest) {
        if crashes.iter().any(|c| c.sha256 == *sha256) {
            let _ = self.crash_ledger.update(|_| (vec![*sha256], Vec::new()));
        }
    }

    /// When a file of the landed variant no longer matches its digest: it is removed (fetched
    /// again when next needed) and a failed `verify` event says so; the variant is not blamed.
    fn corrupted(&self, l: &Landed, device: &DeviceInfo) -> Option<TelemetryEvent> {
        let paths: Vec<(Sha256Digest, std::path::PathBuf)> = {
            let cache = self.cache();
            std::iter::once(l.record.sha256)
                .chain(l.record.data.iter().copied())
                .map(|d| (d, cache.blob_path(&d)))
                .collect()
        };
        let mut bad = false;
        for (digest, path) in paths {
            match crate::cache::hash_file(&path) {
                Ok(got) if got != digest => {
                    let _ = std::fs::remove_file(&path);
                    bad = true;
                }
                _ => {}
            }
        }
        bad.then(|| {
            let r = &l.record;
            let mut e = self.event(EventKind::Verify, &r.release, &r.model, None, device);
            e.variant.clone_from(&r.variant);
            e.delegate.clone_from(&r.delegate);
            e.outcome = Outcome::Failed;
            e.error_code = Some(ErrorCode::HashMismatch.as_str().to_string());
            e.stage = Some(Stage::Cache.as_str().to_string());
            e.receipt.clone_from(&r.receipt);
            e
        })
    }

    /// The `crash` event of `crash`.
    fn crash_event(&self, crash: &CrashRecord, device: &DeviceInfo) -> TelemetryEvent {
        TelemetryEvent {
            variant: crash.variant.clone(),
            delegate: crash.delegate.clone(),
            outcome: Outcome::Failed,
            error_code: Some(ErrorCode::Crashed.as_str().to_string()),
            stage: Some(crash.stage.clone()),
            receipt: crash.receipt.clone(),
            at: crash.at.clone(),
            app_version: crash.app_version.clone(),
            runtime_version: crash.runtime_version.clone(),
            os_version: crash.os_version.clone(),
            ..self.event(EventKind::Crash, &crash.release, &crash.model, None, device)
        }
    }
}

/// The crash of a landed flight.
fn crash_record(l: &Landed) -> CrashRecord {
    let r = &l.record;
    let at = time::OffsetDateTime::from_unix_timestamp(l.at_unix.saturating_sub(r.clock_offset_s))
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default();
    CrashRecord {
        model: r.model.clone(),
        release: r.release.clone(),
        variant: r.variant.clone(),
        delegate: r.delegate.clone(),
        sha256: r.sha256,
        stage: l.stage.as_str().to_string(),
        at,
        receipt: r.receipt.clone(),
        app_version: r.app_version.clone(),
        runtime_version: r.runtime_version.clone(),
        os_version: r.os_version.clone(),
    }
}

fn crashed_message(c: &CrashRecord) -> String {
    format!(
        "{} ({}) of {} {} crashed this app at {} on {} (app {}, runtime {}, OS {}); it is not \
         loaded again until one of those versions changes or the app forgets the crash",
        c.variant,
        c.delegate,
        c.model,
        c.release,
        c.stage,
        c.at,
        c.app_version,
        c.runtime_version,
        c.os_version
    )
}
