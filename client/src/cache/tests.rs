use super::*;

/// Commits `bytes` to `cache` as a downloaded blob would be; its digest and size.
fn commit(cache: &mut Cache, bytes: &[u8]) -> (Sha256Digest, u64) {
    let d = Sha256Digest::of(bytes);
    std::fs::write(cache.part_path(&d), bytes).expect("part");
    let part = cache.part_path(&d);
    cache
        .commit_file(&part, &d, bytes.len() as u64)
        .expect("commit");
    (d, bytes.len() as u64)
}

#[test]
fn eviction_is_lru_and_respects_protection() {
    let blobs = vec![
        ("a".to_string(), 10, 1),
        ("b".to_string(), 10, 2),
        ("c".to_string(), 10, 3),
    ];
    let none = BTreeSet::new();
    assert_eq!(
        eviction_plan(blobs.clone().into_iter(), &none, 30),
        Vec::<String>::new()
    );
    assert_eq!(eviction_plan(blobs.clone().into_iter(), &none, 20), ["a"]);
    assert_eq!(
        eviction_plan(blobs.clone().into_iter(), &none, 5),
        ["a", "b", "c"]
    );
    let protect: BTreeSet<String> = ["a".to_string()].into();
    assert_eq!(eviction_plan(blobs.into_iter(), &protect, 15), ["b", "c"]);
}

#[test]
fn an_entry_an_update_left_incompatible_is_evicted_first_and_others_stay_protected() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut cache, _) = Cache::open(dir.path(), 25).expect("open");
    let (old, kept, other) = (
        commit(&mut cache, &[1; 10]).0,
        commit(&mut cache, &[2; 10]).0,
        commit(&mut cache, &[3; 10]).0,
    );
    let entry = |d: Sha256Digest| ModelEntry {
        release: "1.0.0".into(),
        variant: "v".into(),
        delegate: "xnnpack".into(),
        sha256: d,
        size: 10,
        data: Vec::new(),
        release_envelope: Envelope {
            payload_type: String::new(),
            payload: String::new(),
            signatures: Vec::new(),
        },
        incompatible: None,
        receipt: None,
    };
    cache
        .set_last_good("old-app-only", entry(old))
        .expect("entry");
    cache.set_last_good("fits", entry(kept)).expect("entry");
    // `other` is the least recently used before the update.
    cache.mark_used(&other, 10).expect("touch");
    cache.mark_used(&kept, 10).expect("touch");
    cache
        .mark_incompatible(
            "old-app-only",
            Some("needs app <2.0.0, app is 2.0.0".into()),
        )
        .expect("mark");
    let removed = cache.evict(&BTreeSet::new()).expect("evict");
    assert_eq!(removed, vec![old], "the incompatible entry goes first");
    assert!(
        cache.blob_path(&kept).exists(),
        "a fitting entry stays protected"
    );
    // Marks are reported once.
    let first = cache.take_unreported_incompatible().expect("take");
    assert_eq!(first.len(), 1);
    assert!(
        cache
            .take_unreported_incompatible()
            .expect("take")
            .is_empty()
    );
    // Fitting again (the app went back) clears the mark.
    cache
        .mark_incompatible("old-app-only", None)
        .expect("clear");
    assert!(
        cache
            .last_good("old-app-only")
            .expect("entry")
            .incompatible
            .is_none()
    );
}

#[test]
fn recovers_from_a_corrupt_index_and_stray_files() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut cache, _) = Cache::open(dir.path(), 1 << 20).expect("open");
    let data = b"model bytes";
    let d = Sha256Digest::of(data);
    std::fs::write(cache.part_path(&d), data).expect("part");
    let part = cache.part_path(&d);
    cache
        .commit_file(&part, &d, data.len() as u64)
        .expect("commit");
    drop(cache);
    std::fs::write(dir.path().join("index.json"), b"{ half written").expect("corrupt");
    let old = std::time::SystemTime::now() - 2 * STALE_STAGING;
    for stray in ["blobs/sha256/.x.tmp-123", ".index.json.77.0.tmp"] {
        let path = dir.path().join(stray);
        std::fs::write(&path, b"junk").expect("stray");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(old))
            .expect("age it");
    }
    // A young staging file may be another process's write in flight: it stays.
    let young = dir.path().join(".index.json.78.0.tmp");
    std::fs::write(&young, b"in flight").expect("young");
    let (mut cache, rec) = Cache::open(dir.path(), 1 << 20).expect("reopen");
    assert!(rec.rebuilt_index);
    assert_eq!(rec.removed_temp, 2);
    assert!(
        young.exists(),
        "another process's staging file is left alone"
    );
    let blob = cache.verified_blob(&d, data.len() as u64).expect("check");
    assert_eq!(blob.as_ref().map(|b| b.sha256()), Some(&d), "blob survives");
    // A flipped byte on disk is caught and the blob removed.
    let mut bytes = std::fs::read(cache.blob_path(&d)).expect("read");
    bytes[0] ^= 1;
    std::fs::write(cache.blob_path(&d), &bytes).expect("write");
    assert!(
        cache
            .verified_blob(&d, data.len() as u64)
            .expect("check")
            .is_none()
    );
    assert!(!cache.blob_path(&d).exists());
}

#[test]
fn marking_the_most_recently_used_files_again_writes_nothing_and_keeps_the_lru_order() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut cache, _) = Cache::open(dir.path(), 1 << 20).expect("open");
    let (a, b, c) = (
        commit(&mut cache, &[1; 10]),
        commit(&mut cache, &[2; 10]),
        commit(&mut cache, &[3; 10]),
    );
    let writes = |cache: &Cache| cache.index.clock;
    // b and c were used last (in either order): using them again changes nothing on disk.
    cache.mark_all_used(&[b, c]).expect("mark");
    let clock = writes(&cache);
    cache.mark_all_used(&[c, b]).expect("mark");
    assert_eq!(writes(&cache), clock, "no write for files already newest");
    // a was used after b: marking b and c is a change, and a is the older one afterwards.
    cache.mark_all_used(&[a]).expect("mark");
    cache.mark_all_used(&[b, c]).expect("mark");
    assert!(writes(&cache) > clock + 1);
    let plan = eviction_plan(
        cache
            .index
            .blobs
            .iter()
            .map(|(k, v)| (k.clone(), v.size, v.last_used)),
        &BTreeSet::new(),
        20,
    );
    assert_eq!(plan, [a.0.to_hex()], "a is evicted first");
}

#[test]
fn a_folder_or_a_pipe_under_a_blob_name_is_removed_as_damage_without_blocking() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut cache, _) = Cache::open(dir.path(), 1 << 20).expect("open");
    for (i, make) in ["folder", "pipe"].into_iter().enumerate() {
        let d = Sha256Digest::of(&[i as u8; 3]);
        let path = cache.blob_path(&d);
        match make {
            "folder" => {
                std::fs::create_dir_all(path.join("inside")).expect("folder");
            }
            _ => {
                let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("c");
                #[allow(unsafe_code)]
                // SAFETY: a NUL-terminated path the call only reads.
                let r = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
                assert_eq!(r, 0, "mkfifo");
            }
        }
        // Returns at once (an open of the pipe would wait for a writer), having removed it.
        assert!(
            cache.verified_blob(&d, 3).expect("check").is_none(),
            "{make}"
        );
        assert!(std::fs::symlink_metadata(&path).is_err(), "{make} removed");
        assert_eq!(cache.take_corrupt_of(&[d]), [d], "{make} reported");
    }
}

#[test]
fn a_head_record_that_does_not_match_an_intact_file_is_replaced() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut cache, _) = Cache::open(dir.path(), 1 << 20).expect("open");
    let (d, _) = commit(&mut cache, &[7u8; 100]);
    let record = |cache: &Cache| cache.index.blobs[&d.to_hex()].checked.expect("checked");
    assert_eq!(record(&cache).head, check::Head::None);
    // A wrong head (a damaged or hand-edited index), then one longer than the file.
    for bogus in [
        check::Head::Hash {
            len: 64,
            sha256: Sha256Digest::from_bytes([0; 32]),
        },
        check::Head::Hash {
            len: u64::MAX,
            sha256: Sha256Digest::from_bytes([0; 32]),
        },
    ] {
        cache
            .update(|i| {
                if let Some(c) = i
                    .blobs
                    .get_mut(&d.to_hex())
                    .and_then(|b| b.checked.as_mut())
                {
                    c.head = bogus;
                }
            })
            .expect("edit");
        assert!(cache.verified_blob(&d, 100).expect("check").is_some());
        assert_eq!(record(&cache).head, check::Head::None, "{bogus:?} replaced");
    }
}
