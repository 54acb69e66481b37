//! Plans: what operators and the automatic actions decided, per model, as revision logs in
//! the store (each change a new create-if-absent revision, so replicas never overwrite each
//! other). The [`rollout`] plan and its history, the [`experiment`] plans, the [`deny`] list,
//! and the signed [`revocation`] lists.
//!
//! Not telemetry: plans are model state that resolve reads through `crate::snapshot`. May
//! import `storage`, `snapshot` and `ferry-shared`.

pub mod deny;
pub mod experiment;
pub mod revocation;
pub mod rollout;
