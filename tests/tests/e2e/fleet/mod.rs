//! Fleet telemetry: time buckets and compaction, replicas on one store, field latency, selection
//! learned from the field, the Parquet event log.

mod buckets;
mod field_latency;
mod field_selection;
mod replicas;
mod telemetry_parquet;
