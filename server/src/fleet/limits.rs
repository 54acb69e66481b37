//! Rate limits for telemetry: per-address and per-install token buckets.

use std::collections::HashMap;
use std::time::Instant;

/// Per-address and per-install token buckets.
#[derive(Debug, Default)]
pub(crate) struct Limiter {
    buckets: HashMap<String, (f64, Instant)>,
}

impl Limiter {
    /// Takes `n` tokens from `key`'s bucket of `per_minute`; false when not enough.
    pub(crate) fn take(&mut self, key: &str, n: f64, per_minute: u32) -> bool {
        if self.buckets.len() > 200_000 {
            self.buckets.clear();
        }
        let now = Instant::now();
        let cap = f64::from(per_minute);
        let e = self.buckets.entry(key.to_string()).or_insert((cap, now));
        let refill = now.duration_since(e.1).as_secs_f64() * cap / 60.0;
        e.0 = (e.0 + refill).min(cap);
        e.1 = now;
        if e.0 >= n {
            e.0 -= n;
            true
        } else {
            false
        }
    }
}
