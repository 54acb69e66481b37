//! The contract: the OpenAPI document and JSON schemas against the server, the generated client,
//! recorded protocol vectors, cohort bucketing vectors, the error catalogue, and
//! `docs/architecture.md`'s table of where each feature lives (the contributors' contract).

mod api_client;
mod api_contract;
mod architecture;
mod cohort_vectors;
mod error_catalogue;
mod openapi_bundle;
mod protocol;
mod schemas;
mod vectors;
