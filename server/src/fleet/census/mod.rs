//! Census: who is in the field. Devices by protocol version and SDK ([`clients`]), runtimes by
//! what they can execute ([`runtimes`]), and the operator sets those runtimes reported
//! ([`operators`]).
//!
//! May import `fleet::counts::devices` and the layers below `fleet`.

pub mod clients;
pub mod operators;
pub mod runtimes;
