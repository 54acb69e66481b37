//! Intake: what arrives from devices. Validation of each event ([`ingest`]), rate limits per
//! address and install ([`limits`]), the allowance of new devices per address in the evidence
//! ([`evidence`]), telemetry receipts ([`receipt`]), and [`aggregate`]'s
//! `Telemetry`: intake's own state (the per-device cap, the limiters), counting accepted events
//! into the persist outbox, and the fleet-wide views over the outbox and the store.
//!
//! May import `fleet::persist` (the outbox, what was seen, the bucket levels, the raw event
//! type), `fleet::counts`, `fleet::census`, `fleet::devices`, `fleet::config` and the layers
//! below `fleet`.

pub mod aggregate;
pub mod evidence;
pub mod ingest;
pub mod limits;
pub mod receipt;
