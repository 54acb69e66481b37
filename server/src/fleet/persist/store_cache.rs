//! What the flushes read from the store, kept between them: each listed bucket object's
//! version, each bucket's merge, and the rollups of earlier versions.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::fleet::counts::rollup::Rollup;
use crate::fleet::persist::buckets::Level;

/// What the flushes read from the store, kept between them.
#[derive(Debug, Default)]
pub struct StoreCache {
    /// Every bucket object listed: its version (modification time, size) and, for a readable
    /// part, the sources it lists (`None`: unreadable, skipped until it changes).
    pub(crate) objects: HashMap<String, (String, Option<Vec<String>>)>,
    /// Per bucket: the objects merged into it, and the merge.
    pub(crate) buckets: HashMap<(Level, i64), (BTreeSet<String>, Arc<Rollup>)>,
    /// Rollups written by earlier versions (`telemetry/rollups/<node>.json`): counted in the
    /// totals, in no window.
    pub(crate) legacy: HashMap<String, (String, Option<Arc<Rollup>>)>,
}
