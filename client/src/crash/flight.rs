//! The flight recorder: before a native step that can take the process down (the runtime's
//! program load, method load and backend init, the golden check, the probe, a run), the client
//! marks which variant is in flight, and at what stage, in a small file of the cache; when the
//! step returns, with success or an error, the mark is cleared. A marked file whose process is
//! gone is a crash of that variant at that stage ([`Recorder::landed`]).
//!
//! ```text
//! <root>/flights/<random>.flight   one slot: a 4 KiB file, mapped shared
//!   0..8    magic "FERRYFL1"
//!   8       state: 0 idle, 1 in flight
//!   9       stage code (see `stage_code`)
//!   16..24  the step's start, Unix seconds of the device clock (little endian)
//!   24..28  length of the record (JSON, from byte 64)
//!   32..40  the process's session (random, one per process)
//!   40..48  the step's order in its process (a counter every mark takes the next of)
//!   48..56  runs completed in this slot
//! ```
//!
//! Each slot is held with an exclusive file lock ([`crate::cache::locks`]) for as long as its
//! process lives, so a slot another live process holds (a second process of the app, mid-load)
//! is never taken for a crash; the kernel releases the lock of a process that dies, even by
//! SIGKILL. A slot is made under a staging name, locked, written in full (a sparse file's first
//! store into the mapping could fault on a full disk), then renamed into place, so no reader
//! sees an unlocked new slot. A slot is cleared and removed only after what it says was kept
//! ([`Recorder::settle`]).
//!
//! Cost: a load's mark and clear are written to the file and flushed (`msync`, once each per
//! load); a run's are a few stores into the shared mapping and no system call.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering, compiler_fence};
use std::sync::{Arc, Mutex, OnceLock};

use memmap2::MmapMut;
use serde::{Deserialize, Serialize};

use ferry_shared::Sha256Digest;

use crate::cache::locks::{self, Exclusive, FileLock};
use crate::error::{ClientError, Stage};

const MAGIC: &[u8; 8] = b"FERRYFL1";
const SLOT_BYTES: usize = 4096;
const STATE: usize = 8;
const STAGE: usize = 9;
const AT: usize = 16;
const LEN: usize = 24;
const SESSION: usize = 32;
const SEQ: usize = 40;
const RUNS: usize = 48;
const BODY: usize = 64;
/// The longest record a slot holds.
const MAX_RECORD: usize = SLOT_BYTES - BODY;
/// Staging slots older than this belong to a process that died making them.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(600);

/// What is in flight: the variant, its release, and what the device was running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlightRecord {
    /// Model name.
    pub model: String,
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// The program's digest.
    pub sha256: Sha256Digest,
    /// Its data files' digests.
    #[serde(default)]
    pub data: Vec<Sha256Digest>,
    /// The receipt of the resolve answer that chose it (none from the cache alone).
    #[serde(default)]
    pub receipt: Option<String>,
    /// The app's version.
    pub app_version: String,
    /// The runtime's version.
    pub runtime_version: String,
    /// The OS version.
    pub os_version: String,
    /// The device clock's offset from the server's time when known (seconds, positive:
    /// ahead).
    #[serde(default)]
    pub clock_offset_s: Option<i64>,
}

/// A slot found after its process was gone: in flight (a crash of its variant, or of another
/// one in flight in the same process) or idle (the process ended between steps).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Landed {
    pub record: FlightRecord,
    pub stage: Stage,
    /// When the step began, Unix seconds of the device clock.
    pub at_unix: i64,
    /// Whether a step was in flight.
    pub in_flight: bool,
    /// The process it belonged to.
    pub session: u64,
    /// The step's order in that process.
    pub seq: u64,
    /// Runs the slot completed before.
    pub runs: u64,
}

/// A landed slot, still locked: [`Recorder::settle`] clears and removes it once what it says
/// was kept.
pub(crate) struct Landing {
    pub landed: Landed,
    lock: FileLock,
    path: PathBuf,
}

/// This process's session: random, drawn once.
fn session() -> u64 {
    static SESSION_ID: OnceLock<u64> = OnceLock::new();
    *SESSION_ID.get_or_init(|| {
        let mut b = [0u8; 8];
        let _ = getrandom::fill(&mut b);
        u64::from_le_bytes(b)
    })
}

/// The next step's order in this process.
fn next_seq() -> u64 {
    static SEQ_NEXT: AtomicU64 = AtomicU64::new(1);
    SEQ_NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The slot files this process holds (some filesystems, NFS among them, keep `flock` per
/// process: a process must not take its own slots for a dead one's).
fn live() -> &'static Mutex<BTreeSet<PathBuf>> {
    static LIVE: OnceLock<Mutex<BTreeSet<PathBuf>>> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(BTreeSet::new()))
}

/// The slots of one client: made on demand, reused, and removed with the client.
pub(crate) struct Recorder {
    dir: PathBuf,
    pool: Mutex<Vec<Slot>>,
}

struct Slot {
    map: MmapMut,
    path: PathBuf,
    _lock: FileLock,
}

fn stage_code(stage: Stage) -> u8 {
    match stage {
        Stage::LoadProgram => 1,
        Stage::LoadMethod => 2,
        Stage::Golden => 3,
        Stage::Probe => 4,
        Stage::Run => 5,
        Stage::Execute => 6,
        _ => 0,
    }
}

fn stage_of(code: u8) -> Stage {
    match code {
        1 => Stage::LoadProgram,
        2 => Stage::LoadMethod,
        3 => Stage::Golden,
        4 => Stage::Probe,
        5 => Stage::Run,
        _ => Stage::Execute,
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Recorder {
    /// The recorder of the cache at `root` (nothing is made until the first flight).
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            dir: root.join("flights"),
            pool: Mutex::new(Vec::new()),
        }
    }

    /// A slot holding `record`, idle; `None` when the cache cannot hold one (the load then goes
    /// on unrecorded).
    pub(crate) fn begin(self: &Arc<Self>, record: &FlightRecord) -> Option<Flight> {
        let body = serde_json::to_vec(record).ok()?;
        if body.len() > MAX_RECORD {
            return None;
        }
        let pooled = ferry_shared::sync::lock(&self.pool).pop();
        let mut slot = match pooled {
            Some(s) => s,
            None => self.make_slot().ok()?,
        };
        let len = u32::try_from(body.len()).ok()?;
        slot.map[STATE] = 0;
        slot.map[BODY..BODY + body.len()].copy_from_slice(&body);
        slot.map[LEN..LEN + 4].copy_from_slice(&len.to_le_bytes());
        slot.map[SESSION..SESSION + 8].copy_from_slice(&session().to_le_bytes());
        slot.map[RUNS..RUNS + 8].copy_from_slice(&0u64.to_le_bytes());
        Some(Flight {
            slot: Some(slot),
            recorder: self.clone(),
        })
    }

    /// A new slot: staged, locked, written in full, mapped, then renamed into place (the folder
    /// synced).
    fn make_slot(&self) -> Result<Slot, ClientError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| ClientError::io(&self.dir, e))?;
        let mut name = [0u8; 12];
        getrandom::fill(&mut name)
            .map_err(|e| ClientError::Config(format!("no randomness for a flight slot: {e}")))?;
        let name = hex::encode(name);
        let staged = self.dir.join(format!(".new-{name}"));
        let path = self.dir.join(format!("{name}.flight"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&staged)
            .map_err(|e| ClientError::io(&staged, e))?;
        let made = (|| {
            let Some(lock) = locks::try_lock_file(file, &staged)? else {
                return Err(ClientError::Config(
                    "a new flight slot was locked by another process".into(),
                ));
            };
            let mut first = vec![0u8; SLOT_BYTES];
            first[..MAGIC.len()].copy_from_slice(MAGIC);
            let mut f = lock.file();
            f.write_all(&first)
                .and_then(|()| f.sync_data())
                .map_err(|e| ClientError::io(&staged, e))?;
            // SAFETY: the file is this slot's own, written in full above and locked for the
            // process's life; other processes only read it after taking the lock, i.e. after
            // this one is gone.
            #[allow(unsafe_code)]
            let map = unsafe { MmapMut::map_mut(lock.file()) }
                .map_err(|e| ClientError::io(&staged, e))?;
            std::fs::rename(&staged, &path).map_err(|e| ClientError::io(&staged, e))?;
            Ok((map, lock))
        })();
        let (map, lock) = match made {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(&staged);
                return Err(e);
            }
        };
        ferry_fs::sync_dir(&self.dir).map_err(|e| ClientError::io(&self.dir, e))?;
        ferry_shared::sync::lock(live()).insert(path.clone());
        Ok(Slot {
            map,
            path,
            _lock: lock,
        })
    }

    /// The slots of processes that are gone, each locked (in flight or idle: see [`Landed`]);
    /// nothing is cleared until [`Recorder::settle`]. Entries that are not regular files, and
    /// slots that are not whole, are removed.
    pub(crate) fn landed(&self) -> Vec<Landing> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mine = ferry_shared::sync::lock(live()).clone();
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let regular = entry.file_type().is_ok_and(|t| t.is_file());
            if name.starts_with(".new-") {
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > STALE_STAGING);
                if old || !regular {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if !name.ends_with(".flight") || mine.contains(&path) {
                continue;
            }
            if !regular {
                // A link or a pipe under a slot's name is no slot (and is never followed).
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let Ok(Exclusive::Locked(lock)) = locks::try_exclusive_existing_rw(&path) else {
                continue;
            };
            match read_slot(&lock) {
                Some(landed) => found.push(Landing { landed, lock, path }),
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        found
    }

    /// Clears and removes the landed slots (what they said was kept): a second reader racing
    /// this one finds them idle or gone.
    pub(crate) fn settle(&self, landings: Vec<Landing>) {
        for l in landings {
            let mut file = l.lock.file();
            let cleared = file
                .seek(SeekFrom::Start(STATE as u64))
                .and_then(|_| file.write_all(&[0]))
                .and_then(|()| file.sync_data());
            if cleared.is_ok() || !l.landed.in_flight {
                let _ = std::fs::remove_file(&l.path);
            }
        }
    }
}

/// A slot's bytes, read through its lock (exactly one slot's worth; anything else is not a
/// slot).
fn read_slot(lock: &FileLock) -> Option<Landed> {
    let mut file = lock.file();
    file.seek(SeekFrom::Start(0)).ok()?;
    let mut bytes = Vec::with_capacity(SLOT_BYTES);
    file.take(SLOT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() != SLOT_BYTES {
        return None;
    }
    parse(&bytes)
}

/// A slot's bytes, when they hold a record.
fn parse(bytes: &[u8]) -> Option<Landed> {
    if bytes.len() < BODY || &bytes[..MAGIC.len()] != MAGIC {
        return None;
    }
    let word =
        |at: usize| -> Option<u64> { Some(u64::from_le_bytes(bytes[at..at + 8].try_into().ok()?)) };
    let len = u32::from_le_bytes(bytes[LEN..LEN + 4].try_into().ok()?) as usize;
    let body = bytes.get(BODY..BODY.checked_add(len)?)?;
    let record: FlightRecord = serde_json::from_slice(body).ok()?;
    let at_unix = i64::from_le_bytes(bytes[AT..AT + 8].try_into().ok()?);
    Some(Landed {
        record,
        stage: stage_of(bytes[STAGE]),
        at_unix,
        in_flight: bytes[STATE] == 1,
        session: word(SESSION)?,
        seq: word(SEQ)?,
        runs: word(RUNS)?,
    })
}

/// One variant's flight: a slot holding its record, marked around each native step. Dropping
/// it returns the slot, idle, to the recorder.
pub(crate) struct Flight {
    slot: Option<Slot>,
    recorder: Arc<Recorder>,
}

impl Flight {
    /// Marks `stage` in flight before a native step; `durable`: flushed to the disk first (a
    /// load's first step).
    pub(crate) fn mark(&mut self, stage: Stage, durable: bool) {
        let Some(slot) = &mut self.slot else { return };
        slot.map[STAGE] = stage_code(stage);
        slot.map[AT..AT + 8].copy_from_slice(&unix_now().to_le_bytes());
        slot.map[SEQ..SEQ + 8].copy_from_slice(&next_seq().to_le_bytes());
        slot.map[STATE] = 1;
        compiler_fence(Ordering::SeqCst);
        if durable {
            let _ = slot.map.flush_range(0, SLOT_BYTES);
        }
    }

    /// Clears the mark after the step returned; `durable`: flushed to the disk (a load's end).
    pub(crate) fn clear(&mut self, durable: bool) {
        let Some(slot) = &mut self.slot else { return };
        compiler_fence(Ordering::SeqCst);
        slot.map[STATE] = 0;
        if durable {
            let _ = slot.map.flush_range(0, SLOT_BYTES);
        }
    }

    /// Marks a run in flight: stores into the mapping (the stage, the time, the flag), no
    /// system call.
    #[inline]
    pub(crate) fn mark_run(&mut self) {
        let Some(slot) = &mut self.slot else { return };
        slot.map[STAGE] = stage_code(Stage::Run);
        slot.map[AT..AT + 8].copy_from_slice(&unix_now().to_le_bytes());
        slot.map[SEQ..SEQ + 8].copy_from_slice(&next_seq().to_le_bytes());
        slot.map[STATE] = 1;
        compiler_fence(Ordering::SeqCst);
    }

    /// Clears a run's mark and counts the run: stores into the mapping, no system call.
    #[inline]
    pub(crate) fn clear_run(&mut self) {
        let Some(slot) = &mut self.slot else { return };
        compiler_fence(Ordering::SeqCst);
        slot.map[STATE] = 0;
        let runs = u64::from_le_bytes(slot.map[RUNS..RUNS + 8].try_into().unwrap_or([0; 8]));
        slot.map[RUNS..RUNS + 8].copy_from_slice(&runs.saturating_add(1).to_le_bytes());
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if let Some(mut slot) = self.slot.take() {
            slot.map[STATE] = 0;
            ferry_shared::sync::lock(&self.recorder.pool).push(slot);
        }
    }
}

impl Drop for Recorder {
    /// The idle slots are left for the next start: each says which variant this process had
    /// in it when it ended well (which resets a pending strike of a crash during a run), and
    /// that start removes them.
    fn drop(&mut self) {
        let slots = std::mem::take(&mut *ferry_shared::sync::lock(&self.pool));
        for s in slots {
            let path = s.path.clone();
            drop(s);
            ferry_shared::sync::lock(live()).remove(&path);
        }
    }
}

#[cfg(test)]
mod tests;
