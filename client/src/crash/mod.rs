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
        self.known_crashes()
    }

    /// The crash list, with the crashes found this run that the cache could not keep (a full
    /// disk): they still stand for this process.
    pub(crate) fn known_crashes(&self) -> Vec<CrashRecord> {
        let mut list = self.crash_ledger.read();
        for c in ferry_shared::sync::lock(&self.unsaved_crashes).iter() {
            list.retain(|k| k.sha256 != c.sha256);
            list.push(c.clone());
        }
        list
    }

    /// Forgets the crashes of `model` (every model: `None`), so its crashed variants are tried
    /// again on the next load (after the app shipped a fix of its own, say). Returns how many
    /// were forgotten.
    pub fn forget_crashes(&self, model: Option<&str>) -> Result<usize, ClientError> {
        let of = |c: &CrashRecord| model.is_none_or(|m| c.model == m);
        ferry_shared::sync::lock(&self.unsaved_crashes).retain(|c| !of(c));
        self.crash_ledger.update(&of, |_| Vec::new())
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
        crashes.iter().find(|c| {
            c.sha256 == *sha256 && c.stands() && c.holds_for(&app, &runtime, &device.os_version)
        })
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
            clock_offset_s: self.clock_offset_secs(),
        }
    }

    /// Takes the marks of processes that died mid-step (one variant blamed per process: see
    /// [`culprits`]), re-checks the blamed variant's files, lists the crashes and queues the
    /// events of those that stand. The marks are cleared only once the list is written; when it
    /// cannot be (a full disk), the crashes still stand for this process and the marks are
    /// read again at the next start. A failure here never fails a load.
    pub(crate) fn recover_crashes(&self, device: &DeviceInfo) {
        let landings = self.flights.landed();
        if landings.is_empty() {
            return;
        }
        let chosen = culprits(&landings);
        let (blamed, rest): (Vec<_>, Vec<_>) = landings
            .into_iter()
            .enumerate()
            .partition(|(i, _)| chosen.contains(i));
        // A process that ended between steps had its variants loaded fine: a pending strike of
        // a run crash of theirs is reset.
        let ended_well: Vec<Sha256Digest> = rest
            .iter()
            .filter(|(_, l)| !l.landed.in_flight)
            .map(|(_, l)| l.landed.record.sha256)
            .collect();
        let mut events = Vec::new();
        let mut fresh = Vec::new();
        let mut kept = Vec::new();
        let mut done: Vec<flight::Landing> = rest.into_iter().map(|(_, l)| l).collect();
        for (_, l) in blamed {
            if let Some(event) = self.corrupted(&l.landed, device) {
                events.push(event);
                done.push(l);
            } else {
                fresh.push(crash_record(&l.landed, self.clock_offset_secs()));
                kept.push(l);
            }
        }
        let mut added = Vec::new();
        let reset = |r: &CrashRecord| !r.stands() && ended_well.contains(&r.sha256);
        let written = self.crash_ledger.update(&reset, |known| {
            added = fresh
                .into_iter()
                .map(|mut c| {
                    if let Some(k) = known.iter().find(|k| {
                        k.sha256 == c.sha256
                            && k.stage == c.stage
                            && k.holds_for(&c.app_version, &c.runtime_version, &c.os_version)
                    }) {
                        c.count = k.count.saturating_add(1);
                    }
                    c
                })
                .collect();
            added.clone()
        });
        match written {
            Ok(_) => {
                done.extend(kept);
                events.extend(
                    added
                        .iter()
                        .filter(|c| c.stands())
                        .map(|c| self.crash_event(c, device)),
                );
            }
            Err(_) => ferry_shared::sync::lock(&self.unsaved_crashes).extend(added),
        }
        self.flights.settle(done);
        if !events.is_empty() {
            let _ = self.telemetry.push(&events);
        }
    }

    /// Takes `sha256` off the crash list after it loaded: a crash under other versions (the
    /// retry after an update worked). A crash another process just listed under these versions
    /// stays.
    pub(crate) fn crash_cleared(
        &self,
        crashes: &[CrashRecord],
        sha256: &Sha256Digest,
        device: &DeviceInfo,
    ) {
        if crashes.iter().any(|c| c.sha256 == *sha256) {
            let (app, runtime) = (
                self.app_version.to_string(),
                self.runtime.version().to_string(),
            );
            let stale = |c: &CrashRecord| {
                c.sha256 == *sha256 && !c.holds_for(&app, &runtime, &device.os_version)
            };
            ferry_shared::sync::lock(&self.unsaved_crashes).retain(|c| !stale(c));
            let _ = self.crash_ledger.update(&stale, |_| Vec::new());
        }
    }

    /// When a file of the landed variant no longer matches its digest, or cannot be read: it is
    /// removed (fetched again when next needed) and a failed `verify` event says so; the
    /// variant is not blamed.
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
            // A file that can no longer be read whole (a bad page: the runtime's read of the
            // mapped file may have been what killed the process) is corrupt as surely as one
            // that hashes to something else. A file that is gone (evicted) says nothing.
            let corrupt = match crate::cache::hash_file(&path) {
                Ok(got) => got != digest,
                Err(_) => path.is_file(),
            };
            if corrupt {
                let _ = std::fs::remove_file(&path);
                bad = true;
            }
        }
        bad.then(|| {
            let r = &l.record;
            Client::corrupt_event(TelemetryEvent {
                variant: r.variant.clone(),
                delegate: r.delegate.clone(),
                receipt: r.receipt.clone(),
                ..self.event(EventKind::Verify, &r.release, &r.model, None, device)
            })
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

/// Which in-flight slots to blame, one per process: when several steps were in flight in the
/// process that died (a model running while another loads, say), the load's step (program,
/// method, golden, probe) is blamed before a run, and the latest step among equals; the others
/// were only in flight with it.
fn culprits(landings: &[flight::Landing]) -> Vec<usize> {
    let key = |x: &Landed| (x.stage != Stage::Run, x.seq);
    let mut best: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for (i, l) in landings.iter().enumerate() {
        let x = &l.landed;
        if !x.in_flight {
            continue;
        }
        match best.get(&x.session) {
            Some(&j) if key(&landings[j].landed) >= key(x) => {}
            _ => {
                best.insert(x.session, i);
            }
        }
    }
    best.into_values().collect()
}

/// The crash of a landed flight: its time corrected by the clock offset the device had then,
/// else the one it has now.
fn crash_record(l: &Landed, offset_now: Option<i64>) -> CrashRecord {
    let r = &l.record;
    let offset = r.clock_offset_s.or(offset_now).unwrap_or(0);
    let format = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .ok()
    };
    let at = time::OffsetDateTime::from_unix_timestamp(l.at_unix.saturating_sub(offset))
        .ok()
        .and_then(format)
        .or_else(|| format(time::OffsetDateTime::now_utc()))
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
        count: 1,
        runs_before: l.runs,
    }
}

fn crashed_message(c: &CrashRecord) -> String {
    let or_unknown = |v: &str| {
        if v.is_empty() {
            "unknown".to_string()
        } else {
            v.to_string()
        }
    };
    format!(
        "crashed this app natively at {} on {} ({} {}; app {}, runtime {}, OS {}); passed over \
         until one of those versions changes or the app forgets the crash",
        c.stage,
        c.at,
        c.model,
        c.release,
        or_unknown(&c.app_version),
        or_unknown(&c.runtime_version),
        or_unknown(&c.os_version)
    )
}
