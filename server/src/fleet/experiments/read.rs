//! Reads one raw event file (Parquet, as `fleet::persist::events` writes it) into an
//! experiment's device records: only the columns an experiment uses, files written before the
//! metric and arm columns existed included.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use ferry_shared::experiment::ArmName;
use ferry_shared::experiment::ExperimentPlan;
use ferry_shared::experiment::metrics::{DeviceRecord, Row};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The columns read.
const COLUMNS: [&str; 14] = [
    "received_at",
    "counted",
    "kind",
    "model",
    "outcome",
    "install_id",
    "soc",
    "device_model",
    "p95_ms",
    "probe",
    "bytes_fetched",
    "name",
    "value",
    "experiment_arm",
];

/// Devices one experiment keeps (more are counted, not kept).
pub const MAX_DEVICES: usize = 1_000_000;

/// One experiment's devices folded so far, and what was left out.
#[derive(Debug, Default)]
pub struct Folded {
    /// The files already folded in.
    pub files: std::collections::HashSet<String>,
    /// The devices, by install id.
    pub devices: HashMap<String, DeviceRecord>,
    /// Devices left out past [`MAX_DEVICES`].
    pub dropped_devices: u64,
    /// App metric values left out (past the names one device may hold).
    pub dropped_metrics: u64,
}

impl Folded {
    /// Adds the devices folded from one more file (within [`MAX_DEVICES`]).
    pub fn absorb(&mut self, part: Folded) {
        self.dropped_devices += part.dropped_devices;
        self.dropped_metrics += part.dropped_metrics;
        for (id, record) in part.devices {
            let full = self.devices.len() >= MAX_DEVICES;
            match self.devices.get_mut(&id) {
                Some(d) => self.dropped_metrics += d.merge(record),
                None if full => self.dropped_devices += 1,
                None => {
                    self.devices.insert(id, record);
                }
            }
        }
    }
}

/// The window of one experiment's reading (unix microseconds): a device's history from `from`
/// (the start less the lookback) to `start`, its events in its arm until `until` (the stop, if
/// it stopped).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// The first instant read.
    pub from: i64,
    /// The start: events without an arm count as history only before it.
    pub start: i64,
    /// The last instant an arm's event counts (`i64::MAX` while running).
    pub until: i64,
}

fn strings<'a>(b: &'a RecordBatch, name: &str) -> Option<&'a StringArray> {
    b.column_by_name(name)?.as_any().downcast_ref()
}

fn floats<'a>(b: &'a RecordBatch, name: &str) -> Option<&'a Float64Array> {
    b.column_by_name(name)?.as_any().downcast_ref()
}

fn text(a: Option<&StringArray>, i: usize) -> Option<&str> {
    a.filter(|a| a.is_valid(i)).map(|a| a.value(i))
}

fn float(a: Option<&Float64Array>, i: usize) -> Option<f64> {
    a.filter(|a| a.is_valid(i)).map(|a| a.value(i))
}

/// Folds `bytes` (one raw event file) into `into` for `plan` within `window`. A file that is not
/// readable Parquet is an error (the caller logs it and skips the file).
pub fn fold(
    bytes: bytes::Bytes,
    plan: &ExperimentPlan,
    window: Window,
    into: &mut Folded,
) -> Result<(), parquet::errors::ParquetError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), COLUMNS);
    let reader = builder.with_projection(mask).build()?;
    let own_tag = |arm: ArmName| format!("{}={}", plan.id, arm.as_str());
    let tags = [own_tag(ArmName::Control), own_tag(ArmName::Treatment)];
    for batch in reader {
        let b = batch.map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))?;
        fold_batch(&b, plan, window, &tags, into);
    }
    Ok(())
}

fn fold_batch(
    b: &RecordBatch,
    plan: &ExperimentPlan,
    window: Window,
    tags: &[String; 2],
    into: &mut Folded,
) {
    let (Some(model), Some(kind), Some(install), Some(counted)) = (
        strings(b, "model"),
        strings(b, "kind"),
        strings(b, "install_id"),
        b.column_by_name("counted")
            .and_then(|c| c.as_any().downcast_ref::<BooleanArray>()),
    ) else {
        return;
    };
    let received = b.column_by_name("received_at").map(Arc::clone);
    let received = received.as_ref().and_then(|c| {
        c.as_any()
            .downcast_ref::<arrow_array::TimestampMicrosecondArray>()
    });
    let (outcome, soc, device_model) = (
        strings(b, "outcome"),
        strings(b, "soc"),
        strings(b, "device_model"),
    );
    let (p95, value) = (floats(b, "p95_ms"), floats(b, "value"));
    let (name, arm_col) = (strings(b, "name"), strings(b, "experiment_arm"));
    let probe = b
        .column_by_name("probe")
        .and_then(|c| c.as_any().downcast_ref::<BooleanArray>());
    let bytes = b
        .column_by_name("bytes_fetched")
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>());
    for i in 0..b.num_rows() {
        if !counted.value(i) || model.value(i) != plan.model {
            continue;
        }
        let at = received.map_or(0, |r| r.value(i));
        if at < window.from {
            continue;
        }
        let id = install.value(i);
        let tag = text(arm_col, i);
        // Another experiment's arm is history like any event before the start: it does not
        // depend on this experiment's assignment (its own salt), which is all CUPED needs.
        let arm = match tag {
            Some(t) if t == tags[0] => Some(ArmName::Control),
            Some(t) if t == tags[1] => Some(ArmName::Treatment),
            _ => None,
        };
        // History is what came before the start (after it, an event without this arm is a
        // device outside the experiment, or one not yet in it).
        if (arm.is_some() && at > window.until) || (arm.is_none() && at >= window.start) {
            continue;
        }
        // Only devices that hash into the experiment are kept (their past is CUPED's).
        if plan.bucket_arm(id).is_none() {
            continue;
        }
        if !into.devices.contains_key(id) && into.devices.len() >= MAX_DEVICES {
            into.dropped_devices += 1;
            continue;
        }
        let d = into.devices.entry(id.to_string()).or_default();
        // The class is the one the device reports in its arm (its history's until then).
        if arm.is_some() || d.arm.is_none() {
            if let Some(s) = text(soc, i) {
                s.clone_into(&mut d.soc);
            }
            if let Some(m) = text(device_model, i) {
                m.clone_into(&mut d.device_model);
            }
        }
        let row = Row {
            kind: kind.value(i),
            failed: text(outcome, i) == Some("failed"),
            p95_ms: float(p95, i),
            probe: probe.is_some_and(|p| p.is_valid(i) && p.value(i)),
            bytes_fetched: bytes
                .filter(|b| b.is_valid(i))
                .and_then(|b| u64::try_from(b.value(i)).ok()),
            // Only the app metrics the experiment names are kept.
            metric: text(name, i)
                .zip(float(value, i))
                .filter(|(n, _)| plan.metrics.iter().any(|m| m.name == *n)),
        };
        let period = match arm {
            Some(a) => {
                d.arm = Some(a);
                &mut d.during
            }
            None => &mut d.pre,
        };
        if !period.add_row(&row) {
            into.dropped_metrics += 1;
        }
    }
}
