//! Fleet telemetry: time buckets and compaction, native crashes, replicas on one store, field latency, selection
//! learned from the field, the Parquet event log, the collection of unused operator sets.

mod buckets;
mod crashes;
mod durable;
mod field_latency;
pub(crate) mod field_selection;
mod operator_sets;
mod replicas;
mod telemetry_parquet;
