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
        clock_offset_s: None,
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
    b[SESSION..SESSION + 8].copy_from_slice(&7u64.to_le_bytes());
    b[SEQ..SEQ + 8].copy_from_slice(&3u64.to_le_bytes());
    b[RUNS..RUNS + 8].copy_from_slice(&12u64.to_le_bytes());
    b[BODY..BODY + body.len()].copy_from_slice(&body);
    b
}

fn flights(dir: &Path) -> PathBuf {
    let f = dir.join("flights");
    std::fs::create_dir_all(&f).expect("dir");
    f
}

#[test]
fn a_marked_slot_of_a_gone_process_lands_and_is_removed_only_once_settled() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Recorder::new(dir.path());
    let path = flights(dir.path()).join("dead.flight");
    std::fs::write(&path, slot_bytes(&record("gpu"), 1, Stage::LoadMethod)).expect("write");
    let landed = rec.landed();
    assert_eq!(landed.len(), 1);
    let l = &landed[0].landed;
    assert_eq!(l.record, record("gpu"));
    assert_eq!(l.stage, Stage::LoadMethod);
    assert_eq!(
        (l.at_unix, l.session, l.seq, l.runs),
        (1_700_000_000, 7, 3, 12)
    );
    assert!(l.in_flight);
    // Not settled (the crash list could not be written, say): it lands again next time.
    drop(landed);
    assert!(path.exists());
    let landed = rec.landed();
    assert_eq!(landed.len(), 1);
    rec.settle(landed);
    assert!(!path.exists(), "the slot is removed once settled");
    assert!(rec.landed().is_empty(), "and never taken twice");
}

#[test]
fn torn_hostile_and_foreign_entries_are_not_crashes() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Recorder::new(dir.path());
    let flights = flights(dir.path());
    let mut torn = slot_bytes(&record("b"), 1, Stage::Run);
    torn.truncate(BODY + 5);
    std::fs::write(flights.join("torn.flight"), torn).expect("w");
    let mut huge = slot_bytes(&record("c"), 1, Stage::Run);
    huge[LEN..LEN + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(flights.join("huge.flight"), huge).expect("w");
    let mut long = slot_bytes(&record("d"), 1, Stage::Run);
    long.extend(vec![0u8; 1 << 20]);
    std::fs::write(flights.join("long.flight"), long).expect("w");
    std::fs::write(flights.join("empty.flight"), b"").expect("w");
    std::fs::write(flights.join("notes.txt"), b"x").expect("w");
    #[cfg(unix)]
    {
        // A link to a device that never ends, and one to a real slot: neither is followed.
        std::os::unix::fs::symlink("/dev/zero", flights.join("zero.flight")).expect("link");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, slot_bytes(&record("e"), 1, Stage::Run)).expect("w");
        std::os::unix::fs::symlink(&target, flights.join("link.flight")).expect("link");
    }
    assert!(rec.landed().is_empty());
    let left: Vec<String> = std::fs::read_dir(&flights)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["notes.txt"], "other files are left alone");
    #[cfg(unix)]
    assert!(
        dir.path().join("elsewhere").exists(),
        "a link's target is not touched"
    );
}

#[test]
fn an_idle_slot_of_a_gone_process_lands_as_idle() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Recorder::new(dir.path());
    let path = flights(dir.path()).join("idle.flight");
    std::fs::write(&path, slot_bytes(&record("a"), 0, Stage::Run)).expect("w");
    let landed = rec.landed();
    assert_eq!(landed.len(), 1);
    assert!(!landed[0].landed.in_flight);
    rec.settle(landed);
    assert!(!path.exists());
}

#[test]
fn a_live_flight_is_never_taken_for_a_crash_and_its_marks_land_after_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::new(dir.path()));
    let mut flight = rec.begin(&record("gpu")).expect("a slot");
    flight.mark(Stage::LoadProgram, true);
    // Another client of this process, and another process (a file opened anew is locked by
    // this one), find the slot live: not a crash.
    let other = Recorder::new(dir.path());
    assert!(other.landed().is_empty());
    let path = std::fs::read_dir(dir.path().join("flights"))
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "flight"))
        .expect("the slot file");
    assert!(matches!(
        locks::try_exclusive_existing_rw(&path).expect("try"),
        Exclusive::Held
    ));
    flight.mark(Stage::Golden, false);
    flight.clear(true);
    flight.mark_run();
    flight.clear_run();
    flight.mark_run();
    // What a process crash leaves: the slot's bytes as the page cache holds them.
    let landed = parse(&std::fs::read(&path).expect("read")).expect("a record");
    assert!(landed.in_flight);
    assert_eq!(landed.stage, Stage::Run);
    assert_eq!(landed.runs, 1, "one run completed before");
    assert_eq!(landed.session, session());
    assert_eq!(landed.record.variant, "gpu");
    flight.clear_run();
    assert!(
        !parse(&std::fs::read(&path).expect("read"))
            .expect("a record")
            .in_flight
    );
}

#[test]
fn slots_are_reused_and_left_idle_for_the_next_start() {
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
    // The next start finds them idle (the process ended well), and removes them.
    let next = Recorder::new(dir.path());
    let landed = next.landed();
    assert_eq!(landed.len(), 2);
    assert!(landed.iter().all(|l| !l.landed.in_flight));
    next.settle(landed);
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
