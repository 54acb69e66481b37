//! Census: who is in the field. Devices by protocol version and SDK ([`clients`]), runtimes by
//! what they can execute ([`runtimes`]), and the operator sets those runtimes reported
//! ([`operators`]).
//!
//! May import `fleet::devices` and the layers below `fleet`.

pub mod clients;
pub mod operators;
pub mod runtimes;

use ferry_shared::wire::resolve::Cohort;

/// What one resolve tells the census, handed to
/// [`Telemetry::note_resolve`](crate::fleet::intake::aggregate::Telemetry::note_resolve) in
/// one call: the device, and each fact the request established about it.
#[derive(Debug, Clone, Copy)]
pub struct ResolveNote<'a> {
    /// The model resolved.
    pub model: &'a str,
    /// The device's install id (hashed before it is counted).
    pub install_id: &'a str,
    /// Its protocol and SDK key ([`clients::key`]), once the request was accepted.
    pub client: Option<&'a str>,
    /// Its runtime key ([`runtimes::key`]), once its operator set is known.
    pub runtime: Option<&'a str>,
    /// The cohort it was served, once answered.
    pub cohort: Option<Cohort>,
}
