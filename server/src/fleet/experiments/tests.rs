//! Reading an experiment's devices from raw event files as `persist::events` writes them, and
//! from files written before the metric and arm columns existed.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use ferry_shared::experiment::{Arm, ArmName, ExperimentPlan, ExperimentState};
use ferry_shared::wire::telemetry::{EventKind, MetricFields, Outcome, TelemetryEvent};
use time::OffsetDateTime;

use super::read::{Folded, Window, fold};
use crate::fleet::persist::events::{RawEvent, encode};

fn plan() -> ExperimentPlan {
    ExperimentPlan {
        model: "m".into(),
        revision: 1,
        id: "xabc".into(),
        salt: "s".into(),
        control: "1.0.0".parse::<Arm>().expect("arm"),
        treatment: "1.1.0".parse::<Arm>().expect("arm"),
        basis_points: 10_000,
        metrics: vec!["accepted".parse().expect("metric")],
        classes: Vec::new(),
        effect: 0.05,
        started_at: "2026-12-07T10:00:00Z".into(),
        lookback_days: 7,
        state: ExperimentState::Running,
        action: "start".into(),
        actor: "t".into(),
        at: "2026-12-07T10:00:00Z".into(),
        reason: String::new(),
    }
}

fn start() -> OffsetDateTime {
    OffsetDateTime::parse(
        "2026-12-07T10:00:00Z",
        &time::format_description::well_known::Rfc3339,
    )
    .expect("time")
}

fn window() -> Window {
    super::window(&plan())
}

fn metric(install: &str, name: &str, value: f64) -> TelemetryEvent {
    TelemetryEvent {
        kind: EventKind::Metric,
        model: "m".into(),
        release: "1.0.0".into(),
        variant: "xnnpack-fp32".into(),
        delegate: "xnnpack".into(),
        outcome: Outcome::Ok,
        error_code: None,
        load_ms: None,
        install_id: install.into(),
        platform: "android".into(),
        soc: "SM8650".into(),
        device_model: "Pixel 8".into(),
        os_version: "14".into(),
        app_version: "1.0.0".into(),
        runtime_version: "1.5.1".into(),
        at: "2026-12-07T10:00:00Z".into(),
        to_variant: None,
        receipt: None,
        stage: None,
        clock_offset_s: None,
        inference: Default::default(),
        bytes_fetched: None,
        bytes_total: None,
        sources: Vec::new(),
        metric: MetricFields {
            name: Some(name.into()),
            value: Some(value),
        },
    }
}

fn raw(event: TelemetryEvent, minutes: i64, counted: bool, arm: Option<&str>) -> RawEvent {
    RawEvent {
        event,
        received_at: start() + time::Duration::minutes(minutes),
        counted,
        arm: arm.map(str::to_string),
        seq: 0,
    }
}

#[test]
fn only_counted_events_of_this_model_and_arm_count_and_history_is_before_the_start() {
    let mut other_model = metric("a", "accepted", 100.0);
    other_model.model = "n".into();
    let events = vec![
        raw(metric("a", "accepted", 0.4), -60, true, None),
        raw(metric("a", "accepted", 0.6), 5, true, Some("xabc=control")),
        raw(metric("a", "accepted", 0.8), 6, true, Some("xabc=control")),
        raw(
            metric("b", "accepted", 0.9),
            7,
            true,
            Some("xabc=treatment"),
        ),
        // Not history: after the start, without this experiment's arm.
        raw(metric("b", "accepted", 50.0), 8, true, None),
        // Not counted (no valid receipt), another experiment, another model, an unnamed metric,
        // before the lookback.
        raw(
            metric("b", "accepted", -50.0),
            9,
            false,
            Some("xabc=treatment"),
        ),
        raw(
            metric("b", "accepted", -50.0),
            9,
            true,
            Some("xother=treatment"),
        ),
        // Another experiment's arm before the start is history.
        raw(
            metric("d", "accepted", 0.25),
            -30,
            true,
            Some("xother=control"),
        ),
        raw(metric("d", "accepted", 0.5), 30, true, Some("xabc=control")),
        raw(other_model, 9, true, Some("xabc=treatment")),
        raw(metric("b", "other", 7.0), 9, true, Some("xabc=treatment")),
        raw(metric("c", "accepted", 3.0), -8 * 24 * 60, true, None),
    ];
    let bytes = encode(&events, "node").expect("encode");
    let mut folded = Folded::default();
    fold(bytes.into(), &plan(), window(), &mut folded).expect("fold");
    let a = &folded.devices["a"];
    assert_eq!(a.arm, Some(ArmName::Control));
    assert_eq!(a.pre.value("accepted"), Some(0.4));
    assert!((a.during.value("accepted").expect("a") - 0.7).abs() < 1e-12);
    let b = &folded.devices["b"];
    assert_eq!(b.arm, Some(ArmName::Treatment));
    assert_eq!(b.during.value("accepted"), Some(0.9));
    assert_eq!(b.during.value("other"), None);
    assert_eq!(b.pre.events, 0);
    assert!(!folded.devices.contains_key("c"));
    assert_eq!(folded.devices["d"].pre.value("accepted"), Some(0.25));
}

#[test]
fn files_from_before_the_metric_columns_are_read_and_junk_is_an_error() {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")));
    let schema = Arc::new(Schema::new(vec![
        Field::new("received_at", ts, false),
        Field::new("counted", DataType::Boolean, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("model", DataType::Utf8, false),
        Field::new("outcome", DataType::Utf8, false),
        Field::new("install_id", DataType::Utf8, false),
    ]));
    let before = start() - time::Duration::hours(1);
    let micros = i64::try_from(before.unix_timestamp_nanos() / 1000).expect("micros");
    let columns: Vec<ArrayRef> = vec![
        Arc::new(TimestampMicrosecondArray::from(vec![micros, micros]).with_timezone("UTC")),
        Arc::new(BooleanArray::from(vec![true, true])),
        Arc::new(StringArray::from(vec!["load", "load"])),
        Arc::new(StringArray::from(vec!["m", "m"])),
        Arc::new(StringArray::from(vec!["failed", "ok"])),
        Arc::new(StringArray::from(vec!["a", "a"])),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("batch");
    let mut bytes = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    let mut folded = Folded::default();
    fold(bytes.into(), &plan(), window(), &mut folded).expect("an older file");
    assert_eq!(folded.devices["a"].pre.value("load_failure"), Some(0.5));
    for junk in [&b""[..], b"PAR1", b"not parquet at all", &[0u8; 4096][..]] {
        let mut f = Folded::default();
        assert!(
            fold(
                bytes::Bytes::copy_from_slice(junk),
                &plan(),
                window(),
                &mut f
            )
            .is_err()
        );
    }
}

#[test]
fn devices_read_file_by_file_are_the_devices_read_at_once() {
    let events: Vec<RawEvent> = (0..40)
        .map(|i| {
            let id = format!("dev-{}", i % 7);
            let arm = match i % 3 {
                0 => None,
                1 => Some("xabc=control"),
                _ => Some("xabc=treatment"),
            };
            let minutes = if arm.is_none() { -10 - i } else { 5 + i };
            raw(
                metric(&id, "accepted", f64::from(i as u8)),
                minutes,
                true,
                arm,
            )
        })
        .collect();
    let mut once = Folded::default();
    fold(
        encode(&events, "n").expect("encode").into(),
        &plan(),
        window(),
        &mut once,
    )
    .expect("fold");
    let mut split = Folded::default();
    for chunk in events.chunks(9) {
        let mut part = Folded::default();
        fold(
            encode(chunk, "n").expect("encode").into(),
            &plan(),
            window(),
            &mut part,
        )
        .expect("fold");
        split.absorb(part);
    }
    assert_eq!(once.devices.len(), split.devices.len());
    for (id, d) in &once.devices {
        let s = &split.devices[id];
        for m in ["accepted", "crash"] {
            assert_eq!(d.pre.value(m), s.pre.value(m), "{id} {m}");
            assert_eq!(d.during.value(m), s.during.value(m), "{id} {m}");
        }
        assert_eq!(
            (d.pre.events, d.during.events),
            (s.pre.events, s.during.events)
        );
    }
}
