//! Rollouts: plans through every transition, health-gated ramps, safety rules, telemetry that halts
//! or denies.

pub(crate) mod experiment;
mod explain;
mod lifecycle;
pub(crate) mod plan;
mod ramp;
mod safety;
mod telemetry;
