//! `ferry-server`: the HTTP server that hosts signed `.pte` variants, and the `ferry` CLI.
//!
//! Layers, from the bottom up. A module imports only modules on its own row or an earlier one (no
//! `crate::app` below `app`, no `AppState` outside `api` and `app`, no `ApiError` outside
//! `api`). Where to look: device endpoints in `api/device.rs`, admin endpoints in
//! `api/admin.rs` and `api/fleet.rs`, telemetry in `fleet/`, model plans in `plans/`, storage in `storage/`, the CLI in
//! `cli/`; `docs/architecture.md` draws the whole picture.
//!
//! | layer | module | owns | may import |
//! |---|---|---|---|
//! | bottom | [`storage`] | the object-store key layout ([`storage::StorageKey`]), revision logs, the catalog, `[storage]` config | `ferry-shared` |
//! | bottom | [`tokens`] | admin tokens and their scopes, `[[tokens]]` config | `ferry-shared` |
//! | bottom | [`keys`] | the server's key files: generate, seal, load, rotate | `ferry-shared`, `ferry-fs` |
//! | bottom | [`metrics`] | the Prometheus registry and its series | `ferry-shared` |
//! | views | [`snapshot`] | what resolve reads without touching storage: catalog, rollouts, deny lists, revocations, keys, each a [`snapshot::Snapshot`] | bottom |
//! | keyring | [`keyring`] | newer keyring versions: adopt from the store, take from an operator, audit | views, bottom |
//! | plans | [`plans`] | each model's rollout plan, deny list and revocation lists as revision logs | views, bottom |
//! | fleet | [`fleet`] | telemetry: intake, counts, persistence, census, and the automatic actions (halts, ramps, learned deny entries); jobs take a [`fleet::Fleet`] handle | plans, keyring, views, bottom |
//! | release | [`release`] | release manifests: build, sign, admit, upload blobs; evaluation; update sizes | fleet, plans, keyring, views, bottom |
//! | resolve | [`resolve`] | what a device gets: the pure decision ([`resolve::decide`]), the releases it may get, the signed answers kept for reuse, the census notes of a resolve | fleet, plans, views, bottom |
//! | api | [`api`] | [`api::AppState`], the router and middleware, the HTTP handlers, the one mapping from domain errors to HTTP, `[limits]` config | every row before it |
//! | app | [`app`] | config assembly, start-up, background loops, the demo | api and every row before it |
//! | cli | [`cli`] | the `ferry` command line, one module per command group | everything |

pub mod api;
pub mod app;
pub mod cli;
pub mod fleet;
pub mod keyring;
pub mod keys;
pub mod metrics;
pub mod mirror;
pub mod plans;
pub mod release;
pub mod resolve;
pub mod snapshot;
pub mod storage;
pub mod tokens;
