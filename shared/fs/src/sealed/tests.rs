use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::*;

use crate::tests::noise;

const SECRET: [u8; 32] = [7; 32];
const FILE_KEY: [u8; 32] = [9; 32];

fn sealed(dir: &Path, name: &str, plain: &[u8]) -> (PathBuf, Sealed) {
    let src = dir.join(format!("{name}.plain"));
    std::fs::write(&src, plain).expect("write");
    let dst = dir.join(format!("{name}.sealed"));
    let s = seal_file(&src, &dst, &SECRET, &FILE_KEY).expect("seal");
    (dst, s)
}

#[test]
fn reads_at_any_offset_give_the_plaintext() {
    let dir = tempfile::tempdir().expect("dir");
    let plain = noise(5 << 20, 3);
    let (path, s) = sealed(dir.path(), "a", &plain);
    let bytes = std::fs::read(&path).expect("read");
    assert_eq!(s.size, bytes.len() as u64);
    assert_eq!(s.sha256, <[u8; 32]>::from(Sha256::digest(&bytes)));
    assert_eq!(s.plain_len, plain.len() as u64);
    let r = SealedReader::open(File::open(&path).expect("open"), &FILE_KEY).expect("reader");
    let mut all = vec![0u8; plain.len()];
    r.read_at(0, &mut all).expect("whole");
    assert!(all == plain, "the whole plaintext reads back");
    let picks = noise(4000, 11);
    for w in picks.chunks_exact(8).take(400) {
        let off = u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])) % plain.len() as u64;
        let max = (plain.len() as u64 - off).min(3 << 20);
        let len = (u64::from(u32::from_le_bytes([w[4], w[5], w[6], w[7]])) % (max + 1)) as usize;
        let mut out = vec![0u8; len];
        r.read_at(off, &mut out).expect("range");
        assert!(
            out[..] == plain[off as usize..off as usize + len],
            "{len} bytes at {off}"
        );
    }
    let mut past = [0u8; 2];
    assert!(r.read_at(plain.len() as u64 - 1, &mut past).is_err());
    assert!(r.read_at(u64::MAX, &mut past).is_err());
}

#[test]
fn no_plaintext_block_survives_in_the_sealed_bytes() {
    let dir = tempfile::tempdir().expect("dir");
    // Text-like plaintext with repeats, the kind a weak scheme would leak.
    let mut plain = Vec::new();
    while plain.len() < (1 << 20) + 12345 {
        plain.extend_from_slice(b"the weights of a model are its product; ");
        plain.extend_from_slice(&noise(97, plain.len() as u64));
    }
    let (path, _) = sealed(dir.path(), "t", &plain);
    let bytes = std::fs::read(&path).expect("read");
    // Every 64-byte window of the plaintext holds an aligned 32-byte block: none may appear.
    let blocks: HashSet<&[u8]> = plain.chunks_exact(32).collect();
    let found = bytes.windows(32).filter(|w| blocks.contains(w)).count();
    assert_eq!(found, 0);
}

#[test]
fn an_unchanged_chunk_seals_to_the_same_bytes_across_releases() {
    let dir = tempfile::tempdir().expect("dir");
    let a = noise(12 << 20, 5);
    let mut b = a.clone();
    // A 5% edit in the middle.
    let edit = noise(a.len() / 20, 77);
    let mid = a.len() / 2;
    b[mid..mid + edit.len()].copy_from_slice(&edit);
    let (_, sa) = sealed(dir.path(), "a", &a);
    let src = dir.path().join("b.plain");
    std::fs::write(&src, &b).expect("write");
    // Another release: another file key, the same seal secret.
    let sb = seal_file(&src, &dir.path().join("b.sealed"), &SECRET, &[1; 32]).expect("seal");
    let held: HashSet<[u8; 32]> = sa.index.iter().map(|e| e.1).collect();
    let new: u64 = sb
        .index
        .iter()
        .filter(|e| !held.contains(&e.1))
        .map(|e| e.0)
        .sum();
    // The same edit without sealing, chunked as the chunk index does.
    let sizes = crate::ChunkSizes {
        min: 128 << 10,
        avg: 512 << 10,
        max: 2 << 20,
    };
    let plain_a: HashSet<[u8; 32]> = crate::content_chunks(&a[..], sizes)
        .expect("chunks")
        .into_iter()
        .map(|c| c.1)
        .collect();
    let plain_new: u64 = crate::content_chunks(&b[..], sizes)
        .expect("chunks")
        .into_iter()
        .filter(|c| !plain_a.contains(&c.1))
        .map(|c| c.0)
        .sum();
    // What sealing adds: the tail (key table, lengths, trailer), which changes with every
    // sealing, and a last chunk shorter than 128 KiB listed with it.
    assert!(
        new <= plain_new + (128 << 10) + 4096,
        "a 5% edit leaves {new} of {} sealed bytes new; {plain_new} unsealed",
        sb.size
    );
    // Another secret shares nothing.
    let sc = seal_file(&src, &dir.path().join("c.sealed"), &[2; 32], &[1; 32]).expect("seal");
    assert!(sc.index.iter().all(|e| !held.contains(&e.1)));
}

#[test]
fn index_entries_are_chunk_index_shaped_and_match_sealing() {
    let dir = tempfile::tempdir().expect("dir");
    for (name, len) in [("empty", 0usize), ("small", 1000), ("big", 9 << 20)] {
        let (path, s) = sealed(dir.path(), name, &noise(len, len as u64 + 1));
        let entries = index_entries(&path).expect("entries");
        assert_eq!(entries, s.index, "{name}");
        assert_eq!(entries.iter().map(|e| e.0).sum::<u64>(), s.size, "{name}");
        let last = entries.len() - 1;
        for (i, (size, _)) in entries.iter().enumerate() {
            assert!(*size <= format::INDEX_CHUNK_MAX, "{name} entry {i}");
            assert!(
                i == last || *size >= u64::from(PLAIN_CHUNKS.min),
                "{name} {i}"
            );
        }
        let r = SealedReader::open(File::open(&path).expect("open"), &FILE_KEY).expect("open");
        assert_eq!(r.plain_len(), len as u64);
        assert!(is_sealed(&path));
    }
    let plain = dir.path().join("big.plain");
    assert!(!is_sealed(&plain));
}

#[test]
fn changed_bytes_wrong_keys_and_cut_files_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let plain = noise(3 << 20, 9);
    let (path, _) = sealed(dir.path(), "x", &plain);
    let good = std::fs::read(&path).expect("read");
    let open = |bytes: &[u8], key: &[u8; 32]| {
        let p = dir.path().join("mutated");
        std::fs::write(&p, bytes).expect("write");
        SealedReader::open(File::open(&p).expect("open"), key)
    };
    // A wrong file key.
    let e = open(&good, &[8; 32]).expect_err("wrong key");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    // One flipped bit in the first piece: that piece fails, a later one still reads.
    let mut bad = good.clone();
    bad[100] ^= 1;
    let r = open(&bad, &FILE_KEY).expect("the table is intact");
    let mut out = vec![0u8; 10];
    let e = r.read_at(50, &mut out).expect_err("tampered piece");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    r.read_at(1 << 20, &mut out).expect("another piece");
    assert_eq!(out[..], plain[1 << 20..(1 << 20) + 10]);
    // A changed length, table byte or trailer field does not open.
    for at in [
        good.len() - TRAILER - 2,
        good.len() - TRAILER - 200,
        good.len() - 40,
    ] {
        let mut bad = good.clone();
        bad[at] ^= 1;
        assert!(open(&bad, &FILE_KEY).is_err(), "byte {at} from the end");
    }
    // Cut, empty and foreign files.
    assert!(open(&good[..good.len() - 1], &FILE_KEY).is_err());
    assert!(open(&good[1..], &FILE_KEY).is_err());
    assert!(open(b"", &FILE_KEY).is_err());
    assert!(open(&plain, &FILE_KEY).is_err());
    // Another version.
    let mut v2 = good.clone();
    let at = good.len() - TRAILER + 8;
    v2[at] = 2;
    let e = open(&v2, &FILE_KEY).expect_err("version 2");
    assert!(e.to_string().contains("version 2"), "{e}");
}

#[test]
fn hostile_trailers_are_refused_before_any_allocation() {
    let t = Trailer {
        chunks: u32::MAX,
        plain_len: 1,
        table_offset: 0,
    };
    assert!(Trailer::parse(&t.to_bytes(), 1 << 40).is_err());
    let t = Trailer {
        chunks: 1,
        plain_len: 10,
        table_offset: u64::MAX,
    };
    assert!(Trailer::parse(&t.to_bytes(), 100).is_err());
    let ok = Trailer {
        chunks: 1,
        plain_len: 10,
        table_offset: 26,
    };
    let len = ok.table_offset + ok.tail_len();
    assert_eq!(Trailer::parse(&ok.to_bytes(), len), Ok(ok));
    // Lengths that do not add up to the trailer's.
    assert!(Layout::parse(ok, &11u32.to_le_bytes()).is_err());
    assert!(Layout::parse(ok, &10u32.to_le_bytes()).is_ok());
    assert!(Layout::parse(ok, &[]).is_err());
}

#[test]
fn wrapped_keys_open_only_for_their_file_and_holder() {
    let release_secret = [3u8; 32];
    let release_public = keys::public_key(&release_secret);
    let file = [5u8; 32];
    let wrapped = keys::wrap(&release_public, &[4; 32], &FILE_KEY, &file).expect("wrap");
    assert_eq!(keys::unwrap(&release_secret, &wrapped, &file), Ok(FILE_KEY));
    assert!(keys::unwrap(&release_secret, &wrapped, &[6; 32]).is_err());
    assert!(keys::unwrap(&[2; 32], &wrapped, &file).is_err());
    let mut bent = wrapped;
    bent[40] ^= 1;
    assert!(keys::unwrap(&release_secret, &bent, &file).is_err());
    // Released to one device, for one install id.
    let device_secret = [8u8; 32];
    let device_public = keys::public_key(&device_secret);
    let released = keys::release(&device_public, &[1; 32], &FILE_KEY, &file, "me").expect("rel");
    assert_eq!(
        keys::receive(&device_secret, &released, &file, "me"),
        Ok(FILE_KEY)
    );
    assert!(keys::receive(&device_secret, &released, &file, "you").is_err());
    assert!(keys::receive(&[9; 32], &released, &file, "me").is_err());
    // A low-order public key is refused, not used.
    assert!(keys::release(&[0; 32], &[1; 32], &FILE_KEY, &file, "me").is_err());
    let text = keys::encode(&released);
    assert_eq!(keys::decode::<{ keys::WRAPPED }>(&text), Ok(released));
    assert!(keys::decode::<32>(&text).is_err());
    assert!(keys::decode::<32>("not base64!").is_err());
}

#[test]
fn chunk_keys_depend_on_content_and_secret() {
    assert_eq!(
        keys::chunk_key(&SECRET, b"abc"),
        keys::chunk_key(&SECRET, b"abc")
    );
    assert_ne!(
        keys::chunk_key(&SECRET, b"abc"),
        keys::chunk_key(&SECRET, b"abd")
    );
    assert_ne!(
        keys::chunk_key(&SECRET, b"abc"),
        keys::chunk_key(&[1; 32], b"abc")
    );
}

#[test]
fn large_reads_shared_between_threads_give_the_plaintext() {
    let dir = tempfile::tempdir().expect("dir");
    let plain = noise(21 << 20, 13);
    let (path, _) = sealed(dir.path(), "large", &plain);
    let r = SealedReader::open(File::open(&path).expect("open"), &FILE_KEY).expect("reader");
    for (off, len) in [
        (0usize, plain.len()),
        (12345, plain.len() - 12345 - 77),
        (PIECE - 1, (17 << 20) + 3),
    ] {
        let mut out = vec![0u8; len];
        r.read_at(off as u64, &mut out).expect("read");
        assert!(out[..] == plain[off..off + len], "{len} bytes at {off}");
    }
    // A damaged piece in the middle fails the whole read, whichever thread met it.
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[10 << 20] ^= 1;
    std::fs::write(&path, &bytes).expect("write");
    let r = SealedReader::open(File::open(&path).expect("open"), &FILE_KEY).expect("reader");
    let mut out = vec![0u8; plain.len()];
    let e = r.read_at(0, &mut out).expect_err("damaged");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
}
