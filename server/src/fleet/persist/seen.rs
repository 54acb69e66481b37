//! What this run has seen of the store: the buckets as last read and merged (the [`View`]),
//! and the objects this run wrote that no listing has shown yet (counted from memory until
//! the view holds them). The flush writes and installs; the views read both under one lock
//! order, so nothing counts twice or not at all in between.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use crate::fleet::counts::rollup::Rollup;
use crate::fleet::persist::buckets::Level;

/// What the store holds, as last read and merged (see [`crate::fleet::persist::buckets`]).
#[derive(Debug, Default)]
pub struct View {
    /// Each bucket counted (its objects that no part lists, merged).
    pub buckets: Vec<(Level, i64, Arc<Rollup>)>,
    /// Their merge, with the rollups of earlier versions (`telemetry/rollups/`).
    pub total: Rollup,
}

/// Counts this run wrote to the store but has not yet seen in a listing: counted from memory
/// until the view holds them.
pub type Written = Vec<(String, i64, Arc<Rollup>)>;

/// The store as this run last saw it, and what it wrote since.
#[derive(Debug, Default)]
pub struct Seen {
    /// The store's buckets, merged; refreshed at each flush.
    view: RwLock<Arc<View>>,
    /// Written but not yet seen in the store's listing.
    written: Mutex<Written>,
    /// Numbers this run's objects.
    written_seq: std::sync::atomic::AtomicU64,
    /// When this replica last tried to compact.
    compacted_at: Mutex<Option<Instant>>,
    /// When this replica last collected unused operator sets.
    collected_at: Mutex<Option<Instant>>,
}

impl Seen {
    /// A new object name for this run's `writer` prefix.
    pub fn next_object_name(&self, writer: &str) -> String {
        let n = self
            .written_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{writer}-{n:06}")
    }

    /// Notes an object this run wrote (its key) for minute `start`.
    pub fn note_written(&self, key: String, start: i64, rollup: Arc<Rollup>) {
        ferry_shared::sync::lock(&self.written).push((key, start, rollup));
    }

    /// Installs the view read from the store, and forgets the written objects that the listing
    /// it was built from holds (`listed`): from now on they count through the view. Done under
    /// the `written` lock, which every reader takes first, so nothing counts twice or not at
    /// all in between.
    pub fn install_view(&self, view: View, listed: &dyn Fn(&str) -> bool) {
        let mut written = ferry_shared::sync::lock(&self.written);
        written.retain(|(key, _, _)| !listed(key));
        let next = Arc::new(view);
        *ferry_shared::sync::write(&self.view) = next;
    }

    /// True (and noted) when `every` has passed since the last compaction attempt.
    pub fn compaction_due(&self, every: std::time::Duration) -> bool {
        due(&self.compacted_at, every)
    }

    /// True (and noted) when `every` has passed since the last collection of operator sets
    /// (or none was made this run).
    pub fn collection_due(&self, every: std::time::Duration) -> bool {
        due(&self.collected_at, every)
    }

    /// Calls `f` with the view and the objects written since, under the `written` lock (taken
    /// before the view is read, as [`Seen::install_view`] changes both under it).
    pub fn read<R>(&self, f: impl FnOnce(&View, &Written) -> R) -> R {
        let written = ferry_shared::sync::lock(&self.written);
        let view = ferry_shared::sync::read(&self.view).clone();
        f(&view, &written)
    }

    /// Calls `f` with each bucket seen or written (its start, length in seconds and counts).
    pub fn each_bucket(&self, mut f: impl FnMut(i64, i64, &Rollup)) {
        self.read(|view, written| {
            for (level, start, r) in &view.buckets {
                f(*start, level.secs(), r);
            }
            for (_, start, w) in written {
                f(*start, 60, w);
            }
        });
    }
}

/// True (and noted in `last`) when `every` has passed since `last`, or it is unset.
fn due(last: &Mutex<Option<Instant>>, every: std::time::Duration) -> bool {
    let mut last = ferry_shared::sync::lock(last);
    let now = Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < every) {
        return false;
    }
    *last = Some(now);
    true
}
