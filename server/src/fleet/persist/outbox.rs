//! The outbox: what this run counted and accepted since the last flush, waiting to be written.
//! Intake counts into it (per minute) and keeps raw events in it; the flush takes from it and
//! puts back what it could not write; the views read it with the store's buckets. Memory is
//! bounded: at most [`MAX_PENDING_MINUTES`] minutes of counts (older ones fold into the next),
//! and raw events up to five times `raw_buffer_events` (the oldest dropped and counted).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use time::OffsetDateTime;

use crate::fleet::config::TelemetryConfig;
use crate::fleet::counts::rollup::Rollup;
use crate::fleet::persist::accepted::Accepted;
use crate::fleet::persist::buckets::Level;
use crate::fleet::persist::events::RawEvent;

/// Most minutes of counts kept in memory while they cannot be written (a day): during a longer
/// store outage the oldest fold into the next one, so counts are kept and memory stays bounded
/// (those minutes then count in the later minute's bucket).
pub const MAX_PENDING_MINUTES: usize = 1440;

/// The journal records a minute's counts hold: the first and last (every record between them
/// is in them; see [`crate::fleet::persist::journal`]).
pub type Span = (u64, u64);

/// This run's counts not yet written, per minute, and the journal records each holds.
#[derive(Debug, Default)]
pub struct Pending {
    /// Counts per minute (start, unix seconds).
    pub counts: BTreeMap<i64, Rollup>,
    /// The journal records in each minute's counts.
    pub spans: BTreeMap<i64, Span>,
    /// The last journal record counted.
    pub applied: u64,
}

/// A minute's counts taken for writing: its start, counts and the journal records they hold.
pub type Taken = (i64, Rollup, Option<Span>);

/// What this run holds that the store does not have yet.
#[derive(Debug, Default)]
pub struct Outbox {
    /// This run's counts not yet written, per minute. Each flush writes them as new, immutable
    /// objects and starts again from nothing.
    pending: Mutex<Pending>,
    /// Cohort and census devices per minute, not yet written (resolve notes them; kept apart
    /// from `pending` so resolve never waits on ingestion).
    cohorts: Mutex<BTreeMap<i64, Rollup>>,
    /// Accepted events not yet in the raw log.
    raw: Mutex<Vec<RawEvent>>,
    /// The newest minute counted: events never go to an older one, even if the clock steps back.
    newest_minute: AtomicI64,
    /// Raw events dropped because the store could not keep up.
    dropped: AtomicU64,
    /// The last journal record whose events were kept for the raw log (changed under the
    /// `raw` lock).
    raw_seq: AtomicU64,
}

impl Outbox {
    /// The minute something received at `now` counts in: never older than the newest so far.
    pub fn minute_of(&self, now: OffsetDateTime) -> i64 {
        let m = Level::Minute.floor(now.unix_timestamp());
        let prev = self.newest_minute.fetch_max(m, Ordering::Relaxed);
        prev.max(m)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        ferry_shared::sync::lock(&self.pending)
    }

    /// Counts an accepted batch in `minute` and keeps its events for the raw log (at most
    /// `raw_cap`); `seq` is the journal record that holds it (0: none). Returns the models
    /// whose counts changed.
    pub fn apply(
        &self,
        batch: Accepted,
        minute: i64,
        seq: u64,
        raw_cap: usize,
    ) -> std::collections::BTreeSet<String> {
        let mut models = std::collections::BTreeSet::new();
        {
            let mut p = self.pending();
            if batch.counts() {
                models = batch.count_into(p.counts.entry(minute).or_default());
            }
            if seq > 0 {
                let span = p.spans.entry(minute).or_insert((seq, seq));
                span.0 = span.0.min(seq);
                span.1 = span.1.max(seq);
                p.applied = p.applied.max(seq);
            }
        }
        self.keep_raw(batch.into_raw(seq), raw_cap);
        models
    }

    /// The cohort and census devices per minute, to note into (resolve).
    pub fn cohorts(&self) -> MutexGuard<'_, BTreeMap<i64, Rollup>> {
        ferry_shared::sync::lock(&self.cohorts)
    }

    /// Keeps accepted events for the raw log, dropping the oldest beyond `cap` (counted in
    /// [`Outbox::dropped`]).
    pub fn keep_raw(&self, events: impl IntoIterator<Item = RawEvent>, cap: usize) {
        let mut raw = ferry_shared::sync::lock(&self.raw);
        let before = raw.len();
        raw.extend(events);
        if let Some(seq) = raw[before..].iter().map(|e| e.seq).max() {
            self.raw_seq.fetch_max(seq, Ordering::Relaxed);
        }
        if raw.len() > cap {
            let excess = raw.len() - cap;
            raw.drain(..excess);
            self.dropped.fetch_add(excess as u64, Ordering::Relaxed);
        }
    }

    /// Raw events waiting.
    pub fn raw_len(&self) -> usize {
        ferry_shared::sync::lock(&self.raw).len()
    }

    /// True when enough raw events are buffered to flush before the timer.
    pub fn wants_flush(&self, cfg: &TelemetryConfig) -> bool {
        self.raw_len() >= cfg.raw_buffer_events.max(1)
    }

    /// Raw events dropped because the store could not keep up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Model/release/variant entries in the counts waiting.
    pub fn pending_variants(&self) -> usize {
        self.pending()
            .counts
            .values()
            .map(Rollup::variant_count)
            .sum()
    }

    /// Calls `f` with each minute waiting (its start) and its counts: the ingested ones, then
    /// the cohort and census notes.
    pub fn each_minute(&self, mut f: impl FnMut(i64, &Rollup)) {
        for (start, p) in &self.pending().counts {
            f(*start, p);
        }
        for (start, c) in self.cohorts().iter() {
            f(*start, c);
        }
    }

    /// Takes what was counted since the last flush, per minute (cohorts included), to write,
    /// and the last journal record it holds.
    pub fn take_pending(&self) -> (Vec<Taken>, u64) {
        let (mut counts, mut spans, applied) = {
            let mut p = self.pending();
            (
                std::mem::take(&mut p.counts),
                std::mem::take(&mut p.spans),
                p.applied,
            )
        };
        for (start, c) in std::mem::take(&mut *self.cohorts()) {
            counts.entry(start).or_default().merge(&c);
        }
        let taken = counts
            .into_iter()
            .map(|(start, r)| (start, r, spans.remove(&start)))
            .collect();
        (taken, applied)
    }

    /// Puts back what could not be written (merged with what arrived since), folding the
    /// oldest minutes together beyond [`MAX_PENDING_MINUTES`].
    pub fn restore_pending(&self, back: Vec<Taken>) {
        let mut p = self.pending();
        let p = &mut *p;
        for (start, r, span) in back {
            p.counts.entry(start).or_default().merge(&r);
            if let Some((lo, hi)) = span {
                let s = p.spans.entry(start).or_insert((lo, hi));
                *s = (s.0.min(lo), s.1.max(hi));
            }
        }
        fold_oldest(&mut p.counts, &mut p.spans, MAX_PENDING_MINUTES);
    }

    /// Takes the buffered raw events for a flush: all of them when `force` (a graceful stop) or
    /// when the buffer is full or its oldest event has waited `raw_roll_secs`; none otherwise.
    /// Also says the last journal record whose events are all taken now or were before.
    pub fn take_raw(
        &self,
        force: bool,
        cfg: &TelemetryConfig,
        now: OffsetDateTime,
    ) -> (Vec<RawEvent>, u64) {
        let mut r = ferry_shared::sync::lock(&self.raw);
        let due = force
            || r.len() >= cfg.raw_buffer_events.max(1)
            || r.first().is_some_and(|e| {
                now - e.received_at >= time::Duration::seconds(cfg.raw_roll_secs as i64)
            });
        let kept = self.raw_seq.load(Ordering::Relaxed);
        if due {
            (std::mem::take(&mut *r), kept)
        } else {
            let through = r.first().map_or(kept, |e| e.seq.saturating_sub(1));
            (Vec::new(), through)
        }
    }

    /// Puts events back after a failed flush (ahead of those that arrived since).
    pub fn restore_raw(&self, mut events: Vec<RawEvent>) {
        let mut r = ferry_shared::sync::lock(&self.raw);
        events.append(&mut r);
        *r = events;
    }
}

/// Folds the oldest minutes into the minute after them (journal spans too) until at most `cap`
/// remain.
fn fold_oldest(pending: &mut BTreeMap<i64, Rollup>, spans: &mut BTreeMap<i64, Span>, cap: usize) {
    while pending.len() > cap.max(1) {
        let Some((start, oldest)) = pending.pop_first() else {
            return;
        };
        let span = spans.remove(&start);
        if let Some(mut next) = pending.first_entry() {
            next.get_mut().merge(&oldest);
            if let Some((lo, hi)) = span {
                let s = spans.entry(*next.key()).or_insert((lo, hi));
                *s = (s.0.min(lo), s.1.max(hi));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_beyond_the_cap_fold_into_later_ones_and_keep_their_counts() {
        let mut pending = BTreeMap::new();
        for m in 0..10i64 {
            let mut r = Rollup::default();
            r.note_cohort("m", "staged", m as u64);
            pending.insert(m * 60, r);
        }
        let mut spans = BTreeMap::from([(0, (1, 1)), (60, (2, 3)), (360, (9, 9))]);
        fold_oldest(&mut pending, &mut spans, 4);
        assert_eq!(
            spans,
            BTreeMap::from([(360, (1, 9))]),
            "spans fold with their counts"
        );
        assert_eq!(
            pending.keys().copied().collect::<Vec<_>>(),
            [360, 420, 480, 540]
        );
        let devices = |r: &Rollup| r.cohorts["m"]["staged"].estimate();
        assert_eq!(
            devices(&pending[&360]),
            7,
            "minutes 0..=6 in the oldest kept"
        );
        assert_eq!(devices(&pending[&540]), 1);
    }

    #[test]
    fn raw_events_past_the_cap_drop_the_oldest_and_are_counted() {
        use ferry_shared::wire::telemetry::TelemetryEvent;
        let outbox = Outbox::default();
        let event = |i: usize| {
            let event: TelemetryEvent = serde_json::from_value(serde_json::json!({
                "kind": "load", "model": "m", "release": "1.0.0", "variant": "v",
                "delegate": "xnnpack", "outcome": "ok", "install_id": format!("i{i}"),
                "platform": "android", "soc": "s", "device_model": "d", "os_version": "14",
                "app_version": "1.0.0", "runtime_version": "1.5.1", "at": "2026-12-01T00:00:00Z",
            }))
            .expect("event");
            RawEvent {
                event,
                received_at: OffsetDateTime::UNIX_EPOCH,
                counted: true,
                arm: None,
                seq: 0,
            }
        };
        outbox.keep_raw((0..8).map(event), 5);
        assert_eq!((outbox.raw_len(), outbox.dropped()), (5, 3));
        let cfg = TelemetryConfig::default();
        let (taken, _) = outbox.take_raw(true, &cfg, OffsetDateTime::UNIX_EPOCH);
        assert_eq!(taken[0].event.install_id, "i3");
        // Put back after a failed flush: ahead of what arrived meanwhile.
        outbox.keep_raw([event(9)], 5);
        outbox.restore_raw(taken);
        let (again, _) = outbox.take_raw(true, &cfg, OffsetDateTime::UNIX_EPOCH);
        let ids: Vec<&str> = again.iter().map(|r| r.event.install_id.as_str()).collect();
        assert_eq!(ids, ["i3", "i4", "i5", "i6", "i7", "i9"]);
    }
}
