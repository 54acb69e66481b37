use super::*;

fn record(variant: &str) -> FlightRecord {
    FlightRecord {
        model: "m".into(),
        release: "1.0.0".into(),
        variant: variant.into(),
        delegate: "xnnpack".into(),
        sha256: Sha256Digest::of(variant.as_bytes()),
        data: Vec::new(),
        receipt: Some("r".into()),
        app_version: "1.0.0".into(),
        runtime_version: "1.5.1".into(),
        os_version: "14".into(),
        clock_offset_s: 0,
    }
}

/// The bytes a slot holds when its process died at `stage` (state 1) or idle (state 0).
fn slot_bytes(r: &FlightRecord, state: u8, stage: Stage) -> Vec<u8> {
    let body = serde_json::to_vec(r).expect("json");
    let mut b = vec![0u8; SLOT_BYTES];
    b[..8].copy_from_slice(MAGIC);
    b[STATE] = state;
    b[STAGE] = stage_code(stage);
    b[AT..AT + 8].copy_from_slice(&1_700_000_000i64.to_le_bytes());
    b[LEN..LEN + 4].copy_from_slice(&u32::try_from(body.len()).expect("len").to_le_bytes());
    b[BODY..BODY + body.len()].copy_from_slice(&body);
    b
}

#[test]
fn a_marked_slot_of_a_gone_process_lands_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Recorder::new(dir.path());
    std::fs::create_dir_all(dir.path().join("flights")).expect("dir");
    let path = dir.path().join("flights/dead.flight");
    std::fs::write(&path, slot_bytes(&record("gpu"), 1, Stage::LoadMethod)).expect("write");
    let landed = rec.landed();
    assert_eq!(landed.len(), 1);
    assert_eq!(landed[0].record, record("gpu"));
    assert_eq!(landed[0].stage, Stage::LoadMethod);
    assert_eq!(landed[0].at_unix, 1_700_000_000);
    assert!(!path.exists(), "the slot is removed once taken");
    assert!(rec.landed().is_empty(), "and never taken twice");
}

#[test]
fn idle_torn_and_foreign_slots_are_not_crashes() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Recorder::new(dir.path());
    let flights = dir.path().join("flights");
    std::fs::create_dir_all(&flights).expect("dir");
    std::fs::write(
        flights.join("idle.flight"),
        slot_bytes(&record("a"), 0, Stage::Run),
    )
    .expect("w");
    let mut torn = slot_bytes(&record("b"), 1, Stage::Run);
    torn.truncate(BODY + 5);
    std::fs::write(flights.join("torn.flight"), torn).expect("w");
    let mut huge = slot_bytes(&record("c"), 1, Stage::Run);
    huge[LEN..LEN + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(flights.join("huge.flight"), huge).expect("w");
    std::fs::write(flights.join("empty.flight"), b"").expect("w");
    std::fs::write(flights.join("notes.txt"), b"x").expect("w");
    assert!(rec.landed().is_empty());
    assert!(
        !flights.join("idle.flight").exists(),
        "an idle slot of a gone process is removed"
    );
    assert!(
        flights.join("notes.txt").exists(),
        "other files are left alone"
    );
}

#[test]
fn a_live_flight_is_never_taken_for_a_crash_and_its_marks_land_after_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::new(dir.path()));
    let mut flight = rec.begin(&record("gpu")).expect("a slot");
    flight.mark(Stage::LoadProgram, true);
    // Another reader (another process of the app would open the file the same way) finds
    // the slot locked: live, not a crash.
    let other = Recorder::new(dir.path());
    assert!(other.landed().is_empty());
    flight.mark(Stage::Golden, false);
    flight.clear(true);
    flight.mark_run();
    // What a process crash leaves: the slot's bytes as the page cache holds them.
    let path = std::fs::read_dir(dir.path().join("flights"))
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "flight"))
        .expect("the slot file");
    let landed = parse(&std::fs::read(&path).expect("read")).expect("marked");
    assert_eq!(landed.stage, Stage::Run);
    assert_eq!(landed.record.variant, "gpu");
    flight.clear(false);
    assert!(parse(&std::fs::read(&path).expect("read")).is_none());
}

#[test]
fn slots_are_reused_and_removed_with_the_recorder() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::new(dir.path()));
    let count = || {
        std::fs::read_dir(dir.path().join("flights"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let a = rec.begin(&record("a")).expect("slot");
    let b = rec.begin(&record("b")).expect("slot");
    assert_eq!(count(), 2);
    drop((a, b));
    let c = rec.begin(&record("c")).expect("slot");
    assert_eq!(count(), 2, "a returned slot is reused");
    drop(c);
    drop(rec);
    assert_eq!(count(), 0);
}

#[test]
fn a_record_too_large_for_a_slot_goes_unrecorded() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::new(dir.path()));
    let mut r = record("a");
    r.receipt = Some("x".repeat(SLOT_BYTES));
    assert!(rec.begin(&r).is_none());
}
