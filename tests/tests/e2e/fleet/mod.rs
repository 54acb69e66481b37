//! Fleet telemetry: time buckets and compaction, native crashes, replicas on one store, field latency, selection
//! learned from the field, the Parquet event log.

mod buckets;
mod crashes;
mod durable;
mod field_latency;
pub(crate) mod field_selection;
mod replicas;
mod telemetry_parquet;
