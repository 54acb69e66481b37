//! A small Prometheus registry: labelled counters and histograms, rendered as text.
//!
//! Kept per server instance (not a process-global recorder), so several servers in one test
//! process do not share counts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// Latency buckets in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

type Key = (&'static str, String);

#[derive(Debug, Default)]
struct Inner {
    counters: BTreeMap<Key, u64>,
    histograms: BTreeMap<Key, Histogram>,
}

/// The registry.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(s, "{k}=\"{v}\"");
    }
    s
}

impl Metrics {
    /// Adds `by` to counter `name` with `pairs` as labels.
    pub fn inc(&self, name: &'static str, pairs: &[(&str, &str)], by: u64) {
        if let Ok(mut g) = self.inner.lock() {
            *g.counters.entry((name, labels(pairs))).or_default() += by;
        }
    }

    /// Records `value` (seconds) in histogram `name`.
    pub fn observe(&self, name: &'static str, pairs: &[(&str, &str)], value: f64) {
        if let Ok(mut g) = self.inner.lock() {
            let h = g.histograms.entry((name, labels(pairs))).or_default();
            for (i, b) in BUCKETS.iter().enumerate() {
                if value <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += value;
            h.count += 1;
        }
    }

    /// The current value of a counter (for tests and status pages).
    pub fn counter(&self, name: &'static str, pairs: &[(&str, &str)]) -> u64 {
        self.inner
            .lock()
            .ok()
            .and_then(|g| g.counters.get(&(name, labels(pairs))).copied())
            .unwrap_or(0)
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let Ok(g) = self.inner.lock() else {
            return String::new();
        };
        let mut out = String::new();
        let mut last = "";
        for ((name, l), v) in &g.counters {
            if *name != last {
                let _ = writeln!(out, "# TYPE {name} counter");
                last = name;
            }
            if l.is_empty() {
                let _ = writeln!(out, "{name} {v}");
            } else {
                let _ = writeln!(out, "{name}{{{l}}} {v}");
            }
        }
        last = "";
        for ((name, l), h) in &g.histograms {
            if *name != last {
                let _ = writeln!(out, "# TYPE {name} histogram");
                last = name;
            }
            let sep = if l.is_empty() { "" } else { "," };
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "{name}_bucket{{{l}{sep}le=\"{b}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(out, "{name}_bucket{{{l}{sep}le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{{l}}} {}", h.sum);
            let _ = writeln!(out, "{name}_count{{{l}}} {}", h.count);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        m.inc("ferry_x_total", &[("route", "/a\"b")], 2);
        m.inc("ferry_x_total", &[("route", "/a\"b")], 1);
        m.observe("ferry_lat_seconds", &[("route", "/a")], 0.003);
        let text = m.render();
        assert!(
            text.contains("ferry_x_total{route=\"/a\\\"b\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("ferry_lat_seconds_bucket{route=\"/a\",le=\"0.005\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ferry_lat_seconds_bucket{route=\"/a\",le=\"0.0025\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("ferry_lat_seconds_count{route=\"/a\"} 1"),
            "{text}"
        );
        assert_eq!(m.counter("ferry_x_total", &[("route", "/a\"b")]), 3);
    }
}
