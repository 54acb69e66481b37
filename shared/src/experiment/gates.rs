//! The always-valid test for a rollout's rate gates (`Thresholds::sequential`): a staged rate
//! halts a rollout only once its always-valid 95% interval lies above the limit, so that
//! looking at every batch of telemetry does not halt on noise.
//!
//! Rates are smoothed (`(x + 1) / (n + 2)`) for their variance, so that a handful of loads that
//! all failed is not taken for certainty; the mixture's `τ` is the limit itself (the test is
//! most powerful for rates about twice the limit).

use crate::experiment::stats::half_width;

/// The error rate of the gates' intervals.
pub const GATE_ALPHA: f64 = 0.05;

fn smoothed_var(x: u64, n: u64) -> f64 {
    let p = (x.min(n) as f64 + 1.0) / (n as f64 + 2.0);
    p * (1.0 - p) / n.max(1) as f64
}

/// True when `x` of `n` is a rate above `limit` beyond chance, however often it was looked at.
pub fn rate_above(x: u64, n: u64, limit: f64) -> bool {
    if n == 0 {
        return false;
    }
    let p = x.min(n) as f64 / n as f64;
    let tau = limit.max(0.01);
    p - half_width(smoothed_var(x, n), tau * tau, GATE_ALPHA) > limit
}

/// True when the staged rate `xs` of `ns` is above `k` times the baseline's `xb` of `nb` beyond
/// chance, however often it was looked at.
pub fn rate_above_multiple(xs: u64, ns: u64, xb: u64, nb: u64, k: f64) -> bool {
    if ns == 0 || nb == 0 {
        return false;
    }
    let (s, b) = (xs.min(ns) as f64 / ns as f64, xb.min(nb) as f64 / nb as f64);
    let v = smoothed_var(xs, ns) + k * k * smoothed_var(xb, nb);
    let tau = (k * b).max(0.01);
    s - k * b - half_width(v, tau * tau, GATE_ALPHA) > 0.0
}
