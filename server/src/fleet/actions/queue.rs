//! The evaluation queue: the models telemetry asked to evaluate, drained by one background
//! task (`evaluate::run_queue`).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use ferry_shared::ModelName;

/// Models waiting for an evaluation. Telemetry handlers only note a model here; one background
/// task (on the server's own thread, never a request worker) drains it, so a batch's answer
/// never waits on the store writes a halt or a deny entry makes.
#[derive(Debug, Default)]
pub struct Queue {
    waiting: Mutex<BTreeSet<ModelName>>,
    wake: tokio::sync::Notify,
    requested: AtomicU64,
    done: AtomicU64,
}

/// At most this many models wait at once (more are picked up by the evaluation after the next
/// flush, which checks every model).
const MAX_WAITING: usize = 4096;

impl Queue {
    /// Asks for `model` to be evaluated soon.
    pub fn request(&self, model: ModelName) {
        let mut w = ferry_shared::sync::lock(&self.waiting);
        if w.len() < MAX_WAITING {
            w.insert(model);
        }
        drop(w);
        self.requested.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// True once every evaluation asked for before [`Queue::asked`] returned `asked` is done.
    pub fn done_through(&self, asked: u64) -> bool {
        self.done.load(Ordering::SeqCst) >= asked
    }

    /// How many evaluations have been asked for so far.
    pub fn asked(&self) -> u64 {
        self.requested.load(Ordering::SeqCst)
    }

    /// Takes the models waiting (the evaluation loop).
    pub(crate) fn take(&self) -> BTreeSet<ModelName> {
        std::mem::take(&mut *ferry_shared::sync::lock(&self.waiting))
    }

    /// Waits until a model is asked for (the evaluation loop).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Notes that every evaluation asked for up to `asked` is done (the evaluation loop).
    pub(crate) fn done_up_to(&self, asked: u64) {
        self.done.store(asked, Ordering::SeqCst);
    }
}
