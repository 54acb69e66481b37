//! Release tooling without a server: the `.pte` inspector against the exporter's own view of
//! each fixture, and the evaluation of variants on a held-out set through the real runtime.

mod evaluate;
mod inspector_ground_truth;
