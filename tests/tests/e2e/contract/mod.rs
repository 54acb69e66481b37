//! The contract: the OpenAPI document and JSON schemas against the server, the generated client,
//! recorded protocol vectors, the error catalogue.

mod api_client;
mod api_contract;
mod architecture;
mod bucket_vectors;
mod error_catalogue;
mod openapi_bundle;
mod protocol;
mod schemas;
mod vectors;
