//! The background pass of "verify once" (`check.rs`): after a load that trusted files by their
//! stamp and head, those whose last full hash is older than the client's `reverify_after` are
//! hashed whole on a thread of their own, at a lower priority, while the app runs. A file that
//! matches gets a new hash time; one that does not is removed with every model entry that uses
//! it (so the next load fetches it again, before it is used again) and reported as a failed
//! `verify` (`hash_mismatch`, stage `cache`), with the receipt of the load's resolve.

use ferry_shared::Sha256Digest;
use ferry_shared::wire::telemetry::TelemetryEvent;

use super::VerifiedBlob;
use super::check;
use crate::Client;

impl Client {
    /// Hashes `due` (files a load just trusted by stamp and head) in the background; `template`
    /// is the `verify` event of the variant they belong to, `receipt` its resolve's. A file
    /// this process is hashing already is not hashed twice. Returns at once.
    pub(crate) fn recheck_later(
        &self,
        due: Vec<VerifiedBlob>,
        template: TelemetryEvent,
        receipt: Option<String>,
    ) {
        let due: Vec<VerifiedBlob> = {
            let mut busy = ferry_shared::sync::lock(&self.rechecking);
            due.into_iter()
                .filter(|b| busy.insert(*b.sha256()))
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let digests: Vec<Sha256Digest> = due.iter().map(|b| *b.sha256()).collect();
        let (cache, telemetry, busy) = (
            self.cache.clone(),
            self.telemetry.clone(),
            self.rechecking.clone(),
        );
        let release = {
            let busy = busy.clone();
            move || {
                let mut b = ferry_shared::sync::lock(&busy);
                for d in &digests {
                    b.remove(d);
                }
            }
        };
        let spawned = std::thread::Builder::new()
            .name("ferry-recheck".into())
            .spawn({
                let release = release.clone();
                move || {
                    lower_priority();
                    let (matched, bad) = hash_all(&due);
                    // The shared locks go before the removal; nothing else waits on them.
                    drop(due);
                    let found = {
                        let mut c = ferry_shared::sync::lock(&cache);
                        let _ = c.refresh();
                        // Reported here, once: the next load does not report them again.
                        c.settle_hashed(&matched, &bad)
                    };
                    if found {
                        let event = TelemetryEvent {
                            receipt,
                            ..Client::corrupt_event(template)
                        };
                        let _ = telemetry.push(&[event]);
                    }
                    release();
                }
            });
        if spawned.is_err() {
            release();
        }
    }
}

/// How often the files of a variant the runtime keeps failing on are hashed whole again.
const AFTER_FAILURE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

impl Client {
    /// After the runtime failed on `blob` (its open, a method's load, the golden check): its
    /// files that were trusted by their stamp are hashed whole now, and any that no longer
    /// matches is removed with the entries that use it (the next load fetches it again) and
    /// `event` (the variant's `verify` event) sent as failed.
    pub(crate) fn corrupt_after_failure(
        &self,
        blob: &VerifiedBlob,
        event: TelemetryEvent,
        send: &dyn Fn(Vec<TelemetryEvent>),
    ) {
        // A variant that fails for another reason (a delegate this device lacks) fails at
        // every load: its files are hashed at most once an hour for it.
        let suspects: Vec<VerifiedBlob> = {
            let c = self.cache();
            blob.trusted_by_stamp()
                .into_iter()
                .filter(|b| !c.hashed_within(b.sha256(), AFTER_FAILURE_EVERY))
                .collect()
        };
        if suspects.is_empty() {
            return;
        }
        let (matched, bad) = hash_all(&suspects);
        drop(suspects);
        let found = self.cache().settle_hashed(&matched, &bad);
        if found {
            send(vec![Client::corrupt_event(event)]);
        }
    }
}

/// Hashes each file whole through the handle its value holds: the digests that matched (with
/// the stamp they had when their hash began) and those that did not (or could not be read).
fn hash_all(due: &[VerifiedBlob]) -> (Vec<(Sha256Digest, check::Stamp)>, Vec<Sha256Digest>) {
    let (mut matched, mut bad) = (Vec::new(), Vec::new());
    for b in due {
        let opened;
        let file = match b.file() {
            Some(f) => f,
            None => match std::fs::File::open(b.path()) {
                Ok(f) => {
                    opened = f;
                    &opened
                }
                // Gone (evicted by another process meanwhile): nothing to say about it.
                Err(_) => continue,
            },
        };
        let Ok(stamp) = check::Stamp::of(file) else {
            continue;
        };
        match check::hash_whole(file, b.size(), &mut |_| {}) {
            Ok(d) if d == *b.sha256() && stamp.len == b.size() => matched.push((d, stamp)),
            _ => bad.push(*b.sha256()),
        }
    }
    (matched, bad)
}

/// Makes this thread yield to the app's own (a nice value of 10; Linux and Android set it per
/// thread). Best effort.
fn lower_priority() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[allow(unsafe_code)]
    // SAFETY: `setpriority` on this thread's own id changes nothing but its scheduling.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}
