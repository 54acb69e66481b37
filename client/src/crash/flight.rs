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
//! ```
//!
//! Each slot is held with an exclusive file lock ([`crate::cache::locks`]) for as long as its
//! process lives, so a slot another live process holds (a second process of the app, mid-load)
//! is never taken for a crash; the kernel releases the lock of a process that dies, even by
//! SIGKILL. A slot is made under a staging name, locked, then renamed into place, so no reader
//! sees an unlocked new slot.
//!
//! Cost: a load's mark and clear are written to the file and flushed (`msync`, once each per
//! load); a run's are two stores into the shared mapping and no system call. A process crash does
//! not lose the page cache, so the run's mark survives it; a power cut during a run is not
//! counted as a crash (its mark may not have reached the disk).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{Ordering, compiler_fence};
use std::sync::{Arc, Mutex};

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
    /// The device clock's offset from the server's time (seconds, positive: ahead).
    #[serde(default)]
    pub clock_offset_s: i64,
}

/// A slot found marked after its process was gone: the variant crashed there.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Landed {
    pub record: FlightRecord,
    pub stage: Stage,
    /// When the step began, Unix seconds of the device clock.
    pub at_unix: i64,
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
        Some(Flight {
            slot: Some(slot),
            recorder: self.clone(),
        })
    }

    /// A new slot: staged, locked, sized, mapped, then renamed into place (the folder synced).
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
        let cleanup = |e: ClientError| {
            let _ = std::fs::remove_file(&staged);
            e
        };
        file.try_lock().map_err(|e| {
            cleanup(match e {
                std::fs::TryLockError::Error(e) => locks::lock_error(&staged, e),
                std::fs::TryLockError::WouldBlock => {
                    ClientError::Config("a new flight slot was locked by another process".into())
                }
            })
        })?;
        file.set_len(SLOT_BYTES as u64)
            .map_err(|e| cleanup(ClientError::io(&staged, e)))?;
        // SAFETY: the file is this slot's own, sized above and locked for the process's life;
        // other processes only read it after taking the lock, i.e. after this one is gone.
        #[allow(unsafe_code)]
        let mut map =
            unsafe { MmapMut::map_mut(&file) }.map_err(|e| cleanup(ClientError::io(&staged, e)))?;
        map[..MAGIC.len()].copy_from_slice(MAGIC);
        map.flush()
            .map_err(|e| cleanup(ClientError::io(&staged, e)))?;
        std::fs::rename(&staged, &path).map_err(|e| cleanup(ClientError::io(&staged, e)))?;
        ferry_fs::sync_dir(&self.dir).map_err(|e| ClientError::io(&self.dir, e))?;
        Ok(Slot {
            map,
            path,
            _lock: FileLock::from_file(file),
        })
    }

    /// The slots of processes that are gone and were in flight when they went, each taken once
    /// (the slot is cleared and removed); idle slots of gone processes are removed too.
    pub(crate) fn landed(&self) -> Vec<Landed> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".new-") {
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > STALE_STAGING);
                if old {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if !name.ends_with(".flight") {
                continue;
            }
            if let Some(l) = take_if_gone(&path) {
                found.push(l);
            }
        }
        found
    }
}

/// The record of the slot at `path` when its process is gone and it was in flight; the slot is
/// cleared (so a second reader racing this one finds it idle) and removed.
fn take_if_gone(path: &Path) -> Option<Landed> {
    let Ok(Exclusive::Locked(lock)) = locks::try_exclusive_existing_rw(path) else {
        return None;
    };
    let bytes = std::fs::read(path).ok()?;
    let landed = parse(&bytes);
    if landed.is_some() {
        use std::io::{Seek as _, SeekFrom, Write as _};
        let mut file = lock.file();
        let cleared = file
            .seek(SeekFrom::Start(STATE as u64))
            .and_then(|_| file.write_all(&[0]));
        if cleared.is_err() {
            return None;
        }
        let _ = file.sync_data();
    }
    let _ = std::fs::remove_file(path);
    drop(lock);
    landed
}

/// A slot's bytes, when they hold a flight in progress.
fn parse(bytes: &[u8]) -> Option<Landed> {
    if bytes.len() < BODY || &bytes[..MAGIC.len()] != MAGIC || bytes[STATE] != 1 {
        return None;
    }
    let len = u32::from_le_bytes(bytes[LEN..LEN + 4].try_into().ok()?) as usize;
    let body = bytes.get(BODY..BODY.checked_add(len)?)?;
    let record: FlightRecord = serde_json::from_slice(body).ok()?;
    let at_unix = i64::from_le_bytes(bytes[AT..AT + 8].try_into().ok()?);
    Some(Landed {
        record,
        stage: stage_of(bytes[STAGE]),
        at_unix,
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
        slot.map[STATE] = 1;
        compiler_fence(Ordering::SeqCst);
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
    fn drop(&mut self) {
        let slots = std::mem::take(&mut *ferry_shared::sync::lock(&self.pool));
        for s in slots {
            let _ = std::fs::remove_file(&s.path);
        }
    }
}

#[cfg(test)]
mod tests;
