//! The journal's files: segments of framed records, named after the run that wrote them and
//! their first record.
//!
//! ```text
//! <data>/journal/<writer>~<first seq, 20 digits>.log
//! record: [json length: u32][seq: u64][minute: i64][checksum: u64][the batch as JSON]
//! ```
//!
//! All numbers little-endian; the checksum is SipHash-1-3 (zero keys) of seq, minute and the
//! JSON. A record is appended whole before its batch is answered; a torn or damaged record (a
//! crash in the middle of a write) ends its segment's reading: nothing after it was answered.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use siphasher::sip::SipHasher13;

use crate::fleet::persist::accepted::Accepted;

/// Largest record read back (a batch is at most the telemetry body limit, re-encoded).
const MAX_RECORD: usize = 64 << 20;
/// Bytes before a record's batch: its length, number, minute and checksum.
pub const HEADER: usize = 4 + 8 + 8 + 8;

/// One record read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Its number in its run.
    pub seq: u64,
    /// The minute it was counted in.
    pub minute: i64,
    /// The batch.
    pub batch: Accepted,
}

fn checksum(seq: u64, minute: i64, json: &[u8]) -> u64 {
    use std::hash::Hasher as _;
    let mut h = SipHasher13::new_with_keys(0, 0);
    h.write(&seq.to_le_bytes());
    h.write(&minute.to_le_bytes());
    h.write(json);
    h.finish()
}

/// Appends one record's bytes to `out`: `json`, the batch as encoded.
pub fn frame(out: &mut Vec<u8>, seq: u64, minute: i64, json: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER]);
    out.extend_from_slice(json);
    seal(out, start, seq, minute);
}

/// Appends one record of `batch` to `out`, encoding it there (no copy of its own). `Err`
/// when it cannot be encoded (then `out` is as it was).
pub fn frame_batch(
    out: &mut Vec<u8>,
    seq: u64,
    minute: i64,
    batch: &Accepted,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER]);
    if let Err(e) = serde_json::to_writer(&mut *out, batch) {
        out.truncate(start);
        return Err(e);
    }
    seal(out, start, seq, minute);
    Ok(())
}

/// Fills the header of the record that starts at `start` of `out` and runs to its end.
fn seal(out: &mut [u8], start: usize, seq: u64, minute: i64) {
    let (head, json) = out[start..].split_at_mut(HEADER);
    let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
    head[..4].copy_from_slice(&len.to_le_bytes());
    head[4..12].copy_from_slice(&seq.to_le_bytes());
    head[12..20].copy_from_slice(&minute.to_le_bytes());
    head[20..28].copy_from_slice(&checksum(seq, minute, json).to_le_bytes());
}

/// What reading a segment found.
#[derive(Debug, Default)]
pub struct Read {
    /// Its whole records, in order.
    pub records: Vec<Record>,
    /// Bytes after the last whole record (a write cut by a crash: never answered).
    pub torn: usize,
    /// A record whose checksum holds but whose batch this version cannot read (written by a
    /// newer version): the segment must be kept, not deleted.
    pub unreadable: bool,
}

/// Reads a segment's records up to the first torn, damaged or unreadable one.
pub fn read(bytes: &[u8]) -> Read {
    let mut out = Read::default();
    let mut at = 0;
    while at < bytes.len() {
        let Some(head) = bytes.get(at..at + HEADER) else {
            break;
        };
        let num = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&head[r]);
            u64::from_le_bytes(b)
        };
        let len = num(0..4) as usize;
        let (seq, minute, sum) = (num(4..12), num(12..20) as i64, num(20..28));
        if len > MAX_RECORD {
            break;
        }
        let Some(json) = bytes.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        if checksum(seq, minute, json) != sum {
            break;
        }
        let Ok(batch) = serde_json::from_slice::<Accepted>(json) else {
            out.unreadable = true;
            break;
        };
        out.records.push(Record { seq, minute, batch });
        at += HEADER + len;
    }
    out.torn = if out.unreadable { 0 } else { bytes.len() - at };
    out
}

/// A segment file's name for `writer`'s records from `first`.
pub fn name(writer: &str, first: u64) -> String {
    format!("{writer}~{first:020}.log")
}

/// The writer and first record of a segment file's name.
pub fn parse_name(file: &str) -> Option<(&str, u64)> {
    let stem = file.strip_suffix(".log")?;
    let (writer, first) = stem.rsplit_once('~')?;
    (!writer.is_empty() && first.len() == 20)
        .then(|| first.parse().ok())
        .flatten()
        .map(|f| (writer, f))
}

/// The segment files in `dir`, oldest record first per writer: (path, writer, first).
pub fn list(dir: &Path) -> Vec<(PathBuf, String, u64)> {
    let mut out: Vec<(PathBuf, String, u64)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let (writer, first) = parse_name(&file)?;
            Some((e.path(), writer.to_string(), first))
        })
        .collect();
    out.sort_by(|a, b| (&a.1, a.2).cmp(&(&b.1, b.2)));
    out
}

/// Creates a segment file (and makes its name durable in the directory).
pub fn create(dir: &Path, writer: &str, first: u64) -> std::io::Result<(PathBuf, std::fs::File)> {
    let path = dir.join(name(writer, first));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok((path, file))
}

/// Appends `bytes` to `file` and makes them durable (`sync`: to the disk, not only the
/// kernel); on failure the file is cut back to `len_before`, so no torn record stays in front of
/// later ones.
pub fn append(
    file: &mut std::fs::File,
    len_before: u64,
    bytes: &[u8],
    sync: bool,
) -> std::io::Result<()> {
    let written = file
        .write_all(bytes)
        .and_then(|()| if sync { file.sync_data() } else { Ok(()) });
    if let Err(e) = written {
        file.set_len(len_before)?;
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> Accepted {
        Accepted {
            received_ns: 1_700_000_000_000_000_000,
            network: 7,
            events: Vec::with_capacity(n),
        }
    }

    #[test]
    fn a_batch_encoded_in_place_is_the_record_of_its_json() {
        let b = batch(0);
        let mut in_place = b"earlier bytes".to_vec();
        frame_batch(&mut in_place, 3, 120, &b).expect("encode");
        let mut copied = b"earlier bytes".to_vec();
        frame(&mut copied, 3, 120, &serde_json::to_vec(&b).expect("json"));
        assert_eq!(in_place, copied);
        let r = read(&in_place[13..]);
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.torn, 0);
    }

    #[test]
    fn records_read_back_up_to_a_torn_tail() {
        let mut bytes = Vec::new();
        for seq in 1..=3 {
            let json = serde_json::to_vec(&batch(0)).expect("json");
            frame(&mut bytes, seq, 60 * seq as i64, &json);
        }
        let whole = bytes.len();
        let r = read(&bytes);
        assert_eq!((r.records.len(), r.torn, r.unreadable), (3, 0, false));
        assert_eq!(r.records[2].minute, 180);
        // A crash in the middle of the third record's write: the first two stand.
        let r = read(&bytes[..whole - 5]);
        assert_eq!(r.records.len(), 2);
        assert!(r.torn > 0);
        // A flipped byte in the second: reading stops there.
        let mut damaged = bytes.clone();
        damaged[HEADER + 40] ^= 1;
        assert_eq!(read(&damaged).records.len(), 1);
        // Garbage and lengths past the limit never panic or allocate.
        assert!(read(&[0xff; 64]).records.is_empty());
        assert!(read(&[]).records.is_empty());
        // A whole record this version cannot read (a newer format): kept, not torn.
        let mut newer = Vec::new();
        frame(&mut newer, 1, 60, br#"{"t": "not a number"}"#);
        let r = read(&newer);
        assert!(r.unreadable && r.records.is_empty() && r.torn == 0);
    }

    #[test]
    fn names_round_trip_and_others_are_ignored() {
        let n = name("node-1.abcd", 42);
        assert_eq!(parse_name(&n), Some(("node-1.abcd", 42)));
        for bad in [
            "x.log",
            "~00000000000000000001.log",
            "w~12.log",
            "w~1.txt",
            "lock",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
