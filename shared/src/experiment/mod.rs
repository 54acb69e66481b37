//! Experiments: two arms (releases, or variants of one release) compared on the same kind of
//! devices, with statistics that stay valid while an operator watches them.
//!
//! - [`change`]: starting and stopping one, as pure functions;
//! - [`plan`]: the plan, its arms and metrics, and the sticky assignment of a device to an
//!   arm by a hash of the experiment's own salt, the model and the install id;
//! - [`names`]: ferry's own metrics;
//! - [`metrics`]: one device's events folded per period (before the experiment, in its arm)
//!   and the one number per metric it contributes;
//! - [`stats`]: CUPED and the always-valid interval (mSPRT) over one value per device;
//! - [`gates`]: the same test for a rollout's rate gates;
//! - [`analysis`]: per metric and per device class, the decision an on-call engineer reads.
//!
//! Pure: no clock, no I/O. The server gathers the devices' records from the raw event log
//! and stores the plans.

pub mod analysis;
pub mod change;
pub mod gates;
pub mod metrics;
pub mod names;
pub mod plan;
pub mod stats;

#[cfg(test)]
mod simulate;
#[cfg(test)]
mod tests;

pub use analysis::{MetricResult, Verdict, analyse};
pub use plan::{Arm, ArmName, ArmTag, ExperimentPlan, ExperimentState, MetricSpec};
