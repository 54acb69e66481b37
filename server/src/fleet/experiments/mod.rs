//! Experiments' results, read from the raw event log every replica writes: the same answer
//! on every replica and after any restart, with nothing of its own to keep durable (the log is
//! the journal-backed record of every accepted event).
//!
//! Each status reads only the files it has not folded yet (files are immutable) and keeps the
//! folded devices in memory per experiment ([`read::Folded`]); the pure analysis in
//! `ferry_shared::experiment` does the statistics.
//!
//! May import `persist`, `storage` and `ferry-shared`.

pub mod read;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Mutex;

use ferry_shared::experiment::ExperimentPlan;
use ferry_shared::experiment::analysis::{MetricResult, analyse};
use ferry_shared::experiment::metrics::DeviceRecord;
use futures_util::TryStreamExt as _;
use object_store::ObjectStoreExt as _;
use serde::Serialize;
use time::OffsetDateTime;

use crate::storage::{StorageKey, Store, StoreError};

/// Experiments whose folded devices are kept in memory (the least recently read one goes).
pub const KEPT: usize = 8;

/// The folded devices of the experiments read lately, by experiment id.
#[derive(Debug, Default)]
pub struct Experiments {
    held: Mutex<HashMap<String, (u64, read::Folded)>>,
    reads: std::sync::atomic::AtomicU64,
}

/// How many devices each arm holds, and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Population {
    /// Devices that reported in the control arm.
    pub control: usize,
    /// Devices that reported in the treatment arm.
    pub treatment: usize,
    /// Of them, devices with a history before their arm (what CUPED uses).
    pub with_history: usize,
    /// Devices left out past the experiment's limit.
    pub dropped_devices: u64,
    /// App metric values left out (more names than a device may hold).
    pub dropped_metrics: u64,
    /// Raw event files read (in total, for this experiment).
    pub files: usize,
}

/// An experiment's status: its plan and, per metric, the results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// The plan in force.
    pub experiment: ExperimentPlan,
    /// Who reported.
    pub devices: Population,
    /// One entry per metric.
    pub metrics: Vec<MetricResult>,
}

fn micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn parse(at: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).ok()
}

/// The window `plan` reads: from its start less its lookback, its arms' events until it
/// stopped.
pub fn window(plan: &ExperimentPlan) -> read::Window {
    let start = parse(&plan.started_at).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let from = start - time::Duration::days(i64::from(plan.lookback_days));
    read::Window {
        from: micros(from),
        start: micros(start),
        until: if plan.is_running() {
            i64::MAX
        } else {
            parse(&plan.at).map_or(i64::MAX, micros)
        },
    }
}

/// The raw event files of the days from `from` to `now`.
async fn files(store: &Store, from: i64, now: OffsetDateTime) -> Result<Vec<String>, StoreError> {
    let first = OffsetDateTime::from_unix_timestamp(from / 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
        .date();
    let mut day = first;
    let mut out = Vec::new();
    while day <= now.date() {
        let prefix =
            object_store::path::Path::from(format!("{}/date={day}", StorageKey::raw_events()));
        let metas: Vec<_> = store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(StoreError::from)?;
        out.extend(
            metas
                .into_iter()
                .map(|m| m.location.to_string())
                .filter(|k| k.ends_with(".parquet")),
        );
        let Some(next) = day.next_day() else { break };
        day = next;
    }
    Ok(out)
}

impl Experiments {
    /// The status of `plan` at `now`: folds in the raw event files not read yet, then
    /// analyses.
    pub async fn status(
        &self,
        store: &Store,
        plan: &ExperimentPlan,
        now: OffsetDateTime,
    ) -> Result<Status, StoreError> {
        let window = window(plan);
        let listed = files(store, window.from, now).await?;
        let new: Vec<String> = {
            let held = ferry_shared::sync::lock(&self.held);
            let seen = held.get(&plan.id).map(|(_, f)| &f.files);
            listed
                .into_iter()
                .filter(|k| seen.is_none_or(|s| !s.contains(k)))
                .collect()
        };
        // One file at a time (files are up to `raw_buffer_events` events): read, decoded off
        // the async workers, then merged, so memory holds the devices and one file.
        for key in new {
            let path = object_store::path::Path::from(key.as_str());
            let bytes = match store.get(&path).await {
                Ok(r) => r.bytes().await.map_err(StoreError::from)?,
                // Deleted past its retention meanwhile: nothing to read.
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let one = plan.clone();
            let part = tokio::task::spawn_blocking(move || {
                let mut f = read::Folded::default();
                read::fold(bytes, &one, window, &mut f).map(|()| f)
            })
            .await
            .map_err(|e| StoreError::Encode(format!("reading {key}: {e}")))?;
            let mut held = ferry_shared::sync::lock(&self.held);
            let (_, folded) = held.entry(plan.id.clone()).or_default();
            // Another status may have folded it meanwhile.
            if !folded.files.insert(key.clone()) {
                continue;
            }
            match part {
                Ok(part) => folded.absorb(part),
                Err(e) => tracing::warn!("raw telemetry file {key} skipped by the experiment: {e}"),
            }
        }
        let stamp = self
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut held = ferry_shared::sync::lock(&self.held);
        if !held.contains_key(&plan.id) && held.len() >= KEPT {
            let oldest = held
                .iter()
                .min_by_key(|(_, (s, _))| *s)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                held.remove(&k);
            }
        }
        let (used, folded) = held.entry(plan.id.clone()).or_default();
        *used = stamp;
        // In install-id order, so that every replica sums in the same order and reports the
        // same figures to the last bit.
        let mut ids: Vec<&String> = folded
            .devices
            .iter()
            .filter(|(_, d)| d.arm.is_some())
            .map(|(id, _)| id)
            .collect();
        ids.sort_unstable();
        let devices: Vec<DeviceRecord> = ids
            .into_iter()
            .filter_map(|id| folded.devices.get(id).cloned())
            .collect();
        let count = |a| devices.iter().filter(|d| d.arm == Some(a)).count();
        let population = Population {
            control: count(ferry_shared::experiment::ArmName::Control),
            treatment: count(ferry_shared::experiment::ArmName::Treatment),
            with_history: devices.iter().filter(|d| d.pre.events > 0).count(),
            dropped_devices: folded.dropped_devices,
            dropped_metrics: folded.dropped_metrics,
            files: folded.files.len(),
        };
        drop(held);
        Ok(Status {
            experiment: plan.clone(),
            devices: population,
            metrics: analyse(plan, &devices),
        })
    }
}
