//! Field latency: every `run` and `run_method` of a [`LoadedModel`](crate::LoadedModel) is
//! timed, and a bounded summary per method is kept until the next telemetry flush, which sends
//! one `inference` event per model, method and variant that ran (never one per call).
//!
//! The hot path takes an uncontended lock and updates fixed-size counters: no allocation
//! after a method's first call. Warm calls go into a histogram of 470 logarithmic buckets
//! (each 5% wide, 1 µs to about 2.5 h; slower calls count in the last one), so the reported
//! p50 and p95 are within 5% of the exact ones; the first call after the load (cold: caches, delegate compilation) is kept apart.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ferry_shared::wire::telemetry::{InferenceFields, TelemetryEvent, Thermal};

/// Buckets of the warm-call histogram.
const BUCKETS: usize = 470;
/// Most runs one window reports (the server takes up to 1e9).
const MAX_RUNS: u64 = 1_000_000_000;
/// Each bucket's upper bound is this times its lower bound.
const RATIO: f64 = 1.05;
/// Calls further apart than this start a new stretch of sustained use.
pub const SUSTAINED_GAP: Duration = Duration::from_secs(2);

/// The bucket of a call of `us` microseconds.
fn bucket(us: f64) -> usize {
    if us <= 1.0 {
        return 0;
    }
    ((us.ln() / RATIO.ln()) as usize).min(BUCKETS - 1)
}

/// A bucket's middle, in milliseconds.
fn middle_ms(i: usize) -> f64 {
    RATIO.powf(i as f64 + 0.5) / 1000.0
}

/// Thermal states as a byte, for the atomic the app sets (0: not reported).
pub(crate) fn thermal_code(t: Option<Thermal>) -> u8 {
    match t {
        None => 0,
        Some(Thermal::Nominal) => 1,
        Some(Thermal::Fair) => 2,
        Some(Thermal::Serious) => 3,
        Some(Thermal::Critical) => 4,
        Some(Thermal::Other) => 5,
    }
}

fn thermal_of(code: u8) -> Option<Thermal> {
    match code {
        1 => Some(Thermal::Nominal),
        2 => Some(Thermal::Fair),
        3 => Some(Thermal::Serious),
        4 => Some(Thermal::Critical),
        5 => Some(Thermal::Other),
        _ => None,
    }
}

/// One method's calls since the last flush.
pub(crate) struct MethodTimes {
    method: String,
    /// Calls this window.
    runs: u64,
    /// The first call after the load, until it is flushed.
    first_ms: Option<f64>,
    /// Whether the first call has happened (it stays cold across flushes).
    had_first: bool,
    warm: [u32; BUCKETS],
    warm_runs: u64,
    max_ms: f64,
    stretch_start: Option<Instant>,
    last_end: Option<Instant>,
    sustained: Duration,
    /// Most severe thermal state seen this window (a [`thermal_code`]).
    thermal: u8,
}

impl MethodTimes {
    pub(crate) fn new(method: &str) -> Self {
        Self {
            method: method.to_string(),
            runs: 0,
            first_ms: None,
            had_first: false,
            warm: [0; BUCKETS],
            warm_runs: 0,
            max_ms: 0.0,
            stretch_start: None,
            last_end: None,
            sustained: Duration::ZERO,
            thermal: 0,
        }
    }

    pub(crate) fn record(&mut self, started: Instant, took: Duration, thermal: u8) {
        let ms = took.as_secs_f64() * 1000.0;
        self.runs = self.runs.saturating_add(1);
        if self.had_first {
            let b = &mut self.warm[bucket(ms * 1000.0)];
            *b = b.saturating_add(1);
            self.warm_runs = self.warm_runs.saturating_add(1);
            self.max_ms = self.max_ms.max(ms);
        } else {
            self.had_first = true;
            self.first_ms = Some(ms);
        }
        let end = started + took;
        match self.last_end {
            Some(last) if started.saturating_duration_since(last) < SUSTAINED_GAP => {}
            _ => self.stretch_start = Some(started),
        }
        self.last_end = Some(end);
        if let Some(s) = self.stretch_start {
            self.sustained = self.sustained.max(end.saturating_duration_since(s));
        }
        // Unknown (5) ranks below the known states: it never hides a known critical one.
        let severity = |c: u8| match c {
            0 => 0,
            5 => 1,
            c => c + 1,
        };
        if severity(thermal) > severity(self.thermal) {
            self.thermal = thermal;
        }
    }

    /// The `p` quantile of the warm calls (the middle of its bucket, at most the maximum).
    fn quantile(&self, p: f64) -> Option<f64> {
        if self.warm_runs == 0 {
            return None;
        }
        let rank = ((p * self.warm_runs as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, n) in self.warm.iter().enumerate() {
            seen += u64::from(*n);
            if seen >= rank {
                return Some(middle_ms(i).min(self.max_ms));
            }
        }
        Some(self.max_ms)
    }

    /// The summary of this window, and a fresh window (the cold call stays done).
    pub(crate) fn take(&mut self) -> Option<InferenceFields> {
        if self.runs == 0 {
            return None;
        }
        let fields = InferenceFields {
            method: Some(self.method.clone()),
            runs: Some(self.runs.min(MAX_RUNS)),
            first_ms: self.first_ms,
            p50_ms: self.quantile(0.5),
            p95_ms: self.quantile(0.95),
            max_ms: (self.warm_runs > 0).then_some(self.max_ms),
            sustained_s: Some(self.sustained.as_secs_f64()),
            thermal: thermal_of(self.thermal),
            probe: None,
        };
        let had_first = self.had_first;
        let (last_end, stretch_start) = (self.last_end, self.stretch_start);
        *self = Self::new(&self.method);
        self.had_first = had_first;
        // A stretch running across the flush goes on from where it began, so sustained use is
        // not cut short by frequent sends.
        self.last_end = last_end;
        self.stretch_start = stretch_start;
        Some(fields)
    }
}

/// The timings of one loaded model, shared with the client's registry for flushes.
pub(crate) struct RunTimes {
    /// The event every summary is sent as (model, release, variant, delegate, device fields,
    /// receipt); `at` is set at the flush.
    template: TelemetryEvent,
    methods: Vec<MethodTimes>,
    thermal: Arc<AtomicU8>,
    /// Whether runs are timed ([`crate::ClientBuilder::time_runs`]); app metrics are kept
    /// either way.
    pub(crate) timed: bool,
    /// App metrics recorded since the last flush: name, count, sum.
    metrics: Vec<(String, u64, f64)>,
}

/// App metric names one loaded model keeps between flushes (more are refused).
pub const MAX_METRIC_NAMES: usize = 32;

/// Why an app metric was not recorded.
pub(crate) fn metric_error(name: &str, value: f64) -> Option<String> {
    if let Err(why) = ferry_shared::experiment::plan::check_metric_name(name) {
        return Some(why);
    }
    (!(value.is_finite() && value.abs() <= 1e12))
        .then(|| format!("metric {name}: the value must be a finite number within +-1e12"))
}

impl RunTimes {
    /// Records one successful call of `method` that started at `started` and took `took`.
    pub(crate) fn record(&mut self, method: &str, started: Instant, took: Duration) {
        let thermal = self.thermal.load(Ordering::Relaxed);
        match self.methods.iter_mut().find(|m| m.method == method) {
            Some(m) => m.record(started, took, thermal),
            None => {
                let mut m = MethodTimes::new(method);
                m.record(started, took, thermal);
                self.methods.push(m);
            }
        }
    }

    /// Adds one value of the app metric `name` (already checked); false when the model
    /// holds [`MAX_METRIC_NAMES`] other names this window.
    pub(crate) fn record_metric(&mut self, name: &str, value: f64) -> bool {
        if let Some(m) = self.metrics.iter_mut().find(|m| m.0 == name) {
            m.1 += 1;
            m.2 += value;
            return true;
        }
        if self.metrics.len() >= MAX_METRIC_NAMES {
            return false;
        }
        self.metrics.push((name.to_string(), 1, value));
        true
    }

    /// One event per method that ran since the last flush, then one `metric` event per app
    /// metric recorded (its mean over the window), stamped `at`.
    fn take_events(&mut self, at: &str) -> Vec<TelemetryEvent> {
        let mut out: Vec<TelemetryEvent> = self
            .methods
            .iter_mut()
            .filter_map(MethodTimes::take)
            .map(|fields| {
                let mut e = self.template.clone();
                e.at = at.to_string();
                e.inference = fields;
                e
            })
            .collect();
        for (name, n, sum) in self.metrics.drain(..) {
            let mut e = self.template.clone();
            e.kind = ferry_shared::wire::telemetry::EventKind::Metric;
            e.at = at.to_string();
            e.metric = ferry_shared::wire::telemetry::MetricFields {
                name: Some(name),
                value: Some(sum / n.max(1) as f64),
            };
            out.push(e);
        }
        out
    }
}

/// The live models' timings, drained at each telemetry flush.
#[derive(Default)]
pub(crate) struct Registry {
    live: Mutex<Vec<Weak<Mutex<RunTimes>>>>,
    /// The thermal state the app last reported (a [`thermal_code`]).
    pub(crate) thermal: Arc<AtomicU8>,
}

impl Registry {
    /// Starts timing a loaded model (its runs only when `timed`) whose summaries go out as
    /// `template`.
    pub(crate) fn start(&self, template: TelemetryEvent, timed: bool) -> Arc<Mutex<RunTimes>> {
        let times = Arc::new(Mutex::new(RunTimes {
            template,
            methods: Vec::new(),
            thermal: self.thermal.clone(),
            timed,
            metrics: Vec::new(),
        }));
        let mut live = ferry_shared::sync::lock(&self.live);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&times));
        times
    }

    /// Records one value of an app metric against every live model; how many took it.
    pub(crate) fn record_metric(&self, name: &str, value: f64) -> usize {
        let live: Vec<Arc<Mutex<RunTimes>>> = {
            let live = ferry_shared::sync::lock(&self.live);
            live.iter().filter_map(Weak::upgrade).collect()
        };
        live.iter()
            .filter(|t| ferry_shared::sync::lock(t).record_metric(name, value))
            .count()
    }

    /// Every live model's summaries since the last flush, stamped `at`.
    pub(crate) fn drain(&self, at: &str) -> Vec<TelemetryEvent> {
        let live: Vec<Arc<Mutex<RunTimes>>> = {
            let mut live = ferry_shared::sync::lock(&self.live);
            live.retain(|w| w.strong_count() > 0);
            live.iter().filter_map(Weak::upgrade).collect()
        };
        live.iter()
            .flat_map(|t| ferry_shared::sync::lock(t).take_events(at))
            .collect()
    }
}

/// The summaries of a model being dropped, stamped `at`.
pub(crate) fn final_events(times: &Mutex<RunTimes>, at: &str) -> Vec<TelemetryEvent> {
    ferry_shared::sync::lock(times).take_events(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(ms: &[f64]) -> MethodTimes {
        let mut m = MethodTimes::new("forward");
        let mut t = Instant::now();
        for x in ms {
            let took = Duration::from_secs_f64(x / 1000.0);
            m.record(t, took, 1);
            t += took + Duration::from_millis(10);
        }
        m
    }

    #[test]
    fn the_first_call_is_cold_and_warm_quantiles_are_within_five_percent() {
        let mut warm: Vec<f64> = (1..=100).map(|i| 10.0 + f64::from(i) * 0.5).collect();
        let mut all = vec![250.0];
        all.extend(&warm);
        let mut m = times(&all);
        let f = m.take().expect("summary");
        assert_eq!(f.runs, Some(101));
        let first = f.first_ms.expect("first");
        assert!((first - 250.0).abs() < 0.01, "{first}");
        warm.sort_by(f64::total_cmp);
        let exact = |p: f64| warm[((p * warm.len() as f64).ceil() as usize).max(1) - 1];
        for (p, got) in [(0.5, f.p50_ms), (0.95, f.p95_ms)] {
            let got = got.expect("quantile");
            let want = exact(p);
            assert!((got - want).abs() / want <= 0.05, "p{p}: {got} vs {want}");
        }
        assert!((f.max_ms.expect("max") - 60.0).abs() < 0.01);
        assert_eq!(f.thermal, Some(Thermal::Nominal));
        // The next window has no cold call and starts empty.
        assert_eq!(m.take(), None);
        m.record(Instant::now(), Duration::from_millis(5), 0);
        let f = m.take().expect("summary");
        assert_eq!((f.runs, f.first_ms), (Some(1), None));
    }

    #[test]
    fn sustained_use_is_the_longest_stretch_without_a_two_second_gap() {
        let mut m = MethodTimes::new("forward");
        let t0 = Instant::now();
        let call = Duration::from_millis(100);
        // 30 calls a second apart (29.1 s of use), a 5 s pause, then 3 calls.
        for i in 0..30 {
            m.record(t0 + Duration::from_secs(i), call, 3);
        }
        for i in 0..3 {
            m.record(t0 + Duration::from_secs(35 + i), call, 1);
        }
        let f = m.take().expect("summary");
        let s = f.sustained_s.expect("sustained");
        assert!((s - 29.1).abs() < 0.01, "{s}");
        // The most severe state reported during the window.
        assert_eq!(f.thermal, Some(Thermal::Serious));
        // A stretch that runs across a flush keeps its start.
        m.record(t0 + Duration::from_secs(38), call, 1);
        let f = m.take().expect("summary");
        let s = f.sustained_s.expect("sustained");
        assert!((s - 3.1).abs() < 0.01, "{s}");
    }

    #[test]
    fn slow_calls_are_measured_too() {
        // Calls of 0.5 s, 2 s and 40 s: each quantile within 5% of the exact value.
        for secs in [0.5, 2.0, 40.0] {
            let ms = secs * 1000.0;
            let mut m = times(&[ms, ms, ms, ms]);
            let f = m.take().expect("summary");
            let p50 = f.p50_ms.expect("p50");
            assert!((p50 - ms).abs() / ms <= 0.05, "{secs} s: {p50}");
        }
    }
}
