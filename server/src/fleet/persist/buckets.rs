//! Telemetry aggregates as time buckets in the object store, so every replica sees the whole
//! fleet, for any window, across restarts.
//!
//! ```text
//! telemetry/buckets/minute/2026-12-03T1437/<node>.<run>.json   one replica run's counts of one minute
//! telemetry/buckets/hour/2026-12-03T14/part-000001.json        compacted minutes of one hour
//! telemetry/buckets/day/2026-12-03/part-000001.json            compacted hours of one day
//! telemetry/buckets/lease.json                                 who compacts (create-if-absent)
//! ```
//!
//! Each replica run counts what it accepts per minute of its own clock and writes that
//! minute's object (a [`Rollup`]) at every flush until the minute has closed and been written
//! once more; only that run writes it. Every replica lists the buckets at every flush, reads
//! the objects that changed and merges them: the whole-fleet totals (halts, ramps, deny
//! entries, health) and windows (`health --since 1h`) come from that merge plus the run's own
//! minutes still in memory.
//!
//! Old buckets are compacted by whichever replica holds the lease: minutes into an hour part
//! [`MINUTES_KEPT_SECS`] after the hour ends, hour parts into a day part
//! [`HOURS_KEPT_SECS`] after the day ends, and day parts are deleted after the retention.
//! A part lists the objects it merged (`sources`) and is written with a create-if-absent put
//! under the next part number, so two compactors can never count the same minute twice;
//! readers skip every object a part lists, so a reader that sees the part before its sources
//! are deleted does not count them twice either. A minute written late (a replica cut off from
//! the store) is not lost: the next pass compacts it into another part of its hour.

use object_store::path::Path as StorePath;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use crate::fleet::counts::rollup::Rollup;

/// The prefix of every bucket.
pub const PREFIX: &str = crate::storage::StorageKey::BUCKETS;

/// Minutes are compacted into their hour this long after the hour ends, so windows of the
/// last two hours are exact to the minute.
pub const MINUTES_KEPT_SECS: i64 = 2 * 3600;

/// Hour parts are compacted into their day this long after the day ends.
pub const HOURS_KEPT_SECS: i64 = 2 * 86_400;

/// How long a compaction lease lasts without renewal.
pub const LEASE_SECS: i64 = 300;

/// A bucket's granularity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// One minute.
    Minute,
    /// One hour.
    Hour,
    /// One UTC day.
    Day,
}

impl Level {
    /// Its length in seconds.
    pub fn secs(self) -> i64 {
        match self {
            Level::Minute => 60,
            Level::Hour => 3600,
            Level::Day => 86_400,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Minute => "minute",
            Level::Hour => "hour",
            Level::Day => "day",
        }
    }

    fn stamp(self, start: i64) -> String {
        let t = time::OffsetDateTime::from_unix_timestamp(start)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
        let (y, m, d) = (t.year(), u8::from(t.month()), t.day());
        match self {
            Level::Minute => format!("{y:04}-{m:02}-{d:02}T{:02}{:02}", t.hour(), t.minute()),
            Level::Hour => format!("{y:04}-{m:02}-{d:02}T{:02}", t.hour()),
            Level::Day => format!("{y:04}-{m:02}-{d:02}"),
        }
    }

    fn parse_stamp(self, s: &str) -> Option<i64> {
        let num = |r: std::ops::Range<usize>| -> Option<u32> {
            let part = s.get(r)?;
            part.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        let (len, has_t) = match self {
            Level::Minute => (15, true),
            Level::Hour => (13, true),
            Level::Day => (10, false),
        };
        if s.len() != len || &s[4..5] != "-" || &s[7..8] != "-" || (has_t && &s[10..11] != "T") {
            return None;
        }
        let month = time::Month::try_from(u8::try_from(num(5..7)?).ok()?).ok()?;
        let date = time::Date::from_calendar_date(
            num(0..4)? as i32,
            month,
            u8::try_from(num(8..10)?).ok()?,
        )
        .ok()?;
        let (hour, minute) = match self {
            Level::Minute => (num(11..13)?, num(13..15)?),
            Level::Hour => (num(11..13)?, 0),
            Level::Day => (0, 0),
        };
        let time =
            time::Time::from_hms(u8::try_from(hour).ok()?, u8::try_from(minute).ok()?, 0).ok()?;
        Some(date.with_time(time).assume_utc().unix_timestamp())
    }

    /// The start of the bucket of this level holding `t` (unix seconds).
    pub fn floor(self, t: i64) -> i64 {
        t - t.rem_euclid(self.secs())
    }
}

/// Where one bucket object lives, parsed from its key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BucketKey {
    /// Its granularity.
    pub level: Level,
    /// Its start (unix seconds).
    pub start: i64,
    /// Its writer: `<node>.<run>` for a minute, `part-NNNNNN` for a compacted bucket.
    pub name: String,
}

impl BucketKey {
    /// The object key.
    pub fn path(&self) -> StorePath {
        crate::storage::StorageKey::bucket(
            self.level.name(),
            &self.level.stamp(self.start),
            &self.name,
        )
    }

    /// Parses a bucket key; `None` for anything else under the prefix.
    pub fn parse(path: &StorePath) -> Option<BucketKey> {
        let s = path.as_ref().strip_prefix(PREFIX)?.strip_prefix('/')?;
        let mut parts = s.split('/');
        let (level, stamp, file) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let level = match level {
            "minute" => Level::Minute,
            "hour" => Level::Hour,
            "day" => Level::Day,
            _ => return None,
        };
        let start = level.parse_stamp(stamp)?;
        let name = file.strip_suffix(".json")?;
        let valid_part = name
            .strip_prefix("part-")
            .is_some_and(|n| n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()));
        if level == Level::Minute && valid_part || level != Level::Minute && !valid_part {
            return None;
        }
        Some(BucketKey {
            level,
            start,
            name: name.to_string(),
        })
    }

    /// The part number of a compacted bucket.
    pub fn part_number(&self) -> Option<u32> {
        self.name.strip_prefix("part-")?.parse().ok()
    }

    /// True when the bucket ends after `since` (so it counts in a window from `since`).
    pub fn overlaps_from(&self, since: i64) -> bool {
        self.start + self.level.secs() > since
    }
}

/// A compacted bucket: what it merged and the merge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Part {
    /// The keys of the objects merged into it (minutes for an hour, hour parts for a day).
    pub sources: Vec<String>,
    /// Their merged counts.
    pub rollup: Rollup,
}

/// Every bucket object listed, with the sources each part lists (empty for a minute).
pub type Listing = BTreeMap<BucketKey, Vec<String>>;

/// The keys that some part lists as merged: readers skip them.
pub fn covered(listing: &Listing) -> BTreeSet<String> {
    listing.values().flatten().cloned().collect()
}

/// One compaction step: merge `sources` (of the level below) into the next part of the
/// bucket `(level, start)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merge {
    /// The part to write (create-if-absent).
    pub target: BucketKey,
    /// What it merges.
    pub sources: Vec<BucketKey>,
}

/// What a compaction pass does at `now`, given every bucket object listed (with the parts
/// read): merges due (minutes into hours, hour parts into days), objects that parts already
/// merged and that can be deleted, and day parts past the retention to delete.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Parts to write.
    pub merges: Vec<Merge>,
    /// Objects to delete: sources some part lists, and day parts past the retention.
    pub deletes: Vec<BucketKey>,
}

/// Plans a compaction pass (pure: the caller reads, writes and deletes).
pub fn plan(objects: &Listing, now: i64, retention_days: u32) -> Plan {
    let covered = covered(objects);
    let present: BTreeSet<String> = objects.keys().map(|k| k.path().to_string()).collect();
    let mut out = Plan::default();
    // Sources already merged: delete them (a compactor may have stopped before it could).
    // A part whose own sources still exist is not merged upward yet.
    let mut pending_cleanup = BTreeSet::new();
    for (k, sources) in objects {
        for s in sources {
            if present.contains(s) {
                pending_cleanup.insert(k.clone());
                if let Some(sk) = BucketKey::parse(&StorePath::from(s.as_str())) {
                    out.deletes.push(sk);
                }
            }
        }
    }
    for (from, to, kept) in [
        (Level::Minute, Level::Hour, MINUTES_KEPT_SECS),
        (Level::Hour, Level::Day, HOURS_KEPT_SECS),
    ] {
        let mut due: BTreeMap<i64, Vec<BucketKey>> = BTreeMap::new();
        for k in objects.keys() {
            if k.level != from || covered.contains(k.path().as_ref()) || pending_cleanup.contains(k)
            {
                continue;
            }
            let parent = to.floor(k.start);
            if parent + to.secs() + kept <= now {
                due.entry(parent).or_default().push(k.clone());
            }
        }
        for (start, sources) in due {
            // Past every part of this bucket that exists or that a part merged (deleted
            // since): a name is never used twice, or a reader would skip the new part as
            // already merged.
            let used = objects.keys().cloned().chain(
                covered
                    .iter()
                    .filter_map(|c| BucketKey::parse(&StorePath::from(c.as_str()))),
            );
            let next = used
                .filter(|k| k.level == to && k.start == start)
                .filter_map(|k| k.part_number())
                .max()
                .unwrap_or(0)
                + 1;
            out.merges.push(Merge {
                target: BucketKey {
                    level: to,
                    start,
                    name: format!("part-{next:06}"),
                },
                sources,
            });
        }
    }
    let keep_from = Level::Day.floor(now) - i64::from(retention_days) * 86_400;
    for k in objects.keys() {
        if k.level == Level::Day && k.start < keep_from && !pending_cleanup.contains(k) {
            out.deletes.push(k.clone());
        }
    }
    out.deletes.sort();
    out.deletes.dedup();
    out
}

/// The compaction lease (`telemetry/buckets/lease.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lease {
    /// The replica run holding it.
    pub holder: String,
    /// Until when (unix seconds).
    pub expires_at: i64,
}

/// The lease's key.
pub fn lease_path() -> StorePath {
    crate::storage::StorageKey::buckets_lease()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_764_771_420; // 2025-12-03T14:17:00Z

    fn minute(start: i64, writer: &str) -> BucketKey {
        BucketKey {
            level: Level::Minute,
            start,
            name: writer.into(),
        }
    }

    #[test]
    fn keys_round_trip_and_strangers_are_refused() {
        for k in [
            minute(T, "node-a.1234abcd"),
            BucketKey {
                level: Level::Hour,
                start: Level::Hour.floor(T),
                name: "part-000002".into(),
            },
            BucketKey {
                level: Level::Day,
                start: Level::Day.floor(T),
                name: "part-000001".into(),
            },
        ] {
            let p = k.path();
            assert_eq!(BucketKey::parse(&p), Some(k.clone()), "{p}");
        }
        assert_eq!(
            minute(T, "n.r").path().as_ref(),
            "telemetry/buckets/minute/2025-12-03T1417/n.r.json"
        );
        for bad in [
            "telemetry/buckets/lease.json",
            "telemetry/buckets/minute/2025-12-03T1417/part-000001.json",
            "telemetry/buckets/hour/2025-12-03T14/node-a.json",
            "telemetry/buckets/minute/2025-13-03T1417/n.json",
            "telemetry/buckets/minute/2025-12-03T1477/n.json",
            "telemetry/buckets/minute/2025-12-03T1417/n.txt",
            "telemetry/buckets/week/2025-12-03/part-000001.json",
            "telemetry/buckets/day/2025-12-03/x/part-000001.json",
            "telemetry/buckets/day/+025-12-03/part-000001.json",
        ] {
            assert_eq!(BucketKey::parse(&StorePath::from(bad)), None, "{bad}");
        }
    }

    fn objects(keys: &[BucketKey]) -> Listing {
        keys.iter().map(|k| (k.clone(), Vec::new())).collect()
    }

    #[test]
    fn minutes_are_compacted_only_once_their_hour_is_old_enough() {
        let hour = Level::Hour.floor(T);
        let keys = [minute(hour, "a.1"), minute(hour + 60, "b.1")];
        let objs = objects(&keys);
        let early = plan(&objs, hour + 3600 + MINUTES_KEPT_SECS - 1, 90);
        assert!(early.merges.is_empty(), "{early:?}");
        let due = plan(&objs, hour + 3600 + MINUTES_KEPT_SECS, 90);
        assert_eq!(due.merges.len(), 1);
        assert_eq!(due.merges[0].target.name, "part-000001");
        assert_eq!(due.merges[0].sources, keys);
    }

    #[test]
    fn covered_sources_are_skipped_deleted_and_never_merged_again() {
        let hour = Level::Hour.floor(T);
        let (a, b, late) = (
            minute(hour, "a.1"),
            minute(hour + 60, "b.1"),
            minute(hour + 120, "c.1"),
        );
        let part_key = BucketKey {
            level: Level::Hour,
            start: hour,
            name: "part-000001".into(),
        };
        let mut objs = objects(&[a.clone(), b.clone(), late.clone()]);
        objs.insert(
            part_key.clone(),
            vec![a.path().to_string(), b.path().to_string()],
        );
        let cov = covered(&objs);
        let seen: Vec<_> = objs
            .keys()
            .filter(|k| !cov.contains(k.path().as_ref()))
            .cloned()
            .collect();
        assert_eq!(seen, vec![late.clone(), part_key.clone()]);
        let p = plan(&objs, hour + 3600 + MINUTES_KEPT_SECS, 90);
        assert_eq!(p.deletes, vec![a, b]);
        // The late minute becomes the hour's second part.
        assert_eq!(p.merges.len(), 1, "{p:?}");
        assert_eq!(p.merges[0].target.name, "part-000002");
        assert_eq!(p.merges[0].sources, vec![late]);
    }

    #[test]
    fn a_late_minute_after_its_hour_went_into_a_day_gets_a_new_part_name() {
        let hour = Level::Hour.floor(T);
        let old_part = BucketKey {
            level: Level::Hour,
            start: hour,
            name: "part-000001".into(),
        };
        let day = BucketKey {
            level: Level::Day,
            start: Level::Day.floor(T),
            name: "part-000001".into(),
        };
        let late = minute(hour + 300, "late.1-000000");
        let mut objs = objects(std::slice::from_ref(&late));
        objs.insert(day, vec![old_part.path().to_string()]);
        let p = plan(&objs, hour + 3 * 86_400, 90);
        assert_eq!(p.merges.len(), 1, "{p:?}");
        assert_eq!(
            p.merges[0].target.name, "part-000002",
            "not the merged part's name"
        );
        assert_eq!(p.merges[0].sources, vec![late]);
    }

    #[test]
    fn hours_become_days_and_days_expire() {
        let day = Level::Day.floor(T);
        let hour = |h: i64, n: &str| BucketKey {
            level: Level::Hour,
            start: day + h * 3600,
            name: n.into(),
        };
        let old_day = BucketKey {
            level: Level::Day,
            start: day - 91 * 86_400,
            name: "part-000001".into(),
        };
        let mut objs = Listing::new();
        for k in [
            hour(0, "part-000001"),
            hour(5, "part-000001"),
            old_day.clone(),
        ] {
            objs.insert(k, vec![]);
        }
        let p = plan(&objs, day + 86_400 + HOURS_KEPT_SECS, 90);
        assert_eq!(p.merges.len(), 1, "{p:?}");
        assert_eq!(p.merges[0].target.level, Level::Day);
        assert_eq!(p.merges[0].sources.len(), 2);
        assert_eq!(p.deletes, vec![old_day]);
    }
}
