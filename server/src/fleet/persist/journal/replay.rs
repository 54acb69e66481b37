//! Replaying what earlier runs left in the journal: every record that no stored name covers is
//! counted and written now, under a name that says which records it holds, so that running the
//! replay again (after a crash in the middle of it) writes nothing twice.
//!
//! A minute object `<writer>-j<a>-<b>` holds every record of that run from `a` to `b` (a run's
//! minutes never go back, so the records between two of one minute are of that minute); the
//! names of minutes compacted into an hour stay listed in the hour part's `sources`. A raw file
//! `date=<day>/<writer>-j<a>-<b>.parquet` holds the events of that day of every record from `a`
//! to `b` that is not in another file of that day.

use std::collections::{BTreeMap, HashMap};

use futures_util::TryStreamExt as _;
use object_store::{ObjectStoreExt as _, PutPayload};

use crate::fleet::Fleet;
use crate::fleet::counts::rollup::Rollup;
use crate::fleet::persist::buckets::{self, BucketKey, Level};
use crate::fleet::persist::events;
use crate::fleet::persist::journal::Journal;
use crate::fleet::persist::journal::segment::{self, Record};
use crate::storage::StorageKey;

/// Records older than this are not counted again (their minutes may have been compacted past
/// the point where names are kept); their raw events still go to the raw log.
const COUNT_WITHIN_SECS: i64 = 36 * 3600;

/// Runs covered: per writer, the record ranges stored names hold.
type Coverage = HashMap<String, Vec<(u64, u64)>>;

/// The writer and record range a stored name says it holds (`…/<writer>-j<a>-<b>.<ext>`).
pub fn parse_span(key: &str) -> Option<(String, u64, u64)> {
    let file = key.rsplit('/').next()?;
    let stem = file.rsplit_once('.').map_or(file, |(s, _)| s);
    let stem = stem.strip_suffix(".json").unwrap_or(stem);
    let (writer, span) = stem.rsplit_once("-j")?;
    let (a, b) = span.split_once('-')?;
    let (a, b) = (a.parse().ok()?, b.parse().ok()?);
    (!writer.is_empty() && a <= b).then(|| (writer.to_string(), a, b))
}

fn covers(cov: &Coverage, writer: &str, seq: u64) -> bool {
    cov.get(writer)
        .is_some_and(|spans| spans.iter().any(|(a, b)| (*a..=*b).contains(&seq)))
}

fn note(cov: &mut Coverage, key: &str) {
    if let Some((w, a, b)) = parse_span(key) {
        cov.entry(w).or_default().push((a, b));
    }
}

/// Every object under `prefix`; `None` (and a warning) when the store cannot list.
async fn list(fleet: &Fleet, prefix: &str) -> Option<Vec<object_store::ObjectMeta>> {
    fleet
        .store
        .list(Some(&object_store::path::Path::from(prefix)))
        .try_collect()
        .await
        .map_err(|e| tracing::warn!("journal replay waits: {prefix} cannot be listed: {e}"))
        .ok()
}

/// What the stored minute objects (and the hour parts' sources) cover; `None` when the store
/// cannot be read.
async fn counts_coverage(fleet: &Fleet) -> Option<Coverage> {
    let listed = list(fleet, buckets::PREFIX).await?;
    let mut cov = Coverage::new();
    for meta in listed {
        let Some(key) = BucketKey::parse(&meta.location) else {
            continue;
        };
        let name = meta.location.to_string();
        if key.level == Level::Minute {
            note(&mut cov, &name);
            continue;
        }
        let cached = fleet
            .store_cache()
            .objects
            .get(&name)
            .and_then(|(_, s)| s.clone());
        let sources = match cached {
            Some(s) => s,
            None => match crate::fleet::persist::stored::read_bucket(fleet, &key).await {
                Ok(Some((_, s))) => s,
                Ok(None) => Vec::new(),
                Err(e) => {
                    tracing::warn!("journal replay waits: part {name} cannot be read: {e}");
                    return None;
                }
            },
        };
        for s in &sources {
            note(&mut cov, s);
        }
    }
    Some(cov)
}

/// What the raw files of `day` cover; `None` when the store cannot be listed.
async fn raw_coverage(fleet: &Fleet, day: &str) -> Option<Coverage> {
    let listed = list(fleet, &format!("{}/date={day}", events::prefix())).await?;
    let mut cov = Coverage::new();
    for meta in listed {
        note(&mut cov, meta.location.as_ref());
    }
    Some(cov)
}

/// Replays the segments earlier runs left (see the module docs); true when none is left.
pub async fn replay(fleet: &Fleet, journal: &Journal) -> bool {
    let old = journal.old_segments();
    if old.is_empty() {
        return true;
    }
    let mut runs: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    let mut newer = Vec::new();
    for path in &old {
        let Some((writer, _)) = path
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(segment::parse_name)
        else {
            continue;
        };
        let writer = writer.to_string();
        let bytes = match tokio::fs::read(path).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("journal segment {} unreadable, kept: {e}", path.display());
                return false;
            }
        };
        let segment::Read {
            records,
            torn,
            unreadable,
        } = segment::read(&bytes);
        if unreadable {
            tracing::error!(
                "journal segment {} holds a record this version cannot read (written by a newer \
                 version?): kept as it is, for that version to replay",
                path.display()
            );
            newer.push(path.clone());
        }
        if torn > 0 {
            tracing::warn!(
                "journal segment {}: {torn} bytes after its last whole record (a write cut by a \
                 crash; never answered) ignored",
                path.display()
            );
        }
        runs.entry(writer).or_default().extend(records);
    }
    let Some(counts) = counts_coverage(fleet).await else {
        return false;
    };
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut written = (0usize, 0usize);
    for (writer, records) in &runs {
        let Some(n) = replay_counts(fleet, writer, records, &counts, now).await else {
            return false;
        };
        written.0 += n;
        let Some(n) = replay_raw(fleet, writer, records).await else {
            return false;
        };
        written.1 += n;
    }
    if written != (0, 0) {
        tracing::warn!(
            "journal: {} record(s) an earlier run accepted but had not written were written now \
             ({} minute object(s))",
            written.1,
            written.0
        );
    }
    journal.replayed(&old, &newer);
    true
}

/// Writes the counts of `writer`'s records no minute object covers, one object per minute;
/// `Some(objects written)`, `None` when the store failed.
async fn replay_counts(
    fleet: &Fleet,
    writer: &str,
    records: &[Record],
    cov: &Coverage,
    now: i64,
) -> Option<usize> {
    let mut minutes: BTreeMap<i64, (u64, u64, Rollup)> = BTreeMap::new();
    let mut too_old = 0usize;
    for r in records.iter().filter(|r| !covers(cov, writer, r.seq)) {
        if !r.batch.counts() {
            continue;
        }
        if r.minute < now - COUNT_WITHIN_SECS {
            too_old += 1;
            continue;
        }
        let m = minutes
            .entry(r.minute)
            .or_insert_with(|| (r.seq, r.seq, Rollup::default()));
        m.0 = m.0.min(r.seq);
        m.1 = m.1.max(r.seq);
        r.batch.count_into(&mut m.2);
    }
    if too_old > 0 {
        tracing::warn!(
            "journal: {too_old} record(s) of {writer} older than {} hours are not counted again \
             (their raw events are kept)",
            COUNT_WITHIN_SECS / 3600
        );
    }
    let n = minutes.len();
    for (minute, (a, b, rollup)) in minutes {
        let key = BucketKey {
            level: Level::Minute,
            start: minute,
            name: format!("{writer}-j{a}-{b}"),
        };
        let bytes = serde_json::to_vec(&rollup).ok()?;
        if let Err(e) = fleet.store.put(&key.path(), PutPayload::from(bytes)).await {
            tracing::warn!("journal replay waits: a minute cannot be written: {e}");
            return None;
        }
    }
    Some(n)
}

/// Writes the raw events of `writer`'s records no raw file of their day covers, one file per
/// day; `Some(records written)`, `None` when the store failed.
async fn replay_raw(fleet: &Fleet, writer: &str, records: &[Record]) -> Option<usize> {
    let mut days: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| !r.batch.events.is_empty()) {
        days.entry(events::day_of(r.batch.received_at()))
            .or_default()
            .push(r);
    }
    let mut n = 0;
    for (day, recs) in days {
        let cov = raw_coverage(fleet, &day).await?;
        let todo: Vec<&Record> = recs
            .into_iter()
            .filter(|r| !covers(&cov, writer, r.seq))
            .collect();
        let (Some(a), Some(b)) = (
            todo.iter().map(|r| r.seq).min(),
            todo.iter().map(|r| r.seq).max(),
        ) else {
            continue;
        };
        let raw: Vec<_> = todo.iter().flat_map(|r| r.batch.raw(r.seq)).collect();
        // The replica's name, as live files carry it (the run's suffix dropped).
        let node = writer.split_once('.').map_or(writer, |(n, _)| n);
        let bytes = match events::encode(&raw, node) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("journal replay: raw events cannot be encoded: {e}");
                return None;
            }
        };
        let key = StorageKey::raw_events_journaled(&day, writer, a, b);
        if let Err(e) = fleet.store.put(&key, PutPayload::from(bytes)).await {
            tracing::warn!("journal replay waits: raw events cannot be written: {e}");
            return None;
        }
        n += todo.len();
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_which_records_they_hold() {
        assert_eq!(
            parse_span("telemetry/buckets/minute/2026-12-07T0501/node-ab12.9f00aa-j17-42.json"),
            Some(("node-ab12.9f00aa".into(), 17, 42))
        );
        assert_eq!(
            parse_span("telemetry/events/date=2026-12-07/node-1.ff-j1-1.parquet"),
            Some(("node-1.ff".into(), 1, 1))
        );
        for other in [
            "telemetry/buckets/minute/2026-12-07T0501/node-ab12.9f00aa-000003.json",
            "telemetry/events/date=2026-12-07/node-1-1700000000-0.parquet",
            "x/-j1-2.json",
            "x/w-j5-2.json",
        ] {
            assert_eq!(parse_span(other), None, "{other}");
        }
        let mut cov = Coverage::new();
        note(&mut cov, "a/w.1-j3-5.json");
        assert!(covers(&cov, "w.1", 4) && !covers(&cov, "w.1", 6) && !covers(&cov, "w.2", 4));
    }
}
