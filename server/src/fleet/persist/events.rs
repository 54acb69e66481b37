//! The raw telemetry log: every accepted event, written as Parquet files (zstd) under
//! `telemetry/events/date=YYYY-MM-DD/` (Hive partitioning, by the UTC day the server received
//! the event), so DuckDB, Athena, Trino, Spark and BigQuery read them as they are.
//!
//! Each replica buffers what it accepts and writes one file per day present in the buffer
//! when the buffer reaches `telemetry.raw_buffer_events`, when its oldest event has waited
//! `telemetry.raw_roll_secs`, and on a graceful stop. Files are immutable and named by the
//! replica and the time of writing, so replicas never write the same object. The schema is
//! [`schema`]; `docs/telemetry.md` documents it with example queries.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use time::OffsetDateTime;

/// One accepted event as the raw log keeps it.
#[derive(Debug, Clone)]
pub struct RawEvent {
    /// The event as the device sent it (validated).
    pub event: TelemetryEvent,
    /// When this server accepted it.
    pub received_at: OffsetDateTime,
    /// Whether it carried a valid receipt (and so counts toward health, halts and denies).
    pub counted: bool,
    /// The experiment arm its verified receipt named (`<experiment id>=<arm>`).
    pub arm: Option<String>,
    /// The journal record that holds it (0: none): names the raw file it goes to, so that a
    /// replay after a crash finds whether it was written.
    pub seq: u64,
}

impl RawEvent {
    /// The UTC day it was received, as the partition value `YYYY-MM-DD`.
    pub fn day(&self) -> String {
        day_of(self.received_at)
    }
}

/// The UTC day of `t`, as the partition value `YYYY-MM-DD`.
pub fn day_of(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day())
}

/// Where a replica writes a file of events received on `day` (`YYYY-MM-DD`), written at `now`.
pub fn key(day: &str, node: &str, now: OffsetDateTime) -> object_store::path::Path {
    static WRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::storage::StorageKey::raw_events_file(day, node, now.unix_timestamp_nanos(), n)
}

/// The prefix of the raw log.
pub fn prefix() -> object_store::path::Path {
    crate::storage::StorageKey::raw_events()
}

fn utc() -> Option<Arc<str>> {
    Some(Arc::from("UTC"))
}

/// The Parquet schema of the raw log (one row per accepted event).
pub fn schema() -> Arc<Schema> {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, utc());
    let text = |name: &str| Field::new(name, DataType::Utf8, false);
    let maybe_text = |name: &str| Field::new(name, DataType::Utf8, true);
    Arc::new(Schema::new(vec![
        Field::new("received_at", ts.clone(), false),
        text("replica"),
        Field::new("counted", DataType::Boolean, false),
        text("kind"),
        text("model"),
        text("release"),
        text("variant"),
        text("delegate"),
        text("outcome"),
        maybe_text("error_code"),
        Field::new("load_ms", DataType::Float64, true),
        maybe_text("to_variant"),
        text("install_id"),
        text("platform"),
        text("soc"),
        text("device_model"),
        text("os_version"),
        text("app_version"),
        text("runtime_version"),
        Field::new("at", ts, true),
        maybe_text("stage"),
        Field::new("clock_offset_s", DataType::Int64, true),
        maybe_text("method"),
        Field::new("runs", DataType::Int64, true),
        Field::new("first_ms", DataType::Float64, true),
        Field::new("p50_ms", DataType::Float64, true),
        Field::new("p95_ms", DataType::Float64, true),
        Field::new("max_ms", DataType::Float64, true),
        Field::new("sustained_s", DataType::Float64, true),
        maybe_text("thermal"),
        Field::new("probe", DataType::Boolean, true),
        Field::new("bytes_fetched", DataType::Int64, true),
        Field::new("bytes_total", DataType::Int64, true),
        maybe_text("sources"),
        maybe_text("name"),
        Field::new("value", DataType::Float64, true),
        maybe_text("experiment_arm"),
    ]))
}

fn micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn kind_name(k: EventKind) -> &'static str {
    match k {
        EventKind::Download => "download",
        EventKind::Verify => "verify",
        EventKind::Load => "load",
        EventKind::Fallback => "fallback",
        EventKind::Inference => "inference",
        EventKind::Crash => "crash",
        EventKind::Metric => "metric",
    }
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Ok => "ok",
        Outcome::Failed => "failed",
    }
}

/// Encodes `events` (received by replica `node`) as one Parquet file, zstd-compressed.
pub fn encode(events: &[RawEvent], node: &str) -> Result<Vec<u8>, parquet::errors::ParquetError> {
    let n = events.len();
    let strings = || StringBuilder::with_capacity(n, n * 16);
    let mut received = TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
    let mut replica = strings();
    let mut counted = BooleanBuilder::with_capacity(n);
    let mut kind = strings();
    let mut model = strings();
    let mut release = strings();
    let mut variant = strings();
    let mut delegate = strings();
    let mut outcome = strings();
    let mut error_code = strings();
    let mut load_ms = Float64Builder::with_capacity(n);
    let mut to_variant = strings();
    let mut install_id = strings();
    let mut platform = strings();
    let mut soc = strings();
    let mut device_model = strings();
    let mut os_version = strings();
    let mut app_version = strings();
    let mut runtime_version = strings();
    let mut at = TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
    let mut stage = strings();
    let mut clock_offset = arrow_array::builder::Int64Builder::with_capacity(n);
    let mut method = strings();
    let mut runs = arrow_array::builder::Int64Builder::with_capacity(n);
    let floats = || Float64Builder::with_capacity(n);
    let (mut first_ms, mut p50_ms, mut p95_ms) = (floats(), floats(), floats());
    let (mut max_ms, mut sustained_s) = (floats(), floats());
    let mut thermal = strings();
    let mut probe = BooleanBuilder::with_capacity(n);
    let mut bytes_fetched = arrow_array::builder::Int64Builder::with_capacity(n);
    let mut bytes_total = arrow_array::builder::Int64Builder::with_capacity(n);
    let mut sources = strings();
    let mut metric_name = strings();
    let mut metric_value = Float64Builder::with_capacity(n);
    let mut arm = strings();
    for r in events {
        let e = &r.event;
        received.append_value(micros(r.received_at));
        replica.append_value(node);
        counted.append_value(r.counted);
        kind.append_value(kind_name(e.kind));
        model.append_value(&e.model);
        release.append_value(&e.release);
        variant.append_value(&e.variant);
        delegate.append_value(&e.delegate);
        outcome.append_value(outcome_name(e.outcome));
        error_code.append_option(e.error_code.as_deref());
        load_ms.append_option(e.load_ms);
        to_variant.append_option(e.to_variant.as_deref());
        install_id.append_value(&e.install_id);
        platform.append_value(&e.platform);
        soc.append_value(&e.soc);
        device_model.append_value(&e.device_model);
        os_version.append_value(&e.os_version);
        app_version.append_value(&e.app_version);
        runtime_version.append_value(&e.runtime_version);
        at.append_option(
            OffsetDateTime::parse(&e.at, &time::format_description::well_known::Rfc3339)
                .ok()
                .map(micros),
        );
        stage.append_option(e.stage.as_deref());
        clock_offset.append_option(e.clock_offset_s);
        let i = &e.inference;
        method.append_option(i.method.as_deref());
        runs.append_option(i.runs.and_then(|r| i64::try_from(r).ok()));
        first_ms.append_option(i.first_ms);
        p50_ms.append_option(i.p50_ms);
        p95_ms.append_option(i.p95_ms);
        max_ms.append_option(i.max_ms);
        sustained_s.append_option(i.sustained_s);
        thermal.append_option(i.thermal.map(|t| t.as_str()));
        probe.append_option(i.probe);
        bytes_fetched.append_option(e.bytes_fetched.and_then(|b| i64::try_from(b).ok()));
        bytes_total.append_option(e.bytes_total.and_then(|b| i64::try_from(b).ok()));
        // What each blob source did, as the JSON array the device sent (DuckDB reads it with
        // its JSON functions).
        sources.append_option(
            (!e.sources.is_empty())
                .then(|| serde_json::to_string(&e.sources).ok())
                .flatten(),
        );
        metric_name.append_option(e.metric.name.as_deref());
        metric_value.append_option(e.metric.value);
        arm.append_option(r.arm.as_deref());
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(received.finish()),
        Arc::new(replica.finish()),
        Arc::new(counted.finish()),
        Arc::new(kind.finish()),
        Arc::new(model.finish()),
        Arc::new(release.finish()),
        Arc::new(variant.finish()),
        Arc::new(delegate.finish()),
        Arc::new(outcome.finish()),
        Arc::new(error_code.finish()),
        Arc::new(load_ms.finish()),
        Arc::new(to_variant.finish()),
        Arc::new(install_id.finish()),
        Arc::new(platform.finish()),
        Arc::new(soc.finish()),
        Arc::new(device_model.finish()),
        Arc::new(os_version.finish()),
        Arc::new(app_version.finish()),
        Arc::new(runtime_version.finish()),
        Arc::new(at.finish()),
        Arc::new(stage.finish()),
        Arc::new(clock_offset.finish()),
        Arc::new(method.finish()),
        Arc::new(runs.finish()),
        Arc::new(first_ms.finish()),
        Arc::new(p50_ms.finish()),
        Arc::new(p95_ms.finish()),
        Arc::new(max_ms.finish()),
        Arc::new(sustained_s.finish()),
        Arc::new(thermal.finish()),
        Arc::new(probe.finish()),
        Arc::new(bytes_fetched.finish()),
        Arc::new(bytes_total.finish()),
        Arc::new(sources.finish()),
        Arc::new(metric_name.finish()),
        Arc::new(metric_value.finish()),
        Arc::new(arm.finish()),
    ];
    let batch = RecordBatch::try_new(schema(), columns)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_created_by(format!("ferry {}", env!("CARGO_PKG_VERSION")))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props))?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(out)
}

/// Splits `events` by the UTC day they were received, oldest day first, keeping their order.
pub fn by_day(events: Vec<RawEvent>) -> Vec<(String, Vec<RawEvent>)> {
    let mut days: std::collections::BTreeMap<String, Vec<RawEvent>> = Default::default();
    for e in events {
        days.entry(e.day()).or_default().push(e);
    }
    days.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array as _;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn event(i: usize) -> TelemetryEvent {
        TelemetryEvent {
            kind: EventKind::Load,
            model: "m".into(),
            release: "1.0.0".into(),
            variant: "xnnpack-fp32".into(),
            delegate: "xnnpack".into(),
            outcome: if i.is_multiple_of(2) {
                Outcome::Ok
            } else {
                Outcome::Failed
            },
            error_code: (!i.is_multiple_of(2)).then(|| "load_failed".to_string()),
            load_ms: (!i.is_multiple_of(3)).then_some(i as f64),
            install_id: format!("install-{i}"),
            platform: "android".into(),
            soc: "SM8650".into(),
            device_model: "Pixel 8".into(),
            os_version: "14".into(),
            app_version: "1.0.0".into(),
            runtime_version: "1.5.1".into(),
            at: "2026-12-01T10:00:00Z".into(),
            to_variant: None,
            receipt: None,
            stage: None,
            clock_offset_s: None,
            inference: Default::default(),
            bytes_fetched: None,
            bytes_total: None,
            sources: Vec::new(),
            metric: Default::default(),
        }
    }

    #[test]
    fn what_is_encoded_reads_back_row_for_row() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_764_583_200).expect("ok");
        let events: Vec<_> = (0..1000)
            .map(|i| RawEvent {
                event: event(i),
                received_at: t0,
                counted: !i.is_multiple_of(5),
                arm: None,
                seq: 0,
            })
            .collect();
        let bytes = encode(&events, "node-a").expect("ok");
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
            .expect("ok")
            .build()
            .expect("ok");
        let mut rows = 0;
        for batch in reader {
            let batch = batch.expect("ok");
            assert_eq!(batch.schema().fields(), schema().fields());
            let ids = batch
                .column_by_name("install_id")
                .expect("ok")
                .as_any()
                .downcast_ref::<arrow_array::StringArray>()
                .expect("ok");
            let ms = batch
                .column_by_name("load_ms")
                .expect("ok")
                .as_any()
                .downcast_ref::<arrow_array::Float64Array>()
                .expect("ok");
            for r in 0..batch.num_rows() {
                let i = rows + r;
                assert_eq!(ids.value(r), format!("install-{i}"));
                assert_eq!(ms.is_null(r), i.is_multiple_of(3));
            }
            rows += batch.num_rows();
        }
        assert_eq!(rows, 1000);
    }

    #[test]
    fn events_are_split_by_the_day_they_arrived() {
        let before = OffsetDateTime::from_unix_timestamp(1_764_633_599).expect("ok"); // 23:59:59
        let after = before + time::Duration::seconds(1);
        let mk = |t| RawEvent {
            event: event(0),
            received_at: t,
            counted: true,
            arm: None,
            seq: 0,
        };
        let days = by_day(vec![mk(after), mk(before), mk(after)]);
        assert_eq!(
            days.iter()
                .map(|(d, e)| (d.as_str(), e.len()))
                .collect::<Vec<_>>(),
            [("2025-12-01", 1), ("2025-12-02", 2)]
        );
        assert!(
            key("2025-12-02", "n1", after)
                .as_ref()
                .starts_with("telemetry/events/date=2025-12-02/n1-")
        );
    }
}
