//! ferry's end-to-end tests: one binary, one folder per area (real server, real client, real
//! `.pte` files, real runtime, real object-store emulators). `docs/architecture.md` lists
//! which folder tests which documented feature.

mod bindings;
mod client;
mod console;
mod contract;
mod fleet;
mod release;
mod rollout;
mod server;
mod store;
