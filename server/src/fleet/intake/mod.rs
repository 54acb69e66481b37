//! Intake: what arrives from devices. Validation of each event and the `[telemetry]` config
//! ([`ingest`]), rate limits per address and install ([`limits`]), telemetry receipts
//! ([`receipt`]), and this replica's counts of what it accepted ([`aggregate`]).
//!
//! May import `fleet::counts`, `fleet::census`, `fleet::persist::events` (the raw event type)
//! and the layers below `fleet`.

pub mod aggregate;
pub mod ingest;
pub mod limits;
pub mod receipt;
