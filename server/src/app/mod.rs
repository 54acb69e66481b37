//! The application: the state every handler shares, the router and its middleware, start-up
//! (keys, store, catalog, TLS, listener, background refresh), configuration, metrics and the
//! built-in demo model.

pub mod config;
pub mod connections;
pub mod demo;
pub mod keyring;
pub mod keys;
pub mod metrics;
pub mod protocol_metrics;
pub mod router;
pub mod sealed;
pub mod startup;
pub(crate) mod state;

pub use state::AppState;
