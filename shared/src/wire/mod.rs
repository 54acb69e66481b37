//! What crosses the device path: [`protocol`] v1's versions, headers and tolerant-reader
//! helpers; the [`resolve`] request and the signed decision; the blob [`sources`] a decision lists; the [`telemetry`] events devices
//! report; the [`keys`] requests for sealed variants. A change to a v1 message is additive (`docs/protocol.md`).

pub mod keys;
pub mod protocol;
pub mod resolve;
pub mod sources;
pub mod telemetry;
