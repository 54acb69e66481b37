//! [`Client`]: the handle an app holds. This file holds its fields, the small calls that read
//! them and the telemetry calls; each room adds its calls in its own `impl Client`: loading,
//! downloads and prefetch in `load/`, resolve in `transfer/resolve.rs`, learning the server's
//! time in `trust/timesync.rs`, the last known good in `cache/cached.rs`.

use std::sync::{Arc, Mutex};

use ferry_shared::trust::keyring::TrustState;
use semver::Version;

use ferry_shared::wire::telemetry::TelemetryEvent;

use crate::cache::Cache;
use crate::cache::in_use::InUse;
use crate::run::inference;
use crate::runtime::Runtime;
use crate::telemetry::{self, SendReport};
use crate::transfer::download::{DownloadLimits, ProgressFn};
use crate::trust::timekeeping::{self, Clock};

/// The client. Cheap to share behind an `Arc`; calls are blocking.
pub struct Client {
    pub(crate) server: String,
    pub(crate) trust: Mutex<TrustState>,
    /// Every request; certificates judged at [`Client::now`] (`transfer/tls.rs`).
    pub(crate) agent: ureq::Agent,
    /// `GET /v1/time` only; certificates checked except their dates (`transfer/tls.rs`).
    pub(crate) time_agent: ureq::Agent,
    pub(crate) cache: Arc<Mutex<Cache>>,
    /// Blobs the background pass is hashing now (`cache/recheck.rs`).
    pub(crate) rechecking: Arc<Mutex<std::collections::BTreeSet<ferry_shared::Sha256Digest>>>,
    pub(crate) runtime: Arc<dyn Runtime>,
    pub(crate) app_version: Version,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) limits: DownloadLimits,
    pub(crate) max_response_bytes: u64,
    pub(crate) progress: Option<ProgressFn>,
    pub(crate) method: String,
    pub(crate) telemetry: Arc<telemetry::TelemetryQueue>,
    pub(crate) autosend: bool,
    /// Whether loaded models time their runs ([`ClientBuilder::time_runs`]).
    pub(crate) time_runs: bool,
    pub(crate) sending: Arc<std::sync::atomic::AtomicBool>,
    pub(crate) in_use: InUse,
    /// The live models' run timings, sent as `inference` events at each telemetry flush.
    pub(crate) inference: Arc<inference::Registry>,
    /// Models a background update is running for ([`LoadMode::CachedThenUpdate`]).
    pub(crate) updating: Mutex<std::collections::BTreeSet<String>>,
    /// The last `Ferry-Protocol-Sunset` the server sent (see [`Client::protocol_sunset`]).
    pub(crate) sunset: Mutex<Option<String>>,
    /// The server's time as this client last learned it (see [`Client::now`]).
    pub(crate) time: Arc<timekeeping::TimeKeeper>,
    /// The flight recorder's slots in the cache (`crash/flight.rs`).
    pub(crate) flights: Arc<crate::crash::flight::Recorder>,
    /// Whether native steps are marked ([`crate::ClientBuilder::record_flights`]).
    pub(crate) record_flights: bool,
    /// The crashes found on this device (`crash/ledger.rs`).
    pub(crate) crash_ledger: crate::crash::ledger::Ledger,
    /// Crashes found this run that the cache could not keep (they stand for this process).
    pub(crate) unsaved_crashes: Mutex<Vec<crate::crash::ledger::CrashRecord>>,
    /// Blob sources that failed recently (`transfer/sources.rs`).
    pub(crate) source_book: Arc<crate::transfer::sources::SourceBook>,
    /// Where released keys of sealed variants are kept (`seal/keys.rs`).
    pub(crate) key_store: Arc<dyn crate::seal::keys::KeyStore>,
    /// The app's platform attestation for key requests, if any.
    pub(crate) attest: Option<Arc<dyn crate::seal::keys::Attest>>,
}

impl Client {
    /// The day after which the server may stop answering this client's protocol (v1), as the
    /// server announced it in its last resolve answer (`Ferry-Protocol-Sunset`, `YYYY-MM-DD`);
    /// `None` while no retirement is planned. An app should surface it to its developers (a
    /// log line, a crash-reporter breadcrumb): updating the app before that day keeps models
    /// coming. Also in every [`LoadReport`](crate::LoadReport) as `protocol_sunset`.
    pub fn protocol_sunset(&self) -> Option<String> {
        ferry_shared::sync::lock(&self.sunset).clone()
    }

    /// The time every check is judged by: the server's time as learned from a decision made
    /// for one of this client's requests, carried by the boot clock, while that holds; else
    /// the device's wall clock.
    pub fn now(&self) -> time::OffsetDateTime {
        self.time.now(&*self.clock)
    }

    /// How far the device's wall clock is from the server's time, in seconds (positive: ahead),
    /// when the client has learned it.
    pub fn clock_offset_secs(&self) -> Option<i64> {
        self.time.offset_secs(&*self.clock)
    }

    pub(crate) fn note_sunset(&self, value: Option<String>) {
        let mut g = ferry_shared::sync::lock(&self.sunset);
        *g = value;
    }

    /// The cache, with what other processes changed in its index since this one last read it
    /// (a stat of the index file when nothing changed).
    pub(crate) fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        let mut g = ferry_shared::sync::lock(&self.cache);
        // A failure keeps this process's copy; the next change re-reads under the lock anyway.
        let _ = g.refresh();
        g
    }

    /// What the client trusts now: the pinned root walked through the keyrings accepted.
    pub(crate) fn trust(&self) -> TrustState {
        ferry_shared::sync::lock(&self.trust).clone()
    }

    /// The keyring version the client holds (0: none yet, or a fixed trust file).
    pub fn keyring_version(&self) -> u64 {
        self.trust().version()
    }

    /// Backends the runtime really registered.
    pub fn registered_backends(&self) -> Vec<String> {
        self.runtime.registered_backends()
    }

    /// Queued telemetry events.
    pub fn telemetry_pending(&self) -> Vec<TelemetryEvent> {
        self.telemetry.pending()
    }

    /// Sends queued telemetry (call it from a background thread; it never affects loads),
    /// after queuing the run timings of the loaded models since the last flush
    /// ([`Client::flush_inference`]).
    pub fn send_telemetry(&self) -> SendReport {
        self.flush_inference();
        self.telemetry.send(&self.agent, &self.server)
    }

    /// Queues one `inference` event per loaded model, method and variant that ran since the
    /// last flush: runs, the cold first call, warm p50, p95 and max, the longest sustained
    /// stretch and the most severe thermal state reported (`docs/client.md`, field latency).
    /// Offline-tolerant like every event: they wait in the queue until a send succeeds.
    pub fn flush_inference(&self) {
        let events = self.inference.drain(&self.now_rfc3339());
        if !events.is_empty() {
            let _ = self.telemetry.push(&events);
        }
    }

    /// Records one value of the app metric `name` (for example `accepted` 1.0 or 0.0 when the
    /// user takes or ignores a suggestion) against every model this client has loaded and
    /// not dropped (use [`crate::LoadedModel::record_metric`] to name one of several). Values
    /// are averaged per telemetry flush and sent as one `metric` event per model and name, with
    /// the model's receipt: experiments compare them per device between arms
    /// (`docs/experiments.md`). Returns how many loaded models took it (0: none is loaded).
    /// Names are 1–64 characters of `[a-z0-9_.-]` starting with a letter (at most 32 per model
    /// between flushes); values are finite, within ±1e12.
    pub fn record_metric(&self, name: &str, value: f64) -> Result<usize, crate::ClientError> {
        if let Some(why) = crate::run::inference::metric_error(name, value) {
            return Err(crate::ClientError::Config(why));
        }
        Ok(self.inference.record_metric(name, value))
    }

    /// [`Client::now`] as RFC 3339, as events carry it.
    pub(crate) fn now_rfc3339(&self) -> String {
        self.now()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
    }

    /// The device's thermal state as the app learns it from the OS (`None`: not known). The
    /// most severe state reported while a method runs goes with its `inference` event. Map
    /// Android's `PowerManager` states: none and light to `Nominal`, moderate to `Fair`,
    /// severe to `Serious`, critical, emergency and shutdown to `Critical`; iOS's four map
    /// one to one.
    pub fn set_thermal_state(&self, state: Option<ferry_shared::wire::telemetry::Thermal>) {
        self.inference.thermal.store(
            inference::thermal_code(state),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}
