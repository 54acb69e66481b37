//! `Telemetry`: what one replica does with telemetry as it arrives, and the fleet-wide views.
//!
//! `POST /v1/telemetry` takes `{"events": [...]}`. Each event is validated on its own; bad ones
//! are listed in the answer with their index and code, the rest are kept. Events with a valid
//! receipt are counted per minute (at most [`PER_DEVICE_EVENTS`] per device and variant an
//! hour) into the outbox ([`crate::fleet::persist::outbox`]) as mergeable rollups
//! ([`crate::fleet::counts::rollup`]) per model, release, variant and device class; every
//! accepted event is kept there for the Parquet log ([`crate::fleet::persist::events`]). The
//! flush writes the minutes as time buckets ([`crate::fleet::persist::buckets`]) and installs
//! what it read of every replica's ([`crate::fleet::persist::seen`]); the views here (fleet
//! counts, windows, series, health) merge the store's buckets with the outbox. Ingestion
//! never takes a lock that resolve takes: resolve reads only the rollout and deny snapshots
//! (and notes the census in the outbox's own minute maps).
//!
//! What the views lead to (halts, ramps, learned deny entries) is in `crate::fleet::actions`.

use ferry_shared::errors::ErrorCode;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use ferry_shared::wire::resolve::Cohort;
use ferry_shared::wire::telemetry::{EventKind, TelemetryEvent};
use serde::Serialize;
use time::OffsetDateTime;

use crate::fleet::census::ResolveNote;
use crate::fleet::census::clients::{self, Vouched};
use crate::fleet::config::{SDK_NAMES_PER_NETWORK_PER_HOUR, TelemetryConfig};
use crate::fleet::counts::rollup::Rollup;
use crate::fleet::devices::hash_id;
use crate::fleet::intake::evidence::EvidenceGate;
use crate::fleet::intake::ingest::{EventError, MAX_DEVICES, validate};
use crate::fleet::intake::limits::{IpKey, Limiter};
use crate::fleet::persist::accepted::{Accepted, AcceptedEvent};
use crate::fleet::persist::buckets::Level;
use crate::fleet::persist::outbox::Outbox;
use crate::fleet::persist::seen::Seen;

/// Most events one device adds to one variant's counts on one replica in an hour: a device
/// (even one with a real receipt) weighs at most this much in rates, halts, ramps and deny
/// decisions, however many events it sends; more are kept in the raw log only.
pub const PER_DEVICE_EVENTS: u8 = 8;

/// Most `crash` events one device adds to one variant's counts on one replica in an hour, apart
/// from [`PER_DEVICE_EVENTS`] (a client reports each crash once, on the next launch).
pub const PER_DEVICE_CRASHES: u8 = 2;

/// Rejected events of a batch whose answer entry says why (the others carry their index and
/// code only).
pub const MESSAGES_IN_ANSWER: usize = 32;

/// (model, release, variant; a variant's crashes under its id followed by NUL and `crash`).
type VariantKey = (String, String, String);

/// The in-memory telemetry state of one server: intake's own (the per-device cap, the rate
/// limits, when each model was last evaluated), what waits to be written ([`Outbox`]) and what
/// this run has seen of the store ([`Seen`]). The flush works on the last two alone.
#[derive(Debug, Default)]
pub struct Telemetry {
    /// Events counted per device per variant this hour (the [`PER_DEVICE_EVENTS`] cap).
    caps: Mutex<HashMap<VariantKey, HashMap<u64, u8>>>,
    /// The hour `caps` counts.
    caps_hour: Mutex<i64>,
    limiter: std::sync::OnceLock<Limiter>,
    /// The installs each address brought into the evidence this hour.
    evidence: Mutex<EvidenceGate>,
    evaluated: Mutex<HashMap<String, Instant>>,
    /// What this run counted and accepted, not yet written.
    outbox: Outbox,
    /// The store as this run last saw it, and what it wrote since.
    seen: Seen,
    /// The SDK names that take a census row of their own.
    vouched: Vouched,
}

/// What a replica's telemetry state holds (see [`Telemetry::footprint`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Footprint {
    /// Rate-limit buckets (addresses and installs), each at most `limits::MAX_KEYS`.
    pub limiter_buckets: usize,
    /// Model/release/variant keys of the per-device cap.
    pub capped_variants: usize,
    /// Devices tracked by the per-device cap, over all variants.
    pub capped_devices: usize,
    /// (address, install) pairs of the evidence allowance this hour.
    pub evidence_pairs: usize,
    /// Model/release/variant entries in this replica's rollup.
    pub rollup_variants: usize,
    /// Raw events waiting to be flushed.
    pub raw_events: usize,
}

/// What one batch did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IngestReport {
    /// Events kept.
    pub accepted: usize,
    /// Accepted events without a valid receipt: kept in the raw log, counted nowhere else.
    pub unverified: usize,
    /// Events refused, with reasons.
    pub rejected: Vec<EventError>,
    /// Events of a kind a newer client added: neither kept nor refused (protocol v1).
    pub ignored: usize,
    /// Whether any event weighs in (a valid receipt, an install within its address's
    /// allowance): then the batch may vouch for its SDK's name ([`Telemetry::vouch`]).
    #[serde(skip)]
    pub weighed: bool,
    /// Receipted events of installs beyond their address's allowance of new installs this
    /// hour: kept in the raw log, weighing in nothing (for the metrics).
    #[serde(skip)]
    pub unweighed: usize,
    /// Fields this server does not know, seen in the batch's events (for the metrics).
    #[serde(skip)]
    pub unknown_fields: Vec<String>,
    /// The models whose aggregates changed (to evaluate).
    #[serde(skip)]
    pub counted_models: std::collections::BTreeSet<String>,
}

impl Telemetry {
    /// The state of a server configured by `cfg` (its census vouching threshold; the rest is
    /// read from the config each call).
    pub fn new(cfg: &TelemetryConfig) -> Self {
        Self {
            vouched: Vouched::new(cfg.census_min_networks),
            ..Self::default()
        }
    }

    fn limiter(&self, cfg: &TelemetryConfig) -> &Limiter {
        self.limiter
            .get_or_init(|| Limiter::new(cfg.per_address_per_minute, cfg.per_install_per_minute))
    }

    /// True when `addr` may make another request.
    pub fn allow_address(&self, addr: Option<std::net::IpAddr>, cfg: &TelemetryConfig) -> bool {
        self.limiter(cfg).address(IpKey::of(addr))
    }

    /// Drops idle rate-limit buckets (at each flush).
    pub fn prune_limits(&self) {
        if let Some(l) = self.limiter.get() {
            l.prune();
        }
    }

    /// How much this replica's telemetry state holds, for the memory bound: (rate-limit
    /// buckets, per-device cap entries, model/release/variant classes in the local rollup,
    /// raw events buffered).
    pub fn footprint(&self) -> Footprint {
        let (addresses, installs) = self.limiter.get().map_or((0, 0), Limiter::sizes);
        let caps = lock(&self.caps);
        Footprint {
            limiter_buckets: addresses + installs,
            capped_variants: caps.len(),
            capped_devices: caps.values().map(HashMap::len).sum(),
            evidence_pairs: lock(&self.evidence).len(),
            rollup_variants: self.outbox.pending_variants(),
            raw_events: self.outbox.raw_len(),
        }
    }

    /// Validates a batch of events (each one's JSON text), refuses those `known` refuses (a
    /// model, release or variant that is not published: they store nothing), and decides what
    /// the others add: every one goes to the raw log, and only those `verified` accepts (a valid
    /// receipt) to the aggregates (what halts, ramps, deny entries and health read), within the
    /// per-device cap and the allowance of new installs of the sender's address `from` (see
    /// [`crate::fleet::intake::evidence`]). Nothing is counted yet: the batch is
    /// [`Telemetry::apply`]'d once it is durable (or at once, without a journal).
    pub fn ingest(
        &self,
        events: &[&str],
        now: OffsetDateTime,
        cfg: &TelemetryConfig,
        known: &dyn Fn(&TelemetryEvent) -> Result<(), String>,
        verified: &dyn Fn(&TelemetryEvent) -> bool,
        from: Option<std::net::IpAddr>,
    ) -> (IngestReport, Accepted) {
        let mut report = IngestReport::default();
        let mut good = Vec::new();
        for (i, v) in events.iter().enumerate() {
            let peek = ferry_shared::wire::telemetry::peek_event(v);
            if report.unknown_fields.len() < 256 {
                report.unknown_fields.extend(peek.unknown_fields);
            }
            if peek.unknown_kind {
                report.ignored += 1;
                continue;
            }
            if peek.malformed_kind {
                report.rejected.push(EventError {
                    index: i,
                    code: ErrorCode::EventInvalid,
                    message: "kind is not an event kind name: download, verify, load, fallback, \
                              inference, crash, or a newer kind of 1 to 32 characters of a-z, \
                              0-9 and _ (which is ignored)"
                        .into(),
                });
                continue;
            }
            match validate(v, now, cfg).and_then(|e| {
                known(&e).map_err(|m| (ErrorCode::EventInvalid, m))?;
                Ok(e)
            }) {
                Ok(e) => good.push((i, e)),
                Err((code, message)) => report.rejected.push(EventError {
                    index: i,
                    code,
                    message,
                }),
            }
        }
        let mut kept: Vec<(TelemetryEvent, bool)> = Vec::new();
        {
            let lim = self.limiter(cfg);
            for (i, e) in good {
                // Only devices with a receipt get a per-install bucket: made-up install ids
                // must not fill (and so reset) the limiter. Unreceipted events are bounded by
                // the per-address limit and count toward nothing.
                let ok = verified(&e);
                if !ok {
                    kept.push((e, false));
                    continue;
                }
                if lim.install(hash_id(&e.install_id), 1) {
                    kept.push((e, true));
                } else {
                    report.rejected.push(EventError {
                        index: i,
                        code: ErrorCode::RateLimited,
                        message: format!(
                            "install {} sends more than {} events a minute",
                            e.install_id, cfg.per_install_per_minute
                        ),
                    });
                }
            }
        }
        report.rejected.sort_by_key(|e| e.index);
        // A bounded answer: every rejected event keeps its index and code, and only the first
        // ones say why (500 events that fail alike would otherwise repeat one message 500
        // times).
        for e in report.rejected.iter_mut().skip(MESSAGES_IN_ANSWER) {
            e.message = String::new();
        }
        report.accepted = kept.len();
        let mut batch = Accepted {
            received_ns: i64::try_from(now.unix_timestamp_nanos()).unwrap_or(i64::MAX),
            network: IpKey::network(from),
            events: Vec::with_capacity(kept.len()),
        };
        let mut caps = lock(&self.caps);
        // The per-device weight holds per hour: a device that keeps failing keeps counting
        // (at most PER_DEVICE_EVENTS an hour), and windows see it.
        let hour = Level::Hour.floor(now.unix_timestamp());
        {
            let mut epoch = lock(&self.caps_hour);
            if *epoch != hour {
                caps.clear();
                *epoch = hour;
            }
        }
        let address = IpKey::of(from);
        let mut gate = lock(&self.evidence);
        for (event, verified) in kept {
            // Only receipted events of installs within their address's allowance weigh in.
            let id = verified.then(|| hash_id(&event.install_id));
            let Some(id) = id.filter(|id| {
                gate.admits(
                    address,
                    *id,
                    hour,
                    cfg.evidence_installs_per_address_per_hour,
                )
            }) else {
                if verified {
                    report.unweighed += 1;
                } else {
                    report.unverified += 1;
                }
                batch
                    .events
                    .push(AcceptedEvent::new(event, verified, false));
                continue;
            };
            // Crashes have a budget of their own: a device that reports a crash was not
            // kept from it by its other events, and reports few crashes.
            let (key, cap) = if event.kind == EventKind::Crash {
                (format!("{}\u{0}crash", event.variant), PER_DEVICE_CRASHES)
            } else {
                (event.variant.clone(), PER_DEVICE_EVENTS)
            };
            let per_device = caps
                .entry((event.model.clone(), event.release.clone(), key))
                .or_default();
            // A full map starts over (a new window for this variant) rather than letting
            // devices it cannot track count without limit.
            if per_device.len() >= MAX_DEVICES && !per_device.contains_key(&id) {
                per_device.clear();
            }
            report.weighed = true;
            let n = per_device.entry(id).or_default();
            let counted = *n < cap;
            if counted {
                *n += 1;
                if !report.counted_models.contains(&event.model) {
                    report.counted_models.insert(event.model.clone());
                }
            }
            batch
                .events
                .push(AcceptedEvent::new(event, verified, counted));
        }
        (report, batch)
    }

    /// Counts an accepted batch and keeps its events (at once: without a journal, or as the
    /// journal applies a record it made durable, `seq`).
    pub fn apply(&self, batch: Accepted, seq: u64, cfg: &TelemetryConfig) {
        let minute = self.outbox.minute_of(OffsetDateTime::now_utc());
        self.apply_in(batch, minute, seq, cfg);
    }

    /// [`Telemetry::apply`] in a given minute (the journal chose it, and wrote it down).
    pub fn apply_in(&self, batch: Accepted, minute: i64, seq: u64, cfg: &TelemetryConfig) {
        self.outbox
            .apply(batch, minute, seq, cfg.raw_buffer_events.max(1) * 5);
    }

    /// True when `model` is due for a threshold evaluation (and marks it evaluated).
    pub fn due(&self, model: &str, cfg: &TelemetryConfig) -> bool {
        let mut m = ferry_shared::sync::lock(&self.evaluated);
        let now = Instant::now();
        match m.get(model) {
            Some(t) if now.duration_since(*t).as_millis() < u128::from(cfg.evaluate_ms) => false,
            _ => {
                m.insert(model.to_string(), now);
                true
            }
        }
    }

    /// Notes what one resolve established about a device: its protocol and SDK (the client
    /// census), its runtime (the runtime census) and the cohort it was served (cohort sizes),
    /// each when known, under one lock.
    pub fn note_resolve(&self, note: &ResolveNote<'_>) {
        let minute = self.outbox.minute_of(OffsetDateTime::now_utc());
        let id = hash_id(note.install_id);
        let mut cohorts = self.outbox.cohorts();
        let at = cohorts.entry(minute).or_default();
        if let Some(runtime) = note.runtime {
            crate::fleet::census::runtimes::note(&mut at.runtimes, note.model, runtime, id);
            if let Some((_, digest)) = runtime.split_once(' ') {
                at.note_digest(digest);
            }
        }
        if let Some(client) = note.client {
            let client = self.vouched.fold(client);
            crate::fleet::census::clients::note(&mut at.clients, note.model, &client, id);
        }
        if let Some(cohort) = note.cohort {
            let name = if cohort == Cohort::Staged {
                "staged"
            } else {
                "baseline"
            };
            at.note_cohort(note.model, name, id);
        }
    }

    /// Notes that a batch whose events weigh in ([`IngestReport::weighed`]) came from `from`
    /// with the SDK `sdk` (`NAME/VERSION`): its network vouches for the name, within the
    /// address's allowance of names an hour. The name takes its census row once enough
    /// networks did (see [`Vouched`]).
    pub fn vouch(&self, sdk: &str, from: Option<std::net::IpAddr>) {
        if self.vouched.min_networks() == 0 {
            return;
        }
        let now = OffsetDateTime::now_utc();
        let hour = Level::Hour.floor(now.unix_timestamp());
        if !lock(&self.evidence).vouches(from, sdk, hour, SDK_NAMES_PER_NETWORK_PER_HOUR) {
            return;
        }
        let minute = self.outbox.minute_of(now);
        clients::note_vouch(
            &mut self.outbox.cohorts().entry(minute).or_default().sdks,
            sdk,
            IpKey::network(from),
        );
        if !self.vouched.holds(sdk) {
            self.vouched.consider(sdk, &self.networks_of(sdk));
        }
    }

    /// True when the SDK `sdk` (`NAME/VERSION`) takes a census row and a metrics label of its
    /// own (see [`Vouched`]).
    pub fn sdk_vouched(&self, sdk: &str) -> bool {
        self.vouched.holds(sdk)
    }

    /// Recomputes the vouched SDK names from the fleet's counts (after a flush read them).
    pub fn refresh_vouched(&self) {
        if self.vouched.min_networks() > 0 {
            self.vouched.replace(&self.vouches());
        }
    }

    /// The networks that vouched for each SDK name, fleet-wide.
    fn vouches(&self) -> BTreeMap<String, crate::fleet::devices::Devices> {
        let mut all = BTreeMap::new();
        self.each_vouches(|sdks| clients::merge_vouches(&mut all, sdks));
        all
    }

    /// The networks that vouched for `sdk`, fleet-wide.
    fn networks_of(&self, sdk: &str) -> crate::fleet::devices::Devices {
        let mut networks = crate::fleet::devices::Devices::default();
        self.each_vouches(|sdks| {
            if let Some(n) = sdks.get(sdk) {
                networks.merge(n);
            }
        });
        networks
    }

    /// Calls `f` with the vouches of the store's view, of what this run wrote since, and of
    /// the outbox's minutes.
    fn each_vouches(&self, mut f: impl FnMut(&BTreeMap<String, crate::fleet::devices::Devices>)) {
        self.seen.read(|view, written| {
            f(&view.total.sdks);
            for (_, _, w) in written {
                f(&w.sdks);
            }
        });
        self.outbox.each_minute(|_, r| f(&r.sdks));
    }

    /// What waits to be written (the flush takes from it).
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// What this run has seen of the store (the flush installs what it read).
    pub fn seen(&self) -> &Seen {
        &self.seen
    }

    /// The whole fleet's counts for `model`: the store's buckets merged with what this run
    /// holds in memory.
    pub fn fleet(&self, model: &str) -> Rollup {
        let mut out = Rollup::default();
        self.seen.read(|view, written| {
            out.merge_model(&view.total, model);
            for (_, _, w) in written {
                out.merge_model(w, model);
            }
        });
        self.outbox.each_minute(|_, r| out.merge_model(r, model));
        out
    }

    /// The fleet's counts for `model` in the buckets that end after `since` (unix seconds),
    /// and the start of the earliest bucket counted (`since` itself when it falls on a
    /// bucket boundary or nothing was counted).
    pub fn window(&self, model: &str, since: i64) -> (Rollup, i64) {
        let mut out = Rollup::default();
        let mut from = since;
        let mut add = |start: i64, len: i64, r: &Rollup| {
            if start + len > since {
                out.merge_model(r, model);
                from = from.min(start);
            }
        };
        self.seen.each_bucket(&mut add);
        self.outbox.each_minute(|start, r| add(start, 60, r));
        (out, from)
    }

    /// The fleet's counts for `model` per `step` seconds (steps aligned to multiples of `step`
    /// since the epoch, each keyed by its start), oldest first: each bucket counts in the step
    /// its start falls in (a bucket compacted to an hour or a day counts whole in the step of
    /// its start). Buckets that start before `since` are left out.
    pub fn series(&self, model: &str, since: i64, step: i64) -> BTreeMap<i64, Rollup> {
        let step = step.max(60);
        let mut out: BTreeMap<i64, Rollup> = BTreeMap::new();
        let mut add = |start: i64, r: &Rollup| {
            if start >= since {
                let at = start.div_euclid(step) * step;
                out.entry(at).or_default().merge_model(r, model);
            }
        };
        self.seen.each_bucket(|start, _, r| add(start, r));
        self.outbox.each_minute(&mut add);
        out
    }

    /// Loads, failures and fallbacks of all variants of `release` of `model`, fleet-wide.
    pub fn release_totals(&self, model: &str, release: &str) -> (u64, u64, u64) {
        self.fleet(model).release_totals(model, release)
    }

    /// The fleet-wide health view of `model` (releases newest first).
    pub fn health(&self, model: &str) -> serde_json::Value {
        self.fleet(model).health(model)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    ferry_shared::sync::lock(m)
}

#[cfg(test)]
mod tests;
