//! The statistics of an experiment, over one value per device and arm.
//!
//! - **The unit is the device.** Each device contributes one number per metric (its own mean),
//!   so a device that reports a thousand events weighs what a device that reports one does.
//! - **CUPED.** Where devices have a value from before the experiment (the covariate `x`), the
//!   outcome `y` is replaced by `y − θ·(x − x̄)` with `θ = cov(x, y) / var(x)` over both arms
//!   pooled: the difference keeps its expectation (the arms were assigned at random, so `x`
//!   does not differ between them on average) and loses the part of its variance that the
//!   device's own past explains. Devices without a past keep their `y`.
//! - **An interval that stays valid while it is watched.** The difference of the arms' means
//!   is tested with the mixture sequential probability ratio test (mSPRT, normal mixture of
//!   variance `τ²` over the effect): its confidence sequence
//!   `d̂ ± sqrt(2V(V+τ²)/τ² · (ln(1/α) + ½·ln((V+τ²)/V)))`, with `V` the variance of `d̂`,
//!   covers the true difference at every look at once with probability ≥ 1 − α. A fixed-sample
//!   interval (`d̂ ± 1.96·sqrt(V)`) looked at after every batch would exclude zero by chance in
//!   far more than 5% of experiments without an effect; this one does not.
//! - `τ` is the effect of interest (5% of the control's mean by default): the test is most
//!   powerful for effects near it.

use serde::{Deserialize, Serialize};

/// The normal quantile of 80% power (one-sided).
pub const Z_POWER_80: f64 = 0.841_621_233_572_914_2;

/// Devices an arm needs before any decision is made: below it, variances are too rough for
/// the interval's guarantee.
pub const MIN_DEVICES: usize = 30;

/// One device's numbers for one metric: during the experiment (`y`) and before it (`x`, when
/// the device reported the metric then).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    /// Its value during the experiment.
    pub y: f64,
    /// Its value before the experiment.
    pub x: Option<f64>,
}

/// Mean and unbiased variance of `v` (0 variance below two values).
pub fn mean_var(v: impl Iterator<Item = f64> + Clone) -> (f64, f64, usize) {
    let n = v.clone().count();
    if n == 0 {
        return (0.0, 0.0, 0);
    }
    let mean = v.clone().sum::<f64>() / n as f64;
    let var = if n > 1 {
        v.map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    (mean, var, n)
}

/// The CUPED coefficient over the devices of both arms that have a past: `cov(x, y) /
/// var(x)`, and the pooled mean of `x` (`None` when fewer than [`MIN_DEVICES`] devices have a
/// past or their past does not vary).
pub fn cuped_theta(units: &[&[Unit]]) -> Option<(f64, f64)> {
    let with_x = || {
        units
            .iter()
            .flat_map(|u| u.iter())
            .filter_map(|u| u.x.map(|x| (x, u.y)))
    };
    let n = with_x().count();
    if n < MIN_DEVICES {
        return None;
    }
    let mx = with_x().map(|(x, _)| x).sum::<f64>() / n as f64;
    let my = with_x().map(|(_, y)| y).sum::<f64>() / n as f64;
    let sxx: f64 = with_x().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = with_x().map(|(x, y)| (x - mx) * (y - my)).sum();
    (sxx > 0.0 && sxx.is_finite() && sxy.is_finite()).then(|| (sxy / sxx, mx))
}

/// The half width of the always-valid interval for an estimate of variance `v`, mixture
/// variance `tau2` and error rate `alpha`.
pub fn half_width(v: f64, tau2: f64, alpha: f64) -> f64 {
    if v <= 0.0 || tau2 <= 0.0 {
        return if v <= 0.0 { 0.0 } else { f64::INFINITY };
    }
    let bound = (1.0 / alpha).ln() + 0.5 * ((v + tau2) / v).ln();
    (2.0 * v * (v + tau2) / tau2 * bound).sqrt()
}

/// What the two arms show for one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The control's mean per device, CUPED-adjusted where CUPED applies (NaN, null on the
    /// wire, without devices).
    pub control: f64,
    /// The treatment's mean per device, likewise.
    pub treatment: f64,
    /// Treatment minus control (CUPED-adjusted where a past was used).
    pub difference: f64,
    /// The always-valid interval of the difference, `[low, high]`.
    pub interval: [f64; 2],
    /// Devices in each arm: `[control, treatment]`.
    pub devices: [usize; 2],
    /// Whether CUPED was applied.
    pub cuped: bool,
    /// The share of the difference's variance CUPED took away (0 without it).
    pub variance_reduction: f64,
    /// The effect of interest in the metric's unit (the mixture's `τ`).
    pub effect: f64,
    /// Devices each arm needs for 80% power at that effect (`None` when the data cannot say).
    pub devices_needed: Option<u64>,
    /// Whether both arms have the devices a decision needs ([`MIN_DEVICES`]).
    pub enough: bool,
}

/// Devices from which winsorization applies (below, every device counts as it is).
pub const WINSORIZE_FROM: usize = 20;

/// The bounds devices' values are clamped to: the pooled 1st and 99th percentiles (nearest
/// rank), and at least the most extreme device at each end, so that one device (a broken
/// client, or an attacker with a real receipt) cannot carry a mean away. `None` below
/// [`WINSORIZE_FROM`] values.
pub fn winsor_bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.len() < WINSORIZE_FROM {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let k = (v.len() / 100).max(1);
    Some((v[k], v[v.len() - 1 - k]))
}

fn clamp_units(units: &[Unit], y: Option<(f64, f64)>, x: Option<(f64, f64)>) -> Vec<Unit> {
    let clamp = |v: f64, b: Option<(f64, f64)>| b.map_or(v, |(lo, hi)| v.clamp(lo, hi));
    units
        .iter()
        .map(|u| Unit {
            y: clamp(u.y, y),
            x: u.x.map(|x0| clamp(x0, x)),
        })
        .collect()
}

/// Compares `control` and `treatment` at error rate `alpha`, the effect of interest being
/// `relative_effect` of the control's mean (of the pooled spread when the mean is zero).
/// Devices' values (and histories) are winsorized over both arms pooled ([`winsor_bounds`]);
/// with CUPED, `control` and `treatment` are the arms' adjusted means, so that `difference`
/// is their difference.
pub fn compare(
    control: &[Unit],
    treatment: &[Unit],
    relative_effect: f64,
    alpha: f64,
) -> Comparison {
    let pooled = || control.iter().chain(treatment);
    let y_bounds = winsor_bounds(pooled().map(|u| u.y));
    let x_bounds = winsor_bounds(pooled().filter_map(|u| u.x));
    let (control, treatment) = (
        clamp_units(control, y_bounds, x_bounds),
        clamp_units(treatment, y_bounds, x_bounds),
    );
    let (control, treatment) = (control.as_slice(), treatment.as_slice());
    let (mc, _, nc) = mean_var(control.iter().map(|u| u.y));
    let (_, _, nt) = mean_var(treatment.iter().map(|u| u.y));
    let raw_v = variance_of_difference(control, treatment, None);
    let theta = cuped_theta(&[control, treatment]);
    let v = variance_of_difference(control, treatment, theta);
    let (adj_c, _, _) = mean_var(control.iter().map(|u| adjusted(u, theta)));
    let (adj_t, _, _) = mean_var(treatment.iter().map(|u| adjusted(u, theta)));
    let difference = adj_t - adj_c;
    let (_, pooled_var, _) = mean_var(control.iter().chain(treatment).map(|u| u.y));
    let scale = if mc.abs() > 0.0 {
        mc.abs()
    } else {
        pooled_var.sqrt()
    };
    let effect = relative_effect * scale;
    let tau2 = effect * effect;
    let h = half_width(v, tau2, alpha);
    let per_device = v * (nc.max(1) * nt.max(1)) as f64 / (nc + nt).max(1) as f64;
    // An arm without devices has no mean (null on the wire), not a mean of zero.
    let (mc, mt) = (
        if nc == 0 { f64::NAN } else { adj_c },
        if nt == 0 { f64::NAN } else { adj_t },
    );
    let difference = if nc == 0 || nt == 0 {
        f64::NAN
    } else {
        difference
    };
    Comparison {
        control: mc,
        treatment: mt,
        difference,
        interval: [difference - h, difference + h],
        devices: [nc, nt],
        cuped: theta.is_some(),
        variance_reduction: if raw_v > 0.0 && theta.is_some() {
            (1.0 - v / raw_v).max(0.0)
        } else {
            0.0
        },
        effect,
        devices_needed: devices_needed(per_device, effect, alpha),
        enough: nc >= MIN_DEVICES && nt >= MIN_DEVICES,
    }
}

fn adjusted(u: &Unit, theta: Option<(f64, f64)>) -> f64 {
    match (theta, u.x) {
        (Some((t, mx)), Some(x)) => u.y - t * (x - mx),
        _ => u.y,
    }
}

fn variance_of_difference(c: &[Unit], t: &[Unit], theta: Option<(f64, f64)>) -> f64 {
    let (_, vc, nc) = mean_var(c.iter().map(|u| adjusted(u, theta)));
    let (_, vt, nt) = mean_var(t.iter().map(|u| adjusted(u, theta)));
    if nc == 0 || nt == 0 {
        return f64::INFINITY;
    }
    vc / nc as f64 + vt / nt as f64
}

/// The devices each arm needs so that a true difference of `effect` is called with 80% power
/// by the always-valid interval at error rate `alpha`, when one device's value varies with
/// variance `var_per_device` in each arm (after CUPED, where it applies). `None` when the
/// variance or the effect is not a positive number.
pub fn devices_needed(var_per_device: f64, effect: f64, alpha: f64) -> Option<u64> {
    if !(var_per_device.is_finite() && var_per_device > 0.0 && effect.is_finite() && effect > 0.0) {
        return None;
    }
    let tau2 = effect * effect;
    let reached = |n: u64| {
        let v = 2.0 * var_per_device / n as f64;
        half_width(v, tau2, alpha) + Z_POWER_80 * v.sqrt() <= effect
    };
    let (mut lo, mut hi) = (1u64, 2u64);
    while !reached(hi) {
        lo = hi;
        hi = hi.checked_mul(2)?;
        if hi > 1 << 40 {
            return None;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if reached(mid) { hi = mid } else { lo = mid }
    }
    Some(hi.max(MIN_DEVICES as u64))
}
