//! The HTTP API: thin handlers that parse, authorize, call the domain modules and render.
//!
//! | route | who | module |
//! |---|---|---|
//! | `POST /v1/resolve` | device | [`device`] |
//! | `GET /v1/releases/sha256/{hex}` | device | [`device`] (signed release manifests) |
//! | `GET /v1/keys`, `/v1/keyring` | device | [`device`] |
//! | `GET, HEAD /v1/blobs/sha256/{hex}` | device, mirror | [`blobs`] |
//! | `PUT /v1/admin/blobs/sha256/{hex}` | `publish` | [`blobs`] |
//! | `POST /v1/admin/models/{model}/releases` | `publish` | [`admin`] |
//! | `GET`, `POST /v1/admin/models/{model}/revocations` | `read`, `publish` | [`admin`] |
//! | `GET /v1/admin/models[/{model}[/releases/{version}]]` | `read` | [`admin`] |
//! | `GET`, `POST /v1/admin/keyring` | `read`, `publish` | [`admin`] (newer keyrings without a restart) |
//! | `POST /v1/telemetry` | device | [`fleet`] |
//! | `POST /v1/keys/release` | device (a receipt) | [`keys`] (sealed variants' keys) |
//! | `PUT`, `DELETE .../releases/{version}/seal-stop`, `GET .../key-releases` | `rollout`, `read` | [`seal_admin`] |
//! | `GET, POST /v1/admin/models/{model}/rollout` | `read` / `rollout` | [`fleet`] |
//! | `GET /v1/admin/models/{model}/health[/series]` | `read` | [`fleet`] |
//! | `GET, POST /v1/admin/models/{model}/deny` | `read` / `rollout` | [`fleet`] |
//! | `GET /healthz`, `/readyz`, `/metrics` | ops | [`ops`] |
//! | `GET /ui`, `/ui/{file}` | operators' browsers (static; the page asks for a token) | [`ui`] |
//!
//! Every failure is an [`error::ApiError`] rendered as `{code, message, request_id}`; the
//! domain modules' errors become one in [`error`] only. [`router`] wires the routes and the
//! middleware (request ids, access log, metrics, protocol headers); [`state::AppState`] is
//! what every handler shares.
//!
//! May import every module below it (`release`, `fleet`, `keyring`, `snapshot`, `storage`,
//! `tokens`, `keys`, `metrics`); never `app` or `cli`.

pub mod admin;
pub mod auth;
pub mod blobs;
pub mod connections;
pub mod device;
pub mod error;
pub mod experiments;
pub mod extract;
pub mod fleet;
pub mod forwarded;
pub mod health;
pub mod ingest_pool;
pub mod keys;
pub mod limits;
pub mod ops;
pub mod revocations;
pub mod router;
pub mod seal_admin;
pub mod state;
pub mod ui;

pub use state::AppState;
